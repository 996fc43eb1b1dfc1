/* test_listen_addr: the one parser of --listen and --admin values
 * (util/listen_addr.h), and the words each option says a value's fault
 * with. Names are looked up by a resolver of the test's (no DNS, no
 * /etc/hosts): "gate.test" is 127.0.0.9, "v6.test" ::1, "huge.test" an
 * address too large to hold; any other name is unknown; a bracketed
 * literal is read as the real one reads it (listen_addr_resolve_literal()). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>

#include "util/listen_addr.h"

static unsigned lookups; /* names the resolver was asked */

static int fake_resolver(const char *host, uint16_t port, bool v6_literal,
                         struct sockaddr_storage *ss, socklen_t *sslen)
{
    memset(ss, 0, sizeof(*ss));
    if (v6_literal)
        return listen_addr_resolve_literal(host, port, true, ss, sslen);
    lookups++;
    struct sockaddr_in *in = (struct sockaddr_in *)(void *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)ss;
    if (inet_pton(AF_INET, host, &in->sin_addr) == 1 || strcmp(host, "gate.test") == 0) {
        if (strcmp(host, "gate.test") == 0)
            in->sin_addr.s_addr = htonl(0x7f000009);
        in->sin_family = AF_INET;
        in->sin_port = htons(port);
        *sslen = sizeof(*in);
        return 0;
    }
    if (strcmp(host, "v6.test") == 0) {
        in6->sin6_family = AF_INET6;
        in6->sin6_addr = in6addr_loopback;
        in6->sin6_port = htons(port);
        *sslen = sizeof(*in6);
        return 0;
    }
    return strcmp(host, "huge.test") == 0 ? -2 : -1;
}

static int setup(void **state)
{
    (void)state;
    listen_addr_set_resolver(fake_resolver);
    lookups = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    listen_addr_set_resolver(NULL);
    return 0;
}

/* <s> taken by --listen, or by --admin when <admin>; its text <text>. */
static struct listen_addr taken(const char *s, bool admin, const char *text)
{
    struct listen_addr a;
    const char *why = "unset";
    int rc = admin ? listen_addr_parse_admin(s, &a, &why) : listen_addr_parse(s, &a, &why);
    if (rc != 0)
        fail_msg("%s refused '%s': %s", admin ? "--admin" : "--listen", s, why);
    assert_string_equal(a.text, text);
    return a;
}

/* <s> refused by --listen with <lwhy> and by --admin with <awhy>. */
static void refused(const char *s, const char *lwhy, const char *awhy)
{
    struct listen_addr a;
    const char *why = NULL;
    if (listen_addr_parse(s, &a, &why) == 0)
        fail_msg("--listen took '%s'", s);
    if (strcmp(why, lwhy) != 0)
        fail_msg("--listen '%s': '%s', not '%s'", s, why, lwhy);
    why = NULL;
    if (listen_addr_parse_admin(s, &a, &why) == 0)
        fail_msg("--admin took '%s'", s);
    if (strcmp(why, awhy) != 0)
        fail_msg("--admin '%s': '%s', not '%s'", s, why, awhy);
}

#define EXPECTED LISTEN_ADDR_ADMIN_EXPECTED
#define BAD_PORT "invalid port"

static void bracketed_v6_with_and_without_port(void **state)
{
    (void)state;
    struct listen_addr a = taken("[::1]:8080", false, "[::1]:8080");
    assert_int_equal(a.kind, LISTEN_TCP);
    assert_int_equal(a.ss.ss_family, AF_INET6);
    assert_int_equal(a.sslen, sizeof(struct sockaddr_in6));
    assert_string_equal(a.host, "::1");
    taken("[::1]:8080", true, "[::1]:8080");
    taken("[::FFFF:127.0.0.1]:80", true, "[::ffff:127.0.0.1]:80");
    refused("[::1]", "expected [V6]:PORT", EXPECTED);
    refused("[::1]:", BAD_PORT, EXPECTED);
    refused("[::1]8080", "expected [V6]:PORT", EXPECTED);
    refused("[::1", "expected [V6]:PORT", EXPECTED);
    refused("[]:80", "invalid IPv6 address", EXPECTED);
    refused("[127.0.0.1]:80", "cannot resolve listen address", EXPECTED);
    refused("[gate.test]:80", "cannot resolve listen address", EXPECTED);
    refused("::1:80", "expected HOST:PORT (IPv6 needs brackets)", EXPECTED);
    assert_int_equal(lookups, 0); /* a bracket holds a literal: no name asked */
}

