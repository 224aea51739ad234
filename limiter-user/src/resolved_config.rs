//! What the configuration means for the kernel: which addresses share a limit, under
//! which key, with which mode, controller and fall-forward peers. Rebuilt on reload and
//! on re-resolution.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use limiter_common::{DestKey, DestPeers, DestPolicy, QueuePolicy};
use limiter_core::ControlConfig;

use crate::{
    config::{Config, Mode},
    resolve::Resolved,
};

/// A configured destination (its addresses are all counted under its key in
/// `ResolvedConfig::destinations`), or one member of a `[[group]]`, which is a destination
/// of its own.
#[derive(Debug, Clone, PartialEq)]
pub struct Destination {
    /// The `[[destination]]`'s or the `[[group]]`'s name.
    pub name: String,
    pub mode: Mode,
    /// Its own `overflow`; None: the global one.
    pub queue: Option<QueuePolicy>,
    pub control: ControlConfig,
    /// A group member's fall-forward candidates, in order; None outside groups.
    pub peers: Option<DestPeers>,
}

/// The configuration with its names resolved, as the maps will hold it (called the plan
/// where it is used).
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedConfig {
    pub default_mode: Mode,
    /// What a connect at the limit gets where a destination does not say.
    pub queue: QueuePolicy,
    /// The controller of learned destinations.
    pub control: ControlConfig,
    /// Keyed by the address they are counted under.
    pub destinations: BTreeMap<DestKey, Destination>,
    /// Every configured address -> the key it is counted under (a key maps to itself).
    pub members: BTreeMap<DestKey, DestKey>,
    /// Never limited, never recorded.
    pub excluded: Vec<DestKey>,
}

impl ResolvedConfig {
    /// What the configuration means, with `resolved` giving the addresses of its `host`
    /// destinations. A destination keeps the key it had in `previous`, so that re-resolving
    /// a host never moves its in-flight count, and the addresses it had there when its host
    /// did not resolve this time.
    pub fn build(
        config: &Config,
        resolved: &Resolved,
        previous: Option<&ResolvedConfig>,
    ) -> Result<ResolvedConfig> {
        let mut plan = ResolvedConfig {
            default_mode: config.mode,
            queue: config.queue_policy(),
            control: config.control(),
            destinations: BTreeMap::new(),
            members: BTreeMap::new(),
            excluded: Vec::new(),
        };
        for d in &config.destinations {
            let previous_key = previous.and_then(|p| {
                p.destinations
                    .iter()
                    .find(|(_, prev)| prev.name == d.name && prev.peers.is_none())
                    .map(|(k, _)| *k)
            });
            let addrs: Vec<DestKey> = match (&d.host, resolved.get(&d.name)) {
                (None, _) => d.addresses.iter().copied().map(DestKey::new).collect(),
                (Some(_), Some(addrs)) => addrs.iter().copied().map(DestKey::new).collect(),
                (Some(_), None) => previous
                    .zip(previous_key)
                    .map(|(p, key)| p.addresses_of(&key))
                    .unwrap_or_default(),
            };
            let Some(key) = previous_key.or_else(|| addrs.first().copied()) else {
                tracing::warn!(destination = %d.name, "has no address (yet): not limited");
                continue;
            };
            plan.destinations.insert(
                key,
                Destination {
                    name: d.name.clone(),
                    mode: config.override_mode(&d.overrides()),
                    queue: config.override_queue(&d.overrides()),
                    control: config.override_control(&d.overrides()),
                    peers: None,
                },
            );
            plan.members.insert(key, key);
            for addr in addrs {
                plan.members.insert(addr, key);
            }
        }
        for g in &config.groups {
            for (i, &member) in g.members.iter().enumerate() {
                let key = DestKey::new(member);
                if plan.members.contains_key(&key) {
                    // Listed addresses are checked when the file is read, a host only once resolved.
                    bail!(
                        "{member}, a member of group `{}`, is also an address of a destination",
                        g.name
                    );
                }
                let peers: Vec<DestKey> = g.peers_of(i).into_iter().map(DestKey::new).collect();
                let peers = DestPeers::new(&peers)
                    .with_context(|| format!("group `{}` has too many members", g.name))?;
                plan.destinations.insert(
                    key,
                    Destination {
                        name: g.name.clone(),
                        mode: config.override_mode(&g.overrides()),
                        queue: config.override_queue(&g.overrides()),
                        control: config.override_control(&g.overrides()),
                        peers: Some(peers),
                    },
                );
                plan.members.insert(key, key);
            }
        }
        for e in &config.excludes {
            for &addr in &e.addresses {
                let key = DestKey::new(addr);
                if let Some(owner) = plan.members.get(&key) {
                    // Listed addresses are checked when the file is read, a host only once resolved.
                    let name = &plan.destinations[owner].name;
                    bail!("{addr} is in [[exclude]] and an address of destination `{name}`");
                }
                plan.excluded.push(key);
            }
        }
        Ok(plan)
    }

