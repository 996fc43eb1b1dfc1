#include "gate/stream.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

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
