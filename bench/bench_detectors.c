/* bench_detectors: the alert detectors' cost of one decision event with
 * DETECT_AGENTS_MAX (4096) agents tracked.
 *
 * write_burst is on (a window per agent, never tripped). Three mixes:
 *   tracked  events of the 4096 tracked agents, picked at random;
 *   churn    agents new to the full table, every other agent idle: each
 *            takes the place of the one seen longest ago;
 *   busy     agents new to the full table while all but one of the
 *            tracked agents are busy (seen before the idle one), each
 *            taking the idle one's place;
 *   busy1s   write_burst over 1 s (a threshold without per): a table of
 *            4096 agents that each write at least once a second, so none
 *            is ever idle, and an agent new to it every millisecond,
 *            which finds no place, for 2 s; its figure is the new agents'
 *            events alone (the tracked agents' five a millisecond are
 *            fed, not timed), with the agents examined per new agent
 *            (probes_per_event, every event counted) and the dearest
 *            new agent's event after the first 100 ms (max_ns; the first
 *            examines the whole table, whatever the way).
 * One line per mix: "detectors agents=4096 mix=M ns_per_event=X".
 * Then the metrics' counters (metrics_on_event()) with METRICS_AGENTS_MAX
 * agents counted: "metrics agents=4096 mix=tracked|past ns_per_event=X",
 * past being agents beyond the table, counted together. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "watch/detectors.h"
#include "watch/metrics.h"

#define EVENTS 200000
#define T0     1796065200000LL

static void on_alert(const struct alert *a, void *arg)
{
    (void)a;
    (*(unsigned long *)arg)++;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* An allowed request to a.test by <agent>. */
static struct egress_event event_of(const char *agent, const char *method)
{
    static const struct egress_event base = {.kind = EVENT_EGRESS,
                                             .id = "c1.1",
                                             .scheme = "http",
                                             .host = "a.test",
                                             .port = 80,
                                             .path = "/p",
                                             .tier = TIER_2};
    struct egress_event ev = base;
    ev.agent = agent;
    ev.method = method;
    ev.method_bit = method_bit(method);
    ev.verdict = VERDICT_ALLOW;
    ev.reason = REASON_NONE;
    return ev;
}

/* <n> GETs of agents new to the table, named PREFIX-i, from <t0> on, 100 a
 * millisecond. */
static void feed_new(struct detectors *d, const char *prefix, int64_t t0, long n)
{
    char id[32];
    for (long i = 0; i < n; i++) {
        snprintf(id, sizeof(id), "%s-%ld", prefix, i);
        struct egress_event ev = event_of(id, "GET");
        detectors_feed(d, &ev, t0 + i / 100);
    }
}

static void report(const char *what, const char *mix, double t0, long n)
{
    printf("%s agents=%d mix=%s ns_per_event=%.0f\n", what, DETECT_AGENTS_MAX, mix,
           (now_ns() - t0) / (double)n);
}

#define BUSY1S_MS      2000 /* the mix's length, in milliseconds */
#define BUSY1S_TRACKED 5    /* tracked agents' writes a millisecond: each once every 820 ms */

