//! `limiter-user run`: attach, then run the control loop until SIGTERM/SIGINT; SIGHUP
//! reloads the configuration.

use std::{
    net::SocketAddr,
    os::fd::AsRawFd,
    process::ExitStatus,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{self, SignalKind},
    sync::mpsc,
    time::{interval, Interval, MissedTickBehavior},
};
use tracing::{debug, error, info, warn};

use crate::{
    attach::{Attachment, Rings, Settings},
    cgroup::Cgroup,
    clock::monotonic_ns,
    config::Config,
    control::ControlLoop,
    decision_log::DecisionLog,
    exec::{Launch, Supervised},
    failures::Failures,
    feed::{self, Feed},
    latency_ring::{LatencyRing, Signal, SignalEvent},
    lock::{self, AgentLock},
    metrics::{self, Metrics, Snapshot},
    pins::{self, PinDir},
    preflight::{self, Kernel},
    resolve::{self, Resolved},
    resolved_config::ResolvedConfig,
    status,
};

/// The control loop's period (Envoy's concurrency update interval).
const UPDATE_EVERY: Duration = Duration::from_millis(100);
/// How often the kernel's destination table is compared with the controllers.
const SYNC_EVERY: Duration = Duration::from_secs(1);

/// Where the configuration comes from, so that SIGHUP can read it again.
pub trait ConfigSource {
    fn load(&self) -> Result<Config>;
}

/// How the agent runs, besides its configuration.
pub struct Options {
    pub pin_dir: Option<PinDir>,
    pub metrics: Option<SocketAddr>,
    /// On SIGTERM/SIGINT, leave the programs attached for the next agent to take over.
    pub keep_attached: bool,
}

fn settings(config: &Config, plan: &ResolvedConfig) -> Settings {
    Settings {
        default_mode: config.mode,
        queue: plan.queue,
        queues: plan.queues(),
        unseen_limit: plan.unseen_limit(),
        heartbeat_timeout: Duration::from_secs(config.heartbeat_timeout_secs),
        max_destinations: config.max_destinations,
        policies: plan.static_policies(),
        peers: plan.static_peers(),
        pinned: plan.destinations.keys().copied().collect(),
        signal_buffer_bytes: config.signal_buffer_kib * 1024,
    }
}

/// Attaches to `cgroup` and enforces until SIGTERM/SIGINT; with `launch`, starts that
/// program inside the cgroup once attached, passes those signals on to it, and stops when
/// it and everything it started are gone, returning its exit status.
pub fn run(
    cgroup: Cgroup,
    options: Options,
    source: &dyn ConfigSource,
    launch: Option<Launch>,
) -> Result<Option<ExitStatus>> {
    let config = source.load()?;
    preflight::check_privileges()?;
    let kernel = preflight::check_kernel()?;
    pins::ensure_bpffs()?;
    let pins = match options.pin_dir {
        Some(dir) => dir,
        None => PinDir::for_cgroup(&cgroup)?,
    };
    let _cgroup_lock = AgentLock::acquire(&cgroup.lock_name(), "manages this cgroup")?;
    let mut pins_lock = AgentLock::acquire(
        &pins.lock_name(),
        &format!("uses the pin directory {}", pins.path().display()),
    )?;
    lock::remove_stale();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let status = runtime.block_on(async {
        // Handlers first: a SIGTERM that arrives while attaching must still detach.
        let unix_signals = UnixSignals::install()?;
        let metrics = match options.metrics {
            Some(addr) => {
                let metrics = Metrics::default();
                metrics::serve(addr, metrics.clone()).await?;
                Some(metrics)
            }
            None => None,
        };
        let resolved = resolve::resolve(&config, resolve::TIMEOUT).await;
        let plan = ResolvedConfig::build(&config, &resolved, None)?;
        let settings = settings(&config, &plan);
        let took_over = Attachment::can_take_over(&pins);
        let (attachment, rings) = if took_over {
            Attachment::take_over(pins, &settings)?
        } else {
            Attachment::attach(&cgroup, pins, &settings, &kernel)?
        };
        let feed = Feed::default();
        let feed_path = feed::socket_path(attachment.pins());
        let _feed_socket = feed::serve(feed_path.clone(), feed.clone())?;
        pins_lock.also_owns(&feed_path)?;
        info!(
            took_over,
            cgroup = %cgroup.path().display(),
            pins = %attachment.pins().path().display(),
            mode = config.mode.name(),
            algorithm = %config.algorithm,
            "limiter attached"
        );
        let mut agent = Agent {
            cgroup_inode: cgroup.inode(),
            cgroup,
            kernel,
            attachment,
            control: ControlLoop::new(plan, forget_idle(&config), feed.clone()),
            feed,
            config,
            metrics,
            signals_consumed: 0,
            keep_attached: options.keep_attached,
            failures: Failures::default(),
        };
        // Controllers for what the kernel already knows start from its current limits.
        agent
            .control
            .adopt(monotonic_ns(), &mut agent.attachment.maps);
        let child = launch.map(|l| l.spawn(&agent.cgroup)).transpose()?;
        agent.serve(rings, unix_signals, source, child).await
    })?;
    info!("limiter detached");
    Ok(status)
}

