//! The agent's own cost: CPU and resident memory while it digests the latency samples.
//! Measured from outside (/proc), so it keeps meaning the same as the agent gains work.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::Result;
use limiter_integration_tests::{Agent, Behaviour, TestCgroup, Upstream};

use super::{exchange, listener, process, report, Binaries, Scale};

pub struct Row {
    pub label: String,
    /// Destinations the kernel's table held that had one connection each, long closed.
    pub seen_once: usize,
    pub destinations: usize,
    pub connections: usize,
    /// Exchanges completed per second: one latency sample each.
    pub samples_per_second: f64,
    /// Share of one core, in percent.
    pub cpu_percent: f64,
    pub resident_bytes: u64,
    /// Rows the agent's `status` shows at the end.
    pub tracked: usize,
}

struct Usage {
    cpu_percent: f64,
    resident_bytes: u64,
}

/// CPU share over `interval` and resident memory at its end.
fn usage(agent: &Agent, interval: Duration) -> Result<Usage> {
    let (cpu0, t0) = (process::cpu_time(agent.pid())?, Instant::now());
    std::thread::sleep(interval);
    let (cpu1, t1) = (process::cpu_time(agent.pid())?, Instant::now());
    Ok(Usage {
        cpu_percent: 100.0 * (cpu1 - cpu0).as_secs_f64() / (t1 - t0).as_secs_f64(),
        resident_bytes: process::resident_bytes(agent.pid())?,
    })
}

pub fn run(bins: &Binaries, scale: &Scale) -> Result<Vec<Row>> {
    let interval = Duration::from_secs_f64(scale.agent_secs);
    let rate = scale.samples_per_second;
    let mut rows = Vec::new();

    super::interrupt::check()?;
    let cgroup = TestCgroup::new("bench-agent-idle");
    let agent = bins.agent.start(&cgroup, &[])?;
    let idle = usage(&agent, interval)?;
    rows.push(Row {
        label: "attached, no traffic".into(),
        seen_once: 0,
        destinations: 0,
        connections: 0,
        samples_per_second: 0.0,
        cpu_percent: idle.cpu_percent,
        resident_bytes: idle.resident_bytes,
        tracked: bins.agent.status(&cgroup)?.len(),
    });

    for (destinations, load) in [
        (1, exchange::Load::one_destination(rate)),
        (
            scale.fan_out_destinations,
            exchange::Load::many_destinations(rate),
        ),
    ] {
        super::interrupt::check()?;
        let upstreams: Vec<Upstream> = (0..destinations)
            .map(|_| Upstream::start("127.0.0.1:0", Behaviour::Echo))
            .collect();
        let to: Vec<SocketAddr> = upstreams.iter().map(|u| u.addr).collect();
        let cgroup = TestCgroup::new("bench-agent");
        // The defaults users get: prod, the default algorithm and limits.
        let agent = bins.agent.start(&cgroup, &[])?;
        let (report, used) = exchange::run(bins, &cgroup, &to, &load, || usage(&agent, interval))?;
        rows.push(Row {
            label: format!(
                "{} samples/s over {} destination{}",
                report::group(rate),
                report::group(destinations as f64),
                if destinations == 1 { "" } else { "s" }
            ),
            seen_once: 0,
            destinations,
            connections: destinations * load.per_destination,
            samples_per_second: report.per_second(),
            cpu_percent: used.cpu_percent,
            resident_bytes: used.resident_bytes,
            tracked: bins.agent.status(&cgroup)?.len(),
        });
    }
    for &seen in scale.seen_once {
        rows.extend(after_seen_once(bins, scale, seen, interval)?);
    }
    Ok(rows)
}

/// The table sized for every destination of the largest run, so none is evicted.
const TABLE: usize = 131_072;

/// `seen` destinations each get one connection (connect, close), then the agent is watched
/// idle, and again while 1 000 other destinations send samples at the usual rate.
fn after_seen_once(
    bins: &Binaries,
    scale: &Scale,
    seen: usize,
    interval: Duration,
) -> Result<Vec<Row>> {
    super::interrupt::check()?;
    let listener = listener::accept_and_keep_on([0, 0, 0, 0], None)?;
    let cgroup = TestCgroup::new("bench-agent-seen");
    let agent = bins
        .agent
        .start(&cgroup, &["--max-destinations", &TABLE.to_string()])?;
    let mut cmd = process::in_cgroup(&cgroup, &bins.client);
    cmd.args([
        "bench-client",
        "connect-loop",
        "--to",
        &listener.to_string(),
    ])
    .args(["--count", &seen.to_string(), "--spread"]);
    let connects: crate::client::ConnectLoopReport =
        crate::client::parse_report(&process::output(cmd)?)?;
    anyhow::ensure!(
        connects.ok == seen,
        "{} of {seen} connects to distinct destinations succeeded: {:?}",
        connects.ok,
        connects.failed
    );
    let idle = usage(&agent, interval)?;
    let mut rows = vec![Row {
        label: format!(
            "{} destinations seen once, idle",
            report::group(seen as f64)
        ),
        seen_once: seen,
        destinations: 0,
        connections: 0,
        samples_per_second: 0.0,
        cpu_percent: idle.cpu_percent,
        resident_bytes: idle.resident_bytes,
        tracked: bins.agent.status(&cgroup)?.len(),
    }];
    super::interrupt::check()?;
    let destinations = scale.fan_out_destinations;
    let load = exchange::Load::many_destinations(scale.samples_per_second);
    let upstreams: Vec<Upstream> = (0..destinations)
        .map(|_| Upstream::start("127.0.0.1:0", Behaviour::Echo))
        .collect();
    let to: Vec<SocketAddr> = upstreams.iter().map(|u| u.addr).collect();
    let (report, used) = exchange::run(bins, &cgroup, &to, &load, || usage(&agent, interval))?;
    rows.push(Row {
        label: format!(
            "{} destinations seen once, {} samples/s over {} others",
            report::group(seen as f64),
            report::group(scale.samples_per_second),
            report::group(destinations as f64)
        ),
        seen_once: seen,
        destinations,
        connections: destinations * load.per_destination,
        samples_per_second: report.per_second(),
        cpu_percent: used.cpu_percent,
        resident_bytes: used.resident_bytes,
        tracked: bins.agent.status(&cgroup)?.len(),
    });
    Ok(rows)
}
