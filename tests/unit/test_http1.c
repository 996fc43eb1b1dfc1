/* Unit tests for gate/http1.c: request and response heads, the heads
 * forwarded upstream and back, and the body framing decisions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "evbuffer_text.h"
#include "gate/http1.h"
#include "policy/model.h"

#define MAX_HEAD 32768

static struct http_request req;
static struct http_response rsp;
static char *copy; /* the exact-size copy parsed last (pointers point into it) */

static char *exact(const char *s, size_t len)
{
    free(copy);
    copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, s, len);
    return copy;
}

static int preq_n(const char *s, size_t len, size_t max_head, const char **why)
{
    *why = NULL;
    return http1_parse_request(exact(s, len), len, max_head, &req, why);
}

static int preq(const char *s, const char **why)
{
    return preq_n(s, strlen(s), MAX_HEAD, why);
}

static int prsp(const char *s, const char **why)
{
    *why = NULL;
    return http1_parse_response(exact(s, strlen(s)), strlen(s), MAX_HEAD, &rsp, why);
}

static void bad_req(const char *s, size_t len, const char *want)
{
    const char *why;
    int rc = preq_n(s, len, MAX_HEAD, &why);
    if (rc != HTTP1_BAD)
        fail_msg("accepted (rc %d): %.*s", rc, (int)len, s);
    assert_non_null(why);
    if (want != NULL && strcmp(why, want) != 0)
        fail_msg("why \"%s\", want \"%s\" for: %.*s", why, want, (int)len, s);
}

#define BAD(s, want) bad_req((s), sizeof(s) - 1, (want))

static void ok_req(const char *s)
{
    const char *why;
    int rc = preq(s, &why);
    if (rc <= 0)
        fail_msg("rc %d (%s) for: %s", rc, why ? why : "-", s);
    assert_int_equal((size_t)rc, strlen(s));
    assert_int_equal(req.head_len, strlen(s));
}

static const struct http_header *find(const struct http_header *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (h[i].name_len == strlen(name) && strncasecmp(h[i].name, name, h[i].name_len) == 0)
            return &h[i];
    return NULL;
}

/* ---------------------------------------------------------------------- */

