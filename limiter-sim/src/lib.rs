//! Deterministic discrete-event simulation of the limiter in the loop.

pub mod admission;
pub mod breaker;
pub mod clients;
pub mod clock;
pub mod engine;
pub mod schedule;
pub mod trace;
pub mod upstream;
