/* metrics: Prometheus counters (see metrics.h). */
#include "watch/metrics.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "policy/decision.h"
#include "policy/lint.h"
#include "util/pos_index.h"
#include "util/units.h"
#include "util/zalloc.h"
#include "watch/agent_hash.h"

#define NTIERS    5 /* none, 0..3 */
#define NVERDICTS 3

struct agent_counts {
    char *id;
    uint64_t req[NTIERS][NVERDICTS][REASON_COUNT];
    uint64_t up, down;
    uint64_t hash; /* agent_hash() of the id (watch/agent_hash.h) */
};

struct grant_gauge {
    char *rule, *host, *owner;
    int64_t ends_at; /* unix seconds: the day after the last valid one, 00:00 UTC */
};

/* The grant gauges of a policy, as of a day. */
struct grant_table {
    struct grant_gauge *grants;
    size_t ngrants;
    int64_t expiring, expired;
};

struct metrics {
    struct agent_counts *agents;
    size_t nagents, cap;
    struct agent_counts other; /* over METRICS_AGENTS_MAX, or no agent */
    uint64_t alerts[ALERT_KIND_COUNT];
    struct grant_table gt;   /* shown */
    struct grant_table next; /* metrics_policy_prepare()'s, until committed or abandoned */
    metrics_gauges_fn gauges;
    metrics_extra_fn extra;
    void *garg;
    struct pos_index agent_index;
    uint64_t agent_probes; /* agents compared by agent_of(), for tests */
};

struct metrics *metrics_new(void)
{
    struct metrics *m = calloc(1, sizeof(*m));
    if (m != NULL)
        m->other.id = NULL;
    return m;
}

static void grants_clear(struct grant_table *t)
{
    for (size_t i = 0; i < t->ngrants; i++) {
        free(t->grants[i].rule);
        free(t->grants[i].host);
        free(t->grants[i].owner);
    }
    free(t->grants);
    *t = (struct grant_table){0};
}

void metrics_free(struct metrics *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->nagents; i++)
        free(m->agents[i].id);
    free(m->agents);
    pos_index_free(&m->agent_index);
    grants_clear(&m->gt);
    grants_clear(&m->next);
    free(m);
}

void metrics_set_gauges(struct metrics *m, metrics_gauges_fn fn, metrics_extra_fn extra, void *arg)
{
    m->gauges = fn;
    m->extra = extra;
    m->garg = arg;
}

/* Fills the empty <t> with the grants of <p> at <now>. Returns 0, or -1
 * when out of memory (<t> then empty). */
static int grants_fill(struct grant_table *t, const struct policy *p, int64_t now)
{
    int32_t today = day_of((time_t)now);
    int warn = lint_warn_days(p);
    if (p->nrules >= SIZE_MAX / sizeof(*t->grants) ||
        (t->grants = zalloc((p->nrules > 0 ? p->nrules : 1) * sizeof(*t->grants))) == NULL)
        return -1;
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        if (!r->has_expires)
            continue;
        int32_t left = lint_days_left(r, today);
        if (left < 0)
            t->expired++;
        else if (left <= warn)
            t->expiring++;
        char name[32];
        snprintf(name, sizeof(name), "rules[%zu]", r->index);
        struct grant_gauge *g = &t->grants[t->ngrants++]; /* freed with the table if cut */
        g->rule = zalloc_text(name);
        g->host = zalloc_text(r->pattern);
        g->owner = zalloc_text(r->owner != NULL ? r->owner : "");
        g->ends_at = ((int64_t)r->expires + 1) * 86400;
        if (g->rule == NULL || g->host == NULL || g->owner == NULL) {
            grants_clear(t);
            return -1;
        }
    }
    return 0;
}

int metrics_policy_prepare(struct metrics *m, const struct policy *p, int64_t now)
{
    grants_clear(&m->next); /* a prepare never ended (none should be) */
    return grants_fill(&m->next, p, now);
}

