//! The metrics endpoint as a Prometheus server sees it: both text formats, read back by
//! the reference parser (Python's prometheus-client), fetched with curl (root, real kernel).

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::Path,
    process::{Command, Stdio},
    time::Instant,
};

use limiter_integration_tests::*;
use serde_json::Value;

/// Prometheus's own Accept header.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// Parses the exposition on stdin with prometheus-client's parser for the format named by
/// argv[1], and prints the families as JSON.
const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families as text
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
parse = openmetrics if sys.argv[1] == "openmetrics" else text
print(json.dumps([
    {"name": f.name, "type": f.type,
     "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in f.samples]}
    for f in parse(sys.stdin.read())
]))
"#;

fn python() -> &'static str {
    // Debian's python3-prometheus-client is installed for the system interpreter.
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// (Content-Type, body) of a scrape with `accept` (none when empty).
fn scrape(addr: SocketAddr, accept: &str) -> (String, String) {
    let mut curl = Command::new("curl");
    curl.args([
        "--silent",
        "--show-error",
        "--dump-header",
        "-",
        "--max-time",
    ])
    .arg(hang_guard().as_secs().to_string());
    if !accept.is_empty() {
        curl.args(["--header", &format!("Accept: {accept}")]);
    }
    let out = curl
        .arg(format!("http://{addr}/metrics"))
        .output()
        .expect("curl is not installed (apt-get install curl)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap();
    (content_type, body.to_string())
}

fn parse(format: &str, body: &str) -> Vec<Value> {
    let mut child = Command::new(python())
        .args(["-c", PARSE, format])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is not installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named 'prometheus_client'"),
        "the test needs Python's prometheus-client: apt-get install python3-prometheus-client"
    );
    assert!(
        out.status.success(),
        "{format} does not parse: {stderr}\n{body}"
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn family<'a>(families: &'a [Value], name: &str) -> &'a Value {
    families
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no family {name}: {families:?}"))
}

/// The samples of `name` whose labels include `labels`.
fn samples<'a>(
    families: &'a [Value],
    family_name: &str,
    labels: &[(&str, &str)],
) -> Vec<&'a Value> {
    family(families, family_name)["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| labels.iter().all(|(k, v)| s["labels"][k] == *v))
        .collect()
}

