/* load_tunnel_limits: the loader's finding about rates a tunnel is not
 * held to.
 *
 * A CONNECT (or an extension method) is held to the rate of every live
 * rule that covers its host, agent and port, but a decision has
 * DECISION_LIMITS_MAX slots besides its deciding rule (match.c,
 * conclude_limits()): the grant first, then as met, most specific pattern
 * first, then file order. A rate past those is not applied to tunnels,
 * and nothing said so.
 *
 * Host rules only, expiry aside (every rule counted live). The names
 * looked at: each exact rule's host, and for each wildcard "*.S" a name
 * right under S, which every wildcard over S or over a suffix of S covers.
 * Any name a tunnel may ask for meets the same rates as one of those (the
 * exact rules of its own name, the wildcards over its suffixes), so none
 * is missed within the bounds below (a name whose deciding rule has a
 * rate where that one's has none may leave out one rate more, unseen);
 * and each warning names a real name, agent and port whose
 * tunnel is decided by policy_decide() and leaves a rate out, so none is
 * false. The agents tried: each agent the covering rules name, or, when
 * none names one, any agent; the ports: each port more than
 * DECISION_LIMITS_MAX of them serve. CIDR rules are not looked at. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/decision.h"
#include "policy/index.h"
#include "policy/load_ctx.h"
#include "util/xalloc.h"

/* Steps (rules looked at, by the finding and by each decision it takes;
 * ports counted) the finding takes at most over a whole policy: a hostile
 * file is not checked past it. */
#define TUNNEL_LIMITS_WORK_MAX (1u << 24)
/* Covering rules looked at for one name, at most. */
#define TUNNEL_LIMITS_COVER_MAX 4096u
/* The label put under a wildcard's suffix to make a name it covers. */
#define WILDCARD_PROBE "x."

struct tunnel_scan {
    struct load_ctx *c;
    const struct policy *p;
    size_t work;
    bool *told;                /* per rule: already warned of */
    uint32_t *count;           /* per port: covering rules serving it */
    uint16_t *touched;         /* the ports counted, to clear <count> */
    const struct rule **cover; /* the rules with a rate covering the name, as met */
    size_t ncover;
    size_t cost;       /* the rules a decision of that name looks at */
    const char *shown; /* how the warning names the hosts */
};

static bool has_rate(const struct rule *r)
{
    return r->rate.set && (r->rate.requests > 0 || r->rate.bandwidth > 0);
}

static void add_cover(struct tunnel_scan *s, struct rule_list l)
{
    s->cost += l.count;
    for (size_t i = 0; i < l.count && s->work > 0; i++, s->work--) {
        if (l.items[i] >= s->p->nrules)
            continue;
        const struct rule *r = &s->p->rules[l.items[i]];
        if (has_rate(r) && s->ncover < TUNNEL_LIMITS_COVER_MAX)
            s->cover[s->ncover++] = r;
    }
}

/* The rules with a rate covering <name>, in the order match.c meets them:
 * the exact ones, then each wildcard suffix, longest first. */
static void gather_cover(struct tunnel_scan *s, const char *name)
{
    s->ncover = 0;
    s->cost = 0;
    add_cover(s, index_exact(s->p->index, name));
    for (size_t i = 0; name[i] != '\0'; i++)
        if (name[i] == '.' && name[i + 1] != '\0')
            add_cover(s, index_wildcard(s->p->index, name + i + 1));
}

static bool in_decision(const struct decision *d, const struct rule *r)
{
    if (d->rule == r)
        return true;
    for (unsigned i = 0; i < d->nlimits; i++)
        if (d->limits[i] == r)
            return true;
    return false;
}

/* Decides a tunnel to <target> for <agent> on <port>, and warns of the
 * first covering rate it is not held to. */
static void try_tunnel(struct tunnel_scan *s, const struct host *target, const char *agent,
                       uint16_t port)
{
    struct decision_query q = {.agent_id = agent,
                               .method = METHOD_CONNECT,
                               .target = target,
                               .port = port,
                               .now = 0}; /* 1970: no rule has expired */
    if (s->work < s->cost) {
        s->work = 0;
        return;
    }
    s->work -= s->cost;
    struct decision d;
    policy_decide(s->p, &q, &d);
    if (d.verdict != VERDICT_ALLOW)
        return;
    size_t held = 0, out = 0;
    const struct rule *first = NULL;
    for (size_t i = 0; i < s->ncover; i++) {
        const struct rule *r = s->cover[i];
        if (!policy_rule_serves(r, agent, port))
            continue;
        if (in_decision(&d, r)) {
            held++;
        } else {
            out++;
            if (first == NULL)
                first = r;
        }
    }
    if (first == NULL || s->told[first->index])
        return;
    for (size_t i = 0; i < s->ncover; i++)
        if (policy_rule_serves(s->cover[i], agent, port) && !in_decision(&d, s->cover[i]))
            s->told[s->cover[i]->index] = true;
    char who[96];
    if (agent != NULL)
        snprintf(who, sizeof(who), "agent '%s'", agent);
    else
        snprintf(who, sizeof(who), "every agent");
    char more[48] = "";
    if (out > 1)
        snprintf(more, sizeof(more), " (and %zu more)", out - 1);
    size_t m = load_field_push(s->c, "rules[%zu].rate", first->index);
    load_warn(s->c, first->rate.line,
              "not applied to tunnels to %s (%s, port %u): %zu rules with a rate cover them, and "
              "a tunnel (CONNECT, or a method no rule names) is held to its deciding rule's and "
              "%d others' only (the grant that sets its tier first, then the most specific "
              "pattern, then file order); this rate%s is left out: merge the rates, or narrow "
              "the rules",
              s->shown, who, (unsigned)port, held + out, DECISION_LIMITS_MAX, more);
    load_field_pop(s->c, m);
}

