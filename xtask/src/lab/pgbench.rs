//! pgbench with a connection per transaction (`-C`, 10 clients) in a limited cgroup, against
//! the lab's PostgreSQL; every transaction sleeps for a time the lab raises mid-run.
//! Every connection ends with PostgreSQL's Terminate message, which gets no reply.

use std::{
    net::SocketAddr,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};
use limiter_integration_tests::{Cluster, TempFile, TestCgroup};

use super::{
    limiter::{logged_windows, Limiter},
    phases::{Phase, Phases},
    sampler::Tick,
};
use crate::bench::{binaries::Binaries, process};

pub const CLIENTS: usize = 10;
pub const SLOW_QUERY: Duration = Duration::from_millis(100);
const SCRIPT: &str = "SELECT pg_sleep(delay) FROM lab_delay;\n";

pub struct PgRun {
    pub limiter: Limiter,
    pub phases: Phases,
    /// pgbench in the limiter's cgroup.
    pub limited: Summary,
    /// The same pgbench at the same time against the same address, in a cgroup with no
    /// limiter: what the machine gave a run without the limiter at that moment. Runs one
    /// after the other differ by a fifth here; twins by well under 1 %. (A second address
    /// of the server would not do: the postmaster serves its first listening socket about
    /// 9 % better.)
    pub twin: Summary,
    pub ticks: Vec<Tick>,
    /// The windows the agent logged, as JSON lines.
    pub windows: String,
}

impl PgRun {
    /// The limited run's tps against its twin's.
    pub fn tps_ratio(&self) -> f64 {
        self.limited.tps / self.twin.tps
    }
}

pub fn run(bins: &Binaries, phases: Phases, cluster: &Cluster, limiter: Limiter) -> Result<PgRun> {
    let SocketAddr::V4(destination) = cluster.addr else {
        bail!("the cluster listens on IPv4");
    };
    cluster.sql(
        "DROP TABLE IF EXISTS lab_delay; CREATE TABLE lab_delay (delay float8); \
         INSERT INTO lab_delay VALUES (0);",
    )?;
    let script = TempFile::new("lab-pgbench.sql", SCRIPT);
    let cgroup = TestCgroup::new("lab-pgbench");
    let twin_cgroup = TestCgroup::new("lab-pgbench-twin");
    let (agent, mut sampler) = limiter.attach(bins, &cgroup, destination)?;
    sampler.held_by = Some(&cgroup);
    let started = Instant::now();
    let limited = Pgbench::start(cluster, &cgroup, &script, phases)?;
    let twin = Pgbench::start(cluster, &twin_cgroup, &script, phases)?;
    let mut ticks = Vec::new();
    phases.walk(
        started,
        |phase| {
            let delay = match phase {
                Phase::Incident => SLOW_QUERY,
                Phase::Healthy | Phase::Recovery => Duration::ZERO,
            };
            cluster.sql(&format!(
                "UPDATE lab_delay SET delay = {}",
                delay.as_secs_f64()
            ))
        },
        |at_s| {
            ticks.push(sampler.read(at_s, None)?);
            Ok(())
        },
    )?;
    let limited = limited.finish()?;
    let windows = logged_windows(agent.as_ref(), destination);
    drop(agent);
    Ok(PgRun {
        limiter,
        phases,
        limited,
        twin: twin.finish()?,
        ticks,
        windows,
    })
}

/// One pgbench process, started in `cgroup`; its cgroup's removal ends it if the lab ends
/// first.
struct Pgbench {
    child: Child,
    cmd: String,
}

impl Pgbench {
    fn start(
        cluster: &Cluster,
        cgroup: &TestCgroup,
        script: &TempFile,
        phases: Phases,
    ) -> Result<Self> {
        let mut cmd = process::in_cgroup(cgroup, &cluster.bin.join("pgbench"));
        cmd.args(["--no-vacuum", "--connect", "--progress", "1"])
            .args(["--client", &CLIENTS.to_string(), "--jobs", "2"])
            .args(["--time", &phases.total().as_secs().max(1).to_string()])
            .arg("--file")
            .arg(&script.0)
            .args(cluster.connection_args());
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {cmd:?}"))?;
        Ok(Pgbench {
            child,
            cmd: format!("{cmd:?}"),
        })
    }

    fn finish(self) -> Result<Summary> {
        let out = self.child.wait_with_output()?;
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        // 2: the run went on with clients aborted, which is a figure here, not a failure.
        ensure!(
            matches!(out.status.code(), Some(0 | 2)),
            "{} failed ({}): {stderr}",
            self.cmd,
            out.status
        );
        Summary::parse(&stdout, &stderr)
            .with_context(|| format!("unexpected pgbench output:\n{stdout}\n{stderr}"))
    }
}

/// What pgbench prints: the summary on stdout, progress and client errors on stderr.
#[derive(Debug, PartialEq)]
pub struct Summary {
    pub tps: f64,
    pub transactions: u64,
    /// Clients that gave up for good.
    pub aborted: Vec<u32>,
    /// What pgbench said about the first few.
    pub abort_lines: Vec<String>,
    /// Its own progress reports: (seconds, transactions per second).
    pub progress: Vec<(f64, f64)>,
}

impl Summary {
    fn parse(stdout: &str, stderr: &str) -> Option<Summary> {
        let tps = stdout
            .lines()
            .find_map(|l| l.strip_prefix("tps = "))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        let transactions = stdout
            .lines()
            .find_map(|l| l.strip_prefix("number of transactions actually processed: "))?
            .split(['/', ' '])
            .next()?
            .parse()
            .ok()?;
        let abort_lines: Vec<&str> = stderr.lines().filter(|l| l.contains(" aborted")).collect();
        let mut aborted: Vec<u32> = abort_lines
            .iter()
            .filter_map(|l| {
                let after = l.split("client ").nth(1)?;
                after.split_whitespace().next()?.parse().ok()
            })
            .collect();
        aborted.sort_unstable();
        aborted.dedup();
        let progress = stderr
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("progress: ")?;
                let (at, rest) = rest.split_once(" s, ")?;
                let (tps, _) = rest.split_once(" tps")?;
                Some((at.parse().ok()?, tps.parse().ok()?))
            })
            .collect();
        Some(Summary {
            tps,
            transactions,
            aborted,
            abort_lines: abort_lines.iter().take(3).map(|l| l.to_string()).collect(),
            progress,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_each_aborted_client_once() {
        let stdout = "transaction type: lab.sql\nscaling factor: 1\nnumber of clients: 10\n\
                      number of transactions actually processed: 1234\n\
                      latency average = 5.0 ms\n\
                      tps = 205.5 (including reconnection times)\n";
        let stderr = "progress: 1.0 s, 210.0 tps, lat 4.1 ms stddev 1.0, 0 failed\n\
                      pgbench: error: connection to server at \"127.0.0.1\", port 5 failed: Connection refused\n\
                      pgbench: error: client 3 aborted while establishing connection\n\
                      progress: 2.0 s, 190.5 tps, lat 4.5 ms stddev 1.2, 0 failed\n\
                      pgbench: error: client 7 aborted while establishing connection\n\
                      pgbench: error: client 3 aborted while establishing connection\n";
        let s = Summary::parse(stdout, stderr).unwrap();
        assert_eq!(s.tps, 205.5);
        assert_eq!(s.transactions, 1234);
        assert_eq!(s.aborted, [3, 7]);
        assert_eq!(s.abort_lines.len(), 3);
        assert_eq!(s.progress, [(1.0, 210.0), (2.0, 190.5)]);
        assert_eq!(Summary::parse("no summary", ""), None);
    }
}
