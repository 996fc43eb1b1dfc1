/* name_servers: the resolver's name servers, each behind an evdns base of
 * its own (see resolve.h for how lookups use them).
 *
 * Servers come from dns.servers ("IP", asked on port 53, "IP:PORT",
 * "[V6]:PORT"), else from the nameserver lines of /etc/resolv.conf (never
 * the 127.0.0.1 evdns would otherwise assume), at most
 * POLICY_MAX_DNS_SERVERS. Each base asks its one
 * server once per try (attempts:1: the retries are the resolver's), keeps
 * up to RESOLVE_MAX_INFLIGHT queries out to it, and probes it at most
 * hourly once evdns took it as down. A try has NAME_SERVER_TRY_MS to be
 * answered, timed by the resolver, which cancels it then; evdns' own timer
 * is set NAME_SERVER_EVDNS_SLACK_MS past that, so it never ends a try
 * itself: evdns hands a SERVFAIL over as a timeout (DNS_ERR_TIMEOUT, at
 * once), and its timeout for a try still running can then be nothing else.
 *
 * Owns: the bases and the array of a set it opened, until
 * name_servers_free() or name_servers_retire(); the bases it retired, until
 * name_servers_retired_free(). */
#ifndef SLUICE_GATE_NAME_SERVERS_H
#define SLUICE_GATE_NAME_SERVERS_H

#include <stdbool.h>
#include <stddef.h>

#include "gate/resolve.h"
#include "policy/model.h"

struct event_base;
struct evdns_base;

#define NAME_SERVER_TRY_MS         2000 /* a server has this long to answer one try */
#define NAME_SERVER_EVDNS_SLACK_MS 1000 /* evdns' own timer: this much later */
#define NAME_SERVER_RETIRED        16   /* replaced bases kept, at most */

/* One server and what it did with the queries sent to it. */
struct name_server {
    struct evdns_base *dns;
    int fd; /* evdns' socket for it (borrowed: evdns closes it): resolve.c's read_now() */
    struct resolve_server_stats st;
};

/* Bases of replaced servers that may still be probed (name_servers_retire). */
struct name_servers_retired {
    struct evdns_base *dns[NAME_SERVER_RETIRED];
    size_t n;
};

/* Returns 0 when every server in <cfg> is an address evdns takes, else -1
 * with <*err> (malloc'd, caller frees; when <err> is not NULL) naming it. */
int name_servers_check(const struct dns_cfg *cfg, char **err);

/* Opens the servers of <cfg> (or of resolv.conf at <resolv_conf> when cfg
 * names none; a missing file or no nameserver line: no server) on <base>,
 * into <*out> (malloc'd, NULL when none) and <*n>. A server that no socket
 * can be connected to now is left out, said on standard error: then <*n>
 * is less than the servers named, and name_servers_unchanged() says they
 * changed, so that the next reload tries it again. Returns 0, or -1 with
 * <*err> (malloc'd) and nothing open. */
int name_servers_open(struct event_base *base, const struct dns_cfg *cfg, const char *resolv_conf,
                      struct name_server **out, size_t *n, char **err);

/* True when <cfg> (or resolv.conf at <resolv_conf> when cfg names none)
 * gives the same server addresses, in the same order, as the <n> of <ns>:
 * a reload keeps those servers, their bases and what they did. */
bool name_servers_unchanged(struct event_base *base, const struct dns_cfg *cfg,
                            const char *resolv_conf, const struct name_server *ns, size_t n);

/* Frees the <n> servers of <ns> and the array. Accepts NULL. */
void name_servers_free(struct name_server *ns, size_t n);

/* Frees the <n> servers of <old> (and the array) that a reload replaced. A
 * base whose server last answered is freed at once. One whose server last
 * timed out or failed may have evdns' probe of it (a question for
 * google.com, at most hourly) about to report to a callback that reads the
 * server's record, which freeing the base would leave dangling: it goes to
 * <ret> instead, until name_servers_retired_free() (evdns goes on probing
 * its server, at most hourly), NAME_SERVER_RETIRED at most (then the
 * oldest goes). */
void name_servers_retire(struct name_servers_retired *ret, struct name_server *old, size_t n);

void name_servers_retired_free(struct name_servers_retired *ret);

/* Counts an evdns <result> (DNS_ERR_*) against <st>: an answer (addresses,
 * no such name, no data) marks it up, a timeout or a failure down; a
 * cancellation counts nothing. */
void name_server_count(struct resolve_server_stats *st, int result);

/* Where lookups start after a reload: the index in the new servers <ns>,
 * <nns> of the old server <pref> of <old>, <nold>, when it is still
 * listed; else 0. */
size_t name_servers_same(const struct name_server *old, size_t nold, size_t pref,
                         const struct name_server *ns, size_t nns);
/* Gives each of the new servers <ns>, <nns> that the old ones <old>,
 * <nold> list too the counts of its old self (answers, timeouts,
 * failures; the Nth listing of an address the Nth's of before), so that a
 * reload that keeps a server keeps its /metrics counters; the others stay
 * at 0. */
void name_servers_keep_counts(const struct name_server *old, size_t nold, struct name_server *ns,
                              size_t nns);

#endif
