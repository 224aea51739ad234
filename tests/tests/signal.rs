//! The latency signal: samples and outcomes from unmodified traffic (root, real kernel).

use std::{net::SocketAddr, process::Command, time::Duration};

use limiter_integration_tests::*;

fn respond(first_byte_ms: u64, hold_ms: u64) -> Upstream {
    Upstream::start(
        "127.0.0.1:0",
        Behaviour::Respond {
            first_byte: Duration::from_millis(first_byte_ms),
            hold: Duration::from_millis(hold_ms),
        },
    )
}

fn start(cg: &TestCgroup) -> Agent {
    start_command(cg, signal_logging())
}

fn start_command(cg: &TestCgroup, agent: Command) -> Agent {
    Agent::start_command(agent, cg, &["--algorithm", "fixed", "--limit", "100"])
}

/// Runs an exchange probe and returns the client's own time-to-first-byte figures.
fn exchange(cg: &TestCgroup, to: SocketAddr, extra: &[&str]) -> Vec<u64> {
    let mut args = vec!["exchange", "--to"];
    let to = to.to_string();
    args.push(&to);
    args.extend_from_slice(extra);
    let lines = Probe::spawn(cg, &args).lines_until_exit();
    lines
        .iter()
        .map(|l| {
            l.strip_prefix("ttfb_ns ")
                .unwrap_or_else(|| panic!("{l}"))
                .parse()
                .unwrap()
        })
        .collect()
}

#[kernel_test]
fn samples_lie_between_the_upstreams_delay_and_the_clients_own_time_to_first_byte() {
    let cg = TestCgroup::new("ttfb");
    let agent = start(&cg);
    for delay_ms in [5, 50, 200] {
        let up = respond(delay_ms, 0);
        let client = exchange(&cg, up.addr, &[]);
        let kernel = agent.wait_signals(up.addr, "sample", 1);
        assert_eq!(kernel.len(), 1);
        assert_bounded(kernel[0].value_ns, delay_ms, client[0]);
        assert_eq!(kernel[0].inflight, 1, "in flight when the request started");
    }
}

/// `requests` exchanges on one keep-alive connection: one sample each, within its bounds,
/// one handshake reporting the connection's own slot, and the slot back once it ends.
fn assert_keep_alive_samples(cg: &TestCgroup, agent: &Agent, requests: usize) {
    let up = respond(2, 0);
    let client = exchange(cg, up.addr, &["--requests", &requests.to_string()]);
    assert_eq!(client.len(), requests);
    wait_until("the connection to end", || {
        field(cg, up.addr, "inflight") == 0
    });
    let kernel = agent.wait_signals(up.addr, "sample", requests);
    assert_eq!(kernel.len(), requests);
    for (k, c) in kernel.iter().zip(&client) {
        assert_bounded(k.value_ns, 2, *c);
    }
    let handshakes = agent.wait_signals(up.addr, "handshake", 1);
    assert_eq!(handshakes.len(), 1);
    assert_eq!(handshakes[0].inflight, 1, "in flight when it was admitted");
}

#[kernel_test]
fn a_keep_alive_connection_gives_one_sample_per_exchange() {
    let cg = TestCgroup::new("keepalive");
    let agent = start(&cg);
    assert_keep_alive_samples(&cg, &agent, 20);
}

#[kernel_test]
fn a_streamed_response_is_timed_to_its_first_byte() {
    let cg = TestCgroup::new("stream");
    let agent = start(&cg);
    let up = respond(280, 3000);
    let client = exchange(&cg, up.addr, &[]);
    let kernel = agent.wait_signals(up.addr, "sample", 1);
    wait_until("the connection to end", || {
        field(&cg, up.addr, "inflight") == 0
    });
    let kernel_after = agent.signals();
    let samples: Vec<_> = kernel_after.iter().filter(|s| s.kind == "sample").collect();
    assert_eq!(samples.len(), 1, "the 3 s body adds no sample");
    // At most the client's time to the first byte, which ends 3 s before the body does.
    assert_bounded(kernel[0].value_ns, 280, client[0]);
}

#[kernel_test]
fn a_large_upload_is_timed_from_its_first_byte() {
    let cg = TestCgroup::new("upload");
    let agent = start(&cg);
    let up = respond(20, 0);
    let client = exchange(&cg, up.addr, &["--request-bytes", "1048576"]);
    wait_until("the connection to end", || {
        field(&cg, up.addr, "inflight") == 0
    });
    let kernel = agent.wait_signals(up.addr, "sample", 1);
    assert_eq!(
        kernel.len(),
        1,
        "one request, one sample, however many segments"
    );
    assert_bounded(kernel[0].value_ns, 20, client[0]);
}

