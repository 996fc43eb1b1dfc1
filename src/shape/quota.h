/* quota: per-agent and per-agent-per-rule token buckets, and quarantine.
 *
 * One struct quota lives as long as the gateway (not the policy), so the
 * state it keeps survives a policy reload:
 *  - an agent entry per agent id: the limits.rate buckets (requests and
 *    upload bandwidth, all the agent's traffic together), the count of its
 *    recent denials and its quarantine;
 *  - a rule entry per (agent id, rule identity): the rule's rate buckets
 *    for that agent. A request is held to its deciding rule's and, for a
 *    CONNECT or an extension method, to those of every other live rule
 *    with a rate for its host, agent and port (struct decision's limits,
 *    at most DECISION_LIMITS_MAX: policy/decision.h), the grant that set
 *    its tier first: a tunnel may carry any request those rules limit.
 *    A rule's identity is what makes it that rule: its host pattern or
 *    CIDR, ports, methods and agents, never its position in the file or
 *    its address in memory, so a reload that keeps a rule keeps its
 *    buckets, and one that edits its rate reconfigures them without
 *    granting tokens (bucket_reconfigure).
 *
 * Requests take one token from each request bucket that applies (agent,
 * rule, the others), all or none. Bandwidth is one token per byte sent
 * upstream, taken through a quota_flow; bandwidth never refuses anything,
 * it only makes the sender wait (quota_flow_pause).
 *
 * Quarantine: counted exactly as the denied_burst detector counts
 * (watch/detectors.c), so the two trip on the same denial: every denial
 * (`quarantined` ones included, not `gateway_overloaded`, the gateway's
 * own shortage: bus_counts_denial()) of an identified agent goes into a
 * sliding window of alerts.denied_burst's period in tenths (watch/window.h,
 * on the wall clock in milliseconds, as the detector's); when the sum goes
 * over max (more than max, not equal) and limits.quarantine is above 0, the
 * agent is refused for that long and one `quarantine` alert is published.
 * Denials in quarantine are counted but do not extend it; nothing is reset
 * when it trips, so an agent whose window is still over max when it lifts
 * is quarantined again by its next denial (the detector alerts again too).
 *
 * Memory is bounded: at most <max_entries> entries (QUOTA_DEFAULT_MAX
 * when 0). An entry that is at rest (full buckets, no debt, no quarantine,
 * no recent denials) is the same as no entry, and is dropped first; beyond
 * that the least recently used entries not held by a flow, nor in a
 * running quarantine, nor with a denial window still counting, nor with a
 * bandwidth bucket in debt (dropped, the debt would be forgiven), are
 * dropped, a 64th of the table (at most 64) at once, so that a table full
 * of busy entries is not scanned anew for each new one. An entry dropped
 * before it came to rest leaves a ghost (shape/ghosts.h): the buckets made
 * for its key again are brought down to what it still held, its one-time
 * burst included, since a bucket made anew starts full and an agent would
 * otherwise refill its own by making the table forget it (touching more
 * keys than it holds). Without memory for the ghosts, busy entries are
 * not dropped. When none can be
 * dropped the table grows past <max_entries>: by one entry at most per
 * agent denied within twice the period (and per flow, quarantine, and
 * bucket in debt until it is paid).
 * The table is scanned again only once a batch of new entries has come
 * since the last scan, however little that scan dropped (nothing, when
 * such entries fill it; one entry, when they come to rest one at a time),
 * never for each new one: it holds up to a batch beyond its bound (or
 * beyond the entries it may not drop) between two scans.
 * The detector's windows are bounded (DETECT_AGENTS_MAX agents, dropped
 * only when empty): past that, an agent it has no window for counts its
 * denials toward denied_burst with every other such agent, while here they
 * count as its own and may quarantine it.
 *
 * Time: every function takes a CLOCK_MONOTONIC time in nanoseconds
 * (quota_now()), so the arithmetic is testable without sleeping. */
#ifndef SLUICE_SHAPE_QUOTA_H
#define SLUICE_SHAPE_QUOTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/decision.h"
#include "policy/model.h"
#include "watch/alert.h"
#include "watch/event.h"

struct event_base;
struct quota;
struct quota_flow;
struct quota_reshape;

#define QUOTA_DEFAULT_MAX 8192
/* Room for a key looked up without allocating (every request looks up its
 * agent's and its rule's entries): the kind, the longest agent id, a NUL
 * and a rule's identity (quota_rule_identity()) of the longest host pattern
 * with room to spare for its ports, methods and agents. A longer key (a
 * rule with many ports or agents) is built in memory of its own at each
 * lookup. */
#define QUOTA_KEY_INLINE 512

/* Returns a new quota that publishes its alerts on <alerts> (borrowed, may
 * be NULL) and arms flow timers on <base> (borrowed, may be NULL: then
 * quota_flow_pause fails). NULL when out of memory. */
struct quota *quota_new(const struct alert_bus *alerts, struct event_base *base,
                        size_t max_entries);
/* Frees <q>. Every flow must be closed first. Accepts NULL. */
void quota_free(struct quota *q);
/* Takes denied_burst and quarantine from <p> (copied): called when a
 * policy comes into force. Quarantines already running keep their end. */
