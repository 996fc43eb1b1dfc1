#include "shape/quota.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "policy/host.h"
#include "policy/policy.h"
#include "shape/bucket.h"
#include "shape/ghosts.h"
#include "util/units.h"
#include "util/zalloc.h"
#include "watch/bus.h"
#include "watch/window.h"

#define NSLOTS                1024u /* hash chains (a power of two) */
#define NS_PER_MS             1000000ull
#define NS_PER_S              1000000000ull
#define KEY_AGENT             'A'
#define KEY_RULE              'R'
#define FLOW_MIN_WAIT_MS      1
#define FLOW_MAX_WAIT_MS      1000  /* a paused flow looks again at least this often */
#define DENIED_DEFAULT_PER_MS 60000 /* without denied_burst (the loader gives it a per) */
#define EVICT_BATCH           64    /* least recently used entries dropped at once, at most */
/* the agent's limits, its rule's, and those of the rules a tunnel may carry
 * requests of (struct decision's limits) */
#define SLOTS (2 + DECISION_LIMITS_MAX)

typedef unsigned __int128 u128;

/* The longest agent id and host pattern ("*." and a name), one port and
 * every method fit in a key on the stack, NUL included. */
_Static_assert(QUOTA_KEY_INLINE >= 1 + AGENT_ID_MAX + 1 + 2 + HOST_MAX + sizeof("|65535|ffffffff|"),
               "a key of the longest agent id and host fits on the stack");

/* The rate a bucket pair was last configured with. */
struct spec {
    uint64_t requests, per_ms, burst, bandwidth;
};

struct qentry {
    struct qentry *next; /* hash chain */
    uint64_t hash;
    size_t keylen;
    unsigned refs; /* flows holding it: never dropped while > 0 */
    uint64_t used_ns;
    struct spec spec;
    struct bucket req, bw;
    bool bw_off; /* the policy in force limits no bandwidth here: flows pass it by */
    /* agent entries: quarantine and the denial window */
    uint64_t q_until_ns;
    uint64_t denied_ns; /* monotonic time of the last denial counted; 0: none */
    struct window denials;
    char key[]; /* KEY_AGENT or KEY_RULE, then the agent id, NUL, the rule identity; NUL */
};

struct quota {
    const struct alert_bus *alerts;
    struct event_base *base;
    size_t max_entries, nentries;
    size_t scans;    /* evict()'s scans of the table, for tests */
    size_t evict_at; /* evict() scans once the table holds this many */
    struct qentry *slots[NSLOTS];
    /* What was forgotten of entries dropped before they came to rest:
     * made the first time one is (most tables never fill). */
    struct ghosts *ghosts;
    bool denied_set; /* alerts.denied_burst present: denials are counted */
    uint64_t denied_max, denied_per_ms, quarantine_ns;
    uint64_t q_until_max;     /* no quarantine runs past this: the fast path */
    struct quota_flow *flows; /* every open flow, for quota_reshape() */
    size_t nwaiting;          /* flows whose timer is armed (quota_flow_paused()) */
};

struct quota_flow {
    struct quota *q;
    struct quota_flow *prev, *next; /* q->flows */
    const char *agent_id;           /* borrowed: outlives the flow */
    /* Borrowed: NULL (the agent's), the deciding rule (NULL: none), then
     * the other rules whose limits hold it; their identities, for a reload. */
    const struct rule *rules[SLOTS];
    unsigned nslots;         /* of rules[] and the arrays below: 2 and more */
    struct qentry *e[SLOTS]; /* agent, rule, the others; any may be NULL */
    /* The bandwidth (bytes a second) of a limit that applies through
     * entry <i> but whose entry could not be made (out of memory): the
     * flow lets nothing through until it is (flow_make_missing()). */
    uint64_t missing_bw[SLOTS];
    /* The entries quota_reshape_prepare() made and holds for its commit:
     * the limits the reloaded policy brings to this flow. */
    struct qentry *staged[SLOTS];
    struct event *timer;
    bool armed;
    void (*cb)(void *arg);
    void *arg;
};

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    u128 p = (u128)a * b;
    return p > UINT64_MAX ? UINT64_MAX : (uint64_t)p;
}

uint64_t quota_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

struct quota *quota_new(const struct alert_bus *alerts, struct event_base *base, size_t max_entries)
{
    struct quota *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    q->alerts = alerts;
    q->base = base;
    q->max_entries = max_entries > 0 ? max_entries : QUOTA_DEFAULT_MAX;
    q->evict_at = q->max_entries;
    return q;
}

static void entry_free(struct qentry *e)
{
    free(e);
}

void quota_free(struct quota *q)
{
    if (q == NULL)
        return;
    for (size_t i = 0; i < NSLOTS; i++) {
        struct qentry *e = q->slots[i];
        while (e != NULL) {
            struct qentry *next = e->next;
            entry_free(e);
            e = next;
        }
    }
    ghosts_free(q->ghosts);
    free(q);
}

