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
        destination_rows(serde_json::from_slice(&stdout)?)
    }
}

/// The destinations of `status --json`: an array of rows, or an object holding them under
/// `destinations` beside the agent's and the globals' state.
fn destination_rows(status: serde_json::Value) -> Result<Vec<serde_json::Value>> {
    match status {
        serde_json::Value::Array(rows) => Ok(rows),
        serde_json::Value::Object(mut object) => match object.remove("destinations") {
            Some(serde_json::Value::Array(rows)) => Ok(rows),
            _ => anyhow::bail!("status --json has no destinations array"),
        },
        _ => anyhow::bail!("status --json is neither an array nor an object"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_come_from_an_array_or_from_the_objects_destinations() {
        let row = json!({"address": "127.0.0.1", "port": 80, "limit": 20});
        assert_eq!(destination_rows(json!([row])).unwrap(), vec![row.clone()]);
        let object = json!({"agent": {"running": true}, "globals": {}, "destinations": [row]});
        assert_eq!(destination_rows(object).unwrap(), vec![row]);
        assert!(destination_rows(json!({"agent": {}})).is_err());
        assert!(destination_rows(json!(3)).is_err());
    }
}
