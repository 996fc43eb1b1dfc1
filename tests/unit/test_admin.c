/* Unit tests for watch/admin_head.c, the admin server's request head parser: the strict request
 * line (METHOD SP /target SP HTTP/1.x CRLF), header lines, which page and
 * method a head asks for, and that a head fed one byte at a time parses as
 * it does whole. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "watch/admin_head.h"

/* Parses <s> whole, then one byte at a time; both must agree. */
static enum admin_parse parse(const char *s, struct admin_head *out)
{
    size_t len = strlen(s);
    struct admin_head whole, bytes;
    memset(&whole, 0, sizeof(whole));
    memset(&bytes, 0, sizeof(bytes));
    enum admin_parse r = admin_head_parse(&whole, s, len);
    enum admin_parse rb = ADMIN_PARSE_MORE;
    for (size_t i = 1; i <= len && rb == ADMIN_PARSE_MORE; i++)
        rb = admin_head_parse(&bytes, s, i);
    assert_int_equal(r, rb);
    if (r == ADMIN_PARSE_DONE) {
        assert_int_equal(whole.method, bytes.method);
        assert_int_equal(whole.page, bytes.page);
        assert_int_equal(whole.pos, bytes.pos);
    }
    if (out != NULL)
        *out = whole;
    return r;
}

static void heads_that_parse(void **state)
{
    (void)state;
    struct admin_head h;
    assert_int_equal(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &h), ADMIN_PARSE_DONE);
    assert_int_equal(h.method, ADMIN_GET);
    assert_int_equal(h.page, ADMIN_METRICS);
    assert_int_equal(parse("HEAD /healthz?probe=1 HTTP/1.0\r\n\r\n", &h), ADMIN_PARSE_DONE);
    assert_int_equal(h.method, ADMIN_HEAD);
    assert_int_equal(h.page, ADMIN_HEALTHZ);
    assert_int_equal(parse("GET /metrics/ HTTP/1.1\r\n\r\n", &h), ADMIN_PARSE_DONE);
    assert_int_equal(h.page, ADMIN_OTHER_PAGE);
    assert_int_equal(parse("GET /metricsx HTTP/1.1\r\n\r\n", &h), ADMIN_PARSE_DONE);
    assert_int_equal(h.page, ADMIN_OTHER_PAGE);
    assert_int_equal(parse("POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", &h),
                     ADMIN_PARSE_DONE);
    assert_int_equal(h.method, ADMIN_OTHER_METHOD);
    assert_int_equal(h.pos, strlen("POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\n"));
    assert_int_equal(parse("get /metrics HTTP/1.1\r\n\r\n", &h), ADMIN_PARSE_DONE);
    assert_int_equal(h.method, ADMIN_OTHER_METHOD); /* methods are case-sensitive */
    assert_int_equal(parse("GET /metrics HTTP/1.1\r\nX-Empty:\r\nTab:\tv\xc3\xa9\r\n\r\n", &h),
                     ADMIN_PARSE_DONE);
}

static void heads_not_yet_complete(void **state)
{
    (void)state;
    assert_int_equal(parse("", NULL), ADMIN_PARSE_MORE);
    assert_int_equal(parse("GET /metrics HTTP/1.1", NULL), ADMIN_PARSE_MORE);
    assert_int_equal(parse("GET /metrics HTTP/1.1\r", NULL), ADMIN_PARSE_MORE);
    assert_int_equal(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n", NULL), ADMIN_PARSE_MORE);
    assert_int_equal(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n\r", NULL), ADMIN_PARSE_MORE);
}

static void heads_that_are_bad(void **state)
{
    (void)state;
    static const char *bad[] = {
        "GET /metrics HTTP/1.1\nHost: x\n\n",
        "GET /metrics HTTP/1.1\r\nHost: x\n\r\n",
        "GET  /metrics HTTP/1.1\r\n\r\n",
        "GET /metrics  HTTP/1.1\r\n\r\n",
        " GET /metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1 \r\n\r\n",
        "GET\t/metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.10\r\n\r\n",
        "GET /metrics HTTP/1.x\r\n\r\n",
        "GET /metrics HTTP/2.0\r\n\r\n",
        "GET /metrics http/1.1\r\n\r\n",
        "GET /metrics\r\n\r\n",
        "GET  HTTP/1.1\r\n\r\n",
        "GET metrics HTTP/1.1\r\n\r\n",
        "GET http://x/metrics HTTP/1.1\r\n\r\n",
        "GET * HTTP/1.1\r\n\r\n",
        "GET /m\x7f HTTP/1.1\r\n\r\n",
        "GET /m\xc3\xa9 HTTP/1.1\r\n\r\n",
        "\r\nGET /metrics HTTP/1.1\r\n\r\n",
        "G(T /metrics HTTP/1.1\r\n\r\n",
        "AVERYLONGMETHODNAMEMUCHLONGERTHAN32 /metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1\r\n folded: x\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nX : y\r\n\r\n",
        "GET /metrics HTTP/1.1\r\n: y\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nnocolon\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nX: a\rb\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nX: \x01\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nX: \x7f\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (parse(bad[i], NULL) != ADMIN_PARSE_BAD)
            fail_msg("accepted '%s'", bad[i]);
    /* a NUL anywhere (strlen() above would stop at it) */
    static const char nul[] = "GET /metrics HTTP/1.1\r\nX: a\0b\r\n\r\n";
    struct admin_head h;
    memset(&h, 0, sizeof(h));
    assert_int_equal(admin_head_parse(&h, nul, sizeof(nul) - 1), ADMIN_PARSE_BAD);
    static const char nul_line[] = "GET /me\0trics HTTP/1.1\r\n\r\n";
    memset(&h, 0, sizeof(h));
    assert_int_equal(admin_head_parse(&h, nul_line, sizeof(nul_line) - 1), ADMIN_PARSE_BAD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(heads_that_parse),
        cmocka_unit_test(heads_not_yet_complete),
        cmocka_unit_test(heads_that_are_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
