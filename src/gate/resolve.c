/* resolve: the gateway's own DNS over evdns (see resolve.h).
 *
 * A lookup is a struct resolve_req holding two evdns queries (A and AAAA),
 * or, for static names, IP literals and failures known up front, one
 * activated event that answers on the next loop iteration. evdns always
 * runs a query's callback exactly once (an answer, an error, or
 * DNS_ERR_CANCEL after evdns_cancel_request()), from a deferred callback
 * that may run after the evdns base is gone; so a request is freed only
 * when its last query has called back, and a cancelled one just stays
 * silent until then.
 *
 * Answer cache: a hash table (chained) with an LRU list, at most
 * r->cache_max names. Only lookups that went to the servers and came back
 * complete are stored: both queries answered with addresses or with "no
 * such name / no data" (never a timeout, a server failure, a cancellation,
 * or a partial answer); positive for min(answer TTL, 300 s), negative for
 * r->neg_ttl_ms. A lookup started before a reload is not stored after it
 * (r->gen). */
#include "gate/resolve.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>

#ifndef RESOLV_CONF
#define RESOLV_CONF "/etc/resolv.conf" /* tests point it elsewhere */
#endif

enum { Q_A, Q_AAAA, NQ };

#define CACHE_MAX        4096   /* names */
#define CACHE_TTL_MAX_MS 300000 /* positive answers: at most 300 s */
#define CACHE_NEG_TTL_MS 5000   /* negative answers (NXDOMAIN, no data) */
#define CACHE_BUCKETS    1024   /* power of two */

struct cache_entry {
    struct cache_entry *hnext;         /* bucket chain */
    struct cache_entry *lprev, *lnext; /* LRU list, most recent first */
    uint64_t expires_ms;               /* monotonic */
    size_t n;                          /* 0: a negative answer */
    struct ipaddr a[RESOLVE_MAX_ADDRS];
    char name[HOST_MAX + 1];
};

struct resolve_req;

struct query {
    struct resolve_req *req;
    struct evdns_request *h; /* NULL once its callback ran or it was cancelled */
    bool running;            /* its callback has not run yet */
    int err;                 /* RESOLVE_ERR_* or 0 */
    int ttl;                 /* smallest TTL of its answers (s), -1 when none */
    size_t n;
    struct ipaddr a[RESOLVE_MAX_ADDRS];
};

struct resolve_req {
    struct resolver *r; /* NULL once the resolver is gone */
    struct resolve_req *prev, *next;
    resolve_cb cb;
    void *arg;
    bool cancelled;
    bool cacheable;   /* went to the servers: store the answer */
    unsigned gen;     /* r->gen when it started */
    struct event *ev; /* immediate answers */
    struct query q[NQ];
    char name[HOST_MAX + 1]; /* when cacheable */
};

struct resolver {
    struct event_base *base;
    struct evdns_base *dns;
    struct dns_static *statics; /* owned copies */
    size_t nstatics;
    char **servers; /* owned copy of cfg->servers, to see changes */
    size_t nservers;
    struct resolve_req *live;
    struct cache_entry *buckets[CACHE_BUCKETS];
    struct cache_entry *lru_head, *lru_tail;
    size_t ncache;
    size_t cache_max;    /* CACHE_MAX; tests lower it */
    uint64_t neg_ttl_ms; /* CACHE_NEG_TTL_MS; tests lower it */
    unsigned gen;        /* bumped by every reload */
};

/* ---------------------------------------------------------------- cache */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static size_t cache_bucket(const char *name)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++)
        h = (h ^ *p) * 16777619u;
    return h & (CACHE_BUCKETS - 1);
}

static void lru_unlink(struct resolver *r, struct cache_entry *e)
{
    if (e->lprev != NULL)
        e->lprev->lnext = e->lnext;
    else
        r->lru_head = e->lnext;
    if (e->lnext != NULL)
        e->lnext->lprev = e->lprev;
    else
        r->lru_tail = e->lprev;
    e->lprev = e->lnext = NULL;
}

static void lru_push(struct resolver *r, struct cache_entry *e)
{
    e->lprev = NULL;
    e->lnext = r->lru_head;
    if (r->lru_head != NULL)
        r->lru_head->lprev = e;
    r->lru_head = e;
    if (r->lru_tail == NULL)
        r->lru_tail = e;
}

