/* log_writer: the writer thread of a decision log on a regular file (see
 * log_jsonl.h, log_jsonl_int.h's struct file_writer).
 *
 * Owns the thread and its hand-over with the loop: the lines handed over
 * (<incoming>), its sleeps and wake-ups, the write state it publishes for
 * the loop, its reopens, the look at whether the file lost its name, its
 * stop (log_jsonl_close()), and the write-ahead gate that lets a decision
 * take effect once its line is in the file (log_jsonl_seq(),
 * log_jsonl_wait()). */
#include "watch/log_jsonl_int.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "util/quiet_thread.h"
#include "util/units.h"

/* ------------------------------------------------------------ writer thread */

/* How long log_jsonl_close() waits for the thread's last try before it
 * leaves the thread to the kernel call it waits in: log_jsonl_flush(),
 * which comes first at a stop, has had the log's time already. */
#define WRITER_CLOSE_WAIT_MS 250

/* A failed write is retried after this long (a flush waiting: 50 ms). */
#define WRITER_RETRY_MS 1000
#define WRITER_HURRY_MS 50
/* A write that would block (the path is a FIFO now, its reader behind; a
 * regular file's EAGAIN: file_writer.again). */
#define WRITER_AGAIN_MS 100

/* <t> moved <ms> later. */
static void ts_add_ms(struct timespec *t, long ms)
{
    t->tv_sec += ms / 1000;
    t->tv_nsec += (ms % 1000) * 1000000L;
    if (t->tv_nsec >= 1000000000L) {
        t->tv_sec++;
        t->tv_nsec -= 1000000000L;
    }
}

