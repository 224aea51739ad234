//! Vegas: estimate the queue our concurrency builds at the upstream and keep it between
//! alpha and beta requests (Brakmo & Peterson; Netflix VegasLimit's units).
//!
//! queue = limit x (1 - baseline / latency), alpha = 3 log10(limit), beta = 6 log10(limit),
//! with Netflix's log10: max(1, floor(log10(limit))), so alpha and beta are 3 and 6 below a
//! limit of 100 and 6 and 12 up to 1000. Whole numbers of queued requests keep the band
//! narrow at small limits, where a fractional log10 would let it span half the capacity.
//! Run once per window instead of once per sample, so the steps are sized per window:
//! - a queue below alpha grows the limit by beta x (1 - queue / alpha): by beta when the
//!   queue is empty (Netflix's fast path), by less as the queue nears alpha. Netflix switches
//!   from +beta to +1 at a queue of one request, which a p90 with a few percent of noise
//!   crosses at random; the slope keeps recovery fast without that cliff;
//! - a queue above beta shrinks by half the excess (at least log10(limit)): the excess is the
//!   number of requests queued beyond beta. Half of it per window halves a limit of 32 within
//!   two windows of the filter showing a twentyfold slowdown (a quarter took four), and still
//!   does not overshoot a queue of our own making (the simulator's capacity halving).
//!
//! Shrinking is decided on the smoothed latency (one noisy window must not cut the limit);
//! growing is vetoed by the newest window as well, because the smoothed latency shows a queue
//! several windows late and growth during those windows is pure overshoot.
//!
//! The queue estimate is only as good as the baseline. When demand saturates the upstream from
//! the first window, the first baseline already holds a queue and the estimate reads zero.
//! The correlation window still sees latency following in-flight while throughput does not;
//! on that evidence the limit shrinks by [`QUEUEING_SHRINK`] per window until in-flight drops
//! below capacity, where the latency falls and the baseline learns its true value.

use super::{with_errors, LimitAlgorithm, Verdict};

/// Share of the excess queue removed per window.
const SHRINK_GAIN: f64 = 0.5;
/// Share of the limit removed per window while the evidence shows our own queueing.
const QUEUEING_SHRINK: f64 = 0.05;

/// TCP Vegas queue estimation, windowed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Vegas;

impl LimitAlgorithm for Vegas {
    fn next_limit(&mut self, limit: f64, verdict: &Verdict) -> f64 {
        let Some(latency) = verdict.latency else {
            return with_errors(limit, limit, verdict.error_pressure);
        };
        let log = netflix_log10(limit);
        let (alpha, beta) = (3.0 * log, 6.0 * log);
        let step = log;
        let queue_at = |rtt: f64, baseline: f64| limit * (1.0 - baseline / rtt.max(1.0)).max(0.0);
        let queue = |rtt: f64| queue_at(rtt, latency.baseline);
        // The mean shows a short queue whole where the p90 shows part of it; it cuts when
        // it reads more than beta. Under beta it is left out: the no-load mean is the
        // baseline's share, with the baseline's error, and a baseline healed a few per cent
        // low read from the mean held a limit under the capacity.
        let by_mean = latency
            .mean
            .map_or(0.0, |mean| queue_at(mean.latest, mean.baseline));
        let settled = queue(latency.smoothed);
        let settled = if by_mean > beta {
            settled.max(by_mean)
        } else {
            settled
        };
        // Growth takes the lower of the two readings: where the p90 reads a few requests
        // queued and the mean none, the baseline is a few per cent low (a running minimum
        // of noisy windows), not a queue. Read so, two seeds of the simulator's
        // baseline-shift held the limit at 58 to 70 on 100 workers, the mean flat at 1.05 s.
        let fresh = queue(latency.smoothed.max(latency.latest));
        let fresh = latency.mean.map_or(fresh, |_| fresh.min(by_mean));
        let proposed = if settled > beta {
            limit - (SHRINK_GAIN * (settled - beta)).max(step)
        } else if latency.self_queueing {
            limit - (QUEUEING_SHRINK * limit).max(step)
        } else if fresh < alpha {
            limit + beta * (1.0 - fresh / alpha)
        } else {
            limit
        };
        with_errors(limit, proposed, verdict.error_pressure)
    }
}

