/* detectors: decision events in, alerts out (see detectors.h). */
#include "watch/detectors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "policy/lint.h"
#include "policy/policy.h"
#include "policy/zone.h"
#include "state/store.h"
#include "util/pos_index.h"
#include "util/siphash.h"
#include "util/slot_heap.h"
#include "util/units.h"
#include "util/zalloc.h"
#include "watch/agent_hash.h"
#include "watch/bus.h"
#include "watch/contact_set.h"
#include "watch/window.h"

#define DETAIL_MAX  1024 /* the longest: a shown request, an agent and a grant */
#define PATH_SHOWN  200
#define OWNER_SHOWN 200
/* "METHOD PATH... on HOST": a method of 31 bytes, a host of 253 */
#define WHAT_MAX (PATH_SHOWN + 320)
/* "[HOST]:PORT": a target host of up to 255 bytes (HTTP_HOST_MAX), brackets, a port */
#define HOST_PORT_MAX 272
#define MINUTE_MS     60000
/* The window of a threshold the policy leaves out (its detector off): the
 * loader gives every threshold present its per, 1 s when it says none */
#define THRESHOLD_PER_MS MINUTE_MS
#define BYTES_FLOOR_K    1024 /* the baseline floor counts KiB for bytes */
/* The methods write_burst and off_hours_write count: POST, PUT, PATCH,
 * DELETE, and every extension method (WebDAV's MOVE, COPY, MKCOL,
 * PROPPATCH, or a made-up token), which a rule without methods lets
 * through and RFC 9110 holds no safer than a POST: counted as reads, they
 * were writes no detector saw. GET, HEAD, OPTIONS and TRACE are safe;
 * CONNECT's methods are inside its tunnel. */
#define DETECT_WRITES (METHODS_WRITE | METHOD_OTHER)

struct cfg {
    bool present;
    bool first_contact;
    struct threshold write_burst, upload_bytes, denied_burst, auth_failures;
    struct off_hours_cfg off_hours; /* tz owned */
    struct baseline_cfg baseline;
    int warn_days;
};

/* The kinds folded per host: each host its own line per period. */
enum per_host_kind { HOSTS_TIER3, HOSTS_EXPIRED, HOSTS_OFF_HOURS, HOSTS_KINDS };

struct agent_state {
    char *id;
    struct window writes, uploads, denials;
    struct window contacts; /* first contacts over the last minute */
    /* lines of each per-host kind written for a host of their own over the
     * last minute (raise_per_host()) */
    struct window hosts[HOSTS_KINDS];
    /* baseline */
    bool bl_known;
    struct store_baseline bl;
    uint64_t cur_req, cur_bytes;
    bool bl_dirty;
    uint64_t hash;       /* agent_hash() of the id (watch/agent_hash.h) */
    uint32_t prev, next; /* the list by last event: see agent_get() */
    uint64_t seq;        /* its place in that list: later agents have larger ones */
};

/* An auth_failures source: an IPv4 address, an IPv6 /64 (a host commonly
 * holds a whole one, and could spread its guesses over its addresses), the
 * unix socket's clients, or every source past DETECT_SOURCES_MAX. */
enum source_kind { SOURCE_ADDR, SOURCE_UNIX, SOURCE_OVERFLOW };

struct source_state {
    struct ipaddr key; /* SOURCE_ADDR: the address, an IPv6 one cut to its /64 */
    struct window fails;
};

struct detectors {
    struct alert_bus *out;
    struct store *store;
    struct cfg cfg;
    struct cfg next; /* detectors_prepare()'s, for detectors_commit(); tz owned */
    bool prepared;
    struct agent_state *agents;
    size_t nagents, capagents;
    struct pos_index agent_index;
    size_t agents_stale;         /* index entries of evicted agents */
    uint32_t lru_head, lru_tail; /* seen longest ago, seen last */
    uint64_t lru_seq;            /* the last agent_state.seq given */
    uint32_t evict_from;         /* the first agent not examined: see agent_evict() */
    int64_t busy_seen_ms;        /* the time of the last eviction */
    /* agents before evict_from: busy ones by when they can first be idle,
     * and those now idle by their place in the list */
    struct slot_heap busy, idle;
    struct contact_set contacts;
    /* The windows of agents without state of their own (the table full of
     * busy agents, or no memory), counted together (its id NULL; no
     * baseline): their writes, upload bytes and denials (uncounted, an
     * agent past the table wrote unseen), their first contacts, and the
     * lines of each per-host kind, with which those of clients of no agent
     * count. */
    struct agent_state slotless;
    struct fold fold;
    /* auth_failures: the table of sources, indexed by a keyed hash of
     * their key (the addresses are the clients' choice), and the two
     * sources outside it */
    struct source_state *sources;
    size_t nsources, capsources;
    struct pos_index source_index;
    struct siphash_key source_hash_key;
    struct source_state unix_clients, overflow;
    struct window source_lines; /* auth_failures lines for a source of their own, a minute */
    int64_t sources_swept_ms;   /* the table's last sweep for idle sources */
    int64_t oh_minute;          /* off-hours cache */
    int32_t grants_day;         /* the UTC day grants were last announced */
    bool oh_result;
    bool oh_zone_told; /* said that the zone's file cannot be read (tell_zone()) */
    uint64_t published, folded;
    uint64_t agent_probes; /* agents compared or examined, for tests */
};

static void load_contact(const char *agent, const char *host, int64_t first_ms, void *arg)
{
    (void)first_ms;
    struct detectors *d = arg;
    contact_set_add(&d->contacts, agent, host);
}

struct adopt_ctx {
    struct detectors *d;
    struct contact_set *stored;
    int64_t now_ms;
};

/* A pair first seen while no store was open: into the store and into the
 * memory read from it (a pair is "agent\nhost"). */
static void adopt_contact(const char *pair, void *arg)
{
    struct adopt_ctx *c = arg;
    const char *nl = strchr(pair, '\n');
    char agent[256];
    size_t n = nl != NULL ? (size_t)(nl - pair) : 0;
    if (nl == NULL || n >= sizeof(agent))
        return;
    memcpy(agent, pair, n);
    agent[n] = '\0';
    contact_set_add(c->stored, agent, nl + 1);
    store_put_contact(c->d->store, agent, nl + 1, c->now_ms);
}

void detectors_adopt_store(struct detectors *d, struct store *store, struct contact_set *stored,
                           int64_t now_ms)
{
    struct adopt_ctx c = {d, stored, now_ms};
    d->store = store;
    contact_set_each(&d->contacts, adopt_contact, &c);
    contact_set_free(&d->contacts);
    d->contacts = *stored;
    memset(stored, 0, sizeof(*stored));
    for (size_t i = 0; i < d->nagents; i++)
        if (d->agents[i].id != NULL && d->agents[i].bl_known)
            store_put_baseline(store, d->agents[i].id, &d->agents[i].bl);
}

/* ---- agents ----------------------------------------------------------------- */

static void agent_windows(const struct cfg *c, struct agent_state *a, bool only_changed)
{
    if (!only_changed || a->writes.per_ms != c->write_burst.per_ms)
        window_init(&a->writes, c->write_burst.per_ms);
    if (!only_changed || a->uploads.per_ms != c->upload_bytes.per_ms)
        window_init(&a->uploads, c->upload_bytes.per_ms);
    if (!only_changed || a->denials.per_ms != c->denied_burst.per_ms)
        window_init(&a->denials, c->denied_burst.per_ms);
    if (!only_changed) {
        window_init(&a->contacts, MINUTE_MS);
        for (int k = 0; k < HOSTS_KINDS; k++)
            window_init(&a->hosts[k], MINUTE_MS);
    }
}

static void baseline_roll(struct detectors *d, struct agent_state *a, int64_t now_ms);

