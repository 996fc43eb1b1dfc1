/* fuzz_chunked: the chunked-body framer. The first two bytes choose a split
 * point; the rest is a body. Invariants: feeding the body in one piece, in
 * two pieces at the split, and byte by byte gives the same result, the same
 * end (DONE) or error offset (ERROR), and never consumes more than given. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gate/chunked.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct outcome {
    int rc;
    size_t at; /* DONE: bytes consumed in all; ERROR: absolute offset */
    const char *why;
};

static void check(int cond)
{
    if (!cond)
        abort();
}

/* Feeds <body> in pieces of <step> bytes (0: the first piece is <split>
 * bytes and the second the rest). */
static struct outcome run(const char *body, size_t len, size_t split, size_t step)
{
    struct chunked c;
    struct outcome o = {CHUNKED_MORE, 0, NULL};
    size_t off = 0;
    chunked_init(&c);
    while (off < len) {
        size_t n = step ? step : (off == 0 && split > 0 ? split : len - off);
        if (n > len - off)
            n = len - off;
        char *piece = malloc(n ? n : 1); /* exact size, for ASan */
        check(piece != NULL);
        memcpy(piece, body + off, n);
        size_t used = (size_t)-1;
        int rc = chunked_feed(&c, piece, n, &used);
        free(piece);
        check(used <= n);
        if (rc != CHUNKED_MORE) {
            check(rc == CHUNKED_DONE || rc == CHUNKED_ERROR);
            check((rc == CHUNKED_ERROR) == (c.why != NULL));
            if (rc == CHUNKED_DONE)
                check(used > 0 && c.total == off + used);
            o.rc = rc;
            o.at = off + used;
            o.why = c.why;
            /* Sticky. */
            check(chunked_feed(&c, "0\r\n\r\n", 5, &used) == rc && used == 0);
            return o;
        }
        check(used == n);
        off += n;
    }
    o.at = len;
    check(c.total == len);
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > 65536)
        return 0;
    size_t len = size - 2;
    size_t split = (((size_t)data[0] << 8) | data[1]) % (len + 1);
    const char *body = (const char *)data + 2;
    struct outcome whole = run(body, len, len, 0);
    struct outcome two = run(body, len, split, 0);
    check(whole.rc == two.rc && whole.at == two.at && whole.why == two.why);
    if (len <= 4096) {
        struct outcome bytes = run(body, len, 0, 1);
        check(whole.rc == bytes.rc && whole.at == bytes.at && whole.why == bytes.why);
    }
    return 0;
}
