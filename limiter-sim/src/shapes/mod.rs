//! Shapes: an upstream, its incident and its clients as a point in a space, instead of a
//! hand-made scenario. A shape is judged by criteria computed from it (its capacity, and a
//! twin run of the same shape and seed with no limiter), so that any point of the space can
//! be drawn at random, played and judged: see docs/simulation.md, "Shapes".
//!
//! Every shape runs three phases: healthy for [`STEP_S`], the incident until [`RESTORE_S`]
//! (to the end for a permanent one), and recovery until [`END_S`].

pub mod family;
pub mod judge;
mod random;
pub mod scorecard;
mod spec;

use std::time::Duration;

use limiter_core::Limits;
use serde::{Deserialize, Serialize};

use crate::clients::{Client, ClosedLoop, Load, RequestClass, Service};
use crate::engine::Setup;
use crate::schedule::Schedule;
use crate::upstream::{Discipline, UpstreamSpec};

pub use family::Family;
pub use judge::{play, play_with, PlayedShape, CRITERIA};
pub use scorecard::{shapes, sweep, write_docs, Scorecard};

/// The incident starts here, after the healthy phase.
pub const STEP_S: f64 = 25.0;
/// The upstream is healthy again here, unless the incident is permanent.
pub const RESTORE_S: f64 = 65.0;
pub const END_S: f64 = 100.0;

/// One point of the space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    pub upstream: UpstreamShape,
    pub incident: Incident,
    pub clients: ClientShape,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Servers {
    /// Workers in front of a FIFO queue.
    Workers(u32),
    /// Cores shared among every request held (processor sharing).
    Cores(u32),
}

impl Servers {
    pub fn count(self) -> u32 {
        match self {
            Self::Workers(n) | Self::Cores(n) => n,
        }
    }
}

/// The upstream while healthy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpstreamShape {
    pub servers: Servers,
    /// Median service time.
    pub service: Duration,
    /// Spread of the lognormal service time (sigma of its logarithm); under 0.01 it is an
    /// exact one, a sleep.
    pub sigma: f64,
}

