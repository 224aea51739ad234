//! Proves the Rust mirror matches the C header: compiles a program against
//! `limiter_abi.h` with the host C compiler and compares every size and offset.

use std::{fmt::Write as _, mem::offset_of, path::Path, process::Command};

use limiter_common::*;

struct Layout {
    c_name: &'static str,
    size: usize,
    fields: Vec<(&'static str, usize)>,
}

macro_rules! layout {
    ($rust:ty, $c:literal, [$($field:ident),* $(,)?]) => {
        Layout {
            c_name: $c,
            size: std::mem::size_of::<$rust>(),
            fields: vec![$((stringify!($field), offset_of!($rust, $field))),*],
        }
    };
}

fn layouts() -> Vec<Layout> {
    vec![
        layout!(DestKey, "dest_key", [addr, port, _pad]),
        layout!(
            DestPolicy,
            "dest_policy",
            [
                limit,
                mode,
                baseline_ns,
                p90_ns,
                account_as,
                _pad,
                queue,
                wait_p50_ns,
                wait_p99_ns
            ]
        ),
        layout!(
            DestState,
            "dest_state",
            [
                created_ns,
                last_active_ns,
                inflight,
                admitted,
                shed,
                would_shed,
                redirected,
                would_redirect,
                connect_failed,
                closed,
                untimed,
                answers_4xx,
                answers_429,
                answers_5xx,
                answers_503,
                waiting,
                queued,
                queue_admitted,
                queue_full,
                queue_expired,
                queue_abandoned
            ]
        ),
        layout!(
            QueuePolicy,
            "queue_policy",
            [overflow, wait_pct, refuse_pct, max_wait_ns]
        ),
        layout!(DestPeers, "dest_peers", [count, peers]),
        layout!(
            LimiterConfig,
            "limiter_config",
            [
                abi_version,
                default_mode,
                initial_limit,
                _pad,
                heartbeat_ns,
                heartbeat_timeout_ns,
                queue
            ]
        ),
        layout!(
            GlobalStats,
            "global_stats",
            [ringbuf_drops, table_full, fail_open, storage_errors]
        ),
        layout!(
            SockState,
            "sock_state",
            [
                dest,
                holds_slot,
                dest_created_ns,
                established,
                phase,
                connect_ns,
                request_ns,
                request_inflight,
                next_seq,
                flags,
                requested,
                proto,
                tls,
                untimed,
                segments,
                h2_stream,
                waiting,
                max_wait_ms,
                queued_ns,
                user_timeout_ms,
                syn_retries,
                timers_set
            ]
        ),
        layout!(
            LimiterEvent,
            "limiter_event",
            [ts_ns, dest, peer, kind, pid, limit, inflight, comm]
        ),
        layout!(
            LimiterSignal,
            "limiter_signal",
            [ts_ns, value_ns, dest, kind, inflight, status]
        ),
    ]
}

const CONSTANTS: [(&str, u32); 8] = [
    ("LIMITER_ABI_VERSION", ABI_VERSION),
    ("LIMITER_MAX_PEERS", MAX_PEERS as u32),
    ("LIMITER_PEERS_ENTRIES", PEERS_ENTRIES),
    ("LIMITER_EVENTS_BYTES", EVENTS_BYTES),
    ("LIMITER_SOCK_CONNECT_DONE", SOCK_CONNECT_DONE),
    ("LIMITER_SOCK_SEQ_VALID", SOCK_SEQ_VALID),
    ("LIMITER_SOCK_REDIRECTED", SOCK_REDIRECTED),
    ("LIMITER_SOCK_UNTIMED", SOCK_UNTIMED),
];

/// An enum's variants and their C names, by an exhaustive match: a variant added in Rust
/// does not compile until its header name is given here. Each must also decode from its
/// own value.
macro_rules! mirrored {
    ($all:ident, $enum:ident { $($variant:ident => $c:literal),+ $(,)? }) => {
        for &v in $enum::ALL {
            let name = match v {
                $($enum::$variant => $c),+
            };
            assert_eq!($enum::try_from(u32::from(v)), Ok(v));
            $all.push((name, u32::from(v)));
        }
    };
}

fn enum_constants() -> Vec<(&'static str, u32)> {
    let mut all = Vec::new();
    mirrored!(all, PolicyMode {
        Default => "LIMITER_MODE_DEFAULT",
        Off => "LIMITER_MODE_OFF",
        Shadow => "LIMITER_MODE_SHADOW",
        Prod => "LIMITER_MODE_PROD",
    });
    mirrored!(all, EventKind {
        Shed => "LIMITER_EVENT_SHED",
        WouldShed => "LIMITER_EVENT_WOULD_SHED",
        Redirected => "LIMITER_EVENT_REDIRECTED",
        WouldRedirect => "LIMITER_EVENT_WOULD_REDIRECT",
        Queued => "LIMITER_EVENT_QUEUED",
        QueueFull => "LIMITER_EVENT_QUEUE_FULL",
    });
    mirrored!(all, Overflow {
        Default => "LIMITER_OVERFLOW_DEFAULT",
        Refuse => "LIMITER_OVERFLOW_REFUSE",
        Queue => "LIMITER_OVERFLOW_QUEUE",
    });
    mirrored!(all, SignalKind {
        Sample => "LIMITER_SIGNAL_SAMPLE",
        ConnectRefused => "LIMITER_SIGNAL_CONNECT_REFUSED",
        ConnectTimeout => "LIMITER_SIGNAL_CONNECT_TIMEOUT",
        Error => "LIMITER_SIGNAL_ERROR",
        GaveUp => "LIMITER_SIGNAL_GAVE_UP",
        Handshake => "LIMITER_SIGNAL_HANDSHAKE",
        HungUp => "LIMITER_SIGNAL_HUNG_UP",
        Untimed => "LIMITER_SIGNAL_UNTIMED",
        Waited => "LIMITER_SIGNAL_WAITED",
        WaitExpired => "LIMITER_SIGNAL_WAIT_EXPIRED",
        WaitAbandoned => "LIMITER_SIGNAL_WAIT_ABANDONED",
    });
    mirrored!(all, SockPhase {
        Idle => "LIMITER_PHASE_IDLE",
        Awaiting => "LIMITER_PHASE_AWAITING",
        Receiving => "LIMITER_PHASE_RECEIVING",
    });
    mirrored!(all, SockProto {
        Plain => "LIMITER_PROTO_PLAIN",
        Tls => "LIMITER_PROTO_TLS",
        H2c => "LIMITER_PROTO_H2C",
        Opaque => "LIMITER_PROTO_OPAQUE",
        Http1 => "LIMITER_PROTO_HTTP1",
    });
    mirrored!(all, TlsProgress {
        None => "LIMITER_TLS_NONE",
        Hello => "LIMITER_TLS_HELLO",
        Tls12Handshake => "LIMITER_TLS_12_HANDSHAKE",
        Tls12 => "LIMITER_TLS_12",
        Tls13 => "LIMITER_TLS_13",
    });
    all
}

/// The header families the enums mirror.
const ENUM_PREFIXES: [&str; 7] = [
    "LIMITER_MODE_",
    "LIMITER_EVENT_",
    "LIMITER_OVERFLOW_",
    "LIMITER_SIGNAL_",
    "LIMITER_PHASE_",
    "LIMITER_PROTO_",
    "LIMITER_TLS_",
];

/// The C program prints one `name value` line per fact; the expectation lists the same lines.
fn program_and_expectation() -> (String, String) {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"limiter_abi.h\"\nint main(void) {\n",
    );
    let mut expected = String::new();
    for l in layouts() {
        let s = l.c_name;
        writeln!(c, "printf(\"{s} %zu\\n\", sizeof(struct {s}));").unwrap();
        writeln!(expected, "{s} {}", l.size).unwrap();
        for (f, off) in l.fields {
            writeln!(c, "printf(\"{s}.{f} %zu\\n\", offsetof(struct {s}, {f}));").unwrap();
            writeln!(expected, "{s}.{f} {off}").unwrap();
        }
    }
    for (name, value) in CONSTANTS.into_iter().chain(enum_constants()) {
        writeln!(c, "printf(\"{name} %u\\n\", (unsigned){name});").unwrap();
        writeln!(expected, "{name} {value}").unwrap();
    }
    c.push_str("return 0;\n}\n");
    (c, expected)
}

