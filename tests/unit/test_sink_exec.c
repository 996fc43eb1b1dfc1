/* Unit tests for watch/sink_exec.c: alerts over the cap of programs
 * running or waiting are dropped and counted; the exit does not wait for
 * ever for a program that a SIGKILL does not end. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <time.h>

#include <event2/event.h>

#include "stderr_capture.h"

/* The unit's kill() calls, which the test can make do nothing (test_kill,
 * below): a program in uninterruptible sleep (D state: a read from a hung
 * NFS server) does not end on SIGKILL, and no test can put one there. */
static int test_kill(pid_t pid, int sig);
#define kill test_kill
/* And its thread creation (quiet_thread_create()), which the test can make
 * fail (EAGAIN: a --user at its RLIMIT_NPROC), which no test can arrange
 * for the thread alone. */
#include "util/quiet_thread.h"
static int test_quiet_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);
#define quiet_thread_create test_quiet_thread_create
#include "watch/sink_exec.c" /* the unit under test, internals included */
#undef quiet_thread_create
#undef kill

static int thread_refused; /* an errno: the unit's thread creation fails with it */

static int test_quiet_thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
    return thread_refused != 0 ? thread_refused : quiet_thread_create(t, fn, arg);
}

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
 * shows in sluice_exec_dropped_total rather than nowhere. Here the loop
 * never turns: one program is handed to the spawner thread, the others
 * wait, and the cap counts them all alike. */
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
    exec_runner_free(r); /* kills the one handed to the spawner thread */
    event_base_free(base);
    unlink(prog);
    rmdir(dir);
}

/* An alert, as the programs get it. */
static const char an_alert[] = "{\"event\":\"alert\"}\n";

/* What each of two programs may hold: its share of the running and of the
 * waiting. */
#define HALF_SHARE (SINK_EXEC_MAX_RUNNING / 2 + SINK_EXEC_MAX_WAITING / 2)

/* Two exec sinks' programs, one that hangs (until its 5 s kill), one that
 * reads its alert and ends, and a runner told of <programs> of them. */
struct two_sinks {
    char hdir[24], hung[64], fdir[24], fast[64];
    struct event_base *base;
    struct exec_runner *r;
};

static void two_sinks_start(struct two_sinks *t, size_t programs)
{
    snprintf(t->hdir, sizeof(t->hdir), "/tmp/sluice-exec-XXXXXX");
    snprintf(t->fdir, sizeof(t->fdir), "/tmp/sluice-exec-XXXXXX");
    write_program(t->hdir, t->hung, sizeof(t->hung), "exec sleep 30");
    write_program(t->fdir, t->fast, sizeof(t->fast), "exec cat >/dev/null");
    t->base = event_base_new();
    assert_non_null(t->base);
    t->r = exec_runner_new(t->base);
    assert_non_null(t->r);
    exec_runner_programs(t->r, programs);
}

static void two_sinks_end(struct two_sinks *t)
{
    exec_runner_free(t->r);
    event_base_free(t->base);
    unlink(t->hung);
    unlink(t->fast);
    rmdir(t->hdir);
    rmdir(t->fdir);
}

/* Two exec sinks, one a program that hangs (until its 5 s kill): it runs
 * and holds its share of the caps only, 8 running and 512 waiting, its
 * alerts beyond dropped; the other's alerts, raised after all of those,
 * neither wait behind them nor are dropped. Before, the first 16 alerts
 * of the hung program took every place, and the other's next alert waited
 * for their kill (two rounds of 5 s behind 30 alerts), or, behind 1040,
 * was dropped. */
