//! Rust mirror of `limiter-ebpf/include/limiter_abi.h`, the map ABI shared with the
//! kernel programs. Field names match the C names; each family of enumerated `#define`s
//! (modes, kinds, phases) is one enum, the bit flags stay constants. `tests/abi.rs`
//! compiles the header and checks every size, offset and value below against it.
#![no_std]

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub const ABI_VERSION: u32 = 10;

/// A value the kernel wrote that no variant of the named ABI enum has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownValue {
    pub kind: &'static str,
    pub value: u32,
}

impl core::fmt::Display for UnknownValue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "unknown {} {}", self.kind, self.value)
    }
}

impl core::error::Error for UnknownValue {}

/// A `#[repr(u32)]` enum for one family of the header's `#define`s: the struct fields stay
/// `u32` (the kernel may write any value), decoding goes through `TryFrom<u32>`.
macro_rules! abi_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $value:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vdoc])* $variant = $value),+
        }

        impl $name {
            pub const ALL: &[$name] = &[$($name::$variant),+];
        }

        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                v as u32
            }
        }

        impl TryFrom<u32> for $name {
            type Error = UnknownValue;

            fn try_from(value: u32) -> Result<Self, UnknownValue> {
                match value {
                    $($value => Ok($name::$variant),)+
                    _ => Err(UnknownValue { kind: stringify!($name), value }),
                }
            }
        }
    };
}

abi_enum! {
    /// `dest_policy.mode` and `limiter_config.default_mode` (`LIMITER_MODE_*`).
    PolicyMode {
        /// In a per-destination policy: use the global default.
        Default = 0,
        Off = 1,
        Shadow = 2,
        Prod = 3,
    }
}

abi_enum! {
    /// `limiter_event.kind` (`LIMITER_EVENT_*`): what the kernel decided at a connect.
    EventKind {
        Shed = 1,
        WouldShed = 2,
        /// Handed to `limiter_event.peer` (fall-forward).
        Redirected = 3,
        /// Shadow: `limiter_event.peer` had room.
        WouldRedirect = 4,
        /// Held until a slot frees (overflow = queue).
        Queued = 5,
        /// Refused: the queue was past its bounds.
        QueueFull = 6,
    }
}

impl EventKind {
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Shed => "shed",
            EventKind::WouldShed => "would_shed",
            EventKind::Redirected => "redirected",
            EventKind::WouldRedirect => "would_redirect",
            EventKind::Queued => "queued",
            EventKind::QueueFull => "queue_full",
        }
    }

    /// The event names a fall-forward peer.
    pub fn has_peer(self) -> bool {
        matches!(self, EventKind::Redirected | EventKind::WouldRedirect)
    }
}

pub const MAX_PEERS: usize = 7;
pub const PEERS_ENTRIES: u32 = 4096;
pub const EVENTS_BYTES: u32 = 256 * 1024;

abi_enum! {
    /// `limiter_signal.kind` (`LIMITER_SIGNAL_*`): what the kernel observed on a connection.
    SignalKind {
        Sample = 1,
        ConnectRefused = 2,
        ConnectTimeout = 3,
        Error = 4,
        GaveUp = 5,
        Handshake = 6,
        HungUp = 7,
        Untimed = 8,
        /// A queued connect admitted; `value_ns` is its wait.
        Waited = 9,
        /// A queued connect failed at the maximum wait; `value_ns` is its wait.
        WaitExpired = 10,
        /// A queued connect closed by the application; `value_ns` is its wait.
        WaitAbandoned = 11,
    }
}

abi_enum! {
    /// `queue_policy.overflow` (`LIMITER_OVERFLOW_*`): what a connect at the limit gets.
    Overflow {
        /// In a per-destination policy: the global one.
        Default = 0,
        Refuse = 1,
        Queue = 2,
    }
}

abi_enum! {
    /// `sock_state.phase` (`LIMITER_PHASE_*`): where a connection is in its request cycle.
    SockPhase {
        Idle = 0,
        Awaiting = 1,
        Receiving = 2,
    }
}

abi_enum! {
    /// `sock_state.proto` (`LIMITER_PROTO_*`): what a connection speaks, read from the
    /// client's first segments.
    SockProto {
        /// Cleartext request/response, or not known yet.
        Plain = 0,
        /// TLS, HTTP/2 not offered.
        Tls = 1,
        /// Cleartext HTTP/2.
        H2c = 2,
        /// TLS offering HTTP/2: its requests cannot be told apart.
        Opaque = 3,
        /// Cleartext HTTP/1.x: its answers carry a status code.
        Http1 = 4,
    }
}

abi_enum! {
    /// `sock_state.tls` (`LIMITER_TLS_*`): how far a TLS handshake has come.
    TlsProgress {
        None = 0,
        Hello = 1,
        Tls12Handshake = 2,
        Tls12 = 3,
        Tls13 = 4,
    }
}

