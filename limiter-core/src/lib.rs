//! Adaptive concurrency control, free of any kernel or async runtime dependency.
//!
//! A [`Controller`] owns one destination: it is fed the latency samples and outcomes the
//! kernel reports and answers with the concurrency limit to enforce. Time is passed in
//! explicitly (nanoseconds on a monotonic clock), so every controller is deterministic.
//!
//! Per destination: window -> p90 -> median of five windows -> smoothing
//! -> a baseline that heals on evidence -> one [`LimitAlgorithm`] -> growth guards -> bounds.
//! The rules, their defaults and provenance, and the measured costs are in `docs/control.md`.

mod abandoned;
pub mod algorithms;
mod baseline;
pub mod config;
mod controller;
mod demand;
mod evidence;
mod filter;
mod guard;
pub mod quantile;
mod recovery;
mod report;
mod slow_start;
mod steps;
mod window;

pub use algorithms::{AnyAlgorithm, LatencyView, LimitAlgorithm, MeanLatency, Verdict};
pub use config::{Algorithm, ControlConfig, Limits, Pipeline, UnknownAlgorithm};
pub use controller::DestinationController;
pub use report::WindowReport;

/// What happened to a request, besides a latency sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The upstream failed the request (reset while awaiting a response, connect refused).
    Error,
    /// The connect timed out.
    Timeout,
    /// The client closed the connection while awaiting a response, `waited_ns` after the
    /// request started. A wait longer than the destination normally takes is the client
    /// giving up (a timeout); a shorter one is a goodbye: a last message that gets no reply
    /// (PostgreSQL Terminate, MySQL COM_QUIT), which says nothing about the destination.
    GaveUp { waited_ns: u64 },
    /// The upstream closed the connection while a response was awaited, `waited_ns` after the
    /// request started. Longer than the destination normally takes, it hung up on the request
    /// (an error); shorter, it answered a client's goodbye by closing.
    HungUp { waited_ns: u64 },
    /// The limiter itself refused the request: contributes nothing to the estimate.
    Shed,
    /// The upstream answered, but its answer could not be timed: which bytes answered the
    /// request cannot be read from outside (the first exchanges of a TLS 1.3 connection).
    Untimed,
    /// The upstream answered that it is overloaded (HTTP 429, 503): lowers the limit as a
    /// timeout does, and the limit it answered so at is no healthy one to return to.
    Overload,
}

impl Outcome {
    /// What an HTTP answer's status says, where it is not a latency sample: an overload
    /// answer (429 Too Many Requests, 503 Service Unavailable), another 5xx an error;
    /// anything else (2xx, 3xx, and 4xx: the request's fault, answered) is a healthy
    /// sample, `None`.
    pub fn of_http_status(status: u32) -> Option<Outcome> {
        match status {
            429 | 503 => Some(Outcome::Overload),
            500..=599 => Some(Outcome::Error),
            _ => None,
        }
    }
}

/// The per-destination control loop: samples and outcomes in, a limit out.
pub trait Controller {
    /// A request/response exchange took `latency_ns` to its first response byte;
    /// `inflight` is the destination's in-flight count when the request started.
    fn on_sample(&mut self, now_ns: u64, latency_ns: u64, inflight: u32);
    /// A request ended without a usable latency sample.
    fn on_outcome(&mut self, now_ns: u64, outcome: Outcome);
    /// A connection was established; `inflight` connections held slots when it was
    /// admitted, itself included. Demand shows here an answer's latency before the answers
    /// to it do.
    fn on_connect(&mut self, _now_ns: u64, _inflight: u32) {}
    /// Called on the update timer (every 100 ms); returns the limit to enforce from now on.
    fn update(&mut self, now_ns: u64) -> u32;
    /// As [`Controller::update`]; `report` hears of the window this update closed, if any.
    fn update_reporting(&mut self, now_ns: u64, _report: &mut dyn FnMut(&WindowReport)) -> u32 {
        self.update(now_ns)
    }
    /// The limit last returned by [`Controller::update`] (the initial limit before that).
    fn limit(&self) -> u32;
    /// The no-load latency the controller currently believes in, if it has one.
    fn baseline_ns(&self) -> Option<u64> {
        None
    }
    /// The smoothed p90 latency of recent windows, if any window has closed.
    fn p90_ns(&self) -> Option<u64> {
        None
    }
    /// True when [`Controller::update`] has nothing to decide until the next sample or
    /// outcome (it would only open a new, empty window), so a caller may skip it till then.
    fn is_quiet(&self) -> bool {
        false
    }
}

/// Builds the controller `cfg` describes for one destination, its first window opening at
/// `now_ns`.
pub fn controller(cfg: &ControlConfig, now_ns: u64) -> Box<dyn Controller + Send> {
    Box::new(DestinationController::new(cfg, now_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_answers_say_overload_error_or_nothing_but_their_latency() {
        assert_eq!(Outcome::of_http_status(429), Some(Outcome::Overload));
        assert_eq!(Outcome::of_http_status(503), Some(Outcome::Overload));
        assert_eq!(Outcome::of_http_status(500), Some(Outcome::Error));
        assert_eq!(Outcome::of_http_status(502), Some(Outcome::Error));
        for healthy in [0, 200, 301, 404, 499] {
            assert_eq!(Outcome::of_http_status(healthy), None, "{healthy}");
        }
    }
}
