//! The upstream's healthy latency doubles for good (a deploy, a region failover) at the
//! same capacity. A baseline that only ever goes down would clamp the limit forever.

use super::{phase, saturating, Judgement, Run, Scenario, CAPACITY};
use crate::criteria::{around, figure, stays_within};
use crate::schedule::Schedule;
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "baseline-shift",
    shows: "the upstream's healthy latency doubles for good: the limit recovers",
    runs,
    judge,
};

const SHIFT_AT_S: f64 = 200.0;
const RECOVER_WITHIN_S: f64 = 120.0;
const END_S: f64 = 500.0;

fn runs() -> Vec<Run> {
    let upstream = UpstreamSpec {
        latency_factor: Schedule::constant(1.0).step(SHIFT_AT_S, 2.0),
        ..UpstreamSpec::steady(CAPACITY)
    };
    vec![Run::limited("latency doubles", saturating(END_S, upstream))]
}

fn judge(traces: &[Trace]) -> Judgement {
    let criteria = stays_within(
        "after the shift",
        &traces[0],
        phase(SHIFT_AT_S + RECOVER_WITHIN_S, END_S),
        around(f64::from(CAPACITY), 0.2),
    );
    let key_figure = format!(
        "limit p5..p95 {}..{} (C = {CAPACITY})",
        figure(criteria[0].value),
        figure(criteria[1].value)
    );
    Judgement {
        criteria,
        key_figure,
    }
}
