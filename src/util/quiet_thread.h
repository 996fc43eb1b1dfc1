/* quiet_thread: a helper thread that takes none of the process's signals.
 *
 * The gateway's signals (SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGCHLD) belong to
 * the event loop's thread, whose libevent handlers take them; a helper thread
 * (the background reload, the WAL checkpointer, the standard-error relay,
 * the exec sinks' spawner) starts with every signal blocked so that the
 * kernel never delivers one to it. quiet_thread_job_end() ends the job of
 * such a thread that its owner may have left at exit (the background
 * reload, a log's reopen, the start-up policy load), and
 * quiet_thread_job_ended_within() is its owner's bounded wait for that end.
 * Owns nothing. */
#ifndef SLUICE_UTIL_QUIET_THREAD_H
#define SLUICE_UTIL_QUIET_THREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

/* Starts <fn>(<arg>) on a new joinable thread, into <*thread>, with every
 * signal blocked; the caller's mask is as it was on return. Returns 0, or
 * pthread_create()'s error. */
int quiet_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg);

/* The end of a helper thread's job whose owner may have left it (a call
 * stuck in a file system, given up at exit): under <mu>, sets <*done> and,
 * unless <*abandoned>, writes one byte to <wake_fd>, the owner's wake-up.
 * Returns <*abandoned>: then the job is the thread's to free. */
bool quiet_thread_job_end(pthread_mutex_t *mu, const bool *abandoned, bool *done, int wake_fd);

/* Whether the job's byte (quiet_thread_job_end()'s) came on <wake_fd>, the
 * read end of its wake-up, within <wait_ms>: the owner's bounded wait at
 * a stop before it leaves the job to its thread. */
bool quiet_thread_job_ended_within(int wake_fd, unsigned wait_ms);

/* Joins <thread> if it ends before <until> (CLOCK_MONOTONIC, as
 * monotonic_after() gives it): pthread_clockjoin_np()'s bounded join.
 * Returns 0, or ETIMEDOUT (the thread still runs, still joinable) or
 * another error of the join. */
int quiet_thread_join_until(pthread_t thread, const struct timespec *until);

#endif
