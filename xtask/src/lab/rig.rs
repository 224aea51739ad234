//! One run of the nginx rig: nginx (2 workers, a new upstream connection per request,
//! `proxy_read_timeout 2s`) in a limited cgroup of its own, proxying to the upstream; wrk
//! from outside that cgroup with the shape's keep-alive connections and think time; the
//! upstream healthy, then slow, then healthy again.

use std::{
    net::SocketAddr,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{bail, Result};
use limiter_integration_tests::TestCgroup;

use super::{
    access_log::{self, Request},
    limiter::{logged_windows, Limiter},
    phases::{Phase, Phases},
    sampler::Tick,
    shape::RigShape,
    upstream::Upstream,
};
use crate::bench::{
    binaries::Binaries,
    servers::Nginx,
    wrk::{Wrk, WrkReport},
};

pub const NGINX_WORKERS: usize = 2;
const WRK_THREADS: usize = 2;
/// nginx answers 504 after this long without a response.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// wrk waits longer than nginx, so that it sees nginx's 504s rather than timing out itself.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

pub struct RigRun {
    pub shape: RigShape,
    pub limiter: Limiter,
    pub phases: Phases,
    pub ticks: Vec<Tick>,
    pub requests: Vec<Request>,
    pub wrk: WrkReport,
    /// The windows the agent logged, as JSON lines.
    pub windows: String,
}

pub fn run(
    bins: &Binaries,
    phases: Phases,
    limiter: Limiter,
    shape: RigShape,
    up: &Upstream,
) -> Result<RigRun> {
    let SocketAddr::V4(destination) = up.addr else {
        bail!("the upstream listens on IPv4");
    };
    up.set_service_time(shape.healthy);
    let cgroup = TestCgroup::new("lab-nginx");
    let location = format!(
        "proxy_pass http://{}; proxy_read_timeout {}s;",
        up.addr,
        READ_TIMEOUT.as_secs()
    );
    let nginx = Nginx {
        workers: NGINX_WORKERS,
        http: access_log::NGINX_LINES,
        location: &location,
        tls: None,
    }
    .start(&cgroup)?;
    let (agent, sampler) = limiter.attach(bins, &cgroup, destination)?;
    let wrk = Wrk::with_think_time(WRK_THREADS, shape.clients, shape.think, CLIENT_TIMEOUT);
    let (started, wall_start) = (Instant::now(), SystemTime::now());
    let load = wrk.start(&format!("http://{}/", nginx.addr), phases.total())?;
    let mut ticks = Vec::new();
    phases.walk(
        started,
        |phase| {
            up.set_service_time(match phase {
                Phase::Incident => shape.slow,
                Phase::Healthy | Phase::Recovery => shape.healthy,
            });
            Ok(())
        },
        |at_s| {
            ticks.push(sampler.read(at_s, Some(up.busy()))?);
            Ok(())
        },
    )?;
    let wrk = load.finish()?;
    let windows = logged_windows(agent.as_ref(), destination);
    drop(agent);
    Ok(RigRun {
        shape,
        limiter,
        phases,
        ticks,
        requests: access_log::read(nginx.dir(), wall_start)?,
        wrk,
        windows,
    })
}
