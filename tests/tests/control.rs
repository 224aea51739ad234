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
    assert!(healthy(&steady), "the steady upstream keeps its limit");
    assert_eq!(
        get(&steady, "shed"),
        steady_shed,
        "the steady upstream is never refused"
    );

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
    assert_eq!(get(&steady, "shed"), steady_shed);
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
