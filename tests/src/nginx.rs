//! nginx for a test: one server block of the test's, outside the cgroup as an upstream, or
//! inside it as a client (a proxy).

use std::{
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command},
};

use crate::{wait_until, TestCgroup};

/// nginx serving `server` (the directives of one server block, `listen` included as
/// `listen {addr}`, which is filled in) on a loopback port; stopped on drop.
pub struct Nginx {
    pub addr: SocketAddr,
    dir: PathBuf,
    child: Child,
}

impl Nginx {
    /// `http` goes in the http block (zones, maps), `server` in the server block; `{addr}`
    /// in either is the address it listens on.
    pub fn start(http: &str, server: &str) -> Self {
        Self::start_in(None, http, server)
    }

    /// The same, its process in `cgroup` when there is one: what it connects to is limited.
    pub fn start_in(cgroup: Option<&TestCgroup>, http: &str, server: &str) -> Self {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let dir = std::env::temp_dir().join(format!(
            "limiter-nginx-{}-{}",
            std::process::id(),
            addr.port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.display();
        let (http, server) = (
            http.replace("{addr}", &addr.to_string()),
            server.replace("{addr}", &addr.to_string()),
        );
        let config = format!(
            "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid;
             error_log {d}/error.log; events {{ worker_connections 1024; }}
             http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d};
               fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};
               {http}
               server {{ {server} }} }}"
        );
        std::fs::write(dir.join("nginx.conf"), config).unwrap();
        let program = Path::new("nginx");
        let child = cgroup
            .map_or_else(|| Command::new(program), |cg| cg.command(program))
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-p")
            .arg(&dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .spawn()
            .expect("nginx is not installed (apt-get install nginx)");
        wait_until("nginx to listen", || TcpStream::connect(addr).is_ok());
        Nginx { addr, dir, child }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
