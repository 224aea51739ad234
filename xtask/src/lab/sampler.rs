//! What the limiter and the kernel say about one destination, read a few times a second.

use std::net::{SocketAddr, SocketAddrV4};

use anyhow::{Context, Result};
use limiter_integration_tests::TestCgroup;
use serde_json::Value;

use super::connections;
use crate::bench::agent::AgentBinary;

/// One reading.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick {
    /// Seconds since the run started.
    pub at_s: f64,
    /// Connections open to the destination, limiter or not.
    pub held: usize,
    /// The upstream's busy workers, where the lab can see them.
    pub busy: Option<usize>,
    /// The limiter's view, when one runs and knows the destination.
    pub limiter: Option<Gauge>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Gauge {
    pub limit: u32,
    pub inflight: i64,
    pub shed: u64,
    pub would_shed: u64,
    /// The latencies the controller compares, once it has them.
    pub baseline_ms: Option<f64>,
    pub p90_ms: Option<f64>,
}

pub struct Sampler<'a> {
    pub agent: Option<(&'a AgentBinary, &'a TestCgroup)>,
    pub destination: SocketAddrV4,
    /// Count only the connections of this cgroup's processes (a client beside a twin that
    /// reaches the same address), instead of every one in the namespace.
    pub held_by: Option<&'a TestCgroup>,
}

impl Sampler<'_> {
    pub fn read(&self, at_s: f64, busy: Option<usize>) -> Result<Tick> {
        let limiter = match self.agent {
            Some((agent, cgroup)) => {
                let rows = agent.status(cgroup)?;
                rows.iter()
                    .find(|row| is(row, self.destination.into()))
                    .map(gauge)
                    .transpose()?
            }
            None => None,
        };
        Ok(Tick {
            at_s,
            held: match self.held_by {
                Some(cgroup) => connections::held_by(cgroup.path(), self.destination)?,
                None => connections::held(self.destination)?,
            },
            busy,
            limiter,
        })
    }
}

fn is(row: &Value, destination: SocketAddr) -> bool {
    row["address"] == destination.ip().to_string() && row["port"] == destination.port()
}

fn gauge(row: &Value) -> Result<Gauge> {
    let number = |name: &str| {
        row[name]
            .as_i64()
            .with_context(|| format!("status --json: no number {name} in {row}"))
    };
    Ok(Gauge {
        limit: number("limit")?.try_into()?,
        inflight: number("inflight")?,
        shed: number("shed")?.try_into()?,
        would_shed: number("would_shed")?.try_into()?,
        baseline_ms: row["baseline_ms"].as_f64(),
        p90_ms: row["p90_ms"].as_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_row_is_matched_by_address_and_port_and_read_as_a_gauge() {
        let row = json!({"address": "198.18.0.2", "port": 8080, "mode": "prod", "limit": 20,
                         "inflight": 7, "shed": 3, "would_shed": 0, "baseline_ms": 30.5,
                         "p90_ms": null});
        assert!(is(&row, "198.18.0.2:8080".parse().unwrap()));
        assert!(!is(&row, "198.18.0.2:8081".parse().unwrap()));
        assert_eq!(
            gauge(&row).unwrap(),
            Gauge {
                limit: 20,
                inflight: 7,
                shed: 3,
                would_shed: 0,
                baseline_ms: Some(30.5),
                p90_ms: None,
            }
        );
        assert!(gauge(&json!({"address": "198.18.0.2", "port": 8080})).is_err());
    }
}