void quota_configure(struct quota *q, const struct policy *p)
{
    const struct threshold *t = &p->alerts.denied_burst;
    q->denied_set = t->set;
    q->denied_max = t->set ? t->max : 0;
    q->denied_per_ms = t->per_ms > 0 ? t->per_ms : DENIED_DEFAULT_PER_MS;
    q->quarantine_ns = sat_mul(p->limits.quarantine_ms, NS_PER_MS);
    /* As the detector does (detectors_configure): windows are kept across a
     * reload, and started over when their period changed: then empty, and
     * quiet (window_quiet()), so the entry may go. */
    for (size_t i = 0; i < NSLOTS; i++)
        for (struct qentry *e = q->slots[i]; e != NULL; e = e->next)
            if (e->denied_ns != 0 && e->denials.per_ms != q->denied_per_ms) {
                window_init(&e->denials, q->denied_per_ms);
                e->denied_ns = 0;
            }
}

size_t quota_entries(const struct quota *q)
{
    return q->nentries;
}

size_t quota_scans(const struct quota *q)
{
    return q->scans;
}

/* --- keys ------------------------------------------------------------------ */

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Appends what fits of <s> (<n> bytes) at <*len>; counts all of it. */
static void put(char *buf, size_t cap, size_t *len, const char *s, size_t n)
{
    if (*len < cap) {
        size_t room = cap - *len;
        memcpy(buf + *len, s, n < room ? n : room);
    }
    *len += n;
}

/* Writes <v> in lower-case hex at <out> (8 digits at most), without a
 * NUL; returns the digits written. */
static size_t format_hex(char *out, unsigned v)
{
    static const char digits[] = "0123456789abcdef";
    size_t n = 1;
    for (unsigned t = v >> 4; t != 0; t >>= 4)
        n++;
    for (size_t i = n; i-- > 0; v >>= 4)
        out[i] = digits[v & 0xf];
    return n;
}

size_t quota_rule_identity(const struct rule *r, char *buf, size_t cap)
{
    /* No printf: a rule's key is built on every request it admits
     * (snprintf() was half of what shaping cost a request). */
    size_t len = 0;
    char num[2 + FORMAT_UINT_MAX];
    const char *pat = r->pattern != NULL ? r->pattern : "";
    put(buf, cap, &len, pat, strlen(pat));
    put(buf, cap, &len, "|", 1);
    for (size_t i = 0; i < r->nports; i++) {
        size_t n = 0;
        if (i > 0)
            num[n++] = ',';
        n += format_uint(num + n, r->ports[i], 0);
        put(buf, cap, &len, num, n);
    }
    size_t n = 0;
    num[n++] = '|';
    n += format_hex(num + n, r->methods);
    num[n++] = '|';
    put(buf, cap, &len, num, n);
    for (size_t i = 0; i < r->nagents; i++) {
        if (i > 0)
            put(buf, cap, &len, "\x1f", 1);
        put(buf, cap, &len, r->agents[i], strlen(r->agents[i]));
    }
    if (cap > 0)
        buf[len < cap ? len : cap - 1] = '\0';
    return len;
}

/* A key being looked up: built on the stack when it fits (every lookup
 * of an entry that exists allocates nothing), else in memory of its own. */
struct key {
    char *s; /* <buf>, or a longer key's own memory (key_release()) */
    size_t len;
    uint64_t hash;
    char buf[QUOTA_KEY_INLINE];
};

/* Writes the key of <agent_id> (<alen> bytes; and <r> when not NULL) into
 * <buf> (<cap> bytes, NUL-terminated when it fits); returns its length,
 * or the length it needs when that is >= <cap>. */
static size_t key_write(char *buf, size_t cap, const char *agent_id, size_t alen,
                        const struct rule *r)
{
    size_t len = 0;
    char kind = r != NULL ? KEY_RULE : KEY_AGENT;
    put(buf, cap, &len, &kind, 1);
    put(buf, cap, &len, agent_id, alen);
    if (r == NULL) {
        if (len < cap)
            buf[len] = '\0';
        return len;
    }
    put(buf, cap, &len, "", 1); /* the NUL between the agent id and the identity */
    return len + quota_rule_identity(r, len < cap ? buf + len : NULL, len < cap ? cap - len : 0);
}

/* Builds the key of <agent_id> (and <r> when not NULL) into <k>. Returns 0,
 * or -1 when out of memory (a key longer than k->buf). */
static int key_build(struct key *k, const char *agent_id, const struct rule *r)
{
    size_t alen = strlen(agent_id);
    k->s = k->buf;
    k->len = key_write(k->buf, sizeof(k->buf), agent_id, alen, r);
    if (k->len >= sizeof(k->buf)) {
        if ((k->s = malloc(k->len + 1)) == NULL)
            return -1;
        key_write(k->s, k->len + 1, agent_id, alen, r);
    }
    k->hash = fnv1a(k->s, k->len);
    return 0;
}

/* Frees what key_build() allocated for a long key. */
static void key_release(struct key *k)
{
    if (k->s != k->buf)
        free(k->s);
}

/* --- the table ------------------------------------------------------------- */

static struct qentry *find(struct quota *q, const char *key, size_t len, uint64_t h)
{
    for (struct qentry *e = q->slots[h & (NSLOTS - 1)]; e != NULL; e = e->next)
        if (e->hash == h && e->keylen == len && memcmp(e->key, key, len) == 0)
            return e;
    return NULL;
}

/* True when <e>'s denial window sums to nothing: no denial counted, or
 * none within twice its period and 10 ms (a window covers eleven tenths
 * of its period, each rounded up to a whole ms: window.h). */
