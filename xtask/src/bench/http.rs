//! Keep-alive HTTP: the application's requests with no limiter, with the limiter in prod,
//! and through HAProxy as an egress proxy instead.

use std::time::{Duration, Instant};

use anyhow::Result;
use limiter_integration_tests::TestCgroup;

use super::{
    machine::command_line,
    process, servers, stats,
    wrk::{Wrk, WrkReport},
    Binaries, Scale,
};

/// The limiter's cap and the proxy's `maxconn`: the same, and never reached.
const LIMIT: u32 = 1000;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    NoLimiter,
    Limiter,
    Proxy,
}

impl Condition {
    const ALL: [Condition; 3] = [Condition::NoLimiter, Condition::Limiter, Condition::Proxy];

    pub fn label(self) -> &'static str {
        match self {
            Condition::NoLimiter => "no programs",
            Condition::Limiter => "limiter attached (prod, fixed limit 1 000)",
            Condition::Proxy => "through HAProxy (maxconn 1 000 per server)",
        }
    }
}

pub struct Row {
    pub condition: Condition,
    /// Medians over the rounds.
    pub requests_per_second: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// The slowest and fastest round.
    pub rps_range: (f64, f64),
    /// The agent's share of a core while it digests a sample per request (median).
    pub agent_cpu_percent: Option<f64>,
}

pub struct HttpResults {
    pub rounds: usize,
    pub seconds: u64,
    pub threads: usize,
    pub connections: usize,
    pub tools: Vec<String>,
    pub rows: Vec<Row>,
}

impl HttpResults {
    pub fn row(&self, condition: Condition) -> &Row {
        self.rows
            .iter()
            .find(|r| r.condition == condition)
            .expect("every condition is measured")
    }
}

struct Round {
    wrk: WrkReport,
    agent_cpu_percent: Option<f64>,
}

pub const TOOLS: [&str; 3] = ["wrk", "nginx", "haproxy"];

pub fn tools_installed() -> bool {
    TOOLS.iter().all(|t| process::installed(t))
}

pub fn run(bins: &Binaries, scale: &Scale) -> Result<HttpResults> {
    let servers = TestCgroup::new("bench-servers");
    let nginx = servers::nginx(&servers, None)?;
    let proxy = servers::haproxy(&servers, nginx.addr, LIMIT)?;
    let cgroup = TestCgroup::new("bench-http");
    let wrk = Wrk::new(1, 32);
    let duration = Duration::from_secs(scale.http_seconds);
    let url = |addr| format!("http://{addr}/");

    // nginx and the page cache warm up outside the figures.
    wrk.run(&cgroup, &url(nginx.addr), duration)?;
    let mut rounds: Vec<Vec<Round>> = Condition::ALL.iter().map(|_| Vec::new()).collect();
    for _ in 0..scale.http_rounds {
        for (i, condition) in Condition::ALL.into_iter().enumerate() {
            super::interrupt::check()?;
            let limit = LIMIT.to_string();
            let agent = (condition == Condition::Limiter)
                .then(|| {
                    let args = ["--mode", "prod", "--algorithm", "fixed", "--limit", &limit];
                    bins.agent.start(&cgroup, &args)
                })
                .transpose()?;
            let target = if condition == Condition::Proxy {
                proxy.addr
            } else {
                nginx.addr
            };
            let agent_cpu = agent
                .as_ref()
                .map(|a| process::cpu_time(a.pid()))
                .transpose()?;
            let started = Instant::now();
            let report = wrk.run(&cgroup, &url(target), duration)?;
            let agent_cpu_percent = match (&agent, agent_cpu) {
                (Some(a), Some(before)) => Some(
                    100.0 * (process::cpu_time(a.pid())? - before).as_secs_f64()
                        / started.elapsed().as_secs_f64(),
                ),
                _ => None,
            };
            rounds[i].push(Round {
                wrk: report,
                agent_cpu_percent,
            });
            drop(agent);
        }
    }
    let rows = Condition::ALL
        .into_iter()
        .zip(rounds)
        .map(|(condition, rounds)| {
            let rps: Vec<f64> = rounds.iter().map(|r| r.wrk.requests_per_second()).collect();
            let of = |f: fn(&WrkReport) -> u64| {
                stats::median(&rounds.iter().map(|r| f(&r.wrk) as f64).collect::<Vec<_>>())
            };
            let agent: Vec<f64> = rounds.iter().filter_map(|r| r.agent_cpu_percent).collect();
            Row {
                condition,
                requests_per_second: stats::median(&rps),
                p50_us: of(|r| r.p50_us),
                p99_us: of(|r| r.p99_us),
                rps_range: (
                    rps.iter().copied().fold(f64::INFINITY, f64::min),
                    rps.iter().copied().fold(0.0, f64::max),
                ),
                agent_cpu_percent: (!agent.is_empty()).then(|| stats::median(&agent)),
            }
        })
        .collect();
    Ok(HttpResults {
        rounds: scale.http_rounds,
        seconds: scale.http_seconds,
        threads: wrk.threads,
        connections: wrk.connections,
        tools: vec![
            command_line("wrk", &["-v"])?,
            command_line("nginx", &["-v"])?,
            command_line("haproxy", &["-v"])?,
        ],
        rows,
    })
}