/* Agents are found through a hash index of their places in d->agents,
 * keyed by agent_hash() of their id, for an event the hash it carries
 * (watch/agent_hash.h; a linear search compared every event's agent with
 * every agent tracked: 4096 of them). An evicted
 * agent's place goes to the new agent, and the index keeps the old entry
 * (a stale one, which only costs its lookups a compare) until stale
 * entries outnumber the agents: then it is built anew.
 *
 * The agents are also kept in a list in the order they were last seen,
 * the one seen longest ago first, so that eviction takes the first of the
 * list whose windows are all empty. The list is examined once: the busy
 * agents eviction walks past (those before evict_from) wait in d->busy
 * until the time their windows can first all be empty (window_empty_at():
 * counts only leave a window, and an event of the agent moves it to the
 * list's end, out of the heaps), then in d->idle, by their place in the
 * list, the first of which goes first. A walk of every busy agent each
 * time a window's tenth ended cost a new agent, with windows of 1 s and
 * a table of busy agents, 4096 agents examined every 100 ms. A reload
 * that starts windows afresh, or a clock that goes back, starts the
 * examination over. */
#define AGENT_NONE UINT32_MAX

static void agents_reindex(struct detectors *d)
{
    pos_index_empty(&d->agent_index);
    for (size_t i = 0; i < d->nagents; i++)
        pos_index_add(&d->agent_index, d->agents[i].hash, i);
    d->agents_stale = 0;
}

/* Forgets what eviction learned of busy agents. */
static void agents_busy_reset(struct detectors *d)
{
    d->evict_from = d->lru_head;
    slot_heap_clear(&d->busy);
    slot_heap_clear(&d->idle);
}

static void agent_unlink(struct detectors *d, struct agent_state *a)
{
    uint32_t i = (uint32_t)(a - d->agents);
    if (d->evict_from == i)
        d->evict_from = a->next;
    slot_heap_remove(&d->busy, i);
    slot_heap_remove(&d->idle, i);
    if (a->prev != AGENT_NONE)
        d->agents[a->prev].next = a->next;
    else
        d->lru_head = a->next;
    if (a->next != AGENT_NONE)
        d->agents[a->next].prev = a->prev;
    else
        d->lru_tail = a->prev;
    a->prev = a->next = AGENT_NONE;
}

static void agent_append(struct detectors *d, struct agent_state *a)
{
    uint32_t i = (uint32_t)(a - d->agents);
    a->prev = d->lru_tail;
    a->next = AGENT_NONE;
    a->seq = ++d->lru_seq;
    if (d->lru_tail != AGENT_NONE)
        d->agents[d->lru_tail].next = i;
    else
        d->lru_head = i;
    d->lru_tail = i;
    if (d->evict_from == AGENT_NONE)
        d->evict_from = i;
}

/* When <a>'s windows, not all empty at <now_ms>, can first all be empty
 * (after <now_ms>); INT64_MIN when they are all empty. */
static int64_t agent_idle_at(const struct agent_state *a, int64_t now_ms)
{
    const struct window *ws[] = {&a->writes,   &a->uploads,  &a->denials, &a->contacts,
                                 &a->hosts[0], &a->hosts[1], &a->hosts[2]};
    _Static_assert(HOSTS_KINDS == 3, "every window of an agent in ws[]");
    int64_t at = INT64_MIN;
    for (size_t k = 0; k < sizeof(ws) / sizeof(ws[0]); k++) {
        int64_t w = window_empty_at(ws[k], now_ms);
        at = w > at ? w : at;
    }
    return at;
}

/* Examines agent <i> at <now_ms>: true when it is idle; else it waits in
 * d->busy. */
static bool agent_examine(struct detectors *d, uint32_t i, int64_t now_ms)
{
    d->agent_probes++;
    int64_t at = agent_idle_at(&d->agents[i], now_ms);
    if (at == INT64_MIN)
        return true;
    slot_heap_remove(&d->idle, i);
    slot_heap_put(&d->busy, i, at);
    return false;
}

/* At DETECT_AGENTS_MAX agents, the one seen longest ago whose windows are
 * all empty at <now_ms> gives its place (its baseline stored first, as at
 * a stop): forgetting it loses no count a detector would still add to.
 * Returns the freed slot, out of the list, or NULL when every window is
 * in use. */
static struct agent_state *agent_evict(struct detectors *d, int64_t now_ms)
{
    _Static_assert(DETECT_AGENTS_MAX <= SLOT_HEAP_MAX, "every agent fits the heaps");
    if (now_ms < d->busy_seen_ms)
        agents_busy_reset(d);
    d->busy_seen_ms = now_ms;
    struct agent_state *v = NULL;
    uint32_t i;
    int64_t key;
    for (;;) {
        /* the busy agents whose windows have emptied since */
        while (slot_heap_top(&d->busy, &i, &key) && key <= now_ms) {
            slot_heap_remove(&d->busy, i);
            slot_heap_put(&d->idle, i, (int64_t)d->agents[i].seq);
        }
        /* an idle one of those comes before any agent not examined yet;
         * one that held counts dated later (the clock went back) waits again */
        if (!slot_heap_top(&d->idle, &i, &key)) {
            if ((i = d->evict_from) == AGENT_NONE)
                break;
            d->evict_from = d->agents[i].next; /* examined now: busy, it waits in d->busy */
        }
        if (agent_examine(d, i, now_ms)) {
            v = &d->agents[i];
            break;
        }
    }
    if (v == NULL)
        return NULL;
    if (v->bl_known && d->cfg.baseline.set)
        baseline_roll(d, v, now_ms);
    if (v->bl_known && v->bl_dirty && d->store != NULL)
        store_put_baseline(d->store, v->id, &v->bl);
    free(v->id);
    v->id = NULL;
    agent_unlink(d, v);
    return v;
}

/* The state of agent <id>, whose agent_hash() is <h>, made when new; at
 * the cap an idle agent gives its place, unless <now_ms> is negative
 * (loading the store). NULL when there is no room or memory. */
static struct agent_state *agent_get(struct detectors *d, const char *id, uint64_t h,
                                     int64_t now_ms)
{
    size_t j = POS_INDEX_START, p;
    while ((p = pos_index_next(&d->agent_index, h, &j)) != 0) {
        struct agent_state *a = &d->agents[p - 1];
        d->agent_probes++;
        if (a->hash == h && a->id != NULL && strcmp(a->id, id) == 0) {
            if (now_ms >= 0 && d->lru_tail != p - 1) {
                agent_unlink(d, a);
                agent_append(d, a);
            }
            return a;
        }
    }
    char *copy = strdup(id);
    if (copy == NULL)
        return NULL;
    struct agent_state *a = NULL;
    if (d->nagents >= DETECT_AGENTS_MAX) {
        if (now_ms < 0 || (a = agent_evict(d, now_ms)) == NULL) {
            free(copy);
            return NULL;
        }
        d->agents_stale++;
    } else if (d->nagents == d->capagents) {
        size_t nc = d->capagents ? d->capagents * 2 : 8;
        struct agent_state *na = realloc(d->agents, nc * sizeof(*na));
        if (na == NULL) {
            free(copy);
            return NULL;
        }
        d->agents = na;
        d->capagents = nc;
    }
    if (a == NULL) {
        /* the index's room first: on failure nothing has changed */
        int r = pos_index_reserve(&d->agent_index, d->nagents + d->agents_stale + 1);
        if (r < 0) {
            free(copy);
            return NULL;
        }
        if (r > 0)
            agents_reindex(d);
        a = &d->agents[d->nagents++];
    }
    size_t pos = (size_t)(a - d->agents);
    memset(a, 0, sizeof(*a));
    a->id = copy;
    a->hash = h;
    agent_windows(&d->cfg, a, false);
    agent_append(d, a);
    if (d->agents_stale > d->nagents)
        agents_reindex(d); /* the new agent with the others */
    else if (pos_index_reserve(&d->agent_index, d->nagents + d->agents_stale) != 0)
        agents_reindex(d); /* a larger table, or none: built anew */
    else
        pos_index_add(&d->agent_index, h, pos);
    return a;
}

