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

/* Descriptor 2 on a small pipe, full, whose reader (returned,
 * non-blocking) reads nothing yet. */
static int stalled_stderr(int *saved)
{
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    (void)fcntl(p[1], F_SETPIPE_SZ, 4096);
    fcntl(p[1], F_SETFL, O_NONBLOCK);
    char fillbuf[512];
    memset(fillbuf, 'f', sizeof(fillbuf));
    fillbuf[sizeof(fillbuf) - 1] = '\n';
    while (write(p[1], fillbuf, sizeof(fillbuf)) > 0)
        ;
    fcntl(p[1], F_SETFL, 0); /* blocking, as an inherited standard error is */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pieces_are_whole_lines_up_to_max),
        cmocka_unit_test(test_unread_stderr_drops_and_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
