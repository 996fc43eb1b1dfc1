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
 * The mirror case: a file given for reading as standard input that the
 * box does not open again at its path (not shown there: hidden, under
 * /tmp; or its user cannot reach or open it there) would be held on the
 * host's mount, and through /proc/self/fd/0 the command could open it
 * again for writing or truncate it, or change its mode. Where the box
 * shows it, the box opens it again by its path (box.c); everywhere else
 * the command reads the read end of a pipe that run fills from the file,
 * as fast as the command reads (no more than the pipe holds at a time),
 * from the caller's offset, which it leaves where it was (splice() and
 * pread() at an offset of run's own), as the box's own open file of a file
 * it shows does.
 *
 * run makes the pipes before the box, whether the box then uses them or
 * not (only inside is it known what the box shows), and reads them until
 * every writer is gone: a pipe the box did not use is at its end once the
 * command is executed, one it used once the box has ended (or, passed on
 * outside the box, BOX_STD_FINISH_MS after that, at most). Standard
 * input's is filled until the file's end or its last reader is gone (the
 * command closed it, or was executed without it), and closed once the box
 * has ended: run never waits for a command that stopped reading. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/kcmp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "box/box.h"
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

void box_std_relay_init(struct box_std_relay *r)
{
    for (int fd = 0; fd <= 2; fd++)
        r->run_end[fd] = r->box_end[fd] = -1;
    memset(r->failed, 0, sizeof(r->failed));
    r->at = 0;
}

/* The pipe run fills from descriptor 0 when it is a regular file open for
 * reading only (open for writing too, no pipe carries it: box.c). Returns
 * 0, or -1 with a message in <err>. */
static int open_input(struct box_std_relay *r, char *err, size_t errlen)
{
    struct stat st;
    int flags = fcntl(STDIN_FILENO, F_GETFL);
    if (flags < 0 || (flags & O_ACCMODE) != O_RDONLY || fstat(STDIN_FILENO, &st) != 0 ||
        !S_ISREG(st.st_mode))
        return 0;
    off_t at = lseek(STDIN_FILENO, 0, SEEK_CUR);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "standard input: pipe: %s", strerror(errno));
        return -1;
    }
    /* run's end never blocks the wait for the box's report */
    fcntl(p[1], F_SETFL, O_NONBLOCK);
    r->run_end[0] = p[1];
    r->box_end[0] = p[0];
    r->at = at > 0 ? at : 0;
    return 0;
}

int box_std_relay_open(struct box_std_relay *r, char *err, size_t errlen)
{
    struct stat st[3];
    box_std_relay_init(r);
    if (open_input(r, err, errlen) < 0)
        return -1;
    for (int fd = 1; fd <= 2; fd++) {
        if (!written_file(fd, &st[fd]))
            continue;
        if (fd == 2 && r->run_end[1] >= 0 && one_description(&st[1], &st[2])) {
            r->box_end[2] = r->box_end[1];
            continue;
        }
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
            snprintf(err, errlen, "standard %s: pipe: %s", names[fd], strerror(errno));
            box_std_relay_close(r);
            return -1;
        }
        /* run's end never blocks the wait for the box's report */
        fcntl(p[0], F_SETFL, O_NONBLOCK);
        r->run_end[fd] = p[0];
        r->box_end[fd] = p[1];
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
}

size_t box_std_relay_poll(const struct box_std_relay *r, struct pollfd *p)
{
    size_t n = 0;
    for (int fd = 0; fd <= 2; fd++)
        if (r->run_end[fd] >= 0)
            p[n++] = (struct pollfd){.fd = r->run_end[fd], .events = fd == 0 ? POLLOUT : POLLIN};
    return n;
}

/* Writes all of <buf> to <fd>. A failure (ENOSPC, EFBIG) is told once,
 * kept in <r->failed>[fd] (run then exits 1 if the command exits 0: it
 * may have ended before, or ignore its broken pipe), and the pipe closed:
 * the command's next write fails (EPIPE), as its write into the file
 * would have, rather than its output being dropped unseen (told on a
 * standard error that may be that same file). */
