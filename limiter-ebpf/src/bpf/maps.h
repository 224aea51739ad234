/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/* Maps, pinned by name under the agent's per-cgroup directory. */
#ifndef LIMITER_MAPS_H
#define LIMITER_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "limiter_abi.h"

/* Default table size; the agent overrides it at load time (--max-destinations). */
#define DEFAULT_MAX_DESTINATIONS 65536

/* A plain hash, not an LRU: a flood of new destinations must never push out one that holds
 * slots. When it is full, new destinations fail open (global_stats.table_full). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DEFAULT_MAX_DESTINATIONS);
	__type(key, struct dest_key);
	__type(value, struct dest_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dests SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DEFAULT_MAX_DESTINATIONS);
	__type(key, struct dest_key);
	__type(value, struct dest_policy);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} policies SEC(".maps");

/* Fall-forward candidates of the members of configured groups, written by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* usually a handful of entries: pay for those only */
	__uint(max_entries, LIMITER_PEERS_ENTRIES);
	__type(key, struct dest_key);
	__type(value, struct dest_peers);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct limiter_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct global_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* required for SK_STORAGE */
	__type(key, int);
	__type(value, struct sock_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sockets SEC(".maps");

/* Decisions (shed, would_shed, redirected, would_redirect), with pid and comm. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, LIMITER_EVENTS_BYTES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} events SEC(".maps");

/* Latency samples and outcomes; the agent sizes it (--signal-buffer-kib). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} signals SEC(".maps");

static __always_inline struct global_stats *global_stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&stats, &zero);
}

/* The agent's heartbeat is recent: limits are enforced. */
static __always_inline int agent_alive(const struct limiter_config *cfg)
{
	return bpf_ktime_get_ns() - cfg->heartbeat_ns <= cfg->heartbeat_timeout_ns;
}

#endif /* LIMITER_MAPS_H */
