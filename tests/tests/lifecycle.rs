//! The agent's life: fail-open, status and bpftool, bad input, detach (root, real kernel).

use std::{os::unix::fs::PermissionsExt, process::Command};

use limiter_integration_tests::*;

fn hold_one(cg: &TestCgroup, up: &Upstream) -> (Probe, String) {
    let (probe, lines) = Probe::hold(cg, up.addr, 1);
    (probe, lines[0].clone())
}

fn refused() -> String {
    format!("err {}", libc::ECONNREFUSED)
}

#[kernel_test]
fn a_killed_agent_leaves_nothing_clamped() {
    let cg = TestCgroup::new("sigkill");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "1"]);
    let (first, ok) = hold_one(&cg, &up);
    assert_eq!(ok, "ok");
    let (_, no) = hold_one(&cg, &up);
    assert_eq!(no, refused());
    agent.kill();
    let (second, lines) = Probe::hold(&cg, up.addr, 3);
    assert_eq!(
        tally(&lines),
        (3, 0, 0),
        "connects are admitted once the agent is gone"
    );

    // The pins outlive a SIGKILL: detach removes them, and a new agent starts cleanly.
    let cg_arg = cg.path().to_string_lossy().into_owned();
    assert!(cg.pin_dir().exists());
    let out = agent_command(&["detach", "--cgroup", &cg_arg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!cg.pin_dir().exists());
    let out = agent_command(&["status", "--cgroup", &cg_arg]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no limiter is attached"));
    drop(Agent::start(&cg, &["--algorithm", "fixed", "--limit", "1"]));
    first.release();
    second.release();
}

#[kernel_test]
fn a_stuck_agent_fails_open_after_the_heartbeat_timeout() {
    let cg = TestCgroup::new("failopen");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let agent = Agent::start(
        &cg,
        &[
            "--algorithm",
            "fixed",
            "--limit",
            "1",
            "--heartbeat-timeout",
            "1",
        ],
    );
    let (first, ok) = hold_one(&cg, &up);
    assert_eq!(ok, "ok");

    agent.signal(libc::SIGSTOP);
    let mut admitted = Vec::new();
    wait_until("a connect admitted past the limit", || {
        let (probe, outcome) = hold_one(&cg, &up);
        admitted.push(probe);
        outcome == "ok"
    });
    assert!(global(&cg, "fail_open") >= 1);
    assert_eq!(status_report(&cg)["agent"]["failing_open"], true);

    agent.signal(libc::SIGCONT);
    for p in admitted {
        p.release();
    }
    wait_until("the limit enforced again", || {
        let (_, outcome) = hold_one(&cg, &up);
        outcome == refused()
    });
    first.release();
    drop(agent);
}

#[kernel_test]
fn status_json_and_the_bpftool_dump_agree_and_pins_are_root_only() {
    let cg = TestCgroup::new("bpftool");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "2"]);
    let (probe, lines) = Probe::hold(&cg, up.addr, 3);
    assert_eq!(tally(&lines), (2, 1, 0));

    let row = row(&cg, up.addr).unwrap();
    let keys: Vec<&str> = row
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "address",
            "port",
            "mode",
            "limit",
            "inflight",
            "admitted",
            "shed",
            "would_shed",
            "redirected",
            "connect_failed",
            "untimed",
            "http_4xx",
            "http_429",
            "http_5xx",
            "http_503",
            "baseline_ms",
            "p90_ms",
            "overflow",
            "waiting",
            "queued",
            "queue_admitted",
            "queue_full",
            "queue_expired",
            "queue_abandoned",
            "wait_p50_ms",
            "wait_p99_ms"
        ]
    );
    assert_eq!(
        (row["limit"].as_i64(), row["inflight"].as_i64()),
        (Some(2), Some(2))
    );
    assert_eq!(
        (row["admitted"].as_i64(), row["shed"].as_i64()),
        (Some(2), Some(1))
    );

    // With BTF, bpftool prints named fields.
    let entry = dests_entry(&cg, up.addr).expect("destination missing from the dump");
    assert_eq!(entry["inflight"], 2, "{entry}");
    assert_eq!(entry["admitted"], 2);
    assert_eq!(entry["shed"], 1);

    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&cg.pin_dir()), 0o700);
    assert_eq!(mode(&cg.pin_dir().join("dests")), 0o600);
    probe.release();
}

