//! The kit for tests against the real kernel: a cgroup of their own, loopback upstreams,
//! the agent and client processes, and cleanup that runs even when a test fails.

use std::{
    ffi::CString,
    io::{BufRead, BufReader, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio},
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc, Arc, Mutex,
    },
    time::{Duration, Instant},
};

/// A binary of this package: cargo puts them one level above the test executables.
fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().join(name)
}

pub fn agent_bin() -> PathBuf {
    bin("limiter-agent-under-test")
}

pub fn probe_bin() -> PathBuf {
    bin("limiter-probe")
}

pub use limiter_kernel_test::kernel_test;

/// Name of the variable that lets a runner without root opt out of the kernel tests.
pub const SKIP_VAR: &str = "LIMITER_SKIP_KERNEL_TESTS";

/// Bound on waiting for something that must happen; it guards against hangs only.
const HANG_GUARD: Duration = Duration::from_secs(150);

/// Called first by every `#[kernel_test]`: panics with the fix when the test cannot run.
pub fn require_root() {
    if std::env::var_os(SKIP_VAR).is_some_and(|v| v == "1") {
        panic!("{SKIP_VAR}=1 was not set when the tests were built, so they were not marked ignored: rebuild with it set");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!("kernel tests need root: run them with sudo, or build and run them with {SKIP_VAR}=1 to skip them");
    }
}

/// Polls `done` until it holds; panics naming `what` if it never does.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < HANG_GUARD, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn cgroup2_mount() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .expect("no cgroup v2 mount in /proc/mounts")
}

/// A cgroup made for one test; on drop its processes are killed and it is removed.
pub struct TestCgroup {
    path: PathBuf,
}

impl TestCgroup {
    pub fn new(tag: &str) -> Self {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "limiter-test-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        Self::create(cgroup2_mount().join(name))
    }

    /// Removes the (empty) cgroup and creates it again, as systemd does on a service restart.
    pub fn recreate(&self) {
        std::fs::remove_dir(&self.path).expect("the cgroup must be empty to be removed");
        std::fs::create_dir(&self.path).unwrap();
    }

