//! The upstream's own service time rises 27-fold (its dependency slowed) while its 32
//! workers stay, under demand far above what it can then serve, with a proxy timeout of
//! 2 s and with a patient client. Lowering our concurrency does not lower its latency: the
//! limit must follow what the upstream can serve (its workers) instead of falling to the
//! floor, and keep in-flight near the workers so admitted requests do not queue.

use super::{phase, rig, Judgement, Scenario};
use crate::criteria::{figure, Bound, Criterion};
use crate::trace::Trace;

pub const SCENARIO: Scenario = Scenario {
    name: "incident",
    shows: "service time x27 at 32 workers, demand above capacity: goodput at capacity, in-flight near the workers",
    runs: rig::incident_runs,
    judge,
};

/// Time for the first slow answers to arrive and for the filter to show them.
const SETTLE_S: f64 = 10.0;
/// In-flight (its 95th percentile over the updates, so that a probe of one round does not
/// count) may exceed the workers by this factor: a short queue keeps them busy.
const INFLIGHT_OVER_WORKERS: f64 = 1.3;

fn judge(traces: &[Trace]) -> Judgement {
    let (from, to) = phase(rig::SLOW_FROM_S + SETTLE_S, rig::SLOW_UNTIL_S);
    let capacity = rig::slow_capacity();
    let mut criteria = Vec::new();
    let mut figures = Vec::new();
    for (trace, label) in rig::by_timeout(traces) {
        let goodput = trace.goodput(from, to);
        let inflights: Vec<f64> = trace
            .ticks_in(from, to)
            .map(|t| f64::from(t.inflight))
            .collect();
        let inflight = crate::trace::quantile(&inflights, 0.95).unwrap_or(0.0);
        criteria.push(Criterion::new(
            format!("{label}: goodput (req/s)"),
            goodput,
            Bound::AtLeast(0.9 * capacity),
        ));
        criteria.push(Criterion::new(
            format!("{label}: in-flight p95"),
            inflight,
            Bound::AtMost(INFLIGHT_OVER_WORKERS * f64::from(rig::WORKERS)),
        ));
        figures.push(format!(
            "{label}: {} req/s, in-flight p95 {}",
            figure(goodput),
            figure(inflight)
        ));
    }
    Judgement {
        criteria,
        key_figure: format!(
            "{} (capacity {} req/s, {} workers)",
            figures.join("; "),
            figure(capacity),
            rig::WORKERS
        ),
    }
}