static void load_baseline(const char *agent, const struct store_baseline *b, void *arg)
{
    /* A row that cannot be an average is relearned rather than trusted; so
     * is one stored before its first minute ended, which holds no average
     * yet (kept, it would have the minute of the restart, seen only in
     * part, seed it). */
    if (!isfinite(b->req_avg) || !isfinite(b->bytes_avg) || b->req_avg < 0 || b->bytes_avg < 0 ||
        b->minute < 0 || b->since_ms < 0 || b->minute <= b->since_ms / MINUTE_MS)
        return;
    struct agent_state *a = agent_get(arg, agent, agent_hash(agent), -1);
    if (a == NULL)
        return;
    a->bl = *b;
    a->bl_known = true;
}

/* ---- client sources (auth_failures) ------------------------------------------ */

#define SOURCES_SWEEP_MS 1000 /* a full table looks for idle sources at most this often */

static uint64_t source_hash(const struct detectors *d, const struct ipaddr *key)
{
    return siphash13(&d->source_hash_key, key->b, sizeof(key->b));
}

/* Indexes every source anew (after sources moved, or a new table). */
static void sources_reindex(struct detectors *d)
{
    pos_index_empty(&d->source_index);
    for (size_t i = 0; i < d->nsources; i++)
        pos_index_add(&d->source_index, source_hash(d, &d->sources[i].key), i);
}

/* A reload that changes auth_failures.per starts every source's window
 * afresh, as it does an agent's. */
static void sources_configure(struct detectors *d)
{
    uint64_t per = d->cfg.auth_failures.per_ms;
    if (d->overflow.fails.per_ms == per)
        return;
    for (size_t i = 0; i < d->nsources; i++)
        window_init(&d->sources[i].fails, per);
    window_init(&d->unix_clients.fails, per);
    window_init(&d->overflow.fails, per);
}

/* Forgets the sources whose window is empty at <now_ms>: forgetting them
 * loses no count. At most once every SOURCES_SWEEP_MS, so that a flood of
 * new sources into a table full of busy ones does not scan it each time. */
static void sources_sweep(struct detectors *d, int64_t now_ms)
{
    if (d->sources_swept_ms != INT64_MIN && now_ms >= d->sources_swept_ms &&
        now_ms - d->sources_swept_ms < SOURCES_SWEEP_MS)
        return;
    d->sources_swept_ms = now_ms;
    size_t kept = 0;
    for (size_t i = 0; i < d->nsources; i++)
        if (window_sum(&d->sources[i].fails, now_ms) > 0)
            d->sources[kept++] = d->sources[i];
    if (kept != d->nsources) {
        d->nsources = kept;
        sources_reindex(d);
    }
}

/* The source a refusal from <addr> (NULL: a unix-socket client) counts
 * under: its own, made when new, or the overflow when the table is full of
 * sources still counting (or memory is short). <*kind> says which; <*key>
 * is the address key (an IPv6 address cut to its /64). */
static struct source_state *source_get(struct detectors *d, const struct ipaddr *addr,
                                       int64_t now_ms, enum source_kind *kind, struct ipaddr *key)
{
    *kind = SOURCE_UNIX;
    if (addr == NULL)
        return &d->unix_clients;
    *key = *addr;
    if (!ipaddr_is_v4(key))
        memset(key->b + 8, 0, 8);
    uint64_t h = source_hash(d, key);
    size_t j = POS_INDEX_START, p;
    *kind = SOURCE_ADDR;
    while ((p = pos_index_next(&d->source_index, h, &j)) != 0)
        if (ipaddr_equal(&d->sources[p - 1].key, key))
            return &d->sources[p - 1];
    if (d->nsources >= DETECT_SOURCES_MAX)
        sources_sweep(d, now_ms);
    *kind = SOURCE_OVERFLOW;
    if (d->nsources >= DETECT_SOURCES_MAX)
        return &d->overflow;
    if (d->nsources == d->capsources) {
        size_t nc = d->capsources ? d->capsources * 2 : 16;
        struct source_state *ns = realloc(d->sources, nc * sizeof(*ns));
        if (ns == NULL)
            return &d->overflow;
        d->sources = ns;
        d->capsources = nc;
    }
    int r = pos_index_reserve(&d->source_index, d->nsources + 1);
    if (r < 0)
        return &d->overflow;
    struct source_state *s = &d->sources[d->nsources++];
    s->key = *key;
    window_init(&s->fails, d->cfg.auth_failures.per_ms);
    if (r > 0)
        sources_reindex(d);
    else
        pos_index_add(&d->source_index, h, d->nsources - 1);
    *kind = SOURCE_ADDR;
    return s;
}

/* ---- life cycle ------------------------------------------------------------- */

struct detectors *detectors_new(struct alert_bus *out, struct store *store)
{
    struct detectors *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return NULL;
    d->out = out;
    d->store = store;
    d->oh_minute = -1;
    d->grants_day = INT32_MIN;
    fold_init(&d->fold);
    contact_set_init(&d->contacts, DETECT_CONTACTS_MAX);
    d->cfg.write_burst.per_ms = d->cfg.upload_bytes.per_ms = d->cfg.denied_burst.per_ms =
        d->cfg.auth_failures.per_ms = THRESHOLD_PER_MS;
    window_init(&d->source_lines, MINUTE_MS);
    agent_windows(&d->cfg, &d->slotless, false);
    siphash_random_key(&d->source_hash_key, d);
    d->lru_head = d->lru_tail = d->evict_from = AGENT_NONE;
    d->busy_seen_ms = INT64_MIN;
    window_init(&d->unix_clients.fails, d->cfg.auth_failures.per_ms);
    window_init(&d->overflow.fails, d->cfg.auth_failures.per_ms);
    d->sources_swept_ms = INT64_MIN;
    if (store != NULL) {
        store_load_contacts(store, load_contact, d);
        store_load_baselines(store, DETECT_AGENTS_MAX, load_baseline, d);
    }
    return d;
}

void detectors_free(struct detectors *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->nagents; i++)
        free(d->agents[i].id);
    free(d->agents);
    pos_index_free(&d->agent_index);
    free(d->sources);
    pos_index_free(&d->source_index);
    contact_set_free(&d->contacts);
    fold_free(&d->fold);
    free(d->cfg.off_hours.tz);
    detectors_abandon(d);
    free(d);
}

int detectors_prepare(struct detectors *d, const struct policy *p)
{
    const struct alerts_cfg *a = &p->alerts;
    struct cfg c = {0};
    c.present = a->present;
    c.first_contact = a->first_contact;
    c.write_burst = a->write_burst;
    c.upload_bytes = a->upload_bytes;
    c.denied_burst = a->denied_burst;
    c.auth_failures = a->auth_failures;
    c.off_hours = a->off_hours;
    c.off_hours.tz = NULL;
    if (a->off_hours.set) {
        /* zalloc(), not strdup(): the unit test fails it (test_detectors) */
        const char *tz = a->off_hours.tz ? a->off_hours.tz : "UTC";
        size_t n = strlen(tz) + 1;
        if ((c.off_hours.tz = zalloc(n)) == NULL)
            return -1;
        memcpy(c.off_hours.tz, tz, n);
    }
    c.baseline = a->baseline;
    c.warn_days = lint_warn_days(p);
    struct threshold *ts[] = {&c.write_burst, &c.upload_bytes, &c.denied_burst, &c.auth_failures};
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++)
        if (ts[i]->per_ms == 0)
            ts[i]->per_ms = THRESHOLD_PER_MS;
    detectors_abandon(d);
    d->next = c;
    d->prepared = true;
    return 0;
}

void detectors_abandon(struct detectors *d)
{
    if (!d->prepared)
        return;
    free(d->next.off_hours.tz);
    d->next = (struct cfg){0};
    d->prepared = false;
}

