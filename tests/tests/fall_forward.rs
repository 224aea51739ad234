//! Fall-forward: a member of a group at its limit hands the connect to the next replica
//! with room, and the application never notices (root, real kernel).

use std::net::{IpAddr, SocketAddr};

use limiter_integration_tests::*;

/// A `[[group]]` of `members` with `extra` keys of its own.
fn group(members: &[SocketAddr], extra: &str) -> String {
    let members: Vec<String> = members.iter().map(|m| format!("\"{m}\"")).collect();
    format!(
        "[[group]]\nname = \"replicas\"\nmembers = [{}]\n{extra}",
        members.join(", ")
    )
}

fn start_agent(cg: &TestCgroup, config: &TempFile) -> Agent {
    Agent::start(cg, &["--config", &config.0.to_string_lossy()])
}

fn hold_upstreams(binds: &[&str]) -> Vec<Upstream> {
    binds
        .iter()
        .map(|b| Upstream::start(b, Behaviour::Hold))
        .collect()
}

fn addrs(upstreams: &[Upstream]) -> Vec<SocketAddr> {
    upstreams.iter().map(|u| u.addr).collect()
}

/// Waits until each upstream has accepted exactly its expected number of connections.
fn wait_accepted(upstreams: &[Upstream], expected: &[usize]) {
    wait_until("every replica to accept its connections", || {
        upstreams
            .iter()
            .map(Upstream::accepted)
            .eq(expected.iter().copied())
    });
}

/// (redirected, shed) of a destination, from status.
fn redirected_and_shed(cg: &TestCgroup, dest: SocketAddr) -> (i64, i64) {
    (field(cg, dest, "redirected"), field(cg, dest, "shed"))
}

#[kernel_test]
fn overflow_falls_forward_in_order_and_is_refused_only_with_every_replica_full() {
    let cg = TestCgroup::new("fallforward");
    let replicas = hold_upstreams(&["127.0.0.1:0", "127.0.0.2:0", "127.0.0.3:0"]);
    let [one, two, three] = [0, 1, 2].map(|i| replicas[i].addr);
    let config = TempFile::new(
        "ff.toml",
        &group(&addrs(&replicas), "algorithm = \"fixed\"\nlimit = 2\n"),
    );
    let _agent = start_agent(&cg, &config);

    let (probe, lines) = Probe::hold_with(&cg, "hold-peername", one, 7);
    assert_eq!(tally(&lines), (6, 1, 0), "{lines:?}");
    assert_eq!(lines[6], format!("err {}", libc::ECONNREFUSED), "the 7th");
    assert_eq!(
        peernames(&lines),
        [one; 6],
        "getpeername shows the address the application asked for"
    );
    // Two each, in the configured order: the others' counts would differ otherwise.
    wait_accepted(&replicas, &[2, 2, 2]);

    assert_eq!(
        redirected_and_shed(&cg, one),
        (4, 1),
        "counted on the destination asked for"
    );
    assert_eq!(
        dests_entry(&cg, one).unwrap()["redirected"],
        4,
        "and in the bpftool dump"
    );
    for r in [one, two, three] {
        assert_eq!(
            field(&cg, r, "inflight"),
            2,
            "{r} holds the slots it serves"
        );
        assert_eq!(field(&cg, r, "admitted"), 2);
    }
    for peer in [two, three] {
        assert_eq!(redirected_and_shed(&cg, peer), (0, 0));
    }

    probe.release();
    wait_until(
        "every slot to come back to the replica that held it",
        || {
            [one, two, three]
                .iter()
                .all(|&r| field(&cg, r, "inflight") == 0)
        },
    );
    for r in [one, two, three] {
        assert_eq!(field(&cg, r, "connect_failed"), 0);
    }
}

