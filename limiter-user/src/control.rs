//! The control loop: kernel signals feed one controller per destination, whose limits
//! are written back to the kernel's policies.

use std::time::Duration;

use foldhash::HashMap;
use limiter_common::DestKey;
use limiter_core::{ControlConfig, Controller, DestinationController, Outcome, WindowReport};
use tracing::debug;

use crate::{
    failures::Failures,
    feed::{self, Event, Feed, LimitChange, WaitEnded},
    latency_ring::{Signal, SignalEvent, WaitEnd},
    maps::Maps,
    prefetch::prefetch,
    resolved_config::ResolvedConfig,
    wait_log::WaitLog,
};

/// A cache line, for [`ControlLoop::warm`]'s prefetches.
const CACHE_LINE: usize = 64;

/// In declaration order: a sample reads `controller` and `awake`, which thus share a cache
/// line where the compiler's order put them a cache line apart.
#[repr(C)]
struct Managed {
    controller: Box<DestinationController>,
    /// On the update tick's list.
    awake: bool,
    key: DestKey,
    config: ControlConfig,
    /// What the kernel has now, so that only changes are written; None to write again.
    published: Option<Published>,
    /// The limit the kernel enforces, whatever `published` says.
    enforced: Option<u32>,
    /// Verdicts since the last limit change: part of why the limit moves (saturating: a
    /// destination stays under 4 KiB).
    errors: u16,
    timeouts: u16,
    /// Overload answers (HTTP 429, 503) since the last limit change.
    overloads: u16,
    /// Rebuilt by a new configuration since the last limit change.
    reconfigured: bool,
}

/// What a controller last wrote to its policy: the rest of it is the configuration's.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Published {
    limit: u32,
    baseline_ns: u64,
    p90_ns: u64,
    /// Queue waits: p50, p99.
    waits: (u64, u64),
}

/// Limit changes since the agent started, by direction.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Changes {
    pub up: u64,
    pub down: u64,
}

/// The kernel's table is walked for idle destinations this many times per `forget_idle`
/// (and at most once a second): forgetting is up to a fifth late, and a table of 100 000
/// destinations, a walk of tens of milliseconds, is read once a minute by default.
const WALKS_PER_FORGET_IDLE: u32 = 5;

/// How often the table is walked for destinations idle for `forget_idle`.
pub fn idle_walk_period(forget_idle: Duration) -> Duration {
    forget_idle / WALKS_PER_FORGET_IDLE
}

/// Every destination's controller. Destination keys are hashed with foldhash: every
/// sample looks its controller up, and SipHash's resistance to chosen keys buys nothing
/// for keys the kernel reports.
pub struct ControlLoop {
    plan: ResolvedConfig,
    /// The controllers, in slots: a sample costs one hash lookup (`slot_of`) and the update
    /// tick none, which over a thousand destinations was a fifth of the agent's time.
    managed: Vec<Managed>,
    slot_of: HashMap<DestKey, u32>,
    /// The slots the update tick visits: controllers with something to decide. A quiet one
    /// (no traffic for a while) costs its memory only, until a signal wakes it.
    awake: Vec<u32>,
    /// The waits of connects admitted from a queue, for the destinations that queue.
    waits: HashMap<DestKey, WaitLog>,
    forget_idle: Duration,
    /// When the kernel's table was last walked for idle destinations.
    walked_ns: Option<u64>,
    forgotten: u64,
    failures: Failures,
    feed: Feed,
    changes: Changes,
}

impl ControlLoop {
    pub fn new(plan: ResolvedConfig, forget_idle: Duration, feed: Feed) -> Self {
        ControlLoop {
            plan,
            managed: Vec::new(),
            slot_of: HashMap::default(),
            awake: Vec::new(),
            waits: HashMap::default(),
            forget_idle,
            walked_ns: None,
            forgotten: 0,
            failures: Failures::default(),
            feed,
            changes: Changes::default(),
        }
    }

    pub fn changes(&self) -> Changes {
        self.changes
    }

    /// The destination's controller, created on first sight and awake from then on; none
    /// for an excluded one, whose "off" policy no controller may overwrite. `current` is the
    /// limit the kernel already enforces (left by a previous agent): the controller starts
    /// there.
    fn managed(&mut self, key: DestKey, now_ns: u64, current: Option<u32>) -> Option<&mut Managed> {
        let slot = match self.slot_of.get(&key) {
            Some(&slot) => slot,
            None => self.create(key, now_ns, current)?,
        };
        let m = &mut self.managed[slot as usize];
        if !m.awake {
            // Waking up: the empty window it was left with closes (deciding nothing, as it
            // is quiet) and the next one opens with this signal.
            m.controller.update(now_ns);
            m.awake = true;
            self.awake.push(slot);
        }
        Some(m)
    }

