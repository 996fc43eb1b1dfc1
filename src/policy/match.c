/* match: the decision engine, a pure function from (agent, method, target,
 * port, time) to a decision (see decision.h for the precedence).
 *
 * Candidates come from the index in classes, most specific first: for a
 * host name the exact rules, then the wildcard rules of each proper suffix
 * of the name, longest suffix first; for an IP literal the cidr: rules of
 * each prefix length, longest first. No rule list is ever scanned: the cost
 * depends on the name's label count and the number of prefix lengths.
 *
 * Each candidate goes through the same filters in the same order: agent,
 * port, method. The furthest filter any candidate got past names the
 * denial when nothing matches (a rule for another agent says
 * agent_not_allowed, one for another port port_not_allowed, and so on).
 * Expiry is no filter: an expired rule that matches is ranked with the live
 * ones, so that it never lets a request through a wider or lower-tier rule.
 *
 * Two choices the SPEC leaves open, decided here:
 *  - A plain request (anything but CONNECT) is ranked over every class: the
 *    first class, in specificity order, holding a rule that matches agent,
 *    port and method supplies the first-ranked rule; when it has expired,
 *    the answer is grant_expired, naming it. So an exact rule for GET
 *    does not hide a wildcard rule that allows every method: the wildcard's
 *    author allowed that method for every name below it.
 *  - A CONNECT gathers the live rules matching agent and port from every
 *    class, exact and wildcard alike (SPEC: "all rules for that host and
 *    port"). It is allowed when any of them has no methods restriction
 *    (naming CONNECT is still a restriction); the deciding rule is the best
 *    such rule by the same ranking as a plain request. It is classified at
 *    the highest tier of all the gathered rules, restricted ones included
 *    (a tunnel can carry whatever any of them grants); the owner is that of
 *    the deciding rule when it has that tier, else that of the most
 *    specific rule holding it. Without an unrestricted rule the answer is
 *    needs_inspection, reported against that highest-tier rule. Consistent
 *    with plain requests: "api.github.com: GET only" next to an
 *    unrestricted "*.github.com" lets a POST through, and so a tunnel.
 *    The expired rules matching agent and port are gathered too, apart:
 *    when, counted as live, one of them would decide the tunnel or raise
 *    its tier, the tunnel is grant_expired (conclude_connect()).
 *    The live ones with a rate are its decision's limits (shaping holds
 *    the tunnel to each, since it may carry what any of them limits): a
 *    fixed array, the first met beyond it left out (conclude_limits()).
 *  - An extension method (METHOD_OTHER: WebDAV's MOVE, COPY, MKCOL,
 *    PROPPATCH, any token) is gathered and concluded as a CONNECT is. No
 *    rule can name it, so only rules without methods match it, and what it
 *    does is the origin's to say (MOVE deletes its source): ranked as a
 *    plain request it took the tier of the read rule beside a tier-3 write
 *    grant, a write without the grant's owner or a tier3_write alert. Its
 *    deciding rule is the one a plain request would have (the best rule
 *    without methods, the first class first); its tier the highest of the
 *    rules covering its host, agent and port. */
#include <string.h>

#include "policy/decision.h"
#include "policy/index.h"
#include "util/units.h"

enum stage {
    STAGE_NONE,  /* no rule covers the target */
    STAGE_HOST,  /* covered, but every rule is for other agents */
    STAGE_AGENT, /* agent ok, port not */
    STAGE_PORT,  /* agent and port ok, method not */
    STAGE_MATCH, /* a rule matches agent, port and method (live or expired) */
};

/* A CONNECT's candidates, over every class: the best rule without a methods
 * restriction (which opens the tunnel) and the rule of the highest tier
 * (ties: ranking order), with the classes they were met in. */
struct gathered {
    const struct rule *open;
    unsigned open_cls;
    const struct rule *top;
    unsigned top_cls;
};

struct search {
    const struct policy *p;
    const struct decision_query *q;
    int32_t today;
    bool connect;
    bool gathers; /* a CONNECT or an extension method: every class is gathered */
    bool report;  /* an agent in report mode: a write is gathered too (report_tier_rule()) */
    enum stage stage;
    unsigned cls;            /* classes visited so far */
    const struct rule *best; /* plain request: the first-ranked match, live or expired */
    struct gathered live;    /* gathers: the live rules matching agent and port */
    struct gathered all;     /* gathers: the same, expired ones included */
    /* gathers: the first live ones with a rate, in the order met (one
     * more than a decision holds: the deciding rule is left out of it) */
    const struct rule *limited[DECISION_LIMITS_MAX + 1];
    unsigned nlimited;
};