static void cache_remove(struct resolver *r, struct cache_entry *e)
{
    struct cache_entry **pp = &r->buckets[cache_bucket(e->name)];
    while (*pp != NULL && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp == e)
        *pp = e->hnext;
    lru_unlink(r, e);
    r->ncache--;
    free(e);
}

static void cache_clear(struct resolver *r)
{
    while (r->lru_head != NULL)
        cache_remove(r, r->lru_head);
}

/* The live entry for <name>, made most recent; an expired one is dropped. */
static struct cache_entry *cache_find(struct resolver *r, const char *name)
{
    struct cache_entry *e = r->buckets[cache_bucket(name)];
    while (e != NULL && strcmp(e->name, name) != 0)
        e = e->hnext;
    if (e == NULL)
        return NULL;
    if (now_ms() >= e->expires_ms) {
        cache_remove(r, e);
        return NULL;
    }
    lru_unlink(r, e);
    lru_push(r, e);
    return e;
}

/* Stores <n> addresses (0: a negative answer) for <name> for <ttl_ms>. */
static void cache_put(struct resolver *r, const char *name, const struct ipaddr *a, size_t n,
                      uint64_t ttl_ms)
{
    struct cache_entry *e;
    size_t len = strlen(name);

    if (ttl_ms == 0 || len > HOST_MAX || r->cache_max == 0)
        return;
    if ((e = cache_find(r, name)) == NULL) {
        while (r->ncache >= r->cache_max && r->lru_tail != NULL)
            cache_remove(r, r->lru_tail);
        if ((e = calloc(1, sizeof(*e))) == NULL)
            return; /* not cached: no harm */
        memcpy(e->name, name, len + 1);
        size_t b = cache_bucket(name);
        e->hnext = r->buckets[b];
        r->buckets[b] = e;
        lru_push(r, e);
        r->ncache++;
    }
    if (n > RESOLVE_MAX_ADDRS)
        n = RESOLVE_MAX_ADDRS;
    e->n = n;
    if (n > 0)
        memcpy(e->a, a, n * sizeof(*a));
    e->expires_ms = now_ms() + ttl_ms;
}

/* Stores the outcome of <req> (its queries are done) when it is complete. */
static void cache_store(struct resolve_req *req, const struct ipaddr *out, size_t n)
{
    struct resolver *r = req->r;
    int ttl = -1;

    if (r == NULL || !req->cacheable || req->gen != r->gen)
        return;
    for (int i = 0; i < NQ; i++) {
        const struct query *q = &req->q[i];
        if (q->err != 0 && q->err != RESOLVE_ERR_NXDOMAIN)
            return; /* a timeout, failure or cancellation: never stored */
        if (q->n > 0 && (ttl < 0 || q->ttl < ttl))
            ttl = q->ttl;
    }
    if (n == 0) {
        cache_put(r, req->name, NULL, 0, r->neg_ttl_ms);
        return;
    }
    if (ttl <= 0)
        return;
    uint64_t ms = (uint64_t)ttl * 1000u;
    cache_put(r, req->name, out, n, ms < CACHE_TTL_MAX_MS ? ms : CACHE_TTL_MAX_MS);
}

/* --------------------------------------------------------------- config */

static void free_statics(struct dns_static *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(s[i].name);
    free(s);
}

