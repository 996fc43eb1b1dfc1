/* std_check: what run's standard input, output and error may be, as the
 * command inherits them.
 *
 * The box closes every descriptor above 2 and opens files given for
 * reading again in the box (box.c), but 0, 1 and 2 themselves pass in. Two
 * kinds would open a way the box otherwise shuts:
 *
 * - A socket belongs to the network namespace it was made in, the host's:
 *   a TCP socket (inetd's, systemd's socket activation, `1<>/dev/tcp/...`)
 *   writes to whatever it is connected to, a UDP socket sends to any
 *   address, past the gateway. Only unix sockets are let in, and of those,
 *   without --allow-unix, only connected stream and seqpacket ones (a
 *   journald stream, a pipe made with socketpair()): a datagram socket can
 *   sendto() any socket path the box shows, and one not connected can
 *   connect() to one, which the command may not do with a socket of its
 *   own (seccomp refuses socket(AF_UNIX)).
 * - A device was opened on the host's /dev, which the box's nodev and its
 *   own /dev do not cover: through /proc/self/fd/N the command can open it
 *   again with other access (`< /dev/sdb` for writing, where Landlock does
 *   not refuse it; `> /dev/sdb` for reading, which Landlock never refuses).
 *   Terminals, and the memory devices anyone may read and write (null,
 *   zero, full, random, urandom), are let in; other devices are refused.
 *
 * Each is refused before anything starts, naming the descriptor and what
 * to give instead (a pipe or a file); run exits 2.
 *
 * What passes in is the caller's own open file description (a terminal, a
 * pipe), whose status flags the command can change with fcntl(F_SETFL) for
 * every holder: left O_NONBLOCK, the caller's next read of its terminal or
 * write into its pipe failed with EAGAIN once run had exited, and run's
 * summary into a full standard error was lost. run takes them before the
 * box and puts them back once it has ended (box_std_flags_save(),
 * box_std_flags_restore()). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "box/box.h"
#include "util/text_json.h"

static const char *const std_names[] = {"input", "output", "error"};

/* The memory devices (major 1) anyone may read and write: null, zero,
 * full, random, urandom. */
static bool harmless_device(const struct stat *st)
{
    const unsigned minors = 1u << 3 | 1u << 5 | 1u << 7 | 1u << 8 | 1u << 9;
    unsigned m = minor(st->st_rdev);
    return S_ISCHR(st->st_mode) && major(st->st_rdev) == 1 && m < 32 && (minors >> m & 1u) != 0;
}

struct named {
    int value;
    const char *name;
};

/* Families, with their article, and types of sockets, as messages name them. */
static const struct named families[] = {{AF_INET, "an IPv4"},
                                        {AF_INET6, "an IPv6"},
                                        {AF_NETLINK, "a netlink"},
                                        {AF_PACKET, "a packet"}};
static const struct named types[] = {{SOCK_STREAM, "stream"},
                                     {SOCK_DGRAM, "datagram"},
                                     {SOCK_SEQPACKET, "seqpacket"},
                                     {SOCK_RAW, "raw"}};

static const char *name_of(const struct named *t, size_t n, int value, const char *other)
{
    for (size_t i = 0; i < n; i++)
        if (t[i].value == value)
            return t[i].name;
    return other;
}

#define NAME_OF(t, v, other) name_of((t), sizeof(t) / sizeof((t)[0]), (v), (other))

static int check_socket(int fd, bool allow_unix, char *err, size_t errlen)
{
    int family = -1, type = -1;
    socklen_t len = sizeof(family);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &family, &len) < 0)
        family = -1;
    len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
        type = -1;
    if (family != AF_UNIX) {
        const char *f = NAME_OF(families, family, NULL);
        char fam[32];
        if (f == NULL)
            snprintf(fam, sizeof(fam), "a family %d", family);
        snprintf(err, errlen,
                 "standard %s is %s %s socket, a way out past the gateway (it belongs to the "
                 "host's network): the command does not start; give it a pipe (... | sluice run, "
                 "sluice run ... | cat) or a file instead",
                 std_names[fd], f != NULL ? f : fam, NAME_OF(types, type, "other"));
        return -1;
    }
    if (allow_unix)
        return 0;
    struct sockaddr_storage peer;
    socklen_t plen = sizeof(peer);
    bool connected = getpeername(fd, (struct sockaddr *)&peer, &plen) == 0;
    if ((type == SOCK_STREAM || type == SOCK_SEQPACKET) && connected)
        return 0;
    snprintf(err, errlen,
             "standard %s is a unix %s socket %s: through it the command would reach any unix "
             "socket the box shows, which it may not without --allow-unix, so it does not start; "
             "give it a pipe (... | sluice run, sluice run ... | cat) or a file instead, or pass "
             "--allow-unix",
             std_names[fd], NAME_OF(types, type, "other"),
             type == SOCK_STREAM || type == SOCK_SEQPACKET ? "that is not connected"
                                                           : "(it can send to any path)");
    return -1;
}

static int check_device(int fd, const struct stat *st, char *err, size_t errlen)
{
    if (isatty(fd) || harmless_device(st))
        return 0;
    char path[PATH_MAX], shown[320];
    text_shown_into(shown, sizeof(shown),
                    box_fd_path(fd, path, sizeof(path)) > 0 ? path : "(unknown)");
    int flags = fcntl(fd, F_GETFL);
    bool ro = flags >= 0 && (flags & O_ACCMODE) == O_RDONLY;
    snprintf(err, errlen,
             "standard %s is the device %s (%s %u:%u): through /proc/self/fd/%d the command "
             "could open it again for %s too, so it does not start; give it through a pipe "
             "instead (%s)",
             std_names[fd], shown, S_ISBLK(st->st_mode) ? "block" : "character", major(st->st_rdev),
             minor(st->st_rdev), fd, ro ? "writing" : "reading",
             ro ? "cat DEVICE | sluice run ..." : "sluice run ... | cat > DEVICE");
    return -1;
}

size_t box_fd_path(int fd, char *path, size_t len)
{
    char link[32];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = len > 0 ? readlink(link, path, len - 1) : -1;
    if (n <= 0)
        n = 0;
    if (len > 0)
        path[n] = '\0';
    return (size_t)n;
}

int box_check_std(bool allow_unix, char *err, size_t errlen)
{
    for (int fd = 0; fd <= 2; fd++) {
        struct stat st;
        if (fstat(fd, &st) != 0)
            continue;
        if (S_ISSOCK(st.st_mode) && check_socket(fd, allow_unix, err, errlen) < 0)
            return -1;
        if ((S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) && check_device(fd, &st, err, errlen) < 0)
            return -1;
    }
    return 0;
}

void box_std_flags_save(struct box_std_flags *f)
{
    for (int fd = 0; fd < 3; fd++)
        f->fl[fd] = fcntl(fd, F_GETFL);
}

void box_std_flags_restore(const struct box_std_flags *f)
{
    static const int bits[] = {O_NONBLOCK, O_APPEND, O_ASYNC, O_DIRECT, O_NOATIME};
    for (int fd = 0; fd < 3; fd++) {
        /* one flag at a time: F_SETFL changes none when the kernel refuses
         * one (O_NOATIME on another user's file, O_APPEND cleared on an
         * append-only one), and the others are still put back */
        for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]) && f->fl[fd] >= 0; i++) {
            int now = fcntl(fd, F_GETFL);
            if (now < 0 || (now & bits[i]) == (f->fl[fd] & bits[i]))
                continue;
            (void)fcntl(fd, F_SETFL, (now & ~bits[i]) | (f->fl[fd] & bits[i]));
        }
    }
}
