/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * The map ABI between the kernel programs and the agent: the single source of truth.
 *
 * limiter-common mirrors every struct and constant below in Rust; its abi test compiles
 * this header and compares sizes, field offsets and values. Rules: fixed-width integers
 * only, explicit padding fields (hash keys compare bytes, so padding must be zeroed), no
 * enums in structs. Bump LIMITER_ABI_VERSION whenever a struct changes: the agent refuses to
 * reuse pinned maps of another version.
 */
#ifndef LIMITER_ABI_H
#define LIMITER_ABI_H

#include <linux/types.h>

#define LIMITER_ABI_VERSION 10

/* Modes. 0 in a per-destination policy means "use the global default". */
#define LIMITER_MODE_DEFAULT 0
#define LIMITER_MODE_OFF 1
#define LIMITER_MODE_SHADOW 2
#define LIMITER_MODE_PROD 3

/* Decision kinds on the `events` ring buffer. */
#define LIMITER_EVENT_SHED 1
#define LIMITER_EVENT_WOULD_SHED 2
#define LIMITER_EVENT_REDIRECTED 3     /* handed to limiter_event.peer (fall-forward) */
#define LIMITER_EVENT_WOULD_REDIRECT 4 /* shadow: limiter_event.peer had room */
#define LIMITER_EVENT_QUEUED 5         /* held until a slot frees (overflow = queue) */
#define LIMITER_EVENT_QUEUE_FULL 6     /* refused: the queue was past its bounds */

/* What a connect at the limit gets. 0 in a per-destination queue_policy: the global one. */
#define LIMITER_OVERFLOW_DEFAULT 0
#define LIMITER_OVERFLOW_REFUSE 1
#define LIMITER_OVERFLOW_QUEUE 2

/* Fall-forward. A destination has at most LIMITER_MAX_PEERS peers (groups of up to 8
 * members), so that trying them is a loop of constant bound. Only members of configured
 * groups have an entry in the `peers` map, at most LIMITER_PEERS_ENTRIES of them. */
#define LIMITER_MAX_PEERS 7
#define LIMITER_PEERS_ENTRIES 4096

/* Size of the `events` ring buffer (decisions); the agent sizes the `signals` one. */
#define LIMITER_EVENTS_BYTES (256 * 1024)

/* Signal kinds on the `signals` ring buffer. */
#define LIMITER_SIGNAL_SAMPLE 1          /* request -> first response byte; value_ns = latency */
#define LIMITER_SIGNAL_CONNECT_REFUSED 2 /* RST to our SYN */
#define LIMITER_SIGNAL_CONNECT_TIMEOUT 3 /* SYN never answered, or the client gave up connecting */
#define LIMITER_SIGNAL_ERROR 4           /* reset by the peer while awaiting a response;
					  * value_ns = time since the request started */
#define LIMITER_SIGNAL_GAVE_UP 5         /* closed locally while awaiting a response;
					  * value_ns = time since the request started */
#define LIMITER_SIGNAL_HANDSHAKE 6       /* connect -> established; value_ns = handshake time,
					  * inflight = dest's count at the connect */
#define LIMITER_SIGNAL_HUNG_UP 7         /* closed (FIN) by the peer while awaiting a response;
					  * value_ns = time since the request started */
#define LIMITER_SIGNAL_UNTIMED 8         /* an exchange answered whose answer could not be
					  * timed; or a connection none of whose can be */
#define LIMITER_SIGNAL_WAITED 9          /* a queued connect admitted; value_ns = its wait */
#define LIMITER_SIGNAL_WAIT_EXPIRED 10   /* a queued connect failed at the maximum wait;
					  * value_ns = its wait */
#define LIMITER_SIGNAL_WAIT_ABANDONED 11 /* a queued connect closed by the application;
					  * value_ns = its wait */

/* Where a connection is in its request/response cycle. */
#define LIMITER_PHASE_IDLE 0      /* nothing outstanding: the next payload sent starts a request */
#define LIMITER_PHASE_AWAITING 1  /* request sent, no response byte yet */
#define LIMITER_PHASE_RECEIVING 2 /* response under way: the next payload sent starts a request */