static void a_hung_program_holds_its_share_not_the_other_sinks(void **state)
{
    (void)state;
    struct two_sinks t = {0};
    two_sinks_start(&t, 2);
    struct exec_runner *r = t.r;
    const size_t held = HALF_SHARE, extra = 30;
    for (size_t i = 0; i < held + extra; i++)
        exec_runner_run(r, t.hung, an_alert, sizeof(an_alert) - 1);
    assert_int_equal(exec_runner_busy(r), held);
    assert_int_equal(exec_runner_dropped(r), extra);
    alarm(20);
    /* the hung program's share starts */
    for (int i = 0; i < 2000 && r->running < SINK_EXEC_MAX_RUNNING / 2; i++)
        event_base_loop(t.base, EVLOOP_ONCE);
    assert_int_equal(r->running, SINK_EXEC_MAX_RUNNING / 2);
    exec_runner_run(r, t.fast, an_alert, sizeof(an_alert) - 1);
    assert_int_equal(exec_runner_busy(r), held + 1);
    assert_int_equal(exec_runner_dropped(r), extra);
    pid_t pid = started(t.base, r->kids[r->nkids - 1]);
    alarm(0);
    assert_true(pid > 0);
    /* before any kill (the loop turns until the next event: a kill 5 s
     * on); the drops count as failures */
    assert_int_equal(exec_runner_failures(r), extra);
    for (size_t i = 0; i < r->nkids; i++) /* none of the hung program's waiting ones started */
        if (strcmp(r->kids[i]->path, t.hung) == 0 && i >= SINK_EXEC_MAX_RUNNING / 2)
            assert_int_equal(r->kids[i]->pid, 0);
    two_sinks_end(&t);
}

static void free_saying(struct exec_runner *r, bool kills_ignored, const char *errpath, char *said,
                        size_t cap);

/* Two programs, both hung: the first drops 4 alerts past its share (told
 * at its 1st, 2nd and 4th drop), then the second drops 3. Each program's
 * drops are counted and told on their own: the second's first drop names
 * it, with its own count, and its 3rd, not told, is at exit. Before, the
 * count was the runner's: the second's drops were the 5th to 7th, no
 * power of two, and standard error never named the program that lost
 * them (nor did the exit: its line names no program). */
static void each_programs_drops_are_told_under_its_name(void **state)
{
    (void)state;
    struct two_sinks t = {0};
    two_sinks_start(&t, 2);
    struct stderr_capture cap;
    char said[8192], at_exit[4096], want[256];
    stderr_capture_begin(&cap);
    for (size_t i = 0; i < HALF_SHARE + 4; i++)
        exec_runner_run(t.r, t.hung, an_alert, sizeof(an_alert) - 1);
    for (size_t i = 0; i < HALF_SHARE + 3; i++)
        exec_runner_run(t.r, t.fast, an_alert, sizeof(an_alert) - 1);
    stderr_capture_end(&cap, said, sizeof(said));
    assert_int_equal(exec_runner_dropped(t.r), 7);
    /* (the runner's 1040 are full: the caps' words, not the share's) */
    snprintf(want, sizeof(want), "sluice: alert sink exec %s: too many alerts", t.fast);
    const char *fast = strstr(said, want);
    if (fast == NULL)
        fail_msg("the second program's drops are not told under its name:\n%s", said);
    assert_non_null(strstr(fast, "; 1 alert(s) dropped so far\n"));
    assert_non_null(strstr(fast, "; 2 alert(s) dropped so far\n"));
    snprintf(want, sizeof(want), "%s: too many of its alerts", t.hung);
    assert_non_null(strstr(said, want));
    assert_non_null(strstr(said, "; 4 alert(s) dropped so far\n"));

    free_saying(t.r, false, "/tmp/sluice-exec-said", at_exit, sizeof(at_exit));
    t.r = NULL;
    assert_non_null(strstr(at_exit, "sluice: alert sinks exec: 7 alert(s) dropped in all\n"));
    snprintf(want, sizeof(want), "sluice: alert sink exec %s: 3 alert(s) dropped in all\n", t.fast);
    if (strstr(at_exit, want) == NULL)
        fail_msg("the second program's untold drop is not said at exit:\n%s", at_exit);
    snprintf(want, sizeof(want), "%s: 4 alert(s) dropped in all", t.hung);
    assert_null(strstr(at_exit, want)); /* every one of its drops was told */
    two_sinks_end(&t);
}

