/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/* Records to the agent through ring buffers, with batched wake-ups. */
#ifndef LIMITER_EVENTS_H
#define LIMITER_EVENTS_H

#include "maps.h"

/*
 * A wake-up per record costs the application about 10 us on its own path, so the agent is
 * woken once per batch: when this record makes the pending bytes cross the ring's
 * threshold. Records past it add no wake-up: the one already sent brings the agent, which
 * also drains on its own timer. A full ring drops the record and counts it: the
 * application never waits for the agent.
 *
 * The thresholds are set by the loader, which sizes the rings (at most a quarter of each):
 * constants to the verifier, so a record costs one query of the ring and no map lookup.
 * Left at 0, a record wakes the agent when it lands in an empty ring.
 */
const volatile __u32 events_wakeup_bytes;
const volatile __u32 signals_wakeup_bytes;

static __always_inline void count_drop(void)
{
	struct global_stats *gs = global_stats();

	if (gs)
		gs->ringbuf_drops++;
}

/* Submits a record reserved in `ring`, waking the agent if it is the one that makes the
 * pending bytes cross `threshold`: reserving already counted it, header included. */
static __always_inline void ringbuf_submit_batched(void *ring, void *record, __u64 size,
						   __u64 threshold)
{
	__u64 pending = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA);

	size += BPF_RINGBUF_HDR_SZ;
	bpf_ringbuf_submit(record, pending >= threshold && pending < threshold + size ?
					   BPF_RB_FORCE_WAKEUP :
					   BPF_RB_NO_WAKEUP);
}

static __always_inline void emit_decision(__u32 kind, const struct dest_key *key,
					  const struct dest_key *peer, __u32 limit, __s64 inflight)
{
	/* Reserved in place: the record is written once, into the ring, never copied there. */
	struct limiter_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);

	if (!ev) {
		count_drop();
		return;
	}
	ev->ts_ns = bpf_ktime_get_ns();
	ev->dest = *key;
	if (peer)
		ev->peer = *peer;
	else
		__builtin_memset(&ev->peer, 0, sizeof(ev->peer));
	ev->kind = kind;
	ev->pid = bpf_get_current_pid_tgid() >> 32;
	ev->limit = limit;
	ev->inflight = inflight;
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	ringbuf_submit_batched(&events, ev, sizeof(*ev), events_wakeup_bytes);
}

/* A signal stamped `now_ns`: for callers that read the clock for its value anyway. */
static __always_inline void emit_signal_at(const struct sock_state *ss, __u32 kind, __u64 now_ns,
					   __u64 value_ns, __u32 inflight, __u32 status)
{
	struct limiter_signal *sig = bpf_ringbuf_reserve(&signals, sizeof(*sig), 0);

	if (!sig) {
		count_drop();
		return;
	}
	sig->ts_ns = now_ns;
	sig->value_ns = value_ns;
	sig->dest = ss->dest;
	sig->kind = kind;
	sig->inflight = inflight;
	sig->status = status;
	ringbuf_submit_batched(&signals, sig, sizeof(*sig), signals_wakeup_bytes);
}

static __always_inline void emit_signal(const struct sock_state *ss, __u32 kind, __u64 value_ns,
					__u32 inflight)
{
	emit_signal_at(ss, kind, bpf_ktime_get_ns(), value_ns, inflight, 0);
}

#endif /* LIMITER_EVENTS_H */
