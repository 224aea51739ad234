//! Virtual time: nanoseconds since the start of a run, as the controllers expect.

/// A point in virtual time, or a duration, in nanoseconds.
pub type Nanos = u64;

pub const NANOS_PER_SEC: Nanos = 1_000_000_000;

/// Seconds (as scenarios are written) to nanoseconds (as the engine counts).
pub fn secs(s: f64) -> Nanos {
    (s * NANOS_PER_SEC as f64).round() as Nanos
}

/// Nanoseconds back to seconds, for reports and pictures.
pub fn as_secs(t: Nanos) -> f64 {
    t as f64 / NANOS_PER_SEC as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_trip() {
        assert_eq!(secs(1.5), 1_500_000_000);
        assert_eq!(as_secs(secs(0.28)), 0.28);
    }
}