static bool agent_ok(const struct rule *r, const char *agent_id)
{
    if (r->agents == NULL || r->nagents == 0)
        return true;
    if (agent_id == NULL)
        return false;
    for (size_t i = 0; i < r->nagents; i++) {
        if (r->agents[i] != NULL && strcmp(r->agents[i], agent_id) == 0)
            return true;
    }
    return false;
}

/* A rule without ports (not something the loader produces) gets the SPEC's
 * default, 80 and 443. */
static bool port_ok(const struct rule *r, uint16_t port)
{
    if (r->ports == NULL || r->nports == 0)
        return port == 80 || port == 443;
    size_t lo = 0, hi = r->nports;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->ports[mid] == port)
            return true;
        if (r->ports[mid] < port)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

static bool method_ok(const struct rule *r, unsigned method)
{
    return r->methods == 0 || (r->methods & method) != 0;
}

bool policy_rule_ranks_before(const struct rule *a, const struct rule *b)
{
    bool na = a->methods != 0, nb = b->methods != 0;
    if (na != nb)
        return na;
    if (a->tier != b->tier)
        return a->tier < b->tier;
    return a < b; /* same rules[] array: file order */
}

static void reach(struct search *s, enum stage st)
{
    if (st > s->stage)
        s->stage = st;
}

/* Does <r>, met in class <cls>, rank before <cur>, met in class <cur_cls>?
 * Classes arrive most specific first, so an earlier class always wins. */
static bool ranks_before(const struct rule *r, unsigned cls, const struct rule *cur,
                         unsigned cur_cls)
{
    if (cur == NULL)
        return true;
    return cls == cur_cls && policy_rule_ranks_before(r, cur);
}

bool policy_rule_serves(const struct rule *r, const char *agent_id, uint16_t port)
{
    return agent_ok(r, agent_id) && port_ok(r, port);
}

static bool expired(const struct search *s, const struct rule *r)
{
    return r->has_expires && s->today > r->expires;
}

static bool has_limits(const struct rule *r)
{
    return r->rate.set && (r->rate.requests > 0 || r->rate.bandwidth > 0);
}

static void gather(struct gathered *g, const struct rule *r, unsigned cls)
{
    if (r->methods == 0 && ranks_before(r, cls, g->open, g->open_cls)) {
        g->open = r;
        g->open_cls = cls;
    }
    if (g->top == NULL || r->tier > g->top->tier ||
        (r->tier == g->top->tier && ranks_before(r, cls, g->top, g->top_cls))) {
        g->top = r;
        g->top_cls = cls;
    }
}

/* Runs one class of candidates through the filters. Returns 1 when the
 * class settled the decision (no less specific class may change it): a
 * plain request's first class with a match, live or expired (an expired
 * rule is ranked as a live one is, so that it never lets a request fall
 * through to a wider rule). A CONNECT or an extension method never stops. */
static int visit_class(struct search *s, struct rule_list l)
{
    bool match = false;
    s->cls++;
    for (size_t i = 0; i < l.count; i++) {
        if (l.items[i] >= s->p->nrules)
            continue;
        const struct rule *r = &s->p->rules[l.items[i]];
        reach(s, STAGE_HOST);
        if (!agent_ok(r, s->q->agent_id))
            continue;
        reach(s, STAGE_AGENT);
        if (!port_ok(r, s->q->port))
            continue;
        reach(s, STAGE_PORT);
        /* A CONNECT's methods are judged on all the gathered rules; an
         * extension method's tier on them too. */
        if (s->gathers || s->report) {
            gather(&s->all, r, s->cls);
            if (!expired(s, r))
                gather(&s->live, r, s->cls);
            if (!expired(s, r) && has_limits(r) && s->nlimited < DECISION_LIMITS_MAX + 1)
                s->limited[s->nlimited++] = r;
        }
        if (!s->connect && !method_ok(r, s->q->method))
            continue;
        reach(s, STAGE_MATCH);
        match = true;
        if (!s->gathers && (s->best == NULL || policy_rule_ranks_before(r, s->best)))
            s->best = r;
    }
    return match && !s->gathers ? 1 : 0;
}

static int visit_cidr(struct rule_list rules, unsigned prefix, void *arg)
{
    (void)prefix; /* classes arrive longest prefix first */
    return visit_class(arg, rules);
}

