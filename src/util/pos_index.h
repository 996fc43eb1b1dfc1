/* pos_index: a hash index of positions in an array the caller keeps.
 *
 * Open addressing with linear probing over a power-of-two table whose
 * slots hold a position + 1 (0: free), at most half of them used so that
 * probes stay short. The caller hashes its keys and compares them: the
 * index owns its table and nothing else. When entries move in the caller's
 * array (removed, shifted), the caller empties the index and adds them
 * again. Used by the alert fold table (watch/window.c), the state store's
 * pending writes (state/store_queue.c), the auth_failures sources
 * (watch/detectors.c), and the tables of agents found by a keyed hash of
 * their id: connections per agent (gate/gateway.c), the detectors' windows
 * (watch/detectors.c) and the metrics' counters (watch/metrics.c); each
 * keeps the hash beside the id, so that a rebuild hashes nothing again and
 * a probe compares strings only on a match. */
#ifndef SLUICE_UTIL_POS_INDEX_H
#define SLUICE_UTIL_POS_INDEX_H

#include <stddef.h>
#include <stdint.h>

struct pos_index {
    uint32_t *slot; /* NULL, or n slots */
    size_t n;       /* a power of two, or 0 */
    size_t used;
};

/* pos_index_next()'s cursor before the first call. */
#define POS_INDEX_START SIZE_MAX

/* Frees the table; the index is then empty, with no table. */
void pos_index_free(struct pos_index *x);

/* Makes room for <want> positions. Returns 0 when there was room (nothing
 * changed), 1 when a new, larger, empty table replaced the old one (the
 * caller adds every position again), or -1 out of memory (unchanged). */
int pos_index_reserve(struct pos_index *x, size_t want);

/* Forgets every position, keeping the table. */
void pos_index_empty(struct pos_index *x);

/* Adds <pos> under <hash>. The caller made room (pos_index_reserve()). */
void pos_index_add(struct pos_index *x, uint64_t hash, size_t pos);

/* The positions a lookup of <hash> must compare, one per call: start with
 * *<cursor> = POS_INDEX_START; returns a position + 1, or 0 at the end of
 * the probe (a key not found). */
size_t pos_index_next(const struct pos_index *x, uint64_t hash, size_t *cursor);

#endif