#[kernel_test]
fn ipv6_and_v4_mapped_connects_fall_forward_within_their_family() {
    let cg = TestCgroup::new("ffipv6");
    let v6 = hold_upstreams(&["[::1]:0", "[::1]:0"]);
    let v4 = hold_upstreams(&["127.0.0.1:0", "127.0.0.2:0"]);
    let config = TempFile::new(
        "ffipv6.toml",
        &format!(
            "algorithm = \"fixed\"\nlimit = 1\n{}{}",
            group(&addrs(&v6), "").replace("replicas", "six"),
            group(&addrs(&v4), "").replace("replicas", "four"),
        ),
    );
    let _agent = start_agent(&cg, &config);

    let (p1, lines) = Probe::hold_with(&cg, "hold-peername", v6[0].addr, 3);
    assert_eq!(tally(&lines), (2, 1, 0), "{lines:?}");
    assert_eq!(peernames(&lines), [v6[0].addr; 2]);
    wait_accepted(&v6, &[1, 1]);
    assert_eq!(redirected_and_shed(&cg, v6[0].addr), (1, 1));

    // An IPv6 socket reaching the IPv4 group through ::ffff:127.0.0.1 is redirected to
    // ::ffff:127.0.0.2, and reads back the v4-mapped address it connected to.
    let a = v4[0].addr;
    let mut p2 = Probe::spawn(
        &cg,
        &[
            "hold-peername",
            "--to",
            &a.to_string(),
            "--count",
            "3",
            "--mapped",
        ],
    );
    let lines = p2.lines_until("ready");
    assert_eq!(tally(&lines), (2, 1, 0), "{lines:?}");
    let IpAddr::V4(ip) = a.ip() else {
        unreachable!()
    };
    let mapped = SocketAddr::new(ip.to_ipv6_mapped().into(), a.port());
    assert_eq!(peernames(&lines), [mapped; 2]);
    wait_accepted(&v4, &[1, 1]);
    assert_eq!(redirected_and_shed(&cg, a), (1, 1));
    assert_eq!(field(&cg, v4[1].addr, "inflight"), 1);
    p1.release();
    p2.release();
}

#[kernel_test]
fn shadow_rewrites_nothing_and_counts_what_it_would_have_redirected() {
    let cg = TestCgroup::new("ffshadow");
    let replicas = hold_upstreams(&["127.0.0.1:0", "127.0.0.2:0", "127.0.0.3:0"]);
    let [one, two, three] = [0, 1, 2].map(|i| replicas[i].addr);
    let config = TempFile::new(
        "ffshadow.toml",
        &group(
            &addrs(&replicas),
            "mode = \"shadow\"\nalgorithm = \"fixed\"\nlimit = 2\n",
        ),
    );
    let _agent = start_agent(&cg, &config);
    let would_redirect = || dests_entry(&cg, one).unwrap()["would_redirect"].clone();

    // Over the limit while the peers are empty: prod would have redirected.
    let (p1, lines) = Probe::hold_with(&cg, "hold-peername", one, 3);
    assert_eq!(tally(&lines), (3, 0, 0));
    assert_eq!(peernames(&lines), [one; 3]);
    let r = row(&cg, one).unwrap();
    assert_eq!(r["mode"], "shadow");
    assert_eq!(r["inflight"], 3);
    assert_eq!((&r["redirected"], &r["would_shed"]), (&0.into(), &0.into()));
    assert_eq!(would_redirect(), 1);
    for peer in [two, three] {
        assert_eq!(
            (field(&cg, peer, "inflight"), field(&cg, peer, "admitted")),
            (0, 0),
            "shadow looks at the peers without taking their slots"
        );
    }

    // With every peer at its limit, prod would have refused.
    let (p2, _) = Probe::hold(&cg, two, 2);
    let (p3, _) = Probe::hold(&cg, three, 2);
    let (p4, lines) = Probe::hold_with(&cg, "hold-peername", one, 1);
    assert_eq!(peernames(&lines), [one]);
    assert_eq!(field(&cg, one, "would_shed"), 1);
    assert_eq!(would_redirect(), 1);
    assert_eq!(redirected_and_shed(&cg, one), (0, 0));
    wait_accepted(&replicas, &[4, 2, 2]);
    for p in [p1, p2, p3, p4] {
        p.release();
    }
}