    fn create(path: PathBuf) -> Self {
        std::fs::create_dir(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TestCgroup { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The agent's default pin directory for this cgroup.
    pub fn pin_dir(&self) -> PathBuf {
        let rel = self.path.strip_prefix(cgroup2_mount()).unwrap();
        Path::new("/sys/fs/bpf/limiter").join(rel.to_string_lossy().replace('-', "\\x2d"))
    }

    /// A command whose process joins this cgroup before it execs.
    pub fn command(&self, program: &Path) -> Command {
        let procs =
            CString::new(self.path.join("cgroup.procs").to_string_lossy().as_bytes()).unwrap();
        let mut cmd = Command::new(program);
        // SAFETY: only async-signal-safe calls (open, write, close) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if written != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path.join("cgroup.kill"), "1");
        let populated = || {
            std::fs::read_to_string(self.path.join("cgroup.events"))
                .map(|e| e.contains("populated 1"))
                .unwrap_or(false)
        };
        let start = Instant::now();
        while populated() && start.elapsed() < HANG_GUARD {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir(&self.path);
        // What an agent killed mid-test leaves: its pins (its lock file blocks nobody).
        let _ = std::fs::remove_dir_all(self.pin_dir());
    }
}

/// How a loopback upstream treats the connections it accepts.
#[derive(Clone, Copy)]
pub enum Behaviour {
    /// Keep them open until the client closes.
    Hold,
    /// Echo what arrives until the client closes.
    Echo,
    /// Close at once, alternately with FIN and with RST.
    Close,
    /// Answer each framed request (4-byte little-endian length, then the body) with a
    /// first byte after `first_byte`, and the rest of the response after `hold`.
    Respond {
        first_byte: Duration,
        hold: Duration,
    },
    /// Read one framed request, then reset the connection.
    ResetAfterRequest,
    /// Read one framed request, then close the connection (FIN), as a server answers a
    /// client's goodbye.
    CloseAfterRequest,
}

/// Response size of `Behaviour::Respond`, which the probe knows too.
const RESPONSE_BYTES: usize = 16;

/// Reads one framed request; false at end of stream.
fn read_request(stream: &mut TcpStream) -> bool {
    use std::io::Read;
    let mut len = [0u8; 4];
    if stream.read_exact(&mut len).is_err() {
        return false;
    }
    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
    stream.read_exact(&mut body).is_ok()
}

fn serve(mut stream: TcpStream, behaviour: Behaviour) {
    match behaviour {
        Behaviour::Respond { first_byte, hold } => {
            while read_request(&mut stream) {
                std::thread::sleep(first_byte);
                let _ = stream.write_all(&[0]);
                std::thread::sleep(hold);
                let _ = stream.write_all(&[0; RESPONSE_BYTES - 1]);
            }
        }
        Behaviour::CloseAfterRequest => {
            read_request(&mut stream);
        }
        Behaviour::ResetAfterRequest => {
            if read_request(&mut stream) {
                let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
            }
        }
        Behaviour::Echo => {
            let mut reader = stream.try_clone().unwrap();
            let _ = std::io::copy(&mut reader, &mut stream);
        }
        Behaviour::Hold | Behaviour::Close => unreachable!("served inline"),
    }
}

/// A loopback server in the test process (outside the limited cgroup).
pub struct Upstream {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl Upstream {
    pub fn start(bind: &str, behaviour: Behaviour) -> Self {
        Self::serve(TcpListener::bind(bind).unwrap(), behaviour)
    }

    fn serve(listener: TcpListener, behaviour: Behaviour) -> Self {
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let held = Arc::new(Mutex::new(Vec::new()));
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                counter.fetch_add(1, Ordering::SeqCst);
                match behaviour {
                    Behaviour::Hold => held.lock().unwrap().push(stream),
                    Behaviour::Echo
                    | Behaviour::Respond { .. }
                    | Behaviour::ResetAfterRequest
                    | Behaviour::CloseAfterRequest => {
                        std::thread::spawn(move || serve(stream, behaviour));
                    }
                    Behaviour::Close => {
                        if n % 2 == 1 {
                            let _ =
                                socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                        }
                        drop(stream);
                    }
                }
            }
        });
        Upstream { addr, accepted }
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// A loopback HTTP/1.1 server whose response delay can be changed while it runs.
pub struct SlowHttp {
    pub addr: SocketAddr,
    delay_ms: Arc<std::sync::atomic::AtomicU64>,
}

impl SlowHttp {
    pub fn start(delay_ms: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let delay = Arc::new(std::sync::atomic::AtomicU64::new(delay_ms));
        let shared = delay.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let delay = shared.clone();
                std::thread::spawn(move || serve_http(stream, &delay));
            }
        });
        SlowHttp {
            addr,
            delay_ms: delay,
        }
    }

    pub fn set_delay_ms(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

/// Serves HTTP/1.1 requests on `stream`, each answered after `delay_ms`, until the client
/// closes or asks to.
pub fn serve_http(stream: TcpStream, delay_ms: &std::sync::atomic::AtomicU64) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut close = false;
        let mut line = String::new();
        // The request head, up to its blank line; bodies are not expected.
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => close |= line.to_ascii_lowercase().starts_with("connection: close"),
            }
        }
        std::thread::sleep(Duration::from_millis(delay_ms.load(Ordering::SeqCst)));
        let head = if close { "Connection: close\r\n" } else { "" };
        let response = format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n{head}\r\nok");
        if writer.write_all(response.as_bytes()).is_err() || close {
            return;
        }
    }
}

/// A network namespace of the test's own, reached from the host over a veth pair: a real
/// interface rather than loopback. Addresses are from 198.18.0.0/15, the range set aside
/// for network tests; no traffic leaves the machine.
pub struct TestNetns {
    name: String,
    host_if: String,
    pub host_addr: std::net::Ipv4Addr,
    pub peer_addr: std::net::Ipv4Addr,
}

