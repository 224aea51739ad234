//! A saturated upstream of fixed capacity: the limit must find it and hold it, at C plus
//! the queue Vegas aims for (within +-10 %).

use super::{phase, saturating, throughput, Judgement, Run, Scenario, CAPACITY};
use crate::criteria::{around, figure, holds};
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "converge",
    shows: "reaches true capacity and holds it, oscillating no more than +-20 %",
    runs,
    judge,
};

const END_S: f64 = 300.0;
/// Two minutes to get there from the initial limit.
const SETTLED_FROM_S: f64 = 120.0;
/// Vegas keeps between alpha and beta requests queued beyond the workers: 6 and 12 at a
/// limit of 100 or more. The limit should sit at C plus the middle of that band.
const QUEUE_TARGET: f64 = 9.0;

fn runs() -> Vec<Run> {
    vec![Run::limited(
        "steady capacity",
        saturating(END_S, UpstreamSpec::steady(CAPACITY)),
    )]
}

fn judge(traces: &[Trace]) -> Judgement {
    let settled = phase(SETTLED_FROM_S, END_S);
    let criteria = holds(
        "settled",
        &traces[0],
        settled,
        around(f64::from(CAPACITY) + QUEUE_TARGET, 0.1),
        throughput(CAPACITY),
    );
    let key_figure = format!(
        "median limit {} (C = {CAPACITY})",
        figure(criteria[0].value)
    );
    Judgement {
        criteria,
        key_figure,
    }
}
