/* test_stderr_relay: the pieces a pipe gets, and a standard error nobody
 * reads: messages dropped and counted, never waited for, and the count told
 * once it is read again. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "blocked_in.h"
#include "util/stderr_relay.h"

static void test_pieces_are_whole_lines_up_to_max(void **state)
{
    (void)state;
    assert_int_equal(stderr_relay_piece("abc", 3, 8), 0);          /* no newline yet */
    assert_int_equal(stderr_relay_piece("ab\ncd", 5, 8), 3);       /* the whole line */
    assert_int_equal(stderr_relay_piece("ab\ncd\nef\n", 9, 8), 6); /* two fit, not three */
    assert_int_equal(stderr_relay_piece("ab\ncd\nef\n", 9, 9), 9);
    assert_int_equal(stderr_relay_piece("abcdefghij\nk\n", 13, 8), 11); /* a long line whole */
    assert_int_equal(stderr_relay_piece("", 0, 8), 0);
}

/* Makes the pipe of write end <wr> small and fills it with 'f' lines;
 * <wr> is left blocking, as an inherited standard error is. */
static void fill_small_pipe(int wr)
{
    (void)fcntl(wr, F_SETPIPE_SZ, 4096);
    fcntl(wr, F_SETFL, O_NONBLOCK);
    char fillbuf[512];
    memset(fillbuf, 'f', sizeof(fillbuf));
    fillbuf[sizeof(fillbuf) - 1] = '\n';
    while (write(wr, fillbuf, sizeof(fillbuf)) > 0)
        ;
    fcntl(wr, F_SETFL, 0);
}

/* Descriptor 2 on a small pipe, full, whose reader (returned,
 * non-blocking) reads nothing yet. */
static int stalled_stderr(int *saved)
{
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    fill_small_pipe(p[1]);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    fflush(stderr);
    *saved = dup(STDERR_FILENO);
    dup2(p[1], STDERR_FILENO);
    close(p[1]);
    return p[0];
}

/* Reads <arg> (a descriptor) to its end, waiting at most 10 s for each
 * piece. */
static void *drain_to_end(void *arg)
{
    int fd = *(int *)arg;
    char buf[4096];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0)
            break;
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            break;
    }
    return NULL;
}

/* Stops the relay while its original standard error (read end <rd>) is
 * read, so that the thread ends rather than staying blocked on it (a later
 * relay of this process would share the pipe with it), then gives
 * descriptor 2 back (<saved>) and closes both. */
static void stop_reading(int rd, int saved)
{
    pthread_t reader;
    assert_int_equal(pthread_create(&reader, NULL, drain_to_end, &rd), 0);
    stderr_relay_stop(10000);
    assert_int_equal(stderr_relay_original(), STDERR_FILENO);
    dup2(saved, STDERR_FILENO);
    close(saved);
    assert_int_equal(pthread_join(reader, NULL), 0);
    close(rd);
}

static void test_unread_stderr_drops_and_counts(void **state)
{
    (void)state;
    int saved;
    int rd = stalled_stderr(&saved);
    char err[256];
    alarm(60); /* a write that blocks fails the test instead of hanging it */
    assert_int_equal(stderr_relay_start(err, sizeof(err)), 0);
    int keep = stderr_relay_original();
    assert_true(keep != STDERR_FILENO);
    /* Far more than the relay's pipe holds: without the relay the first
     * fprintf() would block for ever. */
    for (int i = 0; i < 5000; i++)
        fprintf(stderr, "sluice: message %d, long enough to fill a pipe soon enough\n", i);
    assert_false(ferror(stderr)); /* what was dropped leaves no sticky error */
    assert_true(stderr_relay_dropped() > 0);
    alarm(0);
    /* Read again: the messages, whole, then how many were dropped. */
    char *got = calloc(1, 1 << 20);
    size_t have = 0;
    for (int tries = 0; tries < 400 && strstr(got, "to standard error dropped") == NULL;) {
        ssize_t n = read(rd, got + have, (1 << 20) - 1 - have);
        if (n > 0) {
            have += (size_t)n;
            continue;
        }
        usleep(10000);
        tries++;
    }
    assert_non_null(strstr(got, "sluice: message 0, long enough"));
    const char *told =
        strstr(got, "line(s) to standard error dropped: it was not read fast enough\n");
    assert_non_null(told);
    for (char *line = got; *line != '\0';) {
        char *end = strchr(line, '\n');
        assert_non_null(end);
        *end = '\0';
        assert_true(line[0] == 'f' || strncmp(line, "sluice: ", 8) == 0);
        line = end + 1;
    }
    free(got);
    stop_reading(rd, saved);
}

