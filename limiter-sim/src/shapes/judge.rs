//! The criteria a shape is judged by, computed from the shape: its capacity during the
//! incident, and two more runs of the same shape and seed, its twin with no limiter and the
//! gateway policy's. Each criterion applies only to the shapes it is about, and those that
//! depend on how much was served only where enough answers come to judge it (see
//! [`judgeable`]).

use limiter_core::{Algorithm, Limits};

use super::{Demand, Shape, END_S, RESTORE_S, STEP_S};
use crate::algorithm::{AlgorithmChoice, Unlimited};
use crate::clock::{as_secs, secs, Nanos};
use crate::criteria::{figure, Bound, Criterion};
use crate::engine::{simulate, Setup};
use crate::trace::Trace;

/// A criterion as the scorecard's columns name it.
pub struct Column {
    pub name: &'static str,
    pub short: &'static str,
}

pub const HEALTHY_REFUSED: &str = "healthy: refused";
pub const PEAK_INFLIGHT: &str = "peak in-flight";
pub const SATURATED_GOODPUT: &str = "saturated: goodput / capacity";
pub const SATURATED_P99: &str = "saturated: p99 / service p99";
pub const SATURATED_TWIN: &str = "saturated: goodput / twin's";
pub const SPARE_TWIN: &str = "spare: goodput / twin's";
pub const FIRST_REFUSAL: &str = "pile-up: first refusal after the step (s)";
pub const RECOVERY: &str = "recovery: refused from 5 s after the first fast answer";
pub const GATEWAY: &str = "goodput from the step / gateway's";

/// Every criterion, in the order a shape's verdict lists them.
pub const CRITERIA: [Column; 9] = [
    Column {
        name: HEALTHY_REFUSED,
        short: "healthy",
    },
    Column {
        name: PEAK_INFLIGHT,
        short: "<= max",
    },
    Column {
        name: SATURATED_GOODPUT,
        short: "sat. goodput",
    },
    Column {
        name: SATURATED_P99,
        short: "sat. p99",
    },
    Column {
        name: SATURATED_TWIN,
        short: "sat. vs twin",
    },
    Column {
        name: SPARE_TWIN,
        short: "spare vs twin",
    },
    Column {
        name: FIRST_REFUSAL,
        short: "pile-up 3 s",
    },
    Column {
        name: RECOVERY,
        short: "recovery",
    },
    Column {
        name: GATEWAY,
        short: "vs gateway",
    },
];

/// The saturated criteria are judged from this long after the step: at the step every
/// request in flight waits out the slow service time whatever any limit does.
pub const SETTLE_S: f64 = 10.0;
/// The spare criterion is judged from this long after the step: time for a limit cut on
/// the first slow answers to be undone.
pub const LATE_S: f64 = 20.0;
pub const GOODPUT_OF_CAPACITY: f64 = 0.9;
/// The admitted p99 may exceed the upstream's own p99 service time by this factor: an
/// exact service time leaves less room, since one request waiting is a whole round more.
pub const P99_EXACT: f64 = 1.3;
pub const P99_VARIABLE: f64 = 1.5;
/// Two runs that both serve all the upstream can serve differ by their draws: a goodput
/// this close under another's counts as at least as much.
pub const SAME_WITHIN: f64 = 0.05;
pub const SPARE_OF_TWIN: f64 = 0.9;
pub const FIRST_REFUSAL_S: f64 = 3.0;
pub const RECOVERED_S: f64 = 5.0;

