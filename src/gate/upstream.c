#include "gate/upstream.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "gate/stream.h"
#include "util/units.h"
#include "util/shortage.h"
#include "util/zalloc.h"

struct upstream_connect {
    struct event_base *base;
    struct ipaddr addrs[UPSTREAM_MAX_ADDRS];
    size_t n;
    size_t next; /* the next address to try */
    uint16_t port;
    uint64_t deadline_ms;    /* CLOCK_MONOTONIC: the end of the whole budget */
    struct timeval timeout;  /* the timeout of the attempt in progress */
    struct bufferevent *bev; /* the attempt in progress */
    bool timed;              /* its timeouts are set (an attempt that waits) */
    evutil_socket_t fd;
    struct event *kick; /* starts or continues the attempts off the caller's stack */
    int short_errno;    /* the shortage's errno, for UPSTREAM_ERR_SHORT; 0 none */
    upstream_cb cb;
    void *arg;
    /* <kick>'s own memory, event_assign()ed: one allocation a connect, not
     * two (event_new() and event_free() cost a malloc() and a free()) */
    max_align_t kick_mem[];
};

unsigned upstream_attempt_ms(uint64_t left_ms, size_t addrs_left)
{
    if (left_ms == 0 || addrs_left == 0)
        return 0;
    uint64_t share = left_ms / addrs_left;
    if (share < UPSTREAM_ATTEMPT_FLOOR_MS)
        share = UPSTREAM_ATTEMPT_FLOOR_MS;
    if (share > left_ms)
        share = left_ms;
    return share > UINT_MAX ? UINT_MAX : (unsigned)share;
}

/* Sets uc->timeout for the attempt at uc->next. Returns false when the
 * budget is spent. */
static bool time_next_attempt(struct upstream_connect *uc)
{
    uint64_t now = monotonic_ms();
    uint64_t left = uc->deadline_ms > now ? uc->deadline_ms - now : 0;
    unsigned ms = upstream_attempt_ms(left, uc->n - uc->next);
    uc->timeout = timeval_of_ms(ms);
    return ms > 0;
}

void upstream_sockaddr(const struct ipaddr *a, uint16_t port, struct sockaddr_storage *ss,
                       socklen_t *len)
{
    memset(ss, 0, sizeof(*ss));
    if (ipaddr_is_v4(a)) {
        struct sockaddr_in *in = (struct sockaddr_in *)(void *)ss;
        in->sin_family = AF_INET;
        in->sin_port = htons(port);
        in->sin_addr.s_addr = htonl(ipaddr_v4(a));
        *len = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        memcpy(&in6->sin6_addr, a->b, 16);
        *len = sizeof(*in6);
    }
}

static void drop_attempt(struct upstream_connect *uc)
{
    if (uc->bev != NULL) {
        bufferevent_free(uc->bev);
        uc->bev = NULL;
        uc->timed = false;
    }
    if (uc->fd >= 0) {
        close(uc->fd);
        uc->fd = -1;
    }
}

static void finish(struct upstream_connect *uc, int err)
{
    upstream_cb cb = uc->cb;
    void *arg = uc->arg;
    struct bufferevent *bev = uc->bev;
    evutil_socket_t fd = uc->fd;
    size_t idx = uc->next > 0 ? uc->next - 1 : 0;
    if (err != 0) {
        drop_attempt(uc);
        bev = NULL;
        fd = -1;
    } else {
        bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
        /* Only when set: a bufferevent starts untimed, and clearing them
         * costs libevent a look at each of its events (about 140
         * instructions for a loopback connect, done inside connect()). */
        if (uc->timed)
            bufferevent_set_timeouts(bev, NULL, NULL);
        /* Connected: its descriptor set for good (stream.h). Else
         * libevent reads, with its FIONREAD. */
        (void)stream_own_reads(bev);
    }
    int e = uc->short_errno;
    event_del(uc->kick);
    free(uc);
    if (err == UPSTREAM_ERR_SHORT)
        errno = e;
    cb(err, bev, fd, idx, arg);
}

static void try_next(struct upstream_connect *uc);

