//! `limiter-user events`: readers of a running agent's decisions and limit changes, fast
//! and slow at once (root, real kernel).

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use limiter_integration_tests::*;
use serde_json::Value;

/// `limiter-user events` for the cgroup, connected once it says so.
struct Reader {
    child: Child,
}

impl Reader {
    fn start(cgroup: &TestCgroup, json: bool) -> Self {
        let mut command = Command::new(agent_bin());
        command.args(["events", "--cgroup", &cgroup.path().to_string_lossy()]);
        if json {
            command.arg("--json");
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start events");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        assert!(line.contains("following"), "events did not connect: {line}");
        Reader { child }
    }

    /// Its lines, as they come, on a channel.
    fn lines(&mut self) -> mpsc::Receiver<String> {
        let stdout = BufReader::new(self.child.stdout.take().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        rx
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The next line that satisfies `wanted`; panics if the stream ends first.
fn next_matching(rx: &mpsc::Receiver<String>, wanted: impl Fn(&str) -> bool) -> String {
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(150))
            .expect("the reader went quiet");
        if wanted(&line) {
            return line;
        }
    }
}

fn json(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"))
}

#[kernel_test]
fn refusals_name_the_destination_limit_and_process_for_every_reader() {
    let cg = TestCgroup::new("events");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "2"]);
    let (mut machine, mut human) = (Reader::start(&cg, true), Reader::start(&cg, false));
    let (machine_lines, human_lines) = (machine.lines(), human.lines());

    let (probe, lines) = Probe::hold(&cg, up.addr, 5);
    assert_eq!(tally(&lines), (2, 3, 0));
    let dest = up.addr.to_string();
    for _ in 0..3 {
        let shed = json(&next_matching(&machine_lines, |l| {
            json(l)["event"] == "shed" && json(l)["destination"] == dest
        }));
        assert_eq!(shed["pid"], probe.pid());
        assert_eq!(shed["comm"], "limiter-probe");
        assert_eq!(shed["limit"], 2);
        assert_eq!(shed["inflight"], 2);
    }
    let expected = format!(
        " shed {dest} limit 2 in-flight 2 by limiter-probe[{}]",
        probe.pid()
    );
    for _ in 0..3 {
        next_matching(&human_lines, |l| l.ends_with(&expected));
    }
}

#[kernel_test]
fn a_queued_connect_is_told_when_it_joins_and_when_it_is_admitted() {
    let cg = TestCgroup::new("eventsqueue");
    let config = TempFile::new(
        "eventsqueue.toml",
        "algorithm = \"fixed\"\nlimit = 1\noverflow = \"queue\"\n\n[queue]\nmax_wait_ms = 30000\n",
    );
    let _agent = Agent::start(&cg, &["--config", &config.0.to_string_lossy()]);
    let (mut machine, mut human) = (Reader::start(&cg, true), Reader::start(&cg, false));
    let (machine_lines, human_lines) = (machine.lines(), human.lines());
    // In a network namespace of its own: one held connection, then one that waits.
    let mut probe = Probe::spawn(
        &cg,
        &[
            "queue",
            "--to",
            "127.0.0.1:7000",
            "--held",
            "1",
            "--queued",
            "1",
            "--timeout-ms",
            "30000",
        ],
    );
    probe.lines_until("held");
    let queued = json(&next_matching(&machine_lines, |l| {
        json(l)["event"] == "queued"
    }));
    assert_eq!(queued["destination"], "127.0.0.1:7000");
    assert_eq!(queued["pid"], probe.pid());
    assert_eq!(
        (queued["limit"].as_u64(), queued["inflight"].as_u64()),
        (Some(1), Some(1))
    );
    probe.send("release");
    assert_eq!(probe.next_line(), "ok 0");
    let waited = json(&next_matching(&machine_lines, |l| {
        json(l)["event"] == "waited"
    }));
    assert_eq!(waited["end"], "admitted");
    assert!(
        waited["waited_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{waited}"
    );
    next_matching(&human_lines, |l| {
        l.contains(" queued 127.0.0.1:7000 limit 1 in-flight 1")
    });
    next_matching(&human_lines, |l| {
        l.contains(" admitted 127.0.0.1:7000 after waiting ")
    });
}

#[kernel_test]
fn a_slow_reader_loses_lines_and_is_told_while_the_agent_and_others_go_on() {
    let cg = TestCgroup::new("eventsslow");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "1"]);
    // Never read until the end: its pipe, its socket and its queue fill up.
    let mut slow = Reader::start(&cg, false);
    let mut fast = Reader::start(&cg, true);
    let fast_lines = fast.lines();

    // Far more decisions than the slow reader's queue and buffers hold, all of which the
    // fast reader sees (or is told it lost) while the slow one reads nothing.
    let mut seen = 0u64;
    while seen < 12_000 {
        let (probe, lines) = Probe::hold(&cg, up.addr, 3_000);
        assert_eq!(tally(&lines).1, 2_999);
        let last = probe.pid();
        probe.release();
        loop {
            let event = json(&next_matching(&fast_lines, |_| true));
            seen += event["count"].as_u64().unwrap_or(1);
            if event["event"] == "shed" && event["pid"] == last {
                break;
            }
        }
    }
    let slow_lines = slow.lines();
    let lost = next_matching(&slow_lines, |l| l.contains(" lost "));
    assert!(
        lost.ends_with("event(s): this reader fell behind"),
        "{lost}"
    );
    let count: u64 = lost.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(count > 0, "{lost}");
}

