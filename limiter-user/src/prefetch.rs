//! Fetching memory into the cache ahead of its use.

/// Asks the CPU to bring the cache line holding `at` into its caches, without waiting for
/// it; a no-op on CPUs this has no instruction for.
#[inline(always)]
pub fn prefetch(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults and reads nothing into the program,
    // whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(at.cast(), std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
