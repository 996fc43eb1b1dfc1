/* relay: inside the box, 127.0.0.1:3128 and [::1]:3128 carried to the
 * gateway's unix socket outside.
 *
 * One poll() loop, every socket non-blocking. Each connection has a
 * bounded buffer per direction (RELAY_BUF): a side is read only while
 * the buffer towards the other side has room, so a slow reader slows the
 * writer instead of growing memory. An EOF from one side is passed on as
 * shutdown(SHUT_WR) once its buffer has drained (half-close), and so is
 * a side's failure (a reset) once what it sent before is passed on (a
 * unix socket has no reset); the pair is closed when both directions are
 * done; so is a connection whose gateway closed its end (not a
 * half-close: poll() reports its hang-up) once the client has what it
 * sent, however long the client keeps its own end open (an idle
 * connection in an agent's pool, say), so that such connections do not
 * hold the relay's slots. A side with nothing to read or write is
 * otherwise left out of poll(): poll() reports a hang-up whatever was
 * asked, and a side that stays hung up while the connection goes on would
 * wake the relay at once, again and again. At most
 * RELAY_MAX_CONNS connections: beyond that the listeners are not polled and
 * new clients wait in the backlog. When accept() fails for want of a
 * resource (EMFILE under a low RLIMIT_NOFILE, ENFILE, ENOBUFS, ENOMEM) the
 * client stays in the backlog and the listener readable: the listeners then
 * rest RELAY_ACCEPT_PAUSE_MS instead of being retried at once, which would
 * spin a core for as long as the client waits. When the gateway's listen
 * backlog is full (a gateway serving many clients, --proxy), a unix
 * connect() fails at once with EAGAIN, where a TCP client would wait in the
 * gateway's SYN queue; and accept() may take the last descriptor, leaving
 * none for the socket towards the gateway. Either way the client is kept,
 * unread, and what failed tried again after RELAY_RETRY_MIN_MS, doubling
 * up to RELAY_RETRY_MAX_MS, for up to RELAY_CONNECT_WAIT_MS; only then is
 * it closed, as when the gateway cannot be reached at all (and for want of
 * a descriptor the listeners rest too).
 *
 * When the command has ended (and the rest of the box with it: the caller
 * kills it first), relay_drain() carries on to the gateway what the
 * clients sent and the relay has not yet passed on (in its buffers, in the
 * clients' sockets, or waiting for the gateway's socket), as a TCP peer
 * would still get it once the sender has exited: an upload written just
 * before the command's exit is not cut. No new client is taken then, and
 * what the gateway sends back is read and dropped (no one is left to read
 * it); a connection is closed once its client's end is passed on, and
 * whatever is left when RELAY_DRAIN_MS is over is closed as it is. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "box/box_int.h"
#include "util/shortage.h"

/* Bytes read from one side, waiting for the other: data[off, off + len). */
struct pipe_buf {
    size_t off, len;
    char data[RELAY_BUF];
};

struct relay_conn {
    int fd[2];             /* 0: the client in the box; 1: the gateway */
    struct pipe_buf to[2]; /* to[i]: bytes waiting to be written to fd[i] */
    bool eof[2];           /* fd[i] has been read to its end */
    bool shut[2];          /* fd[i] has been shut for writing */
    bool failed[2];        /* fd[i] failed (a reset): nothing more is written to it */
    /* fd[1] is not connected yet: the gateway's backlog was full, or no
     * descriptor was left for it (-1 then) */
    bool waiting;
    long long retry_at, give_up_at; /* CLOCK_MONOTONIC ms */
    int retry_ms;
};