/* A reload took the hung program out of the policy, which names one
 * program again, while its alerts still wait: they and the new program's
 * share the caps until they end, so the hung one's waiting alerts start
 * only up to half of the 16, and the new program's alert starts beside
 * them, not after their kill. */
static void a_program_a_reload_took_out_still_shares(void **state)
{
    (void)state;
    struct two_sinks t = {0};
    two_sinks_start(&t, 1);
    struct exec_runner *r = t.r;
    for (int i = 0; i < 20; i++)
        exec_runner_run(r, t.hung, "{}\n", 3);
    exec_runner_programs(r, 1); /* the reload: the fast program in its place */
    exec_runner_run(r, t.fast, "{}\n", 3);
    alarm(20);
    pid_t pid = started(t.base, r->kids[r->nkids - 1]);
    alarm(0);
    assert_true(pid > 0);
    /* before any kill (the loop turns until the next event: a kill 5 s on) */
    assert_int_equal(exec_runner_failures(r), 0);
    size_t hung_running = 0;
    for (size_t i = 0; i < r->nkids; i++)
        hung_running += strcmp(r->kids[i]->path, t.hung) == 0 && r->kids[i]->pid != 0;
    assert_true(hung_running <= SINK_EXEC_MAX_RUNNING / 2);
    two_sinks_end(&t);
}

/* Standard error, from dup2(<err>) to now, into <said> (<cap> bytes). */
static void read_said(const char *path, char *said, size_t cap)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    said[fread(said, 1, cap - 1, f)] = '\0';
    fclose(f);
}

/* exec_runner_free(<r>), the unit's kills reaching nothing when
 * <kills_ignored>, with what it says on standard error into <said> (<cap>
 * bytes); <errpath> holds it meanwhile. */
static void free_saying(struct exec_runner *r, bool kills_ignored, const char *errpath, char *said,
                        size_t cap)
{
    int err = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600), saved = dup(STDERR_FILENO);
    assert_true(err >= 0 && saved >= 0);
    fflush(stderr);
    dup2(err, STDERR_FILENO);
    kill_ignored = kills_ignored;
    exec_runner_free(r);
    kill_ignored = false;
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(err);
    read_said(errpath, said, cap);
    unlink(errpath);
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
    alarm(20);
    free_saying(r, true, errpath, said, sizeof(said));
    alarm(0);
    snprintf(want, sizeof(want), "pid %d did not end", (int)pid);
    assert_non_null(strstr(said, want));
    assert_int_equal(waitpid(pid, NULL, WNOHANG), 0); /* still there, not reaped */
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    event_base_free(base);
    unlink(prog);
    rmdir(dir);
}

/* A program on hung storage: a FUSE mount whose server never answers (not
 * even FUSE_INIT), so that the exec waits in the kernel until the
 * connection is aborted. exec_runner_run() returns at once (posix_spawn()
 * on the loop waited with the exec: the gateway froze); at exit, with the
 * kill made to reach nothing (an exec in an uninterruptible sleep), the
 * thread starting it is waited for a bounded time, then named and left;
 * once the exec ends (the connection aborted) that thread frees what it
 * holds (LeakSanitizer would see it otherwise). Skipped where no FUSE file
 * system can be mounted (not root, no /dev/fuse). */
