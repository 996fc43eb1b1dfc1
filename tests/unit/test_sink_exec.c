/* Unit tests for watch/sink_exec.c: alerts over the cap of programs
 * running or waiting are dropped and counted. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "watch/sinks.h"

/* An alert storm (an agent contacting hundreds of made-up hosts, each a
 * first_contact alert) against a program that takes its time: 16 run, 1024
 * wait, and each alert beyond is dropped and counted, so that the loss
 * shows in sluice_exec_dropped_total rather than nowhere. */
static void over_the_cap_alerts_are_dropped_and_counted(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-exec-XXXXXX", prog[64];
    assert_non_null(mkdtemp(dir));
    snprintf(prog, sizeof(prog), "%s/slow.sh", dir);
    FILE *f = fopen(prog, "w");
    assert_non_null(f);
    fputs("#!/bin/sh\nexec sleep 30\n", f);
    fclose(f);
    assert_int_equal(chmod(prog, 0755), 0);

    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct exec_runner *r = exec_runner_new(base);
    assert_non_null(r);
    const char alert[] = "{\"event\":\"alert\"}\n";
    const int cap = SINK_EXEC_MAX_RUNNING + SINK_EXEC_MAX_WAITING, extra = 60;
    for (int i = 0; i < cap + extra; i++)
        exec_runner_run(r, prog, alert, sizeof(alert) - 1);
    assert_int_equal(exec_runner_busy(r), cap);
    assert_int_equal(exec_runner_dropped(r), extra);
    exec_runner_free(r); /* kills the 16 that run */
    event_base_free(base);
    unlink(prog);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(over_the_cap_alerts_are_dropped_and_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
