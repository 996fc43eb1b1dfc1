/* dns_pin: the name server's socket tied to its port (see dns_pin.h).
 *
 * libevent 2.1 has no accessor for a name server's socket, so it is found
 * among the process's descriptors: evdns opens it unbound and unconnected
 * (it binds at its first send), socket() gives it the lowest descriptor
 * free then, <mark> when no other thread opened or closed one meanwhile;
 * every earlier server's socket is connected already, and the gateway's
 * other datagram sockets (the address probes of listener.c) live within
 * one call on the loop thread, as this does. Anything but exactly one such
 * socket is not guessed at. */
#include "gate/dns_pin.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

/* Descriptors past <mark> looked at: other threads (a log's reopen) may
 * have taken a few between the mark and evdns' socket(). */
#define DNS_PIN_SLACK 64

int dns_pin_mark(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0)
        close(fd);
    return fd;
}

/* True when <fd> is a datagram socket of <family> neither bound nor
 * connected. */
static bool unbound_datagram(int fd, int family)
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
    return port == 0;
}

int dns_pin(const struct sockaddr *sa, socklen_t len, int mark, const char **why)
{
    int found = -1;
    if (mark < 0) {
        *why = "no descriptor was free";
        return -1;
    }
    for (int fd = 0; fd <= mark + DNS_PIN_SLACK; fd++) {
        if (!unbound_datagram(fd, sa->sa_family))
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
        *why = "connect() failed";
        return -1;
    }
    return 0;
}