void metrics_policy_commit(struct metrics *m)
{
    grants_clear(&m->gt);
    m->gt = m->next;
    m->next = (struct grant_table){0};
}

void metrics_policy_abandon(struct metrics *m)
{
    grants_clear(&m->next);
}

int metrics_set_policy(struct metrics *m, const struct policy *p, int64_t now)
{
    if (metrics_policy_prepare(m, p, now) < 0)
        return -1;
    metrics_policy_commit(m);
    return 0;
}

/* An agent's counters are found through a hash index of their places in
 * m->agents, keyed by agent_hash() of the id, for <ev>'s agent the hash it
 * carries (a linear search compared every event's agent with every agent
 * counted, up to 4096, and every event of an agent past them with all
 * 4096). Agents are never dropped, so places never move. */
static struct agent_counts *agent_of(struct metrics *m, const struct egress_event *ev)
{
    const char *id = ev->agent;
    if (id == NULL)
        return &m->other;
    uint64_t h = agent_hash_of_event(ev);
    size_t cursor = POS_INDEX_START;
    for (size_t p; (p = pos_index_next(&m->agent_index, h, &cursor)) != 0; m->agent_probes++)
        if (m->agents[p - 1].hash == h && strcmp(m->agents[p - 1].id, id) == 0) {
            m->agent_probes++;
            return &m->agents[p - 1];
        }
    if (m->nagents >= METRICS_AGENTS_MAX)
        return &m->other;
    if (m->nagents == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 8;
        struct agent_counts *na = realloc(m->agents, nc * sizeof(*na));
        if (na == NULL)
            return &m->other;
        m->agents = na;
        m->cap = nc;
    }
    int r = pos_index_reserve(&m->agent_index, m->nagents + 1);
    if (r < 0)
        return &m->other;
    if (r > 0)
        for (size_t i = 0; i < m->nagents; i++)
            pos_index_add(&m->agent_index, m->agents[i].hash, i);
    struct agent_counts *a = &m->agents[m->nagents];
    memset(a, 0, sizeof(*a));
    if ((a->id = strdup(id)) == NULL)
        return &m->other;
    a->hash = h;
    pos_index_add(&m->agent_index, h, m->nagents);
    m->nagents++;
    return a;
}

void metrics_on_event(const struct egress_event *ev, void *arg)
{
    struct metrics *m = arg;
    struct agent_counts *a = agent_of(m, ev);
    switch (ev->kind) {
    case EVENT_EGRESS: {
        if (ev->again)
            break; /* a tunnel decided again: counted with its first line (SPEC.md) */
        int t = ev->tier >= TIER_0 && ev->tier <= TIER_3 ? (int)ev->tier + 1 : 0;
        int v = (unsigned)ev->verdict < NVERDICTS ? (int)ev->verdict : 1;
        int r = (unsigned)ev->reason < REASON_COUNT ? (int)ev->reason : 0;
        a->req[t][v][r]++;
        break;
    }
    case EVENT_EGRESS_PROGRESS:
        a->up += ev->bytes_up;
        break;
    case EVENT_EGRESS_END:
        a->down += ev->bytes_down;
        break;
    }
}

uint64_t metrics_agent_probes(const struct metrics *m)
{
    return m->agent_probes;
}

void metrics_count_alert(struct metrics *m, enum alert_kind k)
{
    if ((unsigned)k < ALERT_KIND_COUNT)
        m->alerts[k]++;
}

void metrics_set_alert_total(struct metrics *m, enum alert_kind k, uint64_t v)
{
    if ((unsigned)k < ALERT_KIND_COUNT)
        m->alerts[k] = v;
}

uint64_t metrics_alert_total(const struct metrics *m, enum alert_kind k)
{
    return (unsigned)k < ALERT_KIND_COUNT ? m->alerts[k] : 0;
}

/* The exposition being written. A write that fails (out of memory) is
 * remembered and the scrape fails with it: a body cut short, served with a
 * 200, would look like a gateway whose series vanished. */
