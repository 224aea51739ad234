//! Starting the agent under measurement: the release binary for the real run, or this very
//! program for the smoke run (so the smoke run needs no build of its own).

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use anyhow::{ensure, Result};
use limiter_integration_tests::{Agent, TestCgroup};

/// The name this program answers to as the agent.
const AGENT_NAME: &str = "limiter-user";

pub fn invoked_as_agent() -> bool {
    std::env::args_os()
        .next()
        .is_some_and(|argv0| Path::new(&argv0).file_name() == Some(AGENT_NAME.as_ref()))
}

pub enum AgentBinary {
    Built(PathBuf),
    ThisProgram,
}

impl AgentBinary {
    fn command(&self) -> Result<Command> {
        Ok(match self {
            AgentBinary::Built(path) => Command::new(path),
            AgentBinary::ThisProgram => {
                let mut cmd = Command::new(std::env::current_exe()?);
                cmd.arg0(AGENT_NAME);
                cmd
            }
        })
    }

    /// Attaches to `cgroup` and returns once the agent says it is attached.
    pub fn start(&self, cgroup: &TestCgroup, args: &[&str]) -> Result<Agent> {
        let mut cmd = self.command()?;
        // What users run: info level, whatever this shell's RUST_LOG says.
        cmd.env("RUST_LOG", "info");
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
            .command()?
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
