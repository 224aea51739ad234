//! Real TLS stacks for the protocol matrix: servers outside the cgroup (Python's ssl on
//! OpenSSL, Go's crypto/tls) and clients inside it (curl on OpenSSL, Go's net/http).

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use crate::{output, TestCgroup};

/// The Go peer, built with the tests when Debian's golang was installed.
fn tlspeer() -> PathBuf {
    let path = env!("LIMITER_TLSPEER");
    assert!(
        !path.is_empty(),
        "the Go TLS peer was not built: install golang-go (apt-get install golang-go), then build the tests again"
    );
    PathBuf::from(path)
}

/// A self-signed certificate for 127.0.0.1, in a directory removed on drop.
pub struct Certificate(PathBuf);

impl Certificate {
    pub fn new() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "limiter-cert-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let status = Command::new(tlspeer()).arg("cert").arg(&dir).status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "cannot make a certificate"
        );
        Certificate(dir)
    }

    pub fn dir(&self) -> &Path {
        &self.0
    }
}

impl Default for Certificate {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Certificate {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A TLS server's implementation.
#[derive(Clone, Copy, Debug)]
pub enum TlsStack {
    /// Python's ssl module on OpenSSL: sends its session tickets after the client's Finished.
    OpenSsl,
    /// Go's crypto/tls: sends its ticket with its own Finished.
    Go,
}

/// How a [`TlsServer`] answers.
#[derive(Clone, Copy, Debug)]
pub struct Answers {
    pub tls: &'static str,
    pub first_byte_ms: u64,
    /// The time to first byte after [`TlsServer::slow_down`].
    pub slow_ms: u64,
    /// How long each answer streams after its first byte.
    pub stream_ms: u64,
    /// Go only: also offer HTTP/2.
    pub h2: bool,
}

impl Answers {
    pub fn tls(tls: &'static str, first_byte_ms: u64) -> Self {
        Answers {
            tls,
            first_byte_ms,
            slow_ms: first_byte_ms,
            stream_ms: 0,
            h2: false,
        }
    }
}

/// An HTTPS server on a loopback port, outside the cgroup; killed on drop.
pub struct TlsServer {
    pub addr: SocketAddr,
    child: Child,
}

impl TlsServer {
    pub fn start(stack: TlsStack, cert: &Certificate, answers: Answers) -> Self {
        let mut cmd = match stack {
            TlsStack::OpenSsl => {
                let mut cmd = Command::new("python3");
                cmd.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/peers/tls_server.py"));
                cmd
            }
            TlsStack::Go => {
                let mut cmd = Command::new(tlspeer());
                cmd.arg("serve");
                if !answers.h2 {
                    cmd.arg("--h1");
                }
                cmd
            }
        };
        cmd.arg("--dir")
            .arg(cert.dir())
            .args(["--tls", answers.tls])
            .args(["--first-byte-ms", &answers.first_byte_ms.to_string()])
            .args(["--slow-ms", &answers.slow_ms.to_string()])
            .args(["--stream-ms", &answers.stream_ms.to_string()])
            .stdout(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {stack:?} server: {e}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line
            .strip_prefix("listening ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the {stack:?} server said {line:?}"));
        TlsServer {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            child,
        }
    }

    pub fn url(&self) -> String {
        format!("https://{}/", self.addr)
    }

    /// Answers after `slow_ms` from now on.
    pub fn slow_down(&self) {
        self.signal(libc::SIGUSR1);
    }

    /// Answers after `first_byte_ms` again.
    pub fn speed_up(&self) {
        self.signal(libc::SIGUSR2);
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill() on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `cmd` to completion and returns its output lines; panics if it fails.
fn output_lines(cmd: Command, what: &str) -> Vec<String> {
    output(cmd)
        .unwrap_or_else(|e| panic!("{what}: {e:#}"))
        .lines()
        .map(str::to_string)
        .collect()
}

/// curl in the cgroup fetching `urls` one after another, on one connection when they are of
/// one server (curl reuses it); `args` come first. Returns each transfer's time to first
/// byte in nanoseconds, as curl measured it from before it connected.
pub fn curl_ttfb(cgroup: &TestCgroup, args: &[&str], urls: &[String]) -> Vec<u64> {
    let mut cmd = cgroup.command(Path::new("curl"));
    cmd.args(["--silent", "--show-error", "--insecure"])
        .args(args)
        .args(["--write-out", "%{time_starttransfer}\\n"]);
    for url in urls {
        cmd.args(["--output", "/dev/null", url]);
    }
    output_lines(cmd, "curl")
        .iter()
        .map(|l| (l.parse::<f64>().unwrap_or_else(|_| panic!("curl said {l}")) * 1e9) as u64)
        .collect()
}

/// Go's net/http client in the cgroup: `requests` to `url` one after another, on one
/// keep-alive connection unless `new_connections`, offering HTTP/2 with `h2`. Returns each
/// one's time to first byte in nanoseconds, from before the request was written.
pub fn go_get(
    cgroup: &TestCgroup,
    url: &str,
    requests: usize,
    h2: bool,
    new_connections: bool,
) -> Vec<u64> {
    let mut cmd = cgroup.command(&tlspeer());
    cmd.args(["get", "--url", url, "--requests", &requests.to_string()]);
    if h2 {
        cmd.arg("--h2");
    }
    if new_connections {
        cmd.arg("--new-connections");
    }
    output_lines(cmd, "the Go client")
        .iter()
        .map(|l| {
            l.strip_prefix("ttfb_ns ")
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("the Go client said {l}"))
        })
        .collect()
}

/// Go's net/http client in the cgroup sending `rate` requests a second for `seconds`,
/// whatever the answers take (open loop), each on an idle keep-alive connection or a new
/// one: what a service receiving that traffic sends on. Killed on drop.
pub struct GoLoad(Child);

impl GoLoad {
    pub fn start(cgroup: &TestCgroup, url: &str, rate: u32, seconds: u32) -> Self {
        let child = cgroup
            .command(&tlspeer())
            .args(["load", "--url", url, "--rate", &rate.to_string()])
            .args(["--seconds", &seconds.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start the Go load");
        GoLoad(child)
    }
}

impl Drop for GoLoad {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
