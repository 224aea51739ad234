/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * limiter: per-destination admission of outbound TCP connects from one cgroup.
 *
 *   cgroup/connect4,6     admit; at the limit, redirect to a peer with room or refuse
 *   cgroup/getpeername4,6 a redirected socket reports the address it asked for
 *   cgroup/sock_release   returns the slot when the socket is released
 *   cgroup_skb egress     a client flight the protocol calls a request starts one; a
 *                         queued connect's SYN leaves only once it takes a slot
 *   sockops               a queued connect's SYN timer and deadline
 *   cgroup_skb ingress    the first server payload that answers it ends it: a sample
 *   tp_btf state change   established times the handshake; a peer's FIN ends a request;
 *                         TCP_CLOSE (a RST or a timeout the kernel acted on) returns the
 *                         slot at once
 *
 * Every path fails open: a missing map entry, a full table or an allocation failure admits
 * the connect.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/errno.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "limiter_abi.h"
#include "maps.h"
#include "accounting.h"
#include "events.h"
#include "signal.h"
#include "fallforward.h"

#define SOCK_STREAM 1
#define SOL_TCP 6
/* The most TCP_SYNCNT takes. */
#define MAX_SYN_RETRIES 127
#define CONNECT_ALLOW 1
#define CONNECT_REFUSE 0
/* admit()'s third verdict: allow, after rewriting the address to the chosen peer. */
#define CONNECT_REDIRECT 2

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by the loader: 0 on kernels before 5.18, where bpf_set_retval does not exist. The
 * verifier never walks the dead branch of a constant, so the call does not fail the load. */
const volatile __u8 have_set_retval = 1;

static __always_inline int refuse(void)
{
	if (have_set_retval)
		bpf_set_retval(-ECONNREFUSED);
	return CONNECT_REFUSE;
}

static __always_inline void count_storage_error(void)
{
	struct global_stats *gs = global_stats();

	if (gs)
		gs->storage_errors++;
}

/* A new destination with no room in the table: admitted, untracked, counted. A socket
 * connecting again keeps no state from its earlier attempt, which gives that slot back. */
static __always_inline int admit_untracked(struct bpf_sock *sk)
{
	struct sock_state *ss = bpf_sk_storage_get(&sockets, sk, 0, 0);
	struct global_stats *gs = global_stats();

	if (ss) {
		slot_release(ss, FROM_CGROUP);
		bpf_sk_storage_delete(&sockets, sk);
	}
	if (gs)
		gs->table_full++;
	return CONNECT_ALLOW;
}

static __always_inline int shed(const struct dest_key *key, struct dest_state *st, __u32 limit,
				__s64 inflight)
{
	__sync_fetch_and_add(&st->shed, 1);
	emit_decision(LIMITER_EVENT_SHED, key, 0, limit, inflight);
	return refuse();
}

/*
 * Full in prod, no peer to hand the connect to, the agent alive, and a socket without state:
 * refused before any is made, since creating it is most of what a connect costs and a
 * refusal needs none. A count that reads full may include a racing connect that is itself
 * about to be refused; taking a slot to check would have seen the same.
 */
static __always_inline int refused_at_once(struct bpf_sock *sk, const struct dest_key *key,
					   const struct dest_state *st, __u32 limit, __u32 mode,
					   const struct queue_policy *q, const struct limiter_config *cfg)
{
	return mode == LIMITER_MODE_PROD && q->overflow != LIMITER_OVERFLOW_QUEUE &&
	       st->inflight >= limit && agent_alive(cfg) &&
	       !bpf_map_lookup_elem(&peers, key) && !bpf_sk_storage_get(&sockets, sk, 0, 0);
}

/* CONNECT_ALLOW, CONNECT_REFUSE, or CONNECT_REDIRECT with the peer in `redirect`. */
static __always_inline int admit(struct bpf_sock_addr *ctx, const struct dest_key *asked,
				 struct dest_key *redirect)
{
	/* Read once: the verifier refuses a second read through a pointer into the context. */
	struct bpf_sock *sk = ctx->sk;
	const struct dest_key *key = asked, *peer;
	const struct queue_policy *q;
	__u32 zero = 0, mode, limit;
	struct limiter_config *cfg;
	struct dest_policy *policy;
	struct dest_state *st;
	struct sock_state *ss;
	struct global_stats *gs;
	__s64 before;

	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return CONNECT_ALLOW;
	policy = bpf_map_lookup_elem(&policies, key);
	mode = policy && policy->mode != LIMITER_MODE_DEFAULT ? policy->mode : cfg->default_mode;
	if (mode != LIMITER_MODE_SHADOW && mode != LIMITER_MODE_PROD)
		return CONNECT_ALLOW;
	/* A member of a configured destination is counted, and limited, under its group's key. */
	if (policy && policy->account_as.port) {
		key = &policy->account_as;
		policy = bpf_map_lookup_elem(&policies, key);
	}
	limit = policy ? policy->limit : cfg->initial_limit;
	q = queue_of(policy, cfg);

