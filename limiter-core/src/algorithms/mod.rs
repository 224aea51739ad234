//! The algorithms: each turns one window's verdict into the next limit.
//!
//! They see the limit as a real number (so small steps accumulate), the error pressure and,
//! when a latency is known, the smoothed latency, the newest window's p90 and the baseline
//! (and, in windows where it tells more, the mean latency against the no-load mean).
//! Bounds, the app-limited cap and rounding are the controller's business, not theirs.

mod aimd;
mod fixed;
mod gateway;
mod gradient2;
mod vegas;

pub use aimd::Aimd;
pub use fixed::Fixed;
pub use gateway::Gateway;
pub use gradient2::Gradient2;
pub use vegas::Vegas;

use crate::config::{Algorithm, ControlConfig, Limits};

/// Latencies as an algorithm sees them, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyView {
    /// Median-filtered, smoothed p90: the latency decisions rest on.
    pub smoothed: f64,
    /// The newest window's p90: quick to show a queue, too noisy to act on alone.
    pub latest: f64,
    /// The no-load latency.
    pub baseline: f64,
    /// The correlation window shows latency following in-flight while throughput does not:
    /// our concurrency is queueing, whatever the queue estimate against the baseline says.
    pub self_queueing: bool,
    /// The newest window's mean latency and the no-load mean, when the limit bound that
    /// window and its p90 stayed in the baseline's band: where a queue is short, the p90
    /// shows only part of it (see [`MeanLatency`]).
    pub mean: Option<MeanLatency>,
}

/// A window's mean latency against the no-load mean, in nanoseconds. A wait adds to every
/// latency alike, so it raises the mean by the same as the p90 but from a lower start: the
/// mean shows the whole queue (Little's law), a short queue's p90 about the no-load
/// mean-to-p90 ratio of it: 0.7 for service times spread as a lognormal of sigma 0.3.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeanLatency {
    /// The newest window's mean latency.
    pub latest: f64,
    /// The no-load mean: the baseline times the mean-to-p90 ratio of windows with no queue.
    pub baseline: f64,
}

/// What one closed window tells an algorithm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verdict {
    /// When the window closed.
    pub now_ns: u64,
    /// Share of failed requests, timeouts counted double, in 0..=1.
    pub error_pressure: f64,
    /// Absent until a latency has been seen.
    pub latency: Option<LatencyView>,
}

/// One control algorithm: pure, deterministic, one decision per closed window.
pub trait LimitAlgorithm {
    /// The limit to enforce after a window closed with `verdict`, given the current `limit`.
    fn next_limit(&mut self, limit: f64, verdict: &Verdict) -> f64;

    /// The bounds the limit keeps to, given the configured ones.
    fn bounds(&self, configured: Limits) -> Limits {
        configured.normalized()
    }
}

/// Error pressure below this share of a window's requests is background noise: it shrinks
/// the limit in proportion but does not veto growth.
pub(crate) const BACKGROUND_ERRORS: f64 = 0.01;

/// Applies the error pressure to a latency-driven proposal: the limit loses half the failed
/// share (a window of 20 % errors costs 10 %), and errors above the background veto growth.
fn with_errors(limit: f64, proposed: f64, error_pressure: f64) -> f64 {
    let proposed = if error_pressure >= BACKGROUND_ERRORS {
        proposed.min(limit)
    } else {
        proposed
    };
    proposed * (1.0 - error_pressure / 2.0)
}

/// Any of the algorithms, chosen at run time without a box.
#[derive(Clone, Debug)]
pub enum AnyAlgorithm {
    /// See [`Vegas`].
    Vegas(Vegas),
    /// See [`Gradient2`].
    Gradient2(Gradient2),
    /// See [`Aimd`].
    Aimd(Aimd),
    /// See [`Gateway`].
    Gateway(Gateway),
    /// See [`Fixed`].
    Fixed(Fixed),
}

impl AnyAlgorithm {
    /// The algorithm `cfg` selects, with `cfg`'s parameters.
    pub fn from_config(cfg: &ControlConfig) -> Self {
        match cfg.algorithm {
            Algorithm::Vegas => AnyAlgorithm::Vegas(Vegas),
            Algorithm::Gradient2 => AnyAlgorithm::Gradient2(cfg.gradient2),
            Algorithm::Aimd => AnyAlgorithm::Aimd(Aimd),
            Algorithm::Gateway => AnyAlgorithm::Gateway(cfg.gateway),
            Algorithm::Fixed => AnyAlgorithm::Fixed(cfg.fixed),
        }
    }
}

impl LimitAlgorithm for AnyAlgorithm {
    fn next_limit(&mut self, limit: f64, verdict: &Verdict) -> f64 {
        match self {
            AnyAlgorithm::Vegas(a) => a.next_limit(limit, verdict),
            AnyAlgorithm::Gradient2(a) => a.next_limit(limit, verdict),
            AnyAlgorithm::Aimd(a) => a.next_limit(limit, verdict),
            AnyAlgorithm::Gateway(a) => a.next_limit(limit, verdict),
            AnyAlgorithm::Fixed(a) => a.next_limit(limit, verdict),
        }
    }

    fn bounds(&self, configured: Limits) -> Limits {
        match self {
            AnyAlgorithm::Vegas(a) => a.bounds(configured),
            AnyAlgorithm::Gradient2(a) => a.bounds(configured),
            AnyAlgorithm::Aimd(a) => a.bounds(configured),
            AnyAlgorithm::Gateway(a) => a.bounds(configured),
            AnyAlgorithm::Fixed(a) => a.bounds(configured),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_errors_shrink_a_little_without_vetoing_growth() {
        assert!((with_errors(100.0, 110.0, 0.005) - 110.0 * 0.9975).abs() < 1e-9);
        assert_eq!(with_errors(100.0, 110.0, 0.2), 90.0);
        assert_eq!(with_errors(100.0, 80.0, 1.0), 40.0);
    }
}
