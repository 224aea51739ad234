//! Load generators the benchmarks start inside the limited cgroup (`xtask bench-client`):
//! they are the application whose connections the limiter sees.

mod connect_loop;
mod exchange;
mod open_loop;

use std::net::SocketAddr;

use anyhow::Result;
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};

pub use connect_loop::ConnectLoopReport;
pub use exchange::ExchangeReport;
pub use open_loop::{Fate, OpenLoopReport, Sent};

#[derive(Args)]
pub struct Options {
    #[command(subcommand)]
    load: Load,
}

#[derive(Subcommand)]
enum Load {
    /// COUNT connects to TO in a row, each closed at once; prints a JSON report.
    ConnectLoop {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        count: usize,
        /// Open one connection first and hold it for the whole loop.
        #[arg(long)]
        hold_first: bool,
        /// Each connect to an address of its own, 127.1.0.0 on, at TO's port.
        #[arg(long)]
        spread: bool,
    },
    /// Request/response exchanges on keep-alive connections to echo upstreams, paced to
    /// RATE per second in all; prints "ready" once connected, a JSON report when stdin
    /// closes.
    Exchange {
        #[arg(long, value_delimiter = ',', required = true)]
        to: Vec<SocketAddr>,
        /// Connections to each destination.
        #[arg(long, default_value_t = 1)]
        per_destination: usize,
        #[arg(long)]
        rate: f64,
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// HTTP requests to TO at RATE per second, Poisson arrivals, a connection each; prints
    /// "ready", then a JSON report of every request once stdin closes and the last one is
    /// answered or given up on.
    OpenLoop {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        rate: f64,
        /// Seconds without a first byte before a request is given up on.
        #[arg(long)]
        timeout: f64,
    },
}

pub fn run(options: Options) -> Result<()> {
    match options.load {
        Load::ConnectLoop {
            to,
            count,
            hold_first,
            spread,
        } => print(&connect_loop::run(to, count, hold_first, spread)?),
        Load::Exchange {
            to,
            per_destination,
            rate,
            threads,
        } => exchange::run(&to, per_destination, rate, threads),
        Load::OpenLoop { to, rate, timeout } => {
            open_loop::run(to, rate, std::time::Duration::from_secs_f64(timeout))
        }
    }
}

fn print(report: &impl Serialize) -> Result<()> {
    println!("{}", serde_json::to_string(report)?);
    Ok(())
}

/// Reads the JSON report a client printed last.
pub fn parse_report<T: for<'de> Deserialize<'de>>(stdout: &str) -> Result<T> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| anyhow::anyhow!("the client printed no report: {stdout:?}"))?;
    Ok(serde_json::from_str(line)?)
}