	st = dest_get_or_create(key);
	if (!st)
		return admit_untracked(sk);
	if (refused_at_once(sk, key, st, limit, mode, q, cfg))
		return shed(key, st, limit, st->inflight);
	ss = bpf_sk_storage_get(&sockets, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!ss) {
		count_storage_error();
		return CONNECT_ALLOW;
	}
	/* A socket may connect again after a failed attempt: give that attempt's slot back. */
	slot_release(ss, FROM_CGROUP);

	/* Reserve first, then check: the fetch-and-add orders racing connects, so two of them
	 * can never both see the last free slot. */
	before = slot_take(ss, st, key);
	if (before < limit) {
		__sync_fetch_and_add(&st->admitted, 1);
		return CONNECT_ALLOW;
	}
	if (!agent_alive(cfg)) {
		/* The agent is gone or stuck: never leave the application clamped. */
		gs = global_stats();
		if (gs)
			gs->fail_open++;
		__sync_fetch_and_add(&st->admitted, 1);
		return CONNECT_ALLOW;
	}
	if (mode == LIMITER_MODE_SHADOW) {
		peer = peer_with_room(ss, key, cfg, 0);
		if (peer) {
			__sync_fetch_and_add(&st->would_redirect, 1);
			emit_decision(LIMITER_EVENT_WOULD_REDIRECT, key, peer, limit, before);
		} else {
			__sync_fetch_and_add(&st->would_shed, 1);
			emit_decision(LIMITER_EVENT_WOULD_SHED, key, 0, limit, before);
		}
		__sync_fetch_and_add(&st->admitted, 1);
		return CONNECT_ALLOW;
	}
	slot_untake(ss, st);
	peer = peer_with_room(ss, key, cfg, 1);
	if (peer) {
		/* The socket now holds the peer's slot: its release and latency go to the peer. */
		ss->requested = *asked;
		ss->flags |= LIMITER_SOCK_REDIRECTED;
		*redirect = *peer;
		__sync_fetch_and_add(&st->redirected, 1);
		emit_decision(LIMITER_EVENT_REDIRECTED, key, peer, limit, before);
		return CONNECT_REDIRECT;
	}
	if (q->overflow != LIMITER_OVERFLOW_QUEUE)
		return shed(key, st, limit, before);
	if (queue_join(ss, st, key, q, limit, before)) {
		emit_decision(LIMITER_EVENT_QUEUED, key, 0, limit, before);
		return CONNECT_ALLOW;
	}
	__sync_fetch_and_add(&st->shed, 1);
	emit_decision(LIMITER_EVENT_QUEUE_FULL, key, 0, limit, before);
	return refuse();
}

/* The socket's state when fall-forward connected it elsewhere than it asked. */
static __always_inline struct sock_state *redirected_state(struct bpf_sock_addr *ctx)
{
	struct sock_state *ss = bpf_sk_storage_get(&sockets, ctx->sk, 0, 0);

	return ss && (ss->flags & LIMITER_SOCK_REDIRECTED) ? ss : 0;
}

/* user_ip6 takes only 4-byte stores: volatile keeps clang from merging two into one. */
static __always_inline void write_user_ip6(struct bpf_sock_addr *ctx, const struct dest_key *to)
{
	*(volatile __u32 *)&ctx->user_ip6[0] = to->addr[0];
	*(volatile __u32 *)&ctx->user_ip6[1] = to->addr[1];
	*(volatile __u32 *)&ctx->user_ip6[2] = to->addr[2];
	*(volatile __u32 *)&ctx->user_ip6[3] = to->addr[3];
}

