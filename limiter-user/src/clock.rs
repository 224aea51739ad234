//! The kernel's clock: `bpf_ktime_get_ns` is CLOCK_MONOTONIC.

use nix::time::{clock_gettime, ClockId};

pub fn monotonic_ns() -> u64 {
    let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always available");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}