fn forget_idle(config: &Config) -> Duration {
    Duration::from_secs(config.forget_idle_secs)
}

/// A few beats per timeout, so one late tick never trips the kernel's fail-open.
fn heartbeat_interval(config: &Config) -> Interval {
    let timeout = Duration::from_secs(config.heartbeat_timeout_secs);
    let mut heartbeat = interval((timeout / 4).min(Duration::from_secs(1)));
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    heartbeat
}

/// SIGTERM and SIGINT end the agent, SIGHUP reloads.
struct UnixSignals {
    term: unix::Signal,
    int: unix::Signal,
    hup: unix::Signal,
}

impl UnixSignals {
    fn install() -> Result<Self> {
        Ok(UnixSignals {
            term: unix::signal(SignalKind::terminate())?,
            int: unix::signal(SignalKind::interrupt())?,
            hup: unix::signal(SignalKind::hangup())?,
        })
    }
}

/// Why a configuration is being resolved: it is applied once its names are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    Reload,
    Reresolve,
}

/// A configuration whose `host` names have been looked up, ready to apply.
struct Resolution {
    why: Why,
    config: Config,
    resolved: Resolved,
}

struct Agent {
    cgroup: Cgroup,
    /// Identifies the cgroup directory attached to: systemd recreates a service's cgroup
    /// on restart, and the programs die with the old one.
    cgroup_inode: Option<u64>,
    kernel: Kernel,
    attachment: Attachment,
    control: ControlLoop,
    config: Config,
    metrics: Option<Metrics>,
    feed: Feed,
    signals_consumed: u64,
    keep_attached: bool,
    /// The agent's own map operations (heartbeat, re-attach, metrics) that failed.
    failures: Failures,
}

