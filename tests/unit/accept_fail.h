/* accept_fail: makes the next accept4()/accept() of a unit test fail with a
 * chosen error (both are interposed: define them once per test program, by
 * including this), counts the calls, and captures what the code under test writes to standard
 * error meanwhile. Include after <cmocka.h>. */
#ifndef SLUICE_TESTS_ACCEPT_FAIL_H
#define SLUICE_TESTS_ACCEPT_FAIL_H

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "stderr_capture.h"

/* The next accept4()/accept() fails with this error when not 0. */
static int fail_next_accept;
/* How many accept4()/accept() calls were made, failed ones included. */
static int accept_calls;

static int take_failure(void)
{
    accept_calls++;
    int e = fail_next_accept;
    fail_next_accept = 0;
    errno = e;
    return e;
}

int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
    if (take_failure() != 0)
        return -1;
    int (*real)(int, struct sockaddr *, socklen_t *, int) =
        (int (*)(int, struct sockaddr *, socklen_t *, int))dlsym(RTLD_NEXT, "accept4");
    return real(fd, sa, len, flags);
}

int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
    if (take_failure() != 0)
        return -1;
    int (*real)(int, struct sockaddr *, socklen_t *) =
        (int (*)(int, struct sockaddr *, socklen_t *))dlsym(RTLD_NEXT, "accept");
    return real(fd, sa, len);
}

/* <accept_after> makes one accept() of a fresh server fail with an error
 * while a client waits, runs the loop a bounded number of rounds, and says
 * whether the client was taken and what went to standard error meanwhile.
 * An error about the one connection accept() dequeued (a client that
 * reset, EPROTO; a firewall's refusal, EPERM) must not pause the server:
 * the client is taken at once, nothing said about pausing. Out of
 * descriptors (EMFILE) it pauses and says <emfile_said>. */
static inline void check_accept_errors(bool (*accept_after)(int err, char *said, size_t cap),
                                       const char *emfile_said)
{
    static const int per_conn[] = {EPROTO, EPERM, ENETUNREACH, EHOSTUNREACH};
    char said[512];
    for (size_t i = 0; i < sizeof(per_conn) / sizeof(per_conn[0]); i++) {
        bool ok = accept_after(per_conn[i], said, sizeof(said));
        if (!ok || strstr(said, "pausing") != NULL)
            fail_msg("after %s: accepted %d, said \"%s\"", strerror(per_conn[i]), ok, said);
    }
    (void)accept_after(EMFILE, said, sizeof(said));
    if (strstr(said, emfile_said) == NULL)
        fail_msg("after EMFILE: said \"%s\", not \"%s\"", said, emfile_said);
}

#endif
