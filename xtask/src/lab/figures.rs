//! From requests and readings to the figures of a phase: goodput, latency, errors,
//! connections held, what the limiter shed, and how long recovery took.

use super::{access_log::Request, sampler::Tick};
use crate::bench::stats::quantile;

/// nginx's answers when the upstream refused the connection and when it did not answer
/// in time.
pub const BAD_GATEWAY: u16 = 502;
pub const GATEWAY_TIMEOUT: u16 = 504;

/// Goodput must stay this close to healthy for this many seconds to count as recovered.
pub const RECOVERED: f64 = 0.9;
pub const RECOVERED_FOR_S: usize = 3;

#[derive(Debug, PartialEq)]
pub struct PhaseFigures {
    /// Successful answers per second.
    pub goodput: f64,
    /// Over the requests the upstream was given (all but 502s), in milliseconds.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub bad_gateway_per_s: f64,
    pub timeout_per_s: f64,
    pub held_mean: f64,
    pub held_max: usize,
    /// Counted by the limiter during the phase.
    pub shed: Option<u64>,
    pub would_shed: Option<u64>,
    pub limit_range: Option<(u32, u32)>,
}

pub fn phase(requests: &[Request], ticks: &[Tick], (start, end): (f64, f64)) -> PhaseFigures {
    let seconds = (end - start).max(f64::MIN_POSITIVE);
    let inside: Vec<&Request> = requests
        .iter()
        .filter(|r| r.at_s >= start && r.at_s < end)
        .collect();
    let per_second = |status| inside.iter().filter(|r| r.status == status).count() as f64 / seconds;
    let mut admitted_us: Vec<u64> = inside
        .iter()
        .filter(|r| r.status != BAD_GATEWAY)
        .map(|r| (r.seconds * 1e6) as u64)
        .collect();
    let mut latency_ms =
        |q| (!admitted_us.is_empty()).then(|| quantile(&mut admitted_us, q) as f64 / 1e3);
    let readings: Vec<&Tick> = ticks
        .iter()
        .filter(|t| t.at_s >= start && t.at_s < end)
        .collect();
    let counted = |pick: fn(&Tick) -> Option<u64>| {
        let at = |t: f64| ticks.iter().rev().find(|k| k.at_s < t).and_then(pick);
        at(end).map(|e| e - at(start).unwrap_or(0))
    };
    let limits: Vec<u32> = readings
        .iter()
        .filter_map(|t| t.limiter.as_ref().map(|g| g.limit))
        .collect();
    PhaseFigures {
        goodput: per_second(200),
        p50_ms: latency_ms(0.5),
        p99_ms: latency_ms(0.99),
        bad_gateway_per_s: per_second(BAD_GATEWAY),
        timeout_per_s: per_second(GATEWAY_TIMEOUT),
        held_mean: if readings.is_empty() {
            0.0
        } else {
            readings.iter().map(|t| t.held as f64).sum::<f64>() / readings.len() as f64
        },
        held_max: readings.iter().map(|t| t.held).max().unwrap_or(0),
        shed: counted(|t| t.limiter.as_ref().map(|g| g.shed)),
        would_shed: counted(|t| t.limiter.as_ref().map(|g| g.would_shed)),
        limit_range: limits
            .iter()
            .min()
            .zip(limits.iter().max())
            .map(|(lo, hi)| (*lo, *hi)),
    }
}

/// Answers of `status` in each whole second from the start.
pub fn per_second(requests: &[Request], status: u16, total_s: f64) -> Vec<u32> {
    let mut seconds = vec![0; total_s.ceil() as usize];
    for r in requests
        .iter()
        .filter(|r| r.status == status && r.at_s >= 0.0)
    {
        if let Some(s) = seconds.get_mut(r.at_s as usize) {
            *s += 1;
        }
    }
    seconds
}

