//! A PostgreSQL cluster of its own: made by initdb in a temporary directory, run as the
//! postgres user on a loopback port, in a cgroup of its own so that every backend goes
//! with it. Optionally with TLS, for clients asking `sslmode=require`.

use std::{
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};

use crate::{process::output, TestCgroup};

/// The system user the Debian package makes; the server refuses to run as root.
const USER: &str = "postgres";

/// Debian keeps the server programs in /usr/lib/postgresql/VERSION/bin, off PATH unless
/// linked there; the newest version wins.
pub fn postgres_bin() -> Option<PathBuf> {
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

pub struct Cluster {
    pub addr: SocketAddr,
    /// The server's programs, pgbench among them.
    pub bin: PathBuf,
    data: PathBuf,
    // Dropped last: the cluster's processes, then its files.
    cgroup: TestCgroup,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// A cluster of the programs in `bin`; with `tls`, a directory holding cert.pem and
    /// key.pem, it also speaks TLS.
    pub fn start(bin: &Path, tls: Option<&Path>) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("limiter-pg").tempdir()?;
        let (uid, gid) = user_ids(USER)?;
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        let data = dir.path().join("data");
        let cgroup = TestCgroup::new("postgres");
        let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let cluster = Cluster {
            addr,
            bin: bin.to_path_buf(),
            data: data.clone(),
            cgroup,
            _dir: dir,
        };
        cluster.as_postgres("initdb", |cmd| {
            cmd.arg("--pgdata").arg(&data).args([
                "--auth",
                "trust",
                "--username",
                USER,
                "--no-sync",
            ]);
        })?;
        // Its socket file in its own directory, not in the system's /run/postgresql.
        let mut options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories='{}' \
             -c max_connections=200 -c fsync=off",
            addr.port(),
            data.display()
        );
        if let Some(tls) = tls {
            // The server reads its key only if no one else may.
            for (from, to) in [("cert.pem", "server.crt"), ("key.pem", "server.key")] {
                let to = data.join(to);
                std::fs::copy(tls.join(from), &to)?;
                std::os::unix::fs::chown(&to, Some(uid), Some(gid))?;
                std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
            }
            options.push_str(" -c ssl=on");
        }
        cluster.as_postgres("pg_ctl", |cmd| {
            cmd.arg("--pgdata")
                .arg(&data)
                .arg("--log")
                .arg(data.join("server.log"))
                .args(["--wait", "--options", &options, "start"]);
        })?;
        Ok(cluster)
    }

    /// Runs `program` of the cluster's as the postgres user in its cgroup, to completion.
    fn as_postgres(&self, program: &str, args: impl FnOnce(&mut Command)) -> Result<String> {
        let mut cmd = self.cgroup.command("runuser".as_ref());
        cmd.args(["-u", USER, "--"]).arg(self.bin.join(program));
        args(&mut cmd);
        output(cmd)
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
        output(cmd).map(drop)
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
        let stopped = self.as_postgres("pg_ctl", |cmd| {
            cmd.arg("--pgdata")
                .arg(&self.data)
                .args(["--mode", "immediate", "--wait", "stop"]);
        });
        if let Err(e) = stopped {
            eprintln!("pg_ctl stop failed, the cgroup's removal ends the server: {e}");
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
