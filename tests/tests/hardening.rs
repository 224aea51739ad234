//! What a workload, a resolver or a local user can try against the agent (root, real
//! kernel): none of it may crash the agent, free a limit or remove enforcement.

use std::{
    ffi::CString,
    net::UdpSocket,
    os::unix::{fs::MetadataExt, fs::PermissionsExt, process::CommandExt},
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use limiter_integration_tests::*;

/// Connects from the cgroup once to each of `count` fresh loopback destinations.
fn spray(cg: &TestCgroup, count: u32) {
    let port = closed_port().port().to_string();
    let mut probe = Probe::spawn(
        cg,
        &["spray", "--port", &port, "--count", &count.to_string()],
    );
    assert_eq!(probe.lines_until_exit(), [format!("attempted {count}")]);
}

#[kernel_test]
fn a_flood_of_destinations_neither_stops_the_agent_nor_frees_a_live_limit() {
    let cg = TestCgroup::new("flood");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let _agent = Agent::start(
        &cg,
        &[
            "--algorithm",
            "fixed",
            "--limit",
            "10",
            "--max-destinations",
            "64",
        ],
    );
    let (held, lines) = Probe::hold(&cg, up.addr, 10);
    assert_eq!(tally(&lines), (10, 0, 0));
    spray(&cg, 100);
    let (more, lines) = Probe::hold(&cg, up.addr, 10);
    assert_eq!(
        tally(&lines),
        (0, 10, 0),
        "the live destination keeps its limit"
    );
    let report = status_report(&cg);
    assert_eq!(report["agent"]["running"], true, "the agent is still there");
    assert!(report["globals"]["table_full"].as_u64().unwrap() > 0);
    assert_eq!(field(&cg, up.addr, "inflight"), 10);
    more.release();
    held.release();
}

/// A configuration naming `dest` as a destination of its own with a fixed limit of 2.
fn configured(dest: std::net::SocketAddr) -> String {
    format!(
        "[[destination]]\nname = \"configured\"\naddresses = [\"{dest}\"]\nalgorithm = \"fixed\"\nlimit = 2\n"
    )
}

#[kernel_test]
fn a_full_table_leaves_configured_destinations_limited_and_refuses_a_reload_whole() {
    let cg = TestCgroup::new("floodconf");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let config = TempFile::new(
        "floodconf.toml",
        &format!("max_destinations = 64\n{}", configured(up.addr)),
    );
    let agent = Agent::start(&cg, &["--config", &config.0.to_string_lossy()]);
    spray(&cg, 100);
    assert!(global(&cg, "table_full") > 0, "the flood filled the table");
    // Never connected to before the flood, yet limited.
    let (held, lines) = Probe::hold(&cg, up.addr, 10);
    assert_eq!(tally(&lines), (2, 8, 0));
    // A reload naming a destination the full table has no room for changes nothing.
    let late = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let reload = format!(
        "mode = \"shadow\"\nmax_destinations = 64\n{}{}",
        configured(up.addr),
        configured(late.addr).replace("\"configured\"", "\"late\"")
    );
    std::fs::write(&config.0, reload).unwrap();
    agent.signal(libc::SIGHUP);
    wait_until("the reload to be applied or refused", || {
        agent.logged(&["reload failed"]) || agent.logged(&["configuration reloaded"])
    });
    let (more, lines) = Probe::hold(&cg, up.addr, 1);
    assert_eq!(tally(&lines), (0, 1, 0), "still prod");
    assert_eq!(map_entry(&cg, "policies", late.addr), None);
    assert!(agent.logged(&["reload failed", "destination table is full"]));
    more.release();
    held.release();
}

#[kernel_test]
fn a_reload_that_does_not_fit_changes_nothing_in_the_kernel() {
    let cg = TestCgroup::new("reloadfit");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let config = TempFile::new("reloadfit.toml", "max_destinations = 64\n");
    let agent = Agent::start(
        &cg,
        &[
            "--config",
            &config.0.to_string_lossy(),
            "--algorithm",
            "fixed",
            "--limit",
            "3",
        ],
    );
    let (held, lines) = Probe::hold(&cg, up.addr, 3);
    assert_eq!(tally(&lines), (3, 0, 0));
    // A switch to shadow, with more excludes than the policy table holds.
    let excluded = (0..6000).map(|n| format!("\"127.2.{}.{}:80\"", n / 250, n % 250 + 1));
    let reload = format!(
        "mode = \"shadow\"\nmax_destinations = 64\n[[exclude]]\naddresses = [{}]\n",
        excluded.collect::<Vec<_>>().join(", ")
    );
    std::fs::write(&config.0, reload).unwrap();
    agent.signal(libc::SIGHUP);
    wait_until("the reload to be refused", || {
        agent.logged(&["reload failed"])
    });
    let (more, lines) = Probe::hold(&cg, up.addr, 3);
    assert_eq!(tally(&lines), (0, 3, 0), "still prod");
    let first = "127.2.0.1:80".parse().unwrap();
    assert_eq!(
        map_entry(&cg, "policies", first),
        None,
        "no exclusion written"
    );
    assert!(agent.logged(&["reload failed", "policy table"]));
    more.release();
    held.release();
}

#[kernel_test]
fn idle_destinations_are_forgotten_and_ones_holding_slots_or_configured_are_not() {
    let cg = TestCgroup::new("forget");
    let kept = closed_port();
    let config = TempFile::new(
        "forget.toml",
        &format!("forget_idle_secs = 1\n{}", configured(kept)),
    );
    let _agent = Agent::start(
        &cg,
        &[
            "--config",
            &config.0.to_string_lossy(),
            "--algorithm",
            "fixed",
            "--limit",
            "3",
        ],
    );
    let held = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let (probe, lines) = Probe::hold(&cg, held.addr, 3);
    assert_eq!(tally(&lines), (3, 0, 0));
    let (_, lines) = Probe::hold(&cg, kept, 1);
    assert_eq!(tally(&lines), (0, 1, 0));
    // Touched after the held and the configured one, so idle for less time than them.
    let refused = closed_port();
    let (_, lines) = Probe::hold(&cg, refused, 1);
    assert_eq!(tally(&lines), (0, 1, 0));
    wait_until("the idle destination to be forgotten", || {
        row(&cg, refused).is_none()
    });
    assert_eq!(
        field(&cg, held.addr, "inflight"),
        3,
        "still known, still full"
    );
    assert!(row(&cg, kept).is_some(), "configured: never forgotten");
    let (_, lines) = Probe::hold(&cg, held.addr, 1);
    assert_eq!(tally(&lines), (0, 1, 0));
    probe.release();
}

/// A bpffs of the test's own, as open as the agent used to mount /sys/fs/bpf.
struct OpenBpffs(PathBuf);

impl OpenBpffs {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("limiter-bpffs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "bpf", "-o", "mode=1777", "bpf"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "cannot mount a bpffs at {}",
            dir.display()
        );
        OpenBpffs(dir)
    }
}

