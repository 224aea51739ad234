//! Compiles the C programs into one eBPF object with BTF, embedded by `src/lib.rs`.

use std::{env, path::PathBuf, process::Command};

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap()).join("limiter.bpf.o");
    let source = manifest.join("src/bpf/limiter.bpf.c");
    println!("cargo:rerun-if-changed=src/bpf");
    println!("cargo:rerun-if-changed=include");
    println!("cargo:rerun-if-env-changed=CLANG");

    // <linux/errno.h> needs <asm/...>, which Debian keeps under the multiarch directory.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let status = Command::new(&clang)
        .args(["-g", "-O2", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror"])
        .arg(format!("-I{multiarch}"))
        .arg(format!("-I{}", manifest.join("include").display()))
        .arg("-c")
        .arg(&source)
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run `{clang}` ({e}): install clang and libbpf-dev (apt-get install clang libbpf-dev)")
        });
    assert!(
        status.success(),
        "clang failed to compile {}",
        source.display()
    );
}
