/* test_diag: collecting diagnostics, counting them, formatting them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/diag.h"

static void test_format_warnings(void **state)
{
    (void)state;
    struct diag d;
    char out[256];
    diag_init(&d, "p.yaml");
    diag_format_warnings(&d, out, sizeof(out));
    assert_string_equal(out, "");
    diag_warning(&d, 3, "network.deny_ranges", "open");
    diag_error(&d, 4, "rules[0].tier", "not a tier");
    diag_warning(&d, 0, "", "no rules");
    diag_format_warnings(&d, out, sizeof(out));
    assert_string_equal(out, "warning: p.yaml:3: network.deny_ranges: open\n"
                             "warning: p.yaml: no rules\n");
    /* What does not fit is counted, on a line of its own. */
    for (int i = 0; i < 20; i++)
        diag_warning(&d, 10 + i, "agents[0].sources", "a warning of some length, number %d", i);
    diag_format_warnings(&d, out, sizeof(out));
    assert_true(strlen(out) < sizeof(out));
    const char *tail = strstr(out, "warning: ... and ");
    assert_non_null(tail);
    assert_true(strstr(tail, " more warnings (sluice check lists them)\n") != NULL);
    assert_int_equal(out[strlen(out) - 1], '\n');
    int shown = 0;
    for (const char *p = out; (p = strstr(p, "warning: p.yaml")) != NULL; p++)
        shown++;
    unsigned long more = strtoul(tail + strlen("warning: ... and "), NULL, 10);
    assert_int_equal(shown + (int)more, 22);
    assert_true(shown >= 2);
    /* A buffer too small for anything still ends terminated. */
    diag_format_warnings(&d, out, 8);
    assert_true(strlen(out) < 8);
    diag_free(&d);
}

static void test_empty(void **state)
{
    (void)state;
    struct diag d;
    diag_init(&d, "p.yaml");
    assert_false(diag_has_errors(&d));
    assert_null(diag_first_error(&d));
    assert_int_equal(d.count, 0);
    assert_int_equal(d.errors, 0);
    assert_int_equal(d.warnings, 0);
    assert_string_equal(d.file, "p.yaml");
    diag_free(&d);
    diag_free(NULL);
}

static void test_counters(void **state)
{
    (void)state;
    struct diag d;
    diag_init(&d, "p.yaml");
    diag_warning(&d, 3, "rules[0].expires", "expires in %d days", 5);
    assert_false(diag_has_errors(&d));
    assert_null(diag_first_error(&d));
    assert_int_equal(d.warnings, 1);

    diag_error(&d, 7, "rules[1].tier", "tier %d is not 0..3", 4);
    diag_error(&d, 9, "rules[2].host", "%s", "empty label");
    assert_true(diag_has_errors(&d));
    assert_int_equal(d.count, 3);
    assert_int_equal(d.errors, 2);
    assert_int_equal(d.warnings, 1);

    const struct diag_entry *e = diag_first_error(&d);
    assert_non_null(e);
    assert_int_equal(e->level, DIAG_ERROR);
    assert_int_equal(e->line, 7);
    assert_string_equal(e->field, "rules[1].tier");
    assert_string_equal(e->message, "tier 4 is not 0..3");
    assert_int_equal(d.entries[0].level, DIAG_WARNING);
    assert_string_equal(d.entries[0].message, "expires in 5 days");

    diag_free(&d);
    assert_int_equal(d.count, 0);
    assert_int_equal(d.errors, 0);
    assert_int_equal(d.warnings, 0);
    assert_null(d.entries);
    assert_false(diag_has_errors(&d));

    /* Reusable after diag_init(). */
    diag_init(&d, "q.yaml");
    diag_error(&d, 1, "version", "unsupported version %d", 2);
    assert_int_equal(d.errors, 1);
    diag_free(&d);
}

/* Findings past a cap: the closing entry says how many, and the totals
 * count them, not the closing entry (the result line of sluice check). */
static void test_unlisted(void **state)
{
    (void)state;
    struct diag d;
    diag_init(&d, "p.yaml");
    diag_warning(&d, 3, "f", "w");
    assert_int_equal(diag_total(&d, DIAG_WARNING), 1);
    diag_unlisted(&d, DIAG_WARNING, 500, " (the first 1 is)");
    assert_int_equal(d.warnings, 2); /* listed: the warning and the count */
    assert_int_equal(diag_total(&d, DIAG_WARNING), 501);
    assert_string_equal(d.entries[1].message, "500 more warnings not listed (the first 1 is)");
    assert_int_equal(diag_total(&d, DIAG_ERROR), 0);
    diag_unlisted(&d, DIAG_ERROR, 1, "");
    assert_string_equal(d.entries[2].message, "1 more error not listed");
    assert_int_equal(diag_total(&d, DIAG_ERROR), 1);
    assert_true(diag_has_errors(&d));
    diag_free(&d);
    assert_int_equal(diag_total(&d, DIAG_WARNING), 0);
}

