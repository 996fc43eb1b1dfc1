/* test_host: host-name normalisation, policy patterns and their matching. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "policy/host.h"

/* Normalises <in> and expects a name <want>. */
static void expect_name(const char *in, const char *want)
{
    struct host h;
    const char *why = NULL;
    if (host_normalise(in, strlen(in), &h, &why) != 0)
        fail_msg("\"%s\": refused (%s), want %s", in, why, want);
    if (h.kind != HOST_NAME || strcmp(h.name, want) != 0)
        fail_msg("\"%s\": kind %d \"%s\", want name \"%s\"", in, (int)h.kind, h.name, want);
}

/* Normalises <in> and expects an IP whose canonical text is <want>. */
static void expect_ip(const char *in, const char *want)
{
    struct host h;
    const char *why = NULL;
    char buf[IPADDR_STRLEN];
    if (host_normalise(in, strlen(in), &h, &why) != 0)
        fail_msg("\"%s\": refused (%s), want IP %s", in, why, want);
    if (h.kind != HOST_IP || strcmp(h.name, want) != 0)
        fail_msg("\"%s\": kind %d \"%s\", want IP %s", in, (int)h.kind, h.name, want);
    ipaddr_format(&h.ip, buf, sizeof(buf));
    assert_string_equal(buf, want);
}

/* Normalises <len> bytes of <in> and expects the refusal <want>. */
static void expect_error_n(const char *in, size_t len, const char *want)
{
    struct host h;
    const char *why = NULL;
    if (host_normalise(in, len, &h, &why) != -1)
        fail_msg("\"%.*s\": accepted as \"%s\", want error \"%s\"", (int)len, in, h.name, want);
    if (why == NULL || strcmp(why, want) != 0)
        fail_msg("\"%.*s\": error \"%s\", want \"%s\"", (int)len, in, why ? why : "(null)", want);
}

static void expect_error(const char *in, const char *want)
{
    expect_error_n(in, strlen(in), want);
}

static void test_names(void **state)
{
    (void)state;
    expect_name("api.github.com", "api.github.com");
    expect_name("ApI.GitHub.COM.", "api.github.com");
    expect_name("API.GITHUB.COM", "api.github.com");
    expect_name("api.github.com.", "api.github.com");
    expect_name("localhost", "localhost");
    expect_name("LOCALHOST.", "localhost");
    expect_name("_dmarc.example.com", "_dmarc.example.com");
    expect_name("a-b.c_d.example", "a-b.c_d.example");
    expect_name("1a.example.1b", "1a.example.1b");
    expect_name("123.example.com", "123.example.com");
    expect_name("0x7f.example.com", "0x7f.example.com");
    expect_name("xn--bcher-kva.example", "xn--bcher-kva.example");
    expect_name("XN--BCHER-KVA.Example", "xn--bcher-kva.example");
    /* Punycode whose basic code points are written in upper case ("API"
     * of "APIé"): the same DNS name as in lower case, not a mapped label */
    expect_name("xn--API-dma.example", "xn--api-dma.example");
    expect_name("a.XN--API-DMA.example", "a.xn--api-dma.example");
    expect_name("a--b.example", "a--b.example");
}

