//! What the clients send: request classes with their service-time distribution, the load
//! that drives them and how the client behaves on its connections.

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

    /// The healthy 90th percentile of the time to first byte.
    pub fn p90_s(&self) -> f64 {
        const Z90: f64 = 1.281_551_6;
        self.median_s * (self.sigma * Z90).exp()
    }

    /// The healthy 99th percentile of the time to first byte.
    pub fn p99_s(&self) -> f64 {
        const Z99: f64 = 2.326_347_9;
        self.median_s * (self.sigma * Z99).exp()
    }

    /// The share of healthy first bytes that come within `s` seconds.
    pub fn share_within(&self, s: f64) -> f64 {
        if self.sigma == 0.0 {
            return if s >= self.median_s { 1.0 } else { 0.0 };
        }
        normal_cdf((s / self.median_s).ln() / self.sigma)
    }

    /// Time to the first byte of one request, under a latency factor.
    pub fn draw(&self, rng: &mut impl Rng, factor: f64) -> Nanos {
        let z: f64 = StandardNormal.sample(rng);
        secs(self.median_s * factor * (self.sigma * z).exp())
    }
}

/// The standard normal distribution function, from the complementary error function of
/// Numerical Recipes (erfcc, relative error under 1.2e-7 everywhere).
fn normal_cdf(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * x);
    const C: [f64; 10] = [
        -1.265_512_23,
        1.000_023_68,
        0.374_091_96,
        0.096_784_18,
        -0.186_288_06,
        0.278_868_07,
        -1.135_203_98,
        1.488_515_87,
        -0.822_152_23,
        0.170_872_77,
    ];
    let poly = C.iter().rev().fold(0.0, |acc, c| acc * t + c);
    let erfc = t * (-x * x + poly).exp();
    if z >= 0.0 {
        1.0 - erfc / 2.0
    } else {
        erfc / 2.0
    }
}

/// What drives requests of a class.
#[derive(Clone, Debug)]
pub enum Load {
    /// Open loop: Poisson arrivals at a rate, whatever happens to earlier requests.
    Poisson { per_s: f64 },
    /// Closed loop: N workers, each sending its next request when the previous one ends.
    Closed(ClosedLoop),
    /// `size` requests at once every `every_s`, the first at `first_s` (a batch job, a
    /// fan-out): the demand a pool has to grow for.
    Bursts {
        size: u32,
        every_s: f64,
        first_s: f64,
    },
}

/// N workers, each sending its next request `think_s` after the previous one ends, and
/// `retry_after_s` after the limiter refused it.
#[derive(Clone, Debug)]
pub struct ClosedLoop {
    pub workers: u32,
    pub retry_after_s: f64,
    pub think_s: f64,
    /// Every worker sends its first request at the start of the run (a burst on attach),
    /// instead of staggered over the first second.
    pub at_once: bool,
}

impl Load {
    /// `workers` closed-loop workers with no think time, staggered over the first second.
    pub fn closed(workers: u32, retry_after_s: f64) -> Self {
        Load::Closed(ClosedLoop {
            workers,
            retry_after_s,
            think_s: 0.0,
            at_once: false,
        })
    }
}

/// The gap to the next arrival of a Poisson process at `per_s`.
pub fn poisson_gap(per_s: f64, rng: &mut impl Rng) -> Nanos {
    let exp = Exp::new(per_s).expect("a positive arrival rate");
    secs(exp.sample(rng))
}

/// How a client uses its connections.
#[derive(Clone, Debug, Default)]
pub struct Client {
    /// The client gives up on a request with no first byte after this long and closes the
    /// connection (its read timeout); the upstream finishes the work all the same.
    pub deadline_s: Option<f64>,
    /// Every connection ends with a last message that gets no reply (PostgreSQL
    /// Terminate, MySQL COM_QUIT), sent this long before the close.
    pub goodbye_s: Option<f64>,
    /// Requests go over a keep-alive pool that keeps up to this many idle connections
    /// open; a request finding none idle opens a new connection.
    pub keep_idle: Option<u32>,
}

/// One kind of request, the load that sends it and the client that sends it.
#[derive(Clone, Debug)]
pub struct RequestClass {
    pub service: Service,
    pub load: Load,
    pub client: Client,
}

impl RequestClass {
    /// A plain client: a connection per request, no deadline, no goodbye.
    pub fn new(service: Service, load: Load) -> Self {
        Self {
            service,
            load,
            client: Client::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_within_a_time_follows_the_lognormal() {
        let s = Service::lognormal(0.1, 0.5);
        assert!((s.share_within(0.1) - 0.5).abs() < 1e-6, "the median");
        assert!((s.share_within(s.p90_s()) - 0.9).abs() < 1e-6);
        assert!((s.share_within(s.p99_s()) - 0.99).abs() < 1e-6);
        let exact = Service::lognormal(0.1, 0.0);
        assert_eq!(exact.share_within(0.099), 0.0);
        assert_eq!(exact.share_within(0.1), 1.0);
    }
}
