/* fuzz_policy_load: policy_load_buffer() on arbitrary bytes.
 * Invariants: it returns NULL exactly when the diagnostics hold an error;
 * every diagnostic formats, as printable ASCII (what load_show() makes of
 * hostile text), and names a line within the input (or none); a policy
 * that loads has every rule in tier 0-3, with at least one port, sorted
 * and unique, a pattern, its own index, and an owner and an expiry date
 * when it is tier 3, a line within the input, a pattern that is its own
 * normal form (a host rule's the text of its host, "*." before it for a
 * wildcard, and parsed again the same kind and host; a cidr: rule's the
 * text of its network, parsed again the same); the lookup index finds
 * every rule under its own key (an exact rule under its host, a wildcard
 * rule under its suffix, a cidr: rule at its prefix length for its
 * network address), in lists of rules of that kind and key in file order,
 * so no rule the loader kept is lost to the decisions; a range the cidr
 * rules' warning names lies strictly inside the rule; nothing leaks
 * (ASan). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gate/addr_guard.h"
#include "policy/host.h"
#include "policy/index.h"
#include "policy/policy.h"
#include "util/env.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t input_lines;

/* <l> is in file order, names rules of <p> of <kind> (and <host>), and
 * holds rule <want>. */
static void check_list(const struct policy *p, struct rule_list l, enum rule_kind kind,
                       const char *host, size_t want)
{
    int found = 0;
    for (size_t k = 0; k < l.count; k++) {
        if (l.items[k] >= p->nrules || (k > 0 && l.items[k] <= l.items[k - 1]))
            abort();
        const struct rule *o = &p->rules[l.items[k]];
        if (o->kind != kind || (host != NULL && strcmp(o->host, host) != 0))
            abort();
        found |= l.items[k] == want;
    }
    if (!found)
        abort();
}

struct cidr_want {
    const struct policy *p;
    const struct rule *r;
    int seen;
};

static int cidr_seen(struct rule_list l, unsigned prefix, void *arg)
{
    struct cidr_want *w = arg;
    for (size_t k = 0; k < l.count; k++) {
        if (l.items[k] >= w->p->nrules || w->p->rules[l.items[k]].kind != RULE_CIDR ||
            w->p->rules[l.items[k]].cidr.prefix != prefix)
            abort();
    }
    if (prefix == w->r->cidr.prefix) {
        check_list(w->p, l, RULE_CIDR, NULL, w->r->index);
        w->seen = 1;
    }
    return 0;
}

static void check_indexed(const struct policy *p, const struct rule *r)
{
    if (r->kind == RULE_EXACT) {
        check_list(p, index_exact(p->index, r->host), RULE_EXACT, r->host, r->index);
    } else if (r->kind == RULE_WILDCARD) {
        check_list(p, index_wildcard(p->index, r->host), RULE_WILDCARD, r->host, r->index);
    } else {
        struct cidr_want w = {p, r, 0};
        index_cidr_each(p->index, &r->cidr.addr, cidr_seen, &w);
        if (!w.seen)
            abort();
    }
}

/* The pattern a rule shows is its normal form, the text of the host it is
 * filed under (the one a request's normalised host is looked up by) or of
 * its network, and parsed again it is the same rule. */
static void check_pattern(const struct rule *r)
{
    if (r->kind == RULE_CIDR) {
        struct cidr c;
        char text[IPADDR_STRLEN + 8];
        if (cidr_parse(r->pattern, &c) != 0 || c.prefix != r->cidr.prefix ||
            !ipaddr_equal(&c.addr, &r->cidr.addr) ||
            strcmp(cidr_format(&c, text, sizeof(text)), r->pattern) != 0)
            abort();
        return;
    }
    const char *name = r->pattern;
    if (r->kind == RULE_WILDCARD && strncmp(name, "*.", 2) == 0)
        name += 2;
    struct host_pattern hp;
    const char *why = NULL;
    if (strcmp(name, r->host) != 0 || host_pattern_parse(r->pattern, &hp, &why) != 0 ||
        (hp.kind == PATTERN_WILDCARD) != (r->kind == RULE_WILDCARD) ||
        strcmp(hp.name, r->host) != 0)
        abort();
}