static void connected(struct upstream_connect *uc)
{
    int one = 1;
    setsockopt(uc->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    finish(uc, 0);
}

/* True when uc->fd, still connecting as far as its bufferevent knows, is
 * connected: writable, no error, no hang-up (a zero-timeout poll() and
 * SO_ERROR, as libevent itself asks once the socket turns writable). */
static bool connected_unseen(const struct upstream_connect *uc)
{
    struct pollfd p = {.fd = uc->fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof(err);
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLOUT | POLLERR | POLLHUP)) == POLLOUT &&
           getsockopt(uc->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
}

/* The attempt's timeout found it connected: the connect completed while
 * the gateway was frozen past the attempt's time (SIGSTOP, a paused VM, a
 * long stall of its loop), and after SIGCONT epoll_wait() comes back with
 * EINTR and no event, so libevent runs the timeout before the write event
 * that would say so. The bufferevent took the attempt as failed (and still
 * waits for its connect), so the socket gets a new one. Before, the agent
 * got a 502 for an upstream that answered in time. */
static void connected_late(struct upstream_connect *uc)
{
    bufferevent_free(uc->bev);
    uc->timed = false;
    uc->bev = bufferevent_socket_new(uc->base, uc->fd, 0);
    if (uc->bev == NULL) {
        uc->short_errno = ENOMEM;
        finish(uc, UPSTREAM_ERR_SHORT); /* memory: every other address would meet it */
        return;
    }
    connected(uc);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct upstream_connect *uc = arg;
    (void)bev;
    if (what & BEV_EVENT_CONNECTED) {
        connected(uc);
        return;
    }
    if (what == (BEV_EVENT_WRITING | BEV_EVENT_TIMEOUT) && connected_unseen(uc)) {
        connected_late(uc);
        return;
    }
    drop_attempt(uc);
    /* Continue from the loop, not from inside this bufferevent's callback. */
    event_active(uc->kick, EV_TIMEOUT, 0);
}

/* Starts a connect to <ss> on uc->fd. Returns 1 when the connection is
 * already up (a loopback or on-host upstream completes the handshake inside
 * connect(): then no loop round is spent waiting to be told), 0 when it is
 * under way (uc->bev waits for it), -1 when it failed, errno saying why
 * (connect()'s; ENOMEM when the bufferevent could not be had). A failure
 * told later (POLLERR here, on_event) is the path's or the upstream's,
 * never the host's shortage: Linux takes the local port and the SYN's
 * memory inside connect() itself. */
static int start_attempt(struct upstream_connect *uc, const struct sockaddr_storage *ss,
                         socklen_t len)
{
    bool up = connect(uc->fd, (const struct sockaddr *)ss, len) == 0;
    if (!up) {
        if (errno != EINPROGRESS)
            return -1;
        struct pollfd p = {.fd = uc->fd, .events = POLLOUT};
        if (poll(&p, 1, 0) == 1) {
            if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
                return -1; /* errno still EINPROGRESS: not a shortage */
            up = (p.revents & POLLOUT) != 0;
        }
    }
    uc->bev = bufferevent_socket_new(uc->base, uc->fd, 0);
    if (uc->bev == NULL) {
        errno = ENOMEM;
        return -1;
    }
    if (up)
        return 1;
    bufferevent_setcb(uc->bev, NULL, NULL, on_event, uc);
    bufferevent_set_timeouts(uc->bev, &uc->timeout, &uc->timeout);
    uc->timed = true;
    /* NULL address: the socket is already connecting */
    return bufferevent_socket_connect(uc->bev, NULL, 0) == 0 ? 0 : -1;
}

static void try_next(struct upstream_connect *uc)
{
    while (uc->next < uc->n && time_next_attempt(uc)) {
        struct sockaddr_storage ss;
        socklen_t len;
        const struct ipaddr *a = &uc->addrs[uc->next++];
        upstream_sockaddr(a, uc->port, &ss, &len);
        uc->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (uc->fd < 0) {
            if (errno_is_shortage(errno)) { /* not the address's fault */
                /* the gateway's shortage: every other address would meet it */
                uc->short_errno = errno;
                finish(uc, UPSTREAM_ERR_SHORT);
                return;
            }
            continue;
        }
        /* An origin's urgent data (MSG_OOB) stays in the stream, a plain
         * byte in its place: else recv() skips it and a response body comes
         * up one byte short. Set before connect(), so that it covers the
         * first byte too (a server that speaks first). */
        int one = 1;
        (void)setsockopt(uc->fd, SOL_SOCKET, SO_OOBINLINE, &one, sizeof(one));
        switch (start_attempt(uc, &ss, len)) {
        case 1:
            connected(uc);
            return;
        case 0:
            return; /* on_event tells */
        default: {
            int e = errno;
            drop_attempt(uc);
            if (errno_is_shortage(e)) { /* memory: every other address would meet it */
                uc->short_errno = e;
                finish(uc, UPSTREAM_ERR_SHORT);
                return;
            }
            /* No local port toward this address: one may be free toward the
             * next. Not this address's fault, so, if no address connects,
             * neither is it the upstream's. */
            if (errno_is_port_shortage(e))
                uc->short_errno = e;
        }
        }
    }
    finish(uc, uc->short_errno != 0 ? UPSTREAM_ERR_SHORT : -1);
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    try_next(arg);
}

struct upstream_connect *upstream_connect_start(struct event_base *base, const struct ipaddr *addrs,
                                                size_t n, uint16_t port, unsigned budget_ms,
                                                upstream_cb cb, void *arg)
{
    struct upstream_connect *uc = zalloc(sizeof(*uc) + event_get_struct_event_size());
    if (uc == NULL)
        return NULL;
    uc->kick = (struct event *)(void *)uc->kick_mem;
    if (evtimer_assign(uc->kick, base, on_kick, uc) < 0) {
        free(uc);
        return NULL;
    }
    if (n > UPSTREAM_MAX_ADDRS)
        n = UPSTREAM_MAX_ADDRS;
    memcpy(uc->addrs, addrs, n * sizeof(addrs[0]));
    uc->n = n;
    uc->base = base;
    uc->port = port;
    uc->fd = -1;
    uc->deadline_ms = monotonic_ms() + budget_ms;
    uc->cb = cb;
    uc->arg = arg;
    event_active(uc->kick, EV_TIMEOUT, 0);
    return uc;
}

void upstream_connect_cancel(struct upstream_connect *uc)
{
    if (uc == NULL)
        return;
    drop_attempt(uc);
    event_del(uc->kick);
    free(uc);
}