/// Netflix's `Log10RootFunction`: whole decades, at least one.
fn netflix_log10(limit: f64) -> f64 {
    limit.max(1.0).log10().floor().max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::{LatencyView, MeanLatency};

    fn verdict(smoothed: f64, latest: f64, baseline: f64) -> Verdict {
        Verdict {
            now_ns: 0,
            error_pressure: 0.0,
            latency: Some(LatencyView {
                smoothed,
                latest,
                baseline,
                self_queueing: false,
                mean: None,
            }),
        }
    }

    #[test]
    fn an_empty_queue_grows_by_beta() {
        assert_eq!(Vegas.next_limit(100.0, &verdict(10.0, 10.0, 10.0)), 112.0);
        assert_eq!(Vegas.next_limit(50.0, &verdict(10.0, 10.0, 10.0)), 56.0);
    }

    #[test]
    fn the_band_is_three_to_six_below_a_hundred() {
        assert_eq!(netflix_log10(4.0), 1.0);
        assert_eq!(netflix_log10(99.9), 1.0);
        assert_eq!(netflix_log10(100.0), 2.0);
        // queue = 60 x (1 - 10/11) = 5.5: inside 3..6 at 60, holds.
        assert_eq!(Vegas.next_limit(60.0, &verdict(11.0, 11.0, 10.0)), 60.0);
        // queue = 60 x (1 - 10/12) = 10: above 6, shrinks by (10 - 6) / 2 = 2.
        assert_eq!(Vegas.next_limit(60.0, &verdict(12.0, 12.0, 10.0)), 58.0);
    }

    #[test]
    fn growth_slows_as_the_queue_nears_alpha() {
        // queue = 100 x (1 - 10/10.4) = 3.85 of alpha 6: grows by 12 x (1 - 3.85/6).
        let next = Vegas.next_limit(100.0, &verdict(10.4, 10.4, 10.0));
        assert!((next - 104.31).abs() < 0.01, "{next}");
    }

    #[test]
    fn a_queue_inside_the_band_holds() {
        // queue = 100 x (1 - 10/11) = 9.1, between 6 and 12.
        assert_eq!(Vegas.next_limit(100.0, &verdict(11.0, 11.0, 10.0)), 100.0);
    }

    #[test]
    fn a_long_queue_shrinks_by_half_the_excess() {
        // queue = 100 x (1 - 10/20) = 50, excess over beta = 38.
        assert_eq!(Vegas.next_limit(100.0, &verdict(20.0, 20.0, 10.0)), 81.0);
    }

    fn with_mean(p90: f64, mean: f64, mean_baseline: f64) -> Verdict {
        let mut v = verdict(p90, p90, 10.0);
        if let Some(latency) = v.latency.as_mut() {
            latency.mean = Some(MeanLatency {
                latest: mean,
                baseline: mean_baseline,
            });
        }
        v
    }

    #[test]
    fn a_queue_the_mean_shows_over_beta_cuts_where_the_p90_shows_it_in_the_band() {
        // By the p90, 120 x (1 - 10/11) = 10.9 of beta 12: holds. By the mean,
        // 120 x (1 - 7/8.4) = 20, excess over beta 8: shrinks by 4.
        assert_eq!(Vegas.next_limit(120.0, &verdict(11.0, 11.0, 10.0)), 120.0);
        let next = Vegas.next_limit(120.0, &with_mean(11.0, 8.4, 7.0));
        assert!((next - 116.0).abs() < 1e-9, "{next}");
    }

    #[test]
    fn a_mean_under_beta_leaves_the_p90_to_decide() {
        // By the mean, 60 x (1 - 7/7.5) = 4 of beta 6; by the p90 nothing queues: grows.
        assert_eq!(Vegas.next_limit(60.0, &with_mean(10.0, 7.5, 7.0)), 66.0);
    }

    #[test]
    fn a_queue_the_p90_reads_and_the_mean_does_not_leaves_room_to_grow() {
        // By the p90, 60 x (1 - 10/10.7) = 3.9, in the band 3..6; by the mean nothing queues.
        assert_eq!(Vegas.next_limit(60.0, &verdict(10.7, 10.7, 10.0)), 60.0);
        assert_eq!(Vegas.next_limit(60.0, &with_mean(10.7, 7.0, 7.0)), 66.0);
    }

    #[test]
    fn a_queue_in_the_newest_window_vetoes_growth_but_does_not_shrink() {
        assert_eq!(Vegas.next_limit(100.0, &verdict(10.0, 30.0, 10.0)), 100.0);
    }

    #[test]
    fn evidence_of_queueing_shrinks_even_with_an_empty_queue_estimate() {
        let mut v = verdict(10.0, 10.0, 10.0);
        if let Some(l) = v.latency.as_mut() {
            l.self_queueing = true;
        }
        assert_eq!(Vegas.next_limit(100.0, &v), 95.0);
    }

    #[test]
    fn errors_veto_growth_and_shrink() {
        let mut v = verdict(10.0, 10.0, 10.0);
        v.error_pressure = 0.2;
        assert_eq!(Vegas.next_limit(100.0, &v), 90.0);
    }
}