#[kernel_test]
fn every_outcome_is_reported_once_per_connection() {
    let cg = TestCgroup::new("outcomes");
    let agent = start(&cg);

    // RST to the SYN.
    let refused = closed_port();
    let (_, lines) = Probe::hold(&cg, refused, 1);
    assert_eq!(tally(&lines), (0, 1, 0));
    // No answer to the SYN at all: the probe's churn gives two timed-out connects and
    // one abandoned non-blocking connect per round.
    let endings = Endings::new();
    endings.run(&cg, 1, 2);
    // The upstream resets while the request awaits its response.
    let resetter = Upstream::start("127.0.0.1:0", Behaviour::ResetAfterRequest);
    let lines =
        Probe::spawn(&cg, &["exchange", "--to", &resetter.addr.to_string()]).lines_until_exit();
    assert_eq!(lines, [format!("err {}", libc::ECONNRESET)]);
    // The upstream closes (FIN) while the request awaits its response.
    let hanger = Upstream::start("127.0.0.1:0", Behaviour::CloseAfterRequest);
    let lines =
        Probe::spawn(&cg, &["exchange", "--to", &hanger.addr.to_string()]).lines_until_exit();
    assert_eq!(lines.len(), 1, "{lines:?}");
    // The client closes while awaiting its response.
    let slow = respond(2000, 0);
    let lines = Probe::spawn(
        &cg,
        &["exchange", "--to", &slow.addr.to_string(), "--give-up"],
    )
    .lines_until_exit();
    assert_eq!(lines, ["gave_up"]);

    wait_until("every connection to end", || {
        status(&cg).iter().all(|r| r["inflight"] == 0)
    });
    let count = |dest: SocketAddr, kind: &str| {
        agent
            .signals()
            .iter()
            .filter(|s| s.destination == dest && s.kind == kind)
            .count()
    };
    wait_until("the last signals", || count(slow.addr, "gave_up") == 1);
    assert_eq!(count(refused, "connect_refused"), 1);
    assert_eq!(count(endings.refused, "connect_refused"), 1);
    assert_eq!(count(endings.blackhole.addr, "connect_timeout"), 3);
    assert_eq!(count(resetter.addr, "error"), 1);
    assert_eq!(count(resetter.addr, "hung_up"), 0, "a reset is an error");
    wait_until("the hang-up", || count(hanger.addr, "hung_up") == 1);
    assert_eq!(
        count(hanger.addr, "error"),
        0,
        "a close is reported as a hang-up"
    );
    assert_eq!(count(resetter.addr, "handshake"), 1);
    assert_eq!(count(slow.addr, "gave_up"), 1);
    assert_eq!(
        count(slow.addr, "error"),
        0,
        "giving up is not an upstream error"
    );
    // Connections that ended normally report no outcome.
    for kind in [
        "error",
        "hung_up",
        "gave_up",
        "connect_refused",
        "connect_timeout",
    ] {
        assert_eq!(
            count(endings.echo.addr, kind),
            0,
            "{kind} on a normal connection"
        );
    }
    assert_eq!(count(endings.echo.addr, "handshake"), 2);
}

/// A client that ends its connection with a last message and no reply (PostgreSQL's
/// Terminate) is reported with a wait of microseconds, shorter than any answer the
/// destination gave. The controller counts a close as a timeout only when the wait was
/// longer than the destination normally takes, so this is a goodbye.
#[kernel_test]
fn a_goodbye_reports_a_wait_shorter_than_any_answer() {
    let cg = TestCgroup::new("signal-goodbye");
    let agent = start(&cg);
    let up = respond(50, 0);
    let to = up.addr.to_string();
    let lines = Probe::spawn(&cg, &["exchange", "--to", &to, "--goodbye"]).lines_until_exit();
    assert_eq!(lines.last().map(String::as_str), Some("goodbye"));
    let answered = agent.wait_signals(up.addr, "sample", 1)[0].value_ns;
    let goodbye = agent.wait_signals(up.addr, "gave_up", 1)[0].value_ns;
    assert!(
        goodbye < answered,
        "a goodbye waited {goodbye} ns, the answer took {answered} ns"
    );
}

