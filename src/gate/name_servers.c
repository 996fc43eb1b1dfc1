/* name_servers: the resolver's name servers (see name_servers.h). */
#include "gate/name_servers.h"
#include "util/dns_pin.h"
#include "util/name_server_addr.h"
#include "util/resolv_conf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>

static char *errmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *errmsg(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return n > 0 ? strdup(buf) : NULL;
}

int name_servers_check(const struct dns_cfg *cfg, char **err)
{
    for (size_t i = 0; i < cfg->nservers; i++) {
        struct sockaddr_storage ss;
        int len = (int)sizeof(ss);
        if (evutil_parse_sockaddr_port(cfg->servers[i], (struct sockaddr *)&ss, &len) < 0) {
            if (err != NULL)
                *err = errmsg("dns.servers: invalid server address \"%s\"", cfg->servers[i]);
            return -1;
        }
    }
    return 0;
}

/* evdns keeps at most 64 queries in flight by default and queues the rest
 * in order: then one agent asking for names whose server never answers
 * holds every other lookup of the gateway behind its timeouts, for seconds.
 * RESOLVE_MAX_INFLIGHT is two queries for each of the gateway's default
 * 4096 connections, each of which waits for one lookup at most. One
 * attempt per try: the retries are the resolver's. Its timer, later than
 * the resolver's for the same try, is only a backstop (name_servers.h). */
static int set_options(struct evdns_base *dns)
{
    char inflight[16], timeout[16];

    snprintf(inflight, sizeof(inflight), "%d", RESOLVE_MAX_INFLIGHT);
    enum { EVDNS_TIMEOUT_MS = NAME_SERVER_TRY_MS + NAME_SERVER_EVDNS_SLACK_MS };
    snprintf(timeout, sizeof(timeout), "%d.%03d", EVDNS_TIMEOUT_MS / 1000, EVDNS_TIMEOUT_MS % 1000);
    if (evdns_base_set_option(dns, "timeout:", timeout) != 0 ||
        evdns_base_set_option(dns, "attempts:", "1") != 0 ||
        evdns_base_set_option(dns, "initial-probe-timeout:", "3600") != 0 ||
        evdns_base_set_option(dns, "max-inflight:", inflight) != 0)
        return -1;
    return 0;
}

/* Every base here is freed with fail_requests 0: the resolver cancels its
 * own tries first (resolve.c), so what a base may still hold is evdns' probe
 * of a server it took as down, and 1 would queue that probe's callback,
 * which then reads the freed server's record on a later loop turn
 * (test_free_with_a_probe_in_flight). 0 drops it unrun. (So is a try the
 * resolver left uncancelled after evdns lost a callback: its attempt waits
 * on resolve.c's uncancelled list for a callback that never comes.) */
void name_servers_free(struct name_server *ns, size_t n)
{
    if (ns == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        if (ns[i].dns != NULL)
            evdns_base_free(ns[i].dns, 0);
    free(ns);
}

void name_servers_retire(struct name_servers_retired *ret, struct name_server *old, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (old[i].dns == NULL || !old[i].st.down) {
            if (old[i].dns != NULL)
                evdns_base_free(old[i].dns, 0);
            continue;
        }
        if (ret->n == NAME_SERVER_RETIRED) {
            evdns_base_free(ret->dns[0], 0);
            memmove(ret->dns, ret->dns + 1, (NAME_SERVER_RETIRED - 1) * sizeof(ret->dns[0]));
            ret->n--;
        }
        ret->dns[ret->n++] = old[i].dns;
    }
    free(old);
}

void name_servers_retired_free(struct name_servers_retired *ret)
{
    for (size_t i = 0; i < ret->n; i++)
        evdns_base_free(ret->dns[i], 0);
    ret->n = 0;
}

/* A base that asks the one server at <sa>, its socket tied to the
 * server's port (dns_pin.h), into <*out>, that socket into <*fd>. Returns
 * 0; 1, <*out> NULL, when the server is not asked (said on standard
 * error): no socket can be connected to it now, or its socket was not
 * found among the descriptors to be tied: either would take an answer from
 * any port of its address (a forger's on the gateway's host), so it is
 * left out, not asked untied; -1 when that fails. */
static int open_base(struct event_base *base, const struct sockaddr *sa, socklen_t len,
                     struct evdns_base **out, int *fd)
{
    char addr[NAME_SERVER_ADDR_LEN];
    *out = NULL;
    struct evdns_base *dns = evdns_base_new(base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (dns == NULL)
        return -1;
    const char *why = NULL;
    enum dns_pin_result pin = dns_pin_add(dns, sa, len, &why, fd);
    if (pin == DNS_PIN_FAILED || (pin == DNS_PIN_TIED && set_options(dns) < 0)) {
        evdns_base_free(dns, 0);
        return -1;
    }
    if (pin == DNS_PIN_TIED) {
        *out = dns;
        return 0;
    }
    evdns_base_free(dns, 0);
    name_server_addr_format(sa, addr, sizeof(addr));
    if (pin == DNS_PIN_UNREACHABLE)
        fprintf(stderr,
                "sluice: dns: server %s: not asked: no socket can be connected to it (%s); a "
                "reload tries it again\n",
                addr, why);
    else
        fprintf(stderr,
                "sluice: dns: server %s: not asked: its socket cannot be tied to its port (%s), "
                "and an untied one takes an answer from any port of its address; a reload tries "
                "it again\n",
                addr, why);
    return 1;
}

/* A server written "IP" (no port; evutil_parse_sockaddr_port() gives it 0)
 * is asked on the DNS port. */
static void set_default_port(struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)(void *)ss;
        if (s6->sin6_port == 0)
            s6->sin6_port = htons(53);
    } else if (ss->ss_family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)(void *)ss;
        if (s4->sin_port == 0)
            s4->sin_port = htons(53);
    }
}

