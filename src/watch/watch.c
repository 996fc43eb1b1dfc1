/* watch: detectors, sinks, store, metrics and admin for `serve` (watch.h). */
#include "watch/watch.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "state/store.h"
#include "watch/store_opener.h"
#include "util/stderr_relay.h"
#include "util/units.h"
#include "util/weburl.h"
#include "util/zalloc.h"
#include "watch/admin.h"
#include "watch/detectors.h"
#include "watch/log_jsonl.h"
#include "watch/log_same.h"
#include "watch/sinks.h"
#include "watch/webhook_dns.h"
#include "watch/webhook_tls.h"

#define ALERT_LINE_MAX 8192
#define FLUSH_MS       2000 /* the alerts file's last flush, at least */
#define DRAIN_CHECK_MS 20   /* how often watch_drain() looks at the sinks */

/* What the sinks of a policy need, taken before it is in force
 * (watch_policy_prepare()): its exec sinks' paths, and the tables its
 * webhooks are sorted into. configure_sinks() takes them over, so that it
 * cannot run short of memory after the gateway decided to reload (before,
 * it freed the exec sinks' list, then made it again: out of memory, every
 * exec sink, or some, was gone while standard error said "reloaded"). */
struct sinks_next {
    char **execs;
    size_t nexecs;
    struct webhook **hooks, **fresh; /* each room for every sink; empty */
    char **token_env; /* the names hidden from exec sinks after the reload (token_env_prepare) */
    size_t ntoken_env;
    /* The TLS context the reload thread read the CA store into for the
     * new https:// sinks (watch_policy_ca()), or NULL: owned. */
    struct webhook_tls_ca *ca;
};

struct watch {
    struct event_base *base;
    struct alert_bus *alerts;
    struct store *store;
    /* The store's open tried again off the loop (store_opener.h) while a
     * lock another process holds keeps it shut; NULL otherwise */
    struct store_opener *opener;
    struct detectors *det;
    struct metrics *metrics;
    struct admin *admin;
    struct log_jsonl *log;  /* the decision log (borrowed) */
    struct log_jsonl *file; /* the alerts writer */
    bool own_file;
    struct exec_runner *exec; /* NULL while no exec sink was named, or it could not be made */
    char **execs;             /* exec sink paths */
    size_t nexecs;
    /* Alerts not given to exec sinks while the runner could not be made
     * ("exec sinks off"), one per alert and sink: sluice_exec_dropped_total */
    uint64_t exec_off_dropped;
    struct webhook **hooks;
    size_t nhooks;
    /* Sinks a reload took out of the policy while an alert was in flight
     * (webhook_retire()), until that attempt is over (retired_sink_over()) */
    struct webhook **retired;
    size_t nretired;
    uint64_t kept_dropped;  /* stored alerts of sinks no longer configured, over STORE_KEPT_MAX */
    uint64_t trimmed_said;  /* store_queue_trimmed() as standard error last told it */
    struct sinks_next next; /* a reload's, between watch_policy_prepare() and its end */
    /* The wall clock (ms) a reload's prepare counted the grant gauges at:
     * its load takes the grants' day from it too, not from a reading of
     * its own, which a UTC midnight between the two would put a day ahead
     * of the gauges (the tick, seeing no new day, would leave them so). */
    int64_t prepared_ms;
    struct event *tick;
    char **token_env; /* every env:NAME a loaded policy read a token from (token_env_prepare) */
    size_t ntoken_env;
    const struct policy *policy; /* the policy in force (the gateway keeps it alive) */
    metrics_gauges_fn gauges;
    void *gauges_arg;
    /* watch_drain(): its deadline (CLOCK_MONOTONIC ms), the timer that
     * checks on the sinks, and the alerts file's last flush budget */
    int64_t drain_until_ms;
    struct event *drain_check;
    int exit_flush_ms;
};

/* The wall clock (CLOCK_REALTIME), by which requests are decided and every
 * day of the watch is judged: the grant gauges too, whose tick counts them
 * again only when this clock's day changes (time(), glibc's coarse clock,
 * could set them a day behind at a midnight, and so leave them for a day). */
static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the alert subscriber ---------------------------------------------------- */

static void on_alert(const struct alert *a, void *arg)
{
    struct watch *w = arg;
    char line[ALERT_LINE_MAX];
    size_t n = log_jsonl_format_alert(a, line, sizeof(line)); /* cut to fit, if it must */
    if (n >= sizeof(line))
        return; /* unreachable: ten strings of 256 bytes and the rest fit */
    if (w->file != NULL)
        log_jsonl_write_line(w->file, line, n);
    /* exec sinks get the line with its newline, webhooks the object without */
    for (size_t i = 0; i < w->nexecs; i++)
        if (w->exec != NULL)
            exec_runner_run(w->exec, w->execs[i], line, n);
    if (w->exec == NULL)
        w->exec_off_dropped += w->nexecs; /* told once, at the runner's failure */
    for (size_t i = 0; i < w->nhooks; i++)
        webhook_send(w->hooks[i], line, n - 1);
    metrics_count_alert(w->metrics, a->kind);
    if (w->store != NULL) {
        char name[64];
        snprintf(name, sizeof(name), "alerts.%s", alert_kind_name(a->kind));
        store_put_counter(w->store, name, metrics_alert_total(w->metrics, a->kind));
    }
}

/* ---- timers ---------------------------------------------------------------- */

static void load_counter(const char *name, uint64_t value, void *arg);

/* The store opened by the opener's thread: what was decided meanwhile,
 * held in memory, is written to it, and it is used from now on. */
