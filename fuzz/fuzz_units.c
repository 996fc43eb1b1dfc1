/* fuzz_units: util/units.c on any text, as a policy's sizes, periods,
 * dates and integers reach it (and run's --memory, serve's --grace and
 * check's --today). The input up to its first NUL is the text.
 * Invariants: parse_uint(), parse_size() and parse_period_ms() take
 * exactly a run of decimal digits followed by one of their units (none,
 * B, KiB, MiB, GiB; none, s, m, h), with the value the digits and the
 * unit make, and say -2 of such a text whose value does not fit in 64
 * bits (parse_uint(): -1), -1 of any other; parse_date() takes exactly
 * YYYY-MM-DD of a real day of the years 1970 to 9999, its day number the
 * one timegm() gives, which format_date() writes back as the text and
 * day_of() finds at any second of that day, and says -2 of a real day
 * before 1970, -3 of YYYY-MM-DD that is no day, -1 of any other; a period
 * format_period_ms() writes in a unit parse_period_ms() reads is read
 * back as the same period; format_uint() writes what printf does;
 * parse_int_option() (serve's --nice and --max-conns, check's
 * --warn-days) takes exactly an optional '-' and decimal digits whose
 * value lies in its range, and says why of any other text. */
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/units.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
    if (!cond)
        abort();
}

/* The value of <s>: digits then exactly one of <suffix> (multiplied by
 * the matching <factor>); -1 when it is not that, -2 when it is but its
 * value does not fit in 64 bits. */
static int ref_units(const char *s, const char *const *suffix, const uint64_t *factor, size_t n,
                     uint64_t *out)
{
    unsigned __int128 v = 0;
    size_t i = 0;
    int over = 0;
    while (s[i] >= '0' && s[i] <= '9') {
        v = v * 10 + (unsigned)(s[i] - '0');
        if (v > UINT64_MAX) {
            over = 1;
            v = UINT64_MAX;
        }
        i++;
    }
    if (i == 0)
        return -1;
    for (size_t k = 0; k < n; k++) {
        if (strcmp(s + i, suffix[k]) != 0)
            continue;
        v *= factor[k];
        if (over || v > UINT64_MAX)
            return -2;
        *out = (uint64_t)v;
        return 0;
    }
    return -1;
}

static void check_numbers(const char *s)
{
    static const char *const no_unit[] = {""};
    static const uint64_t one[] = {1};
    static const char *const size_units[] = {"", "B", "KiB", "MiB", "GiB"};
    static const uint64_t size_factors[] = {1, 1, 1024, 1024 * 1024, 1024 * 1024 * 1024};
    static const char *const period_units[] = {"", "s", "m", "h"};
    static const uint64_t period_factors[] = {1000, 1000, 60000, 3600000};
    uint64_t v = 0, want = 0;

    int rc = ref_units(s, no_unit, one, 1, &want);
    check(parse_uint(s, UINT64_MAX, &v) == (rc == 0 ? 0 : -1));
    if (rc == 0) {
        check(v == want);
        check(parse_uint(s, want, &v) == 0 && v == want);
        if (want > 0)
            check(parse_uint(s, want - 1, &v) == -1);
    }
    rc = ref_units(s, size_units, size_factors, 5, &want);
    check(parse_size(s, &v) == rc);
    check(rc != 0 || v == want);
    rc = ref_units(s, period_units, period_factors, 4, &want);
    check(parse_period_ms(s, &v) == rc);
    if (rc != 0)
        return;
    check(v == want);
    char text[32];
    format_period_ms(v, text, sizeof(text));
    size_t n = strlen(text);
    check(n > 1);
    if (n > 2 && strcmp(text + n - 2, "ms") == 0) {
        check(v % 1000 != 0);
        return;
    }
    uint64_t again = 0;
    check(parse_period_ms(text, &again) == 0 && again == v);
}

/* parse_int_option() against the value of "-"? digits, in 128 bits. */
static void check_int_option(const char *s, long lo, long hi)
{
    const char *d = s + (s[0] == '-');
    size_t n = strspn(d, "0123456789");
    __int128 v = 0;
    for (size_t i = 0; i < n && v <= (__int128)LONG_MAX + 1; i++)
        v = v * 10 + (d[i] - '0');
    if (s[0] == '-')
        v = -v;
    bool want = n > 0 && d[n] == '\0' && v >= lo && v <= hi;
    long got = 12345;
    char why[96] = "";
    int rc = parse_int_option(s, lo, hi, &got, why, sizeof(why));
    check(rc == (want ? 0 : -1));
    if (want)
        check(got == (long)v);
    else
        check(got == 12345 && why[0] == ' ');
}

static void check_date(const char *s)
{
    int32_t day = 0;
    int rc = parse_date(s, &day);
    struct tm tm = {0};
    int ok = strlen(s) == 10 && s[4] == '-' && s[7] == '-';
    for (size_t i = 0; ok && i < 10; i++)
        ok = i == 4 || i == 7 || (s[i] >= '0' && s[i] <= '9');
    int want = ok ? 0 : -1;
    if (ok) {
        tm.tm_year = atoi(s) - 1900;
        tm.tm_mon = atoi(s + 5) - 1;
        tm.tm_mday = atoi(s + 8);
        struct tm norm = tm;
        time_t t = timegm(&norm);
        /* a real day: timegm() moved nothing (no 31 April, no 29 February
         * of a common year) */
        bool real = tm.tm_mon >= 0 && tm.tm_mon < 12 && tm.tm_mday >= 1 &&
                    norm.tm_year == tm.tm_year && norm.tm_mon == tm.tm_mon &&
                    norm.tm_mday == tm.tm_mday;
        want = !real ? -3 : tm.tm_year < 70 ? -2 : 0;
        if (want == 0 && rc == 0) {
            check(day == (int32_t)(t / 86400));
            check(day_of(t) == day && day_of(t + 86399) == day && day_of(t - 1) == day - 1);
        }
    }
    check(rc == want);
    if (rc != 0)
        return;
    char text[16];
    format_date(day, text, sizeof(text));
    check(strcmp(text, s) == 0);
}

static void check_format_uint(const uint8_t *data, size_t size)
{
    uint64_t v = 0;
    memcpy(&v, data, size < sizeof(v) ? size : sizeof(v));
    unsigned width = size > 8 ? data[8] % 24 : 0;
    char out[FORMAT_UINT_MAX + 1], want[32];
    size_t n = format_uint(out, v, width);
    out[n < sizeof(out) ? n : 0] = '\0';
    snprintf(want, sizeof(want), "%0*llu", (int)(width > FORMAT_UINT_MAX ? FORMAT_UINT_MAX : width),
             (unsigned long long)v);
    check(n == strlen(want) && strcmp(out, want) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *s = malloc(size + 1); /* the text up to the first NUL */
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    check_numbers(s);
    check_date(s);
    check_int_option(s, -20, 19);
    check_int_option(s, 0, 3650);
    check_int_option(s, 1, 1000000);
    check_int_option(s, LONG_MIN + 1, LONG_MAX);
    check_format_uint(data, size);
    free(s);
    return 0;
}
