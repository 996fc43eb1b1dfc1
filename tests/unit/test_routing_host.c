/* Unit tests for gate/routing_host.c: the Host value check shared by Host
 * and the forwarding fields, and the reading of those fields (lists,
 * Forwarded's pairs and quoted values) from heads parsed by http1.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gate/routing_host.h"

#define MAX_HEAD 32768
#define PORT     8080

static struct host target;

static void set_target(const char *name)
{
    const char *why;
    assert_int_equal(host_normalise(name, strlen(name), &target, &why), 0);
}

/* routing_fields_name() of "GET http://a.test:8080/ HTTP/1.1" with the
 * extra header lines <hdrs>, a value without a port naming <default_port>. */
static enum routing_host_result fields(const char *hdrs, uint16_t default_port)
{
    static char head[2048];
    static struct http_request req;
    const char *why = NULL;
    int n = snprintf(head, sizeof(head),
                     "GET http://a.test:8080/ HTTP/1.1\r\nHost: a.test:8080\r\n%s\r\n", hdrs);
    assert_true(n > 0 && (size_t)n < sizeof(head));
    int rc = http1_parse_request(head, (size_t)n, MAX_HEAD, &req, &why);
    if (rc <= 0)
        fail_msg("%s: parse %d (%s)", hdrs, rc, why ? why : "");
    why = NULL;
    enum routing_host_result r =
        routing_fields_name(&req, &target, PORT, default_port, IP_SPELLING_CANONICAL, &why);
    if (r != ROUTING_HOST_MATCH && why == NULL)
        fail_msg("%s: no reason given", hdrs);
    return r;
}

/* fields() of each of the <n> header blocks <hdrs> is <want>. */
static void expect_all(const char *const *hdrs, size_t n, enum routing_host_result want)
{
    for (size_t i = 0; i < n; i++)
        if (fields(hdrs[i], 80) != want)
            fail_msg("not %d: %s", (int)want, hdrs[i]);
}

/* A value of <hdrs> without a port names the default port: another port
 * than the target's by default (80), the target's when it is the default. */
static void without_port_names_the_default(const char *hdrs)
{
    assert_int_equal(fields(hdrs, 80), ROUTING_HOST_OTHER_PORT);
    assert_int_equal(fields(hdrs, PORT), ROUTING_HOST_MATCH);
}

static enum routing_host_result names(const char *v, uint16_t default_port)
{
    return routing_host_names(v, strlen(v), &target, PORT, default_port, IP_SPELLING_CANONICAL);
}

static void test_host_value(void **state)
{
    (void)state;
    set_target("a.test");
    assert_int_equal(names("a.test:8080", 80), ROUTING_HOST_MATCH);
    assert_int_equal(names("A.Test.:8080", 80), ROUTING_HOST_MATCH);
    assert_int_equal(names("a.test", 8080), ROUTING_HOST_MATCH);
    assert_int_equal(names("a.test:", 8080), ROUTING_HOST_MATCH);
    assert_int_equal(names("a.test", 80), ROUTING_HOST_OTHER_PORT);
    assert_int_equal(names("a.test:80", 8080), ROUTING_HOST_OTHER_PORT);
    assert_int_equal(names("b.test:8080", 80), ROUTING_HOST_OTHER_HOST);
    assert_int_equal(names("a.test.b.test:8080", 80), ROUTING_HOST_OTHER_HOST);
    assert_int_equal(names("", 80), ROUTING_HOST_OTHER_HOST);
    assert_int_equal(names("a.test:99999", 80), ROUTING_HOST_OTHER_HOST);
    assert_int_equal(names("\xef\xbd\x81.test:8080", 80), ROUTING_HOST_OTHER_HOST);
    set_target("::1");
    assert_int_equal(names("[::1]:8080", 80), ROUTING_HOST_MATCH);
    assert_int_equal(names("[::2]:8080", 80), ROUTING_HOST_OTHER_HOST);
    assert_int_equal(names("[::1", 80), ROUTING_HOST_OTHER_HOST);
}

