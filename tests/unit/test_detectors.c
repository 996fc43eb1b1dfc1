/* Unit tests for watch/detectors.c on a fake clock: each detector's
 * threshold and window, folding, first-contact memory through a real store,
 * baselines, off hours and grant expiry. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "policy/zone.h"
#include "state/store.h"
#include "util/env.h"
#include "util/units.h"
#include "util/zalloc.h"
#include "watch/detectors.h"
#include "watch/window.h"

#define T0 1796065200000LL /* 2026-11-30T19:00:00Z, a Monday */
/* Working hours 08:00-19:00 UTC, Monday to Friday: T0 is their end. */
#define WEEKDAYS_8_TO_19_UTC                                                                       \
    ((struct off_hours_cfg){                                                                       \
        .set = true, .tz = "UTC", .start_min = 8 * 60, .end_min = 19 * 60, .days_mask = 0x1f})

struct got {
    int n[ALERT_KIND_COUNT];
    unsigned last_count;
    char last_detail[1200];
    char last_agent[64];
    char last_host[64];
    char last_id[64];
    enum alert_severity last_severity;
    enum alert_severity severity[ALERT_KIND_COUNT]; /* the last of each kind */
};

static void on_alert(const struct alert *a, void *arg)
{
    struct got *g = arg;
    g->n[a->kind]++;
    g->last_count = a->count;
    snprintf(g->last_detail, sizeof(g->last_detail), "%s", a->detail ? a->detail : "");
    snprintf(g->last_agent, sizeof(g->last_agent), "%s", a->agent ? a->agent : "(null)");
    snprintf(g->last_host, sizeof(g->last_host), "%s", a->host ? a->host : "(null)");
    snprintf(g->last_id, sizeof(g->last_id), "%s", a->id ? a->id : "(null)");
    g->last_severity = a->severity;
    g->severity[a->kind] = a->severity;
}

struct fx {
    struct alert_bus bus;
    struct got got;
    struct policy p;
    struct rule rules[2];
    struct detectors *d;
};

static struct egress_event ev_of(const char *agent, const char *method, const char *host,
                                 enum verdict v, enum deny_reason r, enum tier t)
{
    struct egress_event ev = {
        .kind = EVENT_EGRESS,
        .id = "c1.1",
        .agent = agent,
        .method = method,
        .method_bit = method_bit(method),
        .scheme = "http",
        .host = host,
        .port = 80,
        .path = "/p",
        .tier = t,
        .verdict = v,
        .reason = r,
    };
    return ev;
}

/* Feeds a GET of <agent> to <host> denied as not in the policy, seen at
 * <t>: a first contact when the pair is new. */
static void feed_denied_get(struct fx *f, const char *agent, const char *host, int64_t t)
{
    struct egress_event ev =
        ev_of(agent, "GET", host, VERDICT_DENY, REASON_NOT_IN_POLICY, TIER_NONE);
    detectors_feed(f->d, &ev, t);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    alert_bus_init(&f->bus);
    alert_bus_subscribe(&f->bus, on_alert, &f->got);
    f->p.alerts.present = true;
    f->p.alerts.expiry_warn_days = 14; /* the loader's default */
    f->p.rules = f->rules;
    f->d = detectors_new(&f->bus, NULL);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    detectors_free(f->d);
    free(f);
    return 0;
}

/* zalloc() for this program (util/zalloc.c is not linked in): fails every
 * call while <zalloc_failing>. */
static bool zalloc_failing;

void *zalloc(size_t n)
{
    if (zalloc_failing)
        return NULL;
    return calloc(1, n);
}

/* A reload whose settings the detectors have no memory for changes
 * nothing, and leaves nothing for a commit to put in force: the gateway
 * refuses it as a whole and the old thresholds stay, as the old policy
 * does. Prepared with memory, the commit puts the new ones in force. */
static void reload_out_of_memory_keeps_the_settings(void **state)
{
    struct fx *f = *state;
    f->p.alerts.write_burst = (struct threshold){.set = true, .max = 3, .per_ms = 10000};
    f->p.alerts.off_hours = (struct off_hours_cfg){.set = true, .tz = "UTC"};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    f->p.alerts.write_burst.max = 1; /* the reloaded policy's */
    zalloc_failing = true;
    int rc = detectors_prepare(f->d, &f->p);
    zalloc_failing = false;
    assert_int_equal(rc, -1);
    detectors_commit(f->d); /* nothing prepared: nothing changes */
    struct egress_event ev = ev_of("ci", "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    for (int i = 0; i < 3; i++)
        detectors_feed(f->d, &ev, T0 + i * 100);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 0); /* max 3 still */
    assert_int_equal(detectors_prepare(f->d, &f->p), 0);
    detectors_abandon(f->d);
    detectors_commit(f->d); /* abandoned: nothing changes */
    detectors_feed(f->d, &ev, T0 + 300);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 1); /* the 4th write is over 3 */
    assert_non_null(strstr(f->got.last_detail, "(max 3)"));
    assert_int_equal(detectors_prepare(f->d, &f->p), 0);
    detectors_commit(f->d);
    struct egress_event other = ev_of("bot", "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    detectors_feed(f->d, &other, T0 + 400);
    detectors_feed(f->d, &other, T0 + 500);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 2); /* the 2nd write is over 1 */
    assert_non_null(strstr(f->got.last_detail, "(max 1)"));
}

static void write_burst_threshold_and_fold(void **state)
{
    struct fx *f = *state;
    f->p.alerts.write_burst = (struct threshold){.set = true, .max = 3, .per_ms = 10000};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    struct egress_event ev = ev_of("ci", "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    for (int i = 0; i < 3; i++)
        detectors_feed(f->d, &ev, T0 + i * 100);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 0); /* 3 is not over 3 */
    detectors_feed(f->d, &ev, T0 + 400);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 1);
    assert_non_null(strstr(f->got.last_detail, "4 write requests within 10s (max 3)"));
    assert_non_null(strstr(f->got.last_detail, "the last: POST /p on a.test"));
    /* reads and denied writes do not count; more writes fold */
    struct egress_event get = ev_of("ci", "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    struct egress_event denied =
        ev_of("ci", "PUT", "a.test", VERDICT_DENY, REASON_METHOD_NOT_ALLOWED, TIER_NONE);
    detectors_feed(f->d, &get, T0 + 500);
    detectors_feed(f->d, &denied, T0 + 500);
    for (int i = 0; i < 5; i++)
        detectors_feed(f->d, &ev, T0 + 600 + i);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 1);
    assert_int_equal(detectors_folded(f->d), 5);
    detectors_tick(f->d, T0 + 10399);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 1);
    detectors_tick(f->d, T0 + 10400);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 2);
    assert_int_equal(f->got.last_count, 5);
    /* another agent has its own window */
    struct egress_event other =
        ev_of("bot", "DELETE", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    detectors_feed(f->d, &other, T0 + 10500);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 2);
    /* the window slid: 4 writes again are needed */
    for (int i = 0; i < 3; i++)
        detectors_feed(f->d, &ev, T0 + 30000 + i);
    detectors_tick(f->d, T0 + 30000);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 2);
}

static void denied_burst_and_upload(void **state)
{
    struct fx *f = *state;
    f->p.alerts.denied_burst = (struct threshold){.set = true, .max = 2, .per_ms = 60000};
    f->p.alerts.upload_bytes = (struct threshold){.set = true, .max = 1000, .per_ms = 60000};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    struct egress_event d =
        ev_of(NULL, "GET", "x.test", VERDICT_DENY, REASON_AUTH_REQUIRED, TIER_NONE);
    for (int i = 0; i < 5; i++)
        detectors_feed(f->d, &d, T0 + i); /* no agent: no per-agent window */
    assert_int_equal(f->got.n[ALERT_DENIED_BURST], 0);
    d.agent = "ci";
    for (int i = 0; i < 3; i++)
        detectors_feed(f->d, &d, T0 + i);
    assert_int_equal(f->got.n[ALERT_DENIED_BURST], 1);
    struct egress_event up = ev_of("ci", "POST", "x.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    up.kind = EVENT_EGRESS_PROGRESS;
    up.bytes_up = 600;
    detectors_feed(f->d, &up, T0);
    assert_int_equal(f->got.n[ALERT_UPLOAD_BYTES], 0);
    detectors_feed(f->d, &up, T0 + 100); /* 1200 > 1000, while still running */
    assert_int_equal(f->got.n[ALERT_UPLOAD_BYTES], 1);
    /* END's bytes_up is not counted again */
    up.kind = EVENT_EGRESS_END;
    up.bytes_up = 5000;
    detectors_feed(f->d, &up, T0 + 61000);
    detectors_tick(f->d, T0 + 200000);
    assert_int_equal(f->got.n[ALERT_UPLOAD_BYTES], 1);
}

/* A summary opens a period of its own, with no line, so that a storm
 * gives one line a period. But a new burst in that period, after the
 * window had gone back to max or under (a new incident, not the storm
 * going on), was folded into it too and told only at its end: with a
 * daily per, up to a day after it happened. It is written at once (the
 * repeats before it summarised first); a storm that goes on is still
 * folded, so a period holds at most a summary and one such line. */
static void a_new_burst_after_a_summary_is_told_at_once(void **state)
{
    struct fx *f = *state;
    f->p.alerts.write_burst = (struct threshold){.set = true, .max = 3, .per_ms = 3600000};
    f->p.alerts.denied_burst = (struct threshold){.set = true, .max = 3, .per_ms = 3600000};
    f->p.alerts.upload_bytes = (struct threshold){.set = true, .max = 1000, .per_ms = 3600000};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    struct egress_event w = ev_of("ci", "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    struct egress_event up = w;
    up.kind = EVENT_EGRESS_PROGRESS;
    up.bytes_up = 600;
    for (int i = 0; i < 5; i++) { /* over max at the 4th, the 5th folded */
        detectors_feed(f->d, &w, T0 + i);
        feed_denied_get(f, "ci", "no.test", T0 + i);
    }
    detectors_feed(f->d, &up, T0);
    detectors_feed(f->d, &up, T0 + 1);
    detectors_feed(f->d, &up, T0 + 2);
    detectors_tick(f->d, T0 + 3600010); /* the summaries: new periods, no lines */
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 2);
    assert_int_equal(f->got.n[ALERT_DENIED_BURST], 2);
    assert_int_equal(f->got.n[ALERT_UPLOAD_BYTES], 2);
    /* 90 minutes on, the first burst has left every window (1.1 x per at
     * most), half an hour into the summary's period: a new burst */
    int64_t t = T0 + 5400000;
    for (int i = 0; i < 4; i++) {
        detectors_feed(f->d, &w, t + i);
        feed_denied_get(f, "ci", "no.test", t + i);
    }
    detectors_feed(f->d, &up, t);
    detectors_feed(f->d, &up, t + 1);
    print_message("%d write_burst lines for a new burst after a summary\n",
                  f->got.n[ALERT_WRITE_BURST] - 2);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 3);
    assert_int_equal(f->got.last_count, 1);
    assert_int_equal(f->got.n[ALERT_DENIED_BURST], 3);
    assert_int_equal(f->got.n[ALERT_UPLOAD_BYTES], 3);
    /* the burst going on is folded, and so is another new one in the period */
    detectors_feed(f->d, &w, t + 10);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 3);
    detectors_tick(f->d, t + 3600010);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 4);
    assert_int_equal(f->got.last_count, 1);
    /* a period that ended quietly: the next burst opens one, told at once */
    t += 3 * 3600000;
    for (int i = 0; i < 4; i++)
        detectors_feed(f->d, &w, t + i);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 5);
}

/* upload_bytes counts the head of each request let through (allow or
 * report, a CONNECT's too) at its agent_egress, once: not a denied one's,
 * which went nowhere, nor a tunnel's decided again. bytes_up left heads
 * out, and so did the detector: 600-byte heads never added up. */
static void upload_counts_request_heads(void **state)
{
    struct fx *f = *state;
    f->p.alerts.upload_bytes = (struct threshold){.set = true, .max = 1000, .per_ms = 60000};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    struct egress_event get = ev_of("ci", "GET", "x.test", VERDICT_ALLOW, REASON_NONE, TIER_1);
    get.head_bytes = 600;
    detectors_feed(f->d, &get, T0);
    struct egress_event no =
        ev_of("ci", "GET", "y.test", VERDICT_DENY, REASON_NOT_IN_POLICY, TIER_NONE);
    no.head_bytes = 600;
    detectors_feed(f->d, &no, T0 + 1);
    struct egress_event again =
        ev_of("ci", "CONNECT", "x.test", VERDICT_ALLOW, REASON_NONE, TIER_1);
    again.head_bytes = 600;
    again.again = true;
    detectors_feed(f->d, &again, T0 + 2);
    assert_int_equal(f->got.n[ALERT_UPLOAD_BYTES], 0); /* 600 */
    struct egress_event tunnel = again;
    tunnel.again = false;
    tunnel.verdict = VERDICT_REPORT;
    tunnel.reason = REASON_NOT_IN_POLICY;
    detectors_feed(f->d, &tunnel, T0 + 3);
    assert_int_equal(f->got.n[ALERT_UPLOAD_BYTES], 1); /* 1200 */
    assert_non_null(strstr(f->got.last_detail, "ci sent 1200 bytes upstream"));
    /* The end line's (and progress events') head_bytes are not counted */
    struct egress_event end = get;
    end.kind = EVENT_EGRESS_END;
    detectors_feed(f->d, &end, T0 + 70000);
    end.kind = EVENT_EGRESS_PROGRESS;
    detectors_feed(f->d, &end, T0 + 70001);
    detectors_tick(f->d, T0 + 200000);
    assert_int_equal(f->got.n[ALERT_UPLOAD_BYTES], 1);
}

/* A 407 auth_required refusal of a request from <src> (NULL: a client of
 * the unix socket), <credentials> when it presented some. */
static struct egress_event auth_ev(const struct ipaddr *src, bool credentials)
{
    struct egress_event ev =
        ev_of(NULL, "GET", "x.test", VERDICT_DENY, REASON_AUTH_REQUIRED, TIER_NONE);
    ev.id = "c9.1";
    ev.source = src;
    ev.credentials = credentials;
    return ev;
}

static struct ipaddr ip_of(const char *s)
{
    struct ipaddr a;
    assert_true(ip_literal_parse(s, strlen(s), &a) != IP_LITERAL_NONE);
    return a;
}

/* An IPv6 literal host in a detail's HOST:PORT is bracketed, as the
 * gate's refusals write it: "::1:443" reads as the address ::1:443 with
 * no port, or as ::1 and port 443. */
