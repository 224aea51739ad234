//! What an accept loop does when accepting fails (out of descriptors, most often): an
//! immediate retry fails again at once, spinning a core and flooding the log. It waits
//! instead, longer each time in a row, and logs at a bounded rate.

use std::time::Duration;

use tracing::warn;

use crate::failures::Throttle;

/// The first wait after a failed accept; it doubles with each failure in a row.
const FIRST_WAIT: Duration = Duration::from_millis(10);
/// The longest wait: a second without new connections while descriptors are short.
const LONGEST_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub struct AcceptFailures {
    in_a_row: u32,
    throttle: Throttle,
}

impl AcceptFailures {
    /// After a failed accept of the `what` server: logs, then waits before the next try.
    pub async fn failed(&mut self, what: &str, error: &std::io::Error) {
        if let Some(failures) = self.throttle.occurred() {
            warn!(failures, "{what}: accept failed: {error} (retrying)");
        }
        let wait = self.next_wait();
        tokio::time::sleep(wait).await;
    }

    pub fn succeeded(&mut self) {
        self.in_a_row = 0;
    }

    fn next_wait(&mut self) -> Duration {
        let wait = FIRST_WAIT.saturating_mul(1 << self.in_a_row.min(16));
        self.in_a_row += 1;
        wait.min(LONGEST_WAIT)
    }
}

/// Whether an accept failed for want of descriptors (this process's or the system's).
pub fn out_of_descriptors(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_a_second_and_start_again_after_a_success() {
        let mut failures = AcceptFailures::default();
        let waits: Vec<u128> = (0..9).map(|_| failures.next_wait().as_millis()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        failures.succeeded();
        assert_eq!(failures.next_wait(), FIRST_WAIT);
    }
}
