//! Keep-alive request/response traffic from inside the cgroup, with something measured
//! while it flows.

use std::net::SocketAddr;

use anyhow::Result;
use limiter_integration_tests::TestCgroup;

use super::{process, Binaries};
use crate::client::ExchangeReport;

pub struct Load {
    pub per_destination: usize,
    /// Exchanges per second, all destinations together.
    pub rate: f64,
    pub threads: usize,
}

impl Load {
    /// A few connections, as a client's pool to one upstream would have.
    pub fn one_destination(rate: f64) -> Self {
        Load {
            per_destination: 8,
            rate,
            threads: 2,
        }
    }

    /// One connection to each of many destinations.
    pub fn many_destinations(rate: f64) -> Self {
        Load {
            per_destination: 1,
            rate,
            threads: 4,
        }
    }
}

/// Connects to `to`, calls `measure` while the traffic flows at its rate, then stops it.
pub fn run<T>(
    bins: &Binaries,
    cgroup: &TestCgroup,
    to: &[SocketAddr],
    load: &Load,
    measure: impl FnOnce() -> Result<T>,
) -> Result<(ExchangeReport, T)> {
    let addresses: Vec<String> = to.iter().map(ToString::to_string).collect();
    let mut cmd = process::in_cgroup(cgroup, &bins.client);
    cmd.args(["bench-client", "exchange", "--to", &addresses.join(",")])
        .args(["--per-destination", &load.per_destination.to_string()])
        .args(["--rate", &load.rate.to_string()])
        .args(["--threads", &load.threads.to_string()]);
    let client = process::Running::start(cmd)?;
    let measured = measure()?;
    Ok((client.stop()?, measured))
}
