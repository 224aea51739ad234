//! limiter-user: the agent that protects the processes of one cgroup.
//!
//! The binary is `src/main.rs`; the library lets the integration tests build the very same
//! agent into their own binary.

mod accept;
mod adopt;
mod agent;
mod attach;
mod batch;
mod cgroup;
mod cli;
mod clock;
mod config;
mod configure;
mod control;
mod decision_log;
#[cfg(test)]
mod dist_tests;
mod exec;
mod failures;
mod feed;
mod follow;
mod latency_ring;
mod lock;
mod logging;
mod maps;
mod metrics;
mod pins;
mod prefetch;
mod preflight;
mod resolve;
mod resolved_config;
mod status;
mod wait_log;
mod watch;

use std::{path::PathBuf, process::ExitCode};

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, Parser};

use crate::{
    cgroup::Cgroup,
    cli::{AgentArgs, Cli, Command, DetachArgs, RunArgs, StatusArgs},
    config::Config,
    lock::AgentLock,
    maps::Maps,
    pins::PinDir,
};

/// How often an agent with the default `forget_idle_secs` reads the kernel's whole
/// destination table (the benchmark measures over that long).
pub fn default_idle_walk_period() -> std::time::Duration {
    control::idle_walk_period(std::time::Duration::from_secs(
        config::Config::defaults().forget_idle_secs,
    ))
}

/// The command line's definition, for the generated completions and man pages.
pub fn command() -> clap::Command {
    Cli::command()
}

/// The whole command line program: parse, run, one line on error.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Past `exec`, the exit status is CMD's: the limiter's own failures are 125.
        Err(e) if e.use_stderr() && std::env::args().nth(1).as_deref() == Some("exec") => {
            let _ = e.print();
            return ExitCode::from(exec::FAILED);
        }
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        None => run(cli.run),
        Some(Command::Run(args)) => run(args),
        Some(Command::Exec(args)) => return exec::main(args),
        Some(Command::Events(args)) => pin_dir_of(args.cgroup.as_ref(), args.pin_dir.as_ref())
            .and_then(|dir| follow::follow(&dir, args.json)),
        Some(Command::Status(args)) => status(args),
        Some(Command::Detach(args)) => detach(args),
        Some(Command::Simulate(args)) => simulate(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("limiter-user: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: RunArgs) -> Result<()> {
    logging::init(args.agent.log_format, "info");
    let Some(path) = &args.cgroup else {
        bail!(
            "--cgroup PATH is required: the cgroup v2 directory of the processes to protect ({}); or run a program under the limiter with `limiter-user exec -- CMD`",
            cgroup::mount_point().map_or("no cgroup v2 file system is mounted".into(), |m| {
                format!("cgroup v2 is mounted at {} on this machine", m.display())
            })
        );
    };
    let cgroup = Cgroup::new(path)?;
    let options = agent::Options {
        pin_dir: args.agent.pin_dir.clone().map(PinDir::at).transpose()?,
        metrics: args.agent.metrics,
        keep_attached: args.keep_attached,
    };
    agent::run(cgroup, options, &args.agent, None)?;
    Ok(())
}

/// The file (or the embedded defaults), then the flags on top; read again on SIGHUP.
impl agent::ConfigSource for AgentArgs {
    fn load(&self) -> Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::defaults(),
        };
        if let Some(mode) = self.mode {
            config.mode = mode;
        }
        if let Some(overflow) = self.overflow {
            config.overflow = overflow;
        }
        if let Some(algorithm) = self.algorithm {
            config.algorithm = algorithm;
        }
        if self.limit.is_some() {
            config.limit = self.limit;
        }
        let limits = &mut config.limits;
        limits.initial = self.initial_limit.unwrap_or(limits.initial);
        limits.min = self.min_limit.unwrap_or(limits.min);
        limits.max = self.max_limit.unwrap_or(limits.max);
        config.heartbeat_timeout_secs = self
            .heartbeat_timeout
            .unwrap_or(config.heartbeat_timeout_secs);
        config.max_destinations = self.max_destinations.unwrap_or(config.max_destinations);
        config.signal_buffer_kib = self.signal_buffer_kib.unwrap_or(config.signal_buffer_kib);
        if self.limit.is_some() && config.algorithm != limiter_core::Algorithm::Fixed {
            bail!("--limit sets the limit of the fixed algorithm: add --algorithm fixed");
        }
        config.validate().context("invalid flags")?;
        Ok(config)
    }
}

/// The pin directory named by --pin-dir or --cgroup, or the only one there is.
fn pin_dir_of(cgroup: Option<&PathBuf>, pin_dir: Option<&PathBuf>) -> Result<PinDir> {
    if let Some(dir) = pin_dir {
        return PinDir::at(dir.clone());
    }
    if let Some(path) = cgroup {
        return PinDir::for_cgroup(&Cgroup::new(path)?);
    }
    let all = PinDir::all();
    match all.as_slice() {
        [only] => Ok(only.clone()),
        [] => bail!(
            "no limiter is attached anywhere (nothing under {})",
            pins::ROOT
        ),
        many => bail!(
            "several cgroups are limited, pick one with --pin-dir: {}",
            many.iter()
                .map(|d| d.path().display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn status(args: StatusArgs) -> Result<()> {
    let dir = pin_dir_of(args.cgroup.as_ref(), args.pin_dir.as_ref())?;
    if !dir.exists()? {
        bail!(
            "no limiter is attached here: {} does not exist",
            dir.path().display()
        );
    }
    if let Some(secs) = args.watch {
        return watch::watch(&dir, std::time::Duration::from_secs(secs));
    }
    let maps = Maps::from_pins(&dir)?;
    let report = status::report(&dir, &maps)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        status::print_json(&mut out, &report)?;
    } else {
        status::print_table(&mut out, &report)?;
    }
    if report.agent.abandoned() {
        bail!("no agent is running for this cgroup and no programs are attached: these limits are not enforced");
    }
    Ok(())
}

fn simulate(args: &limiter_sim::SimulateArgs) -> Result<()> {
    if !limiter_sim::run(args)? {
        bail!("at least one criterion failed (see above)");
    }
    Ok(())
}

fn detach(args: DetachArgs) -> Result<()> {
    preflight::check_privileges()?;
    let dir = pin_dir_of(args.cgroup.as_ref(), args.pin_dir.as_ref())?;
    // Held while removing, so that no agent starts on these pins, or this cgroup, meanwhile.
    let cgroup = args.cgroup.as_deref().map(Cgroup::new).transpose()?;
    let names = cgroup
        .iter()
        .map(Cgroup::lock_name)
        .chain([dir.lock_name()]);
    let _locks = names
        .map(|name| {
            AgentLock::acquire(&name, "runs here").map_err(|_| {
                let pid = AgentLock::holder(&name).map_or("?".into(), |p| p.to_string());
                anyhow::anyhow!("an agent (pid {pid}) is running for this cgroup: stop it with SIGTERM, it detaches itself")
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if !dir.exists()? {
        bail!("nothing to detach: {} does not exist", dir.path().display());
    }
    dir.remove()?;
    println!("removed {}", dir.path().display());
    Ok(())
}