/* The busy1s mix (see the head), on detectors of their own. */
static int bench_busy1s(struct alert_bus *bus)
{
    struct policy p = {0};
    p.alerts.present = true;
    p.alerts.write_burst = (struct threshold){.set = true, .max = 1000000000, .per_ms = 1000};
    struct detectors *d = detectors_new(bus, NULL);
    if (d == NULL || detectors_configure(d, &p) != 0)
        return 1;
    char id[32];
    for (int i = 0; i < DETECT_AGENTS_MAX; i++) {
        snprintf(id, sizeof(id), "job-%d", i);
        struct egress_event ev = event_of(id, "POST");
        detectors_feed(d, &ev, T0 + i / BUSY1S_TRACKED);
    }
    int64_t t0 = T0 + DETECT_AGENTS_MAX / BUSY1S_TRACKED;
    long next = 0;
    double spent = 0, dearest = 0;
    uint64_t probes = 0;
    for (long ms = 0; ms < BUSY1S_MS; ms++) {
        for (int k = 0; k < BUSY1S_TRACKED; k++, next++) {
            snprintf(id, sizeof(id), "job-%ld", next % DETECT_AGENTS_MAX);
            struct egress_event ev = event_of(id, "POST");
            detectors_feed(d, &ev, t0 + ms);
        }
        snprintf(id, sizeof(id), "new-%ld", ms);
        struct egress_event ev = event_of(id, "GET");
        uint64_t before = detectors_agent_probes(d);
        double t = now_ns();
        detectors_feed(d, &ev, t0 + ms);
        t = now_ns() - t;
        probes += detectors_agent_probes(d) - before;
        spent += t;
        dearest = t > dearest && ms >= 100 ? t : dearest;
    }
    printf("detectors agents=%d mix=busy1s ns_per_event=%.0f probes_per_event=%.1f max_ns=%.0f\n",
           DETECT_AGENTS_MAX, spent / BUSY1S_MS, (double)probes / BUSY1S_MS, dearest);
    detectors_free(d);
    return 0;
}

/* <n> events of agents PREFIX-0 .. PREFIX-(<of> - 1) in turn, to the metrics. */
static void count(struct metrics *m, const char *prefix, long of, long n)
{
    char id[32];
    for (long i = 0; i < n; i++) {
        snprintf(id, sizeof(id), "%s-%ld", prefix, (i * 7919) % of);
        struct egress_event ev = event_of(id, "GET");
        metrics_on_event(&ev, m);
    }
}

static int bench_metrics(void)
{
    struct metrics *m = metrics_new();
    if (m == NULL)
        return 1;
    count(m, "job", METRICS_AGENTS_MAX, METRICS_AGENTS_MAX);
    double t = now_ns();
    count(m, "job", METRICS_AGENTS_MAX, EVENTS);
    report("metrics", "tracked", t, EVENTS);
    t = now_ns();
    count(m, "past", EVENTS, EVENTS);
    report("metrics", "past", t, EVENTS);
    metrics_free(m);
    return 0;
}

int main(void)
{
    unsigned long alerts = 0;
    struct alert_bus bus;
    alert_bus_init(&bus);
    alert_bus_subscribe(&bus, on_alert, &alerts);
    struct policy p = {0};
    p.alerts.present = true;
    p.alerts.expiry_warn_days = 14;
    p.alerts.write_burst = (struct threshold){.set = true, .max = 1000000000, .per_ms = 60000};
    struct detectors *d = detectors_new(&bus, NULL);
    if (d == NULL || detectors_configure(d, &p) != 0)
        return 1;
    char id[32];
    for (int i = 0; i < DETECT_AGENTS_MAX - 1; i++) {
        snprintf(id, sizeof(id), "job-%d", i);
        struct egress_event ev = event_of(id, "POST");
        detectors_feed(d, &ev, T0 + 1);
    }
    struct egress_event idle = event_of("idle", "GET");
    detectors_feed(d, &idle, T0 + 2);

    unsigned r = 1;
    double t = now_ns();
    for (long i = 0; i < EVENTS; i++) {
        r = r * 1103515245u + 12345u;
        snprintf(id, sizeof(id), "job-%u", (r >> 8) % (DETECT_AGENTS_MAX - 1));
        struct egress_event ev = event_of(id, "POST");
        detectors_feed(d, &ev, T0 + 3);
    }
    report("detectors", "tracked", t, EVENTS);

    t = now_ns();
    feed_new(d, "busy", T0 + 4, EVENTS / 10);
    report("detectors", "busy", t, EVENTS / 10);

    /* two minutes on, every window is empty */
    t = now_ns();
    feed_new(d, "new", T0 + 120000, EVENTS / 10);
    report("detectors", "churn", t, EVENTS / 10);
    detectors_free(d);
    if (bench_busy1s(&bus) != 0 || alerts > 1000000)
        return 1;
    return bench_metrics();
}