struct relay {
    int lfd[2];
    size_t nlfd;
    struct sockaddr_un target;
    socklen_t target_len;
    struct relay_conn *conns[RELAY_MAX_CONNS];
    size_t nconns;
    unsigned long accepted; /* connections carried to the gateway's socket */
    /* Read while the relay runs, from another thread (its unit test
     * watches it sleep): an atomic counter, relaxed (a count, ordering
     * nothing). */
    atomic_ulong wakeups;
    long long paused_until; /* CLOCK_MONOTONIC ms: listeners rest until then */
    int connect_wait_ms;    /* RELAY_CONNECT_WAIT_MS, RELAY_DRAIN_MS: relay_set_waits() */
    int drain_ms;
    bool draining; /* relay_drain(): the clients are gone */
};

#define RELAY_ACCEPT_PAUSE_MS 250
#define RELAY_RETRY_MIN_MS    10
#define RELAY_RETRY_MAX_MS    200
#define RELAY_CONNECT_WAIT_MS 10000
#define RELAY_DRAIN_MS        10000

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int listen_on(int family, unsigned short port, int *out)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* accepted sockets inherit it: TCP urgent data (MSG_OOB) stays in the
     * stream and is carried on as a plain byte, where read() would skip it */
    setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &one, sizeof(one));
    int rc;
    if (family == AF_INET) {
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        rc = bind(fd, (struct sockaddr *)&sin, sizeof(sin));
    } else {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
        sin6.sin6_addr = in6addr_loopback;
        rc = bind(fd, (struct sockaddr *)&sin6, sizeof(sin6));
    }
    if (rc < 0 || listen(fd, 128) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    *out = fd;
    return 0;
}

struct relay *relay_new(const char *target, unsigned short port, char *err, size_t errlen)
{
    struct relay *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        snprintf(err, errlen, "relay: out of memory");
        return NULL;
    }
    size_t n = strlen(target);
    if (n == 0 || n >= sizeof(r->target.sun_path)) {
        box_path_error(err, errlen, "relay: the gateway socket ", target, "",
                       "the path is too long for a unix socket");
        free(r);
        return NULL;
    }
    r->connect_wait_ms = RELAY_CONNECT_WAIT_MS;
    r->drain_ms = RELAY_DRAIN_MS;
    r->target.sun_family = AF_UNIX;
    memcpy(r->target.sun_path, target, n + 1);
    r->target_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    if (listen_on(AF_INET, port, &r->lfd[0]) < 0) {
        snprintf(err, errlen, "relay: cannot listen on 127.0.0.1:%u: %s", port, strerror(errno));
        free(r);
        return NULL;
    }
    r->nlfd = 1;
    if (listen_on(AF_INET6, port, &r->lfd[1]) == 0) {
        r->nlfd = 2;
    } else if (errno != EAFNOSUPPORT && errno != EADDRNOTAVAIL) {
        snprintf(err, errlen, "relay: cannot listen on [::1]:%u: %s", port, strerror(errno));
        close(r->lfd[0]);
        free(r);
        return NULL;
    }
    return r;
}

static void conn_close(struct relay *r, size_t i)
{
    struct relay_conn *c = r->conns[i];
    close(c->fd[0]);
    if (c->fd[1] >= 0)
        close(c->fd[1]);
    free(c);
    r->conns[i] = r->conns[--r->nconns];
}

/* Connects the waiting connection <i> to the gateway's socket: makes its
 * socket first when it has none (none for want of descriptors or memory:
 * tried again later), then connect(), which for a unix socket completes at
 * once or fails (EAGAIN: the gateway's backlog is full, tried again later).
 * Returns 1 when connected, 0 when it waits, -1 when it was closed
 * (refused, or still waiting at its give_up_at). */
