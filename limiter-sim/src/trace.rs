//! What a run recorded, and the queries the criteria and pictures ask of it.

use crate::breaker::SlowCallBreaker;
use crate::clock::{as_secs, Nanos, NANOS_PER_SEC};

/// The limit and in-flight count right after a controller update.
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    pub at: Nanos,
    pub limit: u32,
    pub inflight: u32,
}

/// Counters for one second of virtual time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Second {
    /// Requests that ended well (last byte received, connection closed).
    pub completed: u32,
    pub failed: u32,
    /// Requests whose client gave up at its deadline.
    pub timed_out: u32,
    /// Answered 429 by an upstream over its allowance (counted in `failed` too).
    pub overloaded: u32,
    /// Connects refused: at the limit, past the queue's bounds, or at its maximum wait.
    pub shed: u32,
    /// Connects that joined the queue (overflow = queue).
    pub queued: u32,
    /// The highest in-flight count reached in this second.
    pub peak_inflight: u32,
    /// Median and p90 time to first byte of the samples taken this second.
    pub p50_s: Option<f64>,
    pub p90_s: Option<f64>,
}

/// A time to first byte, or the time a client waited before it gave up, and when it ended.
#[derive(Clone, Copy, Debug)]
pub struct Waited {
    pub at: Nanos,
    pub seconds: f32,
}

/// Everything a run recorded.
#[derive(Clone, Debug)]
pub struct Trace {
    pub ticks: Vec<Tick>,
    pub seconds: Vec<Second>,
    /// Every answer's time to first byte, in the order they came.
    pub answers: Vec<Waited>,
    /// Every request a client gave up on, with how long it had waited.
    pub gave_up: Vec<Waited>,
    pub first_shed: Option<Nanos>,
    /// When the reference slow-call breaker, watching the same calls, would have opened.
    pub breaker_opened: Option<Nanos>,
}

impl Trace {
    /// Limits in force during [from, to), one per update interval.
    pub fn limits(&self, from: Nanos, to: Nanos) -> Vec<f64> {
        self.ticks_in(from, to)
            .map(|t| f64::from(t.limit))
            .collect()
    }

    pub fn limit_at(&self, at: Nanos) -> u32 {
        let after = self.ticks.partition_point(|t| t.at <= at);
        self.ticks[after.saturating_sub(1)].limit
    }

    pub fn min_limit(&self, from: Nanos, to: Nanos) -> u32 {
        self.ticks_in(from, to).map(|t| t.limit).min().unwrap_or(0)
    }

    pub fn max_limit(&self, from: Nanos, to: Nanos) -> u32 {
        self.ticks_in(from, to).map(|t| t.limit).max().unwrap_or(0)
    }

    pub fn peak_inflight(&self, from: Nanos, to: Nanos) -> u32 {
        self.seconds_in(from, to)
            .iter()
            .map(|s| s.peak_inflight)
            .max()
            .unwrap_or(0)
    }

    pub fn shed(&self, from: Nanos, to: Nanos) -> u32 {
        self.seconds_in(from, to).iter().map(|s| s.shed).sum()
    }

    /// Requests that failed or whose client gave up at its deadline.
    pub fn failed_or_timed_out(&self, from: Nanos, to: Nanos) -> u32 {
        self.seconds_in(from, to)
            .iter()
            .map(|s| s.failed + s.timed_out)
            .sum()
    }

    /// Successful completions per second over [from, to).
    pub fn goodput(&self, from: Nanos, to: Nanos) -> f64 {
        let seconds = self.seconds_in(from, to);
        let done: u32 = seconds.iter().map(|s| s.completed).sum();
        f64::from(done) / seconds.len().max(1) as f64
    }

    /// The median of the per-second median latencies over (from, to): NaN without samples.
    pub fn typical_p50(&self, phase: (Nanos, Nanos)) -> f64 {
        self.typical(phase, |s| s.p50_s)
    }

    /// The median of the per-second p90 latencies over (from, to): NaN without samples.
    pub fn typical_p90(&self, phase: (Nanos, Nanos)) -> f64 {
        self.typical(phase, |s| s.p90_s)
    }

    fn typical(&self, (from, to): (Nanos, Nanos), pick: fn(&Second) -> Option<f64>) -> f64 {
        let values: Vec<f64> = self.seconds_in(from, to).iter().filter_map(pick).collect();
        quantile(&values, 0.5).unwrap_or(f64::NAN)
    }

    /// The time to first byte at quantile `q` of the requests that ended in [from, to),
    /// counting a request given up on at the time its client waited: `None` without any.
    pub fn waited_quantile(&self, from: Nanos, to: Nanos, q: f64) -> Option<f64> {
        let within = |w: &&Waited| w.at >= from && w.at < to;
        let waited: Vec<f64> = self
            .answers
            .iter()
            .chain(&self.gave_up)
            .filter(within)
            .map(|w| f64::from(w.seconds))
            .collect();
        quantile(&waited, q)
    }

    /// The second a point in time falls in, if the run lasted that long.
    pub fn second_at(&self, at: Nanos) -> Option<&Second> {
        self.seconds.get((at / NANOS_PER_SEC) as usize)
    }

