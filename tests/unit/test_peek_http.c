/* Unit tests for gate/peek_http.c: what counts as an HTTP/1.x request at
 * the start of a tunnel, the Host and target checks, every prefix of a
 * head, and the max_head bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gate/peek_http.h"

#define PORT     8080
#define MAX_HEAD 4096

static struct host target;

static int setup(void **state)
{
    const char *why;
    (void)state;
    return host_normalise("api.example.test", 16, &target, &why);
}

/* Judges an exact-size copy of <s> (<n> bytes) against the target. */
static enum peek_http_result judge_n(const char *s, size_t n, size_t max_head, const char **why)
{
    char *b = malloc(n ? n : 1);
    assert_non_null(b);
    memcpy(b, s, n);
    *why = NULL;
    enum peek_http_result r = peek_http_judge(b, n, max_head, &target, PORT, why);
    free(b);
    if (r == PEEK_HTTP_MISMATCH)
        assert_non_null(*why);
    return r;
}

static enum peek_http_result judge(const char *s)
{
    const char *why;
    return judge_n(s, strlen(s), MAX_HEAD, &why);
}

/* Every strict prefix of <s> is NEED_MORE or <s>'s own result. */
static void prefixes_agree(const char *s, enum peek_http_result full)
{
    size_t n = strlen(s);
    const char *why;
    bool decided = false;
    for (size_t k = 0; k < n; k++) {
        enum peek_http_result r = judge_n(s, k, MAX_HEAD, &why);
        if (decided)
            assert_int_equal(r, full);
        else if (r != PEEK_HTTP_NEED_MORE) {
            assert_int_equal(r, full);
            decided = true;
        }
    }
}

/* Feeds the <n> bytes of <s> to one peek_http_resume() scan in pieces of
 * <piece> bytes (the last one shorter), each time in a new exact-size copy
 * of all the bytes so far (the buffer moves as an evbuffer's pullup may
 * move it): at every step the result, and a MISMATCH's reason, are what
 * peek_http_judge() says of the same bytes in one go, a decided result
 * included (every longer input keeps it). Returns the bytes the scan
 * looked at over all the calls. */
static size_t pieces_agree(const char *s, size_t n, size_t piece, size_t max_head)
{
    struct peek_http_scan scan = {0};
    size_t k = 0;
    do {
        k = n - k < piece ? n : k + piece;
        const char *why_once = NULL, *why = NULL;
        enum peek_http_result once = judge_n(s, k, max_head, &why_once);
        char *b = malloc(k ? k : 1);
        assert_non_null(b);
        memcpy(b, s, k);
        enum peek_http_result r = peek_http_resume(&scan, b, k, max_head, &target, PORT, &why);
        free(b);
        if (r != once)
            fail_msg("pieces of %zu, %zu bytes of \"%.*s\": %d, in one go %d", piece, k, (int)n, s,
                     (int)r, (int)once);
        if (r == PEEK_HTTP_MISMATCH)
            assert_string_equal(why, why_once);
    } while (k < n);
    return scan.looked;
}

/* pieces_agree() with every piece size from 1 to the whole input. */
static void all_pieces_agree(const char *s, size_t n, size_t max_head)
{
    for (size_t piece = 1; piece <= (n ? n : 1); piece++)
        pieces_agree(s, n, piece, max_head);
}

static void check(const char *s, enum peek_http_result want)
{
    enum peek_http_result r = judge(s);
    if (r != want)
        fail_msg("%d instead of %d for \"%s\"", (int)r, (int)want, s);
    prefixes_agree(s, want);
    all_pieces_agree(s, strlen(s), MAX_HEAD);
}

/* A PROXY protocol header (v1 line, v2 signature) hides what follows it
 * from the check, from a server that takes one: MISMATCH; a prefix of one
 * waits; near misses are judged as before. */
