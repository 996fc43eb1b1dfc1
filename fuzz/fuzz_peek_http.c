/* fuzz_peek_http: the check of a plain HTTP/1.x request at the start of a
 * CONNECT tunnel (to api.example.test:8080). Invariants: the result is one
 * of the four and a MISMATCH says why; the result of every prefix is either
 * NEED_MORE or the result of the whole input (so bytes sent later never
 * turn a decision); with <max_head> at most the input's length the result
 * is never NEED_MORE, and bytes past <max_head> change nothing; judged in
 * pieces by one resumed scan, the input gets at every step what it gets
 * judged in one go; a complete head that http1_parse_request() (the
 * gateway's own request parser) reads is judged MATCH or MISMATCH, never
 * passed as not HTTP nor waited on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gate/http1.h"
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

/* peek_http_resume() fed the input in pieces (of 1 to 16 bytes, sizes
 * taken from the bytes themselves), each time in an exact-size copy of the
 * bytes so far: at every step, a decided result included, what
 * peek_http_judge() says of those bytes in one go, with the same reason. */
static void check_in_pieces(const uint8_t *data, size_t size, size_t max_head)
{
    struct peek_http_scan scan = {0};
    size_t n = 0;
    do {
        n += 1 + (size_t)(n < size ? data[n] & 15 : 0);
        if (n > size)
            n = size;
        char *b = malloc(n ? n : 1);
        check(b != NULL);
        memcpy(b, data, n);
        const char *why = NULL, *why_once = NULL;
        enum peek_http_result r = peek_http_resume(&scan, b, n, max_head, target(), PORT, &why);
        enum peek_http_result once = peek_http_judge(b, n, max_head, target(), PORT, &why_once);
        free(b);
        check(r == once);
        if (r == PEEK_HTTP_MISMATCH)
            check(strcmp(why, why_once) == 0);
    } while (n < size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 3 * MAX_HEAD)
        return 0;
    enum peek_http_result full = judge(data, size, MAX_HEAD);
    if (size >= MAX_HEAD)
        check(full != PEEK_HTTP_NEED_MORE);
    /* A complete head that the gateway's own request parser reads is
     * judged: never passed as not HTTP, never waited on. */
    static struct http_request req;
    const char *w = NULL;
    if (http1_parse_request((const char *)data, size, MAX_HEAD, &req, &w) > 0)
        check(full == PEEK_HTTP_MATCH || full == PEEK_HTTP_MISMATCH);
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
    check_in_pieces(data, size, MAX_HEAD);
    check_in_pieces(data, size, m);
    return 0;
}