static void adopt_store(struct watch *w, struct store_opened *got, int64_t now)
{
    w->store = got->store;
    for (size_t i = 0; i < got->ncounters; i++) /* the stored counts, plus this run's */
        load_counter(got->counters[i].name, got->counters[i].value, w->metrics);
    for (int k = 0; k < ALERT_KIND_COUNT; k++) {
        char name[64];
        snprintf(name, sizeof(name), "alerts.%s", alert_kind_name((enum alert_kind)k));
        if (metrics_alert_total(w->metrics, (enum alert_kind)k) > 0)
            store_put_counter(w->store, name, metrics_alert_total(w->metrics, (enum alert_kind)k));
    }
    detectors_adopt_store(w->det, w->store, &got->stored, now);
    for (size_t i = 0; i < w->nhooks; i++)
        webhook_take_store(w->hooks[i], w->store);
    /* and those finishing a POST: if it fails, its alert is kept there */
    for (size_t i = 0; i < w->nretired; i++)
        webhook_take_store(w->retired[i], w->store);
    fprintf(stderr,
            "sluice: state %s: opened; what was decided while it was locked is written "
            "to it\n",
            store_shown(w->store));
}

static void take_opened(struct watch *w, int64_t now)
{
    struct store_opened got;
    char *e = NULL;
    int rc = store_opener_take(w->opener, &got, &e);
    if (rc == 0)
        return;
    store_opener_free(w->opener);
    w->opener = NULL;
    if (rc > 0)
        adopt_store(w, &got, now);
    else
        fprintf(stderr,
                "sluice: warning: %s; running without a state store (first-contact memory, "
                "baselines and the webhook queue are kept in memory only)\n",
                e != NULL ? e : "state store unavailable");
    free(e);
}

/* Tells what the writer's trims (trim_unconfigured_later()) deleted since
 * it last told, once committed. */
static void say_trimmed(struct watch *w)
{
    uint64_t t = store_queue_trimmed(w->store);
    if (t == w->trimmed_said)
        return;
    fprintf(stderr,
            "sluice: state %s: %llu queued alert(s) for webhooks no longer configured dropped "
            "after a reload, the oldest (at most %d are kept; counted in "
            "sluice_webhook_unconfigured_dropped_total)\n",
            store_shown(w->store), (unsigned long long)(t - w->trimmed_said), STORE_KEPT_MAX);
    w->trimmed_said = t;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct watch *w = arg;
    (void)fd;
    (void)what;
    int64_t now = now_ms();
    if (w->opener != NULL)
        take_opened(w, now);
    detectors_tick(w->det, now);
    if (w->store != NULL && store_dirty(w->store))
        store_flush(w->store);
    if (w->store != NULL)
        say_trimmed(w);
    if (w->policy != NULL && detectors_grants_daily(w->det, w->policy, now) >= 0 &&
        metrics_set_policy(w->metrics, w->policy, now / 1000) < 0)
        fprintf(stderr, "sluice: metrics: out of memory; the grant gauges keep the day before's "
                        "expiring and expired counts\n");
}

/* ---- sinks ---------------------------------------------------------------- */

struct unmatched_ctx {
    const struct watch *w;
    uint64_t rows;
};

static void count_unmatched(const char *sink, uint64_t rows, void *arg)
{
    struct unmatched_ctx *c = arg;
    for (size_t i = 0; i < c->w->nhooks; i++)
        if (strcmp(webhook_store_key(c->w->hooks[i]), sink) == 0)
            return;
    c->rows += rows;
}

/* Keeps at most STORE_KEPT_MAX of the stored alerts no configured webhook
 * takes, the newest (a sink removed or renamed left its rows for ever),
 * then says on standard error how many it dropped and how many are kept:
 * counted per sink in the store, not read. At start only. */
static void say_unmatched(struct watch *w)
{
    const char **keys = calloc(w->nhooks + 1, sizeof(*keys));
    int64_t gone = -1;
    if (keys != NULL) {
        for (size_t i = 0; i < w->nhooks; i++)
            keys[i] = webhook_store_key(w->hooks[i]);
        gone = store_trim_unconfigured(w->store, keys, w->nhooks, STORE_KEPT_MAX);
        free(keys);
    }
    if (gone > 0) {
        w->kept_dropped += (uint64_t)gone;
        fprintf(stderr,
                "sluice: state %s: %lld queued alert(s) for webhooks no longer configured "
                "dropped, the oldest (at most %d are kept; counted in "
                "sluice_webhook_unconfigured_dropped_total)\n",
                store_shown(w->store), (long long)gone, STORE_KEPT_MAX);
    }
    struct unmatched_ctx c = {w, 0};
    if (store_count_queue(w->store, count_unmatched, &c) >= 0 && c.rows > 0)
        fprintf(stderr,
                "sluice: state %s: %llu queued alert(s) for webhooks no longer configured are "
                "kept, not sent\n",
                store_shown(w->store), (unsigned long long)c.rows);
}

/* Frees the <n> strings of <names> and the array. */
static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static void free_execs(struct watch *w)
{
    free_names(w->execs, w->nexecs);
    w->execs = NULL;
    w->nexecs = 0;
}

/* True when <name> is one of the <n> <names>. */
static bool listed(char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return true;
    return false;
}

/* Adds the name NAME of <ref> ("env:NAME", or NULL) to n->token_env,
 * unless listed. Returns -1 when out of memory. */
static int token_env_add(struct sinks_next *n, const char *ref)
{
    if (ref == NULL || strncmp(ref, "env:", 4) != 0 || listed(n->token_env, n->ntoken_env, ref + 4))
        return 0;
    if ((n->token_env[n->ntoken_env++] = zalloc_text(ref + 4)) == NULL)
        return -1;
    return 0;
}