pub const SOCK_CONNECT_DONE: u32 = 1 << 1;
pub const SOCK_SEQ_VALID: u32 = 1 << 2;
pub const SOCK_REDIRECTED: u32 = 1 << 3;
pub const SOCK_UNTIMED: u32 = 1 << 4;

/// Map names, as pinned under the agent's per-cgroup directory.
pub mod maps {
    pub const DESTS: &str = "dests";
    pub const POLICIES: &str = "policies";
    pub const PEERS: &str = "peers";
    pub const CONFIG: &str = "config";
    pub const STATS: &str = "stats";
    pub const SOCKETS: &str = "sockets";
    pub const EVENTS: &str = "events";
    pub const SIGNALS: &str = "signals";
    pub const ALL: [&str; 8] = [
        DESTS, POLICIES, PEERS, CONFIG, STATS, SOCKETS, EVENTS, SIGNALS,
    ];
}

/// A destination: IPv6 address in network byte order, IPv4 stored as `::ffff:a.b.c.d`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DestKey {
    pub addr: [u32; 4],
    pub port: u16,
    pub _pad: u16,
}

impl DestKey {
    pub fn new(addr: SocketAddr) -> Self {
        let v6 = match addr.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        let o = v6.octets();
        let word = |i: usize| u32::from_ne_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
        DestKey {
            addr: [word(0), word(4), word(8), word(12)],
            port: addr.port(),
            _pad: 0,
        }
    }

    /// The socket address, IPv4 for v4-mapped keys.
    pub fn socket_addr(&self) -> SocketAddr {
        let mut o = [0u8; 16];
        for (chunk, word) in o.chunks_exact_mut(4).zip(self.addr) {
            chunk.copy_from_slice(&word.to_ne_bytes());
        }
        let v6 = Ipv6Addr::from(o);
        let ip = match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        };
        SocketAddr::new(ip, self.port)
    }
}

impl From<SocketAddr> for DestKey {
    fn from(addr: SocketAddr) -> Self {
        DestKey::new(addr)
    }
}

impl From<Ipv4Addr> for DestKey {
    fn from(ip: Ipv4Addr) -> Self {
        DestKey::new(SocketAddr::new(IpAddr::V4(ip), 0))
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestPolicy {
    pub limit: u32,
    pub mode: u32,
    pub baseline_ns: u64,
    pub p90_ns: u64,
    pub account_as: DestKey,
    pub _pad: u32,
    /// `overflow` 0: the global one.
    pub queue: QueuePolicy,
    /// Queued connects' recent waits, published by the agent; 0: none.
    pub wait_p50_ns: u64,
    pub wait_p99_ns: u64,
}

/// What a connect at the limit gets (prod): refused, or held until a slot frees, up to
/// `wait_pct` of the limit, a rising share refused up to `refuse_pct`, all past it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueuePolicy {
    pub overflow: u32,
    pub wait_pct: u16,
    pub refuse_pct: u16,
    pub max_wait_ns: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestState {
    pub created_ns: u64,
    pub last_active_ns: u64,
    pub inflight: i64,
    pub admitted: u64,
    pub shed: u64,
    pub would_shed: u64,
    pub redirected: u64,
    pub would_redirect: u64,
    pub connect_failed: u64,
    pub closed: u64,
    /// Exchanges seen but not timed (TLS 1.3's first two per connection; a connection
    /// whose exchanges cannot be told apart, HTTP/2 over TLS, once).
    pub untimed: u64,
    /// Cleartext HTTP/1.x answers by status: 4xx but 429, 429, 5xx but 503, 503.
    pub answers_4xx: u64,
    pub answers_429: u64,
    pub answers_5xx: u64,
    pub answers_503: u64,
    /// Overflow = queue: waiting now; queued, admitted from the queue, refused as it was
    /// full, failed at the maximum wait, abandoned while waiting.
    pub waiting: i64,
    pub queued: u64,
    pub queue_admitted: u64,
    pub queue_full: u64,
    pub queue_expired: u64,
    pub queue_abandoned: u64,
}

/// A group member's fall-forward candidates, in the order they are tried.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestPeers {
    pub count: u32,
    pub peers: [DestKey; MAX_PEERS],
}

impl DestPeers {
    /// None when there are more than [`MAX_PEERS`].
    pub fn new(peers: &[DestKey]) -> Option<Self> {
        let mut out = DestPeers {
            count: peers.len() as u32,
            ..DestPeers::default()
        };
        out.peers.get_mut(..peers.len())?.copy_from_slice(peers);
        Some(out)
    }

