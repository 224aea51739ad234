//! Typed access to the maps, either from a freshly loaded object or from the pins.

use anyhow::{bail, Context, Result};
use aya::maps::{Array, HashMap, IterableMap, Map, MapData, PerCpuArray};
use limiter_common::{
    maps, DestKey, DestPeers, DestPolicy, DestState, GlobalStats, LimiterConfig, ABI_VERSION,
};

use crate::{batch, pins::PinDir};

pub struct Maps {
    pub dests: HashMap<MapData, DestKey, DestState>,
    pub policies: HashMap<MapData, DestKey, DestPolicy>,
    pub peers: HashMap<MapData, DestKey, DestPeers>,
    pub config: Array<MapData, LimiterConfig>,
    pub stats: PerCpuArray<MapData, GlobalStats>,
}

/// Kernel-wide totals; the field names are part of `status --json`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Globals {
    /// Kernel events lost to a full ring buffer.
    pub ringbuf_drops: u64,
    /// Connects to a new destination admitted untracked because the table was full.
    pub table_full: u64,
    /// Connects admitted past the limit because the agent's heartbeat was too old.
    pub fail_open: u64,
    /// Connects admitted without per-socket state (its allocation failed).
    pub untracked: u64,
    /// Entries in the destination table now.
    pub destinations: u64,
}

impl Maps {
    pub fn from_pins(dir: &PinDir) -> Result<Self> {
        let open = |name: &str| -> Result<Map> {
            let path = dir.map(name);
            let data = MapData::from_pin(&path).with_context(|| {
                format!(
                    "cannot open pinned map {}: is an agent attached to this cgroup?",
                    path.display()
                )
            })?;
            Ok(Map::from_map_data(data)?)
        };
        // The version first: another version's pins may lack a map this one needs.
        let config: Array<MapData, LimiterConfig> = Array::try_from(open(maps::CONFIG)?)?;
        let version = config.get(&0, 0)?.abi_version;
        if version != ABI_VERSION {
            bail!(
                "the pins at {} are from another limiter version (map ABI {version}, this one reads {ABI_VERSION}): run `limiter-user detach`",
                dir.path().display()
            );
        }
        Ok(Maps {
            dests: HashMap::try_from(open(maps::DESTS)?)?,
            policies: HashMap::try_from(open(maps::POLICIES)?)?,
            peers: HashMap::try_from(open(maps::PEERS)?)?,
            config,
            stats: PerCpuArray::try_from(open(maps::STATS)?)?,
        })
    }

    pub fn from_ebpf(ebpf: &mut aya::Ebpf) -> Result<Self> {
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .with_context(|| format!("the eBPF object has no map `{name}`"))
        };
        Ok(Maps {
            dests: HashMap::try_from(take(maps::DESTS)?)?,
            policies: HashMap::try_from(take(maps::POLICIES)?)?,
            peers: HashMap::try_from(take(maps::PEERS)?)?,
            config: Array::try_from(take(maps::CONFIG)?)?,
            stats: PerCpuArray::try_from(take(maps::STATS)?)?,
        })
    }

    pub fn config(&self) -> Result<LimiterConfig> {
        Ok(self.config.get(&0, 0)?)
    }

    pub fn set_config(&mut self, config: &LimiterConfig) -> Result<()> {
        Ok(self.config.set(0, config, 0)?)
    }

    /// Removes a destination's policy; one that is not there is fine.
    pub fn remove_policy(&mut self, key: &DestKey) -> Result<()> {
        absent_is_fine(self.policies.remove(key))
    }

    /// Every destination the kernel knows and its state, in a few system calls.
    pub fn dest_entries(&self) -> Result<Vec<(DestKey, DestState)>> {
        Ok(batch::entries(self.dests.map())?)
    }

    /// Every destination the kernel knows, with the agent's policy for it, sorted by address.
    pub fn destinations(&self) -> Result<Vec<(DestKey, DestState, Option<DestPolicy>)>> {
        let policies: std::collections::HashMap<DestKey, DestPolicy> =
            batch::entries(self.policies.map())?.into_iter().collect();
        let mut rows: Vec<_> = self
            .dest_entries()?
            .into_iter()
            .map(|(key, state)| (key, state, policies.get(&key).copied()))
            .collect();
        rows.sort_by_key(|(k, _, _)| k.socket_addr());
        Ok(rows)
    }

    pub fn globals(&self) -> Result<Globals> {
        let mut sum = GlobalStats::default();
        for cpu in self.stats.get(&0, 0)?.iter() {
            sum += *cpu;
        }
        let live = self.dest_entries()?.len() as u64;
        Ok(Globals {
            ringbuf_drops: sum.ringbuf_drops,
            table_full: sum.table_full,
            fail_open: sum.fail_open,
            untracked: sum.storage_errors,
            destinations: live,
        })
    }
}

/// The errno of a failed map operation.
pub fn errno(e: &aya::maps::MapError) -> Option<i32> {
    match e {
        aya::maps::MapError::SyscallError(e) => e.io_error.raw_os_error(),
        _ => None,
    }
}

/// Removing what is not there is fine.
pub fn absent_is_fine(result: Result<(), aya::maps::MapError>) -> Result<()> {
    match result {
        Err(e) if errno(&e) == Some(libc::ENOENT) => Ok(()),
        result => Ok(result?),
    }
}
