//! Eight requests a minute: 50 samples take six minutes. Thin windows close at 30 s and take
//! their p90 over the last 50 latencies, reaching back into earlier windows; growth is capped
//! at the initial limit because in-flight never tests more. So the limit holds still on
//! healthy noise, and moves on a sustained slowdown or on errors.

mod support;

use limiter_core::{ControlConfig, Controller, DestinationController, Outcome};
use support::{Event, Stream, MS};

const PER_SEC: f64 = 8.0 / 60.0;

fn sample(median_ms: f64, s: &mut Stream) -> Event {
    Event::Sample {
        latency_ns: (median_ms * MS as f64 * s.jitter() * s.jitter()) as u64,
        inflight: 1,
    }
}

fn warmed_up() -> (DestinationController, Stream) {
    let mut c = DestinationController::new(&ControlConfig::default(), 0);
    let mut s = Stream::new(11);
    s.run(&mut c, 600, PER_SEC, |_, s| sample(350.0, s));
    (c, s)
}

#[test]
fn two_healthy_hours_stay_within_10_percent_of_the_start() {
    let (mut c, mut s) = warmed_up();
    let limits = s.run(&mut c, 7_200, PER_SEC, |_, s| sample(350.0, s));
    assert!(
        limits.iter().all(|l| (18..=22).contains(l)),
        "{:?}",
        limits.iter().min()
    );
}

#[test]
fn a_sustained_fivefold_slowdown_lowers_the_limit() {
    let (mut c, mut s) = warmed_up();
    let limits = s.run(&mut c, 900, PER_SEC, |_, s| sample(1_750.0, s));
    assert!(*limits.last().unwrap() < 15, "{:?}", limits.last());
}

#[test]
fn a_single_slow_request_is_noise() {
    let (mut c, mut s) = warmed_up();
    let mut first = true;
    let limits = s.run(&mut c, 1_800, PER_SEC, |_, s| {
        let slow = std::mem::take(&mut first);
        sample(if slow { 17_500.0 } else { 350.0 }, s)
    });
    assert!(limits.iter().all(|&l| l == 20), "{:?}", limits.iter().min());
}

#[test]
fn errors_lower_the_limit_and_it_comes_back() {
    let (mut c, mut s) = warmed_up();
    s.run(&mut c, 300, PER_SEC, |_, s| {
        if s.jitter() > 1.0 {
            Event::Outcome(Outcome::Error)
        } else {
            sample(350.0, s)
        }
    });
    assert!(c.limit() < 18, "{}", c.limit());
    s.run(&mut c, 600, PER_SEC, |_, s| sample(350.0, s));
    assert_eq!(c.limit(), 20);
}
