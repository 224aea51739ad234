//! In-flight accounting: every admitted connection gives its slot back exactly once.

use std::net::SocketAddr;

use limiter_integration_tests::*;

/// Every destination row satisfies admitted = closed + connect_failed + inflight, with
/// nothing left in flight.
fn assert_nothing_in_flight(cg: &TestCgroup) {
    for r in status(cg) {
        assert_eq!(r["inflight"], 0, "leaked or underflowed slot: {r}");
    }
}

#[kernel_test]
fn ten_thousand_connections_through_every_ending_leave_nothing_in_flight() {
    let cg = TestCgroup::new("churn");
    let endings = Endings::new();
    let held = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "1000"]);

    // A process killed while holding connections.
    let (victim, lines) = Probe::hold(&cg, held.addr, 20);
    assert_eq!(tally(&lines), (20, 0, 0));
    assert_eq!(field(&cg, held.addr, "inflight"), 20);
    victim.kill();

    // 2 000 rounds x 5 endings: client close, server FIN/RST, client RST, abandoned
    // non-blocking connect, SYN refused; plus SYNs that time out.
    endings.run(&cg, 2000, 2);

    wait_until("every slot to come back", || {
        status(&cg).iter().all(|r| r["inflight"] == 0)
    });
    assert_nothing_in_flight(&cg);
    let rows = status(&cg);
    let total: i64 = rows.iter().map(|r| r["admitted"].as_i64().unwrap()).sum();
    assert_eq!(total, 20 + 2000 * 5 + 2);
    assert_eq!(field(&cg, endings.refused, "connect_failed"), 2000);
    assert_eq!(
        field(&cg, endings.blackhole.addr, "connect_failed"),
        2000 + 2
    );
    assert_eq!(field(&cg, held.addr, "admitted"), 20);
}

#[kernel_test]
fn a_killed_process_gives_its_slots_back() {
    let cg = TestCgroup::new("kill");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "3"]);
    let (victim, lines) = Probe::hold(&cg, up.addr, 3);
    assert_eq!(tally(&lines), (3, 0, 0));
    victim.kill();
    wait_until("the killed process's slots", || {
        field(&cg, up.addr, "inflight") == 0
    });
    let (probe, lines) = Probe::hold(&cg, up.addr, 3);
    assert_eq!(tally(&lines), (3, 0, 0), "the freed slots are usable again");
    probe.release();
}

#[kernel_test]
fn connections_open_before_attach_are_counted() {
    let cg = TestCgroup::new("adopt");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let (before, lines) = Probe::hold(&cg, up.addr, 3);
    assert_eq!(tally(&lines), (3, 0, 0));

    let agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "5"]);
    assert_eq!(field(&cg, up.addr, "inflight"), 3);
    let (after, lines) = Probe::hold(&cg, up.addr, 3);
    assert_eq!(
        tally(&lines),
        (2, 1, 0),
        "the pre-existing 3 count against the limit of 5"
    );

    before.release();
    wait_until("the pre-existing slots", || {
        field(&cg, up.addr, "inflight") == 2
    });
    after.release();
    wait_until("all slots", || field(&cg, up.addr, "inflight") == 0);
    drop(agent);
}

#[kernel_test]
fn inbound_connections_are_not_counted_as_outbound() {
    let cg = TestCgroup::new("inbound");
    // The probe in the cgroup listens (its own netns upstream) and accepts: the accepted
    // sockets are inbound and must not be adopted; only its outbound connects count.
    let mut probe = Probe::spawn(
        &cg,
        &[
            "hold",
            "--to",
            "127.0.0.1:7001",
            "--count",
            "2",
            "--own-netns",
        ],
    );
    let lines = probe.lines_until("ready");
    assert_eq!(tally(&lines[..2]), (2, 0, 0));
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "5"]);
    let dest = "127.0.0.1:7001".parse().unwrap();
    assert_eq!(field(&cg, dest, "inflight"), 2);
    assert_eq!(
        status(&cg).len(),
        1,
        "accepted sockets are not destinations"
    );
    probe.release();
    wait_until("all slots", || field(&cg, dest, "inflight") == 0);
}

/// A connection the upstream resets is over at once: its slot comes back while the
/// application still holds the socket. One it closes with a FIN waits in CLOSE_WAIT for
/// the application's own close, and holds its slot until then.
#[kernel_test]
fn a_reset_gives_the_slot_back_before_the_application_closes() {
    let cg = TestCgroup::new("reset");
    let closer = Upstream::start("127.0.0.1:0", Behaviour::Close);
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "100"]);
    let (probe, lines) = Probe::hold(&cg, closer.addr, 4);
    // A reset that arrives before the probe is scheduled again ends its connect with
    // ECONNRESET (the socket is closed by then); a FIN leaves it connected.
    let reset = format!("err {}", libc::ECONNRESET);
    let (connected, refused, _) = tally(&lines);
    assert!(
        refused == 0 && connected >= 2 && lines.iter().all(|l| l == "ok" || *l == reset),
        "{lines:?}"
    );
    // The upstream resets every other connection and closes the others with a FIN: the
    // count can only reach 2 by the resets, and only the probe's close takes it lower.
    wait_until("the two reset connections' slots", || {
        field(&cg, closer.addr, "inflight") == 2
    });
    probe.release();
    wait_until("the other two", || field(&cg, closer.addr, "inflight") == 0);
    assert_eq!(field(&cg, closer.addr, "connect_failed"), 0);
}

/// A RST that TCP discards (its sequence number is not the next one expected, RFC 5961)
/// ends nothing: the connection stays open and keeps its slot. A process with CAP_NET_RAW
/// in the cgroup, or an off-path spoofer, cannot free slots that way.
#[kernel_test]
fn a_forged_reset_tcp_discards_frees_no_slot() {
    let cg = TestCgroup::new("forged-rst");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "3"]);
    let (probe, lines) = Probe::hold(&cg, up.addr, 3);
    assert_eq!(tally(&lines), (3, 0, 0));
    let ends = client_ends(up.addr);
    assert_eq!(ends.len(), 3, "{ends:?}");
    let SocketAddr::V4(from) = up.addr else {
        unreachable!("bound to 127.0.0.1")
    };
    for end in ends {
        let SocketAddr::V4(to) = end else {
            unreachable!("connected to 127.0.0.1")
        };
        // Two numbers half the sequence space apart: at most one is even in the window,
        // and neither is the exact next one but with odds of one in 2^31.
        for seq in [0x1234_5678, 0x9234_5678] {
            forge_rst(from, to, seq);
        }
    }
    // The RSTs went through the ingress path before this connect: had any freed a slot,
    // this connect would have taken it.
    let (extra, lines) = Probe::hold(&cg, up.addr, 1);
    assert_eq!(tally(&lines), (0, 1, 0), "the limit is still full");
    assert_eq!(client_ends(up.addr).len(), 3, "the connections are alive");
    assert_eq!(field(&cg, up.addr, "inflight"), 3);
    extra.release();
    probe.release();
    wait_until("the slots, on the real close", || {
        field(&cg, up.addr, "inflight") == 0
    });
}
