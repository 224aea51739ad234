/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/* Records to the agent through ring buffers, with batched wake-ups. */
#ifndef LIMITER_EVENTS_H
#define LIMITER_EVENTS_H

#include "maps.h"

/*
 * A wake-up per record costs the application about 10 us on its own path, so the agent is
 * woken once per batch: when this record makes the pending bytes cross the threshold
 * (wakeup_bytes, at most a quarter of the ring). Records past it add no wake-up: the one
 * already sent brings the agent, which also drains on its own timer. A full ring drops the
 * record and counts it: the application never waits for the agent.
 */
static __always_inline void ringbuf_emit(void *ring, void *record, __u64 size)
{
	__u32 zero = 0;
	struct limiter_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct global_stats *gs;
	__u64 flags = BPF_RB_NO_WAKEUP, pending, threshold;

	if (cfg) {
		pending = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA);
		threshold = bpf_ringbuf_query(ring, BPF_RB_RING_SIZE) / 4;
		if (cfg->wakeup_bytes < threshold)
			threshold = cfg->wakeup_bytes;
		if (pending < threshold && pending + size >= threshold)
			flags = BPF_RB_FORCE_WAKEUP;
	}
	if (bpf_ringbuf_output(ring, record, size, flags) == 0)
		return;
	gs = global_stats();
	if (gs)
		gs->ringbuf_drops++;
}

static __always_inline void emit_decision(__u32 kind, const struct dest_key *key,
					  const struct dest_key *peer, __u32 limit, __s64 inflight)
{
	struct limiter_event ev = {};

	ev.ts_ns = bpf_ktime_get_ns();
	ev.dest = *key;
	if (peer)
		ev.peer = *peer;
	ev.kind = kind;
	ev.pid = bpf_get_current_pid_tgid() >> 32;
	ev.limit = limit;
	ev.inflight = inflight;
	bpf_get_current_comm(ev.comm, sizeof(ev.comm));
	ringbuf_emit(&events, &ev, sizeof(ev));
}

static __always_inline void emit_signal(const struct sock_state *ss, __u32 kind, __u64 value_ns,
					__u32 inflight)
{
	struct limiter_signal sig = {};

	sig.ts_ns = bpf_ktime_get_ns();
	sig.value_ns = value_ns;
	sig.dest = ss->dest;
	sig.kind = kind;
	sig.inflight = inflight;
	ringbuf_emit(&signals, &sig, sizeof(sig));
}

#endif /* LIMITER_EVENTS_H */
