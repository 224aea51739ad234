//! The acceptance scenarios of the specification, each with its pass/fail criteria.
//!
//! A scenario is a list of runs (setups played with the algorithm under test, or with no
//! limiter at all for comparison) and a judgement of the traces they produce.

mod baseline_shift;
mod capacity_halves;
mod converge;
mod errors;
mod goodbye;
mod healthy_start;
mod incident;
mod keepalive_pool;
mod low_traffic;
mod mixed_sizes;
mod overload;
mod production;
mod queueing;
mod recovery;
pub mod rig;
mod slow_query;
mod streaming;

use limiter_core::Limits;

use crate::algorithm::{AlgorithmChoice, Unlimited};
use crate::clients::{Load, RequestClass, Service};
use crate::clock::{secs, Nanos};
use crate::criteria::Criterion;
use crate::engine::{simulate, Setup};
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub struct Scenario {
    pub name: &'static str,
    /// What it must show, in one line.
    pub shows: &'static str,
    runs: fn() -> Vec<Run>,
    judge: fn(&[Trace]) -> Judgement,
}

/// Every scenario: the specification's, then those reproducing real traffic.
pub const ALL: &[Scenario] = &[
    converge::SCENARIO,
    capacity_halves::SCENARIO,
    production::SCENARIO,
    streaming::SCENARIO,
    low_traffic::SCENARIO,
    baseline_shift::SCENARIO,
    errors::SCENARIO,
    overload::SCENARIO,
    mixed_sizes::SCENARIO,
    healthy_start::SCENARIO,
    incident::SCENARIO,
    recovery::SCENARIO,
    goodbye::SCENARIO,
    keepalive_pool::SCENARIO,
    slow_query::SCENARIO,
    queueing::SCENARIO,
];

pub fn find(name: &str) -> Option<&'static Scenario> {
    ALL.iter().find(|s| s.name == name)
}

struct Run {
    label: &'static str,
    setup: Setup,
    limited: bool,
}

impl Run {
    fn limited(label: &'static str, setup: Setup) -> Self {
        Self {
            label,
            setup,
            limited: true,
        }
    }

    /// The same traffic with nothing limiting it: what the upstream (and a circuit
    /// breaker) would see without the limiter.
    fn unlimited(label: &'static str, setup: Setup) -> Self {
        Self {
            label,
            setup,
            limited: false,
        }
    }
}

struct Judgement {
    criteria: Vec<Criterion>,
    key_figure: String,
}

/// What playing a scenario produced.
pub struct Played {
    pub criteria: Vec<Criterion>,
    /// The one figure the scorecard shows for it.
    pub key_figure: String,
    /// The runs under the algorithm, labelled, for pictures.
    pub traces: Vec<(&'static str, Trace)>,
}

impl Scenario {
    pub fn play(&self, algorithm: &AlgorithmChoice, seed: u64) -> anyhow::Result<Played> {
        let runs = (self.runs)();
        let mut all = Vec::with_capacity(runs.len());
        for run in &runs {
            all.push(if run.limited {
                algorithm.with_controller(Limits::default(), |c| simulate(&run.setup, seed, c))?
            } else {
                simulate(&run.setup, seed, &mut Unlimited)
            });
        }
        let Judgement {
            criteria,
            key_figure,
        } = (self.judge)(&all);
        let traces = runs
            .iter()
            .zip(all)
            .filter(|(run, _)| run.limited)
            .map(|(run, trace)| (run.label, trace))
            .collect();
        Ok(Played {
            criteria,
            key_figure,
            traces,
        })
    }
}

/// True capacity (workers) of the upstream in the scenarios that saturate it.
const CAPACITY: u32 = 100;

/// The healthy service time of the saturating scenarios.
fn service() -> Service {
    Service::lognormal(0.5, 0.3)
}

/// Twice as many closed-loop clients as the upstream has workers, each retrying a
/// refused request after a second: demand always exceeds capacity.
fn saturating(duration_s: f64, upstream: UpstreamSpec) -> Setup {
    Setup {
        overflow: Default::default(),
        duration_s,
        upstream,
        classes: vec![RequestClass::new(
            service(),
            Load::closed(2 * CAPACITY, 1.0),
        )],
    }
}

/// Requests per second `capacity` healthy workers complete.
fn throughput(capacity: u32) -> f64 {
    f64::from(capacity) / service().mean_s()
}

fn phase(from_s: f64, to_s: f64) -> (Nanos, Nanos) {
    (secs(from_s), secs(to_s))
}