static void test_host_alias_fields(void **state)
{
    (void)state;
    set_target("a.test");
    assert_int_equal(fields("", 80), ROUTING_HOST_MATCH);
    assert_int_equal(fields("X-Forwarded-For: b.test\r\nX-Forwarded-Proto: http\r\n", 80),
                     ROUTING_HOST_MATCH);
    assert_int_equal(fields("X-Forwarded-Host: a.test:8080\r\n", 80), ROUTING_HOST_MATCH);
    assert_int_equal(fields("x-forwarded-host: a.test:8080 , ,A.TEST:8080\r\n", 80),
                     ROUTING_HOST_MATCH);
    assert_int_equal(fields("X-Forwarded-Host:\r\n", 80), ROUTING_HOST_MATCH);
    /* any element, any of the fields, in any case */
    static const char *const other[] = {
        "X-Forwarded-Host: b.test:8080\r\n",
        "X-Forwarded-Host: a.test:8080, b.test:8080\r\n",
        "X-Forwarded-Host: b.test:8080, a.test:8080\r\n",
        "X-Forwarded-Host: a.test:8080\r\nX-Forwarded-Host: b.test:8080\r\n",
        "X-HOST: b.test:8080\r\n",
        "X-Original-Host: b.test:8080\r\n",
        "X-Forwarded-Server: b.test:8080\r\n",
        "X-HTTP-Host-Override: b.test:8080\r\n",
        "X-Forwarded-Host: a.test:8080;b.test\r\n",
    };
    expect_all(other, sizeof(other) / sizeof(other[0]), ROUTING_HOST_OTHER_HOST);
    without_port_names_the_default("X-Forwarded-Host: a.test\r\n");
}

static void test_forwarded(void **state)
{
    (void)state;
    set_target("a.test");
    static const char *const match[] = {
        "Forwarded: for=192.0.2.1\r\n",
        "Forwarded: host=a.test:8080\r\n",
        "Forwarded: HOST=\"a.test:8080\"\r\n",
        "Forwarded: for=192.0.2.1;host=a.test:8080;proto=http, for=unknown\r\n",
        "Forwarded: for=\"[2001:db8::1]:4711\";by=_hidden\r\n",
        "Forwarded: ;;for=x,,\r\n",
        "Forwarded: for=x ; host = a.test:8080 , by=y\r\n",
        "Forwarded:\r\n",
    };
    expect_all(match, sizeof(match) / sizeof(match[0]), ROUTING_HOST_MATCH);
    static const char *const other[] = {
        "Forwarded: host=b.test:8080\r\n",
        "Forwarded: host=\"b.test:8080\"\r\n",
        "Forwarded: for=x, host=b.test:8080\r\n",
        "Forwarded: host=a.test:8080;host=b.test:8080\r\n",
        "Forwarded: host=a.test:8080\r\nForwarded: host=b.test:8080\r\n",
        "Forwarded: host=\r\n",
        "Forwarded: host=\"\"\r\n",
        /* unreadable: parsers differ on it, one may find another host */
        "Forwarded: host\r\n",
        "Forwarded: =a.test\r\n",
        "Forwarded: for=\"x\r\n",
        "Forwarded: for=\"x,host=b.test\";host=a.test:8080\r\n",
        "Forwarded: for=\"x;host=b.test\"\r\n",
        "Forwarded: for=\"x\\\"y\"\r\n",
        "Forwarded: for=\"x\"y\r\n",
        "Forwarded: for=x y\r\n",
        "Forwarded: f@r=x\r\n",
    };
    expect_all(other, sizeof(other) / sizeof(other[0]), ROUTING_HOST_OTHER_HOST);
    without_port_names_the_default("Forwarded: host=a.test\r\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_value),
        cmocka_unit_test(test_host_alias_fields),
        cmocka_unit_test(test_forwarded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