static void test_idna(void **state)
{
    (void)state;
    expect_name("bücher.example", "xn--bcher-kva.example");
    expect_name("BÜCHER.example.", "xn--bcher-kva.example");
    expect_name("faß.de", "xn--fa-hia.de");
    expect_name("a。b.example", "a.b.example");       /* ideographic full stop */
    expect_name("\xef\xbd\x81.example", "a.example"); /* full-width a */
    expect_name("_sip.bücher.example", "_sip.xn--bcher-kva.example");
    expect_name("💩.la", "xn--ls8h.la"); /* transitional fallback */
    expect_name("xn--ls8h.la", "xn--ls8h.la");
    /* Full-width digits map to an IP literal, which is what they spell. */
    expect_ip("１２７.０.０.１", "127.0.0.1");
    expect_error("１２７.０.０.２５６", "invalid IP literal");
    /* A full-width colon maps to ':', never allowed in a name. */
    expect_error("a：b.example", "character not allowed in a host name");
    expect_error("ｅｘａｍｐｌｅ．ｃｏｍ／ｘ", "character not allowed in a host name");

    expect_error("xn--zz.example", "invalid internationalised name");
    expect_error("xn--a.example", "invalid internationalised name");
    expect_error("xn--.example", "invalid internationalised name");
    expect_error("a.XN--ZZ", "invalid internationalised name");
    expect_error("-ü.example", "invalid internationalised name");
    expect_error("ab--ü.example", "invalid internationalised name");
    /* Broken UTF-8: a lone continuation byte, an overlong '/', a surrogate,
     * a truncated sequence, a code point above U+10FFFF. */
    expect_error("a\x80.example", "invalid internationalised name");
    expect_error("a\xc0\xaf.example", "invalid internationalised name");
    expect_error("a\xe0\x80\xaf.example", "invalid internationalised name");
    expect_error("a\xf0\x80\x80\xaf.example", "invalid internationalised name");
    expect_error("a\xed\xa0\x80.example", "invalid internationalised name");
    expect_error("a.exampl\xc3", "invalid internationalised name");
    expect_error("a.\xf4\x90\x80\x80", "invalid internationalised name");
    expect_error("a.\xff", "invalid internationalised name");
    expect_error("ü..example", "empty label");
}

static void test_ip_literals(void **state)
{
    (void)state;
    expect_ip("127.0.0.1", "127.0.0.1");
    expect_ip("127.0.0.1.", "127.0.0.1");
    expect_ip("127.1", "127.0.0.1");
    expect_ip("0x7f.1", "127.0.0.1");
    expect_ip("017700000001", "127.0.0.1");
    expect_ip("2130706433", "127.0.0.1");
    expect_ip("0x7F000001", "127.0.0.1");
    expect_ip("1.2.3", "1.2.0.3");
    expect_ip("[::1]", "::1");
    expect_ip("::1", "::1");
    expect_ip("[::ffff:7f00:1]", "127.0.0.1");
    expect_ip("::ffff:127.0.0.1", "127.0.0.1");
    expect_ip("[2001:DB8::1]", "2001:db8::1");

    struct host h;
    const char *why;
    assert_int_equal(host_normalise("[::ffff:7f00:1]", 15, &h, &why), 0);
    assert_true(ipaddr_is_v4(&h.ip));
    assert_int_equal(ipaddr_v4(&h.ip), 0x7f000001);

    expect_error("256.1.1.1", "invalid IP literal");
    expect_error("1.2.3.4.5", "invalid IP literal");
    expect_error("0x1g", "invalid IP literal");
    expect_error("4294967296", "invalid IP literal");
    expect_error("1..2.3", "invalid IP literal");
    expect_error("example.123", "invalid IP literal");
    expect_error("example.com.1", "invalid IP literal");
    expect_error("fe80::1%eth0", "invalid IP literal");
    expect_error("[fe80::1%25eth0]", "invalid IP literal");
    expect_error("[example.com]", "invalid IP literal");
    expect_error("[127.0.0.1]", "invalid IP literal");
    expect_error("example.com:443", "invalid IP literal");
    expect_error("[::1", "invalid IP literal");
}

