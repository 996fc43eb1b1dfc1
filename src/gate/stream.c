#include "gate/stream.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h> /* ev_read, wm_read: stream_own_reads() */
#include <event2/event.h>

/* True when <bev> has nothing queued, so bytes may go to <fd> directly. */
static bool may_write_directly(struct bufferevent *bev, evutil_socket_t fd)
{
    return fd >= 0 && evbuffer_get_length(bufferevent_get_output(bev)) == 0;
}

int stream_send(struct bufferevent *bev, evutil_socket_t fd, struct evbuffer *src, size_t n)
{
    if (n > 0 && may_write_directly(bev, fd)) {
        int w = evbuffer_write_atmost(src, fd, (ev_ssize_t)n); /* drains what it wrote */
        if (w > 0)
            n -= (size_t)w;
    }
    if (n == 0)
        return 0;
    return evbuffer_remove_buffer(src, bufferevent_get_output(bev), n) == (int)n ? 0 : -1;
}

int stream_send_bytes(struct bufferevent *bev, evutil_socket_t fd, const void *data, size_t n)
{
    const char *p = data;
    if (n > 0 && may_write_directly(bev, fd)) {
        ssize_t w;
        do
            w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        while (w < 0 && errno == EINTR);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        }
    }
    if (n == 0)
        return 0;
    return bufferevent_write(bev, p, n);
}

/* The most read into the input at once: a caller's <upto> may be megabytes. */
#define STREAM_READ_PIECE (64u * 1024)

/* Reads once into <want> bytes of reserved space in <in>. Returns the
 * bytes read, 0 at EAGAIN or the end of the peer's side, -1 on an error
 * (errno set). */
static ssize_t read_once(struct evbuffer *in, evutil_socket_t fd, size_t want)
{
    struct evbuffer_iovec v[2];
    struct iovec iov[2];
    int nv = evbuffer_reserve_space(in, (ev_ssize_t)want, v, 2);
    if (nv < 1)
        return 0; /* out of memory: the bufferevent reads on as before */
    size_t offered = 0;
    for (int i = 0; i < nv; i++) {
        size_t len = v[i].iov_len < want - offered ? v[i].iov_len : want - offered;
        iov[i].iov_base = v[i].iov_base;
        iov[i].iov_len = len;
        offered += len;
    }
    ssize_t n;
    do
        n = readv(fd, iov, nv);
    while (n < 0 && errno == EINTR);
    if (n <= 0) {
        evbuffer_commit_space(in, v, 0);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        return 0;
    }
    size_t left = (size_t)n;
    int used = 0;
    for (; used < nv && left > 0; used++) {
        if (v[used].iov_len > left)
            v[used].iov_len = left;
        left -= v[used].iov_len;
    }
    evbuffer_commit_space(in, v, used);
    return n;
}

/* Reads from <fd> into <bev>'s input until it holds <upto> bytes or the
 * socket has nothing more (stream_read_more(), stream_read_rest()). */
static ssize_t read_upto(struct bufferevent *bev, evutil_socket_t fd, size_t upto)
{
    struct evbuffer *in = bufferevent_get_input(bev);
    ssize_t total = 0;
    /* A socket bufferevent keeps the end of its input frozen but while it
     * reads itself; so does this. */
    evbuffer_unfreeze(in, 0);
    while (fd >= 0) {
        size_t len = evbuffer_get_length(in);
        if (len >= upto)
            break;
        size_t want = upto - len < STREAM_READ_PIECE ? upto - len : STREAM_READ_PIECE;
        ssize_t n = read_once(in, fd, want);
        if (n < 0) {
            total = -1;
            break;
        }
        total += n;
        if ((size_t)n < want)
            break; /* the socket had no more (or is at its end: n is 0) */
    }
    int err = errno;
    evbuffer_freeze(in, 0);
    errno = err;
    return total;
}

ssize_t stream_read_more(struct bufferevent *bev, evutil_socket_t fd, size_t upto)
{
    size_t high = 0;
    bufferevent_getwatermark(bev, EV_READ, NULL, &high);
    if (high != 0 && high < upto)
        upto = high;
    return read_upto(bev, fd, upto);
}