static void a_start_whose_exec_hangs_holds_neither_the_loop_nor_the_exit(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-exec-XXXXXX", prog[64], opts[96], errpath[80], said[4096] = "";
    char task[64];
    assert_non_null(mkdtemp(dir));
    int fuse = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=%d,group_id=%d", fuse, (int)getuid(),
             (int)getgid());
    if (fuse < 0 || mount("sluice-test", dir, "fuse.sluicetest", 0, opts) != 0) {
        if (fuse >= 0)
            close(fuse);
        rmdir(dir);
        skip();
    }
    snprintf(prog, sizeof(prog), "%s/page", dir);
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct exec_runner *r = exec_runner_new(base);
    assert_non_null(r);
    alarm(20);
    exec_runner_run(r, prog, "{}\n", 3);
    assert_int_equal(exec_runner_busy(r), 1);
    assert_non_null(r->spawning);
    pid_t pid = 0;
    for (int i = 0; i < 500 && (pid = spawning_pid(r)) == 0; i++)
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000000L}, NULL);
    if (pid == 0) /* no /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN) */
        fail_msg("the program being started was not found among the thread's children");
    snprintf(task, sizeof(task), "/proc/self/task/%d", (int)r->sp->tid);

    snprintf(errpath, sizeof(errpath), "/tmp/sluice-exec-stderr-%d", (int)getpid());
    free_saying(r, true, errpath, said, sizeof(said));
    assert_non_null(strstr(said, "/page: its start (exec) did not end within 1000 ms"));
    assert_non_null(strstr(said, "1 alert(s) lost at exit: 1 program(s) killed while running"));

    close(fuse); /* aborts the connection: the exec fails, the thread ends */
    umount2(dir, MNT_DETACH);
    rmdir(dir);
    for (int i = 0; i < 500 && access(task, F_OK) == 0; i++)
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000000L}, NULL);
    assert_int_not_equal(access(task, F_OK), 0);
    alarm(0);
    event_base_free(base);
}

/* At exit, an alert whose program the spawner thread could not start
 * (here: no such file) before the loop heard of it was never run: the
 * exit's count says so, not that it was killed while running. */
static void a_start_that_failed_unheard_is_counted_never_started(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-exec-XXXXXX", prog[80], errpath[80], said[4096] = "";
    assert_non_null(mkdtemp(dir));
    snprintf(prog, sizeof(prog), "%s/no-such-program", dir);
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct exec_runner *r = exec_runner_new(base);
    assert_non_null(r);
    exec_runner_run(r, prog, "{}\n", 3);
    assert_non_null(r->spawning);
    bool failed = false;
    for (int i = 0; i < 500 && !failed; i++) {
        pthread_mutex_lock(&r->sp->mu);
        failed = r->sp->done != NULL;
        pthread_mutex_unlock(&r->sp->mu);
        if (!failed)
            nanosleep(&(struct timespec){.tv_nsec = 10 * 1000000L}, NULL);
    }
    assert_true(failed); /* the thread has told; the loop has not taken it */

    snprintf(errpath, sizeof(errpath), "%s/stderr", dir);
    free_saying(r, false, errpath, said, sizeof(said));
    rmdir(dir);
    assert_non_null(strstr(
        said, "1 alert(s) lost at exit: 0 program(s) killed while running, 1 never started"));
    event_base_free(base);
}

/* The spawner thread cannot be made (its thread creation fails with EAGAIN:
 * a --user at its RLIMIT_NPROC): that is the gateway's failure, and told
 * as such, not as the program's ('cannot run PATH: Resource temporarily
 * unavailable' sent the reader to the program); the alert is not run, and
 * counted like any the program could not run. */
static void a_spawner_thread_that_cannot_be_made_is_told_as_the_gateways(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-exec-XXXXXX", prog[64], errpath[80], said[4096] = "";
    write_program(dir, prog, sizeof(prog), "cat > /dev/null");
    snprintf(errpath, sizeof(errpath), "%s/stderr", dir);
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct exec_runner *r = exec_runner_new(base);
    assert_non_null(r);
    int err = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600), saved = dup(STDERR_FILENO);
    assert_true(err >= 0 && saved >= 0);
    fflush(stderr);
    dup2(err, STDERR_FILENO);
    thread_refused = EAGAIN;
    exec_runner_run(r, prog, "{}\n", 3);
    thread_refused = 0;
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(err);
    read_said(errpath, said, sizeof(said));
    unlink(errpath);
    assert_int_equal(exec_runner_busy(r), 0);
    assert_int_equal(exec_runner_failures(r), 1);
    assert_null(strstr(said, "cannot run: Resource"));
    assert_non_null(strstr(said, "/prog.sh: not run: the gateway cannot start the thread that "
                                 "starts programs: Resource temporarily unavailable"));
    exec_runner_free(r);
    event_base_free(base);
    unlink(prog);
    rmdir(dir);
}

