//! Writing a configuration into the kernel's maps, all or nothing: what cannot fit is
//! refused before anything is written, every change is recorded as it is made, and a
//! failure undoes them, so that a refused reload leaves the kernel exactly as it was.

use std::collections::HashSet;

use anyhow::{bail, Context, Result};
use aya::maps::IterableMap;
use limiter_common::{DestKey, DestPeers, DestPolicy, DestState, LimiterConfig, ABI_VERSION};

use crate::{
    attach::Settings,
    clock::monotonic_ns,
    maps::{absent_is_fine, errno, Maps},
};

/// BPF_NOEXIST: create an entry, never overwrite one.
const NOEXIST: u64 = 1;

/// The one way configuration reaches the kernel, on attach, take-over, reload and
/// re-attach: the entries of the destinations it names (made here and never forgotten, so
/// that no flood of other destinations can leave them unlimited), the policies it fixes,
/// the fall-forward peers, and last the global settings with a fresh heartbeat. A
/// destination the kernel already tracks keeps the limit its controller published;
/// configured policies the settings no longer have are removed.
pub fn configure(maps: &mut Maps, settings: &Settings) -> Result<()> {
    let mut journal = Journal {
        maps,
        done: Vec::new(),
    };
    let written = journal.write(settings);
    if written.is_err() {
        journal.roll_back();
    }
    written
}

/// A change made to a map, with what undoes it.
enum Undo {
    /// A destination entry this configuration created.
    Created(DestKey),
    /// A policy as it was before (None: there was none).
    Policy(DestKey, Option<DestPolicy>),
    Peers(DestKey, Option<DestPeers>),
}

struct Journal<'a> {
    maps: &'a mut Maps,
    done: Vec<Undo>,
}