/* Alert programs get the gateway's environment without the variables the
 * agents' tokens and the webhooks' URLs are read from (token: env:NAME,
 * webhook: env:NAME): secrets that are kept out of the policy file, and
 * that no alert program needs. Those of every
 * policy loaded since the start, not only the one in force: a variable a
 * reload no longer reads (an agent renamed its env:NAME, or left) still
 * holds its secret. Fills n->token_env with copies of the <nhad> names
 * <had> (those hidden now) and of <p>'s not among them, so that the list
 * only grows. Taken before the policy is in force, as the rest of <n>:
 * the list was grown a name at a time after it, and out of memory the
 * gateway said "reloaded" with some of the new variables not hidden.
 * Returns 0, or -1 when out of memory (what it took stays in <n>, for
 * sinks_next_free()). */
static int token_env_prepare(struct sinks_next *n, char *const *had, size_t nhad,
                             const struct policy *p)
{
    size_t refs = p->nagents + p->alerts.nsinks;
    if (refs >= SIZE_MAX / sizeof(*n->token_env) - nhad)
        return -1;
    if ((n->token_env = zalloc((nhad + refs + 1) * sizeof(*n->token_env))) == NULL)
        return -1;
    for (size_t i = 0; i < nhad; i++)
        if ((n->token_env[n->ntoken_env++] = zalloc_text(had[i])) == NULL)
            return -1;
    for (size_t i = 0; i < p->nagents; i++)
        if (token_env_add(n, p->agents[i].token_ref) < 0)
            return -1;
    for (size_t i = 0; i < p->alerts.nsinks; i++)
        if (token_env_add(n, p->alerts.sinks[i].env_ref) < 0)
            return -1;
    return 0;
}

/* The exec sinks' programs: a path listed twice (warned of) is one program,
 * its alerts' share of the runner's caps one. */
static size_t distinct_execs(const struct watch *w)
{
    size_t n = 0;
    for (size_t i = 0; i < w->nexecs; i++) {
        size_t j = 0;
        while (j < i && strcmp(w->execs[j], w->execs[i]) != 0)
            j++;
        n += j == i;
    }
    return n;
}

static void sinks_next_free(struct sinks_next *n)
{
    free_names(n->execs, n->nexecs);
    free_names(n->token_env, n->ntoken_env);
    free(n->hooks);
    free(n->fresh);
    webhook_tls_ca_free(n->ca);
    *n = (struct sinks_next){0};
}

/* Fills <n> for <p>'s sinks, and the variables hidden from them with the
 * <nhad> names <had> hidden now. Returns 0, or -1 when out of memory (<n>
 * then empty). Through zalloc(), not calloc() and strdup(): the unit test
 * fails each of these allocations (test_watch_reload). */
static int sinks_next_prepare(struct sinks_next *n, const struct policy *p, char *const *had,
                              size_t nhad)
{
    const struct alerts_cfg *ac = &p->alerts;
    *n = (struct sinks_next){0};
    if (ac->nsinks >= SIZE_MAX / sizeof(*n->hooks))
        return -1;
    size_t room = (ac->nsinks + 1) * sizeof(*n->hooks);
    if ((n->execs = zalloc(room)) == NULL || (n->hooks = zalloc(room)) == NULL ||
        (n->fresh = zalloc(room)) == NULL)
        goto oom;
    for (size_t i = 0; i < ac->nsinks; i++) {
        const struct sink *s = &ac->sinks[i];
        if (s->kind != SINK_EXEC)
            continue;
        if ((n->execs[n->nexecs++] = zalloc_text(s->target)) == NULL)
            goto oom;
    }
    if (token_env_prepare(n, had, nhad, p) < 0)
        goto oom;
    return 0;
oom:
    sinks_next_free(n);
    return -1;
}

/* Has the writer keep the newest STORE_KEPT_MAX of the stored alerts no
 * sink takes, those in force and those a reload took out with an alert in
 * flight (whose row the answer deletes or keeps) counting as taken: a
 * reload that removes sinks would otherwise leave all their rows, up to
 * SINK_WEBHOOK_STORED_MAX each, until the next start, and a gateway
 * reloaded again and again, each time without a sink that could not
 * deliver, would grow its store with every reload. Off the loop: the
 * trim is a write like the others. */
static void trim_unconfigured_later(struct watch *w)
{
    size_t n = w->nhooks + w->nretired;
    if (w->store == NULL || n > STORE_TRIM_SINKS_MAX)
        return; /* more sinks than the start trims: left to it */
    const char **keys = calloc(n + 1, sizeof(*keys));
    if (keys == NULL) {
        fprintf(stderr,
                "sluice: state %s: out of memory: the stored alerts of webhooks no "
                "longer configured are kept until the next reload or start\n",
                store_shown(w->store));
        return;
    }
    for (size_t i = 0; i < w->nhooks; i++)
        keys[i] = webhook_store_key(w->hooks[i]);
    for (size_t i = 0; i < w->nretired; i++)
        keys[w->nhooks + i] = webhook_store_key(w->retired[i]);
    if (store_queue_trim_later(w->store, keys, n, STORE_KEPT_MAX) < 0)
        fprintf(stderr,
                "sluice: state %s: the trim of the stored alerts of webhooks no "
                "longer configured is dropped (its writes are over their caps); they "
                "are kept until the next reload or start\n",
                store_shown(w->store));
    free(keys);
}

/* webhook_retire()'s <over>: the attempt the sink had in flight when it
 * left the policy is over. Its rows are now like any removed sink's. */
static void retired_sink_over(struct webhook *h, void *arg)
{
    struct watch *w = arg;
    for (size_t i = 0; i < w->nretired; i++)
        if (w->retired[i] == h) {
            w->retired[i] = w->retired[--w->nretired];
            break;
        }
    webhook_free(h);
    trim_unconfigured_later(w);
}

