//! The closed loop on real traffic: an unmodified client (curl) against loopback
//! upstreams that slow down and recover (root, real kernel, curl installed).

use limiter_integration_tests::*;

const LOAD: usize = 16;

/// The controller publishes a baseline once its warm-up is over: from then on, a slowdown
/// is a slowdown and not the upstream's normal.
fn learned(cg: &TestCgroup, up: &SlowHttp) -> bool {
    row(cg, up.addr).is_some_and(|r| r["baseline_ms"].is_number())
}

#[kernel_test]
fn the_limit_follows_a_slow_upstream_down_and_back_up_leaving_others_alone() {
    let cg = TestCgroup::new("adaptive");
    let (slowing, steady) = (SlowHttp::start(5), SlowHttp::start(5));
    let _agent = Agent::start(&cg, &[]);
    let _loads = (
        CurlLoad::start(&cg, &slowing, LOAD),
        CurlLoad::start(&cg, &steady, LOAD),
    );
    let get = |up: &SlowHttp, name| field(&cg, up.addr, name);
    let healthy = |up: &SlowHttp| get(up, "limit") >= LOAD as i64;

    wait_until("baselines learned, limits above the load", || {
        learned(&cg, &slowing) && learned(&cg, &steady) && healthy(&slowing) && healthy(&steady)
    });
    let shed_before = get(&slowing, "shed");
    let steady_shed = get(&steady, "shed");

    slowing.set_delay_ms(100);
    wait_until(
        "the slow upstream's limit to fall and refuse connects",
        || !healthy(&slowing) && get(&slowing, "shed") > shed_before,
    );
    let p90 = row(&cg, slowing.addr).unwrap()["p90_ms"].as_f64().unwrap();
    assert!(p90 > 20.0, "the published p90 shows the slowdown: {p90}");
    // The steady upstream shares this machine's CPUs: on a starved one (a loaded host,
    // software emulation) its answers slow down too, and then its limit may rightly fall.
    // What must hold is the rule: while its latency stays at its normal, it is left alone.
    if steady_at_baseline(&cg, &steady) {
        assert!(healthy(&steady), "the steady upstream keeps its limit");
        assert_eq!(
            get(&steady, "shed"),
            steady_shed,
            "the steady upstream is never refused"
        );
    }

    slowing.set_delay_ms(5);
    wait_until("the limit to climb back above the load", || {
        healthy(&slowing)
    });
    // Once the limit is above the client's concurrency, refusals stop.
    let (shed, admitted) = (get(&slowing, "shed"), get(&slowing, "admitted"));
    wait_until("more traffic", || {
        get(&slowing, "admitted") > admitted + 2000
    });
    assert_eq!(get(&slowing, "shed"), shed, "refusals stop after recovery");
    if steady_at_baseline(&cg, &steady) {
        assert_eq!(get(&steady, "shed"), steady_shed);
    }
}

/// Whether the destination's published p90 is within the band a healthy upstream's
/// latency moves in around its baseline.
fn steady_at_baseline(cg: &TestCgroup, up: &SlowHttp) -> bool {
    let row = row(cg, up.addr).unwrap();
    let (p90, baseline) = (row["p90_ms"].as_f64(), row["baseline_ms"].as_f64());
    p90.zip(baseline)
        .is_some_and(|(p90, baseline)| p90 <= 2.0 * baseline)
}

#[kernel_test]
fn shadow_mode_refuses_nothing_and_reports_what_it_would_have_shed() {
    let cg = TestCgroup::new("adaptiveshadow");
    let up = SlowHttp::start(5);
    let _agent = Agent::start(&cg, &["--mode", "shadow"]);
    let _load = CurlLoad::start(&cg, &up, LOAD);
    let get = |name| field(&cg, up.addr, name);
    wait_until("a baseline learned and a limit above the load", || {
        learned(&cg, &up) && get("limit") >= LOAD as i64
    });
    up.set_delay_ms(100);
    wait_until("would_shed under the slowdown", || {
        get("limit") < LOAD as i64 && get("would_shed") > 0
    });
    assert_eq!(get("shed"), 0);
    assert_eq!(row(&cg, up.addr).unwrap()["mode"], "shadow");
}

/// A destination the controller has not learned yet grows its limit to the connects it
/// refused: a burst that meets the initial limit is refused once, not for as long as it
/// takes to learn a latency.
#[kernel_test]
fn refusals_while_learning_raise_the_limit_to_the_demand() {
    let cg = TestCgroup::new("learnburst");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let _agent = Agent::start(&cg, &["--initial-limit", "4"]);
    let (_first, lines) = Probe::hold(&cg, up.addr, 10);
    assert_eq!(tally(&lines), (4, 6, 0));
    wait_until("the limit to meet the refused demand", || {
        field(&cg, up.addr, "limit") >= 10
    });
    let (_second, lines) = Probe::hold(&cg, up.addr, 6);
    assert_eq!(tally(&lines), (6, 0, 0), "the refused demand fits now");
}
