//! The control loop: kernel signals feed one controller per destination, whose limits
//! are written back to the kernel's policies.

use std::time::Duration;

use foldhash::{HashMap, HashSet};
use limiter_common::{DestKey, DestPolicy};
use limiter_core::{controller, ControlConfig, Controller, Outcome};
use tracing::debug;

use crate::{
    failures::Failures,
    feed::{self, Event, Feed, LimitChange},
    latency_ring::{Signal, SignalEvent},
    maps::Maps,
    resolved_config::ResolvedConfig,
};

struct Managed {
    controller: Box<dyn Controller + Send>,
    config: ControlConfig,
    /// What the kernel has now, so that only changes are written; None to write again.
    published: Option<DestPolicy>,
    /// The limit the kernel enforces, whatever `published` says.
    enforced: Option<u32>,
    /// Verdicts since the last limit change: part of why the limit moves.
    errors: u32,
    timeouts: u32,
    /// Rebuilt by a new configuration since the last limit change.
    reconfigured: bool,
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
    managed: HashMap<DestKey, Managed>,
    /// The controllers the update tick visits: those with something to decide. A quiet one
    /// (no traffic for a while) costs its memory only, until a signal wakes it.
    awake: HashSet<DestKey>,
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
            managed: HashMap::default(),
            awake: HashSet::default(),
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
        let plan = &self.plan;
        if plan.excluded.contains(&key) {
            return None;
        }
        if self.awake.insert(key) {
            if let Some(m) = self.managed.get_mut(&key) {
                // Waking up: the empty window it was left with closes (deciding nothing,
                // as it is quiet) and the next one opens with this signal.
                m.controller.update(now_ns);
            }
        }
        Some(self.managed.entry(key).or_insert_with(|| {
            let config = *plan.control_for(&key);
            let mut start = config;
            if let Some(limit) = current {
                start.limits.initial = limit.clamp(config.limits.min, config.limits.max);
            }
            Managed {
                controller: controller(&start, now_ns),
                config,
                published: None,
                enforced: None,
                errors: 0,
                timeouts: 0,
                reconfigured: false,
            }
        }))
    }

    /// Feeds one kernel signal to its destination's controller.
    pub fn on_signal(&mut self, ev: SignalEvent) {
        let outcome = match ev.signal {
            Signal::Sample {
                latency_ns,
                inflight,
            } => {
                if let Some(m) = self.managed(ev.dest, ev.ts_ns, None) {
                    m.controller.on_sample(ev.ts_ns, latency_ns, inflight);
                }
                return;
            }
            Signal::ConnectRefused | Signal::Error => Outcome::Error,
            Signal::ConnectTimeout => Outcome::Timeout,
            Signal::GaveUp { waited_ns } => Outcome::GaveUp { waited_ns },
            Signal::HungUp { waited_ns } => Outcome::HungUp { waited_ns },
            Signal::Handshake { inflight, .. } => {
                // A connection alone makes no controller: a destination only connected to
                // costs nothing (the agent's work follows destinations with traffic).
                if let Some(m) = self.managed.get_mut(&ev.dest) {
                    m.controller.on_connect(ev.ts_ns, inflight);
                }
                return;
            }
        };
        if let Some(m) = self.managed(ev.dest, ev.ts_ns, None) {
            match outcome {
                Outcome::Timeout => m.timeouts = m.timeouts.saturating_add(1),
                Outcome::Error => m.errors = m.errors.saturating_add(1),
                // Whether a close was a goodbye is the controller's to judge.
                Outcome::GaveUp { .. } | Outcome::HungUp { .. } | Outcome::Shed => {}
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
        let mut quiet = Vec::new();
        for key in &self.awake {
            let Some(m) = self.managed.get_mut(key) else {
                continue;
            };
            let limit = m.controller.update(now_ns);
            let baseline_ns = m.controller.baseline_ns().unwrap_or(0);
            let p90_ns = m.controller.p90_ns().unwrap_or(0);
            // Most ticks close no window: nothing to compare, let alone to write.
            let unchanged = m.published.is_some_and(|p| {
                (p.limit, p.baseline_ns, p.p90_ns) == (limit, baseline_ns, p90_ns)
            });
            if !unchanged {
                let mut policy = self.plan.initial_policy(key);
                policy.limit = limit;
                policy.baseline_ns = baseline_ns;
                policy.p90_ns = p90_ns;
                let written = maps.policies.insert(key, policy, 0);
                if self.failures.check("writing a limit", written).is_none() {
                    continue; // stays awake: written on the next tick
                }
                m.published = Some(policy);
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
                            errors: m.errors,
                            timeouts: m.timeouts,
                            reconfigured: m.reconfigured,
                        }))
                    });
                    (m.errors, m.timeouts, m.reconfigured) = (0, 0, false);
                }
                m.enforced = Some(limit);
            }
            if m.controller.is_quiet() {
                quiet.push(*key);
            }
        }
        for key in quiet {
            self.awake.remove(&key);
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
            if let Some(policy) = policy {
                self.managed(key, now_ns, Some(policy.limit));
            }
        }
    }

    /// Forgets destinations idle for `forget_idle` with nothing in flight: removed from the
    /// kernel's table, they lose their controller and policy (unless the configuration
    /// fixes it). Only the agent removes entries, so a destination holding slots is never
    /// forgotten. Walks the table only every [`idle_walk_period`].
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
        for (key, state) in entries {
            let idle_ns = now_ns.saturating_sub(state.last_active_ns);
            if state.inflight > 0 || idle_ns < self.forget_idle.as_nanos() as u64 {
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
            self.managed.remove(&key);
            self.awake.remove(&key);
            if !self.plan.members.contains_key(&key) {
                let removed = maps.remove_policy(&key);
                self.failures.check("removing a forgotten policy", removed);
            }
        }
    }

    /// Switches to a new plan (reload, re-resolution) without losing what was learned:
    /// a controller is rebuilt only if its configuration changed. The kernel side of the
    /// plan is written by the caller, through the one configuration path.
    pub fn apply(&mut self, plan: ResolvedConfig, now_ns: u64) {
        for (key, m) in &mut self.managed {
            let config = *plan.control_for(key);
            if config != m.config {
                m.controller = controller(&config, now_ns);
                m.config = config;
                m.reconfigured = true;
            }
            // Mode or grouping may have changed: publish again on the next update.
            m.published = None;
        }
        self.managed.retain(|k, _| !plan.excluded.contains(k));
        self.awake = self.managed.keys().copied().collect();
        self.plan = plan;
    }

    /// After a re-attach: the kernel's maps are new, and so are the controllers.
    pub fn restart(&mut self, now_ns: u64, maps: &mut Maps) {
        self.managed.clear();
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

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use limiter_core::DestinationController;

    use super::*;

    /// docs/benchmarks.md quotes what a destination with a controller costs the agent: its
    /// key, its entry and its controller (the hash maps add a few bytes per entry).
    #[test]
    fn a_destination_with_a_controller_costs_under_4_kib() {
        let bytes =
            2 * size_of::<DestKey>() + size_of::<Managed>() + size_of::<DestinationController>();
        assert!(bytes < 4096, "{bytes} bytes");
    }
}
