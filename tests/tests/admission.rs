//! Admission in the connect hook: limits, modes, address families (root, real kernel).

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
};

use limiter_integration_tests::*;

fn upstream() -> Upstream {
    Upstream::start("127.0.0.1:0", Behaviour::Hold)
}

#[kernel_test]
fn at_the_limit_connects_fail_with_econnrefused_and_send_no_syn() {
    let cg = TestCgroup::new("limit");
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "5"]);
    // The probe brings its own upstream in a private network namespace, where every SYN
    // it sends is counted.
    let to = "127.0.0.1:7000".parse().unwrap();
    let mut probe = Probe::spawn(
        &cg,
        &[
            "hold",
            "--to",
            "127.0.0.1:7000",
            "--count",
            "10",
            "--own-netns",
        ],
    );
    let lines = probe.lines_until("ready");
    let syns = lines
        .iter()
        .find_map(|l| l.strip_prefix("syns "))
        .expect("no syn count");
    assert_eq!(tally(&lines[..10]), (5, 5, 0), "{lines:?}");
    assert_eq!(syns, "5", "refused connects must not send a SYN");

    assert_eq!(field(&cg, to, "limit"), 5);
    assert_eq!(field(&cg, to, "inflight"), 5);
    assert_eq!(field(&cg, to, "admitted"), 5);
    assert_eq!(field(&cg, to, "shed"), 5);
    probe.release();
    wait_until("the slots to come back", || field(&cg, to, "inflight") == 0);
}

/// Kernels before 5.18 lack `bpf_set_retval`, so a refused connect fails with EPERM there:
/// the agent is told the kernel is older and takes that path on this one.
#[kernel_test]
fn before_5_18_connects_at_the_limit_fail_with_eperm() {
    let cg = TestCgroup::new("eperm");
    let up = upstream();
    let mut agent = Command::new(agent_bin());
    agent.env("LIMITER_ASSUME_KERNEL", "5.17");
    let _agent = Agent::start_command(agent, &cg, &["--algorithm", "fixed", "--limit", "2"]);
    let (_probe, lines) = Probe::hold(&cg, up.addr, 4);
    let eperm = format!("err {}", libc::EPERM);
    assert_eq!(tally(&lines[..4]), (2, 0, 2), "{lines:?}");
    assert_eq!(
        lines[..4].iter().filter(|l| **l == eperm).count(),
        2,
        "{lines:?}"
    );
    assert_eq!(field(&cg, up.addr, "shed"), 2);
}

#[kernel_test]
fn racing_connects_never_overshoot_the_limit() {
    let cg = TestCgroup::new("race");
    let up = upstream();
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "7"]);
    for _ in 0..5 {
        let mut probe = Probe::spawn(
            &cg,
            &["race", "--to", &up.addr.to_string(), "--count", "32"],
        );
        let lines = probe.lines_until("ready");
        assert_eq!(tally(&lines), (7, 25, 0), "{lines:?}");
        assert_eq!(field(&cg, up.addr, "inflight"), 7);
        probe.release();
        wait_until("the slots to come back", || {
            field(&cg, up.addr, "inflight") == 0
        });
    }
}

#[kernel_test]
fn shadow_never_refuses_but_counts_would_shed() {
    let cg = TestCgroup::new("shadow");
    let up = upstream();
    let _agent = Agent::start(
        &cg,
        &["--mode", "shadow", "--algorithm", "fixed", "--limit", "2"],
    );
    let (probe, lines) = Probe::hold(&cg, up.addr, 6);
    assert_eq!(tally(&lines), (6, 0, 0));
    let row = row(&cg, up.addr).unwrap();
    assert_eq!(row["mode"], "shadow");
    assert_eq!(row["inflight"], 6);
    assert_eq!(row["would_shed"], 4);
    assert_eq!(row["shed"], 0);
    probe.release();
}

#[kernel_test]
fn off_records_nothing() {
    let cg = TestCgroup::new("off");
    let up = upstream();
    let _agent = Agent::start(
        &cg,
        &["--mode", "off", "--algorithm", "fixed", "--limit", "1"],
    );
    let (probe, lines) = Probe::hold(&cg, up.addr, 3);
    assert_eq!(tally(&lines), (3, 0, 0));
    assert!(status(&cg).is_empty(), "off must not create destinations");
    probe.release();
}

