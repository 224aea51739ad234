//! The programs under measurement: built in release for the real run.

use std::path::PathBuf;

use anyhow::{Context, Result};

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
        let built = crate::artifacts::build(&[
            "build",
            "--release",
            "--package",
            "limiter-user",
            "--package",
            "xtask",
        ])?;
        let find = |name: &str| {
            built
                .iter()
                .find(|e| e.name == name && !e.test)
                .map(|e| e.path.clone())
                .with_context(|| format!("cargo built no {name} binary"))
        };
        Ok(Binaries {
            agent: AgentBinary::Built(find("limiter-user")?),
            client: find("xtask")?,
        })
    }
}