static void search_name(struct search *s, const char *name)
{
    const struct policy_index *ix = s->p->index;
    if (visit_class(s, index_exact(ix, name)))
        return;
    /* Proper suffixes after each label boundary, longest first. */
    for (size_t i = 0; i < HOST_MAX && name[i] != '\0'; i++) {
        if (name[i] != '.' || name[i + 1] == '\0')
            continue;
        struct rule_list l = index_wildcard(ix, name + i + 1);
        if (l.count != 0 && visit_class(s, l))
            return;
    }
}

static void set_rule(struct decision *out, const struct rule *r)
{
    out->rule = r;
    out->grant = r;
    out->tier = r != NULL ? r->tier : TIER_NONE;
    out->owner = r != NULL ? r->owner : NULL;
}

static void deny(struct decision *out, enum deny_reason why, const struct rule *r)
{
    out->verdict = VERDICT_DENY;
    out->reason = why;
    set_rule(out, r);
}

/* A CONNECT with at least one rule for its agent and port, or an extension
 * method with at least one rule without methods for them. Its decision
 * by the live rules is compared with the one it would have were the expired
 * rules live too: when that one's deciding rule is expired, or its tier is
 * higher, expiry would widen the tunnel or lower its tier, and it is
 * refused with grant_expired instead, naming the expired rule that would
 * have set its tier, else the one that would have decided it. */
static void conclude_connect(const struct search *s, struct decision *out)
{
    const struct rule *open = s->all.open, *top = s->all.top;
    const struct rule *grant = open != NULL && open->tier == top->tier ? open : top;
    if (open == NULL) {
        /* nothing would open it, live or not: needs_inspection, named
         * after the highest live tier; only expired rules: grant_expired */
        if (s->live.top != NULL)
            deny(out, REASON_NEEDS_INSPECTION, s->live.top);
        else
            deny(out, REASON_GRANT_EXPIRED, top);
        return;
    }
    if (expired(s, open) || top->tier > s->live.top->tier) {
        deny(out, REASON_GRANT_EXPIRED, expired(s, grant) ? grant : open);
        return;
    }
    /* <open> is live, and so is a rule of <top>'s tier: the live ones
     * decide (the owner a live rule's, when an expired one of that tier
     * ranks first) */
    out->verdict = VERDICT_ALLOW;
    out->reason = REASON_NONE;
    out->rule = open;
    out->tier = top->tier;
    out->grant = open->tier == top->tier ? open : s->live.top;
    out->owner = out->grant->owner;
}

/* A write (or extension method) by an agent in report mode that rules for
 * its host, agent and port cover but none of whose methods allow it: it is
 * let through, and is logged at the tier those rules give its host, the
 * highest (live first, else expired), as a CONNECT or an extension method
 * would be, naming that rule and its owner. Before, it went out with no
 * tier: a POST beside a tier-3 grant for PUT raised no tier3_write, where
 * report mode is there to show what enforcement would stop. A read, or a
 * request no rule for its agent and port covers, keeps no rule (NULL). */
static const struct rule *report_tier_rule(const struct search *s)
{
    if (!s->report || (s->q->method & (METHODS_WRITE | METHOD_OTHER)) == 0)
        return NULL;
    return s->live.top != NULL ? s->live.top : s->all.top;
}

/* A tunnel (or an extension method) may carry any request to its host,
 * so the rate of each live rule for its host, agent and port holds it,
 * not only its deciding rule's: <out>'s limits, its grant first (it sets
 * the tier), then the others as met, up to DECISION_LIMITS_MAX. */
static void conclude_limits(const struct search *s, struct decision *out)
{
    const struct rule *grant = out->grant;
    out->nlimits = 0;
    if (grant != NULL && grant != out->rule && has_limits(grant) && !expired(s, grant))
        out->limits[out->nlimits++] = grant;
    for (unsigned i = 0; i < s->nlimited && out->nlimits < DECISION_LIMITS_MAX; i++)
        if (s->limited[i] != out->rule && s->limited[i] != grant)
            out->limits[out->nlimits++] = s->limited[i];
}

