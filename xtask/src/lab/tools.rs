//! The programs the lab drives, all from Debian's packages, checked before anything starts.

use std::path::PathBuf;

use anyhow::{bail, Result};

use limiter_integration_tests::postgres_bin;

use crate::bench::process::installed;

/// Program, and the Debian package it comes in.
const ON_PATH: [(&str, &str); 5] = [
    ("nginx", "nginx"),
    ("wrk", "wrk"),
    ("ip", "iproute2"),
    ("runuser", "util-linux"),
    ("bpftool", "bpftool"),
];

/// PostgreSQL's server programs: initdb, pg_ctl, psql and pgbench of one version.
pub struct Postgres {
    pub bin: PathBuf,
}

impl Postgres {
    pub fn program(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }
}

/// Fails naming every missing program and the packages to install.
pub fn check() -> Result<Postgres> {
    let mut missing: Vec<(&str, &str)> = ON_PATH
        .into_iter()
        .filter(|(program, _)| !installed(program))
        .collect();
    let postgres = postgres_bin();
    if postgres.is_none() {
        missing.push(("initdb, pg_ctl and pgbench", "postgresql"));
    }
    if let Some(postgres) = postgres.filter(|_| missing.is_empty()) {
        return Ok(Postgres { bin: postgres });
    }
    let programs: Vec<&str> = missing.iter().map(|m| m.0).collect();
    let mut packages: Vec<&str> = missing.iter().map(|m| m.1).collect();
    packages.dedup();
    bail!(
        "the lab needs {} (apt-get install {})",
        programs.join(", "),
        packages.join(" ")
    )
}
