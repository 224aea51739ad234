//! The latency signal on the protocols users run, with real client and server stacks:
//! TLS 1.2 and 1.3 (OpenSSL through Python and curl, Go's crypto/tls and net/http), HTTP/2
//! over TLS and in the clear (nginx, curl), and a protocol whose server speaks first (SMTP,
//! with curl). Every sample must lie between the server's own delay and the client's time to
//! first byte; where the kernel cannot tell answers apart, it takes no sample and counts the
//! exchange as untimed.

use std::{
    io::{BufRead, BufReader, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::Path,
    time::Duration,
};

use limiter_integration_tests::*;

/// The servers' time to first byte: long against loopback's round trip and a TLS
/// handshake, short enough for many cells.
const FIRST_BYTE_MS: u64 = 60;
const REQUESTS: usize = 4;

fn start(cg: &TestCgroup) -> Agent {
    Agent::start_command(
        signal_logging(),
        cg,
        &["--algorithm", "fixed", "--limit", "100"],
    )
}

/// The samples the agent has for `dest` once everything sent before now has arrived: a
/// marker exchange on a plaintext upstream goes through the same ring, after them.
fn samples_after_the_fact(cg: &TestCgroup, agent: &Agent, dest: SocketAddr) -> Vec<u64> {
    let marker = Upstream::start(
        "127.0.0.1:0",
        Behaviour::Respond {
            first_byte: Duration::ZERO,
            hold: Duration::ZERO,
        },
    );
    let lines =
        Probe::spawn(cg, &["exchange", "--to", &marker.addr.to_string()]).lines_until_exit();
    assert_eq!(lines.len(), 1, "{lines:?}");
    agent.wait_signals(marker.addr, "sample", 1);
    agent
        .signals()
        .into_iter()
        .filter(|s| s.destination == dest && s.kind == "sample")
        .map(|s| s.value_ns)
        .collect()
}

/// Each sample answers one of the client's requests: no earlier than the server's delay,
/// no later than the slowest time to first byte the client saw.
fn assert_each_bounded(samples: &[u64], delay_ms: u64, client: &[u64], cell: &str) {
    let slowest = *client.iter().max().unwrap();
    for &s in samples {
        assert!(
            s >= delay_ms * 1_000_000 && s <= slowest,
            "{cell}: a sample of {s} ns outside [{delay_ms} ms, the client's {slowest} ns]: {samples:?}"
        );
    }
}

#[derive(Clone, Copy, Debug)]
enum Client {
    Curl,
    Go,
}

/// `REQUESTS` requests from `client`, on one connection or a connection each; both clients
/// resume their first connection's TLS session (tickets) on the later ones.
fn fetch(cg: &TestCgroup, client: Client, url: &str, keep_alive: bool) -> Vec<u64> {
    let urls = vec![url.to_string(); REQUESTS];
    match (client, keep_alive) {
        (Client::Curl, true) => curl_ttfb(cg, &["--http1.1"], &urls),
        (Client::Curl, false) => {
            curl_ttfb(cg, &["--http1.1", "--header", "Connection: close"], &urls)
        }
        (Client::Go, keep_alive) => go_get(cg, url, REQUESTS, false, !keep_alive),
    }
}

/// TLS 1.2 shows its handshake in the clear: every request is timed. TLS 1.3 encrypts it,
/// and OpenSSL (unlike Go) sends session tickets after the client's Finished, where a
/// connection's first answer is awaited: the first two exchanges of a connection are not
/// timed, every later one is. Never a number that is not an answer's.
#[kernel_test]
fn tls_answers_are_timed_to_their_first_byte_on_every_stack_or_not_at_all() {
    let cg = TestCgroup::new("tls-matrix");
    let agent = start(&cg);
    let cert = Certificate::new();
    for stack in [TlsStack::OpenSsl, TlsStack::Go] {
        for tls in ["1.2", "1.3"] {
            for client in [Client::Curl, Client::Go] {
                for keep_alive in [true, false] {
                    let cell = format!("{stack:?} TLS {tls}, {client:?}, keep-alive {keep_alive}");
                    let server = TlsServer::start(stack, &cert, Answers::tls(tls, FIRST_BYTE_MS));
                    let ttfb = fetch(&cg, client, &server.url(), keep_alive);
                    assert_eq!(ttfb.len(), REQUESTS, "{cell}");
                    let samples = samples_after_the_fact(&cg, &agent, server.addr);
                    let untimed = field(&cg, server.addr, "untimed") as usize;
                    assert_each_bounded(&samples, FIRST_BYTE_MS, &ttfb, &cell);
                    match (tls, keep_alive) {
                        ("1.2", _) => {
                            assert_eq!(samples.len(), REQUESTS, "{cell}: one per request");
                            assert_eq!(untimed, 0, "{cell}");
                        }
                        (_, true) => {
                            assert_eq!(untimed, 2, "{cell}: the connection's first two");
                            // Two when the first request went with the Finished, three when
                            // it went on its own, after the tickets.
                            assert!(
                                samples.len() >= REQUESTS - 2 && samples.len() < REQUESTS,
                                "{cell}: {samples:?}"
                            );
                        }
                        (_, false) => {
                            assert!(samples.is_empty(), "{cell}: {samples:?}");
                            assert!(untimed >= REQUESTS, "{cell}: {untimed} untimed");
                        }
                    }
                }
            }
        }
    }
}

/// A streamed answer (chunked, 1.5 s long) is timed to its first byte.
#[kernel_test]
fn a_streamed_tls_answer_is_timed_to_its_first_byte() {
    let cg = TestCgroup::new("tls-stream");
    let agent = start(&cg);
    let cert = Certificate::new();
    for stack in [TlsStack::OpenSsl, TlsStack::Go] {
        let answers = Answers {
            stream_ms: 1500,
            ..Answers::tls("1.3", FIRST_BYTE_MS)
        };
        let server = TlsServer::start(stack, &cert, answers);
        let ttfb = fetch(&cg, Client::Curl, &server.url(), true);
        let samples = samples_after_the_fact(&cg, &agent, server.addr);
        assert!(samples.len() >= REQUESTS - 2, "{stack:?}: {samples:?}");
        assert_each_bounded(&samples, FIRST_BYTE_MS, &ttfb, &format!("{stack:?}"));
    }
}

/// A TLS client offering HTTP/2 (curl's and Go's default for https) gets it from Go's
/// server: once encrypted, its control frames cannot be told from requests and answers, so
/// nothing is timed and each connection counts once as untimed.
#[kernel_test]
fn http2_over_tls_is_not_timed() {
    let cg = TestCgroup::new("h2-tls");
    let agent = start(&cg);
    let cert = Certificate::new();
    let answers = Answers {
        h2: true,
        ..Answers::tls("1.3", FIRST_BYTE_MS)
    };
    let server = TlsServer::start(TlsStack::Go, &cert, answers);
    let urls = vec![server.url(); REQUESTS];
    assert_eq!(curl_ttfb(&cg, &["--http2"], &urls).len(), REQUESTS);
    assert_eq!(
        go_get(&cg, &server.url(), REQUESTS, true, false).len(),
        REQUESTS
    );
    assert!(samples_after_the_fact(&cg, &agent, server.addr).is_empty());
    assert_eq!(field(&cg, server.addr, "untimed"), 2, "one per connection");
}

/// Cleartext HTTP/2's frames are read: a request is a HEADERS frame, its answer the first
/// HEADERS or DATA frame on its stream, and SETTINGS, PING and WINDOW_UPDATE, which either
/// side sends unprompted, are neither. Of requests whose streams overlap, the first is timed
/// and the others, sent while it was outstanding, are not.
#[kernel_test]
fn cleartext_http2_is_timed_per_stream() {
    let cg = TestCgroup::new("h2c");
    let agent = start(&cg);
    let upstream = SlowHttp::start(FIRST_BYTE_MS);
    // Cleartext HTTP/2 with prior knowledge.
    let proxy = Nginx::start(
        "",
        &format!(
            "listen {{addr}} http2; location / {{ proxy_pass http://{}; }}",
            upstream.addr
        ),
    );
    let url = proxy.url("/");
    let one = curl_ttfb(
        &cg,
        &["--http2-prior-knowledge"],
        std::slice::from_ref(&url),
    );
    let overlapping = curl_ttfb(
        &cg,
        &[
            "--http2-prior-knowledge",
            "--parallel",
            "--parallel-immediate",
        ],
        &vec![url; 3],
    );
    let samples = samples_after_the_fact(&cg, &agent, proxy.addr);
    assert!(
        samples.len() >= 2,
        "one per connection at least: {samples:?}"
    );
    let client: Vec<u64> = one.into_iter().chain(overlapping).collect();
    assert_each_bounded(&samples, FIRST_BYTE_MS, &client, "h2c");
}

/// A server that speaks first: an SMTP server greeting at once and answering each command
/// after `FIRST_BYTE_MS`, as the tests write it; its client is curl.
fn smtp_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || serve_smtp(stream));
        }
    });
    addr
}

