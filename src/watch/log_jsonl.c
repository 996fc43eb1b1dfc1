/* log_jsonl: the decision log writer (see log_jsonl.h).
 *
 * The log on the event loop: its open, the lines appended (written at
 * once, or at the round's end, or handed to the writer thread), the write
 * and flush events, log_jsonl_flush(), log_jsonl_close(), and what
 * /healthz and the metrics read. The other files of the log are listed in
 * log_jsonl_int.h. */
#include "watch/log_jsonl_int.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "util/quiet_thread.h"
#include "util/text_json.h"
#include "util/units.h"

/* A write the loop makes that would block, to a descriptor epoll does not
 * take (a regular file on a FUSE or network file system), is tried again
 * after this long: poll() calls such a file always writable, so waiting
 * for it would retry at once, a core spent on writev() calls. */
#define LOOP_AGAIN_MS 100

/* True while a write is armed: wev (EAGAIN) or the retry (an error). */
static bool write_armed(const struct log_jsonl *l)
{
    return (l->wev != NULL && event_pending(l->wev, EV_WRITE | EV_TIMEOUT, NULL)) ||
           (l->retry != NULL && event_pending(l->retry, EV_TIMEOUT, NULL));
}

/* event_del() of <ev> only when it is pending or active: asking costs
 * half of what a deletion of one that is neither does (each line's
 * log_schedule() meets two such). */
static void disarm(struct event *ev)
{
    if (event_pending(ev, EV_READ | EV_WRITE | EV_TIMEOUT, NULL))
        event_del(ev);
}

void log_schedule(struct log_jsonl *l, int rc)
{
    if (l->wev == NULL || l->job != NULL || l->fw != NULL)
        return; /* none, or a reopen running: its end writes what waits */
    disarm(l->retry);
    if (rc == 1 && l->pollable) {
        if (!event_pending(l->wev, EV_WRITE, NULL))
            event_add(l->wev, NULL);
    } else if (rc == 1) {
        struct timeval tv = timeval_of_ms(LOOP_AGAIN_MS);
        event_add(l->wev, &tv);
    } else if (rc == -1 && evbuffer_get_length(l->pending) > 0) {
        /* A transient error (ENOSPC, EIO): retry within a second. */
        struct timeval tv = {1, 0};
        event_del(l->wev);
        event_add(l->retry, &tv);
    } else {
        disarm(l->wev);
    }
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    struct log_jsonl *l = arg;
    (void)fd;
    (void)what;
    log_schedule(l, log_drain(l));
}

/* The end of a loop round: the lines that could wait (the end lines; with
 * a writer thread, every line) go out together. */
static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct log_jsonl *l = arg;
    (void)fd;
    (void)what;
    l->flush_due = false;
    if (l->fw != NULL)
        log_writer_wake(l->fw);
    else if (!write_armed(l))
        log_schedule(l, log_drain(l));
}

/* Takes <k> as what l->fd is. */
void log_set_kind(struct log_jsonl *l, const struct fd_kind *k)
{
    l->pollable = k->pollable;
    l->is_pipe = k->is_pipe;
    l->is_sock = k->is_sock;
    l->is_fifo = k->is_fifo;
    l->is_reg = k->is_reg;
}

/* Takes <k> as what l->fd is and makes the write event for it. No system
 * call: safe on the loop whatever the descriptor is. */
int log_make_event(struct log_jsonl *l, const struct fd_kind *k)
{
    if (l->wev != NULL)
        event_free(l->wev);
    l->wev = NULL;
    log_set_kind(l, k);
    l->wev =
        event_new(l->base, l->pollable ? l->fd : -1, l->pollable ? EV_WRITE : 0, on_writable, l);
    return l->wev != NULL ? 0 : -1;
}

/* log_jsonl_open()'s refusal of a regular file whose writer thread cannot
 * be started. */
