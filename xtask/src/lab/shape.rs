//! The upstreams the nginx rig plays: points of the simulator's space of shapes
//! (docs/simulation.md, "Shapes") that real programs can be run against, each judged by the
//! simulator's criteria against its twin with no limiter.

use std::time::Duration;

use limiter_sim::shapes::judge::{P99_EXACT, P99_VARIABLE};
use limiter_sim::shapes::{EXACT_SIGMA_BELOW, SATURATED_LOAD, SPARE_LOAD};

/// What serves the upstream's requests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Servers {
    /// Threads each serving one connection at a time; the rest wait in the listen queue.
    Workers(usize),
    /// Every connection served at once, each at min(1, cores / n) of its speed while n are
    /// served: processor sharing.
    Cores(usize),
    /// Every connection served at once at full speed: a slow dependency, nothing saturated.
    Unbounded,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RigShape {
    /// A file-name-safe name: pictures and series are named after it.
    pub slug: &'static str,
    pub servers: Servers,
    /// The service time's median, healthy and in the incident.
    pub healthy: Duration,
    pub slow: Duration,
    /// The lognormal's sigma; 0 is an exact sleep.
    pub sigma: f64,
    /// wrk's keep-alive connections to nginx, and the think time after each answer.
    pub clients: usize,
    pub think: Duration,
}

/// The rig's shapes, in the order they run: few, the rig's own and many workers, a service
/// time that varies, processor sharing, and workers to spare.
pub const SHAPES: [RigShape; 6] = [
    RigShape {
        slug: "workers-8",
        servers: Servers::Workers(8),
        think: Duration::from_millis(1000),
        ..WORKERS_32
    },
    WORKERS_32,
    RigShape {
        slug: "workers-128",
        servers: Servers::Workers(128),
        clients: 400,
        think: Duration::from_millis(1000),
        ..WORKERS_32
    },
    RigShape {
        slug: "lognormal",
        slow: Duration::from_millis(400),
        sigma: 0.5,
        ..WORKERS_32
    },
    RigShape {
        slug: "cores-16",
        servers: Servers::Cores(16),
        ..WORKERS_32
    },
    RigShape {
        slug: "spare",
        servers: Servers::Workers(128),
        ..WORKERS_32
    },
];

/// The rig as it first ran: 32 workers sleeping 30 ms, then 810 ms; 100 clients thinking
/// 250 ms.
const WORKERS_32: RigShape = RigShape {
    slug: "workers-32",
    servers: Servers::Workers(32),
    healthy: Duration::from_millis(30),
    slow: Duration::from_millis(810),
    sigma: 0.0,
    clients: 100,
    think: Duration::from_millis(250),
};

/// The shape named `slug`, as `--shapes` names it.
pub fn by_slug(slug: &str) -> Result<RigShape, String> {
    SHAPES.into_iter().find(|s| s.slug == slug).ok_or_else(|| {
        let known: Vec<_> = SHAPES.iter().map(|s| s.slug).collect();
        format!("no shape {slug:?}: the shapes are {}", known.join(", "))
    })
}

impl std::fmt::Display for RigShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.slug)
    }
}

/// The standard normal's 99th percentile.
const Z99: f64 = 2.326;

impl RigShape {
    pub fn servers(&self) -> usize {
        match self.servers {
            Servers::Workers(n) | Servers::Cores(n) => n,
            Servers::Unbounded => usize::MAX,
        }
    }

    /// How the shape reads in a report's title.
    pub fn describe(&self) -> String {
        let servers = match self.servers {
            Servers::Workers(n) => format!("{n} workers"),
            Servers::Cores(n) => format!("{n} cores shared"),
            Servers::Unbounded => "a thread per connection".to_string(),
        };
        let service = if self.sigma == 0.0 {
            "exact".to_string()
        } else {
            format!("lognormal, sigma {}", self.sigma)
        };
        format!(
            "{servers}, {} -> {} ms ({service}), {} clients thinking {} ms",
            self.healthy.as_millis(),
            self.slow.as_millis(),
            self.clients,
            self.think.as_millis()
        )
    }

    fn mean_s(&self, median: Duration) -> f64 {
        median.as_secs_f64() * (self.sigma * self.sigma / 2.0).exp()
    }

    /// Requests a second the servers answer at a service time of `median`.
    pub fn capacity(&self, median: Duration) -> f64 {
        self.servers() as f64 / self.mean_s(median)
    }

    /// Requests a second the clients would send with no wait but the service time.
    pub fn demand(&self, median: Duration) -> f64 {
        self.clients as f64 / (self.think.as_secs_f64() + self.mean_s(median))
    }

    pub fn saturated(&self) -> bool {
        self.demand(self.slow) >= SATURATED_LOAD * self.capacity(self.slow)
    }

    pub fn spare(&self) -> bool {
        self.demand(self.slow) <= SPARE_LOAD * self.capacity(self.slow)
    }

    /// The upstream's own p99 service time in the incident, in milliseconds.
    pub fn service_p99_ms(&self, median: Duration) -> f64 {
        median.as_secs_f64() * 1e3 * (Z99 * self.sigma).exp()
    }

    /// The admitted p99 allowed, as a multiple of the service's own: 1.3 for a sleep, 1.5 for
    /// a service time that varies.
    pub fn p99_bound(&self) -> f64 {
        if self.sigma < EXACT_SIGMA_BELOW {
            P99_EXACT
        } else {
            P99_VARIABLE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_is_saturated_or_has_workers_to_spare_and_is_healthy_while_healthy() {
        for shape in SHAPES {
            assert!(shape.saturated() != shape.spare(), "{shape:?}");
            assert!(
                shape.demand(shape.healthy) <= 0.7 * shape.capacity(shape.healthy),
                "{shape:?}"
            );
        }
        assert_eq!(SHAPES.iter().filter(|s| s.spare()).count(), 1);
    }

    #[test]
    fn a_lognormal_service_has_a_longer_mean_and_tail_than_its_median() {
        let shape = SHAPES[3];
        assert!(shape.capacity(shape.slow) < 32.0 / 0.4);
        assert!(shape.service_p99_ms(shape.slow) > 3.0 * 400.0);
        assert_eq!(WORKERS_32.service_p99_ms(WORKERS_32.slow), 810.0);
        assert_eq!((WORKERS_32.p99_bound(), shape.p99_bound()), (1.3, 1.5));
    }
}