/* A sink no longer configured: one with an alert in flight is let finish
 * it (its answer recorded, the row of a delivered alert deleted: a policy
 * naming the sink again would send it again otherwise); the others are
 * freed now. Their queue stays stored. */
static void sink_leaves(struct watch *w, struct webhook *h)
{
    if (webhook_in_flight(h)) {
        struct webhook **r = realloc(w->retired, (w->nretired + 1) * sizeof(*r));
        if (r != NULL) {
            w->retired = r;
            w->retired[w->nretired++] = h;
            webhook_retire(h, retired_sink_over, w);
            return;
        }
        fprintf(stderr,
                "sluice: webhook %s: out of memory: the alert in flight is cut (it stays "
                "in the state store, if any)\n",
                webhook_label(h));
    }
    webhook_say_lost(h, "when the sink left the policy", false);
    webhook_free(h);
}

/* A retired sink of <url>'s <listing>th listing, taken out of w->retired,
 * or NULL. */
static struct webhook *take_retired(struct watch *w, const char *url, unsigned listing)
{
    for (size_t i = 0; i < w->nretired; i++) {
        struct webhook *h = w->retired[i];
        if (strcmp(webhook_url(h), url) == 0 && webhook_listing(h) == listing) {
            w->retired[i] = w->retired[--w->nretired];
            webhook_revive(h);
            return h;
        }
    }
    return NULL;
}

/* Puts <p>'s sinks in force, with what sinks_next_prepare() took for <p>
 * in w->next. */
static void configure_sinks(struct watch *w, const struct policy *p, bool first)
{
    const struct alerts_cfg *ac = &p->alerts;
    struct webhook **hooks = w->next.hooks, **fresh = w->next.fresh;
    size_t nhooks = 0, nfresh = 0;
    /* One TLS context for all the https:// sinks this load adds: each
     * built its own before, reading the whole CA store on the loop. */
    struct webhook_tls_ca *ca = w->next.ca;
    bool ca_tried = ca != NULL;
    /* first: even when the sinks stay as they were; the runner takes the
     * new list before the old one is freed */
    char **had = w->token_env;
    size_t nhad = w->ntoken_env;
    w->token_env = w->next.token_env;
    w->ntoken_env = w->next.ntoken_env;
    if (w->exec != NULL)
        exec_runner_hide_env(w->exec, (const char *const *)w->token_env, w->ntoken_env);
    free_names(had, nhad);
    free_execs(w);
    w->execs = w->next.execs;
    w->nexecs = w->next.nexecs;
    w->next = (struct sinks_next){0}; /* taken over */
    for (size_t i = 0; i < ac->nsinks; i++) {
        const struct sink *s = &ac->sinks[i];
        if (s->kind == SINK_EXEC)
            continue; /* in w->execs */
        struct webhook *keep = NULL;
        for (size_t j = 0; j < w->nhooks; j++)
            if (w->hooks[j] != NULL && strcmp(webhook_url(w->hooks[j]), s->target) == 0) {
                keep = w->hooks[j];
                w->hooks[j] = NULL;
                break;
            }
        if (keep == NULL) {
            char *err = NULL;
            /* The Nth listing of its URL: the kept sinks of the URL are the
             * first ones, in order (matched in order above). */
            unsigned listing = 1;
            for (size_t j = 0; j < nhooks; j++)
                listing += strcmp(webhook_url(hooks[j]), s->target) == 0;
            /* one that left with an alert in flight goes on: a new one
             * would send that alert again */
            keep = take_retired(w, s->target, listing);
            if (keep != NULL) {
                hooks[nhooks++] = keep;
                continue;
            }
            if (!ca_tried && weburl_is_https(s->target)) {
                /* the start, or a reload whose thread read none: once */
                ca = webhook_tls_ca_new();
                ca_tried = true;
            }
            keep = webhook_new(w->base, s->target, w->store, ca, &err);
            if (keep != NULL && webhook_set_listing(keep, listing) < 0) {
                char buf[600];
                snprintf(buf, sizeof(buf), "webhook %s: out of memory", webhook_label(keep));
                webhook_free(keep);
                keep = NULL;
                err = strdup(buf);
            }
            if (keep == NULL) {
                fprintf(stderr, "sluice: %s:%d: alerts.sinks: %s\n",
                        p->path != NULL ? p->path : "policy", s->line, err ? err : "error");
                free(err);
                continue;
            }
            fresh[nfresh++] = keep;
        }
        hooks[nhooks++] = keep;
    }
    bool left = false;
    for (size_t j = 0; j < w->nhooks; j++) {
        if (w->hooks[j] != NULL) {
            sink_leaves(w, w->hooks[j]);
            left = true;
        }
    }
    free(w->hooks);
    w->hooks = hooks;
    w->nhooks = nhooks;
    if (left && !first)
        trim_unconfigured_later(w);
    if (w->nexecs > 0 && w->exec == NULL) {
        w->exec = exec_runner_new(w->base);
        if (w->exec == NULL)
            fprintf(stderr, "sluice: alert sinks: cannot watch child processes; exec sinks off "
                            "(their alerts are dropped, counted in sluice_exec_dropped_total, "
                            "until a reload can)\n");
        else
            exec_runner_hide_env(w->exec, (const char *const *)w->token_env, w->ntoken_env);
    }
    if (w->exec != NULL)
        exec_runner_programs(w->exec, distinct_execs(w));
    webhook_tls_ca_free(ca); /* the sinks hold their references */
    for (size_t i = 0; i < nfresh; i++)
        webhook_adopt_stored(fresh[i]); /* each its oldest, what its memory holds */
    if (first && w->store != NULL)
        say_unmatched(w);
    free(fresh);
}

