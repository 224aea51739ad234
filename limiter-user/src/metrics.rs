//! Prometheus metrics on `--metrics ADDR`: a snapshot of the maps and the controllers,
//! refreshed by the agent loop and encoded on each scrape, in the text format the scraper
//! asks for (OpenMetrics when its Accept header prefers it, 0.0.4 text otherwise).

use std::{
    collections::VecDeque,
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::{body::Bytes, server::conn::http1, service::service_fn, Request, Response};
use hyper_util::rt::TokioIo;
use prometheus_client::{
    collector::Collector,
    encoding::{text::encode, DescriptorEncoder, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge, info::Info},
    registry::Registry,
};
use tokio::{
    net::{TcpListener, TcpStream},
    task::AbortHandle,
};
use tracing::debug;

use crate::{
    accept::{out_of_descriptors, AcceptFailures},
    clock::monotonic_ns,
    config::Mode,
    control::Changes,
    maps::Globals,
    status::Row,
};

/// What the last refresh saw.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub rows: Vec<Row>,
    pub globals: Globals,
    /// Kernel signals the control loop has consumed since start.
    pub signals: u64,
    /// The agent's map operations that failed (it logged them and carried on).
    pub map_failures: u64,
    /// Idle destinations the agent removed from the kernel's table.
    pub forgotten: u64,
    pub changes: Changes,
    /// The heartbeat the kernel last saw (monotonic clock), aged at scrape time.
    pub heartbeat_ns: u64,
}

/// The snapshot shared between the agent loop and the scrape handler.
#[derive(Debug, Clone, Default)]
pub struct Metrics(Arc<Mutex<Snapshot>>);

impl Metrics {
    pub fn publish(&self, snapshot: Snapshot) {
        *self.0.lock().unwrap() = snapshot;
    }
}

