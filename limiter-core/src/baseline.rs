//! The no-load latency: a running minimum of the sustained latency that heals upward only on
//! evidence.
//!
//! Downward it follows a lower latency once the upstream has kept to it for five windows
//! running (the highest p90 of the last five windows): a lower latency is never a loaded one,
//! and requiring five windows keeps the minimum from settling on the low tail of the noise,
//! which would read as a standing queue at every later window. While warming up it is that
//! sustained latency itself, not yet a minimum, and it is not published. Upward it moves only
//! when the
//! correlation window shows the latency settled at a new level that our own concurrency did
//! not cause ([`Evidence::shows_external_shift`]), and then by at most [`MAX_HEAL_STEP`] per
//! move, each move needing fresh evidence. A loaded latency follows in-flight, so it cannot
//! pass that test and never becomes the baseline.

use crate::evidence::{Evidence, EvidencePoint, Saturation};

/// The most the baseline may rise in one move: a doubling heals a deploy or a failover in one
/// step, while a thirty-fold incident needs five separate rounds of evidence.
pub const MAX_HEAL_STEP: f64 = 2.0;
/// A window whose p90 is at least this multiple of the baseline is elevated; under it, the
/// window is in the baseline's band (healthy).
pub(crate) const ELEVATED: f64 = 1.25;
/// Windows after a follow in which a lower p90 is taken at once: the window followed may
/// still have held the queue our earlier in-flight built.
const AFTER_FOLLOW_WINDOWS: u32 = 5;
/// The least share of the followed latency a lower p90 taken at once after a follow can be:
/// a queue that halves the p90 as it drains is as long as the workers are many, and a follow
/// takes the window that queued least. Lower is another population (a mix's window short of
/// its large requests) or the upstream recovering, which `recovery.rs` handles.
const DRAINED: f64 = 0.5;
/// Windows whose mean-to-p90 ratio the no-load mean averages, the older ones fading.
const SHAPE_WINDOWS: f32 = 16.0;

/// The no-load latency and the evidence that may move it up.
#[derive(Clone, Debug, Default)]
pub struct Baseline {
    /// 0 until a latency is seen (none is under a nanosecond): a plain `f64`, not an
    /// `Option`, which keeps a controller under 4 KiB with the shape below.
    value: f64,
    warming_up: bool,
    evidence: Evidence,
    /// Windows left in which a lower p90 becomes the baseline at once.
    after_follow: u32,
    /// The no-load mean latency over the no-load p90 (the service time's shape), averaged
    /// over [`Baseline::learn_shape`]'s windows, and how many they are (at most
    /// [`SHAPE_WINDOWS`]); 0 windows, none yet.
    mean_share: f32,
    shape_windows: f32,
}

impl Baseline {
    /// The no-load latency, once it has been learned (warm-up is over).
    pub fn value(&self) -> Option<f64> {
        (self.value > 0.0 && !self.warming_up).then_some(self.value)
    }

    /// The no-load mean latency: the baseline times the mean-to-p90 ratio of windows that
    /// queued nothing, once both are known.
    pub fn mean(&self) -> Option<f64> {
        let share = f64::from(self.mean_share);
        self.value()
            .filter(|_| self.shape_windows > 0.0)
            .map(|b| b * share)
    }

    /// Takes in a window's mean latency and p90 when it held no queue of ours: while warming
    /// up (slow start ends a level that queued and learns afresh), or a window the limit
    /// did not bind with its p90 in the baseline's band. A wait adds to the mean and the p90
    /// alike, so their ratio with no queue is the service time's own; it stays when the
    /// latency shifts as a whole.
    pub fn learn_shape(&mut self, mean: f64, p90: f64, bound: bool) {
        let unqueued =
            self.warming_up || (!bound && self.value().is_some_and(|b| p90 < ELEVATED * b));
        if !unqueued || p90 <= 0.0 {
            return;
        }
        self.shape_windows = (self.shape_windows + 1.0).min(SHAPE_WINDOWS);
        self.mean_share += ((mean / p90) as f32 - self.mean_share) / self.shape_windows;
    }

