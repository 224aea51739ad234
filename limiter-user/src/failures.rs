//! Map operations that fail while the agent runs (a full table, a removed pin): the agent
//! logs, counts and carries on, because exiting would take enforcement away with it.

use std::time::{Duration, Instant};

use tracing::warn;

/// Repeated failures are summarised at most this often.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Decides when a repeated event is logged: the first of a burst, then at most every
/// LOG_EVERY, with how many happened since the last line.
#[derive(Debug, Default)]
pub struct Throttle {
    unlogged: u64,
    last_log: Option<Instant>,
}

impl Throttle {
    /// Counts one occurrence; Some(occurrences since the last line) when it is to be logged.
    pub fn occurred(&mut self) -> Option<u64> {
        self.unlogged += 1;
        let now = Instant::now();
        if self
            .last_log
            .is_some_and(|t| now.duration_since(t) < LOG_EVERY)
        {
            return None;
        }
        self.last_log = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

#[derive(Debug, Default)]
pub struct Failures {
    total: u64,
    throttle: Throttle,
}

impl Failures {
    /// Records a failure of `what`; logs it unless one was logged less than LOG_EVERY ago.
    pub fn record(&mut self, what: &str, error: &dyn std::fmt::Display) {
        self.total += 1;
        if let Some(failures) = self.throttle.occurred() {
            warn!(
                failures,
                "{what} failed: {error} (the agent carries on; counted in limiter_agent_map_failures)"
            );
        }
    }

    /// Logs and counts the error of `result`, if any; the value otherwise.
    pub fn check<T, E: std::fmt::Display>(
        &mut self,
        what: &str,
        result: Result<T, E>,
    ) -> Option<T> {
        result.map_err(|e| self.record(what, &e)).ok()
    }

    pub fn total(&self) -> u64 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_counts_even_when_not_logged() {
        let mut f = Failures::default();
        for _ in 0..5 {
            assert_eq!(f.check::<(), _>("writing", Err("E2BIG")), None);
        }
        assert_eq!(f.check::<u8, &str>("writing", Ok(3)), Some(3));
        assert_eq!(f.total(), 5);
        assert_eq!(
            f.throttle.unlogged, 4,
            "only the first of a burst is logged"
        );
    }
}
