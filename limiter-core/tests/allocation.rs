//! Cost: no heap allocation per sample or per update once a controller exists, and the
//! per-destination state size quoted in docs/control.md.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use limiter_core::{Algorithm, ControlConfig, Controller, DestinationController, Outcome};

struct Counting;

thread_local! {
    /// Per thread, so tests running in parallel do not count each other's allocations.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const MS: u64 = 1_000_000;

/// Ten simulated minutes: samples of every size, errors, timeouts, sheds, windows closing
/// full, thin and empty.
fn exercise(c: &mut DestinationController, from: u64) -> u64 {
    let mut now = from;
    for tick in 0..6_000u64 {
        now += 100 * MS;
        let per_tick = if (tick / 600) % 2 == 0 { 50 } else { tick % 3 };
        for i in 0..per_tick {
            let latency = (50 + (tick * 7 + i * 13) % 400) * MS;
            c.on_sample(now, latency, (tick % 40) as u32);
        }
        match tick % 97 {
            0 => c.on_outcome(now, Outcome::Error),
            1 => c.on_outcome(now, Outcome::Timeout),
            2 => c.on_outcome(now, Outcome::Shed),
            _ => {}
        }
        c.update(now);
    }
    now
}

#[test]
fn samples_and_updates_never_allocate() {
    for algorithm in Algorithm::ALL {
        let mut c = DestinationController::new(&ControlConfig::new(algorithm), 0);
        let warm = exercise(&mut c, 0);
        let before = ALLOCATIONS.with(Cell::get);
        exercise(&mut c, warm);
        let allocated = ALLOCATIONS.with(Cell::get) - before;
        assert_eq!(allocated, 0, "{algorithm}");
    }
}

#[test]
fn state_per_destination_is_a_few_kilobytes() {
    let size = std::mem::size_of::<DestinationController>();
    println!("DestinationController: {size} bytes");
    assert!(size <= 4 * 1024, "{size} bytes");
}
