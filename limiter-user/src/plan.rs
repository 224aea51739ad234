//! What the configuration means for the kernel: which addresses share a limit, under
//! which key, with which mode and controller. Rebuilt on reload and on re-resolution.

use std::collections::BTreeMap;

use anyhow::Result;
use limiter_common::{DestKey, DestPolicy};
use limiter_core::ControlConfig;

use crate::config::{Config, Mode};

/// A configured destination: its addresses are all counted under `Plan::groups`' key.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub name: String,
    pub mode: Mode,
    pub control: ControlConfig,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub default_mode: Mode,
    /// The controller of learned destinations.
    pub control: ControlConfig,
    /// Keyed by the address its members are counted under.
    pub groups: BTreeMap<DestKey, Group>,
    /// Every member address -> its group's key (the key maps to itself).
    pub members: BTreeMap<DestKey, DestKey>,
    /// Never limited, never recorded.
    pub excluded: Vec<DestKey>,
}

impl Plan {
    /// Resolves the configuration. A group keeps the key it had in `previous`, so that
    /// re-resolving a host never moves its in-flight count.
    pub fn build(config: &Config, previous: Option<&Plan>) -> Result<Plan> {
        let mut plan = Plan {
            default_mode: config.mode,
            control: config.control(),
            groups: BTreeMap::new(),
            members: BTreeMap::new(),
            excluded: Vec::new(),
        };
        for d in &config.destinations {
            let addrs: Vec<DestKey> = d.resolve()?.into_iter().map(DestKey::new).collect();
            let previous_key = previous.and_then(|p| {
                p.groups
                    .iter()
                    .find(|(_, g)| g.name == d.name)
                    .map(|(k, _)| *k)
            });
            let Some(key) = previous_key.or_else(|| addrs.first().copied()) else {
                tracing::warn!(destination = %d.name, "resolves to no address: not limited");
                continue;
            };
            plan.groups.insert(
                key,
                Group {
                    name: d.name.clone(),
                    mode: d.mode.unwrap_or(config.mode),
                    control: config.destination_control(d),
                },
            );
            plan.members.insert(key, key);
            for addr in addrs {
                plan.members.insert(addr, key);
            }
        }
        for e in &config.excludes {
            for &addr in &e.addresses {
                let key = DestKey::new(addr);
                plan.members.remove(&key);
                plan.excluded.push(key);
            }
        }
        Ok(plan)
    }

    /// The controller configuration for a destination key.
    pub fn control_for(&self, key: &DestKey) -> &ControlConfig {
        self.groups.get(key).map_or(&self.control, |g| &g.control)
    }

    pub fn initial_limit(&self) -> u32 {
        self.control.effective_limits().initial
    }

    /// The policy a destination gets before its controller has said anything.
    pub fn initial_policy(&self, key: &DestKey) -> DestPolicy {
        let mut policy = DestPolicy {
            limit: self.control_for(key).effective_limits().initial,
            ..DestPolicy::default()
        };
        if let Some(group) = self.groups.get(key) {
            policy.mode = group.mode.abi();
            policy.account_as = *key;
        }
        policy
    }

    /// The policies the configuration fixes: members point at their group's key,
    /// excluded addresses are off. Group keys themselves come with their initial limit.
    pub fn static_policies(&self) -> Vec<(DestKey, DestPolicy)> {
        let mut out = Vec::new();
        for (&addr, &key) in &self.members {
            let mut policy = self.initial_policy(&key);
            if addr != key {
                policy.limit = 0; // unused: the group key's policy holds the limit
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
        let plan = Plan::build(&config(TWO_ADDRESSES), None).unwrap();
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
    fn a_group_keeps_its_key_when_its_addresses_change() {
        let before = Plan::build(&config(TWO_ADDRESSES), None).unwrap();
        let moved = config(&TWO_ADDRESSES.replace("10.0.0.7:443", "10.0.0.9:443"));
        let after = Plan::build(&moved, Some(&before)).unwrap();
        let key = DestKey::new("10.0.0.7:443".parse().unwrap());
        assert!(after.groups.contains_key(&key));
        assert_eq!(
            after.members[&DestKey::new("10.0.0.9:443".parse().unwrap())],
            key
        );
    }

    #[test]
    fn learned_destinations_use_the_global_controller() {
        let plan = Plan::build(&config("algorithm = \"fixed\"\nlimit = 9\n"), None).unwrap();
        let learned = DestKey::new("127.0.0.1:80".parse().unwrap());
        assert_eq!(plan.initial_policy(&learned).limit, 9);
        assert_eq!(plan.initial_policy(&learned).mode, 0);
    }
}
