//! Shapes: the generator, the text form, the criteria computed from a shape, and a sweep.

use limiter_core::algorithms::Fixed;
use limiter_core::{controller, Algorithm, ControlConfig};
use limiter_sim::algorithm::Unlimited;
use limiter_sim::clock::secs;
use limiter_sim::criteria::Criterion;
use limiter_sim::engine::simulate;
use limiter_sim::shapes::judge::{
    HEALTHY_REFUSED, PEAK_INFLIGHT, RECOVERY, SATURATED_GOODPUT, SATURATED_TWIN,
};
use limiter_sim::shapes::{self, play_with, Family, PlayedShape, Shape, END_S};
use limiter_sim::AlgorithmChoice;

const SEED: u64 = 1;

/// The real-traffic rig with 32 workers (every key left out is the rig's): 100 clients
/// saturate them 2.4 times over once the service time is 27 times slower.
fn rig() -> Shape {
    "workers=32".parse().expect("a valid spec")
}

fn criterion<'a>(played: &'a PlayedShape, name: &str) -> &'a Criterion {
    played
        .criteria
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("{name} is judged: {:?}", played.criteria))
}

#[test]
fn the_generator_is_deterministic_per_seed_and_covers_every_family() {
    let drawn = shapes::shapes(SEED, 500);
    assert_eq!(drawn, shapes::shapes(SEED, 500));
    assert_ne!(drawn, shapes::shapes(SEED + 1, 500));
    for family in Family::ALL {
        let members = drawn.iter().filter(|s| family.holds(s)).count();
        assert!(members >= 25, "{}: {members} of 500 shapes", family.name());
    }
}

#[test]
fn every_drawn_shape_prints_and_parses_back_to_itself() {
    for shape in shapes::shapes(SEED, 500) {
        let spec = shape.to_string();
        let parsed: Shape = spec.parse().expect("a printed shape parses");
        assert_eq!(parsed, shape, "{spec}");
        assert_eq!(parsed.to_string(), spec);
    }
}

#[test]
fn a_fixed_limit_of_2_on_32_saturated_workers_fails_goodput() {
    let shape = rig();
    assert!(shape.saturated());
    let played = play_with(&shape, SEED, |setup, limits| {
        let config = ControlConfig {
            algorithm: Algorithm::Fixed,
            fixed: Fixed { limit: Some(2) },
            limits,
            ..ControlConfig::default()
        };
        Ok(simulate(setup, SEED, controller(&config, 0).as_mut()))
    })
    .expect("runs");
    let goodput = criterion(&played, SATURATED_GOODPUT);
    assert!(!goodput.pass && goodput.value < 0.2, "{goodput:?}");
    assert!(!criterion(&played, HEALTHY_REFUSED).pass);
    assert!(criterion(&played, PEAK_INFLIGHT).value <= 2.0);
}

#[test]
fn no_limiter_refuses_nothing_and_serves_what_its_twin_does() {
    let shape = rig();
    let played = play_with(&shape, SEED, |setup, _| {
        Ok(simulate(setup, SEED, &mut Unlimited))
    })
    .expect("runs");
    let refused = criterion(&played, HEALTHY_REFUSED);
    assert!(refused.pass && refused.value == 0.0, "{refused:?}");
    assert!(criterion(&played, RECOVERY).pass);
    assert_eq!(
        criterion(&played, SATURATED_TWIN).value,
        1.0,
        "it is its twin"
    );
    // 100 clients queue on 32 slow workers past their 2 s timeout: the twin serves
    // almost nothing in time, which no limiter may do.
    assert!(!criterion(&played, SATURATED_GOODPUT).pass);
}

#[test]
fn the_twin_is_the_shape_run_with_no_limiter() {
    let played = shapes::play(&rig(), &AlgorithmChoice::default(), SEED).expect("runs");
    let [(_, limited), (label, twin)] = &played.traces[..] else {
        panic!("a run and its twin");
    };
    assert_eq!(*label, "twin, no limiter");
    let whole = (0, secs(END_S));
    assert_eq!(twin.shed(whole.0, whole.1), 0);
    assert!(twin.ticks.iter().all(|t| t.limit == u32::MAX));
    // All 100 clients pile up on the slow workers without a limiter.
    assert_eq!(twin.peak_inflight(whole.0, whole.1), 100);
    assert!(limited.peak_inflight(whole.0, whole.1) < 100);
}

#[test]
fn a_sweep_of_a_few_shapes_judges_each_and_scores_the_families() {
    let algorithm = AlgorithmChoice::default();
    let scorecard = shapes::sweep(6, SEED, &algorithm).expect("runs");
    assert_eq!(scorecard.judged.len(), 6);
    let drawn = shapes::shapes(SEED, 6);
    for (judged, shape) in scorecard.judged.iter().zip(&drawn) {
        assert_eq!(judged.spec, shape.to_string());
        assert_eq!(judged.families, shape.families());
        for name in [HEALTHY_REFUSED, PEAK_INFLIGHT] {
            assert!(judged.criteria.iter().any(|c| c.name == name), "{name}");
        }
    }
    let cards = scorecard.families();
    assert_eq!(cards[0].family, Family::All);
    assert_eq!(cards[0].shapes, 6);
    assert_eq!(cards[0].passed, scorecard.passed());
    let json = scorecard.to_json();
    assert_eq!(json["shapes"], 6);
    assert!(scorecard.to_markdown().contains("| all | 6 |"));
    let again = shapes::sweep(6, SEED, &algorithm).expect("runs");
    let values = |s: &shapes::Scorecard| -> Vec<f64> {
        s.judged
            .iter()
            .flat_map(|j| j.criteria.iter().map(|c| c.value))
            .collect()
    };
    assert_eq!(values(&scorecard), values(&again), "the same sweep again");
}
