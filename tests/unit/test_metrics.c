/* Unit tests for watch/metrics.c: what a scrape shows of the counters,
 * per agent and past the table of agents. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "evbuffer_text.h"
#include "watch/agent_hash.h"
#include "watch/metrics.h"
#include "zalloc_countdown.h"

/* The exposition of <m>, NUL-terminated; the caller frees it. */
static char *scrape(struct metrics *m)
{
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    assert_int_equal(metrics_format(m, b), 0);
    char *s = evbuffer_text(b);
    evbuffer_free(b);
    return s;
}

static void feed(struct metrics *m, const char *agent, uint64_t up, uint64_t down)
{
    struct egress_event ev = {.kind = EVENT_EGRESS,
                              .agent = agent,
                              .tier = TIER_0,
                              .verdict = VERDICT_ALLOW,
                              .reason = REASON_NONE};
    metrics_on_event(&ev, m);
    ev.kind = EVENT_EGRESS_PROGRESS;
    ev.bytes_up = up;
    metrics_on_event(&ev, m);
    ev.kind = EVENT_EGRESS_END;
    ev.bytes_up = up;
    ev.bytes_down = down;
    metrics_on_event(&ev, m);
}

/* New metrics that counted a request of METRICS_AGENTS_MAX agents, a0 to
 * a4095. */
static struct metrics *filled(void)
{
    struct metrics *m = metrics_new();
    assert_non_null(m);
    char id[32];
    for (int i = 0; i < METRICS_AGENTS_MAX; i++) {
        snprintf(id, sizeof(id), "a%d", i);
        feed(m, id, 1, 2);
    }
    return m;
}

/* Past METRICS_AGENTS_MAX agents, the others are counted together under
 * agent="": their bytes as well as their requests, so that the sums over
 * agents are the gateway's. */
static void agents_past_the_table_keep_their_bytes(void **state)
{
    (void)state;
    struct metrics *m = filled();
    feed(m, "late", 100, 200);
    feed(m, "later", 1000, 2000);
    char *s = scrape(m);
    assert_non_null(strstr(s, "\nsluice_bytes_up_total{agent=\"a0\"} 1\n"));
    assert_non_null(strstr(s, "\nsluice_requests_total{agent=\"\",tier=\"0\",decision=\"allow\","
                              "reason=\"none\"} 2\n"));
    assert_non_null(strstr(s, "\nsluice_bytes_up_total{agent=\"\"} 1100\n"));
    assert_non_null(strstr(s, "\nsluice_bytes_down_total{agent=\"\"} 2200\n"));
    assert_null(strstr(s, "late"));
    free(s);
    metrics_free(m);
}

/* Each event finds its agent's counters without comparing it with every
 * agent counted: at METRICS_AGENTS_MAX agents, events of counted agents
 * and of agents past the table compare about one agent each. */
static void agent_lookups_do_not_scan_the_table(void **state)
{
    (void)state;
    struct metrics *m = filled();
    char id[32];
    uint64_t before = metrics_agent_probes(m);
    unsigned r = 1;
    const int n = 10000;
    for (int i = 0; i < n; i++) {
        r = r * 1103515245u + 12345u;
        if (i % 2 == 0)
            snprintf(id, sizeof(id), "a%u", (r >> 8) % METRICS_AGENTS_MAX);
        else
            snprintf(id, sizeof(id), "past-%d", i);
        feed(m, id, 1, 2); /* three events */
    }
    uint64_t probes = metrics_agent_probes(m) - before;
    print_message("%.2f agents compared an event\n", (double)probes / (3.0 * n));
    assert_true(probes <= 8ull * 3 * n);
    char *s = scrape(m);
    assert_non_null(strstr(s, "\nsluice_bytes_up_total{agent=\"a0\"} "));
    assert_non_null(strstr(s, "\nsluice_bytes_up_total{agent=\"a4095\"} "));
    assert_null(strstr(s, "past-"));
    free(s);
    metrics_free(m);
}

