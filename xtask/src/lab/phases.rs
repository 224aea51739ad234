//! A run's three phases, and the loop that walks through them: the upstream is switched at
//! each phase's start, and the limiter is sampled every few hundred milliseconds.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::bench::interrupt;

/// How often the limit, in-flight and connections are read.
pub const SAMPLE_PERIOD: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Healthy,
    Incident,
    Recovery,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::Healthy, Phase::Incident, Phase::Recovery];

    pub fn label(self) -> &'static str {
        match self {
            Phase::Healthy => "healthy",
            Phase::Incident => "incident",
            Phase::Recovery => "recovery",
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Phases {
    durations: [Duration; 3],
}

impl Phases {
    pub fn new(healthy: Duration, incident: Duration, recovery: Duration) -> Self {
        Phases {
            durations: [healthy, incident, recovery],
        }
    }

    pub fn duration(&self, phase: Phase) -> Duration {
        self.durations[phase as usize]
    }

    pub fn total(&self) -> Duration {
        self.durations.iter().sum()
    }

    /// Start and end of `phase`, in seconds from the run's start.
    pub fn window(&self, phase: Phase) -> (f64, f64) {
        let start: Duration = self.durations[..phase as usize].iter().sum();
        let start = start.as_secs_f64();
        (start, start + self.duration(phase).as_secs_f64())
    }

    /// The phase at `at_s` seconds from the start (the last one past the end).
    pub fn at(&self, at_s: f64) -> Phase {
        Phase::ALL
            .into_iter()
            .find(|&p| at_s < self.window(p).1)
            .unwrap_or(Phase::Recovery)
    }

    /// From `start` to the end: `enter` at each phase's start, `sample` every
    /// SAMPLE_PERIOD with the seconds since `start`. On a busy machine a reading can take
    /// longer than the period: the ones missed are skipped, so that the phases keep to the
    /// clock. Ends early when interrupted.
    pub fn walk(
        &self,
        start: Instant,
        mut enter: impl FnMut(Phase) -> Result<()>,
        mut sample: impl FnMut(f64) -> Result<()>,
    ) -> Result<()> {
        let mut entered = 0;
        let mut next = start;
        loop {
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            interrupt::check()?;
            let elapsed = start.elapsed();
            let at_s = elapsed.as_secs_f64();
            // A late wake-up may land past a whole phase, or past the end: every phase is
            // still entered, in order, so that the run always ends the way it should.
            while entered < Phase::ALL.len() && entered <= self.at(at_s) as usize {
                enter(Phase::ALL[entered])?;
                entered += 1;
            }
            if elapsed > self.total() {
                return Ok(());
            }
            sample(at_s)?;
            next = (next + SAMPLE_PERIOD).max(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_follow_each_other_and_the_last_one_holds_past_the_end() {
        let secs = Duration::from_secs;
        let p = Phases::new(secs(30), secs(60), secs(30));
        assert_eq!(p.total(), secs(120));
        assert_eq!(p.window(Phase::Incident), (30.0, 90.0));
        assert_eq!(p.at(0.0), Phase::Healthy);
        assert_eq!(p.at(29.9), Phase::Healthy);
        assert_eq!(p.at(30.0), Phase::Incident);
        assert_eq!(p.at(90.0), Phase::Recovery);
        assert_eq!(p.at(500.0), Phase::Recovery);
    }

    #[test]
    fn a_walk_enters_every_phase_once_in_order_and_samples_throughout() {
        let ms = Duration::from_millis;
        let p = Phases::new(ms(400), ms(400), ms(400));
        let (mut entered, mut samples) = (Vec::new(), 0);
        p.walk(
            Instant::now(),
            |phase| {
                entered.push(phase);
                Ok(())
            },
            |_| {
                samples += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(entered, Phase::ALL);
        // One at the start at least, and never more than one per period.
        assert!((1..=7).contains(&samples), "{samples} samples");
    }
}
