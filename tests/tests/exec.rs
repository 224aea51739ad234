//! `limiter-user exec`: a program started in a cgroup of its own, limited from its first
//! connect, with its exit status and signals passed through, and nothing left behind
//! (root, real kernel, curl installed).

use std::{
    io::{BufRead, BufReader},
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use limiter_integration_tests::*;

/// `exec` below `parent`, with `args` before `--` and `cmd` after it.
fn exec(parent: &TestCgroup, args: &[&str], cmd: &[&str]) -> Command {
    let mut command = Command::new(agent_bin());
    command
        .arg("exec")
        .arg("--parent")
        .arg(parent.path())
        .args(args)
        .arg("--")
        .args(cmd);
    command
}

/// The transient cgroups below `parent` (there is one while exec runs).
fn transient(parent: &TestCgroup) -> Vec<PathBuf> {
    std::fs::read_dir(parent.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("limiter-exec-"))
        .map(|e| e.path())
        .collect()
}

/// The pins of a transient cgroup of `parent`.
fn pins_below(parent: &TestCgroup) -> Vec<PathBuf> {
    let prefix = parent
        .pin_dir()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    std::fs::read_dir("/sys/fs/bpf/limiter")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.starts_with(&prefix) && name.contains("limiter\\x2dexec")
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// What /run/limiter holds for the transient cgroups of `parent`: files named after the
/// cgroup (escaped once) or after its pin directory (escaped twice).
fn run_files_below(parent: &TestCgroup) -> Vec<PathBuf> {
    let name = parent.path().file_name().unwrap().to_string_lossy();
    let names = [name.replace('-', "\\x2d"), name.replace('-', "\\x5cx2d")];
    // The last agent to leave removes the directory: none, nothing left.
    match std::fs::read_dir("/run/limiter") {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        entries => entries
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| names.iter().any(|n| p.to_string_lossy().contains(n)))
            .collect(),
    }
}

fn assert_nothing_left(parent: &TestCgroup) {
    assert_eq!(
        transient(parent),
        Vec::<PathBuf>::new(),
        "the cgroup is removed"
    );
    assert_eq!(
        run_files_below(parent),
        Vec::<PathBuf>::new(),
        "no lock or socket is left"
    );
    assert_eq!(
        pins_below(parent),
        Vec::<PathBuf>::new(),
        "the pins are removed"
    );
}

/// A started exec whose CMD talks over stdin/stdout.
struct Running {
    child: Child,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Running {
    fn start(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start exec");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Running { child, stdout }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        assert!(
            self.stdout.read_line(&mut line).unwrap() > 0,
            "CMD ended early"
        );
        line.trim_end().to_string()
    }

    fn lines_until(&mut self, end: &str) -> Vec<String> {
        std::iter::from_fn(|| Some(self.line()))
            .take_while(|l| l != end)
            .collect()
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill() on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    fn wait(self) -> std::process::ExitStatus {
        self.wait_with_log().0
    }

    /// The exit status and what exec logged.
    fn wait_with_log(mut self) -> (std::process::ExitStatus, String) {
        use std::io::Read;
        drop(self.child.stdin.take());
        let mut log = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut log)
            .unwrap();
        (self.child.wait().unwrap(), log)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[kernel_test]
fn the_first_connects_are_limited_and_the_status_is_cmds() {
    let parent = TestCgroup::new("exec");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let probe = probe_bin();
    let mut run = Running::start(exec(
        &parent,
        &["--algorithm", "fixed", "--limit", "1"],
        &[
            &probe.to_string_lossy(),
            "hold",
            "--to",
            &up.addr.to_string(),
            "--count",
            "3",
        ],
    ));
    // The very first connects of the program already meet the limit.
    let lines = run.lines_until("ready");
    assert_eq!(tally(&lines), (1, 2, 0), "{lines:?}");
    assert_eq!(
        transient(&parent).len(),
        1,
        "CMD runs in a cgroup of its own"
    );
    assert_eq!(pins_below(&parent).len(), 1, "attached and pinned");
    let (status, log) = run.wait_with_log();
    assert_eq!(status.code(), Some(0));
    // The refusals are summarised when exec ends, however short CMD's life.
    let summary = format!(
        "shed 2 connect(s) to {} at limit 1 (last by limiter-probe[",
        up.addr
    );
    assert!(log.contains(&summary), "{log}");
    assert_nothing_left(&parent);
}

#[kernel_test]
fn an_unmodified_curl_runs_under_it_with_its_exit_status() {
    let parent = TestCgroup::new("execcurl");
    let up = SlowHttp::start(0);
    let out = exec(&parent, &[], &["curl", "--silent", &up.url()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok");
    // curl's own status for a refused connection (7: failed to connect) comes back as is.
    let refused = format!("http://{}/", closed_port());
    let out = exec(&parent, &[], &["curl", "--silent", &refused])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert_nothing_left(&parent);
}

#[kernel_test]
fn signals_reach_cmd_and_a_killed_cmd_gives_128_plus_the_signal() {
    let parent = TestCgroup::new("execsig");
    let script =
        "trap 'echo hup' HUP; trap 'exit 3' TERM; echo ready; while :; do read -t 1 x || :; done";
    let mut run = Running::start(exec(&parent, &[], &["bash", "-c", script]));
    assert_eq!(run.line(), "ready");
    run.signal(libc::SIGHUP);
    assert_eq!(run.line(), "hup", "SIGHUP is passed on, not a reload");
    run.signal(libc::SIGTERM);
    assert_eq!(run.wait().code(), Some(3));

    let mut run = Running::start(exec(
        &parent,
        &[],
        &["sh", "-c", "echo ready; exec sleep 1000"],
    ));
    assert_eq!(run.line(), "ready");
    run.signal(libc::SIGINT);
    let status = run.wait();
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{status:?}");
    assert_eq!(status.signal(), None, "exec itself exits, it is not killed");
    assert_nothing_left(&parent);
}

/// The processes in the transient cgroup of `parent`.
fn processes_below(parent: &TestCgroup) -> usize {
    transient(parent)
        .iter()
        .filter_map(|cg| std::fs::read_to_string(cg.join("cgroup.procs")).ok())
        .map(|procs| procs.lines().count())
        .sum()
}

#[kernel_test]
fn signals_reach_everything_in_the_cgroup_and_exec_ends_once_it_is_empty() {
    let parent = TestCgroup::new("execgroup");
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // sleep is not the shell's last command, so the shell waits for it instead of
        // becoming it: two processes, only one of them exec's child.
        let mut run = Running::start(exec(
            &parent,
            &[],
            &["sh", "-c", "echo ready; sleep 1000; echo after"],
        ));
        assert_eq!(run.line(), "ready");
        wait_until("the shell and its sleep", || processes_below(&parent) == 2);
        run.signal(sig);
        wait_until("exec to end", || run.child.try_wait().unwrap().is_some());
        assert_eq!(run.wait().code(), Some(128 + sig), "signal {sig}");
        assert_nothing_left(&parent);
    }
}

#[kernel_test]
fn it_waits_for_everything_cmd_started() {
    let parent = TestCgroup::new("execorphan");
    // CMD exits at once with 4, leaving a process behind in its cgroup.
    let mut run = Running::start(exec(
        &parent,
        &[],
        &[
            "sh",
            "-c",
            "sleep 1000 </dev/null >/dev/null & echo $!; exit 4",
        ],
    ));
    let orphan: i32 = run.line().parse().unwrap();
    let exec_pid = run.child.id();
    wait_until("CMD to be gone", || {
        procfs::process::Process::new(exec_pid as i32)
            .and_then(|p| p.task_main_thread())
            .and_then(|t| t.children())
            .is_ok_and(|c| c.is_empty())
    });
    assert_eq!(
        run.child.try_wait().unwrap(),
        None,
        "exec waits for the orphan"
    );
    assert_eq!(transient(&parent).len(), 1);
    // SAFETY: kill() on the process the test's CMD started.
    unsafe { libc::kill(orphan, libc::SIGKILL) };
    assert_eq!(
        run.wait().code(),
        Some(4),
        "CMD's status, once all are gone"
    );
    assert_nothing_left(&parent);
}

#[kernel_test]
fn a_command_that_cannot_run_gets_one_line_the_shells_code_and_leaves_nothing() {
    let parent = TestCgroup::new("execbad");
    let plain = TempFile::new("not-executable", "#!/bin/sh\n");
    let cases: [(&[&str], &[&str], i32, &str); 4] = [
        (&[], &["no-such-program-anywhere"], 127, "command not found"),
        (&[], &[&plain.0.to_string_lossy()], 126, "not executable"),
        (&[], &["/"], 126, "is a directory"),
        (
            &["--mode", "bogus"],
            &["true"],
            125,
            "invalid value 'bogus'",
        ),
    ];
    for (args, cmd, code, expected) in cases {
        let out = exec(&parent, args, cmd).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{cmd:?}: {stderr}");
        assert!(stderr.contains(expected), "{cmd:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_nothing_left(&parent);
    }
    let out = exec(&parent, &[], &["no-such-program-anywhere"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        ["limiter-user: no-such-program-anywhere: command not found"]
    );
}

#[kernel_test]
fn a_ctrl_c_at_the_terminal_reaches_cmd_once() {
    let parent = TestCgroup::new("exectty");
    let (mut master, slave) = pty();
    // A process of its own session, outside the terminal's foreground process group (with
    // SIGINT back to default: a non-interactive shell's background jobs ignore it).
    let detached = "trap 'echo detached interrupted; exit' INT; echo detached up; \
                    while :; do sleep 0.1; done";
    let script = format!(
        "trap 'echo int' INT; trap 'echo term; kill $!; exit 3' TERM; \
         setsid env --default-signal=INT sh -c \"{detached}\" & \
         sleep 1000 & echo ready; while :; do wait $!; done"
    );
    let log = TempFile::new("exec-tty.log", "");
    let mut command = exec(&parent, &[], &["bash", "-c", &script]);
    command
        .env("RUST_LOG", "info,limiter_user::exec=debug")
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(std::fs::File::create(&log.0).unwrap());
    // SAFETY: setsid and ioctl are async-signal-safe: exec becomes the leader of a session
    // whose controlling terminal is the pty, in its foreground process group.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    drop(slave);
    let mut output = String::new();
    let read_until = |master: &mut std::fs::File, end: &str, output: &mut String| {
        use std::io::Read;
        let mut buf = [0u8; 256];
        while !output.lines().any(|l| l.trim_end().ends_with(end)) {
            let n = master.read(&mut buf).expect("the terminal closed");
            output.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    read_until(&mut master, "ready", &mut output);
    read_until(&mut master, "detached up", &mut output);
    // Ctrl-C: the terminal signals its whole foreground process group, CMD included;
    // exec passes it on to the rest of the cgroup.
    std::io::Write::write_all(&mut master, b"\x03").unwrap();
    read_until(&mut master, "int", &mut output);
    read_until(&mut master, "detached interrupted", &mut output);
    // SAFETY: kill() on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    read_until(&mut master, "term", &mut output);
    let ints = output
        .lines()
        .filter(|l| l.trim_end().ends_with("int"))
        .count();
    assert_eq!(
        ints, 1,
        "one SIGINT, not one from the terminal and one from exec: {output:?}"
    );
    assert_eq!(child.wait().unwrap().code(), Some(3));
    // Two SIGINTs close together merge into one: exec says it did not send its own.
    let log = std::fs::read_to_string(&log.0).unwrap();
    assert!(
        log.contains("SIGINT from the terminal: it reached CMD's process group already"),
        "{log}"
    );
    assert!(!log.contains("SIGTERM from the terminal"), "{log}");
    assert_nothing_left(&parent);
}

/// A pseudo-terminal: (master, slave).
fn pty() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two new descriptors, which the Files then own.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::fs::File::from_raw_fd(slave),
        )
    }
}

#[kernel_test]
fn every_wrong_cgroup_path_names_the_mount_and_what_to_pass() {
    let mount = cgroup2_mount();
    let mounted = format!(
        "cgroup v2 is mounted at {} on this machine",
        mount.display()
    );
    let beside = Path::new("/sys/fs/cgroup/limiter-no-such-cgroup");
    let cases: [&[&str]; 6] = [
        &["--cgroup", &beside.to_string_lossy()],
        &["--cgroup", "/tmp"],
        &["--cgroup", "/etc/hostname"],
        &["status", "--cgroup", &beside.to_string_lossy()],
        &["exec", "--parent", "/tmp", "--", "true"],
        &["--algorithm", "fixed"],
    ];
    for args in cases {
        let out = agent_command(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(&mounted), "{args:?}: {stderr}");
        assert!(
            stderr.contains("limiter-user exec -- CMD"),
            "{args:?}: {stderr}"
        );
    }
    // What to pass instead: the same name below the real mount.
    let out = agent_command(&["--cgroup", &beside.to_string_lossy()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if mount != Path::new("/sys/fs/cgroup") {
        let instead = mount.join("limiter-no-such-cgroup");
        assert!(
            stderr.contains(&format!("pass {}", instead.display())),
            "{stderr}"
        );
    } else {
        assert!(stderr.contains("create it (mkdir)"), "{stderr}");
    }
}
