/* upstream: connecting to the address the gate checked.
 *
 * The gate resolves and guards addresses itself, then connects to exactly
 * those: a sockaddr built from each checked struct ipaddr, never a second
 * lookup (no DNS rebinding window). Addresses are tried in order; each
 * attempt has its own timeout, and a refused or timed-out attempt moves on
 * to the next address. */
#ifndef SLUICE_GATE_UPSTREAM_H
#define SLUICE_GATE_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <event2/util.h>

#include "util/ipaddr.h"

struct event_base;
struct bufferevent;
struct upstream_connect;

#define UPSTREAM_MAX_ADDRS 16

/* Fills <ss> for <a>:<port> (AF_INET for IPv4, AF_INET6 otherwise). */
void upstream_sockaddr(const struct ipaddr *a, uint16_t port, struct sockaddr_storage *ss,
                       socklen_t *len);

/* Called once, on the event loop, never from inside upstream_connect_start().
 * <err> 0: <bev> is connected to addrs[<idx>]; the callee owns <bev> (no
 * BEV_OPT_CLOSE_ON_FREE) and its socket <fd>, and must close <fd> itself.
 * <err> < 0: every address failed (<idx> is the last one tried, <bev> NULL,
 * <fd> -1). The upstream_connect is freed before <cb> runs. */
typedef void (*upstream_cb)(int err, struct bufferevent *bev, evutil_socket_t fd, size_t idx,
                            void *arg);

/* Starts connecting to <addrs> (<n> of them, at most UPSTREAM_MAX_ADDRS;
 * copied) on <port>, <timeout_ms> per attempt. Returns a handle valid until
 * <cb> has run, or NULL when out of memory (then <cb> never runs). */
struct upstream_connect *upstream_connect_start(struct event_base *base, const struct ipaddr *addrs,
                                                size_t n, uint16_t port, unsigned timeout_ms,
                                                upstream_cb cb, void *arg);
/* Abandons a connect in progress: <cb> never runs. Accepts NULL. */
void upstream_connect_cancel(struct upstream_connect *uc);

#endif
