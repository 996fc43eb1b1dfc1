/* id_set: a set of row ids (int64_t) as a sorted array, searched by
 * bisection: the queue rows whose deletion waits for a commit (the state
 * store's merge and its reads), the alerts a sink holds in memory (its
 * sweep). The array is the caller's. */
#ifndef SLUICE_UTIL_ID_SET_H
#define SLUICE_UTIL_ID_SET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sorts the <n> ids of <ids> in place, smallest first. */
void id_set_sort(int64_t *ids, size_t n);

/* True when <ids> (<n> ids, sorted by id_set_sort(); NULL when 0) holds
 * <id>. */
bool id_set_has(const int64_t *ids, size_t n, int64_t id);

#endif
