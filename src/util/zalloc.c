/* zalloc: malloc() and a memset(), which glibc's cache serves (zalloc.h). */
#include "util/zalloc.h"

#include <stdlib.h>
#include <string.h>

void *zalloc(size_t n)
{
    void *p = malloc(n);
    if (p == NULL)
        return NULL;
    /* Without this, GCC and Clang turn the two calls back into calloc()
     * (an optimisation of theirs): the empty asm may read and write <p>'s
     * memory, so the memset() must stay a memset() of its own. */
    __asm__ volatile("" : : "r"(p) : "memory");
    memset(p, 0, n);
    return p;
}
