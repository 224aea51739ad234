//! Loading the programs, attaching them to the cgroup, and taking them away again.

use std::time::Duration;

use anyhow::{Context, Result};
use aya::{
    maps::{MapData, MapInfo, RingBuf, SkStorage},
    programs::{
        links::{FdLink, PinnedLink},
        CgroupAttachMode, CgroupSkbAttachType, Program,
    },
    Btf, Ebpf, EbpfLoader,
};
use limiter_common::{maps, DestKey, DestPeers, DestPolicy, QueuePolicy, SockState, EVENTS_BYTES};
use tracing::{info, warn};

use crate::{
    adopt, cgroup::Cgroup, clock::monotonic_ns, config::Mode, configure::configure, maps::Maps,
    pins::PinDir, preflight::Kernel,
};

/// Pending ring-buffer bytes at which the kernel wakes the agent (once per crossing):
/// about 1 300 latency signals. Below that, the agent's own 100 ms drain picks them up; at
/// 200 000 signals/s this is ~150 wake-ups a second.
const WAKEUP_BYTES: u32 = 64 * 1024;

/// The wake-up threshold of a ring of `ring_bytes`: at most a quarter of it, so that the
/// agent is woken well before the ring is full. Fixed when the programs are loaded, as
/// the rings' sizes are.
fn wakeup_bytes(ring_bytes: u32) -> u32 {
    WAKEUP_BYTES.min(ring_bytes / 4)
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub default_mode: Mode,
    /// What a connect at the limit gets where a destination does not say.
    pub queue: QueuePolicy,
    /// Some destination queues at its limit: the queue's sock_ops program is attached.
    pub queues: bool,
    /// The limit of a destination no policy covers yet.
    pub unseen_limit: u32,
    pub heartbeat_timeout: Duration,
    pub max_destinations: u32,
    /// Written before any connect is seen (exclusions, grouped addresses).
    pub policies: Vec<(DestKey, DestPolicy)>,
    /// Fall-forward candidates of group members, also in place before any connect.
    pub peers: Vec<(DestKey, DestPeers)>,
    /// The keys configured destinations are counted under: their table entries are made
    /// before any connect and never forgotten, beyond `max_destinations`.
    pub pinned: Vec<DestKey>,
    pub signal_buffer_bytes: u32,
}

/// The ring buffers the kernel writes to, handed to their readers.
pub struct Rings {
    pub decisions: RingBuf<MapData>,
    pub signals: RingBuf<MapData>,
}

/// Release paths, observers and the getpeername restore: attached before any connect hook,
/// so that from the moment a connect can take a slot (or be redirected to a peer), the slot
/// comes back (and the application sees the address it asked for).
const OBSERVERS: [&str; 6] = [
    "limiter_state_change",
    "limiter_sock_release",
    "limiter_egress",
    "limiter_ingress",
    "limiter_getpeername4",
    "limiter_getpeername6",
];

/// A queued connect's timers. Attached only when some destination queues: the kernel calls
/// a sock_ops program on five or more events of every TCP connection in the cgroup.
const QUEUE_TIMERS: &str = "limiter_sockops";

/// The hooks that take slots, attached last: connections that exist by then are counted.
const CONNECT_HOOKS: [&str; 2] = ["limiter_connect4", "limiter_connect6"];

/// Every program in attach order (detaching goes in reverse, connect hooks first); also
/// the names their links are pinned under.
pub fn programs() -> impl Iterator<Item = &'static str> {
    OBSERVERS
        .into_iter()
        .chain([QUEUE_TIMERS])
        .chain(CONNECT_HOOKS)
}

/// Queueing asked of programs attached without its timers.
fn check_queue_timers(settings: &Settings, attached: bool) -> Result<()> {
    if settings.queues && !attached {
        anyhow::bail!("overflow = \"queue\" needs a program the running one was attached without: restart the agent (without --keep-attached) to queue");
    }
    Ok(())
}