    /// The upstream's saturation, when the newest windows show one; `newest` is the newest
    /// window's mean latency and p90, for when no window's mean is known.
    pub fn saturation(&self, baseline: f64, newest: (f64, f64)) -> Option<(Saturation, f64)> {
        self.evidence.saturation(baseline, newest)
    }

    /// Whether trims of in-flight over the newest windows left the mean latency where it was.
    pub fn mean_ignored_a_trim(&self) -> bool {
        self.evidence.mean_ignored_a_trim()
    }

    /// Whether lowering in-flight in the newest windows left the latency where it was.
    pub fn latency_ignored_a_cut(&self) -> bool {
        self.evidence.latency_ignored_a_cut()
    }

    /// Whether lowering in-flight in the newest windows lowered the throughput too.
    pub fn throughput_followed_a_cut(&self) -> bool {
        self.evidence.throughput_followed_a_cut()
    }

    /// Adds a window's evidence without a latency of its own to observe.
    pub fn testify(&mut self, point: EvidencePoint) {
        self.evidence.push(point);
    }

    /// Takes `latency` as the no-load latency at once: the upstream's own service time, as
    /// lowering our concurrency showed. The evidence is spent.
    pub fn follow(&mut self, latency: f64) {
        self.value = latency;
        self.evidence.clear();
        self.after_follow = AFTER_FOLLOW_WINDOWS;
    }

    /// Whether the newest windows show our own concurrency queueing at the upstream.
    pub fn shows_self_queueing(&self) -> bool {
        self.evidence.shows_self_queueing()
    }