SEC("cgroup/connect4")
int limiter_connect4(struct bpf_sock_addr *ctx)
{
	struct dest_key key = {}, peer;
	int verdict;

	if (ctx->type != SOCK_STREAM || ctx->protocol != IPPROTO_TCP)
		return CONNECT_ALLOW;
	/* IPv4 is stored v4-mapped, so an IPv6 socket reaching it via ::ffff:a.b.c.d shares the key. */
	key.addr[2] = bpf_htonl(0xffff);
	key.addr[3] = ctx->user_ip4;
	key.port = bpf_ntohs(ctx->user_port);
	verdict = admit(ctx, &key, &peer);
	if (verdict != CONNECT_REDIRECT)
		return verdict;
	/* Peers share the member's family: an IPv4 member's peers are v4-mapped. */
	ctx->user_ip4 = peer.addr[3];
	ctx->user_port = bpf_htons(peer.port);
	return CONNECT_ALLOW;
}

SEC("cgroup/connect6")
int limiter_connect6(struct bpf_sock_addr *ctx)
{
	struct dest_key key = {}, peer;
	int verdict;

	if (ctx->type != SOCK_STREAM || ctx->protocol != IPPROTO_TCP)
		return CONNECT_ALLOW;
	/* user_ip6 allows only 4-byte loads: one per word. */
	key.addr[0] = ctx->user_ip6[0];
	key.addr[1] = ctx->user_ip6[1];
	key.addr[2] = ctx->user_ip6[2];
	key.addr[3] = ctx->user_ip6[3];
	key.port = bpf_ntohs(ctx->user_port);
	verdict = admit(ctx, &key, &peer);
	if (verdict != CONNECT_REDIRECT)
		return verdict;
	write_user_ip6(ctx, &peer);
	ctx->user_port = bpf_htons(peer.port);
	return CONNECT_ALLOW;
}

SEC("cgroup/getpeername4")
int limiter_getpeername4(struct bpf_sock_addr *ctx)
{
	struct sock_state *ss = redirected_state(ctx);

	if (ss) {
		ctx->user_ip4 = ss->requested.addr[3];
		ctx->user_port = bpf_htons(ss->requested.port);
	}
	return 1; /* getpeername hooks may only rewrite, never fail the call */
}

SEC("cgroup/getpeername6")
int limiter_getpeername6(struct bpf_sock_addr *ctx)
{
	struct sock_state *ss = redirected_state(ctx);

	if (ss) {
		write_user_ip6(ctx, &ss->requested);
		ctx->user_port = bpf_htons(ss->requested.port);
	}
	return 1;
}

SEC("cgroup/sock_release")
int limiter_sock_release(struct bpf_sock *sk)
{
	struct sock_state *ss = bpf_sk_storage_get(&sockets, sk, 0, 0);

	/* close() of a socket no RST ended: the normal close of an established socket (its FIN
	 * handshake no longer holds the upstream), an abandoned or timed-out connect, a killed
	 * process. */
	if (ss)
		connection_over(ss, ENDED_BY_CLOSE, FROM_CGROUP);
	return 1;
}

SEC("cgroup_skb/egress")
int limiter_egress(struct __sk_buff *skb)
{
	struct tcp_segment seg;
	struct sock_state *ss;

	if (parse_tcp(skb, &seg))
		return 1;
	/* A connect's SYN leaves unless it is queued (1 lets it go, 0 holds it). */
	if (seg.syn) {
		if (!queueing)
			return 1;
		ss = packet_sock_state(skb);
		return ss && ss->waiting ? queue_syn(ss) : 1;
	}
	/* Only payload starts a request: ACKs and FINs leave before any lookup. */
	if (!seg.payload)
		return 1;
	ss = packet_sock_state(skb);
	if (ss)
		on_egress(skb, ss, &seg, skb->tstamp);
	return 1; /* payload is observed only: always let it through */
}

/* Puts back the TCP_USER_TIMEOUT and TCP_SYNCNT a queued connect ran on. */
static __always_inline void restore_timers(struct bpf_sock_ops *skops, struct sock_state *ss)
{
	int value;

	if (!ss->timers_set)
		return;
	ss->timers_set = 0;
	value = ss->user_timeout_ms;
	bpf_setsockopt(skops, SOL_TCP, TCP_USER_TIMEOUT, &value, sizeof(value));
	value = ss->syn_retries;
	if (value)
		bpf_setsockopt(skops, SOL_TCP, TCP_SYNCNT, &value, sizeof(value));
}