    /// Every address counted under `key`.
    fn addresses_of(&self, key: &DestKey) -> Vec<DestKey> {
        self.members
            .iter()
            .filter(|(_, k)| *k == key)
            .map(|(a, _)| *a)
            .collect()
    }

    /// The controller configuration for a destination key.
    pub fn control_for(&self, key: &DestKey) -> &ControlConfig {
        self.destinations
            .get(key)
            .map_or(&self.control, |d| &d.control)
    }

    /// Whether any destination queues at its limit.
    pub fn queues(&self) -> bool {
        let queue = u32::from(limiter_common::Overflow::Queue);
        self.queue.overflow == queue
            || self
                .destinations
                .values()
                .any(|d| d.queue.is_some_and(|q| q.overflow == queue))
    }

    /// The limit of a destination no policy covers yet: the upper bound, so that a burst on
    /// attach is never refused below it before the destination's controller has a word.
    pub fn unseen_limit(&self) -> u32 {
        self.control.effective_limits().max
    }

    /// The policy a destination gets before its controller has said anything: the upper
    /// bound, for the same reason.
    pub fn initial_policy(&self, key: &DestKey) -> DestPolicy {
        let mut policy = DestPolicy {
            limit: self.control_for(key).effective_limits().max,
            ..DestPolicy::default()
        };
        if let Some(d) = self.destinations.get(key) {
            policy.mode = d.mode.abi();
            policy.queue = d.queue.unwrap_or_default();
            policy.account_as = *key;
        }
        policy
    }

    /// Every group member's fall-forward candidates, for the kernel's `peers` map.
    pub fn static_peers(&self) -> Vec<(DestKey, DestPeers)> {
        self.destinations
            .iter()
            .filter_map(|(&key, d)| Some((key, d.peers?)))
            .collect()
    }