struct out {
    struct evbuffer *b;
    bool failed;
};

__attribute__((format(printf, 2, 3))) static void putf(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (evbuffer_add_vprintf(o->b, fmt, ap) < 0)
        o->failed = true;
    va_end(ap);
}

int metrics_put_label(struct evbuffer *b, const char *s)
{
    /* Escaped into <chunk> and written a chunk at a time: written a byte
     * at a time, a scrape of long labels (a policy of 15,000 grants whose
     * owners are 1000 bytes, a 32 MB body) spent two thirds of its ~0.7 s
     * on the event loop in evbuffer_add(). */
    char chunk[512];
    size_t n = 0;
    chunk[n++] = '"';
    for (; *s != '\0'; s++) {
        if (n + 3 > sizeof(chunk)) { /* an escaped byte and the closing quote fit */
            if (evbuffer_add(b, chunk, n) != 0)
                return -1;
            n = 0;
        }
        char esc = *s == '\\' ? '\\' : *s == '"' ? '"' : *s == '\n' ? 'n' : '\0';
        if (esc != '\0')
            chunk[n++] = '\\';
        chunk[n++] = esc != '\0' ? esc : *s;
    }
    chunk[n++] = '"';
    return evbuffer_add(b, chunk, n) != 0 ? -1 : 0;
}

static void put_label(struct out *o, const char *s)
{
    if (metrics_put_label(o->b, s) != 0)
        o->failed = true;
}

