//! The client process inside the cgroup and the outcomes it prints.

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::PathBuf,
    process::{Child, ChildStdin, ChildStdout, Stdio},
};

use crate::{harness::bin, TestCgroup};

pub fn probe_bin() -> PathBuf {
    bin("limiter-probe")
}

/// A client process inside the cgroup.
pub struct Probe {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Probe {
    pub fn spawn(cgroup: &TestCgroup, args: &[&str]) -> Self {
        let mut child = cgroup
            .command(&probe_bin())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("cannot start the probe");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Probe {
            child,
            stdin,
            stdout,
        }
    }

    /// Opens `count` connections to `to` and returns the outcome of each ("ok", "err N").
    pub fn hold(cgroup: &TestCgroup, to: SocketAddr, count: usize) -> (Self, Vec<String>) {
        Self::hold_with(cgroup, "hold", to, count)
    }

    pub fn hold_with(
        cgroup: &TestCgroup,
        how: &str,
        to: SocketAddr,
        count: usize,
    ) -> (Self, Vec<String>) {
        let mut probe = Self::spawn(
            cgroup,
            &[how, "--to", &to.to_string(), "--count", &count.to_string()],
        );
        let lines = probe.lines_until("ready");
        (probe, lines)
    }

    /// Output lines up to (not including) `end`.
    pub fn lines_until(&mut self, end: &str) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).unwrap();
            assert!(n > 0, "the probe exited before `{end}`: {lines:?}");
            let line = line.trim_end().to_string();
            if line == end {
                return lines;
            }
            lines.push(line);
        }
    }

    /// Every output line, once the probe has exited successfully.
    pub fn lines_until_exit(&mut self) -> Vec<String> {
        drop(self.stdin.take());
        let lines: Vec<String> = (&mut self.stdout).lines().map_while(Result::ok).collect();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the probe failed: {status}");
        lines
    }

    /// Writes a command line to the probe.
    pub fn send(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("the probe's stdin is closed");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next output line.
    pub fn next_line(&mut self) -> String {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).unwrap();
        assert!(n > 0, "the probe exited");
        line.trim_end().to_string()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Closes the held connections by letting the probe exit; returns once it has.
    pub fn release(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the probe failed: {status}");
    }

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Counts outcomes: (successes, ECONNREFUSED, anything else).
pub fn tally(lines: &[String]) -> (usize, usize, usize) {
    let ok = lines
        .iter()
        .filter(|l| *l == "ok" || l.starts_with("ok "))
        .count();
    let refused = lines
        .iter()
        .filter(|l| **l == format!("err {}", libc::ECONNREFUSED))
        .count();
    (ok, refused, lines.len() - ok - refused)
}

/// The addresses `hold-peername` reported, one per connection that succeeded.
pub fn peernames(lines: &[String]) -> Vec<SocketAddr> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("ok "))
        .map(|a| a.parse().unwrap())
        .collect()
}
