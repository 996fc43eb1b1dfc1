/* line_read: one line of a stream, no longer than the caller allows
 * (line_read.h). */
#include "util/line_read.h"

#include <stdint.h>
#include <stdlib.h>

/* Makes room for <want> bytes in *<buf>: doubled, as getline() does, up to
 * <limit>. Returns 0, or -1 when memory runs out. */
static int grow(char **buf, size_t *cap, size_t want, size_t limit)
{
    if (want <= *cap)
        return 0;
    size_t n = *cap < 128 ? 128 : *cap;
    while (n < want)
        n = n > limit / 2 ? limit : n * 2;
    if (n > limit) /* a bound under the first size */
        n = limit;
    char *p = realloc(*buf, n);
    if (p == NULL)
        return -1;
    *buf = p;
    *cap = n;
    return 0;
}

ssize_t line_read(FILE *f, char **buf, size_t *cap, size_t max, size_t budget, size_t *kept,
                  bool *over)
{
    size_t took = 0, len = 0;
    /* the line and its NUL; no bound but the budget for SIZE_MAX, where
     * max + 1 wrapped to 0 and realloc() to 0 bytes freed the buffer */
    size_t limit = max < SIZE_MAX ? max + 1 : SIZE_MAX;
    *kept = 0;
    *over = false;
    if (grow(buf, cap, 1, limit) < 0)
        return -1;
    int c;
    while (took < budget && (c = getc_unlocked(f)) != EOF) { /* the caller reads no further */
        took++;
        if (!*over && len == max)
            *over = true; /* its bytes from here on are dropped */
        if (!*over) {
            if (grow(buf, cap, len + 2, limit) < 0)
                return -1;
            (*buf)[len++] = (char)c;
        }
        if (c == '\n')
            break;
    }
    if (took == 0)
        return -1;
    if (*over)
        len = 0;
    (*buf)[len] = '\0';
    *kept = len;
    return (ssize_t)took;
}