static int gateway_connect(struct relay *r, size_t i, long long now)
{
    struct relay_conn *c = r->conns[i];
    if (c->fd[1] < 0) {
        c->fd[1] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->fd[1] < 0 && !errno_is_shortage(errno)) {
            conn_close(r, i);
            return -1;
        }
    }
    if (c->fd[1] >= 0) {
        if (connect(c->fd[1], (struct sockaddr *)&r->target, r->target_len) == 0 ||
            errno == EISCONN) {
            c->waiting = false;
            r->accepted++;
            return 1;
        }
        if (errno != EAGAIN) {
            conn_close(r, i);
            return -1;
        }
    }
    if (now >= c->give_up_at) {
        conn_close(r, i);
        return -1;
    }
    c->retry_at = now + c->retry_ms;
    c->retry_ms = c->retry_ms * 2 > RELAY_RETRY_MAX_MS ? RELAY_RETRY_MAX_MS : c->retry_ms * 2;
    return 0;
}

/* Takes one client from <lfd>'s backlog. Returns 1 when one was taken
 * (relayed, waiting for the gateway's socket, or closed when the gateway
 * refuses it), 0 when there is none now, -1 when accept() failed, or no
 * socket towards the gateway could be made, for want of a resource. */
static int accept_one(struct relay *r, int lfd)
{
    int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd < 0)
        return errno_is_shortage(errno) ? -1 : 0;
    struct relay_conn *c = malloc(sizeof(*c));
    if (c == NULL) {
        close(cfd);
        return 1;
    }
    long long now = now_ms();
    c->fd[0] = cfd;
    c->fd[1] = -1;
    c->to[0].off = c->to[1].off = 0;
    c->to[0].len = c->to[1].len = 0;
    c->eof[0] = c->eof[1] = false;
    c->shut[0] = c->shut[1] = false;
    c->failed[0] = c->failed[1] = false;
    c->waiting = true;
    c->retry_ms = RELAY_RETRY_MIN_MS;
    c->retry_at = now;
    c->give_up_at = now + r->connect_wait_ms;
    r->conns[r->nconns++] = c;
    if (gateway_connect(r, r->nconns - 1, now) == 0 && c->fd[1] < 0)
        return -1;
    return 1;
}

/* Tries again the connect() of each waiting connection whose time has
 * come (gateway_connect()). */
static void retry_waiting(struct relay *r)
{
    long long now = now_ms();
    for (size_t i = r->nconns; i-- > 0;) {
        const struct relay_conn *c = r->conns[i];
        if (c->waiting && c->retry_at <= now)
            gateway_connect(r, i, now);
    }
}

/* poll()'s timeout: until the listeners' pause ends or the next waiting
 * connection is tried again, -1 (none) when nothing is due. */
static int poll_timeout(struct relay *r)
{
    long long now = now_ms(), until = 0;
    if (r->paused_until != 0) {
        if (r->paused_until > now)
            until = r->paused_until;
        else
            r->paused_until = 0;
    }
    for (size_t i = 0; i < r->nconns; i++) {
        const struct relay_conn *c = r->conns[i];
        if (c->waiting && (until == 0 || c->retry_at < until))
            until = c->retry_at;
    }
    if (until == 0)
        return -1;
    return until > now ? (int)(until - now) : 0;
}

/* Reads once from <fd> into <b>'s free space (moving what waits to the
 * front first when that makes room). Returns the bytes read, 0 at the end
 * of the side, -1 with errno set (EAGAIN: nothing now). */
static ssize_t fill(struct pipe_buf *b, int fd)
{
    if (b->len == 0)
        b->off = 0;
    else if (b->off > 0 && b->off + b->len == RELAY_BUF) {
        memmove(b->data, b->data + b->off, b->len);
        b->off = 0;
    }
    ssize_t n = read(fd, b->data + b->off + b->len, RELAY_BUF - b->off - b->len);
    if (n > 0)
        b->len += (size_t)n;
    return n;
}

/* Sends once what <b> holds to <fd>. Returns the bytes sent, or -1 with
 * errno set (EAGAIN: the socket is full). */
static ssize_t drain(struct pipe_buf *b, int fd)
{
    ssize_t n = send(fd, b->data + b->off, b->len, MSG_NOSIGNAL);
    if (n > 0) {
        b->off += (size_t)n;
        b->len -= (size_t)n;
    }
    return n;
}

