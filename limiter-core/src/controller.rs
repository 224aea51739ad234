//! One destination's control loop: windows -> p90 -> median-of-5 -> smoothing -> baseline ->
//! algorithm -> growth guards -> bounds.

use crate::abandoned::Abandoned;
use crate::algorithms::{
    AnyAlgorithm, LatencyView, LimitAlgorithm, MeanLatency, Verdict, BACKGROUND_ERRORS,
};
use crate::baseline::{Baseline, ELEVATED};
use crate::config::{ControlConfig, Limits};
use crate::demand::DemandFloor;
use crate::evidence::{EvidencePoint, Saturation};
use crate::filter::LatencyFilter;
use crate::guard::GrowthGuard;
use crate::recovery::{Recovery, WindowView};
use crate::slow_start::{SlowStart, NEARLY_FULL};
use crate::window::{WindowSummary, Windows};
use crate::{Controller, Outcome, WindowReport};

/// The smoothed latency counts as settled when within this share of the median.
const SETTLED: f64 = 0.1;
/// Windows running that must show a cut of in-flight leaving the latency where it was: one
/// could be the noise of a small window.
const FLAT_WINDOWS: u32 = 2;
/// A limit this many times the window's peak in-flight or more did not come near binding.
const SLACK: f64 = 2.0;
/// A newest p90 under this multiple of the baseline is a mild rise; a slowdown is more.
const MILD: f64 = 2.0;
/// A full window whose p90 is this multiple of the baseline or more is read as the smoothed
/// latency at once, when it had no timeout of a request sent since the last cut: the filter's
/// median of five windows shows a step only at the third slow one, and until the limit is
/// cut the step's queue grows (a 2 s client's requests time out behind it). A doubling
/// (baseline-shift) stays under it. Fresh timeouts leave it to the median: the requests
/// queued at a step time out for windows, and the error pressure of each already cuts for
/// them.
const ONSET: f64 = 3.0;
/// While following a saturated upstream the limit stays under this multiple of what it
/// serves times its service time (BBR's congestion window over its bandwidth-delay
/// product): enough queue to keep its workers busy, and no more.
const BDP_GAIN: f64 = 1.15;
/// A window that refused connects counts as bound by the limit only if its mean in-flight
/// was at least this share of it: one refusing only at its end ran under the limit, its
/// in-flight rising through it (a step's queue building), and read at the limit it makes the
/// cut after it look like one the latency ignored.
const BOUND_SHARE: f64 = 0.5;
/// A window whose mean in-flight ran over this multiple of its limit was still draining the
/// queue a cut left behind: its answers waited in that queue, so its mean reads the service
/// time high, and times its throughput reads its own in-flight back as the capacity
/// (Little's law). A follow begins from a window that measured the new level instead.
const DRAINING: f64 = 1.35;
/// Answers running at a slowdown's latency that show the upstream slow now: one can be a
/// straggler, queued before the upstream recovered, answered after.
const SLOW_ANSWERS: u8 = 3;
/// How long a new destination's traffic is watched before its limit starts: a burst on
/// attach (a proxy's connection per client request) has its answers by then.
const FIRST_WORD_NS: u64 = 100_000_000;
/// Windows in a row without an overload answer, the limit pressing against the ceiling an
/// overload set, before the ceiling is raised: one probe per period over where the upstream
/// last said it had too many, by 1, then 2, 4 … while none comes (TCP's slow start after an
/// idle period), so that an allowance grown back is found in a few probes.
const CEILING_PROBE_WINDOWS: u8 = 4;
/// Before the first baseline, a window whose p90 is over this multiple of every earlier one
/// the filter holds is still rising: a drift of a few per cent is noise, not a rise.
const RISING: f64 = 1.1;

/// A destination's controller, generic over its algorithm; [`DestinationController::new`]
/// picks the algorithm from the configuration.
///
/// In declaration order (`repr(C)`): what a sample and an update tick that closes no window
/// read lies in its first [`HOT_BYTES`](DestinationController::HOT_BYTES), from
/// `fresh_from_ns` through slow start's state to the end of the sample ring in `windows`, so
/// that a caller holding many controllers can fetch that much of the next ones ahead of their
/// signals.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct DestinationController<A = AnyAlgorithm> {
    /// Samples of requests that started before this time measured a queue slow start built.
    fresh_from_ns: u64,
    /// Until this time the limit is the upper bound (see [`Controller::update`]); 0 once it
    /// has passed (a plain `u64`, not an `Option`: a controller stays under 4 KiB).
    first_word_at: u64,
    /// The limit less what the abandoned requests hold, while the answers are slow.
    published: u32,
    /// An answer this slow or slower, in microseconds, is a slowdown's: the baseline times
    /// [`ELEVATED`], the baseline from before the slowdown while it is followed; `u32::MAX`
    /// (71 minutes) while there is no baseline. (Not nanoseconds in a `u64`: a controller
    /// stays under 4 KiB.)
    slow_from_us: u32,
    /// Requests given up on that the upstream is still serving (see [`Abandoned`]).
    abandoned: Abandoned,
    /// The newest answers running that took [`DestinationController::slow_from_us`] or
    /// longer (saturating).
    slow_answers: u8,
    /// Answers came, and none could be timed: traffic whose answers cannot be read (TLS 1.3
    /// connections carrying one request each) gives nothing to judge a limit by.
    untimed_only: bool,
    /// A latency sample has come.
    answered: bool,
    /// Windows pressing against the ceiling since its last overload answer or raise.
    under_ceiling: u8,
    /// Raises of the ceiling since its last overload answer: the next is by 2 to this power.
    ceiling_raises: u8,
    /// The baseline has been published once: the first learning is over, and slow start's
    /// state is no longer touched.
    learned: bool,
    slow_start: SlowStart,
    windows: Windows,
    algorithm: A,
    limits: Limits,
    min_samples: u32,
    smoothing: f64,
    limit: f64,
    filter: LatencyFilter,
    baseline: Baseline,
    guard: GrowthGuard,
    demand: DemandFloor,
    recovery: Recovery,
    /// Windows running whose latency ignored a cut of in-flight.
    flat_windows: u32,
    /// Under the in-flight at which the upstream last answered it was overloaded (HTTP 429,
    /// 503): no growth passes it; 0 when none did. Raised after [`CEILING_PROBE_WINDOWS`]
    /// windows pressing against it with no overload answer.
    ceiling: f32,
    /// When the limit was last lowered.
    cut_at_ns: u64,
    /// While the baseline follows a saturated upstream, until it recovers: what it serves at
    /// saturation, its service time and the least in-flight that saturated it.
    following: Option<Saturation>,
    /// The step a full window showed, when the algorithm read it over the filter's smoothed
    /// p90 at the last close, else 0: what moved the limit is what status and events report.
    onset_p90: f32,
    /// The most connections in flight at an admitted connect while answers were untimed:
    /// what the traffic held, which no sample shows.
    untimed_peak: u32,
}

