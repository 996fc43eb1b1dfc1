/* Unit tests for the decision engine (match.c) and its index (index.c).
 * Policies are built in code, not loaded from YAML, so that these tests
 * exercise exactly the precedence rules of decision.h. */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "policy/decision.h"
#include "policy/index.h"

#define MAXR  64
#define MAXD  8
#define DAY   86400
#define TODAY 20000 /* 2024-10-04 */
#define NOW   ((time_t)TODAY * DAY + 3600)

struct fx {
    struct policy p;
    struct rule rules[MAXR];
    struct deny_entry deny[MAXD];
    uint16_t ports[MAXR][4];
    char hosts[MAXR][HOST_MAX + 1];
    char pats[MAXR][HOST_MAX + 8];
    const char *agents[MAXR][2];
};

static uint16_t web_ports[2] = {80, 443};

static void mask(struct cidr *c)
{
    for (unsigned i = 0; i < 16; i++) {
        unsigned bits = c->prefix > i * 8 ? c->prefix - i * 8 : 0;
        c->addr.b[i] &= bits >= 8 ? 0xff : (uint8_t)(0xff << (8 - bits));
    }
}

/* Fills <a> from an IPv4 or IPv6 text; returns false for anything else. */
static bool parse_ip(const char *s, struct ipaddr *a)
{
    uint8_t v4[4];
    memset(a, 0, sizeof(*a));
    if (inet_pton(AF_INET, s, v4) == 1) {
        a->b[10] = 0xff;
        a->b[11] = 0xff;
        memcpy(a->b + 12, v4, 4);
        return true;
    }
    return inet_pton(AF_INET6, s, a->b) == 1;
}

/* Adds a rule for <pattern> ("name", "*.suffix" or "addr/len"), ports
 * 80/443, every agent, no expiry. */
static struct rule *add(struct fx *f, const char *pattern, unsigned methods, enum tier tier)
{
    size_t i = f->p.nrules++;
    assert_true(i < MAXR);
    struct rule *r = &f->rules[i];
    memset(r, 0, sizeof(*r));
    r->index = i;
    r->line = (int)i + 1;
    r->methods = methods;
    r->tier = tier;
    r->ports = web_ports;
    r->nports = 2;
    snprintf(f->pats[i], sizeof(f->pats[i]), "%s", pattern);
    r->pattern = f->pats[i];
    const char *slash = strchr(pattern, '/');
    if (slash != NULL) {
        char ip[64];
        snprintf(ip, sizeof(ip), "%.*s", (int)(slash - pattern), pattern);
        r->kind = RULE_CIDR;
        assert_true(parse_ip(ip, &r->cidr.addr));
        int len = atoi(slash + 1);
        r->cidr.prefix = (uint8_t)(strchr(ip, ':') == NULL ? len + 96 : len);
        mask(&r->cidr);
    } else if (strncmp(pattern, "*.", 2) == 0) {
        r->kind = RULE_WILDCARD;
        snprintf(f->hosts[i], sizeof(f->hosts[i]), "%s", pattern + 2);
        r->host = f->hosts[i];
    } else {
        r->kind = RULE_EXACT;
        snprintf(f->hosts[i], sizeof(f->hosts[i]), "%s", pattern);
        r->host = f->hosts[i];
    }
    return r;
}

static void set_ports(struct fx *f, struct rule *r, uint16_t a, uint16_t b)
{
    size_t i = r->index;
    f->ports[i][0] = a;
    f->ports[i][1] = b;
    r->ports = f->ports[i];
    r->nports = b != 0 ? 2 : 1;
}

static void set_agent(struct fx *f, struct rule *r, const char *agent)
{
    f->agents[r->index][0] = agent;
    r->agents = (char **)(uintptr_t)f->agents[r->index];
    r->nagents = 1;
}

static void set_expiry(struct rule *r, int32_t day, const char *owner)
{
    r->has_expires = true;
    r->expires = day;
    r->owner = (char *)(uintptr_t)owner;
}

/* Adds a rule as add() does, expired yesterday, owned by <owner>. */
static struct rule *add_expired(struct fx *f, const char *pattern, unsigned methods, enum tier tier,
                                const char *owner)
{
    struct rule *r = add(f, pattern, methods, tier);
    set_expiry(r, TODAY - 1, owner);
    return r;
}

static void add_deny(struct fx *f, const char *pattern)
{
    size_t i = f->p.ndeny++;
    assert_true(i < MAXD);
    struct deny_entry *d = &f->deny[i];
    memset(d, 0, sizeof(*d));
    if (strncmp(pattern, "*.", 2) == 0) {
        d->pattern.kind = PATTERN_WILDCARD;
        pattern += 2;
    } else {
        d->pattern.kind = PATTERN_EXACT;
    }
    snprintf(d->pattern.name, sizeof(d->pattern.name), "%s", pattern);
}

static struct fx *fx_new(void)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->p.rules = f->rules;
    f->p.deny = f->deny;
    return f;
}

static void fx_index(struct fx *f)
{
    assert_int_equal(policy_index_build(&f->p), 0);
    assert_non_null(f->p.index);
}

static void fx_free(struct fx *f)
{
    policy_index_free(f->p.index);
    free(f);
}

struct ask {
    const struct agent *agent;
    const char *agent_id;
    unsigned method;
    uint16_t port;
    time_t now;
};

static struct decision decide_at(const struct fx *f, const char *host, struct ask a)
{
    struct host h;
    memset(&h, 0, sizeof(h));
    if (parse_ip(host, &h.ip)) {
        h.kind = HOST_IP;
    } else {
        h.kind = HOST_NAME;
    }
    snprintf(h.name, sizeof(h.name), "%s", host);
    struct decision_query q = {
        .agent = a.agent,
        .agent_id = a.agent_id,
        .method = a.method,
        .target = &h,
        .port = a.port,
        .now = a.now ? a.now : NOW,
    };
    struct decision d;
    memset(&d, 0x5a, sizeof(d)); /* every field must be written */
    policy_decide(&f->p, &q, &d);
    return d;
}

static struct decision decide(const struct fx *f, const char *host, unsigned method, uint16_t port)
{
    struct ask a = {NULL, "default", method, port, 0};
    return decide_at(f, host, a);
}

static void assert_allow(struct decision d, const struct rule *r, enum tier tier)
{
    assert_int_equal(d.verdict, VERDICT_ALLOW);
    assert_int_equal(d.reason, REASON_NONE);
    assert_ptr_equal(d.rule, r);
    assert_int_equal(d.tier, tier);
}

static void assert_deny(struct decision d, enum deny_reason why)
{
    if (d.verdict != VERDICT_DENY || d.reason != why)
        fail_msg("expected deny %s, got %s %s", reason_name(why), verdict_name(d.verdict),
                 reason_name(d.reason) ? reason_name(d.reason) : "(none)");
    if (why != REASON_GRANT_EXPIRED && why != REASON_NEEDS_INSPECTION) {
        assert_null(d.rule);
        assert_int_equal(d.tier, TIER_NONE);
        assert_null(d.owner);
    }
}

/* An allow by <r> at <tier>, the grant's owner <owner> (NULL: none). */
static void assert_allow_owner(struct decision d, const struct rule *r, enum tier tier,
                               const char *owner)
{
    assert_allow(d, r, tier);
    if (owner == NULL)
        assert_null(d.owner);
    else
        assert_string_equal(d.owner, owner);
}

/* A grant_expired denial logged with <r>: its tier, its owner. */
static void assert_expired(struct decision d, const struct rule *r, enum tier tier,
                           const char *owner)
{
    assert_deny(d, REASON_GRANT_EXPIRED);
    assert_ptr_equal(d.rule, r);
    assert_ptr_equal(d.grant, r);
    assert_int_equal(d.tier, tier);
    if (owner == NULL)
        assert_null(d.owner);
    else
        assert_string_equal(d.owner, owner);
}

/* ---- precedence ---- */

