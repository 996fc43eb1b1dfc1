/* evbuffer_text: a unit test's view of what a module wrote into an evbuffer.
 * Include after <cmocka.h> and <event2/buffer.h>. */
#ifndef SLUICE_TESTS_EVBUFFER_TEXT_H
#define SLUICE_TESTS_EVBUFFER_TEXT_H

#include <stdlib.h>

/* Moves everything <b> holds into a new NUL-terminated string, which the
 * caller frees; <b> is left empty. */
static inline char *evbuffer_text(struct evbuffer *b)
{
    size_t n = evbuffer_get_length(b);
    char *s = malloc(n + 1);
    assert_non_null(s);
    evbuffer_remove(b, s, n);
    s[n] = '\0';
    return s;
}

#endif