/* Reads <fd> (non-blocking) into <got> (<cap> bytes, NUL-terminated, <*have>
 * so far) until <done>(<got>, <*have>) holds, at most about 4 s. */
static void read_until(int fd, char *got, size_t cap, size_t *have,
                       bool (*done)(const char *, size_t))
{
    for (int tries = 0; tries < 400 && !done(got, *have);) {
        ssize_t n = read(fd, got + *have, cap - 1 - *have);
        if (n > 0) {
            *have += (size_t)n;
            got[*have] = '\0';
            continue;
        }
        usleep(10000);
        tries++;
    }
}

static bool cut_line_read(const char *got, size_t have)
{
    return have > 0 && got[have - 1] == '\n' && memchr(got, 'L', have) != NULL;
}

static bool after_cut_read(const char *got, size_t have)
{
    (void)have;
    return strstr(got, "sluice: after the cut\n") != NULL;
}

/* A message longer than the relay's pipe holds, written while standard
 * error is not read: the pipe takes its start, the rest is dropped. The cut
 * line must still end on the original standard error, so that what comes
 * next there starts a line of its own: the next message, the count of
 * drops, or (`--log -` with `2>&1`) a decision line written to the same
 * pipe by another descriptor. */
static void test_cut_line_ends_before_what_follows(void **state)
{
    (void)state;
    int saved;
    int rd = stalled_stderr(&saved);
    char err[256];
    alarm(60);
    assert_int_equal(stderr_relay_start(err, sizeof(err)), 0);
    int keep = stderr_relay_original();
    uint64_t before = stderr_relay_dropped();
    enum { LONG_LINE = 256 * 1024, GOT = 1 << 20 };
    char *big = malloc(LONG_LINE + 1);
    assert_non_null(big);
    memset(big, 'L', LONG_LINE);
    big[LONG_LINE] = '\0';
    fprintf(stderr, "%s\n", big);
    free(big);
    assert_int_equal(stderr_relay_dropped(), before + 1); /* the one line cut */
    alarm(0);
    char *got = calloc(1, GOT);
    size_t have = 0;
    read_until(rd, got, GOT, &have, cut_line_read);
    static const char decision[] = "{\"event\":\"agent_egress\"}\n";
    assert_int_equal(write(keep, decision, sizeof(decision) - 1), sizeof(decision) - 1);
    fprintf(stderr, "sluice: after the cut\n");
    read_until(rd, got, GOT, &have, after_cut_read);
    assert_non_null(strstr(got, decision));
    assert_non_null(strstr(got, "sluice: after the cut\n"));
    bool cut = false;
    for (char *line = got; *line != '\0';) {
        char *end = strchr(line, '\n');
        assert_non_null(end);
        *end = '\0';
        size_t len = strlen(line);
        if (line[0] == 'L') {
            assert_int_equal(strspn(line, "L"), len); /* nothing glued onto it */
            cut = true;
        } else if (line[0] == '{') {
            assert_string_equal(line, "{\"event\":\"agent_egress\"}");
        } else {
            assert_true(strspn(line, "f") == len || strncmp(line, "sluice: ", 8) == 0);
        }
        line = end + 1;
    }
    assert_true(cut);
    free(got);
    stop_reading(rd, saved);
}

/* A reader of stderr_relay_original() on another thread (a log's writer
 * thread reopening its file, a spawner left in an exec) while the loop's
 * thread stops the relay, and what it got that is not a descriptor. */
struct original_reader {
    atomic_bool stop;
    atomic_int bad; /* a value below 0: no descriptor at all */
    atomic_ulong reads;
};

static void *read_original(void *arg)
{
    struct original_reader *o = arg;
    while (!atomic_load(&o->stop)) {
        if (stderr_relay_original() < 0)
            atomic_fetch_add(&o->bad, 1);
        atomic_fetch_add(&o->reads, 1);
    }
    return NULL;
}

/* Another thread asks for the original standard error while the relay
 * stops: it gets that descriptor or descriptor 2, never -1 (the stop used
 * to set the descriptor to -1 before it said the relay no longer ran). */
