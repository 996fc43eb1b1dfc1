/* decision: what the policy says about one request.
 *
 * policy_decide() is a pure function of (policy, agent, method, target,
 * port, time): no I/O, no allocation, no global state. The gate calls it
 * once per request (or CONNECT) and turns its result into one event. */
#ifndef SLUICE_POLICY_DECISION_H
#define SLUICE_POLICY_DECISION_H

#include <stdint.h>
#include <time.h>

#include "policy/host.h"
#include "policy/model.h"

enum verdict { VERDICT_ALLOW, VERDICT_DENY, VERDICT_REPORT };

/* SPEC.md's deny reasons, in SPEC order. The first group is decided by the
 * policy; the rest by the gate (parsing, DNS, shaping, connection limits). */
enum deny_reason {
    REASON_NONE = 0,
    REASON_NOT_IN_POLICY,
    REASON_DENIED_HOST,
    REASON_PORT_NOT_ALLOWED,
    REASON_METHOD_NOT_ALLOWED,
    REASON_NEEDS_INSPECTION,
    REASON_SELF_REQUEST,
    REASON_AGENT_NOT_ALLOWED,
    REASON_GRANT_EXPIRED,
    REASON_IP_LITERAL,
    REASON_PRIVATE_ADDRESS,
    REASON_HOST_MISMATCH,
    REASON_SNI_MISMATCH,
    REASON_RATE_LIMITED,
    REASON_BAD_REQUEST,
    REASON_AUTH_REQUIRED,
    REASON_DNS_FAILURE,
    REASON_UPSTREAM_UNREACHABLE,
    REASON_TOO_MANY_CONNECTIONS,
    REASON_QUARANTINED,
    REASON_ENCRYPTED_CLIENT_HELLO,
    REASON_GATEWAY_OVERLOADED, /* no socket for the upstream: descriptors, memory or ports short */
    REASON_COUNT
};

/* "not_in_policy", ...; NULL for REASON_NONE. */
const char *reason_name(enum deny_reason r);
/* The HTTP status SPEC.md gives a denial for <r> (403, 407, 400, 429, 502, 503). */
int reason_status(enum deny_reason r);
const char *verdict_name(enum verdict v);

struct decision_query {
    const struct agent *agent; /* NULL: the implicit "default" agent (no agents section) */
    const char *agent_id;      /* the name rules' agents: lists are compared with */
    unsigned method;           /* one method_bit(); METHOD_CONNECT for a tunnel */
    const struct host *target; /* normalised by host_normalise() */
    uint16_t port;
    time_t now; /* wall clock, for grant expiry */
};

/* The most rules whose limits a decision carries beyond its deciding rule
 * (struct decision's limits): a tunnel's slots, fixed, so that no
 * policy makes a connection allocate or a byte cost more. */
#define DECISION_LIMITS_MAX 8

struct decision {
    enum verdict verdict;
    enum deny_reason reason;  /* REASON_NONE when allowed; kept for report mode */
    enum tier tier;           /* TIER_NONE when no rule covers the request */
    const struct rule *rule;  /* the deciding rule, or NULL */
    const char *owner;        /* the grant's owner (the rule that set the tier), or NULL */
    const struct rule *grant; /* the rule that set the tier: its owner's, its expiry the grant's */
    /* A CONNECT or an extension method: the live rules for
     * its host, agent and port with a rate (requests or bandwidth), other
     * than the deciding rule, since it may carry what any of them limits:
     * the grant first, then in the order they were met (most specific
     * host first, then file order), at most DECISION_LIMITS_MAX. None for
     * any other request (its deciding rule's limits alone hold it). */
    const struct rule *limits[DECISION_LIMITS_MAX];
    unsigned nlimits;
};

/* Decides <q> under <p> (which must be indexed). Precedence, from SPEC.md:
 *  1. the deny list (exact or wildcard) first: denied_host;
 *  2. host names match exact and wildcard host rules, IP literals only
 *     cidr: rules (none: ip_literal);
 *  3. among rules covering the host: agent, then port, then method must
 *     match (agent_not_allowed, port_not_allowed, method_not_allowed);
 *  4. the most specific match wins: exact over wildcard (longer suffix
 *     over shorter; longer prefix for CIDRs), then a rule naming the method,
 *     then the lower tier, then file order; expired rules are ranked with
 *     the live ones, and when the winner has expired the answer is
 *     grant_expired (expiry never lets a wider or lower-tier rule decide);
 *  5. CONNECT gathers the live rules for that host (exact and wildcard
 *     alike, or every covering CIDR), port and agent: it needs one without
 *     a methods restriction (else needs_inspection), the best of those by
 *     the ranking of 4 is the deciding rule, and it is classified at the
 *     highest tier of all the gathered rules; it is grant_expired when an
 *     expired rule for that port and agent, counted as live, would be the
 *     deciding rule or raise that tier.
 * A CONNECT (or an extension method) carries in <out->limits> the rules
 * whose rates hold it besides its deciding rule's.
 * A denial for an agent in report mode becomes VERDICT_REPORT; when it is a
 * write's method_not_allowed, it carries the highest-tier rule for its host,
 * agent and port (its tier and owner), as a CONNECT would: what goes out is
 * classified. Under enforcement that denial names no rule. */
void policy_decide(const struct policy *p, const struct decision_query *q, struct decision *out);

/* True when rule <r> serves agent <agent_id> (NULL: an agent no rule
 * names) on <port>: the agent and port tests of 3 above. */
bool policy_rule_serves(const struct rule *r, const char *agent_id, uint16_t port);

/* Within one specificity class (one host pattern or cidr: prefix), for a
 * request both rules of one policy match: true when <a> decides it before
 * <b>, the rule naming methods beating one that does not, then the lower
 * tier, then file order. */
bool policy_rule_ranks_before(const struct rule *a, const struct rule *b);

#endif
