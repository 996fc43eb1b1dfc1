/* log_fd: the decision log's descriptor (see log_jsonl_int.h).
 *
 * Owns how the log's path is opened (a path naming standard output or
 * error, a socket, the stderr relay's pipe, a FIFO no one reads, a file a
 * cut write left inside a line), what a descriptor is (pipe, FIFO, socket,
 * regular file; whether epoll takes it) and what a failed open says.
 * Functions of descriptors and paths only: safe on the reopen's and the
 * writer's threads. */
#include "watch/log_jsonl_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <linux/magic.h>

#include "util/open_nolinks.h"
#include "util/stderr_relay.h"

/* True when epoll can watch <fd>. Regular files, and character devices
 * such as /dev/full, are refused (EPERM): their retries go through a plain
 * timer instead. The kernel is asked, with a throwaway epoll instance. */
static bool epoll_takes(int fd)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event e = {.events = EPOLLOUT};
    bool ok = ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) == 0;
    if (ep >= 0)
        close(ep);
    return ok;
}

/* What <fd> is. Asks the kernel (fstat, fstatfs, epoll): a background
 * reopen calls it on its thread. */
struct fd_kind log_fd_probe(int fd)
{
    struct fd_kind k = {.pollable = epoll_takes(fd)};
    struct stat st;
    bool known = fstat(fd, &st) == 0;
    k.is_pipe = known && S_ISFIFO(st.st_mode);
    k.is_sock = known && S_ISSOCK(st.st_mode);
    k.is_reg = known && S_ISREG(st.st_mode);
    struct statfs fs;
    k.is_fifo = k.is_pipe && fstatfs(fd, &fs) == 0 && fs.f_type != PIPEFS_MAGIC;
    return k;
}

/* Standard output or <err> (the original standard error, held), when <st>
 * is the file or socket it has open, else -1. */
static int inherited_of(const struct stat *st, int err)
{
    int fds[] = {STDOUT_FILENO, err};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
        struct stat have;
        if (fstat(fds[i], &have) == 0 && have.st_dev == st->st_dev && have.st_ino == st->st_ino)
            return fds[i];
    }
    return -1;
}

bool log_fd_is_inherited(const struct stat *st)
{
    bool is = inherited_of(st, stderr_relay_hold()) >= 0;
    stderr_relay_release();
    return is;
}

/* A copy (close-on-exec, the caller's) of standard output or the original
 * standard error, when <st> is the file or socket it has open, else -1. */
static int dup_inherited(const struct stat *st)
{
    int shared = inherited_of(st, stderr_relay_hold());
    int dup = shared >= 0 ? fcntl(shared, F_DUPFD_CLOEXEC, 3) : -1;
    stderr_relay_release();
    return dup;
}

/* A descriptor of our own for the inherited descriptor <fd> (standard
 * output, or the standard error the relay took over), without making the
 * one we share with the parent non-blocking: a regular file never blocks,
 * so it is used as is; a pipe or terminal is reopened through /proc for a
 * private open file description; a socket is written with MSG_DONTWAIT.
 * Without /proc, and only when <may_share>, the description is shared and
 * made non-blocking (standard output's; the relay writes the original
 * standard error with blocking writes, which that would break). */