impl DestinationController<AnyAlgorithm> {
    /// The bytes from its start that a sample, and an update tick that closes no window,
    /// read (see the type's documentation).
    pub const HOT_BYTES: usize =
        std::mem::offset_of!(DestinationController, windows) + Windows::HOT_BYTES;

    /// The controller `cfg` describes, its first window opening at `now_ns`.
    pub fn new(cfg: &ControlConfig, now_ns: u64) -> Self {
        DestinationController::with_algorithm(AnyAlgorithm::from_config(cfg), cfg, now_ns)
    }
}

impl<A: LimitAlgorithm> DestinationController<A> {
    /// A controller running `algorithm` with the bounds and pipeline of `cfg`.
    pub fn with_algorithm(algorithm: A, cfg: &ControlConfig, now_ns: u64) -> Self {
        let limits = algorithm.bounds(cfg.limits);
        DestinationController {
            algorithm,
            limits,
            min_samples: cfg.pipeline.min_samples,
            smoothing: cfg.pipeline.latency_smoothing,
            limit: f64::from(limits.initial),
            published: limits.max,
            slow_from_us: u32::MAX,
            abandoned: Abandoned::default(),
            slow_answers: 0,
            windows: Windows::new(cfg.pipeline, now_ns),
            filter: LatencyFilter::new(cfg.pipeline.latency_smoothing),
            baseline: Baseline::default(),
            guard: GrowthGuard::new(cfg.pipeline.app_limited_multiple, f64::from(limits.initial)),
            demand: DemandFloor::default(),
            slow_start: SlowStart::new(f64::from(limits.max)),
            recovery: Recovery::default(),
            learned: false,
            flat_windows: 0,
            cut_at_ns: 0,
            following: None,
            onset_p90: 0.0,
            fresh_from_ns: 0,
            first_word_at: now_ns + FIRST_WORD_NS,
            untimed_only: false,
            untimed_peak: 0,
            answered: false,
            ceiling: 0.0,
            under_ceiling: 0,
            ceiling_raises: 0,
        }
    }

    /// What a window tells the correlation evidence, if anything. A window bound by the
    /// limit had the limit in flight whatever its samples say; a window where more than a
    /// tenth of the requests timed out had a p90 at least as long as their wait, answered
    /// or not (with a 2 s client timeout, a saturated upstream gives no samples at all).
    /// Identical latencies are a timer's and tell nothing of health; far over the baseline,
    /// or while the destination is followed, they are the service time of workers that
    /// answer in step (a fixed sleep), which the saturation is read from.
    fn evidence_point(&self, window: &WindowSummary) -> Option<EvidencePoint> {
        let bound = window.sheds > 0 && window.mean_inflight >= BOUND_SHARE * self.limit;
        let inflight = if bound {
            window.mean_inflight.max(self.limit)
        } else {
            window.mean_inflight
        };
        let censored = window.gave_up_after_ns.filter(|_| window.timeouts_censor());
        let latency = match (window.p90_ns, censored) {
            (Some(p90), Some(wait)) => p90.max(wait),
            (Some(p90), None) if window.dispersed || self.timed_as_service(p90) => p90,
            (None, Some(wait)) if bound => wait,
            _ => return None,
        };
        Some(EvidencePoint {
            inflight,
            throughput: window.throughput(),
            latency,
            mean_latency: window.uncensored_mean(),
            bound,
        })
    }

    /// Whether identical latencies of `p90` are the service time of workers answering in
    /// step: the destination is followed, or they stand far over its baseline.
    fn timed_as_service(&self, p90: f64) -> bool {
        self.following.is_some() || self.baseline.value().is_some_and(|b| p90 >= ELEVATED * b)
    }

