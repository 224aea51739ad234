//! Values that change over a run: capacity, latency factor, error rate.

use crate::clock::{secs, Nanos};

/// A piecewise-linear function of time. Two points at the same instant make a step.
#[derive(Clone, Debug)]
pub struct Schedule {
    points: Vec<(Nanos, f64)>,
}

impl Schedule {
    /// The same value for the whole run.
    pub fn constant(value: f64) -> Self {
        Self {
            points: vec![(0, value)],
        }
    }

    /// Jump to `value` at `at_s` seconds and stay there.
    pub fn step(mut self, at_s: f64, value: f64) -> Self {
        let at = secs(at_s);
        let before = self.last();
        self.points.push((at, before));
        self.points.push((at, value));
        self
    }

    /// Move linearly from the current value to `value` between `from_s` and `to_s`.
    pub fn ramp(mut self, from_s: f64, to_s: f64, value: f64) -> Self {
        let before = self.last();
        self.points.push((secs(from_s), before));
        self.points.push((secs(to_s), value));
        self
    }

    pub fn at(&self, t: Nanos) -> f64 {
        let after = self.points.partition_point(|&(pt, _)| pt <= t);
        match (after.checked_sub(1), self.points.get(after)) {
            (None, _) => self.points[0].1,
            (Some(i), None) => self.points[i].1,
            (Some(i), Some(&(t1, v1))) => {
                let (t0, v0) = self.points[i];
                v0 + (v1 - v0) * (t - t0) as f64 / (t1 - t0) as f64
            }
        }
    }

    /// The instants where the value starts to change, so the engine can act on them.
    pub fn breakpoints(&self) -> impl Iterator<Item = Nanos> + '_ {
        self.points.iter().map(|&(t, _)| t).filter(|&t| t > 0)
    }

    fn last(&self) -> f64 {
        self.points.last().map_or(0.0, |&(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_hold_until_the_next_change() {
        let s = Schedule::constant(40.0).step(200.0, 20.0).step(400.0, 40.0);
        assert_eq!(s.at(secs(0.0)), 40.0);
        assert_eq!(s.at(secs(199.9)), 40.0);
        assert_eq!(s.at(secs(200.0)), 20.0);
        assert_eq!(s.at(secs(399.0)), 20.0);
        assert_eq!(s.at(secs(1000.0)), 40.0);
    }

    #[test]
    fn ramps_interpolate_linearly() {
        let s = Schedule::constant(1.0).ramp(100.0, 200.0, 3.0);
        assert_eq!(s.at(secs(50.0)), 1.0);
        assert!((s.at(secs(150.0)) - 2.0).abs() < 1e-9);
        assert_eq!(s.at(secs(250.0)), 3.0);
    }
}
