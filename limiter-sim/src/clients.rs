//! What the clients send: request classes with their service-time distribution and the
//! load that drives them.

use rand::Rng;
use rand_distr::{Distribution, Exp, StandardNormal};

use crate::clock::{secs, Nanos};

/// How long the upstream works on one request of a class, when healthy.
#[derive(Clone, Debug)]
pub struct Service {
    /// Median time to the first response byte, in seconds.
    pub median_s: f64,
    /// Spread of the lognormal distribution (sigma of its logarithm).
    pub sigma: f64,
    /// A streamed response keeps the connection and the worker this long after its
    /// first byte; zero for a plain request/response.
    pub hold_s: f64,
}

impl Service {
    pub fn lognormal(median_s: f64, sigma: f64) -> Self {
        Self {
            median_s,
            sigma,
            hold_s: 0.0,
        }
    }

    pub fn streamed(self, hold_s: f64) -> Self {
        Self { hold_s, ..self }
    }

    /// The mean of the healthy distribution: what throughput per worker follows from.
    pub fn mean_s(&self) -> f64 {
        self.median_s * (self.sigma * self.sigma / 2.0).exp() + self.hold_s
    }

    /// Time to the first byte of one request, under a latency factor.
    pub fn draw(&self, rng: &mut impl Rng, factor: f64) -> Nanos {
        let z: f64 = StandardNormal.sample(rng);
        secs(self.median_s * factor * (self.sigma * z).exp())
    }
}

/// What drives requests of a class.
#[derive(Clone, Debug)]
pub enum Load {
    /// Open loop: Poisson arrivals at a rate, whatever happens to earlier requests.
    Poisson { per_s: f64 },
    /// Closed loop: N workers, each sending its next request as soon as the previous one
    /// ends, and retrying after a pause when the limiter refuses it.
    Closed { workers: u32, retry_after_s: f64 },
}

/// The gap to the next arrival of a Poisson process at `per_s`.
pub fn poisson_gap(per_s: f64, rng: &mut impl Rng) -> Nanos {
    let exp = Exp::new(per_s).expect("a positive arrival rate");
    secs(exp.sample(rng))
}

/// One kind of request and the load that sends it.
#[derive(Clone, Debug)]
pub struct RequestClass {
    pub service: Service,
    pub load: Load,
}
