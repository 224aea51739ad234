//! An upstream whose service time does not vary (a fixed sleep, as the lab's upstream): the
//! incident's slowdown starts its workers together, they answer in rounds, and a request
//! queued behind them waits a whole round. The limit has to hold the workers, not the queue
//! over them that keeps varying workers busy.

use limiter_core::{controller, ControlConfig};
use limiter_sim::clients::{RequestClass, Service};
use limiter_sim::clock::secs;
use limiter_sim::engine::{simulate, Setup};
use limiter_sim::scenarios::rig;
use limiter_sim::trace::Trace;

/// A spread of 0.3 % of the service time: the timer's jitter, not the service's variety.
fn exact() -> Service {
    Service::lognormal(0.03, 0.003)
}

/// A second whose p90 is over this multiple of the slow service time had more than a tenth
/// of its answers waiting for a worker.
const WAITED: f64 = 1.3;

/// Over seeds 1 to 5 and both client timeouts, from 20 s into the slowdown to its end: at
/// most a tenth of the seconds have a p90 over 1.3x the slow service time, and goodput is at
/// least 90 % of what the workers serve. A queue of 15 % over the workers (the margin an
/// upstream whose service times vary gets) puts a p90 of a whole extra round into every
/// second.
#[test]
fn workers_that_answer_in_step_are_held_without_a_queue() {
    let slow_s = exact().mean_s() * rig::SLOWDOWN;
    let capacity = f64::from(rig::WORKERS) / slow_s;
    let (from, to) = (rig::SLOW_FROM_S + 20.0, rig::SLOW_UNTIL_S);
    for deadline in rig::DEADLINES_S {
        for seed in 1..=5 {
            let trace = incident(exact(), deadline, seed);
            let seconds = &trace.seconds[from as usize..to as usize];
            let waited = seconds
                .iter()
                .filter(|s| s.p90_s.is_some_and(|p90| p90 > WAITED * slow_s))
                .count();
            let goodput = trace.goodput(secs(from), secs(to));
            assert!(
                waited * 10 <= seconds.len() && goodput >= 0.9 * capacity,
                "{deadline} s timeout, seed {seed}: {waited} of {} seconds waited, goodput {goodput:.1}/s of {capacity:.1}",
                seconds.len()
            );
        }
    }
}

/// The incident's rig with `service` as the upstream's, under the default controller.
fn incident(service: Service, deadline_s: f64, seed: u64) -> Trace {
    let setup = Setup {
        overflow: Default::default(),
        classes: vec![RequestClass {
            service,
            ..rig::clients(Some(deadline_s))
        }],
        ..rig::setup(rig::INCIDENT_END_S, rig::incident_upstream(), None)
    };
    simulate(
        &setup,
        seed,
        controller(&ControlConfig::default(), 0).as_mut(),
    )
}

/// A sleep with no jitter at all: every answer that did not wait takes the same time, which
/// alone reads as a timer's. Far over the baseline it is the slowed upstream's service time,
/// and the limit holds its workers from 20 s into the slowdown, not a few under them.
#[test]
fn identical_service_times_are_followed_at_the_workers() {
    let (from, to) = (rig::SLOW_FROM_S + 20.0, rig::SLOW_UNTIL_S);
    for deadline in rig::DEADLINES_S {
        for seed in 1..=5 {
            let trace = incident(Service::lognormal(0.03, 0.0), deadline, seed);
            let lowest = trace.min_limit(secs(from), secs(to));
            assert!(
                lowest >= rig::WORKERS,
                "{deadline} s timeout, seed {seed}: the limit fell to {lowest} on {} workers",
                rig::WORKERS
            );
        }
    }
}