impl Agent {
    async fn serve(
        mut self,
        rings: Rings,
        mut unix_signals: UnixSignals,
        source: &dyn ConfigSource,
        mut child: Option<Supervised>,
    ) -> Result<Option<ExitStatus>> {
        let mut heartbeat = heartbeat_interval(&self.config);
        let mut update = interval(UPDATE_EVERY);
        update.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut sync = interval(SYNC_EVERY);
        let mut resolve = interval(Duration::from_secs(self.config.resolve_interval_secs));
        resolve.tick().await;
        let (mut decisions, mut latency) = watch_rings(rings, &self.feed)?;
        let (resolved_tx, mut resolved_rx) = mpsc::channel::<Resolution>(1);
        // At most one resolution at a time: a resolver that hangs does not pile them up. A
        // reload asked for meanwhile waits for it.
        let mut resolving = false;
        let mut waiting_reload: Option<Config> = None;

        let status = loop {
            tokio::select! {
                _ = heartbeat.tick() => {
                    let beat = self.attachment.heartbeat();
                    self.failures.check("writing the heartbeat", beat);
                }
                ready = decisions.readable_mut() => {
                    let mut guard = ready?;
                    let control = &mut self.control;
                    guard.get_inner_mut().drain(|dest, ts_ns| control.on_turned_away(dest, ts_ns));
                    guard.clear_ready();
                }
                ready = latency.readable_mut() => {
                    let mut guard = ready?;
                    let control = &mut self.control;
                    self.signals_consumed += guard.get_inner_mut().drain(|ev| consume(control, ev)) as u64;
                    guard.clear_ready();
                }
                _ = update.tick() => {
                    let control = &mut self.control;
                    self.signals_consumed += latency.get_mut().drain(|ev| consume(control, ev)) as u64;
                    // Connects turned away are demand the window that closes now did not meet.
                    decisions.get_mut().drain(|dest, ts_ns| control.on_turned_away(dest, ts_ns));
                    self.control.update(monotonic_ns(), &mut self.attachment.maps);
                    decisions.get_mut().summarise(Instant::now());
                    if let Some(status) = child.as_ref().map(Supervised::finished).transpose()?.flatten() {
                        break Some(status);
                    }
                }
                _ = sync.tick() => {
                    if let Some(rings) = self.follow_cgroup() {
                        (decisions, latency) = watch_rings(rings, &self.feed)?;
                    }
                    let restored = self.attachment.restore_pins();
                    if self.failures.check("pinning the maps again", restored) == Some(true) {
                        warn!(pins = %self.attachment.pins().path().display(), "the pin directory was removed: the maps are pinned again");
                    }
                    self.control.sync(monotonic_ns(), &mut self.attachment.maps);
                    let published = self.publish_metrics();
                    self.failures.check("reading the maps for metrics", published);
                }
                _ = resolve.tick(), if !resolving => {
                    if self.config.destinations.iter().any(|d| d.host.is_some()) {
                        resolving = true;
                        spawn_resolution(Why::Reresolve, self.config.clone(), resolved_tx.clone());
                    }
                }
                happened = Supervised::next(&mut child) => happened?,
                // With a CMD, these are read with their origin and passed on instead.
                _ = unix_signals.hup.recv(), if child.is_none() => match source.load() {
                    Ok(config) if !resolving => {
                        resolving = true;
                        spawn_resolution(Why::Reload, config, resolved_tx.clone());
                    }
                    Ok(config) => {
                        info!("the reload waits for the name resolution under way");
                        waiting_reload = Some(config);
                    }
                    Err(e) => error!("reload failed, keeping the previous configuration: {e:#}"),
                },
                Some(resolution) = resolved_rx.recv() => {
                    resolving = false;
                    if let Some(config) = waiting_reload.take() {
                        resolving = true;
                        spawn_resolution(Why::Reload, config, resolved_tx.clone());
                    }
                    let why = resolution.why;
                    match self.apply(resolution.config, &resolution.resolved) {
                        Ok(()) if why == Why::Reload => {
                            heartbeat = heartbeat_interval(&self.config);
                            resolve = interval(Duration::from_secs(self.config.resolve_interval_secs));
                            resolve.tick().await;
                            info!("configuration reloaded");
                        }
                        Ok(()) => {}
                        Err(e) if why == Why::Reload => error!("reload failed, keeping the previous configuration: {e:#}"),
                        Err(e) => error!("re-resolving destinations failed, keeping the previous addresses: {e:#}"),
                    }
                }
                _ = unix_signals.term.recv(), if child.is_none() => break None,
                _ = unix_signals.int.recv(), if child.is_none() => break None,
            }
        };
        decisions.get_mut().flush();
        if self.keep_attached {
            self.attachment.keep_attached();
            info!(pins = %self.attachment.pins().path().display(), "leaving the programs attached for the next agent");
        }
        // Dropping the attachment detaches the programs and removes the pins, unless kept.
        Ok(status)
    }