static void test_original_read_while_the_relay_stops(void **state)
{
    (void)state;
    enum { ROUNDS = 1000 };
    struct original_reader o = {.stop = false};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, read_original, &o), 0);
    for (int i = 0; i < ROUNDS; i++) {
        char err[256];
        assert_int_equal(stderr_relay_start(err, sizeof(err)), 0);
        unsigned long before = atomic_load(&o.reads);
        for (int spins = 0; spins < 100000 && atomic_load(&o.reads) == before; spins++)
            sched_yield(); /* the reader runs while the relay does */
        stderr_relay_stop(10000);
    }
    atomic_store(&o.stop, true);
    assert_int_equal(pthread_join(t, NULL), 0);
    printf("# %d stops, %lu reads, %d of them -1\n", ROUNDS, atomic_load(&o.reads),
           atomic_load(&o.bad));
    assert_int_equal(atomic_load(&o.bad), 0);
}

/* A user of the original standard error (an exec sink's start, queued to
 * the spawner thread; a log reopened on its own thread) takes the number,
 * then uses it a while later, as the relay stops beside it. */
struct original_user {
    atomic_bool stop;
    atomic_uint round; /* bumped by the stopper once the relay runs */
    atomic_uint held;  /* the round whose descriptor (not 2) the user holds */
    atomic_uint used;  /* the round it has used and let go */
    dev_t dev;         /* the original standard error's file */
    ino_t ino;
    atomic_int bad; /* uses that found no descriptor, or another file */
};

static void *use_original(void *arg)
{
    struct original_user *u = arg;
    unsigned done = 0;
    while (!atomic_load(&u->stop)) {
        unsigned round = atomic_load(&u->round);
        if (round == done) {
            sched_yield();
            continue;
        }
        int fd = stderr_relay_hold();
        if (fd == STDERR_FILENO) { /* not yet running: ask again */
            stderr_relay_release();
            continue;
        }
        atomic_store(&u->held, round);
        usleep(20000); /* its work: the stop comes meanwhile */
        struct stat st;
        if (fstat(fd, &st) != 0 || st.st_dev != u->dev || st.st_ino != u->ino)
            atomic_fetch_add(&u->bad, 1);
        stderr_relay_release();
        atomic_store(&u->used, round);
        done = round;
    }
    return NULL;
}

/* Whether <*v> is <want> within some 10 s (a hang guard). */
static bool reached(atomic_uint *v, unsigned want)
{
    for (int tries = 0; tries < 10000 && atomic_load(v) != want; tries++)
        usleep(1000);
    return atomic_load(v) == want;
}

/* The relay stops while a user holds the original standard error's
 * number: the number must still be that file when the user gets to it
 * (the stop closed it at once: EBADF, or another file that took the
 * number). */
static void test_a_stop_leaves_a_user_its_descriptor(void **state)
{
    (void)state;
    enum { ROUNDS = 20 };
    struct stat st;
    assert_int_equal(fstat(STDERR_FILENO, &st), 0);
    struct original_user u = {.dev = st.st_dev, .ino = st.st_ino};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, use_original, &u), 0);
    for (unsigned i = 1; i <= ROUNDS; i++) {
        char err[256];
        assert_int_equal(stderr_relay_start(err, sizeof(err)), 0);
        atomic_store(&u.round, i);
        assert_true(reached(&u.held, i));
        stderr_relay_stop(10000);
        assert_true(reached(&u.used, i));
    }
    atomic_store(&u.stop, true);
    assert_int_equal(pthread_join(t, NULL), 0);
    printf("# %d stops beside a user, %d uses that found no descriptor or another file\n", ROUNDS,
           atomic_load(&u.bad));
    assert_int_equal(atomic_load(&u.bad), 0);
}

/* While <realtime_behind>, CLOCK_REALTIME reads a day behind the kernel's:
 * as if the wall clock were stepped a day forward right after it is read
 * (NTP, a virtual machine resumed). */
