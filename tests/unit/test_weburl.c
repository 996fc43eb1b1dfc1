/* Unit tests for util/weburl.c: webhook URLs as the loader and the sink
 * parse them (http and https, default ports, what is refused) and the
 * label that shows a sink without the secrets it may carry (a
 * user:password@, a token in the path or the query). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "util/weburl.h"

static void assert_span(const char *p, size_t n, const char *want)
{
    assert_int_equal(n, strlen(want));
    assert_memory_equal(p, want, n);
}

static void parses_http_and_https(void **state)
{
    (void)state;
    struct weburl u;
    const char *why = NULL;
    assert_int_equal(weburl_parse("https://hooks.example.test/services/T0/B0/xyz", &u, &why), 0);
    assert_true(u.https);
    assert_span(u.host, u.host_len, "hooks.example.test");
    assert_span(u.hostport, u.hostport_len, "hooks.example.test");
    assert_span(u.target, u.target_len, "/services/T0/B0/xyz");
    assert_int_equal(u.port, 443);

    assert_int_equal(weburl_parse("http://127.0.0.1:9000/hook?a=1#frag", &u, &why), 0);
    assert_false(u.https);
    assert_span(u.hostport, u.hostport_len, "127.0.0.1:9000");
    assert_span(u.target, u.target_len, "/hook?a=1");
    assert_int_equal(u.port, 9000);

    assert_int_equal(weburl_parse("https://[::1]:8443", &u, &why), 0);
    assert_span(u.host, u.host_len, "::1");
    assert_span(u.hostport, u.hostport_len, "[::1]:8443");
    assert_int_equal(u.target_len, 0);
    assert_int_equal(u.port, 8443);

    assert_int_equal(weburl_parse("http://example.test?x=1", &u, &why), 0);
    assert_int_equal(u.port, 80);
    assert_span(u.target, u.target_len, "?x=1");
    assert_int_equal(weburl_parse("http://example.test:65535/", &u, &why), 0);
    assert_int_equal(u.port, 65535);
}

static void refuses(void **state)
{
    (void)state;
    static const struct {
        const char *url, *why;
    } bad[] = {
        {"ftp://example.test/", "not an http:// or https:// URL"},
        {"httpss://example.test/", "not an http:// or https:// URL"},
        {"HTTPS://example.test/", "not an http:// or https:// URL"},
        {"https://", "bad host"},
        {"https://:443/", "bad host"},
        {"https://[]/", "bad host"},
        {"https://[::1]x/", "bad host"},
        {"https://user:secret@example.test/", WEBURL_NO_USERINFO},
        {"https://user@example.test", WEBURL_NO_USERINFO},
        {"https://@example.test/", WEBURL_NO_USERINFO},
        {"https://a:b@[::1]:8443/", WEBURL_NO_USERINFO},
        {"https://a:b@c@example.test/", WEBURL_NO_USERINFO},
        {"https://example.test:0/", "bad port"},
        {"https://example.test:65536/", "bad port"},
        {"https://example.test:/", "bad port"},
        {"https://example.test:+80/", "bad port"},
        {"https://example.test:-1/", "bad port"},
        {"https://example.test:8x0/", "bad port"},
        {"https://example.test:000080/", "bad port"},
        {"https://example.test:1:2/", "bad port"},
        {"https://[::1/", "unterminated [IPv6] host"},
        /* IP spellings that libevent's resolver reads otherwise than the C
         * library and URL parsers (0127 is octal 87 to them, decimal 127 to
         * evutil_inet_pton; 127.1 and 0x7f.1 would be asked of DNS) */
        {"http://0127.0.0.1:9000/", WEBURL_BAD_IPV4},
        {"http://127.1/", WEBURL_BAD_IPV4},
        {"http://2130706433/", WEBURL_BAD_IPV4},
        {"http://0x7f.0.0.1/", WEBURL_BAD_IPV4},
        {"http://127.0.0.1./", WEBURL_BAD_IPV4},
        {"http://127.0.0.08/", WEBURL_BAD_IPV4},
        {"http://1.2.3.256/", WEBURL_BAD_IPV4},
        /* names that are not names: evutil_inet_pton takes 1.2.3.+4 and
         * 1.2.3.-0 for 1.2.3.4 and 1.2.3.0 */
        {"http://1.2.3.+4/", "bad host"},
        {"http://1.2.3.-0/", "bad host"},
        {"http://example-.test/", "bad host"},
        {"http://example..test/", "bad host"},
        {"http://.example.test/", "bad host"},
        {"http://exa%6dple.test/", "bad host"},
        {"http://exa mple.test/", "bad host"},
        {"http://ex\\ample.test/", "bad host"},
        {"http://b\xc3\xbc"
         "cher.test/",
         "bad host"},
        /* brackets hold IPv6 only, without a zone */
        {"https://[127.0.0.1]/", "bad host"},
        {"https://[fe80::1%25eth0]/", "bad host"},
        {"https://[::1::2]/", "bad host"},
        {"https://[example.test]/", "bad host"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct weburl u;
        const char *why = NULL;
        int rc = weburl_parse(bad[i].url, &u, &why);
        if (rc != -1 || why == NULL || strcmp(why, bad[i].why) != 0)
            print_message("%s: rc %d, why %s\n", bad[i].url, rc, why != NULL ? why : "(none)");
        assert_int_equal(rc, -1);
        assert_string_equal(why, bad[i].why);
    }
    /* an '@' after the authority is part of the path, not a user name */
    struct weburl u;
    const char *why = NULL;
    assert_int_equal(weburl_parse("https://example.test/a@b", &u, &why), 0);
    assert_span(u.host, u.host_len, "example.test");
    /* a host of 253 bytes loads, 254 does not */
    char url[300];
    char host[255];
    for (size_t i = 0; i < sizeof(host) - 1; i++)
        host[i] = i % 64 == 63 ? '.' : 'a';
    host[253] = '\0';
    snprintf(url, sizeof(url), "https://%s/", host);
    assert_int_equal(weburl_parse(url, &u, &why), 0);
    host[253] = 'a';
    host[254] = '\0';
    snprintf(url, sizeof(url), "https://%s/", host);
    assert_int_equal(weburl_parse(url, &u, &why), -1);
    assert_string_equal(why, "bad host");
    /* and a number of 253 digits is no name */
    snprintf(url, sizeof(url), "https://%0253d/", 0);
    assert_int_equal(weburl_parse(url, &u, &why), -1);
    assert_string_equal(why, WEBURL_BAD_IPV4);
}