#define NO_WRITER_OPEN_TEXT                                                                        \
    "cannot open log (its writer thread cannot be started: written on the event loop, a file "     \
    "system that does not answer would stop the gateway)"

/* "PATH: WHAT: ERROR". The path is the operator's (up to PATH_MAX), and the
 * message goes into the callers' 512-byte buffers ("--alerts: " before
 * it): cut there, a long path took the reason with it. It gives way in its
 * middle instead (text_shown_fit(), control characters shown \ooo), so
 * that its start, its end and the reason stay. */
static char *errmsg(const char *path, const char *what, int e)
{
    char shown[300], buf[512];
    text_shown_fit(shown, sizeof(shown), path);
    int n = snprintf(buf, sizeof(buf), "%s: %s: %s", shown, what, strerror(e));
    return n > 0 ? strdup(buf) : NULL;
}

struct log_jsonl *log_jsonl_open(struct event_base *base, const char *path, unsigned flags,
                                 char **err)
{
    struct log_jsonl *l = calloc(1, sizeof(*l));
    bool std = strcmp(path, "-") == 0;

    *err = NULL;
    if (l == NULL)
        goto nomem;
    l->base = base;
    l->flags = flags;
    l->fd = -1;
    l->pending_max = LOG_JSONL_PENDING_MAX;
    if (!std && (l->path = strdup(path)) == NULL)
        goto nomem;
    const char *name = std ? "(stdout)" : path;
    size_t shown_cap = 4 * strlen(name) + 1; /* each byte \ooo at most */
    if ((l->shown = malloc(shown_cap)) == NULL)
        goto nomem;
    text_shown_into(l->shown, shown_cap, name);
    if ((l->pending = evbuffer_new()) == NULL)
        goto nomem;
    l->fd = std ? log_fd_open_inherited(STDOUT_FILENO, true) : log_fd_open_path(l->path, l->flags);
    if (l->fd < 0) {
        int e = errno;
        *err = errmsg(std ? "standard output" : path,
                      log_fd_open_failure(l->path, l->flags, e, false), e);
        goto err;
    }
    if (!std)
        log_fd_end_cut_line(l->fd);
    struct fd_kind kind = log_fd_probe(l->fd);
    if (log_make_event(l, &kind) < 0 || (l->fev = event_new(base, -1, 0, on_flush, l)) == NULL ||
        (l->retry = evtimer_new(base, on_writable, l)) == NULL)
        goto nomem;
    /* A regular file's writes go to a thread of their own. Without one
     * (none can be started: a pids cgroup at its limit, RLIMIT_NPROC) the
     * file is refused: written on the loop, a write the file system holds
     * would stop the whole gateway, /healthz and SIGTERM with it, with
     * nobody told. */
    int e = kind.is_reg ? log_writer_start(l) : 0;
    if (e != 0) {
        *err = errmsg(std ? "standard output" : path, NO_WRITER_OPEN_TEXT, e);
        goto err;
    }
    return l;
nomem:
    if (*err == NULL)
        *err = errmsg(path, "cannot open log", ENOMEM);
err:
    if (l != NULL) {
        if (l->fd >= 0)
            close(l->fd);
        if (l->pending != NULL)
            evbuffer_free(l->pending);
        if (l->wev != NULL)
            event_free(l->wev);
        if (l->fev != NULL)
            event_free(l->fev);
        if (l->retry != NULL)
            event_free(l->retry);
        free(l->path);
        free(l->shown);
        free(l);
    }
    return NULL;
}

/* Lines past the cap are dropped (the cap reached while lines waited). */
#define OVER_CAP_TEXT                                                                              \
    "lines are dropped: the memory they wait in is full (its reader or disk does not keep up)"

/* Lines dropped for want of memory (struct log_jsonl's nomem). */
#define NOMEM_TEXT "lines are dropped: there is no memory for them"

void log_tell_dropping(const struct log_jsonl *l, bool nomem)
{
    fprintf(stderr, "sluice: log %s: %s\n", l->shown, nomem ? NOMEM_TEXT : OVER_CAP_TEXT);
}

