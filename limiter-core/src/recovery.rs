//! Coming back from a slowdown: the limit that served the upstream when it was healthy is
//! remembered, and once the latency is back well under the service time the baseline had
//! to follow, the limit returns to it at once instead of climbing back window by window.

/// A p90 this far under the slow service time the baseline followed is a recovery...
const RECOVERED: f64 = 0.5;
/// ...and a window's p90 within this multiple of the baseline is healthy.
const HEALTHY: f64 = 1.25;

/// The last healthy limit, and the slow service time it is waiting to see the end of.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recovery {
    healthy_limit: f64,
    slow_p90: Option<f64>,
}

impl Recovery {
    /// The baseline followed the upstream to the slower `p90`.
    pub fn followed(&mut self, p90: f64) {
        self.slow_p90 = Some(p90);
    }

    /// One window: its p90, the baseline and the limit in force. Returns the limit to go
    /// back to when the window shows the upstream recovered from a slowdown.
    pub fn observe(&mut self, p90: f64, baseline: f64, limit: f64) -> Option<f64> {
        match self.slow_p90 {
            Some(slow) if p90 <= RECOVERED * slow => {
                self.slow_p90 = None;
                Some(self.healthy_limit)
            }
            Some(_) => None,
            None => {
                if p90 <= HEALTHY * baseline {
                    self.healthy_limit = limit;
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_to_the_last_healthy_limit_once_the_slowdown_is_over() {
        let mut r = Recovery::default();
        assert_eq!(r.observe(30.0, 30.0, 80.0), None);
        assert_eq!(
            r.observe(900.0, 30.0, 60.0),
            None,
            "not healthy: not remembered"
        );
        r.followed(900.0);
        assert_eq!(r.observe(950.0, 900.0, 8.0), None, "still slow");
        assert_eq!(r.observe(40.0, 900.0, 8.0), Some(80.0));
        assert_eq!(r.observe(40.0, 900.0, 8.0), None, "once");
    }
}