static void ipv6_hosts_are_bracketed_in_details(void **state)
{
    struct fx *f = *state;
    f->p.alerts.first_contact = true;
    f->p.alerts.denied_burst = (struct threshold){.set = true, .max = 1, .per_ms = 60000};
    f->p.alerts.upload_bytes = (struct threshold){.set = true, .max = 1000, .per_ms = 60000};
    f->p.alerts.auth_failures = (struct threshold){.set = true, .max = 1, .per_ms = 60000};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    struct egress_event c =
        ev_of("ci", "CONNECT", "2001:db8::1", VERDICT_DENY, REASON_NOT_IN_POLICY, TIER_NONE);
    c.path = NULL;
    c.port = 443;
    detectors_feed(f->d, &c, T0);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], 1);
    assert_non_null(strstr(f->got.last_detail, "ci contacted [2001:db8::1]:443 for the first"));
    detectors_feed(f->d, &c, T0 + 1);
    assert_int_equal(f->got.n[ALERT_DENIED_BURST], 1);
    assert_non_null(strstr(f->got.last_detail, "the last: CONNECT [2001:db8::1]:443 ("));
    struct egress_event up = ev_of("ci", "POST", "2001:db8::1", VERDICT_ALLOW, REASON_NONE, TIER_2);
    up.kind = EVENT_EGRESS_PROGRESS;
    up.bytes_up = 2000;
    detectors_feed(f->d, &up, T0 + 2);
    assert_int_equal(f->got.n[ALERT_UPLOAD_BYTES], 1);
    assert_non_null(strstr(f->got.last_detail, "the last to [2001:db8::1]:80"));
    struct ipaddr src = ip_of("127.0.0.1");
    struct egress_event g = auth_ev(&src, true);
    g.host = "::1";
    detectors_feed(f->d, &g, T0 + 3);
    detectors_feed(f->d, &g, T0 + 4);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 1);
    assert_non_null(strstr(f->got.last_detail, "the last: GET [::1]:80"));
    /* a name keeps its plain HOST:PORT */
    c.host = "api.example.test";
    detectors_feed(f->d, &c, T0 + 5);
    assert_non_null(strstr(f->got.last_detail, "ci contacted api.example.test:443 for the"));
}

/* auth_failures: credentials that identify no agent, counted per client
 * source over a sliding window; more than max alerts once (high, no
 * agent), further ones fold into the period's summary. A refusal without
 * credentials, of an identified agent or of a tunnel decided again does
 * not count. */
static void auth_failures_per_source(void **state)
{
    struct fx *f = *state;
    f->p.alerts.auth_failures = (struct threshold){.set = true, .max = 3, .per_ms = 10000};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    struct ipaddr lo = ip_of("127.0.0.1"), other = ip_of("10.0.0.2");
    struct egress_event guess = auth_ev(&lo, true), none = auth_ev(&lo, false);
    for (int i = 0; i < 10; i++) /* no credentials: a client not set up */
        detectors_feed(f->d, &none, T0 + i);
    struct egress_event redecided = auth_ev(&lo, true);
    redecided.redecided = true;
    detectors_feed(f->d, &redecided, T0 + 10);
    struct egress_event named = auth_ev(&lo, true);
    named.agent = "ci"; /* not a refusal of credentials naming no agent */
    detectors_feed(f->d, &named, T0 + 11);
    for (int i = 0; i < 3; i++)
        detectors_feed(f->d, &guess, T0 + 100 + i);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 0); /* 3 is not over 3 */
    detectors_feed(f->d, &guess, T0 + 200);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 1);
    assert_int_equal(f->got.last_severity, SEVERITY_HIGH);
    assert_string_equal(f->got.last_agent, "(null)");
    assert_string_equal(f->got.last_host, "x.test");
    assert_string_equal(f->got.last_id, "c9.1");
    assert_non_null(strstr(f->got.last_detail, "4 requests from 127.0.0.1 within 10s (max 3)"));
    assert_non_null(strstr(f->got.last_detail, "the last: GET x.test:80"));
    /* another source has a window of its own */
    struct egress_event elsewhere = auth_ev(&other, true);
    for (int i = 0; i < 3; i++)
        detectors_feed(f->d, &elsewhere, T0 + 300 + i);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 1);
    /* more guesses: one line per trip, the rest folded into a summary */
    for (int i = 0; i < 5; i++)
        detectors_feed(f->d, &guess, T0 + 400 + i);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 1);
    detectors_feed(f->d, &elsewhere, T0 + 500); /* its own trip: not folded with 127.0.0.1's */
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 2);
    assert_non_null(strstr(f->got.last_detail, "4 requests from 10.0.0.2 within 10s"));
    detectors_tick(f->d, T0 + 10200);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 3);
    assert_int_equal(f->got.last_count, 5);
    assert_non_null(strstr(f->got.last_detail, "5 more within 10s, folded"));
    /* the window slid: 4 guesses again are needed */
    for (int i = 0; i < 3; i++)
        detectors_feed(f->d, &guess, T0 + 30000 + i);
    detectors_tick(f->d, T0 + 30000);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 3);
    /* off unless configured */
    f->p.alerts.auth_failures.set = false;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    for (int i = 0; i < 20; i++)
        detectors_feed(f->d, &guess, T0 + 60000 + i);
    detectors_tick(f->d, T0 + 200000);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 3);
}

/* Configures auth_failures {max: <max>, per: <per_ms>}; returns a refusal
 * of credentials naming no agent, from 127.0.0.1. */
static struct egress_event guesser_of(struct fx *f, uint64_t max, uint64_t per_ms)
{
    f->p.alerts.auth_failures = (struct threshold){.set = true, .max = max, .per_ms = per_ms};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    static struct ipaddr lo; /* the event points to it */
    lo = ip_of("127.0.0.1");
    return auth_ev(&lo, true);
}

/* auth_failures likewise: a guesser's new burst from a source, half an
 * hour into the period its last summary opened (per 1h), is told at once,
 * not at that period's end. */
static void auth_failures_new_burst_after_a_summary_is_told_at_once(void **state)
{
    struct fx *f = *state;
    struct egress_event guess = guesser_of(f, 3, 3600000);
    for (int i = 0; i < 5; i++)
        detectors_feed(f->d, &guess, T0 + i);
    detectors_tick(f->d, T0 + 3600010);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 2); /* a line and a summary */
    for (int i = 0; i < 4; i++)
        detectors_feed(f->d, &guess, T0 + 5400000 + i);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 3);
    assert_non_null(strstr(f->got.last_detail, "4 requests from 127.0.0.1 within 1h (max 3)"));
}

/* An IPv6 client counts with the rest of its /64 (a host commonly holds
 * one, and could spread guesses over its addresses); the unix socket's
 * clients count as one source. */
static void auth_failures_v6_prefix_and_unix_socket(void **state)
{
    struct fx *f = *state;
    f->p.alerts.auth_failures = (struct threshold){.set = true, .max = 2, .per_ms = 60000};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    struct ipaddr a = ip_of("2001:db8::1"), b = ip_of("2001:db8::ffff:2"),
                  c = ip_of("2001:db8:0:1::1");
    struct egress_event ea = auth_ev(&a, true), eb = auth_ev(&b, true), ec = auth_ev(&c, true);
    detectors_feed(f->d, &ea, T0);
    detectors_feed(f->d, &ec, T0 + 1); /* another /64 */
    detectors_feed(f->d, &ec, T0 + 2);
    detectors_feed(f->d, &eb, T0 + 3);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 0);
    detectors_feed(f->d, &ea, T0 + 4);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 1);
    assert_non_null(
        strstr(f->got.last_detail, "3 requests from 2001:db8::/64 (the last 2001:db8::1) within"));
    struct egress_event u = auth_ev(NULL, true);
    for (int i = 0; i < 3; i++)
        detectors_feed(f->d, &u, T0 + 10 + i);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 2);
    assert_non_null(strstr(f->got.last_detail, "3 requests from the unix socket's clients"));
}

/* The source table holds DETECT_SOURCES_MAX sources. Full of sources still
 * counting, a new source is counted with every other new one under one
 * overflow key: a flood of addresses can neither wipe a guesser's count
 * nor hide a new guesser. Once sources go idle, new ones get places. */
static void auth_failures_table_is_bounded(void **state)
{
    struct fx *f = *state;
    f->p.alerts.auth_failures = (struct threshold){.set = true, .max = 2, .per_ms = 60000};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    struct ipaddr first;
    for (uint32_t i = 0; i < DETECT_SOURCES_MAX; i++) {
        struct ipaddr s;
        ipaddr_from_v4(&s, 0x0a000000u + i); /* 10.0.0.0 on */
        if (i == 0)
            first = s;
        struct egress_event ev = auth_ev(&s, true);
        detectors_feed(f->d, &ev, T0 + i);
    }
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 0);
    struct ipaddr g1 = ip_of("192.0.2.1"), g2 = ip_of("192.0.2.2");
    struct egress_event e1 = auth_ev(&g1, true), e2 = auth_ev(&g2, true);
    detectors_feed(f->d, &e1, T0 + 5000);
    detectors_feed(f->d, &e2, T0 + 5001);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 0);
    detectors_feed(f->d, &e1, T0 + 5002); /* 3 past the table, counted together */
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 1);
    assert_non_null(strstr(f->got.last_detail, "3 requests from sources past the 4096 tracked, "
                                               "counted together (the last 192.0.2.1)"));
    /* a source in the table kept its count */
    struct egress_event e0 = auth_ev(&first, true);
    detectors_feed(f->d, &e0, T0 + 5003);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 1);
    detectors_feed(f->d, &e0, T0 + 5004);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 2);
    assert_non_null(strstr(f->got.last_detail, "3 requests from 10.0.0.0 within 1m"));
    /* two minutes later every window is empty: a new source has its own */
    for (int i = 0; i < 3; i++)
        detectors_feed(f->d, &e2, T0 + 125000 + i);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 3);
    assert_non_null(strstr(f->got.last_detail, "3 requests from 192.0.2.2 within 1m"));
}

/* Sources are the clients' choice (every address of 127.0.0.0/8 on this
 * host; an IPv6 /48 holds 65,536 /64s): a guesser that trips max from
 * each of 1000 sources put 1000 lines into every sink within a second, a
 * real alert queued behind them, as per-host kinds did per made-up host.
 * Past DETECT_SOURCES_BURST sources' lines a minute they fold by kind over
 * the minute; a source's own running period still takes its repeats. */
static void auth_failures_fold_past_the_burst_of_sources(void **state)
{
    struct fx *f = *state;
    f->p.alerts.auth_failures = (struct threshold){.set = true, .max = 2, .per_ms = 60000};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    for (uint32_t i = 0; i < 1000; i++) {
        struct ipaddr s;
        ipaddr_from_v4(&s, 0x7f000100u + i); /* 127.0.1.0 on */
        struct egress_event ev = auth_ev(&s, true);
        for (int k = 0; k < 3; k++)
            detectors_feed(f->d, &ev, T0 + 3 * i + k);
        if (i == DETECT_SOURCES_BURST - 1)
            assert_null(strstr(f->got.last_detail, "folded"));
    }
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], DETECT_SOURCES_BURST + 1);
    assert_non_null(strstr(f->got.last_detail, "3 requests from 127.0.1.30 within 1m (max 2)"));
    assert_non_null(strstr(f->got.last_detail, "; over 30 sources' auth_failures alerts within "
                                               "1m, so they are folded per minute"));
    /* a source told on its own folds into its own period as before */
    struct ipaddr first;
    ipaddr_from_v4(&first, 0x7f000100u);
    struct egress_event again = auth_ev(&first, true);
    detectors_feed(f->d, &again, T0 + 5000);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], DETECT_SOURCES_BURST + 1);
    /* the minute's end: one summary of the folded sources, one of the
     * first source's repeat */
    detectors_tick(f->d, T0 + 70000);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], DETECT_SOURCES_BURST + 3);
    /* a quiet minute later, a new source is told on its own again */
    struct ipaddr late = ip_of("192.0.2.7");
    struct egress_event ev = auth_ev(&late, true);
    for (int k = 0; k < 3; k++)
        detectors_feed(f->d, &ev, T0 + 140000 + k);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], DETECT_SOURCES_BURST + 4);
    assert_null(strstr(f->got.last_detail, "folded"));
}

/* A reload changes max at once and keeps the windows; one that changes
 * per starts them afresh, as for denied_burst. */
static void auth_failures_reload(void **state)
{
    struct fx *f = *state;
    struct egress_event guess = guesser_of(f, 5, 60000);
    for (int i = 0; i < 3; i++)
        detectors_feed(f->d, &guess, T0 + i);
    f->p.alerts.auth_failures.max = 2;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 0);
    detectors_feed(f->d, &guess, T0 + 10);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 1);
    assert_non_null(strstr(f->got.last_detail, "4 requests from 127.0.0.1 within 1m (max 2)"));
    f->p.alerts.auth_failures.per_ms = 30000;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    detectors_tick(f->d, T0 + 70000); /* the fold period ends */
    detectors_feed(f->d, &guess, T0 + 70001);
    detectors_feed(f->d, &guess, T0 + 70002);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 1); /* 2, counted afresh */
    detectors_feed(f->d, &guess, T0 + 70003);
    assert_int_equal(f->got.n[ALERT_AUTH_FAILURES], 2);
    assert_non_null(strstr(f->got.last_detail, "3 requests from 127.0.0.1 within 30s (max 2)"));
}

static void tier3_grants_and_first_contact(void **state)
{
    struct fx *f = *state;
    int32_t today = day_of((time_t)(T0 / 1000));
    f->rules[0] = (struct rule){.index = 0,
                                .pattern = "api.test",
                                .tier = TIER_3,
                                .owner = "alice",
                                .has_expires = true,
                                .expires = today + 5};
    f->rules[1] = (struct rule){.index = 1,
                                .pattern = "old.test",
                                .tier = TIER_3,
                                .owner = "bob",
                                .has_expires = true,
                                .expires = today - 1};
    f->p.nrules = 2;
    f->p.alerts.first_contact = true;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    assert_int_equal(detectors_grants(f->d, &f->p, T0), 1); /* the expired one is not "expiring" */
    assert_non_null(strstr(f->got.last_detail, "5 days left"));
    f->p.alerts.expiry_warn_days = 3;
    f->p.alerts.expiry_warn_days_set = true;
    detectors_configure(f->d, &f->p);
    assert_int_equal(detectors_grants(f->d, &f->p, T0), 0);

    struct egress_event ev = ev_of("ci", "POST", "api.test", VERDICT_ALLOW, REASON_NONE, TIER_3);
    ev.rule = &f->rules[0];
    ev.owner = "alice";
    detectors_feed(f->d, &ev, T0);
    assert_int_equal(f->got.n[ALERT_TIER3_WRITE], 1);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], 1);
    detectors_feed(f->d, &ev, T0 + 1);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], 1); /* remembered */
    assert_int_equal(f->got.n[ALERT_TIER3_WRITE], 1);   /* folded */
    struct egress_event ex =
        ev_of("ci", "POST", "old.test", VERDICT_DENY, REASON_GRANT_EXPIRED, TIER_3);
    ex.rule = &f->rules[1];
    detectors_feed(f->d, &ex, T0 + 2);
    assert_int_equal(f->got.n[ALERT_GRANT_EXPIRED], 1);
    assert_int_equal(f->got.n[ALERT_TIER3_WRITE], 1); /* denied: not a tier-3 write */
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], 2);
    /* report mode went out: it counts as a tier-3 write */
    ev.verdict = VERDICT_REPORT;
    ev.host = "api2.test";
    detectors_feed(f->d, &ev, T0 + 3);
    assert_int_equal(f->got.n[ALERT_TIER3_WRITE], 2);
    /* nothing at all without an alerts section, but an expired grant's
     * alert, which the SPEC promises with every grant */
    memset(&f->p.alerts, 0, sizeof(f->p.alerts));
    detectors_configure(f->d, &f->p);
    ev.host = "api3.test";
    detectors_feed(f->d, &ev, T0 + 4);
    assert_int_equal(f->got.n[ALERT_TIER3_WRITE], 2);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], 3);
    assert_int_equal(detectors_grants(f->d, &f->p, T0), 0);
    ex.host = "old3.test";
    ex.verdict = VERDICT_REPORT; /* let through in report mode: never silently */
    detectors_feed(f->d, &ex, T0 + 5);
    assert_int_equal(f->got.n[ALERT_GRANT_EXPIRED], 2);
    assert_int_equal(f->got.n[ALERT_TIER3_WRITE], 2);
}

