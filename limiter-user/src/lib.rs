//! limiter-user: the agent that protects the processes of one cgroup.
//!
//! The binary is `src/main.rs`; the library lets the integration tests build the very same
//! agent into their own binary.

mod agent;
mod cgroup;
mod cli;
mod clock;
mod config;
mod control;
#[cfg(test)]
mod dist_tests;
mod enforcement;
mod events;
mod failures;
mod lock;
mod logging;
mod metrics;
mod pins;
mod plan;
mod preflight;
mod resolve;
mod seed;
mod signals;
mod status;
mod tables;

use std::{path::PathBuf, process::ExitCode};

use anyhow::{bail, Context, Result};
use clap::Parser;

use crate::{
    cgroup::Cgroup,
    cli::{Cli, Command, DetachArgs, RunArgs, StatusArgs},
    config::Config,
    lock::AgentLock,
    pins::PinDir,
    tables::Tables,
};

/// The whole command line program: parse, run, one line on error.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => run(cli.run),
        Some(Command::Run(args)) => run(args),
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
    logging::init(args.log_format);
    let Some(path) = &args.cgroup else {
        bail!("--cgroup PATH is required: the cgroup v2 directory of the processes to protect");
    };
    let cgroup = Cgroup::new(path)?;
    let options = agent::Options {
        pin_dir: args.pin_dir.clone().map(PinDir::at).transpose()?,
        metrics: args.metrics,
        keep_attached: args.keep_attached,
    };
    agent::run(cgroup, options, &args)
}

/// The file (or the embedded defaults), then the flags on top; read again on SIGHUP.
impl agent::ConfigSource for RunArgs {
    fn load(&self) -> Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::defaults(),
        };
        if let Some(mode) = self.mode {
            config.mode = mode;
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
    let tables = Tables::from_pins(&dir)?;
    let report = status::report(&dir, &tables)?;
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
        bail!("the scenario failed at least one criterion (see above)");
    }
    Ok(())
}

fn detach(args: DetachArgs) -> Result<()> {
    preflight::check_privileges()?;
    let dir = pin_dir_of(args.cgroup.as_ref(), args.pin_dir.as_ref())?;
    // Held while removing, so that no agent starts on these pins meanwhile.
    let _lock = AgentLock::acquire(&dir.lock_name()).map_err(|_| {
        let pid = AgentLock::holder(&dir.lock_name())
            .map_or("?".into(), |p| p.to_string());
        anyhow::anyhow!("an agent (pid {pid}) is running for this cgroup: stop it with SIGTERM, it detaches itself")
    })?;
    if !dir.exists()? {
        bail!("nothing to detach: {} does not exist", dir.path().display());
    }
    dir.remove()?;
    println!("removed {}", dir.path().display());
    Ok(())
}
