/* ev_alloc_count: libevent's allocations, counted in <ev_allocs>. A test
 * program's main() hands the two functions to libevent before any other
 * call into it, with free() for its frees:
 * event_set_mem_functions(count_malloc, count_realloc, free). Included by
 * one file of a test program only: it defines them. */
#ifndef SLUICE_TESTS_EV_ALLOC_COUNT_H
#define SLUICE_TESTS_EV_ALLOC_COUNT_H

#include <stddef.h>
#include <stdlib.h>

static size_t ev_allocs;

static void *count_malloc(size_t n)
{
    ev_allocs++;
    return malloc(n);
}

/* A realloc() of NULL is an allocation; one that moves a block is not a
 * new one. */
static void *count_realloc(void *p, size_t n)
{
    if (p == NULL)
        ev_allocs++;
    return realloc(p, n);
}

#endif
