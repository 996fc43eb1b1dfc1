/* kept_decision: what a plain exchange keeps of its decision once it lets
 * go of the policy it was decided under (conn.c, keep_decision()).
 *
 * A decision borrows from its policy: the deciding rule, the grant, the
 * owner's text and the agent's id. An exchange whose answer alone is left
 * to come (a long download, an event stream) only writes lines from then
 * on (progress, agent_egress_end), which read little of them: the rule's
 * index ("rules[N]"), the grant's expiry, the owner, the agent's id. Kept
 * as copies, they let a reload free that policy while the answer streams,
 * where holding the whole policy for it held megabytes a generation. */
#ifndef SLUICE_GATE_KEPT_DECISION_H
#define SLUICE_GATE_KEPT_DECISION_H

#include "policy/decision.h"

struct kept_decision {
    /* The numbers of the deciding rule and of the grant (index, line,
     * kind, cidr: range, tier, expiry), all a line or the address guard
     * (address_refused()) reads of them; their texts, ports and agents
     * lists are not kept (NULL, 0). */
    struct rule rule, grant;
    char *owner;    /* owned copy, or NULL */
    char *agent_id; /* owned copy, or NULL */
};

/* Copies of what the lines of a request decided as <dec> for the agent
 * <agent_id> (either may be NULL) read of them; NULL: out of memory. */
struct kept_decision *kept_decision_new(const struct decision *dec, const char *agent_id);
/* <dec> pointed at the copies <k> holds: the same rule, grant and owner as
 * far as its lines say, none of it in a policy. */
void kept_decision_apply(const struct kept_decision *k, struct decision *dec);
/* Frees <k> and its copies (a decision applied from it no longer reads
 * them). Accepts NULL. */
void kept_decision_free(struct kept_decision *k);

#endif
