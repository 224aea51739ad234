//! Streamed completions: 45 s on the connection, 280 ms to the first token. The sample is
//! the first byte, so a healthy upstream must not be clamped for holding connections.

use super::{phase, Judgement, Run, Scenario};
use crate::clients::{Load, RequestClass, Service};
use crate::criteria::{Bound, Criterion};
use crate::engine::Setup;
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "streaming",
    shows: "45 s streams with 280 ms first byte: the limit does not clamp",
    runs,
    judge,
};

const HOLD_S: f64 = 45.0;
const PER_S: f64 = 1.0;
const SETTLED_FROM_S: f64 = 600.0;
const END_S: f64 = 1800.0;

fn runs() -> Vec<Run> {
    let setup = Setup {
        overflow: Default::default(),
        duration_s: END_S,
        // Room for every stream: the upstream is healthy throughout.
        upstream: UpstreamSpec::steady(200),
        classes: vec![RequestClass::new(
            Service::lognormal(0.28, 0.3).streamed(HOLD_S),
            Load::Poisson { per_s: PER_S },
        )],
    };
    vec![Run::limited("streams", setup)]
}

fn judge(traces: &[Trace]) -> Judgement {
    let trace = &traces[0];
    let (from, to) = phase(SETTLED_FROM_S, END_S);
    let needed = PER_S * HOLD_S;
    let lowest = trace.min_limit(from, to);
    let shed = trace.shed(from, to);
    let criteria = vec![
        Criterion::new("settled: shed", f64::from(shed), Bound::AtMost(0.0)),
        Criterion::new(
            "settled: lowest limit",
            f64::from(lowest),
            Bound::AtLeast(needed),
        ),
    ];
    Judgement {
        criteria,
        key_figure: format!("lowest limit {lowest} (load needs {needed}), {shed} shed"),
    }
}
