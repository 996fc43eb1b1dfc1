#include "gate/gateway.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "gate/addr_guard.h"
#include "gate/backlog.h"
#include "gate/conn.h"
#include "gate/link_walk.h"
#include "gate/resolve.h"
#include "gate/tunnel.h"
#include "policy/lint.h"
#include "policy/policy.h"
#include "util/diag.h"
#include "util/env.h"
#include "util/libevent_log.h"
#include "util/pos_index.h"
#include "util/quiet_thread.h"
#include "util/text_json.h"
#include "util/units.h"
#include "util/wall_clock.h"
#include "shape/quota.h"
#include "watch/admin.h"
#include "watch/log_jsonl.h"
#include "watch/watch.h"
#include "watch/webhook_tls.h"

#define LOG_FLUSH_MS       2000 /* the log's last flush, at least */
#define SINKS_DRAIN_MIN_MS 1000 /* the alert sinks' last wait, at least */
#define RELOAD_WAIT_MIN_MS 100  /* a reload's last wait at exit, at least */

static struct gw_policy *gw_policy_new(struct gateway *gw, struct policy *p)
{
    struct gw_policy *gp = calloc(1, sizeof(*gp));
    if (gp == NULL)
        return NULL;
    gp->guard = addr_guard_new(&p->network);
    if (gp->guard == NULL) {
        free(gp);
        return NULL;
    }
    gp->policy = p;
    gp->refs = 1;
    gp->retired = &gw->retired;
    return gp;
}

struct gw_policy *gw_policy_ref(struct gw_policy *gp)
{
    gp->refs++;
    return gp;
}

void gw_policy_unref(struct gw_policy *gp)
{
    if (gp == NULL || --gp->refs > 0)
        return;
    gp->next = *gp->retired;
    *gp->retired = gp;
}

/* Frees the retired policies of list <gp> (any thread: nothing else
 * holds them). */
static void retired_free(struct gw_policy *gp)
{
    while (gp != NULL) {
        struct gw_policy *next = gp->next;
        addr_guard_free(gp->guard);
        policy_free(gp->policy);
        free(gp);
        gp = next;
    }
}

/* The words of gateway_policy_file_warning()'s lines, the names aside: the
 * longest one, with its mode and line end. */
#define FILE_WARNING_WORDS 352

/* The folder of <path> into <dir> ("." for a bare name, "/" for "/p.yaml"). */
static void folder_of(const char *path, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, cap, ".");
    else
        slash[slash == dir] = '\0';
}

/* A policy that every user may write is a policy every agent on the host
 * may widen for itself: the change is in force from the next SIGHUP, which
 * a log rotation sends. Said at start and at each reload (the file may have
 * been replaced since), not refused: the operator may know better. A
 * symbolic link is judged by where it leads too, link by link
 * (link_walk_open_folder()): a file renamed over the link's target, or
 * another link over one in the middle of a chain or over a linked folder
 * on the path, is what the next load reads; so is a plain folder of the
 * path renamed away within such a folder, another put in its place. The
 * first such folder is named, with the name in it the walk went through
 * (a folder under /tmp, sticky, is not: only its owner may rename it
 * there). The names are shown \ooo
 * (text_shown()), each within its share of <outlen>, its middle giving way
 * ("...") when longer: cut at the end by snprintf(), a long name took the
 * reason and the line end with it, or split a UTF-8 character. */
void gateway_policy_file_warning(const char *path, char *out, size_t outlen)
{
    out[0] = '\0';
    struct stat st, ds;
    if (stat(path, &st) != 0)
        return;
    char dir[4096], real[PATH_MAX], real_dir[PATH_MAX];
    folder_of(path, dir, sizeof(dir));
    /* three names at most in a line: each its third of what the words leave */
    char shown_path[GATEWAY_FILE_WARNING_MAX / 2], shown_dir[GATEWAY_FILE_WARNING_MAX / 2];
    char shown_real[GATEWAY_FILE_WARNING_MAX / 2];
    enum link_walk_found found;
    size_t room = outlen > FILE_WARNING_WORDS ? (outlen - FILE_WARNING_WORDS) / 3 : 8;
    if (room > sizeof(shown_path))
        room = sizeof(shown_path);
    text_shown_fit(shown_path, room, path);
    if (S_ISREG(st.st_mode) && (st.st_mode & S_IWOTH) != 0) {
        snprintf(out, outlen,
                 "warning: %s: the file is writable by every user (mode %04o): anyone on this "
                 "host, an agent included, can change what agents reach, in force from the next "
                 "SIGHUP (a log rotation sends one); chmod o-w %s\n",
                 shown_path, (unsigned)(st.st_mode & 07777), shown_path);
    } else if (folder_open_to_all(dir, &ds)) {
        text_shown_fit(shown_dir, room, dir);
        snprintf(out, outlen,
                 "warning: %s: its folder %s is writable by every user without the sticky bit "
                 "(mode %04o): anyone on this host, an agent included, can replace the policy, "
                 "in force from the next SIGHUP (a log rotation sends one); keep it in a folder "
                 "only its owner can write\n",
                 shown_path, shown_dir, (unsigned)(ds.st_mode & 07777));
    } else if ((found = link_walk_open_folder(path, real_dir, sizeof(real_dir), real, sizeof(real),
                                              &ds)) != LINK_WALK_NONE) {
        text_shown_fit(shown_dir, room, real_dir);
        text_shown_fit(shown_real, room, real);
        unsigned mode = (unsigned)(ds.st_mode & 07777);
        if (found == LINK_WALK_ENTRY)
            snprintf(out, outlen,
                     "warning: %s: its folder %s (the link leads to %s) is writable by every "
                     "user without the sticky bit (mode %04o): anyone on this host, an agent "
                     "included, can replace the policy, in force from the next SIGHUP (a log "
                     "rotation sends one); keep it in a folder only its owner can write\n",
                     shown_path, shown_dir, shown_real, mode);
        else /* a plain folder: renamed away, another put in its place */
            snprintf(out, outlen,
                     "warning: %s: %s, a folder of its path, lies in %s, which is writable by "
                     "every user without the sticky bit (mode %04o): anyone on this host, an "
                     "agent included, can rename that folder away and put one of their own in "
                     "its place, in force from the next SIGHUP (a log rotation sends one); keep "
                     "the policy's path out of folders every user may write\n",
                     shown_path, shown_real, shown_dir, mode);
    }
}

