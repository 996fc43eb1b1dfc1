/* std_relay: files given for writing on standard output or error, written
 * by the command through a pipe that run copies into them; and a file
 * given as standard input, read through a pipe that run fills from it.
 *
 * Such a file was opened on the host's mount, and the command would hold
 * that open file: through /proc/self/fd/N it could open it again for
 * reading (the old contents of `>> ~/.ssh/known_hosts` with ~/.ssh hidden,
 * of `2>> /tmp/x.log` outside the box's own /tmp), and change its mode,
 * owner group, times or attributes (fchmod(), on a mount read-only in the
 * box too). Where the box shows the same file, writable, at its path, the
 * command could do all that by the path anyway, and the box passes the
 * descriptor as it came (box.c). Everywhere else it gets the write end of
 * a pipe, and run copies what comes out of it into the descriptor it was
 * given, the same open file description: its offset and O_APPEND are the
 * caller's, so `> log 2>&1` still writes the command's output, run's and
 * the gateway's messages one after the other. Standard output and error
 * that are one open file description (kcmp(KCMP_FILE)) share one pipe,
 * which keeps the order of their writes.
 *
 * Standard error a unix stream socket (a supervisor's socketpair(),
 * systemd's journal stream), and standard output when it is that socket,
 * goes through such a pipe too: the command holding the socket could
 * shutdown() it, which acts on the socket whatever descriptor names it,
 * and run's summary after it was lost. run sends into it without waiting
 * (MSG_DONTWAIT), holding what it does not take yet and polling for
 * room, so that a reader that does not read holds up the command's
 * writes, never run's loop.
 *
 * The mirror case: a file given for reading as standard input that the
 * box does not open again at its path (not shown there: hidden, under
 * /tmp; or its user cannot reach or open it there; or opened again but
 * not at the caller's offset, a nonseekable open) would be held on the
 * host's mount, and through /proc/self/fd/0 the command could open it
 * again for writing or truncate it, or change its mode. Where the box
 * shows it, the box opens it again by its path (box.c); everywhere else
 * the command reads the read end of a pipe that run fills from the file,
 * as fast as the command reads (no more than the pipe holds at a time),
 * from the caller's offset, which it leaves where it was (pread() at an
 * offset of run's own), as the box's own open file of a file it shows
 * does.
 *
 * run makes the pipes before the box, whether the box then uses them or
 * not (only inside is it known what the box shows), and reads them until
 * every writer is gone: a pipe the box did not use is at its end once the
 * command is executed, one it used once the box has ended (or, passed on
 * outside the box, BOX_STD_FINISH_MS after that, at most: told, and run
 * exits 1 if the command exits 0, as for a failed write). Standard input's
 * file is read only once the command is executed (the end of exec_end,
 * a pipe the box holds until then), and only when the pipe still has a
 * reader then, the command's descriptor 0: run never reads a file the box
 * opened again itself, and a read that hangs (a hung network or FUSE file
 * system) or fails never holds up or fails the set-up. It is read on a
 * thread of its own, with blocking calls, so that such a read holds up
 * nothing of run's either (signals passed on, output copied, the box's
 * end); it fills the pipe until the file's end or its last reader is gone
 * (the command closed it, or the box has ended): run never waits for a
 * command that stopped reading, nor for a read that does not return. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/kcmp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "box/box.h"
#include "util/quiet_thread.h"
#include "util/text_json.h"
#include "util/units.h"

static const char *const names[] = {"input", "output", "error"};

/* Whether <fd> is a regular file open for writing. */
static bool written_file(int fd, struct stat *st)
{
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && (flags & O_ACCMODE) != O_RDONLY && fstat(fd, st) == 0 &&
           S_ISREG(st->st_mode);
}

/* Whether <fd> is a unix stream socket (std_check.c lets no other stream
 * socket in). */
static bool stream_socket(int fd, struct stat *st)
{
    int type = -1;
    socklen_t len = sizeof(type);
    return fstat(fd, st) == 0 && S_ISSOCK(st->st_mode) &&
           getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
}

