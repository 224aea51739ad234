//! Verdicts from HTTP answers (root, real kernel, nginx and curl): a cleartext HTTP/1.x
//! answer's status is read with its sample; 429 and 503 hold the limit under the in-flight
//! they came at, other 5xx count as errors, 4xx are healthy answers.

use std::{path::Path, process::Command};

use limiter_integration_tests::*;

/// nginx answering each path with its status at once.
fn answering_codes() -> Nginx {
    Nginx::start(
        "",
        "listen {addr}; keepalive_requests 1000;
         location /ok { return 200 'ok'; }
         location /missing { return 404; }
         location /busy { return 429; }
         location /down { return 503; }
         location /broken { return 500; }",
    )
}

/// curl in the cgroup getting `paths` one after another, on one keep-alive connection or
/// on a connection each; returns the status codes curl saw.
fn curl_codes(cg: &TestCgroup, nginx: &Nginx, paths: &[&str], keep_alive: bool) -> Vec<u32> {
    let mut curl = cg.command(Path::new("curl"));
    if !keep_alive {
        curl.args(["--header", "Connection: close"]);
    }
    codes(curl, paths.iter().map(|path| nginx.url(path)))
}

/// `curl` getting `urls` one after another; the status codes it saw.
fn codes(mut curl: Command, urls: impl Iterator<Item = String>) -> Vec<u32> {
    curl.args(["--silent", "--http1.1", "--write-out", "%{http_code}\\n"]);
    for url in urls {
        curl.args(["--output", "/dev/null"]).arg(url);
    }
    output(curl)
        .expect("curl failed")
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// Every answer's status comes with its sample, keep-alive and a connection per request
/// alike, and the answers that are not a success are counted by class.
#[kernel_test]
fn the_status_of_each_cleartext_http_answer_is_read() {
    let cg = TestCgroup::new("http-status");
    let agent = Agent::start_command(
        signal_logging(),
        &cg,
        &["--algorithm", "fixed", "--limit", "100"],
    );
    let nginx = answering_codes();
    let paths = [
        "/ok", "/missing", "/busy", "/down", "/broken", "/ok", "/busy",
    ];
    let mut seen = Vec::new();
    for keep_alive in [true, false] {
        let codes = curl_codes(&cg, &nginx, &paths, keep_alive);
        assert_eq!(codes, [200, 404, 429, 503, 500, 200, 429]);
        seen.extend(codes);
    }
    let samples = agent.wait_signals(nginx.addr, "sample", seen.len());
    let statuses: Vec<u64> = samples.iter().map(|s| s.status).collect();
    let expected: Vec<u64> = seen.iter().map(|&c| u64::from(c)).collect();
    assert_eq!(statuses, expected, "each answer's status, in order");
    let row = row(&cg, nginx.addr).unwrap();
    for (class, n) in [
        ("http_4xx", 2),
        ("http_429", 4),
        ("http_5xx", 2),
        ("http_503", 2),
    ] {
        assert_eq!(row[class], n, "{class}: {row}");
    }
}

/// nginx in the cgroup as the client: a proxy, to an nginx outside it that answers a share
/// of the requests 429 (`split_clients`). The status of each answer is read on the proxy's
/// upstream connections, a connection per request (nginx's default) and kept alive alike.
#[kernel_test]
fn a_proxy_in_the_cgroup_has_each_answers_status_read() {
    let upstream = Nginx::start(
        "split_clients $request_id $answer { 30% busy; * ok; }",
        "listen {addr}; keepalive_requests 1000;
         location / { if ($answer = busy) { return 429; } return 200 'ok'; }",
    );
    for keep_alive in [false, true] {
        let cg = TestCgroup::new("http-proxy");
        let agent = Agent::start_command(
            signal_logging(),
            &cg,
            &["--algorithm", "fixed", "--limit", "100"],
        );
        let pool = if keep_alive { "keepalive 4;" } else { "" };
        let proxy = Nginx::start_in(
            Some(&cg),
            &format!("upstream up {{ server {}; {pool} }}", upstream.addr),
            "listen {addr};
             location / { proxy_pass http://up; proxy_http_version 1.1;
                          proxy_set_header Connection ''; }",
        );
        // curl outside the cgroup: only the proxy's connections are the limiter's.
        let codes = codes(Command::new("curl"), (0..40).map(|_| proxy.url("/")));
        let busy = codes.iter().filter(|&&c| c == 429).count();
        assert!(busy > 0 && busy < codes.len(), "a share of 429s: {codes:?}");
        let samples = agent.wait_signals(upstream.addr, "sample", codes.len());
        let statuses: Vec<u64> = samples.iter().map(|s| s.status).collect();
        let expected: Vec<u64> = codes.iter().map(|&c| u64::from(c)).collect();
        assert_eq!(
            statuses, expected,
            "keep-alive {keep_alive}: each answer's status"
        );
        let row = row(&cg, upstream.addr).unwrap();
        assert_eq!(row["http_429"], busy, "keep-alive {keep_alive}: {row}");
    }
}

/// Requests that can be in service at once at nginx, which answers 429 beyond them.
const ALLOWED: usize = 8;
/// curl's connections in flight, each its own request: four times the allowance.
const DEMAND: usize = 32;

/// nginx allowing `ALLOWED` requests in service at once to a 50 ms upstream, and answering
/// 429 at once to any beyond: the upstream's own overload signal. The limiter lowers the
/// limit under the in-flight a 429 came at and keeps it there, probing over it now and then:
/// it settles near the allowance, and the excess is refused before it leaves.
#[kernel_test]
fn overload_answers_lower_the_limit_until_they_are_few() {
    let cg = TestCgroup::new("http-429");
    let upstream = SlowHttp::start(50);
    let nginx = Nginx::start(
        "limit_conn_zone $server_name zone=allowance:1m;",
        &format!(
            "listen {{addr}}; server_name allowance;
             limit_conn allowance {ALLOWED}; limit_conn_status 429;
             location / {{ proxy_pass http://{}; }}",
            upstream.addr
        ),
    );
    let agent = Agent::start_command(window_logging(), &cg, &[]);
    let _load = CurlLoad::start(&cg, &nginx.url("/"), DEMAND);
    let figure = |w: &serde_json::Value, name: &str| w[name].as_f64().unwrap_or_default();
    // A window under the demand with no overload answer: the limit found the allowance.
    wait_until("a window under the demand without a 429", || {
        agent.windows(nginx.addr).last().is_some_and(|w| {
            figure(w, "limit") < DEMAND as f64
                && figure(w, "overloads") == 0.0
                && figure(w, "samples") > 0.0
        })
    });
    let settled = agent.windows(nginx.addr).len();
    wait_until("four more windows", || {
        agent.windows(nginx.addr).len() >= settled + 4
    });
    let after = agent.windows(nginx.addr).split_off(settled);
    let (answers, overloads) = after.iter().fold((0.0, 0.0), |(a, o), w| {
        (
            a + figure(w, "samples") + figure(w, "overloads"),
            o + figure(w, "overloads"),
        )
    });
    // Without a limiter nearly every answer is a 429 (curl asks again at once); here at
    // most a probe over the allowance now and then gives some.
    assert!(
        overloads < 0.5 * answers,
        "{overloads} 429s of {answers}: {after:?}"
    );
    for w in &after {
        assert!(
            figure(w, "limit") <= 2.0 * ALLOWED as f64,
            "near the allowance: {w}"
        );
    }
    let row = row(&cg, nginx.addr).unwrap();
    assert!(row["http_429"].as_i64() > Some(0), "{row}");
    assert!(
        row["shed"].as_i64() > Some(0),
        "the excess refused instead: {row}"
    );
}
