/* agent: who is asking (SPEC.md "Agents").
 *
 * Maps a client's origin (its source address, or the unix listener) and the
 * secret it presents in Proxy-Authorization (Basic: the password; Bearer:
 * the token) to the policy's agent. Secrets are compared in constant time:
 * the presented one's keyed digest (policy_token_digest(), computed once
 * per request) against the agents' digests, made at load, with
 * CRYPTO_memcmp. No I/O, no state of its own. */
#ifndef SLUICE_GATE_AGENT_H
#define SLUICE_GATE_AGENT_H

#include <stdbool.h>
#include <stddef.h>

#include "policy/model.h"
#include "util/ipaddr.h"

/* The implicit agent of a policy without an agents section. */
#define AGENT_DEFAULT_ID "default"

struct client_origin {
    bool is_unix;       /* came through a unix listener */
    struct ipaddr addr; /* the peer address (TCP listeners only) */
};

enum agent_result {
    AGENT_OK,            /* *out is the agent (NULL: the implicit "default") */
    AGENT_AUTH_REQUIRED, /* answer 407 auth_required */
    AGENT_NOT_ALLOWED,   /* answer 403 agent_not_allowed */
};

/* Identifies the client <o> under <p>. <proxy_auth> is the
 * Proxy-Authorization header value (<proxy_auth_len> bytes, hostile, not
 * necessarily NUL-terminated), or NULL when the client sent none.
 *  - no agents section: every client is "default" (*out = NULL, AGENT_OK);
 *  - a secret (Basic password or Bearer token; scheme case-insensitive):
 *    the first agent, in file order, whose sources contain <o> and whose
 *    token equals it; none, or a malformed header: AGENT_AUTH_REQUIRED;
 *  - no secret: the first agent whose sources contain <o> and that has no
 *    token; else AGENT_AUTH_REQUIRED when a matching-source agent has a
 *    token, else AGENT_NOT_ALLOWED.
 * <*out> is set on AGENT_OK only (borrowed from <p>). */
enum agent_result agent_identify(const struct policy *p, const struct client_origin *o,
                                 const char *proxy_auth, size_t proxy_auth_len,
                                 const struct agent **out);

/* What was wrong with a request refused AGENT_AUTH_REQUIRED: advice for
 * its 407's body (deny_info.detail), never quoting the value. */
#define AGENT_WHY_NONE_SENT                                                                        \
    "the request has no Proxy-Authorization; send Proxy-Authorization with your agent's token"
#define AGENT_WHY_NO_MATCH                                                                         \
    "the token in its Proxy-Authorization matches no agent whose sources hold this client; check the token"
#define AGENT_WHY_EMPTY_PASSWORD                                                                   \
    "its Proxy-Authorization is Basic with an empty password; put the token as the password, not the user name: user:TOKEN or :TOKEN (curl -U :TOKEN), or send Bearer TOKEN"
#define AGENT_WHY_UNREADABLE                                                                       \
    "its Proxy-Authorization cannot be read; send Bearer TOKEN, or Basic with the token as the password (curl -U :TOKEN)"
#define AGENT_WHY_NOT_CHECKED                                                                      \
    "the token in its Proxy-Authorization could not be checked (out of memory?); retry"
#define AGENT_WHY_NO_TOKEN                                                                         \
    "its Proxy-Authorization holds no token (an empty variable?); send Bearer TOKEN, or Basic with the token as the password (curl -U :TOKEN)"

/* Whether a 407 said <why> (an AGENT_WHY_ phrase) to credentials that
 * were presented and identify no agent, what the auth_failures alert
 * counts: not to a request that sent none or a value that holds no token
 * (a client not set up, not a guess), nor to a secret the gateway could
 * not check (its own failure). */
bool agent_why_is_wrong_credentials(const char *why);

/* agent_identify(), with <*why> (when <why> is not NULL) set to one of the
 * AGENT_WHY_ phrases when the result is AGENT_AUTH_REQUIRED (NULL else). */
enum agent_result agent_identify_why(const struct policy *p, const struct client_origin *o,
                                     const char *proxy_auth, size_t proxy_auth_len,
                                     const struct agent **out, const char **why);

/* The agent <id> under <p> for a client at <o> that was identified as it
 * under an earlier policy (an open tunnel decided again after a reload),
 * <mark> the token_mark() of the agent its secret named then, NULL when it
 * presented none: AGENT_OK with <*out> when <p> still has that agent, its
 * sources still contain <o>, it still wants that same secret (or none when
 * <mark> is NULL) and no agent before it in <p> takes a new request of
 * that client (sources that hold <o>, the same secret or none: the client
 * is that other agent now, AGENT_NOT_ALLOWED); or when <id> is the
 * implicit "default" and <p> has no agents section (<*out> NULL);
 * AGENT_AUTH_REQUIRED when the agent now has a token the client did not
 * present: none at all, or another (a token rotated away from a leaked
 * one), or when it no longer has one but the client presented a secret (a
 * new request of it would be refused so: a secret never passes to a
 * token-less agent); else AGENT_NOT_ALLOWED. <*out> is NULL but on
 * AGENT_OK. */
enum agent_result agent_find_again(const struct policy *p, const char *id,
                                   const unsigned char *mark, const struct client_origin *o,
                                   const struct agent **out);

/* The secret of the Proxy-Authorization value <v> (<len> bytes, as
 * agent_identify() takes it) into <buf> (<cap> bytes): its length (> 0),
 * or -1 when the value is malformed, of another scheme, too long for <buf>
 * or carries an empty secret. Past the secret, and on -1 all <cap> bytes
 * of <buf>, hold nothing of the value, decoded or not (wiped: a refused
 * value may be a real secret sent wrongly); the caller wipes the secret
 * once it is done with it. */
long agent_secret(const char *v, size_t len, unsigned char *buf, size_t cap);

/* True when an agent whose sources contain <o> has a token: a client at
 * <o> may then be it, and who sent a request whose secret could not be
 * read is not known. */
bool agent_token_possible(const struct policy *p, const struct client_origin *o);

/* True when <a>'s sources contain <o>. */
bool agent_sources_contain(const struct agent *a, const struct client_origin *o);

#endif
