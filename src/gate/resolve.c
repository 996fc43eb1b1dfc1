/* resolve: the gateway's own DNS over evdns (see resolve.h).
 *
 * A lookup is a struct resolve_req, one per caller. Static names, IP
 * literals, cached answers and failures known at once are answered through
 * the request's own event, from the event loop. A name that has to be asked
 * of the servers is a struct flight, shared by every request for that name
 * while it is in flight (16 first contacts to one host send one A and one
 * AAAA query, not 16 of each): its two queries and one event, made up front,
 * which is its deadline or, for an end known at once, runs it from the loop.
 * A flight whose last request is cancelled is cancelled too: nobody waits
 * for its answer, and an agent that opens and drops connections does not
 * leave queries behind.
 *
 * Each server has an evdns base of its own, asked once per try (attempts:1),
 * so that this file, not evdns, chooses the server: evdns' own rotation
 * over several servers sent a lookup's retries back to a dead server and
 * failed lookups another server would have answered. Each try of a query
 * is a struct attempt: evdns runs its callback exactly once (an answer, an
 * error, or DNS_ERR_CANCEL after evdns_cancel_request()), from a deferred
 * callback that may run after the query is gone; so an attempt is freed
 * only by its callback, and one whose query was cancelled or moved to other
 * servers (its q set to NULL) just stays silent until then. (evdns skips
 * the callback only when it cannot allocate the record that schedules it:
 * see "Out of memory in evdns" below.) The servers, their bases and
 * counters are name_servers.c's; which server a try goes to is decided
 * here.
 *
 * Out of memory in evdns (libevent 2.1.12, evdns.c): a request ends by an
 * answer (reply_handle(); a SERVFAIL through
 * evdns_request_timeout_callback()), by evdns' own timer, by
 * evdns_cancel_request() or by evdns_base_free(). The first three call
 * reply_schedule_callback(), then request_finished(req, ..., 1). The first
 * allocates (mm_calloc) the record that runs the callback later, and only
 * with it sets handle->pending_cb, which keeps request_finished() from
 * freeing the handle. Should that allocation fail it warns
 * "reply_schedule_callback: Couldn't allocate space for deferred
 * callback." (event_warn()) and returns; request_finished() frees the
 * handle, and the callback never runs. Met by an answer or evdns' timer
 * (in evdns' own event callbacks), the attempt kept q->att with a freed
 * handle, and the try's timer (on_try_end()), the flight's end
 * (on_flight_event()) or its cancellation (flight_free()) passed it to
 * evdns_cancel_request(), which read it: a use after free (a crash in
 * test_lost_callback). Which attempt it was cannot be told: the warning
 * names no request, struct evdns_request is private to evdns.c, and an
 * attempt whose callback is only pending (deferred to the next loop turn)
 * looks the same as one whose callback never comes. So the warning is
 * counted (util/libevent_log.c, the gateway's log callback), and orphan()
 * cancels only an attempt sent since the last one: an older one is left
 * to end in evdns (its answer, evdns' timer 1 s after the try's, or its
 * base's free; a query evdns' timer ends also marks its server down, as
 * evdns does) and kept on the uncancelled list until its callback frees
 * it; the one whose callback was lost stays there (64 bytes). Its lookup
 * goes on: its try ends by its own timer, a timeout, and the next try is
 * sent. Met by our own evdns_cancel_request(), the lost callback costs the
 * same 64 bytes (an orphaned attempt, which nothing reads again). libevent
 * after 2.1 keeps that record in the handle, with no allocation.
 *
 * A try ends by a timer of its query's own (r->try_ms: on_try_end()), which
 * cancels it, never by evdns' timer (set later: name_servers.h); after a
 * freeze past both (SIGSTOP, a paused VM), the try's timer runs first in
 * the turn, hands evdns what waits in its socket (read_now()) and cancels
 * the request at once, keeping the attempt: its callback (the next turn)
 * then brings the answer evdns read in time (the cancel does nothing to a
 * request whose callback is pending), or DNS_ERR_CANCEL, a timeout, and
 * evdns' timer, due later in the same turn, finds no request to end. evdns
 * hands a SERVFAIL over as DNS_ERR_TIMEOUT, at once; so a timeout from
 * evdns for a try still running is a SERVFAIL, whenever within the try it
 * came. Before, the two were told apart by the time taken (a "timeout"
 * under 1 s was a SERVFAIL), and a server that answered SERVFAIL after
 * 1.5 s was refused as "timed out"; and a lone silent server, the gateway
 * frozen past evdns' timer during the last try, was refused as a SERVFAIL
 * (that timer ended the request while the try's end waited for a poll).
 *
 * Resolution delay (RFC 8305 section 3): once the A query has come back
 * with addresses, AAAA gets r->resolution_delay_ms more (the flight's
 * event, the deadline until then, is moved up), then it is abandoned and
 * the flight ends with the A answer (one that came in time while the
 * gateway was frozen is read first: on_flight_event()). A server or middlebox that drops AAAA
 * questions so costs the lookup 50 ms, not every try of the silent query
 * (about 4 s with a lone server). Not the other way round: an AAAA answer
 * without its A would leave a gateway without IPv6 routes nothing to
 * connect to, so A is waited for until the deadline. An abandoned query is
 * neither a timeout nor a failure: not counted against its server, and the
 * flight is stored as if it had been answered empty, for at most 30 s
 * (ONE_FAMILY_TTL_MS: an AAAA that was only slow, not dropped, is asked
 * again soon).
 *
 * Answer cache (dns_cache.c): at most CACHE_MAX names. Only flights that
 * came back complete are stored: both queries answered with addresses or
 * with "no such name / no data", or one with addresses and the other
 * abandoned (never a timeout, a server failure or a cancellation of
 * either); positive for min(answer TTL, 300 s) of the answers with
 * addresses (30 s with AAAA abandoned), negative for r->neg_ttl_ms. A flight started before a
 * reload is not stored after it (r->gen). */