void quota_configure(struct quota *q, const struct policy *p);
/* Brings the buckets to the rates of <p> at <now_ns>: called when a
 * policy comes into force, so that they refill at its rates from now on,
 * not from their next use (which would refill them for the time between
 * at the old rate), and the uploads already running (a tunnel) are shaped
 * by it, not by the policy they started under, one that started where no
 * bandwidth was limited included. Nothing is granted: what a bucket holds
 * is kept, clamped to its new size (a bucket a limit brings in starts
 * full, as a new one). Where <p> limits no bandwidth any more, the running
 * uploads go unmetered and the bucket is kept as it is, should a later
 * policy bring the limit back (a request bucket <p> no longer limits is
 * kept too, and reconfigured when a limit comes back into use).
 * Returns 0, or -1 when out of memory (for its index of <p>'s rates, or
 * for the entry of a limit <p> brings to a running upload): then nothing
 * changed, and <p> must not come into force, since an upload would go on
 * without a limit that applies. quota_reshape_prepare() and
 * quota_reshape_commit() in one. */
int quota_reshape(struct quota *q, const struct policy *p, uint64_t now_ns);
/* quota_reshape() in two steps, so that a reload can take all the memory
 * it needs before anything of it comes into force: the prepare indexes
 * <p>'s rates and makes (and holds) the entries of the limits <p> brings
 * to the running uploads, and changes nothing else; it returns NULL when
 * out of memory, holding nothing (the reload is refused). <p> is borrowed
 * until the commit. The commit brings the buckets and flows to <p> at the
 * prepare's <now_ns>, allocates nothing and cannot fail; the abandon
 * (accepts NULL) lets go of what the prepare holds, as if it had never
 * been. Either frees the prepared reshape. Between the two, no flow may be
 * opened nor pointed at another rule (a flow closed meanwhile lets go of
 * what was held for it): the gateway calls both from one callback. */
struct quota_reshape *quota_reshape_prepare(struct quota *q, const struct policy *p,
                                            uint64_t now_ns);
void quota_reshape_commit(struct quota_reshape *rs);
void quota_reshape_abandon(struct quota_reshape *rs);
/* CLOCK_MONOTONIC now, in nanoseconds. */
uint64_t quota_now(void);
/* Entries tracked (for tests and metrics). */
size_t quota_entries(const struct quota *q);
/* Times the table was scanned to make room (for tests). */
size_t quota_scans(const struct quota *q);

/* Nanoseconds of quarantine left for <agent_id>; 0 when it is not in
 * quarantine. */
uint64_t quota_quarantine_left(struct quota *q, const char *agent_id, uint64_t now_ns);

/* Admits one request (or tunnel) of <agent_id> under rule <r> (NULL: none)
 * of policy <p>, held also by the rules <limits> (<nlimits> of them, its
 * decision's limits; <r> and repeats among them count once, the first
 * DECISION_LIMITS_MAX): takes one token from the agent's, the rule's and
 * each of the others' request buckets. Returns 0, or -1 when one of them
 * is empty: nothing is taken, and <*wait_ns> says when a token will be
 * there. Out of memory: -1 with a wait of one second (a request that
 * cannot be accounted is refused). */
int quota_admit(struct quota *q, const struct policy *p, const char *agent_id, const struct rule *r,
                const struct rule *const *limits, size_t nlimits, uint64_t now_ns,
                uint64_t *wait_ns);

/* Counts one denial of <agent_id> at <now_ns> (CLOCK_MONOTONIC, for the
 * quarantine's length) and <wall_ms> (CLOCK_REALTIME milliseconds, the
 * window's clock, as the detector's); returns true when it put the agent in
 * quarantine (the caller publishes the alert; quota_feed does). Counts
 * nothing without alerts.denied_burst. */
bool quota_note_denial(struct quota *q, const char *agent_id, uint64_t now_ns, int64_t wall_ms);
/* Feeds one bus event seen at <now_ns> / <wall_ms> (see quota_note_denial):
 * counts it when bus_counts_denial() (a denial of an identified agent,
 * not gateway_overloaded), the set the denied_burst detector counts, and
 * publishes the `quarantine` alert when it trips. Returns true then. */
bool quota_feed(struct quota *q, const struct egress_event *ev, uint64_t now_ns, int64_t wall_ms);
/* The egress bus subscriber (<arg> is the struct quota): quota_feed() at
 * quota_now() and the event's wall clock (bus_event_ms(), the time the
 * detector counts it at). */
void quota_on_event(const struct egress_event *ev, void *arg);

/* Opens the upload accounting of one request or tunnel of <agent_id> under
 * <r> (NULL: none) and its <limits> (as quota_admit()'s), metered by the
 * limits of <p> that apply: every bandwidth bucket among them (the
 * smallest in effect). A flow is opened where none does too: it meters
 * nothing until a reload brings a limit (quota_reshape()). <agent_id>,
 * <r> and the rules of <limits> are borrowed and must outlive the flow
 * (the exchange's policy holds them). Returns NULL without an
 * agent or when out of memory (for the flow or for the entry of a limit
 * that applies: never a flow that would let bytes past one); the gate
 * then refuses the exchange (shape/admit.c). The caller closes it with
 * quota_flow_close(). */
