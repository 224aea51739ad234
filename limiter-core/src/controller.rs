//! One destination's control loop: windows -> p90 -> median-of-5 -> smoothing -> baseline ->
//! algorithm -> growth guards -> bounds.

use crate::algorithms::{AnyAlgorithm, LatencyView, LimitAlgorithm, Verdict};
use crate::baseline::Baseline;
use crate::config::{ControlConfig, Limits};
use crate::evidence::EvidencePoint;
use crate::filter::LatencyFilter;
use crate::guard::GrowthGuard;
use crate::window::{WindowSummary, Windows};
use crate::{Controller, Outcome};

/// The smoothed latency counts as settled when within this share of the median.
const SETTLED: f64 = 0.1;

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
        });
        // A p90 over fewer latencies than a full window, or a filter short of five windows,
        // is too noisy to be a minimum.
        let warming_up = self.filter.is_warming_up() || window.p90_weight < self.min_samples;
        let sustained = self.filter.recent_max().unwrap_or(smoothed);
        let baseline = self.baseline.observe(
            smoothed,
            sustained,
            point,
            warming_up,
            self.filter.is_settled(SETTLED),
        );
        Some(LatencyView {
            smoothed,
            latest: p90,
            baseline,
            self_queueing: self.baseline.shows_self_queueing(),
        })
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
        let proposed = self.algorithm.next_limit(self.limit, &verdict);
        let allowed = self.guard.allow(self.limit, proposed, window.dispersed);
        if allowed.is_finite() {
            self.limit = allowed.clamp(f64::from(self.limits.min), f64::from(self.limits.max));
            self.published = self.limit.round() as u32;
        }
    }
}

impl<A: LimitAlgorithm> Controller for DestinationController<A> {
    fn on_sample(&mut self, _now_ns: u64, latency_ns: u64, inflight: u32) {
        self.windows.record_sample(latency_ns, inflight);
    }

    fn on_outcome(&mut self, _now_ns: u64, outcome: Outcome) {
        self.windows.record_outcome(outcome);
    }

    fn update(&mut self, now_ns: u64) -> u32 {
        if let Some(window) = self.windows.close_if_due(now_ns) {
            self.close(window, now_ns);
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

    /// An empty window closes without a verdict: it only ages the guard's peaks, which
    /// changes nothing once they are all zero.
    fn is_quiet(&self) -> bool {
        self.windows.is_empty() && self.guard.remembers_no_peak()
    }
}