/* ---- metrics extras ------------------------------------------------------- */

/* The alerts waiting for and dropped by the webhook w->hooks[i], summed
 * over every sink of its label: a URL listed twice (a warning) is two
 * sinks, and a series must appear once in a scrape (Prometheus drops the
 * repeat, with its counts). False when an earlier sink has the label: its
 * series is written there. */
static bool sink_totals(const struct watch *w, size_t i, uint64_t *waiting, uint64_t *dropped)
{
    const char *label = webhook_label(w->hooks[i]);
    for (size_t j = 0; j < i; j++)
        if (strcmp(webhook_label(w->hooks[j]), label) == 0)
            return false;
    *waiting = *dropped = 0;
    for (size_t j = i; j < w->nhooks; j++)
        if (strcmp(webhook_label(w->hooks[j]), label) == 0) {
            *waiting += webhook_waiting(w->hooks[j]);
            *dropped += webhook_dropped(w->hooks[j]);
        }
    return true;
}

/* 0, or -1 when a write failed (metrics_extra_fn). */
static int extra_metrics(void *arg, struct evbuffer *o)
{
    struct watch *w = arg;
    bool bad = false;
    bad |= evbuffer_add_printf(
               o, "# HELP sluice_webhook_queue Alerts waiting for a webhook (in memory, "
                  "and in the state store only beyond the memory queue).\n"
                  "# TYPE sluice_webhook_queue gauge\n") < 0;
    for (size_t i = 0; i < w->nhooks; i++) {
        uint64_t waiting, dropped;
        if (!sink_totals(w, i, &waiting, &dropped))
            continue;
        bad |= evbuffer_add_printf(o, "sluice_webhook_queue{sink=") < 0;
        bad |= metrics_put_label(o, webhook_label(w->hooks[i])) != 0;
        bad |= evbuffer_add_printf(o, "} %llu\n", (unsigned long long)waiting) < 0;
    }
    bad |=
        evbuffer_add_printf(o,
                            "# HELP sluice_webhook_dropped_total Alerts a webhook dropped (memory "
                            "queue full without a state store, or over %d waiting with one).\n"
                            "# TYPE sluice_webhook_dropped_total counter\n",
                            SINK_WEBHOOK_STORED_MAX) < 0;
    for (size_t i = 0; i < w->nhooks; i++) {
        uint64_t waiting, dropped;
        if (!sink_totals(w, i, &waiting, &dropped))
            continue;
        bad |= evbuffer_add_printf(o, "sluice_webhook_dropped_total{sink=") < 0;
        bad |= metrics_put_label(o, webhook_label(w->hooks[i])) != 0;
        bad |= evbuffer_add_printf(o, "} %llu\n", (unsigned long long)dropped) < 0;
    }
    /* at start, and by the writer after reloads */
    uint64_t unconfigured =
        w->kept_dropped + (w->store != NULL ? store_queue_trimmed(w->store) : 0);
    bad |= evbuffer_add_printf(o,
                               "# HELP sluice_webhook_unconfigured_dropped_total Stored alerts "
                               "of webhooks no longer configured dropped at start or after a "
                               "reload (over %d kept).\n"
                               "# TYPE sluice_webhook_unconfigured_dropped_total counter\n"
                               "sluice_webhook_unconfigured_dropped_total %llu\n",
                               STORE_KEPT_MAX, (unsigned long long)unconfigured) < 0;
    bad |= evbuffer_add_printf(
               o,
               "# HELP sluice_exec_dropped_total Alerts not given to an exec sink (over "
               "%d running or waiting, or the exec sinks off).\n"
               "# TYPE sluice_exec_dropped_total counter\n"
               "sluice_exec_dropped_total %llu\n",
               SINK_EXEC_MAX_RUNNING + SINK_EXEC_MAX_WAITING,
               (unsigned long long)(w->exec_off_dropped +
                                    (w->exec != NULL ? exec_runner_dropped(w->exec) : 0))) < 0;
    bad |= evbuffer_add_printf(o,
                               "# HELP sluice_stderr_dropped_lines_total Lines to standard error "
                               "dropped (it was not read fast enough).\n"
                               "# TYPE sluice_stderr_dropped_lines_total counter\n"
                               "sluice_stderr_dropped_lines_total %llu\n",
                               (unsigned long long)stderr_relay_dropped()) < 0;
    if (w->store == NULL)
        return bad ? -1 : 0;
    bad |=
        evbuffer_add_printf(
            o,
            "# HELP sluice_state_pending_writes Writes waiting for a commit to the "
            "state store.\n"
            "# TYPE sluice_state_pending_writes gauge\n"
            "sluice_state_pending_writes %zu\n"
            "# HELP sluice_state_pending_bytes Bytes of text (alert bodies, names) the "
            "writes waiting for a commit hold.\n"
            "# TYPE sluice_state_pending_bytes gauge\n"
            "sluice_state_pending_bytes %zu\n"
            "# HELP sluice_state_dropped_writes_total Writes the state store dropped "
            "(over %u, or %u MiB, waiting, or out of memory).\n"
            "# TYPE sluice_state_dropped_writes_total counter\n"
            "sluice_state_dropped_writes_total %llu\n",
            store_pending(w->store), store_pending_bytes(w->store), (unsigned)STORE_PENDING_MAX,
            (unsigned)(STORE_PENDING_BYTES >> 20), (unsigned long long)store_dropped(w->store)) < 0;
    return bad ? -1 : 0;
}

static void log_gauges(struct metrics_log *m, const char *name, const struct log_jsonl *l)
{
    m->name = name;
    m->error = log_jsonl_error(l);
    m->dropped = log_jsonl_dropped(l);
    m->pending = log_jsonl_pending_bytes(l);
}

