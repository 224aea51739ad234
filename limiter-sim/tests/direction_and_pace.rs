//! The default controller's direction and pace against the engine's upstream, checked phase
//! by phase: where the limit goes after each change, and how soon.

use limiter_core::{controller, ControlConfig};
use limiter_sim::clients::{ClosedLoop, Load, RequestClass, Service};
use limiter_sim::clock::secs;
use limiter_sim::engine::{simulate, Setup};
use limiter_sim::scenarios::rig;
use limiter_sim::schedule::Schedule;
use limiter_sim::trace::Trace;
use limiter_sim::upstream::UpstreamSpec;

const SEED: u64 = 7;
/// The spread of the service time (sigma of its logarithm).
const SIGMA: f64 = 0.3;

fn run(duration_s: f64, upstream: UpstreamSpec, service: Service, load: Load) -> Trace {
    run_seeded(SEED, duration_s, upstream, service, load)
}

fn run_seeded(
    seed: u64,
    duration_s: f64,
    upstream: UpstreamSpec,
    service: Service,
    load: Load,
) -> Trace {
    let setup = Setup {
        overflow: Default::default(),
        duration_s,
        upstream,
        classes: vec![RequestClass::new(service, load)],
    };
    simulate(
        &setup,
        seed,
        controller(&ControlConfig::default(), 0).as_mut(),
    )
}

/// 400 clients keeping a request each in flight, retrying a refusal at the next update.
fn saturating() -> Load {
    Load::closed(400, 0.1)
}

/// Every limit in force during [from_s, to_s) lies within lo..=hi.
fn within(trace: &Trace, (from_s, to_s): (f64, f64), lo: f64, hi: f64) {
    let (from, to) = (secs(from_s), secs(to_s));
    let (min, max) = (trace.min_limit(from, to), trace.max_limit(from, to));
    assert!(
        f64::from(min) >= lo && f64::from(max) <= hi,
        "{from_s}..{to_s} s: limit {min}..{max}, expected {lo}..{hi}"
    );
}

/// Over seeds 1 to 5. Not every seed holds: a baseline learned a few percent high leaves the
/// limit at up to 131 (seeds 15 and 20 of the first twenty; docs/simulation.md has the rate
/// over 200 seeds of the converge scenario).
#[test]
fn converges_to_capacity_and_holds_within_20_percent() {
    settles_within(100, saturating(), 80.0, 120.0);
}

/// Over seeds 1 to 5, 600 s of `load` against `capacity` workers answering in 0.1 s: every
/// limit from 300 s on lies within lo..=hi.
fn settles_within(capacity: u32, load: Load, lo: f64, hi: f64) {
    for seed in 1..=5 {
        let trace = run_seeded(
            seed,
            600.0,
            UpstreamSpec::steady(capacity),
            Service::lognormal(0.1, SIGMA),
            load.clone(),
        );
        within(&trace, (300.0, 600.0), lo, hi);
    }
}

/// Clients that retry a refused connect after 1 ms refuse many times over between two
/// updates: the refusals far outnumber the demand, and while learning the limit grows on
/// them to its bound. That bound has to be tried and found to queue like any other level.
#[test]
fn clients_retrying_refusals_at_once_still_converge_to_capacity() {
    settles_within(50, Load::closed(400, 0.001), 40.0, 65.0);
}

/// 100 clients saturating 50 workers from the first connect, each retrying a refusal after a
/// second. Slow start judged its levels on their first answers, which came from the requests
/// that found a worker free: it doubled past the workers to the bound, learned the queue
/// there as the baseline, and the limit stayed at 200 (seeds 10 and 63 of 100).
#[test]
fn a_start_saturated_at_50_workers_does_not_double_past_them_to_the_bound() {
    for seed in [10, 63] {
        let trace = run_seeded(
            seed,
            120.0,
            UpstreamSpec::steady(50),
            Service::lognormal(0.5, SIGMA),
            Load::closed(100, 1.0),
        );
        within(&trace, (60.0, 120.0), 40.0, 75.0);
    }
}