static void check_rule(const struct rule *r, size_t i)
{
    if (r->index != i || r->line < 1 || (size_t)r->line > input_lines || r->pattern == NULL)
        abort();
    if (r->tier < TIER_0 || r->tier > TIER_3 || r->nports < 1 || r->ports == NULL)
        abort();
    for (size_t k = 0; k < r->nports; k++)
        if (r->ports[k] == 0 || (k > 0 && r->ports[k] <= r->ports[k - 1]))
            abort();
    if (r->tier == TIER_3 && (r->owner == NULL || r->owner[0] == '\0' || !r->has_expires))
        abort();
    if ((r->kind == RULE_CIDR) != (r->host == NULL))
        abort();
    if ((r->methods & (METHOD_CONNECT | METHOD_OTHER)) != 0)
        abort();
    if ((r->agents == NULL) != (r->nagents == 0))
        abort();
    check_pattern(r);
}

/* What the cidr rules' warning is built on (addr_guard_opened_by(), a
 * binary search): a range a rule opens lies strictly inside the rule, is
 * no IPv4 range when those are skipped, and opens fewer ranges itself. */
static void check_openings(const struct policy *p)
{
    struct addr_guard *g = addr_guard_new(&p->network);
    struct guard_openings *o = g != NULL ? addr_guard_openings_new(g) : NULL;
    if (o == NULL)
        abort();
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        if (r->kind != RULE_CIDR)
            continue;
        struct guard_opening all, v6, in;
        addr_guard_opened_by(o, &r->cidr, false, &all);
        addr_guard_opened_by(o, &r->cidr, true, &v6);
        if (v6.count > all.count || (r->cidr.prefix == 128 && all.count != 0))
            abort();
        const struct guard_opening *ops[] = {&all, &v6};
        for (size_t k = 0; k < 2; k++) {
            const struct guard_opening *op = ops[k];
            if (op->count == 0)
                continue;
            if (op->name == NULL || op->first.prefix <= r->cidr.prefix ||
                !cidr_contains(&r->cidr, &op->first.addr))
                abort();
            if (k == 1 && op->first.prefix >= 96 && ipaddr_is_v4(&op->first.addr))
                abort();
            addr_guard_opened_by(o, &op->first, k == 1, &in);
            if (in.count >= op->count)
                abort();
        }
    }
    addr_guard_openings_free(o);
    addr_guard_free(g);
}

static void check_policy(const struct policy *p)
{
    if (p->version != 1 || p->index == NULL)
        abort();
    for (size_t i = 0; i < p->nrules; i++)
        check_rule(&p->rules[i], i);
    for (size_t i = 0; i < p->nrules; i++)
        check_indexed(p, &p->rules[i]);
    for (size_t i = 0; i < p->nagents; i++)
        if (p->agents[i].id == NULL || (p->agents[i].nsources == 0 && !p->agents[i].unix_source))
            abort();
    if (p->limits.header_bytes < 1024 || p->limits.header_bytes > 1024 * 1024)
        abort();
    if (p->alerts.off_hours.set && p->alerts.off_hours.tz == NULL)
        abort();
    check_openings(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* lets seeds with "token: env:SLUICE_FUZZ_TOKEN" load */
    setenv("SLUICE_FUZZ_TOKEN", "fuzz-secret", 0);
    env_tz_pin(); /* as sluice's main(): else no off-hours zone converts (util/env.h) */
    /* A bound on YAML's line count: LF, CR, and the last bytes of NEL,
     * U+2028 and U+2029 in UTF-8 each end a line at most; none for the
     * UTF-16 libyaml reads after a byte order mark. */
    input_lines = 1;
    for (size_t i = 0; i < size; i++)
        input_lines += data[i] == '\n' || data[i] == '\r' || data[i] == 0x85 || data[i] == 0xa8 ||
                       data[i] == 0xa9;
    if (size >= 2 && ((data[0] == 0xff && data[1] == 0xfe) || (data[0] == 0xfe && data[1] == 0xff)))
        input_lines = SIZE_MAX;
    struct diag d;
    diag_init(&d, "fuzz.yaml");
    struct policy *p = policy_load_buffer("fuzz.yaml", (const char *)data, size, &d);
    if ((p == NULL) != diag_has_errors(&d))
        abort();
    char line[1024];
    for (size_t i = 0; i < d.count; i++) {
        if (d.entries[i].line < 0 || (size_t)d.entries[i].line > input_lines ||
            d.entries[i].message == NULL)
            abort();
        diag_format(&d, &d.entries[i], line, sizeof(line));
        if (strlen(line) >= sizeof(line))
            abort();
        for (const char *c = line; *c != '\0'; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
                abort();
    }
    if (p != NULL)
        check_policy(p);
    policy_free(p);
    diag_free(&d);
    return 0;
}