type Labels = Vec<(&'static str, String)>;

/// One metric per destination, read from its status row.
struct PerDestination {
    name: &'static str,
    help: &'static str,
    counter: bool,
    value: fn(&Row) -> Option<f64>,
}

const PER_DESTINATION: [PerDestination; 23] = [
    PerDestination {
        name: "limiter_limit",
        help: "Concurrent connections allowed",
        counter: false,
        value: |r| Some(r.limit as f64),
    },
    PerDestination {
        name: "limiter_inflight",
        help: "Connections holding a slot",
        counter: false,
        value: |r| Some(r.inflight as f64),
    },
    PerDestination {
        name: "limiter_latency_p90_seconds",
        help: "Smoothed p90 time to first response byte",
        counter: false,
        value: |r| r.p90_ms.map(|ms| ms / 1e3),
    },
    PerDestination {
        name: "limiter_latency_baseline_seconds",
        help: "No-load time to first response byte",
        counter: false,
        value: |r| r.baseline_ms.map(|ms| ms / 1e3),
    },
    PerDestination {
        name: "limiter_admitted",
        help: "Connects admitted",
        counter: true,
        value: |r| Some(r.admitted as f64),
    },
    PerDestination {
        name: "limiter_shed",
        help: "Connects refused at the limit",
        counter: true,
        value: |r| Some(r.shed as f64),
    },
    PerDestination {
        name: "limiter_would_shed",
        help: "Connects shadow mode admitted above the limit",
        counter: true,
        value: |r| Some(r.would_shed as f64),
    },
    PerDestination {
        name: "limiter_redirected",
        help: "Connects handed to a peer with room",
        counter: true,
        value: |r| Some(r.redirected as f64),
    },
    PerDestination {
        name: "limiter_would_redirect",
        help: "Connects shadow mode admitted above the limit while a peer had room",
        counter: true,
        value: |r| Some(r.would_redirect as f64),
    },
    PerDestination {
        name: "limiter_connect_failed",
        help: "Admitted connects that never established",
        counter: true,
        value: |r| Some(r.connect_failed as f64),
    },
    PerDestination {
        name: "limiter_untimed",
        help: "Exchanges seen but not timed: TLS 1.3's first two per connection, HTTP/2 over TLS once per connection",
        counter: true,
        value: |r| Some(r.untimed as f64),
    },
    PerDestination {
        name: "limiter_http_4xx",
        help: "Cleartext HTTP/1.x answers 4xx but 429: healthy answers of a request at fault",
        counter: true,
        value: |r| Some(r.http_4xx as f64),
    },
    PerDestination {
        name: "limiter_http_429",
        help: "Cleartext HTTP/1.x answers 429 Too Many Requests: overload, lowers the limit",
        counter: true,
        value: |r| Some(r.http_429 as f64),
    },
    PerDestination {
        name: "limiter_http_5xx",
        help: "Cleartext HTTP/1.x answers 5xx but 503: errors",
        counter: true,
        value: |r| Some(r.http_5xx as f64),
    },
    PerDestination {
        name: "limiter_http_503",
        help: "Cleartext HTTP/1.x answers 503 Service Unavailable: overload, lowers the limit",
        counter: true,
        value: |r| Some(r.http_503 as f64),
    },
    PerDestination {
        name: "limiter_queue_waiting",
        help: "Connects waiting for a slot now (overflow = queue)",
        counter: false,
        value: |r| Some(r.waiting as f64),
    },
    PerDestination {
        name: "limiter_queued",
        help: "Connects that joined the queue",
        counter: true,
        value: |r| Some(r.queued as f64),
    },
    PerDestination {
        name: "limiter_queue_admitted",
        help: "Queued connects admitted when a slot freed",
        counter: true,
        value: |r| Some(r.queue_admitted as f64),
    },
    PerDestination {
        name: "limiter_queue_full",
        help: "Connects refused because the queue was past its bounds",
        counter: true,
        value: |r| Some(r.queue_full as f64),
    },
    PerDestination {
        name: "limiter_queue_expired",
        help: "Queued connects failed (ETIMEDOUT) at the maximum wait",
        counter: true,
        value: |r| Some(r.queue_expired as f64),
    },
    PerDestination {
        name: "limiter_queue_abandoned",
        help: "Queued connects closed by the application while waiting",
        counter: true,
        value: |r| Some(r.queue_abandoned as f64),
    },
    PerDestination {
        name: "limiter_queue_wait_p50_seconds",
        help: "Median wait of the last 128 connects admitted from the queue",
        counter: false,
        value: |r| r.wait_p50_ms.map(|ms| ms / 1e3),
    },
    PerDestination {
        name: "limiter_queue_wait_p99_seconds",
        help: "p99 wait of the last 128 connects admitted from the queue",
        counter: false,
        value: |r| r.wait_p99_ms.map(|ms| ms / 1e3),
    },
];

impl Collector for Metrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = self.0.lock().unwrap();
        for metric in &PER_DESTINATION {
            let kind = if metric.counter {
                ConstCounter::new(0.0).metric_type()
            } else {
                ConstGauge::new(0.0).metric_type()
            };
            let mut family = encoder.encode_descriptor(metric.name, metric.help, None, kind)?;
            for row in &snapshot.rows {
                let Some(value) = (metric.value)(row) else {
                    continue;
                };
                let labels: Labels = vec![("destination", destination(row))];
                let encoder = family.encode_family(&labels)?;
                if metric.counter {
                    ConstCounter::new(value).encode(encoder)?;
                } else {
                    ConstGauge::new(value).encode(encoder)?;
                }
            }
        }
        let g = &snapshot.globals;
        let counters = [
            (
                "limiter_ringbuf_drops",
                "Kernel events lost to a full ring buffer",
                g.ringbuf_drops,
            ),
            (
                "limiter_table_full",
                "Connects to a new destination admitted untracked: the destination table was full",
                g.table_full,
            ),
            (
                "limiter_fail_open",
                "Connects admitted past the limit because the agent was silent",
                g.fail_open,
            ),
            (
                "limiter_untracked",
                "Connects admitted without per-socket state",
                g.untracked,
            ),
            (
                "limiter_agent_signals",
                "Kernel signals consumed by the control loop",
                snapshot.signals,
            ),
            (
                "limiter_agent_map_failures",
                "Map operations of the agent that failed (logged; the agent carries on)",
                snapshot.map_failures,
            ),
            (
                "limiter_agent_forgotten_destinations",
                "Idle destinations with nothing in flight removed from the kernel's table",
                snapshot.forgotten,
            ),
        ];
        for (name, help, value) in counters {
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(
                name,
                help,
                None,
                counter.metric_type(),
            )?)?;
        }
        let destinations = ConstGauge::new(g.destinations as i64);
        destinations.encode(encoder.encode_descriptor(
            "limiter_destinations",
            "Destinations in the kernel's table",
            None,
            destinations.metric_type(),
        )?)?;
        encode_mode(&mut encoder, &snapshot.rows)?;
        encode_changes(&mut encoder, snapshot.changes)?;
        let age =
            ConstGauge::new(monotonic_ns().saturating_sub(snapshot.heartbeat_ns) as f64 / 1e9);
        age.encode(encoder.encode_descriptor(
            "limiter_heartbeat_age_seconds",
            "Time since the agent's last heartbeat; past the heartbeat timeout the kernel admits everything",
            None,
            age.metric_type(),
        )?)?;
        let info = Info::new(vec![
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            ("commit", env!("LIMITER_COMMIT").to_string()),
        ]);
        info.encode(encoder.encode_descriptor(
            "limiter_build",
            "The agent's version and the commit it was built from",
            None,
            info.metric_type(),
        )?)?;
        Ok(())
    }
}