/* A long owner is shortened in an alert, as a path is: it must not push
 * out of grant_expiring's detail the date and the days left, which are
 * what the alert is about, and it is cut between characters, not in the
 * middle of one (the log would show U+FFFD for the half). */
static void long_owners_are_shortened_between_characters(void **state)
{
    struct fx *f = *state;
    int32_t today = day_of((time_t)(T0 / 1000));
    char *owner = malloc(1101);
    assert_non_null(owner);
    memset(owner, 'x', 1100);
    owner[1100] = '\0';
    f->rules[0] = (struct rule){.index = 0,
                                .pattern = "api.test",
                                .tier = TIER_3,
                                .owner = owner,
                                .has_expires = true,
                                .expires = today + 5};
    f->p.nrules = 1;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    assert_int_equal(detectors_grants(f->d, &f->p, T0), 1);
    assert_non_null(strstr(f->got.last_detail, "5 days left"));
    assert_non_null(strstr(f->got.last_detail, "xxx..."));
    /* 150 two-byte characters: byte 200 is the end of the 100th, 199 the
     * middle of one, so make it start with a one-byte character */
    owner[0] = 'y';
    for (size_t i = 1; i + 2 <= 301; i += 2)
        memcpy(owner + i, "\xc3\xa9", 2);
    owner[301] = '\0';
    struct egress_event ev = ev_of("ci", "POST", "api.test", VERDICT_ALLOW, REASON_NONE, TIER_3);
    ev.rule = &f->rules[0];
    ev.owner = owner;
    detectors_feed(f->d, &ev, T0);
    assert_int_equal(f->got.n[ALERT_TIER3_WRITE], 1);
    const char *shown = strstr(f->got.last_detail, "owner y");
    assert_non_null(shown);
    const char *dots = strstr(shown, "...");
    assert_non_null(dots);
    /* what is shown of the owner is whole characters: an odd count of
     * bytes after the 'y' would leave half of one */
    assert_int_equal((size_t)(dots - (shown + strlen("owner y"))) % 2, 0);
    assert_non_null(strstr(f->got.last_detail, "expires"));
    free(owner);
}

/* An agent contacting thousands of made-up hosts (each a first contact,
 * denied) must not stop the folding of what comes after: repeated expired-
 * grant denials still make one line per period. (First contacts took a
 * fold entry each; past the table's 4096, every later alert went out
 * unfolded.) */
static void first_contacts_leave_folding_alone(void **state)
{
    struct fx *f = *state;
    int32_t today = day_of((time_t)(T0 / 1000));
    f->rules[0] = (struct rule){.index = 0,
                                .pattern = "old.test",
                                .tier = TIER_3,
                                .owner = "bob",
                                .has_expires = true,
                                .expires = today - 1};
    f->p.nrules = 1;
    f->p.alerts.first_contact = true;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    char host[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(host, sizeof(host), "h%d.bad.test", i);
        feed_denied_get(f, "ci", host, T0 + i / 100);
    }
    /* one by one up to the burst, then one line opens the agent's fold */
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], DETECT_CONTACTS_BURST + 1);
    struct egress_event ex =
        ev_of("ci", "POST", "old.test", VERDICT_DENY, REASON_GRANT_EXPIRED, TIER_3);
    ex.rule = &f->rules[0];
    for (int i = 0; i < 50; i++)
        detectors_feed(f->d, &ex, T0 + 100 + i);
    assert_int_equal(f->got.n[ALERT_GRANT_EXPIRED], 1);
}

/* Once first-contact memory is full, a pair it cannot remember is still
 * told (an agent could otherwise fill it with made-up hosts, then reach a
 * real one unseen), folded per agent and minute. */
static void first_contacts_past_the_memory_are_still_told(void **state)
{
    struct fx *f = *state;
    f->p.alerts.first_contact = true;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    char host[32];
    for (int i = 0; i < DETECT_CONTACTS_MAX; i++) {
        snprintf(host, sizeof(host), "h%d.test", i);
        feed_denied_get(f, "filler", host, T0 - 120000);
    }
    /* the filler's flood: the burst one by one, one line opening its fold,
     * and the fold's summary once its minute is over */
    detectors_tick(f->d, T0);
    int base = f->got.n[ALERT_FIRST_CONTACT];
    assert_int_equal(base, DETECT_CONTACTS_BURST + 2);
    assert_int_equal(f->got.last_count, DETECT_CONTACTS_MAX - DETECT_CONTACTS_BURST - 1);
    struct egress_event real = ev_of("ci", "POST", "real.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    detectors_feed(f->d, &real, T0 + 1);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], base + 1);
    assert_string_equal(f->got.last_agent, "ci");
    assert_non_null(strstr(f->got.last_detail, "ci contacted real.test:80, which it may not"));
    assert_non_null(strstr(f->got.last_detail, "first-contact memory is full"));
    /* more of them within the minute fold; its end brings the summary */
    for (int i = 0; i < 20; i++) {
        snprintf(host, sizeof(host), "more%d.test", i);
        struct egress_event ev = ev_of("ci", "GET", host, VERDICT_ALLOW, REASON_NONE, TIER_1);
        detectors_feed(f->d, &ev, T0 + 2);
    }
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], base + 1);
    detectors_tick(f->d, T0 + 60001);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], base + 2);
    assert_int_equal(f->got.last_count, 20);
    /* a pair remembered before the memory filled stays quiet */
    feed_denied_get(f, "filler", "h7.test", T0 + 60002);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], base + 2);
}

/* An agent sending one request each to made-up hosts: each is a first
 * contact, and each was its own line to every sink, thousands a second,
 * with a real alert queued behind them at a webhook. Past
 * DETECT_CONTACTS_BURST within a minute its first contacts fold per agent
 * and minute; another agent's are told as before, and once the minute has
 * passed so are the flooder's. */
static void first_contact_flood_folds_per_agent(void **state)
{
    struct fx *f = *state;
    f->p.alerts.first_contact = true;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    char host[40];
    for (int i = 0; i < 1000; i++) {
        snprintf(host, sizeof(host), "x%d.made-up.test", i);
        feed_denied_get(f, "ci", host, T0 + i);
        if (i == DETECT_CONTACTS_BURST - 1) {
            assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], DETECT_CONTACTS_BURST);
            assert_non_null(strstr(f->got.last_detail, "for the first time (GET, denied)"));
            assert_null(strstr(f->got.last_detail, "folded"));
        }
    }
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], DETECT_CONTACTS_BURST + 1);
    assert_non_null(strstr(f->got.last_detail, "ci contacted x30.made-up.test:80 for the first "
                                               "time (GET, denied): over 30 first contacts"));
    /* another agent is not folded with it */
    feed_denied_get(f, "docs", "x5.made-up.test", T0 + 1000);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], DETECT_CONTACTS_BURST + 2);
    assert_string_equal(f->got.last_agent, "docs");
    /* the minute's end: one summary of the rest */
    detectors_tick(f->d, T0 + 60030);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], DETECT_CONTACTS_BURST + 3);
    assert_int_equal(f->got.last_count, 1000 - DETECT_CONTACTS_BURST - 1);
    assert_string_equal(f->got.last_agent, "ci");
    /* a quiet minute later, a new host is told on its own again */
    feed_denied_get(f, "ci", "after.made-up.test", T0 + 130000);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], DETECT_CONTACTS_BURST + 4);
    assert_null(strstr(f->got.last_detail, "folded"));
}

/* An agent let write to any host under a wildcard rule (every bucket name
 * under *.s3.amazonaws.com resolves) outside working hours: a line per
 * host put 1000 into every sink within a second, a real alert queued
 * behind them. Past DETECT_HOSTS_BURST hosts a minute they fold per agent;
 * the agent's other per-host kinds and the other agents are not folded. */
static void per_host_alerts_fold_past_the_burst(void **state)
{
    struct fx *f = *state;
    f->p.alerts.off_hours = WEEKDAYS_8_TO_19_UTC;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    char host[40];
    for (int i = 0; i < 1000; i++) {
        snprintf(host, sizeof(host), "b%d.s3.example.test", i);
        struct egress_event w = ev_of("ci", "PUT", host, VERDICT_ALLOW, REASON_NONE, TIER_0);
        detectors_feed(f->d, &w, T0 + i); /* Monday 19:00 UTC: off hours */
        if (i == DETECT_HOSTS_BURST - 1)
            assert_null(strstr(f->got.last_detail, "folded"));
    }
    assert_int_equal(f->got.n[ALERT_OFF_HOURS_WRITE], DETECT_HOSTS_BURST + 1);
    assert_non_null(strstr(f->got.last_detail, "PUT /p on b30.s3.example.test by ci outside "
                                               "working hours (UTC 08:00-19:00); over 30 hosts' "
                                               "off_hours_write alerts within 1m, so this "
                                               "agent's are folded per minute"));
    /* the agent's tier-3 requests have their own count */
    struct egress_event t3 =
        ev_of("ci", "GET", "api.example.test", VERDICT_ALLOW, REASON_NONE, TIER_3);
    detectors_feed(f->d, &t3, T0 + 1000);
    assert_int_equal(f->got.n[ALERT_TIER3_WRITE], 1);
    assert_null(strstr(f->got.last_detail, "folded"));
    /* another agent is not folded with it */
    struct egress_event other =
        ev_of("docs", "PUT", "b5.s3.example.test", VERDICT_ALLOW, REASON_NONE, TIER_0);
    detectors_feed(f->d, &other, T0 + 1001);
    assert_int_equal(f->got.n[ALERT_OFF_HOURS_WRITE], DETECT_HOSTS_BURST + 2);
    assert_string_equal(f->got.last_agent, "docs");
    /* the minute's end: one summary of the rest */
    detectors_tick(f->d, T0 + 60030);
    assert_int_equal(f->got.n[ALERT_OFF_HOURS_WRITE], DETECT_HOSTS_BURST + 3);
    assert_int_equal(f->got.last_count, 1000 - DETECT_HOSTS_BURST - 1);
    /* a quiet minute later, a new host is told on its own again */
    struct egress_event later =
        ev_of("ci", "PUT", "new.s3.example.test", VERDICT_ALLOW, REASON_NONE, TIER_0);
    detectors_feed(f->d, &later, T0 + 130000);
    assert_int_equal(f->got.n[ALERT_OFF_HOURS_WRITE], DETECT_HOSTS_BURST + 4);
    assert_null(strstr(f->got.last_detail, "folded"));
}

/* An upload in report mode decided again (a reload took its rule away, its
 * grant ended) gets a second line, a new verdict on the write already
 * told: it raised off_hours_write a second time, a minute later a line of
 * its own, for the one write (write_burst and upload_bytes did not count
 * it again). Its tier3_write is raised again, as SPEC says: the new
 * verdict's tier may be new (a tier-3 rule it now reports against). */
static void a_write_decided_again_is_not_one_more_off_hours_write(void **state)
{
    struct fx *f = *state;
    f->p.alerts.off_hours = WEEKDAYS_8_TO_19_UTC;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    struct egress_event w =
        ev_of("ci", "POST", "a.test", VERDICT_REPORT, REASON_METHOD_NOT_ALLOWED, TIER_3);
    detectors_feed(f->d, &w, T0); /* Monday 19:00 UTC: off hours */
    assert_int_equal(f->got.n[ALERT_OFF_HOURS_WRITE], 1);
    assert_int_equal(f->got.n[ALERT_TIER3_WRITE], 1);
    struct egress_event again =
        ev_of("ci", "POST", "a.test", VERDICT_REPORT, REASON_GRANT_EXPIRED, TIER_3);
    again.again = true;
    again.redecided = true;
    detectors_feed(f->d, &again, T0 + 3 * 60000); /* past the first one's fold */
    assert_int_equal(f->got.n[ALERT_OFF_HOURS_WRITE], 1);
    assert_int_equal(f->got.n[ALERT_TIER3_WRITE], 2);
    assert_int_equal(f->got.n[ALERT_GRANT_EXPIRED], 1);
}

static void off_hours_arithmetic(void **state)
{
    (void)state;
    struct off_hours_cfg o = WEEKDAYS_8_TO_19_UTC;
    time_t mon19 = (time_t)(T0 / 1000); /* Monday 19:00 UTC: just outside */
    assert_true(detectors_off_hours(&o, mon19));
    assert_false(detectors_off_hours(&o, mon19 - 60));              /* 18:59 */
    assert_true(detectors_off_hours(&o, mon19 - 11 * 3600 - 60));   /* 07:59 */
    assert_false(detectors_off_hours(&o, mon19 - 11 * 3600));       /* 08:00: the start counts */
    assert_true(detectors_off_hours(&o, mon19 - 2 * 86400 - 3600)); /* Saturday 18:00 */
    o.start_min = 22 * 60; /* wrapping hours: 22:00-06:00 */
    o.end_min = 6 * 60;
    assert_false(detectors_off_hours(&o, mon19 + 4 * 3600)); /* 23:00 */
    assert_true(detectors_off_hours(&o, mon19));
    /* a named zone: 19:00 UTC is 20:00 in Berlin (winter) */
    o.tz = "Europe/Berlin";
    o.start_min = 8 * 60;
    o.end_min = 20 * 60;
    assert_true(detectors_off_hours(&o, mon19));
    o.tz = "UTC";
    assert_false(detectors_off_hours(&o, mon19));
}

/* Hours that wrap midnight are a night shift: the hours after midnight
 * belong to the working day on which the shift started. Under Mon-Fri,
 * 22:00-06:00, Monday 02:00 is Sunday night's (off) and Saturday 02:00
 * Friday night's (working); the calendar day put them the other way. */
static struct off_hours_cfg night_shift(char *tz, uint8_t days_mask)
{
    return (struct off_hours_cfg){
        .set = true, .tz = tz, .start_min = 22 * 60, .end_min = 6 * 60, .days_mask = days_mask};
}