/* The gate hashes an exchange's agent once and its events carry that hash
 * (agent_hash, watch/agent_hash.h); an event made without it (0) has its
 * agent hashed by the metrics: either way the same agent's counters, found
 * at the first compare. */
static void a_carried_agent_hash_finds_the_same_counters(void **state)
{
    (void)state;
    struct metrics *m = metrics_new();
    assert_non_null(m);
    assert_int_equal(agent_hash("ci"), agent_hash("ci"));
    assert_int_not_equal(agent_hash("ci"), agent_hash("cj"));
    feed(m, "ci", 1, 2); /* no hash carried: the first event adds the agent */
    struct egress_event ev = {.kind = EVENT_EGRESS_PROGRESS,
                              .agent = "ci",
                              .agent_hash = agent_hash("ci"),
                              .bytes_up = 10};
    assert_int_equal(agent_hash_of_event(&ev), agent_hash("ci"));
    uint64_t before = metrics_agent_probes(m);
    metrics_on_event(&ev, m);
    assert_int_equal(metrics_agent_probes(m) - before, 1);
    ev.kind = EVENT_EGRESS_END;
    ev.agent_hash = 0;
    ev.bytes_down = 20;
    assert_int_equal(agent_hash_of_event(&ev), agent_hash("ci"));
    metrics_on_event(&ev, m);
    char *s = scrape(m);
    assert_non_null(strstr(s, "\nsluice_bytes_up_total{agent=\"ci\"} 11\n"));
    assert_non_null(strstr(s, "\nsluice_bytes_down_total{agent=\"ci\"} 22\n"));
    free(s);
    metrics_free(m);
}

/* A tunnel decided again (a reload, the UTC day's change) and now denied
 * gets a second agent_egress for its id, flagged again: one request, not
 * two. It was counted as both "allow" and "deny", so the sum over
 * sluice_requests_total ran ahead of the requests, by every open tunnel at
 * each reload that denied it. The one line of a tunnel refused before its
 * line was out (redecided, not again) is its request's, and counts. */
static void a_redecided_tunnel_counts_once(void **state)
{
    (void)state;
    struct metrics *m = metrics_new();
    assert_non_null(m);
    feed(m, "ci", 0, 0); /* the tunnel's first line: allow, tier 0 */
    struct egress_event ev = {.kind = EVENT_EGRESS, .agent = "ci", .redecided = true};
    ev.verdict = VERDICT_DENY;
    ev.reason = REASON_NOT_IN_POLICY;
    ev.tier = TIER_NONE;
    ev.again = true;
    metrics_on_event(&ev, m);
    ev.again = false; /* another tunnel, refused while it was being connected */
    metrics_on_event(&ev, m);
    char *s = scrape(m);
    assert_non_null(strstr(s, "\nsluice_requests_total{agent=\"ci\",tier=\"0\",decision=\"allow\","
                              "reason=\"none\"} 1\n"));
    assert_non_null(strstr(s,
                           "\nsluice_requests_total{agent=\"ci\",tier=\"none\",decision=\"deny\","
                           "reason=\"not_in_policy\"} 1\n"));
    free(s);
    metrics_free(m);
}

/* Two DNS servers: the policy's dns.servers names one address twice
 * ("127.0.0.1" and "127.0.0.1:53" are one server). */
static void same_server_twice(void *arg, struct metrics_gauges *g)
{
    (void)arg;
    g->ndns = 2;
    for (size_t i = 0; i < 2; i++) {
        snprintf(g->dns[i].addr, sizeof(g->dns[i].addr), "127.0.0.1:53");
        g->dns[i].answers = 1 + i;
        g->dns[i].timeouts = 10 * (1 + i);
        g->dns[i].failures = 100 * (1 + i);
    }
}

