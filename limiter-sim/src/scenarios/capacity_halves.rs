//! The upstream loses half its workers for a while, then gets them back.

use super::{phase, saturating, throughput, Judgement, Run, Scenario, CAPACITY};
use crate::criteria::{around, figure, holds};
use crate::schedule::Schedule;
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "capacity-halves",
    shows: "re-converges to the new capacity; recovers when capacity returns",
    runs,
    judge,
};

const HALVED_AT_S: f64 = 200.0;
const RESTORED_AT_S: f64 = 400.0;
const END_S: f64 = 640.0;
/// How long each change may take before the bounds apply.
const TO_HALF_S: f64 = 60.0;
const TO_FULL_S: f64 = 120.0;

fn runs() -> Vec<Run> {
    let full = f64::from(CAPACITY);
    let upstream = UpstreamSpec {
        capacity: Schedule::constant(full)
            .step(HALVED_AT_S, full / 2.0)
            .step(RESTORED_AT_S, full),
        ..UpstreamSpec::steady(CAPACITY)
    };
    vec![Run::limited("capacity halves", saturating(END_S, upstream))]
}

fn judge(traces: &[Trace]) -> Judgement {
    let trace = &traces[0];
    let half = CAPACITY / 2;
    let mut criteria = holds(
        "halved",
        trace,
        phase(HALVED_AT_S + TO_HALF_S, RESTORED_AT_S),
        around(f64::from(half), 0.2),
        throughput(half),
    );
    criteria.extend(holds(
        "restored",
        trace,
        phase(RESTORED_AT_S + TO_FULL_S, END_S),
        around(f64::from(CAPACITY), 0.2),
        throughput(CAPACITY),
    ));
    let key_figure = format!(
        "median limit {} (C/2 = {half}), then {} (C = {CAPACITY})",
        figure(criteria[0].value),
        figure(criteria[3].value)
    );
    Judgement {
        criteria,
        key_figure,
    }
}
