//! Queueing at connect against refusing, on the incident of the real-traffic rig (a proxy
//! with a 2 s timeout, 100 clients, 32 workers 27 times slower for a minute). A refused
//! connect is an error the client sees at once; a queued one waits, with nothing sent,
//! for a slot that frees every few hundred milliseconds, and the wait is taken from the
//! client's own deadline. What queueing must show: nearly the goodput (a freed slot waits
//! for the next retry, and a request admitted late times out more often: 0.94 to 1.09 of
//! refusing's over 200 seeds), half the errors or fewer, and no answer later than the
//! client's deadline.

use super::{phase, rig, Judgement, Run, Scenario};
use crate::admission::{Overflow, Queue};
use crate::criteria::{figure, Bound, Criterion};
use crate::trace::Trace;

pub const SCENARIO: Scenario = Scenario {
    name: "queueing",
    shows: "overflow = queue against refuse on the incident: 0.9 of the goodput or more, half the errors or fewer, no answer past the deadline",
    runs,
    judge,
};

fn runs() -> Vec<Run> {
    let deadline = Some(rig::DEADLINES_S[0]);
    let refusing = rig::setup(rig::INCIDENT_END_S, rig::incident_upstream(), deadline);
    let queueing = crate::engine::Setup {
        overflow: Overflow::Queue(Queue::default()),
        ..refusing.clone()
    };
    vec![
        Run::limited("refuse", refusing),
        Run::limited("queue", queueing),
    ]
}

/// Time for the first slow answers to arrive and for the filter to show them.
const SETTLE_S: f64 = 10.0;
/// Queueing's goodput against refusing's, at least; and its errors, at most.
const GOODPUT_SHARE: f64 = 0.9;
const ERROR_SHARE: f64 = 0.5;

fn judge(traces: &[Trace]) -> Judgement {
    let (from, to) = phase(rig::SLOW_FROM_S + SETTLE_S, rig::SLOW_UNTIL_S);
    let [refusing, queueing] = traces else {
        unreachable!("two runs");
    };
    let errors = |t: &Trace| t.shed(from, to) + t.failed_or_timed_out(from, to);
    let p99 = |t: &Trace| t.waited_quantile(from, to, 0.99).unwrap_or(f64::NAN);
    let deadline = rig::DEADLINES_S[0];
    let criteria = vec![
        Criterion::new(
            "queue: goodput against refuse's (req/s)".to_string(),
            queueing.goodput(from, to),
            Bound::AtLeast(GOODPUT_SHARE * refusing.goodput(from, to)),
        ),
        Criterion::new(
            "queue: client-visible errors against refuse's".to_string(),
            f64::from(errors(queueing)),
            Bound::AtMost(ERROR_SHARE * f64::from(errors(refusing))),
        ),
        Criterion::new(
            "queue: p99 of answers and give-ups (s)".to_string(),
            p99(queueing),
            Bound::AtMost(deadline),
        ),
    ];
    let line = |label: &str, t: &Trace| {
        format!(
            "{label}: {} req/s, {} errors, p99 {} s",
            figure(t.goodput(from, to)),
            errors(t),
            figure(p99(t))
        )
    };
    Judgement {
        criteria,
        key_figure: format!("{}; {}", line("refuse", refusing), line("queue", queueing)),
    }
}
