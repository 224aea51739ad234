//! The real-traffic rig, simulated: a proxy with a new upstream connection per request,
//! between 100 keep-alive clients with 250 ms of think time (about 350 requests/s) and an
//! upstream of 32 workers answering in 30 ms. The clients all connect at once, as a load
//! generator does when it starts.

use crate::clients::{Client, ClosedLoop, Load, RequestClass, Service};
use crate::engine::Setup;
use crate::upstream::UpstreamSpec;

/// The upstream's workers.
pub const WORKERS: u32 = 32;
pub const CLIENTS: u32 = 100;
pub const THINK_S: f64 = 0.25;

/// The upstream's healthy service time.
pub fn service() -> Service {
    Service::lognormal(0.03, 0.3)
}

/// The clients; a refused connect is answered at once (a 502) and the client thinks as
/// after any other answer. `deadline_s` is the proxy's read timeout.
pub fn clients(deadline_s: Option<f64>) -> RequestClass {
    RequestClass {
        service: service(),
        load: Load::Closed(ClosedLoop {
            workers: CLIENTS,
            retry_after_s: THINK_S,
            think_s: THINK_S,
            at_once: true,
        }),
        client: Client {
            deadline_s,
            ..Client::default()
        },
    }
}

pub fn setup(duration_s: f64, upstream: UpstreamSpec, deadline_s: Option<f64>) -> Setup {
    Setup {
        overflow: Default::default(),
        duration_s,
        upstream,
        classes: vec![clients(deadline_s)],
    }
}

/// The incident: the upstream's service time goes 27 times slower for a minute while its
/// workers stay, so demand is far above what it can serve (32 workers / 0.81 s, about 38
/// requests/s); then it recovers.
pub const SLOW_FROM_S: f64 = 60.0;
pub const SLOW_UNTIL_S: f64 = 120.0;
pub const INCIDENT_END_S: f64 = 180.0;
pub const SLOWDOWN: f64 = 27.0;
/// The proxy's read timeout, and a patient client's.
pub const DEADLINES_S: [f64; 2] = [2.0, 60.0];

pub fn incident_upstream() -> UpstreamSpec {
    UpstreamSpec {
        latency_factor: crate::schedule::Schedule::constant(1.0)
            .step(SLOW_FROM_S, SLOWDOWN)
            .step(SLOW_UNTIL_S, 1.0),
        ..UpstreamSpec::steady(WORKERS)
    }
}

/// The incident with each client timeout.
pub(super) fn incident_runs() -> Vec<super::Run> {
    vec![
        super::Run::limited(
            "2 s timeout",
            setup(INCIDENT_END_S, incident_upstream(), Some(DEADLINES_S[0])),
        ),
        super::Run::limited(
            "60 s timeout",
            setup(INCIDENT_END_S, incident_upstream(), Some(DEADLINES_S[1])),
        ),
    ]
}

/// Requests per second the workers complete at the slow service time.
pub fn slow_capacity() -> f64 {
    f64::from(WORKERS) / (service().mean_s() * SLOWDOWN)
}

/// The incident's traces with the label of their client timeout.
pub fn by_timeout(
    traces: &[crate::trace::Trace],
) -> impl Iterator<Item = (&crate::trace::Trace, String)> {
    traces.iter().zip(DEADLINES_S).map(|(trace, deadline)| {
        (
            trace,
            format!("{} s timeout", crate::criteria::figure(deadline)),
        )
    })
}
