//! The correlation window: in-flight, throughput and latency of the last 50 windows, and the
//! question the baseline asks of them: is the latency we see bought by our own concurrency?
//!
//! The evidence is read as elasticities, regression slopes in log-log space (covariance over
//! variance of log in-flight). Below capacity, latency does not follow in-flight (slope near 0)
//! and throughput does (slope near 1). Past capacity it is the other way round: more in-flight
//! only buys queueing. Little's law ties the two slopes together; both are checked so that a
//! noisy throughput or a noisy latency alone cannot trigger a move.

use crate::baseline::ELEVATED;
use crate::steps::Steps;

/// Windows of evidence kept (Uber's "running window, typically lasting 50 intervals").
pub const CORRELATION_WINDOWS: usize = 50;
/// Elevated windows a conclusion rests on: the newest ones only, because a regression pooled
/// across a change of regime (capacity halved, say) reads the step between the regimes as a
/// correlation that neither regime has.
const MIN_ELEVATED: usize = 10;
/// The newest windows must all be elevated: the latency sits at its new level now.
const RECENT_ELEVATED: usize = 5;
/// Standard deviation of log in-flight below which in-flight did not vary enough to tell.
const MIN_INFLIGHT_SPREAD: f64 = 0.1;
/// Standard deviation of log latency above which the latency has not settled at one level.
const MAX_LATENCY_SPREAD: f64 = 0.1;
/// Latency elasticity at or below which latency is not following in-flight.
const MAX_LATENCY_SLOPE: f64 = 0.5;
/// Throughput elasticity at or above which more concurrency still buys throughput.
const MIN_THROUGHPUT_SLOPE: f64 = 0.5;
/// Windows read to tell whether our own concurrency is queueing now.
const RECENT_QUEUEING: usize = 10;
/// Latency elasticity at or above which latency follows in-flight: queueing.
const QUEUEING_LATENCY_SLOPE: f64 = 0.7;
/// Throughput elasticity at or below which more concurrency buys no throughput.
const QUEUEING_THROUGHPUT_SLOPE: f64 = 0.3;

/// Elasticities of latency and throughput with respect to in-flight, and how much the
/// latency itself varied.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Slopes {
    latency: f64,
    throughput: f64,
    latency_spread: f64,
}

impl Slopes {
    /// Least-squares slopes over `points`, if there are at least `min_points` of them and
    /// in-flight varied enough among them to tell anything.
    fn over(points: impl Iterator<Item = LogPoint>, min_points: usize) -> Option<Slopes> {
        let mut n = 0.0;
        let (mut sx, mut sxx, mut sl, mut sxl, mut st, mut sxt) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        let mut sll = 0.0;
        for p in points {
            let (x, l, t) = (
                f64::from(p.inflight),
                f64::from(p.latency),
                f64::from(p.throughput),
            );
            n += 1.0;
            sx += x;
            sxx += x * x;
            sl += l;
            sxl += x * l;
            sll += l * l;
            st += t;
            sxt += x * t;
        }
        if n < min_points as f64 {
            return None;
        }
        let var_x = sxx / n - (sx / n).powi(2);
        if var_x.max(0.0).sqrt() < MIN_INFLIGHT_SPREAD {
            return None;
        }
        Some(Slopes {
            latency: (sxl / n - sx / n * sl / n) / var_x,
            throughput: (sxt / n - sx / n * st / n) / var_x,
            latency_spread: (sll / n - (sl / n).powi(2)).max(0.0).sqrt(),
        })
    }
}

/// One window's contribution to the evidence.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EvidencePoint {
    /// Mean in-flight at request start.
    pub inflight: f64,
    /// Successful exchanges per second.
    pub throughput: f64,
    /// The window's p90 latency.
    pub latency: f64,
    /// The mean latency of its answers, when they are all of its requests (timeouts took
    /// none of the slow ones): Little's law's time in flight.
    pub mean_latency: Option<f64>,
    /// The limit refused connects in the window, which ran near it: in-flight was the
    /// limit's, not the clients' choice.
    pub bound: bool,
}

/// One window as kept: the logs of its figures, 16 bytes (whether it was bound is a bit of
/// [`Evidence::bound`], which keeps a controller under 4 KiB).
#[derive(Clone, Copy, Debug, Default)]
struct Logged {
    inflight: f32,
    throughput: f32,
    latency: f32,
    /// Infinite when the window's mean is unknown.
    mean_latency: f32,
}

/// One window as read back.
#[derive(Clone, Copy, Debug)]
struct LogPoint {
    inflight: f32,
    throughput: f32,
    latency: f32,
    mean_latency: f32,
    bound: bool,
}

/// What the upstream serves at saturation and how long it takes doing so without a queue
/// of ours. Kept in `f32` (7 significant digits) while a destination is followed: a
/// controller stays under 4 KiB.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Saturation {
    /// The highest throughput a window above the baseline delivered, per second.
    throughput: f32,
    /// The mean latency of the window whose requests spent the least time in flight: the
    /// closest to no queue.
    service_mean: f32,
    /// The least in-flight a window served at saturation with: the workers are no more.
    /// Infinite once a window with more in flight served under the saturation, until one
    /// saturates it again.
    saturating_inflight: f32,
    /// What the window with [`Saturation::saturating_inflight`] served, per second: once the
    /// most served passes it by more than the noise, that window was not saturating after all.
    saturating_throughput: f32,
    /// The mean throughput of the windows that served the saturation, and how many they are
    /// (at most [`SERVED_WINDOWS`]): the highest alone is the noise's highest.
    served: f32,
    served_windows: f32,
    /// Whether its workers answer in step, and how many they are if so.
    steps: Steps,
}

