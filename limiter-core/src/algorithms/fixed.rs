//! Fixed: a static cap. It pins the bounds to its cap, so a cap below the adaptive minimum
//! (a pool of 2) is honoured, and then only has to leave the limit alone.

use serde::{Deserialize, Serialize};

use super::{LimitAlgorithm, Verdict};
use crate::config::Limits;

/// A static limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Fixed {
    /// The cap; the configured initial limit when absent.
    pub limit: Option<u32>,
}

impl LimitAlgorithm for Fixed {
    fn next_limit(&mut self, limit: f64, _verdict: &Verdict) -> f64 {
        limit
    }

    fn bounds(&self, configured: Limits) -> Limits {
        let cap = self.limit.unwrap_or(configured.initial);
        Limits {
            initial: cap,
            min: cap,
            max: cap,
        }
    }
}
