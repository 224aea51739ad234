//! A database whose queries turn slow while it has workers to spare, as pgbench -C sees
//! PostgreSQL when every transaction becomes a `pg_sleep(0.1)`: 10 clients, a connection
//! per transaction ending with a goodbye, the service time 10 times longer for 20 s. Latency
//! does not follow our concurrency and the clients cannot pile up more than their number of
//! connections: a refused connect only aborts a client (pgbench gives up on it), it spares
//! the database nothing.

use super::{phase, Judgement, Run, Scenario};
use crate::clients::{Client, Load, RequestClass, Service};
use crate::criteria::{Bound, Criterion};
use crate::engine::Setup;
use crate::schedule::Schedule;
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "slow-query",
    shows: "queries 10x slower with workers to spare, 10 clients: nothing shed, the limit stays above the clients",
    runs,
    judge,
};

const CLIENTS: u32 = 10;
/// PostgreSQL's default max_connections: workers to spare for 10 clients.
const WORKERS: u32 = 100;
const SLOW_FROM_S: f64 = 20.0;
const SLOW_UNTIL_S: f64 = 40.0;
const SLOWDOWN: f64 = 10.0;
const END_S: f64 = 60.0;
/// From the last message to the close: microseconds, as a client library takes.
const GOODBYE_S: f64 = 50e-6;

fn runs() -> Vec<Run> {
    let setup = Setup {
        duration_s: END_S,
        upstream: UpstreamSpec {
            latency_factor: Schedule::constant(1.0)
                .step(SLOW_FROM_S, SLOWDOWN)
                .step(SLOW_UNTIL_S, 1.0),
            ..UpstreamSpec::steady(WORKERS)
        },
        classes: vec![RequestClass {
            service: Service::lognormal(0.01, 0.3),
            load: Load::closed(CLIENTS, 0.01),
            client: Client {
                goodbye_s: Some(GOODBYE_S),
                ..Client::default()
            },
        }],
    };
    vec![Run::limited(
        "10 clients, queries 10x slower for 20 s",
        setup,
    )]
}

fn judge(traces: &[Trace]) -> Judgement {
    let trace = &traces[0];
    let (from, to) = phase(0.0, END_S);
    let shed = trace.shed(from, to);
    let lowest = trace.min_limit(from, to);
    Judgement {
        criteria: vec![
            Criterion::new("shed", f64::from(shed), Bound::AtMost(0.0)),
            Criterion::new(
                "lowest limit",
                f64::from(lowest),
                Bound::AtLeast(f64::from(CLIENTS)),
            ),
        ],
        key_figure: format!("lowest limit {lowest} ({CLIENTS} clients), {shed} shed"),
    }
}