static void test_errors(void **state)
{
    (void)state;
    struct host h;
    const char *why = NULL;

    expect_error("", "empty host");
    expect_error(".", "empty host");
    expect_error("..", "empty label");
    expect_error("a.com..", "empty label");
    expect_error(".a.com", "empty label");
    expect_error("a..com", "empty label");
    expect_error("-a.com", "label starts or ends with a hyphen");
    expect_error("a-.com", "label starts or ends with a hyphen");
    expect_error("a.com-", "label starts or ends with a hyphen");

    static const char *const bad_chars[] = {
        "a b.com",  " a.com",    "a.com ",    "a%2e.com", "user@a.com", "a.com/x",  "a\\b.com",
        "a.com#x",  "a*.com",    "a+b.com",   "a,b.com",  "a;b.com",    "a!b.com",  "a'b.com",
        "a\"b.com", "a(b).com",  "a<b>.com",  "a=b.com",  "a?b.com",    "a~b.com",  "a|b.com",
        "a{b}.com", "a^b.com",   "a`b.com",   "a$b.com",  "a&b.com",    "a\tb.com", "a\nb.com",
        "a\rb.com", "a\x7f.com", "a\x01.com", "ü b.com",
    };
    for (size_t i = 0; i < sizeof(bad_chars) / sizeof(bad_chars[0]); i++)
        expect_error(bad_chars[i], "character not allowed in a host name");
    expect_error_n("a\0b.com", 7, "character not allowed in a host name");
    expect_error_n("a.com\0", 6, "character not allowed in a host name");

    /* Labels of 63 bytes pass, 64 do not. */
    char buf[1100];
    memset(buf, 'a', 63);
    memcpy(buf + 63, ".com", 5);
    expect_name(buf, buf);
    memset(buf, 'a', 64);
    memcpy(buf + 64, ".com", 5);
    expect_error(buf, "label longer than 63 bytes");

    /* 253 bytes pass (with or without the trailing dot), 254 do not. */
    for (size_t i = 0; i < 253; i++)
        buf[i] = (i % 2) ? '.' : 'a';
    buf[253] = '\0';
    expect_name(buf, buf);
    assert_int_equal(host_normalise(buf, 253, &h, &why), 0);
    assert_int_equal(strlen(h.name), 253);
    buf[253] = '.';
    buf[254] = '\0';
    assert_int_equal(host_normalise(buf, 254, &h, &why), 0);
    assert_int_equal(strlen(h.name), 253);
    buf[253] = 'b'; /* "a.a. ... .a.ab": 254 bytes */
    buf[254] = '\0';
    expect_error(buf, "name longer than 253 bytes");
    buf[254] = '.';
    buf[255] = '\0';
    expect_error(buf, "name longer than 253 bytes");

    /* Far too long to look at at all. */
    memset(buf, 'a', sizeof(buf));
    expect_error_n(buf, sizeof(buf), "name longer than 253 bytes");

    /* A Unicode label that grows past 63 bytes once encoded. */
    char uni[200];
    size_t n = 0;
    memset(uni, 'a', 60);
    n = 60;
    memcpy(uni + n, "ü.example", 11);
    expect_error(uni, "invalid internationalised name");
    /* "a" x 50 + "ü" fits in one label once encoded. */
    memcpy(uni + 50, "ü.example", 11);
    struct host u;
    assert_int_equal(host_normalise(uni, strlen(uni), &u, &why), 0);
    assert_true(strlen(u.name) <= 63 + 8);

    /* Only <len> bytes are read: the rest may be anything. */
    assert_int_equal(host_normalise("api.github.com/evil", 14, &h, &why), 0);
    assert_string_equal(h.name, "api.github.com");
    assert_int_equal(h.kind, HOST_NAME);

    why = NULL;
    assert_int_equal(host_normalise(NULL, 0, &h, &why), -1);
    assert_string_equal(why, "empty host");
    assert_int_equal(host_normalise("x", 0, &h, NULL), -1);
}

static void test_same_host(void **state)
{
    (void)state;
    /* The spellings an agent uses to pass for another host stay distinct. */
    struct host a, b;
    const char *why;
    assert_int_equal(host_normalise("api.github.com", 14, &a, &why), 0);
    static const char *const others[] = {
        "api.github.com.evil.test", "evilapi.github.com", "api-github.com", "api.github.co",
        "api.github.com.com",       "api.githu.com",
    };
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        assert_int_equal(host_normalise(others[i], strlen(others[i]), &b, &why), 0);
        assert_string_not_equal(a.name, b.name);
    }
}

