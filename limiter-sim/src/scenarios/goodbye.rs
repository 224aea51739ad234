//! Clients that end every connection with a last message that gets no reply, as pgbench -C
//! does with PostgreSQL's Terminate: 10 clients, a connection per transaction, on a healthy
//! upstream. The kernel sees each of those closes while a request is outstanding; they are
//! goodbyes, not timeouts, and must not lower the limit.

use super::{phase, Judgement, Run, Scenario};
use crate::clients::{Client, Load, RequestClass, Service};
use crate::criteria::{Bound, Criterion};
use crate::engine::Setup;
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "goodbye",
    shows:
        "every connection ends with a last message and no reply: no timeout counted, nothing shed",
    runs,
    judge,
};

const CLIENTS: u32 = 10;
const END_S: f64 = 60.0;
/// From the last message to the close: microseconds, as a client library takes.
const GOODBYE_S: f64 = 50e-6;
/// PostgreSQL's default max_connections: workers to spare for the 10 clients.
pub(super) const WORKERS: u32 = 100;

/// The 10 clients against `upstream` for a minute: a connection per transaction of 10 ms,
/// each ending with a goodbye.
pub(super) fn setup(upstream: UpstreamSpec) -> Setup {
    Setup {
        overflow: Default::default(),
        duration_s: END_S,
        upstream,
        classes: vec![RequestClass {
            service: Service::lognormal(0.01, 0.3),
            load: Load::closed(CLIENTS, 0.01),
            client: Client {
                goodbye_s: Some(GOODBYE_S),
                ..Client::default()
            },
        }],
    }
}

fn runs() -> Vec<Run> {
    let setup = setup(UpstreamSpec::steady(WORKERS));
    vec![Run::limited("10 clients, a goodbye per connection", setup)]
}

/// Nothing shed (pgbench aborts a client on a refused connect), the limit never under the
/// clients, and no goodbye counted as an error or a timeout.
pub(super) fn judge(traces: &[Trace]) -> Judgement {
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
            Criterion::new(
                "errors and timeouts",
                f64::from(trace.failed_or_timed_out(from, to)),
                Bound::AtMost(0.0),
            ),
        ],
        key_figure: format!("lowest limit {lowest} ({CLIENTS} clients), {shed} shed"),
    }
}