void gateway_print_grant_warnings(const struct policy *p)
{
    int32_t today = day_of(wall_clock_seconds()); /* as requests are decided */
    int warn_days = lint_warn_days(p);
    /* shown \ooo, as the loader's own warnings name the file */
    char *file = text_shown(p->path != NULL ? p->path : "policy");
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        if (!r->has_expires)
            continue;
        char date[16];
        format_date(r->expires, date, sizeof(date));
        int32_t left = lint_days_left(r, today);
        int line = r->expires_line ? r->expires_line : r->line; /* as check says it */
        if (left < 0)
            fprintf(stderr,
                    "warning: %s:%d: rules[%zu].expires: grant expired on %s; requests under it "
                    "are denied\n",
                    file, line, r->index, date);
        else if (left <= warn_days)
            fprintf(stderr,
                    "warning: %s:%d: rules[%zu].expires: grant expires on %s (%d day%s left)\n",
                    file, line, r->index, date, (int)left, left == 1 ? "" : "s");
        else if (lint_expiry_too_far(r, today)) { /* as check says it */
            char text[LINT_FAR_EXPIRY_TEXT];
            lint_far_expiry_text(r, today, text, sizeof(text));
            fprintf(stderr, "warning: %s:%d: rules[%zu].expires: %s\n", file, line, r->index, text);
        }
    }
    free(file);
}

/* --- connections per agent ------------------------------------------------ */

/* Agents are found through a hash index of their positions in gw->agents
 * (a linear search compared a connection's agent with every agent that has
 * connections: 13 us a connection at 4096 agents). An agent whose last
 * connection closed keeps its place, with a count of 0, until those are
 * over half the array (and over AGENTS_IDLE_MIN): then they are dropped
 * together and the index built anew, so the array holds at most about
 * twice the agents connected. */
#define AGENTS_IDLE_MIN 64

static struct agent_conns *agent_find(struct gateway *gw, const char *id, uint64_t h)
{
    size_t j = POS_INDEX_START, p;
    while ((p = pos_index_next(&gw->agent_index, h, &j)) != 0) {
        struct agent_conns *a = &gw->agents[p - 1];
        gw->agent_probes++;
        if (a->hash == h && strcmp(a->id, id) == 0)
            return a;
    }
    return NULL;
}

/* Indexes every agent anew (after the array moved or the index grew). */
static void agents_reindex(struct gateway *gw)
{
    pos_index_empty(&gw->agent_index);
    for (size_t i = 0; i < gw->nagents; i++)
        pos_index_add(&gw->agent_index, gw->agents[i].hash, i);
}

/* Drops the agents without connections, once they are over half. */
static void agents_compact(struct gateway *gw)
{
    if (gw->agents_idle <= AGENTS_IDLE_MIN || gw->agents_idle * 2 <= gw->nagents)
        return;
    size_t k = 0;
    for (size_t i = 0; i < gw->nagents; i++) {
        if (gw->agents[i].n == 0)
            free(gw->agents[i].id);
        else
            gw->agents[k++] = gw->agents[i];
    }
    gw->nagents = k;
    gw->agents_idle = 0;
    agents_reindex(gw);
}

int gateway_agent_acquire(struct gateway *gw, const char *id, uint64_t h, unsigned max)
{
    struct agent_conns *a = agent_find(gw, id, h);
    if (a != NULL) {
        if (max > 0 && a->n >= max)
            return -1;
        if (a->n++ == 0)
            gw->agents_idle--;
        return 0;
    }
    if (gw->nagents == gw->agents_cap) {
        size_t cap = gw->agents_cap > 0 ? 2 * gw->agents_cap : 16;
        struct agent_conns *na = realloc(gw->agents, cap * sizeof(*na));
        if (na == NULL)
            return -1;
        gw->agents = na;
        gw->agents_cap = cap;
    }
    int r = pos_index_reserve(&gw->agent_index, gw->nagents + 1);
    if (r < 0)
        return -1;
    if (r > 0)
        agents_reindex(gw);
    char *copy = strdup(id);
    if (copy == NULL)
        return -1;
    gw->agents[gw->nagents] = (struct agent_conns){.id = copy, .n = 1, .hash = h};
    pos_index_add(&gw->agent_index, h, gw->nagents);
    gw->nagents++;
    return 0;
}

void gateway_agent_release(struct gateway *gw, const char *id, uint64_t h)
{
    struct agent_conns *a = agent_find(gw, id, h);
    if (a == NULL || a->n == 0)
        return;
    if (--a->n == 0) {
        gw->agents_idle++;
        agents_compact(gw);
    }
}

void gateway_agents_free(struct gateway *gw)
{
    for (size_t i = 0; i < gw->nagents; i++)
        free(gw->agents[i].id);
    free(gw->agents);
    pos_index_free(&gw->agent_index);
    gw->agents = NULL;
    gw->nagents = gw->agents_cap = gw->agents_idle = 0;
}