/// What happens to the upstream at [`STEP_S`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    /// Multiplies the service time (1: unchanged).
    pub slower: f64,
    /// Half the servers are gone (at least one stays).
    pub halved: bool,
    /// The change stays to the end of the run: a new normal, not an incident that recovers.
    pub permanent: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientShape {
    pub demand: Demand,
    /// Requests go over a keep-alive pool that keeps up to this many idle connections, which
    /// count in flight; without one, a connection per request.
    pub pool: Option<u32>,
    /// A request with no first byte after this long is given up on (the connection closed);
    /// the upstream serves it all the same.
    pub timeout: Duration,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Demand {
    /// Clients that each send a request, wait for its end, think, and send the next; a
    /// refused one is sent again after `retry`.
    Closed {
        clients: u32,
        think: Duration,
        retry: Duration,
    },
    /// Poisson arrivals at a rate, whatever happened to earlier requests.
    Open { per_s: f64 },
}

/// Share of its capacity a shape's demand must reach during the incident to count as
/// saturating it, and the share it must stay under to count as leaving servers to spare.
/// In between, only the criteria every shape has judge it.
pub const SATURATED_LOAD: f64 = 1.1;
pub const SPARE_LOAD: f64 = 0.8;
/// A spread of the service time under this is a sleep's, an exact service time.
pub const EXACT_SIGMA_BELOW: f64 = 0.01;

impl Shape {
    /// A service time that varies no more than a timer's jitter: one request waiting for
    /// another takes a whole round more.
    pub fn exact_service(&self) -> bool {
        self.upstream.sigma < EXACT_SIGMA_BELOW
    }

    /// The upstream's service time while healthy.
    pub fn healthy_service(&self) -> Service {
        Service::lognormal(self.upstream.service.as_secs_f64(), self.upstream.sigma)
    }

    /// The upstream's own service time during the incident.
    pub fn incident_service(&self) -> Service {
        let healthy = self.healthy_service();
        Service::lognormal(healthy.median_s * self.incident.slower, healthy.sigma)
    }

    pub fn healthy_servers(&self) -> u32 {
        self.upstream.servers.count()
    }

    pub fn incident_servers(&self) -> u32 {
        let n = self.healthy_servers();
        if self.incident.halved {
            (n / 2).max(1)
        } else {
            n
        }
    }

    /// Requests per second the servers complete, healthy or during the incident.
    pub fn capacity_per_s(&self, incident: bool) -> f64 {
        let (servers, service) = self.at(incident);
        f64::from(servers) / service.mean_s()
    }

    /// Requests per second the clients would send if the upstream answered each at its own
    /// service time, with no wait.
    pub fn demand_per_s(&self, incident: bool) -> f64 {
        let (_, service) = self.at(incident);
        match self.clients.demand {
            Demand::Open { per_s } => per_s,
            Demand::Closed { clients, think, .. } => {
                f64::from(clients) / (think.as_secs_f64() + service.mean_s())
            }
        }
    }

    /// Demand over capacity.
    pub fn load(&self, incident: bool) -> f64 {
        self.demand_per_s(incident) / self.capacity_per_s(incident)
    }

    pub fn saturated(&self) -> bool {
        self.load(true) >= SATURATED_LOAD
    }

    pub fn spare(&self) -> bool {
        self.load(true) <= SPARE_LOAD
    }

    /// What the servers can answer during the incident that the clients still wait for:
    /// the capacity, less the answers that come after the clients' timeout with no wait at
    /// all (the upstream serves those for nobody).
    pub fn goodput_capacity_per_s(&self) -> f64 {
        let timeout = self.clients.timeout.as_secs_f64();
        self.capacity_per_s(true) * self.incident_service().share_within(timeout)
    }

    /// When the incident ends: at [`RESTORE_S`], or with the run if it is permanent.
    pub fn incident_end_s(&self) -> f64 {
        if self.incident.permanent {
            END_S
        } else {
            RESTORE_S
        }
    }

    /// The limits the shape runs with: the defaults, with `max` raised to twice the servers
    /// when the servers outnumber half of it, so that what the upstream can serve is never
    /// over the maximum a limit may reach.
    pub fn limits(&self) -> Limits {
        let limits = Limits::default();
        Limits {
            max: limits.max.max(2 * self.healthy_servers()),
            ..limits
        }
    }

    /// Connections the clients hold while healthy, by Little's law, with the pool's idle
    /// ones.
    pub fn healthy_inflight(&self) -> f64 {
        let answering = self.demand_per_s(false) * self.healthy_service().mean_s();
        answering + f64::from(self.clients.pool.unwrap_or(0))
    }

    /// The run the engine plays.
    pub fn setup(&self) -> Setup {
        let servers = f64::from(self.healthy_servers());
        let mut capacity =
            Schedule::constant(servers).step(STEP_S, f64::from(self.incident_servers()));
        let mut factor = Schedule::constant(1.0).step(STEP_S, self.incident.slower);
        if !self.incident.permanent {
            capacity = capacity.step(RESTORE_S, servers);
            factor = factor.step(RESTORE_S, 1.0);
        }
        let discipline = match self.upstream.servers {
            Servers::Workers(_) => Discipline::Workers,
            Servers::Cores(_) => Discipline::ProcessorSharing,
        };
        let load = match self.clients.demand {
            Demand::Open { per_s } => Load::Poisson { per_s },
            Demand::Closed {
                clients,
                think,
                retry,
            } => Load::Closed(ClosedLoop {
                workers: clients,
                retry_after_s: retry.as_secs_f64(),
                think_s: think.as_secs_f64(),
                at_once: false,
            }),
        };
        Setup {
            overflow: Default::default(),
            duration_s: END_S,
            upstream: UpstreamSpec {
                discipline,
                capacity,
                latency_factor: factor,
                ..UpstreamSpec::steady(0)
            },
            classes: vec![RequestClass {
                service: self.healthy_service(),
                load,
                client: Client {
                    deadline_s: Some(self.clients.timeout.as_secs_f64()),
                    goodbye_s: None,
                    keep_idle: self.clients.pool,
                },
            }],
        }
    }

    fn at(&self, incident: bool) -> (u32, Service) {
        if incident {
            (self.incident_servers(), self.incident_service())
        } else {
            (self.healthy_servers(), self.healthy_service())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rig() -> Shape {
        "workers=32,service=30ms,sigma=0.3,incident=x27,clients=closed:100,think=250ms"
            .parse()
            .expect("a valid spec")
    }

    #[test]
    fn the_rig_saturates_its_workers_only_during_the_incident() {
        let shape = rig();
        // 100 clients thinking 250 ms between 31 ms answers: about 355 requests/s, for
        // 32 workers that serve 1 020 a second healthy and 38 during the incident.
        assert!((shape.demand_per_s(false) - 355.7).abs() < 1.0);
        assert!((shape.capacity_per_s(false) - 1_020.0).abs() < 1.0);
        assert!((shape.capacity_per_s(true) - 37.8).abs() < 0.1);
        assert!(shape.saturated() && !shape.spare());
        assert!(shape.load(false) < 0.4);
    }

    #[test]
    fn halving_keeps_a_server_and_a_permanent_incident_lasts_the_run() {
        let shape: Shape = "workers=3,incident=half+permanent".parse().expect("valid");
        assert_eq!(shape.incident_servers(), 1);
        assert_eq!(shape.incident_end_s(), END_S);
        let setup = shape.setup();
        let at = |s: f64| setup.upstream.capacity.at(crate::clock::secs(s));
        assert_eq!(
            (at(STEP_S - 1.0), at(STEP_S), at(END_S - 1.0)),
            (3.0, 1.0, 1.0)
        );
    }

    #[test]
    fn max_covers_what_many_servers_can_serve() {
        assert_eq!(rig().limits(), Limits::default());
        let big: Shape = "cores=256".parse().expect("valid");
        assert_eq!(big.limits().max, 512);
    }

    #[test]
    fn answers_after_the_timeout_do_not_count_in_the_goodput_capacity() {
        let exact: Shape = "service=100ms,sigma=0,incident=x20,timeout=1s"
            .parse()
            .expect("valid");
        assert_eq!(
            exact.goodput_capacity_per_s(),
            0.0,
            "2 s answers, 1 s timeout"
        );
        let patient: Shape = "service=100ms,sigma=0,incident=x20,timeout=2s"
            .parse()
            .expect("valid");
        assert_eq!(
            patient.goodput_capacity_per_s(),
            patient.capacity_per_s(true)
        );
    }
}
