//! Learning a new destination: while the controller has no latency history for it, demand
//! beyond the limit is demand it has not been shown, so the limit grows to meet it at once
//! instead of waiting for windows. Demand shows as a refused connect, or as a connection
//! admitted or a request started with [`NEARLY_FULL`] of the limit in flight (TCP grows its
//! window in slow start while the flight uses half of it): growing then spares the
//! refusal. The connection says so once it is established, a request only when answered:
//! a load whose long requests fill in over seconds reaches the limit before its answers.
//! The first growth meets the refused connects twice over (a burst refused once comes
//! again), later ones double as in TCP's slow start (RFC 5681), at most once per round: a
//! round ends when [`VERDICT_ANSWERS`] requests admitted with [`NEARLY_FULL`] of the new
//! level in flight have been answered, so the new level has been tried. Not the whole
//! level: a load that fills in over seconds (long requests among short ones) would be
//! refused at the level before any answer to it came.
//!
//! The limit learning starts at (the initial limit, or the peak of the first 100 ms) is a
//! guess, not a level tried: a load that uses [`ROOM_AT`] of it before anything grew it gets
//! twice the room once, with no round to judge. Poisson arrivals at 20 per second on 0.38 s
//! answers hold 8 in flight on average and 21 or more about once in 20 000 looks, which the
//! initial limit of 20 refused inside one 100 ms update. The room is not judged: a round
//! judged on the first few answers now and then reads their healthy spread as a queue, and
//! learning then ends under what the load needs.
//!
//! As in HyStart (RFC 9406) growth stops on delay, comparing a round with what came before:
//! when most answers to requests that started at the new level took more than [`QUEUEING`]
//! x the median answer before the growth, the level queued. Growth ends there, back at the
//! highest in-flight an answer within [`QUEUEING`] x the fastest started at: concurrency
//! the upstream was seen to serve without a wait. The verdict rests on most answers, not on
//! the absence of a fast one: with service times spread as real ones are, only a few per
//! cent of answers come within 1.25x the fastest, so a healthy burst often holds none.

use crate::window::dispersed;

/// An answer within this multiple of the typical one (the median before the round), or of
/// the fastest, did not queue.
const QUEUEING: f64 = 1.25;
/// Answers at a new level before it is judged either way (HyStart's N_RTT_SAMPLE): one slow
/// answer is the spread of service times, and the first fast ones are the requests that
/// found a worker free before the queue formed behind them. Doubling on those, a
/// destination saturated from the start doubled past its workers to the limit's bound, and
/// the baseline learned there held the queue for good.
const VERDICT_ANSWERS: u32 = 8;
/// A request that started with this share of the limit in flight shows demand at the limit.
pub(crate) const NEARLY_FULL: f64 = 0.75;
/// A request that started with this share of the first limit in flight needs room for its
/// load's next peak beyond it.
const ROOM_AT: f64 = 0.6;

/// Growth on demand at the limit while a destination is learned.
#[derive(Clone, Copy, Debug)]
pub struct SlowStart {
    /// The limit's upper bound: a level above it cannot be put in flight, so growth to it
    /// could never be tried.
    max: f64,
    sheds: u32,
    /// The highest in-flight a request started at, or a connection was admitted at, since
    /// the limit last changed, and the range of the latencies of those requests.
    peak_inflight: u32,
    peak_latencies: Option<(u64, u64)>,
    /// The limit at the last update, and since when it has held.
    seen_limit: f64,
    seen_since_ns: u64,
    /// When the limit last grew, and to what.
    grown: Option<(u64, f64)>,
    /// The median answer when the limit last grew.
    reference_ns: f64,
    /// Answers to requests that started at [`NEARLY_FULL`] of the new level or more, and how
    /// many of them were within [`QUEUEING`] x the reference.
    tried: u32,
    tried_typical: u32,
    fastest_ns: u64,
    /// The highest in-flight an answer within [`QUEUEING`] x the fastest started at.
    clean_inflight: u32,
    done: bool,
    /// The first limit was doubled for room, unjudged; that happens once.
    roomy: bool,
    /// The last round queued: the windows of that round measured our queue.
    queued: bool,
}

impl SlowStart {
    /// Learning from the start, the limit bounded by `max`.
    pub fn new(max: f64) -> Self {
        SlowStart {
            max,
            sheds: 0,
            peak_inflight: 0,
            peak_latencies: None,
            seen_limit: 0.0,
            seen_since_ns: 0,
            grown: None,
            reference_ns: 0.0,
            tried: 0,
            tried_typical: 0,
            fastest_ns: u64::MAX,
            clean_inflight: 0,
            done: false,
            roomy: false,
            queued: false,
        }
    }

