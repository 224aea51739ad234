//! 8 requests a minute for two hours: 50 samples take six minutes to gather. The limit
//! must neither wander on noise nor sit inert through a slowdown or errors.

use super::{Judgement, Run, Scenario};
use crate::clients::{Load, RequestClass, Service};
use crate::clock::secs;
use crate::criteria::{figure, Bound, Criterion};
use crate::engine::Setup;
use crate::schedule::Schedule;
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "low-traffic",
    shows: "8 requests/min: not inert, not wandering",
    runs,
    judge,
};

const PER_MIN: f64 = 8.0;
const END_S: f64 = 2.0 * 3600.0;
/// Half an hour of health before trouble starts in the slowdown and errors runs.
const TROUBLE_AT_S: f64 = 1800.0;
/// How long the limit may take to react.
const REACT_WITHIN_S: f64 = 1800.0;
const SLOWDOWN: f64 = 5.0;
const ERROR_RATE: f64 = 0.2;

fn runs() -> Vec<Run> {
    let setup = |upstream| Setup {
        overflow: Default::default(),
        duration_s: END_S,
        upstream,
        classes: vec![RequestClass::new(
            Service::lognormal(0.2, 0.4),
            Load::Poisson {
                per_s: PER_MIN / 60.0,
            },
        )],
    };
    let healthy = UpstreamSpec::steady(40);
    let slow = UpstreamSpec {
        latency_factor: Schedule::constant(1.0).step(TROUBLE_AT_S, SLOWDOWN),
        ..healthy.clone()
    };
    let failing = UpstreamSpec {
        error_rate: Schedule::constant(0.0).step(TROUBLE_AT_S, ERROR_RATE),
        ..healthy.clone()
    };
    vec![
        Run::limited("healthy", setup(healthy)),
        Run::limited("5x slowdown", setup(slow)),
        Run::limited("20 % errors", setup(failing)),
    ]
}

fn judge(traces: &[Trace]) -> Judgement {
    let (healthy, slow, failing) = (&traces[0], &traces[1], &traces[2]);
    // From where the first update started it: before that a new destination refuses nothing.
    let from = crate::engine::UPDATE_INTERVAL;
    let start = f64::from(healthy.limit_at(from));
    let to = secs(END_S);
    let drift = 100.0
        * (f64::from(healthy.max_limit(from, to)) - start)
            .max(start - f64::from(healthy.min_limit(from, to)))
        / start;
    let criteria = vec![
        Criterion::new("healthy: drift from start (%)", drift, Bound::AtMost(10.0)),
        falls("slowdown", slow),
        falls("errors", failing),
    ];
    let key_figure = format!(
        "drift {} %; slowdown x{}, errors x{}",
        figure(drift),
        figure(criteria[1].value),
        figure(criteria[2].value)
    );
    Judgement {
        criteria,
        key_figure,
    }
}

/// The lowest limit within the reaction time, relative to the limit when trouble began:
/// falling means leaving the +-10 % band a healthy limit stays in.
fn falls(label: &str, trace: &Trace) -> Criterion {
    let onset = secs(TROUBLE_AT_S);
    let before = f64::from(trace.limit_at(onset));
    let lowest = f64::from(trace.min_limit(onset, onset + secs(REACT_WITHIN_S)));
    Criterion::new(
        format!("{label}: lowest limit / limit at onset"),
        lowest / before,
        Bound::AtMost(0.9),
    )
}
