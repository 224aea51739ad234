//! Collects samples and outcomes into windows and decides when a window closes.
//!
//! A window closes at update time once it is at least `min_window_ns` long (and at least twice
//! its fastest latency, so the samples it holds can have started inside it) and holds
//! `min_samples` events; or at `max_window_ns`, whatever it holds. A window closed thin (fewer
//! samples than `min_samples`) takes its p90 over the last `min_samples` latencies, reaching
//! back into earlier windows, so low traffic still yields a p90 of full weight instead of
//! being thrown away.

use crate::config::Pipeline;
use crate::quantile::{LogHistogram, SampleRing, RING};
use crate::Outcome;

const NANOS_PER_SEC: f64 = 1e9;

/// Identical latencies within this relative spread are the mark of a timer, not of service.
const DEGENERATE_SPREAD: f64 = 1e-3;

/// Whether latencies from `min_ns` to `max_ns` differ beyond a timer's spread: identical
/// latencies carry no evidence of health.
pub fn dispersed(min_ns: u64, max_ns: u64) -> bool {
    (max_ns - min_ns) as f64 > max_ns as f64 * DEGENERATE_SPREAD
}

/// Answers whose median is within this multiple of the fastest came from an upstream whose
/// service time does not vary (a fixed sleep, a timer): its workers answer in step...
const IN_STEP: f64 = 1.1;
/// ...and an answer this many times the fastest waited for a worker.
const WAITED: f64 = 1.25;

/// Timeouts weigh double in the error pressure: the client gave up, the strongest signal.
/// Overload answers are not in it: they say at what in-flight the upstream has too much,
/// which the controller's ceiling keeps the limit under.
const TIMEOUT_WEIGHT: u32 = 2;

/// What one closed window says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowSummary {
    /// How long the window was open.
    pub duration_ns: u64,
    /// Latency samples (successful exchanges).
    pub samples: u32,
    /// Requests that failed.
    pub errors: u32,
    /// Requests that timed out.
    pub timeouts: u32,
    /// Of those, the ones that started before the limit was last cut: that cut answered them.
    pub stale_timeouts: u32,
    /// Requests the upstream answered as overloaded (HTTP 429, 503).
    pub overloads: u32,
    /// The window's p90 latency, if the window has samples of its own.
    pub p90_ns: Option<f64>,
    /// How many latencies the p90 rests on (a thin window's reach back included).
    pub p90_weight: u32,
    /// Mean in-flight count at request start, over the window's samples.
    pub mean_inflight: f64,
    /// Highest in-flight count at request start.
    pub peak_inflight: u32,
    /// Whether the latencies differ at all; identical latencies carry no evidence of health.
    pub dispersed: bool,
    /// Mean latency of the window's samples (Little's law wants the mean, not the p90).
    pub mean_latency_ns: f64,
    /// Connects the limit refused: demand went beyond the limit, so in-flight was not the
    /// clients' choice but the limit's.
    pub sheds: u32,
    /// The shortest wait of the requests whose clients gave up: a latency the window's
    /// slowest requests exceeded, though they never got an answer to measure.
    pub gave_up_after_ns: Option<f64>,
    /// When the window's answers came in step (their median within [`IN_STEP`] of the
    /// fastest), the share of them that took [`WAITED`] times the fastest or longer: they
    /// waited for a worker.
    pub waited_share: Option<f64>,
}

impl WindowSummary {
    /// Successful exchanges per second.
    pub fn throughput(&self) -> f64 {
        f64::from(self.samples) * NANOS_PER_SEC / (self.duration_ns.max(1) as f64)
    }

    /// Whether more than a tenth of the window's requests timed out: enough that its answered
    /// latencies leave out the slow tail, and its throughput the requests the upstream was
    /// still serving.
    pub fn timeouts_censor(&self) -> bool {
        self.timeouts.saturating_mul(9) > self.samples
    }

    /// The mean latency, when the answers are all of the window's requests (timeouts took
    /// none of the slow ones): Little's law's time in flight.
    pub fn uncensored_mean(&self) -> Option<f64> {
        (self.samples > 0 && !self.timeouts_censor()).then_some(self.mean_latency_ns)
    }