/// Seconds from `restore_s` to the end of the first second from which goodput, over
/// RECOVERED_FOR_S seconds (or to the end, if that comes first), averages RECOVERED of
/// `healthy`. An average, not every second: clients an exact service time keeps in step
/// answer in bursts, 300 one second and 400 the next, at a healthy 350 a second.
pub fn recovery_s(goodput: &[u32], restore_s: f64, healthy: f64) -> Option<f64> {
    let from = restore_s.floor() as usize;
    (from..goodput.len())
        .find(|&i| {
            let seconds = &goodput[i..(i + RECOVERED_FOR_S).min(goodput.len())];
            let sum: u32 = seconds.iter().sum();
            f64::from(sum) / seconds.len() as f64 >= RECOVERED * healthy
        })
        .map(|i| (i + 1) as f64 - restore_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::sampler::Gauge;

    fn request(at_s: f64, status: u16, seconds: f64) -> Request {
        Request {
            at_s,
            status,
            seconds,
        }
    }

    fn tick(at_s: f64, held: usize, limit: u32, shed: u64) -> Tick {
        Tick {
            at_s,
            held,
            busy: None,
            limiter: Some(Gauge {
                limit,
                inflight: held as i64,
                shed,
                would_shed: 0,
                baseline_ms: None,
                p90_ms: None,
            }),
        }
    }

    #[test]
    fn a_phase_counts_its_own_requests_and_the_limiters_counters_within_it() {
        let requests = [
            request(0.5, 200, 0.03),
            request(1.5, 200, 0.03),
            request(2.5, 200, 0.8),
            request(2.6, 502, 0.0),
            request(3.5, 504, 2.0),
            request(4.5, 200, 0.9),
        ];
        let ticks = [
            tick(0.2, 5, 20, 0),
            tick(1.8, 9, 20, 4),
            tick(2.2, 30, 12, 4),
            tick(3.9, 40, 8, 10),
            tick(4.2, 20, 8, 11),
        ];
        let incident = phase(&requests, &ticks, (2.0, 4.0));
        assert_eq!(incident.goodput, 0.5);
        assert_eq!(incident.bad_gateway_per_s, 0.5);
        assert_eq!(incident.timeout_per_s, 0.5);
        // The 502 never reached the upstream: not in the latency.
        assert_eq!(incident.p50_ms, Some(800.0));
        assert_eq!(incident.p99_ms, Some(2000.0));
        assert_eq!((incident.held_mean, incident.held_max), (35.0, 40));
        assert_eq!(incident.shed, Some(6));
        assert_eq!(incident.limit_range, Some((8, 12)));
        let healthy = phase(&requests, &ticks, (0.0, 2.0));
        assert_eq!(healthy.shed, Some(4));
        let unlimited = phase(&requests, &[], (0.0, 2.0));
        assert_eq!((unlimited.shed, unlimited.limit_range), (None, None));
    }

    #[test]
    fn recovery_ends_where_goodput_stays_back_near_healthy() {
        // Restored at 4 s; one good second at 5 is a blip, 7.. stays.
        let goodput = [100, 100, 10, 10, 20, 95, 40, 92, 99, 100, 97];
        assert_eq!(recovery_s(&goodput, 4.0, 100.0), Some(4.0));
        assert_eq!(recovery_s(&goodput, 4.0, 1000.0), None);
        // Back at once: the first second after the restore counts.
        assert_eq!(recovery_s(&[100, 100, 99], 1.0, 100.0), Some(1.0));
        // Answers in bursts average out.
        assert_eq!(
            recovery_s(&[350, 300, 400, 300, 400], 1.0, 350.0),
            Some(1.0)
        );
    }

    #[test]
    fn answers_per_second_count_by_the_second_they_ended_in() {
        let requests = [
            request(0.1, 200, 0.0),
            request(0.9, 200, 0.0),
            request(1.2, 502, 0.0),
            request(2.99, 200, 0.0),
            request(3.5, 200, 0.0),
        ];
        assert_eq!(per_second(&requests, 200, 3.0), [2, 0, 1]);
        assert_eq!(per_second(&requests, 502, 3.0), [0, 1, 0]);
    }
}