/* A series appears once per scrape (the exposition format wants each label
 * set once in a family; Prometheus drops a repeat): a server listed twice
 * is one server, its counts summed. */
static void a_dns_server_listed_twice_is_one_series(void **state)
{
    (void)state;
    struct metrics *m = metrics_new();
    assert_non_null(m);
    metrics_set_gauges(m, same_server_twice, NULL, NULL);
    char *s = scrape(m);
    const char *answer = "\nsluice_dns_responses_total{server=\"127.0.0.1:53\",result=\"answer\"} ";
    const char *first = strstr(s, answer);
    assert_non_null(first);
    assert_null(strstr(first + 1, answer));
    assert_non_null(strstr(s, "\nsluice_dns_responses_total{server=\"127.0.0.1:53\","
                              "result=\"answer\"} 3\n"));
    assert_non_null(strstr(s, "\nsluice_dns_responses_total{server=\"127.0.0.1:53\","
                              "result=\"timeout\"} 30\n"));
    assert_non_null(strstr(s, "\nsluice_dns_responses_total{server=\"127.0.0.1:53\","
                              "result=\"failure\"} 300\n"));
    free(s);
    metrics_free(m);
}

/* libevent's allocations, made to fail once <allocs_left> reach 0 (while
 * <failing>); <alloc_failures> counts the failures. */
static bool failing;
static long allocs_left;
static unsigned alloc_failures;

static bool alloc_fails(void)
{
    if (!failing)
        return false;
    if (allocs_left > 0) {
        allocs_left--;
        return false;
    }
    alloc_failures++;
    return true;
}

static void *failing_malloc(size_t n)
{
    return alloc_fails() ? NULL : malloc(n);
}

static void *failing_realloc(void *p, size_t n)
{
    return alloc_fails() ? NULL : realloc(p, n);
}

/* Out of memory in the middle of a scrape: metrics_format() says so, and
 * the admin server then answers 500 (admin.c), rather than serving the part
 * written so far with a 200, which a scraper would take for series gone.
 * Each turn lets one more allocation through, until the scrape needs no
 * more than it gets. */
static void a_scrape_out_of_memory_fails(void **state)
{
    (void)state;
    struct metrics *m = metrics_new();
    assert_non_null(m);
    char id[32];
    for (int i = 0; i < 200; i++) { /* a body of several evbuffer chains */
        snprintf(id, sizeof(id), "agent-%d", i);
        feed(m, id, 1, 2);
    }
    for (long n = 0;; n++) {
        assert_true(n < 100000);
        struct evbuffer *b = evbuffer_new();
        assert_non_null(b);
        alloc_failures = 0;
        allocs_left = n;
        failing = true;
        int rc = metrics_format(m, b);
        failing = false;
        evbuffer_free(b);
        if (alloc_failures == 0) {
            assert_int_equal(rc, 0);
            assert_true(n > 1); /* some turns did fail */
            break;
        }
        assert_int_equal(rc, -1);
    }
    metrics_free(m);
}

/* A state store whose commits fail, with the error text SQLite or the
 * writer gave, which may name a local path. */
static void store_failing_at_a_path(void *arg, struct metrics_gauges *g)
{
    (void)arg;
    g->state_broken = "unable to open database file /srv/secret-project/var/sluice.db";
}

/* /healthz is answered to whoever reaches the admin port: it names the
 * component that is unhealthy, not the store's error text, which may name
 * local paths (that detail is on standard error, store_sqlite.c). */
static void health_names_the_store_not_its_paths(void **state)
{
    (void)state;
    struct metrics *m = metrics_new();
    assert_non_null(m);
    char why[256];
    assert_true(metrics_health(m, why, sizeof(why)));
    metrics_set_gauges(m, store_failing_at_a_path, NULL, NULL);
    assert_false(metrics_health(m, why, sizeof(why)));
    if (strstr(why, "/srv") != NULL || strstr(why, "sluice.db") != NULL)
        fail_msg("the reason names a path: %s", why);
    assert_string_equal(why, "state store: its commits fail (the reason is on standard error)");
    metrics_free(m);
}

