/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * Fall-forward: a destination at its limit hands the connect to the first of its peers
 * (interchangeable replicas, configured as a group) that has room. The peer's slot is
 * reserved like any other, fetch-and-add then check, so racing connects never overshoot it.
 */
#ifndef LIMITER_FALLFORWARD_H
#define LIMITER_FALLFORWARD_H

#include <bpf/bpf_endian.h>

#include "maps.h"
#include "accounting.h"

static __always_inline int is_v4_mapped(const struct dest_key *key)
{
	return key->addr[0] == 0 && key->addr[1] == 0 && key->addr[2] == bpf_htonl(0xffff);
}

/*
 * The first peer of `key` with room, or 0. With `reserve` (prod), `ss` takes the peer's
 * slot and is admitted there; without it (shadow) nothing changes: room is read from the
 * peer's count alone.
 */
static __always_inline const struct dest_key *peer_with_room(struct sock_state *ss,
							     const struct dest_key *key,
							     const struct limiter_config *cfg,
							     int reserve)
{
	struct dest_peers *candidates = bpf_map_lookup_elem(&peers, key);
	const struct dest_key *peer;
	struct dest_policy *policy;
	struct dest_state *st;
	int v4 = is_v4_mapped(key);
	__u32 i, limit;

	if (!candidates)
		return 0;
	/* The constant bound lets the verifier prove the loop ends and the index stays in the
	 * array; `count` alone is data it cannot bound. */
	for (i = 0; i < LIMITER_MAX_PEERS; i++) {
		if (i >= candidates->count)
			break;
		peer = &candidates->peers[i];
		/* A connect can only be rewritten within its address family. */
		if (is_v4_mapped(peer) != v4)
			continue;
		policy = bpf_map_lookup_elem(&policies, peer);
		limit = policy ? policy->limit : cfg->initial_limit;
		if (!reserve) {
			st = bpf_map_lookup_elem(&dests, peer);
			if (!st || st->inflight < limit)
				return peer;
			continue;
		}
		st = dest_get_or_create(peer);
		if (!st)
			continue;
		if (slot_take(ss, st, peer) < limit) {
			__sync_fetch_and_add(&st->admitted, 1);
			return peer;
		}
		slot_untake(ss, st);
	}
	return 0;
}

#endif /* LIMITER_FALLFORWARD_H */
