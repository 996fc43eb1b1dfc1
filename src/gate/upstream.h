/* upstream: connecting to the address the gate checked.
 *
 * The gate resolves and guards addresses itself, then connects to exactly
 * those: a sockaddr built from each checked struct ipaddr, never a second
 * lookup (no DNS rebinding window). Addresses are tried in order, a refused
 * or timed-out attempt moving on to the next one, all within one budget: the
 * whole connect phase ends by then, however many addresses are left (a name
 * with 16 blackholed addresses must not hold its client for 16 timeouts).
 * Each attempt gets an equal share of what remains of the budget, but at
 * least UPSTREAM_ATTEMPT_FLOOR_MS (a slow address that works is not given a
 * few milliseconds); an attempt refused early leaves what it did not use to
 * the next ones. An attempt whose time is found up with its socket
 * connected (the connect completed while the gateway was frozen, and the
 * loop ran the timeout first) is connected, not timed out. Time is
 * counted on CLOCK_MONOTONIC. Every socket has
 * SO_OOBINLINE (an origin's urgent data stays in the stream) and, once
 * connected, TCP_NODELAY. */
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
#define UPSTREAM_ERR_SHORT (-2)
/* The least an attempt is given while that much of the budget remains. */
#define UPSTREAM_ATTEMPT_FLOOR_MS 1000

/* The timeout of the next attempt, with <left_ms> of the budget remaining and
 * <addrs_left> addresses (this one included) still to try: left_ms /
 * addrs_left, raised to UPSTREAM_ATTEMPT_FLOOR_MS, and never more than
 * <left_ms>. 0 (no attempt) when <left_ms> or <addrs_left> is 0. Pure. */
unsigned upstream_attempt_ms(uint64_t left_ms, size_t addrs_left);

/* Fills <ss> for <a>:<port> (AF_INET for IPv4, AF_INET6 otherwise). */
void upstream_sockaddr(const struct ipaddr *a, uint16_t port, struct sockaddr_storage *ss,
                       socklen_t *len);

/* Called once, on the event loop, never from inside upstream_connect_start().
 * <err> 0: <bev> is connected to addrs[<idx>]; the callee owns <bev> (no
 * BEV_OPT_CLOSE_ON_FREE) and its socket <fd>, and must close <fd> itself.
 * <err> < 0: no address connected: each one tried failed, and none is left
 * or the budget is spent (<idx> is the last one tried, <bev> NULL, <fd> -1);
 * UPSTREAM_ERR_SHORT when that was the gateway's own shortage, not the
 * addresses' fault: no socket for the next address or no memory for its
 * connect() (descriptors or memory short: then the others are not tried),
 * or no local port toward an address (errno_is_port_shortage(): the others
 * are still tried, and one that connects wins; an address that failed
 * otherwise does not make the upstream the one at fault); errno, as <cb> is
 * called, is that of the socket() or connect() that was short; else -1.
 * The upstream_connect is freed before <cb> runs. */
typedef void (*upstream_cb)(int err, struct bufferevent *bev, evutil_socket_t fd, size_t idx,
                            void *arg);

/* Starts connecting to <addrs> (<n> of them, at most UPSTREAM_MAX_ADDRS;
 * copied) on <port>, within <budget_ms> from now for all the attempts
 * together: <cb> runs by then (give or take the loop's latency), with an
 * error when no attempt connected (the addresses not tried for want of time
 * included). Returns a handle valid until <cb> has run, or NULL when out of
 * memory (then <cb> never runs). */
struct upstream_connect *upstream_connect_start(struct event_base *base, const struct ipaddr *addrs,
                                                size_t n, uint16_t port, unsigned budget_ms,
                                                upstream_cb cb, void *arg);
/* Abandons a connect in progress: <cb> never runs. Accepts NULL. */
void upstream_connect_cancel(struct upstream_connect *uc);

#endif