/* A policy of <n> grants: rules whose hosts are <hosts>, valid through the
 * day numbers <ends>. */
static struct policy grants_policy(struct rule *rules, char *const *hosts, const int32_t *ends,
                                   size_t n)
{
    struct policy p = {0};
    for (size_t i = 0; i < n; i++)
        rules[i] =
            (struct rule){.index = i, .pattern = hosts[i], .has_expires = true, .expires = ends[i]};
    p.rules = rules;
    p.nrules = n;
    return p;
}

/* True when the scrape <s> shows the grants <hosts>, no other, and
 * <expired> of them expired. */
static bool grants_shown(const char *s, char *const *hosts, size_t n, int expired)
{
    size_t lines = 0;
    for (const char *at = s; (at = strstr(at, "sluice_grant_expiry_timestamp_seconds{")) != NULL;
         at++)
        lines++;
    if (lines != n)
        return false;
    char want[128];
    for (size_t i = 0; i < n; i++) {
        snprintf(want, sizeof(want), "host=\"%s\"", hosts[i]);
        if (strstr(s, want) == NULL)
            return false;
    }
    snprintf(want, sizeof(want), "\nsluice_grants_expired %d\n", expired);
    return strstr(s, want) != NULL;
}

/* Each allocation of a policy's grant gauges fails in turn: the gauges are
 * the old policy's, whole, or the new one's. Before, they were freed first:
 * out of memory, a reload left them empty or partial (and the expired
 * count at 0). */
static void grant_gauges_short_of_memory_stay_whole(void **state)
{
    (void)state;
    const int32_t today = 20000;
    const int64_t now = (int64_t)today * 86400 + 3600;
    static char *const old_hosts[] = {"old-a.test", "old-b.test"};
    static char *const new_hosts[] = {"new-a.test", "new-b.test", "new-c.test"};
    const int32_t old_ends[] = {today + 30, today - 1},
                  new_ends[] = {today + 5, today + 50, today + 60};
    struct rule old_rules[2], new_rules[3];
    struct policy old = grants_policy(old_rules, old_hosts, old_ends, 2);
    struct policy fresh = grants_policy(new_rules, new_hosts, new_ends, 3);
    struct metrics *m = metrics_new();
    assert_non_null(m);
    assert_int_equal(metrics_set_policy(m, &old, now), 0);
    unsigned refused = 0;
    for (unsigned n = 0; n < 64; n++) {
        zalloc_failures = 0;
        zalloc_left = n;
        zalloc_failing = true;
        int rc = metrics_set_policy(m, &fresh, now);
        zalloc_failing = false;
        char *s = scrape(m);
        bool was_old = grants_shown(s, old_hosts, 2, 1);
        bool is_new = grants_shown(s, new_hosts, 3, 0);
        free(s);
        if (zalloc_failures == 0) {
            assert_int_equal(rc, 0);
            assert_true(is_new);
            break;
        }
        refused++;
        assert_int_equal(rc, -1);
        assert_true(was_old);
    }
    assert_int_equal(zalloc_failures, 0);
    assert_true(refused > 0);
    metrics_free(m);
}

/* Counts the changes made to the evbuffer it is attached to. */
static void count_writes(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg)
{
    (void)b;
    if (info->n_added > 0)
        ++*(unsigned long *)arg;
}

/* The writes a scrape of one grant whose owner is <owner> makes to its
 * body, and that line's text in <line> (<cap> bytes). */