static void free_servers(char **s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

static int copy_cfg(const struct dns_cfg *cfg, struct dns_static **st, char ***sv)
{
    *st = NULL;
    *sv = NULL;
    if (cfg->nstatics > 0 && (*st = calloc(cfg->nstatics, sizeof(**st))) == NULL)
        goto err;
    for (size_t i = 0; i < cfg->nstatics; i++) {
        (*st)[i] = cfg->statics[i];
        if (((*st)[i].name = strdup(cfg->statics[i].name)) == NULL)
            goto err;
    }
    if (cfg->nservers > 0 && (*sv = calloc(cfg->nservers, sizeof(**sv))) == NULL)
        goto err;
    for (size_t i = 0; i < cfg->nservers; i++)
        if (((*sv)[i] = strdup(cfg->servers[i])) == NULL)
            goto err;
    return 0;
err:
    if (*st != NULL)
        free_statics(*st, cfg->nstatics);
    if (*sv != NULL)
        free_servers(*sv, cfg->nservers);
    *st = NULL;
    *sv = NULL;
    return -1;
}

static bool servers_equal(const struct resolver *r, const struct dns_cfg *cfg)
{
    if (r->nservers != cfg->nservers)
        return false;
    for (size_t i = 0; i < cfg->nservers; i++)
        if (strcmp(r->servers[i], cfg->servers[i]) != 0)
            return false;
    return true;
}

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

/* Checks that every server in <cfg> is an address evdns will take. */
static int check_servers(const struct dns_cfg *cfg, char **err)
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

/* Adds the servers of <cfg>, or those of /etc/resolv.conf, to <dns>. */
static int add_servers(struct evdns_base *dns, const struct dns_cfg *cfg, char **err)
{
    for (size_t i = 0; i < cfg->nservers; i++) {
        if (evdns_base_nameserver_ip_add(dns, cfg->servers[i]) != 0) {
            if (err != NULL)
                *err = errmsg("dns.servers: cannot use server \"%s\"", cfg->servers[i]);
            return -1;
        }
    }
    if (cfg->nservers == 0) {
        /* Missing file or no nameserver line: no server (never the
         * 127.0.0.1 evdns would otherwise assume); lookups then fail. */
        (void)evdns_base_resolv_conf_parse(
            dns, DNS_OPTION_NAMESERVERS | DNS_OPTION_NAMESERVERS_NO_DEFAULT, RESOLV_CONF);
    }
    return 0;
}

static int set_options(struct evdns_base *dns)
{
    if (evdns_base_set_option(dns, "timeout:", "2") != 0 ||
        evdns_base_set_option(dns, "attempts:", "2") != 0)
        return -1;
    return 0;
}

/* evdns' own messages (a server marked down, and so on): warnings only,
 * in the gateway's format. */
static void evdns_log(int is_warning, const char *msg)
{
    if (is_warning)
        fprintf(stderr, "sluice: dns: %s\n", msg);
}

struct resolver *resolver_new(struct event_base *base, const struct dns_cfg *cfg, char **err)
{
    struct resolver *r = calloc(1, sizeof(*r));

    *err = NULL;
    evdns_set_log_fn(evdns_log);
    if (r == NULL)
        goto nomem;
    r->base = base;
    r->cache_max = CACHE_MAX;
    r->neg_ttl_ms = CACHE_NEG_TTL_MS;
    if (check_servers(cfg, err) < 0)
        goto fail;
    if (copy_cfg(cfg, &r->statics, &r->servers) < 0)
        goto nomem;
    r->nstatics = cfg->nstatics;
    r->nservers = cfg->nservers;
    r->dns = evdns_base_new(base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (r->dns == NULL)
        goto nomem;
    if (add_servers(r->dns, cfg, err) < 0)
        goto fail;
    if (set_options(r->dns) < 0) {
        *err = errmsg("%s", "dns: cannot set resolver options");
        goto fail;
    }
    return r;
nomem:
    *err = errmsg("%s", "dns: out of memory");
fail:
    resolver_free(r);
    return NULL;
}

/* --------------------------------------------------------------- requests */

static void unlink_req(struct resolve_req *q)
{
    if (q->r == NULL)
        return;
    if (q->prev != NULL)
        q->prev->next = q->next;
    else
        q->r->live = q->next;
    if (q->next != NULL)
        q->next->prev = q->prev;
    q->prev = q->next = NULL;
    q->r = NULL;
}

static bool queries_running(const struct resolve_req *req)
{
    return req->q[Q_A].running || req->q[Q_AAAA].running;
}

/* Both queries are done: merge and answer (or stay silent if cancelled). */
static void finish(struct resolve_req *req)
{
    struct ipaddr out[RESOLVE_MAX_ADDRS];
    size_t n = 0;
    int err = 0;

    if (req->cancelled) {
        free(req);
        return;
    }
    for (int i = 0; i < NQ; i++)
        for (size_t j = 0; j < req->q[i].n && n < RESOLVE_MAX_ADDRS; j++)
            out[n++] = req->q[i].a[j];
    cache_store(req, out, n);
    unlink_req(req);
    if (n == 0) {
        /* No address: a timeout says more than "no AAAA", and "no such
         * name" more than a failure. */
        int a = req->q[Q_A].err, b = req->q[Q_AAAA].err;
        if (a == RESOLVE_ERR_TIMEOUT || b == RESOLVE_ERR_TIMEOUT)
            err = RESOLVE_ERR_TIMEOUT;
        else if (a == RESOLVE_ERR_NO_SERVERS || b == RESOLVE_ERR_NO_SERVERS)
            err = RESOLVE_ERR_NO_SERVERS;
        else if (a == RESOLVE_ERR_NXDOMAIN || b == RESOLVE_ERR_NXDOMAIN)
            err = RESOLVE_ERR_NXDOMAIN;
        else if (a == 0 && b == 0)
            err = RESOLVE_ERR_NXDOMAIN;
        else
            err = RESOLVE_ERR_FAILED;
    }
    req->cb(err, n > 0 ? out : NULL, n, req->arg);
    free(req);
}

static int map_err(int result)
{
    switch (result) {
    case DNS_ERR_NONE:
    case DNS_ERR_NOTEXIST:
    case DNS_ERR_NODATA:
        return RESOLVE_ERR_NXDOMAIN;
    case DNS_ERR_TIMEOUT:
        return RESOLVE_ERR_TIMEOUT;
    default:
        return RESOLVE_ERR_FAILED;
    }
}

static void on_answer(int result, char type, int count, int ttl, void *addresses, void *arg)
{
    struct query *q = arg;
    struct resolve_req *req = q->req;

    q->h = NULL; /* evdns frees the handle after this callback */
    q->running = false;
    if (result == DNS_ERR_NONE && count > 0 && addresses != NULL) {
        for (int i = 0; i < count && q->n < RESOLVE_MAX_ADDRS; i++) {
            struct ipaddr *a = &q->a[q->n];
            if (type == DNS_IPv4_A) {
                memset(a->b, 0, 10);
                a->b[10] = a->b[11] = 0xff;
                memcpy(a->b + 12, (const uint8_t *)addresses + 4 * (size_t)i, 4);
                q->n++;
            } else if (type == DNS_IPv6_AAAA) {
                memcpy(a->b, (const uint8_t *)addresses + 16 * (size_t)i, 16);
                q->n++;
            }
        }
        if (q->n > 0)
            q->ttl = ttl > 0 ? ttl : 0;
    }
    q->err = q->n > 0 ? 0 : map_err(result);
    if (!queries_running(req))
        finish(req);
}

static void on_immediate(evutil_socket_t fd, short what, void *arg)
{
    struct resolve_req *req = arg;

    (void)fd;
    (void)what;
    event_free(req->ev);
    req->ev = NULL;
    finish(req);
}

static size_t static_answers(const struct resolver *r, const char *name, struct ipaddr *out)
{
    size_t n = 0;
    for (size_t i = 0; i < r->nstatics && n < RESOLVE_MAX_ADDRS; i++)
        if (strcmp(r->statics[i].name, name) == 0)
            out[n++] = r->statics[i].addr;
    return n;
}

struct resolve_req *resolver_lookup(struct resolver *r, const char *name, resolve_cb cb, void *arg)
{
    struct resolve_req *req = calloc(1, sizeof(*req));
    size_t len = strlen(name);
    bool immediate = true;
    const struct cache_entry *ce;

    if (req == NULL)
        return NULL;
    req->cb = cb;
    req->arg = arg;
    for (int i = 0; i < NQ; i++) {
        req->q[i].req = req;
        req->q[i].ttl = -1;
    }

    struct query *qa = &req->q[Q_A];
    enum ip_literal_kind lit = ip_literal_parse(name, len, &qa->a[0]);
    if (lit == IP_LITERAL_V4 || lit == IP_LITERAL_V6) {
        qa->n = 1;
    } else if (lit == IP_LITERAL_INVALID || len == 0 || len > HOST_MAX) {
        qa->err = req->q[Q_AAAA].err = RESOLVE_ERR_FAILED;
    } else if ((qa->n = static_answers(r, name, qa->a)) > 0) {
        /* answered from dns.static (never cached) */
    } else if ((ce = cache_find(r, name)) != NULL) {
        /* answered from the cache, on the next turn like a static answer */
        qa->n = ce->n;
        memcpy(qa->a, ce->a, ce->n * sizeof(ce->a[0]));
        if (ce->n == 0)
            qa->err = req->q[Q_AAAA].err = RESOLVE_ERR_NXDOMAIN;
    } else if (evdns_base_count_nameservers(r->dns) <= 0) {
        qa->err = req->q[Q_AAAA].err = RESOLVE_ERR_NO_SERVERS;
    } else {
        immediate = false;
        req->cacheable = true;
        req->gen = r->gen;
        memcpy(req->name, name, len + 1);
    }

    if (immediate) {
        req->ev = event_new(r->base, -1, 0, on_immediate, req);
        if (req->ev == NULL) {
            free(req);
            return NULL;
        }
        event_active(req->ev, EV_TIMEOUT, 1);
    } else {
        struct query *q6 = &req->q[Q_AAAA];
        qa->running = true;
        qa->h = evdns_base_resolve_ipv4(r->dns, name, DNS_QUERY_NO_SEARCH, on_answer, qa);
        if (qa->h == NULL) {
            qa->running = false;
            qa->err = RESOLVE_ERR_FAILED;
        }
        q6->running = true;
        q6->h = evdns_base_resolve_ipv6(r->dns, name, DNS_QUERY_NO_SEARCH, on_answer, q6);
        if (q6->h == NULL) {
            q6->running = false;
            q6->err = RESOLVE_ERR_FAILED;
        }
        if (!queries_running(req)) {
            /* Neither query started: answer the failure on the next turn. */
            req->ev = event_new(r->base, -1, 0, on_immediate, req);
            if (req->ev == NULL) {
                free(req);
                return NULL;
            }
            event_active(req->ev, EV_TIMEOUT, 1);
        }
    }
    req->r = r;
    req->next = r->live;
    if (r->live != NULL)
        r->live->prev = req;
    r->live = req;
    return req;
}

/* Stops <req>'s evdns queries; their callbacks still run (with
 * DNS_ERR_CANCEL) and release <req> when it is cancelled. */
static void stop_queries(struct evdns_base *dns, struct resolve_req *req)
{
    for (int i = 0; i < NQ; i++) {
        struct evdns_request *h = req->q[i].h;
        req->q[i].h = NULL;
        if (h != NULL)
            evdns_cancel_request(dns, h);
    }
}

void resolve_cancel(struct resolve_req *req)
{
    struct resolver *r;

    if (req == NULL || req->cancelled)
        return;
    r = req->r;
    unlink_req(req);
    req->cancelled = true;
    if (req->ev != NULL) {
        event_free(req->ev);
        free(req);
        return;
    }
    if (r != NULL)
        stop_queries(r->dns, req);
    if (!queries_running(req))
        free(req);
}

int resolver_reload(struct resolver *r, const struct dns_cfg *cfg)
{
    struct dns_static *st;
    char **sv;
    char *err = NULL;

    if (check_servers(cfg, &err) < 0) {
        fprintf(stderr, "sluice: %s\n", err != NULL ? err : "dns: invalid server");
        free(err);
        return -1;
    }
    if (copy_cfg(cfg, &st, &sv) < 0)
        return -1;
    if (!servers_equal(r, cfg)) {
        /* In-flight queries move to evdns' waiting list and are sent again
         * to the new servers on resume. */
        evdns_base_clear_nameservers_and_suspend(r->dns);
        if (add_servers(r->dns, cfg, &err) < 0) {
            fprintf(stderr, "sluice: %s\n", err != NULL ? err : "dns: cannot add server");
            free(err);
        }
        evdns_base_resume(r->dns);
        if (evdns_base_count_nameservers(r->dns) <= 0) {
            /* Nothing would ever answer them: fail them now. */
            for (struct resolve_req *q = r->live; q != NULL; q = q->next)
                stop_queries(r->dns, q);
        }
    }
    /* The servers (or what they say) may have changed: forget every answer,
     * and those still in flight are not stored when they come. */
    cache_clear(r);
    r->gen++;
    free_statics(r->statics, r->nstatics);
    free_servers(r->servers, r->nservers);
    r->statics = st;
    r->nstatics = cfg->nstatics;
    r->servers = sv;
    r->nservers = cfg->nservers;
    return 0;
}

void resolver_free(struct resolver *r)
{
    if (r == NULL)
        return;
    while (r->live != NULL) {
        struct resolve_req *req = r->live;
        if (req->ev != NULL) {
            unlink_req(req);
            event_free(req->ev);
            free(req);
            continue;
        }
        /* Queries still running release <req> from their callbacks. */
        resolve_cancel(req);
    }
    if (r->dns != NULL)
        evdns_base_free(r->dns, 0);
    cache_clear(r);
    free_statics(r->statics, r->nstatics);
    free_servers(r->servers, r->nservers);
    free(r);
}