impl Drop for OpenBpffs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Runs `program args` as the unprivileged user nobody.
fn as_nobody(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program)
        .args(args)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap()
}

#[kernel_test]
fn a_pin_directory_others_can_change_is_refused() {
    let cg = TestCgroup::new("pinowner");
    let cg_arg = cg.path().to_string_lossy().into_owned();
    let fs = OpenBpffs::new();
    // A local user gets there first.
    let theirs = fs.0.join("limiter");
    let made = as_nobody("mkdir", &["-m", "0777", &theirs.to_string_lossy()]);
    assert!(made.status.success());
    let pins = theirs.join("app");
    let run = |pins: &Path| {
        let mut cmd = Command::new(agent_bin());
        cmd.args(["--cgroup", &cg_arg, "--pin-dir"]).arg(pins);
        cmd
    };
    assert_refused(
        &mut run(&pins),
        "must be a directory owned by root with mode 0700",
    );
    assert!(!pins.exists(), "nothing created under their directory");
    // A symlink to a root-only directory is refused as well.
    let real = fs.0.join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = fs.0.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert_refused(&mut run(&link.join("app")), "a symlink");
    assert_no_programs(&cg);
}

#[kernel_test]
fn a_pin_directory_off_bpffs_is_never_touched() {
    let cg = TestCgroup::new("pinoff");
    let cg_arg = cg.path().to_string_lossy().into_owned();
    let precious = tempfile_dir("precious");
    std::fs::write(precious.join("data"), "keep me").unwrap();
    let dir = precious.to_string_lossy().into_owned();
    let mut run = Command::new(agent_bin());
    run.args(["--cgroup", &cg_arg, "--pin-dir", &dir]);
    assert_refused(&mut run, "is not on a bpffs");
    let mut detach = Command::new(agent_bin());
    detach.args(["detach", "--pin-dir", &dir]);
    assert_refused(&mut detach, "is not on a bpffs");
    assert_eq!(
        std::fs::read_to_string(precious.join("data")).unwrap(),
        "keep me"
    );
    std::fs::remove_dir_all(&precious).unwrap();
    assert_no_programs(&cg);
}

