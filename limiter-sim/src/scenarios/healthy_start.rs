//! Attach in front of healthy traffic: 100 clients connect at once to an upstream that
//! serves them all without queueing. Nothing is overloaded; nothing may be refused once
//! the first second has shown the controller what the traffic needs.

use super::{phase, rig, Judgement, Run, Scenario};
use crate::criteria::{Bound, Criterion};
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "healthy-start",
    shows: "100 clients at once on a healthy upstream: nothing shed from the first second on",
    runs,
    judge,
};

const END_S: f64 = 60.0;
/// The first second is the controller's to learn in.
const LEARNED_BY_S: f64 = 1.0;

fn runs() -> Vec<Run> {
    let setup = rig::setup(END_S, UpstreamSpec::steady(rig::WORKERS), None);
    vec![Run::limited("100 clients at once", setup)]
}

fn judge(traces: &[Trace]) -> Judgement {
    let trace = &traces[0];
    let (from, to) = phase(LEARNED_BY_S, END_S);
    let shed = trace.shed(from, to);
    let first_second = trace.shed(0, from);
    Judgement {
        criteria: vec![Criterion::new(
            "from 1 s: shed",
            f64::from(shed),
            Bound::AtMost(0.0),
        )],
        key_figure: format!("{shed} shed from 1 s ({first_second} in the first second)"),
    }
}
