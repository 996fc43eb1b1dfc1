/* Unit tests for watch/sink_exec.c: alerts over the cap of programs
 * running or waiting are dropped and counted; the exit does not wait for
 * ever for a program that a SIGKILL does not end. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

/* The unit's kill() calls, which the test can make do nothing (test_kill,
 * below): a program in uninterruptible sleep (D state: a read from a hung
 * NFS server) does not end on SIGKILL, and no test can put one there. */
static int test_kill(pid_t pid, int sig);
#define kill test_kill
#include "watch/sink_exec.c" /* the unit under test, internals included */
#undef kill

static bool kill_ignored; /* true: the unit's kills reach nothing */

static int test_kill(pid_t pid, int sig)
{
    return kill_ignored ? 0 : kill(pid, sig);
}

/* A program at <prog> (a path in <dir>, made) that runs the shell <line>. */
static void write_program(char *dir, char *prog, size_t cap, const char *line)
{
    assert_non_null(mkdtemp(dir));
    snprintf(prog, cap, "%s/prog.sh", dir);
    FILE *f = fopen(prog, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n%s\n", line);
    fclose(f);
    assert_int_equal(chmod(prog, 0755), 0);
}

/* Runs <base>'s loop until <k>'s program has started: the spawner thread
 * starts it and tells the loop. Returns its pid. */
static pid_t started(struct event_base *base, const struct child *k)
{
    for (int i = 0; i < 1000 && k->pid == 0; i++)
        event_base_loop(base, EVLOOP_ONCE);
    return k->pid;
}

/* An alert storm (an agent contacting hundreds of made-up hosts, each a
 * first_contact alert) against a program that takes its time: 16 run, 1024
 * wait, and each alert beyond is dropped and counted, so that the loss
 * shows in sluice_exec_dropped_total rather than nowhere. */
static void over_the_cap_alerts_are_dropped_and_counted(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-exec-XXXXXX", prog[64];
    write_program(dir, prog, sizeof(prog), "exec sleep 30");

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
    exec_runner_free(r); /* kills the one started */
    event_base_free(base);
    unlink(prog);
    rmdir(dir);
}

/* At exit a running program is killed and waited for; one that the
 * SIGKILL does not end (here: the kill made to reach nothing) is waited for
 * a bounded time, then named on standard error and left, rather than
 * holding the gateway's exit for ever. Without the bound, the alarm ends
 * the test (SIGALRM). */
static void the_exit_does_not_wait_for_ever_for_a_program(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-exec-XXXXXX", prog[64], errpath[80], want[64], said[4096] = "";
    write_program(dir, prog, sizeof(prog), "exec sleep 60");
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct exec_runner *r = exec_runner_new(base);
    assert_non_null(r);
    exec_runner_run(r, prog, "{}\n", 3);
    assert_int_equal(exec_runner_busy(r), 1);
    alarm(20);
    pid_t pid = started(base, r->kids[0]);
    alarm(0);
    assert_true(pid > 0);

    snprintf(errpath, sizeof(errpath), "%s/stderr", dir);
    int err = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600), saved = dup(STDERR_FILENO);
    assert_true(err >= 0 && saved >= 0);
    fflush(stderr);
    dup2(err, STDERR_FILENO);
    kill_ignored = true;
    alarm(20);
    exec_runner_free(r);
    alarm(0);
    kill_ignored = false;
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(err);

    FILE *f = fopen(errpath, "r");
    assert_non_null(f);
    said[fread(said, 1, sizeof(said) - 1, f)] = '\0';
    fclose(f);
    snprintf(want, sizeof(want), "pid %d did not end", (int)pid);
    assert_non_null(strstr(said, want));
    assert_int_equal(waitpid(pid, NULL, WNOHANG), 0); /* still there, not reaped */
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    event_base_free(base);
    unlink(errpath);
    unlink(prog);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(over_the_cap_alerts_are_dropped_and_counted),
        cmocka_unit_test(the_exit_does_not_wait_for_ever_for_a_program),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
