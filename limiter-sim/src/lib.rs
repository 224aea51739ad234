//! Deterministic discrete-event simulation of the limiter in the loop.
//!
//! An [`upstream`] with C workers and a queue serves requests sent by [`clients`]
//! (open loop at a rate, or closed loop with N workers); the kernel's [`admission`] rule
//! refuses a connect when in-flight has reached the limit; a controller from
//! `limiter-core` (or an [`external`] process) sets that limit from exactly the signal the
//! kernel produces. Everything runs in virtual time from a seed, so a run is a pure
//! function of (scenario, algorithm, seed). The [`scenarios`] of the specification judge
//! the traces against pass/fail criteria; [`scorecard`] plays all of them for every
//! built-in algorithm and writes the results and pictures into the docs.

pub mod admission;
pub mod algorithm;
pub mod breaker;
pub mod cli;
pub mod clients;
pub mod clock;
pub mod criteria;
pub mod engine;
pub mod external;
pub mod plot;
pub mod processor_sharing;
pub mod report;
pub mod scenarios;
pub mod schedule;
pub mod scorecard;
pub mod shapes;
pub mod sweep;
pub mod trace;
pub mod upstream;

pub use algorithm::AlgorithmChoice;
pub use cli::{run, SimulateArgs, DEFAULT_SEED};
pub use scorecard::{expected_failure, scorecard, EXPECTED_FAILURES};
pub use sweep::{sweep, SeedFailure};
