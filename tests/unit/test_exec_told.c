/* test_exec_told: a program's count of failures is told when its own
 * minute ends, not when a later one does: the one timer is armed for the
 * earliest minute's end among the programs with a count, a program whose
 * minute ends before the one it was armed for included. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include <event2/event.h>

#include "watch/exec_told.c" /* the unit under test, internals included */

/* What the unit said, each "PATH: LINE\n", in order. */
static char said[1024];

static void say_into(const char *path, const char *line)
{
    size_t n = strlen(said);
    snprintf(said + n, sizeof(said) - n, "%s: %s\n", path, line);
}

static struct told *told_named(struct exec_told *t, const char *path)
{
    for (size_t i = 0; i < t->nprogs; i++)
        if (strcmp(t->progs[i].path, path) == 0)
            return &t->progs[i];
    return NULL;
}

static void on_nothing(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* Whether <t>'s timer (armed) is due no later than a timer armed now for
 * <ms> would be. Both deadlines are on libevent's own clock (a coarse
 * monotonic one: a tick of a few ms), so they compare exactly; measured
 * against the time of day (gettimeofday()), a timer armed for 1000 ms
 * seemed up to a tick further away (9 runs in 103 under load). */
static bool timer_due_within(struct exec_told *t, struct event_base *base, uint64_t ms)
{
    struct event *ref = evtimer_new(base, on_nothing, NULL);
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000 * 1000)}, at, ref_at;
    assert_non_null(ref);
    assert_int_equal(evtimer_add(ref, &tv), 0);
    assert_true(evtimer_pending(t->timer, &at));
    assert_true(evtimer_pending(ref, &ref_at));
    event_free(ref);
    return at.tv_sec < ref_at.tv_sec ||
           (at.tv_sec == ref_at.tv_sec && at.tv_usec <= ref_at.tv_usec);
}

/* /b was told 59 s ago, /a now. /a fails again: counted, the timer armed
 * for /a's minute's end, 60 s on. /b fails again: counted, its minute ends
 * in 1 s. The timer was left armed for /a's end, and /b's count told a
 * minute late, with /a's. */
static void a_count_is_told_at_its_own_minutes_end(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct exec_told *t = exec_told_new(base, say_into);
    assert_non_null(t);
    exec_told_failure(t, "/b", "exited with status 3");
    exec_told_failure(t, "/a", "exited with status 3");
    assert_string_equal(said, "/b: exited with status 3\n/a: exited with status 3\n");
    struct told *b = told_named(t, "/b");
    assert_non_null(b);
    b->told_ms -= TELL_EVERY_MS - 1000; /* told 59 s ago */
    exec_told_failure(t, "/a", "exited with status 3");
    assert_false(timer_due_within(t, base, TELL_EVERY_MS / 2));
    exec_told_failure(t, "/b", "exited with status 3");
    said[0] = '\0';
    /* armed for /b's minute's end: 1 s (was /a's: 60 s) */
    assert_true(timer_due_within(t, base, 1000));
    assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
    assert_string_equal(said, "/b: 1 more failure(s) since (told at most once a minute)\n");
    /* /a's count at the exit, as it is yet untold */
    said[0] = '\0';
    exec_told_free(t);
    assert_string_equal(said, "/a: 1 more failure(s) not told before the exit (told at most "
                              "once a minute)\n");
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_count_is_told_at_its_own_minutes_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
