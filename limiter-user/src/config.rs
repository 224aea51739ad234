//! The TOML configuration and how command-line flags override it.

use std::{net::SocketAddr, path::Path};

use anyhow::{bail, Context, Result};
use limiter_common::{DestKey, PolicyMode, QueuePolicy, MAX_PEERS, PEERS_ENTRIES};
use limiter_core::{Algorithm, ControlConfig, Limits};
use serde::{Deserialize, Serialize};

/// What the limiter does with a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Not consulted, nothing recorded.
    Off,
    /// Never refuses; takes slots, measures and counts would_shed.
    Shadow,
    /// Refuses connects beyond the limit.
    Prod,
}

impl Mode {
    pub fn abi(self) -> u32 {
        PolicyMode::from(self).into()
    }

    /// None for a value no mode has, and for "use the default" (the caller knows which).
    pub fn from_abi(mode: u32) -> Option<Self> {
        match PolicyMode::try_from(mode).ok()? {
            PolicyMode::Default => None,
            PolicyMode::Off => Some(Mode::Off),
            PolicyMode::Shadow => Some(Mode::Shadow),
            PolicyMode::Prod => Some(Mode::Prod),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Shadow => "shadow",
            Mode::Prod => "prod",
        }
    }
}

impl From<Mode> for PolicyMode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Off => PolicyMode::Off,
            Mode::Shadow => PolicyMode::Shadow,
            Mode::Prod => PolicyMode::Prod,
        }
    }
}

/// What a connect at the limit gets in prod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Overflow {
    /// Refused at once (ECONNREFUSED).
    Refuse,
    /// Held, with nothing sent, until a slot frees, within `[queue]`'s bounds.
    Queue,
}

impl Overflow {
    fn abi(self) -> u32 {
        limiter_common::Overflow::from(self).into()
    }
}

impl From<Overflow> for limiter_common::Overflow {
    fn from(o: Overflow) -> Self {
        match o {
            Overflow::Refuse => limiter_common::Overflow::Refuse,
            Overflow::Queue => limiter_common::Overflow::Queue,
        }
    }
}

/// The queue of `overflow = "queue"`: its bounds are factors of the current limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueConfig {
    /// Up to this many times the limit (in flight plus waiting), every connect may wait.
    pub wait: f64,
    /// From `wait` to this, a rising share is refused at once; past it, all are.
    pub refuse: f64,
    /// A queued connect is admitted within this, or fails with ETIMEDOUT then.
    pub max_wait_ms: u64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            wait: 2.0,
            refuse: 3.0,
            max_wait_ms: 500,
        }
    }
}

/// The queue's bounds stay within what the kernel's percent fields hold.
const MAX_QUEUE_FACTOR: f64 = 6.0;
/// TCP_USER_TIMEOUT ends a wait: it takes milliseconds, and a connect waiting a minute has
/// long been given up on.
const MAX_WAIT_MS: u64 = 60_000;

impl QueueConfig {
    fn validate(&self) -> Result<()> {
        if !(1.0..=MAX_QUEUE_FACTOR).contains(&self.wait)
            || !(self.wait..=MAX_QUEUE_FACTOR).contains(&self.refuse)
        {
            bail!(
                "wait and refuse must satisfy 1 <= wait <= refuse <= {MAX_QUEUE_FACTOR}, not {} and {}",
                self.wait,
                self.refuse
            );
        }
        within("max_wait_ms", self.max_wait_ms, MAX_WAIT_MS)
    }

    /// The kernel's form of this queue for `overflow`.
    pub fn policy(&self, overflow: Overflow) -> QueuePolicy {
        let pct = |factor: f64| (factor * 100.0).round() as u16;
        QueuePolicy {
            overflow: overflow.abi(),
            wait_pct: pct(self.wait),
            refuse_pct: pct(self.refuse),
            max_wait_ns: self.max_wait_ms * 1_000_000,
        }
    }
}