static bool realtime_behind;
int clock_gettime(clockid_t clk, struct timespec *ts)
{
    long rc = syscall(SYS_clock_gettime, clk, ts);
    if (rc == 0 && clk == CLOCK_REALTIME && realtime_behind)
        ts->tv_sec -= 86400;
    return rc == 0 ? 0 : -1;
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

/* The stop of the test below: called (the wall clock stepped), returned. */
static atomic_bool stop_called, stop_returned;

/* The stalled standard error's read end, and blocked_in_open() of the
 * thread that stops the relay. */
struct late_read {
    int rd;
    int stopper;
};

/* The stop waits for the relay's thread (in a futex: its join), or has
 * returned without waiting. */
static bool stop_waits(void *arg)
{
    const struct late_read *l = arg;
#ifdef SYS_futex
    long futex = SYS_futex;
#else
    long futex = SYS_futex_time64;
#endif
#if defined(__SANITIZE_THREAD__)
    long nanosleep_nr = SYS_clock_nanosleep; /* the TSan build's join polls (quiet_thread.c) */
#else
    long nanosleep_nr = -1;
#endif
    bool waits = blocked_in(l->stopper, futex, nanosleep_nr);
    return atomic_load(&stop_returned) || (atomic_load(&stop_called) && waits);
}

/* Reads the stalled standard error (non-blocking) once the stop waits for
 * it, until the message of the test below has come. */
static void *late_reader(void *arg)
{
    const struct late_read *l = arg;
    int rd = l->rd;
    static char got[1 << 16];
    size_t have = 0;
    (void)waited_until(stop_waits, arg); /* else the test fails on its own */
    for (int tries = 0; tries < 1000 && strstr(got, "sluice: the stop waits\n") == NULL;) {
        ssize_t n = read(rd, got + have, sizeof(got) - 1 - have);
        if (n > 0) {
            have += (size_t)n;
            got[have] = '\0';
            if (have > sizeof(got) / 2) { /* only the end matters */
                memmove(got, got + have / 2, have - have / 2 + 1);
                have -= have / 2;
            }
            continue;
        }
        usleep(10000);
        tries++;
    }
    return NULL;
}

/* The stop waits for the thread to copy what it holds (here until standard
 * error is read, which waits for the stop to wait) however the wall clock
 * moves meanwhile: the thread ends, and the relay's descriptors are
 * closed. */
static void test_stop_waits_on_a_steady_clock(void **state)
{
    (void)state;
    int saved;
    struct late_read l = {.rd = stalled_stderr(&saved),
                          .stopper = blocked_in_open(blocked_in_self())};
    int fds = open_fds();
    char err[256];
    assert_int_equal(stderr_relay_start(err, sizeof(err)), 0);
    fprintf(stderr, "sluice: the stop waits\n");
    pthread_t reader;
    assert_int_equal(pthread_create(&reader, NULL, late_reader, &l), 0);
    realtime_behind = true;
    atomic_store(&stop_called, true);
    stderr_relay_stop(10000);
    atomic_store(&stop_returned, true);
    realtime_behind = false;
    assert_int_equal(pthread_join(reader, NULL), 0);
    assert_int_equal(open_fds(), fds); /* not left to a thread still blocked */
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(l.rd);
    close(l.stopper);
}

/* The child's own exit handler, registered after the relay's and so run
 * before it: tells the parent the child is in exit(). */
static int exiting_fd = -1;
static void say_exiting(void)
{
    ssize_t w = write(exiting_fd, "x", 1);
    (void)w;
}

/* Makes pipe <p> and forks: 0 in the child (20 s to live, <p>'s read end
 * closed), the child's pid in the parent. */
static pid_t fork_with_pipe(int p[2])
{
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        close(p[0]);
    }
    return pid;
}

/* In a forked child: standard error becomes <wr> (closed after), then
 * the relay starts (or the child exits 99). */
static void child_relays_to(int wr)
{
    dup2(wr, STDERR_FILENO);
    close(wr);
    char err[256];
    if (stderr_relay_start(err, sizeof(err)) < 0)
        _exit(99);
}

/* Reads <fd> to its end into <got> (<cap> bytes, NUL-terminated), then
 * closes it. */
static void read_to_end(int fd, char *got, size_t cap)
{
    size_t have = 0;
    ssize_t n;
    while ((n = read(fd, got + have, cap - 1 - have)) > 0 || (n < 0 && errno == EINTR))
        have += n > 0 ? (size_t)n : 0;
    got[have] = '\0';
    close(fd);
}

/* exit() while the relay runs and its thread waits on a full standard
 * error: the last message, still in the relay's pipe, must reach the
 * original standard error once it is read, not die with the process. */
