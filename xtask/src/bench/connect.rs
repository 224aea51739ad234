//! connect+close, one connection after another: what the connect and close hooks cost.

use std::net::SocketAddr;

use anyhow::{ensure, Result};
use limiter_integration_tests::{Behaviour, TestCgroup, Upstream};

use super::{listener, process, stats, Binaries, Scale};
use crate::client::{self, ConnectLoopReport};

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    NoPrograms,
    /// Programs attached, the destination not limited (mode off).
    Unlimited,
    /// Every connection takes and gives back a slot; none is ever refused.
    GenerousLimit,
    /// At its limit: every connect is refused, no SYN leaves.
    Refusing,
}

impl Condition {
    const ALL: [Condition; 4] = [
        Condition::NoPrograms,
        Condition::Unlimited,
        Condition::GenerousLimit,
        Condition::Refusing,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Condition::NoPrograms => "no programs",
            Condition::Unlimited => "programs attached, destination unlimited (mode off)",
            Condition::GenerousLimit => "programs attached, generous limit (prod, 1 000)",
            Condition::Refusing => "programs attached, refusing (prod, limit 1, 1 held)",
        }
    }

    fn agent_args(self) -> Option<&'static [&'static str]> {
        match self {
            Condition::NoPrograms => None,
            Condition::Unlimited => Some(&["--mode", "off"]),
            Condition::GenerousLimit => {
                Some(&["--mode", "prod", "--algorithm", "fixed", "--limit", "1000"])
            }
            Condition::Refusing => {
                Some(&["--mode", "prod", "--algorithm", "fixed", "--limit", "1"])
            }
        }
    }
}

pub struct Row {
    pub condition: Condition,
    pub connections: usize,
    pub median_ns: u64,
    pub p99_ns: u64,
    /// The lowest and highest median of a single round: how steady the machine was.
    pub round_medians: (u64, u64),
}

pub struct ConnectResults {
    pub rounds: usize,
    pub rows: Vec<Row>,
}

impl ConnectResults {
    pub fn row(&self, condition: Condition) -> &Row {
        self.rows
            .iter()
            .find(|r| r.condition == condition)
            .expect("every condition is measured")
    }

    /// Median time per connection relative to no programs.
    pub fn ratio(&self, condition: Condition) -> f64 {
        self.row(condition).median_ns as f64 / self.row(Condition::NoPrograms).median_ns as f64
    }
}

/// Where the loop and its upstream run: each on a core of its own when there are two.
#[derive(Clone, Copy)]
pub struct Placement {
    upstream: Option<usize>,
    client: Option<usize>,
}

impl Placement {
    pub fn new() -> Self {
        let cpus = process::allowed_cpus();
        match (cpus.first(), cpus.last()) {
            (Some(&first), Some(&last)) if first != last => Placement {
                upstream: Some(first),
                client: Some(last),
            },
            _ => Placement {
                upstream: None,
                client: None,
            },
        }
    }

    /// The upstream of the loop.
    pub fn upstream(self) -> Result<SocketAddr> {
        listener::accept_and_keep(self.upstream)
    }
}

/// The conditions take turns round by round, so that drift on the machine spreads over all.
pub fn run(bins: &Binaries, scale: &Scale) -> Result<ConnectResults> {
    let placement = Placement::new();
    let closer = placement.upstream()?;
    // The refusing condition's destination: it keeps the one admitted connection open.
    let holder = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let cgroup = TestCgroup::new("bench-connect");
    let mut times: Vec<Vec<u64>> = vec![Vec::new(); Condition::ALL.len()];
    let mut round_medians: Vec<Vec<u64>> = vec![Vec::new(); Condition::ALL.len()];
    for _ in 0..scale.connect_rounds {
        for (i, condition) in Condition::ALL.into_iter().enumerate() {
            super::interrupt::check()?;
            let agent = condition
                .agent_args()
                .map(|args| bins.agent.start(&cgroup, args))
                .transpose()?;
            let to = if condition == Condition::Refusing {
                holder.addr
            } else {
                closer
            };
            let count = scale.connects_per_round;
            let report = connect_loop(bins, &cgroup, placement, to, count, condition)?;
            drop(agent);
            let mut ns = report.ns;
            round_medians[i].push(stats::quantile(&mut ns, 0.5));
            times[i].extend(ns);
        }
    }
    let rows = Condition::ALL
        .into_iter()
        .zip(times)
        .zip(round_medians)
        .map(|((condition, mut ns), medians)| Row {
            condition,
            connections: ns.len(),
            median_ns: stats::quantile(&mut ns, 0.5),
            p99_ns: stats::quantile(&mut ns, 0.99),
            round_medians: (
                medians.iter().copied().min().unwrap_or(0),
                medians.iter().copied().max().unwrap_or(0),
            ),
        })
        .collect();
    Ok(ConnectResults {
        rounds: scale.connect_rounds,
        rows,
    })
}

pub fn connect_loop(
    bins: &Binaries,
    cgroup: &TestCgroup,
    placement: Placement,
    to: SocketAddr,
    count: usize,
    condition: Condition,
) -> Result<ConnectLoopReport> {
    let mut cmd = process::in_cgroup(cgroup, &bins.client);
    if let Some(cpu) = placement.client {
        process::pin(&mut cmd, cpu);
    }
    cmd.args(["bench-client", "connect-loop", "--to", &to.to_string()])
        .args(["--count", &count.to_string()]);
    if condition == Condition::Refusing {
        cmd.arg("--hold-first");
    }
    let report: ConnectLoopReport = client::parse_report(&process::output(cmd)?)?;
    let (expected, got) = if condition == Condition::Refusing {
        ("refused", report.refused)
    } else {
        ("succeeded", report.ok)
    };
    ensure!(
        got == count,
        "{}: {got} of {count} connects {expected} (ok {}, refused {}, failed {:?})",
        condition.label(),
        report.ok,
        report.refused,
        report.failed
    );
    Ok(report)
}
