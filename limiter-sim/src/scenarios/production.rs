//! The production incident: at a steady request rate, the upstream's median latency goes
//! from 0.35 s to 10.4 s with no errors at all. Without a limiter, in-flight follows
//! Little's law up to rate x latency; a slow-call breaker only opens once half the calls
//! of the last 10 s were slow. The limiter must shed before that.

use super::{phase, Judgement, Run, Scenario};
use crate::clients::{Load, RequestClass, Service};
use crate::clock::{as_secs, secs, Nanos};
use crate::criteria::{around, figure, Bound, Criterion};
use crate::engine::Setup;
use crate::schedule::Schedule;
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "production",
    shows: "p50 0.35 s -> 10.4 s at 0 % errors: sheds well before a slow-call breaker would open",
    runs,
    judge,
};

const HEALTHY_P50_S: f64 = 0.35;
const DEGRADED_P50_S: f64 = 10.4;
const PER_S: f64 = 20.0;
/// The degradation builds up over two minutes, as it did in production.
const DEGRADES_FROM_S: f64 = 120.0;
const DEGRADED_AT_S: f64 = 240.0;
const END_S: f64 = 400.0;

fn runs() -> Vec<Run> {
    let setup = Setup {
        overflow: Default::default(),
        duration_s: END_S,
        upstream: UpstreamSpec {
            latency_factor: Schedule::constant(1.0).ramp(
                DEGRADES_FROM_S,
                DEGRADED_AT_S,
                DEGRADED_P50_S / HEALTHY_P50_S,
            ),
            // A slow dependency, not a saturated one: enough workers for any backlog.
            ..UpstreamSpec::steady(10_000)
        },
        classes: vec![RequestClass::new(
            Service::lognormal(HEALTHY_P50_S, 0.4),
            Load::Poisson { per_s: PER_S },
        )],
    };
    vec![
        Run::limited("limited", setup.clone()),
        Run::unlimited("no limiter", setup),
    ]
}

fn judge(traces: &[Trace]) -> Judgement {
    let (limited, unlimited) = (&traces[0], &traces[1]);
    let whole = phase(0.0, END_S);
    let at = |t: Option<Nanos>| t.map_or(f64::INFINITY, as_secs);
    let first_shed = at(limited.first_shed);
    let breaker = at(unlimited.breaker_opened);
    let failed: u32 = unlimited.seconds.iter().map(|s| s.failed).sum();
    let criteria = vec![
        Criterion::new(
            "healthy p50 (s)",
            unlimited.typical_p50(phase(0.0, DEGRADES_FROM_S)),
            around(HEALTHY_P50_S, 0.1),
        ),
        Criterion::new(
            "degraded p50 (s)",
            unlimited.typical_p50(phase(DEGRADED_AT_S + 20.0, END_S)),
            around(DEGRADED_P50_S, 0.1),
        ),
        Criterion::new("errors", f64::from(failed), Bound::AtMost(0.0)),
        Criterion::new(
            "healthy from 1 s: shed",
            f64::from(limited.shed(secs(1.0), secs(DEGRADES_FROM_S))),
            Bound::AtMost(0.0),
        ),
        Criterion::new("first shed (s)", first_shed, Bound::Below(breaker)),
        Criterion::new(
            "peak in-flight",
            f64::from(limited.peak_inflight(whole.0, whole.1)),
            Bound::AtMost(f64::from(limited.max_limit(whole.0, whole.1))),
        ),
    ];
    let key_figure = format!(
        "first shed {} s, breaker {} s; peak in-flight {} (unlimited {})",
        figure(first_shed),
        figure(breaker),
        limited.peak_inflight(whole.0, whole.1),
        unlimited.peak_inflight(whole.0, whole.1),
    );
    Judgement {
        criteria,
        key_figure,
    }
}
