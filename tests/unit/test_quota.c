/* test_quota: per-agent and per-rule buckets, keys that survive a reload,
 * bounded memory, quarantine and its alert, upload flows, and a flow that
 * cannot be opened for want of memory (zalloc() is interposed here). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <event2/event.h>

#include "policy/host.h"
#include "policy/policy.h"
#include "shape/quota.h"
#include "util/zalloc.h"
#include "watch/bus.h"
#include "watch/detectors.h"
#include "zalloc_countdown.h"

#define MS 1000000ull
#define S  1000000000ull

static uint16_t ports_web[] = {80, 443};
static uint16_t ports_8080[] = {8080};
static char ci_bot[] = "ci-bot";
static char *agents_ci[] = {ci_bot};

static struct rule make_rule(size_t index, char *pattern, uint16_t *ports, size_t nports)
{
    struct rule r;
    memset(&r, 0, sizeof(r));
    r.index = index;
    r.pattern = pattern;
    r.ports = ports;
    r.nports = nports;
    return r;
}

static void set_rate(struct rate_spec *rs, uint64_t requests, uint64_t per_ms, uint64_t burst,
                     uint64_t bandwidth)
{
    rs->set = true;
    rs->requests = requests;
    rs->per_ms = per_ms;
    rs->burst = burst;
    rs->bandwidth = bandwidth;
}

/* A tier-3 grant for api.example.test's POSTs (rules[1]), at <requests>
 * a <per_ms> and <bandwidth>: beside an open rule for the host, the
 * grant of its tunnels (test_grant_limits_what_it_classifies()). */
static struct rule post_grant(uint64_t requests, uint64_t per_ms, uint64_t bandwidth)
{
    struct rule g = make_rule(1, "api.example.test", ports_web, 2);
    g.methods = METHOD_POST;
    set_rate(&g.rate, requests, per_ms, 0, bandwidth);
    return g;
}

static void test_agent_requests(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    set_rate(&p.limits.rate, 2, 1000, 0, 0);
    struct quota *q = quota_new(NULL, NULL, 0);
    assert_non_null(q);
    uint64_t w = 77;
    assert_int_equal(quota_admit(q, &p, "a", NULL, NULL, 0, 0, &w), 0);
    assert_int_equal(w, 0);
    assert_int_equal(quota_admit(q, &p, "a", NULL, NULL, 0, 0, &w), 0);
    assert_int_equal(quota_admit(q, &p, "a", NULL, NULL, 0, 0, &w), -1);
    assert_int_equal(w, 500 * MS);
    assert_int_equal(quota_admit(q, &p, "a", NULL, NULL, 0, 499 * MS, &w), -1);
    assert_int_equal(w, 1 * MS);
    /* Another agent has its own bucket. */
    assert_int_equal(quota_admit(q, &p, "b", NULL, NULL, 0, 0, &w), 0);
    assert_int_equal(quota_admit(q, &p, "a", NULL, NULL, 0, 500 * MS, &w), 0);
    assert_int_equal(quota_entries(q), 2);
    /* No rate at all: nothing tracked. */
    struct policy none;
    memset(&none, 0, sizeof(none));
    assert_int_equal(quota_admit(q, &none, "c", NULL, NULL, 0, 0, &w), 0);
    assert_int_equal(quota_entries(q), 2);
    /* A rate with bandwidth only has no request bucket. */
    set_rate(&none.limits.rate, 0, 1000, 0, 100);
    for (int i = 0; i < 10; i++)
        assert_int_equal(quota_admit(q, &none, "c", NULL, NULL, 0, 0, &w), 0);
    quota_free(q);
    quota_free(NULL);
}

static void test_rule_and_agent_both_or_neither(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    set_rate(&p.limits.rate, 3, 1000, 0, 0);
    struct rule r = make_rule(0, "api.example.test", ports_web, 2);
    set_rate(&r.rate, 1, 60000, 0, 0);
    struct quota *q = quota_new(NULL, NULL, 0);
    uint64_t w;
    assert_int_equal(quota_admit(q, &p, "a", &r, NULL, 0, 0, &w), 0);
    /* The rule's bucket is empty: refused, and the agent's token kept. */
    assert_int_equal(quota_admit(q, &p, "a", &r, NULL, 0, 0, &w), -1);
    assert_int_equal(w, 60 * S);
    assert_int_equal(quota_admit(q, &p, "a", NULL, NULL, 0, 0, &w), 0);
    assert_int_equal(quota_admit(q, &p, "a", NULL, NULL, 0, 0, &w), 0);
    /* Now the agent's is empty too: the longer wait is the answer. */
    assert_int_equal(quota_admit(q, &p, "a", NULL, NULL, 0, 0, &w), -1);
    assert_int_equal(w, 333333334);
    assert_int_equal(quota_admit(q, &p, "a", &r, NULL, 0, 0, &w), -1);
    assert_int_equal(w, 60 * S);
    /* Per agent: another agent has the rule's full bucket. */
    assert_int_equal(quota_admit(q, &p, "b", &r, NULL, 0, 0, &w), 0);
    quota_free(q);
}

/* A tunnel (or an extension method) decided by a rule without methods is
 * classified at the tier of the highest rule for its host (its grant),
 * since it may carry what that rule limits: it is held to the grant's
 * buckets as well as its deciding rule's. Before, only the deciding
 * rule's applied: a tier-3 grant's {requests: 1, per: 1m} or 1600 B/s
 * was nothing to a CONNECT beside an open tier-0 rule. */
static void test_grant_limits_what_it_classifies(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    struct rule open = make_rule(0, "api.example.test", ports_web, 2);
    struct rule grant = post_grant(1, 60000, 1600);
    const struct rule *by_grant[] = {&grant};
    const struct rule *by_open[] = {&open};
    struct quota *q = quota_new(NULL, NULL, 0);
    uint64_t w;
    assert_int_equal(quota_admit(q, &p, "a", &open, by_grant, 1, 0, &w), 0);
    assert_int_equal(quota_admit(q, &p, "a", &open, by_grant, 1, 0, &w), -1);
    assert_int_equal(w, 60 * S);
    /* The grant's own requests (a plain POST) share its bucket. */
    assert_int_equal(quota_admit(q, &p, "a", &grant, by_grant, 1, 0, &w), -1);
    /* Without a grant of its own, the open rule limits nothing. */
    assert_int_equal(quota_admit(q, &p, "a", &open, by_open, 1, 0, &w), 0);
    assert_int_equal(quota_admit(q, &p, "a", &open, NULL, 0, 0, &w), 0);
    /* Its upload is metered by the grant's bandwidth. */
    struct quota_flow *f = quota_flow_open(q, &p, "a", &open, by_grant, 1, 0);
    assert_non_null(f);
    assert_true(quota_flow_metered(f));
    assert_int_equal(quota_flow_allow(f, 100000, 0), 1600);
    quota_flow_take(f, 1600, 0);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 0);
    /* Decided again without the grant (a reload removed it): unmetered;
     * with it again, its bucket is the one it left, still empty. */
    quota_flow_set_rule(f, &open, by_open, 1, 0);
    assert_false(quota_flow_metered(f));
    quota_flow_set_rule(f, &open, by_grant, 1, 0);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 0);
    quota_flow_close(f);
    quota_free(q);
}

/* A tunnel (or an extension method) may carry any request to its host: it
 * takes a token from every rule with a rate that covers it (its decision's
 * limits), all or none, and its upload is metered by each bandwidth among
 * them, the smallest in effect. The deciding rule and repeats count once;
 * past SLOTS the rest are not looked at. Before, a GET-only rule's
 * {requests: 2, per: 1m} or 1000 B/s beside an open rule and a grant was
 * nothing to a tunnel. */
static void test_every_limit_holds_a_tunnel(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    struct rule open = make_rule(0, "api.example.test", ports_web, 2);
    struct rule grant = post_grant(100, 60000, 64000);
    struct rule reads = make_rule(2, "api.example.test", ports_web, 2);
    reads.methods = METHOD_GET;
    set_rate(&reads.rate, 2, 60000, 0, 1000);
    const struct rule *limits[] = {&grant, &reads, &open, &reads, NULL};
    struct quota *q = quota_new(NULL, NULL, 0);
    uint64_t w;
    assert_int_equal(quota_admit(q, &p, "a", &open, limits, 5, 0, &w), 0);
    assert_int_equal(quota_admit(q, &p, "a", &open, limits, 5, 0, &w), 0);
    assert_int_equal(quota_admit(q, &p, "a", &open, limits, 5, 0, &w), -1);
    assert_int_equal(w, 30 * S);
    /* all or none: the grant's bucket lost nothing to the refusal */
    for (int i = 0; i < 98; i++)
        assert_int_equal(quota_admit(q, &p, "a", &grant, NULL, 0, 0, &w), 0);
    assert_int_equal(quota_admit(q, &p, "a", &grant, NULL, 0, 0, &w), -1);
    /* the smallest bandwidth meters the upload */
    struct quota_flow *f = quota_flow_open(q, &p, "a", &open, limits, 5, 0);
    assert_non_null(f);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 1000);
    quota_flow_take(f, 1000, 0);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 0);
    /* decided again with the grant alone (a reload dropped the reads rule's
     * rate): the grant's bucket, which paid its 1000 bytes too */
    quota_flow_set_rule(f, &open, limits, 1, 0);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 63000);
    quota_flow_close(f);
    quota_free(q);

    /* Past the slots, the rest are not looked at: no more work a request. */
    q = quota_new(NULL, NULL, 0);
    struct rule many[DECISION_LIMITS_MAX + 1];
    uint16_t ports[DECISION_LIMITS_MAX + 1][2];
    const struct rule *lim[DECISION_LIMITS_MAX + 1];
    for (size_t i = 0; i < DECISION_LIMITS_MAX + 1; i++) {
        ports[i][0] = 443;
        ports[i][1] = (uint16_t)(1000 + i); /* each its own identity */
        many[i] = make_rule(3 + i, "api.example.test", ports[i], 2);
        many[i].methods = METHOD_GET;
        set_rate(&many[i].rate, 1, 60000, 0, 0);
        lim[i] = &many[i];
    }
    assert_int_equal(quota_admit(q, &p, "a", &open, lim, DECISION_LIMITS_MAX + 1, 0, &w), 0);
    for (size_t i = 0; i < DECISION_LIMITS_MAX; i++)
        assert_int_equal(quota_admit(q, &p, "a", &many[i], NULL, 0, 0, &w), -1);
    assert_int_equal(quota_admit(q, &p, "a", &many[DECISION_LIMITS_MAX], NULL, 0, 0, &w), 0);
    quota_free(q);
}

