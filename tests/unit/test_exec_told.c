/* test_exec_told: a program's count of failures is told when its own
 * minute ends, not when a later one does: the one timer is armed for the
 * earliest minute's end among the programs with a count, a program whose
 * minute ends before the one it was armed for included. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

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

/* The time left until <t>'s timer, in ms (it is armed). */
static uint64_t timer_left_ms(struct exec_told *t, struct event_base *base)
{
    struct timeval at, now;
    assert_true(evtimer_pending(t->timer, &at));
    assert_int_equal(event_base_gettimeofday_cached(base, &now), 0);
    int64_t left = ((int64_t)at.tv_sec - now.tv_sec) * 1000 + (at.tv_usec - now.tv_usec) / 1000;
    return left > 0 ? (uint64_t)left : 0;
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
    assert_true(timer_left_ms(t, base) > TELL_EVERY_MS / 2);
    exec_told_failure(t, "/b", "exited with status 3");
    said[0] = '\0';
    /* armed for /b's minute's end: 1 s (was /a's: 60 s) */
    assert_true(timer_left_ms(t, base) <= 1000);
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