fn destination(row: &Row) -> String {
    format!("{}:{}", row.address, row.port)
}

/// One series per destination and mode, 1 for the mode in force: a switch from shadow to
/// prod changes values, never the set of series.
fn encode_mode(encoder: &mut DescriptorEncoder, rows: &[Row]) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        "limiter_mode",
        "The destination's mode: 1 for the one in force (off, shadow, prod)",
        None,
        ConstGauge::new(0i64).metric_type(),
    )?;
    for row in rows {
        for mode in [Mode::Off, Mode::Shadow, Mode::Prod] {
            let labels: Labels = vec![
                ("destination", destination(row)),
                ("mode", mode.name().to_string()),
            ];
            ConstGauge::new(i64::from(row.mode == mode.name()))
                .encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

fn encode_changes(
    encoder: &mut DescriptorEncoder,
    changes: Changes,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        "limiter_limit_changes",
        "Limit changes the controllers made, by direction",
        None,
        ConstCounter::new(0u64).metric_type(),
    )?;
    for (direction, count) in [("up", changes.up), ("down", changes.down)] {
        let labels: Labels = vec![("direction", direction.to_string())];
        ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Connections served at once: a scraper needs one, a few more are for people with curl.
const MAX_CONNECTIONS: usize = 32;

/// A connection is closed this long after it was accepted, answered or not. It serves one
/// request (no keep-alive), so a client that sends nothing, or reads nothing, holds its
/// descriptor no longer.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(10);

/// Binds `addr` now (so a bad address fails the start) and serves /metrics from then on.
pub async fn serve(addr: SocketAddr, metrics: Metrics) -> Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(metrics));
    let registry = Arc::new(registry);
    tokio::spawn(async move {
        let mut open = Connections::default();
        let mut failures = AcceptFailures::default();
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    failures.succeeded();
                    let served = tokio::spawn(serve_connection(stream, registry.clone()));
                    open.add(served.abort_handle());
                }
                Err(e) => {
                    if out_of_descriptors(&e) {
                        open.close_oldest();
                    }
                    failures.failed("metrics", &e).await;
                }
            }
        }
    });
    Ok(())
}

async fn serve_connection(stream: TcpStream, registry: Arc<Registry>) {
    let service = service_fn(move |req| scrape(req, registry.clone()));
    let connection = http1::Builder::new()
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    // A client's own failures are its business: logged only on demand.
    if let Ok(Err(e)) = tokio::time::timeout(CONNECTION_LIFETIME, connection).await {
        debug!("metrics: {e}");
    }
}

/// The connections being served, oldest first.
#[derive(Default)]
struct Connections(VecDeque<AbortHandle>);

impl Connections {
    /// At the bound, the oldest connection is closed for the new one: clients that never
    /// finish cannot keep a scraper out.
    fn add(&mut self, connection: AbortHandle) {
        self.0.retain(|c| !c.is_finished());
        if self.0.len() >= MAX_CONNECTIONS {
            self.close_oldest();
        }
        self.0.push_back(connection);
    }

    /// Gives the oldest connection's descriptor back.
    fn close_oldest(&mut self) {
        self.0.retain(|c| !c.is_finished());
        if let Some(oldest) = self.0.pop_front() {
            oldest.abort();
        }
    }
}

async fn scrape(
    req: Request<hyper::body::Incoming>,
    registry: Arc<Registry>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.uri().path() != "/metrics" {
        let mut not_found = Response::new(Full::new(Bytes::from("try /metrics\n")));
        *not_found.status_mut() = hyper::StatusCode::NOT_FOUND;
        return Ok(not_found);
    }
    let accept = req
        .headers()
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let format = Format::negotiate(accept);
    let response = match render(&registry, format) {
        Ok(body) => {
            let mut ok = Response::new(Full::new(Bytes::from(body)));
            ok.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(format.content_type()),
            );
            ok
        }
        Err(_) => {
            let mut error = Response::new(Full::new(Bytes::new()));
            *error.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
            error
        }
    };
    Ok(response)
}

/// The exposition formats a scraper can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    /// The classic Prometheus text format, version 0.0.4.
    Text,
}