    pub fn as_slice(&self) -> &[DestKey] {
        &self.peers[..(self.count as usize).min(MAX_PEERS)]
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimiterConfig {
    pub abi_version: u32,
    pub default_mode: u32,
    pub initial_limit: u32,
    pub _pad: u32,
    pub heartbeat_ns: u64,
    pub heartbeat_timeout_ns: u64,
    pub queue: QueuePolicy,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalStats {
    pub ringbuf_drops: u64,
    pub table_full: u64,
    pub fail_open: u64,
    pub storage_errors: u64,
}

impl core::ops::AddAssign for GlobalStats {
    fn add_assign(&mut self, o: Self) {
        self.ringbuf_drops += o.ringbuf_drops;
        self.table_full += o.table_full;
        self.fail_open += o.fail_open;
        self.storage_errors += o.storage_errors;
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockState {
    pub dest: DestKey,
    pub holds_slot: u32,
    pub dest_created_ns: u64,
    pub established: u32,
    pub phase: u32,
    pub connect_ns: u64,
    pub request_ns: u64,
    pub request_inflight: u32,
    pub next_seq: u32,
    pub flags: u32,
    pub requested: DestKey,
    pub proto: u8,
    pub tls: u8,
    pub untimed: u8,
    pub segments: u8,
    pub h2_stream: u32,
    pub waiting: u32,
    pub max_wait_ms: u32,
    pub queued_ns: u64,
    pub user_timeout_ms: u32,
    pub syn_retries: u16,
    pub timers_set: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimiterEvent {
    pub ts_ns: u64,
    pub dest: DestKey,
    pub peer: DestKey,
    pub kind: u32,
    pub pid: u32,
    pub limit: u32,
    pub inflight: u32,
    pub comm: [u8; 16],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimiterSignal {
    pub ts_ns: u64,
    /// The latency (sample), the handshake time (handshake), or how long the request had
    /// waited when it ended (error, gave up, hung up); 0 otherwise.
    pub value_ns: u64,
    pub dest: DestKey,
    pub kind: u32,
    /// In flight, itself included, when the request started (sample) or when the
    /// connection was admitted (handshake); 0 otherwise.
    pub inflight: u32,
    /// A sample's answer on cleartext HTTP/1.x: its status code; 0 otherwise.
    pub status: u32,
}

impl LimiterEvent {
    /// The process name, up to its NUL terminator.
    pub fn comm(&self) -> &str {
        let end = self
            .comm
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.comm.len());
        core::str::from_utf8(&self.comm[..end]).unwrap_or("?")
    }
}

const _: () = {
    assert!(core::mem::size_of::<DestKey>() == 20);
    assert!(core::mem::size_of::<DestPolicy>() == 80);
    assert!(core::mem::size_of::<DestState>() == 168);
    assert!(core::mem::size_of::<DestPeers>() == 144);
    assert!(core::mem::size_of::<QueuePolicy>() == 16);
    assert!(core::mem::size_of::<LimiterConfig>() == 48);
    assert!(core::mem::size_of::<GlobalStats>() == 32);
    assert!(core::mem::size_of::<SockState>() == 120);
    assert!(core::mem::size_of::<LimiterEvent>() == 80);
    assert!(core::mem::size_of::<LimiterSignal>() == 48);
};

#[cfg(feature = "aya")]
mod pod {
    use super::*;
    // SAFETY: plain-old-data: repr(C), fixed-width integers, every byte a named field.
    unsafe impl aya::Pod for DestKey {}
    unsafe impl aya::Pod for DestPolicy {}
    unsafe impl aya::Pod for DestState {}
    unsafe impl aya::Pod for DestPeers {}
    unsafe impl aya::Pod for LimiterConfig {}
    unsafe impl aya::Pod for GlobalStats {}
    unsafe impl aya::Pod for SockState {}
    unsafe impl aya::Pod for LimiterEvent {}
    unsafe impl aya::Pod for LimiterSignal {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_and_v4_mapped_ipv6_are_one_key() {
        let v4: SocketAddr = "10.1.2.3:443".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:10.1.2.3]:443".parse().unwrap();
        assert_eq!(DestKey::new(v4), DestKey::new(mapped));
        assert_eq!(DestKey::new(mapped).socket_addr(), v4);
    }

    #[test]
    fn ipv6_round_trips() {
        let v6: SocketAddr = "[2001:db8::7]:8080".parse().unwrap();
        assert_eq!(DestKey::new(v6).socket_addr(), v6);
    }

    #[test]
    fn peers_keep_their_order_and_their_bound() {
        let keys: [DestKey; 8] = core::array::from_fn(|i| {
            DestKey::new(SocketAddr::new([127, 0, 0, 1].into(), i as u16))
        });
        let peers = DestPeers::new(&keys[..3]).unwrap();
        assert_eq!(peers.count, 3);
        assert_eq!(peers.as_slice(), &keys[..3]);
        assert!(DestPeers::new(&keys[..MAX_PEERS]).is_some());
        assert!(DestPeers::new(&keys).is_none());
    }

    #[test]
    fn address_words_are_in_network_byte_order() {
        let key = DestKey::new("127.0.0.1:80".parse().unwrap());
        assert_eq!(key.addr[2].to_ne_bytes(), [0, 0, 0xff, 0xff]);
        assert_eq!(key.addr[3].to_ne_bytes(), [127, 0, 0, 1]);
    }
}