    /// A request admitted with `inflight` in flight was answered after `latency_ns`.
    pub fn on_sample(&mut self, now_ns: u64, latency_ns: u64, inflight: u32) {
        // Once learned, nothing reads what a sample would record: it costs a controller's
        // cache lines only.
        if self.done {
            return;
        }
        let started_ns = now_ns.saturating_sub(latency_ns);
        if started_ns >= self.seen_since_ns {
            self.peak_inflight = self.peak_inflight.max(inflight);
            let (lo, hi) = self.peak_latencies.unwrap_or((latency_ns, latency_ns));
            self.peak_latencies = Some((lo.min(latency_ns), hi.max(latency_ns)));
        }
        self.fastest_ns = self.fastest_ns.min(latency_ns);
        if latency_ns as f64 <= QUEUEING * self.fastest_ns as f64 {
            self.clean_inflight = self.clean_inflight.max(inflight);
        }
        if let Some((at, level)) = self.grown {
            if started_ns >= at && f64::from(inflight) >= (NEARLY_FULL * level).floor() {
                self.tried += 1;
                self.tried_typical += u32::from(latency_ns as f64 <= QUEUEING * self.reference_ns);
            }
        }
    }

    /// A connection was admitted at `inflight`: demand that shows before its answers.
    pub fn on_connect(&mut self, now_ns: u64, inflight: u32) {
        if !self.done && now_ns >= self.seen_since_ns {
            self.peak_inflight = self.peak_inflight.max(inflight);
        }
    }