static bool window_quiet(const struct qentry *e, uint64_t now)
{
    if (e->denied_ns == 0 || now < e->denied_ns)
        return e->denied_ns == 0;
    uint64_t span = sat_mul(e->denials.per_ms, 2 * NS_PER_MS) + 10 * NS_PER_MS;
    return now - e->denied_ns >= span;
}

static bool at_rest(const struct quota *q, struct qentry *e, uint64_t now)
{
    return e->refs == 0 && e->q_until_ns <= now && window_quiet(e, now) &&
           bucket_at_rest(&e->req, e->spec.burst, now) && bucket_at_rest(&e->bw, 0, now);
}

static void unlink_entry(struct quota *q, struct qentry *victim)
{
    struct qentry **pp = &q->slots[victim->hash & (NSLOTS - 1)];
    while (*pp != victim)
        pp = &(*pp)->next;
    *pp = victim->next;
    entry_free(victim);
    q->nentries--;
}

/* Moves entry <i> of <h> (<n> entries, a max-heap by used_ns) down to
 * its place. */
static void heap_down(struct qentry **h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < n && h[l]->used_ns > h[m]->used_ns)
            m = l;
        if (l + 1 < n && h[l + 1]->used_ns > h[m]->used_ns)
            m = l + 1;
        if (m == i)
            return;
        struct qentry *t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Makes room for one more entry: drops every entry at rest, and when that
 * frees nothing, the least recently used entries no flow holds, no
 * quarantine keeps, no denial window still counts and no bandwidth debt
 * is owed on: a batch of
 * them (a 64th of the table, at most EVICT_BATCH), so that a full table
 * of busy entries is not scanned again for each newcomer, each leaving its
 * ghost (what its buckets still lack). When none can go, or there is no
 * memory for the ghosts, nothing is dropped and the table grows past its
 * bound. */
static void evict(struct quota *q, uint64_t now)
{
    struct qentry *lru[EVICT_BATCH]; /* a max-heap: the newest of them on top */
    size_t want = q->max_entries / 64, n = 0;
    if (want > EVICT_BATCH)
        want = EVICT_BATCH;
    if (want == 0)
        want = 1;
    size_t before = q->nentries;
    q->scans++;
    for (size_t i = 0; i < NSLOTS; i++) {
        struct qentry **pp = &q->slots[i];
        while (*pp != NULL) {
            struct qentry *e = *pp;
            if (at_rest(q, e, now)) {
                *pp = e->next;
                entry_free(e);
                q->nentries--;
                continue;
            }
            /* A running quarantine is kept as a flow's entries are: an
             * agent that went quiet in it would come back unrefused. So is
             * a denial window still counting: the denied_burst detector
             * keeps its own count (detectors.c, agent_evict()), and the
             * quarantine, forgetting it, would miss the denial that trips
             * both. So is a bandwidth bucket in debt (an upload's bytes
             * moved past what it held): forgotten, the agent's next upload
             * would find a new, full bucket, the debt forgiven. At most
             * one per agent (and agent-rule pair) of the policy, and only
             * while it runs, counts or owes. */
            bool evictable = e->refs == 0 && e->q_until_ns <= now && window_quiet(e, now) &&
                             !bucket_in_debt(&e->bw, now);
            if (evictable && n < want) {
                lru[n++] = e;
                for (size_t k = n / 2; k-- > 0;)
                    heap_down(lru, n, k);
            } else if (evictable && e->used_ns < lru[0]->used_ns) {
                lru[0] = e;
                heap_down(lru, n, 0);
            }
            pp = &e->next;
        }
    }
    /* What they still owe is remembered, so that they come back no fuller
     * than they go (a bucket made anew starts full); without room for
     * that, they stay, as entries that cannot go do. */
    if (q->nentries == before && n > 0 &&
        (q->ghosts != NULL || (q->ghosts = ghosts_new(q->max_entries)) != NULL))
        for (size_t k = 0; k < n; k++) {
            struct qentry *e = lru[k];
            ghosts_keep(q->ghosts, e->hash, &e->req, e->spec.burst, &e->bw, now);
            unlink_entry(q, e);
        }
    /* The next scan waits for a batch of newcomers, as after a batch was
     * dropped, also when this one freed less: entries that cannot go
     * (held by flows, quarantines, counting windows) keep the table at its
     * bound, or entries come to rest one at a time, as fast as new ones
     * come (each request of an agent-rule pair new to the table then
     * scanned all of it to free one entry). */
    q->evict_at = q->nentries + want > q->max_entries ? q->nentries + want : q->max_entries;
}

/* Finds or creates the entry of <agent_id> (and <r>). NULL: out of memory.
 * Allocates only to create one (or for a key longer than QUOTA_KEY_INLINE). */
static struct qentry *lookup(struct quota *q, const char *agent_id, const struct rule *r,
                             uint64_t now, bool create)
{
    struct key k;
    if (key_build(&k, agent_id, r) < 0)
        return NULL;
    struct qentry *e = find(q, k.s, k.len, k.hash);
    if (e != NULL || !create) {
        key_release(&k);
        if (e != NULL)
            e->used_ns = now;
        return e;
    }
    if (q->nentries >= q->evict_at)
        evict(q, now);
    e = zalloc(sizeof(*e) + k.len + 1);
    if (e != NULL) {
        memcpy(e->key, k.s, k.len + 1);
        e->keylen = k.len;
        e->hash = k.hash;
        e->used_ns = now;
        e->next = q->slots[k.hash & (NSLOTS - 1)];
        q->slots[k.hash & (NSLOTS - 1)] = e;
        q->nentries++;
    }
    key_release(&k);
    return e;
}

