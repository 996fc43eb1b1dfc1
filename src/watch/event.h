/* event: the one decision event every request becomes.
 *
 * The gate fills a struct egress_event when it decides a request (kind
 * EVENT_EGRESS, before any byte goes upstream) and when the request ends
 * (EVENT_EGRESS_END), and hands it to the bus (bus.h). The log writer,
 * alert detectors, metrics and state store subscribe; the gate never knows
 * who listens. Every pointer in an event is borrowed and valid only for the
 * duration of bus_publish(): a subscriber copies what it keeps. */
#ifndef SLUICE_WATCH_EVENT_H
#define SLUICE_WATCH_EVENT_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "policy/decision.h"
#include "util/ipaddr.h"

/* EVENT_EGRESS_PROGRESS: bytes went upstream while a request or tunnel is
 * still running (bytes_up holds the bytes since the previous progress
 * event, not a total). Published at most every PROGRESS_MS or PROGRESS_BYTES
 * per exchange, plus one last time just before EVENT_EGRESS_END with what
 * is left, so the deltas of an exchange add up to its END's bytes_up. The
 * decision log ignores it; the upload and baseline detectors count it. */
enum event_kind { EVENT_EGRESS, EVENT_EGRESS_END, EVENT_EGRESS_PROGRESS };

#define PROGRESS_MS    100
#define PROGRESS_BYTES (64u * 1024)

struct egress_event {
    enum event_kind kind;
    struct timespec ts; /* wall clock (CLOCK_REALTIME) when it happened */
    const char *id;     /* "c17.1": connection 17, request 1 */
    const char *agent;  /* agent id */
    /* agent_hash(agent) (watch/agent_hash.h), hashed once an exchange by the
     * gate; 0 when the event's maker left it (agent_hash_of_event() then
     * hashes <agent>) */
    uint64_t agent_hash;
    const char *method;  /* "GET", "CONNECT", ...; NULL when unparseable */
    unsigned method_bit; /* method_bit(method) */
    const char *scheme;  /* "http" or "https" (CONNECT); NULL when unknown */
    const char *host;    /* normalised host or canonical IP; NULL when unparseable */
    uint16_t port;
    const char *path;         /* NULL where it cannot be seen (inside a tunnel) */
    enum tier tier;           /* TIER_NONE when no rule covers the request */
    const struct rule *rule;  /* deciding rule or NULL ("rules[N]" in the log) */
    const char *owner;        /* grant owner or NULL */
    const struct rule *grant; /* the rule that set tier and owner, whose expiry the
                               * grant's is (a CONNECT's may not be <rule>), or NULL */
    enum verdict verdict;
    enum deny_reason reason; /* REASON_NONE when allowed */
    const char *ip;          /* the address connected to (or refused); NULL when none */
    /* A CONNECT decided again after it was first decided (a reload, the
     * UTC day's change) and now denied, or reported for an agent in report
     * mode: the policy's act, not the agent's, so the quarantine and
     * denied_burst do not count it (SPEC.md). Set on the one line of a
     * CONNECT refused before its line was out too: see <again>. */
    bool redecided;
    /* A second (or later) agent_egress for a request whose first is out
     * already (a tunnel decided again): a new verdict on a request already
     * counted, not a new request nor a new contact. False for the one line
     * of a tunnel refused or denied before its line was out. */
    bool again;
    /* Who asked, for the auth_failures detector; neither is in the
     * decision log. <source> is the client's address, NULL for a client of
     * a unix listener. <credentials> is true when the request was refused
     * for a Proxy-Authorization that identifies no agent (a secret that
     * matches none, an unreadable value, Basic with an empty password:
     * agent_why_is_wrong_credentials()); false when it sent none or one
     * that holds no token (a client not set up, not a guess), under run's
     * fixed agent, when the secret could not be checked (the gateway's own
     * failure) and when an agent was identified. */
    const struct ipaddr *source;
    bool credentials;
    /* EVENT_EGRESS only: the length of the request head the gateway read,
     * a plain request's or a CONNECT's, its final CRLF included (0 when
     * none was parsed). Its path and headers are the agent's to fill, and
     * go upstream with a request let through, but bytes_up leaves heads
     * out (the decision log's contract): the upload_bytes detector counts
     * this too; the log and the metrics do not. */
    uint64_t head_bytes;

    /* EVENT_EGRESS_END only (and bytes_up, as a delta, in EVENT_EGRESS_PROGRESS). */
    int status;          /* HTTP status returned to the agent; 0 when none (tunnel: 200) */
    uint64_t bytes_up;   /* bytes sent upstream: bodies and tunnel data, not heads */
    uint64_t bytes_down; /* bytes returned to the agent */
    uint64_t ms;         /* duration since the request was decided */
};

#endif