    fn forget_peak(&mut self) {
        self.peak_inflight = 0;
        self.peak_latencies = None;
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

    /// At an update: the limit to move to, if connects were refused since the last one or
    /// the limit was nearly full; `median_ns` gives the median of the latest answers, asked
    /// only when the limit grows.
    pub fn next_limit(
        &mut self,
        now_ns: u64,
        limit: f64,
        median_ns: impl FnOnce() -> f64,
    ) -> Option<f64> {
        if self.done {
            return None;
        }
        let sheds = std::mem::take(&mut self.sheds);
        if limit != self.seen_limit {
            self.seen_limit = limit;
            self.seen_since_ns = now_ns;
            self.forget_peak();
        }
        // Identical latencies are a timer (a hung upstream's clients timing out), whose
        // connections are no demand to grow for.
        let served = self
            .peak_latencies
            .is_some_and(|(lo, hi)| dispersed(lo, hi));
        let used = |share: f64| served && f64::from(self.peak_inflight) >= share * limit;
        if sheds == 0 && !used(NEARLY_FULL) {
            if used(ROOM_AT) && self.grown.is_none() && !self.roomy {
                self.roomy = true;
                self.forget_peak();
                return Some((2.0 * limit).min(self.max)).filter(|&room| room > limit);
            }
            return None;
        }
        if self.grown.is_some() {
            if self.tried < VERDICT_ANSWERS {
                return None; // the last growth has not been tried yet
            }
            // Most answers at the new level slower than the typical one before: it queued.
            // Only a refusal ends the growth there: a nearly full limit with nothing refused
            // needs no verdict yet.
            if 2 * self.tried_typical < self.tried {
                if sheds == 0 {
                    return None;
                }
                self.done = true;
                self.queued = true;
                return Some(f64::from(self.clean_inflight));
            }
        }
        // The first growth has nothing to go on but the refused demand; later ones double.
        let grown = if self.grown.is_none() {
            (2.0 * limit).max(limit + 2.0 * f64::from(sheds))
        } else {
            2.0 * limit
        }
        .min(self.max);
        if grown <= limit {
            return None; // at the bound: its round goes on until it is judged
        }
        self.forget_peak();
        self.reference_ns = median_ns();
        self.grown = Some((now_ns, grown));
        self.tried = 0;
        self.tried_typical = 0;
        Some(grown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const MAX: f64 = 200.0;
    /// The median answer of the tests' upstream.
    const TYPICAL: f64 = 30.0 * MS as f64;

    /// `n` answers of `latency_ns` to requests that started at `inflight`, answered at
    /// `at_ns`.
    fn answers(s: &mut SlowStart, n: u32, at_ns: u64, latency_ns: u64, inflight: u32) {
        for _ in 0..n {
            s.on_sample(at_ns, latency_ns, inflight);
        }
    }

    #[test]
    fn refused_demand_grows_the_limit_to_meet_it_twice_over() {
        let mut s = SlowStart::new(MAX);
        assert_eq!(
            s.next_limit(100 * MS, 20.0, || TYPICAL),
            None,
            "nothing refused"
        );
        for _ in 0..30 {
            s.on_shed();
        }
        assert_eq!(s.next_limit(200 * MS, 20.0, || TYPICAL), Some(80.0));
    }

    #[test]
    fn a_nearly_full_limit_grows_before_it_refuses() {
        let mut s = SlowStart::new(MAX);
        assert_eq!(
            s.next_limit(100 * MS, 20.0, || TYPICAL),
            None,
            "the limit starts"
        );
        s.on_sample(180 * MS, 30 * MS, 11);
        assert_eq!(
            s.next_limit(200 * MS, 20.0, || TYPICAL),
            None,
            "11 of 20 is room"
        );
        s.on_sample(280 * MS, 32 * MS, 15);
        assert_eq!(
            s.next_limit(300 * MS, 20.0, || TYPICAL),
            Some(40.0),
            "15 of 20"
        );
    }

    #[test]
    fn a_load_using_most_of_the_initial_limit_gets_room_once_without_a_round() {
        let mut s = SlowStart::new(MAX);
        assert_eq!(
            s.next_limit(100 * MS, 20.0, || TYPICAL),
            None,
            "the limit starts"
        );
        s.on_sample(170 * MS, 30 * MS, 11);
        s.on_sample(180 * MS, 34 * MS, 12);
        assert_eq!(
            s.next_limit(200 * MS, 20.0, || TYPICAL),
            Some(40.0),
            "12 of 20"
        );
        s.on_sample(280 * MS, 30 * MS, 25);
        s.on_sample(290 * MS, 34 * MS, 26);
        assert_eq!(
            s.next_limit(300 * MS, 40.0, || TYPICAL),
            None,
            "26 of 40: the room is given once"
        );
        s.on_sample(380 * MS, 31 * MS, 30);
        s.on_shed();
        assert_eq!(
            s.next_limit(400 * MS, 40.0, || TYPICAL),
            Some(80.0),
            "the room was no round: growth on demand needs no verdict on it"
        );
    }

    #[test]
    fn connections_nearly_filling_the_limit_grow_it_before_their_answers_come() {
        let mut s = SlowStart::new(MAX);
        assert_eq!(
            s.next_limit(100 * MS, 20.0, || TYPICAL),
            None,
            "the limit starts"
        );
        s.on_sample(150 * MS, 30 * MS, 6);
        s.on_sample(160 * MS, 34 * MS, 7);
        s.on_connect(170 * MS, 11);
        assert_eq!(
            s.next_limit(200 * MS, 20.0, || TYPICAL),
            None,
            "11 of 20 is room"
        );
        s.on_connect(280 * MS, 15);
        assert_eq!(
            s.next_limit(300 * MS, 20.0, || TYPICAL),
            Some(40.0),
            "15 of 20 connected, answered or not"
        );
    }

    #[test]
    fn identical_latencies_at_the_limit_are_no_demand() {
        let mut s = SlowStart::new(MAX);
        assert_eq!(
            s.next_limit(100 * MS, 20.0, || TYPICAL),
            None,
            "the limit starts"
        );
        s.on_sample(180 * MS, 30 * MS, 20);
        s.on_sample(190 * MS, 30 * MS, 20);
        assert_eq!(
            s.next_limit(200 * MS, 20.0, || TYPICAL),
            None,
            "a timer, not service"
        );
    }

    #[test]
    fn requests_that_started_before_the_limit_changed_are_not_its_demand() {
        let mut s = SlowStart::new(MAX);
        assert_eq!(
            s.next_limit(100 * MS, 100.0, || TYPICAL),
            None,
            "a burst set the limit"
        );
        s.on_sample(150 * MS, 80 * MS, 100);
        s.on_sample(160 * MS, 90 * MS, 100);
        assert_eq!(
            s.next_limit(200 * MS, 100.0, || TYPICAL),
            None,
            "the burst's own answers"
        );
    }

    #[test]
    fn grows_once_per_round_and_at_least_doubles() {
        let mut s = SlowStart::new(MAX);
        s.on_shed();
        assert_eq!(s.next_limit(100 * MS, 20.0, || TYPICAL), Some(40.0));
        s.on_sample(160 * MS, 30 * MS, 25);
        s.on_shed();
        assert_eq!(
            s.next_limit(200 * MS, 40.0, || TYPICAL),
            None,
            "40 not tried yet"
        );
        answers(&mut s, 8, 240 * MS, 30 * MS, 40);
        for _ in 0..100 {
            s.on_shed();
        }
        assert_eq!(
            s.next_limit(300 * MS, 40.0, || TYPICAL),
            Some(80.0),
            "doubles"
        );
    }

    #[test]
    fn a_level_nearly_filled_has_been_tried() {
        let mut s = SlowStart::new(MAX);
        s.on_shed();
        assert_eq!(s.next_limit(100 * MS, 20.0, || TYPICAL), Some(40.0));
        s.on_sample(160 * MS, 30 * MS, 29);
        s.on_sample(170 * MS, 33 * MS, 29);
        assert_eq!(
            s.next_limit(200 * MS, 40.0, || TYPICAL),
            None,
            "29 of 40 is room"
        );
        answers(&mut s, 4, 260 * MS, 31 * MS, 30);
        answers(&mut s, 4, 270 * MS, 34 * MS, 30);
        assert_eq!(
            s.next_limit(300 * MS, 40.0, || TYPICAL),
            Some(80.0),
            "30 of 40 answered without a queue: 40 was tried, and is nearly full"
        );
    }

    #[test]
    fn the_bound_is_tried_and_judged_like_any_level() {
        let mut s = SlowStart::new(MAX);
        s.on_sample(50 * MS, 24 * MS, 20);
        for _ in 0..300 {
            s.on_shed();
        }
        assert_eq!(s.next_limit(100 * MS, 20.0, || TYPICAL), Some(MAX));
        s.on_sample(250 * MS, 33 * MS, 200);
        s.on_shed();
        assert_eq!(
            s.next_limit(300 * MS, MAX, || TYPICAL),
            None,
            "no queue, and no room to grow"
        );
        answers(&mut s, 8, 550 * MS, 120 * MS, 200);
        s.on_shed();
        assert_eq!(
            s.next_limit(600 * MS, MAX, || TYPICAL),
            Some(20.0),
            "the bound queued: back to where answers were clean"
        );
    }

    #[test]
    fn a_round_that_queued_goes_back_to_the_clean_level_and_ends_the_growth() {
        let mut s = SlowStart::new(MAX);
        s.on_sample(50 * MS, 24 * MS, 50);
        s.on_shed();
        assert_eq!(s.next_limit(100 * MS, 50.0, || TYPICAL), Some(100.0));
        s.on_sample(150 * MS, 29 * MS, 60);
        answers(&mut s, 3, 400 * MS, 35 * MS, 100);
        answers(&mut s, 5, 410 * MS, 90 * MS, 100);
        s.on_shed();
        assert_eq!(
            s.next_limit(500 * MS, 100.0, || TYPICAL),
            Some(60.0),
            "five of eight answers at 100 took more than 1.25 x 30 ms; 29 ms is clean"
        );
        s.on_shed();
        assert_eq!(
            s.next_limit(600 * MS, 60.0, || TYPICAL),
            None,
            "growth ended"
        );
    }

    #[test]
    fn a_slow_answer_among_typical_ones_is_no_queue() {
        let mut s = SlowStart::new(MAX);
        s.on_shed();
        assert_eq!(s.next_limit(100 * MS, 50.0, || TYPICAL), Some(100.0));
        s.on_sample(300 * MS, 36 * MS, 100);
        answers(&mut s, 6, 350 * MS, 33 * MS, 100);
        s.on_sample(400 * MS, 90 * MS, 100);
        s.on_shed();
        assert_eq!(s.next_limit(500 * MS, 100.0, || TYPICAL), Some(200.0));
    }

    #[test]
    fn a_nearly_full_limit_that_queued_waits_for_a_refusal() {
        let mut s = SlowStart::new(MAX);
        s.on_sample(50 * MS, 24 * MS, 50);
        s.on_shed();
        assert_eq!(s.next_limit(100 * MS, 50.0, || TYPICAL), Some(100.0));
        assert_eq!(
            s.next_limit(200 * MS, 100.0, || TYPICAL),
            None,
            "the limit moved"
        );
        answers(&mut s, 8, 400 * MS, 90 * MS, 100);
        assert_eq!(
            s.next_limit(500 * MS, 100.0, || TYPICAL),
            None,
            "nearly full and queued, but nothing refused yet"
        );
        s.on_shed();
        assert_eq!(s.next_limit(600 * MS, 100.0, || TYPICAL), Some(50.0));
    }

    #[test]
    fn a_few_answers_are_no_verdict_either_way() {
        let mut s = SlowStart::new(MAX);
        s.on_sample(50 * MS, 24 * MS, 50);
        s.on_shed();
        assert_eq!(s.next_limit(100 * MS, 50.0, || TYPICAL), Some(100.0));
        // The first requests at a level found workers free; the queue forms behind them.
        answers(&mut s, 2, 300 * MS, 29 * MS, 90);
        s.on_shed();
        assert_eq!(
            s.next_limit(350 * MS, 100.0, || TYPICAL),
            None,
            "two fast answers: no doubling"
        );
        answers(&mut s, 5, 400 * MS, 90 * MS, 100);
        s.on_shed();
        assert_eq!(
            s.next_limit(500 * MS, 100.0, || TYPICAL),
            None,
            "seven answers: neither growth nor an end"
        );
        answers(&mut s, 1, 550 * MS, 90 * MS, 100);
        s.on_shed();
        assert_eq!(
            s.next_limit(600 * MS, 100.0, || TYPICAL),
            Some(90.0),
            "six of eight queued: back to where answers were clean"
        );
    }
}
