//! `cargo xtask test --kernel VERSION`: the kernel test suite on another kernel, booted in
//! a VM that shares the host's file system, so that the binaries built here run there.

mod boot;
mod guest;
mod kernel;

use std::{path::PathBuf, time::Duration};

use anyhow::{bail, Context, Result};

use crate::artifacts::{self, Executable};
use boot::Guest;

/// The packages whose tests need the real kernel.
const KERNEL_TEST_PACKAGES: [&str; 2] = ["limiter-integration-tests", "xtask"];

#[derive(clap::Args)]
pub struct Options {
    /// Run the kernel tests in a VM booting this kernel instead: a Debian kernel package
    /// version (6.1.0-57-amd64, 6.12.117+deb12-amd64) or a path to a kernel image. May be
    /// given more than once; the kernels run one after another.
    #[arg(long = "kernel", value_name = "VERSION")]
    pub kernels: Vec<String>,
    /// Seconds a VM may run before it is taken as hung and stopped.
    #[arg(long, default_value_t = 1800, value_name = "SECONDS")]
    pub vm_timeout: u64,
}

pub fn test(options: &Options) -> Result<()> {
    let harnesses = test_harnesses()?;
    let mut failed = Vec::new();
    for spec in &options.kernels {
        if let Err(e) = test_on(spec, &harnesses, options) {
            eprintln!("Error: kernel {spec}: {e:?}");
            failed.push(spec.as_str());
        }
    }
    if !failed.is_empty() {
        bail!("the kernel tests failed on {}", failed.join(", "));
    }
    Ok(())
}

fn test_on(spec: &str, harnesses: &[Executable], options: &Options) -> Result<()> {
    let image = kernel::image(spec)?;
    let dir = work_dir(spec)?;
    let script = dir.join("run-tests.sh");
    std::fs::write(&script, guest::script(harnesses))
        .with_context(|| format!("cannot write {}", script.display()))?;
    println!("=== kernel tests on {}", image.display());
    Guest {
        image: &image,
        systemd: false,
        timeout: Duration::from_secs(options.vm_timeout),
    }
    .run(&format!("sh {}", script.display()), &dir.join("tests.log"))
}

/// Builds the kernel tests here, as the host's user; the VM only runs them.
fn test_harnesses() -> Result<Vec<Executable>> {
    if std::env::var_os("LIMITER_SKIP_KERNEL_TESTS").is_some_and(|v| v == "1") {
        bail!("LIMITER_SKIP_KERNEL_TESTS=1 builds the kernel tests as ignored: unset it to run them in a VM");
    }
    let mut args = vec!["test", "--no-run"];
    for package in KERNEL_TEST_PACKAGES {
        args.extend(["--package", package]);
    }
    let harnesses: Vec<Executable> = artifacts::build(&args)?
        .into_iter()
        .filter(|e| e.test)
        .collect();
    if harnesses.is_empty() {
        bail!("cargo built no test harness");
    }
    Ok(harnesses)
}

/// Where the script and the logs of one kernel go, under the target directory.
fn work_dir(spec: &str) -> Result<PathBuf> {
    let name: String = spec
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".+-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir = crate::workspace_root().join("target/vm/runs").join(name);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}