/* Whether descriptors 1 and 2 are one open file description. Where the
 * kernel has no kcmp() (CONFIG_KCMP), the same file is taken for one: one
 * pipe for both keeps their order, and two descriptions of one file
 * (`> f 2> f`) would write over each other anyway. */
static bool one_description(const struct stat *a, const struct stat *b)
{
    pid_t self = getpid();
    long r = syscall(SYS_kcmp, self, self, KCMP_FILE, 1, 2);
    if (r >= 0)
        return r == 0;
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* The thread that fills standard input's pipe from the file (feed_main()),
 * and what it shares with run: each side says it is gone under <lock>,
 * and the last one frees it. The thread may outlive run's wait for it (a
 * read that does not return): run then leaves it. */
struct std_feed {
    pthread_mutex_t lock;
    int pipe;       /* the write end of standard input's pipe, the thread's */
    off_t at;       /* where it reads the file next */
    bool failed;    /* a read failed, told while run still waited */
    bool done;      /* the thread has ended */
    bool abandoned; /* run no longer waits for it: the box has ended */
};

void box_std_relay_init(struct box_std_relay *r)
{
    for (int fd = 0; fd <= 2; fd++)
        r->run_end[fd] = r->box_end[fd] = -1;
    r->exec_end[0] = r->exec_end[1] = -1;
    memset(r->failed, 0, sizeof(r->failed));
    for (int fd = 0; fd <= 2; fd++) {
        r->held[fd] = NULL;
        r->held_at[fd] = r->held_len[fd] = 0;
    }
    r->at = 0;
    r->feed = NULL;
}

/* The pipe run fills from descriptor 0 when it is a regular file open for
 * reading only (open for writing too, no pipe carries it: box.c), and
 * exec_end, which tells run when to start. Returns 0, or -1 with a
 * message in <err>. */
static int open_input(struct box_std_relay *r, char *err, size_t errlen)
{
    struct stat st;
    int flags = fcntl(STDIN_FILENO, F_GETFL);
    if (flags < 0 || (flags & O_ACCMODE) != O_RDONLY || fstat(STDIN_FILENO, &st) != 0 ||
        !S_ISREG(st.st_mode))
        return 0;
    off_t at = lseek(STDIN_FILENO, 0, SEEK_CUR);
    int p[2], e[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "standard input: pipe: %s", strerror(errno));
        return -1;
    }
    if (pipe2(e, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "standard input: pipe: %s", strerror(errno));
        close(p[0]);
        close(p[1]);
        return -1;
    }
    /* run's end never blocks the wait for the box's report */
    fcntl(e[0], F_SETFL, O_NONBLOCK);
    r->run_end[0] = p[1];
    r->box_end[0] = p[0];
    r->exec_end[0] = e[0];
    r->exec_end[1] = e[1];
    r->at = at > 0 ? at : 0;
    return 0;
}

int box_std_relay_open(struct box_std_relay *r, char *err, size_t errlen)
{
    struct stat st[3];
    box_std_relay_init(r);
    if (open_input(r, err, errlen) < 0)
        return -1;
    /* Standard error a unix stream socket (a supervisor's socketpair(),
     * systemd's journal stream): held by the command, its shutdown() (of
     * any descriptor naming that socket, standard output too when it is
     * the same) would shut the socket for run as well, and run's summary
     * and the gateway's messages were lost. */
    bool err_socket = stream_socket(STDERR_FILENO, &st[2]);
    for (int fd = 1; fd <= 2; fd++) {
        bool sock =
            err_socket &&
            (fd == 2 || (stream_socket(STDOUT_FILENO, &st[1]) && one_description(&st[1], &st[2])));
        if (!sock && !written_file(fd, &st[fd]))
            continue;
        if (fd == 2 && r->run_end[1] >= 0 && one_description(&st[1], &st[2])) {
            r->box_end[2] = r->box_end[1];
            continue;
        }
        int p[2];
        char *held = NULL;
        if (sock && (held = malloc(BOX_STD_HELD)) == NULL) {
            snprintf(err, errlen, "standard %s: out of memory", names[fd]);
            box_std_relay_close(r);
            return -1;
        }
        if (pipe2(p, O_CLOEXEC) < 0) {
            snprintf(err, errlen, "standard %s: pipe: %s", names[fd], strerror(errno));
            free(held);
            box_std_relay_close(r);
            return -1;
        }
        /* run's end never blocks the wait for the box's report */
        fcntl(p[0], F_SETFL, O_NONBLOCK);
        r->run_end[fd] = p[0];
        r->box_end[fd] = p[1];
        r->held[fd] = held;
    }
    return 0;
}