/* Hosts the sink and `check` take as they are. */
static void accepts_names_and_canonical_ips(void **state)
{
    (void)state;
    static const char *const good[] = {
        "http://127.0.0.1:9000/hook",
        "http://0.0.0.0/",
        "https://255.255.255.255/",
        "https://hooks.example.test./",
        "https://_dmarc.example.test/",
        "https://a-b.example.test/",
        "https://xn--bcher-kva.test/",
        "https://[::ffff:127.0.0.1]/",
        "https://[2001:DB8::1]:8443/",
        "https://[::]/",
        "https://1.2.3.4x/",
        "https://localhost",
        "https://123abc/",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct weburl u;
        const char *why = NULL;
        int rc = weburl_parse(good[i], &u, &why);
        if (rc != 0)
            print_message("%s: %s\n", good[i], why != NULL ? why : "(none)");
        assert_int_equal(rc, 0);
    }
}

static void label_keeps_short_urls(void **state)
{
    (void)state;
    static const char *same[] = {"http://127.0.0.1:9000", "https://example.test",
                                 "https://example.test/", "https://[::1]:8443/"};
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        char *l = weburl_label(same[i]);
        assert_string_equal(l, same[i]);
        free(l);
    }
}

static void label_hides_the_rest(void **state)
{
    (void)state;
    const char *slack = "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX";
    const char *other = "https://hooks.slack.com/services/T000/B000/YYYYYYYYYYYYYYYYYYYYYYYY";
    char *a = weburl_label(slack), *b = weburl_label(other);
    assert_int_equal(strlen(a), strlen("https://hooks.slack.com/...#") + 8);
    assert_memory_equal(a, "https://hooks.slack.com/...#", 28);
    assert_null(strstr(a, "XXXX"));
    assert_string_not_equal(a, b); /* two sinks stay apart */
    char *again = weburl_label(slack);
    assert_string_equal(a, again); /* and each keeps its name across reloads */
    free(a);
    free(b);
    free(again);

    char *q = weburl_label("https://example.test/hook?token=secret");
    assert_memory_equal(q, "https://example.test/...#", 25);
    assert_null(strstr(q, "secret"));
    free(q);
    char *root = weburl_label("https://example.test?key=secret");
    assert_memory_equal(root, "https://example.test/...#", 25);
    free(root);
}

/* A credential may be the first path segment, or the only one: Telegram's
 * bot token (/bot<TOKEN>/sendMessage), healthchecks.io's check UUID
 * (/<uuid>, /<uuid>/fail), an ntfy topic (/<topic>). No part of the path
 * is shown: the host, then the hash that tells sinks apart. */
static void label_hides_every_path_segment(void **state)
{
    (void)state;
    static const char *const urls[] = {
        "https://api.telegram.org/bot123456:SECRET-token/sendMessage",
        "https://hc-ping.com/SECRET-0b3c-4f5e-9a7d/fail", "https://ntfy.sh/SECRET-topic",
        "http://127.0.0.1:9000/SECRET"};
    static const char *const hosts[] = {"https://api.telegram.org/...#", "https://hc-ping.com/...#",
                                        "https://ntfy.sh/...#", "http://127.0.0.1:9000/...#"};
    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
        char *l = weburl_label(urls[i]);
        assert_non_null(l);
        if (strstr(l, "SECRET") != NULL)
            print_message("%s: label %s\n", urls[i], l);
        assert_null(strstr(l, "SECRET"));
        assert_int_equal(strlen(l), strlen(hosts[i]) + 8);
        assert_memory_equal(l, hosts[i], strlen(hosts[i]));
        free(l);
    }
}