/* A runner on a new <*base> whose spawner thread is made: a first alert
 * given to <prog> (a program that reads its input) has started. */
static struct exec_runner *runner_started(const char *prog, struct event_base **base)
{
    *base = event_base_new();
    assert_non_null(*base);
    struct exec_runner *r = exec_runner_new(*base);
    assert_non_null(r);
    exec_runner_run(r, prog, "{}\n", 3);
    assert_non_null(r->spawning);
    assert_true(started(*base, r->spawning) > 0);
    return r;
}

/* What failed for the gateway is there again: the next alert runs, the
 * failures stay <failures>; then <r>, <base> and <prog> in <dir> go. */
static void runs_again_then_free(struct exec_runner *r, struct event_base *base, char *prog,
                                 char *dir, uint64_t failures)
{
    exec_runner_run(r, prog, "{}\n", 3);
    assert_non_null(r->spawning);
    assert_true(started(base, r->spawning) > 0);
    assert_int_equal(exec_runner_failures(r), failures);
    exec_runner_free(r);
    event_base_free(base);
    unlink(prog);
    rmdir(dir);
}

/* The pipe to a program's standard input cannot be made (the gateway is
 * out of descriptors: EMFILE at its RLIMIT_NOFILE, here lowered to the
 * descriptors open): that is the gateway's failure too, told as such, not
 * as the program's ('cannot run: Too many open files' sent the reader to
 * the program); the alert is not run, counted like any the program could
 * not run, and the next one runs once descriptors are free again. */
static void a_pipe_the_gateway_cannot_make_is_told_as_the_gateways(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-exec-XXXXXX", prog[64], said[4096] = "";
    write_program(dir, prog, sizeof(prog), "cat > /dev/null");
    struct event_base *base;
    struct exec_runner *r = runner_started(prog, &base);

    struct stderr_capture cap;
    stderr_capture_begin(&cap);
    struct rlimit was, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &was), 0);
    int lowest = dup(STDIN_FILENO); /* the lowest free descriptor: none above is open */
    assert_true(lowest >= 0);
    close(lowest);
    low = was;
    low.rlim_cur = (rlim_t)lowest;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    uint64_t failed = exec_runner_failures(r);
    size_t busy = exec_runner_busy(r);
    exec_runner_run(r, prog, "{}\n", 3);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &was), 0);
    stderr_capture_end(&cap, said, sizeof(said));
    assert_int_equal(exec_runner_failures(r), failed + 1);
    assert_int_equal(exec_runner_busy(r), busy);
    assert_null(strstr(said, "cannot run: Too many"));
    assert_non_null(strstr(said, "/prog.sh: not run: the gateway cannot make the pipe to its "
                                 "standard input: Too many open files"));

    for (int i = 0; i < 1000 && exec_runner_busy(r) > 0; i++)
        event_base_loop(base, EVLOOP_ONCE);               /* the first ends */
    runs_again_then_free(r, base, prog, dir, failed + 1); /* descriptors again */
}

/* libevent's allocations fail while this is set (main() hands these to
 * libevent): how a gateway out of memory makes a program's events. */
static bool ev_alloc_fails;

static void *failing_malloc(size_t n)
{
    return ev_alloc_fails ? NULL : malloc(n);
}

static void *failing_realloc(void *p, size_t n)
{
    return ev_alloc_fails ? NULL : realloc(p, n);
}

/* A program whose write event or 5 s timer cannot be made is not started:
 * without its timer nothing would ever kill it, without the write event an
 * alert the pipe does not take at once would never reach it. Before, it
 * was started all the same, its events NULL. */
