/* Unit tests for watch/sink_webhook.c: webhook URLs (http and https, their
 * default ports, what is refused) and the label that shows a sink without
 * the secret its path may carry. Includes the .c to reach parse_url(). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../src/watch/sink_webhook.c"

struct parsed {
    int rc;
    bool https;
    const char *why;
    struct webhook w;
};

static struct parsed parse(const char *url)
{
    struct parsed p;
    memset(&p, 0, sizeof(p));
    p.rc = parse_url(&p.w, url, &p.https, &p.why);
    return p;
}

static void parsed_free(struct parsed *p)
{
    free(p->w.host);
    free(p->w.path);
    free(p->w.hosthdr);
}

static void urls_http_and_https(void **state)
{
    (void)state;
    struct parsed p = parse("https://hooks.example.test/services/T0/B0/xyz");
    assert_int_equal(p.rc, 0);
    assert_true(p.https);
    assert_string_equal(p.w.host, "hooks.example.test");
    assert_int_equal(p.w.port, 443);
    assert_string_equal(p.w.path, "/services/T0/B0/xyz");
    assert_string_equal(p.w.hosthdr, "hooks.example.test");
    parsed_free(&p);

    p = parse("http://127.0.0.1:9000/hook");
    assert_int_equal(p.rc, 0);
    assert_false(p.https);
    assert_int_equal(p.w.port, 9000);
    assert_string_equal(p.w.hosthdr, "127.0.0.1:9000");
    parsed_free(&p);

    p = parse("https://[::1]:8443");
    assert_int_equal(p.rc, 0);
    assert_true(p.https);
    assert_string_equal(p.w.host, "::1");
    assert_int_equal(p.w.port, 8443);
    assert_string_equal(p.w.path, "/");
    parsed_free(&p);

    p = parse("http://example.test");
    assert_int_equal(p.w.port, 80);
    parsed_free(&p);
}

static void urls_refused(void **state)
{
    (void)state;
    static const struct {
        const char *url, *why;
    } bad[] = {
        {"ftp://example.test/", "not an http:// or https:// URL"},
        {"httpss://example.test/", "not an http:// or https:// URL"},
        {"https://", "bad host"},
        {"https://user:secret@example.test/", "bad host"},
        {"https://example.test:0/", "bad port"},
        {"https://example.test:65536/", "bad port"},
        {"https://example.test:/", "bad port"},
        {"https://[::1/", "unterminated [IPv6] host"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct parsed p = parse(bad[i].url);
        assert_int_equal(p.rc, -1);
        assert_string_equal(p.why, bad[i].why);
        parsed_free(&p);
    }
}

static void label_keeps_short_urls(void **state)
{
    (void)state;
    static const char *same[] = {"http://127.0.0.1:9000/hook", "https://example.test",
                                 "https://example.test/", "https://[::1]:8443/alerts"};
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        char *l = webhook_label_of(same[i]);
        assert_string_equal(l, same[i]);
        free(l);
    }
}

static void label_hides_the_rest(void **state)
{
    (void)state;
    const char *slack = "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX";
    const char *other = "https://hooks.slack.com/services/T000/B000/YYYYYYYYYYYYYYYYYYYYYYYY";
    char *a = webhook_label_of(slack), *b = webhook_label_of(other);
    assert_int_equal(strlen(a), strlen("https://hooks.slack.com/services/...#") + 8);
    assert_memory_equal(a, "https://hooks.slack.com/services/...#", 37);
    assert_null(strstr(a, "XXXX"));
    assert_string_not_equal(a, b); /* two sinks stay apart */
    char *again = webhook_label_of(slack);
    assert_string_equal(a, again); /* and each keeps its name across reloads */
    free(a);
    free(b);
    free(again);

    char *q = webhook_label_of("https://example.test/hook?token=secret");
    assert_memory_equal(q, "https://example.test/hook/...#", 30);
    assert_null(strstr(q, "secret"));
    free(q);
    char *root = webhook_label_of("https://example.test?key=secret");
    assert_memory_equal(root, "https://example.test/...#", 25);
    free(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(urls_http_and_https),
        cmocka_unit_test(urls_refused),
        cmocka_unit_test(label_keeps_short_urls),
        cmocka_unit_test(label_hides_the_rest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