fn serve_smtp(stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let _ = writer.write_all(b"220 ready\r\n");
    let mut line = String::new();
    let mut in_data = false;
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let answer: &[u8] = if in_data {
            if line != ".\r\n" {
                continue;
            }
            in_data = false;
            b"250 queued\r\n"
        } else if line.starts_with("EHLO") {
            b"250 hello\r\n"
        } else if line.starts_with("DATA") {
            in_data = true;
            b"354 go ahead\r\n"
        } else if line.starts_with("QUIT") {
            b"221 bye\r\n"
        } else {
            b"250 ok\r\n"
        };
        std::thread::sleep(Duration::from_millis(FIRST_BYTE_MS));
        if writer.write_all(answer).is_err() || answer.starts_with(b"221") {
            return;
        }
    }
}

/// The greeting, which comes before the client says anything, is no answer; every command
/// is timed to its reply, the goodbye (QUIT) included, since SMTP answers it.
#[kernel_test]
fn a_server_that_speaks_first_is_timed_from_the_clients_commands() {
    let cg = TestCgroup::new("smtp");
    let agent = start(&cg);
    let server = smtp_server();
    let mail = TempFile::new("mail", "Subject: test\r\n\r\nhello\r\n");
    let mut curl = cg.command(Path::new("curl"));
    curl.args(["--silent", "--show-error", "--upload-file"])
        .arg(&mail.0)
        .args([
            "--mail-from",
            "a@example.com",
            "--mail-rcpt",
            "b@example.com",
        ])
        .arg(format!("smtp://{server}/"));
    let out = curl.output().expect("curl is not installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples = samples_after_the_fact(&cg, &agent, server);
    // EHLO, MAIL FROM, RCPT TO, DATA, the message, QUIT.
    assert_eq!(samples.len(), 6, "{samples:?}");
    for s in samples {
        assert!(
            s >= FIRST_BYTE_MS * 1_000_000,
            "{s} ns is no reply of the server"
        );
    }
}

/// PostgreSQL with `sslmode=require`: the client's SSLRequest, answered by one byte, is no
/// request; TLS follows inside the same connection, and from there every query is timed
/// to its result (TLS 1.3's first two exchanges excepted). pgbench, on one connection, runs
/// a query that sleeps `FIRST_BYTE_MS`; its Terminate at the end is a goodbye.
#[kernel_test]
fn postgres_over_its_own_tls_negotiation_is_timed_per_query() {
    let cg = TestCgroup::new("pg-tls");
    let agent = start(&cg);
    let cert = Certificate::new();
    let bin = postgres_bin().expect("PostgreSQL is not installed (apt-get install postgresql)");
    let cluster = Cluster::start(&bin, Some(cert.dir())).unwrap();
    const QUERIES: usize = 12;
    let script = TempFile::new(
        "pg-sleep.sql",
        &format!("SELECT pg_sleep({});\n", FIRST_BYTE_MS as f64 / 1e3),
    );
    let mut pgbench = cg.command(&bin.join("pgbench"));
    pgbench
        .env("PGSSLMODE", "require")
        .args(["--no-vacuum", "--client", "1", "--transactions"])
        .arg(QUERIES.to_string())
        .arg("--file")
        .arg(&script.0)
        .args(cluster.connection_args());
    output(pgbench).expect("pgbench failed");
    let samples = samples_after_the_fact(&cg, &agent, cluster.addr);
    let queries = samples
        .iter()
        .filter(|&&s| s >= FIRST_BYTE_MS * 1_000_000)
        .count();
    assert!(queries >= QUERIES - 2, "{samples:?}");
    assert!(
        samples.len() - queries <= 1,
        "besides the queries, at most the startup's answer: {samples:?}"
    );
    // pgbench also opens a connection of its own before its client's.
    assert!(
        field(&cg, cluster.addr, "untimed") >= 2,
        "TLS 1.3's first two on each connection"
    );
}
