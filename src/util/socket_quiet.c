/* socket_quiet: what waits unread in a socket (socket_quiet.h). */
#include "util/socket_quiet.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

bool socket_is_quiet(int fd)
{
    char b;
    ssize_t n;
    do
        n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

bool socket_read_timeout_held_for(struct bufferevent *bev, short what, int fd)
{
    if (what != (BEV_EVENT_READING | BEV_EVENT_TIMEOUT) || socket_is_quiet(fd))
        return false;
    bufferevent_enable(bev, EV_READ);
    return true;
}

bool socket_read_timeout_held_input(struct bufferevent *bev, short what)
{
    return socket_read_timeout_held_for(bev, what, bufferevent_getfd(bev));
}