    /// What a window says of the latency, and a limit it showed the upstream can take: its
    /// capacity at a slower service time, or the last healthy limit once it is fast again.
    /// `error_pressure` is the window's.
    fn latency_view(
        &mut self,
        window: &WindowSummary,
        error_pressure: f64,
    ) -> (Option<LatencyView>, Option<f64>) {
        let point = self.evidence_point(window);
        self.onset_p90 = 0.0;
        let Some(p90) = window.p90_ns.map(|p| p.max(1.0)) else {
            if let Some(point) = point {
                self.baseline.testify(point);
            }
            return (None, None);
        };
        let highest_before = self.filter.recent_max();
        let smoothed = self.filter.push(p90);
        // Timeouts of requests sent before the last cut were the queue that cut answered for.
        let no_fresh_timeout = window.timeouts == window.stale_timeouts;
        let onset = (no_fresh_timeout && window.samples >= self.min_samples).then_some(p90);
        // A p90 over fewer latencies than a full window, or a filter short of five windows,
        // is too noisy to be a minimum. Nor is one still rising before the first baseline,
        // with nothing refused: the long requests of a mix answer seconds after the short
        // ones, and the first windows' p90 climbs towards the mix's as they come in. Under
        // demand at the limit a rising p90 is a queue building, which must not be learned.
        let sustained = self.filter.recent_max().unwrap_or(smoothed);
        let rising = self.baseline.value().is_none()
            && window.sheds == 0
            && highest_before.is_some_and(|highest| p90 > RISING * highest);
        let warming_up =
            self.filter.is_warming_up() || window.p90_weight < self.min_samples || rising;
        let mut baseline = self.baseline.observe(
            (window.mean_latency_ns, p90),
            sustained,
            point,
            warming_up,
            self.filter.is_settled(SETTLED),
        );
        if let Some(mean) = window.uncensored_mean() {
            self.baseline.learn_shape(mean, p90, window.sheds > 0);
        }
        let mut capacity = None;
        let elevated = !warming_up && p90 >= ELEVATED * baseline;
        let flat = elevated && self.baseline.latency_ignored_a_cut();
        self.flat_windows = if flat { self.flat_windows + 1 } else { 0 };
        // Throughput that fell with a cut shows the upstream below saturation, so what
        // latency remains is its own; unless timeouts took the throughput.
        let starved =
            elevated && !window.timeouts_censor() && self.baseline.throughput_followed_a_cut();
        // A full window of answers in step far over the baseline, none of which waited for a
        // worker and none given up on: nothing queued at the upstream, the latency is its
        // own service time.
        let unqueued = elevated
            && self.following.is_none()
            && window.waited_share == Some(0.0)
            && window.samples >= self.min_samples
            && window.timeouts == 0;
        // The saturation is only looked for once a sign says the latency is the upstream's,
        // and in a window that measured the limit it had.
        let draining = window.mean_inflight > DRAINING * self.limit;
        let own = self.flat_windows >= FLAT_WINDOWS || starved || unqueued;
        let saturation = (!draining && own)
            .then(|| {
                self.baseline
                    .saturation(baseline, (window.mean_latency_ns, p90))
            })
            .flatten();
        let began = saturation.is_some();
        if let Some(saturation) = saturation {
            self.flat_windows = 0;
            // The upstream saturated when we sent more, and below our cut its latency
            // stayed or its throughput fell with in-flight: it is slow, not queueing us. Its
            // service time is the new baseline, and what it served at saturation times that
            // time is its capacity (Little's law), both taken from the window that queued
            // least. Without a saturation (an upstream that serves whatever it is sent, only
            // slowly) the baseline does not follow: the limit keeps a slow destination from
            // piling up connections.
            let (saturation, service_p90) = saturation;
            capacity = Some(saturation.capacity());
            self.following = Some(saturation);
            let service = service_p90.min(p90);
            self.baseline.follow(service);
            baseline = service;
            self.recovery.followed(service);
        } else if let Some(healthy) = self.recovery.observe(WindowView {
            p90,
            baseline,
            limit: self.limit,
            erred: error_pressure >= BACKGROUND_ERRORS,
        }) {
            capacity = Some(healthy);
            self.following = None;
        }
        // Latency that fell with in-flight reads as our queueing only while there is a queue
        // to speak of: after a slowdown ends, latency and in-flight fall together.
        let self_queueing = self.baseline.shows_self_queueing() && p90 >= ELEVATED * baseline;
        let measured = point.and_then(|p| p.mean_latency.map(|mean| (p, mean)));
        if let (Some(following), Some((point, mean))) = (self.following.as_mut(), measured) {
            following.observe(point.inflight, point.throughput, mean);
            if self.baseline.mean_ignored_a_trim() {
                following.serves_in(mean);
            }
            // Its peak in-flight: see `Steps::observe`. The window the follow began with
            // still holds the onset's queue draining, and one whose peak is over the limit
            // began before a cut: their waits are a higher level's, and read fewer workers
            // than there are (and a count only falls).
            if !began && f64::from(window.peak_inflight) <= self.limit.round() {
                following.observe_steps(
                    f64::from(window.peak_inflight),
                    window.waited_share,
                    point.bound,
                    (window.mean_inflight, mean),
                );
            }
            // Followed, the queue is read from the window's mean against the service time:
            // a mean over fifty answers varies by a few per cent, a p90 by two or three
            // times that, which at a limit near the workers is Vegas's whole band.
            let view = LatencyView {
                smoothed: mean,
                latest: mean,
                baseline: following.service_mean(),
                self_queueing,
                mean: None,
            };
            return (Some(view), capacity);
        }
        // A full window far over the baseline with no fresh timeout is a slowdown the median
        // of five shows only two windows later.
        let onset = onset.filter(|&step| step >= ONSET * baseline);
        self.onset_p90 = onset.map_or(0.0, |step| step as f32);
        // A window the limit bound that stayed in the band holds at most a short queue,
        // which its p90 shows only part of.
        let mean = window
            .uncensored_mean()
            .filter(|_| window.sheds > 0 && !warming_up && p90 < ELEVATED * baseline)
            .zip(self.baseline.mean())
            .map(|(latest, baseline)| MeanLatency { latest, baseline });
        let view = LatencyView {
            smoothed: onset.map_or(smoothed, |step| smoothed.max(step)),
            latest: p90,
            baseline,
            self_queueing,
            mean,
        };
        (Some(view), capacity)
    }

    /// Whether a connection that ended `waited_ns` after its request started waited longer
    /// than the destination normally takes (its baseline; before one is learned, its
    /// smoothed or newest latencies): a client giving up, a server hanging up. A shorter wait
    /// is a goodbye, a last message that gets no reply, or that the server answers by
    /// closing. With no latency known at all, the wait counts as long.
    fn longer_than_normal(&self, waited_ns: u64) -> bool {
        let normal = self
            .baseline
            .value()
            .or(self.filter.smoothed())
            .or(self.windows.slowest().map(|l| l as f64));
        normal.is_none_or(|normal| waited_ns as f64 > normal)
    }

