//! Loading the programs, attaching them to the cgroup, and taking them away again.

use std::time::Duration;

use anyhow::{Context, Result};
use aya::{
    maps::{MapData, RingBuf, SkStorage},
    programs::{
        CgroupAttachMode, CgroupSkb, CgroupSkbAttachType, CgroupSock, CgroupSockAddr, SockOps,
    },
    Ebpf, EbpfLoader,
};
use limiter_common::{maps, DestKey, DestPolicy, LimiterConfig, SockState, ABI_VERSION};
use tracing::info;

use crate::{
    cgroup::Cgroup, clock::monotonic_ns, config::Mode, pins::PinDir, preflight::Kernel, seed,
    tables::Tables,
};

/// Pending ring-buffer bytes that force a wake-up: 64 decisions. Below that, the agent's
/// own drain timer picks them up.
const WAKEUP_BYTES: u32 = 64 * std::mem::size_of::<limiter_common::LimiterEvent>() as u32;

#[derive(Debug, Clone)]
pub struct Settings {
    pub default_mode: Mode,
    pub initial_limit: u32,
    pub heartbeat_timeout: Duration,
    pub max_destinations: u32,
    /// Written before any connect is seen (exclusions, grouped addresses).
    pub policies: Vec<(DestKey, DestPolicy)>,
    pub signal_buffer_bytes: u32,
}

/// The ring buffers the kernel writes to, handed to their readers.
pub struct Rings {
    pub decisions: RingBuf<MapData>,
    pub signals: RingBuf<MapData>,
}

/// The programs attached to one cgroup. Dropping it detaches them and removes the pins.
pub struct Enforcement {
    // Holds the programs and their links: dropping it detaches everything.
    ebpf: Option<Ebpf>,
    pub tables: Tables,
    pins: PinDir,
    heartbeat_timeout_ns: u64,
}

impl Enforcement {
    /// Attaches to `cgroup`, or leaves nothing behind.
    pub fn attach(
        cgroup: &Cgroup,
        pins: PinDir,
        settings: &Settings,
        kernel: &Kernel,
    ) -> Result<(Self, Rings)> {
        // The caller holds the agent lock, so pins here are left over from a dead agent;
        // they may even be of another map layout, which aya would silently reuse.
        pins.remove()?;
        pins.create()?;
        load_and_attach(cgroup, &pins, settings, kernel)
            .inspect_err(|_| {
                let _ = pins.remove();
            })
            .map(|(ebpf, tables, rings)| {
                let enforcement = Enforcement {
                    ebpf: Some(ebpf),
                    tables,
                    pins,
                    heartbeat_timeout_ns: settings.heartbeat_timeout.as_nanos() as u64,
                };
                (enforcement, rings)
            })
    }

    /// Tells the kernel the agent is alive; without it, the programs fail open.
    pub fn heartbeat(&mut self) -> Result<()> {
        let mut config = self.tables.config()?;
        config.heartbeat_ns = monotonic_ns();
        config.heartbeat_timeout_ns = self.heartbeat_timeout_ns;
        self.tables.set_config(&config)
    }

    /// The global mode and the limit of destinations no controller has spoken for yet.
    pub fn set_defaults(&mut self, mode: Mode, initial_limit: u32) -> Result<()> {
        let mut config = self.tables.config()?;
        config.default_mode = mode.abi();
        config.initial_limit = initial_limit;
        self.tables.set_config(&config)
    }

    pub fn pins(&self) -> &PinDir {
        &self.pins
    }
}

impl Drop for Enforcement {
    fn drop(&mut self) {
        drop(self.ebpf.take());
        if let Err(e) = self.pins.remove() {
            tracing::error!("{e:#}");
        }
    }
}

fn load_and_attach(
    cgroup: &Cgroup,
    pins: &PinDir,
    settings: &Settings,
    kernel: &Kernel,
) -> Result<(Ebpf, Tables, Rings)> {
    let mut ebpf = EbpfLoader::new()
        .default_map_pin_directory(pins.path())
        .map_max_entries(maps::DESTS, settings.max_destinations)
        .map_max_entries(maps::POLICIES, settings.max_destinations)
        .map_max_entries(maps::SIGNALS, settings.signal_buffer_bytes)
        .override_global("have_set_retval", &u8::from(kernel.has_set_retval), true)
        .load(limiter_ebpf::OBJECT)
        .context("cannot load the eBPF object")?;
    let mut tables = Tables::from_ebpf(&mut ebpf)?;
    tables.set_config(&LimiterConfig {
        abi_version: ABI_VERSION,
        default_mode: settings.default_mode.abi(),
        initial_limit: settings.initial_limit,
        wakeup_bytes: WAKEUP_BYTES,
        heartbeat_ns: monotonic_ns(),
        heartbeat_timeout_ns: settings.heartbeat_timeout.as_nanos() as u64,
    })?;
    for (key, policy) in &settings.policies {
        tables.policies.insert(key, policy, 0)?;
    }
    let mut ring = |name: &str| -> Result<RingBuf<MapData>> {
        let map = ebpf
            .take_map(name)
            .with_context(|| format!("no {name} map"))?;
        Ok(RingBuf::try_from(map)?)
    };
    let rings = Rings {
        decisions: ring(maps::EVENTS)?,
        signals: ring(maps::SIGNALS)?,
    };
    let cgroup_fd = cgroup.open()?;

    // Release paths and observers first: from here on, every slot taken (seeded or
    // admitted) comes back, and every request is seen from its first byte.
    let release: &mut CgroupSock = program(&mut ebpf, "limiter_sock_release")?;
    release.load()?;
    release
        .attach(&cgroup_fd, CgroupAttachMode::Single)
        .context(attach_hint("sock_release"))?;
    let sockops: &mut SockOps = program(&mut ebpf, "limiter_sockops")?;
    sockops.load()?;
    sockops
        .attach(&cgroup_fd, CgroupAttachMode::Single)
        .context(attach_hint("sockops"))?;

    for (name, direction) in [
        ("limiter_egress", CgroupSkbAttachType::Egress),
        ("limiter_ingress", CgroupSkbAttachType::Ingress),
    ] {
        let observer: &mut CgroupSkb = program(&mut ebpf, name)?;
        observer.load()?;
        observer
            .attach(&cgroup_fd, direction, CgroupAttachMode::Single)
            .context(attach_hint(name))?;
    }
    let mut sockets: SkStorage<&mut MapData, SockState> =
        SkStorage::try_from(ebpf.map_mut(maps::SOCKETS).context("no sockets map")?)?;
    let seeded = seed::seed(cgroup, &mut tables, &mut sockets, settings.default_mode)?;
    info!(
        connections = seeded,
        "counted connections that existed before attach"
    );

    for name in ["limiter_connect4", "limiter_connect6"] {
        let connect: &mut CgroupSockAddr = program(&mut ebpf, name)?;
        connect.load()?;
        connect
            .attach(&cgroup_fd, CgroupAttachMode::Single)
            .context(attach_hint(name))?;
    }
    Ok((ebpf, tables, rings))
}

fn program<'a, P>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut P>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let prog = ebpf
        .program_mut(name)
        .with_context(|| format!("no program {name}"))?;
    Ok(prog.try_into()?)
}

fn attach_hint(what: &str) -> String {
    format!(
        "cannot attach {what} to the cgroup (is another BPF program of that kind attached to it?)"
    )
}