impl TestNetns {
    pub fn new() -> Self {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id() as usize;
        let name = format!("limiter-test-{pid}-{n}");
        let (host_if, peer_if) = (format!("lt{pid}h{n}"), format!("lt{pid}p{n}"));
        // A /24 per namespace, picked by process and sequence: two processes making their
        // first namespace at once must not put the same subnet on two interfaces.
        let subnet = (pid * 8 + n) % 512;
        let (second, third) = ((18 + subnet / 256) as u8, (subnet % 256) as u8);
        let net = TestNetns {
            name: name.clone(),
            host_if: host_if.clone(),
            host_addr: std::net::Ipv4Addr::new(198, second, third, 1),
            peer_addr: std::net::Ipv4Addr::new(198, second, third, 2),
        };
        let ip = |args: &[&str]| {
            let status = Command::new("ip")
                .args(args)
                .status()
                .expect("ip (iproute2) is not installed");
            assert!(status.success(), "ip {args:?} failed");
        };
        ip(&["netns", "add", &name]);
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &peer_if, "netns", &name,
        ]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", net.host_addr),
            "dev",
            &host_if,
        ]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&[
            "-n",
            &name,
            "addr",
            "add",
            &format!("{}/24", net.peer_addr),
            "dev",
            &peer_if,
        ]);
        ip(&["-n", &name, "link", "set", &peer_if, "up"]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        net
    }

    /// Starts an upstream inside the namespace, listening on its veth address.
    pub fn upstream(&self, behaviour: Behaviour) -> Upstream {
        Upstream::serve(self.listener(), behaviour)
    }

    /// A listener inside the namespace on its veth address; a socket stays in the namespace
    /// it was made in, so whichever thread serves it.
    pub fn listener(&self) -> TcpListener {
        let path = format!("/var/run/netns/{}", self.name);
        let bind = format!("{}:0", self.peer_addr);
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            let ns = std::fs::File::open(path).unwrap();
            // SAFETY: setns moves only this thread, which exists to bind the listener.
            assert_eq!(
                unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
                0
            );
            TcpListener::bind(bind).unwrap()
        })
        .join()
        .unwrap()
    }
}

impl Default for TestNetns {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        // Deleting one end of the pair deletes the other at once; the namespace itself goes
        // once the last socket made in it is closed.
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// curl inside the cgroup keeping `connections` requests in flight, a new connection per
/// request (a refused connect fails that transfer only), until dropped.
pub struct CurlLoad(Child);

impl CurlLoad {
    pub fn start(cgroup: &TestCgroup, upstream: &SlowHttp, connections: usize) -> Self {
        let child = cgroup
            .command(Path::new("curl"))
            .args(["--silent", "--parallel", "--parallel-immediate"])
            .args(["--parallel-max", &connections.to_string()])
            .args(["--header", "Connection: close", "--output", "/dev/null"])
            .arg(format!("{}[1-100000000]", upstream.url()))
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

/// An address nobody listens on (a SYN to it is answered by a RST), free to bind.
pub fn closed_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
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

/// A listener whose accept queue is full: SYNs to it are dropped, so connects time out.
pub struct Blackhole {
    pub addr: SocketAddr,
    _listener: TcpListener,
    _filler: TcpStream,
}

impl Blackhole {
    pub fn new() -> Self {
        use std::os::fd::AsRawFd;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        // SAFETY: listen() again on our own socket only shrinks its backlog: with 0, one
        // queued connection fills the accept queue.
        unsafe { libc::listen(listener.as_raw_fd(), 0) };
        let addr = listener.local_addr().unwrap();
        let filler = TcpStream::connect(addr).unwrap();
        Blackhole {
            addr,
            _listener: listener,
            _filler: filler,
        }
    }
}

impl Default for Blackhole {
    fn default() -> Self {
        Self::new()
    }
}

/// A running agent; SIGTERM on drop.
pub struct Agent {
    child: Child,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Agent {
    /// Starts the agent on `cgroup` and waits until it says it is attached.
    pub fn start(cgroup: &TestCgroup, args: &[&str]) -> Self {
        Self::start_command(Command::new(agent_bin()), cgroup, args)
    }

    pub fn start_command(mut cmd: Command, cgroup: &TestCgroup, args: &[&str]) -> Self {
        if !cmd.get_envs().any(|(k, _)| k == "RUST_LOG") {
            cmd.env("RUST_LOG", "info");
        }
        let mut child = cmd
            .arg("--cgroup")
            .arg(cgroup.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start the agent");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[agent] {line}");
                let attached = line.contains("limiter attached");
                // Logged before the start returns, so the test can read that line too.
                sink.lock().unwrap().push(line);
                if attached {
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(HANG_GUARD).is_err() {
            let _ = child.kill();
            let status = child.wait().unwrap();
            panic!(
                "the agent did not attach ({status}): {:?}",
                log.lock().unwrap()
            );
        }
        Agent { child, log }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Whether the agent has logged a line containing every one of `texts`.
    pub fn logged(&self, texts: &[&str]) -> bool {
        let log = self.log.lock().unwrap();
        log.iter().any(|l| texts.iter().all(|t| l.contains(t)))
    }

    /// The latency signals the agent logged (start it with `signal_logging()`).
    pub fn signals(&self) -> Vec<LoggedSignal> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|v| v["target"] == "limiter_user::signals")
            .map(|v| LoggedSignal {
                kind: v["kind"].as_str().unwrap_or_default().to_string(),
                destination: v["destination"]
                    .as_str()
                    .unwrap_or_default()
                    .parse()
                    .unwrap(),
                value_ns: v["value_ns"].as_u64().unwrap_or_default(),
                inflight: v["inflight"].as_u64().unwrap_or_default(),
            })
            .collect()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill() on our own child's pid.
        unsafe { libc::kill(self.pid(), sig) };
    }

    /// SIGTERM, then the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        self.child.wait().unwrap()
    }

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal(libc::SIGCONT);
            self.signal(libc::SIGTERM);
            let _ = self.child.wait();
        }
    }
}

/// One latency signal from the agent's debug log.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedSignal {
    pub kind: String,
    pub destination: SocketAddr,
    pub value_ns: u64,
    pub inflight: u64,
}

