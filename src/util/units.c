#include "util/units.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Reads the leading decimal digits of <s> into <*out>; returns how many
 * there were (0 when there are none). <*over> tells whether they overflow
 * 64 bits (and <*out> is then meaningless). */
static size_t leading_uint(const char *s, uint64_t *out, bool *over)
{
    uint64_t v = 0;
    size_t i = 0;
    *over = false;
    while (s[i] >= '0' && s[i] <= '9') {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            *over = true;
        else
            v = v * 10 + d;
        i++;
    }
    *out = v;
    return i;
}

int parse_uint(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v;
    bool over;
    if (s == NULL)
        return -1;
    size_t n = leading_uint(s, &v, &over);
    if (n == 0 || over || s[n] != '\0' || v > max)
        return -1;
    *out = v;
    return 0;
}

int parse_int_option(const char *s, long lo, long hi, long *out, char *why, size_t cap)
{
    bool minus = s[0] == '-';
    const char *d = s + minus;
    size_t n = strspn(d, "0123456789");
    uint64_t v;
    if (n == 0 || d[n] != '\0') {
        snprintf(why, cap, " is not a whole number (%ld to %ld)", lo, hi);
        return -1;
    }
    /* digits past LONG_MAX, or past 64 bits, are a number all the same */
    bool big = parse_uint(d, (uint64_t)LONG_MAX, &v) != 0;
    long x = big ? 0 : minus ? -(long)v : (long)v;
    if (big || x < lo || x > hi) {
        snprintf(why, cap, " is out of range (%ld to %ld)", lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

struct unit {
    const char *suffix;
    uint64_t factor;
};

static int parse_with_units(const char *s, const struct unit *units, size_t nunits, uint64_t *out)
{
    uint64_t v;
    bool over;
    if (s == NULL)
        return -1;
    size_t n = leading_uint(s, &v, &over);
    if (n == 0)
        return -1;
    for (size_t i = 0; i < nunits; i++) {
        if (strcmp(s + n, units[i].suffix) != 0)
            continue;
        if (over || v > UINT64_MAX / units[i].factor)
            return -2; /* well formed, but past 64 bits */
        *out = v * units[i].factor;
        return 0;
    }
    return -1;
}

int parse_size(const char *s, uint64_t *bytes)
{
    static const struct unit units[] = {
        {"", 1}, {"B", 1}, {"KiB", 1024}, {"MiB", 1024 * 1024}, {"GiB", 1024 * 1024 * 1024},
    };
    return parse_with_units(s, units, sizeof(units) / sizeof(units[0]), bytes);
}

int parse_period_ms(const char *s, uint64_t *ms)
{
    static const struct unit units[] = {
        {"", 1000},
        {"s", 1000},
        {"m", 60 * 1000},
        {"h", 3600 * 1000},
    };
    return parse_with_units(s, units, sizeof(units) / sizeof(units[0]), ms);
}

/* Day numbers and civil dates, after Howard Hinnant's "chrono-compatible
 * low-level date algorithms" (proleptic Gregorian, day 0 = 1970-01-01). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static bool is_leap(unsigned y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static unsigned days_in_month(unsigned y, unsigned m)
{
    static const unsigned days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

/* Reads exactly <n> decimal digits. */
static bool fixed_digits(const char *s, size_t n, unsigned *out)
{
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    *out = v;
    return true;
}

int parse_date(const char *s, int32_t *day)
{
    unsigned y, m, d;
    if (s == NULL || strnlen(s, 11) != 10 || s[4] != '-' || s[7] != '-')
        return -1;
    if (!fixed_digits(s, 4, &y) || !fixed_digits(s + 5, 2, &m) || !fixed_digits(s + 8, 2, &d))
        return -1;
    if (m < 1 || m > 12 || d < 1 || d > days_in_month(y, m))
        return -3; /* YYYY-MM-DD, but no such day */
    if (y < 1970)
        return -2; /* a real day, but before day 0 */
    *day = (int32_t)days_from_civil(y, m, d);
    return 0;
}

void format_date(int32_t day, char *out, size_t outlen)
{
    int64_t y;
    unsigned m, d;
    if (out == NULL || outlen == 0)
        return;
    civil_from_days(day, &y, &m, &d);
    snprintf(out, outlen, "%04lld-%02u-%02u", (long long)y, m, d);
}

int32_t day_of(time_t t)
{
    int64_t s = (int64_t)t;
    int64_t q = s / 86400;
    if (s % 86400 < 0)
        q--;
    if (q > INT32_MAX)
        return INT32_MAX;
    if (q < INT32_MIN)
        return INT32_MIN;
    return (int32_t)q;
}

uint64_t ms_to_next_day(int64_t now_ms)
{
    int64_t into = now_ms % 86400000;
    if (into < 0)
        into += 86400000;
    return (uint64_t)(86400000 - into);
}

bool day_watch(int32_t *day, int64_t (*clock_ms)(void *), void *arg, uint64_t max_ms,
               uint64_t *wait_ms)
{
    /* One reading for both: a second one could be past the midnight the
     * first was before, and the day's change would wait for max_ms. */
    int64_t now = clock_ms(arg);
    int32_t today = day_of((time_t)(now / 1000));
    bool changed = today != *day;
    *day = today;
    uint64_t ms = ms_to_next_day(now);
    *wait_ms = ms < max_ms ? ms : max_ms;
    return changed;
}

void format_period_ms(uint64_t ms, char *out, size_t outlen)
{
    if (ms != 0 && ms % 3600000 == 0)
        snprintf(out, outlen, "%lluh", (unsigned long long)(ms / 3600000));
    else if (ms != 0 && ms % 60000 == 0)
        snprintf(out, outlen, "%llum", (unsigned long long)(ms / 60000));
    else if (ms % 1000 == 0)
        snprintf(out, outlen, "%llus", (unsigned long long)(ms / 1000));
    else
        snprintf(out, outlen, "%llums", (unsigned long long)ms);
}

/* "00" to "99": two digits written at once, one division by 100 for both. */
static const char digit_pairs[] = "00010203040506070809"
                                  "10111213141516171819"
                                  "20212223242526272829"
                                  "30313233343536373839"
                                  "40414243444546474849"
                                  "50515253545556575859"
                                  "60616263646566676869"
                                  "70717273747576777879"
                                  "80818283848586878889"
                                  "90919293949596979899";

/* Writes the two digits of <v> (below 100) at <p>. */
static void put_pair(char *p, uint64_t v)
{
    memcpy(p, digit_pairs + 2 * v, 2);
}

size_t format_uint(char *out, uint64_t v, unsigned width)
{
    /* 10^1 .. 10^19: the digits are counted first, then written in place
     * from the last ones back, two at a time (no copy from a buffer of its
     * own: a memcpy() call per number, several numbers a request). */
    static const uint64_t pow10[FORMAT_UINT_MAX - 1] = {
        10ULL,
        100ULL,
        1000ULL,
        10000ULL,
        100000ULL,
        1000000ULL,
        10000000ULL,
        100000000ULL,
        1000000000ULL,
        10000000000ULL,
        100000000000ULL,
        1000000000000ULL,
        10000000000000ULL,
        100000000000000ULL,
        1000000000000000ULL,
        10000000000000000ULL,
        100000000000000000ULL,
        1000000000000000000ULL,
        10000000000000000000ULL,
    };
    size_t digits = 1;
    while (digits < FORMAT_UINT_MAX && v >= pow10[digits - 1])
        digits++;
    size_t n = width < FORMAT_UINT_MAX ? width : FORMAT_UINT_MAX;
    if (n < digits)
        n = digits;
    char *p = out + n;
    while (v >= 100) {
        p -= 2;
        put_pair(p, v % 100);
        v /= 100;
    }
    if (v >= 10) {
        p -= 2;
        put_pair(p, v);
    } else {
        *--p = (char)('0' + v);
    }
    while (p > out)
        *--p = '0';
    return n;
}

struct timeval timeval_of_ms(uint64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

struct timespec monotonic_after(unsigned ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    return until;
}

uint64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

bool tell_due(uint64_t *told_ms, uint64_t now, uint64_t every_ms)
{
    if (*told_ms != 0 && now - *told_ms < every_ms)
        return false;
    *told_ms = now > 0 ? now : 1; /* 0 means never */
    return true;
}