static void test_exit_copies_the_last_message(void **state)
{
    (void)state;
    int p[2], sync[2];
    assert_int_equal(pipe2(sync, O_CLOEXEC), 0);
    pid_t pid = fork_with_pipe(p);
    if (pid == 0) {
        close(sync[0]);
        exiting_fd = sync[1];
        fill_small_pipe(p[1]);
        child_relays_to(p[1]);
        atexit(say_exiting);
        fprintf(stderr, "sluice: the last word\n");
        exit(3);
    }
    close(p[1]);
    close(sync[1]);
    char c;
    while (read(sync[0], &c, 1) < 0 && errno == EINTR)
        ;
    close(sync[0]);
    /* Only now is its standard error read: once the child is gone, or
     * once its descriptor 2 is the original standard error again (the
     * relay's exit handler at work), not while the relay still runs. */
    char mine[64] = "", path[64], its[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", p[0]); /* "pipe:[inode]", both ends */
    assert_true(readlink(path, mine, sizeof(mine) - 1) > 0);
    snprintf(path, sizeof(path), "/proc/%d/fd/2", (int)pid);
    for (int tries = 0; tries < 2000; tries++) {
        siginfo_t si = {0};
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
            break;
        memset(its, 0, sizeof(its));
        if (readlink(path, its, sizeof(its) - 1) > 0 && strcmp(its, mine) == 0)
            break;
        usleep(1000);
    }
    char *got = calloc(1, 1 << 16);
    read_to_end(p[0], got, 1 << 16);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_non_null(strstr(got, "sluice: the last word\n"));
    free(got);
}

/* abort() right after a message written straight to descriptor 2 (as
 * glibc's fatal messages are): the message reaches the original standard
 * error before the process ends, where it was left in the pipe. */
static void test_abort_copies_the_last_message(void **state)
{
    (void)state;
    int p[2];
    pid_t pid = fork_with_pipe(p);
    if (pid == 0) {
        child_relays_to(p[1]);
        static const char msg[] = "malloc(): corrupted top size\n";
        if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
            _exit(98);
        abort();
    }
    close(p[1]);
    char got[4096];
    read_to_end(p[0], got, sizeof(got));
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    assert_non_null(strstr(got, "malloc(): corrupted top size\n"));
}

/* A stop that timed out (standard error not read) leaves the thread
 * blocked in its write, with the relay's descriptors. A start after it
 * must not begin while that thread lives: the thread reads R.rd and
 * writes R.orig as it loops, and would have taken the new relay's pipe
 * and standard error as its own (two threads on one pipe and one buffer).
 * It fails, naming why, and leaves standard error as it was. */
static void test_no_start_while_a_stopped_thread_lives(void **state)
{
    (void)state;
    int p[2], res[2];
    assert_int_equal(pipe2(res, O_CLOEXEC), 0);
    pid_t pid = fork_with_pipe(p);
    if (pid == 0) {
        close(res[0]);
        fill_small_pipe(p[1]);
        child_relays_to(p[1]);
        fprintf(stderr, "sluice: a line the full standard error holds up\n");
        stderr_relay_stop(50); /* times out: nobody reads p[0] */
        char err[256] = "";
        int rc = stderr_relay_start(err, sizeof(err));
        int code = rc == 0                                    ? 1
                   : strstr(err, "has not ended") == NULL     ? 2
                   : stderr_relay_original() != STDERR_FILENO ? 3
                                                              : 0;
        ssize_t w = write(res[1], err, strlen(err)); /* descriptor 2 is full */
        (void)w;
        _exit(code);
    }
    close(p[1]);
    close(res[1]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid); /* p[0] unread until then */
    char err[256];
    read_to_end(res[0], err, sizeof(err));
    close(p[0]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("child status %d, start said: %s", st, err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pieces_are_whole_lines_up_to_max),
        cmocka_unit_test(test_unread_stderr_drops_and_counts),
        cmocka_unit_test(test_cut_line_ends_before_what_follows),
        cmocka_unit_test(test_original_read_while_the_relay_stops),
        cmocka_unit_test(test_a_stop_leaves_a_user_its_descriptor),
        cmocka_unit_test(test_stop_waits_on_a_steady_clock),
        cmocka_unit_test(test_exit_copies_the_last_message),
        cmocka_unit_test(test_abort_copies_the_last_message),
        cmocka_unit_test(test_no_start_while_a_stopped_thread_lives),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