#[test]
fn rust_mirror_matches_the_c_header() {
    let header_dir = Path::new(limiter_ebpf::ABI_HEADER).parent().unwrap();
    let dir = std::env::temp_dir().join(format!("limiter-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (program, expected) = program_and_expectation();
    let source = dir.join("layout.c");
    let binary = dir.join("layout");
    std::fs::write(&source, program).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .arg("-I")
        .arg(header_dir)
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
    assert!(
        status.success(),
        "the ABI header or a Rust field name does not compile in C"
    );
    let output = Command::new(&binary).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(String::from_utf8(output.stdout).unwrap(), expected);
}

#[test]
fn every_enum_family_in_the_header_has_a_variant_for_each_define() {
    let header = std::fs::read_to_string(limiter_ebpf::ABI_HEADER).unwrap();
    let mut defined: Vec<&str> = header
        .lines()
        .filter_map(|l| l.strip_prefix("#define "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| ENUM_PREFIXES.iter().any(|p| name.starts_with(p)))
        .collect();
    let mut mirrored: Vec<&str> = enum_constants().into_iter().map(|(n, _)| n).collect();
    defined.sort_unstable();
    mirrored.sort_unstable();
    assert_eq!(defined, mirrored);
}

#[test]
fn values_no_variant_has_do_not_decode() {
    assert_eq!(
        SignalKind::try_from(99),
        Err(UnknownValue {
            kind: "SignalKind",
            value: 99
        })
    );
    assert!(EventKind::try_from(0).is_err());
    assert!(PolicyMode::try_from(4).is_err());
    assert!(SockPhase::try_from(3).is_err());
    assert!(SockProto::try_from(5).is_err());
    assert!(TlsProgress::try_from(5).is_err());
}