static void test_keys_survive_reload(void **state)
{
    (void)state;
    struct policy p1, p2;
    memset(&p1, 0, sizeof(p1));
    memset(&p2, 0, sizeof(p2));
    struct rule a1 = make_rule(0, "api.example.test", ports_web, 2);
    set_rate(&a1.rate, 1, 60000, 0, 0);
    /* The reloaded policy: the same rule moved to another index and
     * another address, plus a rule that differs only by its ports. */
    struct rule a2 = make_rule(3, "api.example.test", ports_web, 2);
    set_rate(&a2.rate, 1, 60000, 0, 0);
    struct rule other = make_rule(0, "api.example.test", ports_8080, 1);
    set_rate(&other.rate, 1, 60000, 0, 0);
    struct quota *q = quota_new(NULL, NULL, 0);
    uint64_t w;
    assert_int_equal(quota_admit(q, &p1, "a", &a1, NULL, 0, 0, &w), 0);
    assert_int_equal(quota_admit(q, &p2, "a", &a2, NULL, 0, S, &w), -1); /* same bucket */
    assert_int_equal(quota_admit(q, &p2, "a", &other, NULL, 0, S, &w), 0);
    /* Agents and methods are part of the identity too. */
    struct rule ci = a2;
    ci.agents = agents_ci;
    ci.nagents = 1;
    assert_int_equal(quota_admit(q, &p2, "a", &ci, NULL, 0, S, &w), 0);
    struct rule get = a2;
    get.methods = 1;
    assert_int_equal(quota_admit(q, &p2, "a", &get, NULL, 0, S, &w), 0);
    /* A reload that raises the rate grants nothing at once... */
    set_rate(&a2.rate, 10, 60000, 0, 0);
    assert_int_equal(quota_admit(q, &p2, "a", &a2, NULL, 0, S, &w), -1);
    assert_int_equal(w, 6 * S);
    /* ...and refills at the new rate. */
    assert_int_equal(quota_admit(q, &p2, "a", &a2, NULL, 0, 7 * S, &w), 0);
    /* A rate taken out and put back lower: the bucket is kept, nothing granted. */
    a2.rate.set = false;
    assert_int_equal(quota_admit(q, &p2, "a", &a2, NULL, 0, 7 * S, &w), 0);
    set_rate(&a2.rate, 1, 60000, 0, 0);
    assert_int_equal(quota_admit(q, &p2, "a", &a2, NULL, 0, 7 * S, &w), -1);
    quota_free(q);
}

static void test_rule_identity(void **state)
{
    (void)state;
    struct rule r = make_rule(0, "*.example.test", ports_web, 2);
    r.methods = 0x3;
    r.agents = agents_ci;
    r.nagents = 1;
    char buf[128];
    size_t n = quota_rule_identity(&r, buf, sizeof(buf));
    assert_string_equal(buf, "*.example.test|80,443|3|ci-bot");
    assert_int_equal(n, strlen(buf));
    char small[8];
    assert_int_equal(quota_rule_identity(&r, small, sizeof(small)), n);
    assert_int_equal(strlen(small), 7);
    assert_int_equal(quota_rule_identity(&r, NULL, 0), n);
    struct rule c = make_rule(1, NULL, NULL, 0);
    assert_int_equal(quota_rule_identity(&c, buf, sizeof(buf)), 4);
    assert_string_equal(buf, "||0|");
    /* Numbers of every width, and every method. */
    static uint16_t ports_wide[] = {1, 65535, 8080};
    struct rule w = make_rule(2, "a.test", ports_wide, 3);
    w.methods = 0xfedcba98u;
    assert_int_equal(quota_rule_identity(&w, buf, sizeof(buf)), 29);
    assert_string_equal(buf, "a.test|1,65535,8080|fedcba98|");
    w.methods = 0x10;
    quota_rule_identity(&w, buf, sizeof(buf));
    assert_string_equal(buf, "a.test|1,65535,8080|10|");
}

/* Keys up to QUOTA_KEY_INLINE bytes are built on the stack, longer ones
 * in memory of their own: around that bound (the longest agent id and
 * host pattern, and a rule's agents making up the rest) two rules whose
 * identities differ only in their last byte have buckets of their own. A
 * key cut at the bound would give them one. */
static void test_keys_at_the_inline_bound(void **state)
{
    (void)state;
    char agent[AGENT_ID_MAX + 1], pattern[2 + HOST_MAX + 1], pad[QUOTA_KEY_INLINE];
    memset(agent, 'g', AGENT_ID_MAX);
    agent[AGENT_ID_MAX] = '\0';
    memcpy(pattern, "*.", 2);
    memset(pattern + 2, 'h', HOST_MAX); /* labels of 63 bytes at most */
    for (size_t i = 2 + 63; i < 2 + HOST_MAX; i += 64)
        pattern[i] = '.';
    pattern[2 + HOST_MAX] = '\0';
    char *agents[] = {agent, pad};
    struct policy p;
    memset(&p, 0, sizeof(p));
    struct quota *q = quota_new(NULL, NULL, 0);
    assert_non_null(q);
    /* The key: the kind, the agent id, a NUL, the identity. */
    struct rule r = make_rule(0, pattern, ports_web, 2);
    r.agents = agents;
    r.nagents = 2;
    set_rate(&r.rate, 1, 60000, 0, 0);
    pad[0] = '\0';
    size_t base = 1 + AGENT_ID_MAX + 1 + quota_rule_identity(&r, NULL, 0);
    assert_true(base + 4 < QUOTA_KEY_INLINE);
    for (size_t len = QUOTA_KEY_INLINE - 4; len <= QUOTA_KEY_INLINE + 4; len++) {
        size_t n = len - base; /* the last agent's length */
        memset(pad, 'p', n);
        pad[n] = '\0';
        assert_int_equal(1 + AGENT_ID_MAX + 1 + quota_rule_identity(&r, NULL, 0), len);
        struct rule x = r, y = r;
        char *agents_y[] = {agent, NULL};
        char last[QUOTA_KEY_INLINE];
        memcpy(last, pad, n + 1);
        last[n - 1] = 'q'; /* the key's last byte */
        agents_y[1] = last;
        y.agents = agents_y;
        uint64_t w;
        size_t before = quota_entries(q);
        assert_int_equal(quota_admit(q, &p, agent, &x, NULL, 0, 0, &w), 0);
        assert_int_equal(quota_admit(q, &p, agent, &y, NULL, 0, 0, &w),
                         0); /* a bucket of its own */
        assert_int_equal(quota_entries(q), before + 2);
        /* Each found again, and empty: the same entries, not new ones. */
        assert_int_equal(quota_admit(q, &p, agent, &x, NULL, 0, 0, &w), -1);
        assert_int_equal(quota_admit(q, &p, agent, &y, NULL, 0, 0, &w), -1);
        assert_int_equal(quota_entries(q), before + 2);
    }
    quota_free(q);
}

static void test_bounded_memory(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    set_rate(&p.limits.rate, 5, 1000, 0, 0);
    struct quota *q = quota_new(NULL, NULL, 4);
    uint64_t w;
    char id[16];
    /* Busy agents: the least recently used one goes. */
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof(id), "a%d", i);
        assert_int_equal(quota_admit(q, &p, id, NULL, NULL, 0, (uint64_t)i * MS, &w), 0);
        assert_true(quota_entries(q) <= 4);
    }
    /* a9 is still tracked (its bucket not full): a second take shows it. */
    for (int i = 0; i < 4; i++)
        assert_int_equal(quota_admit(q, &p, "a9", NULL, NULL, 0, 10 * MS, &w), 0);
    assert_int_equal(quota_admit(q, &p, "a9", NULL, NULL, 0, 10 * MS, &w), -1);
    /* Idle ones at rest are all dropped together when room is needed. */
    assert_int_equal(quota_admit(q, &p, "z", NULL, NULL, 0, 10 * S, &w), 0);
    assert_int_equal(quota_entries(q), 1);
    /* A flow pins its entries: never evicted while it is open. */
    set_rate(&p.limits.rate, 0, 1000, 0, 1000);
    struct quota_flow *f = quota_flow_open(q, &p, "pinned", NULL, NULL, 0, 10 * S);
    assert_non_null(f);
    set_rate(&p.limits.rate, 5, 1000, 0, 0);
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof(id), "b%d", i);
        assert_int_equal(quota_admit(q, &p, id, NULL, NULL, 0, 10 * S, &w), 0);
    }
    assert_int_equal(quota_flow_allow(f, 5000, 10 * S), 1000);
    quota_flow_take(f, 1000, 10 * S);
    assert_int_equal(quota_flow_allow(f, 5000, 10 * S), 0);
    quota_flow_close(f);
    quota_flow_close(NULL);
    quota_free(q);
}

/* A table full of busy entries (none at rest) makes room for a batch of
 * newcomers at once, the least recently used a 64th of the table: a scan
 * of all of them for every new entry cost about 130 us a request to an
 * agent cycling through the rules of a large policy. */
/* Agents a0 to a<n - 1> each take the one request an hour of <p>'s
 * limits.rate, a millisecond apart: a table of <n> busy entries. */
static struct quota *table_of_busy_agents(struct policy *p, size_t n)
{
    memset(p, 0, sizeof(*p));
    set_rate(&p->limits.rate, 1, 3600 * 1000, 0, 0); /* one an hour: busy after one */
    struct quota *q = quota_new(NULL, NULL, n);
    uint64_t w;
    char id[32];
    for (size_t i = 0; i < n; i++) {
        snprintf(id, sizeof(id), "a%zu", i);
        assert_int_equal(quota_admit(q, p, id, NULL, NULL, 0, (uint64_t)(i + 1) * MS, &w), 0);
    }
    assert_int_equal(quota_entries(q), n);
    return q;
}

static void test_full_table_evicts_a_batch(void **state)
{
    (void)state;
    struct policy p;
    struct quota *q = table_of_busy_agents(&p, 640);
    uint64_t w;
    char id[16];
    assert_int_equal(quota_admit(q, &p, "new", NULL, NULL, 0, 1 * S, &w), 0);
    assert_int_equal(quota_entries(q), 640 - 10 + 1);
    /* The ten dropped were the least recently used: a10 is still held to
     * its empty bucket, and a0 to a8, made again without a scan (room for
     * nine more), come back as empty as they went, not full (ghosts.h):
     * their hour still runs. */
    assert_int_equal(quota_admit(q, &p, "a10", NULL, NULL, 0, 1 * S, &w), -1);
    for (int i = 0; i < 9; i++) {
        snprintf(id, sizeof(id), "a%d", i);
        assert_int_equal(quota_admit(q, &p, id, NULL, NULL, 0, 1 * S, &w), -1);
        assert_true(w > 3598 * S);
    }
    assert_int_equal(quota_admit(q, &p, "a0", NULL, NULL, 0, 3601 * S + MS, &w), 0);
    assert_int_equal(quota_entries(q), 640);
    quota_free(q);
}

/* A table filled by entries that cannot go (each held by an open upload:
 * 640 agents with a tunnel each under a bandwidth limit) is scanned once
 * for a batch of newcomers, as a table of busy entries is, not anew for
 * each: every request of an agent new to the table scanned all of it and
 * freed one entry, the newcomer before it (77 us a request at 9000 held
 * entries, 400 us at 20000). The table holds at most a batch more. */
static void test_table_of_held_entries_is_scanned_once_a_batch(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    set_rate(&p.limits.rate, 1, 3600 * 1000, 0, 1000);
    enum { HELD = 640, NEW = 100 };
    static char ids[HELD][16];
    struct quota_flow *f[HELD];
    struct quota *q = quota_new(NULL, NULL, HELD);
    for (int i = 0; i < HELD; i++) {
        snprintf(ids[i], sizeof(ids[i]), "held%d", i);
        f[i] = quota_flow_open(q, &p, ids[i], NULL, NULL, 0, 1 * S);
        assert_non_null(f[i]);
    }
    assert_int_equal(quota_entries(q), HELD);
    size_t scans = quota_scans(q);
    uint64_t w;
    char id[16];
    for (int i = 0; i < NEW; i++) {
        snprintf(id, sizeof(id), "new%d", i);
        assert_int_equal(quota_admit(q, &p, id, NULL, NULL, 0, 2 * S, &w), 0);
        assert_true(quota_entries(q) <= HELD + HELD / 64 + 1);
    }
    assert_true(quota_scans(q) - scans <= NEW / (HELD / 64) + 1);
    /* The held entries are all still there: their uploads are metered. */
    for (int i = 0; i < HELD; i++) {
        assert_int_equal(quota_flow_allow(f[i], 5000, 2 * S), 1000);
        quota_flow_close(f[i]);
    }
    quota_free(q);
}

