//! Starting the agent under measurement: the binary cargo built for this run.

use std::{
    path::PathBuf,
    process::{Command, Output},
};

use anyhow::{ensure, Result};
use limiter_integration_tests::{Agent, TestCgroup};

pub struct AgentBinary(pub PathBuf);

impl AgentBinary {
    fn command(&self) -> Command {
        Command::new(&self.0)
    }

    /// Attaches to `cgroup` and returns once the agent says it is attached.
    pub fn start(&self, cgroup: &TestCgroup, args: &[&str]) -> Result<Agent> {
        // What users run: info level, whatever this shell's RUST_LOG says.
        self.start_logging(cgroup, "info", args)
    }

    /// As [`AgentBinary::start`], logging every closed window too, as JSON lines that
    /// [`Agent::windows`] reads: what users run, plus the figures a run is read with.
    pub fn start_logging_windows(&self, cgroup: &TestCgroup, args: &[&str]) -> Result<Agent> {
        let logging = ["--log-format", "json"];
        let args: Vec<&str> = logging.iter().chain(args).copied().collect();
        self.start_logging(cgroup, "info,limiter_user::windows=debug", &args)
    }

    fn start_logging(&self, cgroup: &TestCgroup, rust_log: &str, args: &[&str]) -> Result<Agent> {
        let mut cmd = self.command();
        cmd.env("RUST_LOG", rust_log);
        super::process::dies_with_parent(&mut cmd);
        Ok(Agent::start_command(cmd, cgroup, args))
    }

    /// `status --json` for `cgroup`: one row per destination.
    pub fn status(&self, cgroup: &TestCgroup) -> Result<Vec<serde_json::Value>> {
        let Output {
            status,
            stdout,
            stderr,
        } = self
            .command()
            .args(["status", "--json", "--cgroup"])
            .arg(cgroup.path())
            .output()?;
        ensure!(
            status.success(),
            "status failed: {}",
            String::from_utf8_lossy(&stderr)
        );
        let mut report: serde_json::Value = serde_json::from_slice(&stdout)?;
        match report["destinations"].take() {
            serde_json::Value::Array(rows) => Ok(rows),
            other => anyhow::bail!("status --json has no destinations array: {other}"),
        }
    }
}
