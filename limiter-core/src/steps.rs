//! Workers that answer in step: an upstream whose service time does not vary (a fixed sleep,
//! a timer), whose workers a slowdown started together. Each round of W answers then holds
//! the requests that waited through the round before, so a request queued over the workers
//! waits up to a whole service time, where with service times that vary a queue of k waits
//! about k / W of one. Such an upstream is held at its workers, counted from the waits.
//!
//! With L in flight, L - W of each round's W answers waited: W = L / (1 + share waited).
//! The count rests on a share of answers, not on how many rounds a window held, which
//! throughput does (windows of two service times hold two or three rounds).

/// Bound windows running with no answer waiting before one more request in flight is tried
/// (workers may have been added).
const CALM_WINDOWS: u8 = 5;
/// Times a count is lowered for waits at or under it before they are taken for the
/// upstream's variety: a count read two high at a follow's start (its first window at a
/// level the limit has just jumped to holds fewer waits than the level does) needs two.
const LOWERINGS: u8 = 2;

/// What the answers of a followed upstream tell of its workers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Steps {
    /// The newest window's answers did not come in step, or none has yet.
    #[default]
    Unknown,
    /// The workers as counted.
    InStep(Count),
    /// Slow answers came at or under the workers counted in [`LOWERINGS`] + 1 windows
    /// running, the count lowered after each but the last: they are the upstream's own
    /// variety (a cache's misses among its hits), not waits, and the margin over its
    /// capacity keeps it busy until the follow ends.
    Vary,
}

/// A count of workers and how it came about.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Count {
    workers: f32,
    /// Bound windows running in which no answer waited.
    calm_windows: u8,
    /// The count was raised by one to try, not counted from waits: waits at it are the
    /// workers' bound, not variety.
    probed: bool,
    /// Times running, up to the newest window, the count was lowered for slow answers at or
    /// under it.
    lowered: u8,
}

impl Count {
    fn new(workers: f32, lowered: u8) -> Self {
        Count {
            workers,
            calm_windows: 0,
            probed: false,
            lowered,
        }
    }
}

/// The workers `inflight` in step hold when `share` of the answers waited for one. A window
/// ends inside a round, so the waits counted are short by a few: the count is rounded down
/// from a quarter over a whole number.
fn counted(inflight: f64, share: f64) -> f32 {
    (inflight / (1.0 + share) + 0.25).floor() as f32
}

/// The workers `inflight` in step hold when `share` of the answers waited, to the nearest
/// whole number: for waits at or under a count, which say it is high by one or more. With
/// the in-flight a request or two over the workers, a window's two or three rounds hold two
/// or three waits, and one more of them reads a worker fewer than there are.
fn nearest(inflight: f64, share: f64) -> f32 {
    (inflight / (1.0 + share)).round() as f32
}

impl Steps {
    /// The workers, when the answers came in step.
    pub fn workers(&self) -> Option<f64> {
        match self {
            Steps::InStep(count) => Some(f64::from(count.workers)),
            Steps::Unknown | Steps::Vary => None,
        }
    }

    /// Takes in a window seen while following: the highest in-flight its requests started
    /// at (not the mean: in step, the requests that start right after a round ends see the
    /// in-flight it just freed), the share of its answers that waited when they came in step
    /// (see `WindowSummary::waited_share`), and whether the limit bound it.
    ///
    /// A window across a change of the limit mixes answers from two levels, and reads more
    /// workers than there are; so a count only ever falls, except by a try. Waits at or
    /// under a count it did not try say it is high, the lab's 33 of 32 (its workers were not
    /// all in step, and some waits were too short to count): it is lowered (see
    /// [`nearest`]), up to [`LOWERINGS`] times running, and if they come again they were no
    /// waits.
    pub fn observe(&mut self, inflight: f64, waited_share: Option<f64>, bound: bool) {
        *self = match (*self, waited_share) {
            (Steps::Vary, _) => Steps::Vary,
            (_, None) => Steps::Unknown,
            (Steps::Unknown, Some(share)) if share > 0.0 => {
                Steps::InStep(Count::new(counted(inflight, share), 0))
            }
            (Steps::Unknown, Some(_)) => Steps::Unknown,
            (Steps::InStep(count), Some(share)) if share > 0.0 => {
                let under = !count.probed && inflight <= f64::from(count.workers);
                if !under {
                    let workers = counted(inflight, share);
                    let workers = if count.probed {
                        workers
                    } else {
                        workers.min(count.workers)
                    };
                    Steps::InStep(Count::new(workers, 0))
                } else if count.lowered >= LOWERINGS {
                    Steps::Vary
                } else {
                    let workers = nearest(inflight, share).min(count.workers - 1.0);
                    Steps::InStep(Count::new(workers, count.lowered + 1))
                }
            }
            (Steps::InStep(count), Some(_)) if bound => {
                let calm_windows = count.calm_windows + 1;
                Steps::InStep(if calm_windows >= CALM_WINDOWS {
                    Count {
                        workers: count.workers + 1.0,
                        calm_windows: 0,
                        probed: true,
                        lowered: 0,
                    }
                } else {
                    Count {
                        calm_windows,
                        lowered: 0,
                        ..count
                    }
                })
            }
            (steps, Some(_)) => steps,
        };
    }