static void test_sent_names(void **state)
{
    (void)state;
    struct host t, ip;
    const char *why;
    assert_int_equal(host_normalise("api.example.com", 15, &t, &why), 0);
    assert_int_equal(host_normalise("127.0.0.1", 9, &ip, &why), 0);
    /* What a server takes for the target: its name in any case, one
     * trailing dot. */
    static const char *const same[] = {"api.example.com", "API.Example.COM", "api.example.com."};
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
        assert_true(host_sent_names(same[i], strlen(same[i]), &t, IP_SPELLING_CANONICAL));
    /* Spellings IDNA maps to it are other hosts to a server (it looks its
     * sites up by the bytes it got), and so are names that are not it. */
    static const char *const other[] = {
        "\xef\xbd\x81pi.example.com",  /* full-width a */
        "a\xc2\xadpi.example.com",     /* soft hyphen */
        "api\xe2\x80\x8b.example.com", /* zero-width space */
        "api.example.com.evil.test",   "api.example", "", "127.0.0.1",
    };
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        assert_false(host_sent_names(other[i], strlen(other[i]), &t, IP_SPELLING_CANONICAL));
    assert_true(host_sent_names("127.0.0.1", 9, &ip, IP_SPELLING_CANONICAL));
    assert_false(host_sent_names("api.example.com", 15, &ip, IP_SPELLING_CANONICAL));
    /* An IP target's own canonical text names it (host_sent_names() takes
     * it without a parse): it must parse back to the same address and text. */
    static const char *const ips[] = {
        "0.0.0.0",
        "255.255.255.255",
        "10.1.2.3",
        "::",
        "::1",
        "2001:db8::1",
        "[2001:DB8:0:0:1::1]",
        "::ffff:192.0.2.1",
        "1:2:3:4:5:6:7:8",
        "fe80::1:0:0:0",
        "::2:3:4:5:6:7:8",
        "1:0:0:2::3",
    };
    for (size_t i = 0; i < sizeof(ips) / sizeof(ips[0]); i++) {
        struct host a, b;
        assert_int_equal(host_normalise(ips[i], strlen(ips[i]), &a, &why), 0);
        assert_int_equal(a.kind, HOST_IP);
        assert_int_equal(host_normalise(a.name, strlen(a.name), &b, &why), 0);
        assert_int_equal(b.kind, HOST_IP);
        assert_string_equal(a.name, b.name);
        assert_true(host_sent_names(a.name, strlen(a.name), &a, IP_SPELLING_CANONICAL));
    }
    assert_false(host_sent_names("127.0.0.10", 10, &ip, IP_SPELLING_CANONICAL));
    assert_false(host_sent_names("127.0.0.", 8, &ip, IP_SPELLING_CANONICAL));
    /* Other spellings of the address: names to a server, refused where
     * the canonical spelling is asked for... */
    static const char *const ip_spellings[] = {
        "127.000.000.001", "0x7f.0.0.1", "2130706433", "0177.0.0.1", "127.1", "127.0.0.1.",
    };
    for (size_t i = 0; i < sizeof(ip_spellings) / sizeof(ip_spellings[0]); i++) {
        const char *sp = ip_spellings[i];
        assert_false(host_sent_names(sp, strlen(sp), &ip, IP_SPELLING_CANONICAL));
        /* ... taken where it is the request target's own spelling, in
         * any case, and not where the target was spelled otherwise */
        assert_true(host_sent_names(sp, strlen(sp), &ip, (struct ip_spelling){.as_written = sp}));
        char upper[32];
        size_t n = strlen(sp);
        for (size_t k = 0; k <= n; k++)
            upper[k] = (sp[k] >= 'a' && sp[k] <= 'z') ? (char)(sp[k] - 'a' + 'A') : sp[k];
        assert_true(host_sent_names(upper, n, &ip, (struct ip_spelling){.as_written = sp}));
        size_t count = sizeof(ip_spellings) / sizeof(ip_spellings[0]);
        const char *other_sp = ip_spellings[(i + 1) % count];
        assert_false(
            host_sent_names(sp, strlen(sp), &ip, (struct ip_spelling){.as_written = other_sp}));
        assert_false(host_sni_names(sp, strlen(sp), &ip));
    }
    assert_true(host_sent_names("127.0.0.1", 9, &ip, IP_SPELLING_CANONICAL));
    assert_true(host_sni_names("127.0.0.1", 9, &ip));
    struct host v6;
    assert_int_equal(host_normalise("[2001:DB8::1]", 13, &v6, &why), 0);
    static const char *const v6_same[] = {"2001:db8::1", "[2001:db8::1]", "[2001:DB8::1]"};
    for (size_t i = 0; i < sizeof(v6_same) / sizeof(v6_same[0]); i++)
        assert_true(host_sent_names(v6_same[i], strlen(v6_same[i]), &v6, IP_SPELLING_CANONICAL));
    static const char *const v6_other[] = {"[2001:db8:0::1]", "[2001:0db8::1]", "[2001:db8::1",
                                           "2001:db8::1]", "[[2001:db8::1]]"};
    for (size_t i = 0; i < sizeof(v6_other) / sizeof(v6_other[0]); i++)
        assert_false(host_sent_names(v6_other[i], strlen(v6_other[i]), &v6, IP_SPELLING_CANONICAL));
    /* A server_name holds no brackets; the bare text passes, names as ever. */
    assert_true(host_sni_names("2001:db8::1", 11, &v6));
    assert_false(host_sni_names("[2001:db8::1]", 13, &v6));
    assert_true(host_sni_names("API.example.com", 15, &t));
    assert_false(host_sni_names("127.0.0.1", 9, &t));
}

