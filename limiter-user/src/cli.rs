//! The command line. `run` is the default subcommand.

use std::{ffi::OsString, path::PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};
use limiter_core::config::Algorithm;

use crate::config::{Mode, Overflow};

/// The release and the commit it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("LIMITER_COMMIT"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "limiter-user",
    version = VERSION,
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
    /// Run a program in a cgroup of its own, limited from its first connect; exit with
    /// its status and remove the cgroup once it and everything it started are gone.
    Exec(ExecArgs),
    /// Follow a running agent's decisions (shed, would_shed, redirected) and limit changes.
    Events(EventsArgs),
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
    /// On SIGTERM/SIGINT, leave the programs attached and pinned so that enforcement
    /// continues while the agent restarts; the next agent takes them over.
    #[arg(long)]
    pub keep_attached: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: CMD's, 128 + N when a signal N killed it, 125 when the \
    limiter could not start, 126 when CMD cannot be executed, 127 when it is not found."
)]
pub struct ExecArgs {
    /// Create the transient cgroup below this cgroup v2 directory (default: the cgroup v2
    /// mount).
    #[arg(long, value_name = "DIR")]
    pub parent: Option<PathBuf>,
    #[command(flatten)]
    pub agent: AgentArgs,
    /// The program to run and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// How the agent limits, shared by `run` and `exec`.
#[derive(Debug, Args, Default)]
pub struct AgentArgs {
    /// TOML configuration file; flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Every destination's mode unless the configuration sets its own (default prod).
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// What a connect at the limit gets, unless the configuration sets it for its
    /// destination (default refuse).
    #[arg(long, value_enum)]
    pub overflow: Option<Overflow>,
    #[arg(long, value_parser = parse_algorithm, help = algorithm_help())]
    pub algorithm: Option<Algorithm>,
    /// The limit of the `fixed` algorithm.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// A destination's limit before its controller has learned it (default 20).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub initial_limit: Option<u32>,
    /// The lowest an adaptive limit goes (default 4).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub min_limit: Option<u32>,
    /// The highest an adaptive limit goes (default 200).
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
    /// Pin directory (default: /sys/fs/bpf/limiter/<escaped cgroup path>).
    #[arg(long, value_name = "DIR")]
    pub pin_dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// The cgroup the agent protects (default: the only one limited).
    #[arg(long, value_name = "PATH", conflicts_with = "pin_dir")]
    pub cgroup: Option<PathBuf>,
    /// The agent's pin directory, when it was started with --pin-dir.
    #[arg(long, value_name = "DIR")]
    pub pin_dir: Option<PathBuf>,
    /// One JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[arg(long, value_name = "PATH", conflicts_with = "pin_dir")]
    pub cgroup: Option<PathBuf>,
    #[arg(long, value_name = "DIR")]
    pub pin_dir: Option<PathBuf>,
    /// A JSON object: `agent`, `globals` and `destinations` (one object per row).
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,
    /// Redraw the table every SECS seconds (default 2), busiest destinations first.
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "2",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub watch: Option<u64>,
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

fn algorithm_help() -> String {
    format!(
        "The control algorithm: {} (default {})",
        Algorithm::names(),
        Algorithm::DEFAULT
    )
}

fn parse_algorithm(s: &str) -> Result<Algorithm, String> {
    s.parse::<Algorithm>().map_err(|e| e.to_string())
}
