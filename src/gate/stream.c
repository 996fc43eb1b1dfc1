#include "gate/stream.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
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

void stream_reset_on_close(evutil_socket_t fd)
{
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)); /* else a plain close */
}
