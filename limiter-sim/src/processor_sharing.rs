//! An upstream that shares its cores among every request it holds (an event loop, a CPU-bound
//! service with a thread per request): no queue, but each request is served at
//! min(1, cores / n) of its own speed while n are in service, so every request slows down as
//! soon as there are more than cores.
//!
//! Kept as a clock of attained service: every request in service has received the same
//! amount of work since the clock started, so a request is done when the clock reaches the
//! work it came with plus the clock at its arrival, and the one that finishes first is the
//! one with the smallest such tag.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::clock::Nanos;

/// Work left under this (in nanoseconds of a core) counts as done: the time of completion is
/// rounded up to a whole nanosecond, which leaves the clock a rounding error short at most.
const DONE_WITHIN: f64 = 1.0;

struct Job<R> {
    finish: f64,
    /// Arrival order, so that requests finishing together leave in the order they came.
    seq: u64,
    request: R,
}

impl<R> PartialEq for Job<R> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<R> Eq for Job<R> {}

impl<R> PartialOrd for Job<R> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<R> Ord for Job<R> {
    // Reversed: BinaryHeap is a max-heap and the first to finish must come out first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .finish
            .total_cmp(&self.finish)
            .then(other.seq.cmp(&self.seq))
    }
}

pub struct ProcessorSharing<R> {
    cores: f64,
    /// When `attained` was last brought up to date.
    clock: Nanos,
    /// Work every request in service has received since the start, in nanoseconds.
    attained: f64,
    jobs: BinaryHeap<Job<R>>,
    arrivals: u64,
    /// Changes whenever the next completion may have moved, so that a completion scheduled
    /// before the change can be told stale.
    generation: u64,
}

impl<R> ProcessorSharing<R> {
    pub fn new(cores: f64) -> Self {
        Self {
            cores,
            clock: 0,
            attained: 0.0,
            jobs: BinaryHeap::new(),
            arrivals: 0,
            generation: 0,
        }
    }

    /// A request arrives needing `work` nanoseconds of one core.
    pub fn add(&mut self, now: Nanos, request: R, work: Nanos) {
        self.advance(now);
        self.arrivals += 1;
        self.jobs.push(Job {
            finish: self.attained + work as f64,
            seq: self.arrivals,
            request,
        });
        self.generation += 1;
    }

    /// The number of cores changes at `now`.
    pub fn set_cores(&mut self, now: Nanos, cores: f64) {
        self.advance(now);
        self.cores = cores;
        self.generation += 1;
    }

    /// When the next request will be done if nothing changes, with the generation that
    /// stays current until something does.
    pub fn next_done(&self) -> Option<(Nanos, u64)> {
        let job = self.jobs.peek()?;
        let left = (job.finish - self.attained).max(0.0);
        let at = self.clock + (left / self.rate()).ceil() as Nanos;
        Some((at, self.generation))
    }

    pub fn is_current(&self, generation: u64) -> bool {
        generation == self.generation
    }

    /// A request done by `now`, if any; call until `None`.
    pub fn pop_done(&mut self, now: Nanos) -> Option<R> {
        self.advance(now);
        if self.jobs.peek()?.finish > self.attained + DONE_WITHIN {
            return None;
        }
        self.generation += 1;
        self.jobs.pop().map(|job| job.request)
    }

    /// The share of a core each request in service gets.
    fn rate(&self) -> f64 {
        (self.cores / self.jobs.len().max(1) as f64).min(1.0)
    }

    fn advance(&mut self, now: Nanos) {
        if !self.jobs.is_empty() {
            self.attained += (now - self.clock) as f64 * self.rate();
        }
        self.clock = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(ps: &mut ProcessorSharing<char>) -> Vec<(Nanos, char)> {
        let mut done = Vec::new();
        while let Some((at, _)) = ps.next_done() {
            while let Some(r) = ps.pop_done(at) {
                done.push((at, r));
            }
        }
        done
    }

    #[test]
    fn up_to_the_cores_each_request_runs_at_full_speed() {
        let mut ps = ProcessorSharing::new(2.0);
        ps.add(0, 'a', 100);
        ps.add(0, 'b', 300);
        assert_eq!(drain(&mut ps), [(100, 'a'), (300, 'b')]);
    }

    #[test]
    fn beyond_the_cores_every_request_slows_down() {
        // Four requests of 100 on two cores: each gets half a core, all done at 200.
        let mut ps = ProcessorSharing::new(2.0);
        for r in ['a', 'b', 'c', 'd'] {
            ps.add(0, r, 100);
        }
        assert_eq!(
            drain(&mut ps),
            [(200, 'a'), (200, 'b'), (200, 'c'), (200, 'd')]
        );
    }

    #[test]
    fn an_arrival_slows_the_requests_already_in_service() {
        // One core: 'a' alone for 50, then shares it with 'b' until it has its 100.
        let mut ps = ProcessorSharing::new(1.0);
        ps.add(0, 'a', 100);
        let (before, generation) = ps.next_done().expect("a in service");
        assert_eq!(before, 100);
        ps.add(50, 'b', 100);
        assert!(!ps.is_current(generation), "the completion moved");
        assert_eq!(drain(&mut ps), [(150, 'a'), (200, 'b')]);
    }

    #[test]
    fn fewer_cores_slow_the_requests_in_service() {
        let mut ps = ProcessorSharing::new(2.0);
        ps.add(0, 'a', 100);
        ps.add(0, 'b', 100);
        ps.set_cores(50, 1.0);
        assert_eq!(drain(&mut ps), [(150, 'a'), (150, 'b')]);
    }
}