/* Entries that come to rest one at a time, as fast as new ones come: a
 * request a millisecond, each from one of 2000 agents in turn, under one
 * request per 640 ms, on a table of 640. Each scan found the one entry
 * that had come to rest since the last, dropped it, and the next newcomer
 * scanned the table again (a scan per request: 390 us a request on a table
 * of 8192). The next scan waits for a batch of newcomers here too; the
 * table holds at most a batch more than its bound meanwhile. */
static void test_entries_resting_one_at_a_time_are_dropped_a_batch_at_once(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    set_rate(&p.limits.rate, 1, 640, 0, 0);
    struct quota *q = quota_new(NULL, NULL, 640);
    uint64_t w, t = 1 * S;
    char id[16];
    size_t scans = 0;
    for (int i = 0; i < 4000; i++, t += MS) {
        if (i == 3000)
            scans = quota_scans(q);
        snprintf(id, sizeof(id), "a%d", i % 2000);
        assert_int_equal(quota_admit(q, &p, id, NULL, NULL, 0, t, &w), 0);
        assert_true(quota_entries(q) <= 640 + 640 / 64);
    }
    assert_true(quota_scans(q) - scans <= 1000 / (640 / 64) + 1);
    quota_free(q);
}

/* A full table, and a new agent's first request under a rule with a rate
 * of its own: the rule's entry needs room, which evicts every entry at
 * rest, and the agent's own, just made and full, is at rest. It must not
 * be evicted while the admission still holds it (it was: a use after free
 * that ASan reports here). */
/* A table of two entries under <p>, ten requests a second an agent, and
 * rule <r> (host example.test) of <requests> per <per_ms>. */
static struct quota *table_of_two(struct policy *p, struct rule *r, uint64_t requests,
                                  uint64_t per_ms)
{
    static char pat[] = "example.test";
    memset(p, 0, sizeof(*p));
    set_rate(&p->limits.rate, 10, 1000, 0, 0);
    *r = make_rule(0, pat, ports_web, 2);
    set_rate(&r->rate, requests, per_ms, 0, 0);
    struct quota *q = quota_new(NULL, NULL, 2);
    assert_non_null(q);
    return q;
}

static void test_full_table_keeps_the_entry_being_admitted(void **state)
{
    (void)state;
    struct policy p;
    struct rule r;
    struct quota *q = table_of_two(&p, &r, 2, 1000);
    uint64_t w;
    assert_int_equal(quota_admit(q, &p, "other1", NULL, NULL, 0, 1 * S, &w), 0);
    assert_int_equal(quota_admit(q, &p, "other2", NULL, NULL, 0, 1 * S, &w), 0);
    assert_int_equal(quota_admit(q, &p, "new", &r, NULL, 0, 1 * S, &w), 0);
    /* both buckets of "new" were charged: the rule's allows one more */
    assert_int_equal(quota_admit(q, &p, "new", &r, NULL, 0, 1 * S, &w), 0);
    assert_int_equal(quota_admit(q, &p, "new", &r, NULL, 0, 1 * S, &w), -1);
    assert_true(w > 0);
    assert_true(quota_entries(q) <= 2);
    quota_free(q);
}

/* A request refused by a bucket that exists makes no entry for the other:
 * made, it would start full and take nothing. An agent held to its empty
 * bucket, asking under 100 rate-limited rules (a large policy), made an
 * entry for each; past the table's bound each batch of them evicted other
 * agents' busy entries into ghosts, where keys that meet merge toward
 * denial. */
static void test_refused_requests_make_no_entries(void **state)
{
    (void)state;
    struct policy p;
    struct quota *q = table_of_busy_agents(&p, 640); /* a0's hour is spent */
    enum { RULES = 100 };
    static char pats[RULES][32];
    struct rule r[RULES];
    size_t scans = quota_scans(q);
    uint64_t w;
    for (int i = 0; i < RULES; i++) {
        snprintf(pats[i], sizeof(pats[i]), "r%d.example.test", i);
        r[i] = make_rule((size_t)i, pats[i], ports_web, 2);
        set_rate(&r[i].rate, 10, 1000, 0, 0);
        assert_int_equal(quota_admit(q, &p, "a0", &r[i], NULL, 0, 1 * S, &w), -1);
        assert_true(w > 3598 * S);
    }
    assert_int_equal(quota_entries(q), 640);
    assert_int_equal(quota_scans(q), scans);
    /* Every other agent is still held to its own bucket, none evicted. */
    char id[16];
    for (int i = 1; i < 640; i++) {
        snprintf(id, sizeof(id), "a%d", i);
        assert_int_equal(quota_admit(q, &p, id, NULL, NULL, 0, 1 * S, &w), -1);
    }
    assert_int_equal(quota_scans(q), scans);
    quota_free(q);
}

/* The other way round: the rule's bucket, empty, refuses, and the agent's,
 * forgotten at rest, is not made again for it (it was, and making room for
 * it sent the rule's own busy entry to a ghost). */
static void test_a_refusing_rule_makes_no_agent_entry(void **state)
{
    (void)state;
    struct policy p;
    struct rule r;
    struct quota *q = table_of_two(&p, &r, 1, 60000);
    uint64_t w;
    assert_int_equal(quota_admit(q, &p, "a", &r, NULL, 0, 0, &w), 0);
    assert_int_equal(quota_admit(q, &p, "b", NULL, NULL, 0, 2 * S, &w),
                     0); /* a's own, full, goes */
    assert_int_equal(quota_entries(q), 2);
    size_t scans = quota_scans(q);
    assert_int_equal(quota_admit(q, &p, "a", &r, NULL, 0, 2 * S, &w), -1);
    assert_int_equal(w, 58 * S);
    assert_int_equal(quota_entries(q), 2);
    assert_int_equal(quota_scans(q), scans);
    /* Once the rule lets it through, the agent's is made and charged. */
    assert_int_equal(quota_admit(q, &p, "a", &r, NULL, 0, 60 * S, &w), 0);
    for (int i = 0; i < 9; i++)
        assert_int_equal(quota_admit(q, &p, "a", NULL, NULL, 0, 60 * S, &w), 0);
    assert_int_equal(quota_admit(q, &p, "a", NULL, NULL, 0, 60 * S, &w), -1);
    assert_int_equal(w, 100 * MS);
    quota_free(q);
}

/* A reload never grants tokens, also across one that drops the request
 * limit and keeps a bandwidth, with an upload in between: the upload's flow
 * turned the request bucket off, and the reload bringing the limit back
 * found it full. */
static void test_reload_through_a_bandwidth_only_rate_grants_nothing(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    set_rate(&p.limits.rate, 1, 3600 * 1000, 0, 1000);
    struct quota *q = quota_new(NULL, NULL, 0);
    uint64_t w;
    assert_int_equal(quota_admit(q, &p, "a", NULL, NULL, 0, 1 * S, &w), 0);
    assert_int_equal(quota_admit(q, &p, "a", NULL, NULL, 0, 1 * S, &w), -1);
    assert_true(w >= 3599 * S);
    set_rate(&p.limits.rate, 0, 3600 * 1000, 0, 1000); /* reload: bandwidth only */
    struct quota_flow *f = quota_flow_open(q, &p, "a", NULL, NULL, 0, 2 * S);
    assert_non_null(f);
    quota_flow_close(f);
    set_rate(&p.limits.rate, 1, 3600 * 1000, 0, 1000); /* reload: the limit is back */
    assert_int_equal(quota_admit(q, &p, "a", NULL, NULL, 0, 3 * S, &w), -1);
    assert_true(w >= 3590 * S);
    quota_free(q);
}

/* One denial of <id> at <t> nanoseconds on both clocks (the wall clock in
 * milliseconds). */
static bool deny(struct quota *q, const char *id, uint64_t t)
{
    return quota_note_denial(q, id, t, (int64_t)(t / MS));
}

static void test_quarantine(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    p.alerts.denied_burst = (struct threshold){.set = true, .max = 3, .per_ms = 60000};
    p.limits.quarantine_ms = 300000;
    struct quota *q = quota_new(NULL, NULL, 0);
    /* Not configured yet: nothing counted. */
    for (int i = 0; i < 5; i++)
        assert_false(deny(q, "a", 0));
    quota_configure(q, &p);
    /* max denials are not over the threshold: the detector's `n > max`. */
    assert_false(deny(q, "a", 0));
    assert_false(deny(q, "a", S));
    assert_false(deny(q, "a", 2 * S));
    assert_int_equal(quota_quarantine_left(q, "a", 2 * S), 0);
    assert_true(deny(q, "a", 3 * S));
    assert_int_equal(quota_quarantine_left(q, "a", 3 * S), 300 * S);
    assert_int_equal(quota_quarantine_left(q, "a", 63 * S), 240 * S);
    assert_int_equal(quota_quarantine_left(q, "b", 63 * S), 0);
    assert_int_equal(quota_quarantine_left(q, NULL, 63 * S), 0);
    /* In quarantine, more denials neither trip it again nor extend it. */
    for (int i = 0; i < 10; i++)
        assert_false(deny(q, "a", 4 * S));
    assert_int_equal(quota_quarantine_left(q, "a", 63 * S), 240 * S);
    /* A reload keeps it, even one that turns quarantine off. */
    struct policy off = p;
    off.limits.quarantine_ms = 0;
    quota_configure(q, &off);
    assert_int_equal(quota_quarantine_left(q, "a", 100 * S), 203 * S);
    /* Quarantine 0: alert only, never quarantined here. */
    for (int i = 0; i < 10; i++)
        assert_false(deny(q, "c", 100 * S));
    assert_int_equal(quota_quarantine_left(q, "c", 100 * S), 0);
    quota_configure(q, &p);
    /* ... but counted all along, as the detector counts: turning quarantine
     * on does not wait for a fresh storm. */
    assert_true(deny(q, "c", 101 * S));
    /* It lifts by itself. */
    assert_int_equal(quota_quarantine_left(q, "a", 303 * S), 0);
    assert_int_equal(quota_quarantine_left(q, "a", 303 * S - 1), 1);
    /* Its window has emptied since: a new storm is needed. */
    assert_false(deny(q, "a", 304 * S));
    assert_false(deny(q, "a", 304 * S));
    assert_false(deny(q, "a", 304 * S));
    assert_true(deny(q, "a", 304 * S));
    /* No denied_burst: nothing counted. */
    struct policy nob = p;
    nob.alerts.denied_burst.set = false;
    quota_configure(q, &nob);
    for (int i = 0; i < 10; i++)
        assert_false(deny(q, "d", 0));
    assert_false(deny(q, NULL, 0));
    quota_configure(q, &p);
    assert_false(deny(q, "d", 1));
    quota_free(q);
}

/* A full table of busy entries makes room from the least recently used,
 * but never from a quarantine still running: an agent that went quiet in
 * quarantine while other agents filled the table was forgotten, and its
 * next request admitted at once. */
static void test_eviction_keeps_a_running_quarantine(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    p.alerts.denied_burst = (struct threshold){.set = true, .max = 1, .per_ms = 60000};
    p.limits.quarantine_ms = 300000;
    set_rate(&p.limits.rate, 1, 3600 * 1000, 0, 0); /* one an hour: busy after one */
    struct quota *q = quota_new(NULL, NULL, 4);
    quota_configure(q, &p);
    assert_false(deny(q, "a", 1 * S));
    assert_true(deny(q, "a", 1 * S));
    uint64_t w;
    char id[16];
    for (int i = 0; i < 40; i++) { /* ten tables' worth of busy newcomers */
        snprintf(id, sizeof(id), "b%d", i);
        assert_int_equal(quota_admit(q, &p, id, NULL, NULL, 0, (uint64_t)(i + 2) * S, &w), 0);
    }
    assert_int_equal(quota_quarantine_left(q, "a", 60 * S), 241 * S);
    assert_true(quota_entries(q) <= 5); /* the quarantine, and room for the rest */
    /* Once it lifts the entry is an ordinary one again. */
    for (int i = 0; i < 8; i++) {
        snprintf(id, sizeof(id), "c%d", i);
        assert_int_equal(quota_admit(q, &p, id, NULL, NULL, 0, 400 * S, &w), 0);
    }
    assert_int_equal(quota_quarantine_left(q, "a", 400 * S), 0);
    assert_true(quota_entries(q) <= 4);
    quota_free(q);
}