    fn close(&mut self, window: WindowSummary, now_ns: u64) {
        self.guard.observe(window.peak_inflight);
        self.overload_ceiling(&window);
        let error_pressure = window.error_pressure();
        let (latency, capacity) = self.latency_view(&window, error_pressure);
        if latency.is_none() && error_pressure == 0.0 {
            return;
        }
        let verdict = Verdict {
            now_ns,
            error_pressure,
            latency,
        };
        let mut proposed = self.algorithm.next_limit(self.limit, &verdict);
        if self.baseline.value().is_none() {
            // Learning: growth is the slow start's, on demand actually refused; the
            // algorithm's would rest on a baseline that is not one yet.
            proposed = proposed.min(self.limit);
        }
        let timed = window.p90_ns.is_some_and(|p90| self.timed_as_service(p90));
        let mut allowed = self
            .guard
            .allow(self.limit, proposed, window.dispersed || timed);
        // A window that refused nothing had no demand beyond the limit: the same clients, at
        // most waiting longer. Demand beyond it is Vegas's to regulate inside the band.
        if window.sheds == 0 {
            let below = |multiple: f64| {
                verdict
                    .latency
                    .as_ref()
                    .is_some_and(|view| view.latest < multiple * view.baseline)
            };
            let in_band = below(ELEVATED);
            // The smoothed latency lags by windows: once the newest window is back in the
            // band there is no queue to cut (a slow one next would cut then). A limit twice
            // what was in flight queued nothing either: a mild rise there is the
            // upstream's or the noise of a few latencies, and a slowdown still cuts.
            let slack = SLACK * f64::from(window.peak_inflight) <= self.limit && below(MILD);
            if (in_band || slack) && error_pressure == 0.0 {
                allowed = allowed.max(self.limit);
            }
            // Healthy clients that used most of the limit: their next peak (a Poisson
            // arrival's, a long request's) needs room, as in slow start. Identical latencies
            // are no health (a timer's), as for the growth guard.
            let healthy = in_band && window.dispersed && error_pressure == 0.0;
            if healthy && self.baseline.value().is_some() {
                allowed = allowed.max(f64::from(window.peak_inflight) / NEARLY_FULL);
            }
            if error_pressure < BACKGROUND_ERRORS {
                allowed = self.demand.hold(self.limit, allowed, window.peak_inflight);
                if in_band && self.baseline.value().is_some() {
                    self.demand.observe_unbound(window.peak_inflight);
                }
            }
        }
        if let Some(s) = &self.following {
            allowed = allowed.min(BDP_GAIN * s.capacity());
            if let Some(workers) = s.in_step_workers() {
                allowed = allowed.min(workers);
            } else if window.waited_share == Some(0.0) {
                // Answers in step of which none waited, no workers counted yet: the first
                // level over the workers counts them, and at one over them a single request
                // of each round waits a whole round, where the ceiling's margin makes several.
                allowed = allowed.min((f64::from(window.peak_inflight) + 1.0).max(self.limit));
            }
        }
        if let Some(capacity) = capacity {
            allowed = allowed.max(capacity);
        }
        if allowed.is_finite() {
            if allowed < self.limit {
                self.cut_at_ns = now_ns;
            }
            self.set_limit(allowed);
        }
    }

    fn report(&self, window: &WindowSummary, now_ns: u64, limit_before: f64) -> WindowReport {
        let following = self.following.as_ref();
        WindowReport {
            at_ns: now_ns,
            duration_ns: window.duration_ns,
            samples: window.samples,
            errors: window.errors,
            timeouts: window.timeouts,
            overloads: window.overloads,
            sheds: window.sheds,
            p90_ns: window.p90_ns,
            mean_latency_ns: window.mean_latency_ns,
            mean_inflight: window.mean_inflight,
            peak_inflight: window.peak_inflight,
            throughput: window.throughput(),
            baseline_ns: self.baseline.value(),
            service_ns: following.map(Saturation::service_mean),
            capacity: following.map(Saturation::capacity),
            workers: following.and_then(Saturation::in_step_workers),
            limit_before,
            limit: self.limit,
        }
    }

    /// An overload answer says the in-flight it came at was too many: the limit is kept
    /// under the most the window's answered requests started with (the limit in force when
    /// the window closes may be a cut's already, under the allowance), and the ceiling
    /// raised only once the limit pressed against it for a while without another (the
    /// upstream's allowance may grow back).
    fn overload_ceiling(&mut self, window: &WindowSummary) {
        if window.overloads > 0 {
            let held = match window.peak_inflight {
                0 => self.limit,
                peak => f64::from(peak),
            };
            let mut ceiling = (held - 1.0).max(f64::from(self.limits.min));
            if self.ceiling > 0.0 {
                ceiling = ceiling.min(f64::from(self.ceiling));
            }
            self.ceiling = ceiling as f32;
            self.limit = self.limit.min(ceiling);
            self.under_ceiling = 0;
            self.ceiling_raises = 0;
        } else if self.ceiling > 0.0 {
            let pressing =
                window.sheds > 0 || f64::from(window.peak_inflight) >= f64::from(self.ceiling);
            if pressing {
                self.under_ceiling += 1;
            }
            if self.under_ceiling >= CEILING_PROBE_WINDOWS {
                self.ceiling += f32::from(1u8 << self.ceiling_raises.min(7));
                self.ceiling_raises = self.ceiling_raises.saturating_add(1);
                self.under_ceiling = 0;
                if f64::from(self.ceiling) >= f64::from(self.limits.max) {
                    self.ceiling = 0.0;
                }
            }
        }
    }

    fn set_limit(&mut self, limit: f64) {
        let ceiling = if self.ceiling > 0.0 {
            f64::from(self.ceiling)
        } else {
            f64::MAX
        };
        self.limit = limit
            .min(ceiling)
            .clamp(f64::from(self.limits.min), f64::from(self.limits.max));
    }

    /// Publishes the limit, less the slots requests given up on still hold at an upstream
    /// that answers slowly now; once its answers are fast again, they have been served.
    fn publish(&mut self, now_ns: u64) -> u32 {
        let held = self.abandoned.held(now_ns);
        let held = if self.slow_answers >= SLOW_ANSWERS {
            held
        } else {
            0.0
        };
        let floor = f64::from(self.limits.min);
        self.published = (self.limit - held).max(floor).round() as u32;
        self.published
    }
}