/// Each program's link to the cgroup, by program name.
type Links = Vec<(&'static str, FdLink)>;

/// The programs attached to one cgroup. Dropping it detaches them and removes the pins,
/// unless [`Attachment::keep_attached`] was called.
pub struct Attachment {
    /// The programs we loaded (none after taking over from a previous agent); the links
    /// below keep them alive either way.
    _ebpf: Option<Ebpf>,
    links: Links,
    pub maps: Maps,
    pins: PinDir,
    /// Every map by its pin name, to pin it again should its pin be removed.
    pinned: Vec<(&'static str, MapData)>,
    on_drop: OnDrop,
}

/// What dropping an [`Attachment`] does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnDrop {
    /// Detach the programs and remove the pins.
    Detach,
    /// Pin the links and leave everything for the next agent.
    KeepAttached,
    /// Nothing: a successor owns the pin directory now.
    Forget,
}

impl Attachment {
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
            .and_then(|(ebpf, links, maps, rings)| {
                let attachment = Attachment {
                    _ebpf: Some(ebpf),
                    links,
                    maps,
                    pinned: open_pinned(&pins)?,
                    pins: pins.clone(),
                    on_drop: OnDrop::Detach,
                };
                Ok((attachment, rings))
            })
            .inspect_err(|_| {
                let _ = pins.remove();
            })
    }

    /// True when a previous agent left its enforcement attached for us (`--keep-attached`).
    pub fn can_take_over(pins: &PinDir) -> bool {
        pins.links().exists()
    }

    /// Adopts the programs, links and maps a previous agent left pinned: enforcement never
    /// stopped, and every count and limit carries on.
    pub fn take_over(pins: PinDir, settings: &Settings) -> Result<(Self, Rings)> {
        let mut maps = Maps::from_pins(&pins)?;
        // Its links and maps show it is the agent's: marked so, if an older agent did not.
        pins.create()?;
        warn_of_kept_sizes(&pins, settings);
        let ring = |name: &str| -> Result<RingBuf<MapData>> {
            let data = MapData::from_pin(pins.map(name))
                .with_context(|| format!("cannot open the pinned {name} map"))?;
            Ok(RingBuf::try_from(aya::maps::Map::from_map_data(data)?)?)
        };
        let rings = Rings {
            decisions: ring(maps::EVENTS)?,
            signals: ring(maps::SIGNALS)?,
        };
        let timers = pins.links().join(QUEUE_TIMERS).exists();
        check_queue_timers(settings, timers)?;
        let mut links = Vec::new();
        for name in programs().filter(|&name| name != QUEUE_TIMERS || timers) {
            let path = pins.links().join(name);
            let pinned = PinnedLink::from_pin(&path)
                .with_context(|| format!("cannot open the pinned link {}", path.display()))?;
            // From now on this agent holds the link: if it dies, the programs go with it.
            links.push((name, pinned.unpin()?));
        }
        std::fs::remove_dir(pins.links())?;
        configure(&mut maps, settings)?;
        let attachment = Attachment {
            _ebpf: None,
            links,
            maps,
            pinned: open_pinned(&pins)?,
            pins,
            on_drop: OnDrop::Detach,
        };
        Ok((attachment, rings))
    }

    /// Attaches afresh to a cgroup that was recreated: the old links died with the old
    /// directory, and the maps start over with the new one.
    pub fn reattach(
        &mut self,
        cgroup: &Cgroup,
        settings: &Settings,
        kernel: &Kernel,
    ) -> Result<Rings> {
        self.links.clear();
        let (fresh, rings) = Attachment::attach(cgroup, self.pins.clone(), settings, kernel)?;
        // The pin directory is the successor's now.
        std::mem::replace(self, fresh).on_drop = OnDrop::Forget;
        Ok(rings)
    }

    /// On drop, leave the programs attached and everything pinned, for the next agent to
    /// take over. Until it does, the kernel enforces the last limits (failing open once
    /// the heartbeat is older than its timeout).
    pub fn keep_attached(&mut self) {
        self.on_drop = OnDrop::KeepAttached;
    }

    /// Tells the kernel the agent is alive; without it, the programs fail open.
    pub fn heartbeat(&mut self) -> Result<()> {
        let mut config = self.maps.config()?;
        config.heartbeat_ns = monotonic_ns();
        self.maps.set_config(&config)
    }

    /// A new configuration for the running programs (reload): see [`configure`].
    pub fn reconfigure(&mut self, settings: &Settings) -> Result<()> {
        let timers = self.links.iter().any(|(name, _)| *name == QUEUE_TIMERS);
        check_queue_timers(settings, timers)?;
        configure(&mut self.maps, settings)
    }

    pub fn pins(&self) -> &PinDir {
        &self.pins
    }

    /// Pins again the maps whose pins are gone (someone removed the pin directory), so
    /// that `status`, `detach` and the next agent still find these programs. True when it
    /// pinned anything.
    pub fn restore_pins(&self) -> Result<bool> {
        let missing: Vec<_> = self
            .pinned
            .iter()
            .filter(|(name, _)| !self.pins.map(name).exists())
            .collect();
        if missing.is_empty() {
            return Ok(false);
        }
        self.pins.create()?;
        for (name, map) in missing {
            map.pin(self.pins.map(name))
                .with_context(|| format!("cannot pin the {name} map again"))?;
        }
        Ok(true)
    }
}