impl Saturation {
    /// `saturating` is the least in-flight seen to saturate the upstream and what it served;
    /// `served`, what the windows that saturated it served on average, and how many they are.
    fn new(throughput: f64, service_mean: f64, saturating: (f64, f64), served: (f64, f64)) -> Self {
        Saturation {
            served: served.0 as f32,
            served_windows: (served.1 as f32).min(SERVED_WINDOWS),
            throughput: throughput as f32,
            service_mean: service_mean as f32,
            saturating_inflight: saturating.0 as f32,
            saturating_throughput: saturating.1 as f32,
            steps: Steps::default(),
        }
    }

    /// The mean service time, in nanoseconds.
    pub fn service_mean(&self) -> f64 {
        f64::from(self.service_mean)
    }

    /// What the windows at saturation served on average times its service time (Little's
    /// law), and never more than the least in-flight seen to saturate it.
    pub fn capacity(&self) -> f64 {
        (f64::from(self.served) * self.service_mean() / 1e9)
            .min(f64::from(self.saturating_inflight))
    }

    /// The most in flight an upstream whose workers answer in step can take without a
    /// request waiting a whole round for one, when that is known.
    pub fn in_step_workers(&self) -> Option<f64> {
        self.steps.workers()
    }

    /// Raises the service time to `mean`, if higher: a window that queued nothing measured
    /// it.
    pub fn serves_in(&mut self, mean: f64) {
        self.service_mean = self.service_mean.max(mean as f32);
    }

    /// Takes in how a window seen while following answered (see [`Steps::observe`]), and
    /// its mean in-flight and mean latency: a bound window in step of which no answer took
    /// 1.25x the fastest can still hold a queue of a request or two over workers out of
    /// step, each waiting a fraction of a round, and its mean shows them where the count of
    /// waits does not. Little's law then reads the workers (`Steps::lower_to`).
    pub fn observe_steps(
        &mut self,
        peak_inflight: f64,
        waited_share: Option<f64>,
        bound: bool,
        (mean_inflight, mean_latency): (f64, f64),
    ) {
        self.steps.observe(peak_inflight, waited_share, bound);
        let service = self.service_mean();
        let queued = mean_latency > service * (1.0 + QUEUED_MEAN / mean_inflight.max(1.0));
        if waited_share == Some(0.0) && bound && queued {
            self.steps.lower_to(mean_inflight * service / mean_latency);
        }
    }

    /// Takes in a window seen while following: its in-flight, throughput and mean latency.
    /// A throughput beyond the noise of what the least saturating in-flight served is more
    /// than the upstream served there (workers added, or a capacity first seen from below):
    /// that in-flight bounds it no more, and this window's takes its place and restarts the
    /// average served. A window serving the saturation otherwise joins that average.
    /// A window whose mean is under [`SPED_UP`] of the service time straddles the upstream's
    /// recovery (its p90 still the slow answers'): it shows nothing of the saturation.
    pub fn observe(&mut self, inflight: f64, throughput: f64, mean_latency: f64) {
        if mean_latency < SPED_UP * self.service_mean() {
            return;
        }
        let (inflight, throughput) = (inflight as f32, throughput as f32);
        self.service_mean = self.service_mean.min(mean_latency as f32);
        self.throughput = self.throughput.max(throughput);
        let saturating = SATURATING as f32 * self.throughput;
        if self.saturating_throughput < saturating {
            // Only a window serving the most ever can put it under: this one.
            (self.saturating_inflight, self.saturating_throughput) = (inflight, throughput);
            (self.served, self.served_windows) = (throughput, 1.0);
        } else if throughput >= saturating {
            if inflight < self.saturating_inflight {
                (self.saturating_inflight, self.saturating_throughput) = (inflight, throughput);
            }
            self.served_windows = (self.served_windows + 1.0).min(SERVED_WINDOWS);
            self.served += (throughput - self.served) / self.served_windows;
        } else if inflight > self.saturating_inflight {
            // More in flight served well under the saturation: the least in-flight that
            // saturated it came from a window draining a queue built before, with answers
            // admitted at more, and bounds nothing.
            self.saturating_inflight = f32::INFINITY;
        }
    }
}

/// The window among `windows` with the least mean latency (of those that measured one): the
/// closest to no queue of ours, so the service time.
fn least_mean(windows: impl Iterator<Item = LogPoint>) -> Option<LogPoint> {
    windows
        .filter(|p| p.mean_latency.is_finite())
        .min_by(|a, b| a.mean_latency.total_cmp(&b.mean_latency))
}