    pub fn ticks_in(&self, from: Nanos, to: Nanos) -> impl Iterator<Item = &Tick> {
        self.ticks.iter().filter(move |t| t.at >= from && t.at < to)
    }

    fn seconds_in(&self, from: Nanos, to: Nanos) -> &[Second] {
        let end = ((to / NANOS_PER_SEC) as usize).min(self.seconds.len());
        let start = ((from / NANOS_PER_SEC) as usize).min(end);
        &self.seconds[start..end]
    }
}

/// The value at quantile `q` (0..=1) of `values`, by nearest rank; `None` when empty.
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (q * (sorted.len() - 1) as f64).round() as usize;
    Some(sorted[rank])
}

/// Builds a [`Trace`] while the engine runs.
pub struct Recorder {
    trace: Trace,
    breaker: SlowCallBreaker,
    sampling_second: usize,
    samples: Vec<f64>,
}

impl Recorder {
    pub fn new(duration: Nanos) -> Self {
        let seconds = duration.div_ceil(NANOS_PER_SEC) as usize;
        Self {
            trace: Trace {
                ticks: Vec::with_capacity(seconds * 10 + 1),
                seconds: vec![Second::default(); seconds],
                answers: Vec::new(),
                gave_up: Vec::new(),
                first_shed: None,
                breaker_opened: None,
            },
            breaker: SlowCallBreaker::default(),
            sampling_second: 0,
            samples: Vec::new(),
        }
    }

    pub fn tick(&mut self, at: Nanos, limit: u32, inflight: u32) {
        self.trace.ticks.push(Tick {
            at,
            limit,
            inflight,
        });
    }

    pub fn admitted(&mut self, at: Nanos, inflight: u32) {
        let second = self.second(at);
        second.peak_inflight = second.peak_inflight.max(inflight);
    }

    pub fn shed(&mut self, at: Nanos) {
        self.trace.first_shed.get_or_insert(at);
        self.second(at).shed += 1;
    }

    pub fn queued(&mut self, at: Nanos) {
        self.second(at).queued += 1;
    }

    pub fn sample(&mut self, at: Nanos, latency: Nanos) {
        let second = (at / NANOS_PER_SEC) as usize;
        if second != self.sampling_second {
            self.close_second();
            self.sampling_second = second;
        }
        let seconds = as_secs(latency);
        self.samples.push(seconds);
        self.trace.answers.push(Waited {
            at,
            seconds: seconds as f32,
        });
    }

    /// A connection ended; `duration` is from `connect()` to close, as a breaker sees it.
    pub fn ended(&mut self, at: Nanos, duration: Nanos, failed: bool) {
        let second = self.second(at);
        if failed {
            second.failed += 1;
        } else {
            second.completed += 1;
        }
        self.breaker.record(at, duration);
    }

    /// The upstream answered 429.
    pub fn overloaded(&mut self, at: Nanos) {
        self.second(at).overloaded += 1;
    }

    /// A client gave up on a request after `waited`, closing its connection.
    pub fn timed_out(&mut self, at: Nanos, waited: Nanos) {
        self.second(at).timed_out += 1;
        self.breaker.record(at, waited);
        self.trace.gave_up.push(Waited {
            at,
            seconds: as_secs(waited) as f32,
        });
    }

    pub fn finish(mut self) -> Trace {
        self.close_second();
        self.trace.breaker_opened = self.breaker.opened_at();
        self.trace
    }

    fn second(&mut self, at: Nanos) -> &mut Second {
        let index = ((at / NANOS_PER_SEC) as usize).min(self.trace.seconds.len() - 1);
        &mut self.trace.seconds[index]
    }

    fn close_second(&mut self) {
        let index = self.sampling_second.min(self.trace.seconds.len() - 1);
        let second = &mut self.trace.seconds[index];
        second.p50_s = quantile(&self.samples, 0.5);
        second.p90_s = quantile(&self.samples, 0.9);
        self.samples.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::secs;

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=11).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(6.0));
        assert_eq!(quantile(&v, 0.9), Some(10.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn per_second_counters_and_latency() {
        let mut r = Recorder::new(secs(3.0));
        r.tick(secs(0.0), 20, 0);
        r.admitted(secs(0.5), 3);
        r.sample(secs(0.5), secs(0.2));
        r.sample(secs(0.7), secs(0.4));
        r.ended(secs(0.7), secs(0.4), false);
        r.sample(secs(1.5), secs(1.0));
        r.shed(secs(2.5));
        r.tick(secs(2.5), 10, 0);
        let t = r.finish();
        assert_eq!(t.seconds[0].completed, 1);
        assert_eq!(t.seconds[0].peak_inflight, 3);
        assert_eq!(t.seconds[0].p50_s, Some(0.4));
        assert_eq!(t.seconds[1].p50_s, Some(1.0));
        assert_eq!(t.shed(secs(0.0), secs(3.0)), 1);
        assert_eq!(t.first_shed, Some(secs(2.5)));
        assert_eq!(t.limit_at(secs(1.0)), 20);
        assert_eq!(t.limit_at(secs(2.6)), 10);
    }
}