static void zone_ids(void **state)
{
    (void)state;
    unsigned lo = if_nametoindex("lo");
    assert_true(lo != 0);
    char index_form[32];
    snprintf(index_form, sizeof(index_form), "[fe80::1%%%u]:80", lo);
    const char *const forms[] = {"[fe80::1%lo]:80", index_form};
    for (size_t i = 0; i < 2; i++)
        for (int admin = 0; admin < 2; admin++) {
            struct listen_addr a = taken(forms[i], admin, "[fe80::1]:80");
            assert_int_equal(((struct sockaddr_in6 *)(void *)&a.ss)->sin6_scope_id, lo);
        }
    refused("[fe80::1%no-such-if]:80", "cannot resolve listen address", EXPECTED);
    refused("[fe80::1%]:80", "cannot resolve listen address", EXPECTED);
}

static void names(void **state)
{
    (void)state;
    struct listen_addr a = taken("gate.test:3128", false, "127.0.0.9:3128");
    assert_string_equal(a.host, "gate.test"); /* for self_request by name */
    a = taken("gate.test:9128", true, "127.0.0.9:9128");
    assert_string_equal(a.host, "gate.test");
    taken("v6.test:1", false, "[::1]:1");
    assert_int_equal(lookups, 3); /* once each */
    refused("nowhere.test:80", "cannot resolve listen address", "cannot resolve the host name");
    refused("huge.test:80", "unsupported address", "unsupported address");
    /* a DNS name may be 253 bytes; past LISTEN_ADDR_TEXT, refused unread */
    char host[LISTEN_ADDR_TEXT + 8];
    memset(host, 'a', LISTEN_ADDR_TEXT - 1);
    memcpy(host + LISTEN_ADDR_TEXT - 1, ":80", 4);
    refused(host, "cannot resolve listen address", "cannot resolve the host name");
    memset(host, 'a', LISTEN_ADDR_TEXT);
    memcpy(host + LISTEN_ADDR_TEXT, ":80", 4);
    lookups = 0;
    refused(host, "expected HOST:PORT (IPv6 needs brackets)", EXPECTED);
    assert_int_equal(lookups, 0);
}

static void numeric_ports(void **state)
{
    (void)state;
    taken("127.0.0.1:0003128", false, "127.0.0.1:3128");
    taken("127.0.0.1:65535", false, "127.0.0.1:65535");
    taken("127.0.0.1:0", false, "127.0.0.1:0"); /* the kernel picks one */
    char zeros[300];
    snprintf(zeros, sizeof(zeros), "127.0.0.1:%0250d", 80);
    taken(zeros, false, "127.0.0.1:80");
    taken(zeros, true, "127.0.0.1:80");
    refused("127.0.0.1:+80", BAD_PORT, EXPECTED);
    refused("127.0.0.1:-1", BAD_PORT, EXPECTED);
    refused("127.0.0.1: 80", BAD_PORT, EXPECTED);
    refused("127.0.0.1:65536", BAD_PORT, EXPECTED);
    refused("127.0.0.1:18446744073709551616", BAD_PORT, EXPECTED); /* past ULONG_MAX */
    refused("127.0.0.1:0x50", BAD_PORT, EXPECTED);
    refused("127.0.0.1:", BAD_PORT, EXPECTED);
    /* --admin refuses port 0 in every spelling: it would be told nowhere */
    const char *const zero[] = {"0", ":0", "127.0.0.1:0", "[::1]:0", "127.0.0.1:000"};
    for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++) {
        struct listen_addr a;
        const char *why = NULL;
        assert_int_equal(listen_addr_parse_admin(zero[i], &a, &why), -1);
        assert_string_equal(why, "port 0 is not allowed: name the port to serve on");
    }
}

static void empty_host(void **state)
{
    (void)state;
    /* --listen wants a HOST; --admin reads a bare port as 127.0.0.1's */
    const char *const bare[] = {"9128", ":9128", "09128"};
    for (size_t i = 0; i < sizeof(bare) / sizeof(bare[0]); i++) {
        struct listen_addr a = taken(bare[i], true, "127.0.0.1:9128");
        assert_string_equal(a.host, "127.0.0.1");
        struct listen_addr l;
        const char *why = NULL;
        assert_int_equal(listen_addr_parse(bare[i], &l, &why), -1);
        assert_string_equal(why, "expected HOST:PORT, [V6]:PORT or unix:/path");
    }
    refused("", "expected HOST:PORT, [V6]:PORT or unix:/path", EXPECTED);
    refused(":", "expected HOST:PORT, [V6]:PORT or unix:/path", EXPECTED);
    refused("abc", "expected HOST:PORT, [V6]:PORT or unix:/path", EXPECTED);
    refused(" 9128", "expected HOST:PORT, [V6]:PORT or unix:/path", EXPECTED);
}

