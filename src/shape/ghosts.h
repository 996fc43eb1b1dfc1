/* ghosts: what the quota table forgot of entries it dropped before they
 * came to rest, so that a key that comes back finds its buckets no fuller
 * than it left them.
 *
 * The table (shape/quota.c) is bounded: past its size it drops the least
 * recently used entries, drained buckets among them. A bucket made anew
 * starts full, so an agent that drained one and then made the table
 * forget it (touching more keys than it holds: the rules of a large
 * policy, or other agents' traffic) got it back full, its one-time burst
 * too, as often as it liked. A ghost is what the dropped entry still owed
 * the clock: when each of its buckets would be full again (and over what
 * refill time), and the one-time burst it had left. A bucket made for the
 * key again is brought down to that (ghosts_drain_requests(),
 * ghosts_drain_bandwidth()).
 *
 * Bounded: a fixed array of slots, indexed by the key's hash, each holding
 * one key's ghost under its fingerprint. Two keys that meet in a slot while
 * both still owe are merged, erring toward denial: the slot then holds the
 * later full time, the shorter refill and the smaller burst left, for every
 * key that hashes there (the fingerprint no longer told), so a key new to
 * the table may start partly drained, never fuller than it left. A slot is
 * free again once every bucket in it would be full; one whose one-time
 * burst was spent never is (a burst never refills).
 *
 * No clock of its own: every function takes the caller's CLOCK_MONOTONIC
 * nanoseconds. */
#ifndef SLUICE_SHAPE_GHOSTS_H
#define SLUICE_SHAPE_GHOSTS_H

#include <stddef.h>
#include <stdint.h>

#include "shape/bucket.h"

struct ghosts;

/* Returns the ghosts of a table of <n> entries: four slots an entry (a
 * power of two, at least 64), so that keys seldom meet in one while the
 * table turns over less than three times within the refill of the buckets
 * it drops; NULL when out of memory. */
struct ghosts *ghosts_new(size_t n);
/* Frees <g>. Accepts NULL. */
void ghosts_free(struct ghosts *g);
/* Bytes ghosts_new(<n>) takes (for the documentation's figure and tests). */
size_t ghosts_size(size_t n);
/* Remembers, under <hash>, the key whose request bucket <req> (configured
 * with a one-time burst of <burst>) and bandwidth bucket <bw> are being
 * forgotten at <now_ns>. Nothing when both are full, burst intact. */
void ghosts_keep(struct ghosts *g, uint64_t hash, struct bucket *req, uint64_t burst,
                 struct bucket *bw, uint64_t now_ns);
/* Brings <req>, the request bucket just made (full) for the key of
 * <hash>, down to what its ghost says it held at <now_ns>: its tokens,
 * and its one-time burst. <g> may be NULL (nothing was ever forgotten). */
void ghosts_drain_requests(const struct ghosts *g, uint64_t hash, struct bucket *req,
                           uint64_t now_ns);
/* The same for the key's bandwidth bucket <bw>. */
void ghosts_drain_bandwidth(const struct ghosts *g, uint64_t hash, struct bucket *bw,
                            uint64_t now_ns);

#endif