struct quota_flow *quota_flow_open(struct quota *q, const struct policy *p, const char *agent_id,
                                   const struct rule *r, const struct rule *const *limits,
                                   size_t nlimits, uint64_t now_ns);
/* Points flow <f> at rule <r> (NULL: none) and its <limits> (as
 * quota_admit()'s; <limits>' bandwidths likewise), the rules a decision made again
 * under a reloaded policy names for the tunnel, or the plain request whose
 * body is still to go up, whose upload it meters (conn_redecide()): from now on the
 * flow is metered by the bandwidth bucket of <r>'s identity (a new one
 * starting full) and no longer by the one it opened under, whose rule the
 * reload may have edited (its host, ports, methods or agents: another
 * identity) or replaced by another that now lets the tunnel through. <r>
 * is borrowed, as quota_flow_open()'s: its policy must outlive the flow
 * or the next call. The agent's bucket is quota_reshape()'s. Out of memory
 * for <r>'s entry, the flow is not cut, nor let go without <r>'s limit:
 * it lets nothing through (quota_flow_allow() 0, quota_flow_wait_ns() a
 * second) until a later look can make the entry. */
void quota_flow_set_rule(struct quota_flow *f, const struct rule *r,
                         const struct rule *const *limits, size_t nlimits, uint64_t now_ns);
/* Flow <f> borrows its agent's id from <agent_id>, the same text as the
 * one it borrowed (its buckets stay the same): the exchange it meters
 * moved to the reloaded policy's copy (conn_redecide()), and the policy
 * that held the old one may be freed. */
void quota_flow_set_agent_id(struct quota_flow *f, const char *agent_id);
/* True when a bandwidth bucket meters flow <f>, or a limit whose entry
 * could not be made holds it (quota_flow_set_rule()); otherwise
 * quota_flow_allow() lets every byte go and quota_flow_take() takes
 * nothing, so that a caller may spare itself the clock. A reload may
 * change the answer (quota_reshape(), quota_flow_set_rule()). */
bool quota_flow_metered(const struct quota_flow *f);
/* Bytes, up to <want>, that may be sent now (not taken): 0 until every
 * bucket holds what quota_flow_wait_ns() waits for, so that a paused
 * upload moves in pieces of that size, not in the trickle each look
 * finds (a few bytes a read and a send, as fast as the loop goes round). */
size_t quota_flow_allow(struct quota_flow *f, size_t want, uint64_t now_ns);
/* Takes <n> bytes' tokens (bytes that have moved: may go into debt). */
void quota_flow_take(struct quota_flow *f, size_t n, uint64_t now_ns);
/* Nanoseconds until a useful amount of <want> bytes may move: the smaller
 * of <want> and a sixteenth of the smallest bucket (at least one byte). */
uint64_t quota_flow_wait_ns(struct quota_flow *f, size_t want, uint64_t now_ns);
/* Arms the flow's one-shot timer to call <cb>(<arg>) after
 * quota_flow_wait_ns(), at least 1 ms and at most 1 s (a bucket in debt
 * may need longer, but a reload may raise its rate meanwhile: the caller
 * asks again and pauses again if need be). Re-arming replaces the previous
 * call. Returns 0, or -1 (no event base, out of memory). */
int quota_flow_pause(struct quota_flow *f, size_t want, uint64_t now_ns, void (*cb)(void *arg),
                     void *arg);
/* quota_flow_allow(), and when it allows nothing, quota_flow_pause() with
 * <cb>(<arg>): sets <*n> to the bytes of <want> that may move now, or 0
 * while the timer waits, and returns 0. Returns -1 when no timer could be
 * armed (quota_flow_pause() failed: out of memory): the caller fails the
 * exchange, since its bytes may neither go unmetered (a limit lifted
 * without a word) nor wait with nothing to end the wait. The one way
 * every upload meets its bucket: the target's name before it is resolved
 * (shape/admit.c), a plain request's head (forward.c) and body
 * (shape/admit.c), a tunnel's first bytes (connect.c) and the rest
 * (tunnel.c). */
int quota_flow_allow_or_pause(struct quota_flow *f, size_t want, uint64_t now_ns,
                              void (*cb)(void *arg), void *arg, size_t *n);
/* True while the timer armed by quota_flow_pause() has not fired. */
bool quota_flow_paused(const struct quota_flow *f);
/* How many of <q>'s flows are paused now (the /metrics gauge
 * sluice_bandwidth_waiting_connections); 0 for NULL. */
size_t quota_flows_waiting(const struct quota *q);
/* Cancels the timer, releases the entries, frees <f>. Accepts NULL. */
void quota_flow_close(struct quota_flow *f);

/* The identity of <r> ("pattern|ports|methods|agents") into <buf>; returns
 * its length, or the length it needs when that is >= <cap> (snprintf's
 * convention). */
size_t quota_rule_identity(const struct rule *r, char *buf, size_t cap);

#endif
