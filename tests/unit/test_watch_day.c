/* Unit tests for watch/watch.c at a UTC midnight: a reload's grant gauges
 * and the watch's day (which its tick counts them again by) come from one
 * reading of the wall clock. The unit reads that clock through
 * day_clock_gettime() below, which can step over a midnight between two
 * readings. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

/* The wall clock as the unit reads it: the real one, or, once armed, the
 * first reading <first_s> and every later one <later_s> (Unix seconds). */
static bool clock_armed;
static int64_t clock_first_s, clock_later_s;
static unsigned clock_reads;

static int day_clock_gettime(clockid_t clk, struct timespec *ts)
{
    if (clk != CLOCK_REALTIME || !clock_armed)
        return clock_gettime(clk, ts);
    ts->tv_sec = (time_t)(clock_reads++ == 0 ? clock_first_s : clock_later_s);
    ts->tv_nsec = 0;
    return 0;
}

#define clock_gettime day_clock_gettime
#include "watch/watch.c" /* the unit under test, internals included */
#undef clock_gettime

/* A reload whose prepare reads 23:59:59 of a day and whose load reads the
 * next day's first second, to a policy with a grant whose last day is the
 * first one: once the watch has ticked on the second day, the gauges count
 * it expired. Before, the gauges were counted at the prepare (expiring)
 * and the watch's day taken at the load (the second one): its tick saw no
 * new day, and the gauges stayed a day behind until the next midnight. */
static void reload_across_midnight_counts_the_grants_of_the_new_day(void **state)
{
    (void)state;
    const int64_t day = 20000; /* 2024-10-04 */
    struct rule r = {.pattern = "api.example.test", .has_expires = true, .expires = (int32_t)day};
    struct policy empty = {0}, p = {0};
    empty.alerts.present = p.alerts.present = true;
    empty.alerts.expiry_warn_days = p.alerts.expiry_warn_days = 14;
    p.rules = &r;
    p.nrules = 1;
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct bus bus;
    struct alert_bus alerts;
    bus_init(&bus);
    alert_bus_init(&alerts);
    struct watch_config cfg = {0};
    char err[256] = "";
    clock_armed = true;
    clock_first_s = clock_later_s = day * 86400 - 3600; /* the day before */
    struct watch *w = watch_new(base, &bus, &alerts, &cfg, NULL, &empty, err, sizeof(err));
    assert_non_null(w);
    clock_reads = 0;
    clock_first_s = day * 86400 + 86399;
    clock_later_s = (day + 1) * 86400;
    const char *what = NULL;
    assert_int_equal(watch_policy_prepare(w, &p, &what), 0);
    watch_policy_loaded(w, &p);
    on_tick(-1, 0, w); /* the watch's tick, on the second day */
    struct evbuffer *out = evbuffer_new();
    assert_non_null(out);
    assert_int_equal(metrics_format(w->metrics, out), 0);
    size_t n = evbuffer_get_length(out);
    char *text = (char *)evbuffer_pullup(out, (ev_ssize_t)n);
    assert_non_null(text);
    char *copy = strndup(text, n);
    assert_non_null(copy);
    if (strstr(copy, "\nsluice_grants_expired 1\n") == NULL)
        fail_msg("the grant counted as of the day before:\n%s", strstr(copy, "sluice_grants"));
    free(copy);
    evbuffer_free(out);
    watch_free(w);
    event_base_free(base);
}

/* The real clock again, whether the test passed or failed. */
static int real_clock(void **state)
{
    (void)state;
    clock_armed = false;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(reload_across_midnight_counts_the_grants_of_the_new_day,
                                  real_clock),
    };
    return cmocka_run_group_tests_name("watch at a UTC midnight", tests, NULL, NULL);
}
