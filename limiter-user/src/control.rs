//! The control loop: kernel signals feed one controller per destination, whose limits
//! are written back to the kernel's policies.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use limiter_common::{DestKey, DestPolicy, DestState};
use limiter_core::{controller, ControlConfig, Controller, Outcome};
use tracing::debug;

use crate::{
    failures::Failures,
    plan::Plan,
    signals::{Signal, SignalEvent},
    tables::Tables,
};

struct Managed {
    controller: Box<dyn Controller + Send>,
    config: ControlConfig,
    /// What the kernel has now, so that only changes are written.
    published: Option<DestPolicy>,
}

/// Every destination's controller.
pub struct ControlLoop {
    plan: Plan,
    managed: HashMap<DestKey, Managed>,
    forget_idle: Duration,
    forgotten: u64,
    failures: Failures,
}

impl ControlLoop {
    pub fn new(plan: Plan, forget_idle: Duration) -> Self {
        ControlLoop {
            plan,
            managed: HashMap::new(),
            forget_idle,
            forgotten: 0,
            failures: Failures::default(),
        }
    }

    /// The destination's controller, created on first sight; none for an excluded one,
    /// whose "off" policy no controller may overwrite. `current` is the limit the kernel
    /// already enforces (left by a previous agent): the controller starts there.
    fn managed(&mut self, key: DestKey, now_ns: u64, current: Option<u32>) -> Option<&mut Managed> {
        let plan = &self.plan;
        if plan.excluded.contains(&key) {
            return None;
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
            Signal::Handshake { .. } => return,
        };
        if let Some(m) = self.managed(ev.dest, ev.ts_ns, None) {
            m.controller.on_outcome(ev.ts_ns, outcome);
        }
    }

    /// The update tick: every controller decides, changed policies go to the kernel. A
    /// write that fails is counted and tried again on the next tick.
    pub fn update(&mut self, now_ns: u64, tables: &mut Tables) {
        for (key, m) in &mut self.managed {
            let limit = m.controller.update(now_ns);
            let mut policy = self.plan.initial_policy(key);
            policy.limit = limit;
            policy.baseline_ns = m.controller.baseline_ns().unwrap_or(0);
            policy.p90_ns = m.controller.p90_ns().unwrap_or(0);
            if m.published == Some(policy) {
                continue;
            }
            if m.published.is_none_or(|p| p.limit != limit) {
                debug!(destination = %key.socket_addr(), limit, "limit changed");
            }
            let written = tables.policies.insert(key, policy, 0);
            if self.failures.check("writing a limit", written).is_some() {
                m.published = Some(policy);
            }
        }
    }

    /// Follows the kernel's table: destinations it learned get a controller; those idle
    /// for `forget_idle` with nothing in flight are removed from it, and lose their
    /// controller and policy (unless the configuration fixes it). Only the agent removes
    /// entries, so a destination holding slots is never forgotten.
    pub fn sync(&mut self, now_ns: u64, tables: &mut Tables) {
        let entries: Vec<(DestKey, DestState)> =
            tables.dests.iter().filter_map(|e| e.ok()).collect();
        let mut live = HashSet::with_capacity(entries.len());
        for (key, state) in entries {
            let idle_ns = now_ns.saturating_sub(state.last_active_ns);
            if state.inflight <= 0 && idle_ns >= self.forget_idle.as_nanos() as u64 {
                let removed = tables.dests.remove(&key);
                if self
                    .failures
                    .check("forgetting an idle destination", removed)
                    .is_some()
                {
                    self.forgotten += 1;
                    continue;
                }
            }
            live.insert(key);
        }
        for &key in &live {
            if !self.managed.contains_key(&key) {
                let current = tables.policies.get(&key, 0).ok().map(|p| p.limit);
                self.managed(key, now_ns, current);
            }
        }
        let gone: Vec<DestKey> = self
            .managed
            .keys()
            .filter(|k| !live.contains(k))
            .copied()
            .collect();
        for key in gone {
            self.managed.remove(&key);
            if !self.plan.members.contains_key(&key) {
                let removed = tables.remove_policy(&key);
                self.failures.check("removing a forgotten policy", removed);
            }
        }
    }

    /// Switches to a new plan (reload, re-resolution) without losing what was learned:
    /// a controller is rebuilt only if its configuration changed. The kernel side of the
    /// plan is written by the caller, through the one configuration path.
    pub fn apply(&mut self, plan: Plan, now_ns: u64) {
        for (key, m) in &mut self.managed {
            let config = *plan.control_for(key);
            if config != m.config {
                m.controller = controller(&config, now_ns);
                m.config = config;
            }
            // Mode or grouping may have changed: publish again on the next update.
            m.published = None;
        }
        self.managed.retain(|k, _| !plan.excluded.contains(k));
        self.plan = plan;
    }

    /// After a re-attach: the kernel's tables are new, and so are the controllers.
    pub fn restart(&mut self, now_ns: u64, tables: &mut Tables) {
        self.managed.clear();
        self.sync(now_ns, tables);
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

    pub fn plan(&self) -> &Plan {
        &self.plan
    }
}