static void put(struct box_std_relay *r, int fd, const char *buf, size_t len)
{
    while (len > 0 && !r->failed[fd]) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            r->failed[fd] = true;
            fprintf(stderr,
                    "sluice run: standard %s: write failed: %s; the command's writes there fail "
                    "from now on (broken pipe), its output cut short (run exits 1 if it exits 0)\n",
                    names[fd], w < 0 ? strerror(errno) : "nothing written");
            return;
        }
        buf += w;
        len -= (size_t)w;
    }
}

/* Copies what the pipe of <fd> holds; closes it at its end, or once a
 * write into the file failed. Returns whether it is still open. */
static bool copy(struct box_std_relay *r, int fd)
{
    static char buf[65536];
    for (;;) {
        ssize_t n = r->failed[fd] ? 0 : read(r->run_end[fd], buf, sizeof(buf));
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

/* Moves from standard input's file into its pipe what the pipe takes,
 * at run's own offset: splice() where the file system has it, pread()
 * and write() elsewhere (what did not fit is read again). Returns the
 * bytes moved, 0 at the file's end, -1 with errno (EAGAIN: the pipe is
 * full; EPIPE: no reader left). */
static ssize_t move_input(struct box_std_relay *r)
{
    static char buf[65536];
    ssize_t n = splice(STDIN_FILENO, &r->at, r->run_end[0], NULL, sizeof(buf), SPLICE_F_NONBLOCK);
    if (n >= 0 || errno != EINVAL)
        return n;
    n = pread(STDIN_FILENO, buf, sizeof(buf), r->at);
    if (n <= 0)
        return n;
    ssize_t w = write(r->run_end[0], buf, (size_t)n);
    if (w > 0)
        r->at += w;
    return w;
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

/* Fills the pipe of standard input as far as it takes; closes it at the
 * file's end (the command then reads its end), once it has no reader
 * left, or after a read error, told and kept in <r->failed>[0]. */
static void feed(struct box_std_relay *r)
{
    for (;;) {
        ssize_t n = move_input(r);
        if (n > 0 || (n < 0 && errno == EINTR))
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n < 0 && errno != EPIPE) {
            r->failed[0] = true;
            tell_read_failed(strerror(errno));
        }
        close(r->run_end[0]);
        r->run_end[0] = -1;
        return;
    }
}

void box_std_relay_step(struct box_std_relay *r, const struct pollfd *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i].revents != 0 && p[i].fd == r->run_end[0])
            feed(r);
        for (int fd = 1; fd <= 2; fd++)
            if (p[i].revents != 0 && p[i].fd == r->run_end[fd])
                copy(r, fd);
    }
}

void box_std_relay_finish(struct box_std_relay *r)
{
    /* the box has ended: standard input's pipe has no reader left */
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
            struct pollfd p = {.fd = r->run_end[fd], .events = POLLIN};
            int n = now < until ? poll(&p, 1, (int)(until - now)) : 0;
            if (n < 0 && errno != EINTR)
                break;
            if (n == 0) {
                fprintf(stderr,
                        "sluice run: standard %s: its pipe is still open outside the box %d s "
                        "after the box ended (the command passed it on): run copies no more of "
                        "it\n",
                        names[fd], BOX_STD_FINISH_MS / 1000);
                break;
            }
        }
    }
    box_std_relay_close(r);
}

void box_std_relay_close(struct box_std_relay *r)
{
    if (r->box_end[2] == r->box_end[1]) /* one pipe for both */
        r->box_end[2] = -1;
    for (int fd = 0; fd <= 2; fd++) {
        if (r->run_end[fd] >= 0)
            close(r->run_end[fd]);
        if (r->box_end[fd] >= 0)
            close(r->box_end[fd]);
        r->run_end[fd] = r->box_end[fd] = -1;
    }
}