/* Brings <e>'s request bucket to the rate <rs> (a reload may have changed
 * it). Only admissions do, under a rate with a request limit: an upload's
 * flow, under one with only a bandwidth, would turn the bucket off, and a
 * later reload bringing the limit back would find it full, where a reload
 * never grants tokens. A bucket made here (full) is brought down to what
 * <q> forgot of its key (ghosts.h). */
static void apply_requests(const struct quota *q, struct qentry *e, const struct rate_spec *rs,
                           uint64_t now)
{
    uint64_t per_ms = rs->per_ms > 0 ? rs->per_ms : 1000;
    if (rs->requests != e->spec.requests || per_ms != e->spec.per_ms ||
        rs->burst != e->spec.burst) {
        bool made = bucket_is_off(&e->req);
        bucket_reconfigure(&e->req, rs->requests, rs->burst, sat_mul(per_ms, NS_PER_MS), now);
        if (made)
            ghosts_drain_requests(q->ghosts, e->hash, &e->req, now);
    }
    e->spec.requests = rs->requests;
    e->spec.per_ms = per_ms;
    e->spec.burst = rs->burst;
}

/* The same for the bandwidth bucket, by the flows, under a rate with a
 * bandwidth. */
static void apply_bandwidth(const struct quota *q, struct qentry *e, uint64_t bandwidth,
                            uint64_t now)
{
    if (bandwidth != e->spec.bandwidth) {
        bool made = bucket_is_off(&e->bw);
        bucket_reconfigure(&e->bw, bandwidth, 0, NS_PER_S, now);
        if (made)
            ghosts_drain_bandwidth(q->ghosts, e->hash, &e->bw, now);
    }
    e->spec.bandwidth = bandwidth;
    e->bw_off = false;
}

static bool limits_requests(const struct rate_spec *rs)
{
    return rs != NULL && rs->set && rs->requests > 0;
}

static bool limits_bandwidth(const struct rate_spec *rs)
{
    return rs != NULL && rs->set && rs->bandwidth > 0;
}

/* --- quarantine ------------------------------------------------------------ */

uint64_t quota_quarantine_left(struct quota *q, const char *agent_id, uint64_t now_ns)
{
    if (now_ns >= q->q_until_max || agent_id == NULL)
        return 0; /* nobody is in quarantine: no lookup */
    struct qentry *e = lookup(q, agent_id, NULL, now_ns, false);
    if (e == NULL || e->q_until_ns <= now_ns)
        return 0;
    return e->q_until_ns - now_ns;
}

bool quota_note_denial(struct quota *q, const char *agent_id, uint64_t now_ns, int64_t wall_ms)
{
    if (agent_id == NULL || !q->denied_set)
        return false; /* nothing counts denials: the detector does not either */
    struct qentry *e = lookup(q, agent_id, NULL, now_ns, true);
    if (e == NULL)
        return false;
    if (e->denied_ns == 0)
        window_init(&e->denials, q->denied_per_ms); /* its first denial */
    e->denied_ns = now_ns > 0 ? now_ns : 1;
    /* The detector's count and comparison (detectors.c, denied_burst). */
    uint64_t n = window_add(&e->denials, wall_ms, 1);
    if (n <= q->denied_max || q->quarantine_ns == 0 || e->q_until_ns > now_ns)
        return false; /* under the threshold, alert only, or already in */
    e->q_until_ns = now_ns > UINT64_MAX - q->quarantine_ns ? UINT64_MAX : now_ns + q->quarantine_ns;
    if (e->q_until_ns > q->q_until_max)
        q->q_until_max = e->q_until_ns;
    return true;
}

bool quota_feed(struct quota *q, const struct egress_event *ev, uint64_t now_ns, int64_t wall_ms)
{
    if (!bus_counts_denial(ev)) /* the detector's set (detectors.c, denied_burst) */
        return false;
    if (!quota_note_denial(q, ev->agent, now_ns, wall_ms))
        return false;
    if (q->alerts == NULL)
        return true;
    char len[32], per[32], detail[256];
    format_period_ms(q->quarantine_ns / NS_PER_MS, len, sizeof(len));
    format_period_ms(q->denied_per_ms, per, sizeof(per));
    snprintf(detail, sizeof(detail),
             "agent %s quarantined for %s: more than %llu denials within %s (last: %s)", ev->agent,
             len, (unsigned long long)q->denied_max, per,
             ev->reason != REASON_NONE ? reason_name(ev->reason) : "denied");
    struct alert a = {
        .kind = ALERT_QUARANTINE,
        .severity = SEVERITY_HIGH,
        .agent = ev->agent,
        .host = ev->host,
        .tier = ev->tier,
        .id = ev->id,
        .detail = detail,
    };
    alert_bus_publish(q->alerts, &a);
    return true;
}

void quota_on_event(const struct egress_event *ev, void *arg)
{
    quota_feed(arg, ev, quota_now(), bus_event_ms(ev)); /* the detector's time for it */
}

/* --- requests -------------------------------------------------------------- */

/* Brings entry <e> to <rs> and returns how long a request waits for
 * its token (0: one is there). */
