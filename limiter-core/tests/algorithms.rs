//! Each algorithm on synthetic sample streams: healthy, slowing, failing, recovering, and fed
//! degenerate latencies.

mod support;

use limiter_core::{
    algorithms::Fixed, controller, Algorithm, ControlConfig, Controller, DestinationController,
    Limits, Outcome,
};
use support::{Event, Stream, MS, SEC};

const ADAPTIVE: [Algorithm; 4] = [
    Algorithm::Vegas,
    Algorithm::Gradient2,
    Algorithm::Aimd,
    Algorithm::Gateway,
];
const LATENCY_DRIVEN: [Algorithm; 3] = [Algorithm::Vegas, Algorithm::Gradient2, Algorithm::Gateway];

fn build(algorithm: Algorithm) -> DestinationController {
    DestinationController::new(&ControlConfig::new(algorithm), 0)
}

fn healthy(limit: u32, s: &mut Stream) -> Event {
    Event::Sample {
        latency_ns: (100.0 * MS as f64 * s.jitter()) as u64,
        inflight: limit,
    }
}

#[test]
fn steady_healthy_latency_grows_to_the_ceiling() {
    for algorithm in ADAPTIVE {
        let mut c = build(algorithm);
        let limits = Stream::new(1).run(&mut c, 900, 500.0, healthy);
        assert_eq!(*limits.last().unwrap(), 200, "{algorithm}");
        assert!(
            limits.windows(2).all(|w| w[1] >= w[0]),
            "{algorithm} never shrinks"
        );
    }
}

#[test]
fn rising_latency_shrinks() {
    for algorithm in LATENCY_DRIVEN {
        let mut c = build(algorithm);
        let mut s = Stream::new(2);
        s.run(&mut c, 60, 500.0, healthy);
        let before = c.limit();
        let start = s.now;
        let latency =
            |now: u64| 100.0 * MS as f64 * (1.0 + (now - start) as f64 / 5.0 / SEC as f64);
        // As many answers as Little's law gives the limit in flight at that latency.
        let limits = s.run_at(
            &mut c,
            120,
            |limit, now| f64::from(limit) * SEC as f64 / latency(now),
            |limit, s| {
                let jittered = latency(s.now) * s.jitter();
                s.at_the_limit(limit, jittered as u64)
            },
        );
        let after = *limits.last().unwrap();
        assert!(
            f64::from(after) < f64::from(before) * 0.5,
            "{algorithm}: {before} -> {after}"
        );
    }
}

fn failing(limit: u32, s: &mut Stream) -> Event {
    if s.jitter() > 1.18 {
        Event::Outcome(Outcome::Error)
    } else {
        healthy(limit, s)
    }
}

#[test]
fn errors_shrink_and_recovery_climbs_back() {
    for algorithm in ADAPTIVE {
        let mut c = build(algorithm);
        let mut s = Stream::new(3);
        s.run(&mut c, 60, 500.0, healthy);
        let before = c.limit();
        s.run(&mut c, 30, 500.0, failing);
        let during = c.limit();
        assert!(
            f64::from(during) < f64::from(before) * 0.8,
            "{algorithm}: {before} -> {during}"
        );
        s.run(&mut c, 300, 500.0, healthy);
        assert!(c.limit() > during, "{algorithm}: {during} -> {}", c.limit());
    }
}

#[test]
fn every_limit_stays_within_the_bounds() {
    for algorithm in ADAPTIVE {
        let cfg = ControlConfig {
            limits: Limits {
                initial: 10,
                min: 5,
                max: 30,
            },
            ..ControlConfig::new(algorithm)
        };
        let mut c = DestinationController::new(&cfg, 0);
        let mut s = Stream::new(4);
        let mut limits = s.run(&mut c, 300, 500.0, healthy);
        limits.extend(s.run(&mut c, 300, 500.0, |_, _| Event::Outcome(Outcome::Timeout)));
        assert!(
            limits.contains(&30) && limits.contains(&5),
            "{algorithm} reaches both bounds"
        );
        assert!(limits.iter().all(|l| (5..=30).contains(l)), "{algorithm}");
    }
}

#[test]
fn zero_huge_and_identical_latencies_stay_finite() {
    let extremes = [0, 1, u64::MAX, u64::MAX / 2, 5 * SEC];
    for algorithm in Algorithm::ALL {
        let mut c = build(algorithm);
        let mut s = Stream::new(5);
        let mut i = 0;
        let limits = s.run(&mut c, 600, 200.0, |limit, _| {
            i += 1;
            Event::Sample {
                latency_ns: extremes[(i / 500) % extremes.len()],
                inflight: limit,
            }
        });
        assert!(limits.iter().all(|l| (4..=200).contains(l)), "{algorithm}");
        let baseline = c.baseline_ns().expect("a baseline");
        let p90 = c.p90_ns().expect("a p90");
        assert!(baseline > 0 && p90 > 0, "{algorithm}: {baseline} {p90}");
    }
}

