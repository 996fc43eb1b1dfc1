/* admin: the --admin HTTP server, GET/HEAD /metrics and /healthz.
 *
 * One address, read by listen_addr_parse_admin() (util/listen_addr.h):
 * "PORT" or ":PORT" means 127.0.0.1:PORT; "HOST:PORT" takes a literal
 * address or a name's first address, "[V6]:PORT" an IPv6 one (a warning
 * when the address bound is not loopback); "unix:/path" a unix socket,
 * bound and removed as a --listen one is (util/unix_listen.h). The name
 * is looked up once, by that parser: the server binds what it gave, and
 * admin_addr() tells the address bound, for self_request.
 * /metrics answers metrics_format()'s text, /healthz metrics_health()'s
 * verdict (200 "ok" or 503 "unhealthy: ..."); any other path is 404 and any
 * other method 405; a query string is ignored.
 *
 * Whoever connects is a stranger, so every resource a client can make the
 * server hold is bounded (admin.c says why each bound is what it is):
 *   - one request per connection: the reply carries "Connection: close",
 *     nothing after the request head is parsed, the socket closes once the
 *     reply is written (so pipelining cannot queue work or memory);
 *   - a request head of at most ADMIN_HEAD_MAX bytes, request line parsed
 *     strictly ("METHOD SP /target SP HTTP/1.x CRLF"; 400 when malformed,
 *     431 when longer), and never more than that buffered;
 *   - ADMIN_HEAD_MS from the accept to a complete head (408 after; input
 *     that waits in the socket when the deadline runs late, the gateway
 *     frozen meanwhile, is read first: ADMIN_LATE_READS), then
 *     ADMIN_REPLY_MS to write the reply (renewed, ADMIN_REPLY_RENEWALS times
 *     at most, when it ends with every byte handed to the kernel taken by
 *     the client: the gateway, frozen, did not write), then at most
 *     ADMIN_LINGER_MS (and
 *     ADMIN_LINGER_MAX bytes read and discarded; input waiting when it
 *     runs late is read first too, so the close is not a reset) before
 *     the close;
 *   - /metrics bodies built: at most one each ADMIN_BODY_FRESH_MS (a body
 *     is built on the event loop, ~65 ms for 4096 agents); a scrape within
 *     it gets the newest body, shared;
 *   - /metrics bodies that replies hold: at most ADMIN_BODIES_MAX bytes,
 *     beyond which a reply shares the newest body (if under
 *     ADMIN_BODY_REUSE_MS old) rather than getting one of its own;
 *   - at most ADMIN_CONNS_MAX connections at once: at the cap a new one
 *     takes the slot of the oldest still waiting for its head (closed), so
 *     slow heads cannot hold out a scraper, else of the oldest lingering
 *     (its reply written); only when every slot writes a reply does the
 *     listener stop accepting (new clients wait in the kernel's backlog)
 *     until one closes;
 *   - at most ADMIN_METRICS_HELD_MAX /metrics replies waiting for their
 *     client to read (the kernel did not take them whole): a GET /metrics
 *     beyond is answered 503 (Retry-After: 1), so that /healthz always
 *     finds a slot;
 *   - an accept() that fails (EMFILE...) pauses the listener for
 *     ADMIN_BACKOFF_MS instead of spinning, told on standard error at most
 *     once a minute; one that concerns only the connection accept() took
 *     (EPROTO, EPERM from a firewall; util/accept_error.h) pauses nothing.
 *
 * Owns: its listening socket, its timers and every admin connection (each
 * with its bufferevent, head buffer and queued reply). Borrows the metrics
 * and the event base, which must outlive it. */
#ifndef SLUICE_WATCH_ADMIN_H
#define SLUICE_WATCH_ADMIN_H

#include <stddef.h>

#include "util/listen_addr.h"

#define ADMIN_HEAD_MAX       8192  /* bytes: the request line and headers */
#define ADMIN_CONNS_MAX      64    /* connections open at once */
#define ADMIN_HEAD_MS        5000  /* accept -> complete request head */
#define ADMIN_LATE_READS     3     /* head, linger deadlines put off 1 ms for input (frozen) */
#define ADMIN_REPLY_MS       10000 /* complete head -> reply written */
#define ADMIN_REPLY_RENEWALS 2     /* reply windows renewed, the client having taken all (frozen) */
#define ADMIN_LINGER_MS      1000  /* reply written -> close */
#define ADMIN_LINGER_MAX     (64 * 1024) /* bytes read and dropped while lingering */
#define ADMIN_BACKOFF_MS     250         /* after a failed accept() */
#ifndef ADMIN_BODIES_MAX                 /* a test may make it smaller */
#define ADMIN_BODIES_MAX (64u << 20)     /* bytes of /metrics bodies replies hold, at most... */
#endif
#define ADMIN_BODY_REUSE_MS 5000 /* ...for a body shared past it, this old at most */
#define ADMIN_BODY_FRESH_MS 1000 /* a /metrics body is built at most once per this */
/* /metrics replies waiting for their client at once; the other slots are
 * kept for /healthz */
#define ADMIN_METRICS_HELD_MAX (ADMIN_CONNS_MAX - 8)

struct event_base;
struct metrics;
struct admin;

/* Serves <m> on <addr> (read by listen_addr_parse_admin(), copied; its
 * errors name it by its named). Returns the server (free with
 * admin_free), or NULL with a message in <err> (an address that cannot be
 * bound, no memory). */
struct admin *admin_new(struct event_base *base, const struct listen_addr *addr, struct metrics *m,
                        char *err, size_t errlen);
/* The address <a> listens on: a TCP one as bound (getsockname()), so a
 * name's address is the one the server has, not a new lookup's. */
const struct listen_addr *admin_addr(const struct admin *a);
/* Closes the listener and every admin connection. Accepts NULL. */
void admin_free(struct admin *a);

#endif
