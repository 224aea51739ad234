//! A destination without traffic goes quiet: its updates can be skipped until the next
//! sample, because they would decide nothing.

use limiter_core::{ControlConfig, Controller, DestinationController};

const MS: u64 = 1_000_000;
const TICK: u64 = 100 * MS;

#[test]
fn silence_makes_a_controller_quiet_and_its_updates_change_nothing() {
    let cfg = ControlConfig::default();
    let mut c = DestinationController::new(&cfg, 0);
    let mut now = 0;
    // A minute of traffic: a sample every 10 ms, latencies spread over 5-6 ms.
    while now < 60_000 * MS {
        now += 10 * MS;
        c.on_sample(now, 5 * MS + (now / MS % 7) * 150_000, 4);
        if now % TICK == 0 {
            c.update(now);
        }
    }
    assert!(
        !c.is_quiet(),
        "a window full of samples has something to say"
    );
    let (mut became_quiet, max_window) = (None, cfg.pipeline.max_window_ns);
    while now < 60_000 * MS + 10 * max_window {
        now += TICK;
        c.update(now);
        if became_quiet.is_none() && c.is_quiet() {
            became_quiet = Some(now);
        }
    }
    let became_quiet = became_quiet.expect("quiet after ten empty windows");
    assert!(
        became_quiet <= 60_000 * MS + 6 * max_window + TICK,
        "quiet once five empty windows have aged the peaks out"
    );
    let (limit, baseline, p90) = (c.limit(), c.baseline_ns(), c.p90_ns());
    for _ in 0..1_000 {
        now += TICK;
        assert_eq!(c.update(now), limit);
        assert!(c.is_quiet());
    }
    assert_eq!((c.baseline_ns(), c.p90_ns()), (baseline, p90));
    c.on_sample(now, 5 * MS, 1);
    assert!(!c.is_quiet(), "a sample wakes it");
}
