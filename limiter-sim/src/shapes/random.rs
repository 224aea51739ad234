//! Shapes drawn at random from the space, and kept only when they make a run that can be
//! judged (see [`Shape::fits`]). The clients are drawn by the share of the healthy capacity
//! they use, so that the incident saturates about half of the shapes and leaves servers to
//! spare in most of the others, whatever the upstream's size and speed.

use std::time::Duration;

use rand::Rng;

use super::{ClientShape, Demand, Incident, Servers, Shape, UpstreamShape};

/// The shape must be healthy while healthy: demand at most this share of the capacity.
const HEALTHY_LOAD: f64 = 0.7;
/// The spread of an exact service time: a sleep's timer (the lab's upstream sleeps). With
/// none at all every answer takes the same time, which the controller reads as a timer's
/// and not as evidence of health (docs/control.md).
const TIMER_JITTER: f64 = 0.003;
/// The least share of the healthy capacity the clients use.
const IDLE_LOAD: f64 = 0.1;
/// The incident's mean service time is at most this, so that its answers come many times
/// within the incident and the criteria have rounds to judge.
const SLOWEST_MEAN_S: f64 = 4.0;
/// Requests per second while healthy, at most: what keeps a run under a second or so.
const BUSIEST_PER_S: f64 = 15_000.0;

impl Shape {
    /// A shape drawn from the space: 2 to 256 workers (a quarter of them cores shared by
    /// processor sharing) of 1 ms to 1 s, exact or lognormal up to sigma 1.5; an incident
    /// 2 to 40 times slower, halving the servers, both, or a permanent shift; clients using
    /// 10 to 70 % of the healthy capacity, as 5 to 400 closed-loop clients thinking up to 1 s
    /// (three in ten retrying a refusal within 1 ms) or 1 to 2 000 requests/s open loop; a
    /// keep-alive pool one time in four; a timeout of 0.5 to 60 s.
    pub fn random(rng: &mut impl Rng) -> Shape {
        loop {
            let shape = draw(rng);
            if shape.fits() {
                return shape;
            }
        }
    }

    /// Within the space, healthy while healthy, slow enough in the incident to judge, cheap
    /// enough to run, and within the limits it runs with while healthy.
    fn fits(&self) -> bool {
        let within = match self.clients.demand {
            Demand::Open { per_s } => (1.0..=2_000.0).contains(&per_s),
            Demand::Closed { clients, .. } => (5..=400).contains(&clients),
        };
        within
            && self.load(false) <= HEALTHY_LOAD
            && self.incident_service().mean_s() <= SLOWEST_MEAN_S
            && self.demand_per_s(false) <= BUSIEST_PER_S
            && 2.0 * self.healthy_inflight() <= f64::from(self.limits().max)
    }
}

fn draw(rng: &mut impl Rng) -> Shape {
    let servers = log_uniform(rng, 2.0, 256.0).round() as u32;
    let servers = if rng.random_bool(0.25) {
        Servers::Cores(servers)
    } else {
        Servers::Workers(servers)
    };
    let sigma = if rng.random_bool(0.3) {
        TIMER_JITTER
    } else {
        (rng.random_range(0.1..=1.5) * 10.0_f64).round() / 10.0
    };
    let slower = log_uniform(rng, 2.0, 40.0).round();
    let incident = match rng.random_range(0..20) {
        0..7 => Incident {
            slower,
            halved: false,
            permanent: false,
        },
        7..10 => Incident {
            slower: 1.0,
            halved: true,
            permanent: false,
        },
        10..14 => Incident {
            slower,
            halved: true,
            permanent: false,
        },
        _ => Incident {
            slower,
            halved: false,
            permanent: true,
        },
    };
    let upstream = UpstreamShape {
        servers,
        service: seconds(rng, 0.001, 1.0),
        sigma,
    };
    let pool = rng
        .random_bool(0.25)
        .then(|| log_uniform(rng, 1.0, 64.0).round() as u32);
    let timeout = seconds(rng, 0.5, 60.0);
    let mut shape = Shape {
        upstream,
        incident,
        clients: ClientShape {
            demand: Demand::Open { per_s: 1.0 },
            pool,
            timeout,
        },
    };
    let load = log_uniform(rng, IDLE_LOAD, HEALTHY_LOAD);
    let per_s = load * shape.capacity_per_s(false);
    shape.clients.demand = if rng.random_bool(0.35) {
        Demand::Open {
            per_s: two_figures(per_s),
        }
    } else {
        let think = if rng.random_bool(0.3) {
            Duration::ZERO
        } else {
            seconds(rng, 0.001, 1.0)
        };
        let retry = if rng.random_bool(0.3) {
            Duration::from_millis(1)
        } else {
            Duration::from_secs(1)
        };
        // Each client sends one request per think time and answer.
        let cycle_s = think.as_secs_f64() + shape.healthy_service().mean_s();
        Demand::Closed {
            clients: (per_s * cycle_s).round() as u32,
            think,
            retry,
        }
    };
    shape
}

fn log_uniform(rng: &mut impl Rng, lo: f64, hi: f64) -> f64 {
    rng.random_range(lo.ln()..=hi.ln()).exp()
}

/// A duration log-uniform between `lo` and `hi` seconds, to two significant figures.
fn seconds(rng: &mut impl Rng, lo: f64, hi: f64) -> Duration {
    let us = two_figures(log_uniform(rng, lo, hi) * 1e6);
    Duration::from_micros(us as u64)
}

/// `x` rounded to two significant figures, so that shapes print short: scaled by an exact
/// power of ten, so that the result is the double nearest the decimal.
fn two_figures(x: f64) -> f64 {
    let decimals = 1 - x.log10().floor() as i32;
    let scale = 10f64.powi(decimals.abs());
    if decimals >= 0 {
        (x * scale).round() / scale
    } else {
        (x / scale).round() * scale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_significant_figures() {
        assert_eq!(two_figures(1_234.0), 1_200.0);
        assert_eq!(two_figures(0.0456), 0.046);
        assert_eq!(two_figures(1.234).to_string(), "1.2");
        assert_eq!(two_figures(7.0), 7.0);
    }
}
