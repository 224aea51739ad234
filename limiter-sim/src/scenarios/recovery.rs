//! After the incident the upstream is healthy again: the limit must let the healthy
//! traffic back within seconds, and must not fall while the latency is back at its
//! baseline.

use super::{phase, rig, Judgement, Scenario};
use crate::criteria::{falls_at_baseline, figure, Bound, Criterion};
use crate::trace::Trace;

pub const SCENARIO: Scenario = Scenario {
    name: "recovery",
    shows: "after the incident: healthy goodput back within 5 s, the limit never falls at baseline",
    runs: rig::incident_runs,
    judge,
};

const BACK_WITHIN_S: f64 = 5.0;
/// Healthy goodput is measured over the healthy minute before the incident, after a
/// start-up of this long.
const HEALTHY_FROM_S: f64 = 20.0;
/// A second's p90 within this factor of the healthy p90 is at the baseline.
const AT_BASELINE: f64 = 1.25;

fn judge(traces: &[Trace]) -> Judgement {
    let healthy = phase(HEALTHY_FROM_S, rig::SLOW_FROM_S);
    let back = phase(rig::SLOW_UNTIL_S + BACK_WITHIN_S, rig::INCIDENT_END_S);
    let after = phase(rig::SLOW_UNTIL_S, rig::INCIDENT_END_S);
    let mut criteria = Vec::new();
    let mut figures = Vec::new();
    for (trace, label) in rig::by_timeout(traces) {
        let normal = trace.goodput(healthy.0, healthy.1);
        let goodput = trace.goodput(back.0, back.0 + crate::clock::secs(10.0));
        let p90 = trace.typical_p90(healthy);
        let falls = falls_at_baseline(trace, after, AT_BASELINE * p90);
        criteria.push(Criterion::new(
            format!("{label}: goodput 5..15 s after recovery (req/s)"),
            goodput,
            Bound::AtLeast(0.9 * normal),
        ));
        criteria.push(Criterion::new(
            format!("{label}: shed from 5 s after recovery"),
            f64::from(trace.shed(back.0, back.1)),
            Bound::AtMost(0.0),
        ));
        criteria.push(Criterion::new(
            format!("{label}: limit lost while the latency is at its baseline"),
            falls,
            Bound::AtMost(0.0),
        ));
        figures.push(format!(
            "{label}: {} of {} req/s",
            figure(goodput),
            figure(normal)
        ));
    }
    Judgement {
        criteria,
        key_figure: format!("5..15 s after recovery, {}", figures.join("; ")),
    }
}