void detectors_commit(struct detectors *d)
{
    if (!d->prepared)
        return;
    free(d->cfg.off_hours.tz);
    d->cfg = d->next;
    d->next = (struct cfg){0};
    d->prepared = false;
    d->oh_minute = -1;
    d->oh_zone_told = false;
    for (size_t i = 0; i < d->nagents; i++)
        agent_windows(&d->cfg, &d->agents[i], true);
    agent_windows(&d->cfg, &d->slotless, true);
    agents_busy_reset(d); /* windows started afresh may be empty */
    sources_configure(d);
}

int detectors_configure(struct detectors *d, const struct policy *p)
{
    if (detectors_prepare(d, p) < 0)
        return -1;
    detectors_commit(d);
    return 0;
}

uint64_t detectors_published(const struct detectors *d)
{
    return d->published;
}

uint64_t detectors_folded(const struct detectors *d)
{
    return d->folded;
}

uint64_t detectors_agent_probes(const struct detectors *d)
{
    return d->agent_probes;
}

bool detectors_tracks(struct detectors *d, const char *id)
{
    uint64_t h = agent_hash(id);
    size_t cursor = POS_INDEX_START;
    for (size_t p; (p = pos_index_next(&d->agent_index, h, &cursor)) != 0;)
        if (d->agents[p - 1].hash == h && strcmp(d->agents[p - 1].id, id) == 0)
            return true;
    return false;
}

/* ---- publishing ------------------------------------------------------------- */

static void emit(struct alert *a, void *arg)
{
    struct detectors *d = arg;
    d->published++;
    alert_bus_publish(d->out, a);
}

/* Writes <a> unless it folds, as alert <keyed> (its fold key: <keyed>'s
 * kind and agent, <key_host>), into a running period of <period_ms>.
 * <trip>: <a> is a threshold's count going over its max from at or under
 * it, a new burst (fold_admit_trip()). */
static void raise_keyed(struct detectors *d, const struct alert *keyed, struct alert *a,
                        const char *key_host, uint64_t period_ms, bool trip, int64_t now_ms)
{
    if (!(trip ? fold_admit_trip : fold_admit)(&d->fold, keyed, key_host, now_ms, period_ms, emit,
                                               d)) {
        d->folded++;
        return;
    }
    a->count = 1;
    emit(a, d);
}

static void raise_alert(struct detectors *d, struct alert *a, const char *key_host,
                        uint64_t period_ms, int64_t now_ms)
{
    raise_keyed(d, a, a, key_host, period_ms, false, now_ms);
}

/* Raises <a>, an alert of a per-agent kind counted in <w>'s windows,
 * folded per agent over <period_ms>; for agents without windows of their
 * own (<w> is d->slotless), whose count is theirs together, under one key
 * for them all (agent and host ""; no per-agent kind is raised for a
 * client of no agent): folded per agent, each such agent's first alert
 * would be a line, one per agent of a fleet past the table. <trip>: as
 * for raise_keyed(). */
static void raise_per_agent(struct detectors *d, const struct agent_state *w, struct alert *a,
                            uint64_t period_ms, bool trip, int64_t now_ms)
{
    struct alert keyed = *a;
    if (w == &d->slotless)
        keyed.agent = NULL;
    raise_keyed(d, &keyed, a, NULL, period_ms, trip, now_ms);
}

/* Who a per-agent alert names as the one over its max: <agent>, or, when
 * it counted in the shared windows (<w> is d->slotless), <agent> with the
 * others counted there (<out>, <len>). */
static const char *counted_as(const struct detectors *d, const struct agent_state *w,
                              const char *agent, char *out, size_t len)
{
    if (w != &d->slotless)
        return agent;
    snprintf(out, len, "%s and the other agents past the %u tracked, counted together,", agent,
             (unsigned)DETECT_AGENTS_MAX);
    return out;
}

/* The bound on alerts of a kind folded per key (a host, a source) that a
 * client chooses: <lines> counts the lines written for keys of their own
 * within a minute, and past <burst> the kind folds over the minute. */
struct burst_fold {
    struct window *lines;
    unsigned burst;
    const char *keys;  /* "hosts", "sources": what the detail says went over */
    const char *whose; /* "this agent's are", "they are": what is folded */
};

/* Raises <a> folded per <key> over <period_ms>, unless <b>'s lines passed
 * its burst (and <key> holds no running period): then folded by kind over
 * DETECT_FOLD_MS, written at once, its <detail> (<len>: the buffer <a>
 * points to) saying so. <trip>: as for raise_keyed(). */
static void raise_bounded(struct detectors *d, struct alert *a, const char *key, uint64_t period_ms,
                          bool trip, const struct burst_fold *b, char *detail, size_t len,
                          int64_t now_ms)
{
    if (fold_holds(&d->fold, a->kind, a->agent, key, now_ms) ||
        window_add(b->lines, now_ms, 1) <= b->burst) {
        raise_keyed(d, a, a, key, period_ms, trip, now_ms);
        return;
    }
    size_t n = strnlen(detail, len);
    snprintf(detail + n, len - n, "; over %u %s' %s alerts within 1m, so %s folded per minute",
             b->burst, b->keys, alert_kind_name(a->kind), b->whose);
    raise_alert(d, a, NULL, DETECT_FOLD_MS, now_ms);
}

/* Raises <a>, an alert of a kind folded per host (<slot>'s), for <host>.
 * Each host opens its own period, so an agent let write to thousands of
 * hosts (a wildcard rule: every bucket name under *.s3.amazonaws.com
 * resolves) put a line per host into every sink, as first contacts did:
 * 4096 off-hours writes a minute were 4096 lines to every webhook, a real
 * alert queued behind them, and an exec sink's queue full, dropping it.
 * Past DETECT_HOSTS_BURST hosts' lines of the kind within a minute, the
 * agent's alerts of that kind for hosts without a running period fold by
 * (kind, agent) over the minute, the first written at once, saying so
 * (<detail>, <len>: the buffer <a> points to); the period's summary counts
 * the rest. A kind's flood leaves the agent's other kinds alone. Agents
 * without state of their own (<ag> NULL), and clients of no agent, count
 * together: uncounted, each host was a line, so an agent that kept the
 * table busy with sibling agents could flood the sinks so. */
static void raise_per_host(struct detectors *d, struct agent_state *ag, enum per_host_kind slot,
                           struct alert *a, const char *host, char *detail, size_t len,
                           int64_t now_ms)
{
    const char *whose = ag != NULL ? "this agent's are"
                        : a->agent != NULL
                            ? "those of agents without windows, counted together, are"
                            : "those of clients of no agent are";
    const struct burst_fold by_host = {ag != NULL ? &ag->hosts[slot] : &d->slotless.hosts[slot],
                                       DETECT_HOSTS_BURST, "hosts", whose};
    raise_bounded(d, a, host, DETECT_FOLD_MS, false, &by_host, detail, len, now_ms);
}

/* <host>:<port> as an alert's detail writes it, an IPv6 literal in
 * brackets ("[::1]:443", as the gate's refusals write it: "::1:443" reads
 * as another address with no port), into <out> (<len> bytes). */
static const char *host_port(const char *host, unsigned port, char *out, size_t len)
{
    if (host == NULL)
        snprintf(out, len, "?:%u", port);
    else if (strchr(host, ':') != NULL)
        snprintf(out, len, "[%s]:%u", host, port);
    else
        snprintf(out, len, "%s:%u", host, port);
    return out;
}

static void describe(const struct egress_event *ev, char *out, size_t len)
{
    char hp[HOST_PORT_MAX];
    if (out[0] != '\0') /* described already: the text only an alert needs, made once */
        return;
    if (ev->path != NULL)
        snprintf(out, len, "%s %.*s%s on %s", ev->method ? ev->method : "?", PATH_SHOWN, ev->path,
                 strlen(ev->path) > PATH_SHOWN ? "..." : "", ev->host ? ev->host : "?");
    else
        snprintf(out, len, "%s %s", ev->method ? ev->method : "?",
                 host_port(ev->host, ev->port, hp, sizeof(hp)));
}