static uint64_t request_wait(const struct quota *q, struct qentry *e, const struct rate_spec *rs,
                             uint64_t now_ns)
{
    apply_requests(q, e, rs, now_ns);
    return bucket_wait_ns(&e->req, 1, now_ns);
}

/* Fills <rules> with the rules whose limits hold a request decided by <r>
 * beside <limits> (<nlimits> of them): NULL for the agent's, <r>, then each
 * of <limits> not already there (SLOTS at most). Returns how many. */
static unsigned slot_rules(const struct rule *rules[SLOTS], const struct rule *r,
                           const struct rule *const *limits, size_t nlimits)
{
    unsigned n = 2;
    rules[0] = NULL;
    rules[1] = r;
    for (size_t k = 0; k < nlimits && n < SLOTS; k++) {
        bool listed = limits[k] == NULL;
        for (unsigned i = 1; i < n && !listed; i++)
            listed = rules[i] == limits[k];
        if (!listed)
            rules[n++] = limits[k];
    }
    return n;
}

int quota_admit(struct quota *q, const struct policy *p, const char *agent_id, const struct rule *r,
                const struct rule *const *limits, size_t nlimits, uint64_t now_ns,
                uint64_t *wait_ns)
{
    const struct rule *rules[SLOTS];
    const struct rate_spec *rs[SLOTS];
    struct qentry *e[SLOTS];
    unsigned n = slot_rules(rules, r, limits, nlimits);
    for (unsigned i = 0; i < n; i++) {
        rs[i] = i == 0 ? &p->limits.rate : rules[i] != NULL ? &rules[i]->rate : NULL;
        e[i] = NULL;
    }
    uint64_t wait = 0;
    int rc = 0;
    *wait_ns = 0;
    /* The entries that exist first: a request one of them refuses makes
     * none. Made for it, a bucket would start full (or as its ghost left
     * it) and take nothing, so a limited agent's refused requests, across
     * the rules of a large policy, filled the table with entries that
     * change nothing, and each past its bound evicted other agents' busy
     * entries into ghosts, where keys that meet merge toward denial
     * (ghosts.h). Its Retry-After then leaves out what a ghost would add:
     * the next request is told that wait. Each entry is held until the
     * end: a lookup that makes one may evict every entry at rest to make
     * room, and one found full is. */
    for (unsigned i = 0; i < n; i++) {
        if (!limits_requests(rs[i]))
            continue;
        e[i] = lookup(q, agent_id, rules[i], now_ns, false);
        if (e[i] == NULL)
            continue;
        e[i]->refs++;
        uint64_t w = request_wait(q, e[i], rs[i], now_ns);
        if (w > wait)
            wait = w;
    }
    for (unsigned i = 0; i < n && wait == 0; i++) {
        if (!limits_requests(rs[i]) || e[i] != NULL)
            continue;
        e[i] = lookup(q, agent_id, rules[i], now_ns, true);
        if (e[i] == NULL) {
            wait = NS_PER_S;
            rc = -1;
            break;
        }
        e[i]->refs++;
        wait = request_wait(q, e[i], rs[i], now_ns);
    }
    if (wait > 0) {
        *wait_ns = wait;
        rc = -1;
    }
    for (unsigned i = 0; i < n; i++) {
        if (e[i] == NULL)
            continue;
        if (rc == 0)
            bucket_take(&e[i]->req, 1, now_ns);
        e[i]->refs--;
    }
    return rc;
}

/* --- bandwidth ------------------------------------------------------------- */

/* The rule of flow <f>'s entry <i>: NULL for the agent's (0), its rule
 * (1) or another rule whose limits hold it (2 and on). */
static const struct rule *flow_rule(const struct quota_flow *f, unsigned i)
{
    return f->rules[i];
}

/* Holds the entry of flow <f>'s agent (<i> 0), rule (1) or another (2...) and
 * brings its bandwidth bucket to <bandwidth>. Returns 0, or -1 when out of
 * memory: that limit would go unshaped (quota_flow_open() then fails). */
static int flow_attach(struct quota_flow *f, unsigned i, uint64_t bandwidth, uint64_t now_ns)
{
    struct qentry *e = lookup(f->q, f->agent_id, flow_rule(f, i), now_ns, true);
    if (e == NULL)
        return -1;
    apply_bandwidth(f->q, e, bandwidth, now_ns);
    e->refs++;
    f->e[i] = e;
    return 0;
}

/* Lets go of flow <f>'s entry <i>, as flow_attach() took it. */
static void flow_detach(struct quota_flow *f, unsigned i)
{
    if (f->e[i] != NULL && f->e[i]->refs > 0)
        f->e[i]->refs--;
    f->e[i] = NULL;
}

/* Holds running flow <f> to <bandwidth> through its entry <i>: attached,
 * or, out of memory for the entry, missing it: the flow then lets nothing
 * through until the entry can be made, rather than go on without a limit
 * that applies, or be cut (a reload keeps what it lets through open). */
static void flow_hold_to(struct quota_flow *f, unsigned i, uint64_t bandwidth, uint64_t now_ns)
{
    f->missing_bw[i] = flow_attach(f, i, bandwidth, now_ns) < 0 ? bandwidth : 0;
}

static bool flow_missing(const struct quota_flow *f)
{
    for (unsigned i = 0; i < f->nslots; i++)
        if (f->missing_bw[i] != 0)
            return true;
    return false;
}