static void gauges(void *arg, struct metrics_gauges *g)
{
    struct watch *w = arg;
    if (w->gauges != NULL)
        w->gauges(w->gauges_arg, g);
    g->nlogs = 0;
    if (w->log != NULL)
        log_gauges(&g->logs[g->nlogs++], "decisions", w->log);
    if (w->own_file && w->file != NULL)
        log_gauges(&g->logs[g->nlogs++], "alerts", w->file);
    g->state_broken = store_broken(w->store);
    /* a static text too, naming no path */
    g->state_stuck = w->opener != NULL ? store_opener_why(w->opener) : store_stuck(w->store);
    if (w->opener != NULL && store_opener_waits_for_predecessor(w->opener, monotonic_ms())) {
        g->state_waiting = g->state_stuck;
        g->state_stuck = NULL;
    }
    if (w->nexecs > 0 && w->exec == NULL)
        g->exec_off = "off: the gateway cannot watch its child processes (out of memory?); "
                      "their alerts are dropped until a reload can (SIGHUP)";
}

void watch_set_gauges(struct watch *w, metrics_gauges_fn fn, void *arg)
{
    w->gauges = fn;
    w->gauges_arg = arg;
}

/* ---- life cycle ------------------------------------------------------------ */

static void load_counter(const char *name, uint64_t value, void *arg)
{
    struct metrics *m = arg;
    if (strncmp(name, "alerts.", 7) != 0)
        return;
    for (int k = 0; k < ALERT_KIND_COUNT; k++)
        if (strcmp(name + 7, alert_kind_name((enum alert_kind)k)) == 0)
            /* added: a store opened during the run adds to what it counted */
            metrics_set_alert_total(m, (enum alert_kind)k,
                                    metrics_alert_total(m, (enum alert_kind)k) + value);
}

struct watch *watch_new(struct event_base *base, struct bus *bus, struct alert_bus *alerts,
                        const struct watch_config *cfg, struct log_jsonl *log,
                        const struct policy *p, char *err, size_t errlen)
{
    struct watch *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* one reading for the grant gauges and the detectors' day: read apart,
     * a midnight between them would leave the gauges a day behind */
    int64_t start_ms = now_ms();
    w->exit_flush_ms = FLUSH_MS;
    w->base = base;
    w->alerts = alerts;
    w->log = log;
    if (cfg->state_dir != NULL) {
        char *e = NULL, *warn = NULL;
        enum store_held held = STORE_FREE;
        w->store = store_open_try(cfg->state_dir, cfg->state_user, &e, &warn, &held);
        if (warn != NULL)
            fprintf(stderr, "sluice: warning: %s\n", warn);
        if (w->store == NULL && held != STORE_FREE &&
            (w->opener = store_opener_start(cfg->state_dir, cfg->state_user, DETECT_CONTACTS_MAX,
                                            held)) != NULL)
            fprintf(stderr,
                    "sluice: warning: %s; trying again in the background (after 1 s, then up "
                    "to every 30 s): meanwhile first-contact memory, baselines and the webhook "
                    "queue are kept in memory, and written to the store once it opens\n",
                    e != NULL ? e : "state store locked");
        else if (w->store == NULL)
            fprintf(stderr,
                    "sluice: warning: %s; running without a state store (first-contact memory, "
                    "baselines and the webhook queue are kept in memory only)\n",
                    e != NULL ? e : "state store unavailable");
        free(e);
        free(warn);
    }
    w->metrics = metrics_new();
    w->det = detectors_new(alerts, w->store);
    w->tick = evtimer_new(base, on_tick, w);
    if (w->metrics == NULL || w->det == NULL || w->tick == NULL ||
        detectors_configure(w->det, p) < 0 ||
        sinks_next_prepare(&w->next, p, w->token_env, w->ntoken_env) < 0 ||
        metrics_set_policy(w->metrics, p, start_ms / 1000) < 0) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    if (w->store != NULL)
        store_load_counters(w->store, load_counter, w->metrics);
    metrics_set_gauges(w->metrics, gauges, extra_metrics, w);
    unsigned file_flags = cfg->files_no_links ? LOG_JSONL_NO_LINKS : 0;
    /* An --alerts that names the log's file by another path (./a.jsonl, a
     * link, /dev/stdout beside `--log -`) is the log's stream too: opened
     * again, one file would have two writers, two queues, two gauges. */
    if (cfg->alerts_path == NULL || log_same_file(cfg->alerts_path, cfg->log_path, file_flags)) {
        w->file = log;
    } else {
        char *e = NULL;
        w->file = log_jsonl_open(base, cfg->alerts_path, file_flags, &e);
        if (w->file == NULL) {
            snprintf(err, errlen, "--alerts: %s", e != NULL ? e : "cannot open");
            free(e);
            goto err;
        }
        w->own_file = true;
    }
    if (cfg->admin != NULL) {
        w->admin = admin_new(base, cfg->admin, w->metrics, err, errlen);
        if (w->admin == NULL)
            goto err;
    }
    if (bus_subscribe(bus, detectors_on_event, w->det) < 0 ||
        bus_subscribe(bus, metrics_on_event, w->metrics) < 0 ||
        alert_bus_subscribe(alerts, on_alert, w) < 0) {
        snprintf(err, errlen, "too many event subscribers");
        goto err;
    }
    struct timeval tv = {0, WATCH_TICK_MS * 1000};
    event_assign(w->tick, base, -1, EV_PERSIST, on_tick, w);
    evtimer_add(w->tick, &tv);
    w->policy = p;
    configure_sinks(w, p, true);
    detectors_grants(w->det, p, start_ms);
    return w;
err:
    watch_free(w);
    return NULL;
}