ssize_t stream_read_rest(struct bufferevent *bev, evutil_socket_t fd, size_t upto)
{
    return read_upto(bev, fd, upto);
}

/* What libevent 2.1 reads of a socket at most per read event
 * (EVBUFFER_MAX_READ in its buffer.c): a 4 KiB chain at most per event,
 * as before. */
#define STREAM_EVENT_READ 4096u

/* Reports <what> to <bev>'s event callback as libevent's read does: reads
 * off first, errno as the read left it. */
static void read_failed(struct bufferevent *bev, short what)
{
    int err = errno;
    bufferevent_disable(bev, EV_READ);
    errno = err;
    bufferevent_trigger_event(bev, BEV_EVENT_READING | what, 0);
}

/* Reads what <fd> has, up to <want> bytes (at most STREAM_EVENT_READ),
 * into <in>: returns as read(), -1 with ENOMEM when the input could not
 * take them (libevent's read fails so when it cannot make room). Read on
 * the stack, then added: the input gets one piece of memory sized to what
 * came, as libevent sizes its read by FIONREAD (a 100-byte request takes
 * 1 KiB, from the allocator's per-thread cache, where room reserved for
 * 4 KiB would take an 8 KiB chain from its slower path). What came is
 * wiped from the stack once added: a head's Proxy-Authorization, wiped in
 * the input once read (gate/conn.c), would stay there until a later call's
 * frame happened to cover it. */
static ssize_t read_event_once(struct evbuffer *in, evutil_socket_t fd, size_t want)
{
    char buf[STREAM_EVENT_READ];
    ssize_t n;
    do
        n = read(fd, buf, want);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return n;
    evbuffer_unfreeze(in, 0);
    int r = evbuffer_add(in, buf, (size_t)n); /* runs the input's callbacks */
    evbuffer_freeze(in, 0);
    explicit_bzero(buf, (size_t)n);
    if (r < 0) {
        errno = ENOMEM;
        return -1;
    }
    return n;
}

/* <bev>'s read event (stream_own_reads()): libevent's bufferevent_readcb()
 * (bufferevent_sock.c) less the FIONREAD. */
static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct bufferevent *bev = arg;
    if (what == EV_TIMEOUT) { /* with EV_READ too, a read happened: no timeout */
        read_failed(bev, BEV_EVENT_TIMEOUT);
        return;
    }
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t want = STREAM_EVENT_READ;
    size_t high = bev->wm_read.high;
    if (high != 0) {
        size_t len = evbuffer_get_length(in);
        if (len >= high) {
            /* Not met while the input's callback (on_input_change())
             * stops the reads as it reaches the cap, but after a
             * bufferevent_enable() at the cap: as libevent's read, nothing
             * is read here (a read of 0 bytes would look like the end), the
             * event stops, and that callback adds it again once the input
             * is drained below the cap. */
            event_del(&bev->ev_read);
            return;
        }
        if (high - len < want)
            want = high - len;
    }
    ssize_t n = read_event_once(in, fd, want);
    if (n > 0)
        bufferevent_trigger(bev, EV_READ, 0); /* under the low watermark: no call */
    else if (n == 0)
        read_failed(bev, BEV_EVENT_EOF);
    else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNREFUSED)
        read_failed(bev, BEV_EVENT_ERROR); /* a refused connect: libevent leaves it to its write */
}

/* Reads <bev> again after its cap stopped them (when they are on: a
 * disabled read stays off). */
static void resume_reads(struct bufferevent *bev)
{
    if (bufferevent_get_enabled(bev) & EV_READ)
        bufferevent_enable(bev, EV_READ); /* adds the read event, with its timeout */
}

/* The input's callback of a bufferevent whose reads are this file's: the
 * read stops as the input reaches the cap (stream_set_read_cap()), and
 * goes on as it is drained below it. libevent's own watermark callback
 * enables the read again at every change below the mark, re-adding the
 * event (about 230 instructions) at each read and each drain. Here a read
 * needs none (the read event's own activation re-armed its timeout), nor
 * does a drain when reads are untimed (a head, a CONNECT's first bytes); a
 * drain with a read timeout re-arms it as libevent's did: a client whose
 * body still goes up is not idle. */