/* Runs a waiting connect on the queue's timers, keeping the application's to put back. */
static __always_inline void set_timers(struct bpf_sock_ops *skops, struct sock_state *ss)
{
	int value, len = sizeof(value);

	ss->user_timeout_ms =
		bpf_getsockopt(skops, SOL_TCP, TCP_USER_TIMEOUT, &value, len) ? 0 : value;
	ss->syn_retries = bpf_getsockopt(skops, SOL_TCP, TCP_SYNCNT, &value, len) ? 0 : value;
	ss->timers_set = 1;
	/* TCP fails the connect at the maximum wait, at that time. */
	value = ss->max_wait_ms;
	bpf_setsockopt(skops, SOL_TCP, TCP_USER_TIMEOUT, &value, len);
	/* The deadline alone ends the wait, not a count of retransmissions, which the short
	 * timer would use up early. */
	value = MAX_SYN_RETRIES;
	bpf_setsockopt(skops, SOL_TCP, TCP_SYNCNT, &value, len);
}

/*
 * A queued connect's timers (queue.h), set on the kernel's own calls: its SYN's first
 * retransmission timeout, then, as the SYN is about to be sent, its deadline; the
 * application's own put back once established, or when the socket connects again (after a
 * wait that failed). Other sockets are left alone.
 */
SEC("sockops")
int limiter_sockops(struct bpf_sock_ops *skops)
{
	int op = skops->op;
	struct sock_state *ss;
	struct bpf_sock *sk;

	if (op != BPF_SOCK_OPS_TIMEOUT_INIT && op != BPF_SOCK_OPS_TCP_CONNECT_CB &&
	    op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB)
		return 1;
	sk = skops->sk;
	if (!sk)
		return 1;
	ss = bpf_sk_storage_get(&sockets, sk, 0, 0);
	if (!ss || !(ss->waiting || ss->timers_set))
		return 1;
	if (op == BPF_SOCK_OPS_TIMEOUT_INIT) {
		if (ss->waiting)
			skops->reply = queue_rto_jiffies;
		return 1;
	}
	restore_timers(skops, ss);
	if (op == BPF_SOCK_OPS_TCP_CONNECT_CB && ss->waiting)
		set_timers(skops, ss);
	return 1;
}

SEC("cgroup_skb/ingress")
int limiter_ingress(struct __sk_buff *skb)
{
	struct tcp_segment seg;
	struct sock_state *ss;

	/* Only payload can answer a request: everything else leaves before any lookup. How a
	 * connection ends is the state change's to tell, after TCP has checked the segment. */
	if (parse_tcp(skb, &seg) || !seg.payload)
		return 1;
	ss = packet_sock_state(skb);
	if (ss)
		on_ingress(skb, ss, &seg);
	return 1;
}

/* The kernel's struct sock, by BTF: only the field read here, which the loader relocates
 * to its offset in the running kernel. */
struct sock {
	int sk_err;
} __attribute__((preserve_access_index));

#define TCP_ESTABLISHED 1
#define TCP_CLOSE 7
#define TCP_CLOSE_WAIT 8

/*
 * Every TCP socket's state changes, on every cgroup: ours are those with our storage. The
 * state moves only on what TCP accepted, after its own checks of sequence numbers
 * (RFC 5961), checksums and timers, so a forged or stale RST, SYN-ACK or FIN moves nothing.
 * Arguments: the socket, its old state, its new state.
 */
SEC("tp_btf/inet_sock_set_state")
int limiter_state_change(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	int state = ctx[2], err;
	struct sock_state *ss;

	if (state != TCP_ESTABLISHED && state != TCP_CLOSE_WAIT && state != TCP_CLOSE)
		return 0;
	ss = bpf_sk_storage_get(&sockets, sk, 0, 0);
	if (!ss)
		return 0;
	if (state == TCP_ESTABLISHED) {
		if (!ss->established)
			handshake_done(ss);
	} else if (state == TCP_CLOSE_WAIT) {
		/* The peer ended the connection on an outstanding request. A FIN microseconds
		 * after a client's goodbye is the server answering it by closing: user space
		 * tells that from a hang-up by the wait. */
		request_ended(ss, LIMITER_SIGNAL_HUNG_UP);
	} else {
		/* tcp_reset and tcp_write_err set the error before moving to TCP_CLOSE. */
		err = sk->sk_err;
		connection_over(ss,
				!err		  ? ENDED_BY_CLOSE :
				err == ETIMEDOUT ? ENDED_BY_TIMEOUT :
						   ENDED_BY_RESET,
				FROM_TRACING);
	}
	return 0;
}
