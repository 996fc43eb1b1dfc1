/* dns_pin: a name server's socket tied to its port (see dns_pin.h).
 *
 * libevent 2.1 has no accessor for a name server's socket, so it is found
 * among the process's descriptors: evdns opens it unbound and unconnected
 * (it binds at its first send), and socket() gives it the lowest
 * descriptor free then, at or below the mark's when no other thread opened
 * one meanwhile (DNS_PIN_SLACK more are looked at for those that did).
 * Other such sockets may be there before it: an earlier server's, of the
 * gateway's resolver or a webhook sink's, whose socket could not be pinned
 * and has not asked yet. The mark remembers them by inode (a descriptor
 * number may be closed and taken again), and what is new since is the
 * server's. Anything but exactly one new such socket is not guessed at.
 * The resolvers make their sockets on the event loop's thread, one server
 * at a time: the mark and the pin of one server see no other resolver's
 * socket made between them. */
#include "util/dns_pin.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/dns.h>

/* Descriptors past the lowest free one looked at: other threads (a log's
 * reopen) may have taken a few before evdns' socket() came. */
#define DNS_PIN_SLACK 64

/* True when <fd> is a datagram socket of <family> neither bound nor
 * connected; its inode in <*ino>. */
static bool unbound_datagram(int fd, int family, ino_t *ino)
{
    int type = 0, domain = 0;
    socklen_t l = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) != 0 || type != SOCK_DGRAM)
        return false;
    l = sizeof(domain);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l) != 0 || domain != family)
        return false;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0 || errno != ENOTCONN)
        return false;
    sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
        return false;
    uint16_t port = family == AF_INET6 ? ((struct sockaddr_in6 *)(void *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)(void *)&ss)->sin_port;
    struct stat st;
    if (port != 0 || fstat(fd, &st) != 0)
        return false;
    *ino = st.st_ino;
    return true;
}

void dns_pin_mark(struct dns_pin_mark *m, int family)
{
    m->n = 0;
    m->full = false;
    int lowest = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (lowest < 0) {
        m->top = -1;
        return;
    }
    close(lowest);
    m->top = lowest + DNS_PIN_SLACK;
    for (int fd = 0; fd <= m->top; fd++) {
        ino_t ino;
        if (!unbound_datagram(fd, family, &ino))
            continue;
        if (m->n == DNS_PIN_SEEN) {
            m->full = true;
            return;
        }
        m->seen[m->n++] = ino;
    }
}

static bool seen(const struct dns_pin_mark *m, ino_t ino)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->seen[i] == ino)
            return true;
    return false;
}

/* dns_pin(), the socket tied put in <*tied>. */
static int tie(const struct sockaddr *sa, socklen_t len, const struct dns_pin_mark *m,
               const char **why, int *tied)
{
    int found = -1;
    if (m->top < 0 || m->full) {
        *why = m->top < 0 ? "no descriptor was free" : "too many sockets like it";
        return -1;
    }
    for (int fd = 0; fd <= m->top; fd++) {
        ino_t ino;
        if (!unbound_datagram(fd, sa->sa_family, &ino) || seen(m, ino))
            continue;
        if (found >= 0) {
            *why = "its socket cannot be told from another";
            return -1;
        }
        found = fd;
    }
    if (found < 0) {
        *why = "its socket was not found";
        return -1;
    }
    if (connect(found, sa, len) != 0) {
        *why = strerror(errno);
        return -2;
    }
    *tied = found;
    return 0;
}

int dns_pin(const struct sockaddr *sa, socklen_t len, const struct dns_pin_mark *m,
            const char **why)
{
    int tied;
    return tie(sa, len, m, why, &tied);
}

/* False when no datagram socket can be connected to <sa> now (no route to
 * it, its family not on this host, ...), <*why> the kernel's reason: a
 * server whose socket evdns would make could not be tied to it either.
 * True when it can, and when the kernel has no socket to ask with (evdns
 * will not get one either, and says so). */
static bool connectable(const struct sockaddr *sa, socklen_t len, const char **why)
{
    int fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        if (errno != EAFNOSUPPORT)
            return true;
        *why = strerror(errno);
        return false;
    }
    bool ok = connect(fd, sa, len) == 0;
    if (!ok)
        *why = strerror(errno);
    close(fd);
    return ok;
}

enum dns_pin_result dns_pin_add(struct evdns_base *dns, const struct sockaddr *sa, socklen_t len,
                                const char **why, int *fd)
{
    int tied = -1;
    *why = NULL;
    if (fd != NULL)
        *fd = -1;
    if (!connectable(sa, len, why))
        return DNS_PIN_UNREACHABLE;
    struct dns_pin_mark mark;
    dns_pin_mark(&mark, sa->sa_family);
    if (evdns_base_nameserver_sockaddr_add(dns, sa, len, 0) != 0)
        return DNS_PIN_FAILED;
    switch (tie(sa, len, &mark, why, &tied)) {
    case 0:
        if (fd != NULL)
            *fd = tied;
        return DNS_PIN_TIED;
    case -1:
        return DNS_PIN_LOOSE;
    default:
        /* Found but refused by connect() since the check above: it would
         * take any answer, and evdns has no way to drop a server. */
        return DNS_PIN_FAILED;
    }
}
