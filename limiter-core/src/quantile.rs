//! Quantile estimation in constant memory.
//!
//! A window's p90 comes from two estimators (the choice against P-square and its error figures
//! are in `docs/control.md`, the comparison in `tests/quantile_comparison.rs`):
//! - [`SampleRing`], the last [`RING`] latencies, gives the exact quantile of any window that
//!   fits in it, and of the last `min_samples` latencies when traffic is too thin to fill a
//!   window (they then span several windows);
//! - [`LogHistogram`] follows windows too large for the ring in O(1) per sample, with a
//!   relative error bounded by its bucket width whatever the distribution.

/// Latencies kept by [`SampleRing`].
pub const RING: usize = 64;

/// The `p` quantile of `values` by linear interpolation between closest ranks
/// (Hyndman & Fan type 7, the definition of numpy and R's default). Reorders `values`.
pub fn exact_quantile(values: &mut [f64], p: f64) -> Option<f64> {
    let last = values.len().checked_sub(1)?;
    let rank = p.clamp(0.0, 1.0) * last as f64;
    let lo = rank.floor() as usize;
    let (_, below, above) = values.select_nth_unstable_by(lo, f64::total_cmp);
    let below = *below;
    let frac = rank - lo as f64;
    if frac == 0.0 {
        return Some(below);
    }
    let next = above
        .iter()
        .copied()
        .min_by(f64::total_cmp)
        .unwrap_or(below);
    Some(below + frac * (next - below))
}

/// The last [`RING`] latencies, in arrival order.
#[derive(Clone, Debug)]
pub struct SampleRing {
    values: [f32; RING],
    /// Latencies ever pushed: the ring holds `min(pushed, RING)` of them.
    pushed: u64,
}

impl Default for SampleRing {
    fn default() -> Self {
        SampleRing {
            values: [0.0; RING],
            pushed: 0,
        }
    }
}

impl SampleRing {
    /// Records one latency. `f32` keeps 7 significant digits, plenty for a latency.
    pub fn push(&mut self, latency: f64) {
        self.values[(self.pushed % RING as u64) as usize] = latency as f32;
        self.pushed += 1;
    }

    /// How many latencies the ring currently holds.
    pub fn len(&self) -> usize {
        self.pushed.min(RING as u64) as usize
    }

    /// Whether nothing was ever pushed.
    pub fn is_empty(&self) -> bool {
        self.pushed == 0
    }

    /// The last `count` latencies (fewer if the ring holds fewer), oldest first.
    pub fn last(&self, count: usize) -> impl Iterator<Item = f64> + '_ {
        let count = count.min(self.len());
        let end = (self.pushed % RING as u64) as usize + RING;
        (end - count..end).map(move |i| f64::from(self.values[i % RING]))
    }

    /// The exact `p` quantile of the last `count` latencies (fewer if the ring holds fewer).
    pub fn quantile_of_last(&self, count: usize, p: f64) -> Option<f64> {
        let mut scratch = [0.0f64; RING];
        let mut held = 0;
        for (slot, latency) in scratch.iter_mut().zip(self.last(count)) {
            *slot = latency;
            held += 1;
        }
        exact_quantile(&mut scratch[..held], p)
    }
}

/// Sub-buckets per power of two: adjacent bucket bounds differ by 2^(1/16), about 4.4 %.
const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Latencies below 2^10 ns (1 us) share the first bucket...
const LOW_EXP: u32 = 10;
/// ...and latencies from 2^42 ns (73 min) up share the last one.
const OCTAVES: usize = 32;
const BUCKETS: usize = OCTAVES * SUB;

/// Counts of latencies in logarithmic buckets: any quantile within half a bucket (2.2 %),
/// whatever the shape of the distribution and the order the samples came in.
#[derive(Clone, Debug)]
pub struct LogHistogram {
    counts: [u32; BUCKETS],
    total: u32,
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram {
            counts: [0; BUCKETS],
            total: 0,
        }
    }
}

impl LogHistogram {
    fn bucket(latency_ns: u64) -> usize {
        let v = latency_ns.max(1 << LOW_EXP);
        let exp = 63 - v.leading_zeros();
        let sub = (v >> (exp - SUB_BITS)) as usize & (SUB - 1);
        ((exp - LOW_EXP) as usize * SUB + sub).min(BUCKETS - 1)
    }

