/* accept_error: which accept() errors concern the listener and which only
 * the connection accept() took off its queue.
 *
 * Linux passes on from accept() the network errors pending on the dequeued
 * connection (accept(2): EPROTO, ENETDOWN, ENOPROTOOPT, EHOSTDOWN, ENONET,
 * EHOSTUNREACH, EOPNOTSUPP, ENETUNREACH), and a firewall's refusal comes
 * as EPERM: that connection is gone, the next one is no less welcome, so a
 * listener goes on at once. Any other error (EMFILE, ENFILE, ENOBUFS,
 * ENOMEM, or one that may persist) would fail again at once: the listener
 * pauses. Shared by the gate's listeners and the admin server. */
#ifndef SLUICE_UTIL_ACCEPT_ERROR_H
#define SLUICE_UTIL_ACCEPT_ERROR_H

#include <stdbool.h>

/* Whether accept()'s <err> concerns only the connection it took. */
bool accept_error_is_per_conn(int err);

#endif