/* How many bytes of <owner> an alert shows: all of it, or at most
 * OWNER_SHOWN, cut before a character (UTF-8), not in the middle of one. */
static int owner_shown(const char *owner)
{
    size_t n = strlen(owner);
    if (n <= OWNER_SHOWN)
        return (int)n;
    n = OWNER_SHOWN;
    while (n > 0 && ((unsigned char)owner[n] & 0xc0) == 0x80)
        n--;
    return (int)n;
}

static void grant_text(const struct egress_event *ev, char *out, size_t len)
{
    /* the grant's expiry: a tunnel's deciding rule may be a lower tier's */
    const struct rule *g = ev->grant != NULL ? ev->grant : ev->rule;
    char date[16] = "";
    if (g != NULL && g->has_expires)
        format_date(g->expires, date, sizeof(date));
    const char *owner = ev->owner ? ev->owner : "none";
    snprintf(out, len, "owner %.*s%s, expires %s", owner_shown(owner), owner,
             strlen(owner) > OWNER_SHOWN ? "..." : "", date[0] ? date : "never");
}

/* Periods are written as a policy writes them ("10s", "1m"), as in the
 * fold summaries. */
static const char *period_text(uint64_t ms, char *out, size_t len)
{
    format_period_ms(ms, out, len);
    return out;
}

static const char *agent_shown(const char *a)
{
    return a != NULL ? a : "an unidentified client";
}

/* ---- off hours ----------------------------------------------------------- */

/* The largest step back of a zone's clocks: Antarctica/Troll's, two hours
 * (03:00 +02 to 01:00 +00 when its summer time ends); most zones step
 * back one hour, Australia/Lord_Howe half of one. */
#define SET_BACK_MAX_S (2 * 3600)
#define DAY_S          86400

/* Working hours are one stretch of time: they begin the first time the
 * local clock reaches their start and end the first time it reaches their
 * end. A clock that goes forward (summer time starting) skips readings,
 * and a start or end among them is reached at the first instant after
 * the gap; one that goes back shows readings again, and the hours go by
 * the furthest reading shown. So the question is always "does the
 * furthest reading the clock has shown fall in the hours?", a reading
 * being the local date and time as a count of seconds (<t> plus the
 * zone's offset then). */

/* Seconds the local clock read at <t>, when its offset was <tm>'s. */
static int64_t reading_at(time_t t, const struct tm *tm)
{
    return (int64_t)t + tm->tm_gmtoff;
}

static int64_t day_of_reading(int64_t reading)
{
    return reading >= 0 ? reading / DAY_S : -((-reading + DAY_S - 1) / DAY_S);
}

/* Whether the local clock's <reading> falls in <o>'s hours on a working
 * day. Hours that wrap midnight are a night shift: the minutes after
 * midnight belong to the day the shift started, the local day before
 * (Saturday 02:00 is Friday night's under Mon-Fri, Monday 02:00 Sunday
 * night's). */
static bool hours_hold(const struct off_hours_cfg *o, int64_t reading)
{
    int64_t days = day_of_reading(reading);
    int m = (int)((reading - days * DAY_S) / 60);
    int day = (int)(((days % 7) + 7 + 3) % 7); /* 1970-01-01 was a Thursday; Monday = 0 */
    bool wraps = o->start_min > o->end_min;    /* equal ends are refused by the loader */
    bool in_hours =
        wraps ? (m >= o->start_min || m < o->end_min) : (m >= o->start_min && m < o->end_min);
    if (wraps && m < o->end_min)
        day = (day + 6) % 7;
    return in_hours && ((o->days_mask >> day) & 1u);
}

/* The first reading after <reading> at <min> minutes past midnight. */
static int64_t next_reading_at(int64_t reading, int min)
{
    int64_t at = day_of_reading(reading) * DAY_S + (int64_t)min * 60;
    return at > reading ? at : at + DAY_S;
}

/* A reading that falls in <o>'s hours just when the furthest the clock
 * has shown by <t> does (<now>: <t> in the zone). That is <t>'s own,
 * unless the clock went back within SET_BACK_MAX_S (summer time ending)
 * and shows again what it showed before: then it is the last start or
 * end of the hours that the clock reached before it went back, when it
 * reached one ahead of <t>'s reading. Else a shift 22:00-01:30 in New
 * York, ended at 01:30 EDT, would start again at 01:00 EST for half an
 * hour, and hours 01:30-09:00, begun at 01:30 EDT, would stop then for
 * half an hour, each write an alert. At most one change of clocks within
 * SET_BACK_MAX_S, as in every zone. */
static int64_t reading_reached(const struct off_hours_cfg *o, time_t t, const struct tm *now)
{
    int64_t reading = reading_at(t, now);
    int64_t start = next_reading_at(reading, o->start_min);
    int64_t end = next_reading_at(reading, o->end_min);
    int64_t ahead[2] = {start < end ? start : end, start < end ? end : start};
    /* the normal path: no start or end within a step back of the clock,
     * so none can have been reached ahead of it, and one conversion */
    if (ahead[0] >= reading + SET_BACK_MAX_S)
        return reading;
    struct tm before;
    if (zone_localtime(o->tz, t - SET_BACK_MAX_S, &before) != 0)
        return reading;
    long back = before.tm_gmtoff - now->tm_gmtoff; /* seconds the clock went back */
    if (back <= 0 || back > SET_BACK_MAX_S)
        return reading;
    int64_t reached = reading;
    for (size_t i = 0; i < 2 && ahead[i] < reading + back; i++) {
        /* when the clock, still on the offset before, read it: after
         * <t> - <back>, before <t>; reached when that offset held then */
        struct tm then;
        time_t first = (time_t)(ahead[i] - before.tm_gmtoff);
        if (zone_localtime(o->tz, first, &then) != 0 || then.tm_gmtoff != before.tm_gmtoff)
            break;
        reached = ahead[i];
    }
    return reached;
}

/* Whether <t> is outside <o>'s working hours; <*zone> gets
 * zone_localtime()'s outcome (1: the zone's file could not be read, and
 * UTC judged it). */
static bool off_hours_in(const struct off_hours_cfg *o, time_t t, int *zone)
{
    struct tm tm;
    *zone = zone_localtime(o->tz, t, &tm);
    if (*zone < 0)
        return false;
    return !hours_hold(o, reading_reached(o, t, &tm));
}

bool detectors_off_hours(const struct off_hours_cfg *o, time_t t)
{
    int zone;
    return off_hours_in(o, t, &zone);
}

/* Says once, until it can be read again, that the zone's file cannot be
 * read: the loader checked it, but a tzdata upgrade may remove or replace
 * it while the gateway runs, and glibc then goes by UTC without a word. */
static void tell_zone(struct detectors *d, int zone)
{
    if (zone == 0)
        d->oh_zone_told = false;
    if (zone != 1 || d->oh_zone_told)
        return;
    d->oh_zone_told = true;
    fprintf(stderr,
            "sluice: alerts.off_hours.tz '%s': %s%s can no longer be read as a time zone "
            "(removed or replaced since the policy loaded?): off-hours writes are judged by "
            "UTC until it can be read again\n",
            d->cfg.off_hours.tz, POLICY_ZONEINFO_DIR, d->cfg.off_hours.tz);
}

static bool off_hours_now(struct detectors *d, int64_t now_ms)
{
    int64_t minute = now_ms / MINUTE_MS;
    if (minute != d->oh_minute) {
        int zone;
        d->oh_minute = minute;
        d->oh_result = off_hours_in(&d->cfg.off_hours, (time_t)(now_ms / 1000), &zone);
        tell_zone(d, zone);
    }
    return d->oh_result;
}

/* ---- baseline ----------------------------------------------------------- */

static double alpha_of(const struct baseline_cfg *b)
{
    double learn = b->learn_ms > 0 ? (double)b->learn_ms : 1.0;
    return 1.0 - exp(-(double)MINUTE_MS / learn);
}

