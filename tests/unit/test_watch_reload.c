/* Unit tests for watch/watch.c at a reload short of memory: the alert
 * sinks of the policy in force are the old policy's or the new one's,
 * whole, never some of them (zalloc() is interposed here). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "watch/alert.h"
#include "watch/bus.h"
#include "watch/watch.h"
#include "zalloc_countdown.h"

struct fx {
    struct event_base *base;
    struct bus bus;
    struct alert_bus alerts;
    struct watch *w;
};

/* A policy whose alerts go to the exec sinks <paths> (NULL-terminated). */
static struct policy policy_of(struct sink *sinks, char *const *paths)
{
    struct policy p = {0};
    p.alerts.present = true;
    p.alerts.expiry_warn_days = 14; /* the loader's default */
    for (size_t i = 0; paths[i] != NULL; i++)
        sinks[p.alerts.nsinks++] =
            (struct sink){.kind = SINK_EXEC, .target = paths[i], .line = (int)i + 1};
    p.alerts.sinks = sinks;
    return p;
}

/* True when the exec sinks in force are <paths>, in order. */
static bool sinks_are(const struct watch *w, char *const *paths)
{
    size_t i = 0;
    for (; paths[i] != NULL; i++)
        if (watch_exec_sink(w, i) == NULL || strcmp(watch_exec_sink(w, i), paths[i]) != 0)
            return false;
    return watch_exec_sink(w, i) == NULL;
}

/* A watch of the policy <p>, on an event loop of its own, in <f>. */
static void fx_start(struct fx *f, const struct policy *p)
{
    *f = (struct fx){0};
    f->base = event_base_new();
    assert_non_null(f->base);
    bus_init(&f->bus);
    alert_bus_init(&f->alerts);
    struct watch_config cfg = {0};
    char err[256] = "";
    f->w = watch_new(f->base, &f->bus, &f->alerts, &cfg, NULL, p, err, sizeof(err));
    assert_non_null(f->w);
}

static void fx_end(struct fx *f)
{
    watch_free(f->w);
    event_base_free(f->base);
}

/* A reload to <p> whose allocations after the next <n> fail (out of
 * memory): its prepare, then its load or its abandon. Returns the
 * prepare's result, and what it named in <what> when it failed. */
static int reload_failing_after(struct fx *f, const struct policy *p, unsigned n, const char **what)
{
    zalloc_failures = 0;
    zalloc_left = n;
    zalloc_failing = true;
    *what = NULL;
    int rc = watch_policy_prepare(f->w, p, what);
    if (rc == 0)
        watch_policy_loaded(f->w, p);
    else
        watch_policy_abandon(f->w);
    zalloc_failing = false;
    return rc;
}

static char *const OLD[] = {"/usr/local/bin/page-oncall", "/usr/local/bin/ticket", NULL};
static char *const NEW[] = {"/opt/a", "/opt/b", "/opt/c", NULL};

/* Each allocation of a reload fails in turn: the reload is refused (the old
 * sinks stay, all of them; the refusal names the sinks, or the grant gauges
 * once the sinks had theirs) or it is done (the new sinks, all of them).
 * Before, the exec sinks' list was freed, then made again after the policy
 * came into force: out of memory, every exec sink (or some) was gone while
 * the gateway said "reloaded". */
static void reload_short_of_memory_keeps_the_sinks_whole(void **state)
{
    (void)state;
    struct sink old_sinks[4], new_sinks[4];
    struct policy old = policy_of(old_sinks, OLD), fresh = policy_of(new_sinks, NEW);
    struct fx f;
    fx_start(&f, &old);
    assert_true(sinks_are(f.w, OLD));
    unsigned refused = 0;
    bool sinks_said = false, gauges_said = false; /* what the refusals named */
    for (unsigned n = 0; n < 64; n++) {
        const char *what;
        int rc = reload_failing_after(&f, &fresh, n, &what);
        if (rc < 0) {
            refused++;
            assert_non_null(what);
            sinks_said |= strcmp(what, "alert sinks") == 0;
            gauges_said |= strcmp(what, "grant gauges") == 0;
            assert_true(sinks_are(f.w, OLD));
            continue;
        }
        assert_true(sinks_are(f.w, NEW));
        if (zalloc_failures == 0)
            break; /* every allocation of the reload was failed once */
        /* back to the old policy, with memory, for the next turn */
        assert_int_equal(watch_policy_prepare(f.w, &old, &what), 0);
        watch_policy_loaded(f.w, &old);
        assert_true(sinks_are(f.w, OLD));
    }
    assert_int_equal(zalloc_failures, 0); /* the loop ran out of allocations, not of turns */
    assert_true(refused > 0);
    assert_true(sinks_said && gauges_said);
    fx_end(&f);
}

