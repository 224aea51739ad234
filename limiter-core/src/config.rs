//! What a controller is built from: the algorithm, its bounds and the pipeline's tuning.
//!
//! Every default carries its provenance in `docs/control.md`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::algorithms::{AnyAlgorithm, Fixed, Gateway, Gradient2, LimitAlgorithm};

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The control algorithm behind a destination's limit, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
pub enum Algorithm {
    /// Queue estimation against the no-load latency (default).
    Vegas,
    /// Latency gradient with sqrt headroom, added only when the gradient is healthy.
    Gradient2,
    /// Error-driven: +1 while busy, x0.9 on error or timeout.
    Aimd,
    /// The LLM-gateway policy: 60 s fastest baseline, x0.8 on error, +sqrt when healthy.
    Gateway,
    /// A static cap.
    Fixed,
}

impl Algorithm {
    /// Every algorithm, in the order they are documented.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Vegas,
        Algorithm::Gradient2,
        Algorithm::Aimd,
        Algorithm::Gateway,
        Algorithm::Fixed,
    ];

    /// The algorithm used where none is chosen.
    pub const DEFAULT: Algorithm = Algorithm::Vegas;

    /// The lowercase name used on the command line, in configuration files and by serde:
    /// the one place the names are spelt.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Vegas => "vegas",
            Algorithm::Gradient2 => "gradient2",
            Algorithm::Aimd => "aimd",
            Algorithm::Gateway => "gateway",
            Algorithm::Fixed => "fixed",
        }
    }

    /// Every name, comma-separated, for help and error messages.
    pub fn names() -> String {
        Self::ALL.map(Algorithm::name).join(", ")
    }
}

impl Default for Algorithm {
    fn default() -> Self {
        Algorithm::DEFAULT
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<Algorithm> for &'static str {
    fn from(a: Algorithm) -> Self {
        a.name()
    }
}

/// An algorithm name that is not one of [`Algorithm::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown algorithm {0:?} (expected one of {names})", names = Algorithm::names())]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| UnknownAlgorithm(s.to_owned()))
    }
}

impl TryFrom<String> for Algorithm {
    type Error = UnknownAlgorithm;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// Bounds of the concurrency limit. A misspelt key is an error, not a silent default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// The limit before any latency history exists.
    pub initial: u32,
    /// The limit never goes below this, so a trickle keeps flowing and recovery stays observable.
    pub min: u32,
    /// The limit never goes above this.
    pub max: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            initial: 20,
            min: 4,
            max: 200,
        }
    }
}

impl Limits {
    /// The same bounds with `min <= initial <= max` enforced (a bad `min > max` keeps `max`).
    pub fn normalized(self) -> Limits {
        let max = self.max.max(1);
        let min = self.min.clamp(1, max);
        Limits {
            initial: self.initial.clamp(min, max),
            min,
            max,
        }
    }
}

/// How samples become one latency figure per window, and how the baseline may heal.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Pipeline {
    /// A window closes no sooner than this...
    pub min_window_ns: u64,
    /// ...and no later than this, whatever it holds.
    pub max_window_ns: u64,
    /// A window closes before `max_window_ns` once it holds this many events.
    pub min_samples: u32,
    /// The quantile of a window's latencies that stands for the window.
    pub quantile: f64,
    /// Weight of the newest value in the exponential smoothing after the median filter.
    pub latency_smoothing: f64,
    /// The limit may grow to no more than this multiple of recent peak in-flight.
    pub app_limited_multiple: f64,
}

impl Default for Pipeline {
    fn default() -> Self {
        Pipeline {
            min_window_ns: 2 * NANOS_PER_SEC,
            max_window_ns: 30 * NANOS_PER_SEC,
            min_samples: 50,
            quantile: 0.9,
            latency_smoothing: 1.0 / 3.0,
            app_limited_multiple: 2.0,
        }
    }
}

/// Everything needed to build a destination's controller.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ControlConfig {
    /// Which algorithm turns the pipeline's verdicts into a limit.
    pub algorithm: Algorithm,
    /// Bounds of the adaptive limit; the algorithm may narrow them
    /// ([`ControlConfig::effective_limits`]).
    pub limits: Limits,
    /// The parameters of [`Algorithm::Gradient2`].
    pub gradient2: Gradient2,
    /// The parameters of [`Algorithm::Gateway`].
    pub gateway: Gateway,
    /// The parameters of [`Algorithm::Fixed`].
    pub fixed: Fixed,
    /// The aggregation pipeline.
    pub pipeline: Pipeline,
}

impl ControlConfig {
    /// A default configuration running `algorithm`.
    pub fn new(algorithm: Algorithm) -> Self {
        ControlConfig {
            algorithm,
            ..ControlConfig::default()
        }
    }

    /// The bounds actually enforced: the configured ones as the algorithm narrows them.
    pub fn effective_limits(&self) -> Limits {
        AnyAlgorithm::from_config(self).bounds(self.limits)
    }
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            algorithm: Algorithm::DEFAULT,
            limits: Limits::default(),
            gradient2: Gradient2::default(),
            gateway: Gateway::default(),
            fixed: Fixed::default(),
            pipeline: Pipeline::default(),
        }
    }
}