/* Tries again to make the entries flow <f> misses; true when it misses
 * none any more. */
static bool flow_make_missing(struct quota_flow *f, uint64_t now_ns)
{
    for (unsigned i = 0; i < f->nslots; i++)
        if (f->missing_bw[i] != 0)
            flow_hold_to(f, i, f->missing_bw[i], now_ns);
    return !flow_missing(f);
}

/* Lets go of the entry quota_reshape_prepare() made for flow <f>'s <i>. */
static void flow_unstage(struct quota_flow *f, unsigned i)
{
    if (f->staged[i] != NULL)
        f->staged[i]->refs--;
    f->staged[i] = NULL;
}

struct quota_flow *quota_flow_open(struct quota *q, const struct policy *p, const char *agent_id,
                                   const struct rule *r, const struct rule *const *limits,
                                   size_t nlimits, uint64_t now_ns)
{
    if (agent_id == NULL)
        return NULL;
    struct quota_flow *f = zalloc(sizeof(*f));
    if (f == NULL)
        return NULL;
    f->q = q;
    f->agent_id = agent_id;
    f->nslots = slot_rules(f->rules, r, limits, nlimits);
    for (unsigned i = 0; i < f->nslots; i++) {
        const struct rule *ri = flow_rule(f, i);
        const struct rate_spec *rs = i == 0 ? &p->limits.rate : ri != NULL ? &ri->rate : NULL;
        if (limits_bandwidth(rs) && flow_attach(f, i, rs->bandwidth, now_ns) < 0) {
            /* Never a flow that lets bytes past a limit that applies. */
            for (unsigned k = 0; k < i; k++)
                flow_detach(f, k);
            free(f);
            return NULL;
        }
    }
    f->next = q->flows;
    if (q->flows != NULL)
        q->flows->prev = f;
    q->flows = f;
    return f;
}

void quota_flow_set_rule(struct quota_flow *f, const struct rule *r,
                         const struct rule *const *limits, size_t nlimits, uint64_t now_ns)
{
    for (unsigned i = 1; i < f->nslots; i++) {
        flow_detach(f, i);
        flow_unstage(f, i);
        f->missing_bw[i] = 0;
    }
    f->nslots = slot_rules(f->rules, r, limits, nlimits);
    /* The same entry again when its identity is. Out of memory (a new
     * identity's entry), the flow is held until it can be made. */
    for (unsigned i = 1; i < f->nslots; i++) {
        const struct rule *ri = flow_rule(f, i);
        if (ri != NULL && limits_bandwidth(&ri->rate))
            flow_hold_to(f, i, ri->rate.bandwidth, now_ns);
    }
}

void quota_flow_set_agent_id(struct quota_flow *f, const char *agent_id)
{
    f->agent_id = agent_id;
}

/* True when flow <f> is metered by its entry <i>. */
static bool flow_meters(const struct quota_flow *f, unsigned i)
{
    return f->e[i] != NULL && !f->e[i]->bw_off;
}

bool quota_flow_metered(const struct quota_flow *f)
{
    for (unsigned i = 0; i < f->nslots; i++)
        if (flow_meters(f, i))
            return true;
    return flow_missing(f);
}

/* What flow <f> waits for before it lets bytes through: <want> (at least
 * one byte), or a sixteenth of its smallest metered bucket when less. */
static uint64_t flow_chunk(const struct quota_flow *f, size_t want)
{
    uint64_t chunk = want > 0 ? want : 1;
    for (unsigned i = 0; i < f->nslots; i++) {
        if (!flow_meters(f, i) || bucket_is_off(&f->e[i]->bw))
            continue;
        uint64_t c = f->e[i]->bw.size / 16;
        if (c < chunk)
            chunk = c > 0 ? c : 1;
    }
    return chunk;
}

size_t quota_flow_allow(struct quota_flow *f, size_t want, uint64_t now_ns)
{
    if (flow_missing(f) && !flow_make_missing(f, now_ns))
        return 0; /* still no memory for a limit's entry: held (quota_flow_wait_ns()) */
    uint64_t least = flow_chunk(f, want);
    bool trickle = false;
    for (unsigned i = 0; i < f->nslots; i++) {
        if (!flow_meters(f, i))
            continue;
        uint64_t a = bucket_available(&f->e[i]->bw, now_ns);
        if (a < least)
            trickle = true; /* not worth a read and a send: the caller pauses */
        if (a < want)
            want = (size_t)a;
        f->e[i]->used_ns = now_ns;
    }
    return trickle ? 0 : want;
}

void quota_flow_take(struct quota_flow *f, size_t n, uint64_t now_ns)
{
    for (unsigned i = 0; i < f->nslots; i++)
        if (flow_meters(f, i))
            bucket_force(&f->e[i]->bw, n, now_ns);
}

uint64_t quota_flow_wait_ns(struct quota_flow *f, size_t want, uint64_t now_ns)
{
    if (flow_missing(f))
        return NS_PER_S; /* memory is short: looked at again a second later */
    uint64_t chunk = flow_chunk(f, want), wait = 0;
    for (unsigned i = 0; i < f->nslots; i++) {
        if (!flow_meters(f, i))
            continue;
        uint64_t w = bucket_wait_ns(&f->e[i]->bw, chunk, now_ns);
        if (w > wait)
            wait = w;
    }
    return wait;
}