#[kernel_test]
fn groups_follow_reloads() {
    let cg = TestCgroup::new("ffreload");
    let replicas = hold_upstreams(&["127.0.0.1:0", "127.0.0.2:0"]);
    let one = replicas[0].addr;
    let fixed = "algorithm = \"fixed\"\nlimit = 1\n";
    let grouped = format!("{fixed}{}", group(&addrs(&replicas), ""));
    let config = TempFile::new("ffreload.toml", &grouped);
    let agent = start_agent(&cg, &config);
    let reload = |text: &str, n: usize| {
        std::fs::write(&config.0, text).unwrap();
        agent.signal(libc::SIGHUP);
        wait_until("the reload", || {
            let log = agent.log.lock().unwrap();
            log.iter()
                .filter(|l| l.contains("configuration reloaded"))
                .count()
                == n
        });
    };
    let hold_two = || {
        let (probe, lines) = Probe::hold(&cg, one, 2);
        probe.release();
        wait_until("the slots to come back", || {
            status(&cg).iter().all(|r| r["inflight"] == 0)
        });
        tally(&lines)
    };
    assert_eq!(hold_two(), (2, 0, 0), "the second falls forward");
    reload(fixed, 1);
    assert_eq!(hold_two(), (1, 1, 0), "no group, no fall-forward");
    reload(&grouped, 2);
    assert_eq!(hold_two(), (2, 0, 0), "the group is back");
    assert_eq!(redirected_and_shed(&cg, one), (2, 1));
}

#[kernel_test]
fn a_slow_replica_gets_a_low_limit_and_its_overflow_lands_on_the_healthy_one() {
    // As many workers as the first load: answers wait for a worker only once more ask. A
    // fixed pool is what makes the lower limit last: the controller follows a slow upstream
    // to what it can serve, so the limit settles at its workers instead of passing through.
    const WORKERS: usize = 16;
    // Slow enough that the loads leave the CPUs mostly idle even under software emulation.
    const NORMAL_MS: u64 = 50;
    let cg = TestCgroup::new("ffslow");
    let slowing = SlowHttp::with_workers(NORMAL_MS, WORKERS);
    let healthy = SlowHttp::start(NORMAL_MS);
    // The default algorithm (vegas) and bounds: each replica learns its own latency.
    let config = TempFile::new("ffslow.toml", &group(&[slowing.addr, healthy.addr], ""));
    let _agent = start_agent(&cg, &config);
    let load = CurlLoad::start(&cg, &slowing.url(), WORKERS);
    let get = |up: &SlowHttp, name| field(&cg, up.addr, name);
    let p90 = |up: &SlowHttp| row(&cg, up.addr).and_then(|r| r["p90_ms"].as_f64());

    wait_until("a baseline settled and a limit above the load", || {
        row(&cg, slowing.addr).is_some_and(|r| baseline_settled(&r))
            && get(&slowing, "limit") >= WORKERS as i64
    });
    // The slower replica's answers take ten times as long, and its clients double (requests
    // arriving at their own pace pile up): the excess over its workers would only queue there.
    slowing.set_delay_ms(10 * NORMAL_MS);
    let piling_up = CurlLoad::start(&cg, &slowing.url(), WORKERS);
    wait_until(
        "the slow replica's limit to fall below its clients and the healthy one to serve the overflow",
        || {
            get(&slowing, "limit") < 2 * WORKERS as i64
                && get(&slowing, "redirected") > 0
                && p90(&healthy).is_some()
        },
    );
    drop((load, piling_up));
    wait_until("the load to end", || {
        get(&slowing, "inflight") == 0 && get(&healthy, "inflight") == 0
    });
    assert_eq!(
        get(&healthy, "admitted"),
        get(&slowing, "redirected"),
        "the healthy replica served exactly what fell forward to it"
    );
    let (slow_p90, healthy_p90) = (p90(&slowing).unwrap(), p90(&healthy).unwrap());
    assert!(
        healthy_p90 < slow_p90,
        "fallen-forward connections are timed as the healthy replica's: {healthy_p90} ms vs {slow_p90} ms"
    );
}
