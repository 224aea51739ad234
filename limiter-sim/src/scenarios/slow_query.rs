//! A database whose queries turn slow while it has workers to spare, as pgbench -C sees
//! PostgreSQL when every transaction becomes a `pg_sleep(0.1)`: the goodbye scenario's 10
//! clients, with the service time 10 times longer for 20 s. Latency does not follow our
//! concurrency and the clients cannot pile up more than their number of connections: a
//! refused connect only aborts a client (pgbench gives up on it), it spares the database
//! nothing.

use super::{goodbye, Run, Scenario};
use crate::schedule::Schedule;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "slow-query",
    shows: "queries 10x slower with workers to spare, 10 clients: nothing shed, the limit stays above the clients",
    runs,
    judge: goodbye::judge,
};

const SLOW_FROM_S: f64 = 20.0;
const SLOW_UNTIL_S: f64 = 40.0;
const SLOWDOWN: f64 = 10.0;

fn runs() -> Vec<Run> {
    let upstream = UpstreamSpec {
        latency_factor: Schedule::constant(1.0)
            .step(SLOW_FROM_S, SLOWDOWN)
            .step(SLOW_UNTIL_S, 1.0),
        ..UpstreamSpec::steady(goodbye::WORKERS)
    };
    vec![Run::limited(
        "10 clients, queries 10x slower for 20 s",
        goodbye::setup(upstream),
    )]
}
