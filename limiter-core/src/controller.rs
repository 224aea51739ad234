//! One destination's control loop: windows -> p90 -> median-of-5 -> smoothing -> baseline ->
//! algorithm -> growth guards -> bounds.

use crate::algorithms::{AnyAlgorithm, LatencyView, LimitAlgorithm, Verdict};
use crate::baseline::Baseline;
use crate::config::{ControlConfig, Limits};
use crate::evidence::EvidencePoint;
use crate::filter::LatencyFilter;
use crate::guard::GrowthGuard;
use crate::slow_start::SlowStart;
use crate::window::{WindowSummary, Windows};
use crate::{Controller, Outcome};

/// The smoothed latency counts as settled when within this share of the median.
const SETTLED: f64 = 0.1;
/// A window's p90 this far above the baseline is elevated.
const ELEVATED: f64 = 1.25;

/// A destination's controller, generic over its algorithm; [`DestinationController::new`]
/// picks the algorithm from the configuration.
#[derive(Clone, Debug)]
pub struct DestinationController<A = AnyAlgorithm> {
    algorithm: A,
    limits: Limits,
    min_samples: u32,
    limit: f64,
    published: u32,
    windows: Windows,
    filter: LatencyFilter,
    baseline: Baseline,
    guard: GrowthGuard,
    slow_start: SlowStart,
    /// What the upstream was last shown to serve at its own, slower service time.
    capacity: Option<f64>,
}

impl DestinationController<AnyAlgorithm> {
    /// The controller `cfg` describes, its first window opening at `now_ns`.
    pub fn new(cfg: &ControlConfig, now_ns: u64) -> Self {
        DestinationController::with_algorithm(AnyAlgorithm::from_config(cfg), cfg, now_ns)
    }
}

impl<A: LimitAlgorithm> DestinationController<A> {
    /// A controller running `algorithm` with the bounds and pipeline of `cfg`.
    pub fn with_algorithm(algorithm: A, cfg: &ControlConfig, now_ns: u64) -> Self {
        let limits = cfg.effective_limits();
        DestinationController {
            algorithm,
            limits,
            min_samples: cfg.pipeline.min_samples,
            limit: f64::from(limits.initial),
            published: limits.initial,
            windows: Windows::new(cfg.pipeline, now_ns),
            filter: LatencyFilter::new(cfg.pipeline.latency_smoothing),
            baseline: Baseline::default(),
            guard: GrowthGuard::new(cfg.pipeline.app_limited_multiple, f64::from(limits.initial)),
            slow_start: SlowStart::default(),
            capacity: None,
        }
    }

    fn latency_view(&mut self, window: &WindowSummary) -> Option<LatencyView> {
        let p90 = window.p90_ns?.max(1.0);
        let smoothed = self.filter.push(p90);
        let testifies = window.samples > 0 && window.dispersed;
        let point = testifies.then(|| EvidencePoint {
            inflight: window.mean_inflight,
            throughput: window.throughput(),
            latency: p90,
            bound: window.sheds > 0,
        });
        // A p90 over fewer latencies than a full window, or a filter short of five windows,
        // is too noisy to be a minimum.
        let warming_up = self.filter.is_warming_up() || window.p90_weight < self.min_samples;
        let sustained = self.filter.recent_max().unwrap_or(smoothed);
        let mut baseline = self.baseline.observe(
            smoothed,
            sustained,
            point,
            warming_up,
            self.filter.is_settled(SETTLED),
        );
        self.capacity = None;
        if !warming_up && p90 >= ELEVATED * baseline && self.baseline.latency_ignored_a_cut() {
            // Below our cut the latency stayed: the upstream is slow, not queueing us. Its
            // service time is the new baseline. What it serves at saturation times that
            // time is its capacity (Little's law), when the windows showed a saturation.
            self.capacity = self
                .baseline
                .plateau_throughput()
                .map(|throughput| throughput * window.mean_latency_ns / 1e9);
            self.baseline.follow(p90);
            baseline = p90;
        }
        Some(LatencyView {
            smoothed,
            latest: p90,
            baseline,
            self_queueing: self.baseline.shows_self_queueing(),
        })
    }

