//! The known failures of the reference implementations, each as a stream that triggers it.
//! Every test here fails on the implementation it names.

mod support;

use limiter_core::{Algorithm, ControlConfig, Controller, DestinationController, Outcome};
use support::{Event, Stream, MS, SEC};

fn controller(algorithm: Algorithm) -> DestinationController {
    DestinationController::new(&ControlConfig::new(algorithm), 0)
}

/// Latency of an upstream with `capacity` workers at 100 ms when `inflight` requests are out.
fn queueing(stream: &mut Stream, inflight: u32, capacity: f64) -> u64 {
    let load = (f64::from(inflight) / capacity).max(1.0);
    (100.0 * MS as f64 * load * stream.jitter()) as u64
}

/// Netflix Vegas resets rtt_noload to the current RTT every ~30 x limit samples, loaded or not;
/// under sustained overload the baseline climbs to the loaded latency and the limit with it.
#[test]
fn vegas_baseline_is_never_taken_from_a_loaded_window() {
    let mut c = controller(Algorithm::Vegas);
    let mut s = Stream::new(1);
    s.run(&mut c, 120, 500.0, |limit, s| Event::Sample {
        latency_ns: queueing(s, limit.min(10), 10.0),
        inflight: limit.min(10),
    });
    let healthy = c.baseline_ns().unwrap() as f64;
    // Twenty minutes of overload: the client insists on 100 requests in flight regardless.
    s.run(&mut c, 1_200, 500.0, |_, s| Event::Sample {
        latency_ns: queueing(s, 100, 10.0),
        inflight: 100,
    });
    let after = c.baseline_ns().unwrap() as f64;
    assert!(after < healthy * 1.1, "baseline {healthy} -> {after}");
    // Vegas cannot see a queue longer than the limit: it holds near beta = 6.
    assert!(
        c.limit() <= 8,
        "the limit stays low while overloaded: {}",
        c.limit()
    );
}

/// Netflix Gradient2 adds its queue headroom whatever the gradient: with latency 1.6 x the
/// baseline (gradient 0.94) and throughput flat, it settles where 0.06 x limit = headroom,
/// far above capacity (sqrt headroom: 278, past the maximum).
#[test]
fn gradient2_does_not_creep_up_while_overloaded() {
    let mut c = controller(Algorithm::Gradient2);
    let mut s = Stream::new(2);
    s.run(&mut c, 60, 500.0, |limit, s| Event::Sample {
        latency_ns: (100.0 * MS as f64 * s.jitter()) as u64,
        inflight: limit,
    });
    let before = c.limit();
    let limits = s.run(&mut c, 1_200, 500.0, |limit, s| {
        let latency = 160.0 * MS as f64 * s.jitter();
        s.at_the_limit(limit, latency as u64)
    });
    // Past the filter's lag (a minute of 100 ms updates), never above where it started.
    let settled = &limits[600..];
    assert!(
        settled.iter().all(|&l| l <= before),
        "{before} -> {:?}",
        settled.iter().max()
    );
    assert_eq!(*limits.last().unwrap(), 4);
}

/// Netflix Gradient2 grows to max when every RTT is identical (a stable timeout): its
/// gradient is exactly 1 and the headroom is added on every update.
#[test]
fn identical_latencies_do_not_grow_the_limit() {
    for algorithm in [Algorithm::Gradient2, Algorithm::Vegas, Algorithm::Gateway] {
        let mut c = controller(algorithm);
        let mut s = Stream::new(3);
        let limits = s.run(&mut c, 1_800, 200.0, |limit, _| Event::Sample {
            latency_ns: 5 * SEC,
            inflight: limit,
        });
        assert!(
            limits.iter().all(|&l| l <= 20),
            "{algorithm}: {:?}",
            limits.iter().max()
        );
    }
}

/// Netflix's WindowedLimit throws away windows with fewer than 10 samples: at low traffic the
/// limit never moves, not even after an incident.
#[test]
fn thin_windows_still_move_the_limit() {
    let mut c = controller(Algorithm::Vegas);
    let mut s = Stream::new(4);
    let per_sec = 2.0 / 60.0;
    s.run(&mut c, 1_800, per_sec, |_, s| Event::Sample {
        latency_ns: (100.0 * MS as f64 * s.jitter()) as u64,
        inflight: 1,
    });
    assert_eq!(c.limit(), 20);
    s.run(&mut c, 1_800, per_sec, |_, _| {
        Event::Outcome(Outcome::Timeout)
    });
    assert!(c.limit() < 10, "{}", c.limit());
}

/// Netflix Vegas and Envoy grow the limit whenever latency is low, even with in-flight far
/// below it: the limit drifts to max, untested, and the first burst meets no protection.
#[test]
fn app_limited_traffic_does_not_grow_the_limit_without_bound() {
    for algorithm in [
        Algorithm::Vegas,
        Algorithm::Gradient2,
        Algorithm::Aimd,
        Algorithm::Gateway,
    ] {
        let mut c = controller(algorithm);
        let mut s = Stream::new(5);
        let limits = s.run(&mut c, 3_600, 200.0, |_, s| Event::Sample {
            latency_ns: (100.0 * MS as f64 * s.jitter()) as u64,
            inflight: 3,
        });
        assert!(
            limits.iter().all(|&l| l <= 20),
            "{algorithm}: {:?}",
            limits.iter().max()
        );
    }
}

/// Once in-flight does reach the limit, growth resumes up to twice the peak seen.
#[test]
fn app_limited_cap_follows_real_demand() {
    let mut c = controller(Algorithm::Vegas);
    let mut s = Stream::new(6);
    s.run(&mut c, 600, 500.0, |limit, s| Event::Sample {
        latency_ns: (100.0 * MS as f64 * s.jitter()) as u64,
        inflight: limit.min(45),
    });
    assert!((46..=90).contains(&c.limit()), "{}", c.limit());
}
