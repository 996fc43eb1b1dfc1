/* log_reopen: SIGHUP's reopen of a decision log the loop writes (see
 * log_jsonl_int.h): log_jsonl_reopen(), log_jsonl_reopen_soon().
 *
 * Owns the background reopen (struct reopen_job): the open on a thread
 * of its own, so that a path the file system does not answer never stops
 * the loop, and the new descriptor put in place. A log written by a
 * writer thread is reopened by that thread (log_writer.c). */
#include "watch/log_jsonl_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "util/quiet_thread.h"

/* Puts <fd>, just opened for the path (<kind>: what it is; <same>: the file
 * l->fd is), in place of l->fd, which is closed unless <old_closed>, and
 * writes what waits. Returns 0, or -1 out of memory. */
static int reopen_apply(struct log_jsonl *l, int fd, const struct fd_kind *kind, bool same,
                        bool old_closed)
{
    /* A line the old file got part of goes whole to a new one (rotated);
     * the same file (a SIGHUP for a policy reload) gets the rest of it. */
    if (!same)
        l->line_sent = 0;
    if (l->wev != NULL)
        event_del(l->wev);
    event_del(l->retry);
    if (!old_closed)
        close(l->fd);
    l->fd = fd;
    l->broken = false;
    l->reported = false;
    l->write_errno = 0;
    if (log_make_event(l, kind) < 0) {
        fprintf(stderr, "sluice: log %s: out of memory\n", l->shown);
        return -1;
    }
    /* A regular file now (the path named a FIFO before): its thread. */
    l->no_writer = kind->is_reg ? log_writer_start(l) : 0;
    l->unlinked = false;
    if (l->no_writer != 0) {
        /* The old descriptor is gone: the loop writes the file, told to
         * be unhealthy until a SIGHUP starts its thread (see no_writer). */
        clock_gettime(CLOCK_MONOTONIC, &l->nlink_due);
        fprintf(stderr,
                "sluice: log %s: its writer thread cannot be started (%s): the event loop "
                "writes it, and a file system that does not answer stops the gateway (send "
                "SIGHUP to try again)\n",
                l->shown, strerror(l->no_writer));
    }
    if (l->fw == NULL)
        log_schedule(l, log_drain(l));
    return 0;
}

int log_jsonl_reopen(struct log_jsonl *l)
{
    if (l->path == NULL)
        return 0;
    if (l->fw != NULL)
        return log_writer_reopen_wait(l);
    if (l->job != NULL) {
        l->reopen_queued = true; /* after the one running */
        return 0;
    }
    int fd = log_fd_open_path(l->path, l->flags);
    if (fd < 0) {
        int e = errno;
        fprintf(stderr, "sluice: log %s: %s: %s\n", l->shown,
                log_fd_open_failure(l->path, l->flags, e, true), strerror(e));
        return -1;
    }
    struct fd_kind kind = log_fd_probe(fd);
    return reopen_apply(l, fd, &kind, log_fd_same_file(l->fd, fd), false);
}

/* Frees <j>, closing what it holds; its event is already freed. */
static void job_free(struct reopen_job *j)
{
    int fds[] = {j->fds[0], j->fds[1], j->old_fd, j->new_fd};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    pthread_mutex_destroy(&j->mu);
    free(j->path);
    free(j);
}

static void *reopen_thread(void *arg)
{
    struct reopen_job *j = arg;
    j->new_fd = log_fd_open_path(j->path, j->flags);
    if (j->new_fd < 0) {
        j->err = errno;
        j->why = log_fd_open_failure(j->path, j->flags, j->err, true);
    } else {
        j->kind = log_fd_probe(j->new_fd);
        j->same = log_fd_same_file(j->old_fd, j->new_fd);
        close(j->old_fd);
        j->old_fd = -1;
    }
    if (quiet_thread_job_end(&j->mu, &j->abandoned, &j->done, j->fds[1]))
        job_free(j);
    return NULL;
}

/* Ends the finished job: joins its thread, puts its result in place. */
void log_reopen_finish(struct log_jsonl *l)
{
    struct reopen_job *j = l->job;
    pthread_join(j->thread, NULL);
    l->job = NULL;
    event_free(j->ev);
    if (j->new_fd < 0) {
        fprintf(stderr, "sluice: log %s: %s: %s\n", l->shown, j->why, strerror(j->err));
        if (l->reopen_fail_msg != NULL)
            fputs(l->reopen_fail_msg, stderr);
        j->old_fd = -1; /* still l->fd, in use again */
        log_schedule(l, log_drain(l));
    } else {
        int fd = j->new_fd;
        j->new_fd = -1;
        if (reopen_apply(l, fd, &j->kind, j->same, true) < 0 && l->reopen_fail_msg != NULL)
            fputs(l->reopen_fail_msg, stderr);
    }
    job_free(j);
}

static void on_reopen_done(evutil_socket_t fd, short what, void *arg)
{
    struct log_jsonl *l = arg;
    (void)fd;
    (void)what;
    log_reopen_finish(l);
    if (l->reopen_queued) {
        l->reopen_queued = false;
        log_jsonl_reopen_soon(l, l->reopen_fail_msg);
    }
}

/* Starts a background reopen. Returns 0, or the error (an errno value)
 * when it cannot (no thread, no pipe, no memory): nothing changed then. */
static int reopen_start(struct log_jsonl *l)
{
    struct reopen_job *j = calloc(1, sizeof(*j));
    int e = ENOMEM;
    if (j == NULL)
        return e;
    j->mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    j->fds[0] = j->fds[1] = j->old_fd = j->new_fd = -1;
    j->flags = l->flags;
    if ((j->path = strdup(l->path)) == NULL)
        goto fail;
    if (pipe2(j->fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        e = errno;
        goto fail;
    }
    if ((j->ev = event_new(l->base, j->fds[0], EV_READ, on_reopen_done, l)) == NULL ||
        event_add(j->ev, NULL) < 0)
        goto fail;
    /* The descriptor becomes the job's: no write may be armed on it (the
     * thread closes it, and its number may come back for another file). */
    if (l->wev != NULL)
        event_del(l->wev);
    event_del(l->retry);
    j->old_fd = l->fd;
    e = quiet_thread_create(&j->thread, reopen_thread, j);
    if (e != 0) {
        j->old_fd = -1;
        log_schedule(l, log_drain(l));
        goto fail;
    }
    l->job = j;
    return 0;
fail:
    if (j->ev != NULL)
        event_free(j->ev);
    job_free(j);
    return e;
}

void log_jsonl_reopen_soon(struct log_jsonl *l, const char *fail_msg)
{
    if (l->path == NULL)
        return;
    if (l->fw != NULL) {
        log_writer_reopen_ask(l, fail_msg);
        return;
    }
    l->reopen_fail_msg = fail_msg;
    if (l->job != NULL) {
        l->reopen_queued = true;
        return;
    }
    int e = reopen_start(l);
    if (e == 0)
        return;
    /* No thread to be had (nor a pipe, nor memory): the reopen is refused,
     * the descriptor in use kept, as a reload is. Run here, an open() the
     * file system does not answer (a path on a hung NFS server) would stop
     * the gateway, /healthz and SIGTERM with it. */
    fprintf(stderr,
            "sluice: log %s: cannot reopen (its open's thread cannot be started): %s; the "
            "descriptor in use is kept\n",
            l->shown, strerror(e));
    if (fail_msg != NULL)
        fputs(fail_msg, stderr);
}
