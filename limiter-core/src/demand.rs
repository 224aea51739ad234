//! The demand floor: what a destination's own clients were seen to use while it was healthy.
//!
//! A closed population of clients (pgbench's ten, a pool's connections) never holds more
//! connections than it has. When such an upstream turns slow with workers to spare, a limit
//! cut below what the clients use spares it nothing: each refusal is a client turned away
//! (pgbench aborts it for good). So the highest in-flight of the last healthy windows in
//! which the limit refused nothing, with the same margin up to which more in flight still
//! reads as those clients (a window's peak is one draw of a demand that varies), is a floor
//! under the cuts the latency asks for. A window the limit bound says nothing of the
//! demand, which was more than the limit: where demand always exceeds the limit there is no
//! floor, and a queue of our own making is cut as before. Errors above the background still
//! cut through it.

use crate::guard::RecentPeaks;

/// In-flight this far above the healthy peak is the slowdown piling connections up (clients
/// arriving at their rate while each waits longer), not the same clients waiting longer.
const PILE_UP: f64 = 1.25;
/// Healthy windows whose peaks are remembered: half a minute or more, since a load that
/// mixes long and short requests reaches its peak in-flight only now and then.
const HEALTHY_WINDOWS: usize = 30;

#[derive(Clone, Copy, Debug, Default)]
pub struct DemandFloor {
    peaks: RecentPeaks<HEALTHY_WINDOWS>,
}

impl DemandFloor {
    /// Remembers the peak in-flight of a healthy window that refused no connect.
    pub fn observe_unbound(&mut self, peak_inflight: u32) {
        self.peaks.observe(peak_inflight);
    }

    /// `proposed`, with a cut below `limit` stopped at the demand's healthy peak (with its
    /// margin), unless the window's own peak in-flight shows connections piling up beyond
    /// it. Never above `limit`: the floor only holds what is there, it never raises it.
    pub fn hold(&self, limit: f64, proposed: f64, peak_inflight: u32) -> f64 {
        let floor = f64::from(self.peaks.max());
        if proposed >= limit || f64::from(peak_inflight) > PILE_UP * floor {
            return proposed;
        }
        proposed.max((PILE_UP * floor).min(limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_stops_above_the_healthy_peak_and_never_raises() {
        let mut d = DemandFloor::default();
        assert_eq!(
            d.hold(20.0, 5.0, 10),
            5.0,
            "no floor before a healthy window"
        );
        d.observe_unbound(8);
        assert_eq!(d.hold(20.0, 5.0, 8), 10.0, "8 with its margin");
        assert_eq!(d.hold(20.0, 12.0, 8), 12.0);
        assert_eq!(d.hold(9.0, 5.0, 8), 9.0, "a limit already below it stays");
        assert_eq!(d.hold(20.0, 30.0, 8), 30.0, "growth passes");
    }

    #[test]
    fn connections_piling_up_are_cut_through_the_floor() {
        let mut d = DemandFloor::default();
        d.observe_unbound(8);
        assert_eq!(
            d.hold(100.0, 5.0, 10),
            10.0,
            "the same clients, waiting longer"
        );
        assert_eq!(
            d.hold(100.0, 5.0, 11),
            5.0,
            "more connections than healthy traffic held"
        );
    }

    #[test]
    fn the_floor_remembers_half_a_minute_of_healthy_windows() {
        let mut d = DemandFloor::default();
        d.observe_unbound(8);
        for _ in 1..HEALTHY_WINDOWS {
            d.observe_unbound(4);
        }
        assert_eq!(d.hold(20.0, 1.0, 4), 10.0);
        d.observe_unbound(4);
        assert_eq!(d.hold(20.0, 1.0, 4), 5.0, "the peak of 8 is forgotten");
    }
}
