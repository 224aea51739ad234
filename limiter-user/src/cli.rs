//! The command line. `run` is the default subcommand.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use limiter_core::config::Algorithm;

use crate::config::Mode;

#[derive(Debug, Parser)]
#[command(
    name = "limiter-user",
    version,
    about = "Adaptive outbound concurrency limits for a cgroup, enforced with eBPF"
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Attach to a cgroup and enforce limits until SIGTERM/SIGINT (the default).
    Run(RunArgs),
    /// Show every destination's limit, in-flight count and counters from the pinned maps.
    Status(StatusArgs),
    /// Remove a left-over attachment and its pins.
    Detach(DetachArgs),
    /// Run a control algorithm against a simulated upstream (no kernel, no privileges).
    Simulate(limiter_sim::SimulateArgs),
}

#[derive(Debug, Args, Default)]
pub struct RunArgs {
    /// The cgroup v2 directory whose processes are protected.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// TOML configuration file; flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    #[arg(long, value_parser = parse_algorithm)]
    pub algorithm: Option<Algorithm>,
    /// The limit of the `fixed` algorithm.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub initial_limit: Option<u32>,
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub min_limit: Option<u32>,
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_limit: Option<u32>,
    /// Seconds without a heartbeat from this agent after which the kernel admits everything.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub heartbeat_timeout: Option<u64>,
    /// Size of the kernel's destination table (when it is full, connects to new
    /// destinations are admitted untracked, and counted).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_destinations: Option<u32>,
    /// Size of the kernel's latency-signal ring buffer in KiB (a power of two, at least 4).
    #[arg(long, value_name = "KIB")]
    pub signal_buffer_kib: Option<u32>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9464); off by default.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// On SIGTERM/SIGINT, leave the programs attached and pinned so that enforcement
    /// continues while the agent restarts; the next agent takes them over.
    #[arg(long)]
    pub keep_attached: bool,
    /// Pin directory (default: /sys/fs/bpf/limiter/<escaped cgroup path>).
    #[arg(long, value_name = "DIR")]
    pub pin_dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[arg(long, value_name = "PATH", conflicts_with = "pin_dir")]
    pub cgroup: Option<PathBuf>,
    #[arg(long, value_name = "DIR")]
    pub pin_dir: Option<PathBuf>,
    /// A JSON object: `agent`, `globals` and `destinations` (one object per row).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DetachArgs {
    #[arg(long, value_name = "PATH", required_unless_present = "pin_dir")]
    pub cgroup: Option<PathBuf>,
    #[arg(long, value_name = "DIR")]
    pub pin_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

fn parse_algorithm(s: &str) -> Result<Algorithm, String> {
    s.parse::<Algorithm>().map_err(|e| e.to_string())
}
