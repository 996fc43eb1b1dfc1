/* units: sizes, periods and dates as written in a policy or an option.
 * Sizes: an integer with B, KiB, MiB or GiB (a bare integer is bytes).
 * Periods: an integer with s, m or h (a bare integer is seconds).
 * Bare integers are for the command line (--grace 30, --tmp-size 1048576):
 * a policy's loader refuses them for sizes and periods other than 0
 * (policy/load_ctx.c refuse_bare_number()).
 * Dates: ISO YYYY-MM-DD, counted as whole days since 1970-01-01 (UTC).
 * All parsers reject overflow, signs, spaces and trailing garbage. */
#ifndef SLUICE_UTIL_UNITS_H
#define SLUICE_UTIL_UNITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>
#include <time.h>

/* Return 0, -1 for what is not a size (a period), or -2 for one well
 * formed but too large for 64 bits (of bytes, of milliseconds). */
int parse_size(const char *s, uint64_t *bytes);
int parse_period_ms(const char *s, uint64_t *ms);
/* Writes <ms> as a policy would: "5m", "24h", "30s", else "1500ms". */
void format_period_ms(uint64_t ms, char *out, size_t outlen);
/* Returns 0 and the day number, -1 for anything not written YYYY-MM-DD,
 * -2 for a real date before 1970-01-01 (day 0, the earliest taken), or -3
 * for one written YYYY-MM-DD that is no day (2026-02-30, 2026-13-01). */
int parse_date(const char *s, int32_t *day);
/* Writes YYYY-MM-DD for <day> into <out> (at least 11 bytes). */
void format_date(int32_t day, char *out, size_t outlen);
/* The UTC day number that <t> falls in. */
int32_t day_of(time_t t);
/* Milliseconds from <now_ms> (the wall clock, in ms since the epoch) to the
 * start of the next UTC day: 1 to 86400000. */
uint64_t ms_to_next_day(int64_t now_ms);
/* One look of a timer that wakes at each UTC midnight of the wall clock
 * <clock_ms>(<arg>) (ms since the epoch): sets *<day> to the day it is in
 * and returns whether that is another day than *<day> was, and sets
 * *<wait_ms> to the time to the next midnight, at most <max_ms>. */
bool day_watch(int32_t *day, int64_t (*clock_ms)(void *), void *arg, uint64_t max_ms,
               uint64_t *wait_ms);
/* Non-negative decimal integer, no sign, no spaces, at most <max>. */
int parse_uint(const char *s, uint64_t max, uint64_t *out);
/* A command-line option's whole number from <lo> to <hi>: decimal, a '-'
 * allowed, no '+' or spaces. Returns 0 with <*out> set; else -1 and, in
 * <why> (<cap> bytes), what is wrong, to follow the value in a usage error:
 * " is not a whole number (LO to HI)" or " is out of range (LO to HI)". */
int parse_int_option(const char *s, long lo, long hi, long *out, char *why, size_t cap);

/* Room format_uint() needs: the 20 digits of UINT64_MAX. */
#define FORMAT_UINT_MAX 20
/* Writes <v> in decimal at <out>, zero-padded to at least <width> digits (at
 * most FORMAT_UINT_MAX), without a NUL. Returns the number of digits
 * written, the only bytes of <out> it touches (FORMAT_UINT_MAX at most).
 * No printf: the gate formats ids, ports and timestamps with it on every
 * request. */
size_t format_uint(char *out, uint64_t v, unsigned width);

/* <ms> milliseconds as the struct timeval that libevent's timers take. */
struct timeval timeval_of_ms(uint64_t ms);
/* CLOCK_MONOTONIC now, in milliseconds: for deadlines that a change of the
 * wall clock must not move. */
uint64_t monotonic_ms(void);
/* CLOCK_MONOTONIC's time <ms> from now, for a bounded wait on that clock
 * (pthread_cond_timedwait() under a monotonic condition, a clock join). */
struct timespec monotonic_after(unsigned ms);
/* For a warning told at most once every <every_ms>: true when it is due at
 * <now> (monotonic_ms()), <*told_ms> being when it was told last (0:
 * never), which it then sets to <now>. */
bool tell_due(uint64_t *told_ms, uint64_t now, uint64_t every_ms);

#endif