static void test_growth(void **state)
{
    (void)state;
    struct diag d;
    diag_init(&d, "p.yaml");
    for (int i = 0; i < 100; i++) {
        if (i % 3 == 0)
            diag_warning(&d, i, "f", "w%d", i);
        else
            diag_error(&d, i, "f", "e%d", i);
    }
    assert_int_equal(d.count, 100);
    assert_int_equal(d.warnings, 34);
    assert_int_equal(d.errors, 66);
    assert_true(d.cap >= 100);
    assert_string_equal(d.entries[99].message, "w99");
    assert_string_equal(diag_first_error(&d)->message, "e1");
    diag_free(&d);
}

static void test_format(void **state)
{
    (void)state;
    struct diag d;
    char buf[256];
    diag_init(&d, "policy.yaml");
    diag_error(&d, 12, "rules[3].expires", "not a date: %s", "2026-02-30");
    diag_error(&d, 4, "", "unknown key");
    diag_error(&d, 0, "rules", "must be a list");
    diag_error(&d, 0, NULL, "file is empty");
    diag_warning(&d, 8, NULL, "odd %s", "indent");

    diag_format(&d, &d.entries[0], buf, sizeof(buf));
    assert_string_equal(buf, "policy.yaml:12: rules[3].expires: not a date: 2026-02-30");
    diag_format(&d, &d.entries[1], buf, sizeof(buf));
    assert_string_equal(buf, "policy.yaml:4: unknown key");
    diag_format(&d, &d.entries[2], buf, sizeof(buf));
    assert_string_equal(buf, "policy.yaml: rules: must be a list");
    diag_format(&d, &d.entries[3], buf, sizeof(buf));
    assert_string_equal(buf, "policy.yaml: file is empty");
    assert_string_equal(d.entries[3].field, "");
    diag_format(&d, &d.entries[4], buf, sizeof(buf));
    assert_string_equal(buf, "policy.yaml:8: odd indent");

    /* Always terminated, even when cut short. */
    char small[10];
    memset(small, 'x', sizeof(small));
    diag_format(&d, &d.entries[0], small, sizeof(small));
    assert_string_equal(small, "policy.ya");
    diag_free(&d);

    /* Without a file name. */
    diag_init(&d, NULL);
    diag_error(&d, 2, "agents", "%s", "100%");
    diag_format(&d, &d.entries[0], buf, sizeof(buf));
    assert_string_equal(buf, "-:2: agents: 100%");
    diag_free(&d);
}

static void test_long_message(void **state)
{
    (void)state;
    struct diag d;
    char big[5000];
    memset(big, 'm', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    diag_init(&d, "p.yaml");
    diag_error(&d, 1, "f", "%s", big);
    assert_int_equal(strlen(d.entries[0].message), sizeof(big) - 1);
    char buf[64];
    diag_format(&d, &d.entries[0], buf, sizeof(buf));
    assert_int_equal(strlen(buf), sizeof(buf) - 1);
    assert_memory_equal(buf, "p.yaml:1: f: mmm", 16);
    diag_free(&d);
}

/* A policy path of up to PATH_MAX (4096) bytes before its line, field and
 * message, in the 1024 bytes serve and run print a load error from: the
 * message was cut at the end, so that a long path took the line, the
 * field and what is wrong with it. The path gives way in its middle. */
static void test_long_file_keeps_the_finding(void **state)
{
    (void)state;
    static const char end[] = ":4: rules[0].tier: tier 9 is outside 0-3";
    char file[3000];
    /* "é" (2 bytes) throughout: a cut at any byte count falls in one */
    size_t n = 0;
    memcpy(file, "/srv/", 5);
    for (n = 5; n + 2 < sizeof(file) - 8; n += 2)
        memcpy(file + n, "\xc3\xa9", 2);
    memcpy(file + n, "/p.yaml", 8);
    struct diag d;
    diag_init(&d, file);
    diag_error(&d, 4, "rules[0].tier", "tier %d is outside 0-3", 9);
    for (size_t outlen = 200; outlen <= 1024; outlen += 1) {
        char buf[1024];
        diag_format(&d, &d.entries[0], buf, outlen);
        size_t len = strlen(buf);
        assert_true(len < outlen);
        assert_true(len + 2 >= outlen - 1); /* at most one character lost to the cut */
        assert_true(len > sizeof(end));
        assert_string_equal(buf + len - (sizeof(end) - 1), end);
        assert_memory_equal(buf, "/srv/\xc3\xa9", 7);
        const char *dots = strstr(buf, "...");
        assert_non_null(dots);
        /* both sides of the cut are whole characters */
        assert_true((unsigned char)dots[-1] == 0xa9);
        assert_true((unsigned char)dots[3] == 0xc3 || dots[3] == '/');
    }
    /* too short for the finding even with a few bytes of the path: cut at
     * the end, as ever */
    char small[32];
    diag_format(&d, &d.entries[0], small, sizeof(small));
    assert_memory_equal(small, "/srv/", 5);
    assert_int_equal(strlen(small), sizeof(small) - 1);
    diag_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),           cmocka_unit_test(test_counters),
        cmocka_unit_test(test_unlisted),        cmocka_unit_test(test_growth),
        cmocka_unit_test(test_format),          cmocka_unit_test(test_long_message),
        cmocka_unit_test(test_format_warnings), cmocka_unit_test(test_long_file_keeps_the_finding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