/* A line that nothing waits before (<pending> empty, no write armed, no
 * reopen running), written from where it lies: <pending> neither takes a
 * copy of it nor gives one to writev(). Returns true when it is done with:
 * written whole, or written in part with the rest (the whole line, from
 * line_sent) in <pending>; false when nothing went, for the usual path,
 * whose log_drain() writes again and deals with what that write meets. A line
 * alone is as whole_piece() and pipe_piece() would write it. */
static bool write_alone(struct log_jsonl *l, const char *line, size_t n)
{
    if (n > l->pending_max || l->job != NULL || evbuffer_get_length(l->pending) > 0 ||
        write_armed(l))
        return false; /* past the cap: the usual path drops it */
    /* One piece, written as log_drain() writes: const dropped through
     * uintptr_t, the kernel only reads it */
    struct iovec iov = {.iov_base = (void *)(uintptr_t)line, .iov_len = n};
    ssize_t w = log_write_pieces(l, &iov, 1);
    if (w <= 0)
        return false;
    l->reported = false;
    l->write_errno = 0;
    log_loop_look_unlinked(l);
    if ((size_t)w == n) {
        l->nomem = false; /* nothing waited: all is written */
        return true;
    }
    if (evbuffer_add(l->pending, line, n) < 0) {
        l->dropped++; /* its start is out: the rest has nowhere to wait */
        if (!l->nomem)
            log_tell_dropping(l, true);
        l->nomem = true;
        return true;
    }
    l->pending_lines++;
    l->line_sent = (size_t)w;
    l->line_sent_end = !l->is_pipe && !l->is_sock ? lseek(l->fd, 0, SEEK_CUR) : 0;
    log_schedule(l, 1); /* a write that stopped short: the next would meet EAGAIN */
    return true;
}

/* Appends <line>; written at once, or when <soon>, before the event loop
 * waits again (with the lines that come after it in this round). A line
 * for the writer thread always waits for the round's end (log_writer_append). */
static void append_line(struct log_jsonl *l, const char *line, size_t n, bool soon)
{
    if (l->fw != NULL) {
        log_writer_append(l, line, n);
    } else if (l->broken) {
        l->dropped++;
    } else if (!soon && write_alone(l, line, n)) {
        return;
    } else if (evbuffer_get_length(l->pending) + n > l->pending_max) {
        l->dropped++;
        if (!l->over_cap && evbuffer_get_length(l->pending) > 0) {
            l->over_cap = true;
            log_tell_dropping(l, false);
        }
    } else if (evbuffer_add(l->pending, line, n) < 0) {
        l->dropped++;
        if (!l->nomem)
            log_tell_dropping(l, true);
        l->nomem = true;
    } else {
        l->pending_lines++;
        /* A write is already armed: keep order, let the event drain. */
        if (write_armed(l))
            return;
        if (!soon) {
            log_schedule(l, log_drain(l));
        } else if (!l->flush_due) {
            l->flush_due = true;
            event_active(l->fev, EV_TIMEOUT, 0);
        }
    }
}

/* A line dropped on the loop for want of memory (its buffer refused). */
static void count_drop(struct log_jsonl *l)
{
    if (l->fw == NULL) {
        l->dropped++;
        if (!l->nomem)
            log_tell_dropping(l, true);
        l->nomem = true;
        return;
    }
    pthread_mutex_lock(&l->fw->mu);
    l->fw->dropped++;
    bool tell = !l->fw->nomem;
    l->fw->nomem = true;
    pthread_mutex_unlock(&l->fw->mu);
    if (tell)
        log_tell_dropping(l, true);
}

void log_jsonl_write_line(struct log_jsonl *l, const char *line, size_t n)
{
    append_line(l, line, n, false);
}

