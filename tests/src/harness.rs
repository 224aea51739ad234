//! What every kernel test shares: the root check, the bound on waiting, where the binaries are.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

/// A binary of this package: cargo puts them one level above the test executables.
pub(crate) fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().join(name)
}

/// Name of the variable that lets a runner without root opt out of the kernel tests.
pub const SKIP_VAR: &str = "LIMITER_SKIP_KERNEL_TESTS";

/// Raises the bound on waiting (seconds) where everything is slower, as in an emulated VM.
pub const HANG_GUARD_VAR: &str = "LIMITER_TEST_HANG_GUARD_SECS";

/// Bound on waiting for something that must happen; it guards against hangs only.
pub fn hang_guard() -> Duration {
    let secs = std::env::var(HANG_GUARD_VAR)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{HANG_GUARD_VAR}={v}: give a number of seconds"))
        })
        .unwrap_or(150);
    Duration::from_secs(secs)
}

/// Called first by every `#[kernel_test]`: panics with the fix when the test cannot run.
pub fn require_root() {
    if std::env::var_os(SKIP_VAR).is_some_and(|v| v == "1") {
        panic!("{SKIP_VAR}=1 was not set when the tests were built, so they were not marked ignored: rebuild with it set");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!("kernel tests need root: run them with sudo, or build and run them with {SKIP_VAR}=1 to skip them");
    }
}

/// Polls `done` until it holds; panics naming `what` if it never does.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < hang_guard(), "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
