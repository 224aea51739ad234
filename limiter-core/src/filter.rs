//! Smooths the per-window p90 into one latency: median of the last five windows (a single odd
//! window cannot move it), then exponential smoothing of rises (the median's steps up become a
//! slope). Falls are taken as soon as the median shows them: three windows of five already
//! agree that the latency is lower, and an average decaying from a twentyfold slowdown would
//! hold a phantom queue for a dozen windows after the upstream recovered.

const MEDIAN_OF: usize = 5;

/// Median-of-five followed by an exponentially weighted moving average that never stays above
/// the median.
#[derive(Clone, Debug)]
pub struct LatencyFilter {
    recent: [f64; MEDIAN_OF],
    len: usize,
    next: usize,
    smoothing: f64,
    smoothed: Option<f64>,
}

impl LatencyFilter {
    /// An empty filter; `smoothing` is the weight of each new median in the average.
    pub fn new(smoothing: f64) -> Self {
        LatencyFilter {
            recent: [0.0; MEDIAN_OF],
            len: 0,
            next: 0,
            smoothing: smoothing.clamp(f64::MIN_POSITIVE, 1.0),
            smoothed: None,
        }
    }

    /// The median of the windows held (the upper one of an even count).
    pub fn median(&self) -> Option<f64> {
        if self.len == 0 {
            return None;
        }
        let mut sorted = self.recent;
        let held = &mut sorted[..self.len];
        held.sort_unstable_by(f64::total_cmp);
        Some(held[self.len / 2])
    }

    /// The highest p90 of the windows held: a latency the upstream has kept to for five
    /// windows running, as opposed to one it touched once by chance.
    pub fn recent_max(&self) -> Option<f64> {
        self.recent[..self.len].iter().copied().reduce(f64::max)
    }

    /// Adds one window's p90 and returns the smoothed latency: a step towards a higher median,
    /// the median itself when it is lower.
    pub fn push(&mut self, p90: f64) -> f64 {
        self.recent[self.next] = p90;
        self.next = (self.next + 1) % MEDIAN_OF;
        self.len = (self.len + 1).min(MEDIAN_OF);
        let median = self.median().unwrap_or(p90);
        let smoothed = match self.smoothed {
            None => median,
            Some(previous) => (previous + self.smoothing * (median - previous)).min(median),
        };
        self.smoothed = Some(smoothed);
        smoothed
    }

    /// Whether fewer than five windows have been seen.
    pub fn is_warming_up(&self) -> bool {
        self.len < MEDIAN_OF
    }

    /// The smoothed latency, once a window has been seen.
    pub fn smoothed(&self) -> Option<f64> {
        self.smoothed
    }

    /// Whether the smoothed latency has caught up with the median within `relative`: the
    /// latency is no longer moving.
    pub fn is_settled(&self, relative: f64) -> bool {
        match (self.smoothed, self.median()) {
            (Some(s), Some(m)) if self.len == MEDIAN_OF => (s - m).abs() <= relative * m,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_outlier_window_does_not_move_the_latency() {
        let mut f = LatencyFilter::new(1.0 / 3.0);
        for p90 in [10.0, 10.0, 10.0, 1_000.0, 10.0] {
            assert_eq!(f.push(p90), 10.0);
        }
    }

    #[test]
    fn a_fall_shows_as_soon_as_the_median_has_it() {
        let mut f = LatencyFilter::new(1.0 / 3.0);
        for _ in 0..10 {
            f.push(100.0);
        }
        assert_eq!(f.push(5.0), 100.0);
        assert_eq!(f.push(5.0), 100.0);
        assert_eq!(f.push(5.0), 5.0);
        assert!(f.is_settled(0.01));
    }

    #[test]
    fn recent_max_spans_the_last_five_windows() {
        let mut f = LatencyFilter::new(0.5);
        assert_eq!(f.recent_max(), None);
        for p90 in [30.0, 10.0, 10.0, 10.0, 10.0] {
            f.push(p90);
        }
        assert_eq!(f.recent_max(), Some(30.0));
        f.push(10.0);
        assert_eq!(f.recent_max(), Some(10.0));
    }

    #[test]
    fn a_step_shows_after_three_windows_and_settles() {
        let mut f = LatencyFilter::new(0.5);
        for _ in 0..5 {
            f.push(10.0);
        }
        assert!(f.is_settled(0.01));
        assert_eq!(f.push(20.0), 10.0);
        assert_eq!(f.push(20.0), 10.0);
        assert_eq!(f.push(20.0), 15.0);
        assert!(!f.is_settled(0.1));
        for _ in 0..10 {
            f.push(20.0);
        }
        assert!(f.is_settled(0.01));
        assert!((f.smoothed().unwrap() - 20.0).abs() < 0.01);
    }
}
