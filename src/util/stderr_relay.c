/* stderr_relay: standard error through a pipe and a thread (see
 * stderr_relay.h). */
#include "util/stderr_relay.h"
#include "util/quiet_thread.h"
#include "util/units.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* What the thread reads at once; a line longer than this is copied in
 * pieces (it could not be atomic anyway). */
#define RELAY_BUF 16384
/* stderr's buffer: messages up to this size reach the pipe whole lines. */
#define RELAY_STREAM_BUF 65536
/* A line without its newline yet is copied as is after this long. */
#define RELAY_PARTIAL_MS 100

/* The sanitizers (the test build) write their reports to descriptor 2
 * and then end the process at once, before the thread could copy them:
 * while the relay runs they write to the original standard error. */
#if defined(__SANITIZE_ADDRESS__)
#define RELAY_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RELAY_SANITIZED 1
#endif
#endif
#ifdef RELAY_SANITIZED
#include <sanitizer/common_interface_defs.h>
static void sanitizer_reports_to(int fd)
{
    __sanitizer_set_report_fd((void *)(intptr_t)fd);
}
#else
static void sanitizer_reports_to(int fd)
{
    (void)fd;
}
#endif

static struct {
    bool running;
    int orig;      /* the original standard error (close-on-exec) */
    int rd;        /* the pipe's read end, the thread's */
    FILE *std;     /* the stderr the process had */
    FILE *relayed; /* the stream that replaced it */
    pthread_t thread;
    /* The thread has not ended: from its start to its return, also once a
     * stop that timed out left it (blocked in a write to <orig>, reading
     * <rd> as it loops): no new relay may start meanwhile, whose pipe and
     * standard error it would take as its own. */
    atomic_bool live;
    _Atomic uint64_t dropped;
    uint64_t told; /* <dropped> when the thread starts: told by the one before */
    /* A line cut short: the pipe took its start, the rest was dropped.
     * Under <lock> (the stream's writes and the thread's check):
     *   open  the last byte the pipe got is not a newline;
     *   skip  the stream's bytes up to the next newline are the rest of a
     *         line already dropped, and are dropped with it;
     *   owe   the line in the pipe was cut: a newline must follow it,
     *         written before the next line by relayed_write(), or by the
     *         thread after the cut line once it has read the pipe empty.
     * Without that newline whatever came next on the original standard
     * error (the next message, the count of drops, a decision line of
     * `--log -` with `2>&1`) would be glued onto the cut line. */
    pthread_mutex_t lock;
    bool open, skip;
    atomic_bool owe;
    /* What stderr_relay_original() and stderr_relay_hold() give, read on
     * other threads (a log's writer reopening its file, the exec sinks'
     * spawner): <orig> while
     * the relay runs, STDERR_FILENO from the moment descriptor 2 is the
     * original again, which is before <orig> is closed. Never the pair
     * <running> and <orig>, which the stop changes one after the other. */
    atomic_int given;
    /* Threads holding <given> (stderr_relay_hold()): the stop closes
     * <orig> only once none does. Raised before <given> is read, and the
     * stop gives STDERR_FILENO before it looks at this (both sequentially
     * consistent): a holder either got STDERR_FILENO or is waited for. */
    atomic_uint users;
} R = {.orig = -1, .rd = -1, .lock = PTHREAD_MUTEX_INITIALIZER, .given = STDERR_FILENO};

size_t stderr_relay_piece(const char *buf, size_t n, size_t max)
{
    size_t whole = 0;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] != '\n')
            continue;
        if (i + 1 > max && whole > 0)
            break;
        whole = i + 1;
        if (whole >= max)
            break;
    }
    return whole;
}

static size_t count_lines(const char *buf, size_t n)
{
    size_t lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += buf[i] == '\n';
    return lines > 0 ? lines : 1;
}

/* Writes <n> bytes of <buf> to <fd>, waiting as long as it takes (also
 * when something else made <fd>'s description non-blocking); false when
 * it fails. */
static bool write_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            (void)poll(&pfd, 1, -1);
            continue;
        }
        if (w <= 0)
            return false;
        buf += w;
        n -= (size_t)w;
    }
    return true;
}

