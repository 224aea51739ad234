/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * The latency signal: per request, the time from its first payload byte sent to the first
 * payload byte received that answers it. Which flights are requests and which segments
 * answer them is the protocol's (protocol.h). Streamed responses thus give their first-byte
 * time, keep-alive connections a sample per exchange, and an upload is timed from its
 * first byte. How connections end is read from the kernel's own state changes, not from
 * the segments: a RST the kernel discards (out of window, forged) ends nothing.
 */
#ifndef LIMITER_SIGNAL_H
#define LIMITER_SIGNAL_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>

#include "maps.h"
#include "accounting.h"
#include "events.h"
#include "protocol.h"
#include "queue.h"

struct tcp_segment {
	__u32 seq;
	__u32 syn; /* a SYN without ACK: a connect's */
	__u32 payload;     /* bytes of TCP payload (all of a GSO/GRO super-packet) */
	__u32 payload_off; /* where the payload starts, from the network header */
};

/*
 * Direct packet access: cgroup_skb sees the packet from its network header on, and both
 * hooks run after the stack has put the IP and TCP headers in the linear area (it builds
 * them there on egress and pulls them there before the socket filter on ingress), so no
 * header is ever copied out with bpf_skb_load_bytes.
 */
static __always_inline int parse_tcp(struct __sk_buff *skb, struct tcp_segment *seg)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u32 l4_off, hdr_len;
	struct tcphdr *th;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr *iph = data;

		if ((void *)(iph + 1) > data_end || iph->protocol != IPPROTO_TCP)
			return -1;
		l4_off = iph->ihl * 4;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data;

		/* Extension headers are not followed: TCP sockets practically never get them. */
		if ((void *)(ip6 + 1) > data_end || ip6->nexthdr != IPPROTO_TCP)
			return -1;
		l4_off = sizeof(*ip6);
	} else {
		return -1;
	}
	/* l4_off is at most 60 (ihl is 4 bits): the verifier bounds the pointer from that. */
	th = data + l4_off;
	if ((void *)(th + 1) > data_end)
		return -1;
	hdr_len = l4_off + th->doff * 4;
	/* skb->len, not the IP length field: that is 0 for BIG TCP super-packets. */
	seg->payload = skb->len > hdr_len ? skb->len - hdr_len : 0;
	seg->payload_off = hdr_len;
	seg->seq = bpf_ntohl(th->seq);
	seg->syn = th->syn && !th->ack;
	return 0;
}

/* Our per-socket state for a packet's socket, if the connect hook admitted it. Storage
 * lookups take any socket and find nothing on request and timewait ones. */
static __always_inline struct sock_state *packet_sock_state(struct __sk_buff *skb)
{
	struct bpf_sock *sk = skb->sk;

	return sk ? bpf_sk_storage_get(&sockets, sk, 0, 0) : 0;
}

/* An exchange the kernel saw but could not time: counted on the destination for `status`,
 * and told to the agent, for which a destination answering only so has no latency to judge
 * a limit by. */
static __always_inline void untimed(const struct sock_state *ss)
{
	struct dest_state *st = bpf_map_lookup_elem(&dests, &ss->dest);

	if (st)
		__sync_fetch_and_add(&st->untimed, 1);
	emit_signal(ss, LIMITER_SIGNAL_UNTIMED, 0, 0);
}

/* An answer that is not a success, counted on the destination by class for `status`: the
 * lookup is paid by these only. */
static __always_inline void count_status(const struct sock_state *ss, __u32 status)
{
	struct dest_state *st = bpf_map_lookup_elem(&dests, &ss->dest);

	if (!st)
		return;
	if (status == 429)
		__sync_fetch_and_add(&st->answers_429, 1);
	else if (status == 503)
		__sync_fetch_and_add(&st->answers_503, 1);
	else if (status >= 500)
		__sync_fetch_and_add(&st->answers_5xx, 1);
	else
		__sync_fetch_and_add(&st->answers_4xx, 1);
}

/*
 * A segment with payload. The first flight sent while not awaiting a response that the
 * protocol calls a request starts one, at `sent_ns`, the segment's skb->tstamp. TCP stamps
 * every segment it sends with its own CLOCK_MONOTONIC send time (the departure time of the
 * EDT model, Linux 4.20+): the same clock as bpf_ktime_get_ns, read microseconds earlier on
 * this very path, so the request costs no clock read of its own. 0 (not set) falls back
 * to reading the clock.
 */