/* An entry whose bandwidth bucket is in debt (an upload's bytes moved past
 * what it held), the flow closed, is never forgotten to make room: a fresh
 * entry would start with a full bucket, the debt forgiven. Here 1000 B/s
 * owing 9000 B: before, 40 busy newcomers evicted it and the agent's next
 * upload got 1000 B at once instead of waiting 9 s. */
static void test_eviction_keeps_a_debt(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    set_rate(&p.limits.rate, 0, 1000, 0, 1000);
    struct quota *q = quota_new(NULL, NULL, 4);
    struct quota_flow *f = quota_flow_open(q, &p, "a", NULL, NULL, 0, 1 * S);
    assert_non_null(f);
    quota_flow_take(f, 10000, 1 * S); /* 9000 B owed: 9 s to pay */
    quota_flow_close(f);
    set_rate(&p.limits.rate, 1, 3600 * 1000, 0, 1000); /* one request an hour: busy after one */
    uint64_t w;
    char id[16];
    for (int i = 0; i < 40; i++) { /* ten tables' worth of busy newcomers */
        snprintf(id, sizeof(id), "b%d", i);
        assert_int_equal(quota_admit(q, &p, id, NULL, NULL, 0, 1 * S + (uint64_t)(i + 1) * MS, &w),
                         0);
    }
    assert_true(quota_entries(q) <= 5); /* the debt, and room for the rest */
    f = quota_flow_open(q, &p, "a", NULL, NULL, 0, 2 * S);
    assert_non_null(f);
    assert_int_equal(quota_flow_allow(f, 1000, 2 * S), 0);
    assert_true(quota_flow_wait_ns(f, 1000, 2 * S) > 8 * S); /* 8000 B still owed */
    quota_flow_close(f);
    /* Once it is paid the entry is an ordinary one again. */
    for (int i = 0; i < 8; i++) {
        snprintf(id, sizeof(id), "c%d", i);
        assert_int_equal(quota_admit(q, &p, id, NULL, NULL, 0, 20 * S, &w), 0);
    }
    assert_true(quota_entries(q) <= 4);
    quota_free(q);
}

/* The bound a bucket promises whatever the table does: over T seconds a
 * key is admitted at most requests + burst + requests * T / per times (and
 * sends at most bandwidth * (1 + T) bytes). An agent that drains a bucket
 * and then makes the table forget it, by touching more keys than the table
 * holds (the rules of a large policy, or other agents' traffic), must not
 * find it full again: the least recently used entry dropped to make room
 * came back full, its one-time burst too, each time. */
enum { CHURN = 200, CYCLES = 100, TRIES = 10 };

static char churn_patterns[CHURN][16];
static struct rule churn_rules[CHURN];

static void make_churn_rules(void)
{
    for (int i = 0; i < CHURN; i++) {
        snprintf(churn_patterns[i], sizeof(churn_patterns[i]), "y%d.test", i);
        churn_rules[i] = make_rule((size_t)i + 1, churn_patterns[i], ports_web, 2);
        set_rate(&churn_rules[i].rate, 1, 60000, 0, 0); /* busy after one */
    }
}

/* Tries TRIES requests of agent "a" under <x> (NULL: none) every 100 ms
 * for 10 s, a table of 64 entries forgetting it in between: CHURN
 * requests of "a" under rules of their own (<by_rules>), or of CHURN
 * other agents. Asserts that the tries admitted are those the rate of <x>
 * (or <p>'s limits.rate) allows in 10 s: requests + burst + requests * 10 s
 * / per, no more (and no fewer: the first of them, before any churn). */
static void assert_bound_while_churning(const struct policy *p, const struct rule *x, bool by_rules)
{
    const struct rate_spec *rs = x != NULL ? &x->rate : &p->limits.rate;
    unsigned bound = (unsigned)(rs->requests + rs->burst + rs->requests * 10000 / rs->per_ms);
    struct quota *q = quota_new(NULL, NULL, 64);
    uint64_t w, t = 1 * S;
    unsigned admitted = 0;
    char id[16];
    make_churn_rules();
    for (int c = 0; c < CYCLES; c++, t += 100 * MS) {
        for (int k = 0; k < TRIES; k++)
            admitted += quota_admit(q, p, "a", x, NULL, 0, t, &w) == 0;
        for (int i = 0; i < CHURN; i++) {
            snprintf(id, sizeof(id), "c%d", i);
            quota_admit(q, p, by_rules ? "a" : id, by_rules ? &churn_rules[i] : NULL, NULL, 0,
                        t + (uint64_t)(i + 1) * 100000, &w);
        }
    }
    quota_free(q);
    if (admitted != bound)
        fail_msg("%u requests of %s admitted in 10 s, %u allowed", admitted,
                 x != NULL ? "rule x" : "agent a", bound);
}

static void test_churning_rules_does_not_refill_a_rule_bucket(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    struct rule x = make_rule(0, "x.test", ports_web, 2);
    set_rate(&x.rate, 2, 60000, 3, 0);         /* 2 a minute, 3 more once */
    assert_bound_while_churning(&p, &x, true); /* 5 in 10 s: 2 + 3 + 2 * 10 / 60 */
}

static void test_other_agents_churning_does_not_refill_an_agent_bucket(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    set_rate(&p.limits.rate, 2, 60000, 3, 0);
    assert_bound_while_churning(&p, NULL, false);
}

static void test_churning_does_not_refill_a_bandwidth_bucket(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    set_rate(&p.limits.rate, 0, 1000, 0, 1000); /* 1000 B/s, drained to 0: no debt */
    struct quota *q = quota_new(NULL, NULL, 64);
    uint64_t t = 1 * S, sent = 0;
    char id[16];
    for (int c = 0; c < CYCLES; c++, t += 100 * MS) {
        struct quota_flow *f = quota_flow_open(q, &p, "a", NULL, NULL, 0, t);
        assert_non_null(f);
        size_t n = quota_flow_allow(f, 100000, t);
        quota_flow_take(f, n, t);
        sent += n;
        quota_flow_close(f);
        for (int i = 0; i < CHURN; i++) {
            uint64_t now = t + (uint64_t)(i + 1) * 100000;
            snprintf(id, sizeof(id), "c%d", i);
            f = quota_flow_open(q, &p, id, NULL, NULL, 0, now);
            assert_non_null(f);
            quota_flow_take(f, quota_flow_allow(f, 1000, now), now);
            quota_flow_close(f);
        }
    }
    /* 9.9 s from the first upload to the last: 1000 + 1000 * 9.9 */
    if (sent > 10900)
        fail_msg("agent a sent %llu B in 9.9 s under 1000 B/s, at most 10900 allowed",
                 (unsigned long long)sent);
    assert_true(sent >= 10000);
    quota_free(q);
}

/* Without memory for what it would forget, the table keeps its busy
 * entries and grows, as it does for entries that cannot go, rather than
 * forget them and hand them back full. */
static void test_no_memory_for_ghosts_keeps_busy_entries(void **state)
{
    (void)state;
    struct policy p;
    struct quota *q = table_of_busy_agents(&p, 4);
    zalloc_failures = 0;
    zalloc_left = 0; /* the ghosts fail, the entry after them is made */
    zalloc_failing = true;
    uint64_t w;
    assert_int_equal(quota_admit(q, &p, "new", NULL, NULL, 0, 1 * S, &w), 0);
    zalloc_failing = false;
    assert_int_equal(zalloc_failures, 1);
    assert_int_equal(quota_entries(q), 5);
    assert_int_equal(quota_admit(q, &p, "a0", NULL, NULL, 0, 1 * S, &w), -1);
    /* With memory, the next newcomer makes room, and a0 stays refused. */
    assert_int_equal(quota_admit(q, &p, "new2", NULL, NULL, 0, 2 * S, &w), 0);
    assert_int_equal(quota_entries(q), 5);
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof(id), "a%d", i);
        assert_int_equal(quota_admit(q, &p, id, NULL, NULL, 0, 2 * S, &w), -1);
    }
    quota_free(q);
}

static void test_quarantine_again_while_over(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    p.alerts.denied_burst = (struct threshold){.set = true, .max = 2, .per_ms = 60000};
    p.limits.quarantine_ms = 5000;
    struct quota *q = quota_new(NULL, NULL, 0);
    quota_configure(q, &p);
    assert_false(deny(q, "a", 0));
    assert_false(deny(q, "a", 0));
    assert_true(deny(q, "a", 0));
    /* Still hammering while quarantined: those denials count too... */
    for (int i = 0; i < 5; i++)
        assert_false(deny(q, "a", S));
    /* ... so the first denial after it lifts, with the window still over
     * max (the detector alerts on it too), quarantines the agent again. */
    assert_int_equal(quota_quarantine_left(q, "a", 5 * S), 0);
    assert_true(deny(q, "a", 6 * S));
    assert_int_equal(quota_quarantine_left(q, "a", 6 * S), 5 * S);
    quota_free(q);
}

static void test_sliding_window(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    p.alerts.denied_burst = (struct threshold){.set = true, .max = 3, .per_ms = 10000};
    p.limits.quarantine_ms = 1000;
    struct quota *q = quota_new(NULL, NULL, 0);
    quota_configure(q, &p);
    /* Tenths of 1 s: the sum covers the current tenth and the ten before. */
    assert_false(deny(q, "a", 0));
    assert_false(deny(q, "a", 1 * S));
    assert_false(deny(q, "a", 2 * S));
    assert_true(deny(q, "a", 9999 * MS)); /* 4 within the window */
    assert_false(deny(q, "b", 0));
    assert_false(deny(q, "b", 1 * S));
    assert_false(deny(q, "b", 2 * S));
    assert_false(deny(q, "b", 11 * S));    /* the first tenth has gone: 3 */
    assert_true(deny(q, "b", 11500 * MS)); /* 4 */
    /* Three at a tenth's last millisecond and one 9.001 s later are four
     * within 10 s: the first tenth, partly out of the period, still counts. */
    for (int i = 0; i < 3; i++)
        assert_false(deny(q, "f", 999 * MS));
    assert_true(deny(q, "f", 10 * S));
    /* A window of silence forgets everything. */
    for (int i = 0; i < 3; i++)
        assert_false(deny(q, "c", 0));
    assert_false(deny(q, "c", 11 * S));
    assert_false(deny(q, "c", 11 * S));
    assert_false(deny(q, "c", 11 * S));
    assert_true(deny(q, "c", 11 * S));
    /* A reload that changes the period starts the windows over (the
     * detector does the same); one that keeps it keeps them. */
    for (int i = 0; i < 3; i++)
        assert_false(deny(q, "d", 20 * S));
    quota_configure(q, &p);
    assert_true(deny(q, "d", 20 * S));
    for (int i = 0; i < 3; i++)
        assert_false(deny(q, "e", 30 * S));
    p.alerts.denied_burst.per_ms = 20000;
    quota_configure(q, &p);
    assert_false(deny(q, "e", 30 * S));
    quota_free(q);
}

struct seen {
    int n;
    enum alert_kind kind;
    enum alert_severity severity;
    char agent[32], host[64], id[16], detail[256];
};

