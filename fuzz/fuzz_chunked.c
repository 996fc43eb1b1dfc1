/* fuzz_chunked: the chunked-body framer and decoder. The first two bytes
 * choose a split point; the rest is a body. Invariants: feeding the body in
 * one piece, in two pieces at the split, and byte by byte gives the same
 * result, the same end (DONE) or error offset (ERROR), the same decoded data
 * (chunked_feed_data), never consumes more than given, and hands on only
 * bytes from within the piece, fewer than it consumed. A request body's
 * framer (chunked_init_request()) gives the same outcome, or refuses a
 * chunk size no later than the other framer fails. The body's bytes framed
 * by a chunked writer of the harness's own (check_framed()) are read by
 * both framers to the end of that framing, never past it, and decode to
 * those bytes. A framer in a state it never sets fails safe
 * (check_corrupt()). The framing it reads (the bytes it does not hand on)
 * ends its lines in CRLF alone (check_crlf()). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gate/chunked.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct outcome {
    int rc;
    size_t at; /* DONE: bytes consumed in all; ERROR: absolute offset */
    const char *why;
    char *data; /* the decoded data (malloc'd), <ndata> bytes */
    size_t ndata;
};

struct sink {
    const char *lo, *hi; /* the piece being fed */
    char *buf;
    size_t len;
    size_t base;   /* the piece's offset in the body */
    uint8_t *mark; /* NULL, or one byte per body byte: 1 when handed on */
};

static void check(int cond)
{
    if (!cond)
        abort();
}

static int collect(void *arg, const char *p, size_t n)
{
    struct sink *k = arg;
    check(n > 0 && p >= k->lo && p + n <= k->hi);
    char *b = realloc(k->buf, k->len + n);
    check(b != NULL);
    memcpy(b + k->len, p, n);
    k->buf = b;
    k->len += n;
    if (k->mark != NULL)
        memset(k->mark + k->base + (size_t)(p - k->lo), 1, n);
    return 0;
}

/* Feeds <body> in pieces of <step> bytes (0: the first piece is <split>
 * bytes and the second the rest); marks in <mark> (NULL: none) the bytes
 * handed on. */
static struct outcome run_marked(const char *body, size_t len, size_t split, size_t step,
                                 int request, uint8_t *mark)
{
    struct chunked c;
    struct outcome o = {CHUNKED_MORE, 0, NULL, NULL, 0};
    struct sink k = {NULL, NULL, NULL, 0, 0, mark};
    size_t off = 0;
    if (request)
        chunked_init_request(&c);
    else
        chunked_init(&c);
    while (off < len) {
        size_t n = step ? step : (off == 0 && split > 0 ? split : len - off);
        if (n > len - off)
            n = len - off;
        char *piece = malloc(n ? n : 1); /* exact size, for ASan */
        check(piece != NULL);
        memcpy(piece, body + off, n);
        size_t used = (size_t)-1;
        k.lo = piece;
        k.hi = piece + n;
        k.base = off;
        int rc = chunked_feed_data(&c, piece, n, &used, collect, &k);
        free(piece);
        check(used <= n);
        check(k.len <= off + used);
        if (rc != CHUNKED_MORE) {
            check(rc == CHUNKED_DONE || rc == CHUNKED_ERROR);
            check((rc == CHUNKED_ERROR) == (c.why != NULL));
            if (rc == CHUNKED_DONE)
                check(used > 0 && c.total == off + used);
            o.rc = rc;
            o.at = off + used;
            o.why = c.why;
            o.data = k.buf;
            o.ndata = k.len;
            /* Sticky. */
            check(chunked_feed(&c, "0\r\n\r\n", 5, &used) == rc && used == 0);
            return o;
        }
        check(used == n);
        off += n;
    }
    o.at = len;
    o.data = k.buf;
    o.ndata = k.len;
    check(c.total == len);
    return o;
}

static struct outcome run(const char *body, size_t len, size_t split, size_t step, int request)
{
    return run_marked(body, len, split, step, request, NULL);
}

/* The framing the framer consumed (the bytes of <body> up to <o>'s end
 * that it did not hand on, as <mark> says) ends lines in CRLF alone: a LF
 * only after a CR, and a CR only before a LF (but for the last byte read
 * before an error). A bare CR or LF is where another parser may frame the
 * body otherwise. */
static void check_crlf(const char *body, const struct outcome *o, const uint8_t *mark)
{
    size_t prev = (size_t)-1; /* the framing byte before */
    for (size_t i = 0; i < o->at; i++) {
        if (mark[i])
            continue;
        if (body[i] == '\n')
            check(prev != (size_t)-1 && prev + 1 == i && body[prev] == '\r');
        if (prev != (size_t)-1 && body[prev] == '\r')
            check(body[i] == '\n' && prev + 1 == i);
        prev = i;
    }
    if (o->rc == CHUNKED_DONE)
        check(prev != (size_t)-1 && body[prev] == '\n');
}