    /// Share of the window's requests that failed, timeouts counted double, in 0..=1. A
    /// timeout of a request sent before the last cut is no news: it waited in the queue that
    /// cut already shrinks, and counting it again would cut once per window it drains over.
    pub fn error_pressure(&self) -> f64 {
        let fresh_timeouts = self.timeouts.saturating_sub(self.stale_timeouts);
        let events = self.samples + self.errors + fresh_timeouts;
        if events == 0 {
            return 0.0;
        }
        let weighted = self.errors + TIMEOUT_WEIGHT * fresh_timeouts;
        (f64::from(weighted) / f64::from(events)).min(1.0)
    }
}

/// What of the pipeline a window reads: the rest of it is the controller's, and a
/// controller stays under 4 KiB.
#[derive(Clone, Copy, Debug)]
struct Rules {
    min_window_ns: u64,
    max_window_ns: u64,
    min_samples: u32,
    quantile: f64,
}

impl From<Pipeline> for Rules {
    fn from(p: Pipeline) -> Self {
        Rules {
            min_window_ns: p.min_window_ns,
            max_window_ns: p.max_window_ns,
            min_samples: p.min_samples,
            quantile: p.quantile,
        }
    }
}

/// The open window plus the latencies that outlive it (for thin windows).
///
/// In declaration order (`repr(C)`): what every sample and update tick reads, the counters,
/// the rules and the ring, comes first, and the histogram, which only windows too large
/// for the ring touch, last (see [`crate::DestinationController`]).
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Windows {
    start_ns: u64,
    min_latency_ns: u64,
    max_latency_ns: u64,
    inflight_sum: u64,
    latency_sum: u64,
    gave_up_after_ns: u64,
    samples: u32,
    errors: u32,
    timeouts: u32,
    stale_timeouts: u32,
    overloads: u32,
    peak_inflight: u32,
    sheds: u32,
    rules: Rules,
    recent: SampleRing,
    histogram: LogHistogram,
}

impl Windows {
    /// Bytes from its start that every sample touches: all but the histogram.
    pub(crate) const HOT_BYTES: usize = std::mem::offset_of!(Windows, histogram);

    /// Opens the first window at `now_ns`.
    pub fn new(pipeline: Pipeline, now_ns: u64) -> Self {
        Windows::with_rules(Rules::from(pipeline), now_ns)
    }

    fn with_rules(rules: Rules, now_ns: u64) -> Self {
        Windows {
            rules,
            recent: SampleRing::default(),
            histogram: LogHistogram::default(),
            start_ns: now_ns,
            samples: 0,
            errors: 0,
            timeouts: 0,
            stale_timeouts: 0,
            overloads: 0,
            min_latency_ns: u64::MAX,
            max_latency_ns: 0,
            inflight_sum: 0,
            peak_inflight: 0,
            latency_sum: 0,
            sheds: 0,
            gave_up_after_ns: u64::MAX,
        }
    }

    /// Forgets everything, the sample ring too, and opens a window at `now_ns`.
    pub fn restart(&mut self, now_ns: u64) {
        *self = Windows::with_rules(self.rules, now_ns);
    }

    /// Adds a latency sample taken with `inflight` requests outstanding at its start.
    pub fn record_sample(&mut self, latency_ns: u64, inflight: u32) {
        let earlier = self.samples as usize;
        self.samples = self.samples.saturating_add(1);
        if self.outgrows_the_ring() {
            // The histogram is filled only for a window the ring cannot hold whole, from the
            // ring's copy of what it held so far: a sample then touches no histogram bucket
            // (2 KiB per controller) at the rates most destinations see.
            if self.histogram.is_empty() {
                for latency in self.recent.last(earlier) {
                    self.histogram.push(latency as u64);
                }
            }
            self.histogram.push(latency_ns);
        }
        self.recent.push(latency_ns as f64);
        self.min_latency_ns = self.min_latency_ns.min(latency_ns);
        self.max_latency_ns = self.max_latency_ns.max(latency_ns);
        self.inflight_sum = self.inflight_sum.saturating_add(u64::from(inflight));
        self.peak_inflight = self.peak_inflight.max(inflight);
        self.latency_sum = self.latency_sum.saturating_add(latency_ns);
    }

