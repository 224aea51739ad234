//! Attach in front of healthy traffic: 100 clients connect at once to an upstream that
//! serves them all without queueing. Nothing is overloaded, so nothing may be refused, not
//! even the burst on attach: it is traffic, not overload.

use super::{phase, rig, Judgement, Run, Scenario};
use crate::criteria::{Bound, Criterion};
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "healthy-start",
    shows: "100 clients at once on a healthy upstream: nothing shed, from the first connect on",
    runs,
    judge,
};

const END_S: f64 = 60.0;

fn runs() -> Vec<Run> {
    let setup = rig::setup(END_S, UpstreamSpec::steady(rig::WORKERS), None);
    vec![Run::limited("100 clients at once", setup)]
}

fn judge(traces: &[Trace]) -> Judgement {
    let trace = &traces[0];
    let (from, to) = phase(0.0, END_S);
    let shed = trace.shed(from, to);
    Judgement {
        criteria: vec![Criterion::new("shed", f64::from(shed), Bound::AtMost(0.0))],
        key_figure: format!("{shed} shed"),
    }
}