    /// The lower bound of bucket `index`, in nanoseconds.
    fn lower_bound(index: usize) -> f64 {
        let exp = (index / SUB) as i32 + LOW_EXP as i32;
        let sub = (index % SUB) as f64;
        (1.0 + sub / SUB as f64) * 2f64.powi(exp)
    }

    /// Counts one latency.
    pub fn push(&mut self, latency_ns: u64) {
        let bucket = &mut self.counts[Self::bucket(latency_ns)];
        *bucket = bucket.saturating_add(1);
        self.total = self.total.saturating_add(1);
    }

    /// Whether it counts no latency.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Forgets every latency.
    pub fn reset(&mut self) {
        self.counts = [0; BUCKETS];
        self.total = 0;
    }

    /// How many latencies lie in buckets wholly at or above `latency_ns` (the bucket that
    /// holds it is left out: the count errs low by at most one bucket's width).
    pub fn count_from(&self, latency_ns: f64) -> u32 {
        let first = Self::bucket(latency_ns as u64) + 1;
        self.counts.iter().skip(first).sum()
    }

    /// The `p` quantile, interpolated by rank inside its bucket.
    pub fn quantile(&self, p: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = p.clamp(0.0, 1.0) * f64::from(self.total - 1);
        let mut below = 0.0;
        for (index, &count) in self.counts.iter().enumerate() {
            let count = f64::from(count);
            if count > 0.0 && rank < below + count {
                let (lo, hi) = (Self::lower_bound(index), Self::lower_bound(index + 1));
                let within = (rank - below + 0.5) / count;
                return Some(lo + within * (hi - lo));
            }
            below += count;
        }
        Some(Self::lower_bound(BUCKETS - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_from_a_latency_leaves_out_its_own_bucket() {
        let mut h = LogHistogram::default();
        for latency in [800_000_000, 810_000_000, 1_300_000_000, 1_600_000_000] {
            h.push(latency);
        }
        assert_eq!(h.count_from(1.0e9), 2);
        assert_eq!(h.count_from(1.3e9), 1, "1.3 s shares the bound's bucket");
        assert_eq!(h.count_from(2.0e9), 0);
    }

    #[test]
    fn exact_quantile_interpolates_between_ranks() {
        let mut v = [4.0, 1.0, 3.0, 2.0, 5.0];
        assert_eq!(exact_quantile(&mut v, 0.5), Some(3.0));
        assert_eq!(exact_quantile(&mut v, 0.9), Some(4.6));
        assert_eq!(exact_quantile(&mut [], 0.9), None);
        assert_eq!(exact_quantile(&mut [7.0], 0.9), Some(7.0));
    }

    #[test]
    fn ring_keeps_only_the_latest_samples() {
        let mut ring = SampleRing::default();
        for i in 0..200 {
            ring.push(f64::from(i));
        }
        assert_eq!(ring.len(), RING);
        assert_eq!(ring.quantile_of_last(1, 0.9), Some(199.0));
        assert_eq!(ring.quantile_of_last(11, 0.0), Some(189.0));
        assert_eq!(
            ring.quantile_of_last(1_000, 0.0),
            Some(f64::from(200 - RING as i32))
        );
    }

    #[test]
    fn histogram_quantiles_stay_within_half_a_bucket() {
        let mut h = LogHistogram::default();
        assert_eq!(h.quantile(0.9), None);
        for i in 1..=1_000u64 {
            h.push(i * 1_000_000);
        }
        let p90 = h.quantile(0.9).unwrap();
        assert!((p90 / 900e6 - 1.0).abs() < 0.022, "{p90}");
        h.reset();
        assert_eq!(h.quantile(0.9), None);
    }

    #[test]
    fn histogram_clamps_extreme_latencies_into_its_range() {
        let mut h = LogHistogram::default();
        h.push(0);
        h.push(u64::MAX);
        let low = h.quantile(0.0).unwrap();
        let high = h.quantile(1.0).unwrap();
        assert!(low > 0.0 && low < 2_000.0, "{low}");
        assert!(high.is_finite() && high > 4e12, "{high}");
    }
}