static void expect_pattern(const char *in, enum pattern_kind kind, const char *want)
{
    struct host_pattern p;
    const char *why = NULL;
    if (host_pattern_parse(in, &p, &why) != 0)
        fail_msg("pattern \"%s\": refused (%s)", in, why);
    if (p.kind != kind || strcmp(p.name, want) != 0)
        fail_msg("pattern \"%s\": kind %d \"%s\", want %d \"%s\"", in, (int)p.kind, p.name,
                 (int)kind, want);
}

static void expect_pattern_error(const char *in, const char *want)
{
    struct host_pattern p;
    const char *why = NULL;
    if (host_pattern_parse(in, &p, &why) != -1)
        fail_msg("pattern \"%s\": accepted as \"%s\", want \"%s\"", in, p.name, want);
    if (why == NULL || strcmp(why, want) != 0)
        fail_msg("pattern \"%s\": error \"%s\", want \"%s\"", in, why ? why : "(null)", want);
}

static void test_pattern_parse(void **state)
{
    (void)state;
    expect_pattern("registry.npmjs.org", PATTERN_EXACT, "registry.npmjs.org");
    expect_pattern("ApI.GitHub.COM.", PATTERN_EXACT, "api.github.com");
    expect_pattern("bücher.example", PATTERN_EXACT, "xn--bcher-kva.example");
    expect_pattern("localhost", PATTERN_EXACT, "localhost");
    expect_pattern("*.githubusercontent.com", PATTERN_WILDCARD, "githubusercontent.com");
    expect_pattern("*.github.io", PATTERN_WILDCARD, "github.io");
    expect_pattern("*.Example.COM.", PATTERN_WILDCARD, "example.com");
    expect_pattern("*.bücher.example", PATTERN_WILDCARD, "xn--bcher-kva.example");
    expect_pattern("*.city.kawasaki.jp", PATTERN_WILDCARD, "city.kawasaki.jp");

    static const char *const globs[] = {
        "api*.x.com", "a.*.com", "x.com.*", "**.x.com", "*a.x.com",
        "*.*.x.com",  "*x.com",  "x*",      "*.",       "*.x.*",
    };
    for (size_t i = 0; i < sizeof(globs) / sizeof(globs[0]); i++) {
        if (strcmp(globs[i], "*.") == 0)
            expect_pattern_error(globs[i], "empty host");
        else
            expect_pattern_error(
                globs[i], "'*' is allowed only as the whole first label, as in *.example.com");
    }
    expect_pattern_error("*", "'*' matches everything; name the hosts");

    static const char *const ips[] = {"127.0.0.1", "127.1",       "0x7f000001", "[::1]",
                                      "::1",       "*.127.0.0.1", "*.1.2.3"};
    for (size_t i = 0; i < sizeof(ips) / sizeof(ips[0]); i++)
        expect_pattern_error(ips[i], "IP literals belong in a cidr: rule");
    expect_pattern_error("256.0.0.1", "invalid IP literal");

    /* A URL or a name with its port, pasted in a hurry: said so, not
     * called an invalid IP literal. */
    static const char *const urls[] = {"https://api.github.com", "http://api.github.com:8080/x",
                                       "HTTPS://API.GITHUB.COM/", "https://*.github.com"};
    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++)
        expect_pattern_error(urls[i], "a host pattern is a name, not a URL: write the name "
                                      "alone, without scheme, port or path");
    static const char *const ported[] = {"api.github.com:443", "*.github.com:443",
                                         "api.github.com:https", "API.GitHub.com.:80"};
    for (size_t i = 0; i < sizeof(ported) / sizeof(ported[0]); i++)
        expect_pattern_error(ported[i], "a host pattern holds no port: write the name alone (a "
                                        "rule's ports go in ports:, and deny covers every port)");
    /* An IP literal's port is a port too; brackets around anything but
     * an IPv6 literal are said so, not called an invalid IP literal. */
    expect_pattern_error("[::1]:443", "a host pattern holds no port: write the name alone (a "
                                      "rule's ports go in ports:, and deny covers every port)");
    static const char *const bracketed[] = {
        "[a.com]", "[a.com]:443", "[*.a.com]", "[127.0.0.1]", "[127.0.0.1]:80", "[a.com", "[]"};
    for (size_t i = 0; i < sizeof(bracketed) / sizeof(bracketed[0]); i++)
        expect_pattern_error(bracketed[i], "brackets hold an IPv6 literal only, and a host "
                                           "pattern holds no port: write the name alone");
    expect_pattern_error("[fe80::1%25eth0]", "invalid IP literal"); /* an IPv6 attempt */

    static const char *const single[] = {"*.com",       "*.test", "*.internal",
                                         "*.localhost", "*.COM.", "*.xn--p1ai"};
    for (size_t i = 0; i < sizeof(single) / sizeof(single[0]); i++)
        expect_pattern_error(single[i], "a wildcard needs a suffix of two labels or more");

    static const char *const psl[] = {"*.co.uk", "*.com.au", "*.kawasaki.jp", "*.foo.kawasaki.jp",
                                      "*.x.bd",  "*.co.UK.", "*.公司.cn",     "*.xn--55qx5d.cn"};
    for (size_t i = 0; i < sizeof(psl) / sizeof(psl[0]); i++)
        expect_pattern_error(psl[i], "a wildcard over a public suffix matches other owners' hosts");

    expect_pattern_error("", "empty host");
    expect_pattern_error("a..com", "empty label");
    expect_pattern_error("*.a..com", "empty label");
    expect_pattern_error("a b.com", "character not allowed in a host name");
    expect_pattern_error("xn--zz.com", "invalid internationalised name");
    {
        /* Over 1024 bytes after "*.", which IDNA would shrink (each soft
         * hyphen, two bytes, maps to nothing): refused whole, as the same
         * name without "*." is, never read as its first 1023 bytes
         * ("*.example.com", the tail naming another domain dropped). */
        char longname[1200];
        size_t o = 0;
        memcpy(longname, "*.example.com", 13);
        o = 13;
        for (int i = 0; i < 510; i++) {
            longname[o++] = (char)0xc2;
            longname[o++] = (char)0xad;
        }
        memcpy(longname + o, ".attacker.test", 15);
        expect_pattern_error(longname, "name longer than 253 bytes");
        expect_pattern_error(longname + 2, "name longer than 253 bytes");
    }
    struct host_pattern p;
    const char *why = NULL;
    assert_int_equal(host_pattern_parse(NULL, &p, &why), -1);
    assert_string_equal(why, "empty host");
    assert_int_equal(host_pattern_parse("*", &p, NULL), -1);
}