    /// Re-attaches when the cgroup directory was replaced (a restarted systemd service);
    /// returns the new rings when it did. A failure is logged and tried again next time.
    fn follow_cgroup(&mut self) -> Option<Rings> {
        let inode = self.cgroup.inode();
        if inode == self.cgroup_inode || inode.is_none() {
            return None;
        }
        info!(cgroup = %self.cgroup.path().display(), "the cgroup was recreated: attaching again");
        let settings = settings(&self.config, self.control.plan());
        let reattached = self
            .attachment
            .reattach(&self.cgroup, &settings, &self.kernel);
        let rings = self
            .failures
            .check("attaching to the recreated cgroup", reattached)?;
        self.cgroup_inode = inode;
        self.control
            .restart(monotonic_ns(), &mut self.attachment.maps);
        info!("limiter re-attached");
        Some(rings)
    }

    fn publish_metrics(&self) -> Result<()> {
        if let Some(metrics) = &self.metrics {
            let maps = &self.attachment.maps;
            metrics.publish(Snapshot {
                rows: status::rows(maps)?,
                globals: maps.globals()?,
                signals: self.signals_consumed,
                map_failures: self.failures.total() + self.control.map_failures(),
                forgotten: self.control.forgotten(),
                changes: self.control.changes(),
                heartbeat_ns: maps.config()?.heartbeat_ns,
            });
        }
        Ok(())
    }

    /// Switches to `config`; on error the previous configuration stays in force.
    fn apply(&mut self, config: Config, resolved: &Resolved) -> Result<()> {
        config.check_reloadable(&self.config)?;
        let plan = ResolvedConfig::build(&config, resolved, Some(self.control.plan()))?;
        self.attachment.reconfigure(&settings(&config, &plan))?;
        self.control.apply(plan, monotonic_ns());
        self.control.set_forget_idle(forget_idle(&config));
        self.config = config;
        Ok(())
    }
}

/// Looks up `config`'s names off the control loop and hands the result back to it.
fn spawn_resolution(why: Why, config: Config, to: mpsc::Sender<Resolution>) {
    tokio::spawn(async move {
        let resolved = resolve::resolve(&config, resolve::TIMEOUT).await;
        let _ = to
            .send(Resolution {
                why,
                config,
                resolved,
            })
            .await;
    });
}

fn consume(control: &mut ControlLoop, batch: &[SignalEvent]) {
    batch.iter().for_each(log_signal);
    control.on_signals(batch);
}

fn watch_rings(rings: Rings, feed: &Feed) -> Result<(AsyncFd<DecisionLog>, AsyncFd<LatencyRing>)> {
    Ok((
        watch(DecisionLog::new(rings.decisions, feed.clone()))?,
        watch(LatencyRing::new(rings.signals))?,
    ))
}

/// Registers a ring-buffer reader with the runtime, to wake when the kernel forces it.
fn watch<T: AsRawFd>(reader: T) -> Result<AsyncFd<T>> {
    // SAFETY: the registered descriptor is the ring buffer's, owned by `reader`, which the
    // AsyncFd owns in turn: it cannot be closed while registered.
    Ok(unsafe { AsyncFd::register(reader) }.map_err(std::io::Error::from)?)
}

fn log_signal(ev: &SignalEvent) {
    let (value_ns, inflight, status) = match ev.signal {
        Signal::Sample {
            latency_ns,
            inflight,
            status,
        } => (latency_ns, inflight, status),
        Signal::Handshake { rtt_ns, inflight } => (rtt_ns, inflight, 0),
        Signal::GaveUp { waited_ns } | Signal::HungUp { waited_ns } => (waited_ns, 0, 0),
        _ => (0, 0, 0),
    };
    debug!(
        // The documented filter for the latency signal, wherever the code lives.
        target: "limiter_user::signals",
        kind = ev.signal.name(),
        destination = %ev.dest.socket_addr(),
        value_ns,
        inflight,
        status,
    );
}