/// Every map of the pin directory, opened from its pin.
fn open_pinned(pins: &PinDir) -> Result<Vec<(&'static str, MapData)>> {
    maps::ALL
        .into_iter()
        .map(|name| {
            let map = MapData::from_pin(pins.map(name))
                .with_context(|| format!("cannot open the pinned {name} map"))?;
            Ok((name, map))
        })
        .collect()
}

impl Drop for Attachment {
    fn drop(&mut self) {
        match self.on_drop {
            OnDrop::KeepAttached => {
                if let Err(e) = self.pin_links() {
                    tracing::error!("cannot keep the programs attached: {e:#}");
                }
            }
            OnDrop::Detach => {
                // Dropping a link detaches its program: connect hooks first.
                self.links.drain(..).rev().for_each(drop);
                if let Err(e) = self.pins.remove() {
                    tracing::error!("{e:#}");
                }
            }
            OnDrop::Forget => {}
        }
    }
}

impl Attachment {
    fn pin_links(&mut self) -> Result<()> {
        self.restore_pins()?;
        self.pins.create_links()?;
        for (name, link) in self.links.drain(..) {
            link.pin(self.pins.links().join(name))
                .with_context(|| format!("cannot pin the link of {name}"))?;
        }
        Ok(())
    }
}

/// Taking over keeps the previous agent's maps, and with them their sizes.
fn warn_of_kept_sizes(pins: &PinDir, settings: &Settings) {
    let size = |name: &str| {
        MapInfo::from_pin(pins.map(name))
            .ok()
            .map(|i| i.max_entries())
    };
    let (dests, signals) = (size(maps::DESTS), size(maps::SIGNALS));
    if dests != Some(dests_capacity(settings)) || signals != Some(settings.signal_buffer_bytes) {
        warn!(
            destinations = dests,
            signal_buffer_bytes = signals,
            "taking over keeps the previous agent's table sizes: to change max_destinations, the number of configured destinations or signal_buffer_kib, stop the agent without --keep-attached and start it again"
        );
    }
}

fn load_and_attach(
    cgroup: &Cgroup,
    pins: &PinDir,
    settings: &Settings,
    kernel: &Kernel,
) -> Result<(Ebpf, Links, Maps, Rings)> {
    let mut ebpf = EbpfLoader::new()
        .default_map_pin_directory(pins.path())
        .map_max_entries(maps::DESTS, dests_capacity(settings))
        .map_max_entries(maps::POLICIES, policies_capacity(settings))
        .map_max_entries(maps::SIGNALS, settings.signal_buffer_bytes)
        .override_global("have_set_retval", &u8::from(kernel.has_set_retval), true)
        .override_global("queue_rto_jiffies", &queue_rto_jiffies(kernel.hz), true)
        .override_global("queueing", &u8::from(settings.queues), true)
        .override_global("events_wakeup_bytes", &wakeup_bytes(EVENTS_BYTES), true)
        .override_global(
            "signals_wakeup_bytes",
            &wakeup_bytes(settings.signal_buffer_bytes),
            true,
        )
        .load(limiter_ebpf::OBJECT)
        .map_err(|e| explain_load_failure(e, settings))?;
    let mut maps = Maps::from_ebpf(&mut ebpf)?;
    configure(&mut maps, settings)?;
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

    let mut links = Vec::new();
    let mut attach_all = |names: &[&'static str], ebpf: &mut Ebpf| -> Result<()> {
        for &name in names {
            let prog = ebpf
                .program_mut(name)
                .with_context(|| format!("no program {name}"))?;
            links.push((name, attach(prog, &cgroup_fd).context(attach_hint(name))?));
        }
        Ok(())
    };
    attach_all(&OBSERVERS, &mut ebpf)?;
    if settings.queues {
        attach_all(&[QUEUE_TIMERS], &mut ebpf)?;
    }
    // Everything that returns slots and observes is in place, no connect hook yet: the
    // moment to count what already exists.
    let mut sockets: SkStorage<&mut MapData, SockState> =
        SkStorage::try_from(ebpf.map_mut(maps::SOCKETS).context("no sockets map")?)?;
    let adopted = adopt::adopt(cgroup, &mut maps, &mut sockets, settings.default_mode)?;
    info!(
        connections = adopted,
        "counted connections that existed before attach"
    );
    attach_all(&CONNECT_HOOKS, &mut ebpf)?;
    Ok((ebpf, links, maps, rings))
}