impl<A: LimitAlgorithm> Controller for DestinationController<A> {
    fn on_sample(&mut self, now_ns: u64, latency_ns: u64, inflight: u32) {
        if self.untimed_only {
            // The first answer that could be timed: watched as a new destination's first,
            // with the connections the untimed traffic held counted as held, twice over:
            // a peak seen is a guess at the load, which slow start would give that room.
            self.untimed_only = false;
            self.first_word_at = now_ns + FIRST_WORD_NS;
            self.set_limit(self.limit.max(2.0 * f64::from(self.untimed_peak)));
        }
        self.answered = true;
        self.slow_answers = if latency_ns / 1_000 >= u64::from(self.slow_from_us) {
            self.slow_answers.saturating_add(1)
        } else {
            0
        };
        if now_ns.saturating_sub(latency_ns) >= self.fresh_from_ns {
            self.windows.record_sample(latency_ns, inflight);
        }
        if !self.learned {
            self.slow_start.on_sample(now_ns, latency_ns, inflight);
        }
    }

    fn on_connect(&mut self, now_ns: u64, inflight: u32) {
        if self.untimed_only {
            self.untimed_peak = self.untimed_peak.max(inflight);
        }
        if !self.learned {
            self.slow_start.on_connect(now_ns, inflight);
        }
    }

    fn on_outcome(&mut self, now_ns: u64, outcome: Outcome) {
        let outcome = match outcome {
            Outcome::Untimed => {
                self.untimed_only |= !self.answered;
                return;
            }
            Outcome::GaveUp { waited_ns } | Outcome::HungUp { waited_ns }
                if !self.longer_than_normal(waited_ns) =>
            {
                return
            }
            Outcome::HungUp { .. } => Outcome::Error,
            Outcome::GaveUp { waited_ns } => {
                let stale = now_ns.saturating_sub(waited_ns) < self.cut_at_ns;
                self.abandoned.give_up(now_ns);
                self.windows.record_gave_up(waited_ns, stale);
                Outcome::Timeout
            }
            other => other,
        };
        if outcome == Outcome::Shed {
            self.slow_start.on_shed();
        }
        self.windows.record_outcome(outcome);
    }

    fn update(&mut self, now_ns: u64) -> u32 {
        self.update_reporting(now_ns, &mut |_| {})
    }

    /// For its first 100 ms (`FIRST_WORD_NS`) a new destination refuses nothing below the upper
    /// bound: a burst on attach is traffic, not overload. The first update after that starts
    /// the limit at what that traffic was seen to hold (the highest in-flight a sample
    /// started at), and never under the initial limit. A destination whose answers so far
    /// could none be timed refuses nothing below the upper bound either: there is no latency
    /// to judge a limit by. Its first timed answer starts it over as a new destination, with
    /// twice the connections its untimed traffic held counted as held.
    fn update_reporting(&mut self, now_ns: u64, report: &mut dyn FnMut(&WindowReport)) -> u32 {
        if self.untimed_only {
            self.published = self.limits.max;
            return self.published;
        }
        if self.first_word_at > 0 {
            if now_ns < self.first_word_at {
                return self.published;
            }
            self.first_word_at = 0;
            let seen = f64::from(self.windows.peak_inflight());
            self.set_limit(self.limit.max(seen));
        }
        if let Some(window) = self.windows.close_if_due(now_ns) {
            let limit_before = self.limit;
            self.close(window, now_ns);
            report(&self.report(&window, now_ns, limit_before));
            if self.following.is_none() {
                self.slow_from_us = self
                    .baseline
                    .value()
                    .map_or(u32::MAX, |b| (ELEVATED * b / 1e3) as u32);
            }
            // Only a window's close publishes a baseline.
            if !self.learned && self.baseline.value().is_some() {
                self.learned = true;
                self.slow_start.finish();
            }
        }
        if self.learned {
            return self.publish(now_ns); // slow start is over
        }
        let windows = &self.windows;
        let median = || windows.median().unwrap_or(0.0);
        if let Some(learned) = self.slow_start.next_limit(now_ns, self.limit, median) {
            self.set_limit(learned);
            if !self.learned && self.slow_start.take_queued() {
                // The windows so far measured the queue the last round built, and so do the
                // answers still to come to requests that waited in it: the baseline is
                // learned afresh from requests that start at the level that did not queue.
                self.filter = LatencyFilter::new(self.smoothing);
                self.baseline = Baseline::default();
                self.windows.restart(now_ns);
                self.fresh_from_ns = now_ns;
            }
        }
        self.publish(now_ns)
    }

    fn limit(&self) -> u32 {
        self.published
    }

    fn baseline_ns(&self) -> Option<u64> {
        self.baseline.value().map(|b| b as u64)
    }

    fn p90_ns(&self) -> Option<u64> {
        let smoothed = self.filter.smoothed()?;
        Some(smoothed.max(f64::from(self.onset_p90)) as u64)
    }

