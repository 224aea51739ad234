//! Prometheus metrics on `--metrics ADDR`: a snapshot of the maps and the controllers,
//! refreshed by the agent loop and encoded on each scrape.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::{body::Bytes, server::conn::http1, service::service_fn, Request, Response};
use hyper_util::rt::TokioIo;
use prometheus_client::{
    collector::Collector,
    encoding::{text::encode, DescriptorEncoder, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge},
    registry::Registry,
};
use tokio::net::TcpListener;
use tracing::warn;

use crate::{status::Row, tables::Globals};

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

const PER_DESTINATION: [PerDestination; 10] = [
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
                let labels: Labels = vec![
                    ("destination", format!("{}:{}", row.address, row.port)),
                    ("mode", row.mode.to_string()),
                ];
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
        Ok(())
    }
}

/// Binds `addr` now (so a bad address fails the start) and serves /metrics from then on.
pub async fn serve(addr: SocketAddr, metrics: Metrics) -> Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(metrics));
    let registry = Arc::new(registry);
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    warn!("metrics: accept failed: {e}");
                    continue;
                }
            };
            let registry = registry.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| scrape(req, registry.clone()));
                if let Err(e) = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    warn!("metrics: {e}");
                }
            });
        }
    });
    Ok(())
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
    let mut body = String::new();
    let response = match encode(&mut body, &registry) {
        Ok(()) => {
            let mut ok = Response::new(Full::new(Bytes::from(body)));
            ok.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fall_forward_counters_are_exported_per_destination() {
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
                connect_failed: 0,
                baseline_ms: None,
                p90_ms: None,
            }],
            ..Snapshot::default()
        });
        let mut registry = Registry::default();
        registry.register_collector(Box::new(metrics));
        let mut body = String::new();
        encode(&mut body, &registry).unwrap();
        let value = |name: &str| {
            let prefix = format!("{name}{{destination=\"127.0.0.1:8001\",mode=\"shadow\"}} ");
            body.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .and_then(|v| v.parse::<f64>().ok())
        };
        assert_eq!(value("limiter_redirected_total"), Some(4.0), "{body}");
        assert_eq!(value("limiter_would_redirect_total"), Some(2.0), "{body}");
    }
}