/// A queued connect's SYN timer: each retransmission asks for a slot, so this is how long a
/// freed slot may wait for a waiter (while the kernel's backoff stays linear: four times on
/// Linux 6.7+, then doubling). Linux's own first timer is 1 s.
const QUEUE_RTO: Duration = Duration::from_millis(100);

fn queue_rto_jiffies(hz: u32) -> u32 {
    (QUEUE_RTO.as_millis() as u32 * hz / 1000).max(1)
}

/// A table the kernel cannot make is the size asked for, which the user can change.
fn explain_load_failure(e: aya::EbpfError, settings: &Settings) -> anyhow::Error {
    use aya::{maps::MapError, EbpfError};
    match &e {
        EbpfError::MapError(MapError::CreateError { name, io_error })
            if matches!(io_error.raw_os_error(), Some(libc::E2BIG | libc::ENOMEM)) =>
        {
            anyhow::anyhow!(
                "cannot load the eBPF object: the kernel cannot make its `{name}` table ({io_error}) for max_destinations {} and signal_buffer_kib {}: lower them",
                settings.max_destinations,
                settings.signal_buffer_bytes / 1024
            )
        }
        _ => anyhow::Error::new(e).context("cannot load the eBPF object"),
    }
}

/// Room for the destinations the kernel learns, plus the configured ones, whose entries
/// are made first: a flood of new destinations fills the former only.
fn dests_capacity(settings: &Settings) -> u32 {
    let pinned = u32::try_from(settings.pinned.len()).unwrap_or(u32::MAX);
    settings.max_destinations.saturating_add(pinned)
}

/// Room for a policy per tracked destination plus every configured address.
fn policies_capacity(settings: &Settings) -> u32 {
    let configured = u32::try_from(settings.policies.len()).unwrap_or(u32::MAX);
    dests_capacity(settings)
        .saturating_add(configured)
        .saturating_add(CONFIGURED_HEADROOM)
}

/// Policies a reload may add beyond what the configuration had at attach.
const CONFIGURED_HEADROOM: u32 = 4096;

/// The kernel tracepoint of every TCP socket's state changes: not a cgroup's, so the
/// program finds ours by their socket storage.
const STATE_TRACEPOINT: &str = "inet_sock_set_state";

/// Loads one program and attaches it to the cgroup (or, for the state tracepoint, to the
/// kernel); the link is ours to keep or drop.
fn attach(prog: &mut Program, cgroup: &std::fs::File) -> Result<FdLink> {
    let mode = CgroupAttachMode::Single;
    Ok(match prog {
        Program::BtfTracePoint(p) => {
            let btf = Btf::from_sys_fs()
                .context("cannot read the kernel's BTF (/sys/kernel/btf/vmlinux): limiter needs a kernel built with CONFIG_DEBUG_INFO_BTF")?;
            p.load(STATE_TRACEPOINT, &btf)?;
            let id = p.attach()?;
            p.take_link(id)?.into()
        }
        Program::CgroupSock(p) => {
            p.load()?;
            let id = p.attach(cgroup, mode)?;
            p.take_link(id)?.try_into()?
        }
        Program::CgroupSkb(p) => {
            p.load()?;
            let direction = match p.expected_attach_type() {
                Some(CgroupSkbAttachType::Egress) => CgroupSkbAttachType::Egress,
                _ => CgroupSkbAttachType::Ingress,
            };
            let id = p.attach(cgroup, direction, mode)?;
            p.take_link(id)?.try_into()?
        }
        Program::CgroupSockAddr(p) => {
            p.load()?;
            let id = p.attach(cgroup, mode)?;
            p.take_link(id)?.try_into()?
        }
        Program::SockOps(p) => {
            p.load()?;
            let id = p.attach(cgroup, mode)?;
            p.take_link(id)?.try_into()?
        }
        other => anyhow::bail!("unexpected program type {:?}", other.prog_type()),
    })
}

fn attach_hint(what: &str) -> String {
    format!(
        "cannot attach {what} to the cgroup (is another BPF program of that kind attached to it?)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_wakes_the_agent_at_most_a_quarter_full() {
        assert_eq!(wakeup_bytes(4 * 1024), 1024);
        assert_eq!(wakeup_bytes(EVENTS_BYTES), EVENTS_BYTES / 4);
        assert_eq!(wakeup_bytes(1024 * 1024), WAKEUP_BYTES);
    }
}