/* --- self_request ---------------------------------------------------------- */

bool gateway_is_self(const struct gateway *gw, const struct ipaddr *ip, uint16_t port)
{
    for (size_t i = 0; i < gw->nlisteners; i++)
        if (listener_covers(gw->listeners[i], ip, port))
            return true;
    return gw->admin_self != NULL && listener_covers(gw->admin_self, ip, port);
}

bool gateway_is_self_name(const struct gateway *gw, const char *name, uint16_t port)
{
    for (size_t i = 0; i <= gw->nlisteners; i++) {
        const struct listener *l = i < gw->nlisteners ? gw->listeners[i] : gw->admin_self;
        if (l == NULL)
            continue;
        const struct listen_addr *a = listener_addr(l);
        struct host h;
        const char *why;
        struct ipaddr ip;
        uint16_t lport;
        if (a->kind != LISTEN_TCP ||
            sockaddr_to_ipaddr((const struct sockaddr *)&a->ss, &ip, &lport) < 0 || lport != port)
            continue;
        if (host_normalise(a->host, strlen(a->host), &h, &why) == 0 && strcmp(h.name, name) == 0)
            return true;
    }
    return false;
}

/* The --admin server's address, for self_request: the one it bound
 * (watch_admin_addr(), getsockname()), not a new reading of the option,
 * whose name could give another address by now (/etc/hosts edited since
 * serve read it). A unix: admin socket is no address a request could name.
 * Fails only for want of memory; serve does not start then (requests
 * through the gateway would reach the admin server). */
static int describe_admin(struct gateway *gw, char *err, size_t errlen)
{
    const struct listen_addr *a = watch_admin_addr(gw->watch);
    if (a == NULL || a->kind != LISTEN_TCP)
        return 0;
    gw->admin_self = listener_describe(a);
    if (gw->admin_self != NULL)
        return 0;
    snprintf(err, errlen, "%s: cannot tell the address for self_request: out of memory",
             a->named[0] != '\0' ? a->named : a->text);
    return -1;
}

/* --- accepting ------------------------------------------------------------- */

static void pause_listeners(struct gateway *gw, bool pause)
{
    if (gw->listeners_paused == pause)
        return;
    gw->listeners_paused = pause;
    for (size_t i = 0; i < gw->nlisteners; i++) {
        if (pause)
            listener_pause(gw->listeners[i]);
        else
            listener_resume(gw->listeners[i]);
    }
}

static unsigned max_conns(const struct gateway *gw)
{
    return gw->cfg.max_conns > 0 ? gw->cfg.max_conns : GATEWAY_DEFAULT_MAX_CONNS;
}

/* --grace: how long a stop gives requests in flight, then the alert sinks
 * and the logs' last lines, from SIGTERM. */
static unsigned grace_ms(const struct gateway *gw)
{
    return gateway_grace_ms(gw->cfg.grace_ms);
}

/* What is left of --grace since the stop began (all of it when the gateway
 * is freed without one: a start-up error), and at least <floor_ms>, so that
 * a stop takes about --grace in all, not --grace for each of its steps. */
static unsigned grace_left_ms(const struct gateway *gw, unsigned floor_ms)
{
    int64_t left = grace_ms(gw);
    if (gw->stop_began_ms != 0)
        left -= (int64_t)monotonic_ms() - gw->stop_began_ms;
    return left > (int64_t)floor_ms ? (unsigned)left : floor_ms;
}

bool gateway_tunnel_splices(const struct gateway *gw, bool client_on_unix)
{
    return gw->cfg.splice || client_on_unix;
}

/* A connection holds at most its client's socket and one upstream socket
 * (a kept upstream connection is dropped before another is made); a
 * spliced tunnel (gateway_tunnel_splices()) adds a pipe (two descriptors)
 * for each direction that streams. The rest of the process (log,
 * listeners, resolver, store, loop) fits in FD_RESERVE, the alert sinks of
 * the policy in watch_sink_fds() more, and the --admin server's connections,
 * when it serves, in ADMIN_CONNS_MAX more. */
#define FDS_PER_CONN         2
#define FDS_PER_SPLICED_CONN 6
#define FD_RESERVE           64

/* The connections below which run's gateway warns of its cap. It serves
 * one agent and no one asked it for 4096 (run has no --max-conns): a
 * common hard limit (4096, 8192) warned at every run of a cap no agent
 * reaches, a warning users learn to skip. Under this many, a package
 * manager's parallel downloads may queue: said. */
#define RUN_QUIET_CONNS 256

/* Caps max_conns to what RLIMIT_NOFILE allows beside FD_RESERVE, <p>'s
 * sinks and the --admin server, with a warning when that is below what was
 * asked and differs from the cap in force (at start, and at a reload that
 * changed the sinks), but for run's gateway at RUN_QUIET_CONNS or more. At
 * start (<raise>) the soft limit is first raised to the hard one. */
static void fit_fd_limit(struct gateway *gw, const struct policy *p, bool raise)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (raise && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl.rlim_cur = rl.rlim_max;
    }
    if (rl.rlim_cur == RLIM_INFINITY)
        return;
    unsigned want = gw->max_conns_asked;
    rlim_t per = FDS_PER_CONN;
    for (size_t i = 0; i < gw->cfg.nlistens; i++)
        if (gateway_tunnel_splices(gw, gw->cfg.listens[i].kind == LISTEN_UNIX))
            per = FDS_PER_SPLICED_CONN;
    rlim_t reserve =
        FD_RESERVE + watch_sink_fds(gw->watch, p) + (gw->cfg.admin != NULL ? ADMIN_CONNS_MAX : 0);
    rlim_t fit = rl.rlim_cur > reserve + per ? (rl.rlim_cur - reserve) / per : 1;
    unsigned cap = fit >= want ? want : (unsigned)fit;
    bool quiet = gw->cfg.forced_agent != NULL && cap >= RUN_QUIET_CONNS;
    if (cap < want && cap != max_conns(gw) && !quiet)
        fprintf(stderr,
                "sluice: warning: --max-conns %u needs more open files than the limit of %llu "
                "allows: serving at most %u connections\n",
                want, (unsigned long long)rl.rlim_cur, cap);
    gw->cfg.max_conns = cap;
    if (gw->listeners != NULL && !gw->stopping) /* a lower cap at a reload: new clients wait */
        pause_listeners(gw, gw->nconns >= cap);
}