#[test]
fn fixed_holds_its_cap_even_below_the_adaptive_minimum() {
    let cfg = ControlConfig {
        fixed: Fixed { limit: Some(2) },
        ..ControlConfig::new(Algorithm::Fixed)
    };
    let mut c = DestinationController::new(&cfg, 0);
    let mut s = Stream::new(6);
    let mut limits = s.run(&mut c, 120, 500.0, healthy);
    limits.extend(s.run(&mut c, 120, 500.0, |_, _| Event::Outcome(Outcome::Error)));
    assert!(limits.iter().all(|&l| l == 2));
    let default_cap = build(Algorithm::Fixed);
    assert_eq!(default_cap.limit(), 20, "limits.initial without a cap");
}

#[test]
fn same_inputs_give_the_same_limits() {
    for algorithm in Algorithm::ALL {
        let run = || {
            let mut c = controller(&ControlConfig::new(algorithm), 0);
            let mut s = Stream::new(7);
            let mut limits = s.run(&mut *c, 300, 300.0, healthy);
            limits.extend(s.run(&mut *c, 60, 300.0, failing));
            limits
        };
        assert_eq!(run(), run(), "{algorithm}");
    }
}

#[test]
fn algorithm_names_round_trip() {
    for algorithm in Algorithm::ALL {
        let name = algorithm.to_string();
        assert_eq!(name.parse::<Algorithm>(), Ok(algorithm));
        let json = serde_json::to_string(&algorithm).unwrap();
        assert_eq!(json, format!("\"{name}\""));
        assert_eq!(serde_json::from_str::<Algorithm>(&json).unwrap(), algorithm);
    }
    assert!("Vegas".parse::<Algorithm>().is_err());
    assert_eq!(Algorithm::default(), Algorithm::Vegas);
    assert_eq!(
        Limits::default(),
        Limits {
            initial: 20,
            min: 4,
            max: 200
        }
    );
}

#[test]
fn partial_configuration_fills_in_the_defaults() {
    let cfg: ControlConfig =
        serde_json::from_str(r#"{"algorithm":"fixed","fixed":{"limit":50},"limits":{"max":80}}"#)
            .unwrap();
    assert_eq!(cfg.algorithm, Algorithm::Fixed);
    assert_eq!(cfg.limits.initial, 20);
    assert_eq!(cfg.limits.max, 80);
    assert_eq!(cfg.fixed.limit, Some(50));
    assert_eq!(cfg.effective_limits().max, 50);
    assert_eq!(cfg.gradient2.tolerance, 1.5);
}

#[test]
fn boxed_controllers_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let c = controller(&ControlConfig::default(), 0);
    assert_send(&c);
}

/// TLS 1.3 connections carrying one request each answer, but no answer can be timed: the
/// destination is refused nothing below the maximum until one can, and is judged from then
/// on, untimed answers or not.
#[test]
fn answers_that_cannot_be_timed_leave_the_maximum_until_one_can() {
    let cfg = ControlConfig::default();
    let mut c = controller(&cfg, 0);
    assert_eq!(c.update(100 * MS), 20, "nothing seen: the initial limit");
    let mut s = Stream::new(7);
    let untimed = s.run(c.as_mut(), 60, 400.0, |_, _| {
        Event::Outcome(Outcome::Untimed)
    });
    assert!(untimed.iter().all(|&l| l == 200), "{untimed:?}");
    // 60 connections held while the answers went untimed: room for twice as many.
    c.on_connect(60_000 * MS, 60);
    // Timed answers, and some untimed beside them (new connections' first exchanges).
    let mut n = 0;
    let timed = s.run(c.as_mut(), 60, 400.0, |limit, s| {
        n += 1;
        if n % 10 == 0 {
            Event::Outcome(Outcome::Untimed)
        } else {
            Event::Sample {
                latency_ns: (5.0 * MS as f64 * s.jitter()) as u64,
                inflight: limit.min(40),
            }
        }
    });
    assert!(
        timed[2..10].iter().all(|&l| (120..200).contains(&l)),
        "started over at what the traffic held: {timed:?}"
    );
    let slow = s.run(c.as_mut(), 60, 400.0, |limit, s| Event::Sample {
        latency_ns: (100.0 * MS as f64 * s.jitter()) as u64,
        inflight: limit,
    });
    assert!(slow.last() < Some(&100), "a slowdown is judged: {slow:?}");
}

#[test]
fn a_new_destination_refuses_nothing_below_the_maximum_for_its_first_100_ms() {
    let cfg = ControlConfig::default();
    let mut quiet = controller(&cfg, 0);
    assert_eq!(quiet.limit(), 200);
    assert_eq!(quiet.update(50 * MS), 200, "still watching");
    assert_eq!(
        quiet.update(100 * MS),
        20,
        "nothing seen: the initial limit"
    );
    let mut burst = controller(&cfg, 0);
    for i in 0..100 {
        burst.on_sample(30 * MS, 30 * MS, 100 - i);
    }
    assert_eq!(burst.update(100 * MS), 100, "what the burst held");
}
