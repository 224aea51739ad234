//! Growth guards shared by every algorithm.
//!
//! App-limited: when in-flight stays well below the limit, the limit has not been tested, so it
//! may not grow past a multiple of recent peak in-flight (or the initial limit, which is a
//! configured, sane value to come back to). It is never pushed down by this cap: a quiet
//! destination keeps its limit, and a slowdown lowers it through the algorithm as usual.
//!
//! No evidence of health: a window whose latencies are all identical is a timer talking (a
//! stable timeout, a fixed delay), not an upstream serving; it may not grow the limit.

/// Windows over which the peak in-flight is remembered (the median filter's span).
const PEAK_WINDOWS: usize = 5;

/// The peak in-flight of each of the last `N` windows.
#[derive(Clone, Copy, Debug)]
pub struct RecentPeaks<const N: usize = PEAK_WINDOWS> {
    peaks: [u32; N],
    next: usize,
}

impl<const N: usize> Default for RecentPeaks<N> {
    fn default() -> Self {
        RecentPeaks {
            peaks: [0; N],
            next: 0,
        }
    }
}

impl<const N: usize> RecentPeaks<N> {
    /// Remembers one window's peak, forgetting the oldest.
    pub fn observe(&mut self, peak_inflight: u32) {
        self.peaks[self.next] = peak_inflight;
        self.next = (self.next + 1) % N;
    }

    /// The highest peak remembered, 0 if none.
    pub fn max(&self) -> u32 {
        self.peaks.iter().copied().max().unwrap_or(0)
    }
}

/// Caps growth to what recent traffic has tested.
#[derive(Clone, Copy, Debug)]
pub struct GrowthGuard {
    multiple: f64,
    floor: f64,
    peaks: RecentPeaks,
}

impl GrowthGuard {
    /// Growth allowed up to `multiple` x peak in-flight, and always up to `floor`.
    pub fn new(multiple: f64, floor: f64) -> Self {
        GrowthGuard {
            multiple: multiple.max(1.0),
            floor,
            peaks: RecentPeaks::default(),
        }
    }

    /// Remembers one window's peak in-flight.
    pub fn observe(&mut self, peak_inflight: u32) {
        self.peaks.observe(peak_inflight);
    }

    /// Whether every remembered window had nothing in flight.
    pub fn remembers_no_peak(&self) -> bool {
        self.peaks.max() == 0
    }

    /// The highest limit recent traffic justifies.
    pub fn ceiling(&self) -> f64 {
        (self.multiple * f64::from(self.peaks.max())).max(self.floor)
    }

    /// `proposed`, with any growth beyond `limit` cut to what the evidence allows.
    pub fn allow(&self, limit: f64, proposed: f64, healthy_evidence: bool) -> f64 {
        if proposed <= limit {
            proposed
        } else if !healthy_evidence {
            limit
        } else {
            proposed.min(self.ceiling().max(limit))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_stops_at_twice_the_recent_peak() {
        let mut g = GrowthGuard::new(2.0, 20.0);
        g.observe(30);
        assert_eq!(g.allow(50.0, 80.0, true), 60.0);
        assert_eq!(g.allow(70.0, 80.0, true), 70.0, "never pushed down");
        assert_eq!(g.allow(70.0, 40.0, true), 40.0, "decreases pass");
    }

    #[test]
    fn the_initial_limit_is_always_reachable() {
        let mut g = GrowthGuard::new(2.0, 20.0);
        g.observe(1);
        assert_eq!(g.allow(12.0, 30.0, true), 20.0);
    }

    #[test]
    fn peaks_expire_after_five_windows() {
        let mut g = GrowthGuard::new(2.0, 20.0);
        g.observe(100);
        for _ in 0..4 {
            g.observe(1);
        }
        assert_eq!(g.ceiling(), 200.0);
        g.observe(1);
        assert_eq!(g.ceiling(), 20.0);
    }

    #[test]
    fn five_windows_without_traffic_leave_no_peak() {
        let mut g = GrowthGuard::new(2.0, 20.0);
        assert!(g.remembers_no_peak());
        g.observe(3);
        for _ in 0..4 {
            g.observe(0);
            assert!(!g.remembers_no_peak());
        }
        g.observe(0);
        assert!(g.remembers_no_peak());
    }

    #[test]
    fn identical_latencies_allow_no_growth() {
        let g = GrowthGuard::new(2.0, 20.0);
        assert_eq!(g.allow(10.0, 15.0, false), 10.0);
        assert_eq!(g.allow(10.0, 5.0, false), 5.0);
    }
}