impl Format {
    /// OpenMetrics when the Accept header ranks it at least as high as plain text (as
    /// Prometheus does), 0.0.4 text otherwise, and when there is no header.
    pub fn negotiate(accept: &str) -> Self {
        let (mut openmetrics, mut text) = (0.0f32, 0.0f32);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

pub fn render(registry: &Registry, format: Format) -> Result<String, std::fmt::Error> {
    let mut body = String::new();
    encode(&mut body, registry)?;
    Ok(match format {
        Format::OpenMetrics => body,
        Format::Text => to_text_0_0_4(&body),
    })
}

/// The 0.0.4 text format from OpenMetrics text, for the metric types this agent exports:
/// counter and info families are named with their sample's suffix (`_total`, `_info`,
/// an info becoming a gauge), and `# EOF` and `# UNIT` lines do not exist there.
fn to_text_0_0_4(openmetrics: &str) -> String {
    let mut suffixes: std::collections::HashMap<&str, (&str, &str)> = Default::default();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            match rest.split_once(' ') {
                Some((name, "counter")) => suffixes.insert(name, ("_total", "counter")),
                Some((name, "info")) => suffixes.insert(name, ("_info", "gauge")),
                _ => None,
            };
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let descriptor = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match descriptor.and_then(|(p, rest)| {
            let (name, tail) = rest.split_once(' ')?;
            let (suffix, kind) = suffixes.get(name)?;
            let tail = if p == "# TYPE " { kind } else { tail };
            Some(format!("{p}{name}{suffix} {tail}"))
        }) {
            Some(renamed) => out.push_str(&renamed),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fall_forward_and_queue_figures_are_exported_per_destination() {
        let metrics = Metrics::default();
        metrics.publish(Snapshot {
            rows: vec![Row {
                address: "127.0.0.1".into(),
                port: 8001,
                mode: "shadow",
                limit: 2,
                inflight: 3,
                admitted: 3,
                shed: 0,
                would_shed: 1,
                redirected: 4,
                would_redirect: 2,
                overflow: "queue",
                waiting: 5,
                queue_admitted: 7,
                wait_p99_ms: Some(250.0),
                ..Row::default()
            }],
            ..Snapshot::default()
        });
        let mut registry = Registry::default();
        registry.register_collector(Box::new(metrics));
        let body = render(&registry, Format::OpenMetrics).unwrap();
        let value = |name: &str| {
            let prefix = format!("{name}{{destination=\"127.0.0.1:8001\"}} ");
            body.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .and_then(|v| v.parse::<f64>().ok())
        };
        assert_eq!(value("limiter_redirected_total"), Some(4.0), "{body}");
        assert_eq!(value("limiter_queue_waiting"), Some(5.0), "{body}");
        assert_eq!(value("limiter_queue_admitted_total"), Some(7.0), "{body}");
        assert_eq!(
            value("limiter_queue_wait_p99_seconds"),
            Some(0.25),
            "{body}"
        );
        assert_eq!(value("limiter_queue_wait_p50_seconds"), None, "{body}");
        assert_eq!(value("limiter_would_redirect_total"), Some(2.0), "{body}");
    }

    #[test]
    fn openmetrics_only_when_the_scraper_prefers_it() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(prometheus), Format::OpenMetrics);
        assert_eq!(Format::negotiate(""), Format::Text);
        assert_eq!(Format::negotiate("*/*"), Format::Text);
        assert_eq!(Format::negotiate("text/plain;version=0.0.4"), Format::Text);
        assert_eq!(
            Format::negotiate("text/plain;q=1.0, application/openmetrics-text;q=0.5"),
            Format::Text
        );
        assert_eq!(
            Format::negotiate("application/openmetrics-text; q=0"),
            Format::Text
        );
    }

    #[test]
    fn text_0_0_4_names_families_by_their_samples() {
        let om =
            "# HELP a_shed Connects refused.\n# TYPE a_shed counter\na_shed_total{d=\"x\"} 3\n\
                  # HELP b Build.\n# TYPE b info\nb_info{v=\"1\"} 1\n\
                  # HELP c_limit Limit.\n# TYPE c_limit gauge\nc_limit 2\n# EOF\n";
        assert_eq!(
            to_text_0_0_4(om),
            "# HELP a_shed_total Connects refused.\n# TYPE a_shed_total counter\na_shed_total{d=\"x\"} 3\n\
             # HELP b_info Build.\n# TYPE b_info gauge\nb_info{v=\"1\"} 1\n\
             # HELP c_limit Limit.\n# TYPE c_limit gauge\nc_limit 2\n"
        );
    }
}
