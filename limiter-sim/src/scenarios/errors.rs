//! A 30 s burst of errors at normal latency: the limit must react, then come back.

use super::{phase, saturating, Judgement, Run, Scenario, CAPACITY};
use crate::clock::secs;
use crate::criteria::{around, figure, stays_within, Bound, Criterion};
use crate::schedule::Schedule;
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "errors",
    shows: "error bursts at normal latency: the limit reacts, then recovers",
    runs,
    judge,
};

const BURST_AT_S: f64 = 200.0;
const BURST_S: f64 = 30.0;
const ERROR_RATE: f64 = 0.2;
const RECOVER_WITHIN_S: f64 = 60.0;
const END_S: f64 = 400.0;

fn runs() -> Vec<Run> {
    let upstream = UpstreamSpec {
        error_rate: Schedule::constant(0.0)
            .step(BURST_AT_S, ERROR_RATE)
            .step(BURST_AT_S + BURST_S, 0.0),
        ..UpstreamSpec::steady(CAPACITY)
    };
    vec![Run::limited("error burst", saturating(END_S, upstream))]
}

fn judge(traces: &[Trace]) -> Judgement {
    let trace = &traces[0];
    let (onset, burst_end) = phase(BURST_AT_S, BURST_AT_S + BURST_S);
    let before = f64::from(trace.limit_at(onset));
    // Errors surface one service time after they start: allow a few seconds past the end.
    let lowest = f64::from(trace.min_limit(onset, burst_end + secs(5.0)));
    let mut criteria = vec![Criterion::new(
        "burst: lowest limit / limit at onset",
        lowest / before,
        Bound::AtMost(0.9),
    )];
    criteria.extend(stays_within(
        "after the burst",
        trace,
        phase(BURST_AT_S + BURST_S + RECOVER_WITHIN_S, END_S),
        around(f64::from(CAPACITY), 0.2),
    ));
    let key_figure = format!(
        "fell to {} then p5..p95 {}..{} (C = {CAPACITY})",
        figure(lowest),
        figure(criteria[1].value),
        figure(criteria[2].value)
    );
    Judgement {
        criteria,
        key_figure,
    }
}