/* Writes <n> bytes of <buf> to the pipe, at most once (EINTR aside). */
static ssize_t pipe_write(const char *buf, size_t n)
{
    ssize_t w;
    while ((w = write(STDERR_FILENO, buf, n)) < 0 && errno == EINTR)
        ;
    return w;
}

/* The stream's write: into the non-blocking pipe, a piece of whole lines
 * at a time; what the pipe does not take now is dropped and counted, a line
 * the pipe took the start of to its end (see R.owe). It always reports
 * success, so stderr's error flag never sticks. */
static ssize_t relayed_write(void *cookie, const char *buf, size_t n)
{
    (void)cookie;
    size_t off = 0;
    pthread_mutex_lock(&R.lock);
    while (off < n) {
        if (R.skip) {
            const char *nl = memchr(buf + off, '\n', n - off);
            off = nl != NULL ? (size_t)(nl - buf) + 1 : n;
            R.skip = nl == NULL;
            continue;
        }
        size_t piece = stderr_relay_piece(buf + off, n - off, PIPE_BUF);
        if (piece == 0)
            piece = n - off; /* the end of a line written without its newline */
        if (atomic_load(&R.owe) && pipe_write("\n", 1) == 1) {
            atomic_store(&R.owe, false);
            R.open = false;
        }
        ssize_t w = atomic_load(&R.owe) ? -1 : pipe_write(buf + off, piece);
        if (w <= 0) {
            atomic_fetch_add(&R.dropped, count_lines(buf + off, piece));
            if (R.open)
                atomic_store(&R.owe, true);
            off += piece;
            R.skip = buf[off - 1] != '\n';
            continue;
        }
        off += (size_t)w; /* a partial write: only a line above PIPE_BUF */
        R.open = buf[off - 1] != '\n';
    }
    pthread_mutex_unlock(&R.lock);
    return (ssize_t)n;
}

/* The thread, after a wait with nothing to read: true when a cut line owes
 * its newline and the pipe is empty, so that the thread holds all of that
 * line and the newline goes right after it (the stream writes nothing
 * meanwhile). */
static bool cut_line_read(void)
{
    int queued = -1;
    bool ends = false;
    pthread_mutex_lock(&R.lock);
    if (atomic_load(&R.owe) && ioctl(R.rd, FIONREAD, &queued) == 0 && queued == 0) {
        atomic_store(&R.owe, false);
        R.open = false;
        ends = true;
    }
    pthread_mutex_unlock(&R.lock);
    return ends;
}

/* Says, on the original standard error, how many lines were dropped since
 * it last said so. */
static void tell_drops(uint64_t *told)
{
    uint64_t now = atomic_load(&R.dropped);
    if (now == *told)
        return;
    char msg[160];
    int len = snprintf(msg, sizeof(msg),
                       "sluice: %" PRIu64 " line(s) to standard error dropped: it was not read "
                       "fast enough\n",
                       now - *told);
    if (len > 0 && write_all(R.orig, msg, (size_t)len))
        *told = now;
}

/* Copies the whole lines of <buf> (all of it when <all>) to the original
 * standard error; returns what it copied. */
static size_t copy_lines(const char *buf, size_t have, bool all)
{
    size_t off = 0;
    while (off < have) {
        size_t piece = stderr_relay_piece(buf + off, have - off, PIPE_BUF);
        if (piece == 0 && !all)
            break;
        if (piece == 0)
            piece = have - off;
        (void)write_all(R.orig, buf + off, piece); /* a gone reader: lost */
        off += piece;
    }
    return off;
}

