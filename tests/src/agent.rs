//! The agent under test: started on a cgroup, its log read back, its one-shot commands run.

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Output, Stdio},
    sync::{mpsc, Arc, Mutex},
};

use crate::{
    harness::{bin, hang_guard},
    TestCgroup,
};

pub fn agent_bin() -> PathBuf {
    bin("limiter-agent-under-test")
}

/// A running agent; SIGTERM on drop.
pub struct Agent {
    child: Child,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Agent {
    /// Starts the agent on `cgroup` and waits until it says it is attached.
    pub fn start(cgroup: &TestCgroup, args: &[&str]) -> Self {
        Self::start_command(Command::new(agent_bin()), cgroup, args)
    }

    pub fn start_command(mut cmd: Command, cgroup: &TestCgroup, args: &[&str]) -> Self {
        if !cmd.get_envs().any(|(k, _)| k == "RUST_LOG") {
            cmd.env("RUST_LOG", "info");
        }
        let mut child = cmd
            .arg("--cgroup")
            .arg(cgroup.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start the agent");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[agent] {line}");
                let attached = line.contains("limiter attached");
                // Logged before the start returns, so the test can read that line too.
                sink.lock().unwrap().push(line);
                if attached {
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(hang_guard()).is_err() {
            let _ = child.kill();
            let status = child.wait().unwrap();
            panic!(
                "the agent did not attach ({status}): {:?}",
                log.lock().unwrap()
            );
        }
        Agent { child, log }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Whether the agent has logged a line containing every one of `texts`.
    pub fn logged(&self, texts: &[&str]) -> bool {
        let log = self.log.lock().unwrap();
        log.iter().any(|l| texts.iter().all(|t| l.contains(t)))
    }

    /// The latency signals the agent logged (start it with `signal_logging()`).
    pub fn signals(&self) -> Vec<LoggedSignal> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|v| v["target"] == "limiter_user::signals")
            .map(|v| LoggedSignal {
                kind: v["kind"].as_str().unwrap_or_default().to_string(),
                destination: v["destination"]
                    .as_str()
                    .unwrap_or_default()
                    .parse()
                    .unwrap(),
                value_ns: v["value_ns"].as_u64().unwrap_or_default(),
                inflight: v["inflight"].as_u64().unwrap_or_default(),
                status: v["status"].as_u64().unwrap_or_default(),
            })
            .collect()
    }

    /// Waits until the agent has logged `n` signals of `kind` for `dest`, then returns them
    /// (start it with `signal_logging()`).
    pub fn wait_signals(&self, dest: SocketAddr, kind: &str, n: usize) -> Vec<LoggedSignal> {
        let of_kind = || -> Vec<LoggedSignal> {
            self.signals()
                .into_iter()
                .filter(|s| s.destination == dest && s.kind == kind)
                .collect()
        };
        crate::wait_until(&format!("{n} {kind} signal(s) for {dest}"), || {
            of_kind().len() >= n
        });
        of_kind()
    }

    /// The windows the agent logged for `destination` (start it with `window_logging()`).
    pub fn windows(&self, destination: SocketAddr) -> Vec<serde_json::Value> {
        let destination = destination.to_string();
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|v| v["target"] == "limiter_user::windows" && v["destination"] == destination)
            .collect()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill() on our own child's pid.
        unsafe { libc::kill(self.pid(), sig) };
    }

    /// SIGTERM, then the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        self.child.wait().unwrap()
    }

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal(libc::SIGCONT);
            self.signal(libc::SIGTERM);
            let _ = self.child.wait();
        }
    }
}

/// One latency signal from the agent's debug log.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedSignal {
    pub kind: String,
    pub destination: SocketAddr,
    pub value_ns: u64,
    pub inflight: u64,
    /// A sample's HTTP status code (cleartext HTTP/1.x), else 0.
    pub status: u64,
}

/// What the kernel guarantees about a sample: it starts at the request's first byte leaving
/// (after the client started its clock) and ends at the response's first byte arriving
/// (before the client's read returns), so it is at least the upstream's own delay and at
/// most what the client measured, however loaded the machine.
pub fn assert_bounded(kernel_ns: u64, upstream_delay_ms: u64, client_ns: u64) {
    assert!(
        kernel_ns >= upstream_delay_ms * 1_000_000,
        "kernel {kernel_ns} ns is less than the upstream's delay of {upstream_delay_ms} ms"
    );
    assert!(
        kernel_ns <= client_ns,
        "kernel {kernel_ns} ns is more than the client's own {client_ns} ns"
    );
}

/// An agent command that logs every latency signal as a JSON line.
pub fn signal_logging() -> Command {
    let mut cmd = Command::new(agent_bin());
    cmd.env("RUST_LOG", "info,limiter_user::signals=debug")
        .args(["--log-format", "json"]);
    cmd
}

/// An agent command that logs every closed window as a JSON line.
pub fn window_logging() -> Command {
    let mut cmd = Command::new(agent_bin());
    cmd.env("RUST_LOG", "info,limiter_user::windows=debug")
        .args(["--log-format", "json"]);
    cmd
}

/// Runs the agent binary with `args` (status, detach, a failing run...).
pub fn agent_command(args: &[&str]) -> Output {
    Command::new(agent_bin())
        .args(args)
        .output()
        .expect("cannot run the agent")
}

/// Runs the agent, expecting failure with one error line (besides log lines) that
/// contains `expected`.
pub fn assert_refused(cmd: &mut Command, expected: &str) {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "must fail: {stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("limiter-user: "))
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {stderr}");
    assert!(
        errors[0].contains(expected),
        "expected `{expected}` in: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
