//! The rule the kernel applies at `connect()`: refuse when in-flight >= limit, or, with
//! `overflow = "queue"`, hold the connect until a slot frees.

use crate::clock::{secs, Nanos};

/// What a connect at the limit gets.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Overflow {
    #[default]
    Refuse,
    Queue(Queue),
}

/// The kernel's queue at its defaults: bounds at 2 and 3 times the limit (in flight plus
/// waiting), a maximum wait of 0.5 s, and a waiting SYN sent again 100 ms after the last for
/// four times, then after twice the previous wait each time (Linux 6.7+).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Queue {
    pub wait: f64,
    pub refuse: f64,
    pub max_wait: Nanos,
}

impl Default for Queue {
    fn default() -> Self {
        Queue {
            wait: 2.0,
            refuse: 3.0,
            max_wait: secs(0.5),
        }
    }
}

/// The first retransmission timer of a waiting SYN, and how many retries keep it.
const RETRY: f64 = 0.1;
const LINEAR_RETRIES: u32 = 4;

impl Queue {
    /// Whether a connect finding `occupied` (in flight plus waiting) may wait: all up to
    /// `wait` times the limit, a share falling to none at `refuse` times it; `draw` is
    /// uniform in [0, 1).
    pub fn may_wait(&self, limit: u32, occupied: u32, draw: f64) -> bool {
        let (at, limit) = (f64::from(occupied), f64::from(limit));
        let (wait_to, refuse_from) = (self.wait * limit, self.refuse * limit);
        if at < wait_to {
            return true;
        }
        at < refuse_from && draw >= (at - wait_to) / (refuse_from - wait_to)
    }

    /// How long after its `retries`-th sending a waiting SYN is sent again.
    pub fn retry_after(&self, retries: u32) -> Nanos {
        let doublings = retries.saturating_sub(LINEAR_RETRIES);
        secs(RETRY * f64::from(1u32 << doublings.min(20)))
    }
}

pub struct Admission {
    limit: u32,
    inflight: u32,
}

impl Admission {
    pub fn new(limit: u32) -> Self {
        Self { limit, inflight: 0 }
    }

    /// Reserve a slot; on success returns the in-flight count including this request,
    /// which is what the kernel reports with the request's sample.
    pub fn try_admit(&mut self) -> Option<u32> {
        if self.inflight >= self.limit {
            return None;
        }
        self.inflight += 1;
        Some(self.inflight)
    }

    pub fn release(&mut self) {
        self.inflight -= 1;
    }

    /// A lower limit never evicts admitted connections: in-flight drains down to it.
    pub fn set_limit(&mut self, limit: u32) {
        self.limit = limit;
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    pub fn inflight(&self) -> u32 {
        self.inflight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_takes_all_to_twice_the_limit_then_a_falling_share_to_three_times() {
        let q = Queue::default();
        assert!(q.may_wait(10, 19, 0.0));
        assert!(!q.may_wait(10, 25, 0.4), "half refused at 2.5 times");
        assert!(q.may_wait(10, 25, 0.6));
        assert!(!q.may_wait(10, 30, 0.99));
    }

    #[test]
    fn a_waiting_syn_is_retried_every_100_ms_four_times_then_ever_later() {
        let q = Queue::default();
        let gaps: Vec<Nanos> = (0..7).map(|n| q.retry_after(n)).collect();
        assert_eq!(
            gaps,
            [0.1, 0.1, 0.1, 0.1, 0.1, 0.2, 0.4].map(secs),
            "{gaps:?}"
        );
    }

    #[test]
    fn refuses_at_the_limit_and_drains_after_a_cut() {
        let mut a = Admission::new(2);
        assert_eq!(a.try_admit(), Some(1));
        assert_eq!(a.try_admit(), Some(2));
        assert_eq!(a.try_admit(), None);
        a.set_limit(1);
        a.release();
        assert_eq!(a.try_admit(), None, "still at the new limit of 1");
        a.release();
        assert_eq!(a.try_admit(), Some(1));
    }
}
