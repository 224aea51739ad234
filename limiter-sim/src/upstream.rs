//! The synthetic upstream: C workers in front of a FIFO queue, or C cores shared among
//! every request it holds ([`crate::processor_sharing`]). Latency grows with concurrency
//! because requests beyond C wait for a worker, or share the cores.

use std::collections::VecDeque;

use crate::clock::Nanos;
use crate::schedule::Schedule;

/// How the upstream serves the requests it holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Discipline {
    /// `capacity` workers, each serving one request at a time, first come first served.
    #[default]
    Workers,
    /// `capacity` cores shared equally among all the requests held; steps in the capacity
    /// take effect at once.
    ProcessorSharing,
}

/// How the upstream behaves over a run.
#[derive(Clone, Debug)]
pub struct UpstreamSpec {
    pub discipline: Discipline,
    /// Workers (requests served at once; rounded down), or cores.
    pub capacity: Schedule,
    /// Multiplies every request class's service time (1 = healthy).
    pub latency_factor: Schedule,
    /// Probability that a request fails after its service time instead of answering.
    pub error_rate: Schedule,
    /// Requests it holds at once; one more is answered 429 Too Many Requests at once, as a
    /// rate limiter in front of it does (infinite: none).
    pub allowed: Schedule,
}

impl UpstreamSpec {
    /// Healthy and error-free with a fixed number of workers.
    pub fn steady(capacity: u32) -> Self {
        Self {
            discipline: Discipline::Workers,
            capacity: Schedule::constant(f64::from(capacity)),
            latency_factor: Schedule::constant(1.0),
            error_rate: Schedule::constant(0.0),
            allowed: Schedule::constant(f64::INFINITY),
        }
    }
}

/// Worker occupancy and the queue of requests waiting for one.
pub struct Upstream<'a, R> {
    spec: &'a UpstreamSpec,
    busy: u32,
    waiting: VecDeque<R>,
}

impl<'a, R> Upstream<'a, R> {
    pub fn new(spec: &'a UpstreamSpec) -> Self {
        Self {
            spec,
            busy: 0,
            waiting: VecDeque::new(),
        }
    }

    pub fn enqueue(&mut self, request: R) {
        self.waiting.push_back(request);
    }

    /// The next waiting request a free worker picks up at `now`, if any.
    pub fn next_to_start(&mut self, now: Nanos) -> Option<R> {
        if f64::from(self.busy + 1) > self.spec.capacity.at(now) {
            return None;
        }
        let request = self.waiting.pop_front()?;
        self.busy += 1;
        Some(request)
    }

    /// A worker finished its request (after a stream's hold, for streams).
    pub fn release(&mut self) {
        self.busy -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_beyond_capacity_and_follows_its_schedule() {
        let spec = UpstreamSpec {
            capacity: Schedule::constant(2.0).step(10.0, 3.0),
            ..UpstreamSpec::steady(2)
        };
        let mut up = Upstream::new(&spec);
        for r in 0..4 {
            up.enqueue(r);
        }
        assert_eq!(up.next_to_start(0), Some(0));
        assert_eq!(up.next_to_start(0), Some(1));
        assert_eq!(up.next_to_start(0), None, "both workers busy");
        let later = crate::clock::secs(10.0);
        assert_eq!(up.next_to_start(later), Some(2), "a third worker appeared");
        up.release();
        assert_eq!(up.next_to_start(later), Some(3));
        assert_eq!(up.next_to_start(later), None, "queue empty");
    }
}
