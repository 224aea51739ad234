//! `limiter-user run`: attach, keep the heartbeat, report decisions, detach on a signal.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{signal, Signal, SignalKind},
    time::{interval, MissedTickBehavior},
};
use tracing::info;

use crate::{
    cgroup::Cgroup,
    enforcement::{Enforcement, Settings},
    events::DecisionLog,
    lock::AgentLock,
    pins::{self, PinDir},
    preflight,
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
        let signals = Signals::install()?;
        let enforcement = Enforcement::attach(&cgroup, pins, &settings, &kernel)?;
        info!(
            cgroup = %cgroup.path().display(),
            pins = %enforcement.pins().path().display(),
            mode = settings.default_mode.name(),
            initial_limit = settings.initial_limit,
            "limiter attached"
        );
        serve(enforcement, signals, settings.heartbeat_timeout).await
    })?;
    info!("limiter detached");
    Ok(())
}

struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    fn install() -> Result<Self> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }
}

async fn serve(
    enforcement: Enforcement,
    mut signals: Signals,
    heartbeat_timeout: Duration,
) -> Result<()> {
    // A few beats per timeout, so one late tick never trips the kernel's fail-open.
    let mut heartbeat = interval((heartbeat_timeout / 4).min(Duration::from_secs(1)));
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut drain = interval(DRAIN_EVERY);
    let mut log = DecisionLog::default();
    // SAFETY: the registered descriptor is the ring buffer's, owned by `enforcement`, which
    // the AsyncFd owns in turn: it cannot be closed while registered.
    let mut enforcement =
        unsafe { AsyncFd::register(enforcement) }.map_err(std::io::Error::from)?;

    loop {
        tokio::select! {
            _ = heartbeat.tick() => enforcement.get_mut().heartbeat()?,
            ready = enforcement.readable_mut() => {
                let mut guard = ready?;
                log.drain(&mut guard.get_inner_mut().events);
                guard.clear_ready();
            }
            _ = drain.tick() => {
                log.drain(&mut enforcement.get_mut().events);
                log.summarise(Instant::now());
            }
            _ = signals.term.recv() => break,
            _ = signals.int.recv() => break,
        }
    }
    // Dropping the enforcement detaches the programs and removes the pins.
    drop(enforcement.into_inner());
    Ok(())
}