static void on_accept(struct listener *l, evutil_socket_t fd, const struct sockaddr *sa,
                      socklen_t salen, void *arg)
{
    struct gateway *gw = arg;
    if (gw->stopping || gw->nconns >= max_conns(gw)) {
        gw->counters.refused_full++;
        close(fd);
        return;
    }
    conn_accept(gw, l, fd, sa, salen);
    if (gw->nconns >= max_conns(gw))
        pause_listeners(gw, true);
}

void gateway_conn_gone(struct gateway *gw)
{
    if (gw->stopping) {
        if (gw->nconns == 0)
            event_base_loopexit(gw->base, NULL);
        return;
    }
    if (gw->listeners_paused && gw->nconns < max_conns(gw))
        pause_listeners(gw, false);
}

/* --- open tunnels under the policy in force --------------------------------- */

/* The day timer wakes at least this often: the wall clock may be set, or
 * the host suspended, while a timer (on the monotonic clock) waits. */
#define DAY_CHECK_MAX_MS 60000

/* Test-only (see SPEC.md): SLUICE_TEST_TUNNEL_CLOCK_AHEAD_S=N (1 s to 400
 * days) runs the clock that open tunnels are decided again by, and the day
 * timer, N seconds ahead of the wall clock, so that a test sees a UTC day
 * change. Ahead only: a grant can only end sooner under it, never later. */
static int64_t tunnel_clock_ahead_ms(void)
{
    return (int64_t)env_number("SLUICE_TEST_TUNNEL_CLOCK_AHEAD_S", 400ull * 86400, 0) * 1000;
}

/* The wall clock open tunnels are decided again by, in ms since the epoch. */
static int64_t tunnel_clock_ms(const struct gateway *gw)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + gw->tunnel_clock_ahead_ms;
}

/* Decides every CONNECT going ahead, and every plain request whose body
 * is still going up, again under gw->current, now (after a reload, and
 * when the UTC day changes: a grant ends with its day); those now denied
 * are cut, those an agent in report mode would lose reported
 * (conn_redecide()). Cutting one frees that one alone. */
static void redecide_tunnels(struct gateway *gw)
{
    time_t now = (time_t)(tunnel_clock_ms(gw) / 1000);
    struct conn *c = gw->conns;
    while (c != NULL) {
        struct conn *next = c->next;
        conn_redecide(c, now);
        c = next;
    }
}

static int64_t day_clock_ms(void *arg)
{
    return tunnel_clock_ms(arg);
}

/* Sets gw->tunnels_day to the day the tunnel clock is in, and the day
 * timer to wake at its end; returns whether the day changed. */
static bool watch_day(struct gateway *gw)
{
    uint64_t ms;
    bool changed = day_watch(&gw->tunnels_day, day_clock_ms, gw, DAY_CHECK_MAX_MS, &ms);
    struct timeval tv = timeval_of_ms(ms);
    evtimer_add(gw->day_timer, &tv);
    return changed;
}

static void on_day_timer(evutil_socket_t fd, short what, void *arg)
{
    struct gateway *gw = arg;
    (void)fd;
    (void)what;
    if (watch_day(gw))
        redecide_tunnels(gw);
}

/* --- reload and stop ------------------------------------------------------- */

/* Makes <p> (taken) the policy for new requests: the tail of a reload,
 * on the loop; <shown> names its file in messages. Returns 0, or -1
 * (reported, old policy kept). */
static int reload_apply(struct gateway *gw, struct policy *p, struct webhook_tls_ca *ca,
                        const char *shown)
{
    struct gw_policy *gp = gw_policy_new(gw, p);
    if (gp == NULL) {
        fprintf(stderr, "sluice: reload failed: %s: out of memory\n", shown);
        webhook_tls_ca_free(ca);
        policy_free(p);
        gw->counters.reload_failures++;
        return -1;
    }
    /* The memory its shaping needs, taken first: a policy that came into
     * force without it would let a running upload go past a limit it
     * brings (quota_reshape()). */
    struct quota_reshape *reshape = quota_reshape_prepare(gw->quota, p, quota_now());
    if (reshape == NULL) {
        fprintf(stderr, "sluice: reload failed: %s: out of memory (bandwidth limits)\n", shown);
        webhook_tls_ca_free(ca);
        gw_policy_unref(gp);
        gw->counters.reload_failures++;
        return -1;
    }
    /* The alert detectors' too: else they would keep the old thresholds,
     * tier-3 grants and off-hours under the policy said to be reloaded. */
    const char *what = "alerts";
    if (watch_policy_prepare(gw->watch, p, &what) < 0) {
        fprintf(stderr, "sluice: reload failed: %s: out of memory (%s)\n", shown, what);
        webhook_tls_ca_free(ca);
        quota_reshape_abandon(reshape);
        gw_policy_unref(gp);
        gw->counters.reload_failures++;
        return -1;
    }
    watch_policy_ca(gw->watch, ca); /* watch_policy_abandon() frees it */
    if (resolver_reload(gw->resolver, &p->dns) < 0) {
        fprintf(stderr, "sluice: reload failed: %s: dns: cannot apply the new DNS settings\n",
                shown);
        watch_policy_abandon(gw->watch);
        quota_reshape_abandon(reshape);
        gw_policy_unref(gp);
        gw->counters.reload_failures++;
        return -1;
    }
    gateway_print_grant_warnings(p);
    gw_policy_unref(gw->current); /* requests in flight keep their reference */
    gw->current = gp;
    fit_fd_limit(gw, p, false); /* its sinks may need more descriptors, or fewer */
    tunnel_budget_for_conns(max_conns(gw));
    backlog_budget_for_conns(max_conns(gw));
    quota_configure(gw->quota, p);
    quota_reshape_commit(reshape); /* tunnels already open included */
    watch_policy_loaded(gw->watch, p);
    redecide_tunnels(gw); /* before "reloaded": what it says is in force */
    for (struct conn *c = gw->conns; c != NULL; c = c->next)
        conn_head_wait_reloaded(c); /* the new idle_timeout for the next heads */
    gw->counters.reloads++;
    fprintf(stderr, "sluice: reloaded %zu rule%s from %s\n", p->nrules, p->nrules == 1 ? "" : "s",
            shown);
    return 0;
}