/* What a connection speaks, read from the client's first segments (sock_state.proto). */
#define LIMITER_PROTO_PLAIN 0  /* cleartext request/response, or not known yet */
#define LIMITER_PROTO_TLS 1    /* TLS, HTTP/2 not offered */
#define LIMITER_PROTO_H2C 2    /* cleartext HTTP/2 */
#define LIMITER_PROTO_OPAQUE 3 /* TLS offering HTTP/2: requests cannot be told apart */
#define LIMITER_PROTO_HTTP1 4  /* cleartext HTTP/1.x: answers carry a status code */

/* How far a TLS handshake has come (sock_state.tls). */
#define LIMITER_TLS_NONE 0
#define LIMITER_TLS_HELLO 1         /* ClientHello sent */
#define LIMITER_TLS_12_HANDSHAKE 2  /* a TLS 1.2 client handshake flight sent */
#define LIMITER_TLS_12 3            /* TLS 1.2, application data flowing */
#define LIMITER_TLS_13 4            /* TLS 1.3, the client's Finished sent */

/* sock_state.flags */
#define LIMITER_SOCK_CONNECT_DONE (1 << 1) /* the connect outcome has been reported */
#define LIMITER_SOCK_SEQ_VALID (1 << 2)    /* next_seq holds a sent sequence number */
#define LIMITER_SOCK_REDIRECTED (1 << 3)   /* connected to dest instead of `requested` */
#define LIMITER_SOCK_UNTIMED (1 << 4)      /* the outstanding request is not timed */

/* A destination: IPv6 address (IPv4 as ::ffff:a.b.c.d, so v4-mapped IPv6 is the same key). */
struct dest_key {
	__u32 addr[4]; /* network byte order */
	__u16 port;    /* host byte order */
	__u16 _pad;
};

/* What happens to a connect at the limit (prod): refused, or held until a slot frees. The
 * queue's bounds are shares of the limit, in percent: up to wait_pct every connect waits,
 * from there to refuse_pct a rising share is refused, past it all are. */
struct queue_policy {
	__u32 overflow; /* LIMITER_OVERFLOW_* */
	__u16 wait_pct;
	__u16 refuse_pct;
	__u64 max_wait_ns; /* a queued connect never succeeds later than this */
};

/* Written by the agent; absent means initial limit and global mode. The latencies are the
 * controller's view, published so that `status` can show them without the agent. */
struct dest_policy {
	__u32 limit;
	__u32 mode;        /* LIMITER_MODE_* */
	__u64 baseline_ns; /* 0: not known yet */
	__u64 p90_ns;      /* 0: not known yet */
	/* Several addresses sharing one limit (a configured destination) are all counted under
	 * this key, whose own policy holds the limit; port 0 means "this address itself". */
	struct dest_key account_as;
	__u32 _pad;
	struct queue_policy queue; /* overflow 0: the global one */
	__u64 wait_p50_ns; /* queued connects' recent waits; 0: none */
	__u64 wait_p99_ns;
};

/* Owned by the kernel, created on a destination's first connect. Never evicted: the agent
 * removes an entry only once it has had nothing in flight for a while (last_active_ns). */
struct dest_state {
	/* Identifies this incarnation of the entry: a socket whose slot was taken from a
	 * removed predecessor must not decrement its successor. */
	__u64 created_ns;
	__u64 last_active_ns; /* last slot taken or returned */
	__s64 inflight;
	__u64 admitted;
	__u64 shed;
	__u64 would_shed;
	__u64 redirected;     /* connects at the limit handed to a peer (prod) */
	__u64 would_redirect; /* connects at the limit shadow let through while a peer had room */
	__u64 connect_failed;
	__u64 closed;
	/* Exchanges seen but not timed: TLS 1.3's first two on each connection, and each
	 * connection whose exchanges cannot be told apart (HTTP/2 over TLS) once. */
	__u64 untimed;
	/* Cleartext HTTP/1.x answers by status, beside the 2xx and 3xx ones: 4xx but 429,
	 * 429, 5xx but 503, 503. */
	__u64 answers_4xx;
	__u64 answers_429;
	__u64 answers_5xx;
	__u64 answers_503;
	/* Overflow = queue: connects waiting now, and since the entry was made, those queued,
	 * admitted from the queue, refused as it was full, failed at the maximum wait, and
	 * abandoned by the application while waiting. */
	__s64 waiting;
	__u64 queued;
	__u64 queue_admitted;
	__u64 queue_full;
	__u64 queue_expired;
	__u64 queue_abandoned;
};