#[kernel_test]
fn both_text_formats_parse_and_follow_prometheus_conventions() {
    let cg = TestCgroup::new("metrics");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let addr = closed_port();
    let _agent = Agent::start(
        &cg,
        &[
            "--algorithm",
            "fixed",
            "--limit",
            "1",
            "--metrics",
            &addr.to_string(),
        ],
    );
    let (held, lines) = Probe::hold(&cg, up.addr, 3);
    assert_eq!(tally(&lines), (1, 2, 0));
    let dest = up.addr.to_string();
    let by_dest = [("destination", dest.as_str())];

    let mut scraped = None;
    wait_until("the metrics to show the refusals", || {
        let (content_type, body) = scrape(addr, "");
        let families = parse("text", &body);
        let shed = samples(&families, "limiter_shed", &by_dest);
        let done = shed.first().is_some_and(|s| s["value"] == 2.0);
        scraped = Some((content_type, families));
        done
    });
    let (content_type, text) = scraped.unwrap();
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    let (content_type, body) = scrape(addr, PROMETHEUS_ACCEPT);
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let openmetrics = parse("openmetrics", &body);

    for families in [&text, &openmetrics] {
        let shed = samples(families, "limiter_shed", &by_dest);
        assert_eq!(family(families, "limiter_shed")["type"], "counter");
        assert_eq!(shed.len(), 1);
        assert_eq!(shed[0]["name"], "limiter_shed_total");
        assert_eq!(
            shed[0]["labels"],
            serde_json::json!({ "destination": dest }),
            "no mode label on the counters"
        );
        for (mode, value) in [("prod", 1.0), ("shadow", 0.0), ("off", 0.0)] {
            let series = samples(families, "limiter_mode", &[by_dest[0], ("mode", mode)]);
            assert_eq!(series.len(), 1, "{mode}");
            assert_eq!(series[0]["value"], value, "{mode}");
        }
        let changes = &family(families, "limiter_limit_changes");
        assert_eq!(changes["type"], "counter");
        for direction in ["up", "down"] {
            assert_eq!(
                samples(
                    families,
                    "limiter_limit_changes",
                    &[("direction", direction)]
                )
                .len(),
                1,
                "{direction}"
            );
        }
        for (name, value) in [
            ("limiter_limit", 1.0),
            ("limiter_inflight", 1.0),
            ("limiter_admitted", 1.0),
        ] {
            let series = samples(families, name, &by_dest);
            assert_eq!(series.len(), 1, "{name}");
            assert_eq!(series[0]["value"], value, "{name}");
        }
        for name in [
            "limiter_ringbuf_drops",
            "limiter_agent_signals",
            "limiter_destinations",
        ] {
            assert_eq!(samples(families, name, &[]).len(), 1, "{name}");
        }
        let age = samples(families, "limiter_heartbeat_age_seconds", &[]);
        let age = age[0]["value"].as_f64().unwrap();
        assert!(
            (0.0..10.0).contains(&age),
            "the agent beats well within its 10 s timeout: {age}"
        );
    }
    let build = |families: &[Value], name: &str| {
        let build = samples(families, name, &[("version", env!("CARGO_PKG_VERSION"))]);
        assert_eq!(build.len(), 1, "{families:?}");
        assert_eq!(build[0]["name"], "limiter_build_info");
        assert_eq!(build[0]["value"], 1.0);
        assert!(build[0]["labels"]["commit"].is_string());
        family(families, name)["type"].clone()
    };
    assert_eq!(build(&text, "limiter_build_info"), "gauge");
    assert_eq!(build(&openmetrics, "limiter_build"), "info");
    held.release();
}

/// The number of descriptors `pid` has open.
fn descriptors(pid: i32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as u64
}

/// Sets how many descriptors `pid` may have open.
fn limit_descriptors(pid: i32, limit: u64) {
    let rlimit = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: prlimit reads one rlimit and writes nothing (no old limit asked for).
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &rlimit, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

/// Waits for the agent to close `stream`, which never sent anything.
fn closed_by_the_agent(mut stream: &TcpStream) -> bool {
    stream.set_read_timeout(Some(hang_guard())).unwrap();
    match stream.read(&mut [0u8; 1]) {
        Ok(n) => n == 0,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

#[kernel_test]
fn idle_connections_neither_exhaust_the_agent_nor_keep_scrapes_and_reloads_out() {
    let cg = TestCgroup::new("metricsidle");
    let addr = closed_port();
    let config = TempFile::new("metricsidle.toml", "");
    let agent = Agent::start(
        &cg,
        &[
            "--config",
            &config.0.to_string_lossy(),
            "--metrics",
            &addr.to_string(),
        ],
    );
    // Fewer spare descriptors than the idle connections below, as a unit without
    // LimitNOFILE gave it against a thousand idle connections.
    limit_descriptors(agent.pid(), descriptors(agent.pid()) + 8);
    let started = Instant::now();
    let idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let (_, body) = scrape(addr, "");
    assert!(body.contains("limiter_heartbeat_age_seconds"), "{body}");
    assert!(closed_by_the_agent(&idle[0]), "the oldest made room");
    assert!(closed_by_the_agent(&idle[199]), "an idle one is closed too");
    let failures = agent
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("accept failed"))
        .count() as u64;
    assert!(
        failures <= 1 + started.elapsed().as_secs() / 10,
        "accept failures are logged at most every 10 s: {failures}"
    );
    agent.signal(libc::SIGHUP);
    wait_until("the reload", || agent.logged(&["configuration reloaded"]));
}