#[kernel_test]
fn bad_input_gets_one_clear_line_and_leaves_nothing_behind() {
    let agent = |args: &[&str]| {
        let mut c = Command::new(agent_bin());
        c.args(args);
        c
    };
    assert_refused(
        &mut agent(&["--cgroup", "/sys/fs/cgroup/no-such-cgroup"]),
        "does not exist",
    );
    assert_refused(
        &mut agent(&["--cgroup", "/etc/hostname"]),
        "is not a directory",
    );
    assert_refused(
        &mut agent(&["--cgroup", "/tmp"]),
        "is not a cgroup v2 directory",
    );
    assert_refused(
        &mut agent(&["--algorithm", "fixed"]),
        "--cgroup PATH is required",
    );
    let usage = agent(&["--cgroup", "/tmp", "--algorithm", "bogus"])
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(2), "usage errors exit with 2");
    assert!(String::from_utf8_lossy(&usage.stderr).contains("unknown algorithm \"bogus\""));

    let cg = TestCgroup::new("badinput");
    let cg_arg = cg.path().to_string_lossy().into_owned();
    let bad = TempFile::new("bad.toml", "mode = \"prod\"\n[limits]\nmin = \"four\"\n");
    assert_refused(
        &mut agent(&["--cgroup", &cg_arg, "--config", &bad.0.to_string_lossy()]),
        &format!("{}:3", bad.0.display()),
    );
    assert_refused(
        &mut agent(&["--cgroup", &cg_arg, "--limit", "3"]),
        "add --algorithm fixed",
    );
    let nameless = TempFile::new(
        "nameless.toml",
        "[[destination]]\nname = \"nowhere\"\nhost = \"\"\n",
    );
    // Refused before anything else is checked, privileges included.
    let nameless_arg = nameless.0.to_string_lossy();
    let mut unprivileged = agent(&["--cgroup", &cg_arg, "--config", &nameless_arg]);
    std::os::unix::process::CommandExt::uid(&mut unprivileged, 65534);
    assert_refused(
        &mut unprivileged,
        "destination `nowhere`: host must be NAME:PORT",
    );
    let mut unprivileged = agent(&["--cgroup", &cg_arg]);
    std::os::unix::process::CommandExt::uid(&mut unprivileged, 65534);
    assert_refused(&mut unprivileged, "not enough privileges");
    assert!(!cg.pin_dir().exists(), "nothing pinned by a refused start");

    // One agent per cgroup.
    let first = Agent::start(&cg, &[]);
    assert_refused(
        &mut agent(&["--cgroup", &cg_arg]),
        "already manages this cgroup",
    );
    assert_refused(
        &mut agent(&["detach", "--cgroup", &cg_arg]),
        "stop it with SIGTERM",
    );
    assert!(first.stop().success());
    assert!(!cg.pin_dir().exists(), "SIGTERM removes the pins");
    assert_no_programs(&cg);
}

#[kernel_test]
fn a_failed_load_leaves_nothing_half_attached() {
    let cg = TestCgroup::new("failedload");
    // A destination table too large to allocate: the kernel refuses it after the pin
    // directory exists, and the one line says what to lower.
    let mut cmd = Command::new(agent_bin());
    cmd.args([
        "--cgroup",
        &cg.path().to_string_lossy(),
        "--max-destinations",
        "4294967295",
    ]);
    assert_refused(
        &mut cmd,
        "table (Argument list too long (os error 7)) for max_destinations 4294967295 and signal_buffer_kib 1024: lower them",
    );
    assert!(!cg.pin_dir().exists(), "the failed agent removed its pins");
    assert_no_programs(&cg);
}

#[kernel_test]
fn the_agent_mounts_a_missing_bpffs() {
    let cg = TestCgroup::new("bpffs");
    let mut cmd = Command::new(agent_bin());
    // SAFETY: only async-signal-safe syscalls between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            // A private mount namespace without /sys/fs/bpf, as on a machine that never
            // mounted it.
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(
                    c"none".as_ptr(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            while libc::umount2(c"/sys/fs/bpf".as_ptr(), libc::MNT_DETACH) == 0 {}
            Ok(())
        });
    }
    let agent = Agent::start_command(cmd, &cg, &["--algorithm", "fixed", "--limit", "1"]);
    // Its mount, seen through its own root: root-only, not world-writable.
    let mounted = std::fs::metadata(format!("/proc/{}/root/sys/fs/bpf", agent.pid())).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mounted.permissions()) & 0o777,
        0o700
    );
    let log = agent.log.clone();
    let status = agent.stop();
    assert!(status.success(), "{status}: {:?}", log.lock().unwrap());
}
