//! What a controller is built from: the algorithm, its bounds and the pipeline's tuning.
//!
//! Every default carries its provenance in `docs/control.md`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The control algorithm behind a destination's limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Queue estimation against the no-load latency (default).
    #[default]
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

    /// The lowercase name used on the command line and in configuration files.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Vegas => "vegas",
            Algorithm::Gradient2 => "gradient2",
            Algorithm::Aimd => "aimd",
            Algorithm::Gateway => "gateway",
            Algorithm::Fixed => "fixed",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An algorithm name that is not one of [`Algorithm::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown algorithm {0:?} (expected one of vegas, gradient2, aimd, gateway, fixed)")]
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
    /// Bounds of the adaptive limit (ignored by `fixed`, see [`ControlConfig::effective_limits`]).
    pub limits: Limits,
    /// The cap for [`Algorithm::Fixed`]; `limits.initial` when absent.
    pub fixed_limit: Option<u32>,
    /// Smoothing of the limit itself (Gradient2, gateway).
    pub limit_smoothing: f64,
    /// How much slower than the baseline still counts as healthy (Gradient2, gateway).
    pub tolerance: f64,
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

    /// The bounds actually enforced: `fixed` pins min, initial and max to its cap, so a fixed
    /// limit below the adaptive minimum (a pool of 2) is honoured.
    pub fn effective_limits(&self) -> Limits {
        match self.algorithm {
            Algorithm::Fixed => {
                let cap = self.fixed_limit.unwrap_or(self.limits.initial);
                Limits {
                    initial: cap,
                    min: cap,
                    max: cap,
                }
            }
            _ => self.limits.normalized(),
        }
    }
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            algorithm: Algorithm::default(),
            limits: Limits::default(),
            fixed_limit: None,
            // Netflix Gradient2Limit's smoothing and rttTolerance.
            limit_smoothing: 0.2,
            tolerance: 1.5,
            pipeline: Pipeline::default(),
        }
    }
}