impl Journal<'_> {
    fn write(&mut self, settings: &Settings) -> Result<()> {
        let live: HashSet<DestKey> = self.maps.dests.keys().filter_map(|k| k.ok()).collect();
        let configured: HashSet<DestKey> = settings.policies.iter().map(|(k, _)| *k).collect();
        let current: Vec<DestKey> = self.maps.policies.keys().filter_map(|k| k.ok()).collect();
        let stale: Vec<DestKey> = current
            .iter()
            .copied()
            .filter(|k| !configured.contains(k) && !live.contains(k))
            .collect();
        self.check_policies_fit(current.len() - stale.len(), &configured, &current)?;
        for key in &settings.pinned {
            self.create_dest(key)?;
        }
        for key in stale {
            self.set_policy(key, None)?;
        }
        for (key, policy) in &settings.policies {
            let mut policy = *policy;
            if let Some(published) = live
                .contains(key)
                .then(|| self.maps.policies.get(key, 0).ok())
                .flatten()
            {
                // What the controller learned stays; mode and grouping are the configuration's.
                policy.limit = published.limit;
                policy.baseline_ns = published.baseline_ns;
                policy.p90_ns = published.p90_ns;
                policy.wait_p50_ns = published.wait_p50_ns;
                policy.wait_p99_ns = published.wait_p99_ns;
            }
            self.set_policy(*key, Some(policy))?;
        }
        self.set_peers(&settings.peers)?;
        self.maps.set_config(&LimiterConfig {
            abi_version: ABI_VERSION,
            default_mode: settings.default_mode.abi(),
            initial_limit: settings.unseen_limit,
            heartbeat_ns: monotonic_ns(),
            heartbeat_timeout_ns: settings.heartbeat_timeout.as_nanos() as u64,
            queue: settings.queue,
            ..LimiterConfig::default()
        })
    }

    /// The policy table was sized when the programs were loaded: a configuration that
    /// needs more than it holds is refused before anything changes.
    fn check_policies_fit(
        &self,
        kept: usize,
        configured: &HashSet<DestKey>,
        current: &[DestKey],
    ) -> Result<()> {
        let current: HashSet<&DestKey> = current.iter().collect();
        let needed = kept + configured.iter().filter(|k| !current.contains(k)).count();
        let capacity = self.maps.policies.map().info()?.max_entries() as usize;
        if needed > capacity {
            bail!(
                "the configuration needs {needed} entries in the kernel's policy table, which holds {capacity} (sized when the programs were loaded, for max_destinations and the configuration of that time): restart the agent without --keep-attached to apply it"
            );
        }
        Ok(())
    }

    /// Makes the entry of a configured destination, unless the kernel has one already.
    fn create_dest(&mut self, key: &DestKey) -> Result<()> {
        let now = monotonic_ns();
        let fresh = DestState {
            created_ns: now,
            last_active_ns: now,
            ..DestState::default()
        };
        match self.maps.dests.insert(key, fresh, NOEXIST) {
            Ok(()) => {
                self.done.push(Undo::Created(*key));
                Ok(())
            }
            Err(e) if errno(&e) == Some(libc::EEXIST) => Ok(()),
            Err(e) if errno(&e) == Some(libc::E2BIG) => bail!(
                "the kernel's destination table is full, and {} (a configured destination) has no entry in it yet: wait for idle destinations to be forgotten (forget_idle_secs), or restart the agent without --keep-attached",
                key.socket_addr()
            ),
            Err(e) => Err(e).with_context(|| {
                format!("cannot make the table entry of {}", key.socket_addr())
            }),
        }
    }

    fn set_policy(&mut self, key: DestKey, policy: Option<DestPolicy>) -> Result<()> {
        let before = self.maps.policies.get(&key, 0).ok();
        write_policy(self.maps, key, policy)
            .with_context(|| format!("cannot write the policy of {}", key.socket_addr()))?;
        self.done.push(Undo::Policy(key, before));
        Ok(())
    }

    /// Makes the fall-forward candidates exactly `peers`: stale entries (a group or member
    /// the configuration no longer has) go first, so the table never holds both sets.
    fn set_peers(&mut self, peers: &[(DestKey, DestPeers)]) -> Result<()> {
        let stale: Vec<DestKey> = self
            .maps
            .peers
            .keys()
            .filter_map(|k| k.ok())
            .filter(|k| !peers.iter().any(|(key, _)| key == k))
            .collect();
        let changes = stale
            .into_iter()
            .map(|k| (k, None))
            .chain(peers.iter().map(|(k, p)| (*k, Some(*p))));
        for (key, candidates) in changes {
            let before = self.maps.peers.get(&key, 0).ok();
            write_peers(self.maps, key, candidates)
                .with_context(|| format!("cannot write the peers of {}", key.socket_addr()))?;
            self.done.push(Undo::Peers(key, before));
        }
        Ok(())
    }

    /// Puts back what was changed, newest first. Best effort: what fails here was just
    /// written, so it does not fail again but for a vanished map.
    fn roll_back(self) {
        for undo in self.done.into_iter().rev() {
            let undone = match undo {
                Undo::Created(key) => absent_is_fine(self.maps.dests.remove(&key)),
                Undo::Policy(key, before) => write_policy(self.maps, key, before),
                Undo::Peers(key, before) => write_peers(self.maps, key, before),
            };
            if let Err(e) = undone {
                tracing::error!("cannot undo a refused configuration: {e:#}");
            }
        }
    }
}

fn write_policy(maps: &mut Maps, key: DestKey, policy: Option<DestPolicy>) -> Result<()> {
    match policy {
        Some(policy) => Ok(maps.policies.insert(key, policy, 0)?),
        None => absent_is_fine(maps.policies.remove(&key)),
    }
}

fn write_peers(maps: &mut Maps, key: DestKey, peers: Option<DestPeers>) -> Result<()> {
    match peers {
        Some(peers) => Ok(maps.peers.insert(key, peers, 0)?),
        None => absent_is_fine(maps.peers.remove(&key)),
    }
}
