//! The other built-in algorithms on every scenario: each must pass, unless it is listed in
//! `EXPECTED_FAILURES` with its reason, in which case it must fail (so the list, and the
//! scorecard that shows it, stay true).

use limiter_core::Algorithm;
use limiter_sim::algorithm::DEFAULT_ALGORITHM;
use limiter_sim::scenarios;
use limiter_sim::{expected_failure, AlgorithmChoice, DEFAULT_SEED, EXPECTED_FAILURES};

fn matches_the_scorecard(algorithm: Algorithm) {
    let mut surprises = Vec::new();
    for scenario in scenarios::ALL {
        let played = scenario
            .play(&AlgorithmChoice::Builtin(algorithm), DEFAULT_SEED)
            .expect("a built-in algorithm runs");
        let passed = played.criteria.iter().all(|c| c.pass);
        let expected_to_pass = expected_failure(scenario.name, algorithm).is_none();
        if passed != expected_to_pass {
            surprises.push(format!(
                "{} x {algorithm}: passed = {passed}, expected {expected_to_pass}: {}",
                scenario.name, played.key_figure
            ));
        }
    }
    assert!(surprises.is_empty(), "{surprises:#?}");
}

#[test]
fn gradient2() {
    matches_the_scorecard(Algorithm::Gradient2);
}

#[test]
fn aimd() {
    matches_the_scorecard(Algorithm::Aimd);
}

#[test]
fn gateway() {
    matches_the_scorecard(Algorithm::Gateway);
}

#[test]
fn fixed() {
    matches_the_scorecard(Algorithm::Fixed);
}

#[test]
fn the_default_algorithm_has_no_expected_failure_and_every_entry_is_real() {
    for f in EXPECTED_FAILURES {
        assert_ne!(
            f.algorithm, DEFAULT_ALGORITHM,
            "{}: the default must pass",
            f.scenario
        );
        assert!(scenarios::find(f.scenario).is_some(), "{}", f.scenario);
        assert!(!f.reason.is_empty());
    }
}

#[test]
fn every_builtin_algorithm_has_a_test() {
    let tested = [
        DEFAULT_ALGORITHM,
        Algorithm::Gradient2,
        Algorithm::Aimd,
        Algorithm::Gateway,
        Algorithm::Fixed,
    ];
    for a in Algorithm::ALL {
        assert!(tested.contains(&a), "{a}");
    }
}
