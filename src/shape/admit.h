/* admit: where the gate's request flow meets shaping (quota.h).
 *
 * conn.c calls these at two points of a request's one way through:
 * shape_check_quarantine() right after the agent is identified (before any
 * other decision), and shape_check_rate() once the policy has allowed the
 * request and before it is resolved. Each refuses through conn_refuse() with
 * a Retry-After computed from the quarantine or the bucket (ceil, in whole
 * seconds), or, for an agent in report mode, records the reason and lets
 * the request go on, like every other denial in report mode. An admitted
 * request of an identified agent gets its upload flow (ex->flow), which
 * meters the bytes sent upstream (forward.c, tunnel.c) where a bandwidth
 * limit applies, or comes to apply by a reload. */
#ifndef SLUICE_SHAPE_ADMIT_H
#define SLUICE_SHAPE_ADMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conn;

/* Refuses the current exchange of <c> with `quarantined` when its agent is
 * in quarantine: returns true (<c> may be gone). */
bool shape_check_quarantine(struct conn *c);
/* Takes a request token for the current exchange of <c>; when there is
 * none, refuses it with `rate_limited` and returns true (<c> may be gone).
 * Otherwise opens ex->flow (metering the upload where a bandwidth limit
 * applies, or will after a reload) and returns false; out of memory for
 * it, refuses the exchange with `gateway_overloaded` ("out of memory")
 * and returns true: its bytes never go unmetered. */
bool shape_check_rate(struct conn *c);
/* Meters the upload of <c> (a plain HTTP request body, <want> bytes of it
 * read): sets <*n> to the bytes that may go now and returns 0. When that
 * is none, it is over its bandwidth: reading from the client stops and the
 * flow's timer is armed, which reads again once the bucket has refilled
 * enough (a sixteenth of it, or what is waiting). Nothing is dropped:
 * bytes already read wait in the input buffer. Returns -1 when no timer
 * could be armed (out of memory): the caller fails the request rather
 * than let the bytes go unmetered (quota_flow_allow_or_pause()). */
int shape_meter_upload(struct conn *c, size_t want, size_t *n);
/* Meters the name of <c>'s target (<name>), about to be resolved: a DNS
 * query carries it out, and under a wildcard rule it is the agent's to
 * choose. Where a bandwidth limit applies to the exchange (ex->flow), the
 * name waits for the bucket as a request head does (the bucket out of
 * debt and holding a sixteenth of itself, or the whole name), then is
 * taken from it whole. Returns 0 (go on: taken, or nothing meters it), 1
 * (it waits: <resume>(<c>) is called from the flow's timer) or -1 (no
 * timer could be armed, out of memory: the caller fails the exchange). */
int shape_name_waits(struct conn *c, const char *name, void (*resume)(void *arg));
/* Whole seconds to tell an agent to wait for <ns> nanoseconds: rounded up,
 * at least 1 (at most UINT_MAX, beyond any wait a policy can make). */
unsigned shape_retry_after(uint64_t ns);

#endif
