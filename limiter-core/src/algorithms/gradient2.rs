//! Gradient2: scale the limit by how much slower than the baseline the upstream is, with
//! Envoy's sqrt(limit) headroom.
//!
//! gradient = clamp(tolerance x baseline / latency, 0.5, 1), target = gradient x limit +
//! headroom, limit += smoothing x (target - limit). Netflix adds the headroom whatever the
//! gradient, so under modest overload (gradient just below 1) the headroom outweighs the cut
//! and the limit creeps up forever; here it is added only when the gradient is 1. Errors,
//! which Netflix's version never reads, shrink the limit.

use serde::{Deserialize, Serialize};

use super::{with_errors, LimitAlgorithm, Verdict};

const MIN_GRADIENT: f64 = 0.5;

/// The latency-gradient algorithm and its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Gradient2 {
    /// How much slower than the baseline is still healthy (at least 1).
    pub tolerance: f64,
    /// Weight of each new target, in 0..=1.
    pub smoothing: f64,
}

impl Default for Gradient2 {
    /// Netflix Gradient2Limit's rttTolerance and smoothing.
    fn default() -> Self {
        Gradient2 {
            tolerance: 1.5,
            smoothing: 0.2,
        }
    }
}

impl LimitAlgorithm for Gradient2 {
    fn next_limit(&mut self, limit: f64, verdict: &Verdict) -> f64 {
        let Some(latency) = verdict.latency else {
            return with_errors(limit, limit, verdict.error_pressure);
        };
        let gradient = (self.tolerance.max(1.0) * latency.baseline / latency.smoothed.max(1.0))
            .clamp(MIN_GRADIENT, 1.0);
        let headroom = if gradient >= 1.0 { limit.sqrt() } else { 0.0 };
        let target = gradient * limit + headroom;
        let proposed = limit + self.smoothing.clamp(0.0, 1.0) * (target - limit);
        with_errors(limit, proposed, verdict.error_pressure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::LatencyView;

    fn at(smoothed: f64) -> Verdict {
        Verdict {
            now_ns: 0,
            error_pressure: 0.0,
            latency: Some(LatencyView {
                smoothed,
                latest: smoothed,
                baseline: 10.0,
                self_queueing: false,
                mean: None,
            }),
        }
    }

    #[test]
    fn healthy_latency_adds_smoothed_headroom() {
        let next = Gradient2::default().next_limit(100.0, &at(14.0));
        assert!((next - 102.0).abs() < 1e-9, "{next}");
    }

    #[test]
    fn overload_shrinks_without_headroom() {
        // gradient = 1.5 x 10 / 16 = 0.9375: Netflix would add 10 and grow.
        let next = Gradient2::default().next_limit(100.0, &at(16.0));
        assert!((next - 98.75).abs() < 1e-9, "{next}");
    }

    #[test]
    fn the_gradient_is_floored_at_one_half() {
        let next = Gradient2::default().next_limit(100.0, &at(1_000.0));
        assert!((next - 90.0).abs() < 1e-9, "{next}");
    }
}