/* Folds the minutes that ended before <minute> into the averages. */
static void baseline_roll(struct detectors *d, struct agent_state *a, int64_t now_ms)
{
    int64_t minute = now_ms / MINUTE_MS;
    if (!a->bl_known) {
        a->bl_known = true;
        a->bl.req_avg = a->bl.bytes_avg = 0;
        a->bl.since_ms = now_ms;
        a->bl.minute = minute;
        a->cur_req = a->cur_bytes = 0;
        a->bl_dirty = true;
    }
    if (minute <= a->bl.minute) {
        if (minute < a->bl.minute) {
            /* The clock went back (or the row was stored while it was
             * ahead): restart the minute, and move the start of learning
             * back as far, so that the baseline stays learned for as long
             * as it was, not for none until the clock catches up. */
            int64_t back = a->bl.minute - minute; /* minutes; a stored one may be huge */
            a->bl.since_ms =
                back <= a->bl.since_ms / MINUTE_MS ? a->bl.since_ms - back * MINUTE_MS : 0;
            a->bl.minute = minute;
            a->bl_dirty = true;
        }
        return;
    }
    int64_t first = a->bl.since_ms / MINUTE_MS;
    if (a->bl.minute == first && a->bl.since_ms % MINUTE_MS != 0) {
        /* Learning began within that minute: its count is part of a
         * minute's, and would seed the average low. Learning starts over
         * at the next minute, the first full one, which seeds it. */
        a->bl.since_ms = (first + 1) * MINUTE_MS;
        a->bl.minute = first + 1;
        a->cur_req = a->cur_bytes = 0;
        a->bl_dirty = true;
        if (minute == a->bl.minute)
            return; /* it is running now */
        /* else it ended idle: it seeds a zero, below */
    }
    double al = alpha_of(&d->cfg.baseline);
    if (a->bl.minute == a->bl.since_ms / MINUTE_MS) {
        /* the first minute seeds the averages (an average from 0 would lag) */
        a->bl.req_avg = (double)a->cur_req;
        a->bl.bytes_avg = (double)a->cur_bytes;
    } else {
        a->bl.req_avg += al * ((double)a->cur_req - a->bl.req_avg);
        a->bl.bytes_avg += al * ((double)a->cur_bytes - a->bl.bytes_avg);
    }
    int64_t idle = minute - a->bl.minute - 1;
    if (idle > 0) {
        double keep = pow(1.0 - al, (double)(idle < 100000 ? idle : 100000));
        a->bl.req_avg *= keep;
        a->bl.bytes_avg *= keep;
    }
    a->bl.minute = minute;
    a->cur_req = a->cur_bytes = 0;
    a->bl_dirty = true;
    if (d->store != NULL) {
        store_put_baseline(d->store, a->id, &a->bl);
        a->bl_dirty = false;
    }
}

static bool baseline_warm(const struct detectors *d, const struct agent_state *a, int64_t now_ms)
{
    /* since_ms >= 0 (a stored row with a negative one is relearned): no overflow;
     * compared unsigned, so that no learn_ms turns negative */
    return a->bl_known && now_ms >= a->bl.since_ms &&
           (uint64_t)(now_ms - a->bl.since_ms) >= d->cfg.baseline.learn_ms &&
           a->bl.minute > a->bl.since_ms / MINUTE_MS;
}

static void baseline_check(struct detectors *d, struct agent_state *a, const char *host,
                           int64_t now_ms)
{
    const struct baseline_cfg *b = &d->cfg.baseline;
    if (!baseline_warm(d, a, now_ms))
        return;
    char detail[DETAIL_MAX];
    double req_lim = b->factor * a->bl.req_avg, bytes_lim = b->factor * a->bl.bytes_avg;
    /* over floor KiB, by division: the policy's floor may be up to 2^64 - 1,
     * and floor x 1024 wrapped (a floor of 2^54 KiB was 0 bytes) */
    bool bytes_over_floor = a->cur_bytes > 0 && (a->cur_bytes - 1) / BYTES_FLOOR_K >= b->floor;
    if ((double)a->cur_req > req_lim && a->cur_req > b->floor) {
        snprintf(detail, sizeof(detail),
                 "%s made %llu requests this minute, over %.4g x its baseline of %.1f/min "
                 "(floor %llu)",
                 a->id, (unsigned long long)a->cur_req, b->factor, a->bl.req_avg,
                 (unsigned long long)b->floor);
    } else if ((double)a->cur_bytes > bytes_lim && bytes_over_floor) {
        snprintf(detail, sizeof(detail),
                 "%s moved %llu bytes this minute, over %.4g x its baseline of %.0f bytes/min "
                 "(floor %llu KiB)",
                 a->id, (unsigned long long)a->cur_bytes, b->factor, a->bl.bytes_avg,
                 (unsigned long long)b->floor);
    } else {
        return;
    }
    struct alert al = {.kind = ALERT_BASELINE,
                       .severity = SEVERITY_MEDIUM,
                       .agent = a->id,
                       .host = host,
                       .tier = TIER_NONE,
                       .detail = detail};
    raise_alert(d, &al, NULL, MINUTE_MS, now_ms);
}

/* ---- the detectors ------------------------------------------------------- */

/* True when <ev> is a refusal auth_failures counts: auth_required for
 * credentials the request presented that identify no agent (a secret
 * matching none, unreadable, or Basic with an empty password), not one
 * without credentials or whose value holds no token (a client not set
 * up, not a guess) nor a tunnel
 * decided again (the policy's act). */
static bool counts_auth_failure(const struct egress_event *ev)
{
    return ev->verdict == VERDICT_DENY && ev->reason == REASON_AUTH_REQUIRED && ev->credentials &&
           ev->agent == NULL && !ev->redecided && !ev->again;
}

/* Raises <a>, an auth_failures alert for the source of <fold_key>, folded
 * in that source's period. Sources are the clients' choice (any address of
 * 127.0.0.0/8 on this host; the /64s of an IPv6 /48), and a guesser that
 * tripped max from each of thousands put a line per source into every
 * sink, as per-host kinds did per made-up host (raise_per_host()). Past
 * DETECT_SOURCES_BURST sources' lines within a minute, the alerts of
 * sources without a running period fold by kind over the minute, the
 * first written at once, saying so (<detail>, <len>: the buffer <a>
 * points to); the period's summary counts the rest. <trip>: as for
 * raise_keyed(). */
static void raise_per_source(struct detectors *d, struct alert *a, const char *fold_key, bool trip,
                             char *detail, size_t len, int64_t now_ms)
{
    const struct burst_fold by_source = {&d->source_lines, DETECT_SOURCES_BURST, "sources",
                                         "they are"};
    raise_bounded(d, a, fold_key, d->cfg.auth_failures.per_ms, trip, &by_source, detail, len,
                  now_ms);
}

/* Counts the refusal <ev> against its source and alerts past the max. The
 * detail names the source, the count and the window, and of the request
 * only its method, host and port: nothing of its credentials. */