static int same(const struct outcome *a, const struct outcome *b)
{
    return a->rc == b->rc && a->at == b->at && a->why == b->why && a->ndata == b->ndata &&
           (a->ndata == 0 || memcmp(a->data, b->data, a->ndata) == 0);
}

/* Appends <v> in hex to <e> at *<m>: <zeros> leading zeros, upper-case
 * letters when <upper>. */
static void put_hex(char *e, size_t *m, size_t v, unsigned zeros, int upper)
{
    const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    char t[16];
    size_t n = 0;
    do {
        t[n++] = digits[v & 15];
        v >>= 4;
    } while (v > 0);
    while (zeros-- > 0)
        e[(*m)++] = '0';
    while (n > 0)
        e[(*m)++] = t[--n];
}

/* <d> (<n> bytes) framed as chunked: chunks of 1 to 16 bytes, each size
 * taken from the chunk's first byte (as are 0 to 3 leading zeros, the case
 * of its hex letters and an extension), the last chunk, a trailer field
 * when the first byte is odd, the final CRLF, and the first byte of a next
 * message. Both framers end the body before that byte and hand on <d>. */
static void check_framed(const char *d, size_t n)
{
    if (n == 0 || n > 4096)
        return;
    char *e = malloc(n * 14 + 16); /* 13 bytes of framing per chunk at most */
    check(e != NULL);
    size_t m = 0;
    for (size_t at = 0; at < n;) {
        unsigned char c = (unsigned char)d[at];
        size_t k = 1 + (size_t)(c % 16);
        if (k > n - at)
            k = n - at;
        put_hex(e, &m, k, (c >> 4) & 3, c & 0x40);
        if (c & 0x80) {
            memcpy(e + m, ";x=y", 4);
            m += 4;
        }
        memcpy(e + m, "\r\n", 2);
        memcpy(e + m + 2, d + at, k);
        memcpy(e + m + 2 + k, "\r\n", 2);
        m += k + 4;
        at += k;
    }
    memcpy(e + m, "0\r\n", 3);
    m += 3;
    if (d[0] & 1) {
        memcpy(e + m, "T: v\r\n", 6);
        m += 6;
    }
    memcpy(e + m, "\r\nG", 3);
    m += 3;
    for (int request = 0; request < 2; request++) {
        struct outcome o = run(e, m, m, 0, request);
        check(o.rc == CHUNKED_DONE && o.at == m - 1 && o.ndata == n && memcmp(o.data, d, n) == 0);
        free(o.data);
    }
    free(e);
}

/* A framer whose state is none the framer sets (a struct overwritten, or
 * never initialised) fails at the first byte, consumes nothing, hands on
 * nothing, and stays failed. */
static void check_corrupt(unsigned char b)
{
    struct chunked c;
    chunked_init(&c);
    c.state = b & 1 ? -1 - (int)b : 64 + b; /* the states are a small enum */
    static const char one[] = "0";
    struct sink k = {one, one + 1, NULL, 0, 0, NULL};
    size_t used = 1;
    check(chunked_feed_data(&c, one, 1, &used, collect, &k) == CHUNKED_ERROR);
    check(used == 0 && k.len == 0 && c.why != NULL && strcmp(c.why, "internal state") == 0);
    check(chunked_feed(&c, "0\r\n\r\n", 5, &used) == CHUNKED_ERROR && used == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > 65536)
        return 0;
    size_t len = size - 2;
    size_t split = (((size_t)data[0] << 8) | data[1]) % (len + 1);
    const char *body = (const char *)data + 2;
    uint8_t *mark = calloc(len ? len : 1, 1);
    check(mark != NULL);
    struct outcome whole = run_marked(body, len, len, 0, 0, mark);
    check_crlf(body, &whole, mark);
    free(mark);
    struct outcome two = run(body, len, split, 0, 0);
    check(same(&whole, &two));
    if (len <= 4096) {
        struct outcome bytes = run(body, len, 0, 1, 0);
        check(same(&whole, &bytes));
        free(bytes.data);
    }
    /* A request body's framer is the same but for the sizes it refuses. */
    struct outcome req = run(body, len, split, 0, 1);
    check(same(&whole, &req) ||
          (req.rc == CHUNKED_ERROR && strncmp(req.why, "chunk size too ", 15) == 0 &&
           (whole.rc != CHUNKED_ERROR || whole.at >= req.at)));
    free(req.data);
    free(whole.data);
    free(two.data);
    check_framed(body, len);
    check_corrupt(data[0]);
    return 0;
}