static void on_flow_timer(evutil_socket_t fd, short what, void *arg)
{
    struct quota_flow *f = arg;
    (void)fd;
    (void)what;
    f->armed = false;
    f->q->nwaiting--;
    if (f->cb != NULL)
        f->cb(f->arg);
}

int quota_flow_pause(struct quota_flow *f, size_t want, uint64_t now_ns, void (*cb)(void *arg),
                     void *arg)
{
    if (f->q->base == NULL)
        return -1;
    if (f->timer == NULL) {
        f->timer = evtimer_new(f->q->base, on_flow_timer, f);
        if (f->timer == NULL)
            return -1;
    }
    /* Rounded up by division: adding NS_PER_MS - 1 wrapped a saturated
     * wait (a debt of billions of seconds) round to 0 ms. */
    uint64_t ns = quota_flow_wait_ns(f, want, now_ns);
    uint64_t ms = ns / NS_PER_MS + (ns % NS_PER_MS != 0);
    if (ms < FLOW_MIN_WAIT_MS)
        ms = FLOW_MIN_WAIT_MS;
    if (ms > FLOW_MAX_WAIT_MS)
        ms = FLOW_MAX_WAIT_MS; /* a reload may have raised the rate: see it soon */
    struct timeval tv = timeval_of_ms(ms);
    f->cb = cb;
    f->arg = arg;
    if (evtimer_add(f->timer, &tv) < 0)
        return -1;
    if (!f->armed)
        f->q->nwaiting++; /* a re-arming replaces the wait: counted once */
    f->armed = true;
    return 0;
}

int quota_flow_allow_or_pause(struct quota_flow *f, size_t want, uint64_t now_ns,
                              void (*cb)(void *arg), void *arg, size_t *n)
{
    *n = quota_flow_allow(f, want, now_ns);
    if (*n == 0 && quota_flow_pause(f, want, now_ns, cb, arg) < 0)
        return -1;
    return 0;
}

bool quota_flow_paused(const struct quota_flow *f)
{
    return f != NULL && f->armed;
}

size_t quota_flows_waiting(const struct quota *q)
{
    return q != NULL ? q->nwaiting : 0;
}

void quota_flow_close(struct quota_flow *f)
{
    if (f == NULL)
        return;
    if (f->timer != NULL)
        event_free(f->timer);
    if (f->armed)
        f->q->nwaiting--;
    for (unsigned i = 0; i < f->nslots; i++) {
        flow_detach(f, i);
        flow_unstage(f, i);
    }
    if (f->prev != NULL)
        f->prev->next = f->next;
    else
        f->q->flows = f->next;
    if (f->next != NULL)
        f->next->prev = f->prev;
    free(f);
}

/* --- a reload -------------------------------------------------------------- */

/* A rule's identity, and its rate: quota_reshape()'s index. */
struct rule_rate {
    char *id;
    size_t len;
    const struct rate_spec *rate;
};

static int cmp_rule_rate(const void *a, const void *b)
{
    const struct rule_rate *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return memcmp(x->id, y->id, x->len);
}

static void free_rule_rates(struct rule_rate *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].id);
    free(v);
}

/* Indexes the rules of <p> that limit requests or bandwidth, by identity,
 * sorted, into <*out> (NULL when there are none) and <*n>. Returns 0, or
 * -1 when out of memory. Through zalloc(), as the entries: a test fails
 * each allocation of a reload in turn. */
static int index_rate_rules(const struct policy *p, struct rule_rate **out, size_t *n)
{
    struct rule_rate *v = NULL;
    *out = NULL;
    *n = 0;
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        if (!limits_requests(&r->rate) && !limits_bandwidth(&r->rate))
            continue;
        if (v == NULL &&
            (p->nrules > SIZE_MAX / sizeof(*v) || (v = zalloc(p->nrules * sizeof(*v))) == NULL))
            return -1;
        size_t len = quota_rule_identity(r, NULL, 0);
        char *id = zalloc(len + 1);
        if (id == NULL) {
            free_rule_rates(v, *n);
            *n = 0;
            return -1;
        }
        quota_rule_identity(r, id, len + 1);
        v[(*n)++] = (struct rule_rate){id, len, &r->rate};
    }
    if (v != NULL)
        qsort(v, *n, sizeof(*v), cmp_rule_rate);
    *out = v;
    return 0;
}

/* The rate <p> gives entry <e> (its limits.rate, or its rule's); NULL
 * when none. */
static const struct rate_spec *entry_rate(struct qentry *e, const struct policy *p,
                                          const struct rule_rate *rules, size_t nrules)
{
    if (e->key[0] == KEY_AGENT)
        return &p->limits.rate;
    size_t skip = 2 + strlen(e->key + 1); /* KEY_RULE, the agent id, NUL */
    struct rule_rate k = {e->key + skip, e->keylen - skip, NULL};
    const struct rule_rate *r =
        nrules > 0 ? bsearch(&k, rules, nrules, sizeof(*rules), cmp_rule_rate) : NULL;
    return r != NULL ? r->rate : NULL;
}

/* Sets <*rate> to the rate <rules> (index_rate_rules()) gives rule <r>,
 * of any policy, matched by its identity (NULL: none). Returns 0, or -1
 * when out of memory (an identity longer than QUOTA_KEY_INLINE). */