static bool over_private(const char *pattern)
{
    struct host_pattern p;
    const char *why;
    assert_int_equal(host_pattern_parse(pattern, &p, &why), 0);
    return host_pattern_over_private_suffix(&p);
}

/* Wildcards directly over a suffix of the list's private section, which
 * anyone registers names under, are told apart; the parse lets them pass. */
static void test_pattern_over_private_suffix(void **state)
{
    (void)state;
    static const char *const over[] = {
        "*.workers.dev", "*.GitHub.IO.", "*.s3.amazonaws.com",
        "*.x.compute.amazonaws.com", /* below the list's "*.compute.amazonaws.com" */
    };
    for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++)
        if (!over_private(over[i]))
            fail_msg("\"%s\" is not told over a private suffix", over[i]);
    static const char *const not_over[] = {
        "*.my-app.workers.dev", "workers.dev",   "my-app.workers.dev",
        "*.github.com",         "*.example.com", "*.city.kawasaki.jp",
    };
    for (size_t i = 0; i < sizeof(not_over) / sizeof(not_over[0]); i++)
        if (over_private(not_over[i]))
            fail_msg("\"%s\" is told over a private suffix", not_over[i]);
    assert_false(host_pattern_over_private_suffix(NULL));
}

static bool matches(const char *pattern, const char *name)
{
    struct host_pattern p;
    const char *why;
    assert_int_equal(host_pattern_parse(pattern, &p, &why), 0);
    return host_pattern_matches(&p, name);
}