static void on_alert(const struct alert *a, void *arg)
{
    struct seen *s = arg;
    s->n++;
    s->kind = a->kind;
    s->severity = a->severity;
    snprintf(s->agent, sizeof(s->agent), "%s", a->agent != NULL ? a->agent : "");
    snprintf(s->host, sizeof(s->host), "%s", a->host != NULL ? a->host : "");
    snprintf(s->id, sizeof(s->id), "%s", a->id != NULL ? a->id : "");
    snprintf(s->detail, sizeof(s->detail), "%s", a->detail != NULL ? a->detail : "");
}

static void test_event_subscriber(void **state)
{
    (void)state;
    struct alert_bus bus;
    struct seen seen;
    memset(&seen, 0, sizeof(seen));
    alert_bus_init(&bus);
    assert_int_equal(alert_bus_subscribe(&bus, on_alert, &seen), 0);
    struct policy p;
    memset(&p, 0, sizeof(p));
    p.alerts.denied_burst = (struct threshold){.set = true, .max = 2, .per_ms = 60000};
    p.limits.quarantine_ms = 300000;
    struct quota *q = quota_new(&bus, NULL, 0);
    quota_configure(q, &p);
    struct egress_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.kind = EVENT_EGRESS;
    ev.agent = "ci-bot";
    ev.host = "evil.test";
    ev.id = "c1.1";
    ev.tier = TIER_NONE;
    ev.verdict = VERDICT_DENY;
    ev.reason = REASON_NOT_IN_POLICY;
    /* Not counted (nor by the detector): allowed, reported, other kinds of
     * event, no agent. */
    struct egress_event ignored[5];
    for (int i = 0; i < 5; i++)
        ignored[i] = ev;
    ignored[0].verdict = VERDICT_ALLOW;
    ignored[1].verdict = VERDICT_REPORT;
    ignored[2].kind = EVENT_EGRESS_END;
    ignored[3].kind = EVENT_EGRESS_PROGRESS;
    ignored[4].agent = NULL;
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 5; i++)
            assert_false(quota_feed(q, &ignored[i], S, 1000));
    assert_int_equal(seen.n, 0);
    assert_int_equal(quota_quarantine_left(q, "ci-bot", S), 0);
    /* Counted: any denial, `quarantined` ones included (as the detector). */
    struct egress_event qd = ev;
    qd.reason = REASON_QUARANTINED;
    assert_false(quota_feed(q, &qd, S, 1000));
    assert_false(quota_feed(q, &ev, S, 1000));
    assert_int_equal(seen.n, 0);
    ev.id = "c1.2";
    assert_true(quota_feed(q, &ev, S, 1000));
    assert_int_equal(seen.n, 1);
    assert_int_equal(seen.kind, ALERT_QUARANTINE);
    assert_int_equal(seen.severity, SEVERITY_HIGH);
    assert_string_equal(seen.agent, "ci-bot");
    assert_string_equal(seen.host, "evil.test");
    assert_string_equal(seen.id, "c1.2");
    assert_non_null(strstr(seen.detail, "quarantined for 5m"));
    assert_non_null(strstr(seen.detail, "more than 2 denials within 1m"));
    assert_non_null(strstr(seen.detail, "not_in_policy"));
    assert_int_equal(quota_quarantine_left(q, "ci-bot", S), 300 * S);
    /* Exactly one alert however long the storm goes on. */
    for (int i = 0; i < 20; i++)
        assert_false(quota_feed(q, &ev, 2 * S, 2000));
    assert_int_equal(seen.n, 1);
    /* The bus subscriber, on the real clocks; without an alert bus:
     * quarantined all the same, nothing published. */
    struct quota *q2 = quota_new(NULL, NULL, 0);
    quota_configure(q2, &p);
    for (int i = 0; i < 2; i++)
        quota_on_event(&ev, q2);
    assert_int_equal(quota_quarantine_left(q2, "ci-bot", quota_now()), 0);
    quota_on_event(&ev, q2);
    assert_true(quota_quarantine_left(q2, "ci-bot", quota_now()) > 0);
    quota_free(q2);
    quota_free(q);
}

/* A quota and a denied_burst detector on one alert bus, the count of the
 * alerts each raised, and a denial of ci-bot to feed both. */
struct lockstep {
    int quarantines, bursts;
    struct alert_bus bus;
    struct policy p;
    struct quota *q;
    struct detectors *d;
    struct egress_event ev;
};

static void count_kinds(const struct alert *a, void *arg)
{
    struct lockstep *l = arg;
    if (a->kind == ALERT_QUARANTINE)
        l->quarantines++;
    else if (a->kind == ALERT_DENIED_BURST)
        l->bursts++;
}

/* Sets up <l> for denied_burst {max: <max>, per: <per_ms>} and a
 * quarantine of 10 minutes. */
static void lockstep_open(struct lockstep *l, uint64_t max, uint64_t per_ms)
{
    memset(l, 0, sizeof(*l));
    alert_bus_init(&l->bus);
    assert_int_equal(alert_bus_subscribe(&l->bus, count_kinds, l), 0);
    l->p.alerts.denied_burst = (struct threshold){.set = true, .max = max, .per_ms = per_ms};
    l->p.limits.quarantine_ms = 600000;
    l->q = quota_new(&l->bus, NULL, 0);
    l->d = detectors_new(&l->bus, NULL);
    assert_non_null(l->q);
    assert_non_null(l->d);
    quota_configure(l->q, &l->p);
    assert_int_equal(detectors_configure(l->d, &l->p), 0);
    l->ev.kind = EVENT_EGRESS;
    l->ev.agent = "ci-bot";
    l->ev.host = "evil.test";
    l->ev.tier = TIER_NONE;
    l->ev.verdict = VERDICT_DENY;
    l->ev.reason = REASON_NOT_IN_POLICY;
}

/* The quarantine trips on the very denial that raises the denied_burst
 * alert: the same events, on the same clock, through both. */
static void test_trips_with_the_detector(void **state)
{
    (void)state;
    struct lockstep seen;
    lockstep_open(&seen, 3, 10000);
    struct quota *q = seen.q;
    struct detectors *d = seen.d;
    struct policy p = seen.p;
    struct egress_event ev = seen.ev;
    const int64_t t0 = 1764529200000; /* a wall clock in ms, 2025-11-30 */
    for (int i = 1; i <= 3; i++) {
        quota_feed(q, &ev, (uint64_t)i * S, t0 + i * 1000);
        detectors_feed(d, &ev, t0 + i * 1000);
        assert_int_equal(seen.bursts, 0);
        assert_int_equal(seen.quarantines, 0);
    }
    quota_feed(q, &ev, 4 * S, t0 + 4000);
    detectors_feed(d, &ev, t0 + 4000);
    assert_int_equal(seen.bursts, 1);
    assert_int_equal(seen.quarantines, 1);

    /* And for any sequence: with a quarantine shorter than the gap between
     * events (so each trip can happen), the quarantine trips exactly when
     * the detector's count is over max (alerts folded or not). */
    p.limits.quarantine_ms = 1;
    quota_configure(q, &p);
    uint32_t rnd = 12345;
    int64_t wall = t0 + 100000;
    uint64_t mono = 1000 * S; /* past the 10 min quarantine above */
    int trips = 0;
    for (int i = 0; i < 5000; i++) {
        rnd = rnd * 1103515245u + 12345u;
        uint64_t gap_ms = 1 + (rnd >> 8) % 2500;
        wall += (int64_t)gap_ms;
        mono += gap_ms * MS;
        ev.agent = (rnd >> 20) % 3 == 0 ? "other" : "ci-bot";
        ev.verdict = (rnd >> 24) % 4 == 0 ? VERDICT_ALLOW : VERDICT_DENY;
        ev.reason = (rnd >> 26) % 3 == 0   ? REASON_QUARANTINED
                    : (rnd >> 26) % 3 == 1 ? REASON_RATE_LIMITED
                                           : REASON_GATEWAY_OVERLOADED;
        uint64_t before = detectors_published(d) + detectors_folded(d);
        bool tripped = quota_feed(q, &ev, mono, wall);
        detectors_feed(d, &ev, wall);
        bool raised = detectors_published(d) + detectors_folded(d) > before;
        assert_int_equal(tripped, raised);
        trips += tripped;
    }
    assert_true(trips > 100 && trips < 4000); /* the sequence exercised both */
    detectors_free(d);
    quota_free(q);
}

/* Hands <l>'s event to both bus subscribers, the quarantine's first (as
 * the gateway subscribes them). */
static void both_on_event(struct lockstep *l)
{
    quota_on_event(&l->ev, l->q);
    detectors_on_event(&l->ev, l->d);
}

/* The bus subscribers count a denial at the time it happened, the event's
 * own wall clock, which the quarantine and the denied_burst detector both
 * read: each reading the clock itself as it got the event, they could put
 * one denial in two different tenths of the window (the quarantine's
 * subscriber runs first, and publishes its alert before the detector's
 * runs), and trip on different denials. Two denials ten seconds apart are
 * not two within a second, however close together they are handed on. */
static void test_subscribers_count_at_the_event_time(void **state)
{
    (void)state;
    struct lockstep l;
    lockstep_open(&l, 1, 1000);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    l.ev.ts = now;
    l.ev.ts.tv_sec -= 10;
    both_on_event(&l);
    l.ev.ts = now;
    both_on_event(&l);
    assert_int_equal(l.quarantines, 0);
    assert_int_equal(l.bursts, 0);
    assert_int_equal(quota_quarantine_left(l.q, "ci-bot", quota_now()), 0);
    /* A second one at that same time is over max for both. */
    both_on_event(&l);
    assert_int_equal(l.quarantines, 1);
    assert_int_equal(l.bursts, 1);
    assert_true(quota_quarantine_left(l.q, "ci-bot", quota_now()) > 0);
    detectors_free(l.d);
    quota_free(l.q);
}

/* Hands <l>'s event to both twenty times (max is 1): neither trips. */
static void twenty_not_counted(struct lockstep *l)
{
    for (int i = 0; i < 20; i++)
        both_on_event(l);
    assert_int_equal(l->quarantines, 0);
    assert_int_equal(l->bursts, 0);
    assert_int_equal(quota_quarantine_left(l->q, "ci-bot", quota_now()), 0);
}

/* A tunnel the policy denied when it was decided again (a reload, the
 * UTC day's change) is the policy's act, not the agent's: an operator
 * removing a rule under twenty open tunnels must not quarantine their
 * agent, nor raise denied_burst. The agent's own denials still count. */
static void test_redecided_denials_are_not_the_agents(void **state)
{
    (void)state;
    struct lockstep l;
    lockstep_open(&l, 1, 60000);
    clock_gettime(CLOCK_REALTIME, &l.ev.ts);
    l.ev.redecided = true;
    twenty_not_counted(&l);
    l.ev.redecided = false;
    both_on_event(&l);
    both_on_event(&l);
    assert_int_equal(l.quarantines, 1);
    assert_int_equal(l.bursts, 1);
    detectors_free(l.d);
    quota_free(l.q);
}

/* A denial for the gateway's own shortage (gateway_overloaded: no
 * descriptor or memory for the upstream socket) is not the agent's doing:
 * during an overload every busy agent would trip denied_burst and be
 * quarantined, a brief shortage made an outage. Neither counts it; the
 * upstream's failures (dns_failure, upstream_unreachable: a retry storm)
 * still count, for both. */