/* Moves bytes for one connection, <revents> saying which sides poll()
 * found readable: reads and writes until both directions would block, or
 * for RELAY_ROUNDS rounds (so that one busy connection cannot starve the
 * others), one poll() for up to that many buffers. A side whose socket
 * fails (a reset), read or written, is done: what it sent before is still
 * read and passed on to the other side, then the end of the stream (a
 * unix socket has no reset to pass on), while what was or is yet to be
 * sent towards it is dropped. <draining>: the client is gone
 * (relay_drain()); what the gateway sends is dropped, and the connection
 * is over once the client's end is passed on. Returns -1 when it is
 * over. */
static int conn_step(struct relay_conn *c, const short *revents, bool draining)
{
    bool readable[2], writable[2] = {true, true};
    for (int s = 0; s < 2; s++)
        readable[s] = (revents[s] & (POLLIN | POLLHUP | POLLERR)) != 0;
    /* the gateway closed its end, read to its end: it takes nothing more,
     * so what the client sends from now on goes nowhere (a TCP peer that
     * closed would reset it), and the connection is over once the client
     * has what the gateway sent */
    if (c->eof[1] && (revents[1] & (POLLHUP | POLLERR)) != 0)
        c->failed[1] = true;
    for (int round = 0; round < RELAY_ROUNDS; round++) {
        bool moved = false;
        for (int s = 0; s < 2; s++) {
            int o = 1 - s;
            /* read from side s into to[o] */
            if (c->eof[s] || !readable[s] || c->to[o].len == RELAY_BUF)
                continue;
            size_t room = RELAY_BUF - c->to[o].len;
            ssize_t n = fill(&c->to[o], c->fd[s]);
            if (n > 0) {
                moved = true;
                if ((size_t)n < room)
                    readable[s] = false; /* drained: poll() says when there is more */
            } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
                readable[s] = false;
            } else {
                /* its end, or its failure: Linux reports a reset only once
                 * every byte that came before it was read */
                c->eof[s] = true;
                c->failed[s] = c->failed[s] || n < 0;
            }
        }
        for (int s = 0; s < 2; s++) {
            if (c->failed[s] || (draining && s == 0))
                c->to[s].off = c->to[s].len = 0;
            if (c->to[s].len == 0 || !writable[s])
                continue;
            ssize_t n = drain(&c->to[s], c->fd[s]);
            if (n > 0) {
                moved = true;
            } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
                writable[s] = false;
            } else if (n < 0) {
                c->failed[s] = true;
                c->to[s].off = c->to[s].len = 0;
                moved = true;
            }
        }
        if (!moved)
            break;
    }
    for (int s = 0; s < 2; s++) {
        /* a failed side takes nothing more */
        if (c->failed[s])
            c->shut[s] = true;
        /* the other side ended and everything it sent is written: pass the EOF on */
        if (c->eof[1 - s] && c->to[s].len == 0 && !c->shut[s]) {
            shutdown(c->fd[s], SHUT_WR);
            c->shut[s] = true;
        }
    }
    if ((c->shut[0] || draining) && c->shut[1])
        return -1;
    return 0;
}

/* relay_run() and relay_drain(): relays until <on_extra> returns nonzero
 * (<extra_fd> -1: never), or, <until> not 0, until no connection is left
 * or that CLOCK_MONOTONIC time (ms) has come. */
