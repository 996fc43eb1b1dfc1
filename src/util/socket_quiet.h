/* socket_quiet: whether anything waits in a socket that its event loop has
 * not read yet. A timer that falls due while the process was frozen
 * (SIGSTOP, a paused VM, a long stall of its loop) runs before the reads
 * of that turn (epoll_wait() comes back with EINTR and no event after
 * SIGCONT): what came in time waits in the socket, and a timer that asks
 * here lets the read run first instead of reporting a timeout. Shared by
 * the gate's upstream reads (forward.c, connect.c), a kept upstream
 * connection's idle timeout (forward.c) and the admin server's head
 * deadline (admin.c). */
#ifndef SLUICE_UTIL_SOCKET_QUIET_H
#define SLUICE_UTIL_SOCKET_QUIET_H

#include <stdbool.h>

/* True when nothing waits in the socket <fd>: no byte, no end, no error
 * (recv(MSG_PEEK | MSG_DONTWAIT) of one byte, a system call). */
bool socket_is_quiet(int fd);

struct bufferevent;

/* For a bufferevent's event callback: when <what> is a read timeout and
 * its socket is not quiet, the bytes came in time and only the freeze put
 * the timer first: reading is turned back on (the bufferevent turned it
 * off), its timeout restarted, and true returned: the caller ignores the
 * event. False for any other event. */
bool socket_read_timeout_held_input(struct bufferevent *bev, short what);

/* As socket_read_timeout_held_input(), for what waits in another socket
 * <fd>: a timeout of <bev> that must not run before <fd>'s read (a kept
 * upstream connection's idle timeout before the client's next request,
 * forward.c). The caller bounds how often it asks (once a wait): nothing
 * says the loop reads <fd> next. */
bool socket_read_timeout_held_for(struct bufferevent *bev, short what, int fd);

#endif