static void auth_failure(struct detectors *d, const struct egress_event *ev, int64_t now_ms)
{
    const struct threshold *t = &d->cfg.auth_failures;
    enum source_kind kind;
    struct ipaddr key;
    struct source_state *s = source_get(d, ev->source, now_ms, &kind, &key);
    uint64_t n = window_add(&s->fails, now_ms, 1);
    if (n <= t->max)
        return;
    /* net: an address and "/64"; from: the longest, the overflow's text and an address */
    char last[IPADDR_STRLEN] = "?", net[IPADDR_STRLEN + 4], from[2 * IPADDR_STRLEN + 64];
    char detail[DETAIL_MAX], per[32], hp[HOST_PORT_MAX];
    const char *fold_key = from;
    if (ev->source != NULL)
        ipaddr_format(ev->source, last, sizeof(last));
    if (kind == SOURCE_UNIX) {
        snprintf(from, sizeof(from), "the unix socket's clients");
    } else if (kind == SOURCE_OVERFLOW) {
        snprintf(from, sizeof(from), "sources past the %u tracked, counted together (the last %s)",
                 (unsigned)DETECT_SOURCES_MAX, last);
        fold_key = "overflow";
    } else if (ipaddr_is_v4(&key)) {
        snprintf(from, sizeof(from), "%s", last);
    } else {
        struct cidr c64 = {.addr = key, .prefix = 64};
        cidr_format(&c64, net, sizeof(net));
        snprintf(from, sizeof(from), "%s (the last %s)", net, last);
        fold_key = net;
    }
    snprintf(detail, sizeof(detail),
             "%llu requests from %s within %s (max %llu) presented credentials that identify no "
             "agent (a token that matches none, unreadable, or Basic with an empty password): "
             "someone may be guessing tokens; the last: %s %s",
             (unsigned long long)n, from, period_text(t->per_ms, per, sizeof(per)),
             (unsigned long long)t->max, ev->method ? ev->method : "?",
             host_port(ev->host, ev->port, hp, sizeof(hp)));
    struct alert al = {.kind = ALERT_AUTH_FAILURES,
                       .severity = SEVERITY_HIGH,
                       .host = ev->host,
                       .tier = ev->tier,
                       .id = ev->id,
                       .detail = detail};
    raise_per_source(d, &al, fold_key, n - 1 <= t->max, detail, sizeof(detail), now_ms);
}

/* Counts <bytes> that <ev>'s exchange sent upstream (a request head, or
 * bodies and tunnel data) in <w>'s upload window (its agent's, or
 * d->slotless); alerts past the max. */
static void upload_count(struct detectors *d, struct agent_state *w, const struct egress_event *ev,
                         uint64_t bytes, int64_t now_ms)
{
    const struct threshold *t = &d->cfg.upload_bytes;
    uint64_t n = window_add(&w->uploads, now_ms, bytes);
    if (n <= t->max)
        return;
    char detail[DETAIL_MAX], per[32], who[AGENT_ID_MAX + 80], hp[HOST_PORT_MAX];
    snprintf(detail, sizeof(detail),
             "%s sent %llu bytes upstream (request heads included) within %s (max %llu); the "
             "last to %s",
             counted_as(d, w, ev->agent, who, sizeof(who)), (unsigned long long)n,
             period_text(t->per_ms, per, sizeof(per)), (unsigned long long)t->max,
             host_port(ev->host, ev->port, hp, sizeof(hp)));
    struct alert al = {.kind = ALERT_UPLOAD_BYTES,
                       .severity = SEVERITY_HIGH,
                       .agent = ev->agent,
                       .host = ev->host,
                       .tier = ev->tier,
                       .id = ev->id,
                       .detail = detail};
    raise_per_agent(d, w, &al, t->per_ms, n - bytes <= t->max, now_ms);
}

static void on_egress(struct detectors *d, const struct egress_event *ev, int64_t now_ms)
{
    const struct cfg *c = &d->cfg;
    bool passed = ev->verdict != VERDICT_DENY;
    bool write = (ev->method_bit & DETECT_WRITES) != 0;
    char what[WHAT_MAX], detail[DETAIL_MAX], grant[OWNER_SHOWN + 60], per[32];
    struct agent_state *a =
        ev->agent != NULL ? agent_get(d, ev->agent, agent_hash_of_event(ev), now_ms) : NULL;

    what[0] = '\0'; /* describe(): on the way to an alert, not on every request */
    struct alert al = {.agent = ev->agent, .host = ev->host, .tier = ev->tier, .id = ev->id};

    /* A tunnel's line again (decided again): its contact was told with its first. */
    int fresh = c->first_contact && !ev->again && ev->agent != NULL && ev->host != NULL
                    ? contact_set_add(&d->contacts, ev->agent, ev->host)
                    : 0;
    const char *how = passed ? verdict_name(ev->verdict) : "denied";
    char hp[HOST_PORT_MAX];
    if (fresh != 0) {
        host_port(ev->host, ev->port, hp, sizeof(hp));
        al.kind = ALERT_FIRST_CONTACT;
        al.severity = passed ? SEVERITY_LOW : SEVERITY_MEDIUM;
        al.detail = detail;
    }
    if (fresh > 0) {
        if (d->store != NULL)
            store_put_contact(d->store, ev->agent, ev->host, now_ms);
        /* Not folded (period 0): a pair contacts first once, so there is
         * never a repeat to fold, and a fold entry per pair would let an
         * agent fill the fold table with made-up hosts. But one request
         * each to thousands of made-up hosts would be thousands of lines
         * to every sink, a real alert queued behind them: past
         * DETECT_CONTACTS_BURST in a minute, an agent's first contacts
         * fold per agent and minute (each is still remembered, and in
         * the decision log). An agent without a window of its own (every
         * agent tracked busy) counts with the others so placed: uncounted,
         * each of its first contacts was a line, and an agent that kept
         * the table busy with sibling agents flooded the sinks so. */
        struct window *counted = a != NULL ? &a->contacts : &d->slotless.contacts;
        uint64_t n = window_add(counted, now_ms, 1);
        if (n > DETECT_CONTACTS_BURST) {
            char among[96] = "";
            if (a == NULL)
                snprintf(among, sizeof(among), " of agents past the %u tracked, counted together",
                         (unsigned)DETECT_AGENTS_MAX);
            snprintf(detail, sizeof(detail),
                     "%s contacted %s for the first time (%s, %s): over %u first contacts%s "
                     "within 1m, so this agent's first contacts are folded per minute",
                     ev->agent, hp, ev->method ? ev->method : "?", how,
                     (unsigned)DETECT_CONTACTS_BURST, among);
            raise_alert(d, &al, NULL, MINUTE_MS, now_ms);
        } else {
            snprintf(detail, sizeof(detail), "%s contacted %s for the first time (%s, %s)",
                     ev->agent, hp, ev->method ? ev->method : "?", how);
            raise_alert(d, &al, ev->host, 0, now_ms);
        }
    } else if (fresh < 0) {
        /* Memory for pairs is full (an agent may have filled it with
         * made-up hosts to hide a real first contact): a pair not
         * remembered is still told, folded per agent and minute. */
        snprintf(detail, sizeof(detail),
                 "%s contacted %s, which it may not have contacted before (%s, %s): "
                 "first-contact memory is full (%u pairs or %u MiB of names), so this agent's "
                 "contacts with hosts not remembered are folded per minute",
                 ev->agent, hp, ev->method ? ev->method : "?", how, (unsigned)DETECT_CONTACTS_MAX,
                 (unsigned)(CONTACT_SET_BYTES_MAX >> 20));
        raise_alert(d, &al, NULL, MINUTE_MS, now_ms);
    }
    if (c->present && passed && ev->tier == TIER_3) {
        describe(ev, what, sizeof(what));
        grant_text(ev, grant, sizeof(grant));
        snprintf(detail, sizeof(detail), "%s by %s (%s)", what, agent_shown(ev->agent), grant);
        al.kind = ALERT_TIER3_WRITE;
        al.severity = SEVERITY_HIGH;
        al.detail = detail;
        raise_per_host(d, a, HOSTS_TIER3, &al, ev->host, detail, sizeof(detail), now_ms);
    }
    /* Not c->present: the SPEC's "a grant past its expiry denies and
     * raises an alert" holds for every policy; without an alerts: section
     * an expired grant was denied without a word, and for an agent in
     * report mode let through with none. */
    if (ev->reason == REASON_GRANT_EXPIRED) {
        describe(ev, what, sizeof(what));
        grant_text(ev, grant, sizeof(grant));
        snprintf(detail, sizeof(detail), "%s by %s hit an expired grant (%s)", what,
                 agent_shown(ev->agent), grant);
        al.kind = ALERT_GRANT_EXPIRED;
        al.severity = SEVERITY_HIGH;
        al.detail = detail;
        raise_per_host(d, a, HOSTS_EXPIRED, &al, ev->host, detail, sizeof(detail), now_ms);
    }
    /* A write decided again (an upload in report mode whose rule a reload
     * took away) is the write already judged at its first line, not one
     * more: a second off_hours_write for it was a duplicate. */
    if (c->off_hours.set && passed && write && !ev->again && off_hours_now(d, now_ms)) {
        describe(ev, what, sizeof(what));
        snprintf(detail, sizeof(detail), "%s by %s outside working hours (%s %02d:%02d-%02d:%02d)",
                 what, agent_shown(ev->agent), c->off_hours.tz ? c->off_hours.tz : "UTC",
                 c->off_hours.start_min / 60, c->off_hours.start_min % 60,
                 c->off_hours.end_min / 60, c->off_hours.end_min % 60);
        al.kind = ALERT_OFF_HOURS_WRITE;
        al.severity = SEVERITY_MEDIUM;
        al.detail = detail;
        raise_per_host(d, a, HOSTS_OFF_HOURS, &al, ev->host, detail, sizeof(detail), now_ms);
    }
    if (c->auth_failures.set && counts_auth_failure(ev))
        auth_failure(d, ev, now_ms);
    if (ev->agent == NULL)
        return;
    /* whose windows count it: an agent without its own counts with the others so placed */
    struct agent_state *w = a != NULL ? a : &d->slotless;
    char who[AGENT_ID_MAX + 80];
    /* The head of a request let through: its path and headers are the
     * agent's to fill, and bytes_up leaves them out. A plain request's
     * goes upstream (rewritten); a CONNECT's stays with the gateway but
     * counts too, one measure for both, erring toward the alert. Counted
     * once, at its first verdict (not when a tunnel is decided again). */
    if (c->upload_bytes.set && passed && !ev->again && ev->head_bytes > 0)
        upload_count(d, w, ev, ev->head_bytes, now_ms);
    /* A new verdict on a write already counted (an upload decided again,
     * reported) is not one more write. */
    if (c->write_burst.set && passed && write && !ev->again) {
        uint64_t n = window_add(&w->writes, now_ms, 1);
        if (n > c->write_burst.max) {
            describe(ev, what, sizeof(what));
            snprintf(detail, sizeof(detail),
                     "%s made %llu write requests within %s (max %llu); the last: %s",
                     counted_as(d, w, ev->agent, who, sizeof(who)), (unsigned long long)n,
                     period_text(c->write_burst.per_ms, per, sizeof(per)),
                     (unsigned long long)c->write_burst.max, what);
            al.kind = ALERT_WRITE_BURST;
            al.severity = SEVERITY_MEDIUM;
            al.detail = detail;
            raise_per_agent(d, w, &al, c->write_burst.per_ms, n - 1 <= c->write_burst.max, now_ms);
        }
    }
    if (c->denied_burst.set && bus_counts_denial(ev)) { /* the quarantine's set */
        uint64_t n = window_add(&w->denials, now_ms, 1);
        if (n > c->denied_burst.max) {
            describe(ev, what, sizeof(what));
            snprintf(detail, sizeof(detail),
                     "%s %s denied %llu times within %s (max %llu); the last: %s (%s)",
                     counted_as(d, w, ev->agent, who, sizeof(who)), w == a ? "was" : "were",
                     (unsigned long long)n, period_text(c->denied_burst.per_ms, per, sizeof(per)),
                     (unsigned long long)c->denied_burst.max, what,
                     ev->reason != REASON_NONE ? reason_name(ev->reason) : "denied");
            al.kind = ALERT_DENIED_BURST;
            al.severity = SEVERITY_MEDIUM;
            al.detail = detail;
            raise_per_agent(d, w, &al, c->denied_burst.per_ms, n - 1 <= c->denied_burst.max,
                            now_ms);
        }
    }
    if (a != NULL && c->baseline.set && !ev->again) { /* a new verdict, not a new request */
        baseline_roll(d, a, now_ms);
        a->cur_req++;
        baseline_check(d, a, ev->host, now_ms);
    }
}

