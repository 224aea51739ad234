//! A small and a large model behind one destination: 200 ms and 5 s requests in a stable
//! mix. The p90 then describes the large requests; what matters is that the limit does
//! not mistake the mix for a slowdown and clamp to the minimum.

use limiter_core::Limits;

use super::{phase, Judgement, Run, Scenario};
use crate::clients::{Load, RequestClass, Service};
use crate::criteria::{Bound, Criterion};
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
const SETTLED_FROM_S: f64 = 300.0;
const END_S: f64 = 900.0;

fn runs() -> Vec<Run> {
    let setup = Setup {
        duration_s: END_S,
        // Enough workers for the mix: nothing is overloaded, only different.
        upstream: UpstreamSpec::steady(100),
        classes: vec![
            RequestClass {
                service: Service::lognormal(0.2, 0.3),
                load: Load::Poisson { per_s: SMALL_PER_S },
            },
            RequestClass {
                service: Service::lognormal(5.0, 0.3),
                load: Load::Poisson { per_s: LARGE_PER_S },
            },
        ],
    };
    vec![Run::limited("20 % large requests", setup)]
}

fn judge(traces: &[Trace]) -> Judgement {
    let trace = &traces[0];
    let (from, to) = phase(SETTLED_FROM_S, END_S);
    let lowest = trace.min_limit(from, to);
    let shed = trace.shed(from, to);
    let offered = (SMALL_PER_S + LARGE_PER_S) * (END_S - SETTLED_FROM_S);
    let criteria = vec![Criterion::new(
        "settled: lowest limit",
        f64::from(lowest),
        Bound::Above(f64::from(Limits::default().min)),
    )];
    Judgement {
        criteria,
        key_figure: format!(
            "lowest limit {lowest}, {:.1} % shed",
            100.0 * f64::from(shed) / offered
        ),
    }
}
