#include "gate/listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/listener.h>

#include "util/accept_error.h"
#include "util/units.h"
#include "util/unix_listen.h"

#define LISTEN_BACKLOG       511
#define ACCEPT_BACKOFF_MS    100   /* the pause after a failed accept() */
#define ACCEPT_WARN_EVERY_MS 60000 /* how often that is told */

struct listener {
    struct listen_addr addr;
    struct evconnlistener *lev; /* binds, listens, closes the socket; never enabled */
    struct event *accept_ev;    /* the socket readable: on_acceptable(); NULL with lev */
    struct event *pause_timer;
    listener_accept_fn fn;
    void *arg;
    bool unspecified;      /* bound to 0.0.0.0 or :: */
    uint64_t warned_ms;    /* when a failed accept() was told last (tell_due()) */
    uint64_t failures;     /* accept() calls that failed and paused it */
    struct stat sock_file; /* a unix socket's file, as bound: removed at the end
                            * only while the path still names it */
};

/* How <a>'s errors name it: as the operator gave it, when an option did. */
static const char *named(const struct listen_addr *a)
{
    return a->named[0] != '\0' ? a->named : a->text;
}

/* TCP urgent data (MSG_OOB) stays in the stream, a plain byte in its place:
 * else recv() skips it, and a request body comes up one byte short of its
 * Content-Length, on every path (HTTP, CONNECT, tunnels). */
static void listener_oob_inline(evutil_socket_t fd)
{
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &one, sizeof(one));
}

/* accept() failed (EMFILE, ENFILE, ENOBUFS...): back off instead of
 * spinning, and say so once a minute, not at every pause (ten lines a
 * second for as long as the descriptors are short). An error that was the
 * dequeued connection's alone pauses nothing: the listener goes on with
 * the next one (a pause would hold every other client for it). */
static void accept_failed(struct listener *l, int err)
{
    static const struct timeval backoff = {0, ACCEPT_BACKOFF_MS * 1000};
    if (accept_error_is_per_conn(err))
        return;
    l->failures++;
    uint64_t now = monotonic_ms();
    if (tell_due(&l->warned_ms, now, ACCEPT_WARN_EVERY_MS))
        fprintf(stderr,
                "sluice: accept on %s: %s: pausing for %d ms at a time (told at most once a "
                "minute)\n",
                l->addr.text, strerror(err), ACCEPT_BACKOFF_MS);
    event_del(l->accept_ev);
    evtimer_add(l->pause_timer, &backoff);
}

/* The listening socket is readable: one accept(). The event is
 * level-triggered, so while more connections wait it comes back at the
 * next loop round, which serves the loop's other events too. Accepting
 * until EAGAIN, as libevent's evconnlistener does, costs a failed
 * accept4() for every connection that arrives alone: each of an agent's
 * that opens them one at a time. */
static void on_acceptable(evutil_socket_t fd, short what, void *arg)
{
    struct listener *l = arg;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    (void)what;
    evutil_socket_t cfd = accept4(fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd < 0) {
        int err = errno;
        if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR && err != ECONNABORTED)
            accept_failed(l, err);
        return;
    }
    /* Urgent data (MSG_OOB), which Linux carries on unix stream sockets
     * too, stays in the stream (see listener_oob_inline): an accepted unix
     * socket inherits nothing from its listener, so it is set on each. */
    if (l->addr.ss.ss_family == AF_UNIX)
        listener_oob_inline(cfd);
    l->fn(l, cfd, (const struct sockaddr *)&ss, sl, l->arg);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct listener *l = arg;
    (void)fd;
    (void)what;
    event_add(l->accept_ev, NULL);
}

/* Removes the socket file of <l> when its path still names it: not one
 * another server bound there after ours was removed from under it. */
static void unlink_own(const struct listener *l)
{
    unix_listen_unlink_own(((const struct sockaddr_un *)(const void *)&l->addr.ss)->sun_path,
                           &l->sock_file);
}

