//! Requests a client gave up on that the upstream is still serving.
//!
//! A proxy that times out closes its connection and frees our slot at once, but the
//! upstream does not know: the request sits in its accept queue or holds one of its workers
//! until it is served. When an upstream slows down under a short client timeout, every
//! slot freed that way is refilled by a new request that queues behind the abandoned ones,
//! and those time out in turn: the upstream serves a backlog nobody waits for and no answer
//! arrives in time (the simulator's incident with a 2 s timeout sent nothing back for about
//! 8 s). So while the destination answers slowly, each request given up on keeps holding
//! part of a slot, fading with [`HOLD_NS`], and the limit published is that much lower.

/// How long a request given up on holds its slot: the published limit is lowered by the
/// timeouts of about the last half second. Failing runs of the incident over seeds 1 to
/// 600, against 43 with none held: 0.4 s 37, 0.5 s 25, 0.6 s 30, 0.75 s 29, 1 s 44. At
/// 0.25 s, 82: the backlog drained sooner and the follow began before any cut had taken
/// in-flight under the workers, so no window showed the service time without a queue and
/// the follow kept one read from a window that still queued (seed 98: 1 022 ms against
/// 847; the 2 s client's in-flight p95 at 42 to 48).
pub const HOLD_NS: f64 = 500_000_000.0;

/// The slots held by requests given up on, as an exponentially fading count. Eight bytes:
/// a controller stays under 4 KiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Abandoned {
    /// When `held` was last brought up to date, in milliseconds of the monotonic clock,
    /// wrapping every 49 days: brought up to date at every update tick, it is never that old.
    /// A time before it (a timeout stamped by the kernel before the tick that preceded its
    /// reading) fades nothing and leaves it where it is.
    at_ms: u32,
    held: f32,
}

impl Abandoned {
    /// A client gave up on a request at `now_ns`.
    pub fn give_up(&mut self, now_ns: u64) {
        self.fade(now_ns);
        self.held += 1.0;
    }

    /// The slots still held at `now_ns`; called at every update tick.
    pub fn held(&mut self, now_ns: u64) -> f64 {
        self.fade(now_ns);
        f64::from(self.held)
    }

    fn fade(&mut self, now_ns: u64) {
        let now_ms = (now_ns / 1_000_000) as u32;
        // Read as signed, a wrapped clock still reads forward and an earlier time backward.
        let elapsed_ms = now_ms.wrapping_sub(self.at_ms) as i32;
        if elapsed_ms <= 0 {
            return;
        }
        if self.held > 0.0 {
            let elapsed_ns = f64::from(elapsed_ms) * 1e6;
            self.held = (f64::from(self.held) * (-elapsed_ns / HOLD_NS).exp()) as f32;
        }
        self.at_ms = now_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_request_given_up_on_holds_its_slot_and_fades() {
        let mut a = Abandoned::default();
        assert_eq!(a.held(0), 0.0);
        a.give_up(1_000 * MS);
        a.give_up(1_000 * MS);
        assert!((a.held(1_000 * MS) - 2.0).abs() < 1e-6);
        let after_hold = a.held(1_500 * MS);
        // A clock in milliseconds that wrapped is still read forward.
        let mut wrapped = Abandoned::default();
        let wrap_ns = (u64::from(u32::MAX) + 1) * MS;
        wrapped.give_up(wrap_ns - MS);
        assert!((wrapped.held(wrap_ns + 499 * MS) - 1.0 / std::f64::consts::E).abs() < 1e-3);
        assert!(
            (after_hold - 2.0 / std::f64::consts::E).abs() < 1e-3,
            "{after_hold}"
        );
        assert!(a.held(6_000 * MS) < 0.01);
    }

    #[test]
    fn a_timeout_stamped_before_the_last_tick_fades_nothing() {
        let mut a = Abandoned::default();
        a.give_up(1_000 * MS);
        assert!((a.held(1_100 * MS) - (-0.2f64).exp()).abs() < 1e-3);
        a.give_up(1_090 * MS);
        let held = a.held(1_100 * MS);
        assert!((held - (1.0 + (-0.2f64).exp())).abs() < 1e-3, "{held}");
    }

    #[test]
    fn a_steady_stream_holds_its_rate_times_the_hold() {
        let mut a = Abandoned::default();
        // 40 a second for five seconds: 40 x 0.5 s = 20 held.
        for i in 0..200 {
            a.give_up(i * 25 * MS);
        }
        let held = a.held(5_000 * MS);
        assert!((18.0..22.0).contains(&held), "{held}");
    }
}