    /// A new controller's slot, awake; none for an excluded destination.
    fn create(&mut self, key: DestKey, now_ns: u64, current: Option<u32>) -> Option<u32> {
        if self.plan.excluded.contains(&key) {
            return None;
        }
        let config = *self.plan.control_for(&key);
        let mut start = config;
        if let Some(limit) = current {
            start.limits.initial = limit.clamp(config.limits.min, config.limits.max);
        }
        let slot = u32::try_from(self.managed.len()).ok()?;
        self.managed.push(Managed {
            key,
            awake: true,
            controller: Box::new(DestinationController::new(&start, now_ns)),
            config,
            published: None,
            enforced: None,
            errors: 0,
            timeouts: 0,
            overloads: 0,
            reconfigured: false,
        });
        self.slot_of.insert(key, slot);
        self.awake.push(slot);
        Some(slot)
    }

    /// Removes a destination's controller; the last slot's moves into its place, so the
    /// update tick's list must be made again after (`list_awake`).
    fn remove(&mut self, key: &DestKey) {
        let Some(slot) = self.slot_of.remove(key) else {
            return;
        };
        let slot = slot as usize;
        self.waits.remove(key);
        self.managed.swap_remove(slot);
        if let Some(moved) = self.managed.get(slot) {
            self.slot_of.insert(moved.key, slot as u32);
        }
    }

    /// The update tick's list, from the slots' own flags.
    fn list_awake(&mut self) {
        self.awake = (0..self.managed.len() as u32)
            .filter(|&slot| self.managed[slot as usize].awake)
            .collect();
    }

    /// Feeds a batch of kernel signals to their destinations' controllers.
    pub fn on_signals(&mut self, batch: &[SignalEvent]) {
        self.warm(batch);
        for &ev in batch {
            self.on_signal(ev);
        }
    }

    /// Brings what `batch`'s signals will touch into the cache, all at once: the slots and
    /// the hot part of the controllers they go to. Over a thousand destinations every signal
    /// finds its controller out of the cache, and the misses taken one signal after another,
    /// each waiting for the one before, were most of the agent's time.
    fn warm(&self, batch: &[SignalEvent]) {
        for ev in batch {
            if let Some(&slot) = self.slot_of.get(&ev.dest) {
                let hot = std::ptr::from_ref(&*self.managed[slot as usize].controller).cast::<u8>();
                for offset in (0..DestinationController::HOT_BYTES).step_by(CACHE_LINE) {
                    prefetch(hot.wrapping_add(offset));
                }
            }
        }
    }

    /// Feeds one kernel signal to its destination's controller.
    fn on_signal(&mut self, ev: SignalEvent) {
        let outcome = match ev.signal {
            Signal::Sample {
                latency_ns,
                inflight,
                status,
            } => match Outcome::of_http_status(status) {
                Some(outcome) => outcome,
                None => {
                    if let Some(m) = self.managed(ev.dest, ev.ts_ns, None) {
                        m.controller.on_sample(ev.ts_ns, latency_ns, inflight);
                    }
                    return;
                }
            },
            Signal::ConnectRefused | Signal::Error => Outcome::Error,
            Signal::ConnectTimeout => Outcome::Timeout,
            Signal::GaveUp { waited_ns } => Outcome::GaveUp { waited_ns },
            Signal::HungUp { waited_ns } => Outcome::HungUp { waited_ns },
            Signal::Untimed => Outcome::Untimed,
            Signal::Waited { waited_ns, end } => {
                // Our queue, not the upstream's latency: shown, never fed to the controller.
                if end == WaitEnd::Admitted && self.managed(ev.dest, ev.ts_ns, None).is_some() {
                    self.waits.entry(ev.dest).or_default().push(waited_ns);
                }
                self.feed.publish(|| {
                    Some(Event::Waited(WaitEnded {
                        at_ms: feed::now_ms(),
                        destination: ev.dest.socket_addr().to_string(),
                        end: end.name().into(),
                        waited_ms: waited_ns as f64 / 1e6,
                    }))
                });
                return;
            }
            Signal::Handshake { inflight, .. } => {
                // A connection alone makes no controller: a destination only connected to
                // costs nothing (the agent's work follows destinations with traffic).
                if let Some(&slot) = self.slot_of.get(&ev.dest) {
                    self.managed[slot as usize]
                        .controller
                        .on_connect(ev.ts_ns, inflight);
                }
                return;
            }
        };
        if let Some(m) = self.managed(ev.dest, ev.ts_ns, None) {
            match outcome {
                Outcome::Timeout => m.timeouts = m.timeouts.saturating_add(1),
                Outcome::Error => m.errors = m.errors.saturating_add(1),
                Outcome::Overload => m.overloads = m.overloads.saturating_add(1),
                // Whether a close was a goodbye is the controller's to judge.
                Outcome::GaveUp { .. }
                | Outcome::HungUp { .. }
                | Outcome::Shed
                | Outcome::Untimed => {}
            }
            m.controller.on_outcome(ev.ts_ns, outcome);
        }
    }