/// An agent command that logs every latency signal as a JSON line.
pub fn signal_logging() -> Command {
    let mut cmd = Command::new(agent_bin());
    cmd.env("RUST_LOG", "info,limiter_user::signals=debug")
        .args(["--log-format", "json"]);
    cmd
}

/// Runs the agent binary with `args` (status, detach, a failing run...).
pub fn agent_command(args: &[&str]) -> Output {
    Command::new(agent_bin())
        .args(args)
        .output()
        .expect("cannot run the agent")
}

/// `status --json` for the cgroup: the object with `agent`, `globals`, `destinations`.
pub fn status_report(cgroup: &TestCgroup) -> serde_json::Value {
    let out = agent_command(&[
        "status",
        "--cgroup",
        &cgroup.path().to_string_lossy(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status --json is not JSON")
}

/// The destinations of `status --json`, one object per row.
pub fn status(cgroup: &TestCgroup) -> Vec<serde_json::Value> {
    match status_report(cgroup)
        .get_mut("destinations")
        .map(serde_json::Value::take)
    {
        Some(serde_json::Value::Array(rows)) => rows,
        other => panic!("status --json has no destinations array: {other:?}"),
    }
}

/// One of the `globals` of `status --json`.
pub fn global(cgroup: &TestCgroup, name: &str) -> u64 {
    status_report(cgroup)["globals"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no global `{name}` in status --json"))
}

/// The status row of one destination.
pub fn row(cgroup: &TestCgroup, dest: SocketAddr) -> Option<serde_json::Value> {
    status(cgroup)
        .into_iter()
        .find(|r| r["address"] == dest.ip().to_string() && r["port"] == dest.port())
}

pub fn field(cgroup: &TestCgroup, dest: SocketAddr, name: &str) -> i64 {
    row(cgroup, dest).unwrap_or_else(|| panic!("{dest} is not in status"))[name]
        .as_i64()
        .unwrap_or_else(|| panic!("{name} is not a number"))
}

/// A destination's value in the pinned `dests` map as bpftool dumps it, fields named by BTF.
pub fn dests_entry(cgroup: &TestCgroup, dest: SocketAddr) -> Option<serde_json::Value> {
    let out = Command::new("bpftool")
        .args(["--json", "map", "dump", "pinned"])
        .arg(cgroup.pin_dir().join("dests"))
        .output()
        .expect("bpftool is not installed (apt-get install bpftool)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The key's address: IPv6 (IPv4 v4-mapped) as four words in network byte order.
    let ip = match dest.ip() {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        std::net::IpAddr::V6(v6) => v6,
    };
    let words: Vec<u32> = ip
        .octets()
        .chunks_exact(4)
        .map(|w| u32::from_ne_bytes(w.try_into().unwrap()))
        .collect();
    let entries: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    entries
        .into_iter()
        .map(|e| e["formatted"].clone())
        .find(|e| e["key"]["port"] == dest.port() && e["key"]["addr"] == serde_json::json!(words))
        .map(|e| e["value"].clone())
}

/// A client process inside the cgroup.
pub struct Probe {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Probe {
    pub fn spawn(cgroup: &TestCgroup, args: &[&str]) -> Self {
        let mut child = cgroup
            .command(&probe_bin())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("cannot start the probe");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Probe {
            child,
            stdin,
            stdout,
        }
    }

    /// Opens `count` connections to `to` and returns the outcome of each ("ok", "err N").
    pub fn hold(cgroup: &TestCgroup, to: SocketAddr, count: usize) -> (Self, Vec<String>) {
        Self::hold_with(cgroup, "hold", to, count)
    }

    pub fn hold_with(
        cgroup: &TestCgroup,
        how: &str,
        to: SocketAddr,
        count: usize,
    ) -> (Self, Vec<String>) {
        let mut probe = Self::spawn(
            cgroup,
            &[how, "--to", &to.to_string(), "--count", &count.to_string()],
        );
        let lines = probe.lines_until("ready");
        (probe, lines)
    }

    /// Output lines up to (not including) `end`.
    pub fn lines_until(&mut self, end: &str) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).unwrap();
            assert!(n > 0, "the probe exited before `{end}`: {lines:?}");
            let line = line.trim_end().to_string();
            if line == end {
                return lines;
            }
            lines.push(line);
        }
    }

    /// Every output line, once the probe has exited successfully.
    pub fn lines_until_exit(&mut self) -> Vec<String> {
        drop(self.stdin.take());
        let lines: Vec<String> = (&mut self.stdout).lines().map_while(Result::ok).collect();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the probe failed: {status}");
        lines
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Closes the held connections by letting the probe exit; returns once it has.
    pub fn release(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the probe failed: {status}");
    }

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Counts outcomes: (successes, ECONNREFUSED, anything else).
pub fn tally(lines: &[String]) -> (usize, usize, usize) {
    let ok = lines
        .iter()
        .filter(|l| *l == "ok" || l.starts_with("ok "))
        .count();
    let refused = lines
        .iter()
        .filter(|l| **l == format!("err {}", libc::ECONNREFUSED))
        .count();
    (ok, refused, lines.len() - ok - refused)
}

/// The addresses `hold-peername` reported, one per connection that succeeded.
pub fn peernames(lines: &[String]) -> Vec<SocketAddr> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("ok "))
        .map(|a| a.parse().unwrap())
        .collect()
}

/// Writes `text` to a fresh file and returns its path (removed with the returned guard).
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn new(name: &str, text: &str) -> Self {
        let path = std::env::temp_dir().join(format!("limiter-{}-{name}", std::process::id()));
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// bpftool lists no program attached to the cgroup.
pub fn assert_no_programs(cg: &TestCgroup) {
    let out = Command::new("bpftool")
        .args(["--json", "cgroup", "show"])
        .arg(cg.path())
        .output()
        .expect("bpftool is not installed (apt-get install bpftool)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.trim().is_empty() || text.trim() == "[]",
        "programs left attached: {text}"
    );
}

/// Runs the agent, expecting failure with one error line (besides log lines) that
/// contains `expected`.
pub fn assert_refused(cmd: &mut Command, expected: &str) {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "must fail: {stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("limiter-user: "))
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {stderr}");
    assert!(
        errors[0].contains(expected),
        "expected `{expected}` in: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
