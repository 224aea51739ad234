/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * Queueing at connect (overflow = queue): a connect at the limit passes the connect hook,
 * but its SYN is held (dropped on egress, before it leaves the machine) until a slot frees.
 * TCP takes a dropped SYN for a lost one and sends it again on its retransmission timer;
 * each retransmission asks for a slot again. So nothing of a waiting connect reaches the
 * upstream, the application's own connect timeout ends its wait, and a connect that gives up
 * sent nothing.
 *
 * sockops shortens a waiting socket's SYN timer (queue_rto_jiffies instead of Linux's 1 s),
 * so that a freed slot is asked for soon, and sets TCP_USER_TIMEOUT to the maximum wait:
 * TCP then fails a connect not established by then with ETIMEDOUT, at that time (it clamps
 * its timer to the deadline). The application's own timers are put back once it is
 * established, or when the socket connects again.
 *
 * Order: none. A freed slot goes to the first SYN that asks for it: a waiter's
 * retransmission, or a new connect's first SYN, which is admitted at once. Keeping freed
 * slots for the waiters would take knowing which waiter came first, which a count cannot
 * tell once waiters leave out of order.
 */
#ifndef LIMITER_QUEUE_H
#define LIMITER_QUEUE_H

#include "maps.h"
#include "accounting.h"
#include "events.h"

#define NSEC_PER_MSEC 1000000ULL

/* Set by the loader when some destination queues (the sock_ops program is attached with
 * it): otherwise no socket ever waits, and a SYN leaves without a storage lookup. */
const volatile __u8 queueing = 0;

/* The SYN retransmission timer of a waiting socket, in jiffies; the loader sets it from the
 * kernel's HZ (25 is 100 ms at Debian's 250). */
const volatile __u32 queue_rto_jiffies = 25;

/* The queue policy that applies to `policy`'s destination. */
static __always_inline const struct queue_policy *queue_of(const struct dest_policy *policy,
							   const struct limiter_config *cfg)
{
	return policy && policy->queue.overflow != LIMITER_OVERFLOW_DEFAULT ? &policy->queue :
									      &cfg->queue;
}

/*
 * Whether a connect that found `occupied` (in flight plus waiting, before it) may wait: up
 * to wait_pct of the limit all may, from there to refuse_pct a share rising from none to all
 * is refused, past it none may. In percent: occupied * 100 against the limit times each.
 */
static __always_inline int may_wait(const struct queue_policy *q, __u32 limit, __s64 occupied)
{
	__u64 at = occupied > 0 ? (__u64)occupied * 100 : 0;
	__u64 wait_to = (__u64)limit * q->wait_pct, refuse_from = (__u64)limit * q->refuse_pct;

	if (at < wait_to)
		return 1;
	if (at >= refuse_from)
		return 0;
	/* Refused with probability (at - wait_to) / (refuse_from - wait_to). */
	return bpf_get_prandom_u32() % (refuse_from - wait_to) >= at - wait_to;
}

/*
 * Puts a connect that found the limit reached (`inflight` before it, its own slot already
 * given back) in the queue of `key`, if the queue's bounds let it. 1: it waits.
 */
static __always_inline int queue_join(struct sock_state *ss, struct dest_state *st,
				      const struct dest_key *key, const struct queue_policy *q,
				      __u32 limit, __s64 inflight)
{
	/* Count first, then check, as for slots: racing connects never both see the last place. */
	__s64 waiting = __sync_fetch_and_add(&st->waiting, 1);

	if (!may_wait(q, limit, inflight + waiting)) {
		__sync_fetch_and_add(&st->waiting, -1);
		__sync_fetch_and_add(&st->queue_full, 1);
		return 0;
	}
	ss->dest = *key;
	ss->dest_created_ns = st->created_ns;
	ss->established = 0;
	ss->phase = LIMITER_PHASE_IDLE;
	ss->flags = 0; /* its connect's outcome is reported once it is admitted */
	ss->max_wait_ms = q->max_wait_ns / NSEC_PER_MSEC;
	ss->queued_ns = bpf_ktime_get_ns();
	ss->waiting = 1;
	__sync_fetch_and_add(&st->queued, 1);
	return 1;
}

/* Takes the socket out of its queue, if it is still in one: 1 if it was. Atomic exchange,
 * as for slots: its admission and its release may race. `*st`: its destination, if still
 * the same entry. */
static __always_inline int queue_leave(struct sock_state *ss, struct dest_state **st)
{
	*st = 0;
	if (!ss->waiting || !__sync_lock_test_and_set(&ss->waiting, 0))
		return 0;
	*st = bpf_map_lookup_elem(&dests, &ss->dest);
	if (*st && (*st)->created_ns != ss->dest_created_ns)
		*st = 0; /* removed since: its count went with it */
	if (*st)
		__sync_fetch_and_add(&(*st)->waiting, -1);
	return 1;
}

/* A waiting socket ended before it was admitted: TCP failed it at the maximum wait
 * (`timed_out`), or the application closed it (its own timeout, or it was killed). It sent
 * nothing: no connect outcome is reported, only the wait. */
static __always_inline void queue_abandon(struct sock_state *ss, int timed_out)
{
	struct dest_state *st;

	if (!queue_leave(ss, &st))
		return;
	ss->flags |= LIMITER_SOCK_CONNECT_DONE;
	if (st)
		__sync_fetch_and_add(timed_out ? &st->queue_expired : &st->queue_abandoned, 1);
	emit_signal(ss, timed_out ? LIMITER_SIGNAL_WAIT_EXPIRED : LIMITER_SIGNAL_WAIT_ABANDONED,
		    bpf_ktime_get_ns() - ss->queued_ns, 0);
}

/*
 * A waiting socket's SYN on its way out: 1 lets it go, 0 holds it. It goes once it takes a
 * free slot, or when the agent is gone (fail open); past the maximum wait it is held, and
 * TCP fails the connect.
 */
static __always_inline int queue_syn(struct sock_state *ss)
{
	struct limiter_config *cfg;
	struct dest_policy *policy;
	struct dest_state *st;
	__u32 zero = 0, limit;
	__u64 now, waited;
	int alive;

	cfg = bpf_map_lookup_elem(&config, &zero);
	st = bpf_map_lookup_elem(&dests, &ss->dest);
	if (!cfg || !st || st->created_ns != ss->dest_created_ns) {
		queue_leave(ss, &st); /* nothing left to wait for: admitted untracked */
		return 1;
	}
	policy = bpf_map_lookup_elem(&policies, &ss->dest);
	limit = policy ? policy->limit : cfg->initial_limit;
	alive = agent_alive(cfg);
	now = bpf_ktime_get_ns();
	waited = now - ss->queued_ns;
	if (alive && waited > (__u64)ss->max_wait_ms * NSEC_PER_MSEC)
		return 0;
	/* Reserve first, then check, as at connect. */
	if (slot_take(ss, st, &ss->dest) >= limit && alive) {
		ss->holds_slot = 0;
		__sync_fetch_and_add(&st->inflight, -1);
		return 0;
	}
	queue_leave(ss, &st);
	if (st) {
		__sync_fetch_and_add(&st->admitted, 1);
		__sync_fetch_and_add(&st->queue_admitted, 1);
	}
	emit_signal_at(ss, LIMITER_SIGNAL_WAITED, now, waited, 0, 0);
	return 1;
}

#endif /* LIMITER_QUEUE_H */
