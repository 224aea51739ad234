//! `limiter-user run`: attach, keep the heartbeat, report decisions, detach on a signal.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use std::os::fd::AsRawFd;
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{self, SignalKind},
    time::{interval, MissedTickBehavior},
};

use tracing::{debug, info};

use crate::{
    cgroup::Cgroup,
    enforcement::{Enforcement, Rings, Settings},
    events::DecisionLog,
    lock::AgentLock,
    pins::{self, PinDir},
    preflight,
    signals::{Signal, SignalEvent, SignalReader},
};

/// Events below the kernel's wake-up threshold are picked up on this timer.
const DRAIN_EVERY: Duration = Duration::from_millis(100);

pub fn run(cgroup: Cgroup, pin_dir: Option<PinDir>, settings: Settings) -> Result<()> {
    preflight::check_privileges()?;
    let kernel = preflight::check_kernel()?;
    pins::ensure_bpffs()?;
    let pins = pin_dir.unwrap_or_else(|| PinDir::for_cgroup(&cgroup));
    let _lock = AgentLock::acquire(&cgroup.escaped_name())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        // Handlers first: a SIGTERM that arrives while attaching must still detach.
        let shutdown = Shutdown::install()?;
        let (enforcement, rings) = Enforcement::attach(&cgroup, pins, &settings, &kernel)?;
        info!(
            cgroup = %cgroup.path().display(),
            pins = %enforcement.pins().path().display(),
            mode = settings.default_mode.name(),
            initial_limit = settings.initial_limit,
            "limiter attached"
        );
        serve(enforcement, rings, shutdown, settings.heartbeat_timeout).await
    })?;
    info!("limiter detached");
    Ok(())
}

/// SIGTERM and SIGINT: detach and exit.
struct Shutdown {
    term: unix::Signal,
    int: unix::Signal,
}

impl Shutdown {
    fn install() -> Result<Self> {
        Ok(Shutdown {
            term: unix::signal(SignalKind::terminate())?,
            int: unix::signal(SignalKind::interrupt())?,
        })
    }
}

async fn serve(
    mut enforcement: Enforcement,
    rings: Rings,
    mut shutdown: Shutdown,
    heartbeat_timeout: Duration,
) -> Result<()> {
    // A few beats per timeout, so one late tick never trips the kernel's fail-open.
    let mut heartbeat = interval((heartbeat_timeout / 4).min(Duration::from_secs(1)));
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut drain = interval(DRAIN_EVERY);
    let mut decisions = watch(DecisionLog::new(rings.decisions))?;
    let mut samples = watch(SignalReader::new(rings.signals))?;

    loop {
        tokio::select! {
            _ = heartbeat.tick() => enforcement.heartbeat()?,
            ready = decisions.readable_mut() => {
                let mut guard = ready?;
                guard.get_inner_mut().drain();
                guard.clear_ready();
            }
            ready = samples.readable_mut() => {
                let mut guard = ready?;
                guard.get_inner_mut().drain(log_signal);
                guard.clear_ready();
            }
            _ = drain.tick() => {
                decisions.get_mut().drain();
                decisions.get_mut().summarise(Instant::now());
                samples.get_mut().drain(log_signal);
            }
            _ = shutdown.term.recv() => break,
            _ = shutdown.int.recv() => break,
        }
    }
    // Dropping the enforcement detaches the programs and removes the pins.
    drop(enforcement);
    Ok(())
}

/// Registers a ring-buffer reader with the runtime, to wake when the kernel forces it.
fn watch<T: AsRawFd>(reader: T) -> Result<AsyncFd<T>> {
    // SAFETY: the registered descriptor is the ring buffer's, owned by `reader`, which the
    // AsyncFd owns in turn: it cannot be closed while registered.
    Ok(unsafe { AsyncFd::register(reader) }.map_err(std::io::Error::from)?)
}

fn log_signal(ev: SignalEvent) {
    let (value_ns, inflight) = match ev.signal {
        Signal::Sample {
            latency_ns,
            inflight,
        } => (latency_ns, inflight),
        Signal::Handshake { rtt_ns } => (rtt_ns, 0),
        _ => (0, 0),
    };
    debug!(
        target: "limiter_user::signals",
        kind = ev.signal.name(),
        destination = %ev.dest.socket_addr(),
        value_ns,
        inflight,
    );
}
