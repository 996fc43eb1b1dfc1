/* slot_heap: a min-heap of small slot numbers (0 to SLOT_HEAP_MAX - 1),
 * each in it at most once, each with a key of its own; a slot can be
 * taken out from anywhere in it, so that its owner can drop an entry that
 * no longer holds without a scan. O(log n) each way.
 *
 * Owns: nothing outside itself (fixed arrays: a heap is used in place). */
#ifndef SLUICE_UTIL_SLOT_HEAP_H
#define SLUICE_UTIL_SLOT_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLOT_HEAP_MAX 4096

struct slot_heap {
    size_t n;
    uint32_t slot[SLOT_HEAP_MAX];  /* the heap, by key */
    int64_t key[SLOT_HEAP_MAX];    /* the key of the entry at each place */
    uint32_t place[SLOT_HEAP_MAX]; /* each slot's place + 1; 0: not in it */
};

/* A zeroed heap is empty: no init. */
/* Puts <slot> in with <key>; a slot in it already gets <key> instead. */
void slot_heap_put(struct slot_heap *h, uint32_t slot, int64_t key);
/* Takes <slot> out, if it is in. */
void slot_heap_remove(struct slot_heap *h, uint32_t slot);
/* The slot of the smallest key, and that key; false when empty. */
bool slot_heap_top(const struct slot_heap *h, uint32_t *slot, int64_t *key);
/* Empties the heap: O(its size). */
void slot_heap_clear(struct slot_heap *h);

#endif
