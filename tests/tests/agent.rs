//! The agent as an operator runs it: configuration, reload, metrics (root, real kernel).

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
};

use limiter_integration_tests::*;

/// GET /metrics, the body.
fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// The value of the sample `name{labels}`, if present.
fn sample(body: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.parse().unwrap())
}

#[kernel_test]
fn metrics_are_served_in_the_prometheus_text_format() {
    let cg = TestCgroup::new("metrics");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let metrics: SocketAddr = closed_port();
    let _agent = Agent::start(
        &cg,
        &[
            "--algorithm",
            "fixed",
            "--limit",
            "1",
            "--metrics",
            &metrics.to_string(),
        ],
    );
    let (probe, lines) = Probe::hold(&cg, up.addr, 2);
    assert_eq!(tally(&lines), (1, 1, 0));

    let labels = format!("destination=\"{}\",mode=\"prod\"", up.addr);
    wait_until("the metrics to show the destination", || {
        sample(&scrape(metrics), "limiter_shed_total", &labels) == Some(1.0)
    });
    let body = scrape(metrics);
    assert_eq!(sample(&body, "limiter_limit", &labels), Some(1.0));
    assert_eq!(sample(&body, "limiter_inflight", &labels), Some(1.0));
    assert_eq!(sample(&body, "limiter_admitted_total", &labels), Some(1.0));
    assert!(body.contains("# TYPE limiter_shed counter"));
    assert!(body
        .lines()
        .any(|l| l.starts_with("limiter_ringbuf_drops_total ")));
    assert!(body
        .lines()
        .any(|l| l.starts_with("limiter_agent_signals_total ")));
    assert!(
        body.trim_end().ends_with("# EOF"),
        "OpenMetrics text ends with # EOF"
    );
    probe.release();
}

#[kernel_test]
fn a_metrics_address_in_use_fails_the_start_cleanly() {
    let cg = TestCgroup::new("metricsbusy");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let out = agent_command(&[
        "--cgroup",
        &cg.path().to_string_lossy(),
        "--metrics",
        &taken.local_addr().unwrap().to_string(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot listen for metrics"));
    assert!(!cg.pin_dir().exists());
}

#[kernel_test]
fn sighup_reloads_the_configuration_without_dropping_state() {
    let cg = TestCgroup::new("reload");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let config = TempFile::new("reload.toml", "algorithm = \"fixed\"\nlimit = 2\n");
    let agent = Agent::start(&cg, &["--config", &config.0.to_string_lossy()]);
    let (first, lines) = Probe::hold(&cg, up.addr, 3);
    assert_eq!(tally(&lines), (2, 1, 0));

    std::fs::write(
        &config.0,
        "algorithm = \"fixed\"\nlimit = 4\nheartbeat_timeout_secs = 3\n",
    )
    .unwrap();
    agent.signal(libc::SIGHUP);
    wait_until("the new limit", || field(&cg, up.addr, "limit") == 4);
    assert_eq!(
        status_report(&cg)["agent"]["heartbeat_timeout_ms"],
        3000.0,
        "the kernel has the new heartbeat timeout"
    );
    let (second, lines) = Probe::hold(&cg, up.addr, 3);
    assert_eq!(tally(&lines), (2, 1, 0), "4 allowed, 2 already held");
    assert_eq!(
        field(&cg, up.addr, "admitted"),
        4,
        "counters survive the reload"
    );
    assert_eq!(field(&cg, up.addr, "shed"), 2);

    // A bad file is refused and the running configuration stays.
    std::fs::write(&config.0, "algorithm = \"fixed\"\nlimit = [\n").unwrap();
    agent.signal(libc::SIGHUP);
    let path = config.0.display().to_string();
    wait_until("the reload error in the log", || {
        agent.logged(&["reload failed", &path])
    });
    assert_eq!(field(&cg, up.addr, "limit"), 4);

    // Map sizes are fixed once loaded: a reload asking for others says so.
    std::fs::write(
        &config.0,
        "algorithm = \"fixed\"\nlimit = 5\nmax_destinations = 100\n",
    )
    .unwrap();
    agent.signal(libc::SIGHUP);
    wait_until("the refused resize in the log", || {
        agent.logged(&["reload failed", "max_destinations changes only"])
    });
    assert_eq!(field(&cg, up.addr, "limit"), 4);
    first.release();
    second.release();
}

#[kernel_test]
fn the_addresses_of_one_destination_share_one_limit() {
    let cg = TestCgroup::new("group");
    let (a, b) = (
        Upstream::start("127.0.0.1:0", Behaviour::Hold),
        Upstream::start("127.0.0.2:0", Behaviour::Hold),
    );
    let named = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let config = TempFile::new(
        "group.toml",
        &format!(
            r#"
algorithm = "fixed"
limit = 10

[[destination]]
name = "pair"
addresses = ["{a}", "{b}"]
limit = 3

[[destination]]
name = "by-name"
host = "localhost:{port}"
limit = 1
"#,
            a = a.addr,
            b = b.addr,
            port = named.addr.port()
        ),
    );
    let _agent = Agent::start(&cg, &["--config", &config.0.to_string_lossy()]);
    let (p1, lines) = Probe::hold(&cg, a.addr, 2);
    assert_eq!(tally(&lines), (2, 0, 0));
    let (p2, lines) = Probe::hold(&cg, b.addr, 2);
    assert_eq!(tally(&lines), (1, 1, 0), "the pair shares a limit of 3");
    assert_eq!(
        field(&cg, a.addr, "inflight"),
        3,
        "counted under the first address"
    );
    assert!(row(&cg, b.addr).is_none());

    let (p3, lines) = Probe::hold(&cg, named.addr, 2);
    assert_eq!(tally(&lines), (1, 1, 0), "localhost resolved, limit 1");
    for p in [p1, p2, p3] {
        p.release();
    }
}