int watch_policy_prepare(struct watch *w, const struct policy *p, const char **what)
{
    if (w == NULL)
        return 0;
    if (detectors_prepare(w->det, p) < 0) {
        *what = "alert detectors";
        return -1;
    }
    sinks_next_free(&w->next); /* a prepare never ended (none should be) */
    if (sinks_next_prepare(&w->next, p, w->token_env, w->ntoken_env) < 0) {
        detectors_abandon(w->det);
        *what = "alert sinks";
        return -1;
    }
    w->prepared_ms = now_ms();
    if (metrics_policy_prepare(w->metrics, p, w->prepared_ms / 1000) < 0) {
        detectors_abandon(w->det);
        sinks_next_free(&w->next);
        *what = "grant gauges";
        return -1;
    }
    return 0;
}

void watch_policy_ca(struct watch *w, struct webhook_tls_ca *ca)
{
    if (w == NULL) {
        webhook_tls_ca_free(ca);
        return;
    }
    webhook_tls_ca_free(w->next.ca);
    w->next.ca = ca;
}

struct webhook_tls_ca *watch_ca_for(const struct policy *p)
{
    for (size_t i = 0; i < p->alerts.nsinks; i++)
        if (p->alerts.sinks[i].kind != SINK_EXEC && weburl_is_https(p->alerts.sinks[i].target))
            return webhook_tls_ca_new();
    return NULL;
}

void watch_policy_abandon(struct watch *w)
{
    if (w == NULL)
        return;
    detectors_abandon(w->det);
    sinks_next_free(&w->next);
    metrics_policy_abandon(w->metrics);
}

void watch_policy_loaded(struct watch *w, const struct policy *p)
{
    if (w == NULL)
        return;
    detectors_commit(w->det); /* watch_policy_prepare()'s: cannot fail */
    w->policy = p;
    configure_sinks(w, p, false);
    metrics_policy_commit(w->metrics); /* watch_policy_prepare()'s too */
    detectors_grants(w->det, p, w->prepared_ms);
}

const char *watch_exec_sink(const struct watch *w, size_t i)
{
    return i < w->nexecs ? w->execs[i] : NULL;
}

struct metrics *watch_metrics(struct watch *w)
{
    return w->metrics;
}

const struct listen_addr *watch_admin_addr(const struct watch *w)
{
    return w->admin != NULL ? admin_addr(w->admin) : NULL;
}

const char *watch_token_env(const struct watch *w, size_t i)
{
    return i < w->ntoken_env ? w->token_env[i] : NULL;
}

void watch_reopen(struct watch *w)
{
    if (w != NULL && w->own_file)
        log_jsonl_reopen_soon(w->file, "sluice: cannot reopen the alerts file; still writing to "
                                       "the old one\n");
}

/* ---- stopping ---------------------------------------------------------------- */

/* True while stopping now would lose an alert a sink has: an exec program
 * running or waiting to run, a webhook alert that only memory holds (one in
 * the state store is delivered after the restart; one whose row waits for a
 * commit is not there yet: a store locked by another process, a full disk);
 * or while a webhook has a POST in flight: cut, its alert would go again
 * after the restart to a server that may have taken it; let finish, its
 * answer is recorded (no new one starts for stored alerts: webhook_stopping()). */
static bool sinks_hold_alerts(const struct watch *w)
{
    if (w->exec != NULL && exec_runner_busy(w->exec) > 0)
        return true;
    for (size_t i = 0; i < w->nhooks; i++)
        if (webhook_unstored(w->hooks[i], true) > 0 || webhook_in_flight(w->hooks[i]))
            return true;
    return w->nretired > 0;
}

static void on_drain_check(evutil_socket_t fd, short what, void *arg)
{
    struct watch *w = arg;
    (void)fd;
    (void)what;
    if (!sinks_hold_alerts(w) || (int64_t)monotonic_ms() >= w->drain_until_ms)
        event_base_loopbreak(w->base);
}

/* The stop waits for <h>'s POST in flight, if any: said, as the stop takes
 * that long. */
static void say_in_flight_at_stop(const struct webhook *h, unsigned timeout_ms)
{
    if (webhook_in_flight(h))
        fprintf(stderr,
                "sluice: webhook %s: a POST is in flight at the stop: its answer is waited for "
                "(at most %u ms)\n",
                webhook_label(h), timeout_ms);
}

/* At exit, <h>'s POST still in flight is cut: said, with what becomes of
 * its alert (webhook_say_lost() tells of those in no store). */
static void say_cut_at_exit(const struct webhook *h, bool stored)
{
    if (webhook_in_flight(h) && stored)
        fprintf(stderr,
                "sluice: webhook %s: the POST in flight was not answered before the exit: cut; "
                "its alert, if the state store holds it, goes again at the next start\n",
                webhook_label(h));
}

void watch_drain(struct watch *w, unsigned timeout_ms)
{
    if (w == NULL)
        return;
    detectors_flush(w->det, now_ms()); /* the open summaries; baselines as of now */
    if (w->store != NULL && store_dirty(w->store))
        store_flush(w->store); /* the rows written now are not waited for */
    w->drain_until_ms = (int64_t)monotonic_ms() + timeout_ms;
    for (size_t i = 0; i < w->nhooks; i++) {
        webhook_stopping(w->hooks[i]);
        say_in_flight_at_stop(w->hooks[i], timeout_ms);
    }
    for (size_t i = 0; i < w->nretired; i++)
        say_in_flight_at_stop(w->retired[i], timeout_ms);
    if (sinks_hold_alerts(w) &&
        (w->drain_check = event_new(w->base, -1, EV_PERSIST, on_drain_check, w)) != NULL) {
        struct timeval tv = {0, DRAIN_CHECK_MS * 1000};
        event_add(w->drain_check, &tv);
        event_base_dispatch(w->base); /* the sinks' events, the alerts file's writes */
        event_free(w->drain_check);
        w->drain_check = NULL;
    }
    /* The alerts file's last flush: what is left, and at least FLUSH_MS. */
    int64_t left = w->drain_until_ms - (int64_t)monotonic_ms();
    w->exit_flush_ms = left > FLUSH_MS ? (int)left : FLUSH_MS;
}