static void conclude(const struct search *s, struct decision *out, bool ip)
{
    if (s->connect && s->all.top != NULL) {
        conclude_connect(s, out);
    } else if (s->gathers && s->all.open != NULL) {
        /* an extension method that a rule without methods matches (only
         * those can): decided as the best of them, at the tunnel's tier */
        conclude_connect(s, out);
    } else if (!s->gathers && s->best != NULL) {
        if (expired(s, s->best)) {
            deny(out, REASON_GRANT_EXPIRED, s->best);
        } else {
            out->verdict = VERDICT_ALLOW;
            out->reason = REASON_NONE;
            set_rule(out, s->best);
        }
    } else if (s->stage == STAGE_NONE) {
        deny(out, ip ? REASON_IP_LITERAL : REASON_NOT_IN_POLICY, NULL);
    } else if (s->stage == STAGE_HOST) {
        deny(out, REASON_AGENT_NOT_ALLOWED, NULL);
    } else if (s->stage == STAGE_AGENT) {
        deny(out, REASON_PORT_NOT_ALLOWED, NULL);
    } else {
        /* STAGE_MATCH has a rule above */
        deny(out, REASON_METHOD_NOT_ALLOWED, report_tier_rule(s));
    }
    if (s->gathers)
        conclude_limits(s, out);
}

void policy_decide(const struct policy *p, const struct decision_query *q, struct decision *out)
{
    struct search s;
    memset(&s, 0, sizeof(s));
    memset(out, 0, sizeof(*out));
    s.p = p;
    s.q = q;
    s.connect = q->method == METHOD_CONNECT;
    s.gathers = s.connect || q->method == METHOD_OTHER;
    s.report = q->agent != NULL && q->agent->mode == AGENT_REPORT;
    s.today = day_of(q->now);

    if (q->target == NULL || p->index == NULL) {
        deny(out, REASON_NOT_IN_POLICY, NULL);
    } else if (q->target->kind == HOST_IP) {
        /* The deny list names hosts; an IP literal meets only cidr: rules. */
        index_cidr_each(p->index, &q->target->ip, visit_cidr, &s);
        conclude(&s, out, true);
    } else if (index_denied(p->index, q->target->name)) {
        deny(out, REASON_DENIED_HOST, NULL);
    } else {
        search_name(&s, q->target->name);
        conclude(&s, out, false);
    }
    if (out->verdict == VERDICT_DENY && q->agent != NULL && q->agent->mode == AGENT_REPORT)
        out->verdict = VERDICT_REPORT;
}

static const char *const reason_names[REASON_COUNT] = {
    [REASON_NONE] = NULL,
    [REASON_NOT_IN_POLICY] = "not_in_policy",
    [REASON_DENIED_HOST] = "denied_host",
    [REASON_PORT_NOT_ALLOWED] = "port_not_allowed",
    [REASON_METHOD_NOT_ALLOWED] = "method_not_allowed",
    [REASON_NEEDS_INSPECTION] = "needs_inspection",
    [REASON_SELF_REQUEST] = "self_request",
    [REASON_AGENT_NOT_ALLOWED] = "agent_not_allowed",
    [REASON_GRANT_EXPIRED] = "grant_expired",
    [REASON_IP_LITERAL] = "ip_literal",
    [REASON_PRIVATE_ADDRESS] = "private_address",
    [REASON_HOST_MISMATCH] = "host_mismatch",
    [REASON_SNI_MISMATCH] = "sni_mismatch",
    [REASON_RATE_LIMITED] = "rate_limited",
    [REASON_BAD_REQUEST] = "bad_request",
    [REASON_AUTH_REQUIRED] = "auth_required",
    [REASON_DNS_FAILURE] = "dns_failure",
    [REASON_UPSTREAM_UNREACHABLE] = "upstream_unreachable",
    [REASON_TOO_MANY_CONNECTIONS] = "too_many_connections",
    [REASON_QUARANTINED] = "quarantined",
    [REASON_ENCRYPTED_CLIENT_HELLO] = "encrypted_client_hello",
    [REASON_GATEWAY_OVERLOADED] = "gateway_overloaded",
};

const char *reason_name(enum deny_reason r)
{
    if ((unsigned)r >= REASON_COUNT)
        return NULL;
    return reason_names[r];
}

int reason_status(enum deny_reason r)
{
    switch (r) {
    case REASON_AUTH_REQUIRED:
        return 407;
    case REASON_BAD_REQUEST:
        return 400;
    case REASON_RATE_LIMITED:
        return 429;
    case REASON_DNS_FAILURE:
    case REASON_UPSTREAM_UNREACHABLE:
        return 502;
    case REASON_GATEWAY_OVERLOADED:
        return 503;
    default: /* too_many_connections and quarantined too: SPEC.md gives them 403 */
        return 403;
    }
}

const char *verdict_name(enum verdict v)
{
    switch (v) {
    case VERDICT_ALLOW:
        return "allow";
    case VERDICT_DENY:
        return "deny";
    case VERDICT_REPORT:
        return "report";
    }
    return "deny";
}