static void on_input_change(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
    struct bufferevent *bev = arg;
    size_t high = bev->wm_read.high;
    (void)in;
    if (high == 0)
        return;
    size_t was = info->orig_size;
    size_t now = was + info->n_added - info->n_deleted;
    if (now >= high) {
        if (was < high)
            event_del(&bev->ev_read);
    } else if (was >= high || (info->n_deleted > 0 && evutil_timerisset(&bev->timeout_read))) {
        resume_reads(bev);
    }
}

int stream_set_read_cap(struct bufferevent *bev, size_t cap)
{
    if (event_get_callback(&bev->ev_read) != on_readable) {
        bufferevent_setwatermark(bev, EV_READ, 0, cap); /* libevent reads */
        return 0;
    }
    size_t old = bev->wm_read.high;
    /* The callback comes with the first cap, not with stream_own_reads():
     * an input without callbacks is not walked for them at each change
     * (a plain request's upstream, never capped). Once it is there, no
     * cap is SIZE_MAX: a cap found set says the callback is there. Out of
     * memory for it, nothing is set and the caller closes the connection.
     * libevent's watermark in its place mixed the two ways on one stream:
     * its callback suspended the reads at the cap, and the later calls'
     * bufferevent_enable() (a raised cap, or none) did nothing on a
     * suspended read; and bufferevent_setwatermark() adds its callback
     * with evbuffer_add_cb() too, whose NULL libevent 2.1 then uses. */
    if (old == 0) {
        if (cap == 0)
            return 0;
        if (evbuffer_add_cb(bufferevent_get_input(bev), on_input_change, bev) == NULL)
            return -1;
    }
    if (cap == 0)
        cap = SIZE_MAX;
    size_t len = evbuffer_get_length(bufferevent_get_input(bev));
    bool was_full = old != 0 && len >= old;
    bool full = len >= cap; /* cap is never 0 here */
    /* Kept where libevent keeps its read high watermark: on_readable(),
     * stream_read_more() and bufferevent_getwatermark() find it there. */
    bev->wm_read.low = 0;
    bev->wm_read.high = cap;
    if (full && !was_full)
        event_del(&bev->ev_read);
    else if (!full && was_full)
        resume_reads(bev);
    return 0;
}

/* libevent's read callback of a socket bufferevent (static in its
 * bufferevent_sock.c), learnt once from one made for the purpose: a
 * bufferevent whose read event has it is a socket one. Others (TLS,
 * filters, pairs) read otherwise or have no such event. */
static event_callback_fn socket_read_callback(struct event_base *base)
{
    static event_callback_fn cb; /* the same for every base */
    if (cb == NULL) {
        struct bufferevent *probe = bufferevent_socket_new(base, -1, 0);
        if (probe == NULL)
            return NULL;
        cb = event_get_callback(&probe->ev_read);
        bufferevent_free(probe);
    }
    return cb;
}

int stream_own_reads(struct bufferevent *bev)
{
    struct event *ev = &bev->ev_read;
    struct event_base *base = bufferevent_get_base(bev);
    event_callback_fn cb = event_get_callback(ev);
    if (cb == on_readable)
        return 0;
    evutil_socket_t fd = event_get_fd(ev);
    if (cb == NULL || cb != socket_read_callback(base) || fd < 0 ||
        event_pending(ev, EV_READ | EV_WRITE | EV_TIMEOUT | EV_SIGNAL, NULL))
        return -1;
    /* event_assign() sets the base's middle priority: the one the
     * bufferevent had is kept. Same descriptor, same flags (EV_FINALIZE
     * among them, which bufferevent_free() relies on), and EV_CLOSED
     * (EPOLLRDHUP): a tunnel that takes the socket over waits for it too
     * (tunnel.c), and the socket then stays registered as it was. */
    int pri = event_get_priority(ev);
    if (event_assign(ev, base, fd, event_get_events(ev) | EV_CLOSED, on_readable, bev) < 0)
        return -1;
    return event_priority_set(ev, pri);
}

void stream_read_soon(struct bufferevent *bev)
{
    struct event *ev = &bev->ev_read;
    if (event_get_callback(ev) == on_readable && event_pending(ev, EV_READ, NULL))
        event_active(ev, EV_READ, 1);
}

void stream_reset_on_close(evutil_socket_t fd)
{
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)); /* else a plain close */
}