fn tempfile_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("limiter-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A directory removed with everything in it when the test ends.
struct RemovedAtEnd(PathBuf);

impl Drop for RemovedAtEnd {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[kernel_test]
fn another_tools_pins_named_like_the_agents_are_never_removed() {
    let cg = TestCgroup::new("foreignpins");
    let dir = RemovedAtEnd(PathBuf::from(format!(
        "/sys/fs/bpf/limiter-test-tool-{}",
        std::process::id()
    )));
    std::fs::create_dir(&dir.0).unwrap();
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o700)).unwrap();
    for name in ["config", "stats"] {
        let made = Command::new("bpftool")
            .args(["map", "create"])
            .arg(dir.0.join(name))
            .args(["type", "array", "key", "4", "value", "8", "entries", "1"])
            .args(["name", name])
            .output()
            .expect("bpftool is not installed (apt-get install bpftool)");
        assert!(made.status.success(), "{made:?}");
    }
    let mut detach = Command::new(agent_bin());
    detach.args(["detach", "--pin-dir"]).arg(&dir.0);
    assert_refused(&mut detach, "was not made by the limiter");
    let mut run = Command::new(agent_bin());
    run.args(["--cgroup", &cg.path().to_string_lossy(), "--pin-dir"])
        .arg(&dir.0);
    assert_refused(&mut run, "was not made by the limiter");
    for name in ["config", "stats"] {
        assert!(dir.0.join(name).exists(), "{name} was removed");
    }
    assert_no_programs(&cg);
}

#[kernel_test]
fn only_the_agents_own_pins_are_removed_and_only_by_their_owner() {
    let first = TestCgroup::new("pinsown1");
    let second = TestCgroup::new("pinsown2");
    let pins = PathBuf::from(format!(
        "/sys/fs/bpf/limiter-test-pins-{}",
        std::process::id()
    ));
    let pins_arg = pins.to_string_lossy().into_owned();
    let agent = Agent::start(&first, &["--pin-dir", &pins_arg]);
    // Another agent on another cgroup, or a detach, must not take these pins.
    let mut other = Command::new(agent_bin());
    other.args([
        "--cgroup",
        &second.path().to_string_lossy(),
        "--pin-dir",
        &pins_arg,
    ]);
    assert_refused(&mut other, "already uses the pin directory");
    let mut detach = Command::new(agent_bin());
    detach.args(["detach", "--pin-dir", &pins_arg]);
    assert_refused(&mut detach, "stop it with SIGTERM");
    assert!(
        pins.join("dests").exists(),
        "the running agent's pins are intact"
    );
    assert_no_programs(&second);
    // Something else pinned in the same directory outlives the agent.
    std::fs::create_dir(pins.join("foreign")).unwrap();
    assert!(agent.stop().success());
    assert!(pins.join("foreign").exists());
    assert!(!pins.join("dests").exists(), "its own pins are gone");
    std::fs::remove_dir(pins.join("foreign")).unwrap();
    std::fs::remove_dir(&pins).unwrap();
}

#[kernel_test]
fn a_second_agent_is_refused_whatever_its_pin_directory() {
    let cg = TestCgroup::new("secondagent");
    let first = Agent::start(&cg, &[]);
    let pins = PathBuf::from(format!(
        "/sys/fs/bpf/limiter-test-second-{}",
        std::process::id()
    ));
    let mut second = Command::new(agent_bin());
    second
        .args(["--cgroup", &cg.path().to_string_lossy(), "--pin-dir"])
        .arg(&pins);
    assert_refused(&mut second, "already manages this cgroup");
    assert!(!pins.exists(), "the second agent pinned nothing");
    let mut detach = Command::new(agent_bin());
    detach.args(["detach", "--cgroup", &cg.path().to_string_lossy()]);
    assert_refused(&mut detach, "stop it with SIGTERM");
    assert!(first.stop().success());
    assert_no_programs(&cg);
}