    /// The policies the configuration fixes: addresses point at their destination's key,
    /// excluded addresses are off. The keys themselves come with their initial limit.
    pub fn static_policies(&self) -> Vec<(DestKey, DestPolicy)> {
        let mut out = Vec::new();
        for (&addr, &key) in &self.members {
            let mut policy = self.initial_policy(&key);
            if addr != key {
                policy.limit = 0; // unused: the destination key's policy holds the limit
            }
            out.push((addr, policy));
        }
        for &addr in &self.excluded {
            out.push((
                addr,
                DestPolicy {
                    mode: Mode::Off.abi(),
                    ..DestPolicy::default()
                },
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        let c: Config = toml::from_str(text).unwrap();
        c.validate().unwrap();
        c
    }

    const TWO_ADDRESSES: &str = r#"
[[destination]]
name = "payments"
addresses = ["10.0.0.7:443", "10.0.0.8:443"]
mode = "shadow"
algorithm = "fixed"
limit = 50

[[exclude]]
addresses = ["127.0.0.53:53"]
"#;

    #[test]
    fn members_share_the_first_address_as_key() {
        let plan = ResolvedConfig::build(&config(TWO_ADDRESSES), &Resolved::new(), None).unwrap();
        let key = DestKey::new("10.0.0.7:443".parse().unwrap());
        let other = DestKey::new("10.0.0.8:443".parse().unwrap());
        assert_eq!(plan.members[&other], key);
        let policies: BTreeMap<_, _> = plan.static_policies().into_iter().collect();
        assert_eq!(policies[&key].limit, 50);
        assert_eq!(policies[&key].mode, Mode::Shadow.abi());
        assert_eq!(policies[&other].account_as, key);
        let excluded = DestKey::new("127.0.0.53:53".parse().unwrap());
        assert_eq!(policies[&excluded].mode, Mode::Off.abi());
    }

    #[test]
    fn a_destination_keeps_its_key_when_its_addresses_change() {
        let before = ResolvedConfig::build(&config(TWO_ADDRESSES), &Resolved::new(), None).unwrap();
        let moved = config(&TWO_ADDRESSES.replace("10.0.0.7:443", "10.0.0.9:443"));
        let after = ResolvedConfig::build(&moved, &Resolved::new(), Some(&before)).unwrap();
        let key = DestKey::new("10.0.0.7:443".parse().unwrap());
        assert!(after.destinations.contains_key(&key));
        assert_eq!(
            after.members[&DestKey::new("10.0.0.9:443".parse().unwrap())],
            key
        );
    }

    #[test]
    fn queueing_anywhere_is_queueing() {
        let plan =
            |text: &str| ResolvedConfig::build(&config(text), &Resolved::new(), None).unwrap();
        assert!(!plan("").queues());
        assert!(plan("overflow = \"queue\"\n").queues());
        let one = "[[destination]]\nname = \"db\"\naddresses = [\"10.0.0.1:5432\"]\noverflow = \"queue\"\n";
        assert!(plan(one).queues());
    }

    #[test]
    fn learned_destinations_use_the_global_controller() {
        let plan = ResolvedConfig::build(
            &config("algorithm = \"fixed\"\nlimit = 9\n"),
            &Resolved::new(),
            None,
        )
        .unwrap();
        let learned = DestKey::new("127.0.0.1:80".parse().unwrap());
        assert_eq!(plan.initial_policy(&learned).limit, 9);
        assert_eq!(plan.initial_policy(&learned).mode, 0);
    }

    const REPLICAS: &str = r#"
algorithm = "vegas"

[[group]]
name = "inference"
members = ["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"]
mode = "shadow"
algorithm = "fixed"
limit = 2
"#;

    fn key(addr: &str) -> DestKey {
        DestKey::new(addr.parse().unwrap())
    }

    #[test]
    fn each_member_is_a_destination_with_its_own_limit_and_peers() {
        let plan = ResolvedConfig::build(&config(REPLICAS), &Resolved::new(), None).unwrap();
        let members = ["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"].map(key);
        let policies: BTreeMap<_, _> = plan.static_policies().into_iter().collect();
        for m in members {
            assert_eq!(plan.members[&m], m, "counted under its own key");
            assert_eq!(policies[&m].limit, 2);
            assert_eq!(policies[&m].mode, Mode::Shadow.abi());
            assert_eq!(
                plan.control_for(&m).algorithm,
                limiter_core::Algorithm::Fixed
            );
        }
        let peers: BTreeMap<_, _> = plan.static_peers().into_iter().collect();
        assert_eq!(peers.len(), 3);
        assert_eq!(peers[&members[0]].as_slice(), [members[1], members[2]]);
        assert_eq!(peers[&members[1]].as_slice(), [members[0], members[2]]);
        assert_eq!(peers[&members[2]].as_slice(), [members[0], members[1]]);
        assert_eq!(plan.control.algorithm, limiter_core::Algorithm::Vegas);
    }

    #[test]
    fn a_destination_resolving_to_a_member_is_refused() {
        // A host is only known once resolved.
        let text =
            format!("{REPLICAS}[[destination]]\nname = \"local\"\nhost = \"local.test:8002\"\n");
        let resolved = Resolved::from([("local".into(), vec!["127.0.0.1:8002".parse().unwrap()])]);
        let err = format!(
            "{:#}",
            ResolvedConfig::build(&config(&text), &resolved, None).unwrap_err()
        );
        assert!(
            err.contains("127.0.0.1:8002, a member of group `inference`"),
            "{err}"
        );
    }
}