/* True when the variables exec sinks' programs do not get are <names>, in
 * order. */
static bool hidden_are(const struct watch *w, const char *const *names)
{
    size_t i = 0;
    for (; names[i] != NULL; i++)
        if (watch_token_env(w, i) == NULL || strcmp(watch_token_env(w, i), names[i]) != 0)
            return false;
    return watch_token_env(w, i) == NULL;
}

/* Each allocation of a reload fails in turn, the new policy reading its
 * agents' tokens from variables the old one did not: the reload is refused
 * and the variables hidden from alert programs are the old policy's, or it
 * is done and they are both policies', all of them. Before, the list grew
 * after the policy came into force, one name at a time: out of memory, the
 * gateway said "reloaded" with some of the new variables not hidden from
 * the programs. */
static void reload_short_of_memory_keeps_the_hidden_variables_whole(void **state)
{
    (void)state;
    struct sink old_sinks[4], new_sinks[4];
    static char ci[] = "ci", b[] = "b", c[] = "c", a_ref[] = "env:OLD_A", b_ref[] = "env:NEW_B",
                c_ref[] = "env:NEW_C";
    struct agent old_agents[1] = {{.id = ci, .token_ref = a_ref}};
    struct agent new_agents[3] = {{.id = b, .token_ref = b_ref},
                                  {.id = ci, .token_ref = a_ref},
                                  {.id = c, .token_ref = c_ref}};
    struct policy old = policy_of(old_sinks, OLD), fresh = policy_of(new_sinks, NEW);
    old.agents = old_agents;
    old.nagents = 1;
    fresh.agents = new_agents;
    fresh.nagents = 3;
    static const char *const before[] = {"OLD_A", NULL};
    static const char *const after[] = {"OLD_A", "NEW_B", "NEW_C", NULL};
    unsigned refused = 0, done = 0;
    for (unsigned n = 0; n < 64; n++) {
        /* a gateway of the old policy for each turn: the list only grows */
        struct fx f;
        fx_start(&f, &old);
        assert_true(hidden_are(f.w, before));
        const char *what;
        int rc = reload_failing_after(&f, &fresh, n, &what);
        if (rc < 0) {
            refused++;
            assert_true(hidden_are(f.w, before));
        } else {
            done++;
            assert_true(hidden_are(f.w, after));
        }
        fx_end(&f);
        if (zalloc_failures == 0)
            break; /* every allocation of the reload was failed once */
    }
    assert_int_equal(zalloc_failures, 0); /* the loop ran out of allocations, not of turns */
    assert_true(refused > 0 && done == 1);
}

/* A loopback listener that never accepts nor answers: the kernel takes a
 * webhook's connection and POST, which then stays in flight. Its port in
 * <*port>. */