#[kernel_test]
fn a_limit_change_says_old_new_and_why() {
    let cg = TestCgroup::new("eventslimit");
    let up = Upstream::start(
        "127.0.0.1:0",
        Behaviour::Respond {
            first_byte: Duration::ZERO,
            hold: Duration::ZERO,
        },
    );
    let fixed = |limit: u32| format!("algorithm = \"fixed\"\nlimit = {limit}\n");
    let config = TempFile::new("events.toml", &fixed(2));
    let agent = Agent::start(&cg, &["--config", &config.0.to_string_lossy()]);
    // A destination gets its controller from its first signal: one exchange gives one.
    let to = up.addr.to_string();
    Probe::spawn(&cg, &["exchange", "--to", &to, "--requests", "1"]).lines_until_exit();
    wait_until("the controller to publish the destination's policy", || {
        map_entry(&cg, "policies", up.addr).is_some()
    });
    let mut reader = Reader::start(&cg, true);
    let lines = reader.lines();

    std::fs::write(&config.0, fixed(5)).unwrap();
    agent.signal(libc::SIGHUP);
    let change = json(&next_matching(&lines, |l| json(l)["event"] == "limit"));
    assert_eq!(change["destination"], up.addr.to_string());
    assert_eq!(
        (change["old"].as_u64(), change["new"].as_u64()),
        (Some(2), Some(5))
    );
    assert_eq!(change["reconfigured"], true, "{change}");
    assert!(change["p90_ms"].is_null() && change["baseline_ms"].is_null());
}

#[kernel_test]
fn a_slowdown_lowers_the_limit_with_the_latency_that_moved_it() {
    const SLOW_MS: u64 = 100;
    let cg = TestCgroup::new("eventsslowdown");
    let up = SlowHttp::start(5);
    let _agent = Agent::start(&cg, &[]);
    let _load = CurlLoad::start(&cg, &up.url(), 16);
    wait_until("a baseline settled", || {
        row(&cg, up.addr).is_some_and(|r| baseline_settled(&r))
    });
    let mut reader = Reader::start(&cg, true);
    let lines = reader.lines();
    up.set_delay_ms(SLOW_MS);
    let dest = up.addr.to_string();
    // Vegas may trim a healthy limit on the noise of its smoothed latency (a loaded machine,
    // an emulated one) just before the slowdown shows: the change looked for is the first
    // cut of a window whose p90 only the slowdown explains.
    let change = json(&next_matching(&lines, |l| {
        let e = json(l);
        e["event"] == "limit"
            && e["destination"] == dest
            && e["new"].as_u64() < e["old"].as_u64()
            && e["p90_ms"].as_f64() > Some(SLOW_MS as f64 / 2.0)
    }));
    let baseline = change["baseline_ms"].as_f64().unwrap();
    assert!(
        baseline < SLOW_MS as f64 / 2.0,
        "the event names the baseline the slowdown left, not the slow latency: {change}"
    );
    assert_eq!(change["reconfigured"], false);
}

#[kernel_test]
fn a_redirect_names_the_peer_it_went_to() {
    let cg = TestCgroup::new("eventsredirect");
    let (first, second) = (
        Upstream::start("127.0.0.1:0", Behaviour::Hold),
        Upstream::start("127.0.0.2:0", Behaviour::Hold),
    );
    let config = TempFile::new(
        "events-group.toml",
        &format!(
            "[[group]]\nname = \"replicas\"\nmembers = [\"{}\", \"{}\"]\nalgorithm = \"fixed\"\nlimit = 1\n",
            first.addr, second.addr
        ),
    );
    let _agent = Agent::start(&cg, &["--config", &config.0.to_string_lossy()]);
    let mut reader = Reader::start(&cg, true);
    let lines = reader.lines();
    let (probe, outcomes) = Probe::hold(&cg, first.addr, 2);
    assert_eq!(tally(&outcomes), (2, 0, 0), "the second falls forward");
    let redirect = json(&next_matching(&lines, |l| json(l)["event"] == "redirected"));
    assert_eq!(redirect["destination"], first.addr.to_string());
    assert_eq!(redirect["peer"], second.addr.to_string());
    assert_eq!(redirect["pid"], probe.pid());
    assert_eq!(redirect["limit"], 1);
}
