#include "util/unix_listen.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* 1 when the unix socket <un> may be in use: a connection to it is
 * accepted, or waits in its full backlog, or fails for any reason but
 * ECONNREFUSED (ENOENT: removed meanwhile), which alone says that nothing
 * serves there (a stale socket, its server gone without removing it), 0
 * then. A socket of another type (EPROTOTYPE: a datagram or seqpacket
 * server) or one we may not write (EACCES: another user's server) is not
 * stale. Sets <*why> to connect()'s error, 0 when it was accepted or waits.
 * -1, <*why> set, when no socket could be had to ask (EMFILE): that tells
 * nothing, and a live server's file must not be taken for stale. */
static int unix_in_use(const struct sockaddr_un *un, socklen_t len, int *why)
{
    *why = 0;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *why = errno;
        return -1;
    }
    int used = 1;
    if (connect(fd, (const struct sockaddr *)un, len) != 0 && errno != EAGAIN &&
        errno != EINPROGRESS) {
        *why = errno;
        used = errno != ECONNREFUSED && errno != ENOENT;
    }
    close(fd);
    return used;
}

int unix_listen_bind(const struct sockaddr_un *un, socklen_t len, const char *name,
                     struct stat *bound, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(un->sun_path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errlen, "%s: exists and is not a socket", name);
            return -1;
        }
        /* Removing a live one would leave its server (another gateway)
         * serving nobody, and that server's exit would remove ours. */
        int why;
        int used = unix_in_use(un, len, &why);
        if (used < 0) {
            snprintf(err, errlen, "%s: cannot tell whether another server uses it (socket: %s)",
                     name, strerror(why));
            return -1;
        }
        if (used) {
            if (why == 0)
                snprintf(err, errlen, "%s: in use by another server", name);
            else
                snprintf(err, errlen, "%s: in use by another server (connect: %s)", name,
                         strerror(why));
            return -1;
        }
        unlink(un->sun_path); /* a stale socket from an earlier run */
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "%s: socket: %s", name, strerror(errno));
        return -1;
    }
    if (bind(fd, (const struct sockaddr *)un, len) != 0) {
        snprintf(err, errlen, "%s: bind: %s", name, strerror(errno));
        close(fd);
        return -1;
    }
    const char *step = chmod(un->sun_path, 0660) != 0    ? "chmod"
                       : lstat(un->sun_path, bound) != 0 ? "stat"
                                                         : NULL;
    if (step != NULL) {
        snprintf(err, errlen, "%s: %s: %s", name, step, strerror(errno));
        unlink(un->sun_path);
        close(fd);
        return -1;
    }
    return fd;
}

void unix_listen_unlink_own(const char *path, const struct stat *bound)
{
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == bound->st_dev &&
        st.st_ino == bound->st_ino)
        unlink(path);
}
