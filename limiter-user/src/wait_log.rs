//! A destination's recent queue waits, for the p50 and p99 that `status` and the metrics
//! show.

/// Waits kept: the p99 of the last 128 is their second longest.
const KEPT: usize = 128;

/// The last [`KEPT`] waits of connects admitted from the queue.
#[derive(Debug, Default)]
pub struct WaitLog {
    /// In microseconds: a wait is under the maximum of a minute.
    waits: Vec<u32>,
    next: usize,
    /// p50 and p99 in nanoseconds, until the next wait.
    quantiles: Option<(u64, u64)>,
}

impl WaitLog {
    pub fn push(&mut self, waited_ns: u64) {
        let us = u32::try_from(waited_ns / 1000).unwrap_or(u32::MAX);
        if self.waits.len() < KEPT {
            self.waits.push(us);
        } else {
            self.waits[self.next] = us;
        }
        self.next = (self.next + 1) % KEPT;
        self.quantiles = None;
    }

    /// The p50 and p99 of the kept waits, in nanoseconds (nearest rank); (0, 0) for none.
    pub fn quantiles(&mut self) -> (u64, u64) {
        if self.waits.is_empty() {
            return (0, 0);
        }
        *self.quantiles.get_or_insert_with(|| {
            let mut sorted = self.waits.clone();
            sorted.sort_unstable();
            let at = |q: f64| {
                let rank = (q * sorted.len() as f64).ceil() as usize;
                u64::from(sorted[rank.clamp(1, sorted.len()) - 1]) * 1000
            };
            (at(0.5), at(0.99))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_of_the_last_waits_only() {
        let mut log = WaitLog::default();
        assert_eq!(log.quantiles(), (0, 0));
        for ms in 1..=100u64 {
            log.push(ms * 1_000_000);
        }
        assert_eq!(log.quantiles(), (50_000_000, 99_000_000));
        // 128 waits of 1 s push every earlier one out.
        for _ in 0..KEPT {
            log.push(1_000_000_000);
        }
        assert_eq!(log.quantiles(), (1_000_000_000, 1_000_000_000));
    }
}
