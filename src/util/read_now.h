/* read_now: runs, at once, the read callback of the event that watches a
 * socket whose event is not this code's own (evdns' name server socket),
 * when something waits in that socket.
 *
 * A timer that falls due while the process was frozen (SIGSTOP, a paused
 * VM, a long stall of its loop) runs before the reads of that turn:
 * epoll_wait() comes back with EINTR and no event after SIGCONT, and the
 * timers run first, in the order they fell due. socket_quiet.h lets a
 * timer of the gateway's own wait for the next turn's read; a library's
 * timer (evdns' for a query) cannot be told to wait, and ends the query
 * before its read. A timer of the gateway's that falls due before that
 * one (so runs first in the turn) calls read_now() to have the library
 * take what came in time before its own timer runs.
 *
 * Owns nothing. */
#ifndef SLUICE_UTIL_READ_NOW_H
#define SLUICE_UTIL_READ_NOW_H

#include <stdbool.h>

struct event_base;

/* When something waits in the socket <fd> (socket_is_quiet()), finds the
 * event of <base> that reads it (event_base_foreach_event(): a walk of
 * every event, so for rare paths only) and calls its callback with
 * EV_READ, as the loop would. Returns true when it did; false when <fd> is
 * -1 or quiet, or no added event reads it. */
bool read_now(struct event_base *base, int fd);

#endif