static void test_overloaded_denials_are_not_the_agents(void **state)
{
    (void)state;
    struct lockstep l;
    lockstep_open(&l, 1, 60000);
    clock_gettime(CLOCK_REALTIME, &l.ev.ts);
    l.ev.reason = REASON_GATEWAY_OVERLOADED;
    assert_false(bus_counts_denial(&l.ev));
    twenty_not_counted(&l);
    l.ev.reason = REASON_DNS_FAILURE;
    assert_true(bus_counts_denial(&l.ev));
    both_on_event(&l);
    l.ev.reason = REASON_UPSTREAM_UNREACHABLE;
    both_on_event(&l);
    assert_int_equal(l.quarantines, 1);
    assert_int_equal(l.bursts, 1);
    detectors_free(l.d);
    quota_free(l.q);
}

/* A full table of busy entries makes room from the least recently used,
 * but never from a denial window still counting: the quarantine forgot an
 * agent's denials when other agents filled the table between them, while
 * the denied_burst detector, whose table keeps every agent with a window
 * in use, still had them, and raised its alert on a denial the quarantine
 * took for the first. */
static void test_eviction_keeps_a_counting_window(void **state)
{
    (void)state;
    struct lockstep l;
    lockstep_open(&l, 2, 60000);
    quota_free(l.q);
    l.q = quota_new(&l.bus, NULL, 4);
    assert_non_null(l.q);
    quota_configure(l.q, &l.p);
    set_rate(&l.p.limits.rate, 1, 3600 * 1000, 0, 0); /* one an hour: busy after one */
    const int64_t t0 = 1764529200000;                 /* a wall clock in ms, 2025-11-30 */
    for (int i = 1; i <= 2; i++) {
        quota_feed(l.q, &l.ev, (uint64_t)i * S, t0 + i * 1000);
        detectors_feed(l.d, &l.ev, t0 + i * 1000);
    }
    uint64_t w;
    char id[16];
    for (int i = 0; i < 40; i++) { /* ten tables' worth of busy newcomers */
        snprintf(id, sizeof(id), "b%d", i);
        assert_int_equal(quota_admit(l.q, &l.p, id, NULL, NULL, 0, (uint64_t)(i + 3) * S, &w), 0);
    }
    assert_true(quota_entries(l.q) <= 5); /* the window, and room for the rest */
    assert_int_equal(l.quarantines, 0);
    assert_int_equal(l.bursts, 0);
    quota_feed(l.q, &l.ev, 50 * S, t0 + 50000);
    detectors_feed(l.d, &l.ev, t0 + 50000);
    assert_int_equal(l.bursts, 1);
    assert_int_equal(l.quarantines, 1);
    assert_int_equal(quota_quarantine_left(l.q, "ci-bot", 50 * S), 600 * S);

    /* A table all of whose entries are busy: a newcomer's denial is counted
     * all the same, the table growing past its bound rather than forget a
     * count (by one entry at most for each agent denied within twice the
     * period), and it shrinks back once the windows have gone quiet. */
    for (int i = 0; i < 8; i++) {
        snprintf(id, sizeof(id), "c%d", i);
        l.ev.agent = id;
        quota_feed(l.q, &l.ev, 60 * S, t0 + 60000);
    }
    assert_int_equal(quota_entries(l.q), 9); /* ci-bot's quarantine, c0 to c7 */
    for (int i = 0; i < 8; i++) {
        snprintf(id, sizeof(id), "c%d", i);
        l.ev.agent = id;
        quota_feed(l.q, &l.ev, 61 * S, t0 + 61000);
    }
    assert_int_equal(l.quarantines, 1);
    l.ev.agent = "c7";
    quota_feed(l.q, &l.ev, 62 * S, t0 + 62000);
    assert_int_equal(l.quarantines, 2); /* its third denial */
    assert_int_equal(quota_admit(l.q, &l.p, "d", NULL, NULL, 0, 200 * S, &w), 0);
    assert_int_equal(quota_entries(l.q), 3); /* the two quarantines, and d */

    /* A reload that changes the period empties the windows, as the
     * detector's: those entries are quiet at once, not kept for twice the
     * new period. */
    for (int i = 0; i < 8; i++) {
        snprintf(id, sizeof(id), "e%d", i);
        l.ev.agent = id;
        quota_feed(l.q, &l.ev, 300 * S, t0 + 300000);
    }
    assert_int_equal(quota_entries(l.q), 10); /* the quarantines, e0 to e7 (d made room) */
    l.p.alerts.denied_burst.per_ms = 3600 * 1000;
    quota_configure(l.q, &l.p);
    assert_int_equal(quota_admit(l.q, &l.p, "f", NULL, NULL, 0, 301 * S, &w), 0);
    assert_int_equal(quota_entries(l.q), 3); /* the two quarantines, and f */
    detectors_free(l.d);
    quota_free(l.q);
}
static void test_flows(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    struct rule r = make_rule(0, "api.example.test", ports_web, 2);
    struct quota *q = quota_new(NULL, NULL, 0);
    /* Nothing shaped: a flow that meters nothing (a reload may bring a
     * limit: test_reload_shapes_a_flow_opened_unshaped), and no entry. */
    set_rate(&r.rate, 5, 1000, 0, 0); /* requests only */
    struct quota_flow *none[2] = {quota_flow_open(q, &p, "a", &r, NULL, 0, 0),
                                  quota_flow_open(q, &p, "a", NULL, NULL, 0, 0)};
    for (int i = 0; i < 2; i++) {
        assert_non_null(none[i]);
        assert_false(quota_flow_metered(none[i]));
        assert_int_equal(quota_flow_allow(none[i], 100000, 0), 100000);
        quota_flow_take(none[i], 100000, 0);
        assert_int_equal(quota_flow_wait_ns(none[i], 100000, 0), 0);
        quota_flow_close(none[i]);
    }
    assert_int_equal(quota_entries(q), 0);
    set_rate(&p.limits.rate, 0, 1000, 0, 16000);
    assert_null(quota_flow_open(q, &p, NULL, &r, NULL, 0, 0));
    /* Agent 16000 B/s, rule 1600 B/s: the smaller wins. */
    set_rate(&r.rate, 0, 1000, 0, 1600);
    struct quota_flow *f = quota_flow_open(q, &p, "a", &r, NULL, 0, 0);
    assert_non_null(f);
    assert_true(quota_flow_metered(f));
    assert_int_equal(quota_flow_allow(f, 100000, 0), 1600);
    assert_int_equal(quota_flow_allow(f, 100, 0), 100);
    quota_flow_take(f, 1600, 0);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 0);
    /* The wait is for a sixteenth of the smaller bucket: 100 B at 1600 B/s. */
    assert_int_equal(quota_flow_wait_ns(f, 100000, 0), 62500 * 1000);
    assert_int_equal(quota_flow_wait_ns(f, 10, 0), 6250 * 1000);
    assert_int_equal(quota_flow_allow(f, 100000, 500 * MS), 800);
    /* A second flow of the same agent shares its buckets. */
    struct quota_flow *g = quota_flow_open(q, &p, "a", &r, NULL, 0, 500 * MS);
    assert_int_equal(quota_flow_allow(g, 100000, 500 * MS), 800);
    /* Bytes that moved anyway (debt) hold back what follows. */
    quota_flow_take(g, 2400, 500 * MS); /* 1600 owed on the rule */
    assert_int_equal(quota_flow_allow(f, 100000, 1500 * MS), 0);
    assert_int_equal(quota_flow_allow(f, 100000, 2000 * MS), 800);
    /* No event base: pause cannot arm a timer. */
    assert_int_equal(quota_flow_pause(f, 100, 0, NULL, NULL), -1);
    assert_false(quota_flow_paused(f));
    /* Nor can allow-or-pause, whose caller then fails the exchange: the
     * bytes neither go unmetered (before, all <want> of them were let go)
     * nor wait with nothing to end the wait. What the bucket holds still
     * goes. */
    size_t n = 12345;
    quota_flow_take(f, 800, 2000 * MS); /* the rule's bucket is empty */
    assert_int_equal(quota_flow_allow_or_pause(f, 100000, 2000 * MS, NULL, NULL, &n), -1);
    assert_int_equal(n, 0);
    assert_false(quota_flow_paused(f));
    assert_int_equal(quota_flow_allow_or_pause(f, 100000, 2500 * MS, NULL, NULL, &n), 0);
    assert_int_equal(n, 800);
    assert_false(quota_flow_paused(NULL));
    quota_flow_close(g);
    quota_flow_close(f);
    quota_free(q);
}

/* A flow lets bytes through only once its buckets hold what a pause waits
 * for (a sixteenth of the smallest bucket, or what is waiting when that is
 * less), not the trickle that came in since the last look: handing that
 * out made a shaped upload move a few bytes per read and send, as fast as
 * the loop went round, and never pause (a tunnel at 4 MiB/s took a whole
 * core, and a plain upload at 1 MiB/s held the loop ~200 ms at a time,
 * every other agent's requests waiting). */
/* Out of memory while a flow opens (the flow itself, or the entry of one
 * of the limits it is metered by): no flow at all, which the gate refuses
 * (shape/admit.c), never one that lets bytes go past a limit that applies.
 * Each turn lets one more allocation through, until the open needs no
 * more than it gets; the flows of the turns that failed left nothing held
 * (their entries still go when the table needs room). */
static void test_flow_open_out_of_memory(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    struct rule r = make_rule(0, "api.example.test", ports_web, 2);
    set_rate(&p.limits.rate, 0, 1000, 0, 1600);
    set_rate(&r.rate, 0, 1000, 0, 16000);
    struct rule grant = post_grant(0, 1000, 800);
    const struct rule *by_grant[] = {&grant};
    struct quota *q = quota_new(NULL, NULL, 0);
    assert_non_null(q);
    unsigned turns = 0;
    for (unsigned n = 0;; n++) {
        assert_true(n < 100);
        char id[16];
        snprintf(id, sizeof(id), "a%u", n); /* an agent new to the table each turn */
        zalloc_failures = 0;
        zalloc_left = n;
        zalloc_failing = true;
        struct quota_flow *f = quota_flow_open(q, &p, id, &r, by_grant, 1, 0);
        zalloc_failing = false;
        if (zalloc_failures == 0) {
            assert_non_null(f);
            assert_true(quota_flow_metered(f));
            assert_int_equal(quota_flow_allow(f, 100000, 0), 800);
            quota_flow_close(f);
            break;
        }
        turns++;
        if (f != NULL) { /* what the gate would have let go: metered by nothing or one */
            size_t allowed = quota_flow_allow(f, 100000, 0);
            quota_flow_close(f);
            fail_msg("turn %u: a flow opened short of memory, %zu bytes allowed at once", n,
                     allowed);
        }
    }
    assert_true(turns >= 4); /* the flow, the agent's entry, the rule's, the grant's */
    quota_free(q);
}

static void test_flow_waits_for_a_useful_amount(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    set_rate(&p.limits.rate, 0, 1000, 0, 16000); /* pieces of 1000 B, each 62.5 ms */
    struct quota *q = quota_new(NULL, NULL, 0);
    struct quota_flow *f = quota_flow_open(q, &p, "a", NULL, NULL, 0, 0);
    assert_non_null(f);
    quota_flow_take(f, 16000, 0);
    /* 1 ms later 16 bytes came in: too few for 100000 waiting, enough for 10. */
    assert_int_equal(quota_flow_allow(f, 100000, 1 * MS), 0);
    assert_int_equal(quota_flow_allow(f, 10, 1 * MS), 10);
    assert_int_equal(quota_flow_allow(f, 16, 1 * MS), 16);
    /* Once the wait is over, what it waited for goes, then nothing. */
    uint64_t t = 1 * MS + quota_flow_wait_ns(f, 100000, 1 * MS);
    assert_int_equal(t, 62500 * 1000);
    assert_int_equal(quota_flow_allow(f, 100000, t), 1000);
    quota_flow_take(f, 1000, t);
    assert_int_equal(quota_flow_allow(f, 100000, t + 10 * MS), 0);
    quota_flow_close(f);
    quota_free(q);
}

