//! Coming back from a slowdown: the limit that served the upstream when it was healthy is
//! remembered, and once the upstream is fast again the limit returns to it at once instead
//! of climbing back window by window. Fast again means either the latency is back well under
//! the service time the baseline had to follow, or it is back at the baseline, from at least
//! twice it, under a limit no lower than the slow window's: the upstream sped up by itself.
//! A latency that came down because the limit was cut (our own queue drained) is no
//! recovery: going back would rebuild that queue. Errors at the baseline's latency are the
//! third kind of slowdown: the first window without them, still at the baseline, is the end
//! of it.

use crate::baseline::ELEVATED;

/// A p90 this far under the slow service time the baseline followed is a recovery; one
/// within [`ELEVATED`] x the baseline is healthy.
const RECOVERED: f64 = 0.5;

/// One window as recovery reads it.
#[derive(Clone, Copy, Debug)]
pub struct WindowView {
    pub p90: f64,
    pub baseline: f64,
    /// The limit in force during the window.
    pub limit: f64,
    /// Errors above the background, which cut the limit whatever the latency.
    pub erred: bool,
}

/// The last healthy limit, and the slowdown it is waiting to see the end of. Kept in `f32`
/// (7 significant digits): a controller stays under 4 KiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recovery {
    healthy_limit: f32,
    slow_p90: Option<f32>,
    /// The limit of the newest window since the last healthy one that was slower than the
    /// baseline by the recovery's own margin (at least 1 / RECOVERED).
    slow_limit: Option<f32>,
    /// Windows since the last healthy one had errors at the baseline's latency, and none
    /// was slow.
    erred: bool,
}

impl Recovery {
    /// The baseline followed the upstream to the slower `p90`.
    pub fn followed(&mut self, p90: f64) {
        self.slow_p90 = Some(p90 as f32);
    }

    /// One window. Returns the limit to go back to when the window shows the upstream
    /// recovered from a slowdown.
    pub fn observe(&mut self, w: WindowView) -> Option<f64> {
        let healthy = f64::from(self.healthy_limit);
        if let Some(slow) = self.slow_p90 {
            if w.p90 > RECOVERED * f64::from(slow) {
                return None;
            }
            self.slow_p90 = None;
            self.slow_limit = None;
            return Some(healthy);
        }
        if w.p90 > ELEVATED * w.baseline {
            // A cut made while the latency rose is the latency's: the errors no longer
            // tell when it is over.
            self.erred = false;
            if RECOVERED * w.p90 >= w.baseline {
                self.slow_limit = Some(w.limit as f32);
            }
            return None;
        }
        if w.erred {
            self.erred = true;
            return None;
        }
        // Limits are compared as kept: a limit rounded to f32 and back is not itself.
        let limit = w.limit as f32;
        let sped_up = self.slow_limit.take().is_some_and(|slow| limit >= slow);
        let errors_over = std::mem::take(&mut self.erred);
        if (sped_up || errors_over) && self.healthy_limit > limit {
            return Some(healthy);
        }
        self.healthy_limit = limit;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(p90: f64, baseline: f64, limit: f64) -> WindowView {
        WindowView {
            p90,
            baseline,
            limit,
            erred: false,
        }
    }

    fn erring(p90: f64, baseline: f64, limit: f64) -> WindowView {
        WindowView {
            erred: true,
            ..window(p90, baseline, limit)
        }
    }

    #[test]
    fn the_first_window_without_errors_at_the_baseline_gets_the_limit_back() {
        let mut r = Recovery::default();
        r.observe(window(30.0, 30.0, 110.0));
        assert_eq!(r.observe(erring(30.0, 30.0, 100.0)), None);
        assert_eq!(r.observe(erring(31.0, 30.0, 60.0)), None);
        assert_eq!(r.observe(window(31.0, 30.0, 30.0)), Some(110.0));
        assert_eq!(r.observe(window(31.0, 30.0, 30.0)), None, "once");
    }

    #[test]
    fn errors_with_a_slowdown_are_the_slowdown_s_to_end() {
        let mut r = Recovery::default();
        r.observe(window(30.0, 30.0, 110.0));
        r.observe(erring(30.0, 30.0, 100.0));
        r.observe(erring(45.0, 30.0, 60.0));
        assert_eq!(r.observe(window(31.0, 30.0, 30.0)), None, "cut since");
    }

    #[test]
    fn returns_to_the_last_healthy_limit_once_the_slowdown_is_over() {
        let mut r = Recovery::default();
        assert_eq!(r.observe(window(30.0, 30.0, 80.0)), None);
        assert_eq!(
            r.observe(window(900.0, 30.0, 60.0)),
            None,
            "not healthy: not remembered"
        );
        r.followed(900.0);
        assert_eq!(r.observe(window(950.0, 900.0, 8.0)), None, "still slow");
        assert_eq!(r.observe(window(40.0, 900.0, 8.0)), Some(80.0));
        assert_eq!(r.observe(window(40.0, 900.0, 8.0)), None, "once");
    }

    #[test]
    fn an_upstream_that_sped_up_under_the_same_concurrency_gets_its_limit_back() {
        let mut r = Recovery::default();
        r.observe(window(30.0, 30.0, 70.0));
        r.observe(window(600.0, 30.0, 6.0));
        assert_eq!(r.observe(window(31.0, 30.0, 6.0)), Some(70.0));
    }

    #[test]
    fn a_latency_our_cut_brought_down_is_no_recovery() {
        let mut r = Recovery::default();
        r.observe(window(30.0, 30.0, 110.0));
        r.observe(window(66.0, 30.0, 110.0));
        assert_eq!(r.observe(window(33.0, 30.0, 56.0)), None, "cut since");
        r.observe(window(40.0, 30.0, 56.0));
        assert_eq!(
            r.observe(window(33.0, 30.0, 56.0)),
            None,
            "only a little slower: noise around the band"
        );
    }
}
