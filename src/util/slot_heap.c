/* slot_heap: a min-heap of slots that can lose any entry (see slot_heap.h). */
#include "util/slot_heap.h"

static void place_at(struct slot_heap *h, size_t i, uint32_t slot, int64_t key)
{
    h->slot[i] = slot;
    h->key[i] = key;
    h->place[slot] = (uint32_t)i + 1;
}

/* Moves the entry at <i> up or down to where its key belongs. */
static void settle(struct slot_heap *h, size_t i)
{
    uint32_t slot = h->slot[i];
    int64_t key = h->key[i];
    while (i > 0 && h->key[(i - 1) / 2] > key) {
        size_t up = (i - 1) / 2;
        place_at(h, i, h->slot[up], h->key[up]);
        i = up;
    }
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->key[c + 1] < h->key[c])
            c++;
        if (h->key[c] >= key)
            break;
        place_at(h, i, h->slot[c], h->key[c]);
        i = c;
    }
    place_at(h, i, slot, key);
}

void slot_heap_put(struct slot_heap *h, uint32_t slot, int64_t key)
{
    if (slot >= SLOT_HEAP_MAX)
        return;
    size_t i = h->place[slot] != 0 ? h->place[slot] - 1 : h->n++;
    place_at(h, i, slot, key);
    settle(h, i);
}

void slot_heap_remove(struct slot_heap *h, uint32_t slot)
{
    if (slot >= SLOT_HEAP_MAX || h->place[slot] == 0)
        return;
    size_t i = h->place[slot] - 1;
    h->place[slot] = 0;
    if (i == --h->n)
        return;
    place_at(h, i, h->slot[h->n], h->key[h->n]); /* the last entry fills the hole */
    settle(h, i);
}

bool slot_heap_top(const struct slot_heap *h, uint32_t *slot, int64_t *key)
{
    if (h->n == 0)
        return false;
    *slot = h->slot[0];
    *key = h->key[0];
    return true;
}

void slot_heap_clear(struct slot_heap *h)
{
    for (size_t i = 0; i < h->n; i++)
        h->place[h->slot[i]] = 0;
    h->n = 0;
}