/* Makes <p> a policy of one rule <r> for api.example.test, the agent's
 * rate and the rule's both <requests> per <per_ms>, with bandwidths
 * <agent_bw> and <rule_bw>. */
static void one_rule_policy(struct policy *p, struct rule *r, uint64_t requests, uint64_t per_ms,
                            uint64_t agent_bw, uint64_t rule_bw)
{
    memset(p, 0, sizeof(*p));
    *r = make_rule(0, "api.example.test", ports_web, 2);
    set_rate(&p->limits.rate, requests, per_ms, 0, agent_bw);
    set_rate(&r->rate, requests, per_ms, 0, rule_bw);
    p->rules = r;
    p->nrules = 1;
}

/* A reload reshapes the uploads already running: a flow opened under
 * 16000 B/s (agent) and 1600 B/s (rule) follows the reloaded policy's
 * rates at once, clamped and never granted more; one whose limit is gone
 * goes unmetered, and the bucket is as it was when the limit comes back. */
static void test_reload_reshapes_running_flows(void **state)
{
    (void)state;
    struct policy p;
    struct rule r;
    one_rule_policy(&p, &r, 0, 1000, 16000, 1600);
    struct quota *q = quota_new(NULL, NULL, 0);
    struct quota_flow *f = quota_flow_open(q, &p, "a", &r, NULL, 0, 0);
    assert_non_null(f);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 1600);
    /* The reloaded policy: the rule moved (another index, another address)
     * and down to 400 B/s: the 1600 bytes held are clamped to 400. */
    struct policy p2;
    memset(&p2, 0, sizeof(p2));
    struct rule rules2[2] = {make_rule(0, "other.example.test", ports_web, 2),
                             make_rule(1, "api.example.test", ports_web, 2)};
    set_rate(&p2.limits.rate, 0, 1000, 0, 16000);
    set_rate(&rules2[0].rate, 0, 1000, 0, 100000);
    set_rate(&rules2[1].rate, 0, 1000, 0, 400);
    p2.rules = rules2;
    p2.nrules = 2;
    quota_reshape(q, &p2, 0);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 400);
    quota_flow_take(f, 400, 0);
    assert_int_equal(quota_flow_allow(f, 100000, 500 * MS), 200); /* refills at 400 B/s */
    /* Up to 3200 B/s: refills faster, grants nothing at once. */
    set_rate(&rules2[1].rate, 0, 1000, 0, 3200);
    quota_reshape(q, &p2, 500 * MS);
    assert_int_equal(quota_flow_allow(f, 100000, 500 * MS), 200);
    assert_int_equal(quota_flow_allow(f, 100000, 1 * S), 1800);
    /* The agent's limit goes down to 1000 B/s: it is the smaller now. */
    set_rate(&p2.limits.rate, 0, 1000, 0, 1000);
    quota_reshape(q, &p2, 1 * S);
    assert_int_equal(quota_flow_allow(f, 100000, 1 * S), 1000);
    quota_flow_take(f, 1000, 1 * S);
    /* Both limits taken away: the running flow goes unmetered... */
    p2.limits.rate.set = false;
    rules2[1].rate.set = false;
    quota_reshape(q, &p2, 1 * S);
    assert_false(quota_flow_metered(f)); /* entries held, their buckets passed by */
    assert_int_equal(quota_flow_allow(f, 100000, 1 * S), 100000);
    quota_flow_take(f, 100000, 1 * S);
    /* ...and when they come back, the buckets are where they were: the
     * agent's empty since 1 s, the unmetered bytes not charged. */
    p2.limits.rate.set = true;
    rules2[1].rate.set = true;
    quota_reshape(q, &p2, 1500 * MS);
    assert_true(quota_flow_metered(f));
    assert_int_equal(quota_flow_allow(f, 100000, 1500 * MS), 500);
    quota_flow_close(f);
    quota_free(q);
}

/* A reload brings the request buckets to their new rates when it happens,
 * not at the agent's next request: from the reload on, they refill at the
 * new rate. (The next admission reconfigured them, after refilling them
 * for all the time since at the old rate: an agent slowed by a reload from
 * 10 requests a second to 10 an hour found its buckets full again ten
 * seconds later.) */
static void test_reload_reshapes_request_buckets(void **state)
{
    (void)state;
    struct policy p, p2, rule_only;
    struct rule r, r2;
    one_rule_policy(&p, &r, 10, 1000, 0, 0);
    struct quota *q = quota_new(NULL, NULL, 0);
    uint64_t w;
    for (int i = 0; i < 10; i++)
        assert_int_equal(quota_admit(q, &p, "a", &r, NULL, 0, 0, &w), 0);
    assert_int_equal(quota_admit(q, &p, "a", &r, NULL, 0, 0, &w), -1);
    /* 1 ms later, the reload: 10 an hour, for the agent and the rule (now
     * at another address). */
    one_rule_policy(&p2, &r2, 10, 3600 * 1000, 0, 0);
    quota_reshape(q, &p2, 1 * MS);
    /* 10 s on, neither holds a token (a thirtieth of one each). */
    assert_int_equal(quota_admit(q, &p2, "a", NULL, NULL, 0, 10 * S, &w), -1);
    assert_true(w > 300 * S);
    rule_only = p2;
    rule_only.limits.rate.set = false;
    assert_int_equal(quota_admit(q, &rule_only, "a", &r2, NULL, 0, 10 * S, &w), -1);
    assert_true(w > 300 * S);
    quota_free(q);
}

/* A policy of one rule (api.example.test, ports 80 and 443, no rate),
 * and a quota with a flow of agent "a" opened under it: metered by
 * nothing. */
struct unshaped_flow {
    struct policy p;
    struct rule r;
    struct quota_flow *f;
};

/* Fills <u> and returns its quota (the caller frees it). */
static struct quota *open_unshaped_flow(struct unshaped_flow *u)
{
    memset(&u->p, 0, sizeof(u->p));
    u->r = make_rule(0, "api.example.test", ports_web, 2);
    u->p.rules = &u->r;
    u->p.nrules = 1;
    struct quota *q = quota_new(NULL, NULL, 0);
    assert_non_null(q);
    u->f = quota_flow_open(q, &u->p, "a", &u->r, NULL, 0, 0);
    assert_non_null(u->f);
    assert_int_equal(quota_flow_allow(u->f, 100000, 0), 100000);
    assert_false(quota_flow_metered(u->f));
    return q;
}

/* A flow opened where no bandwidth was limited is held to the limits a
 * reload brings in: the agent's, then the rule's, each starting full. */
static void test_reload_shapes_a_flow_opened_unshaped(void **state)
{
    (void)state;
    struct unshaped_flow u;
    struct quota *q = open_unshaped_flow(&u);
    struct quota_flow *f = u.f;
    quota_flow_take(f, 100000, 0);
    /* The reload limits the agent to 16000 B/s. */
    struct policy p2;
    memset(&p2, 0, sizeof(p2));
    struct rule r2 = make_rule(0, "api.example.test", ports_web, 2);
    set_rate(&p2.limits.rate, 0, 1000, 0, 16000);
    p2.rules = &r2;
    p2.nrules = 1;
    quota_reshape(q, &p2, 1 * S);
    assert_true(quota_flow_metered(f));
    assert_int_equal(quota_flow_allow(f, 100000, 1 * S), 16000);
    quota_flow_take(f, 16000, 1 * S);
    assert_int_equal(quota_flow_allow(f, 100000, 1 * S), 0);
    /* The next one limits the rule (found by its identity) to 1600 B/s. */
    set_rate(&r2.rate, 0, 1000, 0, 1600);
    quota_reshape(q, &p2, 2 * S);
    assert_int_equal(quota_flow_allow(f, 100000, 2 * S), 1600);
    quota_flow_close(f);
    assert_int_equal(quota_entries(q), 2);
    quota_free(q);
}

static void test_flow_set_rule(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    struct rule r = make_rule(0, "api.example.test", ports_web, 2);
    set_rate(&r.rate, 0, 1000, 0, 1600);
    p.rules = &r;
    p.nrules = 1;
    struct quota *q = quota_new(NULL, NULL, 0);
    struct quota_flow *f = quota_flow_open(q, &p, "a", &r, NULL, 0, 0);
    quota_flow_take(f, 1600, 0); /* the rule's bucket is empty */
    assert_int_equal(quota_flow_allow(f, 100000, 0), 0);
    /* The reload adds a port: another identity, at 3200 B/s. quota_reshape()
     * finds no rule of the old one, and the flow goes unmetered... */
    struct policy p2;
    memset(&p2, 0, sizeof(p2));
    struct rule r2 = make_rule(0, "api.example.test", ports_web, 2);
    uint16_t ports3[] = {80, 443, 8080};
    r2.ports = ports3;
    r2.nports = 3;
    set_rate(&r2.rate, 0, 1000, 0, 3200);
    p2.rules = &r2;
    p2.nrules = 1;
    quota_reshape(q, &p2, 0);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 100000);
    /* ...until its decision names the new rule: its bucket, new and full. */
    quota_flow_set_rule(f, &r2, NULL, 0, 0);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 3200);
    quota_flow_take(f, 3200, 0);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 0);
    /* Set to the same rule again: the same bucket, still empty. */
    quota_flow_set_rule(f, &r2, NULL, 0, 0);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 0);
    /* A rule without bandwidth: the flow is metered by none. */
    struct rule r3 = make_rule(0, "*.example.test", ports_web, 2);
    quota_flow_set_rule(f, &r3, NULL, 0, 0);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 100000);
    quota_flow_set_rule(f, NULL, NULL, 0, 0);
    assert_int_equal(quota_flow_allow(f, 100000, 0), 100000);
    quota_flow_close(f);
    assert_int_equal(quota_entries(q), 2); /* the two rules' entries, held by none */
    quota_free(q);
}

/* A decision made again (quota_flow_set_rule()) on a full table: flow f
 * of agent "a", under rule r1 and held also by r2's limits, both drained,
 * is pointed at r3 (a new identity) and r2. The table (128 entries, a
 * batch of 2) is full of entries held by other uploads, so r3's entry
 * needs room, and the entries f has just let go of are the only ones that
 * can go: r2's is dropped and made again while f still uses it. Its
 * ghost (ghosts.h) brings it back no fuller than it went, its request
 * bucket too; without it, r2's bucket came back full (1000 B let through
 * where it held 100), the limit reset by re-deciding on a full table. */