static void head(struct out *o, const char *name, const char *type, const char *help)
{
    putf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A series of one value, without labels: its HELP and TYPE, then the line. */
static void single(struct out *o, const char *name, const char *type, const char *help,
                   uint64_t value)
{
    head(o, name, type, help);
    putf(o, "%s %" PRIu64 "\n", name, value);
}

static const char *tier_label(int t)
{
    static const char *const names[NTIERS] = {"none", "0", "1", "2", "3"};
    return names[t];
}

static void agent_requests(struct out *o, const struct agent_counts *a, const char *id)
{
    for (int t = 0; t < NTIERS; t++)
        for (int v = 0; v < NVERDICTS; v++)
            for (int r = 0; r < REASON_COUNT; r++) {
                if (a->req[t][v][r] == 0)
                    continue;
                putf(o, "sluice_requests_total{agent=");
                put_label(o, id);
                putf(o, ",tier=\"%s\",decision=\"%s\",reason=\"%s\"} %" PRIu64 "\n", tier_label(t),
                     verdict_name((enum verdict)v),
                     r == REASON_NONE ? "none" : reason_name((enum deny_reason)r), a->req[t][v][r]);
            }
}

static void agent_bytes(struct out *o, const char *name, const char *id, uint64_t v)
{
    putf(o, "%s{agent=", name);
    put_label(o, id);
    putf(o, "} %" PRIu64 "\n", v);
}

bool metrics_health(struct metrics *m, char *why, size_t cap)
{
    struct metrics_gauges g = {0};
    if (m->gauges != NULL)
        m->gauges(m->garg, &g);
    if (g.stopping) {
        /* The admin server answers until the stop's very end (--grace,
         * then the sinks' drain): a load balancer must hear that no new
         * client is taken. Before, "ok" for all of it. */
        snprintf(why, cap,
                 "stopping: new connections are refused; the requests in flight "
                 "finish within --grace");
        return false;
    }
    for (size_t i = 0; i < g.nlogs; i++) {
        if (g.logs[i].error != NULL) {
            snprintf(why, cap, "%s log: %s", g.logs[i].name, g.logs[i].error);
            return false;
        }
    }
    if (g.state_stuck != NULL) {
        /* Before a failure an earlier commit left: what holds the store
         * now. A static text, naming no path. */
        snprintf(why, cap, "state store: %s", g.state_stuck);
        return false;
    }
    if (g.state_broken != NULL) {
        /* Not the store's error text: SQLite's may name local paths, and
         * whoever reaches the admin port reads this. The store tells it on
         * standard error ("sluice: state PATH: cannot write: ..."). A log's
         * reason is strerror()'s text, which names no path. */
        snprintf(why, cap, "state store: its commits fail (the reason is on standard error)");
        return false;
    }
    if (g.exec_off != NULL) {
        snprintf(why, cap, "exec sinks: %s", g.exec_off);
        return false;
    }
    if (g.state_waiting != NULL)
        snprintf(why, cap, "state store: %s", g.state_waiting);
    else if (cap > 0)
        why[0] = '\0';
    return true;
}

/* The counts of the DNS server g->dns[i] in <*total>, summed over every
 * listing of its address (dns.servers may name one server twice, as
 * "127.0.0.1" and "127.0.0.1:53"): a series must appear once in a scrape,
 * and Prometheus would drop the repeat with its counts. False when an
 * earlier listing has the address: its series is written there. */
static bool dns_server_total(const struct metrics_gauges *g, size_t i,
                             struct metrics_dns_server *total)
{
    size_t n = g->ndns < METRICS_DNS_SERVERS ? g->ndns : METRICS_DNS_SERVERS;
    for (size_t j = 0; j < i; j++)
        if (strcmp(g->dns[j].addr, g->dns[i].addr) == 0)
            return false;
    *total = g->dns[i];
    for (size_t j = i + 1; j < n; j++)
        if (strcmp(g->dns[j].addr, g->dns[i].addr) == 0) {
            total->answers += g->dns[j].answers;
            total->timeouts += g->dns[j].timeouts;
            total->failures += g->dns[j].failures;
        }
    return true;
}

int metrics_format(struct metrics *m, struct evbuffer *b)
{
    struct out out = {.b = b, .failed = false}, *o = &out;
    struct metrics_gauges g = {0};
    if (m->gauges != NULL)
        m->gauges(m->garg, &g);

    head(o, "sluice_requests_total", "counter",
         "Requests decided, by agent, tier, decision and reason.");
    for (size_t i = 0; i < m->nagents; i++)
        agent_requests(o, &m->agents[i], m->agents[i].id);
    agent_requests(o, &m->other, "");

    head(o, "sluice_bytes_up_total", "counter", "Bytes sent upstream (bodies and tunnel data).");
    for (size_t i = 0; i < m->nagents; i++)
        agent_bytes(o, "sluice_bytes_up_total", m->agents[i].id, m->agents[i].up);
    if (m->other.up > 0) /* agents past the table, counted together as their requests are */
        agent_bytes(o, "sluice_bytes_up_total", "", m->other.up);
    head(o, "sluice_bytes_down_total", "counter", "Bytes returned to agents.");
    for (size_t i = 0; i < m->nagents; i++)
        agent_bytes(o, "sluice_bytes_down_total", m->agents[i].id, m->agents[i].down);
    if (m->other.down > 0)
        agent_bytes(o, "sluice_bytes_down_total", "", m->other.down);

    single(o, "sluice_open_connections", "gauge", "Client connections open now.",
           g.open_connections);
    single(o, "sluice_open_tunnels", "gauge", "CONNECT tunnels open now.", g.open_tunnels);
    single(o, "sluice_tunnel_held_bytes", "gauge",
           "Bytes tunnels read and hold because their destination did not take them yet.",
           g.tunnel_held_bytes);
    single(o, "sluice_client_backlog_bytes", "gauge",
           "Bytes waiting in the gateway's memory for clients to take them (answers and response "
           "bodies; not tunnels').",
           g.client_backlog_bytes);
    single(o, "sluice_upload_backlog_bytes", "gauge",
           "Bytes waiting in the gateway's memory for upstreams to take them (plain requests' "
           "heads and bodies; not tunnels').",
           g.upload_backlog_bytes);
    single(o, "sluice_bandwidth_waiting_connections", "gauge",
           "Connections whose upload waits for its bandwidth bucket to refill now.",
           g.bandwidth_waiting);
    single(o, "sluice_accept_failures_total", "counter",
           "Failed accept() calls of the listeners (out of descriptors or memory): each pauses "
           "the listener 100 ms.",
           g.accept_failures);

    head(o, "sluice_alerts_total", "counter", "Alerts written, by kind (kept across restarts).");
    for (int k = 0; k < ALERT_KIND_COUNT; k++)
        putf(o, "sluice_alerts_total{kind=\"%s\"} %" PRIu64 "\n",
             alert_kind_name((enum alert_kind)k), m->alerts[k]);

    single(o, "sluice_policy_reloads_total", "counter", "Policy reloads that took effect.",
           g.reloads);
    single(o, "sluice_policy_reload_failures_total", "counter",
           "Policy reloads refused (the old policy stayed).", g.reload_failures);

    head(o, "sluice_dns_responses_total", "counter",
         "What each DNS server did with the queries sent to it (since it was configured).");
    for (size_t i = 0; i < g.ndns && i < METRICS_DNS_SERVERS; i++) {
        struct metrics_dns_server total;
        if (!dns_server_total(&g, i, &total))
            continue; /* counted with the first listing of its address */
        const struct metrics_dns_server *d = &total;
        const struct {
            const char *name;
            uint64_t v;
        } results[] = {{"answer", d->answers}, {"timeout", d->timeouts}, {"failure", d->failures}};
        for (size_t k = 0; k < sizeof(results) / sizeof(results[0]); k++) {
            putf(o, "sluice_dns_responses_total{server=");
            put_label(o, d->addr);
            putf(o, ",result=\"%s\"} %" PRIu64 "\n", results[k].name, results[k].v);
        }
    }

    head(o, "sluice_log_writable", "gauge",
         "1 while a log can be written, 0 while its writes fail (lines then wait in memory).");
    for (size_t i = 0; i < g.nlogs; i++)
        putf(o, "sluice_log_writable{log=\"%s\"} %d\n", g.logs[i].name, g.logs[i].error == NULL);
    head(o, "sluice_log_pending_bytes", "gauge", "Bytes waiting to be written to a log.");
    for (size_t i = 0; i < g.nlogs; i++)
        putf(o, "sluice_log_pending_bytes{log=\"%s\"} %" PRIu64 "\n", g.logs[i].name,
             g.logs[i].pending);
    head(o, "sluice_log_dropped_lines_total", "counter",
         "Lines a log dropped (its pending bytes over their cap, or its reader gone).");
    for (size_t i = 0; i < g.nlogs; i++)
        putf(o, "sluice_log_dropped_lines_total{log=\"%s\"} %" PRIu64 "\n", g.logs[i].name,
             g.logs[i].dropped);

    head(o, "sluice_grants_expiring", "gauge", "Grants expiring within the warn window.");
    putf(o, "sluice_grants_expiring %" PRId64 "\n", m->gt.expiring);
    head(o, "sluice_grants_expired", "gauge", "Grants past their expiry (requests denied).");
    putf(o, "sluice_grants_expired %" PRId64 "\n", m->gt.expired);
    head(o, "sluice_grant_expiry_timestamp_seconds", "gauge",
         "When each grant with an expiry stops being valid (unix time).");
    for (size_t i = 0; i < m->gt.ngrants; i++) {
        const struct grant_gauge *gg = &m->gt.grants[i];
        putf(o, "sluice_grant_expiry_timestamp_seconds{rule=");
        put_label(o, gg->rule);
        putf(o, ",host=");
        put_label(o, gg->host);
        putf(o, ",owner=");
        put_label(o, gg->owner);
        putf(o, "} %" PRId64 "\n", gg->ends_at);
    }
    if (m->extra != NULL && m->extra(m->garg, b) != 0)
        o->failed = true;
    return o->failed ? -1 : 0;
}
