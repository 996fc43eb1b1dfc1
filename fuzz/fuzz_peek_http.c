/* fuzz_peek_http: the check of a plain HTTP/1.x request at the start of a
 * CONNECT tunnel (to api.example.test:8080). Invariants: the result is one
 * of the four and a MISMATCH says why; the result of every prefix is either
 * NEED_MORE or the result of the whole input (so bytes sent later never
 * turn a decision); with <max_head> at most the input's length the result
 * is never NEED_MORE, and bytes past <max_head> change nothing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gate/peek_http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PORT     8080
#define MAX_HEAD 4096

static void check(int cond)
{
    if (!cond)
        abort();
}

static const struct host *target(void)
{
    static struct host t;
    static int ready;
    if (!ready) {
        const char *why;
        check(host_normalise("api.example.test", 16, &t, &why) == 0);
        ready = 1;
    }
    return &t;
}

/* Judges an exact-size copy of the first <n> bytes (ASan sees overreads). */
static enum peek_http_result judge(const uint8_t *data, size_t n, size_t max_head)
{
    char *b = malloc(n ? n : 1);
    check(b != NULL);
    memcpy(b, data, n);
    const char *why = NULL;
    enum peek_http_result r = peek_http_judge(b, n, max_head, target(), PORT, &why);
    free(b);
    check(r >= PEEK_HTTP_NOT_HTTP && r <= PEEK_HTTP_MISMATCH);
    if (r == PEEK_HTTP_MISMATCH)
        check(why != NULL && why[0] != '\0');
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 3 * MAX_HEAD)
        return 0;
    enum peek_http_result full = judge(data, size, MAX_HEAD);
    if (size >= MAX_HEAD)
        check(full != PEEK_HTTP_NEED_MORE);
    /* Prefixes: all of them for small inputs, a spread for large ones. */
    size_t step = size <= 600 ? 1 : size / 97 + 1;
    for (size_t n = 0; n < size; n += step) {
        enum peek_http_result r = judge(data, n, MAX_HEAD);
        check(r == PEEK_HTTP_NEED_MORE || r == full);
    }
    /* A smaller bound: never NEED_MORE once reached, and what lies past it
     * is not looked at. */
    size_t m = size / 2;
    enum peek_http_result cut = judge(data, size, m);
    check(cut != PEEK_HTTP_NEED_MORE);
    check(judge(data, m, m) == cut);
    return 0;
}
