//! Turns the kernel-test opt-out into a cfg, so that `#[kernel_test]` can mark the tests
//! ignored (libtest decides that at compile time only).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(limiter_kernel_tests_skipped)");
    println!("cargo::rerun-if-env-changed=LIMITER_SKIP_KERNEL_TESTS");
    if std::env::var_os("LIMITER_SKIP_KERNEL_TESTS").is_some_and(|v| v == "1") {
        println!("cargo::rustc-cfg=limiter_kernel_tests_skipped");
    }
}
