//! Decision events from the kernel: every one at debug level and on the event stream,
//! summaries at info level.

use std::{
    collections::BTreeMap,
    os::fd::{AsFd, AsRawFd, RawFd},
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use limiter_common::{DestKey, EventKind, LimiterEvent};
use tracing::{debug, info};

use crate::feed::{Event, Feed};

/// How often the info-level summary may be written.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

#[derive(Default, Clone, Copy)]
struct Tally {
    count: u64,
    last: LimiterEvent,
}

/// Decisions folded per destination and kind until the next summary.
pub struct DecisionLog {
    ring: RingBuf<MapData>,
    tallies: BTreeMap<(DestKey, EventKind), Tally>,
    last_summary: Instant,
    feed: Feed,
}

impl DecisionLog {
    pub fn new(ring: RingBuf<MapData>, feed: Feed) -> Self {
        DecisionLog {
            ring,
            tallies: BTreeMap::new(),
            last_summary: Instant::now(),
            feed,
        }
    }

    /// Reads every pending event; `turned_away` hears of each, at the kernel's time: every
    /// decision is a connect the limit refused or handed to a peer (or, in shadow, let
    /// through where prod would have).
    pub fn drain(&mut self, mut turned_away: impl FnMut(DestKey, u64)) {
        while let Some(item) = self.ring.next() {
            if item.len() < std::mem::size_of::<LimiterEvent>() {
                continue;
            }
            // SAFETY: the kernel wrote a whole LimiterEvent; the ring gives no alignment.
            let ev: LimiterEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
            let Ok(kind) = EventKind::try_from(ev.kind) else {
                continue;
            };
            turned_away(ev.dest, ev.ts_ns);
            self.feed.publish(|| Some(Event::decision(kind, &ev)));
            Self::record(&mut self.tallies, kind, ev);
        }
    }

    fn record(
        tallies: &mut BTreeMap<(DestKey, EventKind), Tally>,
        kind: EventKind,
        ev: LimiterEvent,
    ) {
        debug!(
            decision = kind.name(),
            destination = %ev.dest.socket_addr(),
            peer = peer(kind, &ev).unwrap_or_default(),
            pid = ev.pid,
            comm = ev.comm(),
            limit = ev.limit,
            inflight = ev.inflight,
        );
        let tally = tallies.entry((ev.dest, kind)).or_default();
        tally.count += 1;
        tally.last = ev;
    }

    /// Writes the summary when it is due; nothing when there was nothing to say.
    pub fn summarise(&mut self, now: Instant) {
        if now.duration_since(self.last_summary) < SUMMARY_EVERY {
            return;
        }
        self.last_summary = now;
        self.write_summary();
    }

    /// The last events and their summary, when the agent stops: no controller listens any
    /// more.
    pub fn flush(&mut self) {
        self.drain(|_, _| {});
        self.write_summary();
    }

    fn write_summary(&mut self) {
        for ((dest, kind), tally) in std::mem::take(&mut self.tallies) {
            let to_peer = peer(kind, &tally.last)
                .map(|p| format!(", last to peer {p}"))
                .unwrap_or_default();
            info!(
                "{} {} connect(s) to {} at limit {} (last by {}[{}]{to_peer})",
                kind.name(),
                tally.count,
                dest.socket_addr(),
                tally.last.limit,
                tally.last.comm(),
                tally.last.pid,
            );
        }
    }
}

/// Readable when the kernel forced a wake-up.
impl AsRawFd for DecisionLog {
    fn as_raw_fd(&self) -> RawFd {
        self.ring.as_fd().as_raw_fd()
    }
}

/// The fall-forward target of a (would-be) redirect.
fn peer(kind: EventKind, ev: &LimiterEvent) -> Option<String> {
    kind.has_peer().then(|| ev.peer.socket_addr().to_string())
}