uint64_t watch_free(struct watch *w)
{
    if (w == NULL)
        return 0;
    if (w->det != NULL)
        detectors_flush(w->det, now_ms()); /* the open summaries; baselines as of now */
    if (w->tick != NULL)
        event_free(w->tick);
    admin_free(w->admin);
    /* The last commit, before the webhooks tell what is lost: an alert whose
     * row it could not write is in no store. */
    if (w->store != NULL && store_dirty(w->store))
        store_sync(w->store);
    for (size_t i = 0; i < w->nhooks; i++) {
        say_cut_at_exit(w->hooks[i], w->store != NULL);
        webhook_say_lost(w->hooks[i], "at exit", true);
        webhook_free(w->hooks[i]);
    }
    free(w->hooks);
    for (size_t i = 0; i < w->nretired; i++) {
        say_cut_at_exit(w->retired[i], w->store != NULL);
        webhook_say_lost(w->retired[i], "at exit", true);
        webhook_free(w->retired[i]); /* its attempt cut: the row stays */
    }
    free(w->retired);
    exec_runner_free(w->exec);
    free_execs(w);
    sinks_next_free(&w->next);
    free_names(w->token_env, w->ntoken_env); /* after the runner, which borrowed them */
    uint64_t lost = 0;
    if (w->own_file) {
        log_jsonl_flush(w->file, w->exit_flush_ms);
        lost = log_jsonl_close(w->file);
    }
    detectors_free(w->det);
    metrics_free(w->metrics);
    store_opener_free(w->opener);
    store_close(w->store);
    free(w);
    return lost;
}

/* The nameserver lines of /etc/resolv.conf, at least 1 and at most
 * WEBHOOK_DNS_SERVERS: the sockets of a webhook's resolver
 * (webhook_dns.h; 127.0.0.1 when there is none). */
static size_t resolv_conf_servers(void)
{
    FILE *f = fopen("/etc/resolv.conf", "re");
    size_t n = 0;
    char line[512];
    if (f == NULL)
        return 1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "nameserver", 10) == 0 && (line[10] == ' ' || line[10] == '\t'))
            n++;
    fclose(f);
    return n == 0 ? 1 : n < WEBHOOK_DNS_SERVERS ? n : WEBHOOK_DNS_SERVERS;
}

/* The descriptors of a webhook sink of <url>: its connection and, for a
 * URL naming a host rather than an address, its resolver's sockets
 * (<*per_named>, read from resolv.conf once, 0 until then). 1 for a URL
 * that does not parse (counted, not opened). */
static size_t webhook_url_fds(const char *url, size_t *per_named)
{
    struct weburl u;
    const char *why;
    unsigned char ip[16];
    char host[WEBURL_HOST_MAX + 1];
    if (weburl_parse(url, &u, &why) < 0 || u.host_len >= sizeof(host))
        return 1;
    memcpy(host, u.host, u.host_len);
    host[u.host_len] = '\0';
    if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1)
        return 1;
    if (*per_named == 0)
        *per_named = resolv_conf_servers();
    return 1 + *per_named;
}

/* How many times <p> lists the webhook <url>. */
static unsigned listings_of(const struct policy *p, const char *url)
{
    unsigned n = 0;
    for (size_t i = 0; i < p->alerts.nsinks; i++)
        n += p->alerts.sinks[i].kind != SINK_EXEC && strcmp(p->alerts.sinks[i].target, url) == 0;
    return n;
}

/* A sink <p> does not list (its URL listed fewer times than its listing)
 * that holds descriptors <p>'s count leaves out: one retired, or one in
 * force with a POST in flight that <p> would retire. */
static bool outlives_policy(const struct webhook *h, const struct policy *p)
{
    return webhook_listing(h) > listings_of(p, webhook_url(h));
}

size_t watch_sink_fds(const struct watch *w, const struct policy *p)
{
    size_t n = 0, per_named = 0;
    bool exec = false;
    for (size_t i = 0; i < p->alerts.nsinks; i++) {
        const struct sink *s = &p->alerts.sinks[i];
        if (s->kind == SINK_EXEC)
            exec = true;
        else
            n += webhook_url_fds(s->target, &per_named);
    }
    /* Retired sinks hold their connection and resolver until their POST is
     * over (at most SINK_WEBHOOK_TIMEOUT_S): beyond <p>'s sinks. Called
     * before watch_policy_loaded(), the sinks in force with a POST in
     * flight that <p> removes are about to be retired. */
    for (size_t i = 0; w != NULL && i < w->nretired; i++)
        if (outlives_policy(w->retired[i], p))
            n += webhook_url_fds(webhook_url(w->retired[i]), &per_named);
    for (size_t i = 0; w != NULL && i < w->nhooks; i++)
        if (w->hooks[i] != NULL && webhook_in_flight(w->hooks[i]) &&
            outlives_policy(w->hooks[i], p))
            n += webhook_url_fds(webhook_url(w->hooks[i]), &per_named);
    /* + 4: the pipe handed to the next program and the spawner's wake pipe */
    return n + (exec ? SINK_EXEC_MAX_RUNNING + 4 : 0);
}