/* Tries each port more than DECISION_LIMITS_MAX of the covering rules
 * serve <agent> on. */
static void try_agent(struct tunnel_scan *s, const struct host *target, const char *agent)
{
    static const uint16_t default_ports[] = {80, 443};
    size_t ntouched = 0;
    for (size_t i = 0; i < s->ncover && s->work > 0; i++) {
        const struct rule *r = s->cover[i];
        const uint16_t *ports = r->nports ? r->ports : default_ports;
        size_t n = r->nports ? r->nports : 2;
        if (!policy_rule_serves(r, agent, ports[0]))
            continue; /* its agents do not take <agent> */
        for (size_t k = 0; k < n && s->work > 0; k++, s->work--)
            if (s->count[ports[k]]++ == 0)
                s->touched[ntouched++] = ports[k];
    }
    for (size_t i = 0; i < ntouched; i++) {
        if (s->count[s->touched[i]] > DECISION_LIMITS_MAX && s->work > 0) {
            s->work--;
            try_tunnel(s, target, agent, s->touched[i]);
        }
        s->count[s->touched[i]] = 0;
    }
}

static bool names_agent(const struct rule *r, const char *agent)
{
    for (size_t i = 0; i < r->nagents; i++)
        if (strcmp(r->agents[i], agent) == 0)
            return true;
    return false;
}

/* Looks at tunnels to <name> (normal form), shown as <shown>: for each
 * agent the covering rules name (once), or any agent when none does. */
static void scan_name(struct tunnel_scan *s, const char *name, const char *shown)
{
    gather_cover(s, name);
    if (s->ncover <= DECISION_LIMITS_MAX)
        return;
    struct host target;
    const char *why;
    if (host_normalise(name, strlen(name), &target, &why) != 0 || target.kind != HOST_NAME)
        return;
    s->shown = shown;
    bool named = false;
    for (size_t i = 0; i < s->ncover && s->work > 0; i++) {
        const struct rule *r = s->cover[i];
        for (size_t k = 0; k < r->nagents && s->work > 0; k++) {
            named = true;
            bool seen = false;
            for (size_t j = 0; j < i && !seen && s->work > 0; j++, s->work--)
                seen = names_agent(s->cover[j], r->agents[k]);
            if (!seen)
                try_agent(s, &target, r->agents[k]);
        }
    }
    if (!named)
        try_agent(s, &target, NULL);
}

/* True when <r> is the first rule with a rate in <l>: the one that looks
 * at its pattern's name for all of them. */
static bool first_rated(struct tunnel_scan *s, const struct rule *r, struct rule_list l)
{
    for (size_t i = 0; i < l.count && s->work > 0; i++, s->work--) {
        if (l.items[i] >= s->p->nrules)
            continue;
        const struct rule *o = &s->p->rules[l.items[i]];
        if (has_rate(o))
            return o == r;
    }
    return false;
}

void load_warn_tunnel_limits(struct load_ctx *c)
{
    const struct policy *p = c->p;
    size_t rated = 0;
    for (size_t i = 0; i < p->nrules; i++)
        if (p->rules[i].kind != RULE_CIDR && p->rules[i].host != NULL && has_rate(&p->rules[i]))
            rated++;
    if (rated <= DECISION_LIMITS_MAX)
        return;
    struct tunnel_scan s = {.c = c, .p = p, .work = TUNNEL_LIMITS_WORK_MAX};
    s.told = xcalloc(p->nrules, sizeof(*s.told));
    s.count = xcalloc(65536, sizeof(*s.count));
    s.touched = xcalloc(65536, sizeof(*s.touched));
    s.cover = xcalloc(TUNNEL_LIMITS_COVER_MAX, sizeof(*s.cover));
    char name[HOST_MAX + sizeof(WILDCARD_PROBE)], shown[HOST_MAX + 32];
    for (size_t i = 0; i < p->nrules && s.work > 0; i++) {
        const struct rule *r = &p->rules[i];
        if (r->kind == RULE_CIDR || r->host == NULL || !has_rate(r))
            continue;
        if (r->kind == RULE_EXACT) {
            if (!first_rated(&s, r, index_exact(p->index, r->host)))
                continue;
            snprintf(name, sizeof(name), "%s", r->host);
            snprintf(shown, sizeof(shown), "%s", r->host);
        } else {
            if (!first_rated(&s, r, index_wildcard(p->index, r->host)))
                continue;
            snprintf(name, sizeof(name), WILDCARD_PROBE "%s", r->host);
            snprintf(shown, sizeof(shown), "names under %s", r->host);
        }
        scan_name(&s, name, shown);
    }
    free(s.cover);
    free(s.touched);
    free(s.count);
    free(s.told);
}
