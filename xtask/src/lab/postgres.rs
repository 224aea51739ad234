//! A PostgreSQL cluster of the lab's own: made by initdb in a temporary directory, run as
//! the postgres user on a loopback port, in a cgroup of its own so that every backend goes
//! with it.

use std::{
    net::{SocketAddr, TcpListener},
    path::PathBuf,
    process::Command,
};

use anyhow::{Context, Result};
use limiter_integration_tests::TestCgroup;
use tempfile::TempDir;

use super::tools::Postgres;
use crate::bench::process;

/// The system user the Debian package makes; the server refuses to run as root.
const USER: &str = "postgres";

pub struct Cluster {
    pub addr: SocketAddr,
    /// The server's programs, pgbench among them.
    pub bin: PathBuf,
    data: PathBuf,
    // Dropped last: the cluster's processes, then its files.
    cgroup: TestCgroup,
    _dir: TempDir,
}

impl Cluster {
    pub fn start(postgres: &Postgres) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("limiter-lab-pg")
            .tempdir()?;
        let (uid, gid) = user_ids(USER)?;
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        let data = dir.path().join("data");
        let cgroup = TestCgroup::new("lab-postgres");
        let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let cluster = Cluster {
            addr,
            bin: postgres.bin.clone(),
            data: data.clone(),
            cgroup,
            _dir: dir,
        };
        cluster.as_postgres(&postgres.program("initdb"), |cmd| {
            cmd.arg("--pgdata").arg(&data).args([
                "--auth",
                "trust",
                "--username",
                USER,
                "--no-sync",
            ]);
        })?;
        // Its socket file in its own directory, not in the system's /run/postgresql.
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories='{}' \
             -c max_connections=200 -c fsync=off",
            addr.port(),
            data.display()
        );
        cluster.as_postgres(&postgres.program("pg_ctl"), |cmd| {
            cmd.arg("--pgdata")
                .arg(&data)
                .arg("--log")
                .arg(data.join("server.log"))
                .args(["--wait", "--options", &options, "start"]);
        })?;
        Ok(cluster)
    }

    /// Runs `program` as the postgres user in the cluster's cgroup, to completion.
    fn as_postgres(
        &self,
        program: &std::path::Path,
        args: impl FnOnce(&mut Command),
    ) -> Result<String> {
        let mut cmd = self.cgroup.command("runuser".as_ref());
        cmd.args(["-u", USER, "--"]).arg(program);
        args(&mut cmd);
        process::output(cmd)
    }

    /// One SQL statement, run with psql over TCP.
    pub fn sql(&self, statement: &str) -> Result<()> {
        let mut cmd = Command::new(self.bin.join("psql"));
        cmd.args([
            "--quiet",
            "--no-psqlrc",
            "--set",
            "ON_ERROR_STOP=1",
            "--command",
        ])
        .arg(statement)
        .args(self.connection_args());
        process::output(cmd).map(drop)
    }

    /// How clients reach it: host, port, user, and last the database (psql and pgbench
    /// both take it as their first argument that is not an option).
    pub fn connection_args(&self) -> Vec<String> {
        [
            "--host",
            &self.addr.ip().to_string(),
            "--port",
            &self.addr.port().to_string(),
            "--username",
            USER,
            USER,
        ]
        .map(String::from)
        .to_vec()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let stopped = self.as_postgres(&self.bin.join("pg_ctl"), |cmd| {
            cmd.arg("--pgdata")
                .arg(&self.data)
                .args(["--mode", "immediate", "--wait", "stop"]);
        });
        if let Err(e) = stopped {
            eprintln!("lab: pg_ctl stop failed, the cgroup's removal ends the server: {e}");
        }
    }
}

fn user_ids(name: &str) -> Result<(u32, u32)> {
    let c_name = std::ffi::CString::new(name)?;
    // SAFETY: getpwnam returns a pointer to static storage or null; read at once.
    let entry = unsafe { libc::getpwnam(c_name.as_ptr()) };
    // SAFETY: non-null means a valid passwd record.
    let entry = unsafe { entry.as_ref() }.with_context(|| {
        format!("no {name} user: it comes with Debian's postgresql package (apt-get install postgresql)")
    })?;
    Ok((entry.pw_uid, entry.pw_gid))
}