#[kernel_test]
fn connects_the_limiter_refuses_report_no_outcome() {
    let cg = TestCgroup::new("shedoutcome");
    let agent = Agent::start_command(
        signal_logging(),
        &cg,
        &["--algorithm", "fixed", "--limit", "1"],
    );
    let held = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let (probe, lines) = Probe::hold(&cg, held.addr, 3);
    assert_eq!(tally(&lines), (1, 2, 0));
    probe.release();
    // Signals arrive in order: once a later exchange's sample is in, so is anything the
    // refused sockets' close could have reported.
    let later = respond(1, 0);
    exchange(&cg, later.addr, &[]);
    agent.wait_signals(later.addr, "sample", 1);
    let outcomes: Vec<_> = agent
        .signals()
        .into_iter()
        .filter(|s| s.destination == held.addr && s.kind != "handshake")
        .collect();
    assert!(
        outcomes.is_empty(),
        "a shed connect is not an upstream outcome: {outcomes:?}"
    );
}

#[kernel_test]
fn ipv6_traffic_gives_samples_too() {
    let cg = TestCgroup::new("ipv6signal");
    let agent = start(&cg);
    let up = Upstream::start(
        "[::1]:0",
        Behaviour::Respond {
            first_byte: Duration::from_millis(10),
            hold: Duration::ZERO,
        },
    );
    let client = exchange(&cg, up.addr, &["--requests", "3"]);
    let kernel = agent.wait_signals(up.addr, "sample", 3);
    for (k, c) in kernel.iter().zip(&client) {
        assert_bounded(k.value_ns, 10, *c);
    }
}

#[kernel_test]
fn traffic_over_a_real_interface_gives_samples_too() {
    let cg = TestCgroup::new("vethsignal");
    let net = TestNetns::new();
    let up = net.upstream(Behaviour::Respond {
        first_byte: Duration::from_millis(10),
        hold: Duration::ZERO,
    });
    let agent = start(&cg);
    let client = exchange(
        &cg,
        up.addr,
        &["--requests", "3", "--request-bytes", "100000"],
    );
    let kernel = agent.wait_signals(up.addr, "sample", 3);
    for (k, c) in kernel.iter().zip(&client) {
        assert_bounded(k.value_ns, 10, *c);
    }
    assert_eq!(agent.wait_signals(up.addr, "handshake", 1).len(), 1);
}

/// The upstream answers at once; only the network delays its answer. Ignored where run
/// by plain `cargo test`, since not every kernel has netem loaded: the VM runs of
/// `cargo xtask test --kernel` load it and run this test.
#[test]
#[ignore = "needs sch_netem (network delay); `cargo xtask test --kernel` runs it in a VM"]
fn a_delay_the_network_adds_is_part_of_the_sample() {
    require_root();
    const NETWORK_DELAY_MS: u64 = 100;
    let cg = TestCgroup::new("netemsignal");
    let net = TestNetns::new();
    net.delay_outgoing(Duration::from_millis(NETWORK_DELAY_MS));
    let up = net.upstream(Behaviour::Respond {
        first_byte: Duration::ZERO,
        hold: Duration::ZERO,
    });
    let agent = start(&cg);
    let client = exchange(&cg, up.addr, &["--requests", "3"]);
    let kernel = agent.wait_signals(up.addr, "sample", 3);
    for (k, c) in kernel.iter().zip(&client) {
        assert_bounded(k.value_ns, NETWORK_DELAY_MS, *c);
    }
}

#[kernel_test]
fn an_overflowing_ring_buffer_counts_its_losses_and_never_stalls_the_application() {
    let cg = TestCgroup::new("overflow");
    // 4 KiB holds about 70 signals; nobody drains it while the agent is stopped.
    let agent = Agent::start_command(
        signal_logging(),
        &cg,
        &[
            "--algorithm",
            "fixed",
            "--limit",
            "100",
            "--signal-buffer-kib",
            "4",
        ],
    );
    let up = respond(0, 0);
    agent.signal(libc::SIGSTOP);
    let client = exchange(&cg, up.addr, &["--requests", "500"]);
    assert_eq!(client.len(), 500, "every request answered, no error");
    agent.signal(libc::SIGCONT);

    // 500 samples and one handshake were sent: each was either delivered or counted lost.
    let drops = || global(&cg, "ringbuf_drops") as usize;
    wait_until("every signal delivered or counted", || {
        agent
            .signals()
            .iter()
            .filter(|s| s.destination == up.addr)
            .count()
            + drops()
            == 501
    });
    assert!(drops() > 0, "the ring buffer must have overflowed");
}
