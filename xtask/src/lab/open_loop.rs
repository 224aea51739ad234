//! The production incident on real sockets, as the simulator's `production` scenario plays
//! it: a service sending 20 requests a second whatever the answers do (Poisson arrivals, a
//! connection per request, given up on after 30 s), from a limited cgroup straight to an
//! upstream whose median latency climbs from 350 ms to 10.4 s with no error at all, over
//! the first half of the incident, and holds there. The upstream has a thread for every
//! connection: a slow dependency, not a saturated one.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::{bail, Result};
use limiter_integration_tests::TestCgroup;
use limiter_sim::{
    breaker::SlowCallBreaker,
    clock::{as_secs, secs},
};

use super::{
    access_log::Request,
    figures::{BAD_GATEWAY, GATEWAY_TIMEOUT},
    limiter::{logged_windows, Limiter},
    phases::{Phase, Phases},
    sampler::Tick,
    shape::Servers,
    upstream::Upstream,
};
use crate::{
    bench::{binaries::Binaries, process},
    client::{Fate, OpenLoopReport, Sent},
};

pub const RATE: f64 = 20.0;
pub const HEALTHY: Duration = Duration::from_millis(350);
pub const DEGRADED: Duration = Duration::from_millis(10_400);
pub const SIGMA: f64 = 0.4;
pub const TIMEOUT: Duration = Duration::from_secs(30);

pub struct OpenLoopRun {
    pub limiter: Limiter,
    pub phases: Phases,
    pub ticks: Vec<Tick>,
    pub sent: Vec<Sent>,
    /// The windows the agent logged, as JSON lines.
    pub windows: String,
}

impl OpenLoopRun {
    /// Requests refused at connect among those sent within `(from, to)` seconds.
    pub fn refused_in(&self, (from, to): (f64, f64)) -> usize {
        self.sent
            .iter()
            .filter(|s| s.fate == Fate::Refused && s.at_s >= from && s.at_s < to)
            .count()
    }

    /// Seconds from the start to the first refusal.
    pub fn first_refusal_s(&self) -> Option<f64> {
        self.sent
            .iter()
            .find(|s| s.fate == Fate::Refused)
            .map(|s| s.at_s)
    }

    /// When the reference slow-call breaker, watching these calls, would have opened: at
    /// least half of the calls that ended in the last 10 s took over 2 s.
    pub fn breaker_opens_s(&self) -> Option<f64> {
        breaker_opens_s(&self.sent)
    }

    pub fn peak_in_flight(&self) -> usize {
        peak_in_flight(&self.sent)
    }

    /// The median time to an answer of the requests sent within `(from, to)`.
    pub fn answered_p50_s(&self, (from, to): (f64, f64)) -> Option<f64> {
        let mut took: Vec<f64> = self
            .sent
            .iter()
            .filter(|s| s.fate == Fate::Answered && s.at_s >= from && s.at_s < to)
            .map(|s| s.seconds)
            .collect();
        took.sort_by(f64::total_cmp);
        took.get(took.len() / 2).copied()
    }

    /// Each request as the rig's figures count nginx's: ended at, and a status for its
    /// fate (200 answered, 502 refused at connect, 504 given up on, 0 failed).
    pub fn requests(&self) -> Vec<Request> {
        self.sent
            .iter()
            .map(|s| Request {
                at_s: s.at_s + s.seconds,
                status: match s.fate {
                    Fate::Answered => 200,
                    Fate::Refused => BAD_GATEWAY,
                    Fate::TimedOut => GATEWAY_TIMEOUT,
                    Fate::Failed => 0,
                },
                seconds: s.seconds,
            })
            .collect()
    }
}

/// A slow-call breaker, the simulator's reference, reading calls as they end.
fn breaker_opens_s(sent: &[Sent]) -> Option<f64> {
    let mut ended: Vec<(f64, f64)> = sent
        .iter()
        .filter(|s| s.fate != Fate::Refused)
        .map(|s| (s.at_s + s.seconds, s.seconds))
        .collect();
    ended.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut breaker = SlowCallBreaker::default();
    for (at, took) in ended {
        breaker.record(secs(at), secs(took));
    }
    breaker.opened_at().map(as_secs)
}

