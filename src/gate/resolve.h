/* resolve: the gateway's own DNS, on the event loop (libevent's evdns).
 *
 * The gateway resolves names itself and connects to the address it checked,
 * so there is no second lookup and no rebinding window. Names in the
 * policy's dns.static map are answered first, without a query (always from
 * the event loop, after resolver_lookup() has returned). Otherwise A and
 * AAAA are queried together (no search domains; over UDP only, without
 * EDNS0: an answer too large for 512 bytes comes truncated and fails the
 * lookup, RESOLVE_ERR_TRUNCATED) against dns.servers, or
 * the servers in /etc/resolv.conf (at most POLICY_MAX_DNS_SERVERS); with
 * no server at all a lookup fails (RESOLVE_ERR_NO_SERVERS) instead of
 * waiting. Servers are asked in turn: a lookup starts at the server that
 * answered last (a reload keeps it while it is still listed), and a query that gets no answer
 * within 2 s, a server failure (SERVFAIL, which evdns reports as a timeout at once:
 * RESOLVE_ERR_SERVFAIL, see on_answer()), a refusal (REFUSED, NOTIMP,
 * FORMERR: RESOLVE_ERR_REFUSED, _NOTIMP, _FORMERR), or a truncated or
 * malformed answer is asked of the next server; each server once, at least
 * 2 tries and at most 4 in all (so a lone server is asked twice), and the
 * lookup ends by a deadline of its own (its tries plus 1 s; a reload that
 * moves its queries to new servers does not move it). Lookups of a name
 * already being asked share that query and its answer (and its deadline):
 * one A and one AAAA query per name in flight, however many connections
 * wait for it; the query is cancelled when the last of them is. Once A
 * has come back with addresses, AAAA has 50 ms more (RFC 8305's
 * resolution delay), not its tries: it is then abandoned, and the lookup
 * answered with the A addresses (a server that drops AAAA questions costs
 * 50 ms, not 4 s); A is always waited for. Up to
 * RESOLVE_MAX_INFLIGHT queries per server are in flight at once, so names
 * whose server stalls hold up no other lookup. Nothing here blocks (no
 * getaddrinfo).
 *
 * Answers from the servers are cached per name (at most 4096 names, least
 * recently used evicted): addresses for min(their TTL, 300 s), "no such
 * name" (or no A/AAAA) for 5 s; timeouts, server failures and answers
 * where one of A/AAAA timed out or failed are never cached (an AAAA abandoned
 * after the resolution delay counts as not answered: the A addresses are
 * cached, for at most 30 s). A cached answer is delivered from the loop like
 * a static one. The static map always wins and is never
 * cached; resolver_reload() empties the cache. Security: the gate checks
 * every address through the address guard on every request, cached or
 * not, and connects only to checked addresses, so the cache adds no
 * rebinding window.
 *
 * Owns: the name servers (name_servers.h), a copy of the static map, the
 * cache, the names in flight, and every request until its callback has run
 * or it was cancelled. */
#ifndef SLUICE_GATE_RESOLVE_H
#define SLUICE_GATE_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/model.h"
#include "util/ipaddr.h"

struct event_base;
struct resolver;
struct resolve_req;

#define RESOLVE_MAX_ADDRS 16
/* Queries sent to one server and not yet answered, at most; more wait in
 * order (resolve.c). */
#define RESOLVE_MAX_INFLIGHT 8192

/* Errors given to a resolve_cb (all negative). */
enum resolve_err {
    RESOLVE_ERR_NXDOMAIN = -1,   /* the name does not exist */
    RESOLVE_ERR_TIMEOUT = -2,    /* no answer in time */
    RESOLVE_ERR_NO_SERVERS = -3, /* no name server configured */
    RESOLVE_ERR_FAILED = -4,     /* another rcode, a bad name, shutdown, no memory */
    RESOLVE_ERR_TRUNCATED = -5,  /* the answer came truncated (TC): too large for UDP */
    RESOLVE_ERR_NODATA = -6,     /* the name exists, with no A or AAAA record */
    RESOLVE_ERR_SERVFAIL = -7,   /* the servers answered SERVFAIL */
    RESOLVE_ERR_REFUSED = -8,    /* the servers answered REFUSED */
    RESOLVE_ERR_NOTIMP = -9,     /* the servers answered NOTIMP */
    RESOLVE_ERR_FORMERR = -10,   /* the servers answered FORMERR */
};