#include "gate/resolve.h"
#include "gate/dns_cache.h"
#include "gate/name_servers.h"
#include "util/env.h"
#include "util/libevent_log.h"
#include "util/read_now.h"
#include "util/units.h"
#include "util/zalloc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
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

#define CACHE_MAX           4096   /* names */
#define CACHE_TTL_MAX_MS    300000 /* positive answers: at most 300 s */
#define CACHE_NEG_TTL_MS    5000   /* negative answers (NXDOMAIN, no data) */
#define RESOLUTION_DELAY_MS 50     /* RFC 8305 section 3: the wait for AAAA once A answered */
#define ONE_FAMILY_TTL_MS   30000  /* an answer without its abandoned AAAA: at most 30 s */
#define DEADLINE_SLACK_MS   1000   /* past the last try's end: see arm_deadline() */
#define TRY_END_POLLS       2      /* 1 ms put-offs of a try's end: see on_try_end() */
#define DEADLINE_POLLS      3      /* of a deadline, past TRY_END_POLLS: on_flight_event() */
#define FLIGHT_BUCKETS      1024   /* the table of names in flight; a power of two */

struct query;
struct flight;

struct attempt {
    struct query *q;         /* NULL once orphaned: the callback only frees */
    struct evdns_base *dns;  /* the base it was sent on */
    struct evdns_request *h; /* valid until the callback (but see the top) */
    size_t server;           /* its index in r->ns */
    unsigned long lost_seen; /* libevent_log_evdns_lost() when it was sent */
    bool ended;              /* cancelled by its try's end: DNS_ERR_CANCEL is a timeout */
    /* Among the uncancelled (orphan()), while on that list. */
    struct attempt *uprev, *unext;
    bool uncancelled;
};

/* Attempts orphaned without evdns_cancel_request(): evdns lost a callback
 * since they were sent, and theirs may be the one ("Out of memory in evdns"
 * at the top). Each leaves the list, freed, when its callback comes; one
 * whose callback was lost stays (64 bytes, held here, not leaked unseen).
 * The event loop's thread only, as the resolvers are. */
static struct attempt *uncancelled;

struct query {
    struct flight *f;
    int type;             /* Q_A or Q_AAAA */
    struct attempt *att;  /* the try in flight, NULL when none */
    struct event *try_ev; /* the end of that try (on_try_end()), pending with att */
    unsigned tries;       /* servers asked so far */
    unsigned late_polls;  /* the try's end put off for a poll (on_try_end()) */
    uint64_t try_end_ms;  /* monotonic_ms() when its try has had r->try_ms */
    int err;              /* RESOLVE_ERR_* or 0 */
    bool abandoned;       /* not answered within the resolution delay: no error */
    int ttl;              /* smallest TTL of its answers (s), -1 when none */
    size_t n;
    struct ipaddr a[RESOLVE_MAX_ADDRS];
};

/* A name being asked of the servers, and the requests waiting for it. */
struct flight {
    struct resolver *r;
    struct flight *hnext;        /* chain in r->flights; NULL when last or out */
    bool hashed;                 /* in r->flights: new lookups of its name join it */
    bool closed;                 /* ... unless a change of servers closed it to them */
    bool answering;              /* flight_finish() is calling its requests */
    unsigned gen;                /* r->gen when it started */
    struct resolve_req *waiters; /* in the order they came, through wprev/wnext */
    struct resolve_req *wlast;
    struct event *ev;     /* its deadline, resolution delay, or end known at once */
    uint64_t deadline_ms; /* monotonic_ms() of the deadline (arm_deadline()) */
    bool settling;        /* ev is the resolution delay (settle()) */
    bool moved;           /* a reload moved its queries: the deadline stays (flight_move()) */
    unsigned late_polls;  /* the deadline put off for an answer (on_flight_event()) */
    struct query q[NQ];
    char name[HOST_MAX + 1];
};

struct resolve_req {
    struct resolver *r; /* NULL once the resolver is gone */
    struct resolve_req *prev, *next;
    resolve_cb cb;
    void *arg;
    struct flight *f;                  /* the flight it waits for, or NULL */
    struct resolve_req *wprev, *wnext; /* among f's waiters */
    struct event *ev; /* without a flight: answers from the loop (on_req_event), in ev_mem */
    int err;          /* without a flight: the answer known at once */
    size_t n;
    struct ipaddr a[RESOLVE_MAX_ADDRS];
    /* The memory of <ev>, event_assign()ed: an answer known at once (a
     * static name, the cache, an IP literal) costs the request one
     * allocation, not two (event_new() and event_free() a malloc() and a
     * free() more, about 300 instructions a lookup with what they call). */
    max_align_t ev_mem[];
};

struct resolver {
    struct event_base *base;
    struct name_server *ns; /* the servers, in the configured order */
    size_t nns;
    struct name_servers_retired retired; /* replaced bases, see name_servers_retire() */
    size_t preferred;                    /* where lookups start: the last server that answered */
    struct dns_static *statics;          /* owned copies */
    size_t nstatics;
    struct resolve_req *live;
    struct flight *flights[FLIGHT_BUCKETS]; /* names in flight, by dns_name_hash() */
    size_t nflights;
    struct dns_cache cache; /* at most CACHE_MAX names; tests lower it */
    uint64_t neg_ttl_ms;    /* CACHE_NEG_TTL_MS; tests lower it */
    /* NAME_SERVER_TRY_MS: a try's time, and what a lookup's deadline counts;
     * tests lower it (never above evdns' timer, name_servers.h) */
    uint64_t try_ms;
    uint64_t resolution_delay_ms; /* RESOLUTION_DELAY_MS; tests change it */
    unsigned gen;                 /* bumped by every reload */
};

