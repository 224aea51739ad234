//! A small and a large model behind one destination: 200 ms and 5 s requests in a stable
//! mix. The p90 then describes the large requests; what matters is that the limit does
//! not mistake the mix for a slowdown: it stays at or above what the load needs by
//! Little's law, and nothing is shed.

use super::{phase, Judgement, Run, Scenario};
use crate::clients::{Load, RequestClass, Service};
use crate::clock::secs;
use crate::criteria::{figure, Bound, Criterion};
use crate::engine::Setup;
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "mixed-sizes",
    shows: "a large and a small model share a destination: say what happens",
    runs,
    judge,
};

const SMALL_PER_S: f64 = 16.0;
const LARGE_PER_S: f64 = 4.0;
const SMALL_S: f64 = 0.2;
const LARGE_S: f64 = 5.0;
const SIGMA: f64 = 0.3;
const SETTLED_FROM_S: f64 = 300.0;
const END_S: f64 = 900.0;

fn runs() -> Vec<Run> {
    let setup = Setup {
        overflow: Default::default(),
        duration_s: END_S,
        // Enough workers for the mix: nothing is overloaded, only different.
        upstream: UpstreamSpec::steady(100),
        classes: vec![
            RequestClass::new(
                Service::lognormal(SMALL_S, SIGMA),
                Load::Poisson { per_s: SMALL_PER_S },
            ),
            RequestClass::new(
                Service::lognormal(LARGE_S, SIGMA),
                Load::Poisson { per_s: LARGE_PER_S },
            ),
        ],
    };
    vec![Run::limited("20 % large requests", setup)]
}

fn judge(traces: &[Trace]) -> Judgement {
    let trace = &traces[0];
    let (from, to) = phase(SETTLED_FROM_S, END_S);
    let lowest = trace.min_limit(from, to);
    let shed = trace.shed(secs(1.0), to);
    // Little's law: arrival rate x mean time in the system, per class.
    let needed = SMALL_PER_S * Service::lognormal(SMALL_S, SIGMA).mean_s()
        + LARGE_PER_S * Service::lognormal(LARGE_S, SIGMA).mean_s();
    let criteria = vec![
        Criterion::new(
            "settled: lowest limit",
            f64::from(lowest),
            Bound::AtLeast(needed),
        ),
        Criterion::new("from 1 s: shed", f64::from(shed), Bound::AtMost(0.0)),
    ];
    Judgement {
        criteria,
        key_figure: format!(
            "lowest limit {lowest} (load needs {}), {shed} shed",
            figure(needed)
        ),
    }
}