static void a_program_whose_events_cannot_be_made_is_not_started(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-exec-XXXXXX", prog[64], said[4096] = "";
    write_program(dir, prog, sizeof(prog), "cat > /dev/null");
    struct event_base *base;
    struct exec_runner *r = runner_started(prog, &base);
    for (int i = 0; i < 1000 && exec_runner_busy(r) > 0; i++)
        event_base_loop(base, EVLOOP_ONCE); /* it ends */
    assert_int_equal(exec_runner_busy(r), 0);

    struct stderr_capture cap;
    stderr_capture_begin(&cap);
    uint64_t failed = exec_runner_failures(r);
    ev_alloc_fails = true;
    exec_runner_run(r, prog, "{}\n", 3);
    ev_alloc_fails = false;
    stderr_capture_end(&cap, said, sizeof(said));
    assert_int_equal(exec_runner_failures(r), failed + 1);
    assert_int_equal(exec_runner_busy(r), 0);
    assert_null(r->spawning);
    assert_non_null(strstr(said, "/prog.sh: not run: the gateway cannot prepare its start"));

    runs_again_then_free(r, base, prog, dir, failed + 1); /* memory again */
}

/* A gateway that raised its own priority (serve --nice, -10 by default)
 * starts its programs at the nice it was started with, from their first
 * instruction: a program that forks at once must not leave its children
 * at the gateway's nice. Here the loop is not run while the program runs,
 * so nothing the loop does can put it back; the test's nice is raised by
 * 5 (no privilege needed), so the program must see the one before. Last:
 * the test's own nice stays raised (lowering it needs privilege). */
static void a_program_starts_at_the_nice_the_process_was_started_with(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-exec-XXXXXX", prog[64], line[320], seen[48], got[32] = "";
    errno = 0;
    int before = getpriority(PRIO_PROCESS, 0);
    assert_int_equal(errno, 0);
    if (before > 14)
        skip();
    snprintf(seen, sizeof(seen), "/tmp/sluice-exec-nice-%d", (int)getpid());
    snprintf(line, sizeof(line), "nice > %s.tmp; mv %s.tmp %s; cat > /dev/null", seen, seen, seen);
    write_program(dir, prog, sizeof(prog), line);
    char err[128];
    assert_int_equal(priority_apply(before + 5, true, err, sizeof(err)), 0);

    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct exec_runner *r = exec_runner_new(base);
    assert_non_null(r);
    exec_runner_run(r, prog, "{}\n", 3);
    for (int i = 0; i < 1000 && access(seen, F_OK) != 0; i++)
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000000L}, NULL);
    FILE *f = fopen(seen, "r");
    assert_non_null(f);
    got[fread(got, 1, sizeof(got) - 1, f)] = '\0';
    fclose(f);
    assert_int_equal(atoi(got), before);
    for (int i = 0; i < 1000 && exec_runner_busy(r) > 0; i++) /* fed, then ended */
        event_base_loop(base, EVLOOP_ONCE);
    exec_runner_free(r);
    event_base_free(base);
    unlink(seen);
    unlink(prog);
    rmdir(dir);
}

int main(void)
{
    event_set_mem_functions(failing_malloc, failing_realloc, free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(over_the_cap_alerts_are_dropped_and_counted),
        cmocka_unit_test(a_hung_program_holds_its_share_not_the_other_sinks),
        cmocka_unit_test(each_programs_drops_are_told_under_its_name),
        cmocka_unit_test(a_program_a_reload_took_out_still_shares),
        cmocka_unit_test(the_exit_does_not_wait_for_ever_for_a_program),
        cmocka_unit_test(a_start_whose_exec_hangs_holds_neither_the_loop_nor_the_exit),
        cmocka_unit_test(a_start_that_failed_unheard_is_counted_never_started),
        cmocka_unit_test(a_spawner_thread_that_cannot_be_made_is_told_as_the_gateways),
        cmocka_unit_test(a_pipe_the_gateway_cannot_make_is_told_as_the_gateways),
        cmocka_unit_test(a_program_whose_events_cannot_be_made_is_not_started),
        cmocka_unit_test(a_program_starts_at_the_nice_the_process_was_started_with),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