    /// A connect the kernel refused at the limit or handed to a peer (or, in shadow, would
    /// have): demand the limit did not meet, which a destination still being learned grows
    /// to, and which makes the window one the limit bound (a redirected connect is no more
    /// the same clients waiting longer than a refused one).
    pub fn on_turned_away(&mut self, dest: DestKey, ts_ns: u64) {
        if let Some(m) = self.managed(dest, ts_ns, None) {
            m.controller.on_outcome(ts_ns, Outcome::Shed);
        }
    }

    /// The update tick: every awake controller decides, changed policies go to the kernel,
    /// and controllers gone quiet are left alone until their next signal. A write that
    /// fails is counted and tried again on the next tick.
    pub fn update(&mut self, now_ns: u64, maps: &mut Maps) {
        let mut went_quiet = false;
        for &slot in &self.awake {
            let m = &mut self.managed[slot as usize];
            let key = &m.key;
            let limit = m
                .controller
                .update_reporting(now_ns, &mut |w| log_window(key, w));
            let published = Published {
                limit,
                baseline_ns: m.controller.baseline_ns().unwrap_or(0),
                p90_ns: m.controller.p90_ns().unwrap_or(0),
                waits: self.waits.get_mut(key).map_or((0, 0), WaitLog::quantiles),
            };
            // Most ticks close no window: nothing to compare, let alone to write.
            if m.published != Some(published) {
                let mut policy = self.plan.initial_policy(key);
                policy.limit = limit;
                policy.baseline_ns = published.baseline_ns;
                policy.p90_ns = published.p90_ns;
                (policy.wait_p50_ns, policy.wait_p99_ns) = published.waits;
                let written = maps.policies.insert(key, policy, 0);
                if self.failures.check("writing a limit", written).is_none() {
                    continue; // stays awake: written on the next tick
                }
                m.published = Some(published);
                // Before its first publication the kernel enforces the initial policy.
                let old = m
                    .enforced
                    .unwrap_or_else(|| self.plan.initial_policy(key).limit);
                if old != limit {
                    debug!(destination = %key.socket_addr(), old, limit, "limit changed");
                    if limit > old {
                        self.changes.up += 1;
                    } else {
                        self.changes.down += 1;
                    }
                    let ms = |ns: u64| (ns > 0).then(|| ns as f64 / 1e6);
                    self.feed.publish(|| {
                        Some(Event::Limit(LimitChange {
                            at_ms: feed::now_ms(),
                            destination: key.socket_addr().to_string(),
                            old,
                            new: limit,
                            p90_ms: ms(policy.p90_ns),
                            baseline_ms: ms(policy.baseline_ns),
                            errors: m.errors.into(),
                            timeouts: m.timeouts.into(),
                            overloads: m.overloads.into(),
                            reconfigured: m.reconfigured,
                        }))
                    });
                    (m.errors, m.timeouts, m.overloads, m.reconfigured) = (0, 0, 0, false);
                }
                m.enforced = Some(limit);
            }
            if m.controller.is_quiet() {
                m.awake = false;
                went_quiet = true;
            }
        }
        if went_quiet {
            let managed = &self.managed;
            self.awake.retain(|&slot| managed[slot as usize].awake);
        }
    }

    /// Takes over what a previous agent left: destinations with a limit in the kernel get a
    /// controller that starts from it. Any other destination gets its controller from its
    /// first signal: until then the kernel's initial limit is all it needs.
    pub fn adopt(&mut self, now_ns: u64, maps: &mut Maps) {
        let Some(rows) = self
            .failures
            .check("reading the destinations", maps.destinations())
        else {
            return;
        };
        for (key, _, policy) in rows {
            // A configured destination's entry is made with the agent's own initial policy:
            // nothing was learned yet, its controller starts as any other.
            if let Some(policy) = policy.filter(|p| *p != self.plan.initial_policy(&key)) {
                self.managed(key, now_ns, Some(policy.limit));
            }
        }
    }

