//! AIMD: the explicit error-driven fallback. +1 per window, x0.9 per window with an error or
//! timeout. It reads no latency, so it reacts only after damage; "while busy" is the
//! controller's app-limited cap, which stops growth when in-flight stays low.

use super::{LimitAlgorithm, Verdict};

const BACKOFF: f64 = 0.9;

/// Additive increase, multiplicative decrease.
#[derive(Clone, Copy, Debug, Default)]
pub struct Aimd;

impl LimitAlgorithm for Aimd {
    fn next_limit(&mut self, limit: f64, verdict: &Verdict) -> f64 {
        if verdict.error_pressure > 0.0 {
            limit * BACKOFF
        } else {
            limit + 1.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_one_or_backs_off() {
        let mut v = Verdict {
            now_ns: 0,
            error_pressure: 0.0,
            latency: None,
        };
        assert_eq!(Aimd.next_limit(20.0, &v), 21.0);
        v.error_pressure = 0.01;
        assert_eq!(Aimd.next_limit(20.0, &v), 18.0);
    }
}