    /// Whether a client that closed `waited_ns` after its request started gave up: it waited
    /// longer than the destination normally takes (its baseline; before one is learned, its
    /// smoothed or newest latencies). A shorter wait is a goodbye, a last message that gets
    /// no reply. With no latency known at all, the close counts as giving up.
    fn gave_up(&self, waited_ns: u64) -> bool {
        let normal = self
            .baseline
            .value()
            .or(self.filter.smoothed())
            .or(self.windows.slowest().map(|l| l as f64));
        normal.is_none_or(|normal| waited_ns as f64 > normal)
    }

    fn close(&mut self, window: WindowSummary, now_ns: u64) {
        self.guard.observe(window.peak_inflight);
        let latency = self.latency_view(&window);
        let error_pressure = window.error_pressure();
        if latency.is_none() && error_pressure == 0.0 {
            return;
        }
        let verdict = Verdict {
            now_ns,
            error_pressure,
            latency,
        };
        let mut proposed = self.algorithm.next_limit(self.limit, &verdict);
        if self.baseline.value().is_none() {
            // Learning: growth is the slow start's, on demand actually refused; the
            // algorithm's would rest on a baseline that is not one yet.
            proposed = proposed.min(self.limit);
        }
        let mut allowed = self.guard.allow(self.limit, proposed, window.dispersed);
        if let Some(capacity) = self.capacity.take() {
            allowed = allowed.max(capacity);
        }
        if allowed.is_finite() {
            self.set_limit(allowed);
        }
    }

    fn set_limit(&mut self, limit: f64) {
        self.limit = limit.clamp(f64::from(self.limits.min), f64::from(self.limits.max));
        self.published = self.limit.round() as u32;
    }
}

impl<A: LimitAlgorithm> Controller for DestinationController<A> {
    fn on_sample(&mut self, now_ns: u64, latency_ns: u64, inflight: u32) {
        self.windows.record_sample(latency_ns, inflight);
        self.slow_start.on_sample(now_ns, latency_ns, inflight);
    }

    fn on_outcome(&mut self, _now_ns: u64, outcome: Outcome) {
        let outcome = match outcome {
            Outcome::GaveUp { waited_ns } if !self.gave_up(waited_ns) => return,
            Outcome::GaveUp { .. } => Outcome::Timeout,
            other => other,
        };
        if outcome == Outcome::Shed {
            self.slow_start.on_shed();
        }
        self.windows.record_outcome(outcome);
    }

    fn update(&mut self, now_ns: u64) -> u32 {
        if let Some(window) = self.windows.close_if_due(now_ns) {
            self.close(window, now_ns);
        }
        if self.baseline.value().is_some() {
            self.slow_start.finish();
        }
        if let Some(learned) = self.slow_start.next_limit(now_ns, self.limit) {
            self.set_limit(learned);
        }
        self.published
    }

    fn limit(&self) -> u32 {
        self.published
    }

    fn baseline_ns(&self) -> Option<u64> {
        self.baseline.value().map(|b| b as u64)
    }

    fn p90_ns(&self) -> Option<u64> {
        self.filter.smoothed().map(|s| s as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Algorithm;

    const MS: u64 = 1_000_000;

    /// A second of 50 ms answers, then closes while awaiting a response after `waited_ns`;
    /// returns the limit after the window closes.
    fn closes_after(waited_ns: u64) -> u32 {
        let cfg = ControlConfig::new(Algorithm::Vegas);
        let mut c = DestinationController::new(&cfg, 0);
        for i in 0..60 {
            c.on_sample(i * 10 * MS, (50 + i % 5) * MS, 10);
            c.on_outcome(i * 10 * MS, Outcome::GaveUp { waited_ns });
        }
        c.update(2_000 * MS)
    }

    #[test]
    fn a_goodbye_is_not_a_timeout_and_a_long_wait_is() {
        assert_eq!(closes_after(50_000), 20, "goodbyes leave the limit alone");
        assert!(
            closes_after(2_000 * MS) < 20,
            "giving up after 2 s lowers it"
        );
    }
}