/// The file as written; every key optional, defaults embedded below.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default = "default_mode")]
    pub mode: Mode,
    #[serde(default = "default_overflow")]
    pub overflow: Overflow,
    #[serde(default)]
    pub queue: QueueConfig,
    #[serde(default)]
    pub algorithm: Algorithm,
    #[serde(default)]
    pub limits: Limits,
    /// The limit of `algorithm = "fixed"` (defaults to the initial limit).
    pub limit: Option<u32>,
    /// Seconds without an agent heartbeat after which the kernel admits everything.
    #[serde(default = "default_heartbeat_timeout")]
    pub heartbeat_timeout_secs: u64,
    /// Size of the kernel's destination table; when it is full, new destinations fail open.
    #[serde(default = "default_max_destinations")]
    pub max_destinations: u32,
    /// Seconds a destination with nothing in flight stays known (limit, latency history)
    /// after its last connection; then the agent forgets it and frees its table entry.
    #[serde(default = "default_forget_idle")]
    pub forget_idle_secs: u64,
    /// Size of the kernel's latency-signal ring buffer; a full one drops (and counts) events.
    #[serde(default = "default_signal_buffer_kib")]
    pub signal_buffer_kib: u32,
    /// How often `host` destinations are resolved again.
    #[serde(default = "default_resolve_interval")]
    pub resolve_interval_secs: u64,
    #[serde(default, rename = "destination")]
    pub destinations: Vec<DestinationConfig>,
    #[serde(default, rename = "group")]
    pub groups: Vec<GroupConfig>,
    #[serde(default, rename = "exclude")]
    pub excludes: Vec<ExcludeConfig>,
}

/// Several addresses sharing one limit, with optional overrides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationConfig {
    pub name: String,
    pub host: Option<String>,
    #[serde(default)]
    pub addresses: Vec<SocketAddr>,
    pub mode: Option<Mode>,
    pub overflow: Option<Overflow>,
    pub algorithm: Option<Algorithm>,
    pub limit: Option<u32>,
    pub initial: Option<u32>,
    pub min: Option<u32>,
    pub max: Option<u32>,
}

/// Interchangeable replicas of one service: each member is a destination with its own
/// limit; a connect to a member at its limit falls forward to the others, in this order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    pub name: String,
    pub members: Vec<SocketAddr>,
    pub mode: Option<Mode>,
    pub overflow: Option<Overflow>,
    pub algorithm: Option<Algorithm>,
    pub limit: Option<u32>,
    pub initial: Option<u32>,
    pub min: Option<u32>,
    pub max: Option<u32>,
}

/// What a `[[destination]]` or a `[[group]]` (for each member) sets over the global settings.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Overrides {
    pub mode: Option<Mode>,
    pub overflow: Option<Overflow>,
    pub algorithm: Option<Algorithm>,
    pub limit: Option<u32>,
    pub initial: Option<u32>,
    pub min: Option<u32>,
    pub max: Option<u32>,
}

/// Both tables spell the overrides alike (serde cannot flatten a shared struct into a
/// table that denies unknown keys).
macro_rules! overrides_of {
    ($table:ty) => {
        impl $table {
            pub fn overrides(&self) -> Overrides {
                Overrides {
                    mode: self.mode,
                    overflow: self.overflow,
                    algorithm: self.algorithm,
                    limit: self.limit,
                    initial: self.initial,
                    min: self.min,
                    max: self.max,
                }
            }
        }
    };
}
overrides_of!(DestinationConfig);
overrides_of!(GroupConfig);