#[kernel_test]
fn per_destination_overrides_beat_the_global_mode() {
    let cg = TestCgroup::new("override");
    let (prod, shadowed, excluded, plain) = (upstream(), upstream(), upstream(), upstream());
    let config = TempFile::new(
        "override.toml",
        &format!(
            r#"
mode = "shadow"
algorithm = "fixed"
limit = 1

[[destination]]
name = "strict"
addresses = ["{prod}"]
mode = "prod"
limit = 2

[[destination]]
name = "watched"
addresses = ["{shadowed}"]

[[exclude]]
addresses = ["{excluded}"]
"#,
            prod = prod.addr,
            shadowed = shadowed.addr,
            excluded = excluded.addr
        ),
    );
    let _agent = Agent::start(&cg, &["--config", &config.0.to_string_lossy()]);

    let (p1, strict) = Probe::hold(&cg, prod.addr, 4);
    assert_eq!(
        tally(&strict),
        (2, 2, 0),
        "per-destination prod beats global shadow"
    );
    let (p2, watched) = Probe::hold(&cg, shadowed.addr, 3);
    assert_eq!(tally(&watched), (3, 0, 0), "global shadow applies");
    assert_eq!(field(&cg, shadowed.addr, "would_shed"), 2);
    let (p3, free) = Probe::hold(&cg, excluded.addr, 3);
    assert_eq!(tally(&free), (3, 0, 0));
    assert!(
        row(&cg, excluded.addr).is_none(),
        "excluded destinations are not recorded"
    );
    let (p4, learned) = Probe::hold(&cg, plain.addr, 2);
    assert_eq!(
        tally(&learned),
        (2, 0, 0),
        "learned destinations follow the global mode"
    );
    assert_eq!(field(&cg, plain.addr, "would_shed"), 1);
    for p in [p1, p2, p3, p4] {
        p.release();
    }
}

#[kernel_test]
fn udp_connect_is_untouched() {
    let cg = TestCgroup::new("udp");
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "1"]);
    for _ in 0..3 {
        let mut probe = Probe::spawn(&cg, &["udp", "--to", "127.0.0.1:5353"]);
        assert_eq!(probe.lines_until_exit(), ["ok"]);
    }
    assert!(status(&cg).is_empty(), "UDP must not create destinations");
}

#[kernel_test]
fn ipv6_and_v4_mapped_destinations_are_counted_as_such() {
    let cg = TestCgroup::new("ipv6");
    let v6 = Upstream::start("[::1]:0", Behaviour::Hold);
    let v4 = Upstream::start("[::]:0", Behaviour::Hold);
    let v4_addr: std::net::SocketAddr = format!("127.0.0.1:{}", v4.addr.port()).parse().unwrap();
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "2"]);

    let (p1, lines) = Probe::hold(&cg, v6.addr, 3);
    assert_eq!(tally(&lines), (2, 1, 0));
    assert_eq!(field(&cg, v6.addr, "inflight"), 2);

    // One plain IPv4 connect and two from an IPv6 socket to ::ffff:127.0.0.1 share a limit.
    let (p2, plain) = Probe::hold(&cg, v4_addr, 1);
    assert_eq!(tally(&plain), (1, 0, 0));
    let (p3, mapped) = Probe::hold_with(&cg, "hold-mapped", v4_addr, 2);
    assert_eq!(tally(&mapped), (1, 1, 0));
    assert_eq!(field(&cg, v4_addr, "inflight"), 2);
    assert!(
        status(&cg)
            .iter()
            .all(|r| !r["address"].as_str().unwrap().starts_with("::ffff:")),
        "v4-mapped addresses are shown as IPv4"
    );
    for p in [p1, p2, p3] {
        p.release();
    }
}

/// systemd names every cgroup `*.slice` or `*.service`, and bpffs refuses a pin directory
/// named with a dot: such a cgroup is limited like any other.
#[kernel_test]
fn a_cgroup_named_like_a_systemd_service_is_limited() {
    let cg = TestCgroup::new("demo.service");
    let up = upstream();
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "2"]);
    let (_probe, lines) = Probe::hold(&cg, up.addr, 4);
    assert_eq!(tally(&lines), (2, 2, 0), "{lines:?}");
    assert_eq!(field(&cg, up.addr, "limit"), 2);
}

#[kernel_test]
fn a_socket_made_before_its_process_joined_the_cgroup_is_not_limited() {
    let cg = TestCgroup::new("moved");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "1"]);
    let (held, lines) = Probe::hold(&cg, up.addr, 1);
    assert_eq!(tally(&lines), (1, 0, 0));
    // The kernel runs a socket's connect hooks by the cgroup it was made in.
    let mut moved = Command::new(probe_bin())
        .args(["moved", "--to", &up.addr.to_string(), "--procs"])
        .arg(cg.path().join("cgroup.procs"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(moved.stdout.take().unwrap());
    let lines: Vec<String> = (&mut out)
        .lines()
        .map(Result::unwrap)
        .take_while(|l| l != "ready")
        .collect();
    let refused = format!("after err {}", libc::ECONNREFUSED);
    assert_eq!(lines, ["before ok", refused.as_str()]);
    drop(moved.stdin.take());
    assert!(moved.wait().unwrap().success());
    held.release();
}