static __always_inline void on_egress(struct __sk_buff *skb, struct sock_state *ss,
				      const struct tcp_segment *seg, __u64 sent_ns)
{
	struct payload p = { .off = seg->payload_off, .len = seg->payload };
	struct dest_state *st;
	__u32 end = seg->seq + seg->payload;
	int kind;

	/* Serial arithmetic: a segment ending at or before what was sent is a retransmit. */
	if ((ss->flags & LIMITER_SOCK_SEQ_VALID) && (__s32)(end - ss->next_seq) <= 0)
		return;
	ss->next_seq = end;
	ss->flags |= LIMITER_SOCK_SEQ_VALID;
	/* Cleartext HTTP/1 is read on too: a CONNECT or an Upgrade may turn it into another
	 * protocol. */
	if (ss->segments < CLASSIFIED_SEGMENTS &&
	    (ss->proto == LIMITER_PROTO_PLAIN || ss->proto == LIMITER_PROTO_HTTP1) &&
	    classify(skb, ss, &p)) {
		if (ss->proto == LIMITER_PROTO_OPAQUE)
			untimed(ss);
		return;
	}
	if (ss->phase == LIMITER_PHASE_AWAITING)
		return; /* more of the same request */
	kind = flight_kind(skb, ss, &p);
	if (kind == FLIGHT_NONE)
		return;
	if (kind == FLIGHT_UNTIMED)
		ss->flags |= LIMITER_SOCK_UNTIMED;
	else
		ss->flags &= ~LIMITER_SOCK_UNTIMED;
	st = bpf_map_lookup_elem(&dests, &ss->dest);
	ss->request_inflight = st && st->inflight > 0 ? st->inflight : 0;
	ss->request_ns = sent_ns ? sent_ns : bpf_ktime_get_ns();
	ss->phase = LIMITER_PHASE_AWAITING;
}

/* How long the outstanding request has waited at `now`. A paced socket stamps a segment
 * with the time it is due to leave, which can be ahead of the clock: never negative. */
static __always_inline __u64 request_wait(const struct sock_state *ss, __u64 now)
{
	return now > ss->request_ns ? now - ss->request_ns : 0;
}

/* Ends the outstanding request with `kind`, reporting how long it had waited. */
static __always_inline void end_request(struct sock_state *ss, __u32 kind)
{
	__u64 now = bpf_ktime_get_ns();

	ss->phase = LIMITER_PHASE_IDLE;
	emit_signal_at(ss, kind, now, request_wait(ss, now), 0, 0);
}

/* The connect's outcome, once, if it never completed: refused or timed out (`kind`). */
static __always_inline void connect_failed(struct sock_state *ss, __u32 kind)
{
	if (ss->established || (__sync_fetch_and_or(&ss->flags, LIMITER_SOCK_CONNECT_DONE) &
				LIMITER_SOCK_CONNECT_DONE))
		return;
	emit_signal(ss, kind, 0, 0);
}

/* The socket is done; an outstanding request ends with `kind`, reporting how long it had
 * waited: a client's close microseconds after its last send is a goodbye (PostgreSQL
 * Terminate, MySQL COM_QUIT) and only user space knows what the destination normally takes. */
static __always_inline void request_ended(struct sock_state *ss, __u32 kind)
{
	if (ss->phase != LIMITER_PHASE_AWAITING)
		return;
	end_request(ss, kind);
}

/* How a connection ended. */
#define ENDED_BY_CLOSE 0   /* the application closed it, or both sides' FINs */
#define ENDED_BY_RESET 1   /* a RST the kernel accepted, or an ICMP error it acted on */
#define ENDED_BY_TIMEOUT 2 /* the kernel gave up retransmitting */

/* The connection is over, whichever of its release and its move to TCP_CLOSE comes first:
 * its place in a queue, the outcome of a connect that never completed (refused, timed out,
 * or abandoned) or of an outstanding request (an error, or the client giving up), then the
 * slot. The second caller finds all done. `from`: FROM_CGROUP or FROM_TRACING. */
static __always_inline void connection_over(struct sock_state *ss, int how, int from)
{
	queue_abandon(ss, how == ENDED_BY_TIMEOUT);
	connect_failed(ss, how == ENDED_BY_RESET ? LIMITER_SIGNAL_CONNECT_REFUSED :
						   LIMITER_SIGNAL_CONNECT_TIMEOUT);
	request_ended(ss, how == ENDED_BY_CLOSE ? LIMITER_SIGNAL_GAVE_UP : LIMITER_SIGNAL_ERROR);
	slot_release(ss, from);
}

/* The connect is established, timed from the connect hook. */
static __always_inline void handshake_done(struct sock_state *ss)
{
	__u64 now = bpf_ktime_get_ns();

	ss->established = 1;
	emit_signal_at(ss, LIMITER_SIGNAL_HANDSHAKE, now, now - ss->connect_ns,
		       ss->request_inflight, 0);
}

/* A segment with payload from the server. The socket's state and the ring only, no
 * destination-table lookup for a timed answer: the agent receives every sample and needs
 * no count of them in the kernel. */
static __always_inline void on_ingress(struct __sk_buff *skb, struct sock_state *ss,
				       const struct tcp_segment *seg)
{
	struct payload p = { .off = seg->payload_off, .len = seg->payload };
	__u32 status;
	__u64 now;

	if (ss->phase != LIMITER_PHASE_AWAITING || !answers(skb, ss, &p))
		return;
	ss->phase = LIMITER_PHASE_RECEIVING;
	if (ss->flags & LIMITER_SOCK_UNTIMED) {
		untimed(ss);
		return;
	}
	status = ss->proto == LIMITER_PROTO_HTTP1 ? http_status(skb, &p) : 0;
	if (status >= 400)
		count_status(ss, status);
	/* One clock read: the sample's timestamp is also where its latency ends. */
	now = bpf_ktime_get_ns();
	emit_signal_at(ss, LIMITER_SIGNAL_SAMPLE, now, request_wait(ss, now), ss->request_inflight,
		       status);
}

#endif /* LIMITER_SIGNAL_H */