static unsigned long grant_scrape_writes(char *owner, char *line, size_t cap)
{
    const int64_t now = 20000LL * 86400;
    struct rule r = {.index = 0,
                     .pattern = "api.example.test",
                     .has_expires = true,
                     .expires = 20030,
                     .owner = owner};
    struct policy p = {.rules = &r, .nrules = 1};
    struct metrics *m = metrics_new();
    assert_non_null(m);
    assert_int_equal(metrics_set_policy(m, &p, now), 0);
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    unsigned long writes = 0;
    assert_non_null(evbuffer_add_cb(b, count_writes, &writes));
    assert_int_equal(metrics_format(m, b), 0);
    char *s = evbuffer_text(b);
    const char *at = strstr(s, "\nsluice_grant_expiry_timestamp_seconds{");
    assert_non_null(at);
    const char *end = strchr(at + 1, '\n');
    assert_non_null(end);
    snprintf(line, cap, "%.*s", (int)(end - at - 1), at + 1);
    free(s);
    evbuffer_free(b);
    metrics_free(m);
    return writes;
}

/* A label value is escaped as the text format wants (\\, \", \n; UTF-8 as
 * it is) and written a run of bytes at a time: a write per byte of it made
 * a scrape of a policy of long owners (15,000 grants of 1000 '"' each, a
 * 16 MiB policy, a 32 MB body) hold the event loop ~0.7 s (-O3), two
 * thirds of it in evbuffer_add(). The writes a label costs no longer grow
 * with its length. */
static void label_values_are_escaped_and_written_in_runs(void **state)
{
    (void)state;
    char line[8192], want[8192];
    char odd[] = "O\"Brien \\ x\n\xc3\xa9", plain[] = "a";
    grant_scrape_writes(odd, line, sizeof(line));
    assert_string_equal(line, "sluice_grant_expiry_timestamp_seconds{rule=\"rules[0]\","
                              "host=\"api.example.test\",owner=\"O\\\"Brien \\\\ x\\n\xc3\xa9\"} "
                              "1730678400");
    char owner[1001];
    unsigned long one = grant_scrape_writes(plain, line, sizeof(line));
    const char kinds[] = {'a', '"', '\\'};
    /* 1000 bytes, and lengths whose escaped text ends around 512 bytes */
    const size_t lengths[] = {1000, 254, 255, 256, 509, 510, 511, 512};
    for (size_t k = 0; k < sizeof(kinds); k++)
        for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++) {
            memset(owner, kinds[k], lengths[l]);
            owner[lengths[l]] = '\0';
            unsigned long writes = grant_scrape_writes(owner, line, sizeof(line));
            /* the line holds the owner whole, each byte escaped if it must be */
            size_t n = (size_t)snprintf(want, sizeof(want), ",owner=\"");
            for (size_t i = 0; i < lengths[l]; i++)
                n += (size_t)snprintf(want + n, sizeof(want) - n, "%s%c",
                                      kinds[k] == 'a' ? "" : "\\", kinds[k]);
            snprintf(want + n, sizeof(want) - n, "\"} 1730678400");
            size_t have = strlen(line), wlen = strlen(want);
            assert_true(have >= wlen);
            assert_string_equal(line + have - wlen, want);
            if (writes > one + 16)
                fail_msg("a %zu-byte owner of '%c' took %lu writes, one of 1 byte %lu", lengths[l],
                         kinds[k], writes, one);
        }
}

int main(void)
{
    event_set_mem_functions(failing_malloc, failing_realloc, free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(agents_past_the_table_keep_their_bytes),
        cmocka_unit_test(agent_lookups_do_not_scan_the_table),
        cmocka_unit_test(a_dns_server_listed_twice_is_one_series),
        cmocka_unit_test(a_scrape_out_of_memory_fails),
        cmocka_unit_test(a_redecided_tunnel_counts_once),
        cmocka_unit_test(a_carried_agent_hash_finds_the_same_counters),
        cmocka_unit_test(health_names_the_store_not_its_paths),
        cmocka_unit_test(grant_gauges_short_of_memory_stay_whole),
        cmocka_unit_test(label_values_are_escaped_and_written_in_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
