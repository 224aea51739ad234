//! Which controller a run uses: one of the control crate's, or an external process.

use std::fmt;
use std::str::FromStr;

use limiter_core::{controller, Algorithm, ControlConfig, Controller, Limits, Outcome};

use crate::external::ExternalController;

/// The algorithm used unless another is asked for.
pub const DEFAULT_ALGORITHM: Algorithm = Algorithm::DEFAULT;

/// A built-in algorithm by name, or `external:CMD`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AlgorithmChoice {
    Builtin(Algorithm),
    External(String),
}

impl AlgorithmChoice {
    /// Creates a fresh controller within `limits`, lends it to `run`, and for an external
    /// one checks afterwards that the process kept to the protocol.
    pub fn with_controller<R>(
        &self,
        limits: Limits,
        run: impl FnOnce(&mut dyn Controller) -> R,
    ) -> anyhow::Result<R> {
        match self {
            Self::Builtin(algorithm) => {
                let config = ControlConfig {
                    limits,
                    ..ControlConfig::new(*algorithm)
                };
                Ok(run(controller(&config, 0).as_mut()))
            }
            Self::External(command) => {
                let mut external = ExternalController::spawn(command, limits)?;
                let result = run(&mut external);
                external.finish()?;
                Ok(result)
            }
        }
    }
}

/// No limiter: admission that never refuses, for the runs a limiter is compared with.
pub struct Unlimited;

impl Controller for Unlimited {
    fn on_sample(&mut self, _: u64, _: u64, _: u32) {}
    fn on_outcome(&mut self, _: u64, _: Outcome) {}
    fn update(&mut self, _: u64) -> u32 {
        u32::MAX
    }
    fn limit(&self) -> u32 {
        u32::MAX
    }
}

impl Default for AlgorithmChoice {
    fn default() -> Self {
        Self::Builtin(DEFAULT_ALGORITHM)
    }
}

impl FromStr for AlgorithmChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(command) = s.strip_prefix("external:") {
            if command.trim().is_empty() {
                return Err("external: needs a command, as in external:./my-algorithm".into());
            }
            return Ok(Self::External(command.to_owned()));
        }
        s.parse().map(Self::Builtin).map_err(|_| {
            format!(
                "unknown algorithm {s:?}: expected one of {}, or external:CMD",
                Algorithm::names()
            )
        })
    }
}

impl fmt::Display for AlgorithmChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Builtin(algorithm) => algorithm.fmt(f),
            Self::External(command) => write!(f, "external:{command}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_builtin_names_and_external_commands() {
        for algorithm in Algorithm::ALL {
            let choice: AlgorithmChoice = algorithm.to_string().parse().expect("a builtin name");
            assert_eq!(choice, AlgorithmChoice::Builtin(algorithm));
            assert_eq!(choice.to_string(), algorithm.to_string());
        }
        let external: AlgorithmChoice = "external:python3 aimd.py".parse().expect("external");
        assert_eq!(
            external,
            AlgorithmChoice::External("python3 aimd.py".into())
        );
        assert_eq!(external.to_string(), "external:python3 aimd.py");
        assert!("external: ".parse::<AlgorithmChoice>().is_err());
        let err = "vegass".parse::<AlgorithmChoice>().unwrap_err();
        assert!(err.contains("vegas, gradient2"), "{err}");
    }
}