/* A gateway whose every client is one agent (run) compares no secret. */
static unsigned load_flags(const struct gateway *gw)
{
    return gw->cfg.forced_agent != NULL ? POLICY_LOAD_SECRETS_UNUSED : 0;
}

/* A background load (SIGHUP): a thread parses and indexes the file, then
 * writes one byte to a pipe; the loop, woken by that byte, joins the thread
 * and swaps the result in, so requests keep being decided during the load.
 * The thread touches nothing the loop uses: the loader keeps no shared
 * state (libyaml, libidn2 and libpsl's builtin list are safe to use from
 * several threads; env: tokens are read with getenv). Running out of memory
 * in the loader ends the process, as it did in a synchronous reload.
 *
 * A load blocked in the file system (a read() of a hung NFS or FUSE mount,
 * which no signal but SIGKILL ends) is left to its thread at exit
 * (reload_free()): the thread frees the struct if its call ever returns,
 * and the process exits meanwhile. */
struct gw_reload {
    pthread_t thread;
    pthread_mutex_t mu; /* guards <done> and <abandoned> */
    bool running;       /* a thread was started and not joined (or left) yet */
    bool queued;        /* a SIGHUP arrived during the load: one more after it */
    bool done;          /* (mu) the thread's load has ended */
    bool abandoned;     /* (mu) the gateway is gone: the thread frees this */
    int fds[2];         /* the thread's "done" byte; [0] is watched by done_ev */
    struct event *done_ev;
    char *path;                          /* a copy of gw->cfg.policy_path, owned: a
                                          * thread left at exit outlives the config */
    char *shown;                         /* <path> as messages name it (text_shown()) */
    unsigned flags;                      /* load_flags() */
    struct policy *result;               /* the thread's result, NULL on failure */
    struct webhook_tls_ca *ca;           /* the CA store read for result's https:// sinks */
    struct gw_policy *retired;           /* gw->retired when it started: the thread frees them */
    char msg[1024];                      /* the first error when result is NULL */
    char warnings[POLICY_WARNINGS_TEXT]; /* the loader's warnings, printed when applied */
};

/* Frees <r> and what it holds; the thread, if one was started, is over
 * (joined) or is the caller. */