static void on_bytes(struct detectors *d, const struct egress_event *ev, int64_t now_ms)
{
    const struct cfg *c = &d->cfg;
    struct agent_state *a =
        ev->agent != NULL ? agent_get(d, ev->agent, agent_hash_of_event(ev), now_ms) : NULL;
    uint64_t bytes = ev->kind == EVENT_EGRESS_PROGRESS ? ev->bytes_up : ev->bytes_down;
    if (ev->agent == NULL || bytes == 0)
        return;
    if (c->upload_bytes.set && ev->kind == EVENT_EGRESS_PROGRESS)
        upload_count(d, a != NULL ? a : &d->slotless, ev, bytes, now_ms);
    if (a != NULL && c->baseline.set) {
        baseline_roll(d, a, now_ms);
        a->cur_bytes += bytes;
        baseline_check(d, a, ev->host, now_ms);
    }
}

void detectors_feed(struct detectors *d, const struct egress_event *ev, int64_t now_ms)
{
    if (ev->kind == EVENT_EGRESS)
        on_egress(d, ev, now_ms);
    else
        on_bytes(d, ev, now_ms);
}

void detectors_on_event(const struct egress_event *ev, void *arg)
{
    detectors_feed(arg, ev, bus_event_ms(ev)); /* the quarantine's time for it */
}

void detectors_tick(struct detectors *d, int64_t now_ms)
{
    fold_expire(&d->fold, now_ms, emit, d);
    if (!d->cfg.baseline.set)
        return;
    for (size_t i = 0; i < d->nagents; i++) {
        struct agent_state *a = &d->agents[i];
        if (a->bl_known && now_ms / MINUTE_MS > a->bl.minute)
            baseline_roll(d, a, now_ms);
    }
}

void detectors_flush(struct detectors *d, int64_t now_ms)
{
    fold_flush(&d->fold, now_ms, emit, d);
    if (!d->cfg.baseline.set)
        return;
    for (size_t i = 0; i < d->nagents; i++) {
        struct agent_state *a = &d->agents[i];
        if (!a->bl_known)
            continue;
        /* minutes that really ended are folded in (and stored); the running
         * one is not: a restart within it starts it again from zero */
        baseline_roll(d, a, now_ms);
        if (a->bl_dirty && d->store != NULL) {
            store_put_baseline(d->store, a->id, &a->bl);
            a->bl_dirty = false;
        }
    }
}

int detectors_grants_daily(struct detectors *d, const struct policy *p, int64_t now_ms)
{
    if (day_of((time_t)(now_ms / 1000)) == d->grants_day)
        return -1;
    return detectors_grants(d, p, now_ms);
}

int detectors_grants(struct detectors *d, const struct policy *p, int64_t now_ms)
{
    int n = 0;
    int32_t today = day_of((time_t)(now_ms / 1000));
    d->grants_day = today;
    if (!d->cfg.present)
        return 0;
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        if (!r->has_expires)
            continue;
        int32_t left = lint_days_left(r, today);
        if (left < 0 || left > d->cfg.warn_days)
            continue;
        char date[16], detail[DETAIL_MAX];
        format_date(r->expires, date, sizeof(date));
        const char *owner = r->owner ? r->owner : "none";
        snprintf(detail, sizeof(detail),
                 "rules[%zu] %s (owner %.*s%s) expires on %s: %d day%s left", r->index, r->pattern,
                 owner_shown(owner), owner, strlen(owner) > OWNER_SHOWN ? "..." : "", date,
                 (int)left, left == 1 ? "" : "s");
        struct alert al = {.kind = ALERT_GRANT_EXPIRING,
                           .severity = left <= 3 ? SEVERITY_MEDIUM : SEVERITY_LOW,
                           .host = r->pattern,
                           .tier = r->tier,
                           .detail = detail,
                           .count = 1};
        emit(&al, d);
        n++;
    }
    return n;
}
