//! A small deterministic upstream for sanity tests: `capacity` workers behind a FIFO queue,
//! lognormal service times, clients in a closed loop (`demand` requests always wanted) or an
//! open loop (Poisson arrivals), admission at the controller's limit, update every 100 ms.
//! The full simulator lives elsewhere; this only checks the controller's direction and pace.

#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use limiter_core::{Controller, Outcome};
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal};
use rand_pcg::Pcg64;

pub const MS: u64 = 1_000_000;
pub const SEC: u64 = 1_000 * MS;
const TICK: u64 = 100 * MS;

#[derive(Clone, Copy, Debug)]
pub enum Load {
    /// This many requests always wanted: in-flight = min(demand, limit).
    Closed(u32),
    /// Poisson arrivals at this many per second; arrivals over the limit are shed.
    Open(f64),
}

pub struct Upstream {
    pub capacity: usize,
    pub median_ns: f64,
    pub sigma: f64,
    pub error_rate: f64,
    /// How long a connection stays open after its first response byte (a stream).
    pub hold_ns: u64,
    pub load: Load,
}

impl Upstream {
    pub fn new(capacity: usize, median_ns: f64, load: Load) -> Self {
        Upstream {
            capacity,
            median_ns,
            sigma: 0.3,
            error_rate: 0.0,
            hold_ns: 0,
            load,
        }
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Done {
    at: u64,
    started: u64,
    inflight: u32,
    error: bool,
}

pub struct Sim<C> {
    pub now: u64,
    pub controller: C,
    pub upstream: Upstream,
    rng: Pcg64,
    busy: BinaryHeap<Reverse<Done>>,
    holding: BinaryHeap<Reverse<u64>>,
    queue: VecDeque<(u64, u32)>,
    inflight: u32,
    next_arrival: u64,
    pub completed: u64,
    pub shed: u64,
}

impl<C: Controller> Sim<C> {
    pub fn new(controller: C, upstream: Upstream, seed: u64) -> Self {
        Sim {
            now: 0,
            controller,
            upstream,
            rng: Pcg64::seed_from_u64(seed),
            busy: BinaryHeap::new(),
            holding: BinaryHeap::new(),
            queue: VecDeque::new(),
            inflight: 0,
            next_arrival: 0,
            completed: 0,
            shed: 0,
        }
    }

    fn service(&mut self) -> u64 {
        LogNormal::new(self.upstream.median_ns.ln(), self.upstream.sigma)
            .unwrap()
            .sample(&mut self.rng) as u64
    }

    fn start_service(&mut self, arrived: u64, inflight: u32) {
        let at = self.now + self.service();
        let error = self.rng.random_bool(self.upstream.error_rate);
        self.busy.push(Reverse(Done {
            at,
            started: arrived,
            inflight,
            error,
        }));
    }

    fn admit(&mut self) {
        self.inflight += 1;
        let inflight = self.inflight;
        if self.busy.len() < self.upstream.capacity {
            self.start_service(self.now, inflight);
        } else {
            self.queue.push_back((self.now, inflight));
        }
    }

    fn top_up(&mut self) {
        if let Load::Closed(demand) = self.upstream.load {
            while self.inflight < demand.min(self.controller.limit()) {
                self.admit();
            }
        }
    }

    /// Runs until `until`, returning the limit at every update.
    pub fn run(&mut self, until: u64) -> Vec<u32> {
        let mut limits = Vec::new();
        let mut next_tick = self.now - self.now % TICK + TICK;
        while self.now < until {
            let next_done = self.busy.peek().map_or(u64::MAX, |d| d.0.at);
            let next_arrival = match self.upstream.load {
                Load::Open(_) => self.next_arrival,
                Load::Closed(_) => u64::MAX,
            };
            let next_release = self.holding.peek().map_or(u64::MAX, |r| r.0);
            let t = next_done.min(next_tick).min(next_arrival).min(next_release);
            self.now = t;
            if t == next_release {
                self.holding.pop();
                self.inflight -= 1;
                self.top_up();
            } else if t == next_done {
                let Reverse(done) = self.busy.pop().unwrap();
                if self.upstream.hold_ns == 0 || done.error {
                    self.inflight -= 1;
                } else {
                    self.holding.push(Reverse(t + self.upstream.hold_ns));
                }
                self.completed += 1;
                if done.error {
                    self.controller.on_outcome(t, Outcome::Error);
                } else {
                    self.controller
                        .on_sample(t, t - done.started, done.inflight);
                }
                while self.busy.len() < self.upstream.capacity {
                    let Some((arrived, inflight)) = self.queue.pop_front() else {
                        break;
                    };
                    self.start_service(arrived, inflight);
                }
                self.top_up();
            } else if t == next_arrival {
                if let Load::Open(rate) = self.upstream.load {
                    let gap = Exp::new(rate).unwrap().sample(&mut self.rng);
                    self.next_arrival = t + (gap * SEC as f64) as u64;
                }
                if self.inflight < self.controller.limit() {
                    self.admit();
                } else {
                    self.shed += 1;
                    self.controller.on_outcome(t, Outcome::Shed);
                }
            } else {
                limits.push(self.controller.update(t));
                next_tick += TICK;
                self.top_up();
            }
        }
        limits
    }
}

pub fn min_max(limits: &[u32]) -> (u32, u32) {
    (
        limits.iter().copied().min().unwrap(),
        limits.iter().copied().max().unwrap(),
    )
}

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

    pub fn run<C: Controller + ?Sized>(
        &mut self,
        c: &mut C,
        seconds: u64,
        per_sec: f64,
        mut event: impl FnMut(u32, &mut Self) -> Event,
    ) -> Vec<u32> {
        let mut limits = Vec::new();
        let mut owed = 0.0;
        let end = self.now + seconds * SEC;
        while self.now < end {
            self.now += TICK;
            owed += per_sec * TICK as f64 / SEC as f64;
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