/* A label goes to standard error: a control character (C1's, in UTF-8 or
 * not, included) and the backslash in it are written \\ooo (text_shown()). */
static void label_shows_controls_escaped(void **state)
{
    (void)state;
    char *l = weburl_label("http://\xc2\x9b[2J\xc2\x85\\\x9b\xc3\xa9:9");
    assert_string_equal(l, "http://\\302\\233[2J\\302\\205\\134\\233\xc3\xa9:9");
    free(l);
    l = weburl_label("http://\xc2\x9b:9/secret");
    assert_memory_equal(l, "http://\\302\\233:9/...#", 22);
    assert_int_equal(strlen(l), 22 + 8);
    free(l);
}

/* A user:password@ is never shown, whatever else the URL holds; the hash
 * is of the whole URL, so two sinks that differ only there stay apart. */
static void label_hides_userinfo(void **state)
{
    (void)state;
    static const struct {
        const char *url, *prefix;
    } cases[] = {
        {"https://alerts:hunter2-SECRET@127.0.0.1:9/hook", "https://127.0.0.1:9/...#"},
        {"https://alerts:hunter2-SECRET@127.0.0.1:9", "https://127.0.0.1:9/...#"},
        {"http://SECRET@hooks.example.test/a/b", "http://hooks.example.test/...#"},
        {"https://a:b@SECRET@[::1]:8443/x?y", "https://[::1]:8443/...#"},
        {"https://u:SECRET@", "https:///...#"},
        /* not a URL: no scheme, the same rules */
        {"u:SECRET@hooks.example.test/x", "hooks.example.test/...#"},
        /* "://" in the query is no scheme */
        {"hooks.example.test/T0/SECRET?u=https://x", "hooks.example.test/...#"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *l = weburl_label(cases[i].url);
        size_t n = strlen(cases[i].prefix);
        if (strncmp(l, cases[i].prefix, n) != 0)
            print_message("%s: label %s\n", cases[i].url, l);
        assert_int_equal(strlen(l), n + 8);
        assert_memory_equal(l, cases[i].prefix, n);
        assert_null(strstr(l, "SECRET"));
        assert_null(strchr(l, '@'));
        free(l);
    }
    char *a = weburl_label("https://u:one@example.test/");
    char *b = weburl_label("https://u:two@example.test/");
    assert_string_not_equal(a, b);
    free(a);
    free(b);
}

/* The store's key is the URL's SHA-256 (its first 8 hex digits the
 * label's), never the URL; an old store's "URL (listing N)" keeps its N. */
static void store_key_holds_no_url(void **state)
{
    (void)state;
    const char *url = "https://hooks.slack.com/services/T0/B0/XYZ";
    const char *hex = "c3bfc87a36790a2b2eb1f5b0224d529eff3fa1e3d91a1bb692fe5ee80b1ef939";
    char want[128];
    char *k = weburl_store_key(url, 1);
    snprintf(want, sizeof(want), "sha256:%s", hex);
    assert_string_equal(k, want);
    char *label = weburl_label(url);
    assert_non_null(strstr(label, "#c3bfc87a"));
    free(label);
    free(k);
    k = weburl_store_key(url, 2);
    snprintf(want, sizeof(want), "sha256:%s (listing 2)", hex);
    assert_string_equal(k, want);
    free(k);
    static const struct {
        const char *old, *want; /* NULL: no old key, left as it is */
    } cases[] = {
        {"https://hooks.slack.com/services/T0/B0/XYZ", ""},
        {"https://hooks.slack.com/services/T0/B0/XYZ (listing 2)", " (listing 2)"},
        {"https://hooks.slack.com/services/T0/B0/XYZ (listing 17)", " (listing 17)"},
        {"sha256:00", NULL},
        {"", NULL},
        {"ftp://x/", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bool nomem = true;
        k = weburl_store_key_of_old(cases[i].old, &nomem);
        assert_false(nomem);
        if (cases[i].want == NULL) {
            assert_null(k);
            continue;
        }
        snprintf(want, sizeof(want), "sha256:%s%s", hex, cases[i].want);
        assert_string_equal(k, want);
        free(k);
    }
    /* a suffix that is no listing webhook_set_listing() wrote: the key
     * whole is hashed, as a URL */
    static const char *const odd[] = {"http://a/ (listing 1)", "http://a/ (listing 02)",
                                      "http://a/ (listing 2) ", "http://a/ (listing x)"};
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        bool nomem = true;
        k = weburl_store_key_of_old(odd[i], &nomem);
        char *whole = weburl_store_key(odd[i], 1);
        assert_string_equal(k, whole);
        free(k);
        free(whole);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_http_and_https),
        cmocka_unit_test(refuses),
        cmocka_unit_test(label_keeps_short_urls),
        cmocka_unit_test(label_hides_the_rest),
        cmocka_unit_test(label_hides_every_path_segment),
        cmocka_unit_test(label_shows_controls_escaped),
        cmocka_unit_test(label_hides_userinfo),
        cmocka_unit_test(store_key_holds_no_url),
        cmocka_unit_test(accepts_names_and_canonical_ips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
