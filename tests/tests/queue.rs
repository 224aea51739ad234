//! Queueing at connect, `overflow = "queue"` (root, real kernel): a connect at the limit
//! waits, with nothing sent, until a slot frees, within its own deadline.

use std::net::SocketAddr;

use limiter_integration_tests::*;

/// The probe's upstream, inside the probe's own network namespace, where it counts the
/// SYNs that reach it.
const TO: &str = "127.0.0.1:7000";

fn to() -> SocketAddr {
    TO.parse().unwrap()
}

/// An agent with a fixed limit that queues connects at it, waiting up to `max_wait_ms`,
/// with room for three times the limit waiting: none of these tests' waiters is refused.
fn agent(cg: &TestCgroup, limit: u32, max_wait_ms: u64) -> (Agent, TempFile) {
    // Named for the cgroup: tests run at once, each with its own file.
    let config = TempFile::new(
        &format!("{}.toml", cg.path().file_name().unwrap().to_string_lossy()),
        &format!(
            "algorithm = \"fixed\"\nlimit = {limit}\noverflow = \"queue\"\n\n[queue]\nwait = 4\nrefuse = 4\nmax_wait_ms = {max_wait_ms}\n"
        ),
    );
    let agent = Agent::start(cg, &["--config", &config.0.to_string_lossy()]);
    (agent, config)
}

fn queue_probe(cg: &TestCgroup, held: usize, queued: usize, timeout_ms: u64) -> Probe {
    let mut probe = Probe::spawn(
        cg,
        &[
            "queue",
            "--to",
            TO,
            "--held",
            &held.to_string(),
            "--queued",
            &queued.to_string(),
            "--timeout-ms",
            &timeout_ms.to_string(),
        ],
    );
    assert_eq!(probe.lines_until("held"), Vec::<String>::new());
    probe
}

fn syns(probe: &mut Probe) -> i64 {
    probe.send("syns");
    let line = probe.next_line();
    line.strip_prefix("syns ")
        .unwrap_or_else(|| panic!("not a SYN count: {line}"))
        .parse()
        .unwrap()
}

fn wait_for_waiting(cg: &TestCgroup, n: i64) {
    wait_until(&format!("{n} connect(s) waiting"), || {
        row(cg, to()).is_some_and(|r| r["waiting"] == n)
    });
}

#[kernel_test]
fn connects_over_the_limit_wait_and_are_admitted_as_slots_free() {
    let cg = TestCgroup::new("queue");
    let (_agent, _config) = agent(&cg, 2, 30_000);
    let mut probe = queue_probe(&cg, 2, 4, 30_000);
    wait_for_waiting(&cg, 4);
    assert_eq!(syns(&mut probe), 2, "a waiting connect sent its SYN");
    assert_eq!(field(&cg, to(), "inflight"), 2);

    // Each slot freed admits one waiter, never more than the limit at once.
    for admitted in 1..=4 {
        probe.send("release");
        let line = probe.next_line();
        assert!(line.starts_with("ok "), "{line}");
        assert_eq!(field(&cg, to(), "queue_admitted"), admitted);
        assert_eq!(field(&cg, to(), "waiting"), 4 - admitted);
        assert_eq!(field(&cg, to(), "inflight"), 2);
    }
    assert_eq!(
        syns(&mut probe),
        6,
        "each connect sent one SYN that reached the upstream"
    );
    for counter in ["queue_full", "queue_expired", "queue_abandoned", "shed"] {
        assert_eq!(field(&cg, to(), counter), 0, "{counter}");
    }
    assert_eq!(field(&cg, to(), "queued"), 4);
    wait_until("the waits published", || {
        row(&cg, to()).is_some_and(|r| r["wait_p99_ms"].as_f64().is_some_and(|ms| ms > 0.0))
    });
}

#[kernel_test]
fn a_connect_that_times_out_waiting_sent_nothing_and_gives_everything_back() {
    let cg = TestCgroup::new("queuedeadline");
    let (_agent, _config) = agent(&cg, 1, 30_000);
    let mut probe = queue_probe(&cg, 1, 1, 200);
    let line = probe.next_line();
    assert_eq!(
        line, "timeout 0",
        "the application's own deadline ends the wait"
    );
    assert_eq!(
        syns(&mut probe),
        1,
        "the upstream saw a SYN from the connect that gave up"
    );
    wait_until("the waiter gone", || {
        row(&cg, to()).is_some_and(|r| r["waiting"] == 0 && r["queue_abandoned"] == 1)
    });
    assert_eq!(field(&cg, to(), "inflight"), 1);
    assert_eq!(
        field(&cg, to(), "connect_failed"),
        0,
        "our wait is not the upstream's failure"
    );
}

