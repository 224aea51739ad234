//! `cargo xtask <task>`: what cargo alone cannot do.

mod artifacts;
mod bench;
mod client;
mod dist;
mod lab;
mod vm;

use std::{
    path::Path,
    process::{Command, ExitCode},
};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Formatting, lints, and every test, kernel tests included (their binaries run
    /// through `sudo -E` when you are not root); with `--kernel`, the kernel tests only, in a
    /// VM booting that kernel.
    Test(vm::Options),
    /// What the limiter costs, side by side with no limiter and with an egress proxy
    /// (root; writes docs/benchmarks.md).
    Bench(bench::Options),
    /// The Debian package (needs cargo-deb): the stripped agent, the systemd unit, the
    /// example configuration as a conffile, completions and man pages.
    Dist(dist::Options),
    /// The limiter against nginx and pgbench on real traffic, with an upstream that slows
    /// down and recovers (root; writes docs/lab.md).
    Lab(lab::Options),
    /// A load generator the benchmarks start inside the limited cgroup.
    #[command(hide = true)]
    BenchClient(client::Options),
}

fn main() -> ExitCode {
    let result = match Cli::parse().task {
        Task::Test(options) if options.kernels.is_empty() => test(),
        Task::Test(options) => vm::test(&options),
        Task::Bench(options) => bench::run(options),
        Task::Dist(options) => dist::run_dist(options),
        Task::Lab(options) => lab::run(options),
        Task::BenchClient(options) => client::run(options),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
}

fn cargo(args: &[&str]) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(args);
    cmd
}

fn run(mut cmd: Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

fn test() -> Result<()> {
    run(cargo(&["fmt", "--all", "--check"]))?;
    run(cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    let mut tests = cargo(&["test", "--workspace"]);
    // Kernel tests need root: build as the user, run the test binaries as root.
    if !is_root() {
        tests.env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", "sudo -E");
        tests.env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER", "sudo -E");
    }
    run(tests)
}

fn is_root() -> bool {
    procfs::process::Process::myself()
        .and_then(|p| p.status())
        .is_ok_and(|s| s.euid == 0)
}
