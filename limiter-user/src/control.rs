//! The control loop: kernel signals feed one controller per destination, whose limits
//! are written back to the kernel's policies.

use std::collections::{HashMap, HashSet};

use anyhow::Result;
use limiter_common::{DestKey, DestPolicy};
use limiter_core::{controller, ControlConfig, Controller, Outcome};
use tracing::debug;

use crate::{
    feed::{self, Event, Feed, LimitChange},
    plan::Plan,
    signals::{Signal, SignalEvent},
    tables::Tables,
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

/// Every destination's controller.
pub struct ControlLoop {
    plan: Plan,
    managed: HashMap<DestKey, Managed>,
    feed: Feed,
    changes: Changes,
}

impl ControlLoop {
    pub fn new(plan: Plan, feed: Feed) -> Self {
        ControlLoop {
            plan,
            managed: HashMap::new(),
            feed,
            changes: Changes::default(),
        }
    }

    pub fn changes(&self) -> Changes {
        self.changes
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
                enforced: None,
                errors: 0,
                timeouts: 0,
                reconfigured: false,
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
        let m = self.managed(ev.dest, ev.ts_ns, None);
        match outcome {
            Outcome::Timeout => m.timeouts = m.timeouts.saturating_add(1),
            Outcome::Error => m.errors = m.errors.saturating_add(1),
            Outcome::Shed => {}
        }
        m.controller.on_outcome(ev.ts_ns, outcome);
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
            tables.policies.insert(key, policy, 0)?;
            m.published = Some(policy);
            m.enforced = Some(limit);
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
                m.reconfigured = true;
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