static void off_hours_night_shift(void **state)
{
    (void)state;
    struct off_hours_cfg o = night_shift("UTC", 0x1f); /* Mon-Fri, 22:00-06:00 */
    time_t mon = (time_t)(T0 / 1000) - 19 * 3600;      /* Monday 2026-11-30 00:00 UTC */
#define AT(day, h, m) (mon + (day)*86400 + (h)*3600 + (m)*60)
    assert_true(detectors_off_hours(&o, AT(0, 2, 0)));   /* Mon 02:00: Sunday night */
    assert_true(detectors_off_hours(&o, AT(0, 5, 59)));  /* Mon 05:59: Sunday night */
    assert_true(detectors_off_hours(&o, AT(0, 21, 59))); /* Mon 21:59 */
    assert_false(detectors_off_hours(&o, AT(0, 22, 0))); /* Mon 22:00: the shift starts */
    assert_false(detectors_off_hours(&o, AT(1, 2, 0)));  /* Tue 02:00: Monday night */
    assert_false(detectors_off_hours(&o, AT(1, 5, 59))); /* Tue 05:59: Monday night */
    assert_true(detectors_off_hours(&o, AT(1, 6, 0)));   /* Tue 06:00: it has ended */
    assert_false(detectors_off_hours(&o, AT(4, 23, 0))); /* Fri 23:00 */
    assert_false(detectors_off_hours(&o, AT(5, 2, 0)));  /* Sat 02:00: Friday night */
    assert_true(detectors_off_hours(&o, AT(5, 6, 0)));   /* Sat 06:00 */
    assert_true(detectors_off_hours(&o, AT(5, 23, 0)));  /* Sat 23:00 */
    assert_true(detectors_off_hours(&o, AT(6, 23, 0)));  /* Sun 23:00: Sunday night */
    assert_true(detectors_off_hours(&o, AT(7, 2, 0)));   /* the next Mon 02:00 */
    assert_true(detectors_off_hours(&o, AT(7, 6, 0)));   /* Mon 06:00 exactly */
    assert_false(detectors_off_hours(&o, AT(7, 22, 0))); /* Mon 22:00 exactly */
    o.days_mask = 0x40; /* Sunday only: its night runs into Monday, across the week's end */
    assert_false(detectors_off_hours(&o, AT(7, 2, 0))); /* Mon 02:00 */
    assert_true(detectors_off_hours(&o, AT(6, 2, 0)));  /* Sun 02:00: Saturday night */
    o.end_min = 0; /* 22:00-00:00 wraps to nothing after midnight */
    assert_false(detectors_off_hours(&o, AT(6, 23, 59)));
    assert_true(detectors_off_hours(&o, AT(7, 0, 0)));
#undef AT
}

/* A night shift across a change of clocks ends at 06:00 on the wall
 * clock, after 7 hours (spring) or 9 (autumn), and every minute of it is
 * the day it started: Saturday's, in Europe/Berlin, whose clocks change
 * on Sunday mornings (2026-03-29 02:00 CET -> 03:00 CEST, 2026-10-25
 * 03:00 CEST -> 02:00 CET). */
static void off_hours_night_shift_across_dst(void **state)
{
    (void)state;
    struct off_hours_cfg o = night_shift("Europe/Berlin", 0x20); /* Saturday night */
    assert_true(detectors_off_hours(&o, 1774731540));            /* Sat 21:59 CET */
    assert_false(detectors_off_hours(&o, 1774731600));           /* Sat 22:00 CET */
    assert_false(detectors_off_hours(&o, 1774744200));           /* Sun 01:30 CET */
    assert_false(detectors_off_hours(&o, 1774747800));           /* Sun 03:30 CEST, an hour on */
    assert_false(detectors_off_hours(&o, 1774756740));           /* Sun 05:59 CEST */
    assert_true(detectors_off_hours(&o, 1774756800));            /* Sun 06:00 CEST */
    assert_true(detectors_off_hours(&o, 1792871940));            /* Sat 21:59 CEST */
    assert_false(detectors_off_hours(&o, 1792888200));           /* Sun 02:30 CEST */
    assert_false(detectors_off_hours(&o, 1792891800));           /* Sun 02:30 CET, the same again */
    assert_false(detectors_off_hours(&o, 1792904340));           /* Sun 05:59 CET */
    assert_true(detectors_off_hours(&o, 1792904400));            /* Sun 06:00 CET */
}

/* Working hours end the first time the local clock reaches their end.
 * When the clocks go back over that end (summer time ends at 02:00 EDT in
 * New York, 03:00 CEST in Berlin), the minutes before it come again: they
 * stay off-hours, the hours having ended. Before, the hours started again
 * for them: a Saturday night shift 22:00-01:30 in New York ended at 01:30
 * EDT, and 01:00-01:29 EST were working hours again, its writes unseen. */
static void off_hours_end_the_first_time_the_clock_reaches_it(void **state)
{
    (void)state;
    struct off_hours_cfg o = night_shift("America/New_York", 0x20); /* Saturday night */
    o.end_min = 90;                                                 /* 22:00-01:30 */
    assert_false(detectors_off_hours(&o, 1793510100));              /* Sun 01:15 EDT */
    assert_true(detectors_off_hours(&o, 1793511000));               /* Sun 01:30 EDT: ended */
    assert_true(detectors_off_hours(&o, 1793512800)); /* Sun 01:00 EST, the clock set back */
    assert_true(detectors_off_hours(&o, 1793514540)); /* Sun 01:29 EST */
    assert_true(detectors_off_hours(&o, 1793514600)); /* Sun 01:30 EST */
    o.start_min = 0; /* 00:00-01:30 on Sundays: no wrap, the same end */
    o.days_mask = 0x40;
    assert_false(detectors_off_hours(&o, 1793509140)); /* Sun 00:59 EDT */
    assert_true(detectors_off_hours(&o, 1793512800));  /* Sun 01:00 EST */
    o = night_shift("Europe/Berlin", 0x20);
    o.end_min = 150;                                   /* 22:00-02:30 */
    assert_false(detectors_off_hours(&o, 1792887300)); /* Sun 02:15 CEST */
    assert_true(detectors_off_hours(&o, 1792888200));  /* Sun 02:30 CEST: ended */
    assert_true(detectors_off_hours(&o, 1792890000));  /* Sun 02:00 CET, the clock set back */
    assert_true(detectors_off_hours(&o, 1792891740));  /* Sun 02:29 CET */
    /* an end the clocks do not go back over is reached once, as ever */
    o.end_min = 6 * 60;
    assert_false(detectors_off_hours(&o, 1792891740)); /* Sun 02:29 CET */
}

/* The clocks of Antarctica/Troll go back two hours when its summer time
 * ends (03:00 +02 to 01:00 +00, on 2026-10-25 at 01:00 UTC), not one:
 * its hours end the first time the clock reaches their end all the same.
 * Before, a set-back was looked for an hour back only, and one of more
 * than an hour was taken for none: a Saturday night shift 22:00-01:30,
 * ended at 01:30 +02, was working hours again from 01:00 to 01:29 +00. */
static void off_hours_end_once_when_the_clocks_go_back_two_hours(void **state)
{
    (void)state;
    struct off_hours_cfg o = night_shift("Antarctica/Troll", 0x20); /* Saturday night */
    o.end_min = 90;                                                 /* 22:00-01:30 */
    assert_false(detectors_off_hours(&o, 1792883700));              /* Sun 01:15 +02 */
    assert_true(detectors_off_hours(&o, 1792884600));               /* Sun 01:30 +02: ended */
    assert_true(detectors_off_hours(&o, 1792890000)); /* Sun 01:00 +00, the clock set back */
    assert_true(detectors_off_hours(&o, 1792890540)); /* Sun 01:09 +00 */
    assert_true(detectors_off_hours(&o, 1792890000 + 29 * 60 + 59)); /* Sun 01:29:59 +00 */
    o.end_min = 150;                                                 /* 22:00-02:30 */
    assert_false(detectors_off_hours(&o, 1792885500));               /* Sun 01:45 +02 */
    assert_true(detectors_off_hours(&o, 1792888200));                /* Sun 02:30 +02: ended */
    assert_true(detectors_off_hours(&o, 1792893600)); /* Sun 02:00 +00, an hour after the step */
    assert_true(detectors_off_hours(&o, 1792895340)); /* Sun 02:29 +00 */
    /* an end the clock had not reached before the step (02:59:59 +02 was
     * its last reading) is reached once, after it */
    o.end_min = 210;                                   /* 22:00-03:30 */
    assert_false(detectors_off_hours(&o, 1792893600)); /* Sun 02:00 +00 */
    assert_false(detectors_off_hours(&o, 1792897140)); /* Sun 02:59 +00 */
    assert_true(detectors_off_hours(&o, 1792899000));  /* Sun 03:30 +00 */
}

/* Hours of one day, <start>-<end> (minutes after midnight), in <tz>. */
static struct off_hours_cfg hours_in(char *tz, int start, int end, uint8_t days_mask)
{
    return (struct off_hours_cfg){
        .set = true, .tz = tz, .start_min = start, .end_min = end, .days_mask = days_mask};
}

/* Working hours begin the first time the local clock reaches their start,
 * as they end the first time it reaches their end: one stretch of time.
 * When the clocks go back over the start (summer time ends at 02:00 EDT
 * in New York, 2026-11-01 06:00 UTC), the minutes before it that the
 * clock shows again are working hours, begun already. Before, they were
 * off-hours: Sunday hours 01:30-09:00, begun at 01:30 EDT, stopped at
 * 01:00 EST for half an hour, each write in it an alert. */
static void off_hours_start_the_first_time_the_clock_reaches_it(void **state)
{
    (void)state;
    struct off_hours_cfg o = hours_in("America/New_York", 90, 9 * 60, 0x40); /* Sun 01:30-09:00 */
    assert_true(detectors_off_hours(&o, 1793510940));                        /* Sun 01:29 EDT */
    assert_false(detectors_off_hours(&o, 1793511000)); /* Sun 01:30 EDT: begun */
    assert_false(detectors_off_hours(&o, 1793512800)); /* Sun 01:00 EST, the clock set back */
    assert_false(detectors_off_hours(&o, 1793514540)); /* Sun 01:29 EST */
    assert_false(detectors_off_hours(&o, 1793515200)); /* Sun 01:40 EST, the second pass */
    assert_false(detectors_off_hours(&o, 1793541540)); /* Sun 08:59 EST */
    assert_true(detectors_off_hours(&o, 1793541600));  /* Sun 09:00 EST */
    /* a start the clock had not reached before the step (01:59:59 EDT
     * was its last reading) is reached once, after it */
    o.start_min = 2 * 60;
    assert_true(detectors_off_hours(&o, 1793512799));  /* Sun 01:59:59 EDT */
    assert_true(detectors_off_hours(&o, 1793514600));  /* Sun 01:30 EST */
    assert_false(detectors_off_hours(&o, 1793516400)); /* Sun 02:00 EST */
    /* a start and an end both in the hour that comes again: reached, and
     * over, on its first pass */
    o = hours_in("America/New_York", 70, 100, 0x40);   /* Sun 01:10-01:40 */
    assert_false(detectors_off_hours(&o, 1793510400)); /* Sun 01:20 EDT */
    assert_true(detectors_off_hours(&o, 1793513400));  /* Sun 01:10 EST */
    assert_true(detectors_off_hours(&o, 1793514000));  /* Sun 01:20 EST */
    /* the day of hours begun is the day the clock read their start */
    o = hours_in("America/New_York", 90, 9 * 60, 0x20); /* Saturdays only */
    assert_true(detectors_off_hours(&o, 1793512800));   /* Sun 01:00 EST */
}

/* The same where the clocks go back two hours (Antarctica/Troll, 03:00
 * +02 to 01:00 +00 on 2026-10-25 at 01:00 UTC) or half of one
 * (Australia/Lord_Howe, 02:00 +11 to 01:30 +10:30 on 2026-04-05 at
 * 15:00 UTC the day before). */
static void off_hours_start_once_when_the_clocks_go_back_two_hours_or_half_of_one(void **state)
{
    (void)state;
    struct off_hours_cfg o = hours_in("Antarctica/Troll", 90, 9 * 60, 0x40); /* 01:30-09:00 */
    assert_true(detectors_off_hours(&o, 1792884540));                        /* Sun 01:29 +02 */
    assert_false(detectors_off_hours(&o, 1792884600));                       /* Sun 01:30 +02 */
    assert_false(detectors_off_hours(&o, 1792890000));                       /* Sun 01:00 +00 */
    assert_false(detectors_off_hours(&o, 1792890000 + 29 * 60 + 59));        /* Sun 01:29:59 +00 */
    o.start_min = 150;                                                       /* 02:30-09:00 */
    assert_false(detectors_off_hours(&o, 1792888200));                       /* Sun 02:30 +02 */
    assert_false(detectors_off_hours(&o, 1792890000));                       /* Sun 01:00 +00 */
    assert_false(detectors_off_hours(&o, 1792895340));                       /* Sun 02:29 +00 */
    assert_false(detectors_off_hours(&o, 1792895400));                       /* Sun 02:30 +00 */
    o = hours_in("Antarctica/Troll", 90, 2 * 60, 0x40);                      /* 01:30-02:00 */
    assert_true(detectors_off_hours(&o, 1792886400));                        /* Sun 02:00 +02 */
    assert_true(detectors_off_hours(&o, 1792891800));                        /* Sun 01:30 +00 */
    o = hours_in("Australia/Lord_Howe", 105, 9 * 60, 0x40);                  /* 01:45-09:00 */
    assert_true(detectors_off_hours(&o, 1775313840));                        /* Sun 01:44 +11 */
    assert_false(detectors_off_hours(&o, 1775313900));                       /* Sun 01:45 +11 */
    assert_false(detectors_off_hours(&o, 1775314800));                       /* Sun 01:30 +10:30 */
    assert_false(detectors_off_hours(&o, 1775315640));                       /* Sun 01:44 +10:30 */
    o = hours_in("Australia/Lord_Howe", 22 * 60, 105, 0x20); /* Sat night 22:00-01:45 */
    assert_false(detectors_off_hours(&o, 1775313840));       /* Sun 01:44 +11 */
    assert_true(detectors_off_hours(&o, 1775313900));        /* Sun 01:45 +11: ended */
    assert_true(detectors_off_hours(&o, 1775314800));        /* Sun 01:30 +10:30 */
    assert_true(detectors_off_hours(&o, 1775315640));        /* Sun 01:44 +10:30 */
}

/* America/Santiago sets its clocks back at midnight, from Saturday 24:00
 * -03 to 23:00 -04 (2026-04-05 03:00 UTC): Saturday's last hour comes
 * again. A Saturday night shift 23:30-06:00 begun at 23:30 -03 goes on
 * through it, and is Saturday's; before, 23:00-23:29 -04 were off-hours. */
