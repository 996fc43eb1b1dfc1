/* gateway: one running `sluice serve`.
 *
 * Owns the event loop, the policy in force, the listeners, the resolver, the
 * bus (and the JSON-lines log subscribed to it), every client connection and
 * the counters. The policy is held in a refcounted wrapper together with the
 * address guard built from it: a reload swaps the wrapper, and each request
 * keeps a reference to the one it was decided under until it ends, so
 * nothing in flight changes rules halfway. */
#ifndef SLUICE_GATE_GATEWAY_H
#define SLUICE_GATE_GATEWAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gate/listener.h"
#include "policy/model.h"
#include "util/http_date.h"
#include "util/pos_index.h"
#include "util/shortage.h"
#include "watch/alert.h"
#include "watch/bus.h"

struct event_base;
struct event;
struct resolver;
struct addr_guard;
struct log_jsonl;
struct conn;
struct quota;
struct watch;
struct gw_reload;

#define GATEWAY_DEFAULT_MAX_CONNS 4096
#define GATEWAY_DEFAULT_GRACE_MS  5000

/* The grace a stop gives: <given> (--grace), GATEWAY_DEFAULT_GRACE_MS for
 * 0 (not given). */
static inline unsigned gateway_grace_ms(unsigned given)
{
    return given > 0 ? given : GATEWAY_DEFAULT_GRACE_MS;
}

/* The budget for connecting upstream (every address of a name together), or
 * idle_timeout when that is shorter: see upstream.h. */
#define GATEWAY_CONNECT_TIMEOUT_MS 10000

/* The loop thread's scheduling class. BATCH (the default) keeps the normal
 * share of CPU but gives up wake-up preemption: a byte arriving for a tunnel
 * does not interrupt the process on this CPU that is producing it (an
 * agent, or an upstream on the same host), so the gateway wakes once per
 * batch of data instead of once per TLS record. NORMAL is SCHED_OTHER. */
enum gateway_sched {
    GATEWAY_SCHED_BATCH = 0,
    GATEWAY_SCHED_NORMAL,
};

struct gateway_config {
    const char *policy_path;           /* borrowed; reloaded from here on SIGHUP */
    const struct listen_addr *listens; /* borrowed array */
    size_t nlistens;
    const char *log_path;     /* NULL or "-": standard output */
    unsigned max_conns;       /* 0: GATEWAY_DEFAULT_MAX_CONNS */
    unsigned grace_ms;        /* 0: GATEWAY_DEFAULT_GRACE_MS */
    const char *forced_agent; /* `run`: every client is this agent; NULL otherwise */
    const char *alerts_path;  /* NULL: alerts go to the decision log; "-": standard output */
    const char *state_dir;    /* NULL: no state store */
    uid_t state_user;         /* serve --user's uid, which may own it too (0: none) */
    /* NULL: no admin server (/metrics, /healthz); else its address, read by
     * listen_addr_parse_admin() (borrowed, as listens) */
    const struct listen_addr *admin;
    enum gateway_sched sched; /* how the loop thread is scheduled (--sched) */
    bool splice;              /* streaming tunnel directions splice (--splice; tunnel.h) */
    bool files_no_links;      /* `run`: the log and alerts files are refused through a
                               * symbolic link (util/open_nolinks.h) */
};

/* A policy and what is built from it, shared by the requests decided under it. */
struct gw_policy {
    struct policy *policy;
    struct addr_guard *guard;
    unsigned refs;
    /* Where it goes when its last reference is let go: the gateway's list
     * of retired policies (gw->retired), which the next reload's thread
     * frees, not the loop (a 50,000-rule policy took the loop some 10 ms
     * of CPU to free at each reload); <next> links that list. */
    struct gw_policy **retired;
    struct gw_policy *next;
};

struct gw_policy *gw_policy_ref(struct gw_policy *gp);
void gw_policy_unref(struct gw_policy *gp);

struct agent_conns {
    char *id;
    unsigned n; /* open connections; 0: kept until compacted (gateway.c) */
    uint64_t hash;
};

struct gateway_counters {
    uint64_t accepted;
    uint64_t refused_full; /* connections closed at once: global cap reached */
    uint64_t requests;
    uint64_t denied;
    uint64_t reloads;
    uint64_t reload_failures;
    uint64_t accept_failures_closed; /* of listeners freed at the stop, kept for
                                      * the gauges --admin still answers */
};

/* The loop's two priorities (event_base_priority_init()): every event is
 * GATEWAY_PRI_NORMAL but a kept upstream connection's while it is idle
 * (forward.c, forward_park()), whose news is handled before any other
 * callback of the turn that polled it. */
#define GATEWAY_PRI_FIRST  0
#define GATEWAY_PRI_NORMAL 1
#define GATEWAY_PRIORITIES 2

struct gateway {
    struct event_base *base;
    /* The loop's turns so far: each one polls before it runs a callback
     * (gateway_run(): one event_base_loop(EVLOOP_ONCE) a turn). */
    uint64_t turns;
    struct gateway_config cfg;
    struct gw_policy *current;
    /* Policies no request holds any more, waiting for the next reload's
     * thread to free them (struct gw_policy), or gateway_free(); owned. */
    struct gw_policy *retired;
    struct listener **listeners;
    size_t nlisteners;
    struct listener *admin_self; /* the --admin address, for self_request; or NULL */
    bool listeners_paused;
    unsigned max_conns_asked; /* --max-conns as given (or the default), before fit_fd_limit() */
    struct resolver *resolver;
    struct bus bus;
    struct alert_bus alerts; /* detectors and shaping publish; sinks subscribe */
    struct quota *quota;     /* shaping state (shape/quota.h): survives reloads */
    struct log_jsonl *log;

