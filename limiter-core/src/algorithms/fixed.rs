//! Fixed: a static cap. The controller pins the bounds to the configured limit, so the
//! algorithm only has to leave the limit alone.

use super::{LimitAlgorithm, Verdict};

/// A static limit.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fixed;

impl LimitAlgorithm for Fixed {
    fn next_limit(&mut self, limit: f64, _verdict: &Verdict) -> f64 {
        limit
    }
}
