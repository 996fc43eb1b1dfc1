#include "gate/gateway.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "gate/addr_guard.h"
#include "gate/conn.h"
#include "gate/resolve.h"
#include "policy/lint.h"
#include "policy/policy.h"
#include "util/diag.h"
#include "util/units.h"
#include "shape/quota.h"
#include "watch/log_jsonl.h"
#include "watch/watch.h"

#define LOG_FLUSH_MS 2000

static struct gw_policy *gw_policy_new(struct policy *p)
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
    addr_guard_free(gp->guard);
    policy_free(gp->policy);
    free(gp);
}

void gateway_print_grant_warnings(const struct policy *p)
{
    int32_t today = day_of(time(NULL));
    int warn_days = lint_warn_days(p);
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        if (!r->has_expires)
            continue;
        char date[16];
        format_date(r->expires, date, sizeof(date));
        int32_t left = lint_days_left(r, today);
        if (left < 0)
            fprintf(stderr,
                    "warning: %s:%d: rules[%zu].expires: grant expired on %s; requests under it "
                    "are denied\n",
                    p->path != NULL ? p->path : "policy", r->line, r->index, date);
        else if (left <= warn_days)
            fprintf(stderr,
                    "warning: %s:%d: rules[%zu].expires: grant expires on %s (%d day%s left)\n",
                    p->path != NULL ? p->path : "policy", r->line, r->index, date, (int)left,
                    left == 1 ? "" : "s");
    }
}

/* --- connections per agent ------------------------------------------------ */

int gateway_agent_acquire(struct gateway *gw, const char *id, unsigned max)
{
    struct agent_conns *free_slot = NULL;
    for (size_t i = 0; i < gw->nagents; i++) {
        struct agent_conns *a = &gw->agents[i];
        if (a->id == NULL) {
            if (free_slot == NULL)
                free_slot = a;
            continue;
        }
        if (strcmp(a->id, id) == 0) {
            if (max > 0 && a->n >= max)
                return -1;
            a->n++;
            return 0;
        }
    }
    if (free_slot == NULL) {
        struct agent_conns *na = realloc(gw->agents, (gw->nagents + 1) * sizeof(*na));
        if (na == NULL)
            return -1;
        gw->agents = na;
        free_slot = &gw->agents[gw->nagents++];
    }
    free_slot->id = strdup(id);
    if (free_slot->id == NULL)
        return -1;
    free_slot->n = 1;
    return 0;
}

void gateway_agent_release(struct gateway *gw, const char *id)
{
    for (size_t i = 0; i < gw->nagents; i++) {
        struct agent_conns *a = &gw->agents[i];
        if (a->id != NULL && strcmp(a->id, id) == 0) {
            if (--a->n == 0) {
                free(a->id);
                a->id = NULL;
            }
            return;
        }
    }
}

/* --- self_request ---------------------------------------------------------- */

bool gateway_is_self(const struct gateway *gw, const struct ipaddr *ip, uint16_t port)
{
    for (size_t i = 0; i < gw->nlisteners; i++)
        if (listener_covers(gw->listeners[i], ip, port))
            return true;
    return false;
}