void log_jsonl_on_event(const struct egress_event *ev, void *arg)
{
    struct log_jsonl *l = arg;
    char stack[LINE_STACK];
    size_t n;

    if (ev->kind == EVENT_EGRESS_PROGRESS)
        return;                       /* not a decision: only the detectors and metrics count it */
    if (l->fw == NULL && l->broken) { /* the thread's to know, with one */
        l->dropped++;
        return;
    }
    char *line = log_line_format(ev, stack, &n);
    if (line == NULL) {
        count_drop(l);
        return;
    }
    /* The decision line goes out before the request does (SPEC); the end
     * line may join the next write of this round. */
    append_line(l, line, n, ev->kind == EVENT_EGRESS_END);
    if (line != stack)
        free(line);
}

int log_jsonl_flush(struct log_jsonl *l, int timeout_ms)
{
    struct timespec start, now;
    int rc;

    clock_gettime(CLOCK_MONOTONIC, &start);
    if (l->fw != NULL)
        return log_writer_flush(l, &start, timeout_ms);
    if (l->job != NULL) {
        /* A reopen running: wait for it (in the time given), then write
         * to what it leaves in place. A reopen still queued is dropped. */
        if (!quiet_thread_job_ended_within(l->job->fds[0], (unsigned)timeout_ms))
            return evbuffer_get_length(l->pending) == 0 ? 0 : -1;
        l->reopen_queued = false;
        log_reopen_finish(l);
        if (l->fw != NULL) /* it opened a regular file */
            return log_writer_flush(l, &start, timeout_ms);
    }
    for (;;) {
        rc = log_drain(l);
        if (rc == 0 || (rc < 0 && l->broken))
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long spent = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (spent >= timeout_ms)
            break;
        int left = timeout_ms - (int)spent;
        if (rc < 0) {
            /* A transient error: wait a little and retry. */
            poll(NULL, 0, left < 50 ? left : 50);
            continue;
        }
        if (!l->pollable) {
            poll(NULL, 0, left < LOOP_AGAIN_MS ? left : LOOP_AGAIN_MS); /* as log_schedule() */
            continue;
        }
        struct pollfd pfd = {.fd = l->fd, .events = POLLOUT};
        if (poll(&pfd, 1, left) < 0 && errno != EINTR)
            break;
    }
    log_schedule(l, rc);
    return evbuffer_get_length(l->pending) == 0 ? 0 : -1;
}

/* Frees <l>'s loop events (on the loop: they are its). */
void log_free_events(struct log_jsonl *l)
{
    struct event *none = NULL;
    struct event **evs[] = {&l->wev, &l->fev, &l->retry, l->fw != NULL ? &l->fw->done_ev : &none};
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
        if (*evs[i] != NULL)
            event_free(*evs[i]);
        *evs[i] = NULL;
    }
}

/* Frees <l> and what it holds but its writer; its events already freed
 * when the writer thread calls it. */
void log_free(struct log_jsonl *l)
{
    log_free_events(l);
    evbuffer_free(l->pending);
    if (l->fd >= 0)
        close(l->fd);
    free(l->path);
    free(l->shown);
    free(l);
}

void log_jsonl_on_written(struct log_jsonl *l, void (*fn)(void *arg), void *arg)
{
    l->on_written_fn = fn;
    l->on_written_arg = arg;
    if (l->fw != NULL) {
        l->fw->done_fn = fn;
        l->fw->done_arg = arg;
    }
}

uint64_t log_jsonl_dropped(const struct log_jsonl *l)
{
    if (l->fw == NULL)
        return l->dropped;
    pthread_mutex_lock(&l->fw->mu);
    uint64_t n = l->fw->dropped + l->fw->pub_dropped;
    pthread_mutex_unlock(&l->fw->mu);
    return n;
}