    /// A window whose mean showed a queue that no answer's wait did: Little's law reads
    /// `workers` (its mean in-flight times the service time over its mean latency). A count
    /// over them falls to them, its calm windows counted afresh.
    pub fn lower_to(&mut self, workers: f64) {
        let workers = workers.round() as f32;
        if let Steps::InStep(count) = self {
            if workers < count.workers {
                *count = Count::new(workers, 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lab's upstream sleeps exactly its service time: at 37 in flight on 32 workers,
    /// 5 of each round's 32 answers had waited through the round before.
    #[test]
    fn workers_are_counted_from_the_answers_that_waited_and_tried_one_more_when_calm() {
        let mut s = Steps::default();
        s.observe(37.0, Some(5.0 / 32.0), true);
        assert_eq!(s.workers(), Some(32.0));
        for calm in 1..CALM_WINDOWS {
            s.observe(32.0, Some(0.0), true);
            assert_eq!(s.workers(), Some(32.0), "calm window {calm}");
        }
        s.observe(32.0, Some(0.0), true);
        assert_eq!(s.workers(), Some(33.0), "one more tried");
        s.observe(33.0, Some(1.0 / 32.0), true);
        assert_eq!(s.workers(), Some(32.0), "and waited for");
        s.observe(20.0, Some(0.0), false);
        assert_eq!(
            s.workers(),
            Some(32.0),
            "the clients' own in-flight says nothing"
        );
        s.observe(32.0, None, true);
        assert_eq!(s.workers(), None, "answers not in step: the margin's");
        s.observe(37.0, Some(5.0 / 32.0), true);
        assert_eq!(s.workers(), Some(32.0));
    }

    /// After a cut from 37 to 33, a window holds answers from both levels: fewer waits than
    /// at 37, with 37 its highest in-flight.
    #[test]
    fn a_window_across_a_cut_does_not_raise_the_count() {
        let mut s = Steps::default();
        s.observe(37.0, Some(0.16), true);
        assert_eq!(s.workers(), Some(32.0));
        s.observe(37.0, Some(0.09), true);
        assert_eq!(s.workers(), Some(32.0), "37 / 1.09 reads 34");
    }

    /// The lab's workers out of step: at a try of 33 on 32 the queued request waited under a
    /// quarter of a round, no answer counted as a wait, and the mean read 830 ms for 810.
    #[test]
    fn a_queue_the_mean_shows_lowers_the_count_by_littles_law() {
        let mut s = Steps::InStep(Count::new(33.0, 0));
        s.lower_to(32.9 * 810.0 / 830.0);
        assert_eq!(s.workers(), Some(32.0));
        s.lower_to(31.3);
        assert_eq!(s.workers(), Some(31.0), "a count only falls by it");
        s.lower_to(33.0);
        assert_eq!(s.workers(), Some(31.0), "and never rises by it");
        let mut unknown = Steps::default();
        unknown.lower_to(20.0);
        assert_eq!(unknown.workers(), None, "no count, nothing to lower");
    }

    /// A count read high (34 of 32) meets waits at it: it is lowered before the slow
    /// answers are taken for variety.
    #[test]
    fn waits_under_a_count_lower_it_once() {
        let mut s = Steps::InStep(Count::new(34.0, 0));
        s.observe(34.0, Some(2.0 / 32.0), true);
        assert_eq!(s.workers(), Some(32.0));
        s.observe(32.0, Some(0.0), true);
        assert_eq!(s.workers(), Some(32.0), "no wait at the workers");
        s.observe(32.0, Some(0.01), true);
        assert_eq!(s.workers(), Some(31.0), "a request the count was short by");
        s.observe(31.0, Some(0.0), true);
        assert_eq!(
            s.workers(),
            Some(31.0),
            "and tried again after calm windows"
        );
    }

    /// The lab's count at a follow's start read 34 of 32, and the waits at 34 read 33 (waits
    /// over workers out of step are too short to count): the waits at 33 lower it again.
    #[test]
    fn a_count_two_high_is_lowered_twice() {
        let mut s = Steps::InStep(Count::new(34.0, 0));
        s.observe(34.0, Some(0.02), true);
        assert_eq!(s.workers(), Some(33.0));
        s.observe(33.0, Some(0.02), true);
        assert_eq!(s.workers(), Some(32.0), "not the upstream's variety yet");
        s.observe(32.0, Some(0.0), true);
        assert_eq!(s.workers(), Some(32.0));
    }

    /// At one over 32 workers a round of 32 answers holds one wait, and a window of 2.2
    /// rounds two: one wait more reads 31.7 workers, which is 32, not 31.
    #[test]
    fn a_wait_more_at_one_over_the_workers_does_not_count_one_fewer() {
        let mut s = Steps::InStep(Count::new(33.0, 0));
        s.observe(33.0, Some(3.0 / 71.0), true);
        assert_eq!(s.workers(), Some(32.0));
    }

    /// Nine of ten answers are cache hits of exactly 10 ms and one a miss of 100 ms: the
    /// misses are not waits, and fewer in flight does not make them fewer.
    #[test]
    fn slow_answers_that_stay_under_the_count_are_the_upstreams_variety() {
        let mut s = Steps::default();
        s.observe(40.0, Some(0.1), true);
        assert_eq!(s.workers(), Some(36.0));
        s.observe(36.0, Some(0.1), true);
        assert_eq!(s.workers(), Some(33.0));
        s.observe(33.0, Some(0.1), true);
        assert_eq!(s.workers(), Some(30.0));
        s.observe(30.0, Some(0.1), true);
        assert_eq!(s.workers(), None, "not 27, then 25...");
        s.observe(40.0, Some(0.1), true);
        assert_eq!(s.workers(), None, "until the follow ends");
    }
}