static int rule_rate(const struct rule *r, const struct rule_rate *rules, size_t nrules,
                     const struct rate_spec **rate)
{
    *rate = NULL;
    if (nrules == 0)
        return 0;
    char buf[QUOTA_KEY_INLINE];
    size_t len = quota_rule_identity(r, buf, sizeof(buf));
    char *id = len < sizeof(buf) ? buf : malloc(len + 1);
    if (id == NULL)
        return -1;
    if (id != buf)
        quota_rule_identity(r, id, len + 1);
    struct rule_rate k = {id, len, NULL};
    const struct rule_rate *found = bsearch(&k, rules, nrules, sizeof(*rules), cmp_rule_rate);
    if (id != buf)
        free(id);
    *rate = found != NULL ? found->rate : NULL;
    return 0;
}

struct quota_reshape {
    struct quota *q;
    const struct policy *p; /* borrowed: outlives the commit */
    uint64_t now_ns;
    struct rule_rate *rules; /* index_rate_rules() of <p> */
    size_t nrules;
};

/* Makes and holds (f->staged) the entries of the bandwidth limits that
 * <rs>'s policy brings to flow <f>: those of its agent and rule that it
 * is not attached to (opened where none applied, or missing one). Returns
 * 0, or -1 when out of memory. */
static int flow_stage(struct quota_reshape *rs, struct quota_flow *f)
{
    for (unsigned i = 0; i < f->nslots; i++) {
        const struct rate_spec *rate = &rs->p->limits.rate;
        if (f->e[i] != NULL || (i > 0 && flow_rule(f, i) == NULL))
            continue;
        if (i > 0 && rule_rate(flow_rule(f, i), rs->rules, rs->nrules, &rate) < 0)
            return -1;
        if (!limits_bandwidth(rate))
            continue;
        struct qentry *e = lookup(rs->q, f->agent_id, flow_rule(f, i), rs->now_ns, true);
        if (e == NULL)
            return -1;
        e->refs++; /* not dropped to make room for the next one */
        f->staged[i] = e;
    }
    return 0;
}

struct quota_reshape *quota_reshape_prepare(struct quota *q, const struct policy *p,
                                            uint64_t now_ns)
{
    struct quota_reshape *rs = zalloc(sizeof(*rs));
    if (rs == NULL)
        return NULL;
    *rs = (struct quota_reshape){.q = q, .p = p, .now_ns = now_ns};
    if (index_rate_rules(p, &rs->rules, &rs->nrules) < 0) {
        quota_reshape_abandon(rs);
        return NULL;
    }
    for (struct quota_flow *f = q->flows; f != NULL; f = f->next) {
        if (flow_stage(rs, f) < 0) {
            quota_reshape_abandon(rs);
            return NULL;
        }
    }
    return rs;
}

void quota_reshape_abandon(struct quota_reshape *rs)
{
    if (rs == NULL)
        return;
    for (struct quota_flow *f = rs->q->flows; f != NULL; f = f->next)
        for (unsigned i = 0; i < f->nslots; i++)
            flow_unstage(f, i);
    free_rule_rates(rs->rules, rs->nrules);
    free(rs);
}

void quota_reshape_commit(struct quota_reshape *rs)
{
    const struct policy *p = rs->p;
    uint64_t now_ns = rs->now_ns;
    for (size_t i = 0; i < NSLOTS; i++) {
        for (struct qentry *e = rs->q->slots[i]; e != NULL; e = e->next) {
            if (e->spec.requests == 0 && e->spec.bandwidth == 0)
                continue; /* nothing was ever limited here */
            const struct rate_spec *rate = entry_rate(e, p, rs->rules, rs->nrules);
            /* From now on at the new rate, not from the next request on. */
            if (e->spec.requests != 0 && limits_requests(rate))
                apply_requests(rs->q, e, rate, now_ns);
            if (e->spec.bandwidth == 0)
                continue; /* no upload was ever shaped here */
            if (limits_bandwidth(rate))
                apply_bandwidth(rs->q, e, rate->bandwidth, now_ns);
            else
                e->bw_off = true; /* the bucket is kept, should the limit come back */
        }
    }
    /* A flow opened where no bandwidth was limited (or only the agent's, or
     * only the rule's), or missing an entry, is held to the limits <p>
     * brings from now on, through the entries the prepare made; one <p>
     * does not limit there misses nothing any more. */
    for (struct quota_flow *f = rs->q->flows; f != NULL; f = f->next) {
        for (unsigned i = 0; i < f->nslots; i++) {
            struct qentry *e = f->staged[i];
            if (e == NULL) {
                if (f->e[i] == NULL)
                    f->missing_bw[i] = 0;
                continue;
            }
            f->staged[i] = NULL;
            f->e[i] = e; /* the prepare's hold is the flow's now */
            f->missing_bw[i] = 0;
            apply_bandwidth(rs->q, e, entry_rate(e, p, rs->rules, rs->nrules)->bandwidth, now_ns);
        }
    }
    free_rule_rates(rs->rules, rs->nrules);
    free(rs);
}

int quota_reshape(struct quota *q, const struct policy *p, uint64_t now_ns)
{
    struct quota_reshape *rs = quota_reshape_prepare(q, p, now_ns);
    if (rs == NULL)
        return -1;
    quota_reshape_commit(rs);
    return 0;
}