static void reload_job_free(struct gw_reload *r)
{
    retired_free(r->retired);
    policy_free(r->result);
    webhook_tls_ca_free(r->ca);
    if (r->done_ev != NULL)
        event_free(r->done_ev);
    close(r->fds[0]);
    close(r->fds[1]);
    free(r->path);
    free(r->shown);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static void *reload_thread(void *arg)
{
    struct gw_reload *r = arg;
    retired_free(r->retired); /* off the loop: megabytes of frees for a large policy */
    r->retired = NULL;
    struct diag d;
    diag_init(&d, r->shown);
    r->result = policy_load_flags(r->path, r->flags, &d);
    /* Here, not on the loop: reading the CA store takes tens of ms, which
     * each new https:// sink paid there, stalling every request. */
    if (r->result != NULL)
        r->ca = watch_ca_for(r->result);
    /* the file's warning has its room kept: after the loader's warnings,
     * which fill what they are given, it was cut short, without its line
     * end, or not said at all */
    char file_warning[GATEWAY_FILE_WARNING_MAX];
    gateway_policy_file_warning(r->path, file_warning, sizeof(file_warning));
    size_t room = sizeof(r->warnings) - strlen(file_warning);
    diag_format_warnings(&d, r->warnings, room);
    memcpy(r->warnings + strlen(r->warnings), file_warning, strlen(file_warning) + 1);
    if (r->result == NULL) {
        const struct diag_entry *e = diag_first_error(&d);
        if (e != NULL)
            diag_format(&d, e, r->msg, sizeof(r->msg));
        else
            snprintf(r->msg, sizeof(r->msg), "%s: cannot load the policy", r->shown);
    }
    diag_free(&d);
    if (quiet_thread_job_end(&r->mu, &r->abandoned, &r->done, r->fds[1]))
        reload_job_free(r); /* left at exit (reload_leave()) */
    return NULL;
}

/* Starts a background load of the configured policy. Returns 0, or the
 * error of the thread's creation. */
static int reload_start(struct gateway *gw)
{
    struct gw_reload *r = gw->reload;
    r->result = NULL;
    r->ca = NULL;
    r->msg[0] = '\0';
    r->done = false;
    r->flags = load_flags(gw);
    r->retired = gw->retired;
    /* Signals stay with the loop's thread. */
    int e = quiet_thread_create(&r->thread, reload_thread, r);
    if (e != 0) {
        r->retired = NULL; /* still the gateway's */
        return e;
    }
    gw->retired = NULL;
    r->running = true;
    return 0;
}

static struct gw_reload *reload_new(struct gateway *gw);

/* SIGHUP: a background load, or a queued one when a load is running. When
 * no thread (or pipe) can be had the reload is refused, the policy in
 * force kept: a load on the loop, reading a file on a file system that does
 * not answer (a hung NFS or FUSE mount), froze every connection. */
static void reload_request(struct gateway *gw)
{
    struct gw_reload *r = gw->reload;
    if (r != NULL && r->running) {
        r->queued = true;
        return;
    }
    if (r == NULL)
        r = gw->reload = reload_new(gw); /* what it lacked at start may be there now */
    int e = r != NULL ? reload_start(gw) : errno;
    if (e == 0)
        return;
    char *shown = text_shown(gw->cfg.policy_path);
    fprintf(stderr,
            "sluice: reload failed: %s: cannot start its load on a thread (%s): the policy in "
            "force is kept; send SIGHUP again\n",
            shown, strerror(e));
    free(shown);
    gw->counters.reload_failures++;
}

static void on_reload_done(evutil_socket_t fd, short what, void *arg)
{
    struct gateway *gw = arg;
    struct gw_reload *r = gw->reload;
    (void)what;
    char buf[16];
    while (read(fd, buf, sizeof(buf)) > 0)
        continue;
    if (!r->running)
        return;
    pthread_join(r->thread, NULL);
    r->running = false;
    struct policy *p = r->result;
    struct webhook_tls_ca *ca = r->ca;
    r->result = NULL;
    r->ca = NULL;
    if (p == NULL) {
        fprintf(stderr, "sluice: reload failed: %s\n", r->msg);
        gw->counters.reload_failures++;
    } else if (gw->stopping) {
        webhook_tls_ca_free(ca);
        policy_free(p);
    } else {
        fputs(r->warnings, stderr);
        reload_apply(gw, p, ca, r->shown);
    }
    if (r->queued && !gw->stopping) {
        r->queued = false;
        reload_request(gw);
    }
}

/* The background reload's pipe and event; NULL, errno set, when they
 * cannot be had (reload_request() tries again at the next SIGHUP). */
static struct gw_reload *reload_new(struct gateway *gw)
{
    struct gw_reload *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->path = strdup(gw->cfg.policy_path);
    r->shown = text_shown(gw->cfg.policy_path);
    if (r->path == NULL || pipe2(r->fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        int e = errno;
        free(r->path);
        free(r->shown);
        free(r);
        errno = e;
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->done_ev = event_new(gw->base, r->fds[0], EV_READ | EV_PERSIST, on_reload_done, gw);
    if (r->done_ev == NULL || event_add(r->done_ev, NULL) < 0) {
        reload_job_free(r);
        errno = ENOMEM;
        return NULL;
    }
    return r;
}

/* Leaves the running load of <r> to its thread, which frees <r> when its
 * call returns, unless it has ended meanwhile. Returns whether it was left
 * (then <r> is no longer the caller's). */
static bool reload_leave(struct gw_reload *r, unsigned waited_ms)
{
    pthread_mutex_lock(&r->mu);
    bool left = !r->done;
    if (left) {
        event_free(r->done_ev); /* the loop's, which is freed next */
        r->done_ev = NULL;
        r->abandoned = true;
        pthread_detach(r->thread);
        /* said before the lock is let go: from then on <r> may be gone */
        fprintf(stderr,
                "sluice: the reload of %s is abandoned at exit: its load has not ended within "
                "what was left of --grace (%u ms; its file system does not answer?)\n",
                r->shown, waited_ms);
    }
    pthread_mutex_unlock(&r->mu);
    return left;
}

/* Frees <r> (accepts NULL) once its load, if one runs, has ended; one that
 * has not ended within <wait_ms> is left to its thread (reload_leave()): a
 * read() that a file system does not answer can be neither interrupted
 * nor waited out, and the stop must end. */
static void reload_free(struct gw_reload *r, unsigned wait_ms)
{
    if (r == NULL)
        return;
    if (r->running && !quiet_thread_job_ended_within(r->fds[0], wait_ms) &&
        reload_leave(r, wait_ms))
        return;
    if (r->running)
        pthread_join(r->thread, NULL);
    reload_job_free(r);
}

static void on_grace_over(evutil_socket_t fd, short what, void *arg)
{
    struct gateway *gw = arg;
    (void)fd;
    (void)what;
    while (gw->conns != NULL)
        conn_cut(gw->conns); /* publishes the end events */
    event_base_loopexit(gw->base, NULL);
}

void gateway_stop(struct gateway *gw)
{
    if (gw->stopping)
        return;
    gw->stopping = true;
    gw->stop_began_ms = (int64_t)monotonic_ms();
    /* a reload reading a FIFO whose writer keeps writing would hold the
     * stop (gateway_free() waits for its thread what is left of the grace)
     * as long as the writer goes on; its policy would be thrown away
     * anyway */
    policy_load_stop();
    for (size_t i = 0; i < gw->nlisteners; i++)
        listener_shutdown(gw->listeners[i]); /* new connections are refused */
    struct conn *c = gw->conns;
    while (c != NULL) {
        struct conn *next = c->next;
        if (conn_is_idle(c))
            conn_stop_idle(c);
        c = next;
    }
    if (gw->nconns == 0) {
        event_base_loopexit(gw->base, NULL);
        return;
    }
    unsigned ms = grace_ms(gw);
    struct timeval tv = timeval_of_ms(ms);
    evtimer_add(gw->grace_timer, &tv);
}

/* The --log and --alerts files opened anew (SIGHUP's, and SIGUSR1's alone). */
static void reopen_logs(struct gateway *gw)
{
    watch_reopen(gw->watch);
    if (gw->log != NULL)
        log_jsonl_reopen_soon(gw->log,
                              "sluice: cannot reopen the log; still writing to the old file\n");
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct gateway *gw = arg;
    (void)what;
    if (sig == SIGHUP) {
        /* a load's policy would be thrown away at the stop's end, and a
         * load stuck in a file system would only lengthen the stop */
        if (gw->stopping)
            fputs("sluice: SIGHUP during the stop: the policy is not reloaded\n", stderr);
        else
            reload_request(gw);
        reopen_logs(gw);
        return;
    }
    /* SIGUSR1, which logrotate configurations written for nginx and others
     * send to reopen the logs: its default action killed the gateway */
    if (sig == SIGUSR1) {
        reopen_logs(gw);
        return;
    }
    gateway_stop(gw);
}

/* --- life cycle ------------------------------------------------------------ */

/* The log's writer wrote what connections wait for (write-ahead). */
static void on_log_written(void *arg)
{
    conn_log_written(arg);
}

/* The gauges /metrics shows (watch/metrics.h), read at each scrape. */
static void gateway_gauges(void *arg, struct metrics_gauges *g)
{
    const struct gateway *gw = arg;
    g->stopping = gw->stopping;
    g->open_connections = gw->nconns;
    g->open_tunnels = 0;
    for (const struct conn *c = gw->conns; c != NULL; c = c->next)
        if (c->tunnel != NULL)
            g->open_tunnels++;
    g->tunnel_held_bytes = tunnel_held_bytes();
    g->client_backlog_bytes = backlog_held(BACKLOG_TO_CLIENT);
    g->upload_backlog_bytes = backlog_held(BACKLOG_TO_UPSTREAM);
    g->bandwidth_waiting = quota_flows_waiting(gw->quota);
    g->reloads = gw->counters.reloads;
    g->reload_failures = gw->counters.reload_failures;
    g->accept_failures = gw->counters.accept_failures_closed;
    for (size_t i = 0; i < gw->nlisteners; i++)
        g->accept_failures += listener_accept_failures(gw->listeners[i]);
    struct resolve_server_stats st[METRICS_DNS_SERVERS];
    g->ndns = resolver_server_stats(gw->resolver, st, METRICS_DNS_SERVERS);
    for (size_t i = 0; i < g->ndns; i++) {
        memcpy(g->dns[i].addr, st[i].addr, sizeof(g->dns[i].addr));
        g->dns[i].answers = st[i].answers;
        g->dns[i].timeouts = st[i].timeouts;
        g->dns[i].failures = st[i].failures;
    }
}

struct gateway *gateway_new(const struct gateway_config *cfg, struct policy *policy, char *err,
                            size_t errlen)
{
    struct gateway *gw = calloc(1, sizeof(*gw));
    char *e = NULL;
    if (gw == NULL) {
        snprintf(err, errlen, "out of memory");
        policy_free(policy);
        return NULL;
    }
    gw->cfg = *cfg;
    bus_init(&gw->bus);
    alert_bus_init(&gw->alerts);
    event_set_log_callback(libevent_log);
    gw->base = event_base_new();
    if (gw->base == NULL || event_base_priority_init(gw->base, GATEWAY_PRIORITIES) != 0) {
        snprintf(err, errlen, "cannot create the event loop");
        policy_free(policy);
        goto err;
    }
    gw->current = gw_policy_new(gw, policy);
    if (gw->current == NULL) {
        snprintf(err, errlen, "out of memory");
        policy_free(policy);
        goto err;
    }
    gw->resolver = resolver_new(gw->base, &policy->dns, &e);
    if (gw->resolver == NULL) {
        char *shown = text_shown(cfg->policy_path);
        snprintf(err, errlen, "%s: dns: %s", shown, e != NULL ? e : "cannot start");
        free(shown);
        free(e);
        goto err;
    }
    unsigned log_flags = cfg->files_no_links ? LOG_JSONL_NO_LINKS : 0;
    gw->log = log_jsonl_open(gw->base, cfg->log_path != NULL ? cfg->log_path : "-", log_flags, &e);
    if (gw->log == NULL) {
        snprintf(err, errlen, "%s", e != NULL ? e : "cannot open the log");
        free(e);
        goto err;
    }
    log_jsonl_on_written(gw->log, on_log_written, gw);
    bus_subscribe(&gw->bus, log_jsonl_on_event, gw->log);
    gw->quota = quota_new(&gw->alerts, gw->base, 0);
    if (gw->quota == NULL) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    quota_configure(gw->quota, policy);
    bus_subscribe(&gw->bus, quota_on_event, gw->quota);
    struct watch_config wc = {
        .alerts_path = cfg->alerts_path,
        .log_path = cfg->log_path,
        .files_no_links = cfg->files_no_links,
        .state_dir = cfg->state_dir,
        .state_user = cfg->state_user,
        .admin = cfg->admin,
    };
    gw->watch = watch_new(gw->base, &gw->bus, &gw->alerts, &wc, gw->log, policy, err, errlen);
    if (gw->watch == NULL)
        goto err;
    watch_set_gauges(gw->watch, gateway_gauges, gw);
    if (describe_admin(gw, err, errlen) < 0)
        goto err;
    gw->max_conns_asked = max_conns(gw);
    fit_fd_limit(gw, policy, true);
    tunnel_budget_for_conns(max_conns(gw));  /* what stalled tunnels may hold grows with them */
    backlog_budget_for_conns(max_conns(gw)); /* and what stalled downloads may */
    gw->listeners = calloc(cfg->nlistens > 0 ? cfg->nlistens : 1, sizeof(*gw->listeners));
    if (gw->listeners == NULL) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    for (size_t i = 0; i < cfg->nlistens; i++) {
        gw->listeners[i] = listener_open(gw->base, &cfg->listens[i], on_accept, gw, err, errlen);
        if (gw->listeners[i] == NULL)
            goto err;
        gw->nlisteners++;
    }
    gw->sig_hup = evsignal_new(gw->base, SIGHUP, on_signal, gw);
    gw->sig_usr1 = evsignal_new(gw->base, SIGUSR1, on_signal, gw);
    gw->sig_term = evsignal_new(gw->base, SIGTERM, on_signal, gw);
    gw->sig_int = evsignal_new(gw->base, SIGINT, on_signal, gw);
    gw->grace_timer = evtimer_new(gw->base, on_grace_over, gw);
    gw->day_timer = evtimer_new(gw->base, on_day_timer, gw);
    gw->reload = reload_new(gw); /* NULL: made at the first SIGHUP */
    if (gw->sig_hup == NULL || gw->sig_usr1 == NULL || gw->sig_term == NULL ||
        gw->sig_int == NULL || gw->grace_timer == NULL || gw->day_timer == NULL ||
        evsignal_add(gw->sig_hup, NULL) < 0 || evsignal_add(gw->sig_usr1, NULL) < 0 ||
        evsignal_add(gw->sig_term, NULL) < 0 || evsignal_add(gw->sig_int, NULL) < 0) {
        snprintf(err, errlen, "cannot install signal handlers");
        goto err;
    }
    gw->tunnel_clock_ahead_ms = tunnel_clock_ahead_ms();
    watch_day(gw);
    return gw;
err:
    gateway_free(gw);
    return NULL;
}

/* SCHED_BATCH needs no privilege; where it is refused (a seccomp profile,
 * an old kernel) the gateway says so and runs as a normal process. */
static void apply_sched(enum gateway_sched sched)
{
    if (sched != GATEWAY_SCHED_BATCH)
        return;
    struct sched_param sp = {.sched_priority = 0};
    if (sched_setscheduler(0, SCHED_BATCH, &sp) != 0)
        fprintf(stderr, "sluice: warning: cannot use SCHED_BATCH (%s); scheduled as normal\n",
                strerror(errno));
}

int gateway_run(struct gateway *gw)
{
    apply_sched(gw->cfg.sched);
    /* event_base_dispatch() a turn at a time, counted: a turn polls before
     * its first callback, so a callback of a later turn than the one that
     * kept an upstream connection knows that the connection has been polled
     * since (forward.c, forward_try_reuse()). */
    while (event_base_loop(gw->base, EVLOOP_ONCE) == 0) {
        gw->turns++;
        if (event_base_got_exit(gw->base) || event_base_got_break(gw->base))
            break;
    }
    return 0;
}

uint64_t gateway_free(struct gateway *gw)
{
    if (gw == NULL)
        return 0;
    gw->stopping = true;
    while (gw->conns != NULL)
        conn_free(gw->conns);
    /* --admin answers during the sinks' drain below: its gauges must not
     * read the listeners freed here */
    for (size_t i = 0; i < gw->nlisteners; i++) {
        gw->counters.accept_failures_closed += listener_accept_failures(gw->listeners[i]);
        listener_free(gw->listeners[i]);
    }
    free(gw->listeners);
    gw->listeners = NULL;
    gw->nlisteners = 0;
    listener_free(gw->admin_self);
    gw->admin_self = NULL;
    /* waits for a load in progress, at most what is left of --grace */
    reload_free(gw->reload, grace_left_ms(gw, RELOAD_WAIT_MIN_MS));
    gw->reload = NULL;
    struct event *evs[] = {gw->sig_hup, gw->sig_usr1,    gw->sig_term,
                           gw->sig_int, gw->grace_timer, gw->day_timer};
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        if (evs[i] != NULL)
            event_free(evs[i]);
    /* The open summaries, and the sinks finishing what they hold: the loop
     * runs again, and --admin may still be asked (its gauges read the
     * resolver, freed after). */
    watch_drain(gw->watch, grace_left_ms(gw, SINKS_DRAIN_MIN_MS));
    resolver_free(gw->resolver);
    gw->resolver = NULL;
    /* after the connections (their end events), before the log */
    uint64_t lost = watch_free(gw->watch);
    gw->watch = NULL;
    if (gw->log != NULL) {
        /* A slow reader (a pipe, a socket) or a full disk gets what is
         * left of the stop's budget (--grace), and at least LOG_FLUSH_MS:
         * what is still unwritten then is reported as lost. */
        log_jsonl_flush(gw->log, (int)grace_left_ms(gw, LOG_FLUSH_MS));
        lost += log_jsonl_close(gw->log);
    }
    quota_free(gw->quota); /* after the connections: their flows hold entries */
    gw_policy_unref(gw->current);
    retired_free(gw->retired);
    gateway_agents_free(gw);
    if (gw->base != NULL) {
        /* A turn of the loop for what freeing queued on it, which
         * event_base_free() would drop unrun: a webhook's name lookup under
         * way, failed when the sink's resolver was freed (webhook_free()),
         * releases the connection it held (else LeakSanitizer reported it
         * at each stop during a lookup). Everything else is freed by now. */
        event_base_loop(gw->base, EVLOOP_NONBLOCK);
        event_base_free(gw->base);
    }
    free(gw);
    return lost;
}
