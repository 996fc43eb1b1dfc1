/* fuzz_peek_http: the check of a plain HTTP/1.x request at the start of a
 * CONNECT tunnel (to api.example.test:8080). Invariants: the result is one
 * of the four and a MISMATCH says why; the result of every prefix is either
 * NEED_MORE or the result of the whole input (so bytes sent later never
 * turn a decision); with <max_head> at most the input's length the result
 * is never NEED_MORE, and bytes past <max_head> change nothing; judged in
 * pieces by one resumed scan, the input gets at every step what it gets
 * judged in one go; a complete head that http1_parse_request() (the
 * gateway's own request parser) reads is judged MATCH or MISMATCH, never
 * passed as not HTTP nor waited on, and MATCH exactly when its Host value
 * and an absolute- or authority-form target spell the target (read here
 * as text: "api.example.test" in any case, one trailing dot allowed) with
 * port 8080 or none (and "Host: name:" as none), and its other routing
 * fields (X-Forwarded-Host, Forwarded's host=, ...) name it as well. A
 * complete first line that ends in a word starting with "HTTP/", "RTSP/"
 * or "ICE/" (any case) is never NOT_HTTP, and MISMATCH unless that word is
 * HTTP/1.0 or HTTP/1.1. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gate/http1.h"
#include "gate/peek_http.h"
#include "gate/routing_host.h"
#include "policy/host.h"

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

/* True when the <len> bytes at <h> spell the target host: the only ASCII
 * spellings host_normalise() makes "api.example.test" of. */
static int spells_target(const char *h, size_t len)
{
    return (len == 16 || (len == 17 && h[16] == '.')) &&
           strncasecmp(h, "api.example.test", 16) == 0;
}

/* True when the Host value <v> (<len> bytes) is the target: its host, then
 * nothing, ":" or ":" and 1 to 5 digits that make PORT. */
static int host_value_is_target(const char *v, size_t len)
{
    const char *colon = memchr(v, ':', len);
    size_t hlen = colon != NULL ? (size_t)(colon - v) : len;
    if (!spells_target(v, hlen))
        return 0;
    size_t digits = len - hlen - (colon != NULL);
    if (digits == 0)
        return 1;
    unsigned long p = 0;
    for (size_t i = hlen + 1; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return 0;
        p = p * 10 + (unsigned long)(v[i] - '0');
    }
    return digits <= 5 && p == PORT;
}

/* The verdict a parsed head <req> must get. */
static enum peek_http_result expected(const struct http_request *req)
{
    if ((req->form == TARGET_ABSOLUTE || req->form == TARGET_AUTHORITY) &&
        (req->host_ipv6 || !spells_target(req->host, strlen(req->host)) ||
         (req->port_explicit && req->port != PORT)))
        return PEEK_HTTP_MISMATCH;
    if (req->host_header != NULL && !host_value_is_target(req->host_header, req->host_header_len))
        return PEEK_HTTP_MISMATCH;
    /* The other fields an origin may pick the site by (X-Forwarded-Host,
     * Forwarded's host=, ...) must name the target too: their reading is
     * routing_host.c's, whose invariants fuzz_http1_head checks. */
    const char *why = NULL;
    if (routing_fields_name(req, target(), PORT, PORT, IP_SPELLING_CANONICAL, &why) !=
        ROUTING_HOST_MATCH)
        return PEEK_HTTP_MISMATCH;
    return PEEK_HTTP_MATCH;
}

/* The version word of a first line the harness can read alone: upper-case
 * letters, SP, then bytes up to a LF within the window; the last word
 * (after the line's last SP, a CR before the LF dropped) printable ASCII.
 * Sets <*w> and <*n>; 0 when the line is not of that shape. */
static int version_word(const uint8_t *data, size_t size, const char **w, size_t *n)
{
    size_t lim = size < MAX_HEAD ? size : MAX_HEAD, j = 0;
    while (j < lim && data[j] >= 'A' && data[j] <= 'Z')
        j++;
    if (j == 0 || j == lim || data[j] != ' ')
        return 0;
    const uint8_t *lf = memchr(data + j, '\n', lim - j);
    if (lf == NULL)
        return 0;
    size_t e = (size_t)(lf - data);
    if (e > j && data[e - 1] == '\r')
        e--;
    size_t s = e;
    while (s > j && data[s - 1] != ' ') {
        if (data[s - 1] < 0x21 || data[s - 1] > 0x7e)
            return 0;
        s--;
    }
    *w = (const char *)data + s;
    *n = e - s;
    return 1;
}

/* A complete first line whose last word starts with "HTTP/", "RTSP/" or
 * "ICE/" (any case) is a request line to some server: never NOT_HTTP;
 * unless the word is HTTP/1.0 or HTTP/1.1 (a head checked as such) it
 * cannot be checked and is MISMATCH. */
static void check_version_word(const uint8_t *data, size_t size, enum peek_http_result full)
{
    const char *w;
    size_t n;
    if (!version_word(data, size, &w, &n))
        return;
    int http = n >= 5 && strncasecmp(w, "http/", 5) == 0;
    int other =
        (n >= 5 && strncasecmp(w, "rtsp/", 5) == 0) || (n >= 4 && strncasecmp(w, "ice/", 4) == 0);
    if (!http && !other)
        return;
    check(full != PEEK_HTTP_NOT_HTTP);
    if (!(n == 8 && (memcmp(w, "HTTP/1.0", 8) == 0 || memcmp(w, "HTTP/1.1", 8) == 0)))
        check(full == PEEK_HTTP_MISMATCH);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 3 * MAX_HEAD)
        return 0;
    enum peek_http_result full = judge(data, size, MAX_HEAD);
    if (size >= MAX_HEAD)
        check(full != PEEK_HTTP_NEED_MORE);
    check_version_word(data, size, full);
    /* A complete head that the gateway's own request parser reads is
     * judged: never passed as not HTTP, never waited on. */
    static struct http_request req;
    const char *w = NULL;
    if (http1_parse_request((const char *)data, size, MAX_HEAD, &req, &w) > 0)
        check(full == expected(&req));
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