/// The incident's rig with 64 workers for its 100 clients, seeds 1 to 5 and both client
/// timeouts. The onset's windows were the clients' own and the first cut took in-flight
/// under the workers, so no window the limit bound showed a throughput plateau: the limit
/// fell to the floor (8 requests/s of the 76 the workers serve) in 85 of 100 runs, until a
/// queue over the service time counted as the saturation (docs/control.md).
#[test]
fn a_slowdown_at_64_workers_for_100_clients_is_followed_not_cut_to_the_floor() {
    const WORKERS: u32 = 64;
    let capacity = f64::from(WORKERS) / (rig::service().mean_s() * rig::SLOWDOWN);
    let upstream = UpstreamSpec {
        capacity: Schedule::constant(f64::from(WORKERS)),
        ..rig::incident_upstream()
    };
    for deadline in rig::DEADLINES_S {
        for seed in 1..=5 {
            let setup = rig::setup(rig::INCIDENT_END_S, upstream.clone(), Some(deadline));
            let trace = simulate(
                &setup,
                seed,
                controller(&ControlConfig::default(), 0).as_mut(),
            );
            let goodput = trace.goodput(secs(rig::SLOW_FROM_S + 20.0), secs(rig::SLOW_UNTIL_S));
            assert!(
                goodput >= 0.75 * capacity,
                "{deadline} s timeout, seed {seed}: goodput {goodput:.1}/s of {capacity:.1}"
            );
        }
    }
}

/// Over seeds 1 to 5, as convergence.
#[test]
fn capacity_halves_then_returns() {
    let upstream = UpstreamSpec {
        capacity: Schedule::constant(100.0)
            .step(120.0, 50.0)
            .step(300.0, 100.0),
        ..UpstreamSpec::steady(100)
    };
    for seed in 1..=5 {
        let trace = run_seeded(
            seed,
            480.0,
            upstream.clone(),
            Service::lognormal(0.1, SIGMA),
            saturating(),
        );
        within(&trace, (180.0, 300.0), 40.0, 60.0);
        within(&trace, (420.0, 480.0), 80.0, 120.0);
    }
}

#[test]
fn healthy_latency_doubling_for_good_is_healed_within_two_minutes() {
    let upstream = UpstreamSpec {
        latency_factor: Schedule::constant(1.0).step(120.0, 2.0),
        ..UpstreamSpec::steady(100)
    };
    let trace = run(
        400.0,
        upstream,
        Service::lognormal(0.1, SIGMA),
        saturating(),
    );
    within(&trace, (240.0, 400.0), 80.0, 120.0);
}

#[test]
fn error_burst_falls_then_recovers_within_a_minute() {
    let upstream = UpstreamSpec {
        error_rate: Schedule::constant(0.0).step(120.0, 0.2).step(150.0, 0.0),
        ..UpstreamSpec::steady(100)
    };
    let trace = run(
        240.0,
        upstream,
        Service::lognormal(0.1, SIGMA),
        saturating(),
    );
    let steady = f64::from(trace.limit_at(secs(119.9)));
    let burst = f64::from(trace.limit_at(secs(149.9)));
    assert!(burst < steady * 0.7, "from {steady} to {burst}");
    within(&trace, (210.0, 240.0), steady * 0.8, steady * 1.2);
}

#[test]
fn streams_are_judged_by_their_first_byte_and_do_not_clamp() {
    let trace = run(
        1_200.0,
        UpstreamSpec::steady(1_000),
        Service::lognormal(0.28, SIGMA).streamed(45.0),
        Load::Poisson { per_s: 2.0 },
    );
    // One window per 25 s at this rate: allow a quarter of an hour to climb from 20. About
    // 90 streams are open at once: the limit must make room for them.
    let settled = (secs(900.0), secs(1_200.0));
    assert!(trace.min_limit(settled.0, settled.1) >= 90);
    assert!(trace.shed(settled.0, settled.1) < 10);
}

/// p50 0.35 s -> 10.4 s at 0 % errors. A slow-call breaker cannot open before slow calls
/// complete, 10.4 s after the change; the limiter sheds within seconds because the limit
/// learned from healthy traffic caps the in-flight pile-up, and then lowers the limit. (Left
/// running, the answers' 10 s lag reads as a saturation about 100 s after the step and the
/// baseline follows: see docs/control.md.)
#[test]
fn a_thirtyfold_slowdown_sheds_before_any_slow_call_completes() {
    let upstream = UpstreamSpec {
        latency_factor: Schedule::constant(1.0).step(300.0, 10.4 / 0.35),
        ..UpstreamSpec::steady(1_000)
    };
    let trace = run(
        360.0,
        upstream,
        Service::lognormal(0.35, SIGMA),
        Load::Poisson { per_s: 40.0 },
    );
    // While learning, a peak above the initial limit is refused once, then grown for.
    let learning = trace.shed(0, secs(30.0));
    assert!(learning <= 2, "learning shed {learning}");
    assert_eq!(
        trace.shed(secs(30.0), secs(300.0)),
        0,
        "learned healthy traffic is not shed"
    );
    assert!(
        trace.shed(secs(300.0), secs(305.0)) > 0,
        "shedding within 5 s"
    );
    let healthy = trace.limit_at(secs(299.9));
    let slow = trace.limit_at(secs(359.9));
    assert!(slow <= healthy / 2, "from {healthy} to {slow}");
}