static void test_absolute_form(void **state)
{
    (void)state;
    ok_req("GET http://Example.COM/a/b?c=d HTTP/1.1\r\nHost: example.com\r\n"
           "User-Agent: t\r\nX-Trim: \t v a l \t\r\nX-Empty:\r\n\r\n");
    assert_string_equal(req.method, "GET");
    assert_int_equal(req.method_bit, METHOD_GET);
    assert_int_equal(req.form, TARGET_ABSOLUTE);
    assert_string_equal(req.scheme, "http");
    assert_string_equal(req.host, "Example.COM");
    assert_false(req.host_ipv6);
    assert_int_equal(req.port, 80);
    assert_false(req.port_explicit);
    assert_int_equal(req.path_len, 8);
    assert_memory_equal(req.path, "/a/b?c=d", 8);
    assert_int_equal(req.version_minor, 1);
    assert_int_equal(req.nheaders, 4);
    assert_int_equal(req.content_length, -1);
    assert_false(req.chunked);
    assert_false(req.conn_close);
    assert_false(req.expect_continue);
    assert_int_equal(req.host_header_len, 11);
    assert_memory_equal(req.host_header, "example.com", 11);
    assert_null(req.proxy_authorization);
    const struct http_header *h = find(req.headers, req.nheaders, "x-trim");
    assert_non_null(h);
    assert_int_equal(h->value_len, 5);
    assert_memory_equal(h->value, "v a l", 5);
    h = find(req.headers, req.nheaders, "x-empty");
    assert_non_null(h);
    assert_int_equal(h->value_len, 0);
    assert_int_equal(http1_request_body(&req), BODY_NONE);

    ok_req("POST HTTP://a.test:8080 HTTP/1.1\r\nHost: a.test:8080\r\nContent-Length: 5\r\n\r\n");
    assert_int_equal(req.method_bit, METHOD_POST);
    assert_string_equal(req.host, "a.test");
    assert_int_equal(req.port, 8080);
    assert_true(req.port_explicit);
    assert_int_equal(req.path_len, 1);
    assert_memory_equal(req.path, "/", 1);
    assert_int_equal(req.content_length, 5);
    assert_int_equal(http1_request_body(&req), BODY_LENGTH);

    ok_req("PURGE http://[::1]:8080/x HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n");
    assert_int_equal(req.method_bit, METHOD_OTHER);
    assert_string_equal(req.host, "::1");
    assert_true(req.host_ipv6);
    assert_int_equal(req.port, 8080);

    ok_req("GET http://[::ffff:127.0.0.1]/ HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_string_equal(req.host, "::ffff:127.0.0.1");
    assert_int_equal(req.port, 80);

    ok_req("GET http://0x7f000001:65535/ HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_string_equal(req.host, "0x7f000001");
    assert_int_equal(req.port, 65535);

    ok_req("GET http://a_b-c.test:00080/ HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_int_equal(req.port, 80);
    assert_true(req.port_explicit);
}

static void test_connect_and_other_forms(void **state)
{
    (void)state;
    ok_req("CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n"
           "Proxy-Authorization: Basic eDp5\r\n\r\n");
    assert_int_equal(req.form, TARGET_AUTHORITY);
    assert_int_equal(req.method_bit, METHOD_CONNECT);
    assert_string_equal(req.scheme, "");
    assert_string_equal(req.host, "api.github.com");
    assert_int_equal(req.port, 443);
    assert_true(req.port_explicit);
    assert_null(req.path);
    assert_int_equal(req.proxy_authorization_len, 10);
    assert_memory_equal(req.proxy_authorization, "Basic eDp5", 10);
    assert_int_equal(http1_request_body(&req), BODY_NONE);

    ok_req("CONNECT [::1]:8080 HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n");
    assert_string_equal(req.host, "::1");
    assert_true(req.host_ipv6);
    assert_int_equal(req.port, 8080);

    ok_req("CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\nContent-Length: 0\r\n\r\n");

    ok_req("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n");
    assert_int_equal(req.form, TARGET_ORIGIN);
    assert_int_equal(req.path_len, 1);
    assert_string_equal(req.host, "");

    ok_req("OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n");
    assert_int_equal(req.form, TARGET_ASTERISK);
    assert_int_equal(req.method_bit, METHOD_OPTIONS);

    ok_req("GET http://a.test/ HTTP/1.0\r\n\r\n");
    assert_int_equal(req.version_minor, 0);
    assert_null(req.host_header);
    assert_true(req.conn_close);

    ok_req("GET http://a.test/ HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    assert_false(req.conn_close);

    ok_req("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: foo, ,CLOSE\r\n\r\n");
    assert_true(req.conn_close);

    ok_req("PUT http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: Chunked\r\n"
           "Expect: 100-Continue\r\n\r\n");
    assert_true(req.chunked);
    assert_true(req.expect_continue);
    assert_int_equal(http1_request_body(&req), BODY_CHUNKED);

    ok_req("POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 7, 7\r\n"
           "content-length: 7\r\n\r\n");
    assert_int_equal(req.content_length, 7);

    ok_req("POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(req.content_length, 0);
    assert_int_equal(http1_request_body(&req), BODY_NONE);

    ok_req("POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\n"
           "Content-Length: 9223372036854775807\r\n\r\n");
    assert_int_equal(req.content_length, INT64_MAX);
}

static void test_request_line_errors(void **state)
{
    (void)state;
    BAD("\r\n\r\n", "invalid method");
    BAD("GET  http://a.test/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid request target");
    BAD("GET http://a.test/  HTTP/1.1\r\nHost: a\r\n\r\n", "unsupported HTTP version");
    BAD("GET http://a.test/ HTTP/1.1 \r\nHost: a\r\n\r\n", "unsupported HTTP version");
    BAD("GET\thttp://a.test/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid method");
    BAD("G(T http://a.test/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid method");
    BAD("GETGETGETGETGETGETGETGETGETGETGET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
        "method too long");
    BAD("GET http://a.test/\x01 HTTP/1.1\r\nHost: a\r\n\r\n", "invalid request target");
    BAD("GET http://a.test/\x80 HTTP/1.1\r\nHost: a\r\n\r\n", "invalid request target");
    BAD("GET http://a.test/ HTTP/2.0\r\nHost: a\r\n\r\n", "unsupported HTTP version");
    BAD("GET http://a.test/ HTTP/1.2\r\nHost: a\r\n\r\n", "unsupported HTTP version");
    BAD("GET http://a.test/ http/1.1\r\nHost: a\r\n\r\n", "unsupported HTTP version");
    BAD("GET http://a.test/\r\nHost: a\r\n\r\n", "invalid request target");
    BAD("GET http://a.test/ HTTP/1.1\rX\r\nHost: a\r\n\r\n", "unsupported HTTP version");
}

static void test_target_errors(void **state)
{
    (void)state;
    BAD("GET https://a.test/ HTTP/1.1\r\nHost: a\r\n\r\n", "use CONNECT for https");
    BAD("GET HTTPS://a.test/ HTTP/1.1\r\nHost: a\r\n\r\n", "use CONNECT for https");
    BAD("GET ftp://a.test/ HTTP/1.1\r\nHost: a\r\n\r\n", "unsupported scheme");
    BAD("GET http:/a.test/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid request target");
    BAD("GET a.test:80 HTTP/1.1\r\nHost: a\r\n\r\n", "invalid request target");
    BAD("GET http://user:pw@a.test/ HTTP/1.1\r\nHost: a\r\n\r\n", "userinfo in request target");
    BAD("GET http://a.test@evil.test/ HTTP/1.1\r\nHost: a\r\n\r\n", "userinfo in request target");
    BAD("GET http://a.test:0/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid port");
    BAD("GET http://a.test:65536/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid port");
    BAD("GET http://a.test:80a/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid port");
    BAD("GET http://a.test:+80/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid port");
    BAD("GET http://a.test:/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid port");
    BAD("GET http://a.test:000080/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid port");
    BAD("GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", "empty host");
    BAD("GET http://:80/x HTTP/1.1\r\nHost: a\r\n\r\n", "empty host");
    BAD("GET http://a%2e.test/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid character in host");
    BAD("GET http://a.test?x=1 HTTP/1.1\r\nHost: a\r\n\r\n", "missing path before query");
    BAD("GET http://a.test/#frag HTTP/1.1\r\nHost: a\r\n\r\n", "fragment in request target");
    BAD("GET http://[::1/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid IPv6 address in request target");
    BAD("GET http://[]/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid IPv6 address in request target");
    BAD("GET http://[1.2.3.4]/ HTTP/1.1\r\nHost: a\r\n\r\n",
        "invalid IPv6 address in request target");
    BAD("GET http://[fe80::1%25eth0]/ HTTP/1.1\r\nHost: a\r\n\r\n",
        "invalid IPv6 address in request target");
    BAD("GET http://[::1]x/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid request target");
    BAD("GET * HTTP/1.1\r\nHost: a\r\n\r\n", "asterisk target needs OPTIONS");
    BAD("CONNECT a.test HTTP/1.1\r\nHost: a\r\n\r\n", "CONNECT needs host:port");
    BAD("CONNECT [::1] HTTP/1.1\r\nHost: a\r\n\r\n", "CONNECT needs host:port");
    BAD("CONNECT http://a.test:443/ HTTP/1.1\r\nHost: a\r\n\r\n", NULL);
    BAD("CONNECT a.test:443/x HTTP/1.1\r\nHost: a\r\n\r\n", "invalid port");
    BAD("CONNECT a.test:0 HTTP/1.1\r\nHost: a\r\n\r\n", "invalid port");
    BAD("CONNECT u@a.test:443 HTTP/1.1\r\nHost: a\r\n\r\n", "userinfo in request target");
    BAD("CONNECT a.test:443 HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\n",
        "CONNECT with a body");
    BAD("CONNECT a.test:443 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
        "CONNECT with a body");

    /* A host of HTTP_HOST_MAX bytes is accepted, one more is not. */
    char line[600];
    char host[HTTP_HOST_MAX + 2];
    memset(host, 'a', sizeof(host));
    host[HTTP_HOST_MAX] = '\0';
    int n = snprintf(line, sizeof(line), "GET http://%s/ HTTP/1.1\r\nHost: a\r\n\r\n", host);
    ok_req(line);
    assert_int_equal(strlen(req.host), HTTP_HOST_MAX);
    host[HTTP_HOST_MAX] = 'a';
    host[HTTP_HOST_MAX + 1] = '\0';
    n = snprintf(line, sizeof(line), "GET http://%s/ HTTP/1.1\r\nHost: a\r\n\r\n", host);
    bad_req(line, (size_t)n, "host too long");
}

static void test_header_errors(void **state)
{
    (void)state;
#define RL "GET http://a.test/ HTTP/1.1\r\n"
    BAD(RL "Host: a\nX: y\r\n\r\n", "bare LF in head");
    BAD("GET http://a.test/ HTTP/1.1\nHost: a\r\n\r\n", "bare LF in head");
    BAD(RL "Host: a\r\n\n", "bare LF in head");
    BAD(RL "Host: a\r\nX: y\rZ\r\n\r\n", "CR without LF in header");
    BAD(RL "Host: a\r\nX: y\r\n folded\r\n\r\n", "obsolete line folding");
    BAD(RL "Host: a\r\nX: y\r\n\tfolded\r\n\r\n", "obsolete line folding");
    BAD(RL "Host: a\r\nX : y\r\n\r\n", "invalid character in header name");
    BAD(RL "Host: a\r\nX\t: y\r\n\r\n", "invalid character in header name");
    BAD(RL "Host: a\r\n: y\r\n\r\n", "empty header name");
    BAD(RL "Host: a\r\n(X: y\r\n\r\n", "invalid header name");
    BAD(RL "Host: a\r\nNoColon\r\n\r\n", "invalid character in header name");
    BAD(RL "Host: a\r\nX(y): z\r\n\r\n", "invalid character in header name");
    BAD(RL "Host: a\r\nX: a\0b\r\n\r\n", "invalid character in header value");
    BAD(RL "Host: a\r\nX: a\x01\r\n\r\n", "invalid character in header value");
    BAD(RL "Host: a\r\nX: a\x7f\r\n\r\n", "invalid character in header value");
    BAD(RL "\r\n", "missing Host header");
    BAD(RL "Host: a\r\nHost: a\r\n\r\n", "duplicate Host header");
    BAD(RL "Host: a\r\nhOsT: b\r\n\r\n", "duplicate Host header");
    BAD(RL "Host: a\r\nProxy-Authorization: a\r\nProxy-Authorization: b\r\n\r\n",
        "duplicate Proxy-Authorization header");
    BAD(RL "Host: a\r\nConnection: close, a b\r\n\r\n", "invalid Connection header");

    /* HTTP_MAX_HEADERS headers are fine, one more is not. */
    char *s = malloc(64 * (HTTP_MAX_HEADERS + 2));
    assert_non_null(s);
    size_t n = 0;
    memcpy(s, RL, sizeof(RL) - 1);
    n += sizeof(RL) - 1;
    for (int i = 0; i < HTTP_MAX_HEADERS; i++)
        n += (size_t)snprintf(s + n, 64, i == 0 ? "Host: a\r\n" : "X-%d: v\r\n", i);
    memcpy(s + n, "\r\n", 3);
    ok_req(s);
    assert_int_equal(req.nheaders, HTTP_MAX_HEADERS);
    n += (size_t)snprintf(s + n, 64, "X-Last: v\r\n\r\n");
    bad_req(s, n, "too many headers");
    free(s);
}

static void test_smuggling(void **state)
{
    (void)state;
    BAD(RL "Host: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "both Content-Length and Transfer-Encoding");
    BAD(RL "Host: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        "both Content-Length and Transfer-Encoding");
    BAD(RL "Host: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
        "unsupported Transfer-Encoding");
    BAD(RL "Host: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "unsupported Transfer-Encoding");
    BAD(RL "Host: a\r\nTransfer-Encoding: xchunked\r\n\r\n", "unsupported Transfer-Encoding");
    BAD(RL "Host: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "several Transfer-Encoding headers");
    BAD(RL "Host: a\r\nTransfer-Encoding: identity\r\n\r\n", "unsupported Transfer-Encoding");
    BAD(RL "Host: a\r\nTransfer-Encoding:\r\n\r\n", "unsupported Transfer-Encoding");
    BAD("POST http://a.test/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        "Transfer-Encoding in HTTP/1.0");
    BAD(RL "Host: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "conflicting Content-Length values");
    BAD(RL "Host: a\r\nContent-Length: 5, 6\r\n\r\n", "conflicting Content-Length values");
    BAD(RL "Host: a\r\nContent-Length: +5\r\n\r\n", "invalid Content-Length");
    BAD(RL "Host: a\r\nContent-Length: -5\r\n\r\n", "invalid Content-Length");
    BAD(RL "Host: a\r\nContent-Length: 0x5\r\n\r\n", "invalid Content-Length");
    BAD(RL "Host: a\r\nContent-Length: 5 5\r\n\r\n", "invalid Content-Length");
    BAD(RL "Host: a\r\nContent-Length:\r\n\r\n", "invalid Content-Length");
    BAD(RL "Host: a\r\nContent-Length: 5,\r\n\r\n", "invalid Content-Length");
    BAD(RL "Host: a\r\nContent-Length: 9223372036854775808\r\n\r\n", "Content-Length too large");
    BAD(RL "Host: a\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        "Content-Length too large");
}

static void test_partial_and_limits(void **state)
{
    (void)state;
    const char *full = "POST http://a.test:8080/p?q=1 HTTP/1.1\r\nHost: a.test:8080\r\n"
                       "Content-Length: 3\r\nConnection: keep-alive\r\n\r\nabc";
    size_t head = strlen(full) - 3;
    const char *why;
    for (size_t n = 0; n < head; n++) {
        int rc = preq_n(full, n, MAX_HEAD, &why);
        if (rc != HTTP1_NEED_MORE)
            fail_msg("prefix %zu: rc %d (%s)", n, rc, why ? why : "-");
    }
    for (size_t n = head; n <= strlen(full); n++)
        assert_int_equal(preq_n(full, n, MAX_HEAD, &why), (int)head);
    /* max_head: exactly the head fits; one byte less is too big. */
    assert_int_equal(preq_n(full, strlen(full), head, &why), (int)head);
    assert_int_equal(preq_n(full, strlen(full), head - 1, &why), HTTP1_TOO_BIG);
    assert_int_equal(preq_n(full, head - 1, head - 1, &why), HTTP1_TOO_BIG);
    assert_int_equal(preq_n(full, head - 2, head - 1, &why), HTTP1_NEED_MORE);

    /* The same for responses. */
    const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
    size_t rhead = strlen(r) - 2;
    for (size_t n = 0; n < rhead; n++) {
        int rc = http1_parse_response(exact(r, n), n, MAX_HEAD, &rsp, &why);
        if (rc != HTTP1_NEED_MORE)
            fail_msg("response prefix %zu: rc %d", n, rc);
    }
    assert_int_equal(http1_parse_response(exact(r, strlen(r)), strlen(r), MAX_HEAD, &rsp, &why),
                     (int)rhead);
    assert_int_equal(http1_parse_response(exact(r, strlen(r)), strlen(r), rhead - 1, &rsp, &why),
                     HTTP1_TOO_BIG);
}

/* http1_parse_request_scan() fed <s> a byte at a time with one scan says
 * NEED_MORE until http1_parse_request() of the bytes so far says more,
 * then the same: its return, reason and request. */
static void scan_parse_grows(const char *s, size_t max_head)
{
    struct http1_scan scan = {0, 0};
    size_t len = strlen(s);
    for (size_t n = 1; n <= len; n++) {
        const char *why = NULL, *why_whole = NULL;
        int want = preq_n(s, n, max_head, &why_whole);
        struct http_request whole = req;
        int got = http1_parse_request_scan(&scan, copy, n, max_head, &req, &why);
        if (got != want)
            fail_msg("'%s' at %zu: %d, the parser says %d", s, n, got, want);
        if (got < 0)
            assert_string_equal(why, why_whole);
        if (got > 0) {
            assert_int_equal(req.nheaders, whole.nheaders);
            assert_memory_equal(&req, &whole, offsetof(struct http_request, headers));
            assert_memory_equal(req.headers, whole.headers, req.nheaders * sizeof(req.headers[0]));
        }
        if (got != HTTP1_NEED_MORE)
            return;
    }
}

/* http1_head_end() over a head that grows a byte at a time, one scan for
 * all the calls: what a scan of the whole prefix at once would say, at
 * every length (the end, a bare LF and the limit found at the byte they
 * come with), and each byte looked at once; and the parser with a scan
 * over it, as scan_parse_grows() checks it. */
static void scan_grows(const char *s, size_t max_head)
{
    struct http1_scan scan = {0, 0};
    size_t len = strlen(s);
    for (size_t n = 0; n <= len; n++) {
        struct http1_scan fresh = {0, 0};
        const char *why = NULL, *why_fresh = NULL;
        int want = http1_head_end(&fresh, s, n, max_head, &why_fresh);
        int got = http1_head_end(&scan, s, n, max_head, &why);
        if (got != want)
            fail_msg("'%s' at %zu: %d, a whole scan says %d", s, n, got, want);
        if (got != HTTP1_NEED_MORE)
            break;
        assert_int_equal(scan.scanned, n);
    }
    scan_parse_grows(s, max_head);
}

static void test_head_end_incremental(void **state)
{
    (void)state;
    scan_grows("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: y\r\n\r\nbody", MAX_HEAD);
    scan_grows("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", MAX_HEAD);
    scan_grows("GET http://a.test/ HTTP/1.1\r\nHost: a.test\nX: y\r\n\r\n", MAX_HEAD);
    scan_grows("\nGET http://a.test/ HTTP/1.1\r\n\r\n", MAX_HEAD);
    scan_grows("\r\n\r\nGET / HTTP/1.1\r\n\r\n", MAX_HEAD);
    scan_grows("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX-Long: yyyyyyyy\r\n\r\n", 40);

    /* Past the end: its length, however much more arrived. */
    struct http1_scan scan = {0, 0};
    const char *h = "HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\n\r\n";
    const char *why;
    assert_int_equal(http1_head_end(&scan, h, 10, MAX_HEAD, &why), HTTP1_NEED_MORE);
    assert_int_equal(http1_head_end(&scan, h, strlen(h), MAX_HEAD, &why), 27);
}

/* A field value of <len> bytes ('v' but <b> at <pos>, so each word of the
 * value scan and its tail get each byte value): accepted as it came when
 * <b> is a field-vchar, SP or HTAB, else refused for the reason its byte
 * gives, as a byte-by-byte check gives it. */
static void value_byte(size_t len, size_t pos, unsigned b)
{
    char s[96];
    int n = snprintf(s, sizeof(s), "GET http://a.test/ HTTP/1.1\r\nHost: a\r\nX: ");
    memset(s + n, 'v', len);
    s[(size_t)n + pos] = (char)b;
    memcpy(s + n + len, "\r\n\r\n", 4);
    size_t total = (size_t)n + len + 4;
    bool vchar = b == '\t' || (b >= 0x20 && b != 0x7f);
    if (!vchar) {
        bad_req(s, total,
                b == '\n'   ? "bare LF in head"
                : b == '\r' ? "CR without LF in header"
                            : "invalid character in header value");
        return;
    }
    const char *why;
    int rc = preq_n(s, total, MAX_HEAD, &why);
    if (rc != (int)total)
        fail_msg("byte 0x%02x at %zu of %zu: rc %d (%s)", b, pos, len, rc, why ? why : "-");
    const struct http_header *h = &req.headers[1];
    size_t lead = (pos == 0 && (b == ' ' || b == '\t')) ? 1 : 0;
    size_t trail = (pos == len - 1 && len > 1 && (b == ' ' || b == '\t')) ? 1 : 0;
    assert_int_equal(h->value_len, len - lead - trail);
    assert_ptr_equal(h->value, copy + n + lead);
    assert_int_equal(h->plain, lead == 0 && trail == 0);
}

static void test_value_bytes(void **state)
{
    (void)state;
    for (size_t len = 1; len <= 25; len++)
        for (size_t pos = 0; pos < len; pos++)
            for (unsigned b = 0; b < 256; b++)
                value_byte(len, pos, b);
}

static void test_parse_scan(void **state)
{
    (void)state;
    /* (test_head_end_incremental()'s heads are parsed so too.) */
    scan_parse_grows("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: y\rz\r\n\r\n", MAX_HEAD);
    scan_parse_grows("GET https://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", MAX_HEAD);

    /* A response, whole and one the parser refuses once its end is there. */
    struct http1_scan scan = {0, 0};
    const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
    const char *why = NULL;
    assert_int_equal(prsp(r, &why), 38);
    struct http_response whole = rsp;
    assert_int_equal(http1_parse_response_scan(&scan, copy, 20, MAX_HEAD, &rsp, &why),
                     HTTP1_NEED_MORE);
    assert_int_equal(http1_parse_response_scan(&scan, copy, strlen(r), MAX_HEAD, &rsp, &why), 38);
    assert_memory_equal(&rsp, &whole, offsetof(struct http_response, headers));
    r = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n";
    scan = (struct http1_scan){0, 0};
    assert_int_equal(http1_parse_response_scan(&scan, r, strlen(r), MAX_HEAD, &rsp, &why),
                     HTTP1_BAD);
    assert_string_equal(why, "conflicting Content-Length values");
}

/* Parses <in> (a whole head) and checks that the request written upstream
 * from it, into <b> (emptied), is exactly <out>. */
static void expect_upstream(struct evbuffer *b, const char *in, const char *out)
{
    ok_req(in);
    assert_int_equal(http1_write_upstream_request(&req, b), 0);
    char *s = evbuffer_text(b);
    assert_string_equal(s, out);
    free(s);
}

static void test_write_upstream_request(void **state)
{
    (void)state;
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    expect_upstream(
        b,
        "POST http://a.test:8080/p?q=1 HTTP/1.1\r\nHost: a.test:8080\r\n"
        "Proxy-Authorization: Basic c2VjcmV0\r\nConnection: keep-alive, X-Secret\r\n"
        "X-Secret: s\r\nKeep-Alive: 300\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\n"
        "Trailer: X-Sum\r\nUpgrade: websocket\r\nContent-Length: 3\r\n"
        "Accept: */*\r\nPROXY-AUTHORIZATION-X: kept\r\n\r\n",
        "POST /p?q=1 HTTP/1.1\r\nHost: a.test:8080\r\nContent-Length: 3\r\n"
        "Accept: */*\r\nPROXY-AUTHORIZATION-X: kept\r\n"
        "Via: 1.1 sluice\r\nConnection: close\r\n\r\n");

    /* HTTP/1.0 without Host: one is built from the target. */
    expect_upstream(
        b, "GET http://[::1]:8080 HTTP/1.0\r\nproxy-authorization: Bearer t\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: [::1]:8080\r\nVia: 1.0 sluice\r\nConnection: close\r\n\r\n");

    expect_upstream(
        b, "GET http://a.test/x HTTP/1.0\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: a.test\r\nVia: 1.0 sluice\r\nConnection: close\r\n\r\n");

    expect_upstream(
        b, "PUT http://a.test/x HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n",
        "PUT /x HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n"
        "Via: 1.1 sluice\r\nConnection: close\r\n\r\n");

    /* chunked goes on in lower case, as every client writes it: an origin
     * that compares it byte for byte would read no body, and the chunks
     * as the next request. */
    expect_upstream(
        b, "PUT http://a.test/x HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: ChUnKeD\r\n\r\n",
        "PUT /x HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n"
        "Via: 1.1 sluice\r\nConnection: close\r\n\r\n");

    /* Proxy (httpoxy: a CGI origin's HTTP_PROXY) never goes on, in any
     * case; fields whose names only begin with it do. */
    expect_upstream(b,
                    "GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\nProxy: http://10.0.0.9:8\r\n"
                    "Proxy-Foo: 1\r\nPROXY: x\r\nX-Proxy: 2\r\n\r\n",
                    "GET /x HTTP/1.1\r\nHost: a.test\r\nProxy-Foo: 1\r\nX-Proxy: 2\r\n"
                    "Via: 1.1 sluice\r\nConnection: close\r\n\r\n");

    /* Connection cannot strip the framing or Host (smuggling). */
    expect_upstream(b,
                    "POST http://a.test/x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n"
                    "Connection: Content-Length, Host, transfer-encoding, X-A\r\nX-A: 1\r\n\r\n",
                    "POST /x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n"
                    "Via: 1.1 sluice\r\nConnection: close\r\n\r\n");

    /* Content-Length goes on once, as the one decimal value the parser
     * settled on: lists of identical values, repeats and leading zeros are
     * not relayed for the next hop to read its own way. */
    expect_upstream(b,
                    "POST http://a.test/x HTTP/1.1\r\nHost: a.test\r\ncontent-length: 5, 5\r\n"
                    "X-A: 1\r\nContent-Length: 005\r\n\r\n",
                    "POST /x HTTP/1.1\r\nHost: a.test\r\ncontent-length: 5\r\nX-A: 1\r\n"
                    "Via: 1.1 sluice\r\nConnection: close\r\n\r\n");

    /* Only absolute-form requests are forwarded. */
    ok_req("CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n");
    assert_int_equal(http1_write_upstream_request(&req, b), -1);
    ok_req("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n");
    assert_int_equal(http1_write_upstream_request(&req, b), -1);
    evbuffer_free(b);
}

/* A field goes on as "name: value" CRLF whatever OWS its line had: the
 * lines already so (and the runs of them) are copied as they came, the
 * others written anew. */
static void test_write_plain_lines(void **state)
{
    (void)state;
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    expect_upstream(b,
                    "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX-A: 1\r\nX-B:2\r\n"
                    "X-C:  3\r\nX-D: 4 \r\nX-E:\t5\r\nX-F: 6\t\r\nX-G:\r\nX-H: \r\nX-I:  \r\n"
                    "X-J: 7\r\nX-K: a b\r\nTE: x\r\nX-L: 8\r\nX-M: 9\r\n\r\n",
                    "GET / HTTP/1.1\r\nHost: a.test\r\nX-A: 1\r\nX-B: 2\r\nX-C: 3\r\nX-D: 4\r\n"
                    "X-E: 5\r\nX-F: 6\r\nX-G: \r\nX-H: \r\nX-I: \r\nX-J: 7\r\nX-K: a b\r\n"
                    "X-L: 8\r\nX-M: 9\r\nVia: 1.1 sluice\r\nConnection: close\r\n\r\n");
    assert_true(req.headers[0].plain && req.headers[1].plain && !req.headers[2].plain);
    assert_true(!req.headers[3].plain && !req.headers[4].plain && !req.headers[5].plain);
    assert_true(!req.headers[6].plain && !req.headers[7].plain && req.headers[8].plain);
    assert_true(!req.headers[9].plain && req.headers[10].plain && req.headers[11].plain);
    /* A Content-Length that is already the one decimal value written goes
     * on as it came; any other spelling is written anew, once. */
    static const char *const lengths[][2] = {
        {"Content-Length: 100\r\n", "Content-Length: 100\r\n"},
        {"Content-Length: 0\r\n", "Content-Length: 0\r\n"},
        {"Content-Length: 0100\r\n", "Content-Length: 100\r\n"},
        {"Content-Length:  100\r\n", "Content-Length: 100\r\n"},
        {"Content-Length: 100, 100\r\n", "Content-Length: 100\r\n"},
        {"content-length: 9223372036854775807\r\nContent-Length: 9223372036854775807\r\n",
         "content-length: 9223372036854775807\r\n"},
        {"Content-Length: 00\r\nContent-Length: 0\r\n", "Content-Length: 0\r\n"},
    };
    for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
        char in[256], out[256];
        snprintf(in, sizeof(in), "POST http://a.test/ HTTP/1.1\r\nHost: a\r\n%sX: y\r\n\r\n",
                 lengths[i][0]);
        snprintf(
            out, sizeof(out),
            "POST / HTTP/1.1\r\nHost: a\r\n%sX: y\r\nVia: 1.1 sluice\r\nConnection: close\r\n\r\n",
            lengths[i][1]);
        expect_upstream(b, in, out);
    }
    evbuffer_free(b);
}

static void test_write_upstream_request_keep(void **state)
{
    (void)state;
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    /* The client's own Connection header never passes: the gate's flag decides. */
    ok_req("GET http://a.test/k HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n"
           "Keep-Alive: 5\r\n\r\n");
    assert_int_equal(http1_write_upstream_request_keep(&req, b, true), 0);
    char *s = evbuffer_text(b);
    assert_string_equal(
        s, "GET /k HTTP/1.1\r\nHost: a.test\r\nVia: 1.1 sluice\r\nConnection: keep-alive\r\n\r\n");
    free(s);
    assert_int_equal(http1_write_upstream_request_keep(&req, b, false), 0);
    s = evbuffer_text(b);
    assert_string_equal(
        s, "GET /k HTTP/1.1\r\nHost: a.test\r\nVia: 1.1 sluice\r\nConnection: close\r\n\r\n");
    free(s);
    ok_req("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n");
    assert_int_equal(http1_write_upstream_request_keep(&req, b, true), -1);
    evbuffer_free(b);
}

/* A head of <start> and <n> fields "X-Fi: i" CRLF, then <end>, into <buf>. */
static void many_fields(char *buf, size_t cap, const char *start, int n, const char *end)
{
    size_t at = (size_t)snprintf(buf, cap, "%s", start);
    for (int i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "X-F%d: %d\r\n", i, i);
    snprintf(buf + at, cap - at, "%s", end);
}

static void test_write_no_more_fields_than_taken(void **state)
{
    (void)state;
    static char head[4096];
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    /* Host and 99 more: 100 taken, 102 to go on with Via and Connection */
    many_fields(head, sizeof(head), "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n", 99, "\r\n");
    ok_req(head);
    assert_int_equal(http1_write_upstream_request(&req, b), HTTP1_TOO_MANY_FIELDS);
    assert_int_equal(evbuffer_get_length(b), 0);
    /* 100 taken, 2 of them hop-by-hop: 100 go on, and are taken again */
    many_fields(head, sizeof(head), "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n", 97,
                "Connection: close\r\nKeep-Alive: 5\r\n\r\n");
    ok_req(head);
    assert_int_equal(http1_write_upstream_request(&req, b), 0);
    char *s = evbuffer_text(b);
    ok_req(s);
    assert_int_equal(req.nheaders, HTTP_MAX_HEADERS);
    free(s);
    evbuffer_drain(b, evbuffer_get_length(b));
    /* an answer: Via, Date and Connection added */
    many_fields(head, sizeof(head), "HTTP/1.1 200 OK\r\n", 97, "Content-Length: 0\r\n\r\n");
    const char *why = NULL;
    assert_int_equal(http1_parse_response(head, strlen(head), sizeof(head), &rsp, &why),
                     (int)strlen(head));
    assert_int_equal(http1_write_upstream_response(&rsp, b, 0, NULL), 0); /* 98 + Via + Conn. */
    evbuffer_drain(b, evbuffer_get_length(b));
    assert_int_equal(http1_write_upstream_response(&rsp, b, 0, "Sun, 06 Nov 1994 08:49:37 GMT"),
                     HTTP1_TOO_MANY_FIELDS);
    assert_int_equal(evbuffer_get_length(b), 0);
    /* and no longer than asked */
    assert_int_equal(http1_write_upstream_response_max(&rsp, b, 0, NULL, strlen(head)),
                     HTTP1_TOO_BIG);
    assert_int_equal(evbuffer_get_length(b), 0);
    evbuffer_free(b);
}

static void test_hop_by_hop(void **state)
{
    (void)state;
    assert_true(http1_is_hop_by_hop("Connection", 10));
    assert_true(http1_is_hop_by_hop("proxy-AUTHORIZATION", 19));
    assert_true(http1_is_hop_by_hop("te", 2));
    assert_false(http1_is_hop_by_hop("tex", 3));
    assert_false(http1_is_hop_by_hop("Content-Length", 14));
    assert_false(http1_is_hop_by_hop("Proxy-Authorization", 18));
}

/* The names http1_field() tells apart, as the parsers and writers compared
 * each field's name with them before it did (strncasecmp() of the whole
 * name; "sluice-" as a prefix): the reference it is checked against. */
static const struct {
    const char *name;
    enum http_field field;
} field_names[] = {
    {"content-length", HTTP_FIELD_CONTENT_LENGTH},
    {"transfer-encoding", HTTP_FIELD_TRANSFER_ENCODING},
    {"host", HTTP_FIELD_HOST},
    {"expect", HTTP_FIELD_EXPECT},
    {"connection", HTTP_FIELD_CONNECTION},
    {"keep-alive", HTTP_FIELD_KEEP_ALIVE},
    {"proxy-connection", HTTP_FIELD_PROXY_CONNECTION},
    {"proxy-authorization", HTTP_FIELD_PROXY_AUTHORIZATION},
    {"proxy-authenticate", HTTP_FIELD_PROXY_AUTHENTICATE},
    {"proxy-authentication-info", HTTP_FIELD_PROXY_AUTHENTICATION_INFO},
    {"te", HTTP_FIELD_TE},
    {"trailer", HTTP_FIELD_TRAILER},
    {"upgrade", HTTP_FIELD_UPGRADE},
    {"proxy", HTTP_FIELD_PROXY},
    {"forwarded", HTTP_FIELD_FORWARDED},
    {"x-forwarded-host", HTTP_FIELD_HOST_ALIAS},
    {"x-host", HTTP_FIELD_HOST_ALIAS},
    {"x-original-host", HTTP_FIELD_HOST_ALIAS},
    {"x-forwarded-server", HTTP_FIELD_HOST_ALIAS},
    {"x-http-host-override", HTTP_FIELD_HOST_ALIAS},
};
#define NFIELD_NAMES (sizeof(field_names) / sizeof(field_names[0]))

static enum http_field field_ref(const char *name, size_t len)
{
    for (size_t i = 0; i < NFIELD_NAMES; i++)
        if (len == strlen(field_names[i].name) && strncasecmp(name, field_names[i].name, len) == 0)
            return field_names[i].field;
    if (len >= 7 && strncasecmp(name, "sluice-", 7) == 0)
        return HTTP_FIELD_SLUICE;
    return HTTP_FIELD_OTHER;
}

static bool hop_ref(enum http_field f)
{
    return f == HTTP_FIELD_CONNECTION || f == HTTP_FIELD_KEEP_ALIVE ||
           f == HTTP_FIELD_PROXY_CONNECTION || f == HTTP_FIELD_PROXY_AUTHORIZATION ||
           f == HTTP_FIELD_PROXY_AUTHENTICATE || f == HTTP_FIELD_PROXY_AUTHENTICATION_INFO ||
           f == HTTP_FIELD_TE || f == HTTP_FIELD_TRAILER || f == HTTP_FIELD_UPGRADE;
}

/* http1_field() and http1_is_hop_by_hop() of <name> (<len> bytes, copied
 * to a buffer of its own size, so that ASan sees a read past it) are what
 * the reference says. */
static void check_field(const char *name, size_t len)
{
    char *s = malloc(len ? len : 1);
    assert_non_null(s);
    memcpy(s, name, len);
    enum http_field want = field_ref(s, len), got = http1_field(s, len);
    if (got != want)
        fail_msg("http1_field(\"%.*s\") is %d, want %d", (int)len, name, (int)got, (int)want);
    if (http1_is_hop_by_hop(s, len) != hop_ref(want))
        fail_msg("http1_is_hop_by_hop(\"%.*s\") is wrong", (int)len, name);
    free(s);
}

/* Every name classified in every letter case (every mix for up to 16
 * letters, a 16-bit pattern repeated along the longer ones), and its near
 * misses as the reference classifies them: every byte replaced by each
 * of the 256, dropped, or with a byte inserted before it or at the end,
 * and every prefix. */
static void test_field_names(void **state)
{
    (void)state;
    static const char inserted[] = {'x', 'X', ' ', '\t', '-', '_', ':', '\0', 's', '\r'};
    char v[64];
    for (size_t i = 0; i < NFIELD_NAMES + 1; i++) {
        const char *name = i < NFIELD_NAMES ? field_names[i].name : "sluice-reason";
        size_t len = strlen(name);
        assert_true(len + 1 < sizeof(v));
        size_t letters = 0;
        for (size_t k = 0; k < len; k++)
            letters += name[k] >= 'a' && name[k] <= 'z';
        unsigned long variants = 1ul << (letters < 16 ? letters : 16);
        for (unsigned long m = 0; m < variants; m++) {
            size_t bit = 0;
            for (size_t k = 0; k < len; k++) {
                v[k] = name[k];
                if (name[k] >= 'a' && name[k] <= 'z' && ((m >> (bit++ % 16)) & 1u) != 0)
                    v[k] = (char)(name[k] - 32);
            }
            enum http_field want = i < NFIELD_NAMES ? field_names[i].field : HTTP_FIELD_SLUICE;
            if (http1_field(v, len) != want)
                fail_msg("\"%.*s\" not classified as %d", (int)len, v, (int)want);
            check_field(v, len);
        }
        for (size_t k = 0; k < len; k++) {
            memcpy(v, name, len);
            for (int c = 0; c < 256; c++) {
                v[k] = (char)c;
                check_field(v, len);
            }
            memcpy(v, name, k); /* without byte k */
            memcpy(v + k, name + k + 1, len - k - 1);
            check_field(v, len - 1);
            check_field(name, k);
        }
        for (size_t k = 0; k <= len; k++) {
            for (size_t c = 0; c < sizeof(inserted); c++) {
                memcpy(v, name, k);
                v[k] = inserted[c];
                memcpy(v + k + 1, name + k, len - k);
                check_field(v, len + 1);
            }
        }
    }
    /* Near misses by hand. */
    static const char *const near[] = {
        "Content-Lengthx",
        "Content-Length ",
        "Transfer-Encoding ",
        "Transfer_Encoding",
        "Content-Lengt",
        "Proxy-Authorizatio",
        "Proxy-",
        "Prox",
        "Sluice",
        "Sluice_Reason",
        "X-Sluice-Reason",
        "X-Forwarded-Hos",
        "Forwarde",
        "",
    };
    for (size_t i = 0; i < sizeof(near) / sizeof(near[0]); i++)
        if (http1_field(near[i], strlen(near[i])) != HTTP_FIELD_OTHER)
            fail_msg("\"%s\" classified", near[i]);
    assert_int_equal(http1_field("hostt", 4), HTTP_FIELD_HOST); /* only <len> bytes count */
    assert_int_equal(http1_field("Sluice-", 7), HTTP_FIELD_SLUICE);
    assert_int_equal(http1_field("SLUICE-REASON", 13), HTTP_FIELD_SLUICE);

    /* The parsers set it on each field, as sent. */
    ok_req("GET http://a.test/ HTTP/1.1\r\nhOST: a.test\r\nX-Hosts: 1\r\nTE: trailers\r\n"
           "Sluice-Reason: x\r\ncontent-length: 0\r\n\r\n");
    assert_int_equal(req.nheaders, 5);
    assert_int_equal(req.headers[0].field, HTTP_FIELD_HOST);
    assert_int_equal(req.headers[1].field, HTTP_FIELD_OTHER);
    assert_int_equal(req.headers[2].field, HTTP_FIELD_TE);
    assert_int_equal(req.headers[3].field, HTTP_FIELD_SLUICE);
    assert_int_equal(req.headers[4].field, HTTP_FIELD_CONTENT_LENGTH);
    const char *why;
    const char *s = "HTTP/1.1 200 OK\r\nTRANSFER-encoding: chunked\r\nConnectio: x\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_int_equal(rsp.headers[0].field, HTTP_FIELD_TRANSFER_ENCODING);
    assert_int_equal(rsp.headers[1].field, HTTP_FIELD_OTHER);
}

/* The fields the Connection fields name are dropped whatever their case
 * and position (past the 64th too), over several Connection fields, but
 * for the framing and Host. */
static void test_connection_names(void **state)
{
    (void)state;
    char in[8192], want[8192];
    size_t n = (size_t)snprintf(in, sizeof(in),
                                "POST http://a.test/x HTTP/1.1\r\nHost: a.test\r\n"
                                "Connection: x-a, ,X-LATE\r\nX-A: 1\r\nx-keep: 2\r\n"
                                "content-length: 1\r\n");
    size_t w = (size_t)snprintf(want, sizeof(want),
                                "POST /x HTTP/1.1\r\nHost: a.test\r\nx-keep: 2\r\n"
                                "content-length: 1\r\n");
    for (int i = 0; i < 70; i++) {
        n += (size_t)snprintf(in + n, sizeof(in) - n, "X-%d: %d\r\n", i, i);
        w += (size_t)snprintf(want + w, sizeof(want) - w, "X-%d: %d\r\n", i, i);
    }
    n += (size_t)snprintf(in + n, sizeof(in) - n,
                          "x-late: 3\r\nX-A: 4\r\ncONNECTION: X-69, host, Content-Length\r\n"
                          "X-Last: 5\r\n\r\n");
    w -= strlen("X-69: 69\r\n");
    w += (size_t)snprintf(want + w, sizeof(want) - w,
                          "X-Last: 5\r\nVia: 1.1 sluice\r\nConnection: close\r\n\r\n");
    assert_true(n < sizeof(in) - 1 && w < sizeof(want) - 1);
    ok_req(in);
    assert_int_equal(req.nheaders, 79);
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    assert_int_equal(http1_write_upstream_request(&req, b), 0);
    char *out = evbuffer_text(b);
    assert_string_equal(out, want);
    free(out);
    evbuffer_free(b);
}

static void test_responses(void **state)
{
    (void)state;
    const char *why;
    const char *s = "HTTP/1.1 200 OK Fine\r\nContent-Length: 12\r\nServer: x\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_int_equal(rsp.status, 200);
    assert_int_equal(rsp.version_minor, 1);
    assert_int_equal(rsp.reason_len, 7);
    assert_memory_equal(rsp.reason, "OK Fine", 7);
    assert_int_equal(rsp.content_length, 12);
    assert_false(rsp.conn_close);
    assert_int_equal(http1_response_body(&rsp, METHOD_GET), BODY_LENGTH);
    assert_int_equal(http1_response_body(&rsp, METHOD_HEAD), BODY_NONE);

    s = "HTTP/1.1 200\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_int_equal(rsp.reason_len, 0);
    assert_true(rsp.chunked);
    assert_true(rsp.other_coding);
    assert_int_equal(http1_response_body(&rsp, METHOD_GET), BODY_CHUNKED);

    s = "HTTP/1.1 200\r\nTransfer-Encoding: identity,\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_true(rsp.chunked);
    assert_false(rsp.other_coding);

    /* identity is skipped wherever it is, after chunked too (README) */
    s = "HTTP/1.1 200\r\nTransfer-Encoding: chunked, identity\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_true(rsp.chunked);
    assert_false(rsp.other_coding);
    assert_false(rsp.conn_close);
    s = "HTTP/1.1 200\r\nTransfer-Encoding: Chunked\r\nTransfer-Encoding: IDENTITY\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_true(rsp.chunked);
    s = "HTTP/1.1 200\r\nTransfer-Encoding: chunked, identity, gzip\r\n\r\n";
    assert_int_equal(prsp(s, &why), HTTP1_BAD);
    assert_string_equal(why, "chunked is not the final transfer coding");
    s = "HTTP/1.1 200\r\nTransfer-Encoding: chunked, identity;q=1\r\n\r\n";
    assert_int_equal(prsp(s, &why), HTTP1_BAD);
    assert_string_equal(why, "chunked is not the final transfer coding");

    s = "HTTP/1.1 200 \r\nTransfer-Encoding: chunked, gzip\r\n\r\n";
    assert_int_equal(prsp(s, &why), HTTP1_BAD);
    assert_string_equal(why, "chunked is not the final transfer coding");

    s = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_false(rsp.chunked);
    assert_true(rsp.other_coding);
    assert_true(rsp.conn_close);
    assert_int_equal(http1_response_body(&rsp, METHOD_GET), BODY_UNTIL_CLOSE);

    s = "HTTP/1.0 200 OK\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_true(rsp.conn_close);
    assert_int_equal(http1_response_body(&rsp, METHOD_GET), BODY_UNTIL_CLOSE);

    s = "HTTP/1.1 204 No Content\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_int_equal(http1_response_body(&rsp, METHOD_GET), BODY_NONE);
    s = "HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_int_equal(http1_response_body(&rsp, METHOD_GET), BODY_NONE);
    s = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n";
    assert_int_equal(prsp(s, &why), 25);
    assert_int_equal(rsp.status, 100);
    assert_int_equal(http1_response_body(&rsp, METHOD_GET), BODY_NONE);
    s = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_true(rsp.conn_close);
    assert_int_equal(http1_response_body(&rsp, METHOD_GET), BODY_NONE);

    /* Errors. */
    const char *bad[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
        "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked;x=1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: ;\r\n\r\n",
        "HTTP/1.1 200 OK\nContent-Length: 1\r\n\r\n",
        "HTTP/1.1 200 OK\r\n X: folded\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX : y\r\n\r\n",
        "HTTP/1.1 200 OK\x01\r\n\r\n",
        "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/1.1 099 OK\r\n\r\n",
        "HTTP/1.1 abc OK\r\n\r\n",
        "HTTP/2 200 OK\r\n\r\n",
        "HTTP/1.1  200 OK\r\n\r\n",
        "ICY 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nConnection: a b\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = prsp(bad[i], &why);
        if (rc != HTTP1_BAD)
            fail_msg("accepted (rc %d): %s", rc, bad[i]);
        assert_non_null(why);
    }
}

/* The head the gateway relays (keep-alive) for response head <s>, which
 * must parse; the caller frees it. */
static char *relayed_response(const char *s)
{
    const char *why;
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_int_equal(http1_write_upstream_response(&rsp, b, HTTP1_RSP_KEEP_ALIVE, NULL), 0);
    char *out = evbuffer_text(b);
    evbuffer_free(b);
    return out;
}

static void test_write_upstream_response(void **state)
{
    (void)state;
    const char *why;
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    const char *s = "HTTP/1.0 404 Not Here\r\nContent-Length: 3\r\nConnection: X-Internal\r\n"
                    "X-Internal: 1\r\nProxy-Authenticate: Basic\r\nKeep-Alive: timeout=5\r\n"
                    "Proxy-Authentication-Info: nextnonce=\"n\"\r\n"
                    "Set-Cookie: a=b\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_int_equal(http1_write_upstream_response(&rsp, b, HTTP1_RSP_KEEP_ALIVE, NULL), 0);
    char *out = evbuffer_text(b);
    assert_string_equal(out, "HTTP/1.1 404 Not Here\r\nContent-Length: 3\r\nSet-Cookie: a=b\r\n"
                             "Via: 1.0 sluice\r\nConnection: keep-alive\r\n\r\n");
    free(out);
    assert_int_equal(http1_write_upstream_response(&rsp, b, 0, NULL), 0);
    out = evbuffer_text(b);
    assert_string_equal(out, "HTTP/1.1 404 Not Here\r\nContent-Length: 3\r\nSet-Cookie: a=b\r\n"
                             "Via: 1.0 sluice\r\nConnection: close\r\n\r\n");
    free(out);

    s = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: Transfer-Encoding\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_int_equal(http1_write_upstream_response(&rsp, b, HTTP1_RSP_KEEP_ALIVE, NULL), 0);
    out = evbuffer_text(b);
    assert_string_equal(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                             "Via: 1.1 sluice\r\nConnection: keep-alive\r\n\r\n");
    free(out);

    /* For an HTTP/1.0 client: no Transfer-Encoding, whatever its case. */
    s = "HTTP/1.1 200 OK\r\nX-A: 1\r\ntransfer-ENCODING: chunked\r\nX-B: 2\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_int_equal(http1_write_upstream_response(&rsp, b, HTTP1_RSP_UNCHUNKED, NULL), 0);
    out = evbuffer_text(b);
    assert_string_equal(
        out, "HTTP/1.1 200 OK\r\nX-A: 1\r\nX-B: 2\r\nVia: 1.1 sluice\r\nConnection: close\r\n\r\n");
    free(out);

    /* The gateway's own fields never come from an origin. */
    s = "HTTP/1.1 403 Forbidden\r\nSluice-Reason: not_in_policy\r\nSLUICE-X: 1\r\n"
        "Sluice: 2\r\nContent-Length: 0\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_int_equal(http1_write_upstream_response(&rsp, b, 0, NULL), 0);
    out = evbuffer_text(b);
    assert_string_equal(out, "HTTP/1.1 403 Forbidden\r\nSluice: 2\r\nContent-Length: 0\r\n"
                             "Via: 1.1 sluice\r\nConnection: close\r\n\r\n");
    free(out);

    s = "HTTP/1.1 200 OK\r\nContent-Length: 00\r\nContent-Length: 0, 0\r\nX-B: 2\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_int_equal(http1_write_upstream_response(&rsp, b, 0, NULL), 0);
    out = evbuffer_text(b);
    assert_string_equal(out, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-B: 2\r\n"
                             "Via: 1.1 sluice\r\nConnection: close\r\n\r\n");
    free(out);

    s = "HTTP/1.1 100 Continue\r\n\r\n";
    assert_int_equal(prsp(s, &why), (int)strlen(s));
    assert_int_equal(http1_write_upstream_response(&rsp, b, HTTP1_RSP_KEEP_ALIVE, NULL), 0);
    out = evbuffer_text(b);
    assert_string_equal(out, "HTTP/1.1 100 Continue\r\nVia: 1.1 sluice\r\n\r\n");
    free(out);

    /* A 304 has no body: no framing field for a lenient client to read
     * the next answer by (a HEAD's answer, not known here, keeps them). */
    out = relayed_response("HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n"
                           "ETag: \"e\"\r\n\r\n");
    assert_string_equal(out, "HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\n"
                             "Via: 1.1 sluice\r\nConnection: keep-alive\r\n\r\n");
    free(out);
    evbuffer_free(b);
}

/* RFC 9110 7.6.3: the gateway's member goes on in Via, appended to the
 * last Via field relayed (the members before kept as they came), or in a
 * field of its own; with the protocol the message came in. */
static void test_write_via(void **state)
{
    (void)state;
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    expect_upstream(b,
                    "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n"
                    "Via: 1.0 fred, 1.1 p.example (Apache/1.1)\r\nX-A: 1\r\n\r\n",
                    "GET / HTTP/1.1\r\nHost: a.test\r\n"
                    "Via: 1.0 fred, 1.1 p.example (Apache/1.1), 1.1 sluice\r\nX-A: 1\r\n"
                    "Connection: close\r\n\r\n");
    /* Two fields: the member goes in the last, where the list ends; an
     * HTTP/1.0 request's member says 1.0. */
    expect_upstream(b,
                    "GET http://a.test/ HTTP/1.0\r\nvia:  1.1 a\r\nX-A: 1\r\nVIA: 1.1 b\t\r\n"
                    "X-B: 2\r\n\r\n",
                    "GET / HTTP/1.1\r\nHost: a.test\r\nvia: 1.1 a\r\nX-A: 1\r\n"
                    "VIA: 1.1 b, 1.0 sluice\r\nX-B: 2\r\nConnection: close\r\n\r\n");
    /* An empty Via holds the member alone, where it was. */
    expect_upstream(b, "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nVia:\r\nX-A: 1\r\n\r\n",
                    "GET / HTTP/1.1\r\nHost: a.test\r\nVia: 1.1 sluice\r\nX-A: 1\r\n"
                    "Connection: close\r\n\r\n");
    /* A Via named in Connection stays on its hop; the member goes on alone. */
    expect_upstream(b,
                    "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: via\r\n"
                    "Via: 1.1 x\r\nX-A: 1\r\n\r\n",
                    "GET / HTTP/1.1\r\nHost: a.test\r\nX-A: 1\r\nVia: 1.1 sluice\r\n"
                    "Connection: close\r\n\r\n");
    /* The same on a response, with the protocol it came in. */
    char *out = relayed_response("HTTP/1.0 200 OK\r\nVia: 1.1 o\r\nContent-Length: 0\r\n\r\n");
    assert_string_equal(out, "HTTP/1.1 200 OK\r\nVia: 1.1 o, 1.0 sluice\r\nContent-Length: 0\r\n"
                             "Connection: keep-alive\r\n\r\n");
    free(out);
    evbuffer_free(b);
}

/* A request whose Via names the gateway's pseudonym as a hop it went
 * through came back to a sluice gateway: via_loop. */
static void test_via_loop(void **state)
{
    (void)state;
    static const struct {
        const char *via;
        bool loop;
    } cases[] = {
        {"1.1 sluice", true},
        {"1.0 a, HTTP/1.1 SLUICE (comment)", true},
        {"1.1 a,1.1 b ,  1.0\tsluice", true},
        {"1.1 sluicer", false},
        {"1.1 a (sluice)", false},
        {"1.1 sluice:8080", false},
        {"sluice", false},
        {"", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char in[256];
        snprintf(in, sizeof(in), "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nVia: %s\r\n\r\n",
                 cases[i].via);
        ok_req(in);
        if (req.via_loop != cases[i].loop)
            fail_msg("via_loop %d for Via: %s", req.via_loop, cases[i].via);
    }
    /* in any of the fields */
    ok_req("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nVia: 1.1 sluice\r\nVia: 1.1 b\r\n\r\n");
    assert_true(req.via_loop);
    ok_req("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n");
    assert_false(req.via_loop);
}

/* RFC 9110 7.6.2: a TRACE's or OPTIONS's Max-Forwards is read (one field,
 * digits only, capped) and goes on counted down; another method's goes on
 * as it came, unread. */
static void test_max_forwards(void **state)
{
    (void)state;
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    expect_upstream(b, "TRACE http://a.test/ HTTP/1.1\r\nHost: a.test\r\nMax-Forwards: 3\r\n\r\n",
                    "TRACE / HTTP/1.1\r\nHost: a.test\r\nMax-Forwards: 2\r\nVia: 1.1 sluice\r\n"
                    "Connection: close\r\n\r\n");
    assert_int_equal(req.max_forwards, 3);
    /* written anew, where it was; a value past the cap counts down from it */
    expect_upstream(b,
                    "OPTIONS http://a.test/ HTTP/1.1\r\nHost: a.test\r\nmax-forwards:  0010\r\n"
                    "X-A: 1\r\n\r\n",
                    "OPTIONS / HTTP/1.1\r\nHost: a.test\r\nmax-forwards: 9\r\nX-A: 1\r\n"
                    "Via: 1.1 sluice\r\nConnection: close\r\n\r\n");
    expect_upstream(b,
                    "TRACE http://a.test/ HTTP/1.1\r\nHost: a.test\r\n"
                    "Max-Forwards: 99999999999999999999999\r\n\r\n",
                    "TRACE / HTTP/1.1\r\nHost: a.test\r\nMax-Forwards: 254\r\n"
                    "Via: 1.1 sluice\r\nConnection: close\r\n\r\n");
    ok_req("OPTIONS http://a.test/ HTTP/1.1\r\nHost: a.test\r\nMax-Forwards: 0\r\n\r\n");
    assert_int_equal(req.max_forwards, 0);
    /* another method's is not read: it goes on as it came */
    expect_upstream(b, "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nMax-Forwards: 0, x\r\n\r\n",
                    "GET / HTTP/1.1\r\nHost: a.test\r\nMax-Forwards: 0, x\r\nVia: 1.1 sluice\r\n"
                    "Connection: close\r\n\r\n");
    assert_int_equal(req.max_forwards, -1);
    ok_req("TRACE http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n");
    assert_int_equal(req.max_forwards, -1);
    BAD("TRACE http://a.test/ HTTP/1.1\r\nHost: a.test\r\nMax-Forwards: 1\r\n"
        "Max-Forwards: 1\r\n\r\n",
        "several Max-Forwards headers");
    BAD("OPTIONS http://a.test/ HTTP/1.1\r\nHost: a.test\r\nMax-Forwards: 1, 0\r\n\r\n",
        "invalid Max-Forwards");
    BAD("OPTIONS http://a.test/ HTTP/1.1\r\nHost: a.test\r\nMax-Forwards: -1\r\n\r\n",
        "invalid Max-Forwards");
    BAD("TRACE http://a.test/ HTTP/1.1\r\nHost: a.test\r\nMax-Forwards:\r\n\r\n",
        "invalid Max-Forwards");
    evbuffer_free(b);
}

/* RFC 9110 6.6.1: a response that came without a Date goes on with the
 * one given; one that came with a Date keeps it, alone. */
static void test_write_date(void **state)
{
    (void)state;
    const char *why;
    const char *d = "Sun, 06 Nov 1994 08:49:37 GMT";
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    static const char *const cases[][2] = {
        {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
         "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nVia: 1.1 sluice\r\n"
         "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\nConnection: close\r\n\r\n"},
        {"HTTP/1.1 200 OK\r\ndate: Mon, 07 Dec 2026 00:00:00 GMT\r\nContent-Length: 0\r\n\r\n",
         "HTTP/1.1 200 OK\r\ndate: Mon, 07 Dec 2026 00:00:00 GMT\r\nContent-Length: 0\r\n"
         "Via: 1.1 sluice\r\nConnection: close\r\n\r\n"},
        /* a Date the origin made hop-by-hop does not go on: one is added */
        {"HTTP/1.1 204 No Content\r\nConnection: Date\r\nDate: x\r\n\r\n",
         "HTTP/1.1 204 No Content\r\nVia: 1.1 sluice\r\n"
         "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\nConnection: close\r\n\r\n"},
        {"HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 100 Continue\r\nVia: 1.1 sluice\r\n"
                                          "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(prsp(cases[i][0], &why), (int)strlen(cases[i][0]));
        assert_int_equal(http1_write_upstream_response(&rsp, b, 0, d), 0);
        char *out = evbuffer_text(b);
        assert_string_equal(out, cases[i][1]);
        free(out);
    }
    /* Without a clock (NULL, or a date that could not be written): none. */
    const char *s = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    for (int i = 0; i < 2; i++) {
        assert_int_equal(prsp(s, &why), (int)strlen(s));
        assert_int_equal(http1_write_upstream_response(&rsp, b, 0, i == 0 ? NULL : ""), 0);
        char *out = evbuffer_text(b);
        assert_string_equal(out, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nVia: 1.1 sluice\r\n"
                                 "Connection: close\r\n\r\n");
        free(out);
    }
    evbuffer_free(b);
}

/* Transfer-Encoding goes on as one field however many codings it lists:
 * a list of 300 (in two fields, with empty elements and identity among
 * them) is written, not refused for want of room in the writer's pieces,
 * which the gateway took for running out of memory (502). */
static void test_write_response_many_codings(void **state)
{
    (void)state;
    const char *why;
    char s[4096], want[4096];
    size_t n = (size_t)snprintf(s, sizeof(s), "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip");
    size_t w = (size_t)snprintf(want, sizeof(want), "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip");
    for (int i = 1; i < 300; i++) {
        n += (size_t)snprintf(s + n, sizeof(s) - n, i % 50 == 0 ? ",, identity, br" : ", br");
        w += (size_t)snprintf(want + w, sizeof(want) - w, ", br");
    }
    n +=
        (size_t)snprintf(s + n, sizeof(s) - n, "\r\nX-A: 1\r\nTransfer-Encoding: ,chunked\r\n\r\n");
    w += (size_t)snprintf(
        want + w, sizeof(want) - w,
        ", chunked\r\nX-A: 1\r\nVia: 1.1 sluice\r\nConnection: keep-alive\r\n\r\n");
    assert_true(n < sizeof(s) - 1 && w < sizeof(want) - 1);
    assert_int_equal(prsp(s, &why), (int)n);
    assert_true(rsp.chunked);
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    assert_int_equal(http1_write_upstream_response(&rsp, b, HTTP1_RSP_KEEP_ALIVE, NULL), 0);
    char *out = evbuffer_text(b);
    assert_string_equal(out, want);
    free(out);
    evbuffer_free(b);
}

static int teardown(void **state)
{
    (void)state;
    free(copy);
    copy = NULL;
    return 0;
}

/* The Host header's split: host (brackets kept), then the port. */
static void test_split_host(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        const char *host;
        uint16_t port;
    } cases[] = {
        {"api.example.test", 0, "api.example.test", 0},
        {"api.example.test:8080", 0, "api.example.test", 8080},
        {"api.example.test:", 0, "api.example.test", 0},
        {"[::1]", 0, "[::1]", 0},
        {"[::1]:443", 0, "[::1]", 443},
        {"a:65535", 0, "a", 65535},
        {"a:65536", -1, NULL, 0},
        {"a:0", -1, NULL, 0},
        {"a:123456", -1, NULL, 0},
        {"a:8o", -1, NULL, 0},
        {"a:+80", -1, NULL, 0},
        {"[::1", -1, NULL, 0},
        {"[::1]x", -1, NULL, 0},
        {"[::1]:", 0, "[::1]", 0},
        {"", 0, "", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *h = NULL;
        size_t hlen = 0;
        uint16_t port = 7;
        int rc = http1_split_host(cases[i].in, strlen(cases[i].in), &h, &hlen, &port);
        if (rc != cases[i].rc)
            fail_msg("%s: rc %d", cases[i].in, rc);
        if (rc == 0 && (hlen != strlen(cases[i].host) || memcmp(h, cases[i].host, hlen) != 0 ||
                        port != cases[i].port))
            fail_msg("%s: host '%.*s' port %u", cases[i].in, (int)hlen, h, port);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_absolute_form),
        cmocka_unit_test(test_connect_and_other_forms),
        cmocka_unit_test(test_request_line_errors),
        cmocka_unit_test(test_target_errors),
        cmocka_unit_test(test_header_errors),
        cmocka_unit_test(test_value_bytes),
        cmocka_unit_test(test_smuggling),
        cmocka_unit_test(test_partial_and_limits),
        cmocka_unit_test(test_head_end_incremental),
        cmocka_unit_test(test_parse_scan),
        cmocka_unit_test(test_write_upstream_request),
        cmocka_unit_test(test_write_plain_lines),
        cmocka_unit_test(test_write_upstream_request_keep),
        cmocka_unit_test(test_write_no_more_fields_than_taken),
        cmocka_unit_test(test_hop_by_hop),
        cmocka_unit_test(test_field_names),
        cmocka_unit_test(test_connection_names),
        cmocka_unit_test(test_responses),
        cmocka_unit_test(test_write_upstream_response),
        cmocka_unit_test(test_write_response_many_codings),
        cmocka_unit_test(test_write_via),
        cmocka_unit_test(test_write_date),
        cmocka_unit_test(test_max_forwards),
        cmocka_unit_test(test_via_loop),
        cmocka_unit_test(test_split_host),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