/* The addresses of the servers in <cfg>, or else those of /etc/resolv.conf
 * (a missing file or no nameserver line: none; resolv_conf.h), into <ss>
 * (room for <cap>); their number in <*count>. Returns -1 with errno set
 * when resolv.conf could not be read whole. */
static int server_addrs(struct event_base *base, const struct dns_cfg *cfg, const char *resolv_conf,
                        struct sockaddr_storage *ss, socklen_t *len, size_t cap, size_t *count_out)
{
    size_t n = 0;
    *count_out = 0;

    for (size_t i = 0; i < cfg->nservers && n < cap; i++) {
        int l = (int)sizeof(ss[n]);
        if (evutil_parse_sockaddr_port(cfg->servers[i], (struct sockaddr *)&ss[n], &l) == 0) {
            set_default_port(&ss[n]);
            len[n++] = (socklen_t)l;
        }
    }
    if (cfg->nservers > 0) {
        *count_out = n;
        return 0;
    }
    return resolv_conf_addrs(base, resolv_conf, ss, len, cap, count_out);
}

int name_servers_open(struct event_base *base, const struct dns_cfg *cfg, const char *resolv_conf,
                      struct name_server **out, size_t *n, char **err)
{
    struct sockaddr_storage ss[POLICY_MAX_DNS_SERVERS];
    socklen_t len[POLICY_MAX_DNS_SERVERS];
    size_t count;

    *out = NULL;
    *n = 0;
    if (server_addrs(base, cfg, resolv_conf, ss, len, POLICY_MAX_DNS_SERVERS, &count) < 0) {
        *err = errmsg("dns: cannot read the servers of %s: %s", resolv_conf, strerror(errno));
        return -1;
    }
    if (count == 0)
        return 0;
    struct name_server *b = calloc(count, sizeof(*b));
    if (b == NULL) {
        *err = errmsg("%s", "dns: out of memory");
        return -1;
    }
    size_t used = 0;
    for (size_t i = 0; i < count; i++) {
        const struct sockaddr *sa = (const struct sockaddr *)&ss[i];
        int r = open_base(base, sa, len[i], &b[used].dns, &b[used].fd);
        if (r < 0) {
            /* Named by its address: its index in <ss> is not its line's
             * among resolv.conf's nameserver lines, which evdns skips
             * when unreadable, repeated or of a family this host lacks. */
            char addr[NAME_SERVER_ADDR_LEN];
            name_server_addr_format(sa, addr, sizeof(addr));
            if (cfg->nservers > 0)
                *err = errmsg("dns.servers: cannot use server \"%s\"", cfg->servers[i]);
            else
                *err = errmsg("dns: cannot use server %s of %s", addr, resolv_conf);
            name_servers_free(b, used);
            return -1;
        }
        if (r == 0)
            name_server_addr_format(sa, b[used++].st.addr, sizeof(b[0].st.addr));
    }
    if (used == 0) {
        free(b);
        return 0;
    }
    *out = b;
    *n = used;
    return 0;
}

bool name_servers_unchanged(struct event_base *base, const struct dns_cfg *cfg,
                            const char *resolv_conf, const struct name_server *ns, size_t n)
{
    struct sockaddr_storage ss[POLICY_MAX_DNS_SERVERS];
    socklen_t len[POLICY_MAX_DNS_SERVERS];
    size_t count;
    /* not read whole: name_servers_open() says why */
    if (server_addrs(base, cfg, resolv_conf, ss, len, POLICY_MAX_DNS_SERVERS, &count) < 0 ||
        count != n)
        return false;
    for (size_t i = 0; i < count; i++) {
        char addr[sizeof(ns[i].st.addr)];
        name_server_addr_format((const struct sockaddr *)&ss[i], addr, sizeof(addr));
        if (strcmp(addr, ns[i].st.addr) != 0)
            return false;
    }
    return true;
}

void name_server_count(struct resolve_server_stats *st, int result)
{
    switch (result) {
    case DNS_ERR_NONE:
    case DNS_ERR_NOTEXIST:
    case DNS_ERR_NODATA:
        st->answers++;
        st->down = false;
        break;
    case DNS_ERR_TIMEOUT:
        st->timeouts++;
        st->down = true;
        break;
    case DNS_ERR_CANCEL:
    case DNS_ERR_SHUTDOWN:
        break;
    default:
        st->failures++;
        st->down = true;
        break;
    }
}

size_t name_servers_same(const struct name_server *old, size_t nold, size_t pref,
                         const struct name_server *ns, size_t nns)
{
    if (pref >= nold)
        return 0;
    for (size_t i = 0; i < nns; i++)
        if (strcmp(ns[i].st.addr, old[pref].st.addr) == 0)
            return i;
    return 0;
}

void name_servers_keep_counts(const struct name_server *old, size_t nold, struct name_server *ns,
                              size_t nns)
{
    for (size_t i = 0; i < nns; i++) {
        size_t nth = 0; /* earlier listings of its address */
        for (size_t j = 0; j < i; j++)
            nth += strcmp(ns[j].st.addr, ns[i].st.addr) == 0;
        for (size_t j = 0; j < nold; j++) {
            if (strcmp(old[j].st.addr, ns[i].st.addr) != 0 || nth-- > 0)
                continue;
            ns[i].st.answers = old[j].st.answers;
            ns[i].st.timeouts = old[j].st.timeouts;
            ns[i].st.failures = old[j].st.failures;
            break;
        }
    }
}
