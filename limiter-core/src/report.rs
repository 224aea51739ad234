//! What a closed window showed and what the controller made of it: the debug log's answer
//! to why a limit moved, read from outside without a debugger.

/// One window's close. Latencies in nanoseconds, throughput in answers per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowReport {
    /// When the window closed (the controller's clock).
    pub at_ns: u64,
    /// How long it was open.
    pub duration_ns: u64,
    pub samples: u32,
    pub errors: u32,
    pub timeouts: u32,
    /// Answers that said the upstream is overloaded (HTTP 429, 503).
    pub overloads: u32,
    /// Connects the limit refused while it was open.
    pub sheds: u32,
    pub p90_ns: Option<f64>,
    pub mean_latency_ns: f64,
    /// In-flight when its requests started: on average, and at most.
    pub mean_inflight: f64,
    pub peak_inflight: u32,
    pub throughput: f64,
    /// The latency the controller took as the destination's normal after this window.
    pub baseline_ns: Option<f64>,
    /// While the limit follows a slow upstream: its service time, the capacity the limit
    /// stays near, and its workers when they answer in step and were counted.
    pub service_ns: Option<f64>,
    pub capacity: Option<f64>,
    pub workers: Option<f64>,
    /// The limit before this window's verdict and after it (before any slots held by
    /// abandoned requests are taken off what is published).
    pub limit_before: f64,
    pub limit: f64,
}