/// A mean latency under this share of the service time is the upstream fast again.
const SPED_UP: f64 = 0.5;
/// A mean over the service time by this share of what one request queued over the workers
/// adds to it (the service time over the in-flight) shows a queue.
const QUEUED_MEAN: f64 = 0.5;
/// Windows whose throughput the capacity averages, the older ones fading.
const SERVED_WINDOWS: f32 = 8.0;

/// Windows searched for the upstream's throughput plateau.
const PLATEAU_WINDOWS: usize = 10;
/// More in-flight by this factor that bought less than [`PLATEAU_ELASTICITY`] of its rise
/// in throughput (log-log), at no less latency: the upstream was saturated. (Not necessarily
/// at more latency: the p90 of a window lags the in-flight its requests started at, and a
/// client's timeout caps it.) Below saturation throughput follows in-flight one for one;
/// a window that drains in-flight through the workers mixes the two, so a fixed gain of
/// 1.1x missed 1.7x the in-flight buying 1.13x the throughput.
const PLATEAU_INFLIGHT: f64 = 1.2;
const PLATEAU_ELASTICITY: f64 = 0.5;
/// A bound window whose mean latency is this multiple of the service time's, with more in
/// flight, held a queue.
const QUEUED_ABOVE: f64 = 1.1;
/// Latency this multiple of the baseline or more may be followed on Little's law alone:
/// less, two heals move the baseline there, and the follow's service time is read low.
const FAR_OVER: f64 = 4.0;
/// A window serving at least this share of the most the upstream served was saturating it.
const SATURATING: f64 = 0.9;
/// Windows back in which a lowering of in-flight by [`FLAT_CUT`] is looked for...
const FLAT_WINDOWS: usize = 5;
const FLAT_CUT: f64 = 0.75;
/// ...that left the latency at least at this share of what it was.
const FLAT_LATENCY: f64 = 0.85;
/// A lowering of in-flight by [`STARVED_CUT`] that throughput followed by
/// [`STARVED_ELASTICITY`] (log-log), or fell to [`STARVED`] with, at no lower mean latency:
/// the upstream was below saturation. A trim of 15 %, not only a cut of 25 %: after the
/// onset's cuts the limit comes down by trims while the windows drain the onset's queue.
const STARVED_CUT: f64 = 0.85;
const STARVED_ELASTICITY: f64 = 0.8;
const STARVED: f64 = 0.8;

/// Windows back in which a lowering of in-flight by [`TRIM_CUT`]... (Vegas trims a limit
/// near 100 by one a window: 15 % of it takes some 16 windows, and more where it holds.)
const TRIM_WINDOWS: usize = 40;
const TRIM_CUT: f64 = 0.85;
/// ...that left the mean latency at least at this share of what it was shows no queue.
const TRIM_LATENCY: f64 = 0.97;

/// The last [`CORRELATION_WINDOWS`] windows, oldest overwritten first.
#[derive(Clone, Debug)]
pub struct Evidence {
    points: [Logged; CORRELATION_WINDOWS],
    /// Bit `i`: the window in `points[i]` was bound by the limit.
    bound: u64,
    len: u8,
    next: u8,
}

const _: () = assert!(CORRELATION_WINDOWS <= u64::BITS as usize);

impl Default for Evidence {
    fn default() -> Self {
        Evidence {
            points: [Logged::default(); CORRELATION_WINDOWS],
            bound: 0,
            len: 0,
            next: 0,
        }
    }
}

impl Evidence {
    /// Records one window; in-flight is floored at one request (the sample's own).
    pub fn push(&mut self, p: EvidencePoint) {
        let slot = usize::from(self.next);
        self.points[slot] = Logged {
            inflight: p.inflight.max(1.0).ln() as f32,
            throughput: p.throughput.max(f64::MIN_POSITIVE).ln() as f32,
            latency: p.latency.max(1.0).ln() as f32,
            mean_latency: p
                .mean_latency
                .map_or(f32::INFINITY, |m| m.max(1.0).ln() as f32),
        };
        self.bound = (self.bound & !(1 << slot)) | (u64::from(p.bound) << slot);
        self.next = ((slot + 1) % CORRELATION_WINDOWS) as u8;
        self.len = (usize::from(self.len) + 1).min(CORRELATION_WINDOWS) as u8;
    }