static void test_flow_set_rule_on_a_full_table_keeps_its_buckets(void **state)
{
    (void)state;
    enum { MAX = 128 };
    struct policy p;
    memset(&p, 0, sizeof(p));
    set_rate(&p.limits.rate, 0, 1000, 0, 1000000); /* every upload holds its agent's entry */
    struct rule r[3];
    static char *pats[] = {"r1.example.test", "r2.example.test", "r3.example.test"};
    for (int i = 0; i < 3; i++) {
        r[i] = make_rule((size_t)i, pats[i], ports_web, 2);
        set_rate(&r[i].rate, 1, 3600 * 1000, 0, 1000); /* one request an hour, 1000 B/s */
    }
    struct quota *q = quota_new(NULL, NULL, MAX);
    assert_non_null(q);
    uint64_t w;
    const struct rule *held[] = {&r[1]};
    assert_int_equal(quota_admit(q, &p, "a", &r[0], held, 1, 1 * S, &w), 0);
    struct quota_flow *f = quota_flow_open(q, &p, "a", &r[0], held, 1, 1 * S);
    assert_non_null(f);
    quota_flow_take(f, quota_flow_allow(f, 1000, 1 * S), 1 * S); /* r1 and r2 drained */
    assert_int_equal(quota_flow_allow(f, 1000, 1 * S), 0);
    static char ids[MAX][16];
    struct quota_flow *others[MAX];
    size_t nothers = 0;
    while (quota_entries(q) < MAX) {
        snprintf(ids[nothers], sizeof(ids[nothers]), "h%zu", nothers);
        others[nothers] = quota_flow_open(q, &p, ids[nothers], NULL, NULL, 0, 1 * S);
        assert_non_null(others[nothers]);
        nothers++;
    }
    /* 100 ms later, the decision names r3, held also by r2. */
    const struct rule *held2[] = {&r[1]};
    quota_flow_set_rule(f, &r[2], held2, 1, 1 * S + 100 * MS);
    /* r3 is new, full; r2 earned 100 B in the 100 ms: nothing more. */
    uint64_t n = quota_flow_allow(f, 100000, 1 * S + 100 * MS);
    if (n > 100)
        fail_msg("%llu B let through after the re-decision, r2 holds 100", (unsigned long long)n);
    assert_int_equal(quota_admit(q, &p, "a", &r[2], held2, 1, 1 * S + 100 * MS, &w), -1);
    assert_true(w > 3590 * S);
    quota_flow_close(f);
    for (size_t i = 0; i < nothers; i++)
        quota_flow_close(others[i]);
    quota_free(q);
}

static void on_resume(void *arg)
{
    int *n = arg;
    (*n)++;
}

/* A decision made again under a reloaded policy points a running flow at
 * a rule of another identity (quota_flow_set_rule()), and there is no
 * memory for that rule's entry: the flow is held, metered, letting
 * nothing through and looked at again a second later, until the entry
 * can be made; then it moves under the new rule's limit. It once went on
 * without that limit, every byte let through. */
static void test_flow_set_rule_out_of_memory(void **state)
{
    (void)state;
    struct unshaped_flow u;
    struct quota *q = open_unshaped_flow(&u);
    struct quota_flow *f = u.f;
    struct rule r2 = make_rule(0, "api.example.test", ports_8080, 1);
    set_rate(&r2.rate, 0, 1000, 0, 1600);
    zalloc_failures = 0;
    zalloc_left = 0;
    zalloc_failing = true;
    quota_flow_set_rule(f, &r2, NULL, 0, 1 * S);
    assert_int_equal(zalloc_failures, 1);
    assert_true(quota_flow_metered(f));
    zalloc_left = 0; /* still no memory at the next look */
    assert_int_equal(quota_flow_allow(f, 100000, 1 * S), 0);
    assert_int_equal(zalloc_failures, 2);
    assert_int_equal(quota_flow_wait_ns(f, 100000, 1 * S), 1 * S);
    zalloc_failing = false;
    assert_int_equal(quota_flow_allow(f, 100000, 2 * S), 1600);
    quota_flow_take(f, 1600, 2 * S);
    assert_int_equal(quota_flow_allow(f, 100000, 2 * S), 0);
    quota_flow_close(f);
    quota_free(q);
}

/* A reload that brings a bandwidth limit to a running upload, with no
 * memory for that limit's entry: refused whole (quota_reshape() fails,
 * nothing changed: the gateway keeps the old policy), never a reshape
 * that leaves the upload unmetered under a policy that limits it. Each
 * turn lets one more allocation through, until the reshape gets all it
 * needs. */
static void test_reload_out_of_memory(void **state)
{
    (void)state;
    struct unshaped_flow u;
    struct quota *q = open_unshaped_flow(&u);
    struct quota_flow *f = u.f;
    /* The reload limits the agent's bandwidth and the rule's. */
    struct policy p2;
    memset(&p2, 0, sizeof(p2));
    struct rule r2 = make_rule(0, "api.example.test", ports_web, 2);
    set_rate(&p2.limits.rate, 0, 1000, 0, 1600);
    set_rate(&r2.rate, 0, 1000, 0, 16000);
    p2.rules = &r2;
    p2.nrules = 1;
    unsigned turns = 0;
    for (unsigned n = 0;; n++) {
        assert_true(n < 100);
        zalloc_failures = 0;
        zalloc_left = n;
        zalloc_failing = true;
        int rc = quota_reshape(q, &p2, 1 * S);
        zalloc_failing = false;
        if (zalloc_failures == 0) {
            assert_int_equal(rc, 0);
            break;
        }
        turns++;
        if (rc == 0) /* what the gateway would have put in force */
            fail_msg("turn %u: a reload short of memory came into force, %zu bytes allowed at once",
                     n, quota_flow_allow(f, 100000, 1 * S));
        /* Refused: the flow unmetered, as the old policy has it. */
        assert_false(quota_flow_metered(f));
        assert_int_equal(quota_flow_allow(f, 100000, 1 * S), 100000);
    }
    assert_true(turns >= 5); /* the prepare, the index and an identity, the entries */
    assert_true(quota_flow_metered(f));
    assert_int_equal(quota_flow_allow(f, 100000, 1 * S), 1600);
    quota_flow_close(f);
    quota_free(q);
}

static void test_flow_pause_timer(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct policy p;
    memset(&p, 0, sizeof(p));
    set_rate(&p.limits.rate, 0, 1000, 0, 16000); /* 1000 B every 62.5 ms */
    struct quota *q = quota_new(NULL, base, 0);
    uint64_t t0 = quota_now();
    struct quota_flow *f = quota_flow_open(q, &p, "a", NULL, NULL, 0, t0);
    quota_flow_take(f, 16000, t0);
    int fired = 0;
    assert_int_equal(quota_flows_waiting(q), 0);
    assert_int_equal(quota_flow_pause(f, 1000, t0, on_resume, &fired), 0);
    assert_true(quota_flow_paused(f));
    /* Re-arming replaces: one call, not two; one flow waiting. */
    assert_int_equal(quota_flow_pause(f, 1000, t0, on_resume, &fired), 0);
    assert_int_equal(quota_flows_waiting(q), 1);
    event_base_dispatch(base);
    assert_int_equal(fired, 1);
    assert_false(quota_flow_paused(f));
    assert_int_equal(quota_flows_waiting(q), 0);
    uint64_t t1 = quota_now();
    assert_true(t1 - t0 >= 62 * MS);
    assert_true(quota_flow_allow(f, 1000, t1) >= 1000 - 1);
    /* Closing with the timer armed cancels it. */
    quota_flow_take(f, 16000, t1);
    assert_int_equal(quota_flow_pause(f, 1000, t1, on_resume, &fired), 0);
    assert_int_equal(quota_flows_waiting(q), 1);
    quota_flow_close(f);
    assert_int_equal(quota_flows_waiting(q), 0);
    event_base_dispatch(base);
    assert_int_equal(fired, 1);
    quota_free(q);
    event_base_free(base);
}

/* A flow whose bucket owes more than 2^64 ns of refill (bandwidth: 1, a
 * debt of 2^36 bytes: quota_flow_wait_ns() saturates at UINT64_MAX) waits
 * the most a pause waits, 1 s. Rounding the wait up to ms added 999999 to
 * it first, which wrapped round to a wait of 0 ms, taken as the least, 1
 * ms: such a flow looked again a thousand times a second. Its timer must
 * not fire before one armed for 100 ms. */
struct race {
    struct event_base *base;
    int flow, other; /* the order each fired in: 1, 2 */
    int n;
};

static void on_race_flow(void *arg)
{
    struct race *r = arg;
    r->flow = ++r->n;
}

static void on_race_other(evutil_socket_t fd, short what, void *arg)
{
    struct race *r = arg;
    (void)fd;
    (void)what;
    r->other = ++r->n;
    event_base_loopbreak(r->base);
}

static void test_flow_pause_saturated_wait(void **state)
{
    (void)state;
    struct race r = {event_base_new(), 0, 0, 0};
    assert_non_null(r.base);
    struct policy p;
    memset(&p, 0, sizeof(p));
    set_rate(&p.limits.rate, 0, 1000, 0, 1);
    struct quota *q = quota_new(NULL, r.base, 0);
    uint64_t t0 = quota_now();
    struct quota_flow *f = quota_flow_open(q, &p, "a", NULL, NULL, 0, t0);
    quota_flow_take(f, (size_t)1 << 36, t0);
    assert_int_equal(quota_flow_wait_ns(f, 1, t0), UINT64_MAX);
    assert_int_equal(quota_flow_pause(f, 1, t0, on_race_flow, &r), 0);
    struct timeval tv = {0, 100 * 1000};
    assert_int_equal(event_base_once(r.base, -1, EV_TIMEOUT, on_race_other, &r, &tv), 0);
    event_base_dispatch(r.base);
    assert_int_equal(r.other, 1); /* the 100 ms timer first */
    assert_int_equal(r.flow, 0);
    assert_true(quota_flow_paused(f));
    quota_flow_close(f);
    quota_free(q);
    event_base_free(r.base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agent_requests),
        cmocka_unit_test(test_rule_and_agent_both_or_neither),
        cmocka_unit_test(test_grant_limits_what_it_classifies),
        cmocka_unit_test(test_every_limit_holds_a_tunnel),
        cmocka_unit_test(test_keys_survive_reload),
        cmocka_unit_test(test_rule_identity),
        cmocka_unit_test(test_keys_at_the_inline_bound),
        cmocka_unit_test(test_bounded_memory),
        cmocka_unit_test(test_full_table_evicts_a_batch),
        cmocka_unit_test(test_full_table_keeps_the_entry_being_admitted),
        cmocka_unit_test(test_refused_requests_make_no_entries),
        cmocka_unit_test(test_a_refusing_rule_makes_no_agent_entry),
        cmocka_unit_test(test_table_of_held_entries_is_scanned_once_a_batch),
        cmocka_unit_test(test_entries_resting_one_at_a_time_are_dropped_a_batch_at_once),
        cmocka_unit_test(test_reload_through_a_bandwidth_only_rate_grants_nothing),
        cmocka_unit_test(test_quarantine),
        cmocka_unit_test(test_eviction_keeps_a_running_quarantine),
        cmocka_unit_test(test_eviction_keeps_a_debt),
        cmocka_unit_test(test_churning_rules_does_not_refill_a_rule_bucket),
        cmocka_unit_test(test_other_agents_churning_does_not_refill_an_agent_bucket),
        cmocka_unit_test(test_churning_does_not_refill_a_bandwidth_bucket),
        cmocka_unit_test(test_no_memory_for_ghosts_keeps_busy_entries),
        cmocka_unit_test(test_eviction_keeps_a_counting_window),
        cmocka_unit_test(test_quarantine_again_while_over),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_event_subscriber),
        cmocka_unit_test(test_trips_with_the_detector),
        cmocka_unit_test(test_subscribers_count_at_the_event_time),
        cmocka_unit_test(test_redecided_denials_are_not_the_agents),
        cmocka_unit_test(test_overloaded_denials_are_not_the_agents),
        cmocka_unit_test(test_flows),
        cmocka_unit_test(test_flow_open_out_of_memory),
        cmocka_unit_test(test_flow_waits_for_a_useful_amount),
        cmocka_unit_test(test_reload_reshapes_running_flows),
        cmocka_unit_test(test_reload_reshapes_request_buckets),
        cmocka_unit_test(test_reload_shapes_a_flow_opened_unshaped),
        cmocka_unit_test(test_flow_set_rule),
        cmocka_unit_test(test_flow_set_rule_out_of_memory),
        cmocka_unit_test(test_flow_set_rule_on_a_full_table_keeps_its_buckets),
        cmocka_unit_test(test_reload_out_of_memory),
        cmocka_unit_test(test_flow_pause_timer),
        cmocka_unit_test(test_flow_pause_saturated_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