/// The files in /run/limiter of the agent `pid`: its locks (whose first line is its pid)
/// and the files they list (its event socket).
fn run_files_of(pid: i32) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for lock in std::fs::read_dir("/run/limiter").unwrap() {
        let lock = lock.unwrap().path();
        let text = std::fs::read_to_string(&lock).unwrap_or_default();
        let mut lines = text.lines();
        if lines.next() == Some(&pid.to_string()) {
            files.push(lock.clone());
            files.extend(lines.map(PathBuf::from));
        }
    }
    files
}

#[kernel_test]
fn what_a_killed_agent_leaves_in_run_is_removed_by_the_next_one() {
    let killed = TestCgroup::new("runkilled");
    let agent = Agent::start(&killed, &[]);
    let left = run_files_of(agent.pid());
    assert_eq!(left.len(), 3, "two locks and an event socket: {left:?}");
    assert!(left
        .iter()
        .any(|f| f.extension().is_some_and(|e| e == "events")));
    agent.kill();
    assert!(
        left.iter().all(|f| f.exists()),
        "a killed agent cleans nothing"
    );
    let next = TestCgroup::new("runnext");
    let agent = Agent::start(&next, &[]);
    let pid = agent.pid();
    for file in &left {
        assert!(!file.exists(), "{} was left", file.display());
    }
    let own = run_files_of(pid);
    assert!(agent.stop().success());
    for file in &own {
        assert!(!file.exists(), "{} was left", file.display());
    }
}

#[kernel_test]
fn a_local_user_cannot_hold_the_lock_and_a_dead_agents_lock_blocks_nobody() {
    let cg = TestCgroup::new("lock");
    let agent = Agent::start(&cg, &[]);
    let pid = agent.pid().to_string();
    let lock = std::fs::read_dir("/run/limiter")
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| std::fs::read_to_string(p).is_ok_and(|c| c == pid))
        .expect("the agent's lock file holds its pid");
    let run = std::fs::symlink_metadata("/run/limiter").unwrap();
    assert_eq!((run.uid(), run.mode() & 0o777), (0, 0o700));
    agent.kill();
    // Holding a shared lock on the dead agent's file would block every agent.
    let held = as_nobody(
        "flock",
        &["--shared", "--nonblock", &lock.to_string_lossy(), "true"],
    );
    assert!(!held.status.success(), "nobody could open the lock file");
    drop(Agent::start(&cg, &[]));
}

#[kernel_test]
fn status_tells_whether_anything_enforces_the_limits() {
    let cg = TestCgroup::new("statusagent");
    let cg_arg = cg.path().to_string_lossy().into_owned();
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "50"]);
    let (probe, lines) = Probe::hold(&cg, up.addr, 2);
    assert_eq!(tally(&lines), (2, 0, 0));
    let report = status_report(&cg);
    let keys: Vec<&str> = report
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["agent", "globals", "destinations"]);
    assert_eq!(report["agent"]["running"], true);
    assert_eq!(report["agent"]["pid"], agent.pid());
    assert_eq!(report["agent"]["attached"], true);
    assert_eq!(report["agent"]["failing_open"], false);
    for g in ["ringbuf_drops", "table_full", "fail_open", "untracked"] {
        assert!(report["globals"][g].is_u64(), "globals.{g}");
    }

    // A non-root user is told why they cannot see it.
    let denied = as_nobody(
        &agent_bin().to_string_lossy(),
        &["status", "--cgroup", &cg_arg],
    );
    assert!(!denied.status.success());
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains("permission denied"),
        "{}",
        String::from_utf8_lossy(&denied.stderr)
    );

    agent.kill();
    let out = agent_command(&["status", "--cgroup", &cg_arg, "--json"]);
    assert!(
        !out.status.success(),
        "a dead agent's limits are not enforced"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["agent"]["running"], false);
    assert_eq!(report["agent"]["attached"], false);
    let text = agent_command(&["status", "--cgroup", &cg_arg]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("nothing enforces these limits"));
    assert!(String::from_utf8_lossy(&text.stderr).contains("not enforced"));
    probe.release();
}

/// The cgroup v2 root bind-mounted over a test cgroup; unmounted on drop.
struct RootMountedOver(PathBuf);

impl RootMountedOver {
    fn new(cg: &TestCgroup) -> Self {
        let mounted = Command::new("mount")
            .arg("--bind")
            .arg(cgroup2_mount())
            .arg(cg.path())
            .status()
            .unwrap();
        assert!(mounted.success(), "cannot bind-mount the cgroup v2 root");
        RootMountedOver(cg.path().to_path_buf())
    }
}