size_t log_jsonl_pending_bytes(const struct log_jsonl *l)
{
    if (l->fw == NULL)
        return evbuffer_get_length(l->pending) - l->line_sent;
    pthread_mutex_lock(&l->fw->mu);
    size_t n = evbuffer_get_length(l->fw->incoming) + l->fw->pub_len - l->fw->pub_sent;
    pthread_mutex_unlock(&l->fw->mu);
    return n;
}

static const char *error_text(bool broken, int e)
{
    if (broken || e == EPIPE)
        return "its reader is gone";
    return e != 0 ? strerror(e) : NULL;
}

/* The open file has no name left (file_writer.unlinked). */
#define UNLINKED_TEXT "its file was deleted or moved: send SIGHUP to reopen"

/* A regular file the loop writes (struct log_jsonl's no_writer). */
#define NO_WRITER_TEXT                                                                             \
    "its writer thread cannot be started: the event loop writes its file, and a file system "      \
    "that does not answer would stop the gateway (send SIGHUP to try again)"

const char *log_jsonl_error(const struct log_jsonl *l)
{
    const char *why;
    if (l->fw == NULL) {
        why = error_text(l->broken, l->write_errno);
        if (why == NULL && l->unlinked)
            why = UNLINKED_TEXT;
        if (why == NULL && l->no_writer != 0)
            why = NO_WRITER_TEXT;
        if (why == NULL && l->over_cap)
            why = OVER_CAP_TEXT;
        return why == NULL && l->nomem ? NOMEM_TEXT : why;
    }
    pthread_mutex_lock(&l->fw->mu);
    why = log_writer_stuck_text(l->fw);
    if (why == NULL)
        why = error_text(l->fw->pub_broken, l->fw->pub_errno);
    if (why == NULL && l->fw->unlinked)
        why = UNLINKED_TEXT;
    if (why == NULL && l->fw->over_cap)
        why = OVER_CAP_TEXT;
    if (why == NULL && l->fw->nomem)
        why = NOMEM_TEXT;
    pthread_mutex_unlock(&l->fw->mu);
    return why;
}

void log_jsonl_set_pending_max(struct log_jsonl *l, size_t max)
{
    l->pending_max = max > 0 ? max : LOG_JSONL_PENDING_MAX;
}

uint64_t log_jsonl_close(struct log_jsonl *l)
{
    if (l == NULL)
        return 0;
    bool tried = false; /* the writer thread made the last try */
    if (l->job != NULL) {
        struct reopen_job *j = l->job;
        pthread_mutex_lock(&j->mu);
        bool done = j->done;
        if (!done) {
            /* Its open still waits: the thread frees the job when it
             * returns, the descriptor with it; the lines are not written.
             * Once the lock is let go the job may be gone: what is done
             * with it is done before. */
            event_free(j->ev);
            j->ev = NULL;
            pthread_detach(j->thread);
            j->abandoned = true;
        }
        pthread_mutex_unlock(&j->mu);
        if (done) {
            log_reopen_finish(l);
        } else {
            fprintf(stderr, "sluice: log %s: the reopen is still waiting for open()\n", l->shown);
            l->job = NULL;
            l->fd = -1;
        }
    }
    if (l->fw != NULL) { /* after the job: its reopen may have started the thread */
        uint64_t lost = 0;
        if (!log_writer_close(l, &lost))
            return lost; /* left to the thread, which frees it */
        tried = true;
    }
    if (!tried && !l->broken && l->fd >= 0)
        log_drain(l);
    if (evbuffer_get_length(l->pending) > 0) {
        size_t bytes = log_jsonl_pending_bytes(l);
        size_t lines = l->pending_lines;
        fprintf(stderr, "sluice: log %s: %zu line(s) (%zu bytes) not written at exit\n", l->shown,
                lines, bytes);
        l->dropped += lines;
        l->pending_lines = 0;
    }
    uint64_t lost = l->dropped;
    if (lost > 0)
        fprintf(stderr, "sluice: log %s: %" PRIu64 " line(s) dropped in all\n", l->shown, lost);
    log_free(l);
    return lost;
}
