//! The programs the lab drives, all from Debian's packages, checked before anything starts.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

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

/// Debian keeps the server programs in /usr/lib/postgresql/VERSION/bin, off PATH unless
/// linked there; the newest version wins.
fn postgres_bin() -> Option<PathBuf> {
    let complete = |dir: &Path| {
        ["initdb", "pg_ctl", "psql", "pgbench", "postgres"]
            .iter()
            .all(|p| dir.join(p).is_file())
    };
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("initdb"))
            .find(|initdb| initdb.is_file())
            .and_then(|initdb| std::fs::canonicalize(initdb).ok())
            .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
    });
    if let Some(dir) = on_path.filter(|d| complete(d)) {
        return Some(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, dir)| complete(dir))
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir)
}