struct listener *listener_open(struct event_base *base, const struct listen_addr *a,
                               listener_accept_fn fn, void *arg, char *err, size_t errlen)
{
    struct listener *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        snprintf(err, errlen, "%s: out of memory", named(a));
        return NULL;
    }
    l->addr = *a;
    l->fn = fn;
    l->arg = arg;
    /* evconnlistener makes the socket (SO_REUSEADDR, SO_KEEPALIVE for the
     * accepted ones), listens and closes it; on_acceptable() accepts. */
    unsigned flags =
        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE | LEV_OPT_DISABLED;
    if (a->kind == LISTEN_UNIX) {
        evutil_socket_t fd = unix_listen_bind((const struct sockaddr_un *)(const void *)&a->ss,
                                              a->sslen, named(a), &l->sock_file, err, errlen);
        if (fd < 0)
            goto err;
        l->lev = evconnlistener_new(base, NULL, l, flags, LISTEN_BACKLOG, fd);
        if (l->lev == NULL) {
            snprintf(err, errlen, "%s: listen: %s", named(a), strerror(errno));
            close(fd);
            goto err_unlink;
        }
    } else {
        l->lev = evconnlistener_new_bind(base, NULL, l, flags, LISTEN_BACKLOG,
                                         (const struct sockaddr *)&a->ss, (int)a->sslen);
        if (l->lev == NULL) {
            if (a->named[0] != '\0')
                snprintf(err, errlen, "%s: cannot listen on %s: %s", a->named, a->text,
                         strerror(errno));
            else
                snprintf(err, errlen, "%s: cannot listen: %s", a->text, strerror(errno));
            goto err;
        }
        /* Replies and tunnelled records go out as soon as they are written:
         * Nagle would hold a small write behind an unacknowledged one. Set
         * on the listener, it is inherited by every accepted socket (Linux),
         * one setsockopt() instead of one per connection. */
        int one = 1;
        (void)setsockopt(evconnlistener_get_fd(l->lev), IPPROTO_TCP, TCP_NODELAY, &one,
                         sizeof(one));
        /* The same for SO_OOBINLINE, and it must be there before accept():
         * a second urgent pointer arriving before it drops the first
         * urgent byte, inline or not being decided only then. */
        listener_oob_inline(evconnlistener_get_fd(l->lev));
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        if (getsockname(evconnlistener_get_fd(l->lev), (struct sockaddr *)&ss, &sl) == 0) {
            memcpy(&l->addr.ss, &ss, sl);
            l->addr.sslen = sl;
            sockaddr_format((const struct sockaddr *)&ss, l->addr.text, sizeof(l->addr.text));
        }
        struct ipaddr ip;
        uint16_t port;
        static const struct ipaddr any6 = {{0}};
        struct ipaddr any4;
        ipaddr_from_v4(&any4, 0);
        if (sockaddr_to_ipaddr((const struct sockaddr *)&l->addr.ss, &ip, &port) == 0 &&
            (ipaddr_equal(&ip, &any6) || ipaddr_equal(&ip, &any4))) {
            l->unspecified = true;
        }
    }
    l->pause_timer = evtimer_new(base, on_resume, l);
    l->accept_ev =
        event_new(base, evconnlistener_get_fd(l->lev), EV_READ | EV_PERSIST, on_acceptable, l);
    if (l->pause_timer == NULL || l->accept_ev == NULL || event_add(l->accept_ev, NULL) != 0) {
        snprintf(err, errlen, "%s: out of memory", named(a));
        if (l->pause_timer != NULL)
            event_free(l->pause_timer);
        if (l->accept_ev != NULL)
            event_free(l->accept_ev);
        evconnlistener_free(l->lev);
        goto err_unlink;
    }
    return l;

err_unlink:
    if (a->kind == LISTEN_UNIX)
        unlink_own(l);
err:
    free(l);
    return NULL;
}