static int relay_loop(struct relay *r, int extra_fd, int (*on_extra)(void *arg), void *arg,
                      long long until)
{
    struct pollfd pfd[3 + 2 * RELAY_MAX_CONNS];
    for (;;) {
        size_t n = 0;
        long long now = now_ms();
        if (until != 0 && (r->nconns == 0 || now >= until))
            return 0;
        pfd[n++] = (struct pollfd){.fd = extra_fd, .events = POLLIN};
        int timeout = poll_timeout(r);
        if (until != 0 && (timeout < 0 || timeout > until - now))
            timeout = (int)(until - now);
        bool accepting = !r->draining && r->nconns < RELAY_MAX_CONNS && r->paused_until == 0;
        for (size_t i = 0; i < r->nlfd; i++)
            pfd[n++] = (struct pollfd){.fd = accepting ? r->lfd[i] : -1, .events = POLLIN};
        size_t base = n;
        for (size_t i = 0; i < r->nconns; i++) {
            const struct relay_conn *c = r->conns[i];
            for (int s = 0; s < 2; s++) {
                short ev = 0;
                /* a waiting client stays unread until the gateway takes it */
                if (!c->waiting && !c->eof[s] && c->to[1 - s].len < RELAY_BUF)
                    ev |= POLLIN;
                if (c->to[s].len > 0)
                    ev |= POLLOUT;
                /* poll() skips a negative descriptor, and its hang-up with
                 * it; but the gateway's socket, once read to its end while
                 * the client's side goes on, is watched for its hang-up,
                 * which a close brings and a half-close does not */
                bool hangup = s == 1 && c->eof[1] && !c->shut[1] && !c->waiting;
                pfd[n++] = (struct pollfd){.fd = ev != 0 || hangup ? c->fd[s] : -1, .events = ev};
            }
        }
        if (poll(pfd, n, timeout) < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        atomic_fetch_add_explicit(&r->wakeups, 1, memory_order_relaxed);
        /* connections first: their slots in pfd follow r->conns' order */
        for (size_t i = r->nconns; i-- > 0;) {
            short rev[2] = {pfd[base + 2 * i].revents, pfd[base + 2 * i + 1].revents};
            if ((rev[0] | rev[1]) == 0)
                continue;
            if (conn_step(r->conns[i], rev, r->draining) < 0)
                conn_close(r, i);
        }
        retry_waiting(r);
        for (size_t i = 0; i < r->nlfd; i++)
            if (pfd[1 + i].revents & POLLIN)
                for (int k = 0; k < 16 && r->nconns < RELAY_MAX_CONNS && r->paused_until == 0;
                     k++) {
                    int got = accept_one(r, r->lfd[i]);
                    if (got < 0)
                        r->paused_until = now_ms() + RELAY_ACCEPT_PAUSE_MS;
                    if (got <= 0)
                        break;
                }
        if ((pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) && on_extra(arg) != 0)
            return 0;
    }
}

int relay_run(struct relay *r, int extra_fd, int (*on_extra)(void *arg), void *arg)
{
    return relay_loop(r, extra_fd, on_extra, arg, 0);
}

int relay_drain(struct relay *r)
{
    r->draining = true;
    for (size_t i = 0; i < r->nlfd; i++)
        close(r->lfd[i]);
    r->nlfd = 0;
    /* what the gateway sent is dropped now, what the clients did pass on */
    const short none[2] = {0, 0};
    for (size_t i = r->nconns; i-- > 0;)
        if (!r->conns[i]->waiting && conn_step(r->conns[i], none, true) < 0)
            conn_close(r, i);
    return relay_loop(r, -1, NULL, NULL, now_ms() + r->drain_ms);
}

void relay_set_waits(struct relay *r, int connect_wait_ms, int drain_ms)
{
    r->connect_wait_ms = connect_wait_ms;
    r->drain_ms = drain_ms;
}

unsigned long relay_accepted(const struct relay *r)
{
    return r->accepted;
}

unsigned long relay_wakeups(const struct relay *r)
{
    return atomic_load_explicit(&r->wakeups, memory_order_relaxed);
}

void relay_free(struct relay *r)
{
    if (r == NULL)
        return;
    while (r->nconns > 0)
        conn_close(r, r->nconns - 1);
    for (size_t i = 0; i < r->nlfd; i++)
        close(r->lfd[i]);
    free(r);
}
