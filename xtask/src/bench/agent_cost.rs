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
    {
        // Stopped before the next row: an agent left running would count in its machine.
        let cgroup = TestCgroup::new("bench-agent-idle");
        let agent = bins.agent.start(&cgroup, &[])?;
        rows.push(idle(
            bins,
            &agent,
            &cgroup,
            "attached, no traffic".into(),
            0,
            interval,
        )?);
    }

    for (destinations, load) in [
        (1, exchange::Load::one_destination(rate)),
        (
            scale.fan_out_destinations,
            exchange::Load::many_destinations(rate),
        ),
    ] {
        super::interrupt::check()?;
        let cgroup = TestCgroup::new("bench-agent");
        // The defaults users get: prod, the default algorithm and limits.
        let agent = bins.agent.start(&cgroup, &[])?;
        let label = format!(
            "{} samples/s over {} destination{}",
            report::group(rate),
            report::group(destinations as f64),
            if destinations == 1 { "" } else { "s" }
        );
        let traffic = Traffic {
            destinations,
            load,
            interval,
        };
        rows.push(loaded(bins, &agent, &cgroup, label, 0, &traffic)?);
    }
    for &seen in scale.seen_once {
        rows.extend(after_seen_once(bins, scale, seen, interval)?);
    }
    Ok(rows)
}

/// The agent watched with no traffic; `seen_once` destinations had a connection before.
fn idle(
    bins: &Binaries,
    agent: &Agent,
    cgroup: &TestCgroup,
    label: String,
    seen_once: usize,
    interval: Duration,
) -> Result<Row> {
    let used = usage(agent, interval)?;
    Ok(Row {
        label,
        seen_once,
        destinations: 0,
        connections: 0,
        samples_per_second: 0.0,
        cpu_percent: used.cpu_percent,
        resident_bytes: used.resident_bytes,
        tracked: bins.agent.status(cgroup)?.len(),
    })
}

/// Samples from echo upstreams of their own, at the load's rate.
struct Traffic {
    destinations: usize,
    load: exchange::Load,
    interval: Duration,
}

/// The agent watched while the traffic flows.
fn loaded(
    bins: &Binaries,
    agent: &Agent,
    cgroup: &TestCgroup,
    label: String,
    seen_once: usize,
    traffic: &Traffic,
) -> Result<Row> {
    let upstreams: Vec<Upstream> = (0..traffic.destinations)
        .map(|_| Upstream::start("127.0.0.1:0", Behaviour::Echo))
        .collect();
    let to: Vec<SocketAddr> = upstreams.iter().map(|u| u.addr).collect();
    let (report, used) = exchange::run(bins, cgroup, &to, &traffic.load, || {
        usage(agent, traffic.interval)
    })?;
    Ok(Row {
        label,
        seen_once,
        destinations: traffic.destinations,
        connections: traffic.destinations * traffic.load.per_destination,
        samples_per_second: report.per_second(),
        cpu_percent: used.cpu_percent,
        resident_bytes: used.resident_bytes,
        tracked: bins.agent.status(cgroup)?.len(),
    })
}

/// The table sized for every destination of the largest run, so none is turned away.
const TABLE: usize = 131_072;

/// `seen` destinations each get one connection (connect, close), then the agent is watched
/// idle, and again while other destinations send samples at the usual rate.
fn after_seen_once(
    bins: &Binaries,
    scale: &Scale,
    seen: usize,
    interval: Duration,
) -> Result<Vec<Row>> {
    super::interrupt::check()?;
    let interval = if scale.over_a_walk {
        interval.max(limiter_user::default_idle_walk_period())
    } else {
        interval
    };
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
    let seen_label = report::group(seen as f64);
    let idle_row = idle(
        bins,
        &agent,
        &cgroup,
        format!("{seen_label} destinations seen once, idle"),
        seen,
        interval,
    )?;
    super::interrupt::check()?;
    let traffic = Traffic {
        destinations: scale.fan_out_destinations,
        load: exchange::Load::many_destinations(scale.samples_per_second),
        interval,
    };
    let label = format!(
        "{seen_label} destinations seen once, {} samples/s over {} others",
        report::group(scale.samples_per_second),
        report::group(traffic.destinations as f64)
    );
    let loaded_row = loaded(bins, &agent, &cgroup, label, seen, &traffic)?;
    Ok(vec![idle_row, loaded_row])
}