    /// Forgets destinations idle for `forget_idle` with nothing in flight: removed from the
    /// kernel's table, they lose their controller and policy (unless the configuration
    /// fixes it). Only the agent removes entries, so a destination holding slots is never
    /// forgotten, nor is a configured one, whose entry must outlast any flood. Walks the
    /// table only every [`idle_walk_period`].
    pub fn sync(&mut self, now_ns: u64, maps: &mut Maps) {
        let every_ns = idle_walk_period(self.forget_idle).as_nanos() as u64;
        if self
            .walked_ns
            .is_some_and(|walked| now_ns.saturating_sub(walked) < every_ns)
        {
            return;
        }
        let Some(entries) = self
            .failures
            .check("reading the destinations", maps.dest_entries())
        else {
            return;
        };
        self.walked_ns = Some(now_ns);
        let forgotten_before = self.forgotten;
        for (key, state) in entries {
            let idle_ns = now_ns.saturating_sub(state.last_active_ns);
            if state.inflight > 0
                || idle_ns < self.forget_idle.as_nanos() as u64
                || self.plan.destinations.contains_key(&key)
            {
                continue;
            }
            let removed = maps.dests.remove(&key);
            if self
                .failures
                .check("forgetting an idle destination", removed)
                .is_none()
            {
                continue;
            }
            self.forgotten += 1;
            self.remove(&key);
            if !self.plan.members.contains_key(&key) {
                let removed = maps.remove_policy(&key);
                self.failures.check("removing a forgotten policy", removed);
            }
        }
        if self.forgotten != forgotten_before {
            // A crowd of destinations gone by gives its slots' memory back too.
            self.managed.shrink_to(2 * self.managed.len());
            self.slot_of.shrink_to(2 * self.slot_of.len());
            self.list_awake();
        }
    }

    /// Switches to a new plan (reload, re-resolution) without losing what was learned:
    /// a controller is rebuilt only if its configuration changed. The kernel side of the
    /// plan is written by the caller, through the one configuration path.
    pub fn apply(&mut self, plan: ResolvedConfig, now_ns: u64) {
        self.managed.retain(|m| !plan.excluded.contains(&m.key));
        for m in &mut self.managed {
            let config = *plan.control_for(&m.key);
            if config != m.config {
                *m.controller = DestinationController::new(&config, now_ns);
                m.config = config;
                m.reconfigured = true;
            }
            // Mode or grouping may have changed: publish again on the next update.
            m.published = None;
            m.awake = true;
        }
        self.slot_of = (0..)
            .zip(&self.managed)
            .map(|(slot, m)| (m.key, slot))
            .collect();
        self.list_awake();
        self.plan = plan;
    }

    /// After a re-attach: the kernel's maps are new, and so are the controllers.
    pub fn restart(&mut self, now_ns: u64, maps: &mut Maps) {
        self.managed.clear();
        self.slot_of.clear();
        self.awake.clear();
        self.walked_ns = None;
        self.adopt(now_ns, maps);
    }

    /// How long a destination with nothing in flight stays known after its last connection.
    pub fn set_forget_idle(&mut self, after: Duration) {
        self.forget_idle = after;
    }

    /// Map operations that failed since start.
    pub fn map_failures(&self) -> u64 {
        self.failures.total()
    }

    /// Idle destinations removed from the kernel's table since start.
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }

    pub fn plan(&self) -> &ResolvedConfig {
        &self.plan
    }
}

/// One closed window, for `RUST_LOG=limiter_user::windows=debug`: what the limit was set
/// from. Times in milliseconds.
fn log_window(key: &DestKey, w: &WindowReport) {
    let ms = |ns: f64| ns / 1e6;
    debug!(
        // The documented filter for windows, wherever the code lives.
        target: "limiter_user::windows",
        destination = %key.socket_addr(),
        duration_ms = w.duration_ns / 1_000_000,
        samples = w.samples,
        errors = w.errors,
        timeouts = w.timeouts,
        overloads = w.overloads,
        sheds = w.sheds,
        p90_ms = w.p90_ns.map(ms),
        mean_ms = ms(w.mean_latency_ns),
        mean_inflight = w.mean_inflight,
        peak_inflight = w.peak_inflight,
        throughput = w.throughput,
        baseline_ms = w.baseline_ns.map(ms),
        service_ms = w.service_ns.map(ms),
        capacity = w.capacity,
        workers = w.workers,
        limit_before = w.limit_before,
        limit = w.limit,
        "window closed"
    );
}