int log_fd_open_inherited(int fd, bool may_share)
{
    struct stat st;
    char self[32];

    if (fstat(fd, &st) < 0)
        return -1;
    if (S_ISREG(st.st_mode) || S_ISSOCK(st.st_mode))
        return fcntl(fd, F_DUPFD_CLOEXEC, 3);
    snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
    int own = open(self, O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
    if (own >= 0 || !may_share)
        return own;
    own = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (own >= 0) {
        int fl = fcntl(own, F_GETFL);
        if (fl < 0 || fcntl(own, F_SETFL, fl | O_NONBLOCK) < 0) {
            close(own);
            return -1;
        }
    }
    return own;
}

/* True when <fd> is the relay's pipe (stderr_relay.h), which descriptor 2
 * is while the relay runs: /dev/stderr, /dev/fd/2 or /proc/self/fd/2,
 * opened then. Such a path names the standard error the process was
 * started with: through the relay, the log would not see what becomes of
 * its lines (a reader gone, a file that does not take them: /healthz
 * saying "ok" while they are lost), nor wait for a file's writes. */
static bool is_relay_pipe(int fd)
{
    return stderr_relay_original() != STDERR_FILENO && log_fd_same_file(fd, STDERR_FILENO);
}

/* Opens the log's path. One that names the regular file or the socket
 * standard output or error has open (/dev/stdout, /dev/fd/1, a file `>` or
 * systemd's StandardOutput= opened) is written through that descriptor's
 * open file description, as `--log -` is: a socket cannot be opened by name
 * (ENXIO; systemd's StandardOutput=journal is one), and a description of
 * its own, with an offset of its own, would write over what the other
 * writes (standard error with `2>&1`: a message landed on a log line). A
 * path that names the relay's pipe is the original standard error's
 * (is_relay_pipe()), opened as `--log -` opens standard output. */
int log_fd_open_path(const char *path, unsigned lflags)
{
    int flags = O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC;
    int fd =
        (lflags & LOG_JSONL_NO_LINKS) ? open_no_links(path, flags, 0640) : open(path, flags, 0640);
    struct stat st;
    if (fd >= 0 && is_relay_pipe(fd)) {
        close(fd);
        int own = log_fd_open_inherited(stderr_relay_hold(), false);
        stderr_relay_release();
        return own;
    }
    if (fd < 0) {
        int e = errno;
        if (e != ENXIO || stat(path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
            errno = e;
            return -1;
        }
    }
    if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)))
        return fd;
    int dup = dup_inherited(&st);
    if (dup < 0) {
        if (fd < 0)
            errno = ENXIO;
        return fd;
    }
    if (fd >= 0)
        close(fd);
    return dup;
}

/* A line end, when the regular file <fd> (the log's path, just opened)
 * ends inside a line: its last write was cut short (a full disk at the
 * last stop, a SIGKILL in the middle of a write), and the log's first line
 * would go on at that half line, the two one line no reader parses, the
 * new decision lost with it. The last byte is read through a descriptor of
 * its own (the log's is write-only), opened through /proc on the very
 * file; one that cannot be read so, or a line end the disk does not take,
 * is let be. Not for the file standard output or error has open: others
 * write it, a line of theirs may be under way. */
void log_fd_end_cut_line(int fd)
{
    struct stat st;
    char self[32], last;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0 || log_fd_is_inherited(&st))
        return;
    snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
    int rd = open(self, O_RDONLY | O_CLOEXEC);
    if (rd < 0)
        return;
    if (pread(rd, &last, 1, st.st_size - 1) == 1 && last != '\n') {
        ssize_t w = write(fd, "\n", 1); /* O_APPEND: at the end */
        (void)w;
    }
    close(rd);
}

/* What a failed open (or, with <reopen>, reopen) with errno <e> says: ELOOP
 * under LOG_JSONL_NO_LINKS is a refusal, not a loop of links; ENXIO on a
 * FIFO is one that no one has open for reading (opened O_NONBLOCK, so as
 * not to wait for a reader for ever). */
const char *log_fd_open_failure(const char *path, unsigned flags, int e, bool reopen)
{
    struct stat st;
    if (e == ELOOP && (flags & LOG_JSONL_NO_LINKS))
        return reopen ? "cannot reopen (a symbolic link on its path is refused)"
                      : "cannot open log (a symbolic link on its path is refused)";
    if (e == ENXIO && path != NULL && stat(path, &st) == 0 && S_ISFIFO(st.st_mode))
        return reopen ? "cannot reopen (a FIFO no one reads: start its reader first)"
                      : "cannot open log (a FIFO no one reads: start its reader first)";
    return reopen ? "cannot reopen" : "cannot open log";
}

/* True when <a> and <b> are descriptors of one file. */
bool log_fd_same_file(int a, int b)
{
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}