    /// Adds an outcome; a shed request contributes nothing, and a client's close counts only
    /// once the controller has judged it a timeout (see `DestinationController`).
    pub fn record_outcome(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Error => self.errors = self.errors.saturating_add(1),
            Outcome::Timeout => self.timeouts = self.timeouts.saturating_add(1),
            Outcome::Overload => self.overloads = self.overloads.saturating_add(1),
            Outcome::Shed => self.sheds = self.sheds.saturating_add(1),
            Outcome::GaveUp { .. } | Outcome::HungUp { .. } | Outcome::Untimed => {}
        }
    }

    /// Whether the open window holds no sample and no outcome.
    pub fn is_empty(&self) -> bool {
        self.events() == 0
    }

    /// A client gave up after waiting `waited_ns` (already recorded as a timeout); `stale`
    /// when its request started before the limit was last cut.
    pub fn record_gave_up(&mut self, waited_ns: u64, stale: bool) {
        self.gave_up_after_ns = self.gave_up_after_ns.min(waited_ns);
        if stale {
            self.stale_timeouts = self.stale_timeouts.saturating_add(1);
        }
    }

    /// The highest in-flight count a sample of the open window started at.
    pub fn peak_inflight(&self) -> u32 {
        self.peak_inflight
    }

    /// The median of the latest latencies (up to the sample ring's), across windows.
    pub fn median(&self) -> Option<f64> {
        self.recent.quantile_of_last(RING, 0.5)
    }

    /// The slowest latency of the open window, if it has a sample.
    pub fn slowest(&self) -> Option<u64> {
        (self.samples > 0).then_some(self.max_latency_ns)
    }

    fn events(&self) -> u32 {
        self.samples
            .saturating_add(self.errors)
            .saturating_add(self.timeouts)
            .saturating_add(self.overloads)
    }

    fn is_due(&self, elapsed_ns: u64) -> bool {
        let p = &self.rules;
        // An overload answer says the in-flight it came at is too many: every update spent
        // there brings more.
        if elapsed_ns >= p.max_window_ns || self.overloads > 0 {
            return true;
        }
        // Without a sample the fastest latency is unknown; errors alone may close the window.
        let fastest = if self.samples == 0 {
            0
        } else {
            self.min_latency_ns
        };
        let long_enough = p.min_window_ns.max(fastest.saturating_mul(2));
        elapsed_ns >= long_enough && self.events() >= p.min_samples
    }

    /// The p90 and how many latencies it rests on. A window without a sample of its own has
    /// no news: it reports no latency rather than repeating the last one.
    fn p90(&self) -> (Option<f64>, u32) {
        if self.samples == 0 {
            return (None, 0);
        }
        let p = self.rules.quantile;
        if self.outgrows_the_ring() {
            (self.histogram.quantile(p), self.samples)
        } else {
            let span = self.span().min(self.recent.len());
            (self.recent.quantile_of_last(span, p), span as u32)
        }
    }

    /// See [`WindowSummary::waited_share`]: the window's own answers only, not a thin
    /// window's reach back.
    fn waited_share(&self) -> Option<f64> {
        if self.samples == 0 {
            return None;
        }
        let fastest = self.min_latency_ns as f64;
        let samples = self.samples as usize;
        let (median, waited) = if self.outgrows_the_ring() {
            (
                self.histogram.quantile(0.5)?,
                self.histogram.count_from(WAITED * fastest),
            )
        } else {
            let waited = self
                .recent
                .last(samples)
                .filter(|&latency| latency >= WAITED * fastest)
                .count();
            (self.recent.quantile_of_last(samples, 0.5)?, waited as u32)
        };
        (median <= IN_STEP * fastest).then(|| f64::from(waited) / f64::from(self.samples))
    }

    /// The latencies the p90 rests on: the window's, or at least the last `min_samples`.
    fn span(&self) -> usize {
        (self.samples as usize).max(self.rules.min_samples as usize)
    }

    /// Whether the p90 needs more latencies than the ring holds: the histogram's then.
    fn outgrows_the_ring(&self) -> bool {
        self.span() > RING
    }

    /// Closes the window if it is due at `now_ns`, and opens the next one.
    pub fn close_if_due(&mut self, now_ns: u64) -> Option<WindowSummary> {
        let elapsed_ns = now_ns.saturating_sub(self.start_ns);
        if !self.is_due(elapsed_ns) {
            return None;
        }
        let (p90_ns, p90_weight) = self.p90();
        let summary = WindowSummary {
            duration_ns: elapsed_ns,
            samples: self.samples,
            errors: self.errors,
            timeouts: self.timeouts,
            stale_timeouts: self.stale_timeouts,
            overloads: self.overloads,
            p90_ns,
            p90_weight,
            mean_inflight: if self.samples == 0 {
                0.0
            } else {
                self.inflight_sum as f64 / f64::from(self.samples)
            },
            peak_inflight: self.peak_inflight,
            dispersed: self.samples < 2 || dispersed(self.min_latency_ns, self.max_latency_ns),
            mean_latency_ns: if self.samples == 0 {
                0.0
            } else {
                self.latency_sum as f64 / f64::from(self.samples)
            },
            sheds: self.sheds,
            gave_up_after_ns: (self.timeouts > 0 && self.gave_up_after_ns < u64::MAX)
                .then_some(self.gave_up_after_ns as f64),
            waited_share: self.waited_share(),
        };
        if !self.histogram.is_empty() {
            self.histogram.reset();
        }
        self.start_ns = now_ns;
        self.samples = 0;
        self.errors = 0;
        self.timeouts = 0;
        self.stale_timeouts = 0;
        self.overloads = 0;
        self.min_latency_ns = u64::MAX;
        self.max_latency_ns = 0;
        self.inflight_sum = 0;
        self.peak_inflight = 0;
        self.latency_sum = 0;
        self.sheds = 0;
        self.gave_up_after_ns = u64::MAX;
        Some(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn windows() -> Windows {
        Windows::new(Pipeline::default(), 0)
    }

    /// `waited` of every `of` answers took a round longer than the rest; the window's share
    /// of waited answers, with `rounds` rounds of `of` (the ring's 64 or the histogram).
    fn in_step(waited: u64, of: u64, rounds: u64, jitter: u64) -> Option<f64> {
        let mut w = windows();
        for i in 0..rounds * of {
            let base = 810 * MS + (i * 7_919_000_003) % (jitter + 1);
            w.record_sample(
                if i % of < waited {
                    base + 700 * MS
                } else {
                    base
                },
                37,
            );
        }
        w.close_if_due(10 * SEC).expect("due").waited_share
    }

    #[test]
    fn answers_in_step_tell_the_share_that_waited_for_a_worker() {
        assert_eq!(
            in_step(5, 32, 2, 0),
            Some(5.0 / 32.0),
            "64 answers: the ring"
        );
        assert_eq!(in_step(5, 32, 3, 0), Some(5.0 / 32.0), "96: the histogram");
        assert_eq!(in_step(0, 32, 2, MS), Some(0.0), "a millisecond of jitter");
        assert_eq!(in_step(5, 32, 2, 400 * MS), None, "service times that vary");
    }

    #[test]
    fn closes_after_two_seconds_with_enough_samples() {
        let mut w = windows();
        for i in 0..60 {
            w.record_sample((10 + i % 7) * MS, 5);
        }
        assert_eq!(w.close_if_due(SEC), None);
        let s = w.close_if_due(2 * SEC).expect("due");
        assert_eq!(s.samples, 60);
        assert_eq!(s.peak_inflight, 5);
        assert!((s.throughput() - 30.0).abs() < 1e-9);
        assert!(s.dispersed);
        assert_eq!(w.close_if_due(3 * SEC), None, "a fresh window is open");
    }

    #[test]
    fn stays_open_for_twice_its_fastest_latency() {
        let mut w = windows();
        for _ in 0..60 {
            w.record_sample(3 * SEC, 5);
        }
        assert_eq!(w.close_if_due(5 * SEC), None);
        assert!(w.close_if_due(6 * SEC).is_some());
    }

    #[test]
    fn a_thin_window_closes_at_the_cap_with_the_p90_of_recent_windows() {
        let mut w = windows();
        for i in 1..=40 {
            w.record_sample(i * MS, 1);
        }
        w.close_if_due(30 * SEC).expect("closed at the cap");
        for _ in 0..4 {
            w.record_sample(100 * MS, 1);
        }
        assert_eq!(w.close_if_due(59 * SEC), None);
        let thin = w.close_if_due(60 * SEC).expect("closed at the cap");
        assert_eq!(thin.samples, 4);
        assert_eq!(thin.p90_weight, 44);
        // The last 50 latencies: 40 ms..=4 ms reaching back, plus four at 100 ms.
        let p90 = thin.p90_ns.unwrap();
        assert!(p90 > 39.0 * MS as f64 && p90 < 100.0 * MS as f64, "{p90}");
    }

    #[test]
    fn a_window_without_samples_has_no_latency() {
        let mut w = windows();
        for _ in 0..60 {
            w.record_sample(10 * MS, 1);
        }
        w.close_if_due(2 * SEC).expect("due");
        w.record_outcome(Outcome::Error);
        let quiet = w.close_if_due(32 * SEC).expect("closed at the cap");
        assert_eq!(quiet.p90_ns, None);
        assert_eq!(quiet.error_pressure(), 1.0);
    }

    #[test]
    fn identical_latencies_are_not_dispersed() {
        let mut w = windows();
        for _ in 0..60 {
            w.record_sample(5 * SEC, 9);
        }
        assert!(!w.close_if_due(30 * SEC).unwrap().dispersed);
    }

    #[test]
    fn outcomes_count_towards_closing_and_pressure_but_shed_does_not() {
        let mut w = windows();
        for _ in 0..30 {
            w.record_sample(10 * MS, 3);
        }
        for _ in 0..10 {
            w.record_outcome(Outcome::Error);
            w.record_outcome(Outcome::Timeout);
            w.record_outcome(Outcome::Shed);
        }
        let s = w.close_if_due(2 * SEC).expect("50 events");
        assert!((s.error_pressure() - 30.0 / 50.0).abs() < 1e-12);
    }

    #[test]
    fn timeouts_of_requests_sent_before_the_last_cut_add_no_pressure() {
        let mut w = windows();
        for _ in 0..45 {
            w.record_sample(10 * MS, 3);
        }
        for stale in [true, true, true, false, false] {
            w.record_gave_up(2 * SEC, stale);
            w.record_outcome(Outcome::Timeout);
        }
        let s = w.close_if_due(2 * SEC).expect("50 events and 2 s");
        assert_eq!(s.timeouts, 5, "all of them still censor the latency");
        assert!((s.error_pressure() - 4.0 / 47.0).abs() < 1e-12);
    }

    #[test]
    fn large_windows_use_the_histogram() {
        let mut w = windows();
        for i in 1..=1_000 {
            w.record_sample(i * MS, 50);
        }
        let p90 = w.close_if_due(2 * SEC).unwrap().p90_ns.unwrap();
        assert!((p90 / (900.0 * MS as f64) - 1.0).abs() < 0.03, "{p90}");
    }

    #[test]
    fn the_histogram_is_filled_only_once_a_window_outgrows_the_ring_and_then_holds_it_all() {
        let mut w = windows();
        let latency = |i: u64| (10 + (i * 37) % 90) * MS + i;
        for i in 0..RING as u64 {
            w.record_sample(latency(i), 5);
        }
        assert!(
            w.histogram.is_empty(),
            "a window the ring holds needs no histogram"
        );
        let mut whole = LogHistogram::default();
        for i in 0..3 * RING as u64 {
            if i >= RING as u64 {
                w.record_sample(latency(i), 5);
            }
            whole.push(latency(i));
        }
        let p90 = w.close_if_due(2 * SEC).unwrap().p90_ns;
        assert_eq!(p90, whole.quantile(0.9));
        assert!(w.histogram.is_empty(), "closing the window empties it");
    }
}