    /// Forgets every window: the next conclusion needs fresh evidence.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The held windows, newest first.
    fn newest_first(&self) -> impl Iterator<Item = LogPoint> + '_ {
        (1..=usize::from(self.len)).map(move |back| {
            let slot = (usize::from(self.next) + CORRELATION_WINDOWS - back) % CORRELATION_WINDOWS;
            let kept = self.points[slot];
            LogPoint {
                inflight: kept.inflight,
                throughput: kept.throughput,
                latency: kept.latency,
                mean_latency: kept.mean_latency,
                bound: self.bound & (1 << slot) != 0,
            }
        })
    }

    /// Whether latency has settled above `baseline` for reasons other than our load: it is
    /// elevated in the newest windows, and across the newest elevated windows in-flight varied
    /// while latency stayed at one level, did not follow it, and throughput did.
    pub fn shows_external_shift(&self, baseline: f64) -> bool {
        let floor = (baseline.max(1.0) * ELEVATED).ln() as f32;
        let recent = self.newest_first().take(RECENT_ELEVATED);
        if recent.filter(|p| p.latency >= floor).count() < RECENT_ELEVATED {
            return false;
        }
        Slopes::over(
            self.newest_first()
                .filter(|p| p.latency >= floor)
                .take(MIN_ELEVATED),
            MIN_ELEVATED,
        )
        .is_some_and(|s| {
            s.latency_spread <= MAX_LATENCY_SPREAD
                && s.latency <= MAX_LATENCY_SLOPE
                && s.throughput >= MIN_THROUGHPUT_SLOPE
        })
    }

    /// The upstream's saturation, if the newest windows show it: two windows elevated above
    /// `baseline` where the limit bound in-flight, the one with more in-flight buying little
    /// throughput at no less latency. Then the highest throughput an elevated window
    /// delivered (bound or not: a window the clients' own in-flight saturated counts), the
    /// least in-flight a window served nearly that with, what the windows that served
    /// nearly that served on average, and the service time of the bound
    /// window with the least mean latency (a window whose mean is unknown offers the newest
    /// window's instead). Windows at the old latency, or at under half the newest's, are
    /// left out: across a step of the service time, the windows before it and the one it
    /// began in look like more throughput at less latency.
    ///
    /// Returns the saturation and the p90 of the window its service time comes from.
    ///
    /// The least mean, not the newest: a window at saturation holds the queue our
    /// in-flight beyond the workers builds, and its in-flight is its throughput times its
    /// mean latency whatever that queue is (Little's law), so throughput times its mean
    /// reads the limit back as the capacity. A window the limit cut below the workers
    /// waited in no queue: throughput at saturation times its latency is the workers.
    pub fn saturation(&self, baseline: f64, newest: (f64, f64)) -> Option<(Saturation, f64)> {
        // A window whose p90 is under half the newest's straddles the slowdown's start:
        // its throughput is the healthy rate's, not what the slow upstream serves.
        let floor = (baseline.max(1.0) * ELEVATED).max(SPED_UP * newest.1).ln() as f32;
        let bound = || {
            self.newest_first()
                .take(PLATEAU_WINDOWS)
                .filter(move |p| p.bound && p.latency >= floor)
        };
        let more = PLATEAU_INFLIGHT.ln() as f32;
        let elasticity = PLATEAU_ELASTICITY as f32;
        let saturated = bound().any(|hi| {
            bound().any(|lo| {
                hi.inflight >= lo.inflight + more
                    && hi.throughput <= lo.throughput + elasticity * (hi.inflight - lo.inflight)
                    && hi.latency >= lo.latency
            })
        });
        if !saturated {
            let far = (baseline.max(1.0) * FAR_OVER).ln() as f32;
            return Self::queued_above_the_service_time(|| {
                bound().filter(move |p| p.latency >= far)
            });
        }
        let elevated = || {
            self.newest_first()
                .take(PLATEAU_WINDOWS)
                .filter(move |p| p.latency >= floor)
        };
        let best = elevated().map(|p| p.throughput).reduce(f32::max)?;
        let saturating = best + (SATURATING.ln() as f32);
        let served = || elevated().filter(move |p| p.throughput >= saturating);
        let (sum, count) = served().fold((0.0, 0.0), |(sum, n), p| {
            (sum + f64::from(p.throughput).exp(), n + 1.0)
        });
        let (saturating_inflight, saturating_throughput) = served()
            .map(|p| (p.inflight, p.throughput))
            .reduce(|a, b| if b.0 < a.0 { b } else { a })?;
        let (service_mean, service_p90) = least_mean(bound()).map_or(newest, |p| {
            (f64::from(p.mean_latency).exp(), f64::from(p.latency).exp())
        });
        let saturation = Saturation::new(
            f64::from(best).exp(),
            service_mean,
            (
                f64::from(saturating_inflight).exp(),
                f64::from(saturating_throughput).exp(),
            ),
            (sum / count, count),
        );
        Some((saturation, service_p90))
    }

    /// A saturation read by Little's law when no plateau shows: the bound window with the
    /// least mean latency measured the service time, and one with more in flight whose
    /// mean was over it held a queue, so what it served was all the upstream serves.
    fn queued_above_the_service_time<I: Iterator<Item = LogPoint>>(
        bound: impl Fn() -> I,
    ) -> Option<(Saturation, f64)> {
        let service = least_mean(bound())?;
        let more = PLATEAU_INFLIGHT.ln() as f32;
        let queued = QUEUED_ABOVE.ln() as f32;
        let hi = bound()
            .filter(|p| {
                p.mean_latency.is_finite()
                    && p.inflight >= service.inflight + more
                    && p.mean_latency >= service.mean_latency + queued
            })
            .max_by(|a, b| a.throughput.total_cmp(&b.throughput))?;
        let throughput = f64::from(hi.throughput).exp();
        let service_mean = f64::from(service.mean_latency).exp();
        let workers = throughput * service_mean / 1e9;
        let saturation = Saturation::new(
            throughput,
            service_mean,
            (workers, throughput),
            (throughput, 1.0),
        );
        Some((saturation, f64::from(service.latency).exp()))
    }

    /// Whether the limit lowered in-flight in the newest windows (the higher window was
    /// bound by it, not by the clients) without lowering the latency: what latency remains
    /// is the upstream's own.
    pub fn latency_ignored_a_cut(&self) -> bool {
        let kept = FLAT_LATENCY.ln() as f32;
        self.after_a_cut(FLAT_WINDOWS, FLAT_CUT, |before, newest| {
            newest.latency >= before.latency + kept
        })
    }

    /// Whether the limit lowered in-flight in the newest windows, throughput fell with it and
    /// the mean latency did not: below saturation, so no queue of ours is left in the latency.
    /// A cut of [`STARVED_CUT`] or more counts when throughput fell by [`STARVED_ELASTICITY`]
    /// of it (log-log) or to [`STARVED`], whichever is less. A window with a lower mean
    /// before the cut straddled the upstream's own change (capacity halved within it).
    pub fn throughput_followed_a_cut(&self) -> bool {
        let fell = (1.0 / STARVED).ln() as f32;
        let elasticity = STARVED_ELASTICITY as f32;
        self.after_a_cut(FLAT_WINDOWS, STARVED_CUT, |before, newest| {
            let cut = before.inflight - newest.inflight;
            newest.mean_latency.is_finite()
                && before.mean_latency >= newest.mean_latency
                && before.throughput - newest.throughput >= fell.min(elasticity * cut)
        })
    }

    /// Whether the newest window's mean latency is no lower than it was in a bound window of
    /// the [`TRIM_WINDOWS`] before it that had 1 / [`TRIM_CUT`] of its in-flight or more: the
    /// limit came down by trims too small to tell apart one by one, and the latency stayed.
    pub fn mean_ignored_a_trim(&self) -> bool {
        let kept = TRIM_LATENCY.ln() as f32;
        self.after_a_cut(TRIM_WINDOWS, TRIM_CUT, |before, newest| {
            before.mean_latency.is_finite()
                && newest.mean_latency.is_finite()
                && newest.mean_latency >= before.mean_latency + kept
        })
    }

    /// Whether one of the `windows` windows before the newest was bound with at least
    /// 1 / `cut` of its in-flight, and `shows` holds of the two.
    fn after_a_cut(
        &self,
        windows: usize,
        cut: f64,
        shows: impl Fn(&LogPoint, &LogPoint) -> bool,
    ) -> bool {
        let mut newest_first = self.newest_first();
        let Some(newest) = newest_first.next() else {
            return false;
        };
        let cut = (1.0 / cut).ln() as f32;
        newest_first.take(windows).any(|before| {
            before.bound && before.inflight >= newest.inflight + cut && shows(&before, &newest)
        })
    }

    /// Whether, over the newest windows, latency rose and fell with in-flight while throughput
    /// did not: our own concurrency is queueing at the upstream. This holds even when the
    /// baseline itself was learned under load (a saturated start), which the queue estimate
    /// against that baseline cannot see.
    pub fn shows_self_queueing(&self) -> bool {
        Slopes::over(self.newest_first().take(RECENT_QUEUEING), RECENT_QUEUEING).is_some_and(|s| {
            s.latency >= QUEUEING_LATENCY_SLOPE && s.throughput <= QUEUEING_THROUGHPUT_SLOPE
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Windows at the given in-flight levels, latency = base x (in-flight / capacity) past
    /// capacity, throughput = in-flight / latency (Little's law).
    fn upstream(evidence: &mut Evidence, inflights: &[f64], base: f64, capacity: f64) {
        for &inflight in inflights {
            let latency = base * (inflight / capacity).max(1.0);
            evidence.push(EvidencePoint {
                inflight,
                throughput: inflight / latency,
                latency,
                mean_latency: Some(latency),
                bound: true,
            });
        }
    }

    fn shrinking() -> Vec<f64> {
        (0..20).map(|i| 110.0 - 4.0 * f64::from(i)).collect()
    }

    #[test]
    fn a_slower_upstream_below_capacity_is_an_external_shift() {
        let mut e = Evidence::default();
        upstream(&mut e, &shrinking(), 200e6, 1_000.0);
        assert!(e.shows_external_shift(100e6));
    }

    #[test]
    fn queueing_past_capacity_is_not() {
        let mut e = Evidence::default();
        upstream(&mut e, &shrinking(), 100e6, 20.0);
        assert!(!e.shows_external_shift(100e6));
        assert!(e.shows_self_queueing());
    }

    #[test]
    fn below_capacity_there_is_no_self_queueing() {
        let mut e = Evidence::default();
        upstream(&mut e, &shrinking(), 100e6, 1_000.0);
        assert!(!e.shows_self_queueing());
    }

    #[test]
    fn a_change_of_capacity_inside_the_window_is_not_a_shift() {
        let mut e = Evidence::default();
        // At capacity 100, then at capacity 50: each regime queues, the two pooled would not.
        let high: Vec<f64> = (0..20).map(|i| 130.0 + 2.0 * f64::from(i)).collect();
        let low: Vec<f64> = (0..14).map(|i| 170.0 - 6.0 * f64::from(i)).collect();
        upstream(&mut e, &high, 140e6, 100.0);
        upstream(&mut e, &low, 140e6, 50.0);
        assert!(!e.shows_external_shift(100e6));
    }

    #[test]
    fn without_in_flight_variation_there_is_no_evidence() {
        let mut e = Evidence::default();
        upstream(&mut e, &[30.0; 20], 200e6, 1_000.0);
        assert!(!e.shows_external_shift(100e6));
    }

    #[test]
    fn latency_still_near_the_baseline_is_no_shift() {
        let mut e = Evidence::default();
        upstream(&mut e, &shrinking(), 110e6, 1_000.0);
        assert!(!e.shows_external_shift(100e6));
    }

    #[test]
    fn throughput_falling_with_a_cut_is_told_from_a_queue_draining() {
        let mut below = Evidence::default();
        upstream(&mut below, &[60.0, 20.0], 1e9, 30.0);
        assert!(below.throughput_followed_a_cut(), "cut to below capacity");
        let mut saturated = Evidence::default();
        upstream(&mut saturated, &[120.0, 60.0], 1e9, 30.0);
        assert!(!saturated.throughput_followed_a_cut(), "still at capacity");
    }

    /// Trims of 15 % under the workers: throughput follows in-flight, the mean stays.
    #[test]
    fn throughput_following_a_trim_under_the_workers_is_starvation() {
        let mut trimmed = Evidence::default();
        upstream(&mut trimmed, &[28.0, 23.0], 0.85e9, 32.0);
        assert!(
            trimmed.throughput_followed_a_cut(),
            "28 -> 23 under 32 workers"
        );
        let mut queued = Evidence::default();
        upstream(&mut queued, &[40.0, 34.0], 0.85e9, 32.0);
        assert!(
            !queued.throughput_followed_a_cut(),
            "40 -> 34 over 32 workers"
        );
    }

    /// A window holding the answers from before the capacity halved served more, faster:
    /// its throughput is the old regime's, not one the cut lost.
    #[test]
    fn a_window_from_before_the_upstreams_change_is_no_starvation() {
        let mut e = Evidence::default();
        upstream(&mut e, &[112.0], 0.6e9, 100.0);
        upstream(&mut e, &[86.0], 0.6e9, 50.0);
        assert!(!e.throughput_followed_a_cut());
    }

    /// The limit trimmed by one or two a window, from 90 to 70: under the workers the mean
    /// latency stays where it was, over them it falls with in-flight.
    #[test]
    fn trims_that_left_the_mean_latency_show_no_queue() {
        let trims: Vec<f64> = (0..11).map(|i| 90.0 - 2.0 * f64::from(i)).collect();
        let mut below = Evidence::default();
        upstream(&mut below, &trims, 1e9, 100.0);
        assert!(below.mean_ignored_a_trim(), "under the workers");
        let mut over = Evidence::default();
        upstream(&mut over, &trims, 1e9, 40.0);
        assert!(!over.mean_ignored_a_trim(), "a queue of ours drains");
        let mut short = Evidence::default();
        upstream(&mut short, &trims[..4], 1e9, 100.0);
        assert!(!short.mean_ignored_a_trim(), "trimmed by under 15 %");
    }

    #[test]
    fn saturation_shows_without_the_latency_rising() {
        let e = bound_windows(&[(90.0, 37.0), (50.0, 39.0)]);
        let (s, _) = e.saturation(100e6, (1e9, 2e9)).expect("saturated");
        assert_eq!(s.throughput.round(), 39.0);
    }

    #[test]
    fn the_service_time_is_the_window_that_queued_least() {
        let mut e = Evidence::default();
        // 32 workers at 0.8 s serve 40 per second; in-flight beyond them queues.
        for (inflight, mean_latency) in [(90.0, 2.25), (48.0, 1.2), (24.0, 0.8), (48.0, 1.2)] {
            let throughput = inflight / mean_latency;
            push_bound(
                &mut e,
                (inflight, throughput),
                1.5 * mean_latency * 1e9,
                Some(mean_latency * 1e9),
            );
        }
        let (s, service_p90) = e.saturation(100e6, (1.2e9, 1.8e9)).expect("saturated");
        assert_eq!(s.throughput.round(), 40.0);
        assert_eq!((s.service_mean() / 1e6).round(), 800.0);
        assert_eq!((service_p90 / 1e6).round(), 1200.0);
        assert_eq!(
            s.capacity().round(),
            32.0,
            "the workers, where the newest window's mean reads back its 48 in flight"
        );
    }

    #[test]
    fn a_queue_over_the_service_time_shows_the_saturation_when_no_plateau_does() {
        // Seen in the simulator at 64 workers and 100 clients, 810 ms of service: the onset's
        // windows were the clients' own, and the first cut took in-flight under the workers,
        // so throughput followed in-flight in every bound window after it.
        let onset = [
            (71.9, 73.0, 985.0),
            (51.4, 46.5, 832.0),
            (27.9, 30.5, 872.0),
        ];
        let saturation = |baseline_ms: f64, windows: &[(f64, f64, f64)]| {
            let mut e = Evidence::default();
            for &(inflight, throughput, mean_ms) in windows {
                push_bound(
                    &mut e,
                    (inflight, throughput),
                    1.4 * mean_ms * 1e6,
                    Some(mean_ms * 1e6),
                );
            }
            e.saturation(baseline_ms * 1e6, (872e6, 1.4 * 872e6))
        };
        let (s, service_p90) = saturation(45.0, &onset).expect("saturated");
        assert_eq!((s.service_mean() / 1e6).round(), 832.0);
        assert_eq!((service_p90 / 1e6).round(), 1165.0);
        assert_eq!(
            s.capacity().round(),
            61.0,
            "Little's law: 73 a second at 832 ms keeps 61 workers busy"
        );
        assert!(
            saturation(400.0, &onset).is_none(),
            "under four times the baseline: the heal's to move, not a follow's"
        );
        assert!(
            saturation(45.0, &onset[1..]).is_none(),
            "no window over the service time: an upstream that serves whatever it is sent"
        );
    }

    #[test]
    fn a_window_straddling_the_slowdown_is_not_what_the_upstream_serves() {
        // Measured in the lab (31 ms, then 810 ms on 32 workers): the window the slowdown
        // began in served the healthy rate, its p90 just over the band, a few slow answers
        // pulling its mean over its p90.
        let mut e = Evidence::default();
        e.push(EvidencePoint {
            inflight: 22.0,
            throughput: 158.0,
            latency: 39e6,
            mean_latency: Some(106e6),
            bound: false,
        });
        for (inflight, throughput, p90, mean) in [
            (53.2, 34.0, 1.535, 1.192),
            (30.1, 29.6, 1.556, 1.281),
            (18.4, 31.4, 0.835, 0.810),
        ] {
            push_bound(&mut e, (inflight, throughput), p90 * 1e9, Some(mean * 1e9));
        }
        let (s, _) = e.saturation(31e6, (0.81e9, 0.835e9)).expect("saturated");
        assert_eq!(s.throughput.round(), 34.0, "the most a slow window served");
        assert!(s.served < 35.0, "served {}", s.served);
    }

    /// Records a window the limit bound: its (in-flight, throughput), p90 and mean latency.
    fn push_bound(
        e: &mut Evidence,
        (inflight, throughput): (f64, f64),
        p90: f64,
        mean: Option<f64>,
    ) {
        e.push(EvidencePoint {
            inflight,
            throughput,
            latency: p90,
            mean_latency: mean,
            bound: true,
        });
    }

    /// Bound windows at (in-flight, throughput), all 2 s at p90 with no known mean.
    fn bound_windows(points: &[(f64, f64)]) -> Evidence {
        let mut e = Evidence::default();
        for &(inflight, throughput) in points {
            push_bound(&mut e, (inflight, throughput), 2e9, None);
        }
        e
    }

    #[test]
    fn saturation_is_more_in_flight_buying_under_half_its_rise_in_throughput() {
        let draining = bound_windows(&[(88.0, 38.3), (51.0, 34.0)]);
        assert!(
            draining.saturation(100e6, (1e9, 2e9)).is_some(),
            "1.7x the in-flight bought 1.13x the throughput"
        );
        let below = bound_windows(&[(37.0, 36.5), (30.0, 30.5)]);
        assert!(
            below.saturation(100e6, (1e9, 2e9)).is_none(),
            "1.23x the in-flight bought 1.2x the throughput: the workers were not all busy"
        );
    }

    /// `x` rounded to a tenth.
    fn tenths(x: f64) -> f64 {
        (x * 10.0).round() / 10.0
    }

    #[test]
    fn the_capacity_is_never_more_than_the_least_in_flight_seen_to_saturate() {
        // The least-queued window still queued (a mean of 1.4 s for 0.85 s of service):
        // 37/s x 1.4 s reads 52, but 30 in flight were seen to serve the saturation.
        let mut s = Saturation::new(37.0, 1.4e9, (30.0, 37.0), (37.0, 1.0));
        assert_eq!(s.capacity(), 30.0);
        s.observe(25.0, 29.0, 0.85e9);
        assert_eq!(s.service_mean, 0.85e9, "a window under the workers");
        assert_eq!(
            s.saturating_inflight, 30.0,
            "serving 0.78x the saturation is not saturating it"
        );
        s.observe(60.0, 38.0, 1.6e9);
        assert_eq!(s.throughput, 38.0);
        assert_eq!(
            tenths(s.capacity()),
            30.0,
            "37.5/s x 0.85 s is 31.9, over the 30 seen to saturate"
        );
        s.saturating_inflight = 40.0;
        assert_eq!(tenths(s.capacity()), 31.9);
    }

    #[test]
    fn serving_more_than_ever_lifts_the_bound_of_what_saturated_before() {
        let mut s = Saturation::new(37.0, 0.85e9, (32.0, 37.0), (37.0, 1.0));
        s.observe(36.0, 39.0, 0.9e9);
        assert_eq!(s.saturating_inflight, 32.0, "39/s is the noise of 37");
        s.observe(37.0, 44.0, 0.84e9);
        assert_eq!(s.saturating_inflight, 37.0, "44/s: workers were added");
        assert_eq!(tenths(s.capacity()), 37.0);
    }

    /// Windows of 2 s at saturation serve the workers' rate give or take a tenth: the highest
    /// of them is the noise's highest, and a capacity from it let the limit sit at 1.3x the
    /// workers. The windows that served the saturation are averaged instead.
    #[test]
    fn the_capacity_is_what_the_saturating_windows_served_on_average() {
        let mut e = Evidence::default();
        for throughput in [41.4, 38.0, 39.0, 20.0] {
            push_bound(&mut e, (90.0 - throughput, throughput), 2e9, Some(1e9));
        }
        let (mut s, _) = e.saturation(100e6, (1e9, 2e9)).expect("saturated");
        assert_eq!(s.throughput, 41.4);
        assert_eq!(
            tenths(s.capacity()),
            39.5,
            "20/s is under the saturation; 41.4, 38 and 39 average 39.5"
        );
        s.observe(60.0, 38.5, 1e9);
        assert_eq!(tenths(s.capacity()), 39.2);
    }

    /// A followed upstream at 100 workers whose service time was read 7 % low (the least of
    /// its windows' noisy means): Vegas reads that 7 % as a queue at every limit and trims
    /// one a window, 97 to 82 over 25 windows, while the mean stays.
    #[test]
    fn trims_of_one_a_window_that_leave_the_mean_show_no_queue() {
        let mut e = Evidence::default();
        for i in 0..=25 {
            let inflight = 97.0 - 0.6 * f64::from(i);
            push_bound(&mut e, (inflight, inflight / 1.05), 1.5e9, Some(1.05e9));
        }
        assert!(e.mean_ignored_a_trim());
    }

    /// The incident's 2 s clients: 24.8 in flight served 30.5/s, within the noise of the
    /// 32/s that saturated it first; then 28.5 served 34.5/s, and 24.8 was not saturating
    /// after all. Held to 24.8, the limit stayed under 1.15x that, at 28 on 32 workers.
    #[test]
    fn a_window_serving_more_than_the_least_saturating_one_by_the_noise_replaces_it() {
        let mut s = Saturation::new(32.0, 0.787e9, (27.6, 32.0), (32.0, 1.0));
        s.observe(24.8, 30.5, 0.795e9);
        assert_eq!(s.saturating_inflight, 24.8, "30.5/s is the noise of 32");
        s.observe(28.5, 34.5, 0.849e9);
        assert_eq!(
            s.saturating_inflight, 28.5,
            "34.5/s is not the noise of 30.5"
        );
        assert_eq!(tenths(s.capacity()), 27.2, "Little's law");
    }

    /// The lab's nginx rig: a window that drained the onset's queue served the workers' 39/s
    /// with 24 in flight; at 28 in flight the upstream then served 34/s, so 24 did not
    /// saturate it, and a limit held under 1.15x a capacity of 24 would stay at 28 on 32
    /// workers for the rest of the incident.
    #[test]
    fn a_window_straddling_the_recovery_leaves_the_capacity_alone() {
        // Recovery seed 161: 460 answers in 2 s at a mean of 140 ms, most of them fast, read
        // as saturation a capacity of 230 x 0.14 s = 32 that cut a limit of 38.8 to 37.
        let mut s = Saturation::new(42.0, 0.81e9, (34.5, 42.0), (41.0, 8.0));
        let before = s.capacity();
        s.observe(22.6, 230.0, 0.14e9);
        assert_eq!(s.capacity(), before);
        assert_eq!(s.service_mean(), 0.81e9);
    }

    #[test]
    fn a_window_under_the_saturation_forgets_the_in_flight_that_saturated() {
        let mut s = Saturation::new(39.5, 0.81e9, (24.0, 39.5), (39.5, 1.0));
        assert_eq!(s.capacity(), 24.0);
        s.observe(28.0, 34.5, 0.81e9);
        assert_eq!(tenths(s.capacity()), 32.0, "Little's law alone");
        s.observe(30.0, 39.4, 0.81e9);
        assert_eq!(s.capacity(), 30.0, "30 in flight saturate it");
        s.observe(37.0, 39.5, 0.89e9);
        assert_eq!(s.capacity(), 30.0, "and more in flight only queue");
    }

    /// The lab's workers out of step (means from its windows): a try of 33 on 32 queues one
    /// request a fraction of a round, which no answer's wait shows and the mean does.
    #[test]
    fn a_queue_only_the_mean_shows_lowers_the_count_of_workers_in_step() {
        let mut s = Saturation::new(39.5, 0.81e9, (32.0, 39.5), (39.5, 1.0));
        s.observe_steps(38.0, Some(5.0 / 33.0), true, (36.0, 0.9e9));
        assert_eq!(s.in_step_workers(), Some(33.0));
        s.observe_steps(33.0, Some(0.0), true, (32.3, 0.818e9));
        assert_eq!(s.in_step_workers(), Some(33.0), "1 % over is the noise");
        s.observe_steps(33.0, Some(0.0), false, (32.9, 0.83e9));
        assert_eq!(
            s.in_step_workers(),
            Some(33.0),
            "the clients' own in-flight"
        );
        s.observe_steps(33.0, Some(0.0), true, (32.9, 0.83e9));
        assert_eq!(s.in_step_workers(), Some(32.0), "32.9 x 810 / 830");
    }

    #[test]
    fn clearing_forgets_the_evidence() {
        let mut e = Evidence::default();
        upstream(&mut e, &shrinking(), 200e6, 1_000.0);
        e.clear();
        assert!(!e.shows_external_shift(100e6));
    }
}