static bool passed(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

/* The gate's value when every line may take effect. */
#define GATE_ALL UINT64_MAX

/* Stores the gate (see file_writer.gate) from the pub_ fields. With <mu>,
 * or before the thread starts. */
static void gate_publish(struct file_writer *fw)
{
    uint64_t upto = fw->pub_stalled || fw->pub_broken ? GATE_ALL : fw->pub_done;
    atomic_store_explicit(&fw->gate, upto, memory_order_release);
}

/* Copies the write state to the pub_ fields: with <mu>, or before the
 * thread starts. */
static void publish(struct log_jsonl *l)
{
    struct file_writer *fw = l->fw;
    fw->pub_len = evbuffer_get_length(l->pending);
    fw->pub_sent = l->line_sent;
    fw->pub_lines = l->pending_lines;
    fw->pub_errno = l->write_errno;
    fw->pub_broken = l->broken;
    fw->pub_dropped = l->dropped;
    fw->pub_done = fw->taken - l->pending_lines;
    gate_publish(fw);
    if (fw->busy == WB_WRITE) { /* a write() returned: the file system answers */
        clock_gettime(CLOCK_MONOTONIC, &fw->busy_since);
        fw->again = false;
    }
    if (fw->pub_len == 0 && evbuffer_get_length(fw->incoming) == 0) {
        fw->over_cap = false; /* all that waited is written */
        fw->nomem = false;
    }
}

/* The thread's state for the loop to read. Called with <mu> not held. */
void log_writer_publish(struct log_jsonl *l)
{
    pthread_mutex_lock(&l->fw->mu);
    publish(l);
    pthread_mutex_unlock(&l->fw->mu);
}

/* Frees what the writer holds; <l>'s own fields are the caller's. */
static void writer_free(struct file_writer *fw)
{
    pthread_mutex_destroy(&fw->mu);
    pthread_cond_destroy(&fw->progress);
    if (fw->incoming != NULL)
        evbuffer_free(fw->incoming);
    if (fw->efd >= 0)
        close(fw->efd);
    free(fw);
}

/* The thread's reopen (it owns the descriptor): as log_jsonl_reopen(), the
 * open and the old file's close without the lock. Returns 0 or -1. */
static int writer_reopen(struct log_jsonl *l, const char *fail_msg)
{
    int fd = log_fd_open_path(l->path, l->flags);
    if (fd < 0) {
        int e = errno;
        fprintf(stderr, "sluice: log %s: %s: %s\n", l->shown,
                log_fd_open_failure(l->path, l->flags, e, true), strerror(e));
        if (fail_msg != NULL)
            fputs(fail_msg, stderr);
        return -1;
    }
    struct fd_kind kind = log_fd_probe(fd);
    /* A line the old file got part of goes whole to a new one (rotated);
     * the same file (a SIGHUP for a policy reload) gets the rest of it. */
    if (!log_fd_same_file(l->fd, fd)) {
        l->line_sent = 0;
        log_fd_end_cut_line(fd);
    }
    close(l->fd);
    l->fd = fd;
    log_set_kind(l, &kind);
    l->broken = false;
    l->reported = false;
    l->write_errno = 0;
    return 0;
}

/* A look at st_nlink at most this often, after a write. */
#define WRITER_NLINK_MS 1000

/* True when a look is due (<*due> passed: the next is set WRITER_NLINK_MS
 * on) and finds the log's open file without a name (st_nlink 0), but for
 * the file standard output or error has open (see writer_look_unlinked()). */
static bool name_lost(const struct log_jsonl *l, struct timespec *due)
{
    struct stat st;
    if (l->path == NULL || !passed(due))
        return false;
    *due = monotonic_after(WRITER_NLINK_MS);
    return fstat(l->fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 0 &&
           !log_fd_is_inherited(&st);
}

/* Tells, once a file, that its lines go where no name reaches. */
static void tell_unlinked(const struct log_jsonl *l)
{
    fprintf(stderr,
            "sluice: log %s: its file was deleted or moved: its lines go to a file no name "
            "reaches (send SIGHUP to reopen the path)\n",
            l->shown);
}

/* After a write, without <mu>: whether the open file has lost its last
 * name (deleted, or moved to another file system: logrotate's compression
 * without a SIGHUP, an rm), looked at WRITER_NLINK_MS apart at most, never
 * per line. The lines that follow go on to that file (held back, every
 * decision would wait for a SIGHUP; a reopen of our own would take a
 * rename for a deletion, and the SPEC has the operator's SIGHUP reopen):
 * told once on standard error, and by log_jsonl_error() until a reopen. A
 * rename within its file system leaves it a name (rotation: its lines
 * reach the renamed file until the SIGHUP). Not for the file standard
 * output or error has open (`--log -`, /dev/stdout under `> FILE`): a
 * SIGHUP does not reopen what the parent opened. */
static void writer_look_unlinked(struct log_jsonl *l)
{
    struct file_writer *fw = l->fw;
    if (fw->unlinked || !name_lost(l, &fw->nlink_due))
        return;
    pthread_mutex_lock(&fw->mu);
    fw->unlinked = true;
    pthread_mutex_unlock(&fw->mu);
    tell_unlinked(l);
}

/* writer_look_unlinked() for a file the loop writes (no_writer): after a
 * write of the loop's. */
void log_loop_look_unlinked(struct log_jsonl *l)
{
    if (l->no_writer == 0 || l->unlinked || !name_lost(l, &l->nlink_due))
        return;
    l->unlinked = true;
    tell_unlinked(l);
}

/* Moves what the loop handed over to <pending>. With <mu>. */
static void writer_take(struct log_jsonl *l)
{
    struct file_writer *fw = l->fw;
    if (fw->incoming_lines == 0)
        return;
    if (evbuffer_get_length(l->pending) == 0) {
        /* The usual case, all written: the buffers change places. */
        struct evbuffer *empty = l->pending;
        l->pending = fw->incoming;
        fw->incoming = empty;
        l->pending_lines = fw->incoming_lines;
    } else if (evbuffer_add_buffer(l->pending, fw->incoming) == 0) {
        l->pending_lines += fw->incoming_lines;
    } else {
        fw->dropped += fw->incoming_lines;
        if (!fw->nomem) /* with <mu>: standard error never blocks (the relay's pipe) */
            log_tell_dropping(l, true);
        fw->nomem = true;
        evbuffer_drain(fw->incoming, evbuffer_get_length(fw->incoming));
    }
    /* Lines dropped here count as done: nobody waits for them for ever. */
    fw->taken += fw->incoming_lines;
    fw->pub_done = fw->taken - l->pending_lines;
    gate_publish(fw);
    fw->incoming_lines = 0;
    fw->pub_len = evbuffer_get_length(l->pending);
    fw->pub_lines = l->pending_lines;
}

/* Sleeps, with <mu>, let go meanwhile, until writer_kick() (or <until>, on
 * CLOCK_MONOTONIC, when not NULL; or a signal): the caller looks again.
 * Not a condition variable: a thread woken from pthread_cond_wait() takes
 * the mutex back marked as contended (glibc), so its next unlock makes a
 * futex call whether or not anyone waits, one more system call each
 * round. A kick after <seen> is read (the kicker reads <waiting> under
 * <mu>, then changes the word) makes the wait return at once. */
static void writer_sleep(struct file_writer *fw, const struct timespec *until)
{
    uint32_t seen = atomic_load_explicit(&fw->wake_word, memory_order_relaxed);
    fw->waiting = true;
    pthread_mutex_unlock(&fw->mu);
    syscall(SYS_futex, &fw->wake_word, FUTEX_WAIT_BITSET_PRIVATE, seen, until, NULL,
            FUTEX_BITSET_MATCH_ANY);
    pthread_mutex_lock(&fw->mu);
    fw->waiting = false;
}

/* Ends the thread's writer_sleep(), if any. With or without <mu>; what the
 * thread is woken for is set under <mu> before. */
static void writer_kick(struct file_writer *fw)
{
    atomic_fetch_add_explicit(&fw->wake_word, 1, memory_order_relaxed);
    syscall(SYS_futex, &fw->wake_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Waits, with <mu>, after a round whose log_drain() returned <rc>: for new
 * lines when all went (or the reader is gone for good), else until the
 * retry is due; a reopen or the stop ends any wait. */
static void writer_wait(struct log_jsonl *l, int rc)
{
    struct file_writer *fw = l->fw;
    struct timespec since, until;
    clock_gettime(CLOCK_MONOTONIC, &since);
    for (;;) {
        if (fw->stop || fw->reopen_due)
            return;
        if ((rc == 0 || l->broken) && fw->incoming_lines > 0)
            return;
        if (rc == 0 || l->broken) {
            writer_sleep(fw, NULL);
            continue;
        }
        long ms = rc == 1 ? WRITER_AGAIN_MS : fw->hurry ? WRITER_HURRY_MS : WRITER_RETRY_MS;
        until = since;
        ts_add_ms(&until, ms);
        if (passed(&until))
            return;
        writer_sleep(fw, &until);
    }
}

/* A FIFO's reader is behind (the path named one at a reopen): waits for
 * room without the lock, WRITER_AGAIN_MS at most. With <mu>. */
static void writer_poll(struct log_jsonl *l)
{
    struct file_writer *fw = l->fw;
    struct pollfd pfd = {.fd = l->fd, .events = POLLOUT};
    fw->busy = WB_POLL;
    pthread_mutex_unlock(&fw->mu);
    poll(&pfd, 1, WRITER_AGAIN_MS);
    pthread_mutex_lock(&fw->mu);
    fw->busy = WB_NONE;
}

/* Frees <l> (abandoned by log_jsonl_close(), which freed its events). */
static void writer_free_log(struct log_jsonl *l)
{
    struct file_writer *fw = l->fw;
    l->fw = NULL;
    log_free(l);
    writer_free(fw);
}

/* True when the gate lets line <seq> take effect: it is in the file, or
 * the log cannot be written now (a write failed or would block), when the
 * contract's "a log that cannot be written does not stop traffic" holds
 * (its lines wait in memory under the cap). With or without <mu> (see
 * file_writer.gate for the order). */
static bool gate_open(struct file_writer *fw, uint64_t seq)
{
    return atomic_load_explicit(&fw->gate, memory_order_acquire) >= seq;
}

/* Wakes the loop when what it waits for is done. With <mu>, let go for
 * the write only (so the caller looks at what may have changed after, as
 * after any wait: the stop). One wake-up a round at most, whatever number
 * of connections wait: the loop releases all those whose lines the round
 * wrote. */
static void wake_loop_if_due(struct file_writer *fw)
{
    if (fw->wake_seq == 0 || !gate_open(fw, fw->wake_seq))
        return;
    fw->wake_seq = 0;
    if (fw->wake_pending)
        return; /* the loop is to read <efd> still: it looks at every waiter then */
    fw->wake_pending = true;
    /* The write goes after the unlock: the loop, woken, takes <mu> at once
     * (on_written()), and finding it still held it would wait for it (a
     * futex call each side). <wake_pending> already says the write comes:
     * the efd, closed only once the thread is through, outlives it. */
    pthread_mutex_unlock(&fw->mu);
    uint64_t one = 1;
    ssize_t w = write(fw->efd, &one, sizeof(one)); /* an eventfd: never blocks short of 2^64 */
    (void)w;
    pthread_mutex_lock(&fw->mu);
}

static void *writer_main(void *arg)
{
    struct log_jsonl *l = arg;
    struct file_writer *fw = l->fw;
    pthread_mutex_lock(&fw->mu);
    for (;;) {
        writer_take(l);
        if (fw->reopen_due && !fw->stop) {
            uint64_t asked = fw->reopen_asked;
            const char *msg = fw->reopen_fail_msg;
            fw->reopen_due = false;
            fw->busy = WB_REOPEN;
            clock_gettime(CLOCK_MONOTONIC, &fw->busy_since);
            pthread_mutex_unlock(&fw->mu);
            int rc = writer_reopen(l, msg);
            log_writer_publish(l);
            pthread_mutex_lock(&fw->mu);
            fw->busy = WB_NONE;
            if (rc == 0) {
                fw->unlinked = false; /* the path's file: looked at after the next write */
                clock_gettime(CLOCK_MONOTONIC, &fw->nlink_due);
            }
            if (fw->abandoned)
                break;
            fw->reopen_done = asked;
            fw->reopen_rc = rc;
            pthread_cond_broadcast(&fw->progress);
            continue;
        }
        int rc = 0;
        if (evbuffer_get_length(l->pending) > 0 && !l->broken) {
            fw->busy = WB_WRITE;
            clock_gettime(CLOCK_MONOTONIC, &fw->busy_since);
            pthread_mutex_unlock(&fw->mu);
            rc = log_drain(l); /* publishes as it goes */
            writer_look_unlinked(l);
            pthread_mutex_lock(&fw->mu);
            fw->busy = WB_NONE;
            if (fw->abandoned)
                break;
        }
        /* A regular file's EAGAIN holds the decisions (file_writer.again). */
        bool file_again = rc == 1 && l->is_reg;
        if (file_again && !fw->again)
            clock_gettime(CLOCK_MONOTONIC, &fw->again_since);
        fw->again = file_again;
        fw->pub_stalled = rc != 0 && !file_again;
        gate_publish(fw);
        wake_loop_if_due(fw);
        pthread_cond_broadcast(&fw->progress);
        if (fw->stop)
            break; /* the last try is made */
        if (rc == 1 && l->pollable && !l->is_reg)
            writer_poll(l);
        else
            writer_wait(l, rc);
        if (fw->abandoned)
            break;
    }
    if (fw->abandoned) {
        pthread_mutex_unlock(&fw->mu);
        writer_free_log(l);
        return NULL;
    }
    fw->exited = true;
    pthread_cond_broadcast(&fw->progress);
    pthread_mutex_unlock(&fw->mu);
    return NULL;
}

/* The thread wrote what the loop waits for (wake_loop_if_due()). */
static void on_written(evutil_socket_t fd, short what, void *arg)
{
    struct log_jsonl *l = arg;
    uint64_t n;
    (void)what;
    ssize_t r = read(fd, &n, sizeof(n)); /* resets the count; EAGAIN when read already */
    (void)r;
    /* Before the callback looks: a write after this wakes it again. */
    pthread_mutex_lock(&l->fw->mu);
    l->fw->wake_pending = false;
    pthread_mutex_unlock(&l->fw->mu);
    if (l->fw->done_fn != NULL)
        l->fw->done_fn(l->fw->done_arg);
}

/* Hands <l>'s writes (and what is pending) to a new writer thread. Returns
 * 0, or the error (an errno value) when none can be started: the loop's
 * write events are disarmed then, <l> the loop's still. */
int log_writer_start(struct log_jsonl *l)
{
    struct file_writer *fw = calloc(1, sizeof(*fw));
    pthread_condattr_t ca;
    if (fw == NULL)
        return ENOMEM;
    fw->efd = -1;
    fw->mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* its timed waits */
    pthread_cond_init(&fw->progress, &ca);
    pthread_condattr_destroy(&ca);
    fw->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    int efd_errno = errno;
    if ((fw->incoming = evbuffer_new()) == NULL || fw->efd < 0 ||
        (fw->done_ev = event_new(l->base, fw->efd, EV_READ | EV_PERSIST, on_written, l)) == NULL ||
        event_add(fw->done_ev, NULL) < 0) {
        int e = fw->efd < 0 ? efd_errno : ENOMEM;
        if (fw->done_ev != NULL)
            event_free(fw->done_ev);
        writer_free(fw);
        return e;
    }
    /* No write armed on the loop from now on. */
    if (l->wev != NULL)
        event_del(l->wev);
    event_del(l->retry);
    l->fw = fw;
    /* Lines pending already are numbered as handed and taken. */
    fw->handed = fw->taken = l->pending_lines;
    fw->done_fn = l->on_written_fn;
    fw->done_arg = l->on_written_arg;
    publish(l);
    int e = quiet_thread_create(&fw->thread, writer_main, l);
    if (e != 0) {
        l->fw = NULL;
        event_free(fw->done_ev);
        writer_free(fw);
        return e;
    }
    return 0;
}

/* Wakes the thread when it waits (on the loop: on_flush). The kick goes
 * after the unlock, so that the thread, woken, does not find <mu> still
 * held and wait for it again (a second futex call each side). Nothing is
 * lost so: a thread that does not wait when <waiting> is read looks at
 * <incoming> under <mu> before it waits (writer_wait()), and a kick that
 * comes once it has stopped waiting for another reason makes at most its
 * next sleep return at once, to look again. */
void log_writer_wake(struct file_writer *fw)
{
    pthread_mutex_lock(&fw->mu);
    bool asleep = fw->waiting;
    pthread_mutex_unlock(&fw->mu);
    if (asleep)
        writer_kick(fw);
}

/* The loop's append: to <incoming>; the thread is woken at the end of this
 * loop round (on_flush), once for all the lines of the round, decision
 * lines included, which then share a write. Woken at once for each
 * decision line, it cost a futex call or two on each side a line (a wake,
 * a wait, the lock the woken thread found held), to let a decision go in
 * its own round now and then (when the thread wrote the line before the
 * loop's log_jsonl_wait()); now each decision waits for the thread's
 * wake-up of the loop (one eventfd write and read a round, for all the
 * round's decisions), which comes in the next round: a lone request on an
 * idle gateway waits the rest of its round and the write, no timer. */
void log_writer_append(struct log_jsonl *l, const char *line, size_t n)
{
    struct file_writer *fw = l->fw;
    bool numbered = false;
    pthread_mutex_lock(&fw->mu);
    size_t have = evbuffer_get_length(fw->incoming) + fw->pub_len - fw->pub_sent;
    bool over = have + n > l->pending_max;
    bool lost = !fw->pub_broken && !over && evbuffer_add(fw->incoming, line, n) < 0;
    bool tell_over = false, tell_nomem = false;
    if (fw->pub_broken || over || lost) {
        fw->dropped++; /* not numbered: who waits for it waits for the line before */
        tell_over = !fw->over_cap && over && have > 0;
        tell_nomem = !fw->nomem && lost;
        fw->over_cap = fw->over_cap || (over && have > 0);
        fw->nomem = fw->nomem || lost;
    } else {
        fw->incoming_lines++;
        numbered = true;
    }
    pthread_mutex_unlock(&fw->mu);
    if (tell_over || tell_nomem)
        log_tell_dropping(l, tell_nomem);
    if (!numbered)
        return;
    fw->handed++;
    if (!l->flush_due) {
        l->flush_due = true;
        event_active(l->fev, EV_TIMEOUT, 0);
    }
}

/* log_jsonl_flush() with a writer thread: wakes it, failed writes retried
 * every 50 ms meanwhile, and waits until nothing is left (or the reader is
 * gone), <timeout_ms> from <start> at most. */
int log_writer_flush(struct log_jsonl *l, const struct timespec *start, int timeout_ms)
{
    struct file_writer *fw = l->fw;
    struct timespec until = *start;
    ts_add_ms(&until, timeout_ms);
    pthread_mutex_lock(&fw->mu);
    fw->hurry = true;
    writer_kick(fw);
    while ((fw->incoming_lines > 0 || fw->pub_len > 0 || fw->reopen_due || fw->busy == WB_REOPEN) &&
           !fw->pub_broken && !fw->exited) {
        if (pthread_cond_timedwait(&fw->progress, &fw->mu, &until) == ETIMEDOUT)
            break;
    }
    fw->hurry = false;
    bool left = fw->incoming_lines > 0 || fw->pub_len > 0;
    pthread_mutex_unlock(&fw->mu);
    return left ? -1 : 0;
}

void log_writer_reopen_ask(struct log_jsonl *l, const char *fail_msg)
{
    struct file_writer *fw = l->fw;
    pthread_mutex_lock(&fw->mu);
    fw->reopen_fail_msg = fail_msg;
    fw->reopen_due = true; /* one more after a reopen running, never two */
    fw->reopen_asked++;
    writer_kick(fw);
    pthread_mutex_unlock(&fw->mu);
}

/* log_jsonl_reopen() with a writer thread: asks, and waits for the answer. */
int log_writer_reopen_wait(struct log_jsonl *l)
{
    struct file_writer *fw = l->fw;
    log_writer_reopen_ask(l, NULL);
    pthread_mutex_lock(&fw->mu);
    uint64_t mine = fw->reopen_asked;
    while (fw->reopen_done < mine && !fw->exited)
        pthread_cond_wait(&fw->progress, &fw->mu);
    int rc = fw->reopen_done >= mine ? fw->reopen_rc : -1;
    pthread_mutex_unlock(&fw->mu);
    return rc;
}

/* Ends the writer thread for log_jsonl_close(): its last try, then join.
 * Returns true with <l> the caller's again (its writes single-threaded,
 * the loop's drops in l->dropped), or false when the thread still waits
 * in the kernel after WRITER_CLOSE_WAIT_MS: what it could not write is
 * reported here, counted in <*lost>, and the thread frees <l> once its
 * call returns. */
bool log_writer_close(struct log_jsonl *l, uint64_t *lost)
{
    struct file_writer *fw = l->fw;
    struct timespec until = monotonic_after(WRITER_CLOSE_WAIT_MS);
    pthread_mutex_lock(&fw->mu);
    fw->stop = true;
    writer_kick(fw);
    while (!fw->exited && pthread_cond_timedwait(&fw->progress, &fw->mu, &until) != ETIMEDOUT)
        continue;
    if (fw->exited) {
        pthread_mutex_unlock(&fw->mu);
        pthread_join(fw->thread, NULL);
        l->dropped += fw->dropped;
        event_free(fw->done_ev);
        l->fw = NULL;
        writer_free(fw);
        return true;
    }
    /* Stuck in the kernel: the log becomes the thread's. */
    const char *name = l->shown;
    if (fw->busy == WB_REOPEN)
        fprintf(stderr, "sluice: log %s: the reopen is still waiting for open()\n", name);
    else
        fprintf(stderr,
                "sluice: log %s: a write is still waiting for the file system (a hung NFS "
                "server, a frozen file system?)\n",
                name);
    size_t lines = fw->incoming_lines + fw->pub_lines;
    size_t bytes = evbuffer_get_length(fw->incoming) + fw->pub_len - fw->pub_sent;
    if (lines > 0)
        fprintf(stderr, "sluice: log %s: %zu line(s) (%zu bytes) not written at exit\n", name,
                lines, bytes);
    uint64_t dropped = fw->dropped + fw->pub_dropped + lines;
    if (dropped > 0)
        fprintf(stderr, "sluice: log %s: %" PRIu64 " line(s) dropped in all\n", name, dropped);
    *lost = dropped;
    log_free_events(l);
    fw->wake_seq = 0; /* the loop's event is gone */
    fw->abandoned = true;
    pthread_detach(fw->thread);
    pthread_mutex_unlock(&fw->mu);
    return false;
}

uint64_t log_jsonl_seq(const struct log_jsonl *l)
{
    return l->fw != NULL ? l->fw->handed : 0; /* the loop's own count: no lock */
}

/* A test's seam (test_log_jsonl.c defines it before it includes this
 * file): where the loop, having found line <seq> not written yet, is about
 * to take <mu> to ask for its wake-up; the writer may end its round here. */
#ifndef LOG_JSONL_WAIT_SEAM
#define LOG_JSONL_WAIT_SEAM(fw, seq) ((void)0)
#endif

bool log_jsonl_wait(struct log_jsonl *l, uint64_t seq)
{
    struct file_writer *fw = l->fw;
    if (fw == NULL || seq == 0 || gate_open(fw, seq))
        return true; /* the common case: no lock */
    LOG_JSONL_WAIT_SEAM(fw, seq);
    pthread_mutex_lock(&fw->mu);
    /* Again: the thread may have written the line and ended its round,
     * wake_seq unseen, since the look above (see file_writer.gate). */
    bool open = gate_open(fw, seq);
    if (!open && (fw->wake_seq == 0 || seq < fw->wake_seq))
        fw->wake_seq = seq;
    pthread_mutex_unlock(&fw->mu);
    return open;
}

_Static_assert(LOG_JSONL_STUCK_MS == 5000, "log_writer_stuck_text() says 5 s");

/* What a writer whose write or reopen has waited LOG_JSONL_STUCK_MS in the
 * kernel is doing, or whose writes have failed with EAGAIN for as long
 * (file_writer.again), or NULL. With <mu>. */
const char *log_writer_stuck_text(const struct file_writer *fw)
{
    struct timespec until = fw->again_since;
    ts_add_ms(&until, LOG_JSONL_STUCK_MS);
    if (fw->again && passed(&until))
        return "a write has not gone through for 5 s or more: its file system answers EAGAIN "
               "(it would block)";
    if (fw->busy != WB_WRITE && fw->busy != WB_REOPEN)
        return NULL;
    until = fw->busy_since;
    ts_add_ms(&until, LOG_JSONL_STUCK_MS);
    if (!passed(&until))
        return NULL;
    return fw->busy == WB_WRITE ? "a write has not returned for 5 s or more (a hung or frozen "
                                  "file system?)"
                                : "its reopen has not returned for 5 s or more (a hung or frozen "
                                  "file system?)";
}
