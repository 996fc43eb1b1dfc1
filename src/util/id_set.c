/* id_set: see id_set.h. */
#include "util/id_set.h"

#include <stdlib.h>

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void id_set_sort(int64_t *ids, size_t n)
{
    if (n > 1)
        qsort(ids, n, sizeof(*ids), cmp_id);
}

bool id_set_has(const int64_t *ids, size_t n, int64_t id)
{
    return n > 0 && bsearch(&id, ids, n, sizeof(*ids), cmp_id) != NULL;
}
