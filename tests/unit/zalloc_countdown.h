/* zalloc_countdown: the zalloc() of a unit test that fails allocations one
 * by one (util/zalloc.c is then not linked in): once <zalloc_failing>, the
 * call after <zalloc_left> more fails, counted in <zalloc_failures>.
 * Included by one file of a test program only: it defines zalloc(). */
#ifndef SLUICE_TESTS_ZALLOC_COUNTDOWN_H
#define SLUICE_TESTS_ZALLOC_COUNTDOWN_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/zalloc.h"

static bool zalloc_failing;
static unsigned zalloc_left, zalloc_failures;

void *zalloc(size_t n)
{
    if (zalloc_failing && zalloc_left-- == 0) {
        zalloc_failures++;
        return NULL;
    }
    void *p = malloc(n);
    if (p != NULL)
        memset(p, 0, n);
    return p;
}

#endif