static void off_hours_start_in_an_hour_that_comes_again_before_midnight(void **state)
{
    (void)state;
    struct off_hours_cfg o = hours_in("America/Santiago", 23 * 60 + 30, 6 * 60, 0x20);
    assert_true(detectors_off_hours(&o, 1775356140));  /* Sat 23:29 -03 */
    assert_false(detectors_off_hours(&o, 1775356200)); /* Sat 23:30 -03 */
    assert_false(detectors_off_hours(&o, 1775358000)); /* Sat 23:00 -04, the clock set back */
    assert_false(detectors_off_hours(&o, 1775359740)); /* Sat 23:29 -04 */
    assert_false(detectors_off_hours(&o, 1775361600)); /* Sun 00:00 -04 */
    assert_false(detectors_off_hours(&o, 1775383140)); /* Sun 05:59 -04 */
    assert_true(detectors_off_hours(&o, 1775383200));  /* Sun 06:00 -04 */
    o.days_mask = 0x40;                                /* Sunday nights only */
    assert_true(detectors_off_hours(&o, 1775358000));  /* Sat 23:00 -04 */
    assert_true(detectors_off_hours(&o, 1775361600));  /* Sun 00:00 -04: Saturday night's */
}

/* Hours whose start or end falls in a skipped hour (the clocks go
 * forward) begin or end at the first instant after the gap, when the
 * clock first shows a time past it; hours wholly inside the gap are none
 * that day. New York 2026-03-08 07:00 UTC (01:59:59 EST, then 03:00 EDT),
 * Australia/Lord_Howe 2026-10-03 15:30 UTC (02:00 +10:30 to 02:30 +11),
 * Antarctica/Troll 2026-03-29 01:00 UTC (01:00 +00 to 03:00 +02), and
 * America/Santiago 2026-09-06 04:00 UTC (Saturday 24:00 -04 to Sunday
 * 01:00 -03: Sunday's first hour is skipped). */
static void off_hours_start_or_end_in_a_skipped_hour(void **state)
{
    (void)state;
    struct off_hours_cfg o = hours_in("America/New_York", 150, 9 * 60, 0x40); /* 02:30-09:00 */
    assert_true(detectors_off_hours(&o, 1772953140));                         /* Sun 01:59 EST */
    assert_false(detectors_off_hours(&o, 1772953200));                        /* Sun 03:00 EDT */
    o = hours_in("America/New_York", 22 * 60, 150, 0x20);     /* Sat night 22:00-02:30 */
    assert_false(detectors_off_hours(&o, 1772953199));        /* Sun 01:59:59 EST */
    assert_true(detectors_off_hours(&o, 1772953200));         /* Sun 03:00 EDT */
    o = hours_in("America/New_York", 130, 160, 0x40);         /* 02:10-02:40: none that day */
    assert_true(detectors_off_hours(&o, 1772953140));         /* Sun 01:59 EST */
    assert_true(detectors_off_hours(&o, 1772953200));         /* Sun 03:00 EDT */
    o = hours_in("Australia/Lord_Howe", 135, 9 * 60, 0x40);   /* 02:15-09:00 */
    assert_true(detectors_off_hours(&o, 1791041340));         /* Sun 01:59 +10:30 */
    assert_false(detectors_off_hours(&o, 1791041400));        /* Sun 02:30 +11 */
    o = hours_in("Australia/Lord_Howe", 22 * 60, 135, 0x20);  /* Sat night 22:00-02:15 */
    assert_false(detectors_off_hours(&o, 1791041340));        /* Sun 01:59 +10:30 */
    assert_true(detectors_off_hours(&o, 1791041400));         /* Sun 02:30 +11 */
    o = hours_in("Antarctica/Troll", 2 * 60, 9 * 60, 0x40);   /* 02:00-09:00 */
    assert_true(detectors_off_hours(&o, 1774745940));         /* Sun 00:59 +00 */
    assert_false(detectors_off_hours(&o, 1774746000));        /* Sun 03:00 +02 */
    o = hours_in("Antarctica/Troll", 60, 179, 0x40);          /* 01:00-02:59: none that day */
    assert_true(detectors_off_hours(&o, 1774746000));         /* Sun 03:00 +02 */
    o = hours_in("America/Santiago", 30, 8 * 60, 0x40);       /* Sun 00:30-08:00 */
    assert_true(detectors_off_hours(&o, 1788667140));         /* Sat 23:59 -04 */
    assert_false(detectors_off_hours(&o, 1788667200));        /* Sun 01:00 -03 */
    o.days_mask = 0x20;                                       /* Saturdays only */
    assert_true(detectors_off_hours(&o, 1788667200));         /* Sun 01:00 -03 */
    o = hours_in("America/Santiago", 22 * 60, 30, 0x20);      /* Sat night 22:00-00:30 */
    assert_false(detectors_off_hours(&o, 1788667140));        /* Sat 23:59 -04 */
    assert_true(detectors_off_hours(&o, 1788667200));         /* Sun 01:00 -03 */
    o = hours_in("America/Santiago", 18 * 60, 24 * 60, 0x20); /* Sat 18:00-24:00 */
    assert_false(detectors_off_hours(&o, 1788667199));        /* Sat 23:59:59 -04 */
    assert_true(detectors_off_hours(&o, 1788667200));         /* Sun 01:00 -03 */
}

/* A zone is the file the policy's loader checked, under
 * /usr/share/zoneinfo: a TZDIR in the gateway's environment made glibc
 * look elsewhere, find nothing, take the name for a POSIX TZ string it is
 * not, and go by UTC without a word. Etc/GMT+5 is IANA's (and POSIX's)
 * sign: five hours behind UTC. */
static void off_hours_zone_file(void **state)
{
    (void)state;
    struct off_hours_cfg o = {.set = true,
                              .tz = "Europe/Berlin",
                              .start_min = 8 * 60,
                              .end_min = 20 * 60,
                              .days_mask = 0x1f};
    time_t mon19 = (time_t)(T0 / 1000); /* Monday 19:00 UTC, 20:00 in Berlin */
    setenv("TZDIR", "/nonexistent-zoneinfo", 1);
    assert_true(detectors_off_hours(&o, mon19));
    unsetenv("TZDIR");
    assert_true(detectors_off_hours(&o, mon19));
    o.tz = "Etc/GMT+5"; /* 14:00 there */
    o.start_min = 14 * 60;
    o.end_min = 15 * 60;
    assert_false(detectors_off_hours(&o, mon19));
    assert_true(detectors_off_hours(&o, mon19 - 60));
    assert_true(detectors_off_hours(&o, mon19 + 3600));
}