static int silent_listener(unsigned *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, len), 0);
    assert_int_equal(listen(fd, 4), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A reload that removes a webhook sink with a POST in flight retires it:
 * until that POST is over, its connection is counted in the descriptors
 * the sinks may hold (the gate's fit of --max-conns), before the reload
 * (the gate fits before the sinks change) and after it, once only when a
 * later policy lists the sink again. */
static void a_retired_sink_counts_in_the_descriptors_of_the_sinks(void **state)
{
    (void)state;
    unsigned port;
    int lfd = silent_listener(&port);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/hook", port);
    struct sink hook = {.kind = SINK_WEBHOOK, .target = url, .line = 1};
    struct policy with = {0}, without = {0};
    with.alerts.present = without.alerts.present = true;
    with.alerts.expiry_warn_days = without.alerts.expiry_warn_days = 14;
    with.alerts.sinks = &hook;
    with.alerts.nsinks = 1;
    struct fx f;
    fx_start(&f, &with);
    assert_int_equal(watch_sink_fds(f.w, &with), 1);
    assert_int_equal(watch_sink_fds(f.w, &without), 0); /* nothing in flight */
    struct alert a = {.kind = ALERT_FIRST_CONTACT, .agent = "ci", .host = "x.test", .detail = "d"};
    alert_bus_publish(&f.alerts, &a);
    /* in flight: the sink <without> removes holds its connection */
    uint64_t until = now_ms() + 3000; /* within the POST's 5 s deadline */
    while (watch_sink_fds(f.w, &without) == 0 && now_ms() < until)
        event_base_loop(f.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_int_equal(watch_sink_fds(f.w, &without), 1);
    const char *what = NULL;
    assert_int_equal(watch_policy_prepare(f.w, &without, &what), 0);
    watch_policy_loaded(f.w, &without); /* retired, its POST still in flight */
    assert_int_equal(watch_sink_fds(f.w, &without), 1);
    assert_int_equal(watch_sink_fds(f.w, &with), 1); /* taken back, not twice */
    fx_end(&f);
    close(lfd);
}

/* <w>'s /metrics body, NUL-terminated; the caller frees it. */
static char *metrics_text(struct watch *w)
{
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    assert_int_equal(metrics_format(watch_metrics(w), b), 0);
    size_t n = evbuffer_get_length(b);
    char *text = calloc(1, n + 1);
    assert_non_null(text);
    evbuffer_remove(b, text, n);
    evbuffer_free(b);
    return text;
}

/* A reload that brings the first exec sinks and cannot make their runner
 * (out of memory; or no SIGCHLD watch) said "exec sinks off" once, and
 * every later alert skipped them unseen: sluice_exec_dropped_total stayed
 * 0 and /healthz said ok. Each alert not given to a sink is counted now,
 * and /healthz says the sinks are off until a reload makes the runner. */
static void exec_sinks_off_count_their_alerts_and_are_unhealthy(void **state)
{
    (void)state;
    struct sink none_sinks[1], sinks[4];
    char *const none[] = {NULL};
    struct policy without = policy_of(none_sinks, none), with = policy_of(sinks, NEW);
    struct fx f;
    fx_start(&f, &without);
    const char *what;
    unsigned n = 0;
    while (reload_failing_after(&f, &with, n, &what) != 0) /* the prepare's allocations */
        n++;
    assert_int_equal(zalloc_failures, 1); /* the first after the prepare's: the runner */
    assert_true(sinks_are(f.w, NEW));
    struct alert a = {.kind = ALERT_FIRST_CONTACT, .agent = "ci", .host = "x.test", .detail = "d"};
    alert_bus_publish(&f.alerts, &a);
    alert_bus_publish(&f.alerts, &a);
    char *text = metrics_text(f.w);
    assert_non_null(strstr(text, "\nsluice_exec_dropped_total 6\n")); /* 2 alerts, 3 sinks */
    free(text);
    char why[256] = "";
    assert_false(metrics_health(watch_metrics(f.w), why, sizeof(why)));
    assert_non_null(strstr(why, "exec sinks: off"));
    /* a reload with memory makes the runner: healthy, the count kept */
    assert_int_equal(watch_policy_prepare(f.w, &with, &what), 0);
    watch_policy_loaded(f.w, &with);
    assert_true(metrics_health(watch_metrics(f.w), why, sizeof(why)));
    text = metrics_text(f.w);
    assert_non_null(strstr(text, "\nsluice_exec_dropped_total 6\n"));
    free(text);
    fx_end(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reload_short_of_memory_keeps_the_sinks_whole),
        cmocka_unit_test(reload_short_of_memory_keeps_the_hidden_variables_whole),
        cmocka_unit_test(a_retired_sink_counts_in_the_descriptors_of_the_sinks),
        cmocka_unit_test(exec_sinks_off_count_their_alerts_and_are_unhealthy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