/// The most requests connected at once: from each connect to its answer or its end.
fn peak_in_flight(sent: &[Sent]) -> usize {
    let mut edges: Vec<(f64, i32)> = sent
        .iter()
        .filter(|s| s.fate != Fate::Refused)
        .flat_map(|s| [(s.at_s, 1), (s.at_s + s.seconds, -1)])
        .collect();
    // An end before a start at the same instant: one connection, not two.
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut open = 0;
    let mut peak = 0;
    for (_, step) in edges {
        open += step;
        peak = peak.max(open);
    }
    peak as usize
}

/// The median service time `at_s` into a run: healthy, then climbing to degraded over the
/// incident's first half, holding there, and healthy again for the recovery.
pub fn median_at(phases: &Phases, at_s: f64) -> Duration {
    let (start, end) = phases.window(Phase::Incident);
    if phases.at(at_s) != Phase::Incident {
        return HEALTHY;
    }
    let climbed = ((at_s - start) / ((end - start) / 2.0)).min(1.0);
    HEALTHY + (DEGRADED - HEALTHY).mul_f64(climbed)
}

pub fn run(bins: &Binaries, phases: Phases, limiter: Limiter) -> Result<OpenLoopRun> {
    let up = Upstream::start(Servers::Unbounded, SIGMA, HEALTHY)?;
    let SocketAddr::V4(destination) = up.addr else {
        bail!("the upstream listens on IPv4");
    };
    let cgroup = TestCgroup::new("lab-open-loop");
    let (agent, sampler) = limiter.attach(bins, &cgroup, destination)?;
    let mut cmd = process::in_cgroup(&cgroup, &bins.client);
    cmd.args(["bench-client", "open-loop", "--to", &up.addr.to_string()])
        .args(["--rate", &RATE.to_string()])
        .args(["--timeout", &TIMEOUT.as_secs_f64().to_string()]);
    let client = process::Running::start(cmd)?;
    let mut ticks = Vec::new();
    phases.walk(
        Instant::now(),
        |_| Ok(()),
        |at_s| {
            up.set_service_time(median_at(&phases, at_s));
            ticks.push(sampler.read(at_s, Some(up.busy()))?);
            Ok(())
        },
    )?;
    let report: OpenLoopReport = client.stop()?;
    let windows = logged_windows(agent.as_ref(), destination);
    drop(agent);
    Ok(OpenLoopRun {
        limiter,
        phases,
        ticks,
        sent: report.requests,
        windows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(at_s: f64, seconds: f64, fate: Fate) -> Sent {
        Sent {
            at_s,
            seconds,
            fate,
        }
    }

    #[test]
    fn in_flight_counts_connected_requests_and_not_refused_ones() {
        let requests = [
            sent(0.0, 1.0, Fate::Answered),
            sent(0.5, 0.0, Fate::Refused),
            sent(0.6, 2.0, Fate::TimedOut),
            sent(1.0, 1.0, Fate::Answered),
            sent(3.0, 1.0, Fate::Answered),
        ];
        assert_eq!(peak_in_flight(&requests), 2);
    }

    #[test]
    fn the_breaker_opens_once_half_the_calls_ending_in_10_s_took_over_2_s() {
        let mut requests: Vec<Sent> = (0..20)
            .map(|i| sent(f64::from(i), 0.35, Fate::Answered))
            .collect();
        assert_eq!(breaker_opens_s(&requests), None);
        requests.extend((20..30).map(|i| sent(f64::from(i), 3.0, Fate::Answered)));
        let opened = breaker_opens_s(&requests).unwrap();
        assert!((23.0..33.0).contains(&opened), "{opened}");
    }

    #[test]
    fn the_median_climbs_over_the_incidents_first_half_and_holds() {
        let secs = Duration::from_secs;
        let phases = Phases::new(secs(30), secs(60), secs(30));
        assert_eq!(median_at(&phases, 10.0), HEALTHY);
        assert_eq!(median_at(&phases, 30.0), HEALTHY);
        let halfway = median_at(&phases, 45.0);
        assert!(HEALTHY < halfway && halfway < DEGRADED, "{halfway:?}");
        assert_eq!(median_at(&phases, 60.0), DEGRADED);
        assert_eq!(median_at(&phases, 89.0), DEGRADED);
        assert_eq!(median_at(&phases, 90.0), HEALTHY);
    }
}