static void *relay_thread(void *arg)
{
    (void)arg;
    static char buf[RELAY_BUF];
    size_t have = 0;
    uint64_t told = R.told;
    bool line_start = true; /* the original standard error is at one */
    for (;;) {
        struct pollfd pfd = {.fd = R.rd, .events = POLLIN};
        bool wait = have > 0 || atomic_load(&R.owe);
        int pr = poll(&pfd, 1, wait ? RELAY_PARTIAL_MS : -1);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr > 0) {
            ssize_t n = read(R.rd, buf + have, sizeof(buf) - have);
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n <= 0) /* every write end is closed: stderr_relay_stop() */
                break;
            have += (size_t)n;
        }
        bool end_cut = pr == 0 && cut_line_read();
        size_t done = copy_lines(buf, have, pr == 0 || have == sizeof(buf));
        if (done > 0)
            line_start = buf[done - 1] == '\n';
        memmove(buf, buf + done, have - done);
        have -= done;
        if (end_cut && !line_start)
            line_start = write_all(R.orig, "\n", 1);
        if (line_start) /* never glued onto a line not yet ended */
            tell_drops(&told);
    }
    if (copy_lines(buf, have, true) > 0)
        line_start = buf[have - 1] == '\n';
    if (!line_start && (atomic_load(&R.owe) || atomic_load(&R.dropped) != told))
        (void)write_all(R.orig, "\n", 1);
    tell_drops(&told);
    atomic_store(&R.live, false);
    return NULL;
}

/* <fd>, or a copy of it above standard error (close-on-exec) when it is
 * one of 0 to 2; -1 (and <fd> closed) when no copy can be made. */
static int above_stdio(int fd)
{
    if (fd > STDERR_FILENO)
        return fd;
    int above = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    int e = errno;
    close(fd);
    errno = e;
    return above;
}

/* Undoes what start() did up to the failure. */
static int start_failed(int p[2], char *err, size_t errlen, const char *what)
{
    int e = errno;
    if (p[0] >= 0)
        close(p[0]);
    if (p[1] >= 0)
        close(p[1]);
    if (R.orig >= 0)
        close(R.orig);
    R.orig = -1;
    snprintf(err, errlen, "standard error relay: %s: %s", what, strerror(e));
    return -1;
}

/* abort() while the relay runs (glibc's fatal messages: heap corruption,
 * a failed assert, a buffer overflow detected): the process ends at once,
 * and what it just wrote to descriptor 2, the pipe, would end with it.
 * This handler copies what the pipe holds to the original standard error
 * (the thread may have taken part of it: the rest comes from here), then
 * lets the abort go on. Only async-signal-safe calls; at most
 * RELAY_ABORT_MS in all, waiting for room with poll() and writing no more
 * than a pipe takes then, so that a standard error nobody reads delays the
 * abort, never stops it. */
#define RELAY_ABORT_MS 1000
static struct sigaction abort_before;

static void on_abort(int sig)
{
    int e = errno;
    char buf[PIPE_BUF];
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        ssize_t n = read(R.rd, buf, sizeof(buf));
        if (n <= 0)
            break;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long spent = (t.tv_sec - t0.tv_sec) * 1000L + (t.tv_nsec - t0.tv_nsec) / 1000000L;
        struct pollfd pfd = {.fd = R.orig, .events = POLLOUT};
        if (spent >= RELAY_ABORT_MS || poll(&pfd, 1, (int)(RELAY_ABORT_MS - spent)) <= 0 ||
            write(R.orig, buf, (size_t)n) != n)
            break;
    }
    sigaction(SIGABRT, &abort_before, NULL);
    errno = e;
    raise(sig); /* blocked until this returns, then as before */
}

/* An exit() while the relay runs (fatal()'s out of memory, libevent's
 * fatal errors, any exit() not through serve's end): its last message is
 * still in the pipe, and the process would end before the thread copied
 * it. This copies it out as stop does. The stream stays open: a thread
 * still running may hold it (stdio flushes it at exit, to descriptor 2,
 * the original standard error again). */
static bool relay_restore(unsigned ms);
static void relay_at_exit(void)
{
    if (!R.running)
        return;
    (void)relay_restore(STDERR_RELAY_STOP_MS);
    R.running = false;
}

