//! The reference slow-call circuit breaker the production scenario is measured against:
//! it opens when at least half of the calls completed in the last 10 s took over 2 s.

use std::collections::VecDeque;

use crate::clock::{secs, Nanos};

pub struct SlowCallBreaker {
    window: Nanos,
    slow_after: Nanos,
    calls: VecDeque<(Nanos, bool)>,
    slow: usize,
    opened_at: Option<Nanos>,
}

impl Default for SlowCallBreaker {
    fn default() -> Self {
        Self {
            window: secs(10.0),
            slow_after: secs(2.0),
            calls: VecDeque::new(),
            slow: 0,
            opened_at: None,
        }
    }
}

impl SlowCallBreaker {
    /// A call completed at `now` after `duration` (its whole duration, as a breaker sees it).
    pub fn record(&mut self, now: Nanos, duration: Nanos) {
        let is_slow = duration > self.slow_after;
        self.calls.push_back((now, is_slow));
        self.slow += usize::from(is_slow);
        while let Some(&(t, was_slow)) = self.calls.front() {
            if t + self.window > now {
                break;
            }
            self.calls.pop_front();
            self.slow -= usize::from(was_slow);
        }
        if self.opened_at.is_none() && 2 * self.slow >= self.calls.len() {
            self.opened_at = Some(now);
        }
    }

    /// When it would first have opened, if it would have.
    pub fn opened_at(&self) -> Option<Nanos> {
        self.opened_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_at_half_slow_within_the_window() {
        let mut b = SlowCallBreaker::default();
        for i in 0..4 {
            b.record(secs(f64::from(i)), secs(0.3));
        }
        for i in 4..7 {
            b.record(secs(f64::from(i)), secs(3.0));
            assert_eq!(b.opened_at(), None, "fewer slow than fast calls at {i} s");
        }
        b.record(secs(7.0), secs(3.0));
        assert_eq!(b.opened_at(), Some(secs(7.0)));
    }

    #[test]
    fn old_slow_calls_age_out() {
        let mut b = SlowCallBreaker::default();
        b.record(secs(0.0), secs(0.1));
        b.record(secs(1.0), secs(0.1));
        b.record(secs(2.0), secs(0.1));
        b.record(secs(3.0), secs(5.0));
        assert_eq!(b.opened_at(), None);
        for i in 0..5 {
            b.record(secs(20.0 + f64::from(i)), secs(0.1));
        }
        assert_eq!(b.opened_at(), None);
    }
}
