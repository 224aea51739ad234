//! wrk, the HTTP load generator, with a script that reports in JSON.

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{ensure, Context, Result};
use limiter_integration_tests::{TempFile, TestCgroup};
use serde::Deserialize;

use super::process;

/// wrk calls `done` at the end with its own histogram; percentiles are in microseconds.
const REPORT_SCRIPT: &str = r#"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout))
end
"#;

#[derive(Debug, Deserialize, PartialEq)]
pub struct WrkReport {
    pub requests: u64,
    pub duration_us: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub errors: Errors,
}

/// wrk's socket errors and non-2xx/3xx answers.
#[derive(Debug, Deserialize, PartialEq)]
pub struct Errors {
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    pub status: u64,
    pub timeout: u64,
}

impl Errors {
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.status + self.timeout
    }
}

impl WrkReport {
    pub fn requests_per_second(&self) -> f64 {
        self.requests as f64 * 1e6 / self.duration_us as f64
    }
}

pub struct Wrk {
    script: TempFile,
    pub threads: usize,
    pub connections: usize,
    timeout: Option<Duration>,
}

impl Wrk {
    pub fn new(threads: usize, connections: usize) -> Self {
        Wrk {
            script: TempFile::new("bench-wrk.lua", REPORT_SCRIPT),
            threads,
            connections,
            timeout: None,
        }
    }

    /// Every connection waits `think` between a response and its next request, as users do;
    /// a request unanswered after `timeout` counts as a timeout.
    pub fn with_think_time(
        threads: usize,
        connections: usize,
        think: Duration,
        timeout: Duration,
    ) -> Self {
        let delay = format!("delay = function() return {} end\n", think.as_millis());
        Wrk {
            script: TempFile::new("think-wrk.lua", &(delay + REPORT_SCRIPT)),
            threads,
            connections,
            timeout: Some(timeout),
        }
    }

    fn command(&self, mut cmd: Command, url: &str, duration: Duration) -> Command {
        cmd.args(["-t", &self.threads.to_string()])
            .args(["-c", &self.connections.to_string()])
            .args(["-d", &format!("{}s", duration.as_secs().max(1))]);
        if let Some(timeout) = self.timeout {
            cmd.args(["--timeout", &format!("{}s", timeout.as_secs().max(1))]);
        }
        cmd.arg("-s").arg(&self.script.0).arg(url);
        cmd
    }

    /// Keep-alive GETs to `url` from inside `cgroup` for `duration` (whole seconds).
    pub fn run(&self, cgroup: &TestCgroup, url: &str, duration: Duration) -> Result<WrkReport> {
        let cmd = self.command(process::in_cgroup(cgroup, Path::new("wrk")), url, duration);
        let report: WrkReport = crate::client::parse_report(&process::output(cmd)?)?;
        ensure!(
            report.errors.total() == 0 && report.requests > 0,
            "wrk against {url}: {} requests, errors {:?}",
            report.requests,
            report.errors
        );
        Ok(report)
    }

    /// The same from where this program runs, in the background; errors are figures here.
    pub fn start(&self, url: &str, duration: Duration) -> Result<Background> {
        let mut cmd = self.command(Command::new("wrk"), url, duration);
        process::dies_with_parent(&mut cmd);
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {cmd:?}"))?;
        Ok(Background(Some(child)))
    }
}

/// wrk running; killed if dropped before it finishes.
pub struct Background(Option<Child>);

impl Background {
    pub fn finish(mut self) -> Result<WrkReport> {
        let out = self.0.take().expect("finished once").wait_with_output()?;
        ensure!(
            out.status.success(),
            "wrk failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        crate::client::parse_report(&String::from_utf8_lossy(&out.stdout))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_line_follows_wrks_own_summary() {
        let out = "Running 1s test @ http://127.0.0.1:1/\n  1 threads and 8 connections\n\
                   Requests/sec:  41234.00\n\
                   {\"requests\":41234,\"duration_us\":1000000,\"p50_us\":180,\"p99_us\":420,\
                   \"errors\":{\"connect\":0,\"read\":1,\"write\":0,\"status\":0,\"timeout\":2}}\n";
        let report: WrkReport = crate::client::parse_report(out).unwrap();
        assert_eq!(report.p99_us, 420);
        assert_eq!(report.requests_per_second(), 41234.0);
        assert_eq!(report.errors.total(), 3);
    }
}
