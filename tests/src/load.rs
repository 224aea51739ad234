//! Load generators run inside the cgroup: curl keeping requests in flight, and the
//! probe's churn through every way a connection ends.

use std::{
    net::SocketAddr,
    path::Path,
    process::{Child, Stdio},
};

use crate::{
    probe::Probe,
    upstream::{closed_port, Behaviour, Blackhole, Upstream},
    TestCgroup,
};

/// curl inside the cgroup keeping `connections` requests in flight, a new connection per
/// request (a refused connect fails that transfer only), until dropped. HTTP/1.1 only; an
/// HTTPS upstream's certificate is not checked (the tests' own).
pub struct CurlLoad(Child);

impl CurlLoad {
    pub fn start(cgroup: &TestCgroup, url: &str, connections: usize) -> Self {
        let child = cgroup
            .command(Path::new("curl"))
            .args(["--silent", "--insecure", "--http1.1"])
            .args(["--parallel", "--parallel-immediate"])
            .args(["--parallel-max", &connections.to_string()])
            .args(["--header", "Connection: close", "--output", "/dev/null"])
            .arg(format!("{url}[1-100000000]"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("curl is not installed (apt-get install curl)");
        CurlLoad(child)
    }
}

impl Drop for CurlLoad {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Upstreams for every way a connection can end, driven by the probe's `churn`.
pub struct Endings {
    pub echo: Upstream,
    pub closer: Upstream,
    pub refused: SocketAddr,
    pub blackhole: Blackhole,
}

impl Endings {
    pub fn new() -> Self {
        Endings {
            echo: Upstream::start("127.0.0.1:0", Behaviour::Echo),
            closer: Upstream::start("127.0.0.1:0", Behaviour::Close),
            refused: closed_port(),
            blackhole: Blackhole::new(),
        }
    }

    /// `rounds` x 5 endings from inside the cgroup (client close, server FIN/RST, client
    /// RST, abandoned non-blocking connect, SYN refused), plus `syn_timeouts` SYNs left
    /// to time out; returns when all are done.
    pub fn run(&self, cgroup: &TestCgroup, rounds: usize, syn_timeouts: usize) {
        let mut churn = Probe::spawn(
            cgroup,
            &[
                "churn",
                "--echo",
                &self.echo.addr.to_string(),
                "--closer",
                &self.closer.addr.to_string(),
                "--refused",
                &self.refused.to_string(),
                "--blackhole",
                &self.blackhole.addr.to_string(),
                "--rounds",
                &rounds.to_string(),
                "--syn-timeouts",
                &syn_timeouts.to_string(),
            ],
        );
        assert_eq!(churn.lines_until_exit(), ["done"]);
    }
}

impl Default for Endings {
    fn default() -> Self {
        Self::new()
    }
}
