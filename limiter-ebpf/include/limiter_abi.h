/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * The map ABI between the kernel programs and the agent: the single source of truth.
 *
 * limiter-common mirrors every struct below in Rust; its abi test compiles this header
 * and compares sizes and field offsets. Rules: fixed-width integers only, explicit
 * padding fields (hash keys compare bytes, so padding must be zeroed), no enums in
 * structs. Bump LIMITER_ABI_VERSION whenever a struct changes: the agent refuses to
 * reuse pinned maps of another version.
 */
#ifndef LIMITER_ABI_H
#define LIMITER_ABI_H

#include <linux/types.h>

#define LIMITER_ABI_VERSION 1

/* Modes. 0 in a per-destination policy means "use the global default". */
#define LIMITER_MODE_DEFAULT 0
#define LIMITER_MODE_OFF 1
#define LIMITER_MODE_SHADOW 2
#define LIMITER_MODE_PROD 3

/* Event kinds on the ring buffer. */
#define LIMITER_EVENT_SHED 1
#define LIMITER_EVENT_WOULD_SHED 2

/* A destination: IPv6 address (IPv4 as ::ffff:a.b.c.d, so v4-mapped IPv6 is the same key). */
struct dest_key {
	__u32 addr[4]; /* network byte order */
	__u16 port;    /* host byte order */
	__u16 _pad;
};

/* Written by the agent; absent means initial limit and global mode. The latencies are the
 * controller's view, published so that `status` can show them without the agent. */
struct dest_policy {
	__u32 limit;
	__u32 mode; /* LIMITER_MODE_* */
	__u64 baseline_ns; /* 0: not known yet */
	__u64 p90_ns;      /* 0: not known yet */
};

/* Owned by the kernel, created on a destination's first connect (LRU map). */
struct dest_state {
	/* Identifies this incarnation of the entry: a socket whose slot was taken from an
	 * evicted predecessor must not decrement its successor. */
	__u64 created_ns;
	__s64 inflight;
	__u64 admitted;
	__u64 shed;
	__u64 would_shed;
	__u64 redirected;
	__u64 connect_failed;
	__u64 closed;
	__u64 samples;
};

/* Written by the agent; one entry. */
struct limiter_config {
	__u32 abi_version;
	__u32 default_mode;
	__u32 initial_limit;
	/* Ring-buffer bytes pending before the kernel forces a wake-up of the agent. */
	__u32 wakeup_bytes;
	__u64 heartbeat_ns; /* CLOCK_MONOTONIC, refreshed by the agent */
	__u64 heartbeat_timeout_ns;
};

/* Global counters, one copy per CPU. */
struct global_stats {
	__u64 ringbuf_drops;
	__u64 dests_created; /* evictions = created - live entries */
	__u64 fail_open;
	__u64 storage_errors; /* no per-socket storage: admitted untracked */
};

/* Per-socket state (SK_STORAGE): dies with the socket. */
struct sock_state {
	struct dest_key dest;
	__u32 holds_slot;  /* 1 while this socket counts in dest's inflight */
	__u64 dest_created_ns;
	__u32 established;
	__u32 _pad;
};

/* A decision, sent to the agent through the ring buffer. */
struct limiter_event {
	__u64 ts_ns;
	struct dest_key dest;
	__u32 kind; /* LIMITER_EVENT_* */
	__u32 pid;
	__u32 limit;
	__u32 inflight;
	char comm[16];
	__u32 _pad;
};

#endif /* LIMITER_ABI_H */