static void unix_paths(void **state)
{
    (void)state;
    char s[5 + 108 + 1];
    memcpy(s, "unix:/", 6);
    memset(s + 6, 'p', 106); /* a path of 107 bytes: sun_path holds it and its NUL */
    s[5 + 107] = '\0';
    for (int admin = 0; admin < 2; admin++) {
        struct listen_addr a = taken(s, admin, s);
        assert_int_equal(a.kind, LISTEN_UNIX);
        const struct sockaddr_un *un = (const struct sockaddr_un *)(const void *)&a.ss;
        assert_string_equal(un->sun_path, s + 5);
        assert_int_equal(a.sslen, offsetof(struct sockaddr_un, sun_path) + 108);
    }
    s[5 + 107] = 'p'; /* 108 bytes: no room for the NUL */
    s[5 + 108] = '\0';
    refused(s, "unix socket path too long", "unix socket path too long");
    refused("unix:", "unix socket path must be absolute", "unix socket path must be absolute");
    refused("unix:run/s.sock", "unix socket path must be absolute",
            "unix socket path must be absolute");
    refused("UNIX:/tmp/s", BAD_PORT, EXPECTED); /* HOST "UNIX", PORT "/tmp/s" */
}

static void control_bytes(void **state)
{
    (void)state;
    /* a unix path is the operator's, bytes and all; its text shows them
     * \ooo, so that it cannot write a line of its own into standard error */
    struct listen_addr a =
        taken("unix:/tmp/a\nb\033[2Kc\\", false, "unix:/tmp/a\\012b\\033[2Kc\\134");
    assert_string_equal(((struct sockaddr_un *)(void *)&a.ss)->sun_path, "/tmp/a\nb\033[2Kc\\");
    listen_addr_name(&a, "--listen", "unix:/tmp/a\nb");
    assert_string_equal(a.named, "--listen unix:/tmp/a\\012b");
    assert_string_equal(listen_addr_given(&a), "unix:/tmp/a\\012b");
    refused("gate.test\n:80", "cannot resolve listen address", "cannot resolve the host name");
    refused("127.0.0.1:80\n", BAD_PORT, EXPECTED);
    refused("127.0.0.1:\t80", BAD_PORT, EXPECTED);
    refused(":\t9128", "expected HOST:PORT, [V6]:PORT or unix:/path", EXPECTED);
    refused("[::1\n]:80", "cannot resolve listen address", EXPECTED);
}

static void trailing_garbage(void **state)
{
    (void)state;
    refused("127.0.0.1:80x", BAD_PORT, EXPECTED);
    refused("127.0.0.1:80 ", BAD_PORT, EXPECTED);
    refused("127.0.0.1:80:", "expected HOST:PORT (IPv6 needs brackets)", EXPECTED);
    refused("[::1]:80]", BAD_PORT, EXPECTED);
    refused("[::1]x:80", "expected [V6]:PORT", EXPECTED);
    refused("127.0.0.1:80/", BAD_PORT, EXPECTED);
}

/* An address no option named is named by its text. */
static void given_falls_back_to_text(void **state)
{
    (void)state;
    struct listen_addr a = taken("127.0.0.1:3128", false, "127.0.0.1:3128");
    assert_string_equal(a.named, "");
    assert_string_equal(listen_addr_given(&a), "127.0.0.1:3128");
    listen_addr_name(&a, "--admin", "0127.0.0.1:3128");
    assert_string_equal(listen_addr_given(&a), "0127.0.0.1:3128");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(bracketed_v6_with_and_without_port, setup, teardown),
        cmocka_unit_test_setup_teardown(zone_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(names, setup, teardown),
        cmocka_unit_test_setup_teardown(numeric_ports, setup, teardown),
        cmocka_unit_test_setup_teardown(empty_host, setup, teardown),
        cmocka_unit_test_setup_teardown(unix_paths, setup, teardown),
        cmocka_unit_test_setup_teardown(control_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(trailing_garbage, setup, teardown),
        cmocka_unit_test_setup_teardown(given_falls_back_to_text, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