static void off_hours_detector(void **state)
{
    struct fx *f = *state;
    f->p.alerts.off_hours = WEEKDAYS_8_TO_19_UTC;
    detectors_configure(f->d, &f->p);
    struct egress_event w = ev_of("ci", "PATCH", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    struct egress_event r = ev_of("ci", "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    detectors_feed(f->d, &w, T0 - 60000); /* 18:59 */
    detectors_feed(f->d, &r, T0);         /* a read */
    assert_int_equal(f->got.n[ALERT_OFF_HOURS_WRITE], 0);
    detectors_feed(f->d, &w, T0);
    assert_int_equal(f->got.n[ALERT_OFF_HOURS_WRITE], 1);
    assert_non_null(strstr(f->got.last_detail, "UTC 08:00-19:00"));
}

/* Runs detectors_feed(<ev>) at <t> with standard error going to <out>
 * (<n> bytes), which gets what was written there. */
static void feed_capturing(struct fx *f, const struct egress_event *ev, int64_t t, char *out,
                           size_t n)
{
    char path[] = "/tmp/sluice-test-stderr-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    assert_true(fd >= 0 && saved >= 0);
    unlink(path);
    fflush(stderr);
    dup2(fd, 2);
    detectors_feed(f->d, ev, t);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t got = pread(fd, out, n - 1, 0);
    out[got > 0 ? got : 0] = '\0';
    close(fd);
}

/* The loader checked the zone's file, but a tzdata upgrade can remove it
 * (Debian moved legacy names to tzdata-legacy) or replace it while the
 * gateway runs, and glibc then went by UTC without a word: off-hours
 * writes judged in the wrong zone, and nobody told. Standard error says
 * so once, not at every write; the writes are judged by UTC meanwhile. */
static void off_hours_zone_gone_at_run_time_is_told(void **state)
{
    struct fx *f = *state;
    f->p.alerts.off_hours = (struct off_hours_cfg){.set = true,
                                                   .tz = "Sluice-Test/Gone",
                                                   .start_min = 8 * 60,
                                                   .end_min = 19 * 60,
                                                   .days_mask = 0x1f};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    struct egress_event w = ev_of("ci", "PUT", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    char text[2048];
    feed_capturing(f, &w, T0, text, sizeof(text)); /* Monday 19:00 UTC */
    assert_non_null(strstr(text, "sluice: alerts.off_hours.tz 'Sluice-Test/Gone': "
                                 "/usr/share/zoneinfo/Sluice-Test/Gone can no longer be read as "
                                 "a time zone (removed or replaced since the policy loaded?): "
                                 "off-hours writes are judged by UTC until it can be read again"));
    assert_int_equal(f->got.n[ALERT_OFF_HOURS_WRITE], 1); /* by UTC */
    feed_capturing(f, &w, T0 + 60000, text, sizeof(text));
    assert_string_equal(text, ""); /* once */
}

/* zone_localtime_file() tells a zone file glibc reads from one it cannot
 * (it starts "TZif", as the loader checks, but is cut short), which glibc
 * takes for UTC: the loader refuses such a zone. */
static void zone_file_cut_short_is_not_a_zone(void **state)
{
    (void)state;
    struct tm tm;
    time_t mon19 = (time_t)(T0 / 1000);
    assert_int_equal(zone_localtime_file("/usr/share/zoneinfo/Europe/Berlin", mon19, &tm), 0);
    assert_int_equal(tm.tm_hour, 20);
    char path[] = "/tmp/sluice-test-zone-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *in = fopen("/usr/share/zoneinfo/Europe/Berlin", "rb");
    assert_non_null(in);
    char head[60];
    assert_int_equal(fread(head, 1, sizeof(head), in), sizeof(head));
    fclose(in);
    assert_int_equal(write(fd, head, sizeof(head)), (ssize_t)sizeof(head));
    close(fd);
    assert_int_equal(zone_localtime_file(path, mon19, &tm), 1);
    assert_int_equal(tm.tm_hour, 19); /* glibc's UTC */
    unlink(path);
    assert_int_equal(zone_localtime_file(path, mon19, &tm), 1); /* gone */
    assert_int_equal(zone_localtime("UTC", mon19, &tm), 0);
    assert_int_equal(zone_localtime("Etc/GMT+5", mon19, &tm), 0);
    assert_int_equal(tm.tm_hour, 14);
}

static void baseline_learns_and_alerts(void **state)
{
    struct fx *f = *state;
    f->p.alerts.baseline =
        (struct baseline_cfg){.set = true, .factor = 3, .floor = 5, .learn_ms = 5 * 60000};
    detectors_configure(f->d, &f->p);
    struct egress_event ev = ev_of("ci", "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_0);
    /* ten minutes of 4 requests a minute */
    for (int m = 0; m < 10; m++)
        for (int i = 0; i < 4; i++)
            detectors_feed(f->d, &ev, T0 + m * 60000 + i);
    assert_int_equal(f->got.n[ALERT_BASELINE], 0);
    /* minute 10: 12 is 3 x 4 (not over); 16 is over the factor and the floor */
    for (int i = 0; i < 12; i++)
        detectors_feed(f->d, &ev, T0 + 600000 + i);
    assert_int_equal(f->got.n[ALERT_BASELINE], 0);
    for (int i = 0; i < 4; i++)
        detectors_feed(f->d, &ev, T0 + 600100 + i);
    assert_int_equal(f->got.n[ALERT_BASELINE], 1);
    assert_non_null(strstr(f->got.last_detail, "this minute"));
    /* an idle hour decays the baseline; the floor still holds */
    detectors_tick(f->d, T0 + 3600000 * 2);
    assert_int_equal(f->got.n[ALERT_BASELINE], 2); /* the summary of the 3 folded repeats */
    assert_int_equal(f->got.last_count, 3);
    for (int i = 0; i < 5; i++)
        detectors_feed(f->d, &ev, T0 + 3600000 * 2 + i);
    assert_int_equal(f->got.n[ALERT_BASELINE], 2);
    uint64_t folded = detectors_folded(f->d);
    detectors_feed(f->d, &ev, T0 + 3600000 * 2 + 10);
    /* over the floor, but the summary opened a period: folded, then summarised */
    assert_int_equal(detectors_folded(f->d), folded + 1);
    detectors_tick(f->d, T0 + 3600000 * 2 + 60000);
    assert_int_equal(f->got.n[ALERT_BASELINE], 3);
    assert_int_equal(f->got.last_count, 1);
}

/* Learning that begins within a minute is seeded by the first full minute
 * (SPEC), not by the few seconds of the first one, which would put the
 * average, and so the alert threshold, far too low. */
static void baseline_seeded_by_the_first_full_minute(void **state)
{
    struct fx *f = *state;
    f->p.alerts.baseline =
        (struct baseline_cfg){.set = true, .factor = 2, .floor = 1, .learn_ms = 2 * 60000};
    detectors_configure(f->d, &f->p);
    struct egress_event ev = ev_of("ci", "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_0);
    for (int i = 0; i < 10; i++) /* the last 10 s of minute 0 */
        detectors_feed(f->d, &ev, T0 + 50000 + i);
    for (int m = 1; m <= 2; m++) /* two full minutes of 100 */
        for (int i = 0; i < 100; i++)
            detectors_feed(f->d, &ev, T0 + m * 60000 + i);
    assert_int_equal(f->got.n[ALERT_BASELINE], 0);
    /* minute 3: learned for 2 minutes; 200 is not over 2 x 100, 201 is */
    for (int i = 0; i < 200; i++)
        detectors_feed(f->d, &ev, T0 + 3 * 60000 + i);
    assert_int_equal(f->got.n[ALERT_BASELINE], 0);
    detectors_feed(f->d, &ev, T0 + 3 * 60000 + 200);
    assert_int_equal(f->got.n[ALERT_BASELINE], 1);
    assert_non_null(strstr(f->got.last_detail, "made 201 requests this minute, over 2 x its "
                                               "baseline of 100.0/min"));
}

/* The floor counts KiB for bytes: one too large to be held in bytes (any
 * floor: the loader takes up to 2^64 - 1) is more bytes than any minute
 * moves, never a small number wrapped around: floor 2^54 x 1024 was 0, and
 * every minute over factor x the average alerted. */
static void baseline_huge_floor_holds_bytes(void **state)
{
    struct fx *f = *state;
    f->p.alerts.baseline = (struct baseline_cfg){
        .set = true, .factor = 2, .floor = UINT64_C(1) << 54, .learn_ms = 2 * 60000};
    detectors_configure(f->d, &f->p);
    struct egress_event up = ev_of("ci", "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    up.kind = EVENT_EGRESS_PROGRESS;
    up.bytes_up = 100;
    for (int m = 0; m <= 2; m++) /* learned on 100 bytes a minute */
        detectors_feed(f->d, &up, T0 + m * 60000);
    up.bytes_up = 1000000; /* minute 3: far over 2 x 100, far under the floor */
    detectors_feed(f->d, &up, T0 + 3 * 60000);
    detectors_tick(f->d, T0 + 4 * 60000);
    assert_int_equal(f->got.n[ALERT_BASELINE], 0);
    /* the same minute under a floor of 1 KiB does alert: the test can fail */
    f->p.alerts.baseline.floor = 1;
    detectors_configure(f->d, &f->p);
    detectors_feed(f->d, &up, T0 + 5 * 60000);
    assert_int_equal(f->got.n[ALERT_BASELINE], 1);
}

/* Opens the state store in <dir>, which exists. */
static struct store *store_at(const char *dir)
{
    char *err = NULL, *warn = NULL;
    struct store *s = store_open(dir, &err, &warn);
    assert_non_null(s);
    assert_null(warn);
    return s;
}

/* A state store in a new directory made from the template <dir>
 * ("/tmp/...-XXXXXX", rewritten in place); remove_dir() removes it. */
static struct store *store_in_new_dir(char *dir)
{
    assert_non_null(mkdtemp(dir));
    return store_at(dir);
}

static void remove_dir(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A stop within learning's first minute stores a row that holds no average
 * yet: after a restart it is relearned from the next full minute, not
 * seeded by the minute of the restart, seen only in part. */
static void baseline_unseeded_row_is_relearned(void **state)
{
    struct fx *f = *state;
    char dir[] = "/tmp/sluice-det-XXXXXX";
    struct store *s = store_in_new_dir(dir);
    struct detectors *d = detectors_new(&f->bus, s);
    f->p.alerts.baseline =
        (struct baseline_cfg){.set = true, .factor = 2, .floor = 1, .learn_ms = 2 * 60000};
    detectors_configure(d, &f->p);
    struct egress_event ev = ev_of("ci", "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_0);
    for (int i = 0; i < 10; i++) /* the last 10 s of minute 0, then a stop */
        detectors_feed(d, &ev, T0 + 50000 + i);
    detectors_flush(d, T0 + 59000);
    detectors_free(d);
    store_close(s);

    s = store_at(dir);
    d = detectors_new(&f->bus, s);
    detectors_configure(d, &f->p);
    for (int i = 0; i < 10; i++) /* back for the last 10 s of minute 1 */
        detectors_feed(d, &ev, T0 + 110000 + i);
    for (int m = 2; m <= 5; m++) /* then a steady 100 a minute */
        for (int i = 0; i < 100; i++)
            detectors_feed(d, &ev, T0 + m * 60000 + i);
    assert_int_equal(f->got.n[ALERT_BASELINE], 0);
    detectors_free(d);
    store_close(s);
    remove_dir(dir);
}

static void baseline_cold_start_is_quiet(void **state)
{
    struct fx *f = *state;
    f->p.alerts.baseline =
        (struct baseline_cfg){.set = true, .factor = 2, .floor = 1, .learn_ms = 3600000};
    detectors_configure(f->d, &f->p);
    struct egress_event ev = ev_of("ci", "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_0);
    for (int i = 0; i < 500; i++)
        detectors_feed(f->d, &ev, T0 + i * 1000);
    assert_int_equal(f->got.n[ALERT_BASELINE], 0); /* still learning */
}

static void memory_survives_a_restart(void **state)
{
    struct fx *f = *state;
    char dir[] = "/tmp/sluice-det-XXXXXX";
    struct store *s = store_in_new_dir(dir);
    struct detectors *d = detectors_new(&f->bus, s);
    f->p.alerts.first_contact = true;
    f->p.alerts.baseline =
        (struct baseline_cfg){.set = true, .factor = 2, .floor = 1, .learn_ms = 60000};
    detectors_configure(d, &f->p);
    struct egress_event ev = ev_of("ci", "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_0);
    detectors_feed(d, &ev, T0);
    detectors_feed(d, &ev, T0 + 120000); /* rolls a minute: the baseline is stored */
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], 1);
    detectors_free(d);
    store_close(s);

    s = store_at(dir);
    d = detectors_new(&f->bus, s);
    detectors_configure(d, &f->p);
    detectors_feed(d, &ev, T0 + 130000);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], 1); /* not the first time any more */
    ev.host = "b.test";
    detectors_feed(d, &ev, T0 + 130001);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], 2);
    /* the learned baseline came back: 3 requests this minute is over 2 x ~0.x and the floor */
    detectors_feed(d, &ev, T0 + 130002);
    assert_int_equal(f->got.n[ALERT_BASELINE], 1);
    detectors_free(d);
    store_close(s);
    remove_dir(dir);
}

static void load_row(const char *agent, const struct store_baseline *b, void *arg)
{
    (void)agent;
    *(struct store_baseline *)arg = *b;
}

/* The shutdown path: open summaries are written at once, and the stored
 * baseline is the one learned as of the real time (never rolled to a fake
 * far-away minute, which zeroed both averages). */
static void flush_at_shutdown_keeps_the_baseline(void **state)
{
    struct fx *f = *state;
    char dir[] = "/tmp/sluice-det-XXXXXX";
    struct store *s = store_in_new_dir(dir);
    struct detectors *d = detectors_new(&f->bus, s);
    f->p.alerts.baseline =
        (struct baseline_cfg){.set = true, .factor = 2, .floor = 3, .learn_ms = 60000};
    f->p.alerts.write_burst = (struct threshold){.set = true, .max = 1, .per_ms = 60000};
    detectors_configure(d, &f->p);
    struct egress_event ev = ev_of("ci", "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_0);
    for (int m = 0; m < 5; m++)
        for (int i = 0; i < 3; i++)
            detectors_feed(d, &ev, T0 + m * 60000 + i);
    struct egress_event w = ev_of("ci", "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    for (int i = 0; i < 4; i++)
        detectors_feed(d, &w, T0 + 5 * 60000 + 1000 + i); /* 1 alert, 2 folded */
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 1);
    int64_t stop = T0 + 5 * 60000 + 2000;
    detectors_flush(d, stop); /* long before the fold period ends */
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 2);
    assert_int_equal(f->got.last_count, 2);
    assert_non_null(strstr(f->got.last_detail, "2 more within 1m, folded"));
    detectors_free(d);
    store_close(s);

    s = store_at(dir);
    struct store_baseline b = {0};
    assert_int_equal(store_load_baselines(s, 4096, load_row, &b), 1);
    assert_int_equal(b.minute, stop / 60000); /* as of the real minute */
    assert_int_equal(b.since_ms, T0);
    assert_true(b.req_avg > 2.0 && b.req_avg < 6.0); /* learned, not wiped */
    /* a restart in the same minute: a normal minute (4 requests, the 3 of the
     * running minute having been lost) does not alert; a burst does */
    d = detectors_new(&f->bus, s);
    detectors_configure(d, &f->p);
    for (int i = 0; i < 4; i++)
        detectors_feed(d, &ev, stop + 1000 + i);
    assert_int_equal(f->got.n[ALERT_BASELINE], 0);
    for (int i = 0; i < 10; i++)
        detectors_feed(d, &ev, stop + 2000 + i);
    assert_int_equal(f->got.n[ALERT_BASELINE], 1);
    detectors_free(d);
    store_close(s);
    remove_dir(dir);
}

/* A stored row that cannot be an average (as the old shutdown path wrote:
 * zeros at a minute ~1e14) does not make every minute an alert. */
static void absurd_stored_baseline_is_repaired(void **state)
{
    struct fx *f = *state;
    char dir[] = "/tmp/sluice-det-XXXXXX";
    struct store *s = store_in_new_dir(dir);
    struct store_baseline bad = {
        .req_avg = 3, .bytes_avg = 0, .since_ms = T0 - 86400000, .minute = 76861433640456LL};
    store_put_baseline(s, "ci", &bad);
    assert_int_equal(store_sync(s), 0);
    struct detectors *d = detectors_new(&f->bus, s);
    f->p.alerts.baseline =
        (struct baseline_cfg){.set = true, .factor = 2, .floor = 3, .learn_ms = 60000};
    detectors_configure(d, &f->p);
    detectors_flush(d, T0);
    detectors_free(d);
    store_close(s);
    s = store_at(dir);
    struct store_baseline b = {0};
    assert_int_equal(store_load_baselines(s, 4096, load_row, &b), 1);
    assert_int_equal(b.minute, T0 / 60000); /* brought back to the real minute */
    store_close(s);
    remove_dir(dir);
}

/* grant_expiring is announced again when the UTC day changes, once. */
static void grants_announced_daily(void **state)
{
    struct fx *f = *state;
    int32_t today = day_of((time_t)(T0 / 1000));
    f->rules[0] = (struct rule){.index = 0,
                                .pattern = "api.test",
                                .tier = TIER_3,
                                .owner = "alice",
                                .has_expires = true,
                                .expires = today + 3};
    f->p.nrules = 1;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    int64_t midnight = ((int64_t)today + 1) * 86400000LL;
    assert_int_equal(detectors_grants_daily(f->d, &f->p, T0), 1); /* the first call */
    assert_non_null(strstr(f->got.last_detail, "3 days left"));
    assert_int_equal(detectors_grants_daily(f->d, &f->p, T0 + 250), -1);
    assert_int_equal(detectors_grants_daily(f->d, &f->p, midnight - 1), -1);
    assert_int_equal(f->got.n[ALERT_GRANT_EXPIRING], 1);
    assert_int_equal(detectors_grants_daily(f->d, &f->p, midnight), 1);
    assert_non_null(strstr(f->got.last_detail, "2 days left"));
    assert_int_equal(detectors_grants_daily(f->d, &f->p, midnight + 250), -1);
    /* an announcement on reload counts as today's */
    assert_int_equal(detectors_grants(f->d, &f->p, midnight + 86400000LL), 1);
    assert_int_equal(detectors_grants_daily(f->d, &f->p, midnight + 86400000LL + 250), -1);
    assert_int_equal(f->got.n[ALERT_GRANT_EXPIRING], 3);
}

/* The per-agent table holds DETECT_AGENTS_MAX agents. Agent ids come and
 * go with reloads (one per job, say): once that many were ever seen, an
 * agent new to the table must still get its windows, taking the place of
 * one that has been idle longest, not be left without write_burst,
 * denied_burst, upload_bytes and baseline for the gateway's lifetime. */
static void agents_past_the_table_still_get_windows(void **state)
{
    struct fx *f = *state;
    f->p.alerts.write_burst = (struct threshold){.set = true, .max = 1, .per_ms = 60000};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    char id[32];
    for (int i = 0; i < DETECT_AGENTS_MAX; i++) {
        snprintf(id, sizeof(id), "job-%d", i);
        struct egress_event ev = ev_of(id, "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
        detectors_feed(f->d, &ev, T0 + i);
    }
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 0);
    /* every window is busy: an agent that would need one of their places
     * gets none (its writes count with those of other such agents), and
     * theirs still count */
    struct egress_event late = ev_of("late", "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    struct egress_event job0 = ev_of("job-0", "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    detectors_feed(f->d, &late, T0 + 5000);
    detectors_feed(f->d, &late, T0 + 5001);
    assert_false(detectors_tracks(f->d, "late"));
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 1);
    assert_non_null(strstr(f->got.last_detail, "late and the other agents past the 4096 tracked"));
    detectors_feed(f->d, &job0, T0 + 5002);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 2);
    assert_string_equal(f->got.last_agent, "job-0");
    /* two minutes later every window is empty: a new agent gets one */
    detectors_feed(f->d, &late, T0 + 120000);
    detectors_feed(f->d, &late, T0 + 120001);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 3);
    assert_string_equal(f->got.last_agent, "late");
    assert_null(strstr(f->got.last_detail, "counted together"));
    /* and so does the next, in place of the one idle longest */
    struct egress_event later =
        ev_of("later", "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    detectors_feed(f->d, &later, T0 + 120002);
    detectors_feed(f->d, &later, T0 + 120003);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 4);
    assert_string_equal(f->got.last_agent, "later");
    /* "late", seen last, kept its window */
    detectors_feed(f->d, &late, T0 + 120004);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 4); /* folded into its period */
    assert_int_equal(detectors_folded(f->d), 1);
}

/* Every event looks up its agent, and with the table full an agent new to
 * it looks for one to evict: neither may compare the event with every
 * agent tracked (a scan of 4096 agents an event). At DETECT_AGENTS_MAX
 * agents: events of tracked agents compare about one agent each; new
 * agents, while all but one of the tracked agents are busy and seen before
 * the idle one, each take the idle one's place without examining the busy
 * ones anew. Eviction keeps its order: the idle agent seen longest ago. */
static void agent_lookups_do_not_scan_the_table(void **state)
{
    struct fx *f = *state;
    f->p.alerts.write_burst = (struct threshold){.set = true, .max = 1000000, .per_ms = 800000};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    char id[32];
    for (int i = 0; i < DETECT_AGENTS_MAX - 1; i++) {
        snprintf(id, sizeof(id), "job-%d", i);
        struct egress_event ev = ev_of(id, "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
        detectors_feed(f->d, &ev, T0 + 1);
    }
    struct egress_event idle = ev_of("idle", "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    detectors_feed(f->d, &idle, T0 + 2);
    /* lookups of tracked agents */
    uint64_t before = detectors_agent_probes(f->d);
    unsigned r = 1;
    const int lookups = 20000;
    for (int i = 0; i < lookups; i++) {
        r = r * 1103515245u + 12345u;
        snprintf(id, sizeof(id), "job-%u", (r >> 8) % (DETECT_AGENTS_MAX - 1));
        struct egress_event ev = ev_of(id, "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
        detectors_feed(f->d, &ev, T0 + 3);
    }
    uint64_t probes = detectors_agent_probes(f->d) - before;
    print_message("%.2f agents compared a lookup\n", (double)probes / lookups);
    assert_true(probes <= 8ull * lookups);
    /* new agents, each taking the place of the one before it */
    before = detectors_agent_probes(f->d);
    const int fresh = 3000;
    for (int i = 0; i < fresh; i++) {
        snprintf(id, sizeof(id), "new-%d", i);
        struct egress_event ev = ev_of(id, "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
        detectors_feed(f->d, &ev, T0 + 4 + i);
    }
    probes = detectors_agent_probes(f->d) - before;
    print_message("%.2f agents compared or examined for a new agent\n", (double)probes / fresh);
    assert_true(probes <= 8ull * fresh);
    /* the last new agent holds a window, and every busy agent kept its own */
    f->p.alerts.write_burst.max = 1;
    assert_int_equal(detectors_configure(f->d, &f->p), 0); /* same per: windows kept */
    struct egress_event last =
        ev_of("new-2999", "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    detectors_feed(f->d, &last, T0 + 5000);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 0);
    detectors_feed(f->d, &last, T0 + 5001);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 1);
    assert_string_equal(f->got.last_agent, "new-2999");
    struct egress_event job = ev_of("job-7", "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    detectors_feed(f->d, &job, T0 + 5002);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 2);
    assert_string_equal(f->got.last_agent, "job-7");
    /* a new agent now finds no idle one: it gets no window, and its
     * writes count with those of the other agents without one */
    struct egress_event none = ev_of("none", "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    detectors_feed(f->d, &none, T0 + 5003);
    detectors_feed(f->d, &none, T0 + 5004);
    assert_false(detectors_tracks(f->d, "none"));
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 3);
    assert_string_equal(f->got.last_agent, "none");
}

/* Eviction against a plain model of its rule (docs/SPEC.md, Windows): at
 * DETECT_AGENTS_MAX agents a new one takes the place of the agent seen
 * longest ago whose windows are all empty, or gets none. 30,000 events
 * of 5,000 agents, half from 300 busy ones, a quarter of the others
 * writes, the clock moving <step> + 0 to <span> - 1 <div>ths of a ms an
 * event (and, when <back_every> is not 0, 2 s back every <back_every>
 * events), windows of <per_ms>; the model's agents and the detectors'
 * are the same after each of the first 100 events and every 1000th. */
struct model_clock {
    unsigned step, span, div;
    int back_every;
};

static void eviction_against_a_plain_model(struct fx *f, uint64_t per_ms, struct model_clock c)
{
    enum { POOL = 5000, HOT = 300, EVENTS = 30000 };
    f->p.alerts.write_burst = (struct threshold){.set = true, .max = 1000000, .per_ms = per_ms};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    struct model {
        bool tracked;
        int64_t seen;
        struct window w;
    } *m = calloc(POOL, sizeof(*m));
    assert_non_null(m);
    size_t n = 0;
    int skipped = 0, evictions = 0;
    unsigned r = 7;
    int64_t t = T0, sub = 0;
    char id[32];
    for (int e = 0; e < EVENTS; e++) {
        r = r * 1103515245u + 12345u;
        bool hot = (r >> 16) % 2 == 0;
        r = r * 1103515245u + 12345u;
        int k = (int)((r >> 8) % (hot ? HOT : POOL));
        r = r * 1103515245u + 12345u;
        sub += c.step + (r >> 8) % c.span;
        if (c.back_every != 0 && e % c.back_every == c.back_every - 1)
            sub -= 2000 * (int64_t)c.div;
        t = T0 + sub / c.div;
        bool write = hot || (r >> 20) % 4 == 0;
        if (!m[k].tracked && n == DETECT_AGENTS_MAX) {
            int v = -1;
            for (int i = 0; i < POOL; i++)
                if (m[i].tracked && window_sum(&m[i].w, t) == 0 && (v < 0 || m[i].seen < m[v].seen))
                    v = i;
            int oldest = -1;
            for (int i = 0; i < POOL; i++)
                if (m[i].tracked && (oldest < 0 || m[i].seen < m[oldest].seen))
                    oldest = i;
            skipped += v != oldest;
            evictions += v >= 0;
            if (v >= 0) {
                m[v].tracked = false;
                n--;
            }
        }
        if (!m[k].tracked && n < DETECT_AGENTS_MAX) {
            m[k].tracked = true;
            window_init(&m[k].w, per_ms);
            n++;
        }
        if (m[k].tracked) {
            m[k].seen = e; /* the order of events, whatever the clock did */
            if (write)
                window_add(&m[k].w, t, 1);
        }
        snprintf(id, sizeof(id), "agent-%d", k);
        struct egress_event ev =
            ev_of(id, write ? "POST" : "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
        detectors_feed(f->d, &ev, t);
        if (e % 1000 == 999 || e < 100)
            for (int i = 0; i < POOL; i++) {
                snprintf(id, sizeof(id), "agent-%d", i);
                assert_int_equal(detectors_tracks(f->d, id), m[i].tracked);
            }
    }
    print_message("evictions %d, past busy ones %d\n", evictions, skipped);
    assert_true(skipped > 100); /* the walk past busy agents was exercised */
    free(m);
}

/* Windows of 800 s, 1 to 80 ms an event: most evictions pass over busy
 * agents that empty later. */
static void eviction_matches_a_plain_model(void **state)
{
    eviction_against_a_plain_model(*state, 800000, (struct model_clock){1, 80, 1, 0});
}

/* Windows of 1 s (a threshold without per), 8 events a millisecond, the
 * clock going back now and then: agents passed over as busy empty within
 * the run, and counts dated after the clock went back come into a window
 * later. */
static void eviction_with_short_windows_matches_a_plain_model(void **state)
{
    eviction_against_a_plain_model(*state, 1000, (struct model_clock){0, 2, 4, 9973});
}

/* DETECT_AGENTS_MAX agents, job-0 .. job-4095, each with a write in a
 * window of <per_ms>, five a millisecond from <t>: none is idle until
 * its window empties. The policy's first_contact and off_hours are in
 * force only after them. Returns the time of the last. */
static int64_t fill_with_busy_agents(struct fx *f, uint64_t per_ms, int64_t t)
{
    struct alerts_cfg after = f->p.alerts;
    f->p.alerts.first_contact = false;
    f->p.alerts.off_hours.set = false;
    f->p.alerts.write_burst = (struct threshold){.set = true, .max = 1000000000, .per_ms = per_ms};
    after.write_burst = f->p.alerts.write_burst;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    char id[32];
    for (int i = 0; i < DETECT_AGENTS_MAX; i++) {
        snprintf(id, sizeof(id), "job-%d", i);
        struct egress_event ev = ev_of(id, "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
        detectors_feed(f->d, &ev, t + i / 5);
    }
    f->p.alerts = after;
    assert_int_equal(detectors_configure(f->d, &f->p), 0); /* same per: the windows are kept */
    return t + (DETECT_AGENTS_MAX - 1) / 5;
}

/* With windows of 1 s (a threshold without per) a window's tenth ends
 * every 100 ms, and eviction walked the whole table of busy agents again
 * each time: a new agent every millisecond, with every tracked agent
 * writing once every 820 ms, cost 49.5 agents examined a new agent (4096
 * every 100 ms). Now each is examined once per event of its own, or once
 * its windows can have emptied; and once they have, a new agent takes
 * the place of the one seen longest ago. */
static void busy_agents_with_short_windows_are_examined_once(void **state)
{
    struct fx *f = *state;
    int64_t t = fill_with_busy_agents(f, 1000, T0) + 1;
    enum { MS = 2000, TRACKED_A_MS = 5 };
    char id[32];
    uint64_t probes = 0;
    long next = 0;
    for (int ms = 0; ms < MS; ms++) {
        for (int k = 0; k < TRACKED_A_MS; k++, next++) {
            snprintf(id, sizeof(id), "job-%ld", next % DETECT_AGENTS_MAX);
            struct egress_event ev =
                ev_of(id, "POST", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
            detectors_feed(f->d, &ev, t + ms);
        }
        snprintf(id, sizeof(id), "new-%d", ms);
        struct egress_event ev = ev_of(id, "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
        uint64_t before = detectors_agent_probes(f->d);
        detectors_feed(f->d, &ev, t + ms);
        probes += detectors_agent_probes(f->d) - before;
        assert_false(detectors_tracks(f->d, id));
    }
    print_message("%.2f agents compared or examined for a new agent\n", (double)probes / MS);
    assert_true(probes <= 16ull * MS);
    /* the writes stop; 1.1 s on every window is empty, and the agent seen
     * longest ago gives its place */
    int64_t end = t + MS + 1100;
    struct egress_event late = ev_of("late", "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    detectors_feed(f->d, &late, end);
    assert_true(detectors_tracks(f->d, "late"));
    snprintf(id, sizeof(id), "job-%ld", next % DETECT_AGENTS_MAX);
    assert_false(detectors_tracks(f->d, id));
    snprintf(id, sizeof(id), "job-%ld", (next + 1) % DETECT_AGENTS_MAX);
    assert_true(detectors_tracks(f->d, id));
}

/* Fills the table with busy agents (the policy's alerts in force after
 * them), then feeds 100 requests of agent "sibling", which gets no window,
 * one a millisecond, to hosts PRE0POST .. PRE99POST: PUTs let through at
 * tier 0 when <put>, else GETs denied. They must give <burst> + 1 alerts
 * of <kind>, the last saying <told>. Returns the time of the first. */
static int64_t sibling_floods(struct fx *f, const char *pre, const char *post, bool put,
                              enum alert_kind kind, int burst, const char *told)
{
    int64_t t = fill_with_busy_agents(f, 800000, T0) + 1;
    char host[64];
    for (int i = 0; i < 100; i++) {
        snprintf(host, sizeof(host), "%s%d%s", pre, i, post);
        struct egress_event ev =
            put ? ev_of("sibling", "PUT", host, VERDICT_ALLOW, REASON_NONE, TIER_0)
                : ev_of("sibling", "GET", host, VERDICT_DENY, REASON_NOT_IN_POLICY, TIER_NONE);
        detectors_feed(f->d, &ev, t + i);
    }
    assert_false(detectors_tracks(f->d, "sibling"));
    print_message("%d %s lines for 100 hosts\n", f->got.n[kind], alert_kind_name(kind));
    assert_int_equal(f->got.n[kind], burst + 1);
    assert_non_null(strstr(f->got.last_detail, told));
    return t;
}

/* An agent that finds every tracked agent busy gets no window: its first
 * contacts were each a line, never folded, so an agent that kept the
 * table busy with sibling agents could put a line per made-up host into
 * every sink (100 first contacts, 100 lines). Such agents' first contacts
 * count together, and past DETECT_CONTACTS_BURST within a minute each
 * one's fold per agent and minute, as an agent's own do. */
static void first_contacts_of_agents_without_a_window_fold(void **state)
{
    struct fx *f = *state;
    f->p.alerts.first_contact = true;
    int64_t t =
        sibling_floods(f, "x", ".made-up.test", false, ALERT_FIRST_CONTACT, DETECT_CONTACTS_BURST,
                       "sibling contacted x30.made-up.test:80 for the first time (GET, "
                       "denied): over 30 first contacts of agents past the 4096 tracked, "
                       "counted together within 1m, so this agent's first contacts are "
                       "folded per minute");
    /* another agent without a window, within the minute: its first line
     * opens its own fold */
    feed_denied_get(f, "cousin", "c1.test", t + 200);
    feed_denied_get(f, "cousin", "c2.test", t + 201);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], DETECT_CONTACTS_BURST + 2);
    assert_string_equal(f->got.last_agent, "cousin");
    /* the minute's end: one summary each */
    detectors_tick(f->d, t + 60300);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], DETECT_CONTACTS_BURST + 4);
    /* a quiet minute on, told one by one again */
    feed_denied_get(f, "sibling", "after.made-up.test", t + 130000);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], DETECT_CONTACTS_BURST + 5);
    assert_null(strstr(f->got.last_detail, "folded"));
}

/* The per-host kinds of an agent without a window (every tracked agent
 * busy) were folded per host only, never bounded: 100 off-hours writes to
 * made-up hosts were 100 lines. They count with those of every other
 * such agent, and past DETECT_HOSTS_BURST within a minute fold per agent,
 * as an agent's own do. */
static void per_host_alerts_of_agents_without_a_window_fold(void **state)
{
    struct fx *f = *state;
    f->p.alerts.off_hours = WEEKDAYS_8_TO_19_UTC;
    /* Monday 19:00 UTC on: off hours */
    int64_t t =
        sibling_floods(f, "b", ".s3.example.test", true, ALERT_OFF_HOURS_WRITE, DETECT_HOSTS_BURST,
                       "PUT /p on b30.s3.example.test by sibling outside working hours "
                       "(UTC 08:00-19:00); over 30 hosts' off_hours_write alerts within "
                       "1m, so those of agents without windows, counted together, are "
                       "folded per minute");
    detectors_tick(f->d, t + 60100);
    assert_int_equal(f->got.n[ALERT_OFF_HOURS_WRITE], DETECT_HOSTS_BURST + 2);
    assert_int_equal(f->got.last_count, 100 - DETECT_HOSTS_BURST - 1);
    assert_string_equal(f->got.last_agent, "sibling");
}

/* An agent that finds every tracked agent busy gets no window, and its
 * writes, upload bytes and denials were counted nowhere: however many it
 * made, no write_burst, upload_bytes or denied_burst was raised (an agent
 * of a fleet past the 4096 whose windows all hold a count wrote unseen).
 * They count with those of every other agent without a window, one
 * window per kind, and the alert says so; its repeats fold under one key
 * for them all (folded per agent, each such agent's first would be a
 * line of its own). */
static void bursts_of_agents_without_a_window_are_counted_together(void **state)
{
    struct fx *f = *state;
    f->p.alerts.upload_bytes = (struct threshold){.set = true, .max = 1000, .per_ms = 60000};
    f->p.alerts.denied_burst = (struct threshold){.set = true, .max = 3, .per_ms = 60000};
    int64_t t = fill_with_busy_agents(f, 780000, T0) + 1;
    f->p.alerts.write_burst.max = 3; /* the same per: the busy windows are kept */
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    const char *who[] = {"lone", "other", "third"};
    for (int i = 0; i < 3; i++) {
        struct egress_event w = ev_of(who[i], "POST", "w.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
        detectors_feed(f->d, &w, t + 2 * i);
        detectors_feed(f->d, &w, t + 2 * i + 1);
        assert_false(detectors_tracks(f->d, who[i]));
    }
    /* four writes of two agents, then two more folded into that line */
    print_message("%d write_burst lines for 6 writes of agents without windows\n",
                  f->got.n[ALERT_WRITE_BURST]);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 1);
    assert_string_equal(f->got.last_agent, "other");
    assert_string_equal(f->got.last_detail,
                        "other and the other agents past the 4096 tracked, counted together, "
                        "made 4 write requests within 13m (max 3); the last: POST /p on w.test");
    assert_int_equal(detectors_folded(f->d), 2);
    struct egress_event up = ev_of("lone", "POST", "w.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    up.kind = EVENT_EGRESS_PROGRESS;
    up.bytes_up = 600;
    detectors_feed(f->d, &up, t + 10);
    up.agent = "other";
    detectors_feed(f->d, &up, t + 11);
    assert_int_equal(f->got.n[ALERT_UPLOAD_BYTES], 1);
    assert_non_null(strstr(f->got.last_detail, "other and the other agents past the 4096 "
                                               "tracked, counted together, sent 1200 bytes"));
    for (int i = 0; i < 4; i++)
        feed_denied_get(f, who[i % 3], "nope.test", t + 20 + i);
    assert_int_equal(f->got.n[ALERT_DENIED_BURST], 1);
    assert_non_null(strstr(f->got.last_detail, "lone and the other agents past the 4096 "
                                               "tracked, counted together, were denied 4 times"));
    /* the period's end: one summary of the folded writes, naming no agent */
    detectors_tick(f->d, t + 780100);
    assert_int_equal(f->got.n[ALERT_WRITE_BURST], 2);
    assert_int_equal(f->got.last_count, 2);
    assert_string_equal(f->got.last_agent, "(null)");
}

/* A tunnel decided again after a reload or at the day's change and now
 * denied (or reported) gets a second agent_egress for its id, flagged
 * again: a new verdict on a request already counted. It is not another
 * request for the baseline (an operator's reload under many open tunnels
 * doubled the agent's requests of that minute) nor another contact (with
 * the first-contact memory full, each re-decided line told again that
 * the agent "may not have contacted" the host); the alerts of its verdict
 * (grant_expired) are still raised. */
static void redecided_tunnel_is_not_a_new_request(void **state)
{
    struct fx *f = *state;
    int32_t today = day_of((time_t)(T0 / 1000));
    f->rules[0] = (struct rule){.index = 0,
                                .pattern = "api.test",
                                .tier = TIER_2,
                                .owner = "alice",
                                .has_expires = true,
                                .expires = today - 1};
    f->p.nrules = 1;
    f->p.alerts.first_contact = true;
    f->p.alerts.baseline =
        (struct baseline_cfg){.set = true, .factor = 3, .floor = 5, .learn_ms = 5 * 60000};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    char host[32];
    for (int i = 0; i < DETECT_CONTACTS_MAX; i++) {
        snprintf(host, sizeof(host), "h%d.test", i);
        feed_denied_get(f, "filler", host, T0 - 120000);
    }
    detectors_tick(f->d, T0 - 60000);
    int contacts = f->got.n[ALERT_FIRST_CONTACT];
    /* ten minutes of 4 tunnels a minute, each to a host not remembered */
    struct egress_event ev = ev_of("ci", "CONNECT", "api.test", VERDICT_ALLOW, REASON_NONE, TIER_2);
    ev.scheme = "https";
    ev.port = 443;
    ev.path = NULL;
    for (int m = 0; m < 10; m++)
        for (int i = 0; i < 4; i++)
            detectors_feed(f->d, &ev, T0 + m * 60000 + i);
    detectors_tick(f->d, T0 + 600000);
    assert_int_equal(f->got.n[ALERT_BASELINE], 0);
    contacts = f->got.n[ALERT_FIRST_CONTACT];
    /* minute 10: 12 tunnels (3 x 4, not over), then a reload denies each
     * of them: the same 12 requests */
    for (int i = 0; i < 12; i++)
        detectors_feed(f->d, &ev, T0 + 600000 + i);
    struct egress_event again = ev;
    again.verdict = VERDICT_DENY;
    again.reason = REASON_GRANT_EXPIRED;
    again.rule = &f->rules[0];
    again.owner = "alice";
    again.redecided = true;
    again.again = true;
    for (int i = 0; i < 12; i++)
        detectors_feed(f->d, &again, T0 + 600100 + i);
    assert_int_equal(f->got.n[ALERT_BASELINE], 0);
    assert_int_equal(f->got.n[ALERT_GRANT_EXPIRED], 1); /* its verdict's alert stays */
    /* a minute on, the first-contact fold told: re-decided lines are no
     * contacts, not even folded ones */
    detectors_tick(f->d, T0 + 720000);
    contacts = f->got.n[ALERT_FIRST_CONTACT];
    for (int i = 0; i < 12; i++)
        detectors_feed(f->d, &again, T0 + 720000 + i);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], contacts);
    detectors_tick(f->d, T0 + 780001);
    assert_int_equal(f->got.n[ALERT_FIRST_CONTACT], contacts);
}

/* A tier-3 write's detail names the whole host and the grant's owner and
 * expiry, however long the path the agent chose (it is cut at 200 bytes)
 * and the host under a wildcard grant (up to 253 bytes). */
static void tier3_detail_keeps_host_and_grant(void **state)
{
    struct fx *f = *state;
    int32_t today = day_of((time_t)(T0 / 1000));
    char host[254], path[402], agent[65], want[400], expires[16];
    memset(host, 'h', 241);
    memcpy(host + 241, ".example.com", 13); /* 253 bytes */
    path[0] = '/';
    memset(path + 1, 'p', 400);
    path[401] = '\0';
    memset(agent, 'a', 64);
    agent[64] = '\0';
    f->rules[0] = (struct rule){.index = 0,
                                .pattern = "*.example.com",
                                .tier = TIER_3,
                                .owner = "alice",
                                .has_expires = true,
                                .expires = today + 5};
    f->p.nrules = 1;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    struct egress_event ev = ev_of(agent, "PROPPATCH", host, VERDICT_ALLOW, REASON_NONE, TIER_3);
    ev.path = path;
    ev.rule = &f->rules[0];
    ev.owner = "alice";
    detectors_feed(f->d, &ev, T0);
    assert_int_equal(f->got.n[ALERT_TIER3_WRITE], 1);
    snprintf(want, sizeof(want), " on %s by %s", host, agent);
    assert_non_null(strstr(f->got.last_detail, want));
    format_date(today + 5, expires, sizeof(expires));
    snprintf(want, sizeof(want), "(owner alice, expires %s)", expires);
    assert_non_null(strstr(f->got.last_detail, want));
    /* an owner of 300 bytes is cut at 200: the expiry still shows */
    char owner[301];
    memset(owner, 'o', 300);
    owner[300] = '\0';
    f->rules[0].owner = owner;
    ev.owner = owner;
    ev.host = "x.example.com";
    detectors_feed(f->d, &ev, T0 + 1);
    assert_int_equal(f->got.n[ALERT_TIER3_WRITE], 2);
    snprintf(want, sizeof(want), "(owner %.200s..., expires %s)", owner, expires);
    assert_non_null(strstr(f->got.last_detail, want));
}

/* SPEC.md "Severities": high for tier3_write, upload_bytes, grant_expired
 * (and auth_failures, quarantine: auth_failures_per_source, test_quota);
 * medium for write_burst, denied_burst, off_hours_write, baseline, a
 * denied first_contact, grant_expiring with 3 days or fewer; low
 * otherwise. Alert consumers page on these names. */
static void severities_follow_the_spec(void **state)
{
    struct fx *f = *state;
    struct got *g = &f->got;
    int32_t today = day_of((time_t)(T0 / 1000));
    struct rule grant = {.pattern = "api.test", .tier = TIER_3, .owner = "alice"};
    grant.has_expires = true;
    grant.expires = today + 3;
    f->rules[0] = grant;
    f->p.nrules = 1;
    f->p.alerts.first_contact = true;
    f->p.alerts.write_burst = (struct threshold){.set = true, .max = 1, .per_ms = 60000};
    f->p.alerts.denied_burst = (struct threshold){.set = true, .max = 1, .per_ms = 60000};
    f->p.alerts.upload_bytes = (struct threshold){.set = true, .max = 10, .per_ms = 60000};
    f->p.alerts.off_hours = WEEKDAYS_8_TO_19_UTC;
    f->p.alerts.baseline =
        (struct baseline_cfg){.set = true, .factor = 3, .floor = 5, .learn_ms = 5 * 60000};
    assert_int_equal(detectors_configure(f->d, &f->p), 0);

    /* grant_expiring: 3 days left is medium, 4 is low */
    assert_int_equal(detectors_grants(f->d, &f->p, T0), 1);
    assert_int_equal(g->severity[ALERT_GRANT_EXPIRING], SEVERITY_MEDIUM);
    f->rules[0].expires = today + 4;
    assert_int_equal(detectors_configure(f->d, &f->p), 0);
    assert_int_equal(detectors_grants(f->d, &f->p, T0), 1);
    assert_int_equal(g->n[ALERT_GRANT_EXPIRING], 2);
    assert_int_equal(g->severity[ALERT_GRANT_EXPIRING], SEVERITY_LOW);

    /* first_contact: low when let through, medium when denied */
    struct egress_event rd = ev_of("ci", "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_0);
    detectors_feed(f->d, &rd, T0);
    assert_int_equal(g->n[ALERT_FIRST_CONTACT], 1);
    assert_int_equal(g->severity[ALERT_FIRST_CONTACT], SEVERITY_LOW);
    feed_denied_get(f, "ci", "b.test", T0 + 1);
    assert_int_equal(g->n[ALERT_FIRST_CONTACT], 2);
    assert_int_equal(g->severity[ALERT_FIRST_CONTACT], SEVERITY_MEDIUM);

    /* denied_burst: the second denial is over max 1 */
    assert_int_equal(g->n[ALERT_DENIED_BURST], 0);
    feed_denied_get(f, "ci", "b.test", T0 + 2);
    assert_int_equal(g->n[ALERT_DENIED_BURST], 1);
    assert_int_equal(g->severity[ALERT_DENIED_BURST], SEVERITY_MEDIUM);

    /* a tier-3 write at 19:00 on a Monday: tier3_write and off_hours_write;
     * the second write is over write_burst's max 1 */
    struct egress_event w = ev_of("ci", "POST", "api.test", VERDICT_ALLOW, REASON_NONE, TIER_3);
    w.rule = &f->rules[0];
    w.owner = "alice";
    detectors_feed(f->d, &w, T0 + 3);
    assert_int_equal(g->n[ALERT_TIER3_WRITE], 1);
    assert_int_equal(g->severity[ALERT_TIER3_WRITE], SEVERITY_HIGH);
    assert_int_equal(g->n[ALERT_OFF_HOURS_WRITE], 1);
    assert_int_equal(g->severity[ALERT_OFF_HOURS_WRITE], SEVERITY_MEDIUM);
    w.path = "/2";
    detectors_feed(f->d, &w, T0 + 4);
    assert_int_equal(g->n[ALERT_WRITE_BURST], 1);
    assert_int_equal(g->severity[ALERT_WRITE_BURST], SEVERITY_MEDIUM);

    /* grant_expired */
    struct egress_event ex =
        ev_of("ci", "POST", "api.test", VERDICT_DENY, REASON_GRANT_EXPIRED, TIER_3);
    ex.rule = &f->rules[0];
    detectors_feed(f->d, &ex, T0 + 5);
    assert_int_equal(g->n[ALERT_GRANT_EXPIRED], 1);
    assert_int_equal(g->severity[ALERT_GRANT_EXPIRED], SEVERITY_HIGH);

    /* upload_bytes: 20 bytes over max 10, while the request runs */
    struct egress_event up = ev_of("ci", "PUT", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_0);
    up.kind = EVENT_EGRESS_PROGRESS;
    up.bytes_up = 20;
    detectors_feed(f->d, &up, T0 + 6);
    assert_int_equal(g->n[ALERT_UPLOAD_BYTES], 1);
    assert_int_equal(g->severity[ALERT_UPLOAD_BYTES], SEVERITY_HIGH);

    /* baseline: another agent, 4 requests a minute for ten minutes, then 16 */
    struct egress_event b = ev_of("bl", "GET", "a.test", VERDICT_ALLOW, REASON_NONE, TIER_0);
    for (int k = 0; k < 10 * 4; k++) /* minute k / 4, the (k % 4)th request */
        detectors_feed(f->d, &b, T0 + (k / 4) * 60000 + 100 + k % 4);
    assert_int_equal(g->n[ALERT_BASELINE], 0);
    for (int k = 0; k < 16; k++)
        detectors_feed(f->d, &b, T0 + 600100 + k);
    assert_int_equal(g->n[ALERT_BASELINE], 1);
    assert_int_equal(g->severity[ALERT_BASELINE], SEVERITY_MEDIUM);
}

int main(void)
{
    /* as sluice's main(): off-hours zones are converted only so (util/env.h) */
    env_tz_pin();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(write_burst_threshold_and_fold, setup, teardown),
        cmocka_unit_test_setup_teardown(denied_burst_and_upload, setup, teardown),
        cmocka_unit_test_setup_teardown(upload_counts_request_heads, setup, teardown),
        cmocka_unit_test_setup_teardown(auth_failures_per_source, setup, teardown),
        cmocka_unit_test_setup_teardown(auth_failures_v6_prefix_and_unix_socket, setup, teardown),
        cmocka_unit_test_setup_teardown(auth_failures_table_is_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(auth_failures_reload, setup, teardown),
        cmocka_unit_test_setup_teardown(auth_failures_fold_past_the_burst_of_sources, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(tier3_grants_and_first_contact, setup, teardown),
        cmocka_unit_test_setup_teardown(long_owners_are_shortened_between_characters, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(first_contacts_leave_folding_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(first_contact_flood_folds_per_agent, setup, teardown),
        cmocka_unit_test_setup_teardown(per_host_alerts_fold_past_the_burst, setup, teardown),
        cmocka_unit_test_setup_teardown(a_write_decided_again_is_not_one_more_off_hours_write,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(baseline_seeded_by_the_first_full_minute, setup, teardown),
        cmocka_unit_test_setup_teardown(baseline_huge_floor_holds_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(baseline_unseeded_row_is_relearned, setup, teardown),
        cmocka_unit_test_setup_teardown(first_contacts_past_the_memory_are_still_told, setup,
                                        teardown),
        cmocka_unit_test(off_hours_arithmetic),
        cmocka_unit_test(off_hours_zone_file),
        cmocka_unit_test(off_hours_night_shift),
        cmocka_unit_test(off_hours_night_shift_across_dst),
        cmocka_unit_test(off_hours_end_the_first_time_the_clock_reaches_it),
        cmocka_unit_test(off_hours_end_once_when_the_clocks_go_back_two_hours),
        cmocka_unit_test(off_hours_start_the_first_time_the_clock_reaches_it),
        cmocka_unit_test(off_hours_start_once_when_the_clocks_go_back_two_hours_or_half_of_one),
        cmocka_unit_test(off_hours_start_in_an_hour_that_comes_again_before_midnight),
        cmocka_unit_test(off_hours_start_or_end_in_a_skipped_hour),
        cmocka_unit_test_setup_teardown(off_hours_detector, setup, teardown),
        cmocka_unit_test_setup_teardown(off_hours_zone_gone_at_run_time_is_told, setup, teardown),
        cmocka_unit_test(zone_file_cut_short_is_not_a_zone),
        cmocka_unit_test_setup_teardown(baseline_learns_and_alerts, setup, teardown),
        cmocka_unit_test_setup_teardown(baseline_cold_start_is_quiet, setup, teardown),
        cmocka_unit_test_setup_teardown(memory_survives_a_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(flush_at_shutdown_keeps_the_baseline, setup, teardown),
        cmocka_unit_test_setup_teardown(absurd_stored_baseline_is_repaired, setup, teardown),
        cmocka_unit_test_setup_teardown(grants_announced_daily, setup, teardown),
        cmocka_unit_test_setup_teardown(agents_past_the_table_still_get_windows, setup, teardown),
        cmocka_unit_test_setup_teardown(tier3_detail_keeps_host_and_grant, setup, teardown),
        cmocka_unit_test_setup_teardown(severities_follow_the_spec, setup, teardown),
        cmocka_unit_test_setup_teardown(redecided_tunnel_is_not_a_new_request, setup, teardown),
        cmocka_unit_test_setup_teardown(agent_lookups_do_not_scan_the_table, setup, teardown),
        cmocka_unit_test_setup_teardown(eviction_matches_a_plain_model, setup, teardown),
        cmocka_unit_test_setup_teardown(eviction_with_short_windows_matches_a_plain_model, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(busy_agents_with_short_windows_are_examined_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(first_contacts_of_agents_without_a_window_fold, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(per_host_alerts_of_agents_without_a_window_fold, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(bursts_of_agents_without_a_window_are_counted_together,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_new_burst_after_a_summary_is_told_at_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(auth_failures_new_burst_after_a_summary_is_told_at_once,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(reload_out_of_memory_keeps_the_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(ipv6_hosts_are_bracketed_in_details, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