#[kernel_test]
fn a_connect_is_failed_at_the_maximum_wait_with_etimedout() {
    let cg = TestCgroup::new("queuemax");
    let (_agent, _config) = agent(&cg, 1, 300);
    let mut probe = queue_probe(&cg, 1, 1, 30_000);
    let line = probe.next_line();
    assert_eq!(line, format!("err 0 {}", libc::ETIMEDOUT));
    assert_eq!(
        syns(&mut probe),
        1,
        "the expired connect reached the upstream"
    );
    assert_eq!(field(&cg, to(), "queue_expired"), 1);
    assert_eq!(field(&cg, to(), "waiting"), 0);
    assert_eq!(field(&cg, to(), "inflight"), 1);
}

#[kernel_test]
fn killed_waiters_give_everything_back() {
    let cg = TestCgroup::new("queuekill");
    let (_agent, _config) = agent(&cg, 2, 30_000);
    let probe = queue_probe(&cg, 2, 3, 30_000);
    wait_for_waiting(&cg, 3);
    probe.kill();
    wait_until("nothing waiting or in flight", || {
        row(&cg, to()).is_some_and(|r| r["waiting"] == 0 && r["inflight"] == 0)
    });
    assert_eq!(field(&cg, to(), "queue_abandoned"), 3);
}

#[kernel_test]
fn the_queue_is_refused_past_its_bounds() {
    let cg = TestCgroup::new("queuefull");
    let config = TempFile::new(
        "queuefull.toml",
        "algorithm = \"fixed\"\nlimit = 2\noverflow = \"queue\"\n\n[queue]\nwait = 1.5\nrefuse = 1.5\nmax_wait_ms = 30000\n",
    );
    let _agent = Agent::start(&cg, &["--config", &config.0.to_string_lossy()]);
    // In flight 2 and waiting 1 make 1.5 times the limit: the fourth and fifth are refused.
    let mut probe = queue_probe(&cg, 2, 3, 30_000);
    let mut refused = Vec::new();
    for _ in 0..2 {
        refused.push(probe.next_line());
    }
    refused.sort();
    let errno = libc::ECONNREFUSED;
    assert_eq!(
        refused,
        [format!("err 1 {errno}"), format!("err 2 {errno}")]
    );
    assert_eq!(field(&cg, to(), "queue_full"), 2);
    assert_eq!(field(&cg, to(), "waiting"), 1);
    assert_eq!(syns(&mut probe), 2);
}

#[kernel_test]
fn waiters_are_admitted_when_the_agent_is_gone() {
    let cg = TestCgroup::new("queueopen");
    let config = TempFile::new(
        "queueopen.toml",
        "algorithm = \"fixed\"\nlimit = 1\noverflow = \"queue\"\nheartbeat_timeout_secs = 1\n\n[queue]\nmax_wait_ms = 60000\n",
    );
    let agent = Agent::start(&cg, &["--config", &config.0.to_string_lossy()]);
    let mut probe = queue_probe(&cg, 1, 2, 60_000);
    wait_for_waiting(&cg, 2);
    agent.signal(libc::SIGSTOP);
    let mut admitted = vec![probe.next_line(), probe.next_line()];
    admitted.sort();
    agent.signal(libc::SIGCONT);
    assert_eq!(admitted, ["ok 0", "ok 1"]);
    assert_eq!(syns(&mut probe), 3);
}

#[kernel_test]
fn a_socket_that_waited_runs_on_its_own_timers_again() {
    let cg = TestCgroup::new("queuetimers");
    let (_agent, _config) = agent(&cg, 1, 300);
    let mut probe = Probe::spawn(&cg, &["requeue", "--to", TO]);
    let lines = probe.lines_until_exit();
    // 6: tcp_syn_retries of a new network namespace, the probe's.
    assert_eq!(
        lines,
        [
            format!("first err {}", libc::ETIMEDOUT),
            "again ok".to_string(),
            "timers 12345 6".to_string(),
        ]
    );
}

#[kernel_test]
fn queueing_turned_on_by_a_reload_waits_for_a_restart() {
    let cg = TestCgroup::new("queuereload");
    let config = TempFile::new("queuereload.toml", "algorithm = \"fixed\"\nlimit = 1\n");
    let agent = Agent::start(&cg, &["--config", &config.0.to_string_lossy()]);
    std::fs::write(
        &config.0,
        "algorithm = \"fixed\"\nlimit = 1\noverflow = \"queue\"\n",
    )
    .unwrap();
    agent.signal(libc::SIGHUP);
    wait_until("the refused reload in the log", || {
        agent.logged(&["reload failed", "restart the agent"])
    });
}