/* Written by the agent for each member of a configured group: where a connect to this
 * destination goes when it is at its limit, tried in this order. All of one address family
 * (all IPv4, stored v4-mapped, or all IPv6), as the connect can only be rewritten within it. */
struct dest_peers {
	__u32 count; /* <= LIMITER_MAX_PEERS */
	struct dest_key peers[LIMITER_MAX_PEERS];
};

/* Written by the agent; one entry. */
struct limiter_config {
	__u32 abi_version;
	__u32 default_mode;
	__u32 initial_limit;
	__u32 _pad;
	__u64 heartbeat_ns; /* CLOCK_MONOTONIC, refreshed by the agent */
	__u64 heartbeat_timeout_ns;
	struct queue_policy queue;
};

/* Global counters, one copy per CPU. */
struct global_stats {
	__u64 ringbuf_drops;
	__u64 table_full; /* connects to a new destination admitted untracked: no room for it */
	__u64 fail_open;
	__u64 storage_errors; /* no per-socket storage: admitted untracked */
};

/* Per-socket state (SK_STORAGE): dies with the socket. */
struct sock_state {
	/* Where the socket is connected and holds its slot: a peer after fall-forward. */
	struct dest_key dest;
	__u32 holds_slot; /* 1 while this socket counts in dest's inflight */
	__u64 dest_created_ns;
	__u32 established;
	__u32 phase; /* LIMITER_PHASE_* */
	__u64 connect_ns;
	__u64 request_ns;       /* first payload byte of the outstanding request */
	__u32 request_inflight; /* dest's inflight when that request started; before the
				 * first, when the connection was admitted */
	__u32 next_seq;         /* one past the last payload byte sent: older is a retransmit */
	__u32 flags;            /* LIMITER_SOCK_* */
	/* What the application connected to, when LIMITER_SOCK_REDIRECTED: getpeername says so. */
	struct dest_key requested;
	__u8 proto;     /* LIMITER_PROTO_* */
	__u8 tls;       /* LIMITER_TLS_* */
	__u8 untimed;   /* TLS 1.3: application flights still to pass over untimed */
	__u8 segments;  /* client payload segments read for the protocol, up to a bound */
	__u32 h2_stream; /* h2c: the stream of the outstanding request */
	/* Overflow = queue. */
	__u32 waiting;     /* 1 while queued: the SYN is held until a slot frees */
	__u32 max_wait_ms; /* the queue's, when it joined */
	__u64 queued_ns;   /* when it joined */
	/* The application's TCP_USER_TIMEOUT and TCP_SYNCNT while timers_set: a queued connect
	 * runs on ours until it is established or connects again. */
	__u32 user_timeout_ms;
	__u16 syn_retries;
	__u16 timers_set;
};

/* A decision, sent to the agent through the ring buffer. */
struct limiter_event {
	__u64 ts_ns;
	struct dest_key dest;
	struct dest_key peer; /* REDIRECTED, WOULD_REDIRECT: the peer; else zero */
	__u32 kind;           /* LIMITER_EVENT_* */
	__u32 pid;
	__u32 limit;
	__u32 inflight;
	char comm[16];
};

/* A latency sample or outcome, sent to the agent through the `signals` ring buffer. */
struct limiter_signal {
	__u64 ts_ns;
	__u64 value_ns; /* latency (SAMPLE), handshake time (HANDSHAKE), wait (ERROR, GAVE_UP,
			 * HUNG_UP), else 0 */
	struct dest_key dest;
	__u32 kind;     /* LIMITER_SIGNAL_* */
	__u32 inflight; /* dest's inflight when the request started (SAMPLE), or when the
			 * connection was admitted, itself included (HANDSHAKE) */
	__u32 status;   /* SAMPLE on cleartext HTTP/1.x: the answer's status code; else 0 */
};

#endif /* LIMITER_ABI_H */