int stderr_relay_start(char *err, size_t errlen)
{
    static bool at_exit;
    int p[2] = {-1, -1};
    if (R.running)
        return 0;
    if (atomic_load(&R.live)) { /* before anything of R changes: the thread's */
        snprintf(err, errlen,
                 "standard error relay: the previous relay's thread has not ended (its standard "
                 "error is not read): not started again");
        return -1;
    }
    fflush(stderr);
    R.orig = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    if (R.orig < 0)
        return start_failed(p, err, errlen, "dup");
    /* Both ends non-blocking: the thread polls before it reads. Neither
     * may take the place of a closed standard input or output, where the
     * decision log (`--log -`) would find it. */
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0 || (p[0] = above_stdio(p[0])) < 0 ||
        (p[1] = above_stdio(p[1])) < 0)
        return start_failed(p, err, errlen, "pipe");
    cookie_io_functions_t io = {.write = relayed_write};
    FILE *f = fopencookie(NULL, "w", io);
    /* Line buffered, with room for any message whole: relayed_write() gets
     * a message in one call and cuts it at its lines, never inside one. */
    if (f == NULL || setvbuf(f, NULL, _IOLBF, RELAY_STREAM_BUF) != 0) {
        if (f != NULL)
            fclose(f);
        return start_failed(p, err, errlen, "stream");
    }
    R.rd = p[0];
    R.told = atomic_load(&R.dropped);
    atomic_store(&R.live, true);
    int e = quiet_thread_create(&R.thread, relay_thread, NULL);
    if (e != 0) {
        atomic_store(&R.live, false);
        fclose(f);
        R.rd = -1;
        errno = e;
        return start_failed(p, err, errlen, "thread");
    }
    /* From here on the loop cannot block on standard error. */
    dup2(p[1], STDERR_FILENO);
    close(p[1]);
    atomic_store(&R.given, R.orig);
    R.std = stderr;
    R.relayed = f;
    stderr = f;
    sanitizer_reports_to(R.orig);
    struct sigaction sa = {.sa_handler = on_abort};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGABRT, &sa, &abort_before);
    R.running = true;
    if (!at_exit)
        at_exit = atexit(relay_at_exit) == 0;
    return 0;
}

/* Gives descriptor 2 and stderr back and waits up to <ms> for the thread
 * to copy what the pipe holds; false when it did not end in time. */
static bool relay_restore(unsigned ms)
{
    sigaction(SIGABRT, &abort_before, NULL);
    fflush(R.relayed);
    stderr = R.std;
    sanitizer_reports_to(STDERR_FILENO);
    /* The last write end in this process: the thread reads the pipe to its
     * end, then exits. */
    dup2(R.orig, STDERR_FILENO);
    atomic_store(&R.given, STDERR_FILENO);
    /* On the monotonic clock: a wall clock stepped meanwhile (NTP, a
     * virtual machine resumed) would make the wait end at once or last for
     * hours. */
    struct timespec until = monotonic_after(ms);
    if (quiet_thread_join_until(R.thread, &until) != 0) {
        /* Standard error is not read: the thread stays blocked in its
         * write until the process exits, its descriptors with it. */
        pthread_detach(R.thread);
        return false;
    }
    return true;
}

/* Waits until no thread holds the original standard error, at most until
 * <until> (the monotonic clock); false when one still does then. */
static bool users_gone(const struct timespec *until)
{
    while (atomic_load(&R.users) != 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > until->tv_sec ||
            (now.tv_sec == until->tv_sec && now.tv_nsec >= until->tv_nsec))
            return false;
        struct timespec tick = {0, 1000000}; /* a holder uses it briefly */
        nanosleep(&tick, NULL);
    }
    return true;
}

void stderr_relay_stop(unsigned ms)
{
    if (!R.running)
        return;
    struct timespec until = monotonic_after(ms);
    bool ended = relay_restore(ms);
    if (!ended) {
        R.running = false;
        return;
    }
    fclose(R.relayed);
    R.relayed = NULL;
    close(R.rd);
    /* A holder still at work when the time is up (a spawner stuck in an
     * exec) keeps the descriptor until the process exits: closed under
     * it, its number could name another file by the time it is used. */
    if (users_gone(&until))
        close(R.orig);
    R.rd = R.orig = -1;
    R.running = false;
}

int stderr_relay_original(void)
{
    return atomic_load(&R.given);
}

int stderr_relay_hold(void)
{
    atomic_fetch_add(&R.users, 1);
    return atomic_load(&R.given);
}

void stderr_relay_release(void)
{
    atomic_fetch_sub(&R.users, 1);
}

uint64_t stderr_relay_dropped(void)
{
    return atomic_load(&R.dropped);
}
