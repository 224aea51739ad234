//! Families of shapes, each a rule on the shape: a sweep's scorecard gives each family its
//! own row, so that a change's effect on every kind of upstream and client shows in one run.
//! A shape belongs to every family whose rule it meets.

use serde::Serialize;

use super::{Demand, Servers, Shape};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    All,
    FewWorkers,
    ManyWorkers,
    ExactService,
    VariableService,
    ProcessorSharing,
    Saturated,
    SpareCapacity,
    PermanentShift,
    OpenLoop,
    Pools,
    ShortTimeouts,
    LongTimeouts,
    RetryingClients,
}

/// Servers (workers or cores) at most this many are few, at least this many are many.
const FEW: u32 = 8;
const MANY: u32 = 64;
/// A spread of the service time at least this is variable.
const VARIABLE_SIGMA: f64 = 0.5;
/// A timeout under this multiple of the incident's p99 service time is short (a request
/// that waited one round is given up on); one over the other multiple is long.
const SHORT_TIMEOUT: f64 = 2.0;
const LONG_TIMEOUT: f64 = 10.0;
/// Clients that send a refused request again this soon retry at once.
const RETRY_AT_ONCE_S: f64 = 0.01;

impl Family {
    pub const ALL: [Family; 14] = [
        Family::All,
        Family::FewWorkers,
        Family::ManyWorkers,
        Family::ExactService,
        Family::VariableService,
        Family::ProcessorSharing,
        Family::Saturated,
        Family::SpareCapacity,
        Family::PermanentShift,
        Family::OpenLoop,
        Family::Pools,
        Family::ShortTimeouts,
        Family::LongTimeouts,
        Family::RetryingClients,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Family::All => "all",
            Family::FewWorkers => "few-workers",
            Family::ManyWorkers => "many-workers",
            Family::ExactService => "exact-service",
            Family::VariableService => "variable-service",
            Family::ProcessorSharing => "processor-sharing",
            Family::Saturated => "saturated",
            Family::SpareCapacity => "spare-capacity",
            Family::PermanentShift => "permanent-shift",
            Family::OpenLoop => "open-loop",
            Family::Pools => "pools",
            Family::ShortTimeouts => "short-timeouts",
            Family::LongTimeouts => "long-timeouts",
            Family::RetryingClients => "retrying-clients",
        }
    }

    /// The rule, in words, for the documentation.
    pub fn rule(self) -> &'static str {
        match self {
            Family::All => "every shape",
            Family::FewWorkers => "at most 8 workers or cores",
            Family::ManyWorkers => "at least 64 workers or cores",
            Family::ExactService => "sigma under 0.01: a sleep, varying by its timer's jitter",
            Family::VariableService => "sigma at least 0.5",
            Family::ProcessorSharing => "cores shared by every request held",
            Family::Saturated => "demand at least 1.1x the capacity during the incident",
            Family::SpareCapacity => "demand at most 0.8x the capacity during the incident",
            Family::PermanentShift => "the incident lasts to the end of the run",
            Family::OpenLoop => "Poisson arrivals",
            Family::Pools => "a keep-alive pool",
            Family::ShortTimeouts => "timeout under 2x the incident's p99 service time",
            Family::LongTimeouts => "timeout over 10x the incident's p99 service time",
            Family::RetryingClients => {
                "closed-loop clients sending a refused request again within 10 ms"
            }
        }
    }

    pub fn holds(self, shape: &Shape) -> bool {
        let servers = shape.healthy_servers();
        let timeout = shape.clients.timeout.as_secs_f64();
        let p99 = shape.incident_service().p99_s();
        match self {
            Family::All => true,
            Family::FewWorkers => servers <= FEW,
            Family::ManyWorkers => servers >= MANY,
            Family::ExactService => shape.exact_service(),
            Family::VariableService => shape.upstream.sigma >= VARIABLE_SIGMA,
            Family::ProcessorSharing => matches!(shape.upstream.servers, Servers::Cores(_)),
            Family::Saturated => shape.saturated(),
            Family::SpareCapacity => shape.spare(),
            Family::PermanentShift => shape.incident.permanent,
            Family::OpenLoop => matches!(shape.clients.demand, Demand::Open { .. }),
            Family::Pools => shape.clients.pool.is_some(),
            Family::ShortTimeouts => timeout < SHORT_TIMEOUT * p99,
            Family::LongTimeouts => timeout > LONG_TIMEOUT * p99,
            Family::RetryingClients => matches!(
                shape.clients.demand,
                Demand::Closed { retry, .. } if retry.as_secs_f64() <= RETRY_AT_ONCE_S
            ),
        }
    }
}

impl Shape {
    /// Every family the shape belongs to, in [`Family::ALL`]'s order.
    pub fn families(&self) -> Vec<Family> {
        Family::ALL.into_iter().filter(|f| f.holds(self)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rig_is_a_saturated_shape_with_a_short_timeout() {
        let families = Shape::default().families();
        assert_eq!(
            families,
            [Family::All, Family::Saturated, Family::ShortTimeouts]
        );
    }

    #[test]
    fn each_rule_reads_the_shape() {
        let shape: Shape =
            "cores=4,sigma=0,incident=x2+permanent,clients=open:10/s,pool=4,timeout=60s"
                .parse()
                .expect("valid");
        let families = shape.families();
        for f in [
            Family::FewWorkers,
            Family::ExactService,
            Family::ProcessorSharing,
            Family::SpareCapacity,
            Family::PermanentShift,
            Family::OpenLoop,
            Family::Pools,
            Family::LongTimeouts,
        ] {
            assert!(families.contains(&f), "{f:?} in {families:?}");
        }
        let retrying: Shape = "workers=64,sigma=0.5,retry=1ms".parse().expect("valid");
        let families = retrying.families();
        for f in [
            Family::ManyWorkers,
            Family::VariableService,
            Family::RetryingClients,
        ] {
            assert!(families.contains(&f), "{f:?} in {families:?}");
        }
    }
}
