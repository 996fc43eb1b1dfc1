/* test_stderr_relay: the pieces a pipe gets, and a standard error nobody
 * reads: messages dropped and counted, never waited for, and the count told
 * once it is read again. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

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
    stderr_relay_stop(1000);
    assert_int_equal(stderr_relay_original(), STDERR_FILENO);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(rd);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pieces_are_whole_lines_up_to_max),
        cmocka_unit_test(test_unread_stderr_drops_and_counts),
        cmocka_unit_test(test_exit_copies_the_last_message),
        cmocka_unit_test(test_abort_copies_the_last_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