    /// An empty window closes without a verdict: it only ages the guard's peaks, which
    /// changes nothing once they are all zero.
    fn is_quiet(&self) -> bool {
        self.windows.is_empty() && self.guard.remembers_no_peak()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Algorithm;

    const MS: u64 = 1_000_000;

    /// A second of 50 ms answers, then closes while awaiting a response after `waited_ns`;
    /// returns the limit after the window closes.
    fn closes_after(waited_ns: u64) -> u32 {
        let cfg = ControlConfig::new(Algorithm::Vegas);
        let mut c = DestinationController::new(&cfg, 0);
        for i in 0..60 {
            c.on_sample(i * 10 * MS, (50 + i % 5) * MS, 10);
            c.on_outcome(i * 10 * MS, Outcome::GaveUp { waited_ns });
        }
        c.update(2_000 * MS)
    }

    #[test]
    fn a_server_closing_on_a_goodbye_is_no_error_and_a_late_hang_up_is() {
        let cfg = ControlConfig::new(Algorithm::Vegas);
        let run = |waited_ns| {
            let mut c = DestinationController::new(&cfg, 0);
            for i in 0..60 {
                c.on_sample(i * 10 * MS, (50 + i % 5) * MS, 10);
                c.on_outcome(i * 10 * MS, Outcome::HungUp { waited_ns });
            }
            c.update(2_000 * MS)
        };
        assert_eq!(run(20_000), 20);
        assert!(run(1_000 * MS) < 20);
    }

    #[test]
    fn every_closed_window_is_reported_with_the_limit_it_left() {
        let cfg = ControlConfig::new(Algorithm::Vegas);
        let mut c = DestinationController::new(&cfg, 0);
        let mut reports = Vec::new();
        let mut fed = 0;
        for i in 0..12_000 {
            let now = i * 10 * MS;
            let factor = if i < 6_000 { 1 } else { 20 };
            c.on_sample(now, (50 + i % 7) * MS * factor, 10);
            fed += 1;
            let mut closed = None;
            let limit = c.update_reporting(now, &mut |r| closed = Some(*r));
            if let Some(r) = closed {
                assert_eq!(r.at_ns, now);
                assert_eq!(r.limit.round() as u32, limit, "nothing abandoned is held");
                reports.push(r);
            }
        }
        let open: u64 = reports.iter().map(|r| r.duration_ns).sum();
        assert!(
            (110_000 * MS..=120_000 * MS).contains(&open),
            "windows open {open} ns"
        );
        assert!(reports.windows(2).all(|w| w[1].limit_before == w[0].limit));
        let reported: u32 = reports.iter().map(|r| r.samples).sum();
        assert!(
            reported <= fed && reported + 200 >= fed,
            "{reported} of {fed} samples"
        );
        let fell = reports.iter().find(|r| r.limit < r.limit_before).unwrap();
        assert!(fell.at_ns >= 60_000 * MS && fell.p90_ns.unwrap() > 20.0 * 50e6);
    }

    /// The limit after two minutes of answers of about 50 ms, every 10 ms: `at(i)` gives the
    /// i-th its slowdown factor and the in-flight it started with.
    fn limit_after(at: impl Fn(u64) -> (f64, u32)) -> u32 {
        let cfg = ControlConfig::new(Algorithm::Vegas);
        let mut c = DestinationController::new(&cfg, 0);
        let mut limit = 0;
        for i in 0..12_000 {
            let now = i * 10 * MS;
            let (factor, inflight) = at(i);
            c.on_sample(now, (((50 + i % 7) * MS) as f64 * factor) as u64, inflight);
            limit = c.update(now);
        }
        limit
    }

    /// The limit after 60 s of answers of about 50 ms started with 10 in flight, then 60 s
    /// of answers `factor` times slower started with `inflight`.
    fn after_a_rise(factor: f64, inflight: u32) -> u32 {
        limit_after(|i| {
            if i < 6_000 {
                (1.0, 10)
            } else {
                (factor, inflight)
            }
        })
    }

    /// The limit after answers of about 50 ms started with 10 in flight, 1.2x slower from
    /// 60 s (Vegas reads a queue of 3.3 at 20, inside its band, and holds), and from 90 s
    /// started with `inflight`.
    fn after_clients_grew_in_the_band(inflight: u32) -> u32 {
        limit_after(|i| {
            let factor = if i < 6_000 { 1.0 } else { 1.2 };
            (factor, if i < 9_000 { 10 } else { inflight })
        })
    }

    #[test]
    fn healthy_clients_using_most_of_the_limit_get_room_for_their_next_peak() {
        assert_eq!(
            after_clients_grew_in_the_band(12),
            20,
            "12 leaves room under 20"
        );
        assert_eq!(
            after_clients_grew_in_the_band(18),
            24,
            "18 is three quarters of 24"
        );
    }

    /// Seconds from a twentyfold step of the latency to the first cut of the limit of 20
    /// under 15 (the slot a timeout holds for a while is not a cut), with a
    /// timeout every second after the step (of a request that waited `timeouts_after_ms`)
    /// or none, and the p90 reported with the cut.
    fn first_cut_after_a_step(timeouts_after_ms: Option<u64>) -> (f64, u64) {
        let cfg = ControlConfig::new(Algorithm::Vegas);
        let mut c = DestinationController::new(&cfg, 0);
        let step = 6_000;
        for i in 0..12_000 {
            let now = i * 10 * MS;
            let factor = if i < step { 1 } else { 20 };
            c.on_sample(now, (50 + i % 7) * MS * factor, 10);
            if let Some(waited) = timeouts_after_ms.filter(|_| i >= step && i % 100 == 0) {
                let waited_ns = waited * MS;
                c.on_outcome(now, Outcome::GaveUp { waited_ns });
            }
            let l = c.update(now);
            if l < 15 {
                return ((i - step) as f64 / 100.0, c.p90_ns().unwrap_or(0));
            }
        }
        (f64::INFINITY, 0)
    }

    #[test]
    fn a_full_window_far_over_the_baseline_cuts_before_the_median_shows_it() {
        let clean = first_cut_after_a_step(None);
        assert!(
            clean.1 > 20 * 50 * MS,
            "the p90 that cut it: {} ms",
            clean.1 / MS
        );
        let first_window = clean.0;
        // The first window's timeout is of a request sent since the last cut (there was none)
        // and leaves that window to the error pressure, which cuts a little; the timeouts
        // after it are of requests sent before that cut, the queue it answered for, and the
        // next full window cuts.
        let queued_before = first_cut_after_a_step(Some(5_000));
        assert_eq!(
            queued_before.0,
            2.0 * first_window,
            "timeouts of the queue before a cut"
        );
        // Requests sent since the cut that time out are the error pressure's to cut for.
        let fresh = first_cut_after_a_step(Some(500));
        assert!(
            fresh.0 > queued_before.0,
            "with fresh timeouts the median's: {} s, against {} s",
            fresh.0,
            queued_before.0
        );
    }

    #[test]
    fn requests_given_up_on_hold_their_slots_while_the_answers_are_slow() {
        let (mut c, now) = learned(50, 7, 30);
        let limit = c.limit();
        assert!(limit > 20, "{limit}");
        // No window closes within the next millisecond: only the held slots move the limit.
        let soon = now + MS;
        for _ in 0..10 {
            let waited_ns = 2_000 * MS;
            c.on_outcome(soon, Outcome::GaveUp { waited_ns });
        }
        assert_eq!(
            c.update(soon),
            limit,
            "answers are fast: the upstream served them"
        );
        c.on_sample(soon, 1_000 * MS, 30);
        assert_eq!(c.update(soon), limit, "one slow answer can be a straggler");
        for _ in 0..2 {
            c.on_sample(soon, 1_000 * MS, 30);
        }
        assert_eq!(
            c.update(soon),
            limit - 10,
            "a slow upstream still holds them"
        );
        c.on_sample(soon, 50 * MS, 30);
        assert_eq!(c.update(soon), limit, "answers are fast again");
    }

    /// A Vegas controller after a minute of answers of `base_ms` to `base_ms + spread - 1`
    /// started with `inflight` in flight, and the time it was last updated.
    fn learned(base_ms: u64, spread: u64, inflight: u32) -> (DestinationController, u64) {
        let cfg = ControlConfig::new(Algorithm::Vegas);
        let mut c = DestinationController::new(&cfg, 0);
        let mut now = 0;
        for i in 0..6_000 {
            now = i * 10 * MS;
            c.on_sample(now, (base_ms + i % spread) * MS, inflight);
            c.update(now);
        }
        (c, now)
    }

    /// A window of `latency_ms` answers that all took the same time, bound by the limit.
    fn identical(latency_ms: f64) -> WindowSummary {
        let latency_ns = latency_ms * MS as f64;
        WindowSummary {
            duration_ns: 2_000 * MS,
            samples: 60,
            errors: 0,
            timeouts: 0,
            stale_timeouts: 0,
            overloads: 0,
            p90_ns: Some(latency_ns),
            p90_weight: 60,
            mean_inflight: 20.0,
            peak_inflight: 24,
            dispersed: false,
            mean_latency_ns: latency_ns,
            sheds: 10,
            gave_up_after_ns: None,
            waited_share: Some(0.0),
        }
    }

    #[test]
    fn identical_latencies_far_over_the_baseline_are_a_fixed_sleeps_service_time() {
        let (c, _) = learned(50, 7, 10);
        let baseline_ms = c.baseline_ns().expect("a baseline learned") as f64 / MS as f64;
        assert!(
            c.evidence_point(&identical(baseline_ms)).is_none(),
            "a timer at the baseline tells nothing"
        );
        let slow = c.evidence_point(&identical(27.0 * baseline_ms));
        assert!(
            slow.is_some_and(|p| p.bound && p.latency > 20.0 * baseline_ms * MS as f64),
            "{slow:?}"
        );
    }

    #[test]
    fn a_window_refusing_only_as_its_in_flight_rose_to_the_limit_was_not_bound_by_it() {
        let (c, _) = learned(50, 7, 10);
        let slow_ms = 27.0 * c.baseline_ns().expect("a baseline learned") as f64 / MS as f64;
        let at = |mean_inflight: f64| {
            c.evidence_point(&WindowSummary {
                mean_inflight,
                ..identical(slow_ms)
            })
            .expect("a slow window is evidence")
        };
        let rising = at(0.3 * c.limit);
        assert!(
            !rising.bound && rising.inflight == 0.3 * c.limit,
            "{rising:?}"
        );
        let held = at(0.8 * c.limit);
        assert!(held.bound && held.inflight == c.limit, "{held:?}");
    }

    /// A controller after the slowdown the lab's onset shows (an upstream that sleeps 810 ms
    /// behind a proxy's 2 s timeout): a window of answers in step at that sleep of which
    /// `waited_share` waited for a worker, at less in flight than the two queued windows
    /// before it at the same throughput. Also the time it closed and the limit before it.
    fn onset_in_step(waited_share: f64) -> (DestinationController, u64, f64) {
        let (mut c, mut now) = learned(30, 3, 30);
        let queued = |mean_inflight: f64| WindowSummary {
            p90_ns: Some(1_550.0 * MS as f64),
            mean_latency_ns: 1_250.0 * MS as f64,
            mean_inflight,
            peak_inflight: mean_inflight as u32 + 5,
            dispersed: true,
            waited_share: None,
            ..identical(1_550.0)
        };
        for window in [queued(40.0), queued(44.0)] {
            now += 2_000 * MS;
            c.close(window, now);
        }
        let limit_before = c.limit;
        now += 2_000 * MS;
        c.close(
            WindowSummary {
                mean_inflight: 0.9 * limit_before,
                peak_inflight: limit_before as u32,
                waited_share: Some(waited_share),
                ..identical(810.0)
            },
            now,
        );
        (c, now, limit_before)
    }

    /// Whether a controller follows the onset of [`onset_in_step`], and the limit it left.
    fn after_an_onset_in_step(waited_share: f64) -> (bool, f64) {
        let (c, _, limit_before) = onset_in_step(waited_share);
        (c.following.is_some(), c.limit / limit_before)
    }

    #[test]
    fn answers_in_step_of_which_none_waited_grow_the_limit_one_over_their_peak() {
        let (mut c, mut now, _) = onset_in_step(0.0);
        assert!(c.following.is_some());
        for _ in 0..3 {
            let peak = c.limit.round() as u32;
            now += 2_000 * MS;
            c.close(
                WindowSummary {
                    mean_inflight: f64::from(peak),
                    peak_inflight: peak,
                    samples: (f64::from(peak) / 0.81 * 2.0) as u32,
                    waited_share: Some(0.0),
                    ..identical(810.0)
                },
                now,
            );
            assert!(
                c.limit <= f64::from(peak) + 1.0,
                "{peak} grew to {}",
                c.limit
            );
        }
    }

    /// A window of dispersed answers, `p90_ms` at its p90 and `mean_ms` on average.
    fn dispersed(p90_ms: f64, mean_ms: f64) -> WindowSummary {
        WindowSummary {
            dispersed: true,
            mean_latency_ns: mean_ms * MS as f64,
            waited_share: None,
            ..identical(p90_ms)
        }
    }

    #[test]
    fn after_a_follow_a_lower_p90_is_taken_at_once_only_when_it_describes_its_window() {
        let (mut c, now, _) = onset_in_step(0.0);
        let followed = c.baseline_ns().expect("a baseline followed");
        assert!(followed > 800 * MS, "{followed}");
        let mut close = |p90_ms, mean_ms, after_ms| {
            c.close(dispersed(p90_ms, mean_ms), now + after_ms * MS);
            c.baseline_ns()
        };
        assert_eq!(
            close(600.0, 700.0, 2_000),
            Some(followed),
            "a tenth far over the p90"
        );
        assert_eq!(
            close(300.0, 250.0, 4_000),
            Some(followed),
            "under half: no queue drains so far"
        );
        assert_eq!(close(600.0, 500.0, 6_000), Some(600 * MS));
    }

    #[test]
    fn a_p90_still_rising_as_the_long_requests_of_a_mix_come_in_is_no_baseline_yet() {
        let cfg = ControlConfig::new(Algorithm::Vegas);
        let mut c = DestinationController::new(&cfg, 0);
        let window = |p90_ms: f64| WindowSummary {
            sheds: 0,
            dispersed: true,
            mean_latency_ns: 0.3 * p90_ms * MS as f64,
            waited_share: None,
            ..identical(p90_ms)
        };
        let mut baselines = Vec::new();
        for (i, p90_ms) in [290.0, 310.0, 2_800.0, 2_830.0, 4_340.0, 3_600.0]
            .into_iter()
            .enumerate()
        {
            c.close(window(p90_ms), (i as u64 + 1) * 2_800 * MS);
            baselines.push(c.baseline_ns().map(|b| b / MS));
        }
        assert_eq!(baselines[4], None, "4 340 ms is far over 2 830");
        assert_eq!(baselines[5], Some(4_340));

        let mut c = DestinationController::new(&cfg, 0);
        for (i, p90_ms) in [30.0, 30.3, 30.6, 30.9, 31.2].into_iter().enumerate() {
            c.close(window(p90_ms), (i as u64 + 1) * 2_000 * MS);
        }
        assert!(
            c.baseline_ns().is_some(),
            "a drift of 1 % a window is noise"
        );
    }

    #[test]
    fn answers_in_step_of_which_none_waited_are_the_upstreams_own_latency() {
        let (followed, kept) = after_an_onset_in_step(0.0);
        assert!(
            followed && kept >= 0.9,
            "followed {followed}, kept {kept:.2} of the limit"
        );
        let (followed, kept) = after_an_onset_in_step(0.1);
        assert!(
            !followed && kept < 0.9,
            "waits are a queue: followed {followed}, cut to {kept:.2}"
        );
    }

    #[test]
    fn a_mild_rise_leaves_a_limit_nothing_comes_near_and_a_slowdown_cuts_it() {
        assert_eq!(after_a_rise(1.0, 10), 20);
        assert_eq!(after_a_rise(1.5, 10), 20, "1.5x, half the limit in flight");
        assert!(
            after_a_rise(1.5, 15) < 20,
            "1.5x, and in flight with it (Little's law)"
        );
        assert!(after_a_rise(3.0, 10) < 20, "3x is a slowdown");
    }

    /// The agent fetches this much of a controller ahead of each batch of signals: the
    /// histogram, 2 KiB that only windows too large for the ring touch, stays out of it.
    #[test]
    fn what_a_sample_touches_comes_first_and_the_histogram_last() {
        let hot = DestinationController::HOT_BYTES;
        assert!(hot <= 10 * 64, "{hot} bytes");
        assert!(
            hot > std::mem::offset_of!(DestinationController, windows),
            "{hot} bytes"
        );
    }

    #[test]
    fn a_goodbye_is_not_a_timeout_and_a_long_wait_is() {
        assert_eq!(closes_after(50_000), 20, "goodbyes leave the limit alone");
        assert!(
            closes_after(2_000 * MS) < 20,
            "giving up after 2 s lowers it"
        );
    }

    /// Every 10 ms, a request starts at the in-flight the limit allows (the clients always
    /// want more); an upstream allowing `allowed` at once answers it 429 when it starts over
    /// that, and otherwise in about 50 ms. Returns the limit at the end and the share of the
    /// requests of the last half answered 429.
    fn against_an_allowance(
        c: &mut DestinationController,
        from_ms: u64,
        to_ms: u64,
        allowed: u32,
    ) -> (u32, f64) {
        let mut limit = c.update(from_ms * MS);
        let (mut overloaded, mut sent) = (0, 0);
        for now_ms in (from_ms..to_ms).step_by(10) {
            let now = now_ms * MS;
            let half = now_ms >= (from_ms + to_ms) / 2;
            if limit > allowed {
                c.on_outcome(now, Outcome::Overload);
                overloaded += u32::from(half);
            }
            c.on_sample(now, (50 + now_ms % 7) * MS, limit.min(allowed));
            sent += u32::from(half);
            limit = c.update(now);
        }
        (limit, f64::from(overloaded) / f64::from(sent))
    }

    #[test]
    fn overload_answers_hold_the_limit_at_the_allowance_and_probes_find_it_grown_back() {
        let cfg = ControlConfig::new(Algorithm::Vegas);
        let mut c = DestinationController::new(&cfg, 0);
        let (before, _) = against_an_allowance(&mut c, 0, 60_000, 200);
        let allowed = before - 10;
        let (limit, share) = against_an_allowance(&mut c, 60_000, 120_000, allowed);
        assert!(
            (allowed - 2..=allowed + 1).contains(&limit),
            "{limit} for {allowed}"
        );
        assert!(share < 0.05, "{share}");
        // A probe over the ceiling each few windows, 1, 2, 4 … while no 429 comes.
        let (limit, _) = against_an_allowance(&mut c, 120_000, 150_000, 200);
        assert!(limit >= before, "{limit}, {before} before the allowance");
    }
}