void box_std_relay_spawned(struct box_std_relay *r)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (r->run_end[fd] >= 0 && r->box_end[fd] >= 0)
            close(r->box_end[fd]);
        r->box_end[fd] = -1;
    }
    if (r->exec_end[1] >= 0)
        close(r->exec_end[1]);
    r->exec_end[1] = -1;
}

size_t box_std_relay_poll(const struct box_std_relay *r, struct pollfd *p)
{
    size_t n = 0;
    /* standard input's pipe is the thread's: run waits for the command's
     * execution only */
    if (r->exec_end[0] >= 0)
        p[n++] = (struct pollfd){.fd = r->exec_end[0], .events = POLLIN};
    for (int fd = 1; fd <= 2; fd++)
        if (r->run_end[fd] >= 0 && r->held_at[fd] < r->held_len[fd])
            p[n++] = (struct pollfd){.fd = fd, .events = POLLOUT};
        else if (r->run_end[fd] >= 0)
            p[n++] = (struct pollfd){.fd = r->run_end[fd], .events = POLLIN};
    return n;
}

/* Writes all of <buf> to <fd>. A failure (ENOSPC, EFBIG) is told once,
 * kept in <r->failed>[fd] (run then exits 1 if the command exits 0: it
 * may have ended before, or ignore its broken pipe), and the pipe closed:
 * the command's next write fails (EPIPE), as its write into the file
 * would have, rather than its output being dropped unseen (told on a
 * standard error that may be that same file). */
static void write_failed(struct box_std_relay *r, int fd, ssize_t w)
{
    r->failed[fd] = true;
    fprintf(stderr,
            "sluice run: standard %s: write failed: %s; the command's writes there fail "
            "from now on (broken pipe), its output cut short (run exits 1 if it exits 0)\n",
            names[fd], w < 0 ? strerror(errno) : "nothing written");
}

static void put(struct box_std_relay *r, int fd, const char *buf, size_t len)
{
    while (len > 0 && !r->failed[fd]) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            write_failed(r, fd, w);
            return;
        }
        buf += w;
        len -= (size_t)w;
    }
}

/* Sends what <r> holds for the socket <fd> as far as it takes it now
 * (MSG_DONTWAIT: a reader that does not read never holds run's loop, and
 * no status flag of the caller's description changes). Returns false
 * while some is still held; a failure is told as put()'s. */