    struct watch *watch; /* detectors, sinks, state store, metrics (watch/watch.h) */

    struct conn *conns; /* doubly linked through conn->next/prev */
    /* The connections whose decision waits for its log line (conn.c,
     * "write-ahead"), doubly linked through conn->log_next/log_prev. */
    struct conn *log_waiters;
    unsigned nconns;
    uint64_t next_conn_id;
    struct agent_conns *agents; /* open connections per agent */
    size_t nagents, agents_cap;
    size_t agents_idle;           /* agents with a count of 0 */
    struct pos_index agent_index; /* positions in agents, by hash of the id */
    uint64_t agent_probes;        /* agents compared by acquire and release, for tests */
    struct gateway_counters counters;
    bool stopping;
    /* CLOCK_MONOTONIC: conn_refuse_short()'s last warning of each kind
     * (indexed by enum shortage_kind: each told once a minute); 0 never */
    uint64_t short_told_ms[SHORTAGE_KINDS];
    int64_t stop_began_ms; /* CLOCK_MONOTONIC, at SIGTERM/SIGINT; 0 before */
    struct event *sig_hup, *sig_usr1, *sig_term, *sig_int, *grace_timer;
    /* Wakes when the UTC day changes (at most DAY_CHECK_MAX_MS apart, gateway.c):
     * open tunnels are decided again, grants ending with their day. */
    struct event *day_timer;
    int32_t tunnels_day;           /* the UTC day tunnels were last decided in */
    int64_t tunnel_clock_ahead_ms; /* test-only: SLUICE_TEST_TUNNEL_CLOCK_AHEAD_S (gateway.c) */
    struct gw_reload *reload;      /* the background load SIGHUP starts (gateway.c); or NULL */
    /* The Date forwarded responses that came without one go on with
     * (forward.c), and that of the gateway's own answers (refusals,
     * max_forwards.c): formatted once a second. */
    struct http_date_clock date_clock;
};

/* Returns a gateway serving <policy> (takes ownership) per <cfg> (copied;
 * the strings and arrays it points to are borrowed and must outlive it), its
 * listeners bound and its log open, or NULL with a message in <err>. */
struct gateway *gateway_new(const struct gateway_config *cfg, struct policy *policy, char *err,
                            size_t errlen);
/* Puts the calling thread (and the threads it starts) in <cfg->sched>'s
 * class, then runs the loop until a stop completes. Returns 0. */
int gateway_run(struct gateway *gw);
/* Stops accepting, closes idle clients, lets requests in flight finish
 * within the grace period, then leaves the loop. */
void gateway_stop(struct gateway *gw);
/* Prints, on standard error, a warning for each grant of <p> that has
 * expired (requests under it are denied) or expires within the warn window. */
void gateway_print_grant_warnings(const struct policy *p);
/* The room gateway_policy_file_warning()'s line takes at most, NUL
 * included: a name too long for it loses its middle, never the reason. */
#define GATEWAY_FILE_WARNING_MAX 2048
/* Fills <out> (<outlen> bytes, GATEWAY_FILE_WARNING_MAX for the whole line)
 * with a warning line when the policy file at <path> can be changed by
 * every user of the host (the file, or a folder without the sticky bit
 * that holds it), else with "". */
void gateway_policy_file_warning(const char *path, char *out, size_t outlen);
/* Flushes and closes the log, frees everything. Returns the lines of the
 * decision log and of the alerts file that were lost, dropped or never
 * written (told on standard error: log_jsonl_close()), 0 when both were
 * written whole. Accepts NULL (returns 0). A reload still loading is
 * waited for what is left of the grace, then left to its thread (stuck in
 * a file system that does not answer), which frees what it holds if it
 * ever returns. */
uint64_t gateway_free(struct gateway *gw);

/* Used by connections. */
/* Whether a tunnel moves streaming bytes with splice(2) (tunnel.h): with
 * --splice, and for a client on a unix socket: sluice run's relay (or
 * another local proxy), which copies the bytes again before its agent sees
 * them, so splice's page fragments cost that copy nothing more and spare
 * the gateway its own (README, Benchmarks). */
bool gateway_tunnel_splices(const struct gateway *gw, bool client_on_unix);
/* True when <ip>:<port> is one of the gateway's listeners or its --admin server. */
bool gateway_is_self(const struct gateway *gw, const struct ipaddr *ip, uint16_t port);
/* True when the normalised name <name>:<port> is written as a listener's host. */
bool gateway_is_self_name(const struct gateway *gw, const char *name, uint16_t port);
/* Counts one more open connection for agent <id>, whose agent_hash() is
 * <h> (watch/agent_hash.h: the exchange has it already); returns 0, or -1
 * when the agent already has <max> (0: unlimited) or memory ran out. */
int gateway_agent_acquire(struct gateway *gw, const char *id, uint64_t h, unsigned max);
/* Counts one connection fewer for agent <id> (<h> as above). */
void gateway_agent_release(struct gateway *gw, const char *id, uint64_t h);
/* Forgets every agent's count (gateway_free()). */
void gateway_agents_free(struct gateway *gw);
/* A connection has been freed (gateway bookkeeping, resumes listeners). */
void gateway_conn_gone(struct gateway *gw);

#endif