impl Drop for RootMountedOver {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[kernel_test]
fn the_cgroup_v2_root_is_refused_wherever_it_is_mounted() {
    let mut cmd = Command::new(agent_bin());
    cmd.arg("--cgroup").arg(cgroup2_mount());
    assert_refused(&mut cmd, "is the cgroup v2 root");
    let cg = TestCgroup::new("rootbind");
    let root = RootMountedOver::new(&cg);
    let mut status = Command::new(agent_bin());
    status.args(["status", "--cgroup"]).arg(&root.0);
    assert_refused(&mut status, "is the cgroup v2 root");
    let mut cmd = Command::new(agent_bin());
    cmd.args(["--mode", "off", "--cgroup"]).arg(&root.0);
    assert_refused(&mut cmd, "is the cgroup v2 root");
}

/// A DNS server on loopback that reads queries and never answers.
struct SilentResolver {
    socket: UdpSocket,
    conf: TempFile,
}

impl SilentResolver {
    fn new() -> Self {
        let ip = format!("127.0.53.{}", std::process::id() % 250 + 1);
        let socket = UdpSocket::bind((ip.as_str(), 53)).unwrap();
        socket.set_nonblocking(true).unwrap();
        let conf = TempFile::new(
            "resolv.conf",
            &format!("nameserver {ip}\noptions timeout:30 attempts:5\n"),
        );
        SilentResolver { socket, conf }
    }

    /// Queries received so far.
    fn queries(&self) -> usize {
        let mut buf = [0u8; 512];
        std::iter::from_fn(|| self.socket.recv(&mut buf).ok()).count()
    }

    /// The agent, in a mount namespace of its own where /etc/resolv.conf points here.
    fn agent_command(&self) -> Command {
        let conf = CString::new(self.conf.0.to_string_lossy().as_bytes()).unwrap();
        let mut cmd = Command::new(agent_bin());
        // SAFETY: only async-signal-safe syscalls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::unshare(libc::CLONE_NEWNS) != 0
                    || libc::mount(
                        c"none".as_ptr(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) != 0
                    || libc::mount(
                        conf.as_ptr(),
                        c"/etc/resolv.conf".as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }
}

#[kernel_test]
fn a_resolver_that_never_answers_delays_nothing_else() {
    let cg = TestCgroup::new("silentdns");
    let dns = SilentResolver::new();
    let config = TempFile::new(
        "silentdns.toml",
        "resolve_interval_secs = 1\n[[destination]]\nname = \"nowhere\"\nhost = \"never-answers.limiter-test:80\"\n",
    );
    let agent = Agent::start_command(
        dns.agent_command(),
        &cg,
        &[
            "--config",
            &config.0.to_string_lossy(),
            "--algorithm",
            "fixed",
            "--limit",
            "1",
            "--heartbeat-timeout",
            "1",
        ],
    );
    agent.signal(libc::SIGHUP);
    let mut seen = 0;
    wait_until("a query to the silent resolver", || {
        seen += dns.queries();
        seen > 0
    });
    let asked = Instant::now();
    // Beats after the query went unanswered: the loop is not waiting for it.
    wait_until("a heartbeat after the unanswered query", || {
        let age_ms = status_report(&cg)["agent"]["heartbeat_age_ms"]
            .as_f64()
            .unwrap();
        age_ms < asked.elapsed().as_secs_f64() * 1e3
    });
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let (probe, lines) = Probe::hold(&cg, up.addr, 2);
    assert_eq!(tally(&lines), (1, 1, 0), "enforced, not failing open");
    probe.release();
    // Reloads still apply, each once its lookup has timed out, however many are asked for.
    agent.signal(libc::SIGHUP);
    let reloads = || {
        let log = agent.log.lock().unwrap();
        log.iter()
            .filter(|l| l.contains("configuration reloaded"))
            .count()
    };
    wait_until("both reloads applied", || reloads() == 2);
    // Rounds that find the name's lookup still waiting start no other one.
    let skipped = || {
        let log = agent.log.lock().unwrap();
        log.iter()
            .filter(|l| l.contains("previous lookup has not answered yet"))
            .count()
    };
    let threads = || {
        std::fs::read_dir(format!("/proc/{}/task", agent.pid()))
            .unwrap()
            .count()
    };
    let (seen, before) = (skipped(), threads());
    wait_until("three more rounds", || skipped() >= seen + 3);
    assert_eq!(threads(), before, "no thread per round");
    assert!(agent.stop().success(), "SIGTERM is handled");
}