static bool send_held(struct box_std_relay *r, int fd)
{
    while (r->held_at[fd] < r->held_len[fd] && !r->failed[fd]) {
        ssize_t w = send(fd, r->held[fd] + r->held_at[fd], r->held_len[fd] - r->held_at[fd],
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return false;
        if (w <= 0)
            write_failed(r, fd, w);
        else
            r->held_at[fd] += (size_t)w;
    }
    r->held_at[fd] = r->held_len[fd] = 0;
    return true;
}

/* Copies what the pipe of <fd> holds; closes it at its end, or once a
 * write into the file failed. Returns whether it is still open. */
static bool copy(struct box_std_relay *r, int fd)
{
    static char buf[BOX_STD_HELD];
    for (;;) {
        if (r->held[fd] != NULL && !send_held(r, fd))
            return true; /* the socket has no room: its POLLOUT next */
        char *into = r->held[fd] != NULL ? r->held[fd] : buf;
        ssize_t n = r->failed[fd] ? 0 : read(r->run_end[fd], into, BOX_STD_HELD);
        if (n > 0 && r->held[fd] != NULL) {
            r->held_len[fd] = (size_t)n;
            continue;
        }
        if (n > 0) {
            put(r, fd, buf, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        close(r->run_end[fd]);
        r->run_end[fd] = -1;
        return false;
    }
}

/* Moves the next part of standard input's file into its pipe, at <f>'s
 * own offset, waiting for room in the pipe. pread() then write(), not
 * splice(): splice() holds the pipe's lock while it reads the file, and
 * a read that does not return (a hung FUSE or network file system) would
 * hold the command's every read of the pipe, and its close of it at its
 * exit, in the kernel with it. Returns the bytes moved, 0 at the file's
 * end, -1 with errno (EPIPE: no reader left). */
static ssize_t move_input(struct std_feed *f)
{
    static char buf[65536];
    ssize_t n = pread(STDIN_FILENO, buf, sizeof(buf), f->at);
    for (ssize_t put = 0; n > 0 && put < n;) {
        ssize_t w = write(f->pipe, buf + put, (size_t)(n - put));
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        put += w;
        f->at += w;
    }
    return n;
}

/* Tells that standard input's file could not be read (<why>), naming
 * it: the pipe closed, the command reads an end there, and cannot tell it
 * from the file's (a pipe carries no error). */
static void tell_read_failed(const char *why)
{
    char path[PATH_MAX], shown[320];
    text_shown_into(shown, sizeof(shown),
                    box_fd_path(STDIN_FILENO, path, sizeof(path)) > 0 ? path : "(unknown)");
    fprintf(stderr,
            "sluice run: standard input, the file %s: read failed: %s; the command reads its "
            "end there, its input cut short (run exits 1 if it exits 0)\n",
            shown, why);
}

/* Says that <f>'s thread is gone (<thread>) or that run no longer waits
 * for it; the last of the two frees it. Returns whether a read failed
 * before (told). */
static bool feed_let_go(struct std_feed *f, bool thread)
{
    pthread_mutex_lock(&f->lock);
    bool last = thread ? f->abandoned : f->done;
    bool failed = f->failed;
    if (thread)
        f->done = true;
    else
        f->abandoned = true;
    pthread_mutex_unlock(&f->lock);
    if (last) {
        pthread_mutex_destroy(&f->lock);
        free(f);
    }
    return failed;
}

/* The thread: fills standard input's pipe until the file's end or its
 * last reader is gone; a read error is told and kept in <f->failed>
 * while run still waits (once the box has ended, the command no longer
 * reads). Closes the pipe: the command reads its end. */
static void *feed_main(void *arg)
{
    struct std_feed *f = arg;
    for (;;) {
        ssize_t n = move_input(f);
        if (n > 0 || (n < 0 && errno == EINTR))
            continue;
        if (n < 0 && errno != EPIPE) {
            int e = errno;
            pthread_mutex_lock(&f->lock);
            if (!f->abandoned) {
                f->failed = true;
                tell_read_failed(strerror(e));
            }
            pthread_mutex_unlock(&f->lock);
        }
        break;
    }
    close(f->pipe);
    feed_let_go(f, true);
    return NULL;
}

/* The command is executed, or the box could not execute it: standard
 * input's pipe is filled when it still has a reader (the command's
 * descriptor 0), on a thread of its own; closed when it has none (the box
 * opened the file again, or gave no command). A thread that cannot be
 * started is told as a read that failed. */
static void start_input(struct box_std_relay *r)
{
    close(r->exec_end[0]);
    r->exec_end[0] = -1;
    struct pollfd p = {.fd = r->run_end[0], .events = POLLOUT};
    bool reader = poll(&p, 1, 0) >= 0 && (p.revents & POLLERR) == 0;
    struct std_feed *f = reader ? calloc(1, sizeof(*f)) : NULL;
    pthread_t t;
    int e = 0;
    if (f != NULL) {
        pthread_mutex_init(&f->lock, NULL);
        f->pipe = r->run_end[0];
        f->at = r->at;
        e = quiet_thread_create(&t, feed_main, f);
        if (e == 0) {
            pthread_detach(t);
            r->feed = f;
            r->run_end[0] = -1; /* the thread's now */
            return;
        }
        pthread_mutex_destroy(&f->lock);
        free(f);
    }
    if (reader) {
        char why[160];
        snprintf(why, sizeof(why), "no thread to read it on (%s)", strerror(e != 0 ? e : ENOMEM));
        r->failed[0] = true;
        tell_read_failed(why);
    }
    close(r->run_end[0]);
    r->run_end[0] = -1;
}

void box_std_relay_step(struct box_std_relay *r, const struct pollfd *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i].revents != 0 && p[i].fd == r->exec_end[0]) {
            char c;
            ssize_t got = read(r->exec_end[0], &c, 1);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
                start_input(r);
        }
        for (int fd = 1; fd <= 2; fd++)
            if (p[i].revents != 0 && r->run_end[fd] >= 0 &&
                (p[i].fd == r->run_end[fd] || p[i].fd == fd))
                copy(r, fd);
    }
}

