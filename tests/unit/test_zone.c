/* test_zone: an off-hours zone's local time, and what converting it does to
 * the process environment that other threads read without env_lock(). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "policy/zone.h"
#include "util/env.h"

extern char **environ;

/* Enough variables that the environment is an array of some size, which
 * glibc's setenv() grows with realloc() when it adds one */
#define FILLERS     200
#define MARK        "SLUICE_TEST_ZONE_MARK"
#define CONVERSIONS 2000
#define WALKS_MAX   10000000 /* the walker's bound, whatever the converter does */

struct walker {
    atomic_bool stop;
    unsigned long walks;
    unsigned long bad; /* walks that saw MARK other than once, or a TZ entry */
};

/* What an exec sink's child_env() (on the loop thread) or a library's
 * getenv() does while another thread converts a time: reads environ
 * without env_lock(). Every walk must see the marker exactly once and, as
 * a child would get them, no TZ (the operator set none). */
static void *walk_environ(void *arg)
{
    struct walker *w = arg;
    for (; w->walks < WALKS_MAX && !atomic_load(&w->stop); w->walks++) {
        char **env = environ;
        int marks = 0, tz = 0;
        for (size_t i = 0; env[i] != NULL; i++) {
            const char *kv = env_child_entry(env[i]);
            if (kv == NULL)
                continue;
            marks += strncmp(kv, MARK "=", sizeof(MARK)) == 0;
            tz += strncmp(kv, "TZ=", 3) == 0;
        }
        if (marks != 1 || tz != 0)
            w->bad++;
    }
    return NULL;
}

/* An off-hours zone's conversions on one thread (the loop's detectors, the
 * reload thread's loader) while another reads the environment: the
 * environment array must never move or lose an entry under the reader. */
static void test_conversions_leave_the_environment_to_other_threads(void **state)
{
    (void)state;
    char name[64];
    for (int i = 0; i < FILLERS; i++) {
        snprintf(name, sizeof(name), "SLUICE_TEST_ZONE_FILL%03d", i);
        assert_int_equal(setenv(name, "x", 1), 0);
    }
    assert_int_equal(setenv(MARK, "1", 1), 0);
    assert_null(getenv("TZ"));
    env_tz_pin(); /* as main() does, before any thread */
    char **before = environ;

    struct walker w = {.stop = false};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, walk_environ, &w), 0);
    time_t mon19 = 1717434000; /* 2024-06-03 17:00 UTC, 19:00 in Berlin */
    int wrong = 0;
    for (int i = 0; i < CONVERSIONS; i++) {
        struct tm tm;
        if (zone_localtime("Europe/Berlin", mon19, &tm) != 0 || tm.tm_hour != 19)
            wrong++;
    }
    atomic_store(&w.stop, true);
    pthread_join(t, NULL);
    printf("# %d conversions, %lu walks, %lu saw the environment other than it is\n", CONVERSIONS,
           w.walks, w.bad);
    assert_int_equal(wrong, 0);
    assert_int_equal(w.bad, 0);
    assert_ptr_equal(environ, before); /* the array never moved */
    assert_null(env_dup("TZ"));        /* the operator's (unset), as the loader reads it */
    assert_string_equal(getenv("TZ"), ":/etc/localtime");
}

/* Unpinned (no env_tz_pin(), which main() calls first), a conversion
 * never adds TZ: it says the zone could not be read, and gives UTC. */
static void test_unpinned_conversion_adds_no_variable(void **state)
{
    (void)state;
    char **before = environ;
    struct tm tm;
    time_t mon19 = 1717434000;
    assert_int_equal(zone_localtime("Europe/Berlin", mon19, &tm), 1);
    assert_int_equal(tm.tm_hour, 17); /* UTC's */
    assert_null(getenv("TZ"));
    assert_ptr_equal(environ, before);
}

int main(void)
{
    unsetenv("TZ"); /* the case where glibc's setenv() grows the array */
    const struct CMUnitTest tests[] = {
        /* first: the second pins TZ, for the rest of the process */
        cmocka_unit_test(test_unpinned_conversion_adds_no_variable),
        cmocka_unit_test(test_conversions_leave_the_environment_to_other_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