struct listener *listener_describe(const struct listen_addr *a)
{
    struct listener *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->addr = *a;
    struct ipaddr ip;
    uint16_t port;
    static const struct ipaddr any6 = {{0}};
    struct ipaddr any4;
    ipaddr_from_v4(&any4, 0);
    if (a->kind == LISTEN_TCP &&
        sockaddr_to_ipaddr((const struct sockaddr *)&a->ss, &ip, &port) == 0 &&
        (ipaddr_equal(&ip, &any6) || ipaddr_equal(&ip, &any4))) {
        l->unspecified = true;
    }
    return l;
}

void listener_shutdown(struct listener *l)
{
    if (l->pause_timer != NULL) {
        event_free(l->pause_timer);
        l->pause_timer = NULL;
    }
    if (l->accept_ev != NULL) {
        event_free(l->accept_ev);
        l->accept_ev = NULL;
    }
    if (l->lev != NULL) {
        evconnlistener_free(l->lev);
        l->lev = NULL;
        if (l->addr.kind == LISTEN_UNIX)
            unlink_own(l);
    }
}

void listener_free(struct listener *l)
{
    if (l == NULL)
        return;
    listener_shutdown(l);
    free(l);
}

void listener_pause(struct listener *l)
{
    if (l->accept_ev == NULL)
        return;
    event_del(l->accept_ev);
    evtimer_del(l->pause_timer);
}

void listener_resume(struct listener *l)
{
    if (l->accept_ev != NULL)
        event_add(l->accept_ev, NULL);
}

const struct listen_addr *listener_addr(const struct listener *l)
{
    return &l->addr;
}

uint64_t listener_accept_failures(const struct listener *l)
{
    return l->failures;
}

bool listener_is_unix(const struct listener *l)
{
    return l->addr.kind == LISTEN_UNIX;
}

int listener_address_is_local(const struct ipaddr *ip)
{
    struct sockaddr_storage ss, src;
    socklen_t len, slen = sizeof(src);
    struct ipaddr got;
    uint16_t port;
    memset(&ss, 0, sizeof(ss));
    if (ipaddr_is_v4(ip)) {
        struct sockaddr_in *in = (struct sockaddr_in *)(void *)&ss;
        in->sin_family = AF_INET;
        in->sin_port = htons(9); /* any port: nothing is sent */
        in->sin_addr.s_addr = htonl(ipaddr_v4(ip));
        len = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)&ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(9);
        memcpy(&in6->sin6_addr, ip->b, 16);
        len = sizeof(*in6);
    }
    int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    bool local = false; /* no route to it (connect() fails): not ours */
    if (connect(fd, (const struct sockaddr *)&ss, len) == 0)
        local = getsockname(fd, (struct sockaddr *)&src, &slen) != 0 ||
                sockaddr_to_ipaddr((const struct sockaddr *)&src, &got, &port) != 0 ||
                ipaddr_equal(&got, ip);
    close(fd);
    return local ? 1 : 0;
}

/* listener_address_is_local(), a socket that cannot be made counting as
 * local (the request is refused). */
static bool is_local_address(const struct ipaddr *ip)
{
    return listener_address_is_local(ip) != 0;
}

bool listener_covers(const struct listener *l, const struct ipaddr *ip, uint16_t port)
{
    struct ipaddr mine;
    uint16_t myport;
    if (l->addr.kind != LISTEN_TCP)
        return false;
    if (sockaddr_to_ipaddr((const struct sockaddr *)&l->addr.ss, &mine, &myport) < 0 ||
        myport != port)
        return false;
    static const struct ipaddr any6 = {{0}};
    struct ipaddr any4;
    ipaddr_from_v4(&any4, 0);
    /* Connecting to 0.0.0.0 or :: reaches the local host. */
    if (ipaddr_equal(&mine, ip) || ipaddr_equal(ip, &any4) || ipaddr_equal(ip, &any6))
        return true;
    if (!l->unspecified)
        return false;
    /* Bound to every address: any local address reaches it, and so does all
     * of 127.0.0.0/8 and ::1. */
    return ipaddr_is_loopback(ip) || is_local_address(ip);
}