static void test_proxy_protocol_header(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "PROXY TCP4 192.0.2.1 198.51.100.1 40000 80\r\nGET / HTTP/1.1\r\n"
        "Host: api.example.test\r\n\r\n",
        "PROXY TCP6 2001:db8::1 2001:db8::2 40000 443\r\n\x16\x03\x01",
        "PROXY UNKNOWN\r\nGET / HTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        check(bad[i], PEEK_HTTP_MISMATCH);
    const char v2[] = "\r\n\r\n\0\r\nQUIT\n\x21\x11\0\x0c"
                      "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n";
    const char *why;
    assert_int_equal(judge_n(v2, sizeof(v2) - 1, MAX_HEAD, &why), PEEK_HTTP_MISMATCH);
    assert_string_equal(why, "a PROXY protocol header");
    for (size_t k = 0; k < 12; k++)
        assert_int_equal(judge_n(v2, k, MAX_HEAD, &why), PEEK_HTTP_NEED_MORE);
    all_pieces_agree(v2, sizeof(v2) - 1, MAX_HEAD);
    check("PROXY / HTTP/1.1\r\nHost: api.example.test\r\n\r\n", PEEK_HTTP_MATCH);
    check("PROXY TCP5 192.0.2.1\r\n", PEEK_HTTP_NOT_HTTP);
    check(" PROXY TCP4 192.0.2.1\r\n", PEEK_HTTP_NOT_HTTP);
    const char near[] = "\r\n\r\n\0\r\nQUIX\n";
    assert_int_equal(judge_n(near, sizeof(near) - 1, MAX_HEAD, &why), PEEK_HTTP_NOT_HTTP);
    all_pieces_agree(near, sizeof(near) - 1, MAX_HEAD);
}

