//! External algorithms run on the same traffic as the built-in ones, over the line protocol.

use limiter_sim::scenarios;
use limiter_sim::shapes::{self, Shape};
use limiter_sim::{AlgorithmChoice, DEFAULT_SEED};

fn external(command: &str) -> AlgorithmChoice {
    format!("external:{command}")
        .parse()
        .expect("an external command")
}

#[test]
fn an_external_limit_is_the_limit_enforced() {
    // A fixed limit of 30 in shell: answer every tick with 30.
    let fixed = external("while read -r word rest; do case $word in tick) echo 30;; esac; done");
    let played = scenarios::find("converge")
        .expect("converge")
        .play(&fixed, DEFAULT_SEED)
        .expect("the protocol is kept");
    let (_, trace) = &played.traces[0];
    assert!(trace.ticks.iter().skip(1).all(|t| t.limit == 30));
    assert!(trace.ticks.iter().all(|t| t.inflight <= 30));
    assert!(
        trace.first_shed.is_some(),
        "80 workers against a limit of 30"
    );
}

#[test]
fn the_python_reference_sees_samples_and_errors() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/external/aimd.py");
    let aimd = external(&format!("python3 {script}"));
    let played = scenarios::find("errors")
        .expect("errors")
        .play(&aimd, DEFAULT_SEED)
        .expect("the reference keeps to the protocol");
    let (_, trace) = &played.traces[0];
    let before = trace.limit_at(limiter_sim::clock::secs(200.0));
    assert!(before > 100, "grew while busy: {before}");
    // The first criterion: the limit fell during the error burst.
    assert!(played.criteria[0].pass, "{:?}", played.criteria[0]);
}

#[test]
fn a_command_that_breaks_the_protocol_fails_the_run() {
    let broken = external("echo not-a-limit; cat > /dev/null");
    let err = scenarios::find("converge")
        .expect("converge")
        .play(&broken, DEFAULT_SEED)
        .err()
        .expect("a protocol error");
    assert!(format!("{err:#}").contains("not-a-limit"), "{err:#}");
}

#[test]
fn an_external_algorithm_plays_a_shape() {
    let fixed = external("while read -r word rest; do case $word in tick) echo 12;; esac; done");
    let shape: Shape = "workers=16".parse().expect("a valid spec");
    let played = shapes::play(&shape, &fixed, DEFAULT_SEED).expect("the protocol is kept");
    let (_, trace) = &played.traces[0];
    assert!(trace.ticks.iter().skip(1).all(|t| t.limit == 12));
    let peak = played
        .criteria
        .iter()
        .find(|c| c.name == shapes::judge::PEAK_INFLIGHT)
        .expect("judged");
    assert!(peak.pass && peak.value <= 12.0, "{peak:?}");
}
