#include <string.h>

#include "util/zalloc.h"

/* Apart from zalloc.c: a unit test that defines its own zalloc()
 * (tests/unit/zalloc_countdown.h) links this file, never that one. */
char *zalloc_text(const char *text)
{
    size_t len = strlen(text) + 1;
    char *copy = zalloc(len);
    if (copy != NULL)
        memcpy(copy, text, len);
    return copy;
}
