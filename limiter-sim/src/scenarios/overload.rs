//! An upstream that answers 429 Too Many Requests above a concurrency it allows, as a rate
//! limiter in front of a service does: for two and a half minutes it allows 60 of its 100
//! workers. The limit must settle near the allowance, so that few answers are 429s, and
//! return to the workers once the allowance does.

use super::{phase, saturating, Judgement, Run, Scenario, CAPACITY};
use crate::criteria::{around, figure, stays_within, Bound, Criterion};
use crate::schedule::Schedule;
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "overload",
    shows: "429s above an allowed concurrency: the limit settles near it, then returns",
    runs,
    judge,
};

const ALLOWED: f64 = 60.0;
const FROM_S: f64 = 100.0;
const UNTIL_S: f64 = 250.0;
/// Judged from this long after the allowance starts, and after it ends.
const SETTLE_S: f64 = 30.0;
const RECOVER_WITHIN_S: f64 = 60.0;
const END_S: f64 = 400.0;
/// The share of answers that may be 429s once settled.
const OVERLOADED_SHARE: f64 = 0.05;

fn runs() -> Vec<Run> {
    let upstream = UpstreamSpec {
        allowed: Schedule::constant(f64::INFINITY)
            .step(FROM_S, ALLOWED)
            .step(UNTIL_S, f64::INFINITY),
        ..UpstreamSpec::steady(CAPACITY)
    };
    vec![Run::limited("allowance", saturating(END_S, upstream))]
}

fn judge(traces: &[Trace]) -> Judgement {
    let trace = &traces[0];
    let settled = (FROM_S + SETTLE_S) as usize..UNTIL_S as usize;
    let seconds = &trace.seconds[settled];
    let overloaded: u32 = seconds.iter().map(|s| s.overloaded).sum();
    let answers: u32 = seconds.iter().map(|s| s.completed + s.failed).sum();
    let share = f64::from(overloaded) / f64::from(answers.max(1));
    let mut criteria = stays_within(
        "allowance",
        trace,
        phase(FROM_S + SETTLE_S, UNTIL_S),
        around(ALLOWED, 0.2),
    );
    criteria.push(Criterion::new(
        "allowance: 429s / answers",
        share,
        Bound::AtMost(OVERLOADED_SHARE),
    ));
    criteria.extend(stays_within(
        "after the allowance",
        trace,
        phase(UNTIL_S + RECOVER_WITHIN_S, END_S),
        around(f64::from(CAPACITY), 0.2),
    ));
    let key_figure = format!(
        "allowed {ALLOWED}: p5..p95 {}..{}, 429s {:.1} % of answers; then p5..p95 {}..{} (C = {CAPACITY})",
        figure(criteria[0].value),
        figure(criteria[1].value),
        share * 100.0,
        figure(criteria[3].value),
        figure(criteria[4].value),
    );
    Judgement {
        criteria,
        key_figure,
    }
}
