/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/* Slots: reserving one on connect, returning it exactly once when the socket ends. */
#ifndef LIMITER_ACCOUNTING_H
#define LIMITER_ACCOUNTING_H

#include "maps.h"

/* Where a slot is returned from. */
#define FROM_CGROUP 0
#define FROM_TRACING 1 /* the state-change tracepoint: tracing programs have no coarse clock */

/* For times the agent reads in seconds: the last tick's time, without the precise clock's
 * TSC read, which first waits for every load before it, where the program may use it.
 * `from` is a constant in every caller, so the other branch is compiled out. */
static __always_inline __u64 seconds_clock_ns(int from)
{
	return from == FROM_TRACING ? bpf_ktime_get_ns() : bpf_ktime_get_coarse_ns();
}

/* The destination's entry, created on first sight so the very first connect is governed;
 * NULL only when the table is full and the destination is new. */
static __always_inline struct dest_state *dest_get_or_create(const struct dest_key *key)
{
	struct dest_state *st = bpf_map_lookup_elem(&dests, key);
	struct dest_state fresh = {};

	if (st)
		return st;
	fresh.created_ns = bpf_ktime_get_ns();
	fresh.last_active_ns = fresh.created_ns;
	/* NOEXIST: when two CPUs race to create it, the loser just looks the winner's up. */
	bpf_map_update_elem(&dests, key, &fresh, BPF_NOEXIST);
	return bpf_map_lookup_elem(&dests, key);
}

/* Returns the slot a socket holds, if it still holds one; safe to call from every path. */
static __always_inline void slot_release(struct sock_state *ss, int from)
{
	struct dest_state *st;

	/* Atomic exchange: whichever of the move to TCP_CLOSE or sock_release gets here
	 * first wins. The plain read first spares the locked instruction when there is nothing to
	 * return. */
	if (!ss->holds_slot || !__sync_lock_test_and_set(&ss->holds_slot, 0))
		return;
	st = bpf_map_lookup_elem(&dests, &ss->dest);
	if (!st || st->created_ns != ss->dest_created_ns)
		return; /* removed since: its slot went with it */
	st->last_active_ns = seconds_clock_ns(from);
	__sync_fetch_and_add(&st->inflight, -1);
	if (ss->established)
		__sync_fetch_and_add(&st->closed, 1);
	else
		__sync_fetch_and_add(&st->connect_failed, 1);
}

/* Takes a slot for the socket; the count may pass the limit only transiently (see caller). */
static __always_inline __s64 slot_take(struct sock_state *ss, struct dest_state *st,
				       const struct dest_key *key)
{
	__s64 before;

	ss->dest = *key;
	ss->dest_created_ns = st->created_ns;
	ss->established = 0;
	ss->phase = LIMITER_PHASE_IDLE;
	ss->flags = 0;
	ss->connect_ns = bpf_ktime_get_ns();
	ss->holds_slot = 1;
	st->last_active_ns = ss->connect_ns;
	before = __sync_fetch_and_add(&st->inflight, 1);
	/* Reported with the handshake: until its first request, the field holds the count the
	 * connection was admitted at, itself included. */
	ss->request_inflight = before >= 0 ? before + 1 : 1;
	return before;
}

/* Undoes slot_take for a connect that is refused after all. The refusal is ours, not the
 * upstream's: mark the connect settled so that closing the socket reports no outcome. */
static __always_inline void slot_untake(struct sock_state *ss, struct dest_state *st)
{
	ss->holds_slot = 0;
	ss->flags |= LIMITER_SOCK_CONNECT_DONE;
	__sync_fetch_and_add(&st->inflight, -1);
}

#endif /* LIMITER_ACCOUNTING_H */
