//! Decision events from the kernel: every one at debug level, summaries at info level.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use limiter_common::{DestKey, LimiterEvent, EVENT_SHED, EVENT_WOULD_SHED};
use tracing::{debug, info};

/// How often the info-level summary may be written.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

#[derive(Default, Clone, Copy)]
struct Tally {
    count: u64,
    last: LimiterEvent,
}

/// Shed decisions folded per destination and kind until the next summary.
pub struct DecisionLog {
    tallies: BTreeMap<(DestKey, u32), Tally>,
    last_summary: Instant,
}

impl Default for DecisionLog {
    fn default() -> Self {
        DecisionLog {
            tallies: BTreeMap::new(),
            last_summary: Instant::now(),
        }
    }
}

impl DecisionLog {
    /// Reads every pending event.
    pub fn drain(&mut self, ring: &mut RingBuf<MapData>) {
        while let Some(item) = ring.next() {
            if item.len() < std::mem::size_of::<LimiterEvent>() {
                continue;
            }
            // SAFETY: the kernel wrote a whole LimiterEvent; the ring gives no alignment.
            let ev: LimiterEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
            self.record(ev);
        }
    }

    fn record(&mut self, ev: LimiterEvent) {
        debug!(
            decision = kind_name(ev.kind),
            destination = %ev.dest.socket_addr(),
            pid = ev.pid,
            comm = ev.comm(),
            limit = ev.limit,
            inflight = ev.inflight,
        );
        let tally = self.tallies.entry((ev.dest, ev.kind)).or_default();
        tally.count += 1;
        tally.last = ev;
    }

    /// Writes the summary when it is due; nothing when there was nothing to say.
    pub fn summarise(&mut self, now: Instant) {
        if now.duration_since(self.last_summary) < SUMMARY_EVERY {
            return;
        }
        self.last_summary = now;
        for ((dest, kind), tally) in std::mem::take(&mut self.tallies) {
            info!(
                "{} {} connect(s) to {} at limit {} (last by {}[{}])",
                kind_name(kind),
                tally.count,
                dest.socket_addr(),
                tally.last.limit,
                tally.last.comm(),
                tally.last.pid,
            );
        }
    }
}

fn kind_name(kind: u32) -> &'static str {
    match kind {
        EVENT_SHED => "shed",
        EVENT_WOULD_SHED => "would_shed",
        _ => "unknown",
    }
}
