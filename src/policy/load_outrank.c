/* load_outrank: the loader's finding about lower-tier rules that take
 * requests from a tier-3 grant of a less specific pattern.
 *
 * A plain request is decided by the most specific class of rules that has
 * a match (match.c: exact host, then each wildcard suffix, longest first;
 * for an IP literal each cidr: prefix, longest first), whatever the tiers.
 * So "api.example.com" at tier 1 without methods, next to a tier-3 grant for
 * POST on "*.example.com", lets every POST to api.example.com through at
 * tier 1: without the grant's owner, its expiry or a tier3_write alert,
 * while check lists the grant as signed for it. Rules of one pattern are
 * load.c's outranked_grants(); this file compares a rule with the grants
 * of the less specific patterns that cover it, found through the index.
 *
 * Host rules and cidr: rules never meet: a name matches only host rules,
 * an IP literal only cidr: rules. CONNECT is not concerned: a tunnel takes
 * the highest tier of every class. */
#include <stdio.h>
#include <string.h>

#include "policy/decision.h"
#include "policy/index.h"
#include "policy/load_ctx.h"

/* Rules of one pattern looked at, at most (as outranked_grants()): a larger
 * group (a hostile file) is not checked. */
#define OUTRANK_GROUP_MAX 64
/* Steps (pairs of rules, and the ports compared) the check takes at most
 * over a whole policy: a grant with 65535 ports over a million exact rules
 * would otherwise make the load quadratic. Real policies take a few. */
#define OUTRANK_WORK_MAX (1u << 26)

/* Every method a rule without methods may take from a grant: the eight a
 * rule can name. An extension method (METHOD_OTHER) is never taken: it is
 * classified at the highest tier of the rules of every class (match.c),
 * the grant's among them. */
#define METHODS_EVERY                                                                              \
    (METHOD_GET | METHOD_HEAD | METHOD_POST | METHOD_PUT | METHOD_PATCH | METHOD_DELETE |          \
     METHOD_OPTIONS | METHOD_TRACE)

bool load_ports_meet(const struct rule *a, const struct rule *b)
{
    for (size_t i = 0, k = 0; i < a->nports && k < b->nports;) {
        if (a->ports[i] == b->ports[k])
            return true;
        if (a->ports[i] < b->ports[k])
            i++;
        else
            k++;
    }
    return false;
}

bool load_agents_meet(const struct rule *a, const struct rule *b)
{
    if (a->nagents == 0 || b->nagents == 0)
        return true;
    for (size_t i = 0, k = 0; i < a->nagents && k < b->nagents;) {
        int r = strcmp(a->agents[i], b->agents[k]);
        if (r == 0)
            return true;
        if (r < 0)
            i++;
        else
            k++;
    }
    return false;
}

/* One lower-tier rule <low> compared with the grants over it, and what it
 * takes: the first grant (in file order), the methods it takes from that
 * one, and how many grants it takes from. */
struct taking {
    const struct rule *low;
    struct rule_list group; /* the rules of <low>'s own pattern */
    size_t work;            /* steps left (OUTRANK_WORK_MAX) */
    size_t grants;
    const struct rule *grant;
    unsigned methods;
};

/* The methods <low> may take from the grant <t>. A rule that names methods
 * under a grant that names none is a deliberate carve-out ("GET at tier 1
 * below a tier-3 *.example.com"), as outranked_grants() holds for one
 * pattern; one without methods takes all the grant's. */
static unsigned methods_at_stake(const struct rule *low, const struct rule *t)
{
    if (t->methods == 0)
        return low->methods == 0 ? METHODS_EVERY : 0;
    return low->methods == 0 ? t->methods : low->methods & t->methods;
}

static bool rule_names_agent(const struct rule *r, const char *id)
{
    for (size_t i = 0; i < r->nagents; i++)
        if (strcmp(r->agents[i], id) == 0)
            return true;
    return false;
}

/* True when <r> serves every agent that <a> and <b> both serve. */
static bool agents_cover(const struct rule *r, const struct rule *a, const struct rule *b)
{
    if (r->nagents == 0)
        return true;
    if (a->nagents == 0 && b->nagents == 0)
        return false;
    const struct rule *named = a->nagents != 0 ? a : b, *other = named == a ? b : a;
    for (size_t i = 0; i < named->nagents; i++)
        if ((other->nagents == 0 || rule_names_agent(other, named->agents[i])) &&
            !rule_names_agent(r, named->agents[i]))
            return false;
    return true;
}

/* True when <r> has every port that <a> and <b> both have. */
static bool ports_cover(const struct rule *r, const struct rule *a, const struct rule *b)
{
    for (size_t i = 0, k = 0, j = 0; i < a->nports && k < b->nports;) {
        if (a->ports[i] < b->ports[k]) {
            i++;
            continue;
        }
        if (a->ports[i] > b->ports[k]) {
            k++;
            continue;
        }
        while (j < r->nports && r->ports[j] < a->ports[i])
            j++;
        if (j == r->nports || r->ports[j] != a->ports[i])
            return false;
        i++;
        k++;
    }
    return true;
}

/* Drops from <methods> those that another rule of <low>'s own pattern
 * decides before <low> for every port and agent <low> and the grant <t>
 * share: a tier-3 rule there is a grant that decides them itself, and a
 * lower one is warned about in its own right. */