static void test_pattern_matches(void **state)
{
    (void)state;
    assert_true(matches("api.github.com", "api.github.com"));
    assert_true(matches("API.github.com.", "api.github.com"));
    assert_false(matches("api.github.com", "api.github.com.evil.test"));
    assert_false(matches("api.github.com", "evilapi.github.com"));
    assert_false(matches("api.github.com", "api-github.com"));
    assert_false(matches("api.github.com", "x.api.github.com"));
    assert_false(matches("api.github.com", "github.com"));
    assert_false(matches("api.github.com", ""));

    assert_true(matches("*.example.com", "a.example.com"));
    assert_true(matches("*.example.com", "a.b.example.com"));
    assert_false(matches("*.example.com", "example.com"));
    assert_false(matches("*.example.com", "badexample.com"));
    assert_false(matches("*.example.com", "example.com.evil.test"));
    assert_false(matches("*.example.com", ".example.com"));
    assert_false(matches("*.example.com", "a.example.co"));
    assert_false(matches("*.example.com", "xexample.com"));
    assert_false(matches("*.example.com", ""));
    assert_true(matches("*.githubusercontent.com", "raw.githubusercontent.com"));

    struct host_pattern p;
    const char *why;
    assert_int_equal(host_pattern_parse("*.example.com", &p, &why), 0);
    assert_false(host_pattern_matches(&p, NULL));
    assert_false(host_pattern_matches(NULL, "a.example.com"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_idna),
        cmocka_unit_test(test_ip_literals),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_same_host),
        cmocka_unit_test(test_pattern_parse),
        cmocka_unit_test(test_pattern_matches),
        cmocka_unit_test(test_sent_names),
        cmocka_unit_test(test_pattern_over_private_suffix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