    /// Takes the newest window's mean latency and p90, the lowest latency the last five
    /// windows all kept to (`sustained`), the window's evidence (absent when the window cannot
    /// testify: no own samples, or identical latencies), whether the latency is still too
    /// noisy to be a minimum and whether it has stopped moving; returns the baseline.
    ///
    /// While warming up (the filter holds fewer than five windows, the p90 rests on fewer
    /// latencies than a full window, or it is still rising) a lucky value would stay the
    /// baseline for good, so the baseline is the sustained latency rather than its minimum.
    /// Not the smoothed latency: while traffic ramps up, the first windows miss the requests
    /// still out when they close, the slow ones first, so the smoothed latency lags from
    /// below; a baseline taken from it starts a few percent low and reads as a standing queue
    /// ever after. A heal moves to the sustained latency too, for the same reason: after the
    /// cuts that preceded it, the smoothed latency follows the median down and sits under it.
    pub fn observe(
        &mut self,
        newest: (f64, f64),
        sustained: f64,
        point: Option<EvidencePoint>,
        warming_up: bool,
        settled: bool,
    ) -> f64 {
        let mut baseline = if self.value > 0.0 && !warming_up {
            self.value.min(sustained)
        } else {
            sustained
        };
        if self.after_follow > 0 {
            self.after_follow -= 1;
            // A p90 under its window's mean leaves out a tenth of answers far slower than it
            // (a mix's window that happened to hold few large requests): it describes no
            // queue draining.
            let (mean, p90) = newest;
            if mean <= p90 && p90 >= DRAINED * self.value {
                baseline = baseline.min(p90);
            }
        }
        self.warming_up = warming_up;
        if let Some(point) = point {
            self.evidence.push(point);
        }
        if settled && self.evidence.shows_external_shift(baseline) {
            baseline = sustained.min(baseline * MAX_HEAL_STEP);
            self.evidence.clear();
        }
        self.value = baseline;
        baseline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(inflight: f64, latency: f64) -> Option<EvidencePoint> {
        Some(EvidencePoint {
            inflight,
            throughput: inflight / latency,
            latency,
            mean_latency: Some(latency),
            bound: false,
        })
    }

    #[test]
    fn follows_lower_latencies_at_once() {
        let mut b = Baseline::default();
        assert_eq!(
            b.observe((10.0, 10.0), 10.0, point(5.0, 10.0), false, false),
            10.0
        );
        assert_eq!(
            b.observe((8.0, 8.0), 8.0, point(5.0, 8.0), false, false),
            8.0
        );
        assert_eq!(
            b.observe((12.0, 12.0), 12.0, point(5.0, 12.0), false, true),
            8.0
        );
    }

    #[test]
    fn is_the_sustained_latency_while_warming_up_and_unpublished_until_then() {
        let mut b = Baseline::default();
        assert_eq!(b.observe((7.0, 7.0), 8.0, None, true, false), 8.0);
        assert_eq!(b.observe((9.0, 9.0), 10.0, None, true, false), 10.0);
        assert_eq!(b.value(), None);
        assert_eq!(b.observe((12.0, 12.0), 12.0, None, false, false), 10.0);
        assert_eq!(b.value(), Some(10.0));
    }

    #[test]
    fn heals_by_at_most_a_doubling_and_then_needs_fresh_evidence() {
        let mut b = Baseline::default();
        b.observe((1.0, 1.0), 1.0, point(100.0, 1.0), false, true);
        let mut baselines = vec![1.0];
        for i in 0..40 {
            let inflight = 100.0 - 2.0 * f64::from(i);
            baselines.push(b.observe((10.0, 10.0), 10.0, point(inflight, 10.0), false, true));
        }
        baselines.dedup();
        assert!(baselines.len() >= 3, "{baselines:?}");
        assert_eq!(baselines[1], 2.0);
        assert!(baselines.windows(2).all(|w| w[1] == w[0] * MAX_HEAL_STEP));
    }

    #[test]
    fn heals_to_the_latency_the_last_five_windows_all_kept_to() {
        let mut b = Baseline::default();
        b.observe((1.0, 1.0), 1.0, point(100.0, 1.0), false, true);
        let healed = (0..40)
            .map(|i| {
                b.observe(
                    (1.5, 1.5),
                    1.8,
                    point(100.0 - 2.0 * f64::from(i), 1.6),
                    false,
                    true,
                )
            })
            .find(|&baseline| baseline > 1.0);
        assert_eq!(healed, Some(1.8));
    }

    #[test]
    fn takes_a_lower_window_at_once_for_a_while_after_following() {
        let mut b = Baseline::default();
        b.observe((1.0, 1.0), 1.0, point(10.0, 1.0), false, true);
        b.follow(20.0);
        assert_eq!(
            b.observe((16.0, 15.0), 20.0, point(10.0, 15.0), false, true),
            20.0,
            "a p90 under its window's mean does not describe it"
        );
        assert_eq!(
            b.observe((9.0, 9.0), 20.0, point(10.0, 9.0), false, true),
            20.0,
            "under half of it: no queue drains so far"
        );
        assert_eq!(
            b.observe((15.0, 15.0), 20.0, point(10.0, 15.0), false, true),
            15.0
        );
        for _ in 3..AFTER_FOLLOW_WINDOWS {
            b.observe((16.0, 16.0), 20.0, point(10.0, 16.0), false, true);
        }
        assert_eq!(
            b.observe((12.0, 12.0), 20.0, point(10.0, 12.0), false, true),
            15.0
        );
    }

    #[test]
    fn the_no_load_mean_is_the_baseline_times_the_shape_of_windows_that_queued_nothing() {
        let mut b = Baseline::default();
        b.observe((10.0, 10.0), 10.0, point(10.0, 10.0), true, false);
        b.learn_shape(5.0, 10.0, true);
        assert_eq!(b.mean(), None, "no baseline yet");
        b.observe((10.0, 10.0), 10.0, point(10.0, 10.0), false, false);
        b.learn_shape(7.5, 10.0, false);
        assert_eq!(b.mean(), Some(6.25));
        // Bound, or out of the band: a queue of ours may be in it.
        b.learn_shape(9.0, 10.0, true);
        b.learn_shape(13.0, 13.0, false);
        assert_eq!(b.mean(), Some(6.25));
        // The shape stays when the whole latency shifts.
        b.follow(20.0);
        assert_eq!(b.mean(), Some(12.5));
    }

    #[test]
    fn does_not_heal_while_the_latency_is_still_moving() {
        let mut b = Baseline::default();
        b.observe((1.0, 1.0), 1.0, point(100.0, 1.0), false, true);
        for i in 0..40 {
            let inflight = 100.0 - 2.0 * f64::from(i);
            assert_eq!(
                b.observe((3.0, 3.0), 3.0, point(inflight, 3.0), false, false),
                1.0
            );
        }
    }
}
