//! The control loop: kernel signals feed one controller per destination, whose limits
//! are written back to the kernel's policies.

use std::collections::{HashMap, HashSet};

use anyhow::Result;
use limiter_common::{DestKey, DestPolicy};
use limiter_core::{controller, ControlConfig, Controller, Outcome};
use tracing::debug;

use crate::{
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
}

impl ControlLoop {
    pub fn new(plan: Plan) -> Self {
        ControlLoop {
            plan,
            managed: HashMap::new(),
        }
    }

    /// The destination's controller, created on first sight. `current` is the limit the
    /// kernel already enforces (left by a previous agent): the controller starts there.
    fn managed(&mut self, key: DestKey, now_ns: u64, current: Option<u32>) -> &mut Managed {
        let plan = &self.plan;
        self.managed.entry(key).or_insert_with(|| {
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
        })
    }

    /// Feeds one kernel signal to its destination's controller.
    pub fn on_signal(&mut self, ev: SignalEvent) {
        let outcome = match ev.signal {
            Signal::Sample {
                latency_ns,
                inflight,
            } => {
                let m = self.managed(ev.dest, ev.ts_ns, None);
                m.controller.on_sample(ev.ts_ns, latency_ns, inflight);
                return;
            }
            Signal::ConnectRefused | Signal::Error => Outcome::Error,
            Signal::ConnectTimeout => Outcome::Timeout,
            Signal::GaveUp { waited_ns } => Outcome::GaveUp { waited_ns },
            Signal::HungUp { waited_ns } => Outcome::HungUp { waited_ns },
            Signal::Handshake { .. } => return,
        };
        self.managed(ev.dest, ev.ts_ns, None)
            .controller
            .on_outcome(ev.ts_ns, outcome);
    }

    /// The update tick: every controller decides, changed policies go to the kernel.
    pub fn update(&mut self, now_ns: u64, tables: &mut Tables) -> Result<()> {
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
            tables.policies.insert(key, policy, 0)?;
            m.published = Some(policy);
        }
        Ok(())
    }

    /// Follows the kernel's table: destinations it learned get a controller, evicted
    /// ones lose theirs (and their policy, unless the configuration fixes it).
    pub fn sync(&mut self, now_ns: u64, tables: &mut Tables) -> Result<()> {
        let live: HashSet<DestKey> = tables.dests.keys().filter_map(|k| k.ok()).collect();
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
                tables.remove_policy(&key)?;
            }
        }
        Ok(())
    }

    /// Switches to a new plan (reload, re-resolution) without losing what was learned:
    /// a controller is rebuilt only if its configuration changed.
    pub fn apply(&mut self, plan: Plan, now_ns: u64, tables: &mut Tables) -> Result<()> {
        let fixed: HashSet<DestKey> = plan.members.keys().chain(&plan.excluded).copied().collect();
        let stale: Vec<DestKey> = self
            .plan
            .members
            .keys()
            .chain(&self.plan.excluded)
            .filter(|k| !fixed.contains(k))
            .copied()
            .collect();
        for key in stale {
            tables.remove_policy(&key)?;
        }
        for (key, policy) in plan.static_policies() {
            if !self.managed.contains_key(&key) {
                tables.policies.insert(key, policy, 0)?;
            }
        }
        // Peers are the configuration's alone (the controllers write policies only).
        tables.set_peers(&plan.static_peers())?;
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
        Ok(())
    }

    /// After a re-attach: the kernel's tables are new, so every policy is written again.
    pub fn restart(&mut self, now_ns: u64, tables: &mut Tables) -> Result<()> {
        self.managed.clear();
        for (key, policy) in self.plan.static_policies() {
            tables.policies.insert(key, policy, 0)?;
        }
        tables.set_peers(&self.plan.static_peers())?;
        self.sync(now_ns, tables)
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }
}
