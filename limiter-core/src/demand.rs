//! The demand floor: what a destination's own clients were seen to use while it was healthy.
//!
//! A closed population of clients (pgbench's ten, a pool's connections) never holds more
//! connections than it has. When such an upstream turns slow with workers to spare, a limit
//! cut below what the clients use spares it nothing: each refusal is a client turned away
//! (pgbench aborts it for good). So the highest in-flight of the last healthy windows in
//! which the limit refused nothing is a floor under the cuts the latency asks for. A window
//! the limit bound says nothing of the demand, which was more than the limit: where demand
//! always exceeds the limit there is no floor, and a queue of our own making is cut as
//! before. Errors above the background still cut through it.

use crate::guard::RecentPeaks;

/// In-flight this far above the healthy peak is the slowdown piling connections up (clients
/// arriving at their rate while each waits longer), not the same clients waiting longer.
const PILE_UP: f64 = 1.25;

#[derive(Clone, Copy, Debug, Default)]
pub struct DemandFloor {
    peaks: RecentPeaks,
}

impl DemandFloor {
    /// Remembers the peak in-flight of a healthy window that refused no connect.
    pub fn observe_unbound(&mut self, peak_inflight: u32) {
        self.peaks.observe(peak_inflight);
    }

    /// `proposed`, with a cut below `limit` stopped at the demand's healthy peak, unless
    /// the window's own peak in-flight shows connections piling up beyond it. Never above
    /// `limit`: the floor only holds what is there, it never raises the limit.
    pub fn hold(&self, limit: f64, proposed: f64, peak_inflight: u32) -> f64 {
        let floor = f64::from(self.peaks.max());
        if proposed >= limit || f64::from(peak_inflight) > PILE_UP * floor {
            return proposed;
        }
        proposed.max(floor.min(limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_stops_at_the_healthy_peak_and_never_raises() {
        let mut d = DemandFloor::default();
        assert_eq!(
            d.hold(20.0, 5.0, 10),
            5.0,
            "no floor before a healthy window"
        );
        d.observe_unbound(10);
        assert_eq!(d.hold(20.0, 5.0, 10), 10.0);
        assert_eq!(d.hold(20.0, 12.0, 10), 12.0);
        assert_eq!(d.hold(8.0, 5.0, 8), 8.0, "a limit already below it stays");
        assert_eq!(d.hold(20.0, 30.0, 10), 30.0, "growth passes");
    }

    #[test]
    fn connections_piling_up_are_cut_through_the_floor() {
        let mut d = DemandFloor::default();
        d.observe_unbound(10);
        assert_eq!(d.hold(100.0, 50.0, 12), 50.0_f64.max(10.0));
        assert_eq!(
            d.hold(100.0, 5.0, 12),
            10.0,
            "the same clients, waiting longer"
        );
        assert_eq!(
            d.hold(100.0, 5.0, 13),
            5.0,
            "more connections than healthy traffic held"
        );
    }
}
