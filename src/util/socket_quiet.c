#include "socket_quiet.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/types.h>

bool socket_is_quiet(int fd)
{
    char b;
    ssize_t n;
    do
        n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}