static unsigned not_hidden(const struct policy *p, const struct taking *tk, const struct rule *t,
                           unsigned methods)
{
    const struct rule *low = tk->low;
    for (size_t i = 0; i < tk->group.count && methods != 0; i++) {
        const struct rule *r = &p->rules[tk->group.items[i]];
        if (r == low || !policy_rule_ranks_before(r, low) || !ports_cover(r, low, t) ||
            !agents_cover(r, low, t))
            continue;
        methods &= ~(r->methods == 0 ? METHODS_EVERY : r->methods);
    }
    return methods;
}

/* Compares <tk>'s rule with each tier-3 rule of <l>, a less specific
 * pattern that covers it. */
static void compare_grants(const struct policy *p, struct taking *tk, struct rule_list l)
{
    if (l.count > OUTRANK_GROUP_MAX)
        return;
    const struct rule *low = tk->low;
    for (size_t i = 0; i < l.count; i++) {
        const struct rule *t = &p->rules[l.items[i]];
        if (t->tier != TIER_3)
            continue;
        size_t cost = 1 + low->nports + t->nports;
        if (tk->work < cost)
            return;
        tk->work -= cost;
        unsigned m = methods_at_stake(low, t);
        if (m == 0 || !load_ports_meet(low, t) || !load_agents_meet(low, t))
            continue;
        m = not_hidden(p, tk, t, m);
        if (m == 0)
            continue;
        tk->grants++;
        if (tk->grant == NULL || t->index < tk->grant->index) {
            tk->grant = t;
            tk->methods = m;
        }
    }
}

/* The wildcard patterns over the host rule <low>: "*.S" for each proper
 * suffix S of its name (of its own suffix, for a wildcard rule). */
static void host_grants(const struct policy *p, struct taking *tk)
{
    const char *name = tk->low->host;
    for (size_t i = 0; name[i] != '\0'; i++)
        if (name[i] == '.' && name[i + 1] != '\0')
            compare_grants(p, tk, index_wildcard(p->index, name + i + 1));
}

struct cidr_walk {
    const struct policy *p;
    struct taking *tk;
};

/* index_cidr_each(): the rules of <low>'s prefix are its group; a shorter
 * prefix that holds its address holds all of it. */
static int cidr_group(struct rule_list rules, unsigned prefix, void *arg)
{
    struct cidr_walk *w = arg;
    if (prefix == w->tk->low->cidr.prefix)
        w->tk->group = rules;
    return 0;
}

static int cidr_grants(struct rule_list rules, unsigned prefix, void *arg)
{
    struct cidr_walk *w = arg;
    if (prefix < w->tk->low->cidr.prefix)
        compare_grants(w->p, w->tk, rules);
    return 0;
}

static void warn_taking(struct load_ctx *c, const struct taking *tk)
{
    char names[160] = "every method";
    if (tk->methods != METHODS_EVERY) {
        size_t o = 0;
        for (unsigned bit = METHOD_GET; bit <= METHOD_TRACE && o < sizeof(names); bit <<= 1)
            if (tk->methods & bit)
                o += (size_t)snprintf(names + o, sizeof(names) - o, "%s%s", o ? " " : "",
                                      method_name(bit));
    }
    char more[64] = "";
    if (tk->grants > 1)
        snprintf(more, sizeof(more), " (and from %zu other tier-3 grant%s)", tk->grants - 1,
                 tk->grants > 2 ? "s" : "");
    const struct rule *low = tk->low, *t = tk->grant;
    size_t m = load_field_push(c, "rules[%zu]", low->index);
    load_warn(c, low->line,
              "takes %s to %s at tier %d from the tier-3 grant rules[%zu] (line %d) for %s%s: "
              "its pattern is more specific, so it decides those requests, without the grant's "
              "owner, expiry or tier3_write alert; write it as tier 3 or restrict its methods",
              names, low->pattern, (int)low->tier, t->index, t->line, t->pattern, more);
    load_field_pop(c, m);
}

void load_warn_outranking_rules(struct load_ctx *c)
{
    const struct policy *p = c->p;
    size_t work = OUTRANK_WORK_MAX;
    for (size_t i = 0; i < p->nrules && work > 0; i++) {
        const struct rule *low = &p->rules[i];
        /* a rule the deny list covers whole never applies (warn_denied_rules()) */
        if (low->tier == TIER_3 || low->pattern == NULL || index_deny_covering(p->index, low) >= 0)
            continue;
        struct taking tk = {.low = low, .work = work};
        if (low->kind == RULE_CIDR) {
            struct cidr_walk w = {p, &tk};
            index_cidr_each(p->index, &low->cidr.addr, cidr_group, &w);
            if (tk.group.count <= OUTRANK_GROUP_MAX)
                index_cidr_each(p->index, &low->cidr.addr, cidr_grants, &w);
        } else {
            tk.group = low->kind == RULE_EXACT ? index_exact(p->index, low->host)
                                               : index_wildcard(p->index, low->host);
            if (tk.group.count <= OUTRANK_GROUP_MAX)
                host_grants(p, &tk);
        }
        work = tk.work;
        if (tk.grant != NULL)
            warn_taking(c, &tk);
    }
}
