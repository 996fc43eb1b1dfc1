/* pos_index: see pos_index.h. */
#include "util/pos_index.h"

#include <stdlib.h>
#include <string.h>

void pos_index_free(struct pos_index *x)
{
    free(x->slot);
    x->slot = NULL;
    x->n = x->used = 0;
}

int pos_index_reserve(struct pos_index *x, size_t want)
{
    if (2 * want <= x->n)
        return 0;
    size_t n = x->n > 0 ? x->n : 64;
    while (n < 2 * want)
        n *= 2;
    uint32_t *slot = calloc(n, sizeof(*slot));
    if (slot == NULL)
        return -1;
    free(x->slot);
    x->slot = slot;
    x->n = n;
    x->used = 0;
    return 1;
}

void pos_index_empty(struct pos_index *x)
{
    if (x->n > 0)
        memset(x->slot, 0, x->n * sizeof(*x->slot));
    x->used = 0;
}

void pos_index_add(struct pos_index *x, uint64_t hash, size_t pos)
{
    size_t mask = x->n - 1, j = (size_t)hash & mask;
    while (x->slot[j] != 0)
        j = (j + 1) & mask;
    x->slot[j] = (uint32_t)(pos + 1);
    x->used++;
}

size_t pos_index_next(const struct pos_index *x, uint64_t hash, size_t *cursor)
{
    if (x->n == 0)
        return 0;
    size_t mask = x->n - 1;
    *cursor = *cursor == POS_INDEX_START ? (size_t)hash & mask : (*cursor + 1) & mask;
    return x->slot[*cursor];
}
