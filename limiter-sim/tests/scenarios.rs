//! Every scenario must pass with the default algorithm at the default seed.

use limiter_sim::scenarios;
use limiter_sim::{AlgorithmChoice, DEFAULT_SEED};

fn passes_with_the_default_algorithm(name: &str) {
    let scenario = scenarios::find(name).expect("a known scenario");
    let played = scenario
        .play(&AlgorithmChoice::default(), DEFAULT_SEED)
        .expect("a built-in algorithm runs");
    let failed: Vec<_> = played.criteria.iter().filter(|c| !c.pass).collect();
    assert!(failed.is_empty(), "{name}: {failed:#?}");
}

macro_rules! scenario_tests {
    ($($(#[$attr:meta])* $test:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            $(#[$attr])*
            fn $test() {
                passes_with_the_default_algorithm($name);
            }
        )*

        #[test]
        fn every_scenario_has_a_test() {
            let tested = [$($name),*];
            for s in scenarios::ALL {
                assert!(tested.contains(&s.name), "{} has no test", s.name);
            }
        }
    };
}

scenario_tests! {
    converge => "converge",
    capacity_halves => "capacity-halves",
    production => "production",
    streaming => "streaming",
    low_traffic => "low-traffic",
    baseline_shift => "baseline-shift",
    errors => "errors",
    overload => "overload",
    mixed_sizes => "mixed-sizes",
    healthy_start => "healthy-start",
    incident => "incident",
    recovery => "recovery",
    goodbye => "goodbye",
    keepalive_pool => "keepalive-pool",
    slow_query => "slow-query",
    queueing => "queueing",
}