static void test_matching_hosts(void **state)
{
    (void)state;
    static const char *const ok[] = {
        "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.test:8080\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: API.Example.TEST\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.test.\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.test.:8080\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.test:\r\n\r\n",
        "GET / HTTP/1.1\r\nhost:   api.example.test  \r\n\r\n",
        "POST /x?y HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 3\r\n\r\nabc",
        "GET http://api.example.test/ HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "GET http://api.example.test:8080/x HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "GET http://API.example.test./ HTTP/1.0\r\n\r\n",
        /* HTTP/0.9 with an absolute-form target naming the target */
        "GET http://api.example.test/\r\n\r\n",
        "GET http://API.example.test.:8080/x?y  \r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "CONNECT api.example.test:8080 HTTP/1.1\r\nHost: api.example.test:8080\r\n\r\n",
        "GET / HTTP/1.0\r\n\r\n",
        "GET / HTTP/1.0\r\nAccept: */*\r\n\r\n",
        "\r\n\r\nGET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "\nGET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "BREW /pot HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        /* HTTP/0.9 lines whose head is complete: as HTTP/1.0 heads */
        "GET /\r\n\r\n",
        "GET /\r\nHost: api.example.test\r\n\r\n",
        "GET /x?y\r\nHost: API.example.test:8080\r\nAccept: */*\r\n\r\n",
        "GET http://api.example.test/\r\nHost: api.example.test\r\n\r\n",
        "GET /http://evil.example.test/\r\n\r\n",
        /* a CONNECT line without a version (Node.js's server takes it for a
         * CONNECT, header fields and all): as the HTTP/1.0 head */
        "CONNECT api.example.test:8080\r\n\r\n",
        "CONNECT API.example.test.:8080 \r\nHost: api.example.test:8080\r\n\r\n",
        /* what follows the first head is not looked at */
        "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\nGET / HTTP/1.1\r\nHost: evil\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        check(ok[i], PEEK_HTTP_MATCH);
}

static void test_mismatching_hosts(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "GET / HTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
        "GET / HTTP/1.0\r\nHost: evil.example.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.test:80\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.test\r\nHost: evil.example.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.test\r\nhost: api.example.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.test, evil.example.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: evil@api.example.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.test.evil.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: \r\n\r\n",
        "GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.test:99999\r\n\r\n",
        "GET http://evil.example.test/ HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "GET http://evil.example.test/ HTTP/1.0\r\n\r\n",
        "GET http://api.example.test:80/ HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "GET http://api.example.test/ HTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
        "GET https://api.example.test/ HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "CONNECT evil.example.test:443 HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        /* HTTP/0.9 with an absolute-form target: nginx picks the
         * site by its host */
        "GET http://evil.example.test/\r\n",
        "GET http://evil.example.test \r\n",
        "GET http://evil.example.test?x\n",
        "GET HTTPS://evil.example.test/\r\n",
        "GET ws://evil.example.test/\r\n",
        "GET http://api.example.test:80/\r\n",
        "GET http://api.example.test@evil.example.test/\r\n",
        "GET http:///\r\n",
        "GET\thttp://evil.example.test/\t\r\n",
        "GET http://evil.example.test/ more words\r\n", /* nginx < 1.21.1: spaces in it */
        /* HTTP/0.9 lines with header fields: Node.js's llhttp parses them
         * after the line, and its server picks the site by that Host */
        "GET /\r\nHost: evil.example.test\r\n\r\n",
        "GET /x\r\nHost: evil.example.test\r\n\r\n",
        "POST /x\r\nHost: evil.example.test\r\nContent-Length: 3\r\n\r\nabc",
        "OPTIONS *\r\nHost: evil.example.test\r\n\r\n",
        "GET http://api.example.test/\r\nHost: evil.example.test\r\n\r\n",
        "GET /\r\nHost: api.example.test:80\r\n\r\n",
        "GET /\r\nHost: api.example.test\r\nHost: evil.example.test\r\n\r\n",
        "GET /\nHost: evil.example.test\r\n\r\n", /* llhttp takes the bare LF there */
        /* a CONNECT line without a version: Node.js's server emits
         * 'connect' for it, and its documented forward proxy connects to
         * the host and port it names (port 80 when there is none) */
        "CONNECT evil.example.test:443\r\n\r\n",
        "CONNECT evil.example.test:8080\r\nHost: api.example.test:8080\r\n\r\n",
        "CONNECT api.example.test:443\r\n\r\n",
        "CONNECT api.example.test\r\n\r\n",
        "CONNECT evil.example.test\r\n\r\n",
        "CONNECT x@api.example.test:8080\r\n\r\n",
        "CONNECT api.example.test:8080\r\nHost: evil.example.test\r\n\r\n",
        "CONNECT api.example.test:8080\r\nContent-Length: 1\r\n\r\nx",
        "CONNECT evil.example.test:443\n\n",
        "CONNECT /\r\n\r\n",
        /* "CONNECT" and spaces alone: llhttp takes an empty target, and
         * Node.js's server emits 'connect' with the header fields behind
         * it (a proxy then has their Host alone to go by) */
        "CONNECT \r\nHost: evil.example.test\r\n\r\n",
        "CONNECT  \r\nX-Forwarded-Host: evil.example.test\r\n\r\n",
        "\r\nCONNECT \r\nHost: evil.example.test:80\r\n\r\n",
        "CONNECT \r\n\r\n",
        "CONNECT\t\r\n",
        "CONNECT\r\n",
        /* "GET" and any one word: Python's http.server takes it for an
         * HTTP/0.9 GET, reads the header fields behind it, and serves it
         * with their Host */
        "GET http\r\nHost: evil.example.test\r\n\r\n",
        "GET user:1000\r\nHost: evil.example.test\r\n\r\n",
        "GET api.example.test\r\nHost: evil.example.test\r\n\r\n",
        "GET user:1000\r\n\r\n",
        "GET  /\r\nHost: evil.example.test\r\n\r\n",
        "\t\r\n\r\nGET /\r\nHost: api.example.test\r\n\r\n",
        /* control bytes other than NUL: nginx before 1.21.1 takes them in a
         * request target, and picks the site by Host */
        "GET /\x01 HTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
        "GET /\x1b[0m HTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
        "GET /\x7f HTTP/1.0\r\nHost: evil.example.test\r\n\r\n",
        "GET /\x01 HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        /* spellings IDNA maps to the target: another host to a server */
        "GET / HTTP/1.1\r\nHost: \xef\xbd\x81pi.example.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\xc2\xadpi.example.test\r\n\r\n",
        "GET / HTTP/1.0\r\nHost: api.example.test\xe3\x80\x82\r\n\r\n",
        "GET http://\xef\xbd\x81pi.example.test/\r\n",
        "GET / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n",
        "\r\nGET / HTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
        "get / HTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
        "M-SEARCH * HTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
        "GET\t/\tHTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "GET  /  HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "GET / HTTP/1.1 \r\nHost: api.example.test\r\n\r\n",
        "GET / HTTP/1.1\nHost: api.example.test\n\n",
        "GET / HTTP/1.1\r\nHost: api.example.test\n\r\n",
        "GET / HTTP/1.1\r\nHost: evil.example.test\r\nX: a\r\n b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost : api.example.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 1\r\n"
        "Transfer-Encoding: chunked\r\n\r\n",
        /* versions that cannot be checked */
        "GET / HTTP/1.2\r\nHost: evil.example.test\r\n\r\n",
        "GET / HTTP/1.10\r\nHost: api.example.test\r\n\r\n",
        "GET / http/1.1\r\nHost: api.example.test\r\n\r\n",
        "GET / HTTP/2\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "GET / HTTP/\r\n",
        "GET HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "EHLO client HTTP/x.y\r\n",
        /* RTSP and ICE versions: Node.js's llhttp serves them as HTTP/1.x
         * requests (GET, POST, OPTIONS with RTSP/; SOURCE with ICE/) and
         * its server picks the site by that Host */
        "GET / RTSP/1.0\r\nHost: evil.example.test\r\n\r\n",
        "OPTIONS * RTSP/2.0\r\nHost: evil.example.test\r\n\r\n",
        "SOURCE / ICE/1.0\r\nHost: evil.example.test\r\n\r\n",
        /* a bare CR after the version: Node.js's llhttp, lenient
         * (insecureHTTPParser), ends the request line there and serves
         * the header fields behind it */
        "GET / HTTP/1.1\rHost: evil.example.test\r\n\r\n",
        "GET / HTTP/1.1\r\rHost: evil.example.test\r\n\r\n",
        "GET / HTTP/1.1 \rHost: api.example.test\r\n\r\n",
        "GET / RTSP/1.0\rHost: evil.example.test\r\n\r\n",
        "SOURCE / ICE/1.0\rHost: evil.example.test\r\n\r\n",
        "GET\r/\rHTTP/1.1\rHost: evil.example.test\r\n\r\n",
        /* whitespace to Python's str.split() (http.server splits the
         * request line with it, the line decoded as Latin-1) */
        "GET\x1c/\x1cHTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
        "GET\x85/\xa0HTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
        "\x1f\xa0GET / HTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
        "GET\x1d/\r\nHost: evil.example.test\r\n\r\n",
        /* and CR, which str.split() takes as whitespace too (the line is
         * read up to its LF) */
        "GET\r/\rHTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
        "GET\r/\r\nHost: evil.example.test\r\n\r\n",
        /* leading whitespace is skipped, and the head then refused */
        " GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
        "\t\r\n GET / HTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        check(bad[i], PEEK_HTTP_MISMATCH);
}

static void test_not_http(void **state)
{
    (void)state;
    static const char *const other[] = {
        "SSH-2.0-OpenSSH_9.6\r\n",
        "SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n",
        "PING\r\n",
        "SET key HTTP\r\n",
        "HELO client.example.test\r\n",
        "SAY hello http://evil.example.test/\r\n",
        "GET\r\n",
        "A \x7fHTTP/1.1\r\n",
        "GET/ HTTP/1.1\r\n",
        "GET:/ HTTP/1.1\r\n",
        "\x01\x02\x03",
        "\xff\xfe binary",
        " \x01GET / HTTP/1.1\r\n",
        "(GET / HTTP/1.1\r\n",
        /* two words, the second no request target: a method other than
         * CONNECT (in its case: llhttp's) and GET (Python's) */
        "SET user:1000\r\n",
        "get user:1000\r\n",
        "connect evil.example.test:443\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        check(other[i], PEEK_HTTP_NOT_HTTP);
    /* A NUL in the line: Python's http.server takes it in a request target
     * (and picks the site by Host), so the line is judged by its last word
     * as any other is; a NUL first byte is no method. */
    const char nul[] = "GET /\0 HTTP/1.1\r\nHost: evil.example.test\r\n\r\n";
    const char nul09[] = "GET /\0\r\nHost: evil.example.test\r\n\r\n";
    const char nul_text[] = "A \0binary\r\n";
    const char *why;
    assert_int_equal(judge_n(nul, sizeof(nul) - 1, MAX_HEAD, &why), PEEK_HTTP_MISMATCH);
    assert_int_equal(judge_n(nul09, sizeof(nul09) - 1, MAX_HEAD, &why), PEEK_HTTP_MISMATCH);
    assert_int_equal(judge_n(nul_text, sizeof(nul_text) - 1, MAX_HEAD, &why), PEEK_HTTP_NOT_HTTP);
    assert_int_equal(judge_n("A \0", 3, MAX_HEAD, &why), PEEK_HTTP_NEED_MORE);
    assert_int_equal(judge_n("\0GET", 4, MAX_HEAD, &why), PEEK_HTTP_NOT_HTTP);
    all_pieces_agree(nul, sizeof(nul) - 1, MAX_HEAD);
    all_pieces_agree(nul09, sizeof(nul09) - 1, MAX_HEAD);
    all_pieces_agree(nul_text, sizeof(nul_text) - 1, MAX_HEAD);
    all_pieces_agree("\0GET", 4, MAX_HEAD);
    /* TLS record headers are control bytes: never HTTP. */
    assert_int_equal(judge_n("\x16\x03\x01\x00\x05", 5, MAX_HEAD, &why), PEEK_HTTP_NOT_HTTP);
}

static void test_incomplete(void **state)
{
    (void)state;
    static const char *const part[] = {
        "",
        "G",
        "GET",
        "\r\n",
        "\r\n\r\nGE",
        " \t",
        "GET ",
        "GET / HTTP/1.1",
        "GET / HTTP/1.1\r",
        "GET / HTTP/1.1\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.test\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r",
        "SSH-2.0-OpenSSH_9.6p1 Ubuntu",
        /* an HTTP/0.9 line: header fields may follow until the empty line */
        "GET /\r\n",
        "GET /x\r\nHost: api.example.test\r\n",
        "GET http://api.example.test/\r\n",
        "CONNECT evil.example.test:443\r\n",
        "CONNECT api.example.test:8080\r\nHost: api.example.test\r\n",
        "GET user:1000\r\n", /* a Redis inline command too: refused once the window ends */
        /* a control byte other than NUL: the line's last word will tell */
        "GET /\x01",
        "A \x02\x03\x7f",
    };
    for (size_t i = 0; i < sizeof(part) / sizeof(part[0]); i++) {
        assert_int_equal(judge(part[i]), PEEK_HTTP_NEED_MORE);
        all_pieces_agree(part[i], strlen(part[i]), MAX_HEAD);
    }
}

static void test_max_head(void **state)
{
    (void)state;
    const char *why;
    const char *h = "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n";
    size_t n = strlen(h);
    /* The head fits exactly; one byte less and it does not. */
    assert_int_equal(judge_n(h, n, n, &why), PEEK_HTTP_MATCH);
    assert_int_equal(judge_n(h, n, n - 1, &why), PEEK_HTTP_MISMATCH);
    assert_int_equal(judge_n(h, n - 1, n - 1, &why), PEEK_HTTP_MISMATCH);
    assert_int_equal(judge_n(h, n - 2, n - 1, &why), PEEK_HTTP_NEED_MORE);
    /* A request line, or a token, still going at max_head. */
    char big[200];
    memset(big, 'A', sizeof(big));
    assert_int_equal(judge_n(big, sizeof(big), sizeof(big), &why), PEEK_HTTP_MISMATCH);
    assert_int_equal(judge_n(big, sizeof(big) - 1, sizeof(big), &why), PEEK_HTTP_NEED_MORE);
    memcpy(big, "GET /", 5);
    assert_int_equal(judge_n(big, sizeof(big), 100, &why), PEEK_HTTP_MISMATCH);
    /* Empty lines up to max_head. */
    memset(big, '\n', sizeof(big));
    assert_int_equal(judge_n(big, sizeof(big), sizeof(big), &why), PEEK_HTTP_MISMATCH);
    /* What lies past max_head is not looked at. */
    assert_int_equal(judge_n("GET / \x01", 7, 6, &why), PEEK_HTTP_MISMATCH);

    /* In pieces, the bound reached at every step of the head and line. */
    for (size_t m = 0; m <= n + 1; m++)
        all_pieces_agree(h, n, m);
    memset(big, 'A', sizeof(big));
    memcpy(big, "GET /", 5);
    for (size_t m = 0; m <= sizeof(big); m += 7)
        all_pieces_agree(big, sizeof(big), m);
    memset(big, '\n', sizeof(big));
    all_pieces_agree(big, sizeof(big), sizeof(big));
    all_pieces_agree(big, sizeof(big), sizeof(big) / 2);
}

/* Bytes looked at when <s> (<n> bytes) arrives a byte at a time and each
 * prefix is judged from its first byte, as the gateway did at every read,
 * until the result is decided. */
static size_t looked_from_scratch(const char *s, size_t n, size_t max_head)
{
    size_t looked = 0;
    for (size_t k = 1; k <= n; k++) {
        struct peek_http_scan scan = {0};
        const char *why;
        enum peek_http_result r = peek_http_resume(&scan, s, k, max_head, &target, PORT, &why);
        looked += scan.looked;
        if (r != PEEK_HTTP_NEED_MORE)
            break;
    }
    return looked;
}

/* A head that comes a byte at a time is looked at a few times in all (the
 * first line scanned, then classified; the head searched for its end, then
 * parsed), not once per byte: each read looks at the new byte alone. */
static void test_trickled_head_is_looked_at_once(void **state)
{
    (void)state;
    enum { LEN = 4000 };
    static char in[LEN];
    static const struct {
        const char *start; /* then <fill> up to LEN */
        char fill;
        bool ends; /* the last 4 bytes end the head */
        size_t max_head;
    } inputs[] = {
        {"GET / HTTP/1.1\r\nHost: api.example.test\r\nX-Pad: ", 'a', true, LEN},  /* MATCH */
        {"GET / HTTP/1.1\r\nHost: evil.example.test\r\nX-Pad: ", 'a', true, LEN}, /* MISMATCH */
        {"GET / HTTP/1.1\r\nHost: api.example.test\r\nX-Pad: ", 'a', false, LEN}, /* too large */
        {"GET /", 'a', false, LEN - 1}, /* a request line still going at max_head */
        {"", '\n', false, LEN - 1},     /* empty lines up to max_head */
    };
    for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
        memset(in, inputs[i].fill, LEN);
        memcpy(in, inputs[i].start, strlen(inputs[i].start));
        if (inputs[i].ends)
            memcpy(in + LEN - 4, "\r\n\r\n", 4);
        size_t looked = pieces_agree(in, LEN, 1, inputs[i].max_head);
        size_t scratch = looked_from_scratch(in, LEN, inputs[i].max_head);
        print_message("input %zu, %d bytes a byte at a time: %zu bytes looked at, %zu when "
                      "each read judges all from the first byte\n",
                      i, LEN, looked, scratch);
        assert_true(looked <= 4 * (size_t)LEN);
        assert_true(scratch > 500 * looked);
    }
}

static void test_ip_target(void **state)
{
    (void)state;
    struct host ip;
    const char *why;
    assert_int_equal(host_normalise("127.0.0.2", 9, &ip, &why), 0);
    const char *ok = "GET / HTTP/1.1\r\nHost: 127.0.0.2:80\r\n\r\n";
    const char *v6 = "GET / HTTP/1.1\r\nHost: [::ffff:127.0.0.2]\r\n\r\n";
    const char *bad = "GET / HTTP/1.1\r\nHost: 127.0.0.3\r\n\r\n";
    assert_int_equal(peek_http_judge(ok, strlen(ok), MAX_HEAD, &ip, 80, &why), PEEK_HTTP_MATCH);
    assert_int_equal(peek_http_judge(bad, strlen(bad), MAX_HEAD, &ip, 80, &why),
                     PEEK_HTTP_MISMATCH);
    enum peek_http_result r = peek_http_judge(v6, strlen(v6), MAX_HEAD, &ip, 80, &why);
    assert_true(r == PEEK_HTTP_MATCH || r == PEEK_HTTP_MISMATCH);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matching_hosts),
        cmocka_unit_test(test_mismatching_hosts),
        cmocka_unit_test(test_not_http),
        cmocka_unit_test(test_incomplete),
        cmocka_unit_test(test_max_head),
        cmocka_unit_test(test_proxy_protocol_header),
        cmocka_unit_test(test_ip_target),
        cmocka_unit_test(test_trickled_head_is_looked_at_once),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