/// What playing a shape produced.
pub struct PlayedShape {
    pub criteria: Vec<Criterion>,
    /// The figures behind the criteria, in a line.
    pub figures: String,
    /// The run under the algorithm and its twin, for pictures.
    pub traces: Vec<(&'static str, Trace)>,
}

impl PlayedShape {
    pub fn passed(&self) -> bool {
        self.criteria.iter().all(|c| c.pass)
    }
}

/// Plays `shape` at `seed` with `algorithm`, with its twin and the gateway policy, and
/// judges the run.
pub fn play(shape: &Shape, algorithm: &AlgorithmChoice, seed: u64) -> anyhow::Result<PlayedShape> {
    play_with(shape, seed, |setup, limits| {
        algorithm.with_controller(limits, |c| simulate(setup, seed, c))
    })
}

/// [`play`], with the run under judgement made by `run` from the shape's setup and limits.
pub fn play_with(
    shape: &Shape,
    seed: u64,
    run: impl FnOnce(&Setup, Limits) -> anyhow::Result<Trace>,
) -> anyhow::Result<PlayedShape> {
    let setup = shape.setup();
    let limits = shape.limits();
    let played = run(&setup, limits)?;
    let twin = simulate(&setup, seed, &mut Unlimited);
    let gateway = AlgorithmChoice::Builtin(Algorithm::Gateway)
        .with_controller(limits, |c| simulate(&setup, seed, c))?;
    let (criteria, figures) = judge(shape, &played, &twin, &gateway);
    Ok(PlayedShape {
        criteria,
        figures,
        traces: vec![("with the limiter", played), ("twin, no limiter", twin)],
    })
}

fn judge(shape: &Shape, run: &Trace, twin: &Trace, gateway: &Trace) -> (Vec<Criterion>, String) {
    let (step, end) = (secs(STEP_S), secs(END_S));
    let incident_end = secs(shape.incident_end_s());
    let mut criteria = vec![
        Criterion::new(
            HEALTHY_REFUSED,
            f64::from(run.shed(0, step)),
            Bound::AtMost(0.0),
        ),
        Criterion::new(
            PEAK_INFLIGHT,
            f64::from(run.peak_inflight(0, end)),
            Bound::AtMost(f64::from(shape.limits().max)),
        ),
    ];
    let capacity = shape.goodput_capacity_per_s();
    let served = shape.demand_per_s(true).min(capacity);
    let mut figures = vec![format!(
        "demand {} of the capacity in the incident ({}/s, {}/s answered in time)",
        figure(shape.load(true)),
        figure(shape.capacity_per_s(true)),
        figure(capacity)
    )];
    let settled = (secs(STEP_S + SETTLE_S), incident_end);
    if shape.saturated() && judgeable(shape, served, settled) {
        let goodput = run.goodput(settled.0, settled.1);
        let twin_goodput = twin.goodput(settled.0, settled.1);
        let service_p99 = shape.incident_service().p99_s();
        let p99 = run
            .waited_quantile(settled.0, settled.1, 0.99)
            .unwrap_or(f64::INFINITY);
        criteria.extend([
            Criterion::new(
                SATURATED_GOODPUT,
                goodput / capacity,
                Bound::AtLeast(GOODPUT_OF_CAPACITY),
            ),
            Criterion::new(
                SATURATED_P99,
                p99 / service_p99,
                Bound::AtMost(p99_allowance(shape)),
            ),
            Criterion::new(
                SATURATED_TWIN,
                ratio(goodput, twin_goodput),
                Bound::AtLeast(1.0 - SAME_WITHIN),
            ),
        ]);
        figures.push(format!(
            "from {SETTLE_S} s in: goodput {}/s (twin {}/s), p99 {} s (service {} s)",
            figure(goodput),
            figure(twin_goodput),
            figure(p99),
            figure(service_p99)
        ));
    }
    let late = (secs(STEP_S + LATE_S), incident_end);
    if shape.spare() && judgeable(shape, served, late) {
        let goodput = run.goodput(late.0, late.1);
        let twin_goodput = twin.goodput(late.0, late.1);
        criteria.push(Criterion::new(
            SPARE_TWIN,
            ratio(goodput, twin_goodput),
            Bound::AtLeast(SPARE_OF_TWIN),
        ));
        figures.push(format!(
            "from {LATE_S} s in: goodput {}/s (twin {}/s)",
            figure(goodput),
            figure(twin_goodput)
        ));
    }
    if shape.saturated() && matches!(shape.clients.demand, Demand::Open { .. }) {
        let first = first_refusal_s(run, step);
        criteria.push(Criterion::new(
            FIRST_REFUSAL,
            first,
            Bound::AtMost(FIRST_REFUSAL_S),
        ));
        figures.push(format!(
            "first refusal within {} s of the step",
            figure(first)
        ));
    }
    if !shape.incident.permanent {
        let (refused, figure_text) = recovery(shape, run);
        criteria.push(Criterion::new(RECOVERY, refused, Bound::AtMost(0.0)));
        figures.push(figure_text);
    }
    if judgeable(shape, served, (step, end)) {
        let goodput = run.goodput(step, end);
        let gateway_goodput = gateway.goodput(step, end);
        criteria.push(Criterion::new(
            GATEWAY,
            ratio(goodput, gateway_goodput),
            Bound::AtLeast(1.0 - SAME_WITHIN),
        ));
        figures.push(format!(
            "from the step: goodput {}/s (gateway {}/s)",
            figure(goodput),
            figure(gateway_goodput)
        ));
    }
    (criteria, figures.join("; "))
}

/// Enough answers come in `window` at `per_s` for its goodput to tell control from the
/// draws of the service time: the more the service time varies, the more answers it takes
/// (about 3 % of noise at sigma 1.5 takes 9 000 of them).
fn judgeable(shape: &Shape, per_s: f64, (from, to): (Nanos, Nanos)) -> bool {
    let answers = per_s * as_secs(to - from);
    let variety = (shape.upstream.sigma.powi(2)).exp() - 1.0;
    answers >= 200.0 + 1_000.0 * variety
}

/// How far over the upstream's own p99 service time an answer may come and still count as
/// served without a wait of note.
fn p99_allowance(shape: &Shape) -> f64 {
    if shape.exact_service() {
        P99_EXACT
    } else {
        P99_VARIABLE
    }
}

/// `a` over `b`, where nothing over nothing is as much.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else if a > 0.0 {
        f64::INFINITY
    } else {
        1.0
    }
}

