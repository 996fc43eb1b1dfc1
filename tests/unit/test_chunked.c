/* Unit tests for gate/chunked.c: the incremental chunked-body framer. */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gate/chunked.h"

struct result {
    int rc;
    size_t consumed; /* total over all calls */
    const char *why;
};

/* A request body's framer (chunked_init_request()) instead of a response's. */
static bool request_body;

/* Feeds <s> in pieces whose sizes come from <split> (0 = all at once,
 * 1 = byte by byte, else a PRNG seed). */
static struct result feed(const char *s, size_t len, unsigned split)
{
    struct chunked c;
    struct result r = {CHUNKED_MORE, 0, NULL};
    uint32_t seed = split;
    size_t off = 0;
    if (request_body)
        chunked_init_request(&c);
    else
        chunked_init(&c);
    while (off < len) {
        size_t n = len - off;
        if (split == 1) {
            n = 1;
        } else if (split > 1) {
            seed = seed * 1103515245u + 12345u;
            n = 1 + (seed >> 16) % 7;
            if (n > len - off)
                n = len - off;
        }
        /* Copy to an exact allocation so ASan catches reads past the piece. */
        char *piece = malloc(n);
        assert_non_null(piece);
        memcpy(piece, s + off, n);
        size_t used = 0;
        r.rc = chunked_feed(&c, piece, n, &used);
        free(piece);
        r.consumed += used;
        if (r.rc != CHUNKED_MORE) {
            r.why = c.why;
            return r;
        }
        assert_int_equal(used, n);
        off += n;
    }
    return r;
}

/* Checks that <s> gives <rc> (and, for DONE, consumes <done_at> bytes) for
 * every way of splitting it. */
static void expect(const char *s, size_t len, int rc, size_t done_at)
{
    unsigned splits[] = {0, 1, 2, 3, 17, 99, 12345};
    for (size_t i = 0; i < sizeof(splits) / sizeof(splits[0]); i++) {
        struct result r = feed(s, len, splits[i]);
        if (r.rc != rc)
            fail_msg("split %u of \"%.*s\": rc %d, want %d (%s)", splits[i], (int)len, s, r.rc, rc,
                     r.why ? r.why : "-");
        if (rc == CHUNKED_DONE)
            assert_int_equal(r.consumed, done_at);
        if (rc == CHUNKED_ERROR)
            assert_non_null(r.why);
    }
}

#define DONE(s) expect((s), sizeof(s) - 1, CHUNKED_DONE, sizeof(s) - 1)
#define MORE(s) expect((s), sizeof(s) - 1, CHUNKED_MORE, 0)
#define ERR(s)  expect((s), sizeof(s) - 1, CHUNKED_ERROR, 0)

