/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/* Decision events to the agent, with batched wake-ups. */
#ifndef LIMITER_EVENTS_H
#define LIMITER_EVENTS_H

#include "maps.h"

/*
 * A wake-up per event costs the application about 10 us on its connect path, so the
 * agent is only woken once wakeup_bytes are pending; it also drains on its own timer.
 */
static __always_inline void emit_decision(const struct limiter_config *cfg, __u32 kind,
					  const struct dest_key *key, __u32 limit, __s64 inflight)
{
	struct limiter_event ev = {};
	struct global_stats *gs;
	__u64 flags;

	ev.ts_ns = bpf_ktime_get_ns();
	ev.dest = *key;
	ev.kind = kind;
	ev.pid = bpf_get_current_pid_tgid() >> 32;
	ev.limit = limit;
	ev.inflight = inflight;
	bpf_get_current_comm(ev.comm, sizeof(ev.comm));
	flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= cfg->wakeup_bytes ?
			BPF_RB_FORCE_WAKEUP :
			BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&events, &ev, sizeof(ev), flags) == 0)
		return;
	gs = global_stats();
	if (gs)
		gs->ringbuf_drops++;
}

#endif /* LIMITER_EVENTS_H */
