/* Unit tests for watch/metrics.c: what a scrape shows of the counters,
 * per agent and past the table of agents. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "evbuffer_text.h"
#include "watch/metrics.h"

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

/* Past METRICS_AGENTS_MAX agents, the others are counted together under
 * agent="": their bytes as well as their requests, so that the sums over
 * agents are the gateway's. */
static void agents_past_the_table_keep_their_bytes(void **state)
{
    (void)state;
    struct metrics *m = metrics_new();
    assert_non_null(m);
    char id[32];
    for (int i = 0; i < METRICS_AGENTS_MAX; i++) {
        snprintf(id, sizeof(id), "a%d", i);
        feed(m, id, 1, 2);
    }
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(agents_past_the_table_keep_their_bytes),
        cmocka_unit_test(a_dns_server_listed_twice_is_one_series),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
