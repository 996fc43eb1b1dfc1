/* watch: everything that watches the gate, wired together for `serve`.
 *
 * Subscribes the detectors and metrics to the egress bus, and one alert
 * subscriber to the alert bus that writes each alert once as JSON and hands
 * it to the --alerts file (or the decision log when there is no --alerts),
 * the exec and webhook sinks of the policy in force, the metrics and the
 * alert counters of the state store. Runs a 250 ms timer that writes folded
 * summaries, closes baseline minutes, commits the state store and, when the
 * UTC day changes, re-announces expiring grants. Serves --admin.
 *
 * The gate never calls into the detectors: it publishes events; it tells
 * watch only about the policy (start, reload) and SIGHUP (reopen files).
 *
 * Owns: the store, detectors, sinks, metrics, admin server, the alerts file
 * (unless it shares the decision log, which is borrowed). */
#ifndef SLUICE_WATCH_WATCH_H
#define SLUICE_WATCH_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "policy/model.h"
#include "watch/alert.h"
#include "watch/bus.h"
#include "watch/metrics.h"
#include "util/listen_addr.h"

struct event_base;
struct log_jsonl;
struct webhook_tls_ca;
struct watch;

#define WATCH_TICK_MS 250

struct watch_config {
    const char *alerts_path; /* NULL: alerts go to the decision log; "-": standard output */
    const char *log_path;    /* the decision log's path (NULL or "-": standard output) */
    const char *state_dir;   /* NULL: no state store (memory only) */
    uid_t state_user;        /* may own the state directory too (serve --user; 0: none) */
    /* NULL: no admin server; else its address, read by
     * listen_addr_parse_admin() (borrowed for watch_new() only) */
    const struct listen_addr *admin;
    bool files_no_links; /* the alerts file is opened with LOG_JSONL_NO_LINKS */
};

/* Returns the watch for a gateway, or NULL with a message in <err> (an
 * alerts file that cannot be opened, an admin address that cannot be
 * bound). A state store that cannot be opened is reported on standard
 * error and the watch runs without it. <base>, <bus>, <alerts> and <log>
 * are borrowed and must outlive it; <p> is read, not kept. */
struct watch *watch_new(struct event_base *base, struct bus *bus, struct alert_bus *alerts,
                        const struct watch_config *cfg, struct log_jsonl *log,
                        const struct policy *p, char *err, size_t errlen);
/* Gauges the gateway provides at each scrape. */
void watch_set_gauges(struct watch *w, metrics_gauges_fn fn, void *arg);
/* A reload's first step, before anything of <p> is in force: takes the
 * memory the detectors need for <p>'s settings, its sinks (the exec
 * sinks' paths, the webhooks' tables) and its grants' expiry gauges. Returns 0, or -1 when out of
 * memory, with what lacked it in <*what> ("alert detectors", "alert
 * sinks", "grant gauges"): the reload is then refused as a whole (gate/gateway.c
 * reload_apply()), with watch_policy_abandon(), so that the detectors
 * never keep the old thresholds, windows and hours, nor the sinks or the
 * gauges lose some of theirs, under a policy said to be reloaded. */
int watch_policy_prepare(struct watch *w, const struct policy *p, const char **what);
void watch_policy_abandon(struct watch *w);
/* Gives the reload <ca> (taken; NULL for none), the TLS context
 * watch_ca_for() built for its policy, after watch_policy_prepare()
 * succeeded: the https:// sinks the reload adds share it, and none reads
 * the CA store on the loop. */
void watch_policy_ca(struct watch *w, struct webhook_tls_ca *ca);
/* Returns a TLS context with the CA store read (webhook_tls_ca_new()) when
 * <p> has an https:// webhook sink, else NULL. It reads files for tens of
 * milliseconds: called on the reload thread, never on the loop. */
struct webhook_tls_ca *watch_ca_for(const struct policy *p);
/* A new policy is in force (after a reload, once watch_policy_prepare()
 * succeeded for it): detectors, sinks, grants; the grants judged as of the
 * prepare's day, as its gauges were. */
void watch_policy_loaded(struct watch *w, const struct policy *p);
/* The path of the <i>th exec sink in force, or NULL past the last: for
 * tests. */
const char *watch_exec_sink(const struct watch *w, size_t i);
/* The metrics <w> serves (/metrics, /healthz): for tests. */
struct metrics *watch_metrics(struct watch *w);
/* The address the --admin server listens on, as bound (admin_addr()), or
 * NULL when there is none: what self_request covers. */
const struct listen_addr *watch_admin_addr(const struct watch *w);
/* The <i>th variable exec sinks' programs do not get (an agent's token is
 * read from it), or NULL past the last: for tests. */
const char *watch_token_env(const struct watch *w, size_t i);
/* SIGHUP: reopens the alerts file. */
void watch_reopen(struct watch *w);
/* At a stop, once the connections are gone (their events published):
 * writes the open fold summaries, then runs the event loop until the sinks
 * hold no alert a stop would lose (exec programs running or waiting,
 * webhook alerts in no state store) and no webhook POST is in flight (its
 * answer recorded, a delivered alert is not sent again by the next start;
 * no new one starts for stored alerts), at most <timeout_ms>; the alerts
 * file's last flush (in watch_free) then gets what is left of it, and at
 * least 2 s. What is left is reported on standard error by watch_free().
 * Accepts NULL. */
void watch_drain(struct watch *w, unsigned timeout_ms);
/* The descriptors the alert sinks of <p> may hold at once, for the gate's
 * fit of --max-conns to the open-file limit: each webhook sink its
 * connection (one POST in flight) and, for a URL naming a host rather than
 * an address, the sockets of its own resolver (one a nameserver of
 * resolv.conf, at most WEBHOOK_DNS_SERVERS); the exec sinks
 * SINK_EXEC_MAX_RUNNING programs, each with a pipe to its standard input
 * until it has its alert, a pipe being handed to the next one, and the
 * pipe on which the thread that starts them answers the loop. With <w>
 * (may be NULL), plus those of its sinks <p> does not list that still hold
 * them: retired ones finishing a POST, and those in force with a POST in
 * flight that <p>, loaded next, retires. */
size_t watch_sink_fds(const struct watch *w, const struct policy *p);
/* Flushes the alerts file and the store, stops the sinks (killing exec
 * programs still running), frees. Returns the lines of an alerts file of
 * its own that were lost (log_jsonl_close()), 0 without one. Accepts NULL
 * (returns 0). */
uint64_t watch_free(struct watch *w);

#endif
