//! `cargo xtask test --kernel VERSION`: the kernel test suite on another kernel, booted in
//! a VM that shares the host's file system, so that the binaries built here run there.

mod boot;
mod guest;
mod kernel;
mod systemd;

use std::{path::PathBuf, time::Duration};

use anyhow::{anyhow, bail, Context, Result};

use crate::artifacts::{self, Executable};
use boot::Guest;

/// The package of the kernel tests. xtask's own smoke runs (bench, lab) and the package
/// build exercise the developer tools, not the kernel, and run on the host only.
const KERNEL_TEST_PACKAGES: [&str; 1] = ["limiter-integration-tests"];

#[derive(clap::Args)]
pub struct Options {
    /// Run the kernel tests in a VM booting this kernel instead: a Debian kernel package
    /// version (6.1.0-57-amd64, 6.12.117+deb12-amd64) or a path to a kernel image. May be
    /// given more than once; the kernels run one after another.
    #[arg(long = "kernel", value_name = "VERSION")]
    pub kernels: Vec<String>,
    /// Also boot each kernel with systemd as PID 1 and check the unit of dist/ there.
    #[arg(long, requires = "kernels")]
    pub systemd_unit: bool,
    /// Seconds a VM may run before it is taken as hung and stopped.
    #[arg(long, default_value_t = 2400, value_name = "SECONDS")]
    pub vm_timeout: u64,
}

pub fn test(options: &Options) -> Result<()> {
    let built = Built::new()?;
    let mut failed = Vec::new();
    for spec in &options.kernels {
        if let Err(e) = test_on(spec, &built, options) {
            eprintln!("Error: kernel {spec}: {e:#}");
            failed.push(spec.as_str());
        }
    }
    if !failed.is_empty() {
        bail!("the kernel tests failed on {}", failed.join(", "));
    }
    Ok(())
}

/// The kernel test suite in one boot, and the systemd unit under systemd in another.
fn test_on(spec: &str, built: &Built, options: &Options) -> Result<()> {
    let image = kernel::image(spec)?;
    let dir = work_dir(spec)?;
    let timeout = Duration::from_secs(options.vm_timeout);
    let run = |name: &str, systemd: bool, script: String| -> Result<()> {
        let path = dir.join(format!("{name}.sh"));
        std::fs::write(&path, script)
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("=== {name} on {}", image.display());
        let log = dir.join(format!("{name}.log"));
        Guest {
            image: &image,
            systemd,
            timeout,
        }
        .run(&format!("sh {}", path.display()), &log)
        .map_err(|e| {
            // The digest last: a CI log is often read from its tail.
            let digest: String = std::fs::read_to_string(&log)
                .map(|text| guest::digest(&text))
                .unwrap_or_default()
                .iter()
                .map(|l| format!("\n  {l}"))
                .collect();
            anyhow!("{name} failed: {e:#}{digest}")
        })
    };
    let tests = run("kernel-tests", false, guest::script(&built.harnesses));
    if !options.systemd_unit {
        return tests;
    }
    let unit = run(
        "systemd-unit",
        true,
        systemd::script(&built.agent, &built.probe, crate::workspace_root()),
    );
    match (tests, unit) {
        (Ok(()), unit) => unit,
        (Err(tests), Ok(())) => Err(tests),
        (Err(tests), Err(unit)) => Err(anyhow!("{tests:#}; and {unit:#}")),
    }
}

/// What the VM runs, built here as the host's user.
struct Built {
    harnesses: Vec<Executable>,
    agent: PathBuf,
    probe: PathBuf,
}

impl Built {
    fn new() -> Result<Self> {
        if std::env::var_os("LIMITER_SKIP_KERNEL_TESTS").is_some_and(|v| v == "1") {
            bail!("LIMITER_SKIP_KERNEL_TESTS=1 builds the kernel tests as ignored: unset it to run them in a VM");
        }
        let mut args = vec!["test", "--no-run"];
        for package in KERNEL_TEST_PACKAGES {
            args.extend(["--package", package]);
        }
        let (harnesses, binaries): (Vec<_>, Vec<_>) =
            artifacts::build(&args)?.into_iter().partition(|e| e.test);
        if harnesses.is_empty() {
            bail!("cargo built no test harness");
        }
        let binary = |name: &str| -> Result<PathBuf> {
            binaries
                .iter()
                .find(|e| e.name == name)
                .map(|e| e.path.clone())
                .with_context(|| format!("cargo built no {name}"))
        };
        Ok(Built {
            agent: binary("limiter-agent-under-test")?,
            probe: binary("limiter-probe")?,
            harnesses,
        })
    }
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