static void test_deny_wins(void **state)
{
    struct fx *f = fx_new();
    struct rule *wild = add(f, "*.github.com", 0, TIER_0);
    add(f, "gist.github.com", 0, TIER_0);
    struct rule *apex = add(f, "evil.test", 0, TIER_0);
    add(f, "a.evil.test", 0, TIER_0);
    add_deny(f, "gist.github.com");
    add_deny(f, "*.evil.test");
    fx_index(f);

    assert_deny(decide(f, "gist.github.com", METHOD_GET, 443), REASON_DENIED_HOST);
    assert_allow(decide(f, "api.github.com", METHOD_GET, 443), wild, TIER_0);
    /* the exact deny entry covers that name only */
    assert_allow(decide(f, "x.gist.github.com", METHOD_GET, 443), wild, TIER_0);
    /* a wildcard deny covers every name below its suffix, not the suffix */
    assert_deny(decide(f, "a.evil.test", METHOD_GET, 443), REASON_DENIED_HOST);
    assert_deny(decide(f, "b.a.evil.test", METHOD_CONNECT, 443), REASON_DENIED_HOST);
    assert_allow(decide(f, "evil.test", METHOD_GET, 443), apex, TIER_0);
    assert_deny(decide(f, "notevil.test", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    fx_free(f);
}

static void test_exact_over_wildcard(void **state)
{
    struct fx *f = fx_new();
    struct rule *wild = add(f, "*.github.com", 0, TIER_0);
    struct rule *exact = add(f, "api.github.com", 0, TIER_2);
    struct rule *deep = add(f, "*.a.example.com", 0, TIER_2);
    struct rule *shallow = add(f, "*.example.com", 0, TIER_0);
    fx_index(f);

    /* exact wins although its tier is higher and it comes later */
    assert_allow(decide(f, "api.github.com", METHOD_GET, 443), exact, TIER_2);
    assert_allow(decide(f, "x.api.github.com", METHOD_GET, 443), wild, TIER_0);
    /* longer wildcard suffix over shorter */
    assert_allow(decide(f, "x.a.example.com", METHOD_GET, 443), deep, TIER_2);
    assert_allow(decide(f, "y.x.a.example.com", METHOD_GET, 443), deep, TIER_2);
    assert_allow(decide(f, "a.example.com", METHOD_GET, 443), shallow, TIER_0);
    assert_allow(decide(f, "b.example.com", METHOD_GET, 443), shallow, TIER_0);
    fx_free(f);
}

static void test_wildcard_boundaries(void **state)
{
    struct fx *f = fx_new();
    struct rule *w = add(f, "*.example.com", 0, TIER_0);
    fx_index(f);

    assert_allow(decide(f, "a.example.com", METHOD_GET, 443), w, TIER_0);
    assert_allow(decide(f, "a.b.example.com", METHOD_GET, 443), w, TIER_0);
    assert_deny(decide(f, "example.com", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    assert_deny(decide(f, "badexample.com", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    assert_deny(decide(f, "example.com.evil.test", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    assert_deny(decide(f, "a.example.com.evil.test", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    assert_deny(decide(f, "com", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    assert_deny(decide(f, "", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    fx_free(f);
}

static void test_glued_names(void **state)
{
    struct fx *f = fx_new();
    struct rule *r = add(f, "api.github.com", 0, TIER_0);
    fx_index(f);

    assert_allow(decide(f, "api.github.com", METHOD_GET, 443), r, TIER_0);
    assert_deny(decide(f, "api.github.com.evil.test", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    assert_deny(decide(f, "evilapi.github.com", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    assert_deny(decide(f, "api-github.com", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    assert_deny(decide(f, "x.api.github.com", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    assert_deny(decide(f, "github.com", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    assert_deny(decide(f, "api.github.co", METHOD_CONNECT, 443), REASON_NOT_IN_POLICY);
    fx_free(f);
}

static void test_method_named_over_unnamed(void **state)
{
    struct fx *f = fx_new();
    struct rule *any = add(f, "api.github.com", 0, TIER_0);
    struct rule *get = add(f, "api.github.com", METHOD_GET | METHOD_HEAD, TIER_1);
    struct rule *wr = add(f, "api.github.com", METHODS_WRITE, TIER_3);
    fx_index(f);

    assert_allow(decide(f, "api.github.com", METHOD_GET, 443), get, TIER_1);
    assert_allow(decide(f, "api.github.com", METHOD_HEAD, 443), get, TIER_1);
    assert_allow(decide(f, "api.github.com", METHOD_POST, 443), wr, TIER_3);
    assert_allow(decide(f, "api.github.com", METHOD_OPTIONS, 443), any, TIER_0);
    /* an extension method (MOVE, MKCOL, any token): decided by the rule
     * without methods, at the highest tier of the host's rules, as a
     * CONNECT; ranked as a plain request it took tier 0 beside the grant */
    assert_allow_owner(decide(f, "api.github.com", METHOD_OTHER, 443), any, TIER_3, wr->owner);
    assert_ptr_equal(decide(f, "api.github.com", METHOD_OTHER, 443).grant, wr);
    fx_free(f);
}

/* An extension method is gathered as a CONNECT is: the rule without
 * methods that a plain request would take decides it, at the highest tier
 * of the rules of every class for its host, agent and port; an expired one
 * that would raise that tier refuses it. */
static void test_extension_method_tier_as_a_connect(void **state)
{
    (void)state;
    struct fx *f = fx_new();
    struct rule *exact = add(f, "api.github.com", 0, TIER_0);
    struct rule *wr = add(f, "*.github.com", METHOD_POST, TIER_3);
    wr->owner = (char *)(uintptr_t) "alice";
    struct rule *other_port = add(f, "api.github.com", METHOD_PUT, TIER_2);
    set_ports(f, other_port, 8443, 0);
    add(f, "only.github.com", METHOD_GET, TIER_1);
    struct rule *live = add(f, "exp.example.org", 0, TIER_1);
    struct rule *gone = add_expired(f, "exp.example.org", METHOD_DELETE, TIER_3, "bob");
    fx_index(f);

    /* the wildcard's write grant raises the exact rule's tier; a GET and
     * a POST are ranked as ever */
    assert_allow_owner(decide(f, "api.github.com", METHOD_OTHER, 443), exact, TIER_3, "alice");
    assert_ptr_equal(decide(f, "api.github.com", METHOD_OTHER, 443).grant, wr);
    assert_allow(decide(f, "api.github.com", METHOD_GET, 443), exact, TIER_0);
    assert_allow(decide(f, "api.github.com", METHOD_POST, 443), exact, TIER_0);
    /* only rules naming methods: none matches it */
    assert_deny(decide(f, "api.github.com", METHOD_OTHER, 8443), REASON_METHOD_NOT_ALLOWED);
    assert_deny(decide(f, "only.github.com", METHOD_OTHER, 443), REASON_METHOD_NOT_ALLOWED);
    /* an expired write grant above the live read rule: expiry never
     * lowers its tier */
    assert_expired(decide(f, "exp.example.org", METHOD_OTHER, 443), gone, TIER_3, "bob");
    assert_allow(decide(f, "exp.example.org", METHOD_GET, 443), live, TIER_1);
    fx_free(f);
}

static void test_lower_tier_then_file_order(void **state)
{
    struct fx *f = fx_new();
    add(f, "a.test", 0, TIER_2);
    struct rule *low = add(f, "a.test", 0, TIER_1);
    add(f, "a.test", METHOD_GET, TIER_3);
    struct rule *low_get = add(f, "a.test", METHOD_GET, TIER_2);
    struct rule *first = add(f, "b.test", 0, TIER_1);
    struct rule *second = add(f, "b.test", 0, TIER_1);
    second->owner = (char *)(uintptr_t) "second";
    fx_index(f);

    assert_allow(decide(f, "a.test", METHOD_POST, 80), low, TIER_1);
    assert_allow(decide(f, "a.test", METHOD_GET, 80), low_get, TIER_2);
    assert_allow(decide(f, "b.test", METHOD_GET, 80), first, TIER_1);
    fx_free(f);
}

static void test_owner_follows_rule(void **state)
{
    struct fx *f = fx_new();
    struct rule *r = add(f, "a.test", METHOD_POST, TIER_3);
    set_expiry(r, TODAY + 10, "chaysen");
    fx_index(f);
    struct decision d = decide(f, "a.test", METHOD_POST, 443);
    assert_allow(d, r, TIER_3);
    assert_string_equal(d.owner, "chaysen");
    fx_free(f);
}

static void test_agent_scoped(void **state)
{
    struct fx *f = fx_new();
    struct rule *r = add(f, "api.github.com", 0, TIER_1);
    set_agent(f, r, "ci-bot");
    struct rule *w = add(f, "*.example.com", 0, TIER_0);
    set_agent(f, w, "ci-bot");
    struct rule *empty = add(f, "every.test", 0, TIER_0);
    set_agent(f, empty, "ci-bot");
    empty->nagents = 0; /* an empty list is "every agent" */
    fx_index(f);

    struct ask ci = {NULL, "ci-bot", METHOD_GET, 443, 0};
    struct ask other = {NULL, "dev", METHOD_GET, 443, 0};
    struct ask anon = {NULL, NULL, METHOD_GET, 443, 0};
    assert_allow(decide_at(f, "api.github.com", ci), r, TIER_1);
    assert_deny(decide_at(f, "api.github.com", other), REASON_AGENT_NOT_ALLOWED);
    assert_deny(decide_at(f, "api.github.com", anon), REASON_AGENT_NOT_ALLOWED);
    assert_deny(decide_at(f, "a.example.com", other), REASON_AGENT_NOT_ALLOWED);
    assert_allow(decide_at(f, "a.example.com", ci), w, TIER_0);
    assert_allow(decide_at(f, "every.test", other), empty, TIER_0);
    assert_allow(decide_at(f, "every.test", anon), empty, TIER_0);
    other.method = METHOD_CONNECT;
    assert_deny(decide_at(f, "api.github.com", other), REASON_AGENT_NOT_ALLOWED);
    fx_free(f);
}

static void test_port_not_allowed(void **state)
{
    struct fx *f = fx_new();
    struct rule *r = add(f, "registry.npmjs.org", 0, TIER_0);
    set_ports(f, r, 443, 0);
    struct rule *two = add(f, "two.test", 0, TIER_0);
    set_ports(f, two, 443, 8443);
    struct rule *none = add(f, "default.test", 0, TIER_0);
    none->ports = NULL; /* not something the loader makes: 80 and 443 */
    none->nports = 0;
    fx_index(f);

    assert_allow(decide(f, "registry.npmjs.org", METHOD_GET, 443), r, TIER_0);
    assert_deny(decide(f, "registry.npmjs.org", METHOD_GET, 80), REASON_PORT_NOT_ALLOWED);
    assert_deny(decide(f, "registry.npmjs.org", METHOD_CONNECT, 22), REASON_PORT_NOT_ALLOWED);
    assert_allow(decide(f, "two.test", METHOD_GET, 8443), two, TIER_0);
    assert_deny(decide(f, "two.test", METHOD_GET, 8000), REASON_PORT_NOT_ALLOWED);
    assert_deny(decide(f, "two.test", METHOD_GET, 9000), REASON_PORT_NOT_ALLOWED);
    assert_deny(decide(f, "two.test", METHOD_GET, 0), REASON_PORT_NOT_ALLOWED);
    assert_allow(decide(f, "default.test", METHOD_GET, 80), none, TIER_0);
    assert_deny(decide(f, "default.test", METHOD_GET, 8080), REASON_PORT_NOT_ALLOWED);
    fx_free(f);
}

static void test_method_not_allowed(void **state)
{
    struct fx *f = fx_new();
    add(f, "api.github.com", METHOD_GET | METHOD_HEAD, TIER_1);
    fx_index(f);

    assert_deny(decide(f, "api.github.com", METHOD_POST, 443), REASON_METHOD_NOT_ALLOWED);
    assert_deny(decide(f, "api.github.com", METHOD_OTHER, 443), REASON_METHOD_NOT_ALLOWED);
    assert_deny(decide(f, "api.github.com", METHOD_DELETE, 443), REASON_METHOD_NOT_ALLOWED);
    fx_free(f);
}

/* The reason is the furthest filter any candidate passed, across classes. */
static void test_furthest_stage(void **state)
{
    struct fx *f = fx_new();
    struct rule *e = add(f, "api.github.com", 0, TIER_0);
    set_agent(f, e, "ci-bot");
    struct rule *w = add(f, "*.github.com", 0, TIER_0);
    set_ports(f, w, 8443, 0);
    struct rule *m = add(f, "m.test", METHOD_GET, TIER_0);
    set_ports(f, m, 443, 0);
    struct rule *m2 = add(f, "m.test", 0, TIER_0);
    set_agent(f, m2, "ci-bot");
    fx_index(f);

    struct ask dev = {NULL, "dev", METHOD_GET, 443, 0};
    /* exact: wrong agent; wildcard: right agent, wrong port */
    assert_deny(decide_at(f, "api.github.com", dev), REASON_PORT_NOT_ALLOWED);
    dev.method = METHOD_POST;
    /* one rule for another agent, one for this agent without POST */
    assert_deny(decide_at(f, "m.test", dev), REASON_METHOD_NOT_ALLOWED);
    dev.port = 80;
    assert_deny(decide_at(f, "m.test", dev), REASON_PORT_NOT_ALLOWED);
    fx_free(f);
}

/* A plain request is ranked over every class: an exact rule for GET does
 * not hide a wildcard that allows every method. */
static void test_plain_request_falls_through(void **state)
{
    struct fx *f = fx_new();
    struct rule *get = add(f, "api.github.com", METHOD_GET, TIER_1);
    struct rule *wild = add(f, "*.github.com", 0, TIER_2);
    fx_index(f);

    assert_allow(decide(f, "api.github.com", METHOD_GET, 443), get, TIER_1);
    assert_allow(decide(f, "api.github.com", METHOD_POST, 443), wild, TIER_2);
    fx_free(f);
}

static void test_connect(void **state)
{
    struct fx *f = fx_new();
    /* only method-restricted rules */
    struct rule *ro = add(f, "ro.test", METHOD_GET | METHOD_HEAD, TIER_1);
    struct rule *ro3 = add(f, "ro.test", METHOD_POST, TIER_3);
    ro3->owner = (char *)(uintptr_t) "writer";
    /* an open rule plus a tier-3 write grant: allowed at tier 3 */
    struct rule *open = add(f, "api.github.com", 0, TIER_0);
    open->owner = (char *)(uintptr_t) "reader";
    struct rule *w3 = add(f, "api.github.com", METHODS_WRITE, TIER_3);
    set_expiry(w3, TODAY + 30, "chaysen");
    /* the write grant on another port does not raise the tier */
    struct rule *other_port = add(f, "b.test", METHOD_POST, TIER_3);
    set_ports(f, other_port, 8443, 0);
    struct rule *b = add(f, "b.test", 0, TIER_1);
    /* tie on the max tier: the owner of the winner */
    struct rule *t_open = add(f, "t.test", 0, TIER_2);
    t_open->owner = (char *)(uintptr_t) "open-owner";
    struct rule *t_post = add(f, "t.test", METHOD_POST, TIER_2);
    t_post->owner = (char *)(uintptr_t) "post-owner";
    /* naming CONNECT is still a restriction */
    add(f, "c.test", METHOD_CONNECT, TIER_0);
    /* an exact GET rule does not hide an unrestricted wildcard */
    struct rule *sh = add(f, "s.shadow.test", METHOD_GET, TIER_1);
    sh->owner = (char *)(uintptr_t) "reader";
    struct rule *shw = add(f, "*.shadow.test", 0, TIER_0);
    /* an exact rule for another agent is not gathered */
    struct rule *oa = add(f, "o.shadow.test", 0, TIER_3);
    set_agent(f, oa, "ci-bot");
    oa->owner = (char *)(uintptr_t) "bot-owner";
    fx_index(f);

    struct decision d = decide(f, "ro.test", METHOD_CONNECT, 443);
    assert_deny(d, REASON_NEEDS_INSPECTION);
    assert_ptr_equal(d.rule, ro3);
    assert_int_equal(d.tier, TIER_3);
    assert_string_equal(d.owner, "writer");
    (void)ro;

    d = decide(f, "api.github.com", METHOD_CONNECT, 443);
    assert_allow(d, open, TIER_3);
    assert_string_equal(d.owner, "chaysen");

    d = decide(f, "b.test", METHOD_CONNECT, 443);
    assert_allow(d, b, TIER_1);
    assert_null(d.owner);

    d = decide(f, "t.test", METHOD_CONNECT, 443);
    assert_allow(d, t_open, TIER_2);
    assert_string_equal(d.owner, "open-owner");

    d = decide(f, "c.test", METHOD_CONNECT, 443);
    assert_deny(d, REASON_NEEDS_INSPECTION);

    /* the wildcard allows the tunnel, as it allows a plain POST; the
     * exact GET rule's tier 1 is the highest, and names the owner */
    d = decide(f, "s.shadow.test", METHOD_CONNECT, 443);
    assert_allow(d, shw, TIER_1);
    assert_string_equal(d.owner, "reader");
    assert_allow(decide(f, "s.shadow.test", METHOD_POST, 443), shw, TIER_0);
    assert_allow(decide(f, "s.shadow.test", METHOD_GET, 443), sh, TIER_1);
    assert_allow(decide(f, "x.shadow.test", METHOD_CONNECT, 443), shw, TIER_0);
    d = decide(f, "o.shadow.test", METHOD_CONNECT, 443);
    assert_allow(d, shw, TIER_0);
    assert_null(d.owner);
    /* for ci-bot the exact rule is gathered: the most specific open rule */
    struct ask bot = {NULL, "ci-bot", METHOD_CONNECT, 443, 0};
    d = decide_at(f, "o.shadow.test", bot);
    assert_allow(d, oa, TIER_3);
    assert_string_equal(d.owner, "bot-owner");
    fx_free(f);
}

/* SPEC: a CONNECT is classified at the highest tier of all rules for that
 * host and port, exact and wildcard alike; no class shadows another. */
static void test_connect_all_classes(void **state)
{
    struct fx *f = fx_new();
    /* an exact tier-0 rule under a tier-3 wildcard: the tunnel is tier 3 */
    struct rule *tls = add(f, "tls.example.test", 0, TIER_0);
    tls->owner = (char *)(uintptr_t) "exact-owner";
    struct rule *w3 = add(f, "*.example.test", 0, TIER_3);
    set_expiry(w3, TODAY + 30, "wild-owner");
    /* the longer wildcard suffix is the deciding rule */
    struct rule *ab = add(f, "*.b.a.test", 0, TIER_1);
    struct rule *a = add(f, "*.a.test", 0, TIER_0);
    /* only restricted rules, over two classes: needs_inspection, at the
     * highest tier found in either */
    add(f, "r.ri.test", METHOD_GET, TIER_1);
    struct rule *rip = add(f, "*.ri.test", METHOD_POST, TIER_3);
    set_expiry(rip, TODAY + 30, "poster");
    /* a tie on the highest tier: the deciding rule's owner when it holds it */
    struct rule *te = add(f, "t.tie.test", METHOD_GET, TIER_2);
    te->owner = (char *)(uintptr_t) "exact-get";
    struct rule *tw = add(f, "*.tie.test", 0, TIER_2);
    tw->owner = (char *)(uintptr_t) "wild-open";
    /* ... else the most specific rule holding it */
    struct rule *ue = add(f, "u.t2.zz.test", METHOD_GET, TIER_2);
    ue->owner = (char *)(uintptr_t) "exact-get";
    struct rule *uw = add(f, "*.t2.zz.test", METHOD_POST, TIER_2);
    uw->owner = (char *)(uintptr_t) "wild-post";
    struct rule *uo = add(f, "*.zz.test", 0, TIER_0);
    (void)uw;
    /* an expired open exact rule: it would decide the tunnel (and raise
     * its tier) were it live, so the live wildcard does not take over */
    struct rule *xe = add(f, "x.exp.test", 0, TIER_3);
    set_expiry(xe, TODAY - 1, "gone");
    struct rule *xw = add(f, "*.exp.test", 0, TIER_1);
    /* a wildcard on another port is not gathered */
    struct rule *pe = add(f, "p.port.test", 0, TIER_0);
    struct rule *pw = add(f, "*.port.test", 0, TIER_3);
    set_ports(f, pw, 8443, 0);
    fx_index(f);

    struct decision d = decide(f, "tls.example.test", METHOD_CONNECT, 443);
    assert_allow(d, tls, TIER_3);
    assert_string_equal(d.owner, "wild-owner");
    /* a plain request still takes the most specific rule's tier */
    assert_allow(decide(f, "tls.example.test", METHOD_GET, 443), tls, TIER_0);

    assert_allow(decide(f, "x.b.a.test", METHOD_CONNECT, 443), ab, TIER_1);
    assert_allow(decide(f, "x.a.test", METHOD_CONNECT, 443), a, TIER_0);

    d = decide(f, "r.ri.test", METHOD_CONNECT, 443);
    assert_deny(d, REASON_NEEDS_INSPECTION);
    assert_ptr_equal(d.rule, rip);
    assert_int_equal(d.tier, TIER_3);
    assert_string_equal(d.owner, "poster");

    d = decide(f, "t.tie.test", METHOD_CONNECT, 443);
    assert_allow(d, tw, TIER_2);
    assert_string_equal(d.owner, "wild-open");
    (void)te;

    d = decide(f, "u.t2.zz.test", METHOD_CONNECT, 443);
    assert_allow(d, uo, TIER_2);
    assert_string_equal(d.owner, "exact-get");
    (void)ue;

    assert_expired(decide(f, "x.exp.test", METHOD_CONNECT, 443), xe, TIER_3, "gone");
    assert_allow(decide(f, "y.exp.test", METHOD_CONNECT, 443), xw, TIER_1);

    d = decide(f, "p.port.test", METHOD_CONNECT, 443);
    assert_allow(d, pe, TIER_0);
    d = decide(f, "p.port.test", METHOD_CONNECT, 8443);
    assert_allow(d, pw, TIER_3);
    fx_free(f);
}

static void test_grant_expired(void **state)
{
    struct fx *f = fx_new();
    struct rule *g = add(f, "api.github.com", METHODS_WRITE, TIER_3);
    set_expiry(g, TODAY, "chaysen");
    struct rule *open = add(f, "api.github.com", 0, TIER_0);
    set_ports(f, open, 8443, 0);
    /* an expired exact grant outranks a live wildcard: the wildcard
     * does not take over what the grant decided */
    struct rule *x = add(f, "x.example.com", 0, TIER_2);
    set_expiry(x, TODAY - 1, "old");
    struct rule *w = add(f, "*.example.com", 0, TIER_0);
    /* an expired open rule for a CONNECT */
    struct rule *c = add(f, "c.test", 0, TIER_1);
    set_expiry(c, TODAY - 1, "gone");
    struct rule *cget = add(f, "c.test", METHOD_GET, TIER_1);
    set_ports(f, cget, 8080, 0);
    /* ... and next to a live rule restricted to GET (exact, or under an
     * expired open wildcard): the tunnel would go ahead under the grant,
     * so it is refused because the grant has expired, naming it, not with
     * needs_inspection (which raised no grant_expired alert) */
    struct rule *e = add(f, "e.test", 0, TIER_3);
    set_expiry(e, TODAY - 1, "e-owner");
    add(f, "e.test", METHOD_GET, TIER_1);
    struct rule *ew = add(f, "*.ew.test", 0, TIER_3);
    set_expiry(ew, TODAY - 1, "ew-owner");
    add(f, "a.ew.test", METHOD_GET, TIER_1);
    /* an expired rule restricted to methods would not open it either */
    struct rule *r = add(f, "r.test", METHOD_POST, TIER_3);
    set_expiry(r, TODAY - 1, "r-owner");
    add(f, "r.test", METHOD_GET, TIER_1);
    fx_index(f);

    struct ask a = {NULL, "default", METHOD_POST, 443, (time_t)TODAY * DAY};
    assert_allow(decide_at(f, "api.github.com", a), g, TIER_3);
    a.now = (time_t)TODAY * DAY + DAY - 1; /* last second of the expires day, UTC */
    assert_allow(decide_at(f, "api.github.com", a), g, TIER_3);
    a.now = (time_t)(TODAY + 1) * DAY; /* the next day */
    struct decision d = decide_at(f, "api.github.com", a);
    assert_deny(d, REASON_GRANT_EXPIRED);
    assert_ptr_equal(d.rule, g);
    assert_int_equal(d.tier, TIER_3);
    assert_string_equal(d.owner, "chaysen");

    assert_expired(decide(f, "x.example.com", METHOD_GET, 443), x, TIER_2, "old");
    assert_expired(decide(f, "x.example.com", METHOD_CONNECT, 443), x, TIER_2, "old");
    assert_allow(decide(f, "y.example.com", METHOD_GET, 443), w, TIER_0);

    d = decide(f, "c.test", METHOD_CONNECT, 443);
    assert_deny(d, REASON_GRANT_EXPIRED);
    assert_ptr_equal(d.rule, c);
    assert_string_equal(d.owner, "gone");
    /* an expired rule on a wrong port is not a grant_expired */
    assert_deny(decide(f, "c.test", METHOD_GET, 8081), REASON_PORT_NOT_ALLOWED);

    d = decide(f, "e.test", METHOD_CONNECT, 443);
    assert_deny(d, REASON_GRANT_EXPIRED);
    assert_ptr_equal(d.rule, e);
    assert_ptr_equal(d.grant, e);
    assert_int_equal(d.tier, TIER_3);
    assert_string_equal(d.owner, "e-owner");
    d = decide(f, "a.ew.test", METHOD_CONNECT, 443);
    assert_deny(d, REASON_GRANT_EXPIRED);
    assert_ptr_equal(d.rule, ew);
    assert_string_equal(d.owner, "ew-owner");
    assert_deny(decide(f, "r.test", METHOD_CONNECT, 443), REASON_NEEDS_INSPECTION);
    fx_free(f);
}

/* An expired rule is ranked with the live ones: when it ranks first the
 * request is grant_expired; it never lets the request fall through to a
 * wider or lower-tier rule. */
static void test_expired_ranks_first(void **state)
{
    struct fx *f = fx_new();
    /* a tier-3 grant for POST next to an unrestricted tier-0 rule */
    struct rule *g = add_expired(f, "a.test", METHOD_POST, TIER_3, "alice");
    struct rule *a0 = add(f, "a.test", 0, TIER_0);
    /* a live exact rule over an expired wildcard */
    struct rule *le = add(f, "l.w.test", 0, TIER_1);
    struct rule *xw = add_expired(f, "*.w.test", 0, TIER_0, "wild");
    /* an expired exact rule for another agent, port or method, over a
     * live wildcard: it does not match, so it does not rank */
    struct rule *oa = add_expired(f, "o.v.test", 0, TIER_0, "bot");
    set_agent(f, oa, "ci-bot");
    struct rule *op = add_expired(f, "p.v.test", 0, TIER_0, "porter");
    set_ports(f, op, 8443, 0);
    struct rule *om = add_expired(f, "m.v.test", METHOD_GET, TIER_0, "getter");
    struct rule *vw = add(f, "*.v.test", 0, TIER_1);
    /* the lower tier ranks first whether live or not */
    add_expired(f, "t.test", 0, TIER_3, "three");
    struct rule *t0 = add(f, "t.test", 0, TIER_0);
    struct rule *u0 = add_expired(f, "u.test", 0, TIER_0, "zero");
    add(f, "u.test", 0, TIER_2);
    /* file order breaks a tie */
    struct rule *fx1 = add_expired(f, "f.test", 0, TIER_1, "first");
    add(f, "f.test", 0, TIER_1);
    /* a longer CIDR prefix, expired, over a live shorter one */
    struct rule *c32 = add_expired(f, "10.1.2.3/32", 0, TIER_2, "host");
    struct rule *c8 = add(f, "10.0.0.0/8", 0, TIER_0);
    fx_index(f);

    /* (a) the expired grant names POST: it ranks first */
    assert_expired(decide(f, "a.test", METHOD_POST, 443), g, TIER_3, "alice");
    assert_allow(decide(f, "a.test", METHOD_GET, 443), a0, TIER_0);
    assert_allow(decide(f, "a.test", METHOD_PUT, 443), a0, TIER_0);

    assert_allow(decide(f, "l.w.test", METHOD_GET, 443), le, TIER_1);
    assert_allow(decide(f, "l.w.test", METHOD_CONNECT, 443), le, TIER_1);
    assert_expired(decide(f, "x.w.test", METHOD_GET, 443), xw, TIER_0, "wild");

    assert_allow(decide(f, "o.v.test", METHOD_GET, 443), vw, TIER_1);
    struct ask bot = {NULL, "ci-bot", METHOD_GET, 443, 0};
    assert_expired(decide_at(f, "o.v.test", bot), oa, TIER_0, "bot");
    assert_allow(decide(f, "p.v.test", METHOD_GET, 443), vw, TIER_1);
    assert_expired(decide(f, "p.v.test", METHOD_GET, 8443), op, TIER_0, "porter");
    assert_allow(decide(f, "m.v.test", METHOD_POST, 443), vw, TIER_1);
    assert_expired(decide(f, "m.v.test", METHOD_GET, 443), om, TIER_0, "getter");

    assert_allow(decide(f, "t.test", METHOD_GET, 443), t0, TIER_0);
    assert_expired(decide(f, "u.test", METHOD_GET, 443), u0, TIER_0, "zero");
    assert_expired(decide(f, "f.test", METHOD_GET, 443), fx1, TIER_1, "first");

    assert_expired(decide(f, "10.1.2.3", METHOD_GET, 443), c32, TIER_2, "host");
    assert_expired(decide(f, "10.1.2.3", METHOD_CONNECT, 443), c32, TIER_2, "host");
    assert_allow(decide(f, "10.1.2.4", METHOD_GET, 443), c8, TIER_0);
    fx_free(f);
}

/* A CONNECT is refused with grant_expired when an expired rule (for its
 * agent and port) would have decided it or raised its tier: expiry never
 * widens a tunnel nor lowers its tier. */
static void test_expired_connect(void **state)
{
    struct fx *f = fx_new();
    /* an expired unrestricted rule that outranks the live opener */
    struct rule *ox = add_expired(f, "o.c.test", 0, TIER_0, "opener");
    add(f, "*.c.test", 0, TIER_0);
    /* an expired restricted rule of a higher tier than every live one */
    struct rule *hx = add_expired(f, "h.test", METHOD_POST, TIER_3, "writer");
    add(f, "h.test", 0, TIER_0);
    add(f, "h.test", METHOD_GET, TIER_1);
    /* ... also under a live wildcard */
    struct rule *hw = add_expired(f, "*.hw.test", METHOD_PUT, TIER_2, "putter");
    add(f, "x.hw.test", 0, TIER_1);
    /* an expired unrestricted rule of a higher tier that ranks after the
     * live opener (the lower tier first) */
    struct rule *ux = add_expired(f, "u.test", 0, TIER_3, "upper");
    struct rule *u0 = add(f, "u.test", 0, TIER_0);
    /* both: the expired opener (tier 0) and an expired tier-3 grant, which
     * would have set the tunnel's tier: it is the one logged */
    struct rule *bo = add_expired(f, "x.b.test", 0, TIER_0, "b-open");
    struct rule *b3 = add_expired(f, "x.b.test", METHOD_POST, TIER_3, "b-three");
    struct rule *bw = add(f, "*.b.test", 0, TIER_1);
    /* an expired restricted rule that outranks the opener without raising
     * the tier: the tunnel would have opened under the wildcard anyway */
    struct rule *rx = add_expired(f, "r.s.test", METHOD_GET, TIER_0, "reader");
    struct rule *rw = add(f, "*.s.test", 0, TIER_1);
    /* an expired rule of the same tier, ranking after: nothing changes */
    struct rule *sl = add(f, "same.test", 0, TIER_2);
    sl->owner = (char *)(uintptr_t) "live";
    add_expired(f, "same.test", 0, TIER_2, "late");
    /* an expired higher tier for another agent or port does not count */
    struct rule *qa = add_expired(f, "q.test", 0, TIER_3, "bot");
    set_agent(f, qa, "ci-bot");
    struct rule *qp = add_expired(f, "q.test", METHOD_POST, TIER_3, "porter");
    set_ports(f, qp, 8443, 0);
    struct rule *q0 = add(f, "q.test", 0, TIER_0);
    /* an expired rule with no live one to open the tunnel: needs_inspection
     * when no rule, live or expired, would open it */
    add_expired(f, "n.test", METHOD_POST, TIER_3, "n-writer");
    struct rule *n1 = add(f, "n.test", METHOD_GET, TIER_1);
    fx_index(f);

    assert_expired(decide(f, "o.c.test", METHOD_CONNECT, 443), ox, TIER_0, "opener");
    assert_expired(decide(f, "h.test", METHOD_CONNECT, 443), hx, TIER_3, "writer");
    assert_expired(decide(f, "x.hw.test", METHOD_CONNECT, 443), hw, TIER_2, "putter");
    assert_expired(decide(f, "u.test", METHOD_CONNECT, 443), ux, TIER_3, "upper");
    assert_expired(decide(f, "x.b.test", METHOD_CONNECT, 443), b3, TIER_3, "b-three");
    /* the plain requests go as ranked: the live rules that rank first */
    assert_allow(decide(f, "h.test", METHOD_GET, 443), &f->rules[hx->index + 2], TIER_1);
    assert_allow(decide(f, "u.test", METHOD_GET, 443), u0, TIER_0);
    assert_expired(decide(f, "x.b.test", METHOD_POST, 443), b3, TIER_3, "b-three");
    assert_expired(decide(f, "x.b.test", METHOD_PUT, 443), bo, TIER_0, "b-open");
    assert_allow(decide(f, "y.b.test", METHOD_CONNECT, 443), bw, TIER_1);

    assert_allow_owner(decide(f, "r.s.test", METHOD_CONNECT, 443), rw, TIER_1, NULL);
    assert_expired(decide(f, "r.s.test", METHOD_GET, 443), rx, TIER_0, "reader");
    assert_allow(decide(f, "r.s.test", METHOD_POST, 443), rw, TIER_1);
    assert_allow_owner(decide(f, "same.test", METHOD_CONNECT, 443), sl, TIER_2, "live");
    assert_allow_owner(decide(f, "q.test", METHOD_CONNECT, 443), q0, TIER_0, NULL);
    struct ask bot = {NULL, "ci-bot", METHOD_CONNECT, 443, 0};
    assert_expired(decide_at(f, "q.test", bot), qa, TIER_3, "bot");
    /* on 8443 only the expired POST grant: grant_expired, as before */
    struct ask alt = {NULL, "default", METHOD_CONNECT, 8443, 0};
    assert_expired(decide_at(f, "q.test", alt), qp, TIER_3, "porter");

    /* no rule, live or expired, would open it: needs_inspection, logged
     * with the highest live tier */
    struct decision d = decide(f, "n.test", METHOD_CONNECT, 443);
    assert_deny(d, REASON_NEEDS_INSPECTION);
    assert_ptr_equal(d.rule, n1);
    assert_int_equal(d.tier, TIER_1);
    fx_free(f);
}

static void test_ip_literal(void **state)
{
    struct fx *f = fx_new();
    add(f, "api.github.com", 0, TIER_0);
    add_deny(f, "*.evil.test");
    fx_index(f);
    assert_deny(decide(f, "140.82.112.6", METHOD_GET, 443), REASON_IP_LITERAL);
    assert_deny(decide(f, "2001:db8::1", METHOD_CONNECT, 443), REASON_IP_LITERAL);
    fx_free(f);

    f = fx_new();
    struct rule *r = add(f, "192.168.10.0/24", 0, TIER_2);
    set_ports(f, r, 8080, 0);
    add_deny(f, "*.evil.test");
    fx_index(f);
    assert_deny(decide(f, "192.168.11.1", METHOD_GET, 8080), REASON_IP_LITERAL);
    assert_allow(decide(f, "192.168.10.7", METHOD_GET, 8080), r, TIER_2);
    assert_deny(decide(f, "192.168.10.7", METHOD_GET, 80), REASON_PORT_NOT_ALLOWED);
    /* the same name as a host name is not an IP rule's business */
    assert_deny(decide(f, "evil.test", METHOD_GET, 8080), REASON_NOT_IN_POLICY);
    fx_free(f);
}

static void test_cidr_longest_prefix(void **state)
{
    struct fx *f = fx_new();
    struct rule *r8 = add(f, "10.0.0.0/8", 0, TIER_0);
    struct rule *r16 = add(f, "10.1.0.0/16", 0, TIER_2);
    struct rule *host = add(f, "10.1.2.3/32", METHOD_GET, TIER_3);
    struct rule *v6 = add(f, "fd00::/8", 0, TIER_1);
    struct rule *v6l = add(f, "fd00:1::/32", METHOD_GET, TIER_1);
    struct rule *any = add(f, "0.0.0.0/0", METHOD_HEAD, TIER_1);
    fx_index(f);

    assert_allow(decide(f, "10.2.0.1", METHOD_GET, 443), r8, TIER_0);
    assert_allow(decide(f, "10.1.9.9", METHOD_GET, 443), r16, TIER_2);
    assert_allow(decide(f, "10.1.2.3", METHOD_GET, 443), host, TIER_3);
    /* the /32 does not allow POST: the /16 does */
    assert_allow(decide(f, "10.1.2.3", METHOD_POST, 443), r16, TIER_2);
    /* CONNECT: the /32 GET rule does not hide the open /16, and its
     * tier 3 classifies the tunnel */
    assert_allow(decide(f, "10.1.2.3", METHOD_CONNECT, 443), r16, TIER_3);
    assert_allow(decide(f, "10.1.2.4", METHOD_CONNECT, 443), r16, TIER_2);
    /* the /0 HEAD rule covers it too, at tier 1 */
    assert_allow(decide(f, "10.2.0.1", METHOD_CONNECT, 443), r8, TIER_1);
    /* only restricted cidr rules: needs_inspection */
    assert_deny(decide(f, "8.8.8.8", METHOD_CONNECT, 443), REASON_NEEDS_INSPECTION);
    struct decision d = decide(f, "fd00:1::5", METHOD_CONNECT, 443);
    assert_allow(d, v6, TIER_1);
    assert_allow(decide(f, "fd00:1::5", METHOD_GET, 443), v6l, TIER_1);
    assert_allow(decide(f, "fd00:2::5", METHOD_GET, 443), v6, TIER_1);
    assert_allow(decide(f, "8.8.8.8", METHOD_HEAD, 443), any, TIER_1);
    assert_deny(decide(f, "8.8.8.8", METHOD_GET, 443), REASON_METHOD_NOT_ALLOWED);
    /* ::/0-style v4 /0 covers only v4 addresses */
    assert_deny(decide(f, "2001:db8::1", METHOD_GET, 443), REASON_IP_LITERAL);
    fx_free(f);
}

static void test_v4_mapped(void **state)
{
    struct fx *f = fx_new();
    struct rule *r = add(f, "127.0.0.0/8", 0, TIER_0);
    fx_index(f);
    assert_allow(decide(f, "::ffff:127.0.0.1", METHOD_GET, 80), r, TIER_0);
    assert_allow(decide(f, "127.0.0.1", METHOD_GET, 80), r, TIER_0);
    assert_deny(decide(f, "::ffff:128.0.0.1", METHOD_GET, 80), REASON_IP_LITERAL);
    assert_deny(decide(f, "::127.0.0.1", METHOD_GET, 80), REASON_IP_LITERAL);
    fx_free(f);
}

static void test_report_mode(void **state)
{
    struct fx *f = fx_new();
    struct rule *r = add(f, "a.test", 0, TIER_0);
    add_deny(f, "bad.test");
    fx_index(f);
    struct agent rep = {.id = (char *)(uintptr_t) "watch", .mode = AGENT_REPORT};
    struct agent enf = {.id = (char *)(uintptr_t) "ci", .mode = AGENT_ENFORCE};

    struct ask a = {&rep, "watch", METHOD_GET, 443, 0};
    struct decision d = decide_at(f, "b.test", a);
    assert_int_equal(d.verdict, VERDICT_REPORT);
    assert_int_equal(d.reason, REASON_NOT_IN_POLICY);
    d = decide_at(f, "bad.test", a);
    assert_int_equal(d.verdict, VERDICT_REPORT);
    assert_int_equal(d.reason, REASON_DENIED_HOST);
    assert_allow(decide_at(f, "a.test", a), r, TIER_0);

    struct ask e = {&enf, "ci", METHOD_GET, 443, 0};
    assert_deny(decide_at(f, "b.test", e), REASON_NOT_IN_POLICY);
    fx_free(f);
}

/* A write report mode lets through that the host's rules do not allow is
 * classified at the highest tier of them, naming that rule; a read, and
 * the same write under enforcement, name none. */
static void test_report_mode_write_takes_the_hosts_tier(void **state)
{
    struct fx *f = fx_new();
    add(f, "a.test", METHOD_GET, TIER_0);
    struct rule *grant = add(f, "a.test", METHOD_POST, TIER_3);
    grant->owner = (char *)(uintptr_t) "chaysen";
    fx_index(f);
    struct agent rep = {.id = (char *)(uintptr_t) "watch", .mode = AGENT_REPORT};
    struct agent enf = {.id = (char *)(uintptr_t) "ci", .mode = AGENT_ENFORCE};
    static const unsigned writes[] = {METHOD_PUT, METHOD_PATCH, METHOD_DELETE, METHOD_OTHER};
    for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
        struct decision d = decide_at(f, "a.test", (struct ask){&rep, "watch", writes[i], 443, 0});
        assert_int_equal(d.verdict, VERDICT_REPORT);
        assert_int_equal(d.reason, REASON_METHOD_NOT_ALLOWED);
        assert_int_equal(d.tier, TIER_3);
        assert_ptr_equal(d.rule, grant);
        assert_ptr_equal(d.grant, grant);
        assert_string_equal(d.owner, "chaysen");
        d = decide_at(f, "a.test", (struct ask){&enf, "ci", writes[i], 443, 0});
        assert_deny(d, REASON_METHOD_NOT_ALLOWED);
        assert_null(d.rule);
    }
    struct decision d = decide_at(f, "a.test", (struct ask){&rep, "watch", METHOD_HEAD, 443, 0});
    assert_int_equal(d.verdict, VERDICT_REPORT);
    assert_int_equal(d.tier, TIER_NONE);
    assert_null(d.rule);
    /* another port: no rule for it, no tier */
    d = decide_at(f, "a.test", (struct ask){&rep, "watch", METHOD_PUT, 8443, 0});
    assert_int_equal(d.reason, REASON_PORT_NOT_ALLOWED);
    assert_null(d.rule);
    fx_free(f);
}

static void test_empty_policy(void **state)
{
    struct fx *f = fx_new();
    /* no index at all: deny by default */
    assert_deny(decide(f, "a.test", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    fx_index(f);
    assert_deny(decide(f, "a.test", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    assert_deny(decide(f, "a.test", METHOD_CONNECT, 443), REASON_NOT_IN_POLICY);
    assert_deny(decide(f, "10.0.0.1", METHOD_GET, 443), REASON_IP_LITERAL);
    assert_int_equal(index_exact(f->p.index, "a.test").count, 0);
    assert_int_equal(index_wildcard(f->p.index, "a.test").count, 0);
    assert_false(index_denied(f->p.index, "a.test"));
    /* building again replaces (and frees) the old index */
    fx_index(f);
    assert_deny(decide(f, "a.test", METHOD_GET, 443), REASON_NOT_IN_POLICY);
    fx_free(f);

    /* NULL-tolerant lookups and free */
    assert_int_equal(index_exact(NULL, "a").count, 0);
    assert_int_equal(index_wildcard(NULL, "a").count, 0);
    assert_false(index_denied(NULL, "a"));
    policy_index_free(NULL);

    struct decision d;
    struct policy p;
    memset(&p, 0, sizeof(p));
    struct decision_query q = {.method = METHOD_GET, .port = 443};
    policy_decide(&p, &q, &d); /* no target */
    assert_int_equal(d.reason, REASON_NOT_IN_POLICY);
}

/* ---- the index itself ---- */

static int record_prefix(struct rule_list rules, unsigned prefix, void *arg)
{
    unsigned *seen = arg;
    seen[seen[0] + 1] = prefix;
    seen[0]++;
    return 0;
}

static int stop_first(struct rule_list rules, unsigned prefix, void *arg)
{
    *(unsigned *)arg = prefix;
    return 42;
}

static void test_index_lists(void **state)
{
    struct fx *f = fx_new();
    add(f, "a.test", 0, TIER_0);
    add(f, "*.a.test", 0, TIER_0);
    add(f, "a.test", METHOD_GET, TIER_1);
    add(f, "10.0.0.0/8", 0, TIER_0);
    add(f, "10.1.0.0/16", 0, TIER_0);
    add(f, "10.1.0.0/16", METHOD_GET, TIER_0);
    add(f, "11.0.0.0/8", 0, TIER_0);
    add_deny(f, "x.test");
    add_deny(f, "*.y.test");
    fx_index(f);
    const struct policy_index *ix = f->p.index;

    struct rule_list l = index_exact(ix, "a.test");
    assert_int_equal(l.count, 2);
    assert_int_equal(l.items[0], 0);
    assert_int_equal(l.items[1], 2);
    l = index_wildcard(ix, "a.test");
    assert_int_equal(l.count, 1);
    assert_int_equal(l.items[0], 1);
    assert_int_equal(index_exact(ix, "b.a.test").count, 0);
    assert_int_equal(index_wildcard(ix, "test").count, 0);

    assert_true(index_denied(ix, "x.test"));
    assert_false(index_denied(ix, "a.x.test"));
    assert_false(index_denied(ix, "y.test"));
    assert_true(index_denied(ix, "a.y.test"));
    assert_true(index_denied(ix, "b.a.y.test"));
    assert_false(index_denied(ix, "ay.test"));
    assert_false(index_denied(ix, "y.test.z"));
    assert_false(index_denied(ix, ".y.test.")); /* no empty suffix lookups */

    struct ipaddr a;
    assert_true(parse_ip("10.1.2.3", &a));
    unsigned seen[8] = {0};
    assert_int_equal(index_cidr_each(ix, &a, record_prefix, seen), 0);
    assert_int_equal(seen[0], 2);
    assert_int_equal(seen[1], 96 + 16);
    assert_int_equal(seen[2], 96 + 8);
    unsigned first = 0;
    assert_int_equal(index_cidr_each(ix, &a, stop_first, &first), 42);
    assert_int_equal(first, 96 + 16);
    assert_true(parse_ip("12.0.0.1", &a));
    assert_int_equal(index_cidr_each(ix, &a, stop_first, &first), 0);
    assert_int_equal(index_cidr_each(NULL, &a, stop_first, &first), 0);
    fx_free(f);
}

/* Many keys: long probe chains and shared runs must still give each name
 * its own rules, in file order, and nothing to a miss. */
static void test_many_rules(void **state)
{
    enum { N = 20000 };
    struct policy p;
    memset(&p, 0, sizeof(p));
    p.rules = calloc(N, sizeof(*p.rules));
    char(*names)[32] = calloc(N, sizeof(*names));
    assert_non_null(p.rules);
    assert_non_null(names);
    p.nrules = N;
    for (size_t i = 0; i < N; i++) {
        struct rule *r = &p.rules[i];
        r->index = i;
        r->ports = web_ports;
        r->nports = 2;
        r->tier = i % 5 == 1 ? TIER_3 : (enum tier)(i % 3);
        if (i % 10 == 9) {
            /* cidr /32s (v4) */
            r->kind = RULE_CIDR;
            r->cidr.prefix = 128;
            r->cidr.addr.b[10] = 0xff;
            r->cidr.addr.b[11] = 0xff;
            r->cidr.addr.b[12] = 10;
            r->cidr.addr.b[13] = (uint8_t)(i >> 16);
            r->cidr.addr.b[14] = (uint8_t)(i >> 8);
            r->cidr.addr.b[15] = (uint8_t)i;
            continue;
        }
        /* every fifth pair shares a name, so runs longer than one exist */
        size_t k = i % 5 == 1 ? i - 1 : i;
        snprintf(names[i], sizeof(names[i]), "h%zu.example.test", k);
        r->kind = i % 10 == 8 ? RULE_WILDCARD : RULE_EXACT;
        r->host = names[i];
    }
    assert_int_equal(policy_index_build(&p), 0);

    for (size_t i = 0; i < N; i++) {
        struct host h;
        memset(&h, 0, sizeof(h));
        struct decision_query q = {NULL, "x", METHOD_GET, &h, 443, NOW};
        struct decision d;
        if (p.rules[i].kind == RULE_CIDR) {
            h.kind = HOST_IP;
            h.ip = p.rules[i].cidr.addr;
        } else if (p.rules[i].kind == RULE_WILDCARD) {
            h.kind = HOST_NAME;
            snprintf(h.name, sizeof(h.name), "w.%s", p.rules[i].host);
        } else {
            h.kind = HOST_NAME;
            snprintf(h.name, sizeof(h.name), "%s", p.rules[i].host);
        }
        policy_decide(&p, &q, &d);
        assert_int_equal(d.verdict, VERDICT_ALLOW);
        /* i%5==1 shares i-1's name: the lower tier (i-1's) wins */
        size_t want = i % 5 == 1 && p.rules[i].kind == RULE_EXACT ? i - 1 : i;
        assert_ptr_equal(d.rule, &p.rules[want]);
        if (p.rules[i].kind == RULE_EXACT) {
            struct rule_list l = index_exact(p.index, h.name);
            assert_int_equal(l.count, i % 5 <= 1 ? 2 : 1);
            if (l.count == 2)
                assert_true(l.items[0] < l.items[1]);
        }
        /* misses: one more label, a glued name, another address */
        if (h.kind == HOST_NAME) {
            size_t n = strlen(h.name);
            assert_true(n < HOST_MAX);
            h.name[n] = 'x';
            h.name[n + 1] = '\0';
            policy_decide(&p, &q, &d);
            assert_int_equal(d.reason, REASON_NOT_IN_POLICY);
        } else {
            h.ip.b[12] = 11;
            policy_decide(&p, &q, &d);
            assert_int_equal(d.reason, REASON_IP_LITERAL);
        }
    }
    policy_index_free(p.index);
    free(p.rules);
    free(names);
}

/* ---- the index against the plain semantics ---- */

/* A reference decision, written from SPEC.md and docs/SPEC.md without the
 * index: every rule is looked at, every deny entry too. policy_decide() must
 * agree with it on every field, for any policy and any request. */

/* The specificity class of <r> for the request <h>: lower is more specific
 * (exact, then wildcards by longer suffix, then CIDRs by longer prefix);
 * -1 when <r> does not cover <h>. */
static int ref_class(const struct rule *r, const struct host *h)
{
    if (h->kind == HOST_IP)
        return r->kind == RULE_CIDR && cidr_contains(&r->cidr, &h->ip) ? 128 - r->cidr.prefix : -1;
    if (r->kind == RULE_EXACT)
        return strcmp(r->host, h->name) == 0 ? 0 : -1;
    if (r->kind != RULE_WILDCARD)
        return -1;
    struct host_pattern hp = {.kind = PATTERN_WILDCARD};
    snprintf(hp.name, sizeof(hp.name), "%s", r->host);
    return host_pattern_matches(&hp, h->name) ? 1 + HOST_MAX - (int)strlen(r->host) : -1;
}

/* True when <a> (class <ca>) ranks before <b> (class <cb>); <b> may be NULL. */
static bool ref_before(const struct rule *a, int ca, const struct rule *b, int cb)
{
    if (b == NULL)
        return true;
    if (ca != cb)
        return ca < cb;
    if ((a->methods != 0) != (b->methods != 0))
        return a->methods != 0;
    if (a->tier != b->tier)
        return a->tier < b->tier;
    return a->index < b->index;
}

static bool ref_agent(const struct rule *r, const char *id)
{
    for (size_t i = 0; i < r->nagents; i++)
        if (id != NULL && strcmp(r->agents[i], id) == 0)
            return true;
    return r->nagents == 0;
}

static bool ref_port(const struct rule *r, uint16_t port)
{
    for (size_t i = 0; i < r->nports; i++)
        if (r->ports[i] == port)
            return true;
    return false;
}

static bool ref_expired(const struct rule *r, int32_t today)
{
    return r->has_expires && today > r->expires;
}

/* The tunnel's deciding rule (<open>, the best unrestricted rule) and the
 * rule that sets its tier (<top>, the highest tier, ties in ranking order)
 * among the rules that match the CONNECT's agent and port, the expired ones
 * included or not (<with_expired>). */
static void ref_gather(const struct policy *p, const struct decision_query *q, bool with_expired,
                       const struct rule **open, const struct rule **top)
{
    int copen = 0, ctop = 0;
    int32_t today = (int32_t)(q->now / DAY);
    *open = *top = NULL;
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        int c = ref_class(r, q->target);
        if (c < 0 || !ref_agent(r, q->agent_id) || !ref_port(r, q->port))
            continue;
        if (!with_expired && ref_expired(r, today))
            continue;
        if (r->methods == 0 && ref_before(r, c, *open, copen)) {
            *open = r;
            copen = c;
        }
        if (*top == NULL || r->tier > (*top)->tier ||
            (r->tier == (*top)->tier && ref_before(r, c, *top, ctop))) {
            *top = r;
            ctop = c;
        }
    }
}

static void ref_set(struct decision *d, enum deny_reason why, const struct rule *r)
{
    d->reason = why;
    d->rule = r;
    d->tier = r->tier;
    d->grant = r;
    d->owner = r->owner;
}

static struct decision ref_decide(const struct policy *p, const struct decision_query *q)
{
    struct decision d = {.verdict = VERDICT_DENY, .reason = REASON_NONE, .tier = TIER_NONE};
    const struct host *h = q->target;
    bool connect = q->method == METHOD_CONNECT;
    int32_t today = (int32_t)(q->now / DAY);
    bool denied = false;
    for (size_t i = 0; h->kind == HOST_NAME && i < p->ndeny; i++)
        denied = denied || host_pattern_matches(&p->deny[i].pattern, h->name);
    /* 0 none, 1 covered, 2 agent, 3 port, 4 method (a full match) */
    int stage = 0;
    const struct rule *best = NULL; /* live or expired: the ranking is one */
    int cbest = 0;
    for (size_t i = 0; !denied && i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        int c = ref_class(r, h);
        if (c < 0)
            continue;
        int st = 1;
        if (ref_agent(r, q->agent_id)) {
            st = 2;
            if (ref_port(r, q->port)) {
                st = 3;
                if (connect || r->methods == 0 || (r->methods & q->method) != 0)
                    st = 4;
            }
        }
        if (st == 4 && ref_before(r, c, best, cbest)) {
            best = r;
            cbest = c;
        }
        stage = st > stage ? st : stage;
    }
    static const enum deny_reason by_stage[] = {
        REASON_NOT_IN_POLICY,
        REASON_AGENT_NOT_ALLOWED,
        REASON_PORT_NOT_ALLOWED,
        REASON_METHOD_NOT_ALLOWED,
    };
    if (denied) {
        d.reason = REASON_DENIED_HOST;
    } else if ((connect || q->method == METHOD_OTHER) && best != NULL) {
        /* the tunnel (or extension method) as decided by the live rules,
         * and as it would be were the expired ones live too */
        const struct rule *open, *top, *aopen, *atop;
        ref_gather(p, q, false, &open, &top);
        ref_gather(p, q, true, &aopen, &atop);
        const struct rule *agrant = aopen != NULL && aopen->tier == atop->tier ? aopen : atop;
        if (aopen == NULL && top != NULL) {
            ref_set(&d, REASON_NEEDS_INSPECTION, top);
        } else if (aopen == NULL) {
            ref_set(&d, REASON_GRANT_EXPIRED, atop);
        } else if (ref_expired(aopen, today) || atop->tier > top->tier) {
            ref_set(&d, REASON_GRANT_EXPIRED, ref_expired(agrant, today) ? agrant : aopen);
        } else {
            d.verdict = VERDICT_ALLOW;
            d.rule = open;
            d.tier = top->tier;
            d.grant = open->tier == top->tier ? open : top;
            d.owner = d.grant->owner;
        }
    } else if (best != NULL && ref_expired(best, today)) {
        ref_set(&d, REASON_GRANT_EXPIRED, best);
    } else if (best != NULL) {
        d.verdict = VERDICT_ALLOW;
        ref_set(&d, REASON_NONE, best);
    } else if (stage == 0 && h->kind == HOST_IP) {
        d.reason = REASON_IP_LITERAL;
    } else if (stage == 3 && q->agent != NULL && q->agent->mode == AGENT_REPORT &&
               (q->method & (METHODS_WRITE | METHOD_OTHER)) != 0) {
        /* a write report mode lets through: at its host's highest tier */
        const struct rule *open, *top;
        ref_gather(p, q, false, &open, &top);
        if (top == NULL)
            ref_gather(p, q, true, &open, &top);
        ref_set(&d, REASON_METHOD_NOT_ALLOWED, top);
    } else {
        d.reason = by_stage[stage];
    }
    if (d.verdict == VERDICT_DENY && q->agent != NULL && q->agent->mode == AGENT_REPORT)
        d.verdict = VERDICT_REPORT;
    return d;
}

/* xorshift64: the same cases on every run. */
static uint64_t rnd_state = 0x9e3779b97f4a7c15u;

static unsigned rnd(unsigned n)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return (unsigned)(rnd_state % n);
}

/* A name of 1 to 4 labels from a small set, so that names share suffixes,
 * and glued ones ("ab.c" next to "b.c") come up. */
static void rnd_name(char *out, size_t len)
{
    static const char *const labels[] = {"a", "b", "ab", "c", "bc"};
    size_t o = 0;
    unsigned n = 1 + rnd(4);
    out[0] = '\0';
    for (unsigned i = 0; i < n; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%s", i ? "." : "", labels[rnd(5)]);
}

/* An address in 10.0.0.0/28 or 2001:db8::/124, so that prefixes overlap. */
static void rnd_addr(struct ipaddr *a, bool v6)
{
    memset(a, 0, sizeof(*a));
    if (v6) {
        a->b[0] = 0x20;
        a->b[1] = 0x01;
        a->b[2] = 0x0d;
        a->b[3] = 0xb8;
    } else {
        a->b[10] = 0xff;
        a->b[11] = 0xff;
        a->b[12] = 10;
    }
    a->b[15] = (uint8_t)rnd(16);
}

static void rnd_rule(struct fx *f)
{
    static const unsigned method_sets[] = {0,           0,
                                           METHOD_GET,  METHOD_GET | METHOD_HEAD,
                                           METHOD_POST, METHOD_GET | METHOD_POST | METHOD_PUT};
    static const uint16_t port_pool[] = {80, 443, 8080};
    static const char *const agent_pool[] = {"a1", "a2"};
    char pat[HOST_MAX + 8];
    unsigned kind = rnd(3);
    if (kind == 0) {
        rnd_name(pat, sizeof(pat));
    } else if (kind == 1) {
        memcpy(pat, "*.", 2);
        rnd_name(pat + 2, sizeof(pat) - 2);
    } else {
        snprintf(pat, sizeof(pat), "0.0.0.0/1"); /* replaced below */
    }
    struct rule *r = add(f, pat, method_sets[rnd(6)], (enum tier)rnd(4));
    if (kind == 2) {
        /* /0 and /32 of IPv6 hold every IPv4 address (as ::ffff:0:0/96) */
        static const uint8_t v4_prefixes[] = {96, 104, 120, 124, 125, 126, 127, 128};
        static const uint8_t v6_prefixes[] = {0, 32, 64, 124, 126, 128};
        bool v6 = rnd(4) == 0;
        rnd_addr(&r->cidr.addr, v6);
        r->cidr.prefix = v6 ? v6_prefixes[rnd(6)] : v4_prefixes[rnd(8)];
        mask(&r->cidr);
        f->pats[r->index][0] = '\0';
    }
    if (rnd(3) == 0) {
        uint16_t a = port_pool[rnd(3)], b = port_pool[rnd(3)];
        set_ports(f, r, a < b ? a : b, a == b ? 0 : (a < b ? b : a));
    }
    if (rnd(3) == 0)
        set_agent(f, r, agent_pool[rnd(2)]);
    if (rnd(3) == 0)
        set_expiry(r, TODAY - 1 + (int32_t)rnd(3), rnd(2) ? "bob" : NULL);
    else if (rnd(4) == 0)
        r->owner = (char *)(uintptr_t) "carol";
}

static void test_index_agrees_with_scan(void **state)
{
    (void)state;
    static const unsigned methods[] = {METHOD_GET,    METHOD_HEAD,    METHOD_POST,
                                       METHOD_DELETE, METHOD_CONNECT, METHOD_OTHER};
    static const uint16_t ports[] = {80, 443, 8080, 22};
    static const char *const ids[] = {"default", "a1", "a2"};
    struct agent reporter = {.mode = AGENT_REPORT};
    for (int round = 0; round < 3000; round++) {
        struct fx *f = fx_new();
        unsigned nrules = 1 + rnd(12), ndeny = rnd(3);
        for (unsigned i = 0; i < nrules; i++)
            rnd_rule(f);
        for (unsigned i = 0; i < ndeny; i++) {
            char pat[HOST_MAX + 8];
            bool wild = rnd(2) == 0;
            memcpy(pat, "*.", 2);
            rnd_name(pat + 2, sizeof(pat) - 2);
            add_deny(f, wild ? pat : pat + 2);
        }
        fx_index(f);
        for (int k = 0; k < 60; k++) {
            struct host h;
            memset(&h, 0, sizeof(h));
            if (rnd(3) == 0) {
                h.kind = HOST_IP;
                rnd_addr(&h.ip, rnd(4) == 0);
            } else {
                h.kind = HOST_NAME;
                rnd_name(h.name, sizeof(h.name));
            }
            struct decision_query q = {
                .agent = rnd(5) == 0 ? &reporter : NULL,
                .agent_id = ids[rnd(3)],
                .method = methods[rnd(6)],
                .target = &h,
                .port = ports[rnd(4)],
                .now = NOW,
            };
            struct decision got, want = ref_decide(&f->p, &q);
            memset(&got, 0x5a, sizeof(got));
            policy_decide(&f->p, &q, &got);
            if (got.verdict != want.verdict || got.reason != want.reason || got.tier != want.tier ||
                got.rule != want.rule || got.owner != want.owner || got.grant != want.grant)
                fail_msg("round %d, %s %s port %u agent %s: got %s %s rules[%d] tier %d, "
                         "want %s %s rules[%d] tier %d",
                         round, method_name(q.method), h.kind == HOST_IP ? "(ip)" : h.name, q.port,
                         q.agent_id, verdict_name(got.verdict),
                         reason_name(got.reason) ? reason_name(got.reason) : "-",
                         got.rule ? (int)got.rule->index : -1, got.tier, verdict_name(want.verdict),
                         reason_name(want.reason) ? reason_name(want.reason) : "-",
                         want.rule ? (int)want.rule->index : -1, want.tier);
        }
        fx_free(f);
    }
}

/* ---- names and statuses ---- */

static void test_names(void **state)
{
    static const char *const want[REASON_COUNT] = {
        NULL,
        "not_in_policy",
        "denied_host",
        "port_not_allowed",
        "method_not_allowed",
        "needs_inspection",
        "self_request",
        "agent_not_allowed",
        "grant_expired",
        "ip_literal",
        "private_address",
        "host_mismatch",
        "sni_mismatch",
        "rate_limited",
        "bad_request",
        "auth_required",
        "dns_failure",
        "upstream_unreachable",
        "too_many_connections",
        "quarantined",
        "encrypted_client_hello",
        "gateway_overloaded",
    };
    for (int r = 0; r < REASON_COUNT; r++) {
        if (want[r] == NULL)
            assert_null(reason_name((enum deny_reason)r));
        else
            assert_string_equal(reason_name((enum deny_reason)r), want[r]);
    }
    assert_null(reason_name(REASON_COUNT));
    assert_null(reason_name((enum deny_reason) - 1));

    assert_int_equal(reason_status(REASON_NOT_IN_POLICY), 403);
    assert_int_equal(reason_status(REASON_DENIED_HOST), 403);
    assert_int_equal(reason_status(REASON_NEEDS_INSPECTION), 403);
    assert_int_equal(reason_status(REASON_QUARANTINED), 403);
    assert_int_equal(reason_status(REASON_PRIVATE_ADDRESS), 403);
    assert_int_equal(reason_status(REASON_AUTH_REQUIRED), 407);
    assert_int_equal(reason_status(REASON_BAD_REQUEST), 400);
    assert_int_equal(reason_status(REASON_RATE_LIMITED), 429);
    assert_int_equal(reason_status(REASON_DNS_FAILURE), 502);
    assert_int_equal(reason_status(REASON_UPSTREAM_UNREACHABLE), 502);
    assert_int_equal(reason_status(REASON_GATEWAY_OVERLOADED), 503);
    assert_int_equal(reason_status(REASON_TOO_MANY_CONNECTIONS), 403);

    assert_string_equal(verdict_name(VERDICT_ALLOW), "allow");
    assert_string_equal(verdict_name(VERDICT_DENY), "deny");
    assert_string_equal(verdict_name(VERDICT_REPORT), "report");
}

/* A tunnel (or an extension method) may carry any request to its host, so
 * its decision carries every live rule with a rate for its host, agent
 * and port besides the deciding one (the grant first, then as met, most
 * specific host first): shaping holds it to all of them. A plain request
 * carries none (its own rule's rate alone). Bounded: DECISION_LIMITS_MAX. */
static void test_tunnel_carries_the_limits_of_its_host(void **state)
{
    (void)state;
    struct fx *f = fx_new();
    struct rule *any = add(f, "api.github.com", 0, TIER_0);
    struct rule *get = add(f, "api.github.com", METHOD_GET, TIER_1);
    struct rule *wr = add(f, "*.github.com", METHODS_WRITE, TIER_3);
    struct rule *old = add_expired(f, "api.github.com", METHOD_PUT, TIER_1, "bob");
    struct rule *other = add(f, "api.github.com", METHOD_DELETE, TIER_1);
    set_ports(f, other, 8443, 0);
    get->rate = (struct rate_spec){.set = true, .requests = 2, .per_ms = 60000};
    wr->rate = (struct rate_spec){.set = true, .bandwidth = 1024};
    old->rate = get->rate;
    other->rate = get->rate;
    any->rate = get->rate;
    fx_index(f);
    for (unsigned m = 0; m < 2; m++) {
        struct decision d =
            decide(f, "api.github.com", m == 0 ? METHOD_CONNECT : METHOD_OTHER, 443);
        assert_int_equal(d.verdict, VERDICT_ALLOW);
        assert_ptr_equal(d.rule, any);
        assert_int_equal(d.nlimits, 2);
        assert_ptr_equal(d.limits[0], wr); /* the grant first */
        assert_ptr_equal(d.limits[1], get);
    }
    assert_int_equal(decide(f, "api.github.com", METHOD_GET, 443).nlimits, 0);
    fx_free(f);

    /* More rules with a rate than a decision holds: the first of them. */
    f = fx_new();
    add(f, "api.github.com", 0, TIER_0);
    struct rule *lim[DECISION_LIMITS_MAX + 2];
    for (unsigned i = 0; i < DECISION_LIMITS_MAX + 2; i++) {
        lim[i] = add(f, "api.github.com", METHOD_GET, TIER_1);
        set_ports(f, lim[i], 443, (uint16_t)(1000 + i)); /* each its own identity */
        lim[i]->rate = (struct rate_spec){.set = true, .requests = 1, .per_ms = 1000};
    }
    fx_index(f);
    struct decision d = decide(f, "api.github.com", METHOD_CONNECT, 443);
    assert_int_equal(d.verdict, VERDICT_ALLOW);
    assert_int_equal(d.nlimits, DECISION_LIMITS_MAX);
    assert_ptr_equal(d.grant, lim[0]);
    for (unsigned i = 0; i < DECISION_LIMITS_MAX; i++)
        assert_ptr_equal(d.limits[i], lim[i]);
    fx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deny_wins),
        cmocka_unit_test(test_exact_over_wildcard),
        cmocka_unit_test(test_wildcard_boundaries),
        cmocka_unit_test(test_glued_names),
        cmocka_unit_test(test_method_named_over_unnamed),
        cmocka_unit_test(test_extension_method_tier_as_a_connect),
        cmocka_unit_test(test_lower_tier_then_file_order),
        cmocka_unit_test(test_owner_follows_rule),
        cmocka_unit_test(test_agent_scoped),
        cmocka_unit_test(test_port_not_allowed),
        cmocka_unit_test(test_method_not_allowed),
        cmocka_unit_test(test_furthest_stage),
        cmocka_unit_test(test_plain_request_falls_through),
        cmocka_unit_test(test_connect),
        cmocka_unit_test(test_connect_all_classes),
        cmocka_unit_test(test_grant_expired),
        cmocka_unit_test(test_expired_ranks_first),
        cmocka_unit_test(test_expired_connect),
        cmocka_unit_test(test_ip_literal),
        cmocka_unit_test(test_cidr_longest_prefix),
        cmocka_unit_test(test_v4_mapped),
        cmocka_unit_test(test_report_mode),
        cmocka_unit_test(test_report_mode_write_takes_the_hosts_tier),
        cmocka_unit_test(test_empty_policy),
        cmocka_unit_test(test_index_lists),
        cmocka_unit_test(test_many_rules),
        cmocka_unit_test(test_index_agrees_with_scan),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_tunnel_carries_the_limits_of_its_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
