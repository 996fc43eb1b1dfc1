/* quiet_thread: helper threads that take no signal (quiet_thread.h). */
#include "util/quiet_thread.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "util/units.h"

int quiet_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg)
{
    /* A new thread inherits its creator's mask: block everything around
     * the create, then put the creator's back. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(thread, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return e;
}

bool quiet_thread_job_end(pthread_mutex_t *mu, const bool *abandoned, bool *done, int wake_fd)
{
    pthread_mutex_lock(mu);
    bool gone = *abandoned;
    *done = true;
    if (!gone) {
        char one = 1;
        while (write(wake_fd, &one, 1) < 0 && errno == EINTR)
            continue;
    }
    pthread_mutex_unlock(mu);
    return gone;
}

bool quiet_thread_job_ended_within(int wake_fd, unsigned wait_ms)
{
    uint64_t deadline = monotonic_ms() + wait_ms;
    for (;;) {
        uint64_t now = monotonic_ms();
        struct pollfd pfd = {.fd = wake_fd, .events = POLLIN};
        int n = poll(&pfd, 1, now < deadline ? (int)(deadline - now) : 0);
        if (n > 0)
            return true;
        if (n == 0 || errno != EINTR)
            return false;
    }
}

/* GCC 12's ThreadSanitizer does not intercept pthread_clockjoin_np(): it
 * would not see the join's order, and took everything the caller frees
 * after it (the thread's mutex, its descriptors, its memory) for a race
 * with the thread it joined; nor the join itself, and a thread made later
 * under the same id ended the process ("dup thread"). A TSan build
 * (make tsan) polls the join it does see instead: the same bounded wait on
 * the monotonic clock, in 1 ms sleeps. */
#if defined(__SANITIZE_THREAD__)
#define JOIN_SEEN_BY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define JOIN_SEEN_BY_TSAN 1
#endif
#endif

int quiet_thread_join_until(pthread_t thread, const struct timespec *until)
{
#ifdef JOIN_SEEN_BY_TSAN
    for (;;) {
        int e = pthread_tryjoin_np(thread, NULL);
        if (e != EBUSY)
            return e;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > until->tv_sec ||
            (now.tv_sec == until->tv_sec && now.tv_nsec >= until->tv_nsec))
            return ETIMEDOUT;
        nanosleep(&(struct timespec){.tv_nsec = 1000000L}, NULL);
    }
#else
    return pthread_clockjoin_np(thread, NULL, CLOCK_MONOTONIC, until);
#endif
}
