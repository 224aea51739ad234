//! The programs under measurement: built in release for the real run.

use std::{io::BufRead, path::PathBuf, process::Stdio};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use super::agent::AgentBinary;

pub struct Binaries {
    pub agent: AgentBinary,
    /// The load generators (`xtask bench-client`).
    pub client: PathBuf,
}

impl Binaries {
    /// This debug build plays every part: quick, and no figure of the smoke run counts.
    pub fn this_program() -> Result<Self> {
        Ok(Binaries {
            agent: AgentBinary::ThisProgram,
            client: std::env::current_exe()?,
        })
    }

    /// The agent as users build it, and the load generators optimised the same way.
    pub fn release() -> Result<Self> {
        let mut cmd = crate::cargo(&[
            "build",
            "--release",
            "--package",
            "limiter-user",
            "--package",
            "xtask",
            "--message-format=json-render-diagnostics",
        ]);
        let mut child = cmd
            .current_dir(super::workspace_root())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {cmd:?}"))?;
        let (mut agent, mut client) = (None, None);
        for line in std::io::BufReader::new(child.stdout.take().expect("piped")).lines() {
            let Ok(Artifact {
                target,
                executable: Some(exe),
            }) = serde_json::from_str(&line?)
            else {
                continue;
            };
            match target.name.as_str() {
                "limiter-user" => agent = Some(exe),
                "xtask" => client = Some(exe),
                _ => {}
            }
        }
        let status = child.wait()?;
        if !status.success() {
            bail!("{cmd:?} failed ({status})");
        }
        Ok(Binaries {
            agent: AgentBinary::Built(agent.context("cargo built no limiter-user binary")?),
            client: client.context("cargo built no xtask binary")?,
        })
    }
}

/// The part of cargo's `compiler-artifact` message that says where a binary went.
#[derive(Deserialize)]
struct Artifact {
    target: Target,
    executable: Option<PathBuf>,
}

#[derive(Deserialize)]
struct Target {
    name: String,
}
