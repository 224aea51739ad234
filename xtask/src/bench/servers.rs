//! nginx (the upstream) and HAProxy (the egress proxy), each with a configuration of its
//! own in a temporary directory, on loopback ports, in the servers' cgroup (never the
//! system services).

use std::{
    net::{SocketAddr, TcpListener, TcpStream},
    path::Path,
    process::{Child, Stdio},
};

use anyhow::{Context, Result};
use limiter_integration_tests::{wait_until, TestCgroup};
use tempfile::TempDir;

use super::process;

/// A server process; killed on drop (the cgroup's removal takes any children it left).
pub struct Server {
    pub addr: SocketAddr,
    child: Child,
    dir: TempDir,
}

impl Server {
    /// Its temporary directory: configuration, logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What an nginx of ours does: its worker count, lines for its `http` block, and the body
/// of its one `location /`. Relative paths in them are inside its temporary directory.
pub struct Nginx<'a> {
    pub workers: usize,
    pub http: &'a str,
    pub location: &'a str,
    /// Serve HTTPS, TLS 1.3 only, with the certificate and key of this directory.
    pub tls: Option<&'a Path>,
}

/// nginx answering every request with a small body, on one worker; over TLS 1.3 with
/// the certificate of `tls`.
pub fn nginx(cgroup: &TestCgroup, tls: Option<&Path>) -> Result<Server> {
    Nginx {
        workers: 1,
        http: "access_log off;",
        location: "return 200 \"ok\\n\";",
        tls,
    }
    .start(cgroup)
}

impl Nginx<'_> {
    pub fn start(&self, cgroup: &TestCgroup) -> Result<Server> {
        let dir = tempfile::tempdir()?;
        let addr = free_port()?;
        let d = dir.path().display();
        let Nginx {
            workers,
            http,
            location,
            tls,
        } = self;
        let listen = match tls {
            Some(cert) => format!(
                "{addr} ssl;\n    ssl_protocols TLSv1.3;\n    \
                 ssl_certificate {c}/cert.pem;\n    ssl_certificate_key {c}/key.pem",
                c = cert.display()
            ),
            None => addr.to_string(),
        };
        let config = format!(
            "daemon off;\nworker_processes {workers};\npid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n  {http}\n  keepalive_requests 1000000;\n  keepalive_timeout 300s;\n\
             \x20 client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             \x20 fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n\
             \x20 scgi_temp_path {d}/scgi;\n\
             \x20 server {{\n    listen {listen};\n    location / {{ {location} }}\n  }}\n}}\n"
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, config)?;
        let mut cmd = process::in_cgroup(cgroup, Path::new("nginx"));
        cmd.arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"));
        cmd.arg("-c").arg(&path);
        start(cmd, addr, dir)
    }
}

/// HAProxy in front of `upstream`, with `maxconn` per server: the proxy's concurrency cap.
pub fn haproxy(cgroup: &TestCgroup, upstream: SocketAddr, maxconn: u32) -> Result<Server> {
    let dir = tempfile::tempdir()?;
    let addr = free_port()?;
    let config = format!(
        "global\n  nbthread 1\n  maxconn 4096\n\n\
         defaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\n\
         frontend egress\n  bind {addr}\n  default_backend upstream\n\n\
         backend upstream\n  server nginx {upstream} maxconn {maxconn}\n"
    );
    let path = dir.path().join("haproxy.cfg");
    std::fs::write(&path, config)?;
    let mut cmd = process::in_cgroup(cgroup, Path::new("haproxy"));
    // -db: stay in the foreground, a child of the benchmark.
    cmd.arg("-db").arg("-f").arg(&path);
    start(cmd, addr, dir)
}

fn start(mut cmd: std::process::Command, addr: SocketAddr, dir: TempDir) -> Result<Server> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let server = Server { addr, child, dir };
    wait_until(&format!("{cmd:?} to listen on {addr}"), || {
        TcpStream::connect(addr).is_ok()
    });
    Ok(server)
}

/// A loopback port nothing listens on right now.
fn free_port() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}
