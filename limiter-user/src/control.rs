//! The control loop: kernel signals feed one controller per destination, whose limits
//! are written back to the kernel's policies.

use std::collections::HashSet;

use anyhow::Result;
use foldhash::{HashMap, HashSet as FastSet};
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

/// Every destination's controller. Destination keys are hashed with foldhash: every
/// sample looks its controller up, and SipHash's resistance to chosen keys buys nothing
/// for keys the kernel reports.
pub struct ControlLoop {
    plan: Plan,
    managed: HashMap<DestKey, Managed>,
    /// The controllers the update tick visits: those with something to decide. A quiet one
    /// (no traffic for a while) costs its memory only, until a signal wakes it.
    awake: FastSet<DestKey>,
}

impl ControlLoop {
    pub fn new(plan: Plan) -> Self {
        ControlLoop {
            plan,
            managed: HashMap::default(),
            awake: FastSet::default(),
        }
    }

    /// The destination's controller, created on first sight and awake from then on.
    /// `current` is the limit the kernel already enforces (left by a previous agent): the
    /// controller starts there.
    fn managed(&mut self, key: DestKey, now_ns: u64, current: Option<u32>) -> &mut Managed {
        let plan = &self.plan;
        if self.awake.insert(key) {
            if let Some(m) = self.managed.get_mut(&key) {
                // Waking up: the empty window it was left with closes (deciding nothing,
                // as it is quiet) and the next one opens with this signal.
                m.controller.update(now_ns);
            }
        }
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
            Signal::ConnectTimeout | Signal::GaveUp => Outcome::Timeout,
            Signal::Handshake { .. } => return,
        };
        self.managed(ev.dest, ev.ts_ns, None)
            .controller
            .on_outcome(ev.ts_ns, outcome);
    }

    /// The update tick: every awake controller decides, changed policies go to the kernel,
    /// and controllers gone quiet are left alone until their next signal.
    pub fn update(&mut self, now_ns: u64, tables: &mut Tables) -> Result<()> {
        let mut quiet = Vec::new();
        for key in &self.awake {
            let Some(m) = self.managed.get_mut(key) else {
                continue;
            };
            let limit = m.controller.update(now_ns);
            let baseline_ns = m.controller.baseline_ns().unwrap_or(0);
            let p90_ns = m.controller.p90_ns().unwrap_or(0);
            if m.controller.is_quiet() {
                quiet.push(*key);
            }
            // Most ticks close no window: nothing to compare, let alone to write.
            if m.published
                .is_some_and(|p| (p.limit, p.baseline_ns, p.p90_ns) == (limit, baseline_ns, p90_ns))
            {
                continue;
            }
            let mut policy = self.plan.initial_policy(key);
            policy.limit = limit;
            policy.baseline_ns = baseline_ns;
            policy.p90_ns = p90_ns;
            if m.published.is_none_or(|p| p.limit != limit) {
                debug!(destination = %key.socket_addr(), limit, "limit changed");
            }
            tables.policies.insert(key, policy, 0)?;
            m.published = Some(policy);
        }
        for key in quiet {
            self.awake.remove(&key);
        }
        Ok(())
    }

    /// Takes over what a previous agent left: destinations with a limit in the kernel get a
    /// controller that starts from it. Any other destination gets its controller from its
    /// first signal: until then the kernel's initial limit is all it needs.
    pub fn adopt(&mut self, now_ns: u64, tables: &mut Tables) -> Result<()> {
        let limits: Vec<(DestKey, u32)> = tables
            .destinations()?
            .into_iter()
            .filter_map(|(key, _, policy)| Some((key, policy?.limit)))
            .collect();
        for (key, limit) in limits {
            self.managed(key, now_ns, Some(limit));
        }
        Ok(())
    }

    /// Follows the kernel's table: evicted destinations lose their controller (and their
    /// policy, unless the configuration fixes it).
    pub fn sync(&mut self, tables: &mut Tables) -> Result<()> {
        let live: FastSet<DestKey> = tables
            .dest_entries()?
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        let gone: Vec<DestKey> = self
            .managed
            .keys()
            .filter(|k| !live.contains(k))
            .copied()
            .collect();
        for key in gone {
            self.managed.remove(&key);
            self.awake.remove(&key);
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
        self.awake = self.managed.keys().copied().collect();
        self.plan = plan;
        Ok(())
    }

    /// After a re-attach: the kernel's tables are new, so every policy is written again.
    pub fn restart(&mut self, now_ns: u64, tables: &mut Tables) -> Result<()> {
        self.managed.clear();
        self.awake.clear();
        for (key, policy) in self.plan.static_policies() {
            tables.policies.insert(key, policy, 0)?;
        }
        tables.set_peers(&self.plan.static_peers())?;
        self.adopt(now_ns, tables)
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }
}
