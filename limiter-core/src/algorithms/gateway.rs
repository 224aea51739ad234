//! Gateway: the policy table of the LLM gateway's adaptive concurrency.
//!
//! Baseline: the fastest latency of the last 60 s. Slow (more than [`SLOW_MARGIN`] above it):
//! the limit moves a smoothed step towards limit x (fastest / current), floored at half.
//! Error: x0.8 at once. Healthy: +sqrt(limit). The gateway acts per response; this acts per
//! window, so "at once" means at the close of the window holding the error. Its baseline rolls,
//! so it heals by itself after 60 s of any latency, including an incident's (the reason the
//! default algorithm does not use it).

use serde::{Deserialize, Serialize};

use super::{LimitAlgorithm, Verdict};

const ERROR_BACKOFF: f64 = 0.8;
const FLOOR: f64 = 0.5;
/// Latency this much above the fastest still counts as healthy: absorbs the smoothed
/// latency's own noise, which would otherwise read as "slow" nearly every window (ours).
const SLOW_MARGIN: f64 = 1.1;
/// "Fastest in the last 60 s" is kept as two 30 s buckets: the minimum over the current and
/// the previous bucket covers the last 30 to 60 s in two numbers instead of a ring.
const BUCKET_NS: u64 = 30_000_000_000;

/// The gateway policy: its parameter, and the fastest latency it has seen.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Gateway {
    /// Weight of each new target on a slow window, in 0..=1.
    pub smoothing: f64,
    #[serde(skip)]
    fastest: Fastest,
}

impl Default for Gateway {
    /// Netflix Gradient2Limit's smoothing, as the gateway uses.
    fn default() -> Self {
        Gateway {
            smoothing: 0.2,
            fastest: Fastest::default(),
        }
    }
}

/// The fastest smoothed latency of the last 30 to 60 s. It is the gateway's own baseline,
/// not the controller's: the policy is defined by a minimum that rolls off after a minute
/// whatever caused the latency, where the controller's baseline moves up only on evidence.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Fastest {
    bucket_start_ns: Option<u64>,
    current: f64,
    previous: f64,
}

impl Default for Fastest {
    fn default() -> Self {
        Fastest {
            bucket_start_ns: None,
            current: f64::INFINITY,
            previous: f64::INFINITY,
        }
    }
}

impl Fastest {
    fn observe(&mut self, now_ns: u64, latency: f64) -> f64 {
        let start = *self.bucket_start_ns.get_or_insert(now_ns);
        let elapsed = now_ns.saturating_sub(start);
        if elapsed >= BUCKET_NS {
            self.previous = if elapsed >= 2 * BUCKET_NS {
                f64::INFINITY
            } else {
                self.current
            };
            self.current = f64::INFINITY;
            self.bucket_start_ns = Some(now_ns);
        }
        self.current = self.current.min(latency);
        self.current.min(self.previous)
    }
}

impl LimitAlgorithm for Gateway {
    fn next_limit(&mut self, limit: f64, verdict: &Verdict) -> f64 {
        let latency = verdict.latency.map(|l| l.smoothed.max(1.0));
        let fastest = latency.map(|l| self.fastest.observe(verdict.now_ns, l));
        if verdict.error_pressure > 0.0 {
            return limit * ERROR_BACKOFF;
        }
        match (latency, fastest) {
            (Some(current), Some(fastest)) if current > fastest * SLOW_MARGIN => {
                let target = limit * (fastest / current).max(FLOOR);
                limit + self.smoothing.clamp(0.0, 1.0) * (target - limit)
            }
            (Some(_), _) => limit + limit.sqrt(),
            _ => limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::LatencyView;

    const SEC: u64 = 1_000_000_000;

    fn at(now_ns: u64, smoothed: f64) -> Verdict {
        Verdict {
            now_ns,
            error_pressure: 0.0,
            latency: Some(LatencyView {
                smoothed,
                latest: smoothed,
                baseline: 0.0,
                self_queueing: false,
                mean: None,
            }),
        }
    }

    #[test]
    fn healthy_grows_by_sqrt_and_slow_moves_towards_the_ratio() {
        let mut g = Gateway::default();
        assert_eq!(g.next_limit(100.0, &at(0, 10.0)), 110.0);
        // fastest/current = 0.5: target 50, a fifth of the way there.
        assert_eq!(g.next_limit(100.0, &at(SEC, 20.0)), 90.0);
        // Floored at half even for a tenfold slowdown.
        assert_eq!(g.next_limit(100.0, &at(2 * SEC, 100.0)), 90.0);
    }

    #[test]
    fn errors_cut_by_a_fifth() {
        let mut v = at(0, 10.0);
        v.error_pressure = 0.5;
        assert_eq!(Gateway::default().next_limit(100.0, &v), 80.0);
    }

    #[test]
    fn the_fastest_latency_expires_after_a_minute() {
        let mut g = Gateway::default();
        g.next_limit(100.0, &at(0, 10.0));
        assert!(g.next_limit(100.0, &at(40 * SEC, 30.0)) < 100.0);
        assert_eq!(g.next_limit(100.0, &at(70 * SEC, 30.0)), 110.0);
    }
}