bool gateway_is_self_name(const struct gateway *gw, const char *name, uint16_t port)
{
    for (size_t i = 0; i < gw->nlisteners; i++) {
        const struct listen_addr *a = listener_addr(gw->listeners[i]);
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

/* --- reload and stop ------------------------------------------------------- */

int gateway_reload(struct gateway *gw, const char *path)
{
    if (path == NULL)
        path = gw->cfg.policy_path;
    struct policy *p = policy_load_reporting(path, "sluice: reload failed: ");
    if (p == NULL) {
        gw->counters.reload_failures++;
        return -1;
    }
    struct gw_policy *gp = gw_policy_new(p);
    if (gp == NULL) {
        fprintf(stderr, "sluice: reload failed: %s: out of memory\n", path);
        policy_free(p);
        gw->counters.reload_failures++;
        return -1;
    }
    if (resolver_reload(gw->resolver, &p->dns) < 0) {
        fprintf(stderr, "sluice: reload failed: %s: dns: cannot apply the new DNS settings\n",
                path);
        gw_policy_unref(gp);
        gw->counters.reload_failures++;
        return -1;
    }
    gateway_print_grant_warnings(p);
    gw_policy_unref(gw->current); /* requests in flight keep their reference */
    gw->current = gp;
    quota_configure(gw->quota, p);
    watch_policy_loaded(gw->watch, p);
    gw->counters.reloads++;
    fprintf(stderr, "sluice: reloaded %zu rule%s from %s\n", p->nrules, p->nrules == 1 ? "" : "s",
            path);
    return 0;
}

static void on_grace_over(evutil_socket_t fd, short what, void *arg)
{
    struct gateway *gw = arg;
    (void)fd;
    (void)what;
    while (gw->conns != NULL)
        conn_free(gw->conns); /* publishes the end events */
    event_base_loopexit(gw->base, NULL);
}

void gateway_stop(struct gateway *gw)
{
    if (gw->stopping)
        return;
    gw->stopping = true;
    for (size_t i = 0; i < gw->nlisteners; i++)
        listener_shutdown(gw->listeners[i]); /* new connections are refused */
    struct conn *c = gw->conns;
    while (c != NULL) {
        struct conn *next = c->next;
        if (conn_is_idle(c))
            conn_free(c);
        c = next;
    }
    if (gw->nconns == 0) {
        event_base_loopexit(gw->base, NULL);
        return;
    }
    unsigned ms = gw->cfg.grace_ms > 0 ? gw->cfg.grace_ms : GATEWAY_DEFAULT_GRACE_MS;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    evtimer_add(gw->grace_timer, &tv);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct gateway *gw = arg;
    (void)what;
    if (sig == SIGHUP) {
        gateway_reload(gw, NULL);
        watch_reopen(gw->watch);
        if (gw->log != NULL && log_jsonl_reopen(gw->log) < 0)
            fprintf(stderr, "sluice: cannot reopen the log; still writing to the old file\n");
        return;
    }
    gateway_stop(gw);
}

/* --- life cycle ------------------------------------------------------------ */

/* The gauges /metrics shows (watch/metrics.h), read at each scrape. */
static void gateway_gauges(void *arg, struct metrics_gauges *g)
{
    const struct gateway *gw = arg;
    g->open_connections = gw->nconns;
    g->open_tunnels = 0;
    for (const struct conn *c = gw->conns; c != NULL; c = c->next)
        if (c->tunnel != NULL)
            g->open_tunnels++;
    g->reloads = gw->counters.reloads;
    g->reload_failures = gw->counters.reload_failures;
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
    gw->base = event_base_new();
    if (gw->base == NULL) {
        snprintf(err, errlen, "cannot create the event loop");
        policy_free(policy);
        goto err;
    }
    gw->current = gw_policy_new(policy);
    if (gw->current == NULL) {
        snprintf(err, errlen, "out of memory");
        policy_free(policy);
        goto err;
    }
    gw->resolver = resolver_new(gw->base, &policy->dns, &e);
    if (gw->resolver == NULL) {
        snprintf(err, errlen, "%s: dns: %s", cfg->policy_path, e != NULL ? e : "cannot start");
        free(e);
        goto err;
    }
    gw->log = log_jsonl_open(gw->base, cfg->log_path != NULL ? cfg->log_path : "-", &e);
    if (gw->log == NULL) {
        snprintf(err, errlen, "%s", e != NULL ? e : "cannot open the log");
        free(e);
        goto err;
    }
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
        .state_dir = cfg->state_dir,
        .admin_addr = cfg->admin_addr,
    };
    gw->watch = watch_new(gw->base, &gw->bus, &gw->alerts, &wc, gw->log, policy, err, errlen);
    if (gw->watch == NULL)
        goto err;
    watch_set_gauges(gw->watch, gateway_gauges, gw);
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
    gw->sig_term = evsignal_new(gw->base, SIGTERM, on_signal, gw);
    gw->sig_int = evsignal_new(gw->base, SIGINT, on_signal, gw);
    gw->grace_timer = evtimer_new(gw->base, on_grace_over, gw);
    if (gw->sig_hup == NULL || gw->sig_term == NULL || gw->sig_int == NULL ||
        gw->grace_timer == NULL || evsignal_add(gw->sig_hup, NULL) < 0 ||
        evsignal_add(gw->sig_term, NULL) < 0 || evsignal_add(gw->sig_int, NULL) < 0) {
        snprintf(err, errlen, "cannot install signal handlers");
        goto err;
    }
    return gw;
err:
    gateway_free(gw);
    return NULL;
}

int gateway_run(struct gateway *gw)
{
    event_base_dispatch(gw->base);
    return 0;
}

void gateway_free(struct gateway *gw)
{
    if (gw == NULL)
        return;
    gw->stopping = true;
    while (gw->conns != NULL)
        conn_free(gw->conns);
    for (size_t i = 0; i < gw->nlisteners; i++)
        listener_free(gw->listeners[i]);
    free(gw->listeners);
    struct event *evs[] = {gw->sig_hup, gw->sig_term, gw->sig_int, gw->grace_timer};
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        if (evs[i] != NULL)
            event_free(evs[i]);
    resolver_free(gw->resolver);
    watch_free(gw->watch); /* after the connections (their end events), before the log */
    gw->watch = NULL;
    if (gw->log != NULL) {
        log_jsonl_flush(gw->log, LOG_FLUSH_MS);
        log_jsonl_close(gw->log);
    }
    quota_free(gw->quota); /* after the connections: their flows hold entries */
    gw_policy_unref(gw->current);
    for (size_t i = 0; i < gw->nagents; i++)
        free(gw->agents[i].id);
    free(gw->agents);
    if (gw->base != NULL)
        event_base_free(gw->base);
    free(gw);
}
