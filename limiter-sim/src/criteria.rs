//! Pass/fail criteria, and the checks several scenarios share.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::clock::Nanos;
use crate::trace::{quantile, Trace};

/// The range a measured value must fall in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    Above(f64),
    AtLeast(f64),
    AtMost(f64),
    Below(f64),
    Within(f64, f64),
}

impl Bound {
    pub fn admits(self, value: f64) -> bool {
        match self {
            Self::Above(lo) => value > lo,
            Self::AtLeast(lo) => value >= lo,
            Self::AtMost(hi) => value <= hi,
            Self::Below(hi) => value < hi,
            Self::Within(lo, hi) => (lo..=hi).contains(&value),
        }
    }
}

impl Bound {
    /// How far `value` falls outside the bound, relative to it (absolute against a bound
    /// of 0): 0 when admitted. Ranks failures of different criteria against each other.
    pub fn shortfall(self, value: f64) -> f64 {
        if self.admits(value) {
            return 0.0;
        }
        let off = |edge: f64| (value - edge).abs() / if edge == 0.0 { 1.0 } else { edge.abs() };
        match self {
            Self::Above(edge) | Self::AtLeast(edge) | Self::AtMost(edge) | Self::Below(edge) => {
                off(edge)
            }
            Self::Within(lo, hi) => off(lo).min(off(hi)),
        }
    }
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Above(lo) => write!(f, "> {}", figure(lo)),
            Self::AtLeast(lo) => write!(f, ">= {}", figure(lo)),
            Self::AtMost(hi) => write!(f, "<= {}", figure(hi)),
            Self::Below(hi) => write!(f, "< {}", figure(hi)),
            Self::Within(lo, hi) => write!(f, "{}..{}", figure(lo), figure(hi)),
        }
    }
}

impl Serialize for Bound {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A number as reports show it: at most two decimals, no trailing zeros.
pub fn figure(value: f64) -> String {
    let text = format!("{value:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// One measured value checked against its bound.
#[derive(Clone, Debug, Serialize)]
pub struct Criterion {
    pub name: String,
    pub value: f64,
    pub bound: Bound,
    pub pass: bool,
}

impl Criterion {
    pub fn new(name: impl Into<String>, value: f64, bound: Bound) -> Self {
        Self {
            name: name.into(),
            value,
            bound,
            pass: bound.admits(value),
        }
    }
}

/// `fraction` of `of` either side of it.
pub fn around(of: f64, fraction: f64) -> Bound {
    Bound::Within(of * (1.0 - fraction), of * (1.0 + fraction))
}

/// The limit settles at `median` and holds it, with at least 90 % of the throughput
/// `rate`: the 5th..95th percentiles within +-20 % of the median.
pub fn holds(
    label: &str,
    trace: &Trace,
    phase: (Nanos, Nanos),
    median_bound: Bound,
    rate: f64,
) -> Vec<Criterion> {
    let (from, to) = phase;
    let limits = trace.limits(from, to);
    let median = quantile(&limits, 0.5).unwrap_or(0.0);
    let p5 = quantile(&limits, 0.05).unwrap_or(0.0);
    let p95 = quantile(&limits, 0.95).unwrap_or(0.0);
    let spread = if median > 0.0 {
        100.0 * (median - p5).max(p95 - median) / median
    } else {
        f64::INFINITY
    };
    vec![
        Criterion::new(format!("{label}: median limit"), median, median_bound),
        Criterion::new(
            format!("{label}: limit p5..p95 from median (%)"),
            spread,
            Bound::AtMost(20.0),
        ),
        Criterion::new(
            format!("{label}: goodput (req/s)"),
            trace.goodput(from, to),
            Bound::AtLeast(0.9 * rate),
        ),
    ]
}

/// How much limit was taken away over `phase` at updates falling in seconds whose p90 was
/// at most `baseline_p90_s`: the sum of every decrease while the latency was at its
/// baseline, where a limiter has no reason to lower it.
pub fn falls_at_baseline(trace: &Trace, phase: (Nanos, Nanos), baseline_p90_s: f64) -> f64 {
    let mut lost = 0.0;
    let mut previous = trace.limit_at(phase.0);
    for tick in trace.ticks_in(phase.0, phase.1) {
        let at_baseline = trace
            .second_at(tick.at)
            .and_then(|s| s.p90_s)
            .is_some_and(|p90| p90 <= baseline_p90_s);
        if at_baseline && tick.limit < previous {
            lost += f64::from(previous - tick.limit);
        }
        previous = tick.limit;
    }
    lost
}

/// The 5th and 95th percentiles of the limit over `phase` both lie within `bound`.
pub fn stays_within(
    label: &str,
    trace: &Trace,
    phase: (Nanos, Nanos),
    bound: Bound,
) -> Vec<Criterion> {
    let limits = trace.limits(phase.0, phase.1);
    let p5 = quantile(&limits, 0.05).unwrap_or(0.0);
    let p95 = quantile(&limits, 0.95).unwrap_or(0.0);
    vec![
        Criterion::new(format!("{label}: limit p5"), p5, bound),
        Criterion::new(format!("{label}: limit p95"), p95, bound),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_admit_and_print() {
        assert!(Bound::AtLeast(3.0).admits(3.0));
        assert!(!Bound::Below(3.0).admits(3.0));
        assert!(around(40.0, 0.2).admits(48.0));
        assert!(!around(40.0, 0.2).admits(48.5));
        assert_eq!(around(40.0, 0.2).to_string(), "32..48");
        assert_eq!(Bound::AtMost(0.25).to_string(), "<= 0.25");
    }

    #[test]
    fn shortfalls_are_relative_to_the_bound() {
        assert_eq!(Bound::AtLeast(0.9).shortfall(0.95), 0.0);
        assert!((Bound::AtLeast(0.9).shortfall(0.45) - 0.5).abs() < 1e-12);
        assert_eq!(Bound::AtMost(0.0).shortfall(12.0), 12.0);
        assert_eq!(Bound::AtMost(3.0).shortfall(f64::INFINITY), f64::INFINITY);
        assert_eq!(Bound::Within(80.0, 120.0).shortfall(60.0), 0.25);
    }

    #[test]
    fn criteria_serialise_with_the_bound_as_text() {
        let c = Criterion::new("median limit", 41.0, around(40.0, 0.2));
        let json = serde_json::to_value(&c).expect("serialisable");
        assert_eq!(
            json,
            serde_json::json!({"name": "median limit", "value": 41.0, "bound": "32..48", "pass": true})
        );
    }
}