/* ---------------------------------------------------------------- cache */

/* Stores the outcome of <f> (its queries are done) when it is complete:
 * its <n> addresses <out>, or with none its error <err>. */
static void cache_store(const struct flight *f, const struct ipaddr *out, size_t n, int err)
{
    struct resolver *r = f->r;
    int ttl = -1;
    uint64_t cap_ms = CACHE_TTL_MAX_MS;

    if (f->gen != r->gen)
        return;
    for (int i = 0; i < NQ; i++) {
        const struct query *q = &f->q[i];
        if (q->abandoned) { /* not answered: nothing to store of it */
            cap_ms = ONE_FAMILY_TTL_MS;
            continue;
        }
        if (q->err != 0 && q->err != RESOLVE_ERR_NXDOMAIN && q->err != RESOLVE_ERR_NODATA)
            return; /* a timeout, failure or cancellation: never stored */
        if (q->n > 0 && (ttl < 0 || q->ttl < ttl))
            ttl = q->ttl;
    }
    if (n == 0) {
        struct dns_cache_entry *e =
            dns_cache_put(&r->cache, f->name, NULL, 0, monotonic_ms(), r->neg_ttl_ms);
        if (e != NULL)
            e->err = err; /* no such name, or no A/AAAA */
        return;
    }
    if (ttl <= 0)
        return;
    uint64_t ms = (uint64_t)ttl * 1000u;
    dns_cache_put(&r->cache, f->name, out, n, monotonic_ms(), ms < cap_ms ? ms : cap_ms);
}

/* --------------------------------------------------------------- config */

static void free_statics(struct dns_static *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(s[i].name);
    free(s);
}

static int copy_statics(const struct dns_cfg *cfg, struct dns_static **st)
{
    *st = NULL;
    if (cfg->nstatics > 0 && (*st = calloc(cfg->nstatics, sizeof(**st))) == NULL)
        goto err;
    for (size_t i = 0; i < cfg->nstatics; i++) {
        (*st)[i] = cfg->statics[i];
        if (((*st)[i].name = strdup(cfg->statics[i].name)) == NULL)
            goto err;
    }
    return 0;
err:
    free_statics(*st, cfg->nstatics);
    *st = NULL;
    return -1;
}

/* evdns' own messages: its warnings, in the gateway's format, and the
 * one below warning level that says a server was marked down for a reason
 * of the kernel's ("Nameserver ADDR has failed: REASON"): ICMP port
 * unreachable on its connected socket ("Connection refused", nothing
 * listens there), a send refused ("Network is unreachable"). evdns (2.1)
 * ends no query for it and gives the query no code of its own: each try
 * waits out its time and the lookup says "timed out", so this line is the
 * only place the refusal is told. It comes once each time the server goes
 * down (evdns logs nothing for a server already down); a timeout is told
 * by the queries' own "timed out", not here. Nor is an answer evdns takes
 * for the server's failure, REFUSED or NOTIMP ("Bad response 5
 * (refused)"): its query ends at once and its lookup says which, and the
 * server is back up at its next answer, so a line for it would be untrue
 * and, for an agent that asks in turn for a name the server refuses and
 * one it answers, one line per two requests. */
static bool told_by_its_queries(const char *reason)
{
    static const char bad_answer[] = "Bad response ";
    return strcmp(reason, "request timed out.") == 0 ||
           strncmp(reason, bad_answer, sizeof(bad_answer) - 1) == 0;
}

static void evdns_log(int is_warning, const char *msg)
{
    static const char head[] = "Nameserver ", failed[] = " has failed: ";
    const char *f = strstr(msg, failed);

    if (is_warning) {
        fprintf(stderr, "sluice: dns: %s\n", msg);
    } else if (strncmp(msg, head, sizeof(head) - 1) == 0 && f != NULL &&
               !told_by_its_queries(f + sizeof(failed) - 1)) {
        int addr_len = (int)(f - msg - (sizeof(head) - 1));
        fprintf(stderr,
                "sluice: dns: server %.*s: %s: marked down until it answers; its queries wait "
                "out their tries all the same (\"timed out\")\n",
                addr_len, msg + sizeof(head) - 1, f + sizeof(failed) - 1);
    }
}

struct resolver *resolver_new(struct event_base *base, const struct dns_cfg *cfg, char **err)
{
    struct resolver *r = calloc(1, sizeof(*r));

