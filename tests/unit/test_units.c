/* test_units: sizes, periods, dates and plain integers as written in a policy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/units.h"

/* Each of <in> makes <parse> return <want> and leaves its output alone. */
static void expect_each(int (*parse)(const char *, uint64_t *), const char *name,
                        const char *const *in, size_t n, int want)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t v = 42;
        int got = parse(in[i], &v);
        if (got != want)
            fail_msg("%s(\"%s\") returned %d, not %d", name, in[i], got, want);
        assert_int_equal(v, 42); /* untouched on failure */
    }
}

static void test_parse_size(void **state)
{
    (void)state;
    uint64_t b = 7;
    assert_int_equal(parse_size("512", &b), 0);
    assert_int_equal(b, 512);
    assert_int_equal(parse_size("0", &b), 0);
    assert_int_equal(b, 0);
    assert_int_equal(parse_size("10B", &b), 0);
    assert_int_equal(b, 10);
    assert_int_equal(parse_size("32KiB", &b), 0);
    assert_int_equal(b, 32 * 1024);
    assert_int_equal(parse_size("1MiB", &b), 0);
    assert_int_equal(b, 1024 * 1024);
    assert_int_equal(parse_size("2GiB", &b), 0);
    assert_int_equal(b, 2ull * 1024 * 1024 * 1024);
    assert_int_equal(parse_size("18446744073709551615", &b), 0);
    assert_int_equal(b, UINT64_MAX);
    assert_int_equal(parse_size("17179869183GiB", &b), 0);
    assert_int_equal(b, 17179869183ull << 30);

    static const char *const bad[] = {
        "",      "B",    "1.5MiB", "-1",
        "+1",    " 1",   "1 ",     "1 MiB",
        "1KB",   "1MB",  "1GB",    "1kib",
        "1mib",  "1K",   "1M",     "1TiB",
        "1BB",   "MiB1", "0x10",   "1e3",
        "1MiBx", "1iB",  "1KiBB",  "99999999999999999999999KB", /* overflows, and no unit */
    };
    expect_each(parse_size, "parse_size", bad, sizeof(bad) / sizeof(bad[0]), -1);
    /* Well formed but past 64 bits: -2, so the loader says too large. */
    static const char *const huge[] = {
        "18446744073709551616",       /* overflows the integer */
        "17179869184GiB",             /* overflows after the unit */
        "99999999999999999999999KiB", /* overflows, then a unit */
    };
    expect_each(parse_size, "parse_size", huge, sizeof(huge) / sizeof(huge[0]), -2);
    assert_int_equal(parse_size(NULL, &b), -1);
}

