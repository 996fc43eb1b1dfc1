/* listener: the addresses `sluice serve` listens on.
 *
 * ADDR is SPEC.md's "HOST:PORT", "[V6]:PORT" or "unix:/path/to.sock",
 * read by util/listen_addr.h (listen_addr_parse()). TCP listeners bind
 * with SO_REUSEADDR and a backlog of 511. A unix
 * listener replaces a stale socket file (only when the path is a socket:
 * any other file is an error), is made mode 0660 before it listens (owner
 * and group may connect; `run` relays connect as the same user), and is
 * unlinked when the listener is freed. Port 0 picks a free port; the
 * listener then reports the port it got.
 *
 * Every accepted socket has SO_OOBINLINE (TCP urgent data stays in the
 * stream, a plain byte in its place) before it is handed on: a TCP one from
 * its listener, so from its first byte, a unix one set at the accept.
 *
 * Accept errors such as EMFILE pause the listener for 100 ms instead of
 * spinning; one that concerns only the connection accept() took (EPROTO,
 * EPERM from a firewall, a network error pending on it) pauses nothing.
 * Each failed accept() that pauses it is counted (listener_accept_failures():
 * /metrics' sluice_accept_failures_total), since no request is decided for
 * a connection never accepted. */
#ifndef SLUICE_GATE_LISTENER_H
#define SLUICE_GATE_LISTENER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <event2/event.h>
#include <event2/util.h>

#include "util/ipaddr.h"
#include "util/listen_addr.h"

struct listener;

/* Called for each accepted connection; the callee owns <fd>. */
typedef void (*listener_accept_fn)(struct listener *l, evutil_socket_t fd,
                                   const struct sockaddr *sa, socklen_t salen, void *arg);

/* Binds and listens on <a>. Returns the listener (free with listener_free),
 * or NULL with a message in <err>. */
struct listener *listener_open(struct event_base *base, const struct listen_addr *a,
                               listener_accept_fn fn, void *arg, char *err, size_t errlen);
/* A listener that only describes <a> (a TCP address bound elsewhere, such
 * as the --admin server's): it never accepts, but listener_covers() answers
 * for it. Free with listener_free. NULL when out of memory. */
struct listener *listener_describe(const struct listen_addr *a);
/* Stops listening, closes the socket, unlinks a unix socket. Accepts NULL. */
void listener_free(struct listener *l);
/* Stops listening for good (closes the socket, unlinks a unix socket) but
 * keeps the address, so listener_covers() still answers. */
void listener_shutdown(struct listener *l);
void listener_pause(struct listener *l);
void listener_resume(struct listener *l);

/* The address actually bound (the port filled in when 0 was asked for). */
const struct listen_addr *listener_addr(const struct listener *l);
bool listener_is_unix(const struct listener *l);
/* accept() calls of <l> that failed for want of descriptors or memory (each
 * paused it), since it was opened. */
uint64_t listener_accept_failures(const struct listener *l);

/* True when <ip>:<port> reaches listener <l>: the same address, or any
 * local address when <l> is bound to the unspecified address (asked of the
 * kernel at each call, so an address the host got after the start counts). */
bool listener_covers(const struct listener *l, const struct ipaddr *ip, uint16_t port);

/* 1 when <ip> is an address of this host as things stand now (an address
 * added since the start counts too): the kernel picks a local destination
 * itself as the source of a datagram socket connected to it, and no other.
 * A source that cannot be read counts as local; a destination without a
 * route is not local (0). -1 with errno set when no socket could be made
 * to ask (out of descriptors or memory). */
int listener_address_is_local(const struct ipaddr *ip);

#endif
