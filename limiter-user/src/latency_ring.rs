//! The latency signal from the kernel, typed: samples and outcomes per destination.

use std::os::fd::{AsFd, AsRawFd, RawFd};

use aya::maps::{MapData, RingBuf};
use limiter_common::{DestKey, LimiterSignal, SignalKind};

/// What the kernel observed on one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// A request's time to its first response byte, the destination's in-flight count when
    /// the request started, and on cleartext HTTP/1.x the answer's status code (else 0).
    Sample {
        latency_ns: u64,
        inflight: u32,
        status: u32,
    },
    /// The SYN was answered by a RST.
    ConnectRefused,
    /// The SYN was never answered, or the client gave up connecting.
    ConnectTimeout,
    /// Reset by the peer while awaiting a response.
    Error,
    /// Closed by the peer while awaiting a response, `waited_ns` after the request
    /// started: a hang-up, or a server answering a client's goodbye by closing. The
    /// controller tells the two apart.
    HungUp { waited_ns: u64 },
    /// Closed locally while awaiting a response, `waited_ns` after the request started:
    /// the client gave up (its timeout), or said goodbye with a last message that gets no
    /// reply. The controller tells the two apart.
    GaveUp { waited_ns: u64 },
    /// Connect to established, `rtt_ns` after the connect; `inflight` connections to the
    /// destination held slots when it was admitted, itself included.
    Handshake { rtt_ns: u64, inflight: u32 },
    /// An exchange was answered, but which bytes answered it cannot be read (a TLS 1.3
    /// connection's first two); or a connection began none of whose exchanges can be
    /// (HTTP/2 over TLS).
    Untimed,
    /// A queued connect left its queue `waited_ns` after it joined it.
    Waited { waited_ns: u64, end: WaitEnd },
}

/// How a queued connect's wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitEnd {
    /// It took a freed slot; its SYN left.
    Admitted,
    /// No slot freed within the maximum wait: TCP failed it with ETIMEDOUT.
    Expired,
    /// The application closed it first (its own timeout, or it ended).
    Abandoned,
}

impl WaitEnd {
    pub fn name(self) -> &'static str {
        match self {
            WaitEnd::Admitted => "admitted",
            WaitEnd::Expired => "expired",
            WaitEnd::Abandoned => "abandoned",
        }
    }
}

impl Signal {
    pub fn name(&self) -> &'static str {
        match self {
            Signal::Sample { .. } => "sample",
            Signal::ConnectRefused => "connect_refused",
            Signal::ConnectTimeout => "connect_timeout",
            Signal::Error => "error",
            Signal::HungUp { .. } => "hung_up",
            Signal::GaveUp { .. } => "gave_up",
            Signal::Handshake { .. } => "handshake",
            Signal::Untimed => "untimed",
            Signal::Waited { .. } => "waited",
        }
    }

    fn decode(raw: &LimiterSignal) -> Option<Self> {
        Some(match SignalKind::try_from(raw.kind).ok()? {
            SignalKind::Sample => Signal::Sample {
                latency_ns: raw.value_ns,
                inflight: raw.inflight,
                status: raw.status,
            },
            SignalKind::ConnectRefused => Signal::ConnectRefused,
            SignalKind::ConnectTimeout => Signal::ConnectTimeout,
            SignalKind::Error => Signal::Error,
            SignalKind::HungUp => Signal::HungUp {
                waited_ns: raw.value_ns,
            },
            SignalKind::GaveUp => Signal::GaveUp {
                waited_ns: raw.value_ns,
            },
            SignalKind::Handshake => Signal::Handshake {
                rtt_ns: raw.value_ns,
                inflight: raw.inflight,
            },
            SignalKind::Untimed => Signal::Untimed,
            SignalKind::Waited => Signal::Waited {
                waited_ns: raw.value_ns,
                end: WaitEnd::Admitted,
            },
            SignalKind::WaitExpired => Signal::Waited {
                waited_ns: raw.value_ns,
                end: WaitEnd::Expired,
            },
            SignalKind::WaitAbandoned => Signal::Waited {
                waited_ns: raw.value_ns,
                end: WaitEnd::Abandoned,
            },
        })
    }
}

/// One signal, with where and when (kernel monotonic clock) it happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalEvent {
    pub dest: DestKey,
    pub ts_ns: u64,
    pub signal: Signal,
}

/// Signals handed over at once: enough for their controllers' cache misses to overlap.
const BATCH: usize = 32;

/// Reads the `signals` ring buffer, allocating only when made.
pub struct LatencyRing {
    ring: RingBuf<MapData>,
    batch: Vec<SignalEvent>,
}

impl LatencyRing {
    pub fn new(ring: RingBuf<MapData>) -> Self {
        LatencyRing {
            ring,
            batch: Vec::with_capacity(BATCH),
        }
    }

    /// Hands every pending signal to `consume`, in order, a batch of up to [`BATCH`] at a
    /// time; returns how many there were.
    pub fn drain(&mut self, mut consume: impl FnMut(&[SignalEvent])) -> usize {
        let mut n = 0;
        loop {
            self.batch.clear();
            while self.batch.len() < BATCH {
                let Some(item) = self.ring.next() else { break };
                if item.len() < std::mem::size_of::<LimiterSignal>() {
                    continue;
                }
                // SAFETY: the kernel wrote a whole LimiterSignal; the ring gives no alignment.
                let raw: LimiterSignal = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
                if let Some(signal) = Signal::decode(&raw) {
                    self.batch.push(SignalEvent {
                        dest: raw.dest,
                        ts_ns: raw.ts_ns,
                        signal,
                    });
                }
            }
            if self.batch.is_empty() {
                return n;
            }
            n += self.batch.len();
            consume(&self.batch);
        }
    }
}

/// Readable when the kernel forced a wake-up.
impl AsRawFd for LatencyRing {
    fn as_raw_fd(&self) -> RawFd {
        self.ring.as_fd().as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_kind_decodes() {
        let raw = |kind: SignalKind, value_ns| LimiterSignal {
            kind: kind.into(),
            value_ns,
            inflight: 3,
            status: 429,
            ..Default::default()
        };
        assert_eq!(
            Signal::decode(&raw(SignalKind::Sample, 7)),
            Some(Signal::Sample {
                latency_ns: 7,
                inflight: 3,
                status: 429,
            })
        );
        assert_eq!(
            Signal::decode(&raw(SignalKind::ConnectRefused, 0)),
            Some(Signal::ConnectRefused)
        );
        assert_eq!(
            Signal::decode(&raw(SignalKind::ConnectTimeout, 0)),
            Some(Signal::ConnectTimeout)
        );
        assert_eq!(
            Signal::decode(&raw(SignalKind::Error, 0)),
            Some(Signal::Error)
        );
        assert_eq!(
            Signal::decode(&raw(SignalKind::HungUp, 13)),
            Some(Signal::HungUp { waited_ns: 13 })
        );
        assert_eq!(
            Signal::decode(&raw(SignalKind::GaveUp, 11)),
            Some(Signal::GaveUp { waited_ns: 11 })
        );
        assert_eq!(
            Signal::decode(&raw(SignalKind::Handshake, 9)),
            Some(Signal::Handshake {
                rtt_ns: 9,
                inflight: 3
            })
        );
        assert_eq!(
            Signal::decode(&raw(SignalKind::Untimed, 0)),
            Some(Signal::Untimed)
        );
        let unknown = LimiterSignal {
            kind: 99,
            ..Default::default()
        };
        assert_eq!(Signal::decode(&unknown), None);
    }
}
