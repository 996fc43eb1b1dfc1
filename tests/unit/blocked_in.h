/* blocked_in: whether a thread of this process waits in a given system
 * call, read from the kernel (/proc/self/task/TID/syscall) rather than
 * guessed from a sleep: a test waits on it for another thread to have
 * done all it could and gone back to its wait. Include after <cmocka.h>. */
#ifndef SLUICE_TESTS_BLOCKED_IN_H
#define SLUICE_TESTS_BLOCKED_IN_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* The calling thread's id, for another thread to look at. */
static inline pid_t blocked_in_self(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* The kernel's view of the thread <tid>'s system call, opened once: read
 * again at offset 0 it is made anew, and reading it takes no descriptor
 * (a test may have none left to give). The caller closes it. */
static inline int blocked_in_open(pid_t tid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0); /* CONFIG_HAVE_ARCH_TRACEHOOK: every arch sluice runs on */
    return fd;
}

/* True when the thread whose blocked_in_open() is <fd> is blocked in system
 * call <nr> or <alt> (a libc may make poll() a ppoll(); -1: none). The
 * kernel reports "running" for a thread that runs or is ready to (woken,
 * not yet scheduled): such a thread still has work, and is not counted as
 * waiting; nor is one that has ended (the read fails). */
static inline bool blocked_in(int fd, long nr, long alt)
{
    char line[256];
    ssize_t n = pread(fd, line, sizeof(line) - 1, 0);
    if (n < 0)
        return false;
    line[n] = '\0';
    long in;
    if (sscanf(line, "%ld", &in) != 1)
        return false; /* "running" */
    return in == nr || (alt >= 0 && in == alt);
}

/* Waits (1 ms steps, a hang guard of 10 s) until <done>(<arg>) holds, as
 * blocked_in() or any state read from the kernel. Returns false when it
 * never does, for a caller that has something to put back first. */
static inline bool waited_until(bool (*done)(void *arg), void *arg)
{
    for (int i = 0; i < 10000; i++) {
        if (done(arg))
            return true;
        nanosleep(&(struct timespec){.tv_nsec = 1000000L}, NULL);
    }
    return false;
}

/* waited_until(), failing the test with <what> when it never holds. */
static inline void wait_until(bool (*done)(void *arg), void *arg, const char *what)
{
    if (!waited_until(done, arg))
        fail_msg("waited 10 s for %s", what);
}

#endif