impl GroupConfig {
    /// Where a connect to member `i` falls forward to: the other members, in configured
    /// order from the top (the list is an order of preference, the same for every member).
    pub fn peers_of(&self, i: usize) -> Vec<SocketAddr> {
        let me = DestKey::new(self.members[i]);
        self.members
            .iter()
            .copied()
            .filter(|&m| DestKey::new(m) != me)
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExcludeConfig {
    pub addresses: Vec<SocketAddr>,
}

fn default_mode() -> Mode {
    Mode::Prod
}
fn default_overflow() -> Overflow {
    Overflow::Refuse
}
fn default_heartbeat_timeout() -> u64 {
    10
}
fn default_max_destinations() -> u32 {
    65536
}
fn default_forget_idle() -> u64 {
    300
}
fn default_signal_buffer_kib() -> u32 {
    1024
}
fn default_resolve_interval() -> u64 {
    30
}

impl Config {
    pub fn defaults() -> Self {
        toml::from_str("").expect("the embedded defaults parse")
    }

    /// Reads and validates a file; errors name the file, the line and what is wrong.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config {}", path.display()))?;
        let config: Config = toml::from_str(&text).map_err(|e| {
            let line = e
                .span()
                .map(|s| format!(":{}", line_of(&text, s.start)))
                .unwrap_or_default();
            anyhow::anyhow!("{}{line}: {}", path.display(), e.message())
        })?;
        config
            .validate()
            .with_context(|| format!("{}: invalid configuration", path.display()))?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<()> {
        validate_limits(self.limits).context("[limits]")?;
        self.queue.validate().context("[queue]")?;
        if self.limit == Some(0) {
            bail!("limit must be at least 1");
        }
        within(
            "resolve_interval_secs",
            self.resolve_interval_secs,
            MAX_INTERVAL_SECS,
        )?;
        within(
            "heartbeat_timeout_secs",
            self.heartbeat_timeout_secs,
            MAX_INTERVAL_SECS,
        )?;
        within("forget_idle_secs", self.forget_idle_secs, MAX_INTERVAL_SECS)?;
        if self.max_destinations == 0 {
            bail!("max_destinations must be at least 1");
        }
        let kib = self.signal_buffer_kib;
        if kib < 4 || !kib.is_power_of_two() || kib > 1 << 20 {
            bail!("signal_buffer_kib must be a power of two between 4 and 1048576, not {kib}");
        }
        for d in &self.destinations {
            if d.host.is_none() == d.addresses.is_empty() {
                bail!(
                    "destination `{}` needs exactly one of `host` or `addresses`",
                    d.name
                );
            }
            if let Some(host) = &d.host {
                validate_host(host).with_context(|| format!("destination `{}`", d.name))?;
            }
            self.validate_overrides(&d.overrides())
                .with_context(|| format!("destination `{}`", d.name))?;
        }
        for g in &self.groups {
            self.validate_group(g)
                .with_context(|| format!("group `{}`", g.name))?;
        }
        let mut owner = std::collections::HashMap::new();
        for d in &self.destinations {
            for &a in &d.addresses {
                if let Some(other) = owner.insert(DestKey::new(a), &d.name) {
                    bail!("{a} is an address of destination `{other}` and of destination `{}`: an address has one limit", d.name);
                }
            }
        }
        for e in &self.excludes {
            for a in &e.addresses {
                if let Some(d) = owner.get(&DestKey::new(*a)) {
                    bail!("{a} is an address of destination `{d}` and in [[exclude]]: remove it from one of them");
                }
            }
        }
        let mut names = std::collections::HashSet::new();
        let all_names = self.destinations.iter().map(|d| &d.name);
        if let Some(name) = all_names
            .chain(self.groups.iter().map(|g| &g.name))
            .find(|name| !names.insert(*name))
        {
            bail!("`{name}` is defined twice (destination and group names are one namespace)");
        }
        self.validate_membership()
    }

    fn validate_overrides(&self, o: &Overrides) -> Result<()> {
        if o.limit == Some(0) {
            bail!("limit must be at least 1");
        }
        validate_limits(self.override_limits(o))
    }

    fn validate_group(&self, g: &GroupConfig) -> Result<()> {
        if g.members.len() < 2 {
            bail!("a group needs at least 2 members to fall forward between");
        }
        if g.members.len() > MAX_PEERS + 1 {
            bail!(
                "a group has at most {} members, not {}",
                MAX_PEERS + 1,
                g.members.len()
            );
        }
        // v4-mapped IPv6 is IPv4 here, as in the kernel.
        let is_v4 = |a: &SocketAddr| DestKey::new(*a).socket_addr().is_ipv4();
        if g.members.iter().any(|m| is_v4(m) != is_v4(&g.members[0])) {
            bail!("members must all be IPv4 or all IPv6: a connect is only redirected within its address family");
        }
        if let Some(m) = g
            .members
            .iter()
            .find(|m| matches!(m, SocketAddr::V6(v6) if v6.ip().is_unicast_link_local()))
        {
            bail!("{m}: link-local members are not supported (a redirect cannot change the interface)");
        }
        self.validate_overrides(&g.overrides())
    }

    /// An address is in at most one group, and not also in a `[[destination]]` or an
    /// `[[exclude]]`: a member is a destination of its own.
    fn validate_membership(&self) -> Result<()> {
        let mut owner = std::collections::HashMap::new();
        for g in &self.groups {
            for &m in &g.members {
                match owner.insert(DestKey::new(m), &g.name) {
                    Some(other) if *other == g.name => {
                        bail!("{m} is listed twice in group `{other}`")
                    }
                    Some(other) => {
                        bail!(
                            "{m} is a member of group `{other}` and of group `{}`",
                            g.name
                        )
                    }
                    None => {}
                }
            }
        }
        if owner.len() > PEERS_ENTRIES as usize {
            bail!(
                "groups have {} members in all, at most {PEERS_ENTRIES} are supported",
                owner.len()
            );
        }
        let elsewhere = self
            .destinations
            .iter()
            .flat_map(|d| {
                d.addresses
                    .iter()
                    .map(move |a| (*a, format!("destination `{}`", d.name)))
            })
            .chain(
                self.excludes
                    .iter()
                    .flat_map(|e| e.addresses.iter().map(|a| (*a, "[[exclude]]".to_string()))),
            );
        for (addr, what) in elsewhere {
            if let Some(group) = owner.get(&DestKey::new(addr)) {
                bail!("{addr} is a member of group `{group}` and in {what}");
            }
        }
        Ok(())
    }

    /// The controller of destinations without a configuration of their own.
    pub fn control(&self) -> ControlConfig {
        ControlConfig {
            algorithm: self.algorithm,
            limits: self.limits,
            fixed: limiter_core::algorithms::Fixed { limit: self.limit },
            ..ControlConfig::default()
        }
    }

    /// A configured destination's (or group member's) controller: its overrides over the
    /// global settings.
    pub fn override_control(&self, o: &Overrides) -> ControlConfig {
        ControlConfig {
            algorithm: o.algorithm.unwrap_or(self.algorithm),
            limits: self.override_limits(o),
            fixed: limiter_core::algorithms::Fixed {
                limit: o.limit.or(self.limit),
            },
            ..ControlConfig::default()
        }
    }

    pub fn override_mode(&self, o: &Overrides) -> Mode {
        o.mode.unwrap_or(self.mode)
    }

    /// The queue every destination without an `overflow` of its own gets.
    pub fn queue_policy(&self) -> QueuePolicy {
        self.queue.policy(self.overflow)
    }

    /// A configured destination's queue: none (the global one) unless it sets `overflow`.
    pub fn override_queue(&self, o: &Overrides) -> Option<QueuePolicy> {
        o.overflow.map(|overflow| self.queue.policy(overflow))
    }

    fn override_limits(&self, o: &Overrides) -> Limits {
        Limits {
            initial: o.initial.unwrap_or(self.limits.initial),
            min: o.min.unwrap_or(self.limits.min),
            max: o.max.unwrap_or(self.limits.max),
        }
    }
}

/// Durations in seconds stay below a day, far from where nanoseconds overflow.
const MAX_INTERVAL_SECS: u64 = 86_400;

fn within(key: &str, value: u64, max: u64) -> Result<()> {
    if !(1..=max).contains(&value) {
        bail!("{key} must be between 1 and {max}, not {value}");
    }
    Ok(())
}

/// The 1-based line holding byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

impl Config {
    /// A reload cannot resize the kernel's maps: refuse one that asks for it rather than
    /// say "reloaded" and change nothing.
    pub fn check_reloadable(&self, running: &Config) -> Result<()> {
        if self.max_destinations != running.max_destinations {
            bail!("max_destinations changes only when the agent starts: restart it (without --keep-attached)");
        }
        if self.signal_buffer_kib != running.signal_buffer_kib {
            bail!("signal_buffer_kib changes only when the agent starts: restart it (without --keep-attached)");
        }
        Ok(())
    }
}

/// A `host` is looked up as NAME:PORT: anything else would fail every lookup, quietly.
fn validate_host(host: &str) -> Result<()> {
    let valid = host.rsplit_once(':').is_some_and(|(name, port)| {
        !name.trim().is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
    });
    if !valid {
        bail!("host must be NAME:PORT, a name or address and a port from 1 to 65535, not {host:?}");
    }
    Ok(())
}

fn validate_limits(l: Limits) -> Result<()> {
    if l.min == 0 || l.min > l.max || l.initial < l.min || l.initial > l.max {
        bail!(
            "limits must satisfy 1 <= min <= initial <= max (min {}, initial {}, max {})",
            l.min,
            l.initial,
            l.max
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCUMENTED_EXAMPLE: &str = r#"
mode = "prod"
algorithm = "vegas"
[limits]
initial = 20
min = 4
max = 200

[[destination]]
name = "payments"
addresses = ["10.0.0.7:443", "10.0.0.8:443"]
mode = "shadow"
algorithm = "fixed"
limit = 50

[[group]]
name = "inference"
members = ["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"]
algorithm = "fixed"
limit = 2

[[exclude]]
addresses = ["127.0.0.53:53"]
"#;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn the_queue_reaches_the_kernel_in_percent_and_nanoseconds() {
        let c = Config::defaults();
        assert_eq!(c.overflow, Overflow::Refuse);
        let q = c.queue.policy(Overflow::Queue);
        assert_eq!(
            (q.wait_pct, q.refuse_pct, q.max_wait_ns),
            (200, 300, 500_000_000)
        );
        let f = write("overflow = \"queue\"\n[[destination]]\nname = \"db\"\naddresses = [\"10.0.0.1:5432\"]\noverflow = \"refuse\"\n");
        let c = Config::load(f.path()).unwrap();
        assert_eq!(
            c.queue_policy().overflow,
            u32::from(limiter_common::Overflow::Queue)
        );
        let own = c.override_queue(&c.destinations[0].overrides()).unwrap();
        assert_eq!(own.overflow, u32::from(limiter_common::Overflow::Refuse));
    }

    #[test]
    fn queue_bounds_out_of_order_are_refused() {
        let f = write("[queue]\nwait = 3\nrefuse = 2\n");
        let err = format!("{:#}", Config::load(f.path()).unwrap_err());
        assert!(err.contains("1 <= wait <= refuse <= 6"), "{err}");
        let f = write("[queue]\nmax_wait_ms = 0\n");
        let err = format!("{:#}", Config::load(f.path()).unwrap_err());
        assert!(
            err.contains("max_wait_ms must be between 1 and 60000"),
            "{err}"
        );
    }

    #[test]
    fn empty_file_gives_the_documented_defaults() {
        let c = Config::defaults();
        assert_eq!(c.mode, Mode::Prod);
        assert_eq!(c.algorithm, Algorithm::Vegas);
        assert_eq!((c.limits.initial, c.limits.min, c.limits.max), (20, 4, 200));
        assert_eq!(c.heartbeat_timeout_secs, 10);
    }

    #[test]
    fn spec_example_round_trips() {
        let f = write(DOCUMENTED_EXAMPLE);
        let c = Config::load(f.path()).unwrap();
        let again: Config = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(c, again);
        let payments = c.override_control(&c.destinations[0].overrides());
        assert_eq!(payments.algorithm, Algorithm::Fixed);
        assert_eq!(payments.effective_limits().initial, 50);
        assert_eq!(c.control().algorithm, Algorithm::Vegas);
        let inference = &c.groups[0];
        assert_eq!(
            c.override_control(&inference.overrides())
                .effective_limits()
                .max,
            2
        );
        assert_eq!(c.override_mode(&inference.overrides()), Mode::Prod);
    }

    #[test]
    fn a_member_falls_forward_to_the_others_from_the_top() {
        let c: Config = toml::from_str(DOCUMENTED_EXAMPLE).unwrap();
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        let g = &c.groups[0];
        assert_eq!(
            g.peers_of(0),
            [addr("127.0.0.1:8002"), addr("127.0.0.1:8003")]
        );
        assert_eq!(
            g.peers_of(1),
            [addr("127.0.0.1:8001"), addr("127.0.0.1:8003")]
        );
        assert_eq!(
            g.peers_of(2),
            [addr("127.0.0.1:8001"), addr("127.0.0.1:8002")]
        );
    }

    /// The error `load` gives for a configuration, with its context.
    fn refusal(text: &str) -> String {
        let f = write(text);
        format!("{:#}", Config::load(f.path()).unwrap_err())
    }

    #[test]
    fn groups_are_refused_when_they_cannot_fall_forward() {
        let group = |members: &str| format!("[[group]]\nname = \"g\"\nmembers = [{members}]\n");
        let err = refusal(&group("\"127.0.0.1:1\""));
        assert!(
            err.contains("group `g`") && err.contains("at least 2 members"),
            "{err}"
        );
        let nine: Vec<String> = (1..=9).map(|p| format!("\"127.0.0.1:{p}\"")).collect();
        let err = refusal(&group(&nine.join(", ")));
        assert!(err.contains("at most 8 members"), "{err}");
        let err = refusal(&group("\"[fe80::1%2]:1\", \"[::1]:2\""));
        assert!(
            err.contains("link-local members are not supported"),
            "{err}"
        );
        let err = refusal(&group("\"127.0.0.1:1\", \"[::1]:2\""));
        assert!(err.contains("all be IPv4 or all IPv6"), "{err}");
        // v4-mapped IPv6 is IPv4.
        let c: Config =
            toml::from_str(&group("\"127.0.0.1:1\", \"[::ffff:127.0.0.2]:2\"")).unwrap();
        c.validate().unwrap();
        let err = refusal(&format!(
            "{}limit = 0\n",
            group("\"127.0.0.1:1\", \"127.0.0.1:2\"")
        ));
        assert!(
            err.contains("group `g`") && err.contains("limit must be at least 1"),
            "{err}"
        );
        let err = refusal(&format!(
            "{}peers = []\n",
            group("\"127.0.0.1:1\", \"127.0.0.1:2\"")
        ));
        assert!(err.contains("unknown field `peers`"), "{err}");
    }

    #[test]
    fn a_member_belongs_to_one_group_and_nothing_else() {
        let base = "[[group]]\nname = \"a\"\nmembers = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\n";
        let err = refusal(&format!(
            "{base}[[group]]\nname = \"b\"\nmembers = [\"127.0.0.1:2\", \"127.0.0.1:3\"]\n"
        ));
        assert!(
            err.contains("127.0.0.1:2 is a member of group `a` and of group `b`"),
            "{err}"
        );
        let err =
            refusal("[[group]]\nname = \"a\"\nmembers = [\"127.0.0.1:1\", \"127.0.0.1:1\"]\n");
        assert!(
            err.contains("127.0.0.1:1 is listed twice in group `a`"),
            "{err}"
        );
        let err = refusal(&format!(
            "{base}[[destination]]\nname = \"d\"\naddresses = [\"127.0.0.1:1\"]\n"
        ));
        assert!(err.contains("group `a` and in destination `d`"), "{err}");
        let err = refusal(&format!(
            "{base}[[exclude]]\naddresses = [\"127.0.0.1:2\"]\n"
        ));
        assert!(err.contains("group `a` and in [[exclude]]"), "{err}");
        let err = refusal(&format!(
            "{base}[[destination]]\nname = \"a\"\naddresses = [\"127.0.0.1:9\"]\n"
        ));
        assert!(err.contains("`a` is defined twice"), "{err}");
    }

    #[test]
    fn syntax_errors_name_file_and_line() {
        let f = write("mode = \"prod\"\nlimits = 3\n");
        let err = format!("{:#}", Config::load(f.path()).unwrap_err());
        assert!(err.contains(&format!("{}:2", f.path().display())), "{err}");
    }

    #[test]
    fn unknown_keys_and_values_are_refused() {
        let f = write("mode = \"loud\"\n");
        let err = format!("{:#}", Config::load(f.path()).unwrap_err());
        assert!(
            err.contains(":1") && err.contains("unknown variant"),
            "{err}"
        );
        let f = write("[limits]\nmni = 3\n");
        assert!(format!("{:#}", Config::load(f.path()).unwrap_err()).contains("unknown field"));
        let f = write("moed = \"prod\"\n");
        assert!(format!("{:#}", Config::load(f.path()).unwrap_err()).contains("unknown field"));
    }

    #[test]
    fn inconsistent_limits_are_refused() {
        let f = write("[limits]\nmin = 50\nmax = 10\n");
        let err = format!("{:#}", Config::load(f.path()).unwrap_err());
        assert!(err.contains("min <= initial <= max"), "{err}");
    }

    #[test]
    fn a_destination_needs_host_or_addresses() {
        let f = write("[[destination]]\nname = \"x\"\n");
        let err = format!("{:#}", Config::load(f.path()).unwrap_err());
        assert!(
            err.contains("exactly one of `host` or `addresses`"),
            "{err}"
        );
    }

    #[test]
    fn a_host_is_a_name_and_a_port() {
        let host = |h: &str| format!("[[destination]]\nname = \"x\"\nhost = \"{h}\"\n");
        for bad in [
            "",
            ":80",
            "example.com",
            "example.com:",
            "example.com:0",
            "a:70000",
        ] {
            let err = refusal(&host(bad));
            assert!(
                err.contains("destination `x`") && err.contains("host must be NAME:PORT"),
                "{bad}: {err}"
            );
        }
        for good in ["example.com:443", "10.0.0.7:80", "[::1]:80"] {
            let c: Config = toml::from_str(&host(good)).unwrap();
            c.validate().unwrap();
        }
    }

    #[test]
    fn fixed_limit_defaults_to_initial() {
        let c: Config = toml::from_str("algorithm = \"fixed\"\n[limits]\ninitial = 7\n").unwrap();
        assert_eq!(c.control().effective_limits().initial, 7);
    }

    #[test]
    fn destination_bounds_are_checked_against_the_global_ones() {
        let f = write("[limits]\nmax = 50\n[[destination]]\nname = \"x\"\naddresses = [\"127.0.0.1:1\"]\ninitial = 80\n");
        let err = format!("{:#}", Config::load(f.path()).unwrap_err());
        assert!(
            err.contains("destination `x`") && err.contains("min <= initial <= max"),
            "{err}"
        );
    }

    #[test]
    fn an_address_belongs_to_one_destination() {
        let err = refusal("[[destination]]\nname = \"a\"\naddresses = [\"127.0.0.1:1\"]\n[[destination]]\nname = \"b\"\naddresses = [\"127.0.0.1:1\"]\n");
        assert!(
            err.contains("127.0.0.1:1 is an address of destination `a` and of destination `b`"),
            "{err}"
        );
        let err = refusal("[[destination]]\nname = \"a\"\naddresses = [\"127.0.0.1:1\"]\n[[exclude]]\naddresses = [\"127.0.0.1:1\"]\n");
        assert!(
            err.contains("127.0.0.1:1 is an address of destination `a` and in [[exclude]]"),
            "{err}"
        );
    }

    #[test]
    fn durations_are_bounded_instead_of_wrapping() {
        let err = refusal("heartbeat_timeout_secs = 18446744074\n");
        assert!(
            err.contains("heartbeat_timeout_secs must be between 1 and 86400"),
            "{err}"
        );
        for key in [
            "resolve_interval_secs",
            "forget_idle_secs",
            "heartbeat_timeout_secs",
        ] {
            let err = refusal(&format!("{key} = 0\n"));
            assert!(err.contains(&format!("{key} must be between")), "{err}");
        }
    }

    #[test]
    fn an_unknown_key_is_reported_on_its_own_line() {
        let f = write("mode = \"prod\"\n\nmoed = \"prod\"\n");
        let err = format!("{:#}", Config::load(f.path()).unwrap_err());
        assert!(err.contains(&format!("{}:3:", f.path().display())), "{err}");
        assert!(err.contains("unknown field `moed`"), "{err}");
    }

    #[test]
    fn a_reload_refuses_what_it_cannot_change() {
        let running = Config::defaults();
        let resized: Config = toml::from_str("max_destinations = 10\n").unwrap();
        let err = format!("{:#}", resized.check_reloadable(&running).unwrap_err());
        assert!(
            err.contains("max_destinations changes only when the agent starts"),
            "{err}"
        );
        let ring: Config = toml::from_str("signal_buffer_kib = 64\n").unwrap();
        assert!(ring.check_reloadable(&running).is_err());
        let beat: Config = toml::from_str("heartbeat_timeout_secs = 3\n").unwrap();
        beat.check_reloadable(&running).unwrap();
    }

    #[test]
    fn destination_names_are_unique() {
        let f = write("[[destination]]\nname = \"x\"\naddresses = [\"127.0.0.1:1\"]\n[[destination]]\nname = \"x\"\naddresses = [\"127.0.0.1:2\"]\n");
        let err = format!("{:#}", Config::load(f.path()).unwrap_err());
        assert!(err.contains("`x` is defined twice"), "{err}");
    }
}
