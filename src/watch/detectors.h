/* detectors: turn decision events into alerts (SPEC.md "Alerts").
 *
 * A bus subscriber. Each detector is configured by the policy's alerts
 * section (copied at detectors_configure(): a reload never leaves a
 * dangling pointer) and publishes to the alert bus through the fold table
 * (window.h), so a storm becomes one line per period:
 *   first_contact   the first request of an agent to a host (any verdict),
 *                   remembered in the state store;
 *   tier3_write     every tier-3 request let through (allow or report); this,
 *                   grant_expired and off_hours_write fold per host, and past
 *                   DETECT_HOSTS_BURST hosts a minute per agent (raise_per_host());
 *   write_burst     write-method requests let through, per agent, over max per period;
 *   upload_bytes    bytes sent upstream per agent (progress events), and the heads of
 *                   requests let through (head_bytes), over max per period;
 *   denied_burst    denials per agent over max per period (bus_counts_denial());
 *   auth_failures   auth_required refusals of credentials that named no agent, per
 *                   client source (an IPv4 address, an IPv6 /64, the unix socket's
 *                   clients as one), over max per period: someone guessing tokens;
 *                   folded per source, and by kind past DETECT_SOURCES_BURST sources'
 *                   lines a minute (raise_per_source());
 *   off_hours_write a write let through outside the working hours;
 *   baseline        a minute whose requests (or bytes) exceed factor x the learned
 *                   per-agent average and the floor (requests; floor KiB for bytes);
 *   grant_expired   a request denied because its grant expired;
 *   grant_expiring  detectors_grants(): grants inside expiry_warn_days.
 * Times are wall-clock milliseconds passed in by the caller (tests use a
 * fake clock); detectors_on_event() takes the event's own (bus_event_ms()).
 *
 * Owns: its per-agent and per-source state, the first-contact set, the fold table. The
 * alert bus and the store are borrowed. */
#ifndef SLUICE_WATCH_DETECTORS_H
#define SLUICE_WATCH_DETECTORS_H

#include <stdbool.h>
#include <stdint.h>

#include "policy/model.h"
#include "watch/contact_set.h"
#include "watch/alert.h"
#include "watch/event.h"

struct store;
struct detectors;

#define DETECT_FOLD_MS        60000   /* fold period of the per-request kinds */
#define DETECT_CONTACTS_MAX   1000000 /* first-contact pairs remembered */
#define DETECT_CONTACTS_BURST 30      /* an agent's first contacts a minute told one by one */
#define DETECT_AGENTS_MAX     4096    /* agents with window state */
/* An agent's lines of one per-host kind (tier3_write, grant_expired,
 * off_hours_write) a minute, each for a host of its own; past it they fold
 * per agent and minute */
#define DETECT_HOSTS_BURST 30
/* Client sources with an auth_failures window. Past it, a source not in
 * the table is counted with every other such source under one overflow
 * key (a source whose window emptied gives its place first): evicting a
 * busy source instead would let a flood of addresses wipe a guesser's
 * count, while the overflow key still counts the guesser's every try. */
#define DETECT_SOURCES_MAX 4096
/* auth_failures lines a minute, each for a source of its own; past it
 * they fold by kind over the minute (a guesser picks its sources: every
 * address of 127.0.0.0/8, the /64s of an IPv6 /48) */
#define DETECT_SOURCES_BURST 30

/* Returns new detectors publishing to <out>, remembering in <store> (NULL:
 * memory only; otherwise its first contacts and baselines are loaded now),
 * or NULL when out of memory. Every detector is off until configured. */
struct detectors *detectors_new(struct alert_bus *out, struct store *store);
void detectors_free(struct detectors *d);
/* Takes <store>, opened while the gateway served (store_opener.h), for
 * detectors made without one: the first contacts seen meanwhile join
 * <stored> (the store's, read off the loop; emptied) and are written to
 * the store, as are the baselines learned meanwhile (stored ones are not
 * read while the gateway serves: those agents' baselines start afresh).
 * <stored>'s pairs are remembered from then on. */
void detectors_adopt_store(struct detectors *d, struct store *store, struct contact_set *stored,
                           int64_t now_ms);

/* Takes the alerts section of <p> (copied). Window state of agents is kept
 * across a reload unless a period changed. Returns 0, or -1 when out of
 * memory (the settings are those before). detectors_prepare() and
 * detectors_commit() in one. */
int detectors_configure(struct detectors *d, const struct policy *p);

/* A reload in two steps, so that one the detectors have no memory for is
 * refused as a whole (gate/gateway.c reload_apply()): prepare copies <p>'s
 * alerts section (0, or -1 when out of memory, nothing changed), commit
 * puts the prepared copy in force and cannot fail, abandon drops it. A
 * second prepare replaces the first's copy. */
int detectors_prepare(struct detectors *d, const struct policy *p);
void detectors_commit(struct detectors *d);
void detectors_abandon(struct detectors *d);

/* Feeds one event seen at <now_ms> (wall clock). */
void detectors_feed(struct detectors *d, const struct egress_event *ev, int64_t now_ms);
/* The bus subscriber: <arg> is the struct detectors. */
void detectors_on_event(const struct egress_event *ev, void *arg);

/* Writes the folded summaries whose period ended and closes idle baseline
 * minutes; the caller runs it a few times a second. */
void detectors_tick(struct detectors *d, int64_t now_ms);

/* Publishes grant_expiring for each grant of <p> with 0..expiry_warn_days
 * days left at <now_ms> (at start, on reload, daily). Returns how many. */
int detectors_grants(struct detectors *d, const struct policy *p, int64_t now_ms);
/* The daily announcement: runs detectors_grants() when the UTC day of
 * <now_ms> is not the day grants were last announced on (the first call
 * always does). Returns how many, or -1 when the day has not changed. */
int detectors_grants_daily(struct detectors *d, const struct policy *p, int64_t now_ms);

/* At shutdown, with the real time <now_ms>: writes every folded summary
 * still open (ended or not) and stores each agent's baseline as of now
 * (the minutes that ended are folded in; the running minute is not). */
void detectors_flush(struct detectors *d, int64_t now_ms);

/* Alerts published (after folding) and folded away, for metrics and tests. */
uint64_t detectors_published(const struct detectors *d);
uint64_t detectors_folded(const struct detectors *d);
/* Agents compared or examined to find an event's agent (and the one to
 * evict for a new agent), for tests. */
uint64_t detectors_agent_probes(const struct detectors *d);
/* True when agent <id> has windows, for tests. */
bool detectors_tracks(struct detectors *d, const char *id);

/* True when <t> (unix seconds) is outside the working hours of <o>. */
bool detectors_off_hours(const struct off_hours_cfg *o, time_t t);

#endif