#[cfg(test)]
mod tests {
    use std::{mem::size_of, net::SocketAddr};

    use limiter_core::DestinationController;

    use super::*;
    use crate::{config::Config, resolve::Resolved};

    fn control_loop() -> ControlLoop {
        let config: Config = toml::from_str("").unwrap();
        let plan = ResolvedConfig::build(&config, &Resolved::new(), None).unwrap();
        ControlLoop::new(plan, Duration::from_secs(60), Feed::default())
    }

    fn key(port: u16) -> DestKey {
        DestKey::new(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    fn answer(control: &mut ControlLoop, port: u16, status: u32) {
        control.on_signal(SignalEvent {
            dest: key(port),
            ts_ns: 1_000_000_000,
            signal: Signal::Sample {
                latency_ns: 1_000_000,
                inflight: 1,
                status,
            },
        });
    }

    fn sample(control: &mut ControlLoop, port: u16) {
        answer(control, port, 0);
    }

    #[test]
    fn overload_answers_are_counted_as_such_and_errors_as_errors() {
        let mut control = control_loop();
        for status in [429, 503, 500, 404, 200] {
            answer(&mut control, 1, status);
        }
        let m = &control.managed[0];
        assert_eq!((m.overloads, m.errors, m.timeouts), (2, 1, 0));
    }

    /// Each destination's slot holds its own controller, and the tick lists each awake
    /// slot once.
    fn assert_consistent(control: &ControlLoop) {
        assert_eq!(control.slot_of.len(), control.managed.len());
        for (key, &slot) in &control.slot_of {
            assert_eq!(control.managed[slot as usize].key, *key);
        }
        let mut listed = control.awake.clone();
        listed.sort_unstable();
        listed.dedup();
        assert_eq!(listed.len(), control.awake.len(), "a slot listed twice");
        let flagged: Vec<u32> = (0..control.managed.len() as u32)
            .filter(|&slot| control.managed[slot as usize].awake)
            .collect();
        assert_eq!(listed, flagged);
    }

    #[test]
    fn forgetting_a_destination_moves_another_into_its_slot_and_keeps_its_controller() {
        let mut control = control_loop();
        for port in 1..=3 {
            sample(&mut control, port);
        }
        control.remove(&key(1));
        control.list_awake();
        assert_consistent(&control);
        assert!(!control.slot_of.contains_key(&key(1)));
        assert_eq!(
            control.slot_of[&key(3)],
            0,
            "the last slot moved into the first"
        );
        assert_eq!(control.managed.len(), 2);
    }

    #[test]
    fn a_quiet_controller_is_woken_by_its_next_signal_and_listed_once() {
        let mut control = control_loop();
        sample(&mut control, 1);
        sample(&mut control, 2);
        control.managed[0].awake = false;
        control.list_awake();
        assert_eq!(control.awake, [1]);
        sample(&mut control, 1);
        sample(&mut control, 1);
        assert_consistent(&control);
        assert_eq!(control.awake, [1, 0]);
    }

    #[test]
    fn a_destination_excluded_by_a_new_configuration_loses_its_controller() {
        let mut control = control_loop();
        for port in 1..=3 {
            sample(&mut control, port);
        }
        let config: Config = toml::from_str("[[exclude]]\naddresses = [\"127.0.0.1:2\"]").unwrap();
        let plan = ResolvedConfig::build(&config, &Resolved::new(), Some(control.plan())).unwrap();
        control.apply(plan, 2_000_000_000);
        assert_consistent(&control);
        assert!(!control.slot_of.contains_key(&key(2)));
        sample(&mut control, 2);
        assert!(
            !control.slot_of.contains_key(&key(2)),
            "excluded: no controller"
        );
        assert_eq!(control.managed.len(), 2);
    }

    /// docs/benchmarks.md quotes what a destination with a controller costs the agent: its
    /// entry in the index, its slot (with its key), its controller and its place on the
    /// update tick's list (the hash map adds a few bytes per entry).
    #[test]
    fn a_destination_with_a_controller_costs_under_4_kib() {
        let bytes = size_of::<(DestKey, u32)>()
            + size_of::<Managed>()
            + size_of::<DestinationController>()
            + size_of::<u32>();
        assert!(bytes < 4096, "{bytes} bytes");
    }
}
