//! Turns the kernel-test opt-out into a cfg, so that `#[kernel_test]` can mark the tests
//! ignored (libtest decides that at compile time only), and builds the Go peer of the
//! protocol matrix with Debian's golang, if it is installed: the tests that use it say so
//! when it was not.

use std::{path::PathBuf, process::Command};

fn main() {
    println!("cargo::rustc-check-cfg=cfg(limiter_kernel_tests_skipped)");
    println!("cargo::rerun-if-env-changed=LIMITER_SKIP_KERNEL_TESTS");
    if std::env::var_os("LIMITER_SKIP_KERNEL_TESTS").is_some_and(|v| v == "1") {
        println!("cargo::rustc-cfg=limiter_kernel_tests_skipped");
    }
    println!("cargo::rerun-if-changed=peers");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let peer = out.join("tlspeer");
    // Go's caches live in the build directory: builds run as any user, with any HOME.
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&peer)
        .arg("peers/tlspeer.go")
        .env("GOCACHE", out.join("gocache"))
        .env("GOPATH", out.join("gopath"))
        .env("GO111MODULE", "off")
        .status()
        .is_ok_and(|s| s.success());
    let path = if built {
        peer.display().to_string()
    } else {
        String::new()
    };
    println!("cargo::rustc-env=LIMITER_TLSPEER={path}");
}