    *err = NULL;
    evdns_set_log_fn(evdns_log);
    if (r == NULL)
        goto nomem;
    r->base = base;
    dns_cache_init(&r->cache, CACHE_MAX);
    r->neg_ttl_ms = CACHE_NEG_TTL_MS;
    r->try_ms = NAME_SERVER_TRY_MS;
    /* Test-only (README): a delay long enough for a test to stop the
     * gateway within it. */
    r->resolution_delay_ms =
        env_number("SLUICE_TEST_RESOLUTION_DELAY_MS", 10000, RESOLUTION_DELAY_MS);
    if (name_servers_check(cfg, err) < 0)
        goto fail;
    if (copy_statics(cfg, &r->statics) < 0)
        goto nomem;
    r->nstatics = cfg->nstatics;
    if (name_servers_open(base, cfg, RESOLV_CONF, &r->ns, &r->nns, err) < 0)
        goto fail;
    return r;
nomem:
    *err = strdup("dns: out of memory");
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

static void link_req(struct resolver *r, struct resolve_req *req)
{
    req->r = r;
    req->next = r->live;
    if (r->live != NULL)
        r->live->prev = req;
    r->live = req;
}

/* An answer known at once (IP literal, static map, cache, a failure). */
static void on_req_event(evutil_socket_t fd, short what, void *arg)
{
    struct resolve_req *req = arg;

    (void)fd;
    (void)what;
    unlink_req(req);
    req->cb(req->err, req->n > 0 ? req->a : NULL, req->n, req->arg);
    free(req); /* its event has run: neither pending nor active */
}

/* ---------------------------------------------------------------- flights */

static struct flight **flight_bucket(struct resolver *r, const char *name)
{
    return &r->flights[dns_name_hash(name) & (FLIGHT_BUCKETS - 1)];
}

static struct flight *flight_find(struct resolver *r, const char *name)
{
    for (struct flight *f = *flight_bucket(r, name); f != NULL; f = f->hnext)
        if (!f->closed && strcmp(f->name, name) == 0)
            return f;
    return NULL;
}

/* Takes <f> out of the table: lookups from now on start a flight of their
 * own. */
static void flight_unhash(struct flight *f)
{
    if (!f->hashed)
        return;
    struct flight **pp = flight_bucket(f->r, f->name);
    while (*pp != f)
        pp = &(*pp)->hnext;
    *pp = f->hnext;
    f->hnext = NULL;
    f->hashed = false;
    f->r->nflights--;
}

static void waiter_add(struct flight *f, struct resolve_req *req)
{
    req->f = f;
    req->wnext = NULL;
    req->wprev = f->wlast;
    if (f->wlast != NULL)
        f->wlast->wnext = req;
    else
        f->waiters = req;
    f->wlast = req;
}

static void waiter_remove(struct resolve_req *req)
{
    struct flight *f = req->f;

    if (req->wprev != NULL)
        req->wprev->wnext = req->wnext;
    else
        f->waiters = req->wnext;
    if (req->wnext != NULL)
        req->wnext->wprev = req->wprev;
    else
        f->wlast = req->wprev;
    req->wprev = req->wnext = NULL;
    req->f = NULL;
}

/* Frees the events of <f> (flight_start() makes them all, or none). */
static void flight_events_free(struct flight *f)
{
    for (int i = 0; i < NQ; i++)
        if (f->q[i].try_ev != NULL)
            event_free(f->q[i].try_ev);
    if (f->ev != NULL)
        event_free(f->ev);
}

static bool queries_running(const struct flight *f)
{
    return f->q[Q_A].att != NULL || f->q[Q_AAAA].att != NULL;
}

/* The error for a flight that found no address: a timeout says more than
 * "no AAAA", a truncated answer more than the empty one of the other type
 * (a name with many A records and no AAAA), "no such name" more than a
 * failure, and a failure the server named (SERVFAIL, REFUSED, NOTIMP,
 * FORMERR) more than a bare one. */
static int flight_error(const struct flight *f)
{
    int a = f->q[Q_A].err, b = f->q[Q_AAAA].err;

    if (a == RESOLVE_ERR_TIMEOUT || b == RESOLVE_ERR_TIMEOUT)
        return RESOLVE_ERR_TIMEOUT;
    if (a == RESOLVE_ERR_NO_SERVERS || b == RESOLVE_ERR_NO_SERVERS)
        return RESOLVE_ERR_NO_SERVERS;
    if (a == RESOLVE_ERR_TRUNCATED || b == RESOLVE_ERR_TRUNCATED)
        return RESOLVE_ERR_TRUNCATED;
    if (a == RESOLVE_ERR_NXDOMAIN || b == RESOLVE_ERR_NXDOMAIN)
        return RESOLVE_ERR_NXDOMAIN;
    if ((a == 0 || a == RESOLVE_ERR_NODATA) && (b == 0 || b == RESOLVE_ERR_NODATA))
        return RESOLVE_ERR_NODATA;
    static const int told[] = {RESOLVE_ERR_SERVFAIL, RESOLVE_ERR_REFUSED, RESOLVE_ERR_NOTIMP,
                               RESOLVE_ERR_FORMERR};
    for (size_t i = 0; i < sizeof(told) / sizeof(told[0]); i++)
        if (a == told[i] || b == told[i])
            return told[i];
    return RESOLVE_ERR_FAILED;
}

/* Both queries of <f> are done: merge, store, and answer every request
 * waiting for it, in the order they came, then free <f>. A callback may
 * cancel another waiting request (it is then not called), or start a new
 * lookup of the same name (a new flight: this one is out of the table). */
static void flight_finish(struct flight *f)
{
    struct ipaddr out[RESOLVE_MAX_ADDRS];
    size_t n = 0;

    for (int i = 0; i < NQ; i++)
        for (size_t j = 0; j < f->q[i].n && n < RESOLVE_MAX_ADDRS; j++)
            out[n++] = f->q[i].a[j];
    int err = n > 0 ? 0 : flight_error(f);
    cache_store(f, out, n, err);
    flight_unhash(f);
    f->answering = true;
    while (f->waiters != NULL) {
        struct resolve_req *req = f->waiters;
        waiter_remove(req);
        unlink_req(req);
        req->cb(err, n > 0 ? out : NULL, n, req->arg);
        free(req);
    }
    flight_events_free(f);
    free(f);
}

/* Tries per query: each server once, at least twice, at most 4 times. */
static unsigned max_tries(const struct resolver *r)
{
    return r->nns < 2 ? 2 : r->nns > 4 ? 4 : (unsigned)r->nns;
}

static void orphan(struct query *q);

/* A flight that nobody waits for any more: its tries are cancelled. */
static void flight_free(struct flight *f)
{
    flight_unhash(f);
    for (int i = 0; i < NQ; i++)
        orphan(&f->q[i]);
    flight_events_free(f);
    free(f);
}

/* True when an answer for a query of <f> that still runs may have come:
 * its try's end is being put off for one (on_try_end()), or its server's
 * socket holds a datagram, which evdns is then handed (read_now()). */
static bool answer_may_wait(const struct flight *f)
{
    bool may = false;
    for (int i = 0; i < NQ; i++) {
        const struct query *q = &f->q[i];
        if (q->att != NULL)
            may = q->late_polls > 0 || read_now(f->r->base, f->r->ns[q->att->server].fd) || may;
    }
    return may;
}

/* Milliseconds until the latest end of a try of <f> that has not had its
 * time, or 0 when none: a freeze (SIGSTOP, a paused VM) that ate into the
 * lookup's deadline sent a try late, and the deadline, counted from the
 * flight's start, would cut it short. Not after a reload moved the
 * queries: their new tries keep the deadline (README, Resolve). */
static uint64_t tries_short_of_time(const struct flight *f)
{
    uint64_t now = monotonic_ms(), end = 0;
    if (f->settling || f->moved)
        return 0;
    for (int i = 0; i < NQ; i++) {
        const struct query *q = &f->q[i];
        if (q->att != NULL && q->late_polls == 0 && q->try_end_ms > end)
            end = q->try_end_ms;
    }
    return end > now ? end - now : 0;
}

/* The flight's event: an end known at once (activated), the end of its
 * resolution delay (settling: the query still running is abandoned), or
 * its deadline (a timer). Each try's own timer (on_try_end()) ends the
 * tries before the deadline, unless a reload moved the queries to new
 * servers, where their tries start again: a try still running then is
 * cancelled here, counted as a timeout, and its server taken as down.
 * (A try whose callback evdns lost for want of memory is not cancelled:
 * see "Out of memory in evdns" at the top.) */
static void on_flight_event(evutil_socket_t fd, short what, void *arg)
{
    struct flight *f = arg;

    (void)fd;
    (void)what;
    /* A try the deadline would cut short is left to its own end (its
     * timer, on_try_end(), ends it, or its answer): the lookup stays
     * bounded, by its tries. Before, a freeze of 3.6 s over a lone
     * server's first SERVFAIL (1.5 s after the question) sent the second
     * try 3.7 s after the first, and the deadline (5 s) ended it before its
     * SERVFAIL came: "timed out". */
    uint64_t short_ms = tries_short_of_time(f);
    if (short_ms > 0) {
        struct timeval tv = timeval_of_ms(short_ms);
        if (event_add(f->ev, &tv) == 0)
            return;
    }
    /* A deadline that fell due while the gateway was frozen (see
     * on_try_end()) waits, DEADLINE_POLLS times 1 ms at most, while an
     * answer may be on its way to a query still running: one evdns was
     * handed in this turn (its callback is deferred), one still in the
     * socket. Before, a freeze of 5 s or more after the question failed
     * the lookup, "timed out", with both answers in. So does the end of
     * the resolution delay: an AAAA answer that came within it while the
     * gateway was frozen was abandoned, and a name whose A addresses the
     * guard refuses, its AAAA one allowed, was refused. */
    if (f->late_polls < DEADLINE_POLLS && answer_may_wait(f)) {
        struct timeval tv = timeval_of_ms(1);
        f->late_polls++;
        if (event_add(f->ev, &tv) == 0)
            return;
    }
    /* The AAAA query first: should it wait in evdns' queue, cancelling the
     * A query first would send it, to be cancelled at once. */
    for (int i = NQ - 1; i >= 0; i--) {
        struct query *q = &f->q[i];
        if (q->att != NULL && f->settling) {
            orphan(q);
            q->abandoned = true;
        } else if (q->att != NULL) {
            name_server_count(&f->r->ns[q->att->server].st, DNS_ERR_TIMEOUT);
            orphan(q);
            q->err = RESOLVE_ERR_TIMEOUT;
        }
    }
    flight_finish(f);
}

/* Every flight ends by its deadline: all its tries, one after the other,
 * plus DEADLINE_SLACK_MS ("timeouts on every wait", even should evdns never
 * call back). A reload that moves its queries to new servers does not move
 * the deadline. */
static void arm_deadline(struct resolver *r, struct flight *f)
{
    uint64_t ms = (uint64_t)max_tries(r) * r->try_ms + DEADLINE_SLACK_MS;
    struct timeval tv = timeval_of_ms(ms);
    f->deadline_ms = monotonic_ms() + ms;
    event_add(f->ev, &tv);
}

/* <f>'s A query came back with addresses while AAAA still runs: that one
 * has r->resolution_delay_ms more (RFC 8305 section 3), then <f> ends
 * without it (on_flight_event()). A deadline nearer than that stays as it
 * is, and ends the other query as a timeout. */
static void settle(struct resolver *r, struct flight *f)
{
    uint64_t now = monotonic_ms();

    if (f->settling || f->deadline_ms <= now || f->deadline_ms - now <= r->resolution_delay_ms)
        return;
    struct timeval tv = timeval_of_ms(r->resolution_delay_ms);
    f->settling = true;
    event_add(f->ev, &tv); /* replaces the deadline */
}

/* Ends <f> with what its queries hold, from the event loop, after the
 * current callback (its event exists since flight_start: this cannot
 * fail). */
static void finish_later(struct flight *f)
{
    event_active(f->ev, EV_TIMEOUT, 1);
}

static int map_err(int result)
{
    switch (result) {
    case DNS_ERR_NOTEXIST:
        return RESOLVE_ERR_NXDOMAIN;
    case DNS_ERR_NONE:
    case DNS_ERR_NODATA:
        return RESOLVE_ERR_NODATA;
    case DNS_ERR_TIMEOUT:
        return RESOLVE_ERR_TIMEOUT;
    case DNS_ERR_TRUNCATED:
        return RESOLVE_ERR_TRUNCATED;
    case DNS_ERR_SERVERFAILED:
        return RESOLVE_ERR_SERVFAIL;
    case DNS_ERR_REFUSED:
        return RESOLVE_ERR_REFUSED;
    case DNS_ERR_NOTIMPL:
        return RESOLVE_ERR_NOTIMP;
    case DNS_ERR_FORMAT:
        return RESOLVE_ERR_FORMERR;
    default:
        return RESOLVE_ERR_FAILED;
    }
}

/* True for what another server may answer better: silence, a server
 * failure, a refusal, a truncated or malformed answer. */
static bool worth_another_server(int result)
{
    switch (result) {
    case DNS_ERR_TIMEOUT:
    case DNS_ERR_SERVERFAILED:
    case DNS_ERR_REFUSED:
    case DNS_ERR_NOTIMPL:
    case DNS_ERR_FORMAT:
    case DNS_ERR_TRUNCATED:
    case DNS_ERR_UNKNOWN:
        return true;
    default:
        return false;
    }
}

static void on_answer(int result, char type, int count, int ttl, void *addresses, void *arg);

/* Sends query <q> of <f> to server <server>, its try timed from now.
 * Returns 0, or -1 (nothing in flight then). */
static int send_query(struct resolver *r, struct flight *f, struct query *q, size_t server)
{
    struct attempt *at = calloc(1, sizeof(*at));
    struct timeval tv = timeval_of_ms(r->try_ms);

    if (at == NULL)
        return -1;
    at->q = q;
    at->server = server;
    at->dns = r->ns[server].dns;
    at->lost_seen = libevent_log_evdns_lost();
    if (q->type == Q_A)
        at->h = evdns_base_resolve_ipv4(at->dns, f->name, DNS_QUERY_NO_SEARCH, on_answer, at);
    else
        at->h = evdns_base_resolve_ipv6(at->dns, f->name, DNS_QUERY_NO_SEARCH, on_answer, at);
    if (at->h == NULL) {
        free(at);
        return -1;
    }
    if (event_add(q->try_ev, &tv) < 0) {
        /* untimed, it would wait for evdns' timer and be told a SERVFAIL */
        at->q = NULL; /* its callback (DNS_ERR_CANCEL) only frees it */
        evdns_cancel_request(at->dns, at->h);
        return -1;
    }
    q->att = at;
    q->tries++;
    q->late_polls = 0;
    q->try_end_ms = monotonic_ms() + r->try_ms;
    return 0;
}

/* Stops query <q>'s try in flight: its callback still runs, and only frees
 * the attempt. When evdns has lost a callback since the try was sent, its
 * handle may be freed: the try is left to end in evdns (its answer, evdns'
 * timer 1 s after the try's, or its base's free), not cancelled. */
static void orphan(struct query *q)
{
    struct attempt *at = q->att;

    if (at == NULL)
        return;
    q->att = NULL;
    at->q = NULL;
    event_del(q->try_ev);
    if (at->lost_seen == libevent_log_evdns_lost()) {
        evdns_cancel_request(at->dns, at->h);
        return;
    }
    at->h = NULL;
    at->uncancelled = true;
    at->uprev = NULL;
    at->unext = uncancelled;
    if (uncancelled != NULL)
        uncancelled->uprev = at;
    uncancelled = at;
}

static void take_addresses(struct query *q, char type, int count, int ttl, const void *addresses)
{
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

/* Try <q> on <server> ended with <result> (DNS_ERR_*) and, for an answer,
 * the <count> addresses of <type> at <addresses>: counted against the
 * server, then asked of the next server, or the query is done. */
static void try_ended(struct query *q, size_t server, int result, char type, int count, int ttl,
                      const void *addresses)
{
    struct flight *f = q->f;
    struct resolver *r = f->r;

    name_server_count(&r->ns[server].st, result);
    if (worth_another_server(result)) {
        /* A silent or failing server stops being where lookups start. */
        if ((result == DNS_ERR_TIMEOUT || result == DNS_ERR_SERVERFAILED) && r->preferred == server)
            r->preferred = (server + 1) % r->nns;
        if (q->tries < max_tries(r) && send_query(r, f, q, (server + 1) % r->nns) == 0)
            return;
    } else if (result != DNS_ERR_CANCEL && result != DNS_ERR_SHUTDOWN) {
        r->preferred = server; /* it answered */
    }
    if (result == DNS_ERR_NONE && count > 0 && addresses != NULL)
        take_addresses(q, type, count, ttl, addresses);
    q->err = q->n > 0 ? 0 : map_err(result);
    if (!queries_running(f))
        flight_finish(f);
    else if (q->n > 0 && q == &f->q[Q_A])
        settle(r, f);
}

static void on_answer(int result, char type, int count, int ttl, void *addresses, void *arg)
{
    struct attempt *at = arg;
    struct query *q = at->q;
    size_t server = at->server;

    if (at->uncancelled) {
        if (at->uprev != NULL)
            at->uprev->unext = at->unext;
        else
            uncancelled = at->unext;
        if (at->unext != NULL)
            at->unext->uprev = at->uprev;
    }
    bool ended = at->ended;
    free(at); /* evdns frees its handle after this callback */
    if (q == NULL)
        return; /* cancelled, ended by its timer, or moved to other servers */
    q->att = NULL;
    event_del(q->try_ev);
    /* evdns answers a SERVFAIL by "letting the request time out" there and
     * then (attempts:1). Its own timer comes after the try's, which cancels
     * the try (on_try_end()): a timeout for a try still running is such a
     * server's answer, and the agent is not told its lookup timed out. */
    if (result == DNS_ERR_TIMEOUT)
        result = DNS_ERR_SERVERFAILED;
    else if (result == DNS_ERR_CANCEL && ended)
        result = DNS_ERR_TIMEOUT; /* its try's end cancelled it: no answer had come */
    try_ended(q, server, result, type, count, ttl, addresses);
}

/* The try of <arg> (a struct query) had r->try_ms and no answer: it is
 * cancelled (its callback only frees it) and counted a timeout. */
static void on_try_end(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct query *q = arg;
    if (q->att == NULL)
        return; /* it is not pending without a try: cannot happen */
    /* The answer may wait in the socket unread: after the gateway was
     * frozen past the try's end (SIGSTOP, a paused VM, a long stall of its
     * loop), epoll_wait() comes back with EINTR and no event, and this timer
     * runs before evdns' read. Its socket is evdns' own, not to be peeked
     * at, so the end is put off 1 ms, TRY_END_POLLS times, for the loop to
     * poll it and evdns to hand its answer over (a deferred callback, the
     * turn after the read). Before, the try was cancelled, the answer
     * thrown away, the server counted a timeout and asked again. */
    size_t server = q->att->server;
    if (q->late_polls < TRY_END_POLLS) {
        struct timeval tv = timeval_of_ms(1);
        /* Frozen past evdns' own timer for the try too, that timer runs
         * in this turn after this one (it fell due later) and would end
         * the request before evdns' read: evdns is handed what waits in
         * its socket now, so that the answer ends the request (its
         * callback deferred as always) and removes that timer. A request
         * still unanswered then is cancelled here, its attempt kept: left
         * to evdns' timer, it came back DNS_ERR_TIMEOUT, taken for a
         * SERVFAIL (on_answer()). One whose answer evdns read earlier in
         * this turn has its callback pending: the cancel does nothing. */
        if (q->late_polls == 0) {
            struct attempt *at = q->att;
            (void)read_now(q->f->r->base, q->f->r->ns[server].fd);
            if (q->att == at && at->lost_seen == libevent_log_evdns_lost()) {
                at->ended = true;
                evdns_cancel_request(at->dns, at->h);
            }
        }
        q->late_polls++;
        if (event_add(q->try_ev, &tv) == 0)
            return;
    }
    orphan(q);
    try_ended(q, server, DNS_ERR_TIMEOUT, 0, 0, 0, NULL);
}

/* Sends both queries of <f> to the preferred server and arms its deadline;
 * a query that cannot start fails. Returns true when at least one is in
 * flight. */
static bool send_queries(struct resolver *r, struct flight *f)
{
    for (int i = 0; i < NQ; i++) {
        struct query *q = &f->q[i];
        q->tries = 0;
        if (send_query(r, f, q, r->preferred) < 0)
            q->err = RESOLVE_ERR_FAILED;
    }
    if (!queries_running(f))
        return false;
    arm_deadline(r, f);
    return true;
}

/* A new flight for <name> (<len> bytes, at most HOST_MAX), in the table
 * and asking the servers (or, when no query could start, failing from the
 * loop). NULL when out of memory. */
static struct flight *flight_start(struct resolver *r, const char *name, size_t len)
{
    struct flight *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return NULL;
    f->ev = event_new(r->base, -1, 0, on_flight_event, f);
    for (int i = 0; i < NQ; i++) {
        f->q[i].f = f;
        f->q[i].type = i;
        f->q[i].ttl = -1;
        f->q[i].try_ev = evtimer_new(r->base, on_try_end, &f->q[i]);
    }
    if (f->ev == NULL || f->q[Q_A].try_ev == NULL || f->q[Q_AAAA].try_ev == NULL) {
        flight_events_free(f);
        free(f);
        return NULL;
    }
    f->r = r;
    f->gen = r->gen;
    memcpy(f->name, name, len + 1);
    struct flight **bucket = flight_bucket(r, name);
    f->hnext = *bucket;
    *bucket = f;
    f->hashed = true;
    r->nflights++;
    if (!send_queries(r, f))
        finish_later(f);
    return f;
}

/* Asks the queries of <f> still running again of the (new) servers, from
 * the preferred one, each server once more. With no server, or none that
 * can be asked, <f> ends from the loop. Its deadline stays. */
static void flight_move(struct resolver *r, struct flight *f)
{
    if (!queries_running(f))
        return;
    for (int i = 0; i < NQ; i++) {
        struct query *q = &f->q[i];
        if (q->att == NULL)
            continue;
        orphan(q);
        q->tries = 0;
        f->moved = true;
        if (r->nns == 0)
            q->err = RESOLVE_ERR_NO_SERVERS;
        else if (send_query(r, f, q, r->preferred) < 0)
            q->err = RESOLVE_ERR_FAILED;
    }
    if (!queries_running(f))
        finish_later(f);
}

/* The addresses dns.static pins <name> to, into <out>: a binary search of
 * the map, sorted as the loader sorts it (before, a scan of all of it at
 * every lookup, and again for resolver_asks_servers()). */
static size_t static_answers(const struct resolver *r, const char *name, struct ipaddr *out)
{
    const struct dns_static *s = dns_static_find(r->statics, r->nstatics, name);
    const struct dns_static *end = r->statics + r->nstatics;
    size_t n = 0;
    for (; s != NULL && s < end && n < RESOLVE_MAX_ADDRS && strcmp(s->name, name) == 0; s++)
        out[n++] = s->addr;
    return n;
}

struct resolve_req *resolver_lookup(struct resolver *r, const char *name, resolve_cb cb, void *arg)
{
    struct resolve_req *req = zalloc(sizeof(*req) + event_get_struct_event_size());
    size_t len = strlen(name);
    const struct dns_cache_entry *ce;

    if (req == NULL)
        return NULL;
    req->cb = cb;
    req->arg = arg;
    enum ip_literal_kind lit = ip_literal_parse(name, len, &req->a[0]);
    if (lit == IP_LITERAL_V4 || lit == IP_LITERAL_V6) {
        req->n = 1;
    } else if (lit == IP_LITERAL_INVALID || len == 0 || len > HOST_MAX) {
        req->err = RESOLVE_ERR_FAILED;
    } else if ((req->n = static_answers(r, name, req->a)) > 0) {
        /* answered from dns.static (never cached) */
    } else if ((ce = dns_cache_find(&r->cache, name, monotonic_ms())) != NULL) {
        /* answered from the cache, on the next turn like a static answer */
        req->n = ce->n;
        memcpy(req->a, ce->a, ce->n * sizeof(ce->a[0]));
        if (ce->n == 0)
            req->err = ce->err != 0 ? ce->err : RESOLVE_ERR_NXDOMAIN;
    } else if (r->nns == 0) {
        req->err = RESOLVE_ERR_NO_SERVERS;
    } else {
        /* Asked of the servers: join the flight for this name, or start it. */
        struct flight *f = flight_find(r, name);
        if (f == NULL && (f = flight_start(r, name, len)) == NULL) {
            free(req);
            return NULL;
        }
        waiter_add(f, req);
    }
    if (req->f == NULL) {
        struct event *ev = (struct event *)(void *)req->ev_mem;
        if (event_assign(ev, r->base, -1, 0, on_req_event, req) < 0) {
            free(req);
            return NULL;
        }
        req->ev = ev;
        event_active(req->ev, EV_TIMEOUT, 1);
    }
    link_req(r, req);
    return req;
}

bool resolver_asks_servers(struct resolver *r, const char *name)
{
    size_t len = strlen(name);
    struct ipaddr a[RESOLVE_MAX_ADDRS];
    if (len == 0 || len > HOST_MAX || ip_literal_parse(name, len, &a[0]) != IP_LITERAL_NONE)
        return false; /* answered as itself, or failed, without a query */
    if (static_answers(r, name, a) > 0 || dns_cache_find(&r->cache, name, monotonic_ms()) != NULL)
        return false;
    return r->nns > 0 && flight_find(r, name) == NULL; /* a flight asks once for all */
}

void resolve_cancel(struct resolve_req *req)
{
    if (req == NULL)
        return;
    unlink_req(req);
    struct flight *f = req->f;
    if (f != NULL) {
        waiter_remove(req);
        if (f->waiters == NULL && !f->answering)
            flight_free(f);
    } else {
        event_del(req->ev); /* active, not run yet */
    }
    free(req);
}

int resolver_reload(struct resolver *r, const struct dns_cfg *cfg)
{
    struct dns_static *st;
    char *err = NULL;
    struct name_server *ns = r->ns;
    size_t nns = r->nns;

    /* The servers are opened anew when they changed: in dns.servers, or in
     * resolv.conf when the policy names none (re-read at every reload). */
    if (name_servers_check(cfg, &err) < 0 ||
        (!name_servers_unchanged(r->base, cfg, RESOLV_CONF, r->ns, r->nns) &&
         name_servers_open(r->base, cfg, RESOLV_CONF, &ns, &nns, &err) < 0)) {
        fprintf(stderr, "sluice: %s\n", err != NULL ? err : "dns: invalid server");
        free(err);
        return -1;
    }
    if (copy_statics(cfg, &st) < 0) {
        if (ns != r->ns)
            name_servers_free(ns, nns);
        return -1;
    }
    if (ns != r->ns) {
        /* Queries in flight go to the new servers (or, when there are
         * none, fail on the next turn); then the old bases go. */
        struct name_server *old = r->ns;
        size_t nold = r->nns;
        r->ns = ns;
        r->nns = nns;
        r->preferred = name_servers_same(old, nold, r->preferred, ns, nns);
        /* sluice_dns_responses_total is a counter: a server listed again
         * goes on from its counts (before, adding a second server set the
         * first's back to 0) */
        name_servers_keep_counts(old, nold, ns, nns);
        /* The flights go on for the requests already waiting on them, but
         * no later lookup joins them: one whose A the old servers already
         * answered must not answer a lookup made after the change. */
        for (size_t b = 0; b < FLIGHT_BUCKETS; b++)
            for (struct flight *f = r->flights[b]; f != NULL; f = f->hnext) {
                flight_move(r, f);
                f->closed = true;
            }
        name_servers_retire(&r->retired, old, nold);
    }
    /* The servers (or what they say) may have changed: forget every answer,
     * and those still in flight are not stored when they come. */
    dns_cache_clear(&r->cache);
    r->gen++;
    free_statics(r->statics, r->nstatics);
    r->statics = st;
    r->nstatics = cfg->nstatics;
    return 0;
}

size_t resolver_server_stats(const struct resolver *r, struct resolve_server_stats *out, size_t cap)
{
    size_t n = r->nns < cap ? r->nns : cap;
    for (size_t i = 0; i < n; i++)
        out[i] = r->ns[i].st;
    return n;
}

void resolver_free(struct resolver *r)
{
    if (r == NULL)
        return;
    while (r->live != NULL)
        resolve_cancel(r->live); /* the callbacks of their tries only free those */
    name_servers_free(r->ns, r->nns);
    name_servers_retired_free(&r->retired);
    dns_cache_clear(&r->cache);
    free_statics(r->statics, r->nstatics);
    free(r);
}
