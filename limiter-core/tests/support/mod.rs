//! Synthetic sample streams for the controller: events made one by one by the test, fed
//! evenly over the 100 ms updates. Runs against an upstream are limiter-sim's.

#![allow(dead_code)]

use limiter_core::{Controller, Outcome};
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};
use rand_pcg::Pcg64;

pub const MS: u64 = 1_000_000;
pub const SEC: u64 = 1_000 * MS;
const TICK: u64 = 100 * MS;

/// One request's result in a synthetic stream.
pub enum Event {
    Sample { latency_ns: u64, inflight: u32 },
    Outcome(Outcome),
}

/// A synthetic sample stream: `per_sec` events spread evenly over 100 ms ticks, each made by
/// a closure that sees the current limit; `update` after every tick.
pub struct Stream {
    pub now: u64,
    pub rng: Pcg64,
}

impl Stream {
    pub fn new(seed: u64) -> Self {
        Stream {
            now: 0,
            rng: Pcg64::seed_from_u64(seed),
        }
    }

    /// Lognormal jitter around 1 (sigma 0.2), so no two latencies are identical.
    pub fn jitter(&mut self) -> f64 {
        LogNormal::new(0.0, 0.2).unwrap().sample(&mut self.rng)
    }

    /// A sample at `latency_ns` with the limit in flight, or, for about one request in six,
    /// a connect the limit refused: demand beyond the limit, clients piling up rather than
    /// the same clients waiting longer.
    pub fn at_the_limit(&mut self, limit: u32, latency_ns: u64) -> Event {
        if self.jitter() > 1.2 {
            return Event::Outcome(Outcome::Shed);
        }
        Event::Sample {
            latency_ns,
            inflight: limit,
        }
    }

    pub fn run<C: Controller + ?Sized>(
        &mut self,
        c: &mut C,
        seconds: u64,
        per_sec: f64,
        event: impl FnMut(u32, &mut Self) -> Event,
    ) -> Vec<u32> {
        self.run_at(c, seconds, |_, _| per_sec, event)
    }

    /// [`Stream::run`] at the rate `per_sec` gives for each tick from the limit and the time.
    pub fn run_at<C: Controller + ?Sized>(
        &mut self,
        c: &mut C,
        seconds: u64,
        mut per_sec: impl FnMut(u32, u64) -> f64,
        mut event: impl FnMut(u32, &mut Self) -> Event,
    ) -> Vec<u32> {
        if self.now == 0 {
            // The stream's events follow the limit: a first word before any of them starts
            // it where a destination with no traffic yet does.
            self.now = TICK;
            c.update(self.now);
        }
        let mut limits = Vec::new();
        let mut owed = 0.0;
        let end = self.now + seconds * SEC;
        while self.now < end {
            self.now += TICK;
            owed += per_sec(c.limit(), self.now) * TICK as f64 / SEC as f64;
            while owed >= 1.0 {
                owed -= 1.0;
                match event(c.limit(), self) {
                    Event::Sample {
                        latency_ns,
                        inflight,
                    } => c.on_sample(self.now, latency_ns, inflight),
                    Event::Outcome(o) => c.on_outcome(self.now, o),
                }
            }
            limits.push(c.update(self.now));
        }
        limits
    }
}
