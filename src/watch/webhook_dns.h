/* webhook_dns: the resolver of a webhook sink whose URL names a host
 * (sinks.h), its own rather than the gateway's (dns.servers is for the
 * agents' traffic): /etc/resolv.conf's name servers, search domains and
 * options, and /etc/hosts, as evdns reads them.
 *
 * Each name server is added with its socket tied to the server's address
 * and port (util/dns_pin.h): evdns alone checks an answer's address only,
 * and a process on the host that sent from 127.0.0.53 or 127.0.0.1 on a
 * port of its own, under all 65536 IDs, had the sink's alerts (an agent's
 * activity, the URL's secret path) POSTed to the address of its choosing,
 * or none delivered. */
#ifndef SLUICE_WATCH_WEBHOOK_DNS_H
#define SLUICE_WATCH_WEBHOOK_DNS_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct evdns_base;

/* The nameserver lines of resolv.conf a sink's resolver asks, at most: the
 * first ones (the C library asks 3). */
#define WEBHOOK_DNS_SERVERS 8

/* The sockets of a resolver's servers: evdns' own, borrowed (evdns closes
 * them when the resolver is freed). */
struct webhook_dns_socks {
    int fd[WEBHOOK_DNS_SERVERS];
    size_t n;
};

/* Returns a new resolver on <base>, which the caller frees with
 * evdns_base_free(), its servers' sockets in <*socks>, or NULL with <*why>
 * set (static text). A server that no socket can be connected to, or whose
 * socket cannot be tied to it, is left out, said on standard error with
 * the sink's <label>: untied, its socket would take an answer from any
 * port of its address. */
struct evdns_base *webhook_dns_new(struct event_base *base, const char *label,
                                   struct webhook_dns_socks *socks, const char **why);

/* Hands the resolver whose servers' sockets are <socks> (on <base>) what
 * waits in them (read_now()); true when something did. For a timer of the
 * sink's that falls due before evdns' own for a try: after a freeze
 * (SIGSTOP, a paused VM, a long stall of the loop) the timers run before
 * the reads, and evdns' would end the try (asked again, or the lookup
 * failed) with its answer, come in time, unread. */
bool webhook_dns_read_now(struct event_base *base, const struct webhook_dns_socks *socks);

#endif
