//! The programs under measurement: the agent as cargo builds it, in debug for the smoke
//! run and in release for the real one.

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::agent::AgentBinary;
use crate::artifacts::{self, Executable};

pub struct Binaries {
    pub agent: AgentBinary,
    /// The load generators (`xtask bench-client`).
    pub client: PathBuf,
}

impl Binaries {
    /// The debug agent (built now, quick when up to date), and this debug build as the load
    /// generators: no figure of the smoke run counts.
    pub fn debug() -> Result<Self> {
        let built = artifacts::build(&["build", "--package", "limiter-user"])?;
        Ok(Binaries {
            agent: AgentBinary(find(&built, "limiter-user")?),
            client: std::env::current_exe()?,
        })
    }

    /// The agent as users build it, and the load generators optimised the same way.
    pub fn release() -> Result<Self> {
        let built = artifacts::build(&[
            "build",
            "--release",
            "--package",
            "limiter-user",
            "--package",
            "xtask",
        ])?;
        Ok(Binaries {
            agent: AgentBinary(find(&built, "limiter-user")?),
            client: find(&built, "xtask")?,
        })
    }
}

fn find(built: &[Executable], name: &str) -> Result<PathBuf> {
    built
        .iter()
        .find(|e| e.name == name && !e.test)
        .map(|e| e.path.clone())
        .with_context(|| format!("cargo built no {name} binary"))
}