/// Seconds from the step to the end of the second the first refusal after it fell in:
/// infinite if nothing was refused.
fn first_refusal_s(run: &Trace, step: Nanos) -> f64 {
    let first = (step / crate::clock::NANOS_PER_SEC) as usize;
    run.seconds[first..]
        .iter()
        .position(|s| s.shed > 0)
        .map_or(f64::INFINITY, |i| (first + i + 1) as f64 - as_secs(step))
}

/// The refusals from [`RECOVERED_S`] after the upstream's first fast answer once it is
/// healthy again (infinite if none came), and the figure that says when refusals ended.
fn recovery(shape: &Shape, run: &Trace) -> (f64, String) {
    let restore = secs(RESTORE_S);
    let fast = shape.healthy_service().p99_s() * p99_allowance(shape);
    let Some(first_fast) = run
        .answers
        .iter()
        .find(|a| a.at >= restore && f64::from(a.seconds) <= fast)
        .map(|a| a.at)
    else {
        return (f64::INFINITY, "no fast answer after the incident".into());
    };
    let from = secs(as_secs(first_fast + secs(RECOVERED_S)).ceil());
    let refused = run.shed(from, secs(END_S));
    let last = (first_fast / crate::clock::NANOS_PER_SEC) as usize;
    let figure_text = match run.seconds[last..].iter().rposition(|s| s.shed > 0) {
        None => format!(
            "nothing refused after the first fast answer ({} s)",
            figure(as_secs(first_fast))
        ),
        Some(i) => format!(
            "refusals end {} s after the first fast answer ({} s)",
            figure((last + i + 1) as f64 - as_secs(first_fast)),
            figure(as_secs(first_fast))
        ),
    };
    (f64::from(refused), figure_text)
}