/// `load` against an upstream with workers to spare answering in 5 ms, twenty times slower
/// from 60 s to 120 s; 150 s.
fn twentyfold_slowdown(load: Load) -> Trace {
    let upstream = UpstreamSpec {
        latency_factor: Schedule::constant(1.0).step(60.0, 20.0).step(120.0, 1.0),
        ..UpstreamSpec::steady(1_000)
    };
    run(150.0, upstream, Service::lognormal(0.005, SIGMA), load)
}

/// 64 clients that think 15 ms between requests (one connection each) keep about 16 in
/// flight; waiting longer, the same clients would hold 55 connections. An outbound limiter
/// must shed that pile-up while the upstream is slower than its own normal, and let the
/// clients back in once it is not.
#[test]
fn a_twentyfold_slowdown_of_clients_piling_up_sheds_then_lets_them_back_in() {
    const HEALTHY_INFLIGHT: u32 = 16;
    let trace = twentyfold_slowdown(Load::Closed(ClosedLoop {
        workers: 64,
        retry_after_s: 0.1,
        think_s: 0.015,
        at_once: false,
    }));
    assert_eq!(trace.shed(secs(1.0), secs(60.0)), 0, "healthy");
    assert!(trace.limit_at(secs(69.9)) < 2 * HEALTHY_INFLIGHT, "falling");
    assert!(trace.shed(secs(60.0), secs(70.0)) > 0, "shedding");
    assert!(
        trace.max_limit(secs(70.0), secs(120.0)) < 2 * HEALTHY_INFLIGHT,
        "slow"
    );
    assert_eq!(trace.shed(secs(130.0), secs(150.0)), 0, "recovered");
}

/// A closed-loop client keeping 16 requests in flight: waiting longer, it still holds 16
/// connections. Refusing some of them spares the upstream, whose workers are many, nothing:
/// the limit stays at what the client held while healthy.
#[test]
fn a_twentyfold_slowdown_of_the_same_clients_waiting_longer_refuses_none() {
    const CLIENTS: u32 = 16;
    let trace = twentyfold_slowdown(Load::closed(CLIENTS, 0.1));
    assert!(trace.limit_at(secs(59.9)) >= CLIENTS, "healthy");
    assert!(trace.min_limit(secs(60.0), secs(150.0)) >= CLIENTS);
    assert_eq!(trace.shed(secs(1.0), secs(150.0)), 0);
}

/// Ten clients that wait 50 ms between two connections (pgbench -C, whose connects block the
/// thread five clients share) hold 4 or 5 while healthy and 10 once each transaction is ten
/// times slower: from outside, the rise of a pile-up. The operator who knows the count sets
/// it as the destination's `min`, and no client is refused.
#[test]
fn a_min_at_the_client_count_keeps_every_client_of_a_closed_set_in() {
    const CLIENTS: u32 = 10;
    let mut cfg = ControlConfig::default();
    cfg.limits.min = CLIENTS;
    let upstream = UpstreamSpec {
        latency_factor: Schedule::constant(1.0).step(20.0, 10.0).step(40.0, 1.0),
        ..UpstreamSpec::steady(100)
    };
    let load = Load::Closed(ClosedLoop {
        workers: CLIENTS,
        retry_after_s: 0.01,
        think_s: 0.05,
        at_once: false,
    });
    let setup = Setup {
        overflow: Default::default(),
        duration_s: 60.0,
        upstream,
        classes: vec![RequestClass::new(Service::lognormal(0.01, SIGMA), load)],
    };
    let trace = simulate(&setup, SEED, controller(&cfg, 0).as_mut());
    assert_eq!(
        trace.peak_inflight(secs(20.0), secs(40.0)),
        CLIENTS,
        "all ten held"
    );
    assert!(
        trace.peak_inflight(secs(1.0), secs(20.0)) < CLIENTS,
        "fewer while healthy"
    );
    assert_eq!(trace.shed(0, secs(60.0)), 0);
}
