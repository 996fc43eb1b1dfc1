/* index: the lookup structures that keep a decision's cost flat as a policy
 * grows: exact hosts in a hash table, wildcard rules in a hash table keyed
 * by their suffix (a lookup walks the query's labels, never the rules),
 * cidr: rules in one hash table per prefix length present (a lookup tries
 * each length once), and the deny list in the same two host tables.
 * Built once at load; read-only afterwards. */
#ifndef SLUICE_POLICY_INDEX_H
#define SLUICE_POLICY_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "policy/model.h"

/* A list of rule positions in policy->rules, in file order. */
struct rule_list {
    const uint32_t *items;
    size_t count;
};

/* Builds p->index. Returns 0, or -1 when memory runs out. */
int policy_index_build(struct policy *p);
/* Frees an index. Accepts NULL. */
void policy_index_free(struct policy_index *ix);

/* The rules whose exact host is <name> (normal form). */
struct rule_list index_exact(const struct policy_index *ix, const char *name);
/* The wildcard rules whose suffix is exactly <suffix>. */
struct rule_list index_wildcard(const struct policy_index *ix, const char *suffix);
/* Calls <fn> for each prefix length present, longest first, with the
 * cidr: rules whose prefix contains <a>; stops when <fn> returns non-zero. */
int index_cidr_each(const struct policy_index *ix, const struct ipaddr *a,
                    int (*fn)(struct rule_list rules, unsigned prefix, void *arg), void *arg);
/* True when <name> (normal form) is on the deny list. */
bool index_denied(const struct policy_index *ix, const char *name);
/* The position in deny[] of an entry that denies every name the host rule
 * <r> matches (for a wildcard rule, one over its suffix or a shorter one),
 * or -1: such a rule never applies. */
int64_t index_deny_covering(const struct policy_index *ix, const struct rule *r);

#endif