static void test_valid_bodies(void **state)
{
    (void)state;
    DONE("0\r\n\r\n");
    DONE("5\r\nhello\r\n0\r\n\r\n");
    DONE("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    DONE("A\r\n0123456789\r\n0\r\n\r\n");
    DONE("a\r\n0123456789\r\n0\r\n\r\n");
    DONE("0005\r\nhello\r\n000\r\n\r\n");
    DONE("5;name=value\r\nhello\r\n0;last\r\n\r\n");
    DONE("5 ;a=\"q;x\"\r\nhello\r\n0\t\r\n\r\n");
    DONE("5\r\nhe\r\nl\r\n0\r\n\r\n"); /* data may contain CRLF */
    DONE("0\r\nExpires: never\r\nX-Sum: 1\r\n\r\n");
    DONE("0\r\nX-Empty:\r\n\r\n");
    DONE("0000000000000001\r\nx\r\n0\r\n\r\n"); /* 16 digits */
}

static void test_done_stops_at_end(void **state)
{
    (void)state;
    const char s[] = "3\r\nabc\r\n0\r\n\r\nGET http://next/ HTTP/1.1\r\n";
    size_t end = strlen("3\r\nabc\r\n0\r\n\r\n");
    expect(s, sizeof(s) - 1, CHUNKED_DONE, end);

    struct chunked c;
    size_t used = 99;
    chunked_init(&c);
    assert_int_equal(chunked_feed(&c, s, sizeof(s) - 1, &used), CHUNKED_DONE);
    assert_int_equal(used, end);
    assert_int_equal(c.total, end);
    /* Sticky after DONE. */
    assert_int_equal(chunked_feed(&c, "5\r\n", 3, &used), CHUNKED_DONE);
    assert_int_equal(used, 0);
}

static void test_incomplete(void **state)
{
    (void)state;
    MORE("");
    MORE("5");
    MORE("5\r");
    MORE("5\r\nhel");
    MORE("5\r\nhello");
    MORE("5\r\nhello\r\n");
    MORE("0\r\n");
    MORE("0\r\nX: y\r\n");
    MORE("0\r\n\r");
    MORE("7fffffffffffffff\r\nabc"); /* the largest size, 2^63 - 1 */
}

static void test_size_errors(void **state)
{
    (void)state;
    ERR("\r\n");
    ERR("-5\r\nhello\r\n0\r\n\r\n");
    ERR("+5\r\nhello\r\n0\r\n\r\n");
    ERR("0x5\r\nhello\r\n0\r\n\r\n");
    ERR(" 5\r\nhello\r\n0\r\n\r\n");
    ERR("5 5\r\nhello\r\n");
    ERR("g\r\n");
    ERR("00000000000000001\r\nx\r\n"); /* 17 digits */
    ERR("8000000000000000\r\n");       /* 2^63 */
    ERR("ffffffffffffffff\r\n");
}

/* A request body's chunk sizes: at most 8 hex digits, leading zeros
 * included, and below 2^31, what every client sends. An origin that keeps
 * the low 32 bits of 100000010 (or 8 digits of 000000010) would frame the
 * body otherwise than the gateway and run what follows as a request. */
static void test_request_sizes(void **state)
{
    (void)state;
    request_body = true;
    DONE("5\r\nhello\r\n0\r\n\r\n");
    DONE("0000000a\r\n0123456789\r\n00000000\r\n\r\n"); /* 8 digits */
    DONE("5;name=value\r\nhello\r\n0\r\nX: y\r\n\r\n");
    MORE("7fffffff\r\nabc"); /* the largest size, 2^31 - 1 */
    ERR("80000000\r\n");     /* 2^31 */
    ERR("ffffffff\r\n");
    ERR("100000010\r\n0123456789abcdef\r\n0\r\n\r\n");
    ERR("00000000a\r\n0123456789\r\n0\r\n\r\n"); /* 9 digits */
    ERR("5\r\nhello\r\n000000000\r\n\r\n");      /* a last chunk too */
    ERR("5\r\nhello\r\n7fffffffffffffff\r\n");
    struct result r = feed("80000000\r\n", 10, 0);
    assert_int_equal(r.rc, CHUNKED_ERROR);
    assert_int_equal(r.consumed, 7); /* at the offending digit */
    assert_string_equal(r.why, "chunk size too large");
    r = feed("000000000\r\n", 11, 0);
    assert_int_equal(r.rc, CHUNKED_ERROR);
    assert_int_equal(r.consumed, 8);
    assert_string_equal(r.why, "chunk size too long");
    request_body = false;
    /* A response's framer takes them (a download in one huge chunk). */
    MORE("100000010\r\n0123456789abcdef\r\n");
    MORE("000000000\r\n");
}

static void test_line_end_errors(void **state)
{
    (void)state;
    ERR("5\nhello\r\n0\r\n\r\n");     /* bare LF after size */
    ERR("5\r\nhello\n0\r\n\r\n");     /* bare LF after data */
    ERR("5\r\nhelloX\r\n0\r\n\r\n");  /* data longer than its size */
    ERR("5\r\nhello\rX");             /* CR without LF after data */
    ERR("5\rX");                      /* CR without LF after size */
    ERR("0\r\n\n");                   /* bare LF at the end */
    ERR("0\r\n\rX");                  /* CR without LF at the end */
    ERR("0\r\nX: y\n\r\n");           /* bare LF in a trailer */
    ERR("0\r\nX: y\rZ");              /* CR without LF in a trailer */
    ERR("5;a=b\nhello\r\n0\r\n\r\n"); /* bare LF ending an extension */
}

static void test_extension_errors(void **state)
{
    (void)state;
    char line[CHUNKED_MAX_LINE + 64];
    /* "1;" + x... + "\r\n": exactly CHUNKED_MAX_LINE bytes before the LF is fine. */
    size_t n = 0;
    line[n++] = '1';
    line[n++] = ';';
    while (n < CHUNKED_MAX_LINE - 1)
        line[n++] = 'x';
    line[n++] = '\r'; /* CR is the CHUNKED_MAX_LINE-th byte */
    line[n++] = '\n';
    memcpy(line + n, "a\r\n0\r\n\r\n", 8);
    expect(line, n + 8, CHUNKED_DONE, n + 8);
    /* One byte more is too long. */
    n = 0;
    line[n++] = '1';
    line[n++] = ';';
    while (n < CHUNKED_MAX_LINE)
        line[n++] = 'x';
    line[n++] = '\r';
    line[n++] = '\n';
    expect(line, n, CHUNKED_ERROR, 0);

    ERR("5;a\x01\r\nhello\r\n"); /* CTL in an extension */
    ERR("5;a\x7f\r\nhello\r\n");
    ERR("5;a\0b\r\nhello\r\n");

    /* RFC 9112 7.1.1's grammar, so that every parser ends the line where
     * the gateway does: a quote left open at the CR (an origin that reads
     * a quoted-string on past it would take the data for the extension and
     * frame the rest its own way), a quote or other separator where a
     * token goes, an empty name. */
    ERR("5;a=\"x\r\nhello\r\n0\r\n\r\n");
    ERR("5;a=\"x\\\"\r\nhello\r\n0\r\n\r\n"); /* the quote escaped */
    ERR("5;a\"b\r\nhello\r\n0\r\n\r\n");
    ERR("5;a=b\"c\"\r\nhello\r\n0\r\n\r\n");
    ERR("5;a=\"b\"c\r\nhello\r\n0\r\n\r\n");
    ERR("5;\"a\"\r\nhello\r\n0\r\n\r\n");
    ERR("5;=b\r\nhello\r\n0\r\n\r\n");
    ERR("5;\r\nhello\r\n0\r\n\r\n");
    ERR("5;a;\r\nhello\r\n0\r\n\r\n");
    ERR("5;a=\r\nhello\r\n0\r\n\r\n");
    ERR("5;a b\r\nhello\r\n0\r\n\r\n");
    ERR("5;a=\"\x01\"\r\nhello\r\n0\r\n\r\n");
    ERR("0;a=\"\r\n\r\n");
}

static void test_extension_grammar(void **state)
{
    (void)state;
    DONE("5;a\r\nhello\r\n0\r\n\r\n");
    DONE("5;a;b=c;d=\"\"\r\nhello\r\n0\r\n\r\n");
    DONE("5 ; a = b ; c = \"x y;z\" \r\nhello\r\n0\r\n\r\n"); /* BWS */
    DONE("5;a=\"q\\\"\\\\\"\r\nhello\r\n0\r\n\r\n");          /* quoted-pairs */
    DONE("5;a=\"\x80\xff\"\r\nhello\r\n0\r\n\r\n");           /* obs-text */
}

static void test_trailer_errors(void **state)
{
    (void)state;
    ERR("0\r\n X: y\r\n\r\n");    /* obs-fold */
    ERR("0\r\nX y\r\n\r\n");      /* no colon */
    ERR("0\r\nX : y\r\n\r\n");    /* space before colon */
    ERR("0\r\n: y\r\n\r\n");      /* empty name */
    ERR("0\r\nX: a\x01\r\n\r\n"); /* CTL in a value */

    /* A trailer section over CHUNKED_MAX_TRAILERS bytes. */
    size_t cap = CHUNKED_MAX_TRAILERS + 256;
    char *s = malloc(cap);
    assert_non_null(s);
    size_t n = 0;
    memcpy(s + n, "0\r\n", 3);
    n += 3;
    while (n < CHUNKED_MAX_TRAILERS + 100) {
        memcpy(s + n, "X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", 44);
        n += 44;
    }
    memcpy(s + n, "\r\n", 2);
    n += 2;
    expect(s, n, CHUNKED_ERROR, 0);
    free(s);
}

static void test_error_is_sticky(void **state)
{
    (void)state;
    struct chunked c;
    size_t used = 99;
    chunked_init(&c);
    assert_int_equal(chunked_feed(&c, "5\r\nab", 5, &used), CHUNKED_MORE);
    assert_int_equal(used, 5);
    assert_int_equal(chunked_feed(&c, "cdeX", 4, &used), CHUNKED_ERROR);
    assert_int_equal(used, 3); /* offset of 'X' */
    assert_string_equal(c.why, "missing CRLF after chunk data");
    assert_int_equal(chunked_feed(&c, "\r\n0\r\n\r\n", 7, &used), CHUNKED_ERROR);
    assert_int_equal(used, 0);
}

/* trailer_at: 0 until the last-chunk line ended, then the bytes before the
 * trailer section, for every split of the input. */
static void trailer_at_is(const char *s, size_t len, uint64_t want)
{
    for (size_t cut = 0; cut <= len; cut++) {
        struct chunked c;
        size_t used = 0;
        chunked_init(&c);
        assert_int_equal(c.trailer_at, 0);
        int rc = chunked_feed(&c, s, cut, &used);
        assert_true(rc == CHUNKED_MORE || (rc == CHUNKED_DONE && cut == len));
        if (cut < want)
            assert_int_equal(c.trailer_at, 0);
        else
            assert_int_equal(c.trailer_at, want);
        if (rc == CHUNKED_MORE) {
            assert_int_equal(chunked_feed(&c, s + cut, len - cut, &used), CHUNKED_DONE);
            assert_int_equal(used, len - cut);
        }
        assert_int_equal(c.trailer_at, want);
    }
}

static void test_trailer_at(void **state)
{
    (void)state;
    static const char a[] = "0\r\n\r\n";
    trailer_at_is(a, sizeof(a) - 1, 3);
    static const char b[] = "3;x=y\r\nabc\r\n0\r\nProxy-Authorization: Basic eA==\r\nX: y\r\n\r\n";
    trailer_at_is(b, sizeof(b) - 1, 15);
    static const char d[] = "1\r\n0\r\n00;e\r\nT: v\r\n\r\n";
    trailer_at_is(d, sizeof(d) - 1, 12);
    /* A chunk whose data is "0\r\n" does not end the body. */
    struct chunked c;
    size_t used;
    chunked_init(&c);
    assert_int_equal(chunked_feed(&c, "3\r\n0\r\n\r\n", 8, &used), CHUNKED_MORE);
    assert_int_equal(c.trailer_at, 0);
}

/* What chunked_feed_data() hands on: at most 64 bytes, or a failure
 * after <fail_after> calls. */
struct sink {
    char buf[64];
    size_t len;
    int calls;
    int fail_after; /* 0: never */
};

static int collect(void *arg, const char *data, size_t len)
{
    struct sink *k = arg;
    assert_true(len > 0);
    if (k->fail_after > 0 && k->calls == k->fail_after)
        return -1;
    k->calls++;
    assert_true(k->len + len <= sizeof(k->buf));
    memcpy(k->buf + k->len, data, len);
    k->len += len;
    return 0;
}

/* The data alone, for every split of the input; nothing of the framing,
 * extensions or trailers, and nothing past the end of the body. */
static void decodes_to(const char *s, size_t len, const char *want)
{
    unsigned splits[] = {0, 1, 2, 3, 17};
    for (size_t i = 0; i < sizeof(splits) / sizeof(splits[0]); i++) {
        struct chunked c;
        struct sink k = {.len = 0};
        size_t off = 0, used = 0;
        int rc = CHUNKED_MORE;
        uint32_t seed = splits[i];
        chunked_init(&c);
        while (off < len && rc == CHUNKED_MORE) {
            size_t n = splits[i] == 0 ? len - off : splits[i] == 1 ? 1 : 1 + (seed >> 16) % 5;
            seed = seed * 1103515245u + 12345u;
            if (n > len - off)
                n = len - off;
            rc = chunked_feed_data(&c, s + off, n, &used, collect, &k);
            off += used;
        }
        assert_int_equal(rc, CHUNKED_DONE);
        assert_int_equal(k.len, strlen(want));
        assert_memory_equal(k.buf, want, k.len);
    }
}

static void test_decode(void **state)
{
    (void)state;
    static const char a[] = "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: y\r\n\r\nNEXT";
    decodes_to(a, sizeof(a) - 1, "hello world");
    static const char b[] = "3\r\n0\r\n\r\n0\r\n\r\n"; /* data that looks like framing */
    decodes_to(b, sizeof(b) - 1, "0\r\n");
    static const char d[] = "0\r\n\r\n";
    decodes_to(d, sizeof(d) - 1, "");

    /* A sink that fails fails the body, at the data it refused. */
    struct chunked c;
    struct sink k = {.fail_after = 1};
    size_t used;
    chunked_init(&c);
    assert_int_equal(chunked_feed_data(&c, "2\r\nab\r\n", 7, &used, collect, &k), CHUNKED_MORE);
    assert_int_equal(chunked_feed_data(&c, "2\r\ncd\r\n", 7, &used, collect, &k), CHUNKED_ERROR);
    assert_int_equal(used, 3);
    assert_string_equal(c.why, "out of memory");
    assert_int_equal(k.len, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_bodies),
        cmocka_unit_test(test_done_stops_at_end),
        cmocka_unit_test(test_incomplete),
        cmocka_unit_test(test_size_errors),
        cmocka_unit_test(test_line_end_errors),
        cmocka_unit_test(test_extension_errors),
        cmocka_unit_test(test_extension_grammar),
        cmocka_unit_test(test_trailer_errors),
        cmocka_unit_test(test_error_is_sticky),
        cmocka_unit_test(test_trailer_at),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_request_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
