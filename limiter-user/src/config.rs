//! The TOML configuration and how command-line flags override it.

use std::{
    net::{SocketAddr, ToSocketAddrs},
    path::Path,
};

use anyhow::{bail, Context, Result};
use limiter_common::{MODE_OFF, MODE_PROD, MODE_SHADOW};
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
        match self {
            Mode::Off => MODE_OFF,
            Mode::Shadow => MODE_SHADOW,
            Mode::Prod => MODE_PROD,
        }
    }

    pub fn from_abi(mode: u32) -> Option<Self> {
        match mode {
            MODE_OFF => Some(Mode::Off),
            MODE_SHADOW => Some(Mode::Shadow),
            MODE_PROD => Some(Mode::Prod),
            _ => None,
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

/// The file as written; every key optional, defaults embedded below.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default = "default_mode")]
    pub mode: Mode,
    #[serde(default = "default_algorithm")]
    pub algorithm: Algorithm,
    #[serde(default)]
    pub limits: Limits,
    /// The limit of `algorithm = "fixed"` (defaults to the initial limit).
    pub limit: Option<u32>,
    /// Seconds without an agent heartbeat after which the kernel admits everything.
    #[serde(default = "default_heartbeat_timeout")]
    pub heartbeat_timeout_secs: u64,
    /// Size of the kernel's destination table (LRU).
    #[serde(default = "default_max_destinations")]
    pub max_destinations: u32,
    /// Size of the kernel's latency-signal ring buffer; a full one drops (and counts) events.
    #[serde(default = "default_signal_buffer_kib")]
    pub signal_buffer_kib: u32,
    /// How often `host` destinations are resolved again.
    #[serde(default = "default_resolve_interval")]
    pub resolve_interval_secs: u64,
    #[serde(default, rename = "destination")]
    pub destinations: Vec<DestinationConfig>,
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
    pub algorithm: Option<Algorithm>,
    pub limit: Option<u32>,
    pub initial: Option<u32>,
    pub min: Option<u32>,
    pub max: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExcludeConfig {
    pub addresses: Vec<SocketAddr>,
}

fn default_mode() -> Mode {
    Mode::Prod
}
fn default_algorithm() -> Algorithm {
    Algorithm::Vegas
}
fn default_heartbeat_timeout() -> u64 {
    10
}
fn default_max_destinations() -> u32 {
    65536
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
                .map(|s| format!(":{}", text[..s.start].lines().count().max(1)))
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
        if self.limit == Some(0) {
            bail!("limit must be at least 1");
        }
        if self.resolve_interval_secs == 0 {
            bail!("resolve_interval_secs must be at least 1");
        }
        if self.heartbeat_timeout_secs == 0 {
            bail!("heartbeat_timeout_secs must be at least 1");
        }
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
            if d.limit == Some(0) {
                bail!("destination `{}`: limit must be at least 1", d.name);
            }
            validate_limits(self.destination_limits(d))
                .with_context(|| format!("destination `{}`", d.name))?;
        }
        let mut names = std::collections::HashSet::new();
        if let Some(d) = self.destinations.iter().find(|d| !names.insert(&d.name)) {
            bail!("destination `{}` is defined twice", d.name);
        }
        Ok(())
    }

    /// The controller of destinations without a configuration of their own.
    pub fn control(&self) -> ControlConfig {
        ControlConfig {
            algorithm: self.algorithm,
            limits: self.limits,
            fixed_limit: self.limit,
            ..ControlConfig::default()
        }
    }

    /// A configured destination's controller: its overrides over the global settings.
    pub fn destination_control(&self, d: &DestinationConfig) -> ControlConfig {
        ControlConfig {
            algorithm: d.algorithm.unwrap_or(self.algorithm),
            limits: self.destination_limits(d),
            fixed_limit: d.limit.or(self.limit),
            ..ControlConfig::default()
        }
    }

    fn destination_limits(&self, d: &DestinationConfig) -> Limits {
        Limits {
            initial: d.initial.unwrap_or(self.limits.initial),
            min: d.min.unwrap_or(self.limits.min),
            max: d.max.unwrap_or(self.limits.max),
        }
    }
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

impl DestinationConfig {
    /// Its addresses, resolving `host` ("name:port") when given.
    pub fn resolve(&self) -> Result<Vec<SocketAddr>> {
        match &self.host {
            None => Ok(self.addresses.clone()),
            Some(host) => {
                let addrs: Vec<SocketAddr> = host
                    .to_socket_addrs()
                    .with_context(|| format!("destination `{}`: cannot resolve {host}", self.name))?
                    .collect();
                Ok(addrs)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC_EXAMPLE: &str = r#"
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

[[exclude]]
addresses = ["127.0.0.53:53"]
"#;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
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
        let f = write(SPEC_EXAMPLE);
        let c = Config::load(f.path()).unwrap();
        let again: Config = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(c, again);
        let payments = c.destination_control(&c.destinations[0]);
        assert_eq!(payments.algorithm, Algorithm::Fixed);
        assert_eq!(payments.effective_limits().initial, 50);
        assert_eq!(c.control().algorithm, Algorithm::Vegas);
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
    fn destination_names_are_unique() {
        let f = write("[[destination]]\nname = \"x\"\naddresses = [\"127.0.0.1:1\"]\n[[destination]]\nname = \"x\"\naddresses = [\"127.0.0.1:2\"]\n");
        let err = format!("{:#}", Config::load(f.path()).unwrap_err());
        assert!(err.contains("defined twice"), "{err}");
    }
}
