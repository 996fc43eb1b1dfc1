/* metrics: counters for Prometheus, and the verdict /healthz gives.
 *
 * metrics_on_event (a bus subscriber) and metrics_on_alert count what
 * passes; metrics_format writes the Prometheus text exposition (0.0.4):
 *   sluice_requests_total{agent,tier,decision,reason}   counter
 *   sluice_bytes_up_total{agent}, sluice_bytes_down_total{agent}  counters
 *   sluice_open_connections, sluice_open_tunnels          gauges
 *   sluice_tunnel_held_bytes, sluice_client_backlog_bytes,
 *   sluice_upload_backlog_bytes gauges
 *   sluice_bandwidth_waiting_connections                  gauge
 *   sluice_accept_failures_total                          counter
 *     (the listeners' accept() calls that failed for want of descriptors
 *     or memory: no request is decided for those connections)
 *   sluice_alerts_total{kind}                            counter (kept in the state store)
 *   sluice_policy_reloads_total, sluice_policy_reload_failures_total  counters
 *   sluice_grants_expiring (grants within the warn window), sluice_grants_expired,
 *   sluice_grant_expiry_timestamp_seconds{rule,host,owner} gauges
 *   sluice_webhook_queue{sink}                            gauge
 *     (every alert waiting: in memory, and in the state store only;
 *     a URL listed twice is one series, its sinks' counts summed)
 *   sluice_dns_responses_total{server,result}             counter
 *     (result: answer, timeout, failure (SERVFAIL, REFUSED, NOTIMP, FORMERR,
 *     any other error); an address
 *     listed twice is one series, its counts summed)
 *   sluice_log_writable{log}, sluice_log_pending_bytes{log}  gauges
 *   sluice_log_dropped_lines_total{log}                   counter
 *     (log: decisions, and alerts when they have a file of their own)
 * metrics_health() tells /healthz whether the gateway is not stopping,
 * every log can be written, the state store commits and the exec sinks
 * run.
 * tier is "0".."3" or "none"; reason is "none" for an allowed request.
 * The --admin server that answers /metrics and /healthz is admin.h's.
 *
 * Owns: its tables. */
#ifndef SLUICE_WATCH_METRICS_H
#define SLUICE_WATCH_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/model.h"
#include "watch/alert.h"
#include "watch/event.h"

struct evbuffer;

#define METRICS_AGENTS_MAX 4096 /* beyond, agents are counted as "other" */

#define METRICS_DNS_SERVERS 8

/* What one DNS server did with the gateway's queries. */
struct metrics_dns_server {
    char addr[64]; /* "IP:PORT" or "[V6]:PORT" */
    uint64_t answers, timeouts, failures;
};

/* One log file the gateway writes. */
struct metrics_log {
    const char *name;  /* "decisions", "alerts" */
    const char *error; /* why it cannot be written now, or NULL */
    uint64_t dropped;  /* lines dropped */
    uint64_t pending;  /* bytes waiting */
};

/* Values the gateway knows, read at each scrape. */
struct metrics_gauges {
    uint64_t open_connections, open_tunnels;
    uint64_t tunnel_held_bytes;    /* tunnel_held_bytes() (gate/tunnel.h) */
    uint64_t client_backlog_bytes; /* backlog_held(BACKLOG_TO_CLIENT) (gate/backlog.h) */
    uint64_t upload_backlog_bytes; /* backlog_held(BACKLOG_TO_UPSTREAM) */
    uint64_t bandwidth_waiting;    /* quota_flows_waiting() (shape/quota.h) */
    uint64_t reloads, reload_failures;
    uint64_t accept_failures; /* the listeners' failed accept() calls */
    struct metrics_dns_server dns[METRICS_DNS_SERVERS];
    size_t ndns;
    struct metrics_log logs[2];
    size_t nlogs;
    const char *state_broken;  /* store_broken() of the state store, or NULL */
    const char *state_stuck;   /* store_stuck() of the state store, store_opener_why() while
                                * it is not open yet, or NULL */
    const char *state_waiting; /* store_opener_why() while an old gateway may still drain
                                * with the store (store_opener_waits_for_predecessor()):
                                * healthy, named in /healthz's "ok" */
    const char *exec_off;      /* why the policy's exec sinks get no alert, or NULL */
    bool stopping;             /* a stop began (SIGTERM, SIGINT): the listeners are closed */
};
typedef void (*metrics_gauges_fn)(void *arg, struct metrics_gauges *g);
/* Extra lines a scrape appends (the watch module's sink queues); 0, or -1
 * when a write failed (out of memory): the scrape then fails. */
typedef int (*metrics_extra_fn)(void *arg, struct evbuffer *out);

struct metrics;
struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);
void metrics_set_gauges(struct metrics *m, metrics_gauges_fn fn, metrics_extra_fn extra, void *arg);
/* Takes the grants of <p> for the expiry gauges at <now> (unix seconds).
 * Returns 0, or -1 when out of memory: the gauges then stay as they were,
 * whole. metrics_policy_prepare() (-1 when out of memory, nothing changed)
 * then metrics_policy_commit() (cannot fail) or metrics_policy_abandon()
 * are the same in two steps, for a reload that must know it can take
 * them before the policy comes into force (watch_policy_prepare()). */
int metrics_set_policy(struct metrics *m, const struct policy *p, int64_t now);
int metrics_policy_prepare(struct metrics *m, const struct policy *p, int64_t now);
void metrics_policy_commit(struct metrics *m);
void metrics_policy_abandon(struct metrics *m);
void metrics_on_event(const struct egress_event *ev, void *arg);
void metrics_count_alert(struct metrics *m, enum alert_kind k);
void metrics_set_alert_total(struct metrics *m, enum alert_kind k, uint64_t v);
uint64_t metrics_alert_total(const struct metrics *m, enum alert_kind k);
/* Agents compared to find events' agents, for tests. */
uint64_t metrics_agent_probes(const struct metrics *m);
/* Appends the exposition to <out>. Returns 0, or -1 when out of memory
 * (any write failed: <out> then holds part of it, not to be served). */
int metrics_format(struct metrics *m, struct evbuffer *out);
/* Appends <s> as a label value to <b>: in quotes, with \\, \" and \n
 * escaped as the text format wants (UTF-8 passes as it is). Returns 0, or
 * -1 when out of memory (<b> then holds part of it). */
int metrics_put_label(struct evbuffer *b, const char *s);
/* True when the gateway is not stopping, every log can be written, the
 * state store (if any) commits and the exec sinks (if any) run; else false,
 * with the first that cannot and why in <why> ("stopping: new connections
 * are refused; ...", "decisions log: No space left on device", "state store: its commits
 * fail (the reason is on standard error)": never the store's error text,
 * which may name local paths). When true, <why> is empty, or names what
 * the gateway waits for while healthy (the state_waiting gauge: "state
 * store: not open yet: another sluice gateway holds it ..."). */
bool metrics_health(struct metrics *m, char *why, size_t cap);

#endif