void box_std_relay_finish(struct box_std_relay *r)
{
    /* The box has ended: standard input's pipe has no reader left. Its
     * thread finds that at its next write (EPIPE) and ends; run does not
     * wait for it, which may wait in a read of the file that does not
     * return. A read that failed before counts; one that fails now, the
     * command gone, does not. */
    if (r->feed != NULL && feed_let_go(r->feed, false))
        r->failed[0] = true;
    r->feed = NULL;
    if (r->run_end[0] >= 0)
        close(r->run_end[0]);
    r->run_end[0] = -1;
    /* Every process of the box is gone, and so are its writers: what the
     * pipes hold is read at once, and their end follows. A writer left
     * holds one only outside the box, passed on by the command (SCM_RIGHTS
     * on a host socket, with --allow-unix): not waited for past
     * BOX_STD_FINISH_MS, so that it cannot keep run from ending. */
    uint64_t until = monotonic_ms() + BOX_STD_FINISH_MS;
    for (int fd = 1; fd <= 2; fd++) {
        while (r->run_end[fd] >= 0 && copy(r, fd)) {
            uint64_t now = monotonic_ms();
            bool held = r->held_at[fd] < r->held_len[fd];
            struct pollfd p = held ? (struct pollfd){.fd = fd, .events = POLLOUT}
                                   : (struct pollfd){.fd = r->run_end[fd], .events = POLLIN};
            int n = now < until ? poll(&p, 1, (int)(until - now)) : 0;
            if (n < 0 && errno != EINTR)
                break;
            if (n == 0) {
                /* What its holder writes from now on fails (EPIPE) and
                 * never reaches the file: as for a failed write, run's
                 * success would pass for the whole output there. */
                r->failed[fd] = true;
                if (held)
                    fprintf(stderr,
                            "sluice run: standard %s: its reader has not taken the command's "
                            "output %d s after the box ended: run copies no more of it there, "
                            "the output cut short (run exits 1 if the command exits 0)\n",
                            names[fd], BOX_STD_FINISH_MS / 1000);
                else
                    fprintf(stderr,
                            "sluice run: standard %s: its pipe is still open outside the box %d "
                            "s after the box ended (the command passed it on): run copies no "
                            "more of it; writes there fail from now on (broken pipe), the output "
                            "cut short (run exits 1 if the command exits 0)\n",
                            names[fd], BOX_STD_FINISH_MS / 1000);
                break;
            }
        }
    }
    box_std_relay_close(r);
}

void box_std_relay_close(struct box_std_relay *r)
{
    if (r->feed != NULL)
        feed_let_go(r->feed, false);
    r->feed = NULL;
    if (r->box_end[2] == r->box_end[1]) /* one pipe for both */
        r->box_end[2] = -1;
    for (int fd = 0; fd <= 2; fd++) {
        if (r->run_end[fd] >= 0)
            close(r->run_end[fd]);
        if (r->box_end[fd] >= 0)
            close(r->box_end[fd]);
        r->run_end[fd] = r->box_end[fd] = -1;
    }
    for (int i = 0; i <= 1; i++)
        if (r->exec_end[i] >= 0)
            close(r->exec_end[i]);
    r->exec_end[0] = r->exec_end[1] = -1;
    for (int fd = 0; fd <= 2; fd++) {
        free(r->held[fd]);
        r->held[fd] = NULL;
        r->held_at[fd] = r->held_len[fd] = 0;
    }
}