static void test_parse_period(void **state)
{
    (void)state;
    uint64_t ms = 7;
    assert_int_equal(parse_period_ms("30", &ms), 0);
    assert_int_equal(ms, 30000);
    assert_int_equal(parse_period_ms("30s", &ms), 0);
    assert_int_equal(ms, 30000);
    assert_int_equal(parse_period_ms("5m", &ms), 0);
    assert_int_equal(ms, 300000);
    assert_int_equal(parse_period_ms("24h", &ms), 0);
    assert_int_equal(ms, 86400000);
    assert_int_equal(parse_period_ms("0s", &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(parse_period_ms("1s", &ms), 0);
    assert_int_equal(ms, 1000);

    static const char *const bad[] = {
        "",
        "s",
        "1.5s",
        "-1s",
        "+1s",
        " 1s",
        "1s ",
        "1 s",
        "1ms",
        "1d",
        "1S",
        "1M",
        "1H",
        "1hh",
        "1sm",
        "s1",
        "1w",
        "0x1s",
        "99999999999999999999d", /* overflows, and no unit */
    };
    expect_each(parse_period_ms, "parse_period_ms", bad, sizeof(bad) / sizeof(bad[0]), -1);
    static const char *const huge[] = {
        "18446744073709552", /* x1000 overflows */
        "5124095576031h",    /* x3600000 overflows */
        "99999999999999999999s",
    };
    expect_each(parse_period_ms, "parse_period_ms", huge, sizeof(huge) / sizeof(huge[0]), -2);
    assert_int_equal(parse_period_ms(NULL, &ms), -1);
    /* The largest that fits. */
    assert_int_equal(parse_period_ms("18446744073709551s", &ms), 0);
    assert_int_equal(ms, 18446744073709551000ull);
    assert_int_equal(parse_period_ms("5124095576030h", &ms), 0);
    assert_int_equal(ms, 5124095576030ull * 3600000);
}

/* Each of <in> makes parse_date() return <want> and leaves the day alone. */
static void expect_dates(const char *const *in, size_t n, int want)
{
    for (size_t i = 0; i < n; i++) {
        int32_t d = 42;
        int got = parse_date(in[i], &d);
        if (got != want)
            fail_msg("parse_date(\"%s\") returned %d, not %d", in[i], got, want);
        assert_int_equal(d, 42);
    }
}

static void test_parse_date(void **state)
{
    (void)state;
    int32_t d = 7;
    assert_int_equal(parse_date("1970-01-01", &d), 0);
    assert_int_equal(d, 0);
    assert_int_equal(parse_date("1970-01-02", &d), 0);
    assert_int_equal(d, 1);
    assert_int_equal(parse_date("2000-03-01", &d), 0);
    assert_int_equal(d, 11017);
    assert_int_equal(parse_date("2024-02-29", &d), 0);
    assert_int_equal(d, 19782);
    assert_int_equal(parse_date("2000-02-29", &d), 0);
    assert_int_equal(parse_date("2026-12-31", &d), 0);
    assert_int_equal(d, 20818);
    assert_int_equal(parse_date("9999-12-31", &d), 0);
    assert_int_equal(d, 2932896);

    /* Well formed, but no day: -3. */
    static const char *const none[] = {
        "2026-02-29", "1900-02-29", "2100-02-29", "2023-02-29", "2026-04-31",
        "2026-06-31", "2026-09-31", "2026-11-31", "2026-01-32", "2026-00-10",
        "2026-13-01", "2026-01-00", "1969-02-29", "0000-02-30", "2026-99-99",
    };
    expect_dates(none, sizeof(none) / sizeof(none[0]), -3);
    static const char *const bad[] = {
        "2026-1-01",
        "2026-01-1",
        "26-01-01",
        "2026/01/01",
        "2026-01-01 ",
        " 2026-01-01",
        "2026-01-01T00:00:00Z",
        "2026-01-0a",
        "20260101",
        "+026-01-01",
        "2026-+1-01",
        "2026--1-01",
        "",
        "10000-01-01",
    };
    expect_dates(bad, sizeof(bad) / sizeof(bad[0]), -1);
    assert_int_equal(parse_date(NULL, &d), -1);
    /* Real days before day 0: -2, so the loader says so. */
    static const char *const early[] = {"1969-12-31", "0000-01-01", "1968-02-29"};
    expect_dates(early, sizeof(early) / sizeof(early[0]), -2);
}

static void test_format_date(void **state)
{
    (void)state;
    char buf[11];
    format_date(0, buf, sizeof(buf));
    assert_string_equal(buf, "1970-01-01");
    format_date(19782, buf, sizeof(buf));
    assert_string_equal(buf, "2024-02-29");
    format_date(20818, buf, sizeof(buf));
    assert_string_equal(buf, "2026-12-31");
    format_date(-1, buf, sizeof(buf));
    assert_string_equal(buf, "1969-12-31");
    format_date(2932896, buf, sizeof(buf));
    assert_string_equal(buf, "9999-12-31");

    char small[5];
    format_date(0, small, sizeof(small));
    assert_string_equal(small, "1970");
    format_date(0, NULL, 0); /* no crash */

    /* Every day from 1970 to 2200 round-trips through text. */
    int32_t prev = -1;
    for (int32_t day = 0; day < 84000; day++) {
        int32_t back;
        format_date(day, buf, sizeof(buf));
        assert_int_equal(parse_date(buf, &back), 0);
        assert_int_equal(back, day);
        assert_true(back > prev);
        prev = back;
    }
}

static void test_day_of(void **state)
{
    (void)state;
    assert_int_equal(day_of(0), 0);
    assert_int_equal(day_of(86399), 0);
    assert_int_equal(day_of(86400), 1);
    assert_int_equal(day_of(-1), -1);
    assert_int_equal(day_of(-86400), -1);
    assert_int_equal(day_of(-86401), -2);
    assert_int_equal(day_of(1709164800), 19782); /* 2024-02-29T00:00:00Z */
    assert_int_equal(day_of(1709251199), 19782); /* 2024-02-29T23:59:59Z */
    if (sizeof(time_t) > 4) {
        assert_int_equal(day_of((time_t)INT64_MAX), INT32_MAX);
        assert_int_equal(day_of((time_t)INT64_MIN), INT32_MIN);
    }
}

static void test_ms_to_next_day(void **state)
{
    (void)state;
    assert_int_equal(ms_to_next_day(0), 86400000);
    assert_int_equal(ms_to_next_day(1), 86399999);
    assert_int_equal(ms_to_next_day(86399999), 1);
    assert_int_equal(ms_to_next_day(86400000), 86400000);
    assert_int_equal(ms_to_next_day(-1), 1);
    assert_int_equal(ms_to_next_day(-86400000), 86400000);
    /* 2024-02-29T23:59:59.500Z: half a second to 2024-03-01 */
    assert_int_equal(ms_to_next_day(1709251199500), 500);
    assert_int_equal(day_of((time_t)((1709251199500 + 500) / 1000)), 19783);
}

/* A wall clock that moves on at each reading: the readings <ms>, in turn
 * (the last one again once they are used up). */
struct ticking_clock {
    const int64_t *ms;
    size_t n, reads;
};

static int64_t ticking_ms(void *arg)
{
    struct ticking_clock *c = arg;
    size_t i = c->reads < c->n ? c->reads : c->n - 1;
    c->reads++;
    return c->ms[i];
}

static void test_day_watch(void **state)
{
    (void)state;
    /* 2024-02-29T23:59:59.999Z, then 2024-03-01T00:00:00.000Z */
    const int64_t last_ms[] = {1709251199999, 1709251200000};
    struct ticking_clock c = {last_ms, 2, 0};
    int32_t day = 19782;
    uint64_t wait = 0;
    /* the timer woke in the day's last millisecond and the clock passed
     * midnight as it was read again: the day is the 29th, to be looked at
     * again in 1 ms, not after max_ms (the change would be seen a minute
     * late) */
    assert_false(day_watch(&day, ticking_ms, &c, 60000, &wait));
    assert_int_equal(day, 19782);
    assert_int_equal(wait, 1);
    assert_int_equal(c.reads, 1);
    /* the next look sees the new day */
    assert_true(day_watch(&day, ticking_ms, &c, 60000, &wait));
    assert_int_equal(day, 19783);
    assert_int_equal(wait, 60000); /* at most max_ms */
    assert_false(day_watch(&day, ticking_ms, &c, 60000, &wait));
    /* half a second before a midnight: woken at it */
    const int64_t half_ms[] = {1709251199500};
    struct ticking_clock h = {half_ms, 1, 0};
    day = 0; /* a first look: any day is another */
    assert_true(day_watch(&day, ticking_ms, &h, 60000, &wait));
    assert_int_equal(day, 19782);
    assert_int_equal(wait, 500);
}

/* A value that is a number but past the range is said to be out of
 * range, not "not a number" (`--nice 20`). */
static void test_parse_int_option(void **state)
{
    (void)state;
    long v = 7;
    char why[64];
    assert_int_equal(parse_int_option("-20", -20, 19, &v, why, sizeof(why)), 0);
    assert_int_equal(v, -20);
    assert_int_equal(parse_int_option("19", -20, 19, &v, why, sizeof(why)), 0);
    assert_int_equal(v, 19);
    assert_int_equal(parse_int_option("-0", -20, 19, &v, why, sizeof(why)), 0);
    assert_int_equal(v, 0);

    static const char *const far[] = {"20", "-21", "99999999999999999999999",
                                      "-9223372036854775808"};
    for (size_t i = 0; i < sizeof(far) / sizeof(far[0]); i++) {
        v = 42;
        assert_int_equal(parse_int_option(far[i], -20, 19, &v, why, sizeof(why)), -1);
        assert_string_equal(why, " is out of range (-20 to 19)");
        assert_int_equal(v, 42);
    }
    static const char *const bad[] = {"", "x", "-", "+3", "1.5", " 1", "1 ", "0x1", "--1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(parse_int_option(bad[i], 1, 1000000, &v, why, sizeof(why)), -1);
        assert_string_equal(why, " is not a whole number (1 to 1000000)");
        assert_int_equal(v, 42);
    }
}

static void test_parse_uint(void **state)
{
    (void)state;
    uint64_t v = 7;
    assert_int_equal(parse_uint("0", 10, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(parse_uint("10", 10, &v), 0);
    assert_int_equal(v, 10);
    assert_int_equal(parse_uint("65535", 65535, &v), 0);
    assert_int_equal(v, 65535);
    assert_int_equal(parse_uint("18446744073709551615", UINT64_MAX, &v), 0);
    assert_int_equal(v, UINT64_MAX);

    static const char *const bad[] = {
        "", "11", "-1", "+1", " 1", "1 ", "1.0", "0x1", "a", "18446744073709551616",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 42;
        if (parse_uint(bad[i], 10, &v) != -1)
            fail_msg("parse_uint accepted \"%s\"", bad[i]);
        assert_int_equal(v, 42);
    }
    assert_int_equal(parse_uint("65536", 65535, &v), -1);
    assert_int_equal(parse_uint(NULL, 10, &v), -1);
}

static void test_format_period(void **state)
{
    (void)state;
    char b[32];
    static const struct {
        uint64_t ms;
        const char *text;
    } cases[] = {
        {0, "0s"},       {1500, "1500ms"}, {30000, "30s"},    {300000, "5m"},
        {3600000, "1h"}, {5400000, "90m"}, {86400000, "24h"}, {61000, "61s"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        format_period_ms(cases[i].ms, b, sizeof(b));
        assert_string_equal(b, cases[i].text);
        uint64_t back = 0;
        if (cases[i].ms % 1000 == 0) { /* whole seconds parse back to the same period */
            assert_int_equal(parse_period_ms(b, &back), 0);
            assert_int_equal(back, cases[i].ms);
        }
    }
}

static void test_format_uint(void **state)
{
    (void)state;
    char buf[FORMAT_UINT_MAX + 1];
    size_t n = format_uint(buf, 0, 0);
    buf[n] = '\0';
    assert_string_equal(buf, "0");
    n = format_uint(buf, 80, 0);
    buf[n] = '\0';
    assert_string_equal(buf, "80");
    n = format_uint(buf, 7, 3);
    buf[n] = '\0';
    assert_string_equal(buf, "007");
    n = format_uint(buf, 2026, 2); /* wider than asked: all digits */
    buf[n] = '\0';
    assert_string_equal(buf, "2026");
    n = format_uint(buf, UINT64_MAX, 0);
    buf[n] = '\0';
    assert_string_equal(buf, "18446744073709551615");
    n = format_uint(buf, 5, 99); /* width capped at FORMAT_UINT_MAX */
    assert_int_equal(n, FORMAT_UINT_MAX);
}

/* format_uint(<v>, <width>) writes what snprintf()'s "%0*llu" does (the
 * width capped at FORMAT_UINT_MAX), touching no byte past what it wrote. */
static void check_format_uint(uint64_t v, unsigned width)
{
    char want[64], got[FORMAT_UINT_MAX + 8];
    int w = (int)(width < FORMAT_UINT_MAX ? width : FORMAT_UINT_MAX);
    int len = snprintf(want, sizeof(want), "%0*llu", w, (unsigned long long)v);
    memset(got, '#', sizeof(got));
    size_t n = format_uint(got, v, width);
    if (n != (size_t)len || memcmp(got, want, n) != 0 || got[n] != '#')
        fail_msg("format_uint(%llu, %u): %.*s, not %s", (unsigned long long)v, width, (int)n, got,
                 want);
}

static void test_format_uint_as_snprintf(void **state)
{
    (void)state;
    static const unsigned widths[] = {0, 1, 2, 3, 4, 9, 19, 20, 21, 99};
    uint64_t p = 1;
    for (int e = 0; e < 20; e++, p *= 10) /* each power of ten and its neighbours */
        for (unsigned w = 0; w < sizeof(widths) / sizeof(widths[0]); w++) {
            check_format_uint(p, widths[w]);
            check_format_uint(p - 1, widths[w]);
            check_format_uint(p + 1, widths[w]);
            check_format_uint(p * 2 - 1, widths[w]);
        }
    for (uint64_t v = 0; v < 100000; v++)
        check_format_uint(v, (unsigned)(v % 7));
    check_format_uint(UINT64_MAX, 0);
    check_format_uint(UINT64_MAX - 1, 21);
    uint64_t x = 0x9e3779b97f4a7c15u; /* xorshift64: every length of number */
    for (int k = 0; k < 200000; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        check_format_uint(x >> (k % 64), (unsigned)(k % 23));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size),       cmocka_unit_test(test_format_period),
        cmocka_unit_test(test_parse_period),     cmocka_unit_test(test_parse_date),
        cmocka_unit_test(test_format_date),      cmocka_unit_test(test_day_of),
        cmocka_unit_test(test_ms_to_next_day),   cmocka_unit_test(test_parse_uint),
        cmocka_unit_test(test_parse_int_option), cmocka_unit_test(test_format_uint),
        cmocka_unit_test(test_day_watch),        cmocka_unit_test(test_format_uint_as_snprintf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