/* Called once per lookup, on the event loop: <err> 0 with <n> >= 1
 * addresses (A answers first, then AAAA; at most RESOLVE_MAX_ADDRS; the
 * array is valid only during the call), or <err> < 0 with n == 0. */
typedef void (*resolve_cb)(int err, const struct ipaddr *addrs, size_t n, void *arg);

/* Returns a new resolver on <base> (borrowed, must outlive it) configured
 * from <cfg> (borrowed; the static map is copied, and must be sorted by
 * dns_static_cmp(), as the loader sorts it). Servers come from
 * cfg->servers ("IP", "IP:PORT", "[V6]:PORT"), else /etc/resolv.conf.
 * Returns NULL with <*err> set (malloc'd, caller frees) when a configured
 * server cannot be added or memory runs out. */
struct resolver *resolver_new(struct event_base *base, const struct dns_cfg *cfg, char **err);

/* Applies a reloaded policy's <cfg>: swaps the static map and, when the
 * server list changed, the servers: queries in flight are asked again of
 * the new ones (with none, their lookups fail, from the event loop), for
 * the requests already waiting on them only: later lookups of those names
 * start flights of their own. Returns 0, or -1 and keeps the old configuration. */
int resolver_reload(struct resolver *r, const struct dns_cfg *cfg);

/* What one server did with the queries sent to it (for /metrics). */
struct resolve_server_stats {
    char addr[64];     /* "IP:PORT", "[V6]:PORT" or "[V6%ZONE]:PORT" (name_server_addr_format()) */
    uint64_t answers;  /* addresses, or no such name / no data */
    uint64_t timeouts; /* no answer in time */
    uint64_t failures; /* SERVFAIL, refused, not implemented, format error, truncated, malformed */
    bool down;         /* its last result was a timeout or a failure */
};

/* Copies the counters of the current servers, in order, into <out> (room
 * for <cap>); returns how many. A server a reload adds starts at 0; one it
 * keeps (its address listed again) keeps its counts. */
size_t resolver_server_stats(const struct resolver *r, struct resolve_server_stats *out,
                             size_t cap);

/* Frees <r>. In-flight lookups are cancelled: their callbacks never run,
 * and their handles are invalid afterwards. evdns reports each cancelled
 * query on a later loop turn, which is when its small request record is
 * released; a process that frees the event base right after may leak those
 * few bytes. Accepts NULL. */
void resolver_free(struct resolver *r);

/* Starts resolving <name> (NUL-terminated, host_normalise()'s normal form;
 * an IP literal is answered as itself). <cb> runs later, never from inside
 * this call. Returns a handle valid until <cb> has run or resolve_cancel()
 * was called, or NULL when the lookup could not start (out of memory;
 * then <cb> is never called). */
struct resolve_req *resolver_lookup(struct resolver *r, const char *name, resolve_cb cb, void *arg);

/* True when resolver_lookup(<r>, <name>) would send queries now: <name>
 * is a host name that neither dns.static nor the cache answers, and no
 * lookup of it is already asking the servers. Its bytes then go out to
 * the name servers (conn.c meters them: shape_name_waits()). */
bool resolver_asks_servers(struct resolver *r, const char *name);

/* Cancels <req>: its callback is never called and the handle is invalid
 * afterwards. Must not be called from inside that request's callback.
 * Accepts NULL. */
void resolve_cancel(struct resolve_req *req);

#endif
