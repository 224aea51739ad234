//! Learning a new destination: while the controller has no latency history for it, a
//! refused connect is demand it has not been shown, so the limit grows to meet it at once
//! instead of waiting for windows: the first time to meet the refused connects, then as in
//! TCP's slow start (RFC 5681) doubling, at most once per round: a round ends when a request
//! admitted at the new level has been answered, so the new level has been tried. As in
//! HyStart (RFC 9406) it stops on delay: an answer no slower than [`QUEUEING`] x the fastest
//! is *clean* (it did not wait for a worker), and the highest in-flight count a clean answer
//! started at is concurrency the upstream has been seen to serve without queueing. A round
//! that tried well beyond it with no clean answer means the upstream queues: growth ends,
//! back at that clean level.

/// An answer within this multiple of the fastest did not queue.
const QUEUEING: f64 = 1.25;
/// A round that tried this multiple of the clean level without a clean answer queued.
const BEYOND_CLEAN: f64 = 1.1;

/// Growth on refused demand while a destination is learned.
#[derive(Clone, Copy, Debug)]
pub struct SlowStart {
    /// The limit's upper bound: a level above it cannot be put in flight, so growth to it
    /// could never be tried.
    max: f64,
    sheds: u32,
    /// When the limit last grew, and to what.
    grown: Option<(u64, f64)>,
    previous: f64,
    fastest_ns: u64,
    clean_inflight: u32,
    round_tried: bool,
    tried_inflight: u32,
    done: bool,
    /// The last round queued: the windows of that round measured our queue.
    queued: bool,
}

impl SlowStart {
    /// Learning from the start, the limit bounded by `max`.
    pub fn new(max: f64) -> Self {
        SlowStart {
            max,
            sheds: 0,
            grown: None,
            previous: 0.0,
            fastest_ns: u64::MAX,
            clean_inflight: 0,
            round_tried: false,
            tried_inflight: 0,
            done: false,
            queued: false,
        }
    }

    /// A request admitted with `inflight` in flight was answered after `latency_ns`.
    pub fn on_sample(&mut self, now_ns: u64, latency_ns: u64, inflight: u32) {
        self.fastest_ns = self.fastest_ns.min(latency_ns);
        if latency_ns as f64 <= QUEUEING * self.fastest_ns as f64 {
            self.clean_inflight = self.clean_inflight.max(inflight);
        }
        if let Some((at, level)) = self.grown {
            if now_ns.saturating_sub(latency_ns) >= at {
                self.tried_inflight = self.tried_inflight.max(inflight);
                self.round_tried |= f64::from(inflight) >= level.floor();
            }
        }
    }

    /// Whether growth ended because the upstream queued; asks once.
    pub fn take_queued(&mut self) -> bool {
        std::mem::take(&mut self.queued)
    }

    /// A connect was refused.
    pub fn on_shed(&mut self) {
        self.sheds = self.sheds.saturating_add(1);
    }

    /// Stops: the destination has been learned.
    pub fn finish(&mut self) {
        self.done = true;
    }

    /// At an update: the limit to move to, if connects were refused since the last one.
    pub fn next_limit(&mut self, now_ns: u64, limit: f64) -> Option<f64> {
        let sheds = std::mem::take(&mut self.sheds);
        if self.done || sheds == 0 {
            return None;
        }
        if self.grown.is_some() {
            if !self.round_tried {
                return None; // the last growth has not been tried yet
            }
            if f64::from(self.tried_inflight) > BEYOND_CLEAN * f64::from(self.clean_inflight) {
                self.done = true;
                self.queued = true;
                return Some(self.previous.max(f64::from(self.clean_inflight)));
            }
        }
        // The first growth has nothing to go on but the refused demand; later ones double.
        let grown = if self.grown.is_none() {
            (2.0 * limit).max(limit + f64::from(sheds))
        } else {
            2.0 * limit
        }
        .min(self.max);
        self.previous = limit;
        self.grown = Some((now_ns, grown));
        self.round_tried = false;
        self.tried_inflight = 0;
        Some(grown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const MAX: f64 = 200.0;

    #[test]
    fn refused_demand_grows_the_limit_to_meet_it() {
        let mut s = SlowStart::new(MAX);
        assert_eq!(s.next_limit(100 * MS, 20.0), None, "nothing refused");
        for _ in 0..80 {
            s.on_shed();
        }
        assert_eq!(s.next_limit(200 * MS, 20.0), Some(100.0));
    }

    #[test]
    fn grows_once_per_round_and_at_least_doubles() {
        let mut s = SlowStart::new(MAX);
        s.on_sample(50 * MS, 30 * MS, 20);
        s.on_shed();
        assert_eq!(s.next_limit(100 * MS, 20.0), Some(40.0));
        s.on_sample(160 * MS, 30 * MS, 30);
        s.on_shed();
        assert_eq!(s.next_limit(200 * MS, 40.0), None, "40 not tried yet");
        s.on_sample(240 * MS, 30 * MS, 40);
        for _ in 0..100 {
            s.on_shed();
        }
        assert_eq!(s.next_limit(300 * MS, 40.0), Some(80.0), "doubles");
    }

    #[test]
    fn growth_stops_at_the_bound_so_that_the_round_can_be_tried() {
        let mut s = SlowStart::new(MAX);
        s.on_sample(50 * MS, 30 * MS, 20);
        for _ in 0..300 {
            s.on_shed();
        }
        assert_eq!(s.next_limit(100 * MS, 20.0), Some(MAX));
        s.on_sample(600 * MS, 120 * MS, 200);
        s.on_shed();
        assert_eq!(
            s.next_limit(700 * MS, MAX),
            Some(20.0),
            "the bound queued: back to the clean level"
        );
    }

    #[test]
    fn a_round_that_queued_goes_back_to_the_clean_level_and_ends_the_growth() {
        let mut s = SlowStart::new(MAX);
        s.on_sample(50 * MS, 30 * MS, 50);
        s.on_shed();
        assert_eq!(s.next_limit(100 * MS, 50.0), Some(100.0));
        s.on_sample(150 * MS, 31 * MS, 60);
        s.on_sample(400 * MS, 90 * MS, 100);
        s.on_shed();
        assert_eq!(s.next_limit(500 * MS, 100.0), Some(60.0));
        s.on_shed();
        assert_eq!(s.next_limit(600 * MS, 60.0), None);
    }
}
