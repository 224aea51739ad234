//! `cargo xtask bench`: what the limiter costs, on loopback, side by side with no limiter
//! and with an egress proxy. Every process, cgroup and pin it makes is gone when it ends,
//! however it ends.

pub mod agent;
mod agent_cost;
pub mod binaries;
mod connect;
mod control;
mod exchange;
mod http;
pub mod interrupt;
mod kernel;
mod listener;
pub mod machine;
pub mod process;
mod report;
pub mod servers;
pub mod stats;
pub mod wrk;

use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use clap::Args;

use binaries::Binaries;
use report::{Outcome, Report};

#[derive(Args)]
pub struct Options {
    /// One short iteration of every part, to show the code path works: no build, no
    /// figures written, parts whose tools are missing skipped (and said so).
    #[arg(long)]
    smoke: bool,
    /// The file whose results section is replaced (relative to the workspace).
    #[arg(long, default_value = "docs/benchmarks.md")]
    out: PathBuf,
    /// Measure this part alone and print its section, writing nothing: for working on it.
    #[arg(long, value_enum)]
    only: Option<Part>,
}

/// A part of the benchmark that can run alone.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Part {
    Kernel,
    Agent,
}

/// How much of everything.
pub struct Scale {
    connect_rounds: usize,
    connects_per_round: usize,
    http_rounds: usize,
    http_seconds: u64,
    kernel_connects: usize,
    kernel_exchange_secs: f64,
    agent_secs: f64,
    samples_per_second: f64,
    fan_out_destinations: usize,
    /// Destinations seen once (one connection each) before the agent is measured.
    seen_once: &'static [usize],
    /// Whether the agent after destinations seen once is measured over a whole period of
    /// its walks of the kernel's table (a minute), so that a walk's cost is in the figure.
    over_a_walk: bool,
}

impl Scale {
    const FULL: Scale = Scale {
        connect_rounds: 5,
        connects_per_round: 4_000,
        // Short rounds, many turns: a burst of other work on the machine then lands on
        // every condition alike, and the median leaves it out.
        http_rounds: 9,
        http_seconds: 3,
        kernel_connects: 20_000,
        kernel_exchange_secs: 5.0,
        agent_secs: 10.0,
        samples_per_second: 10_000.0,
        fan_out_destinations: 1_000,
        seen_once: &[20_000, 100_000],
        over_a_walk: true,
    };

    const SMOKE: Scale = Scale {
        connect_rounds: 1,
        connects_per_round: 200,
        http_rounds: 1,
        http_seconds: 1,
        kernel_connects: 200,
        kernel_exchange_secs: 0.5,
        agent_secs: 0.5,
        samples_per_second: 1_000.0,
        fan_out_destinations: 20,
        seen_once: &[200],
        over_a_walk: false,
    };
}

pub fn run(options: Options) -> Result<()> {
    preflight(
        "the benchmarks attach eBPF programs and make cgroups",
        "bench",
    )?;
    let (scale, bins) = if options.smoke {
        println!("smoke run: one short iteration of each part; its figures mean nothing");
        (&Scale::SMOKE, Binaries::debug()?)
    } else {
        (&Scale::FULL, Binaries::release()?)
    };
    if let Some(part) = options.only {
        let mut out = String::new();
        match part {
            Part::Kernel => report::render_kernel(&kernel::run(&bins, scale)?, &mut out),
            Part::Agent => report::render_agent(&agent_cost::run(&bins, scale)?, &mut out),
        }
        println!("{out}");
        return Ok(());
    }
    let mut machine = machine::Machine::describe()?;

    eprintln!("bench: connect+close");
    let connect = connect::run(&bins, scale)?;
    let http = if http::tools_installed() {
        eprintln!("bench: keep-alive HTTP");
        Outcome::Measured(http::run(&bins, scale)?)
    } else {
        skipped(format!(
            "keep-alive HTTP, the egress proxy comparison and the kernel run time under HTTP load need {} (apt-get install {})",
            http::TOOLS.join(", "),
            http::TOOLS.join(" ")
        ))
    };
    eprintln!("bench: kernel run time");
    let kernel = kernel::run(&bins, scale)?;
    eprintln!("bench: the agent");
    let agent = agent_cost::run(&bins, scale)?;
    let control = if options.smoke {
        skipped("the control crate's criterion benchmark builds in release and takes a minute: not in a smoke run".into())
    } else {
        eprintln!("bench: the control crate");
        Outcome::Measured(control::run()?)
    };

    machine.idle_after = Some(machine::idle_percent()?);
    let report = Report {
        machine,
        command: if options.smoke {
            "cargo xtask bench --smoke"
        } else {
            "cargo xtask bench"
        }
        .into(),
        connect,
        http,
        kernel,
        agent,
        control,
    };
    let markdown = report.render();
    println!("{markdown}");
    if !options.smoke {
        let path = crate::workspace_root().join(&options.out);
        let existing = std::fs::read_to_string(&path).ok();
        std::fs::write(&path, report::splice(existing.as_deref(), &markdown))
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("bench: results written to {}", path.display());
    }
    Ok(())
}

/// Root, no programs inherited from a parent cgroup, Ctrl-C ending it cleanly, and room for
/// many descriptors: what `cargo xtask TASK` needs before it starts anything (`why` says
/// why root).
pub fn preflight(why: &str, task: &str) -> Result<()> {
    ensure!(
        crate::is_root(),
        "{why}: run it as root \
         (sudo -E env \"PATH=$PATH\" cargo xtask {task})"
    );
    interrupt::install()?;
    let inherited = kernel::inherited_programs()?;
    ensure!(
        inherited.is_empty(),
        "eBPF programs attached to a parent cgroup would run in every condition, \"no programs\" \
         included: {} (see `bpftool cgroup tree`)",
        inherited.join(", ")
    );
    raise_open_files_limit()
}

/// Never silent: what a run leaves out is said where it runs, and in the report.
fn skipped<T>(why: String) -> Outcome<T> {
    println!("skipped: {why}");
    Outcome::Skipped(why)
}

/// A thousand upstreams and their connections need more descriptors than the usual 1 024.
fn raise_open_files_limit() -> Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write one rlimit we own.
    unsafe {
        ensure!(
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0,
            "getrlimit failed"
        );
        limit.rlim_cur = limit.rlim_max;
        ensure!(
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0,
            "setrlimit failed"
        );
    }
    Ok(())
}
