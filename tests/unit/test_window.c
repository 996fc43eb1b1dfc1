/* Unit tests for watch/window.c: the sliding window in tenths and the fold
 * table's period arithmetic, on a fake clock (plain integers). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "watch/window.h"

static void window_counts_within_period(void **state)
{
    (void)state;
    struct window w;
    window_init(&w, 10000); /* 10 s in 1 s buckets */
    assert_int_equal(window_add(&w, 0, 1), 1);
    assert_int_equal(window_add(&w, 500, 1), 2);
    assert_int_equal(window_add(&w, 9999, 1), 3);
    /* at 10 000 the first bucket (0-999) is the oldest of eleven: still in */
    assert_int_equal(window_sum(&w, 10000), 3);
    /* at 11 000 it leaves the window */
    assert_int_equal(window_sum(&w, 11000), 1);
    assert_int_equal(window_add(&w, 11000, 5), 6);
    /* long after: everything is gone */
    assert_int_equal(window_sum(&w, 100000), 0);
    assert_int_equal(window_add(&w, 100000, 2), 2);
}

static void window_edges(void **state)
{
    (void)state;
    struct window w;
    window_init(&w, 5); /* narrower than the slots: 1 ms buckets */
    assert_int_equal(w.width_ms, 1);
    window_add(&w, 100, 1);
    assert_int_equal(window_sum(&w, 110), 1);
    assert_int_equal(window_sum(&w, 111), 0);
    window_init(&w, 15); /* a tenth that does not divide it: rounded up */
    assert_int_equal(w.width_ms, 2);
    window_init(&w, 0); /* a zero period is treated as 1 ms */
    assert_int_equal(window_add(&w, 7, 1), 1);
    /* saturates instead of wrapping */
    window_init(&w, 1000);
    window_add(&w, 0, UINT64_MAX - 1);
    assert_int_equal(window_add(&w, 0, 5), UINT64_MAX);
    window_add(&w, 150, 5);
    assert_int_equal(window_sum(&w, 150), UINT64_MAX);
    /* a clock that goes back does not count the future bucket */
    window_init(&w, 1000);
    window_add(&w, 5000, 3);
    assert_int_equal(window_sum(&w, 4000), 0);
    /* negative times land in bucket 0 */
    window_init(&w, 1000);
    assert_int_equal(window_add(&w, -50, 1), 1);
}

/* Twenty events at a tenth's last millisecond (5.999 s, 60 s windows in
 * tenths of 6 s) and twenty more at 60.0 s are forty within 54 s: the
 * window must hold both bursts. Summing only the current tenth and the
 * nine before, the first burst had left by 60.0 s (tenth 0 out at tenth
 * 10), and a true 60 s window held up to twice the limit unseen. */
static void window_holds_any_interval_of_its_length(void **state)
{
    (void)state;
    struct window w;
    window_init(&w, 60000);
    for (int i = 0; i < 20; i++)
        window_add(&w, 5999, 1);
    uint64_t n = 0;
    for (int i = 0; i < 20; i++)
        n = window_add(&w, 60000, 1);
    assert_int_equal(n, 40);
    /* The first burst counts while it is within 60 s, and as long as its
     * tenth is one of the last eleven: up to 65.999 s. */
    assert_int_equal(window_sum(&w, 65999), 40);
}

/* Events older than 1.1 windows never count: the eleven tenths are the
 * current one and the ten before it, no more. */
static void window_forgets_past_eleven_tenths(void **state)
{
    (void)state;
    struct window w;
    window_init(&w, 60000);
    window_add(&w, 0, 7);     /* tenth 0: 0 to 5.999 s */
    window_add(&w, 5999, 1);  /* tenth 0 too */
    window_add(&w, 30000, 2); /* tenth 5 */
    assert_int_equal(window_sum(&w, 60000), 10);
    assert_int_equal(window_sum(&w, 65999), 10);
    /* At 66 s (1.1 windows after tenth 0 began) tenth 0 is out. */
    assert_int_equal(window_sum(&w, 66000), 2);
    assert_int_equal(window_add(&w, 66000, 1), 3);
    /* 1.1 windows after 30 s, tenth 5 is out too. */
    assert_int_equal(window_sum(&w, 96000), 1);
}

/* window_empty_at(): when a window's sum can first be 0, never earlier
 * than it is, checked against window_sum() millisecond by millisecond;
 * with counts dated after now (the clock went back) no later than the end
 * of the current tenth, within which the sum cannot change. */
static void window_empty_at_is_when_the_sum_first_falls_to_zero(void **state)
{
    (void)state;
    struct window w;
    window_init(&w, 1000); /* tenths of 100 ms */
    assert_true(window_empty_at(&w, 50) == INT64_MIN);
    window_add(&w, 50, 1);
    window_add(&w, 420, 2);
    int64_t at = window_empty_at(&w, 430);
    assert_int_equal(at, 1500); /* tenth 4 leaves the sum at tenth 15 */
    for (int64_t t = 430; t < at; t++)
        assert_true(window_sum(&w, t) != 0);
    assert_int_equal(window_sum(&w, at), 0);
    assert_true(window_empty_at(&w, at) == INT64_MIN);
    /* the clock goes back: a count at 5000, then one at 3000 */
    window_init(&w, 1000);
    window_add(&w, 5000, 1);
    window_add(&w, 3000, 1);
    assert_int_equal(window_empty_at(&w, 3010), 3100);
    for (int64_t t = 3010; t < 3100; t++)
        assert_int_equal(window_sum(&w, t), 1);
}

/* Against a plain list of events: at any time t the sum holds every event
 * of [t - per, t], and none of t - 1.1 x per or before, over periods that
 * a tenth divides and periods it does not (the tenth rounded up). */
static void window_matches_the_interval_bounds(void **state)
{
    (void)state;
    static const uint64_t pers[] = {1000, 60000, 37, 10, 7, 1};
    enum { EVENTS = 400 };
    int64_t at[EVENTS];
    uint64_t x = 0x9e3779b97f4a7c15ull; /* xorshift64: the same run every time */
    for (size_t k = 0; k < sizeof(pers) / sizeof(pers[0]); k++) {
        uint64_t per = pers[k];
        struct window w;
        window_init(&w, per);
        int64_t t = 0;
        for (int i = 0; i < EVENTS; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t += (int64_t)(x % (per / 4 + 2)); /* often several in a tenth */
            at[i] = t;
            window_add(&w, t, 1);
            /* At t and later (no event in between): every event of
             * [u - per, u], none of u - 11 tenths (1.1 x per where a tenth
             * divides it) or before. */
            int64_t tenth = (int64_t)(per + 9) / 10;
            int64_t probe[] = {t, t + (int64_t)per / 3, t + (int64_t)per, t + 11 * tenth - 1};
            for (size_t p = 0; p < sizeof(probe) / sizeof(probe[0]); p++) {
                int64_t u = probe[p];
                uint64_t sum = window_sum(&w, u), within = 0, newer = 0;
                for (int j = 0; j <= i; j++) {
                    within += at[j] >= u - (int64_t)per;
                    newer += at[j] > u - 11 * tenth;
                }
                assert_true(sum >= within);
                assert_true(sum <= newer);
            }
        }
    }
}

struct got {
    int n;
    uint64_t count;
    char detail[600];
    enum alert_kind kind;
    enum alert_severity severity;
    struct {
        unsigned count;
        char agent[32], host[32], detail[200];
    } seen[4]; /* the first alerts collected, in order */
};

static void collect(struct alert *a, void *arg)
{
    struct got *g = arg;
    if (g->n < 4) {
        g->seen[g->n].count = a->count;
        snprintf(g->seen[g->n].agent, sizeof(g->seen[g->n].agent), "%s",
                 a->agent != NULL ? a->agent : "(none)");
        snprintf(g->seen[g->n].host, sizeof(g->seen[g->n].host), "%s",
                 a->host != NULL ? a->host : "(none)");
        snprintf(g->seen[g->n].detail, sizeof(g->seen[g->n].detail), "%s", a->detail);
    }
    g->n++;
    g->count = a->count;
    g->kind = a->kind;
    g->severity = a->severity;
    strncpy(g->detail, a->detail, sizeof(g->detail) - 1);
}

static void fold_one_line_per_period(void **state)
{
    (void)state;
    struct fold f;
    struct got g = {0};
    struct alert a = {.kind = ALERT_WRITE_BURST, .agent = "ci", .host = "x.test", .detail = "d1"};
    fold_init(&f);
    assert_true(fold_admit(&f, &a, NULL, 0, 1000, collect, &g));
    a.detail = "d2";
    assert_false(fold_admit(&f, &a, NULL, 10, 1000, collect, &g));
    a.host = "y.test"; /* per-agent key: another host folds too */
    assert_false(fold_admit(&f, &a, NULL, 999, 1000, collect, &g));
    assert_int_equal(fold_expire(&f, 999, collect, &g), 0);
    assert_int_equal(fold_expire(&f, 1000, collect, &g), 1);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.count, 2);
    assert_non_null(strstr(g.detail, "2 more within 1s"));
    assert_non_null(strstr(g.detail, "d2"));
    /* the summary opened a new period: a repeat at once is folded */
    assert_false(fold_admit(&f, &a, NULL, 1001, 1000, collect, &g));
    assert_int_equal(fold_expire(&f, 2000, collect, &g), 1);
    assert_int_equal(g.count, 1);
    /* a quiet period closes silently, then the key starts over */
    assert_int_equal(fold_expire(&f, 3000, collect, &g), 0);
    assert_int_equal(f.n, 0);
    assert_true(fold_admit(&f, &a, NULL, 3001, 1000, collect, &g));
    fold_free(&f);
}

/* fold_admit_trip(): a new burst in a period a summary opened (no line of
 * its own yet) is written, the repeats before it summarised first; once
 * the period holds a line, trips fold like any repeat. */
static void fold_trip_after_a_summary_is_written(void **state)
{
    struct alert a = {.kind = ALERT_WRITE_BURST, .agent = "ci", .detail = "d"};
    struct got g = {0};
    struct fold f;
    (void)state;
    fold_init(&f);
    assert_true(fold_admit_trip(&f, &a, NULL, 0, 1000, collect, &g));
    assert_false(fold_admit_trip(&f, &a, NULL, 10, 1000, collect, &g)); /* its own period */
    assert_int_equal(fold_expire(&f, 1000, collect, &g), 1);            /* opens 1000-2000 */
    assert_false(fold_admit(&f, &a, NULL, 1100, 1000, collect, &g));    /* the storm goes on */
    assert_int_equal(g.n, 1);
    assert_true(fold_admit_trip(&f, &a, NULL, 1500, 1000, collect, &g));
    assert_int_equal(g.n, 2); /* the repeat at 1100 summarised first */
    assert_int_equal(g.count, 1);
    assert_false(fold_admit_trip(&f, &a, NULL, 1600, 1000, collect, &g));
    assert_int_equal(fold_expire(&f, 2499, collect, &g), 0); /* the trip's period: to 2500 */
    assert_int_equal(fold_expire(&f, 2500, collect, &g), 1);
    fold_free(&f);
}

/* A summary stands for every repeat it counts: its severity is the
 * highest of theirs, whatever came last (an agent's first contacts past
 * the burst fold denied ones, medium, and let-through ones, low, in one
 * line; a storm of denied ones ended by one let through was summarised
 * low). The next period starts from its own repeats. */
static void fold_summary_takes_the_highest_severity(void **state)
{
    (void)state;
    struct fold f;
    struct got g = {0};
    struct alert a = {.kind = ALERT_FIRST_CONTACT,
                      .severity = SEVERITY_MEDIUM,
                      .agent = "ci",
                      .host = "h0.test",
                      .detail = "denied"};
    fold_init(&f);
    assert_true(fold_admit(&f, &a, NULL, 0, 1000, collect, &g));
    assert_false(fold_admit(&f, &a, NULL, 10, 1000, collect, &g));
    a.severity = SEVERITY_LOW;
    a.detail = "allow";
    assert_false(fold_admit(&f, &a, NULL, 20, 1000, collect, &g));
    assert_int_equal(fold_expire(&f, 1000, collect, &g), 1);
    assert_int_equal(g.count, 2);
    assert_int_equal(g.severity, SEVERITY_MEDIUM);
    assert_non_null(strstr(g.detail, "the last: allow"));
    /* the next period's repeats are all low: so is its summary */
    assert_false(fold_admit(&f, &a, NULL, 1001, 1000, collect, &g));
    assert_int_equal(fold_expire(&f, 2000, collect, &g), 1);
    assert_int_equal(g.severity, SEVERITY_LOW);
    fold_free(&f);
}

/* A period folds however many repeats come: past 2^32 of them (an alert
 * a write for a day-long write_burst period, at 50,000 writes a second)
 * the count goes on, not back to 0, which would have closed the period
 * without its summary. */
static void fold_counts_past_32_bits(void **state)
{
    (void)state;
    struct fold f;
    struct got g = {0};
    struct alert a = {.kind = ALERT_WRITE_BURST, .agent = "ci", .host = "x.test", .detail = "d"};
    fold_init(&f);
    assert_true(fold_admit(&f, &a, NULL, 0, 86400000, collect, &g));
    assert_false(fold_admit(&f, &a, NULL, 1, 86400000, collect, &g));
    assert_int_equal(f.n, 1);
    f.e[0].repeats = 4294967295u; /* as after that many folded */
    assert_false(fold_admit(&f, &a, NULL, 2, 86400000, collect, &g));
    assert_int_equal(fold_expire(&f, 86400000, collect, &g), 1);
    assert_int_equal(g.n, 1);
    assert_true(g.count == 4294967296u);
    assert_non_null(strstr(g.detail, "4294967296 more within 24h, folded"));
    fold_free(&f);
}

/* The wall clock stepped back (an hour, here): a period opened before the
 * step ends no later than one period after the new time, as the windows
 * and baselines start over, rather than folding every repeat of its key
 * for the hour the clock went back plus its own period, with no line. */
static void fold_period_after_the_clock_went_back(void **state)
{
    (void)state;
    struct fold f;
    struct got g = {0};
    struct alert a = {.kind = ALERT_TIER3_WRITE, .agent = "ci", .host = "x.test", .detail = "d"};
    const int64_t t = 1796065200000LL, back = t - 3600000;
    fold_init(&f);
    assert_true(fold_admit(&f, &a, "x.test", t, 60000, collect, &g));
    assert_false(fold_admit(&f, &a, "x.test", t + 10, 60000, collect, &g));
    /* the tick after the step closes the period with its summary */
    assert_int_equal(fold_expire(&f, back, collect, &g), 1);
    assert_int_equal(g.n, 1);
    assert_true(g.count == 1);
    /* the next period is one period long from the new time */
    assert_false(fold_admit(&f, &a, "x.test", back + 10, 60000, collect, &g));
    assert_int_equal(fold_expire(&f, back + 59999, collect, &g), 0);
    assert_int_equal(fold_expire(&f, back + 60000, collect, &g), 1);
    /* an alert after a step, before any tick, is written and opens a new period */
    assert_int_equal(fold_expire(&f, back + 120000, collect, &g), 0); /* quiet: closed */
    assert_true(fold_admit(&f, &a, "x.test", t, 60000, collect, &g));
    assert_false(fold_admit(&f, &a, "x.test", t + 1, 60000, collect, &g));
    assert_true(fold_admit(&f, &a, "x.test", back, 60000, collect, &g));
    assert_int_equal(g.n, 3); /* the repeat before the step, summarised first */
    assert_true(g.count == 1);
    assert_false(fold_admit(&f, &a, "x.test", back + 1, 60000, collect, &g));
    fold_free(&f);
}

/* A period too long for the clock (the loader refuses over 3650 days;
 * the fold holds whatever it is given) ends at the end of time, without
 * overflowing: it folds the repeats that follow. */
static void fold_period_past_the_clock(void **state)
{
    (void)state;
    struct fold f;
    struct got g = {0};
    struct alert a = {.kind = ALERT_WRITE_BURST, .agent = "ci", .host = "x.test", .detail = "d1"};
    int64_t now = 1764600000000; /* 2025-12 */
    fold_init(&f);
    assert_true(fold_admit(&f, &a, NULL, now, INT64_MAX, collect, &g)); /* signed overflow */
    assert_false(fold_admit(&f, &a, NULL, now + 1, INT64_MAX, collect, &g));
    fold_free(&f);
    fold_init(&f);
    assert_true(fold_admit(&f, &a, NULL, now, UINT64_MAX, collect, &g));
    assert_false(fold_admit(&f, &a, NULL, now + 1, UINT64_MAX, collect, &g));
    assert_int_equal(fold_expire(&f, INT64_MAX - 1, collect, &g), 0);
    fold_free(&f);
    fold_init(&f);
    assert_true(fold_admit(&f, &a, NULL, -5, UINT64_MAX, collect, &g)); /* a clock before 1970 */
    assert_false(fold_admit(&f, &a, NULL, INT64_MAX - 6, UINT64_MAX, collect, &g));
    fold_free(&f);
}

static void fold_keys_and_zero_period(void **state)
{
    (void)state;
    struct fold f;
    struct got g = {0};
    struct alert a = {.kind = ALERT_FIRST_CONTACT, .agent = "ci", .host = "a.test"};
    fold_init(&f);
    assert_true(fold_admit(&f, &a, "a.test", 0, 60000, collect, &g));
    assert_true(fold_admit(&f, &a, "b.test", 0, 60000, collect, &g)); /* another host */
    a.agent = "other";
    assert_true(fold_admit(&f, &a, "a.test", 0, 60000, collect, &g)); /* another agent */
    a.agent = NULL;
    assert_true(fold_admit(&f, &a, "a.test", 0, 60000, collect, &g)); /* no agent is a key too */
    assert_false(fold_admit(&f, &a, "a.test", 1, 60000, collect, &g));
    a.kind = ALERT_TIER3_WRITE;
    assert_true(fold_admit(&f, &a, "a.test", 1, 60000, collect, &g)); /* another kind */
    assert_true(fold_admit(&f, &a, "a.test", 2, 0, collect, &g));     /* period 0: never folds */
    assert_true(fold_admit(&f, &a, "a.test", 3, 0, collect, &g));
    /* a period that ended but was not expired yet reopens on admit, its
     * repeat (the first-contact one, at 1) summarised first */
    a.kind = ALERT_FIRST_CONTACT;
    assert_true(fold_admit(&f, &a, "a.test", 70000, 60000, collect, &g));
    assert_int_equal(g.n, 1);
    assert_int_equal(g.count, 1);
    fold_free(&f);
    fold_free(&f); /* twice is harmless */
}

/* A steady stream of alerts of one key, each arriving before fold_expire()
 * came round after its period ended: one summary per period still, each
 * counting that period's repeats only (they used to be carried on, and
 * summarised only at the end). */
static void fold_steady_stream_summarised_per_period(void **state)
{
    (void)state;
    struct fold f;
    struct got g = {0};
    struct alert a = {.kind = ALERT_WRITE_BURST, .agent = "ci", .detail = "d"};
    fold_init(&f);
    int written = 0;
    for (int64_t t = 0; t < 10000; t += 100) /* 10 alerts a second for 10 s, period 1 s */
        written += fold_admit(&f, &a, NULL, t, 1000, collect, &g);
    /* the first alert, then one alert and one summary of 9 repeats per later
     * second (each period's first alert is written, the next 9 folded) */
    assert_int_equal(written, 10);
    assert_int_equal(g.n, 9);
    assert_int_equal(g.count, 9);
    assert_int_equal(fold_flush(&f, 10000, collect, &g), 1);
    assert_int_equal(g.count, 9);
    fold_free(&f);
}

/* The index of the collected alert whose detail starts with <start>, or -1. */
static int seen_with(const struct got *g, const char *start)
{
    for (int i = 0; i < g->n && i < 4; i++)
        if (strncmp(g->seen[i].detail, start, strlen(start)) == 0)
            return i;
    return -1;
}

/* Past FOLD_MAX open keys, a new (agent, host) folds by agent over all
 * hosts, and past FOLD_SPILL_MAX spilled agents by kind alone: the table
 * stays bounded and a storm of new hosts still yields one line a period. */
static void fold_table_spills_when_full(void **state)
{
    (void)state;
    struct fold f;
    struct got g = {0};
    char host[32], agent[32];
    struct alert a = {.kind = ALERT_TIER3_WRITE, .agent = "ci", .detail = "w"};
    fold_init(&f);
    for (int i = 0; i < FOLD_MAX; i++) {
        snprintf(host, sizeof(host), "h%d.test", i);
        assert_true(fold_admit(&f, &a, host, 0, 60000, collect, &g));
    }
    assert_int_equal(f.n, FOLD_MAX);
    /* the table is full: new hosts of "ci" open one spilled period */
    assert_true(fold_admit(&f, &a, "new0.test", 1, 60000, collect, &g));
    for (int i = 1; i <= 50; i++) {
        snprintf(host, sizeof(host), "new%d.test", i);
        a.host = host;
        assert_false(fold_admit(&f, &a, host, 2, 60000, collect, &g));
    }
    /* a known key still folds by itself */
    a.host = "h7.test";
    assert_false(fold_admit(&f, &a, "h7.test", 3, 60000, collect, &g));
    assert_int_equal(f.n, FOLD_MAX + 1);
    /* other agents spill by agent until FOLD_SPILL_MAX, then by kind */
    for (int i = 0; i < FOLD_SPILL_MAX - 1; i++) {
        snprintf(agent, sizeof(agent), "a%d", i);
        a.agent = agent;
        assert_true(fold_admit(&f, &a, "x.test", 4, 60000, collect, &g));
    }
    a.agent = "late";
    assert_true(fold_admit(&f, &a, "x.test", 5, 60000, collect, &g));
    a.agent = "later";
    assert_false(fold_admit(&f, &a, "y.test", 6, 60000, collect, &g));
    assert_int_equal(f.n, FOLD_MAX + FOLD_SPILL_MAX + 1);
    /* the summaries say how they folded, and name no host they do not own */
    g.n = 0;
    memset(&g.seen, 0, sizeof(g.seen));
    assert_int_equal(fold_flush(&f, 7, collect, &g), 3);
    int own = seen_with(&g, "1 more within 1m, folded; the last");
    assert_true(own >= 0);
    assert_string_equal(g.seen[own].agent, "ci");
    assert_string_equal(g.seen[own].host, "h7.test");
    int by_agent = seen_with(&g, "50 more within 1m, folded over all hosts");
    assert_true(by_agent >= 0);
    assert_string_equal(g.seen[by_agent].agent, "ci");
    assert_string_equal(g.seen[by_agent].host, "(none)");
    int by_kind = seen_with(&g, "1 more within 1m, folded over all agents and hosts");
    assert_true(by_kind >= 0);
    assert_string_equal(g.seen[by_kind].agent, "(none)");
    assert_string_equal(g.seen[by_kind].host, "(none)");
    fold_free(&f);
}

/* The fold table against a plain model of its rules (one period per key,
 * repeats counted, a summary when a period with repeats ends, a quiet one
 * forgotten), over a long random run of alerts and expiries on 5,000 keys,
 * so that the index finds every period through the entries' moves. */
#define MODEL_AGENTS 50
#define MODEL_HOSTS  100

struct model {
    bool open[MODEL_AGENTS * MODEL_HOSTS];
    int64_t until[MODEL_AGENTS * MODEL_HOSTS];
    uint64_t period[MODEL_AGENTS * MODEL_HOSTS];
    unsigned repeats[MODEL_AGENTS * MODEL_HOSTS];
};

static void count_summary(struct alert *a, void *arg)
{
    (void)a;
    (*(int *)arg)++;
}

static void fold_matches_a_plain_model(void **state)
{
    (void)state;
    static struct model m;
    struct fold f;
    char agent[16], host[16];
    uint64_t rnd = 20261202;
    int64_t now = 0;
    int got = 0, want = 0;
    memset(&m, 0, sizeof(m));
    fold_init(&f);
    for (int step = 0; step < 200000; step++) {
        rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
        now += (int64_t)(rnd >> 60); /* 0-15 ms */
        if ((rnd >> 32) % 50 == 0) {
            for (int k = 0; k < MODEL_AGENTS * MODEL_HOSTS; k++) {
                if (!m.open[k] || now < m.until[k])
                    continue;
                if (m.repeats[k] == 0) {
                    m.open[k] = false;
                    continue;
                }
                want++;
                m.repeats[k] = 0;
                m.until[k] = now + (int64_t)m.period[k];
            }
            fold_expire(&f, now, count_summary, &got);
            assert_int_equal(got, want);
            continue;
        }
        int k = (int)((rnd >> 20) % (MODEL_AGENTS * MODEL_HOSTS));
        uint64_t period = 100 + (rnd >> 40) % 900;
        snprintf(agent, sizeof(agent), "a%d", k / MODEL_HOSTS);
        snprintf(host, sizeof(host), "h%d.test", k % MODEL_HOSTS);
        struct alert a = {.kind = ALERT_TIER3_WRITE, .agent = agent, .host = host, .detail = "w"};
        bool write;
        if (m.open[k] && now < m.until[k]) {
            m.repeats[k]++;
            write = false;
        } else {
            if (m.open[k] && m.repeats[k] > 0)
                want++; /* the ended period's summary goes first */
            m.open[k] = true;
            m.repeats[k] = 0;
            m.period[k] = period;
            m.until[k] = now + (int64_t)period;
            write = true;
        }
        assert_int_equal(fold_admit(&f, &a, host, now, period, count_summary, &got), write);
        assert_int_equal(got, want);
    }
    fold_free(&f);
}

/* The hash the fold index had: FNV-1a, unkeyed, over kind, agent, a
 * newline and host. */
static uint64_t fnv1a_key(enum alert_kind kind, const char *agent, const char *host)
{
    uint64_t h = (1469598103934665603ull ^ (uint64_t)kind) * 1099511628211ull;
    for (const char *p = agent; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ '\n') * 1099511628211ull;
    for (const char *p = host; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

/* The longest run of used slots in <x> (linear probing: a lookup of any
 * key that hashes into a run may walk all of it, a strcmp per slot). */
static size_t longest_run(const struct pos_index *x)
{
    size_t longest = 0, run = 0;
    for (size_t i = 0; i < 2 * x->n; i++) { /* twice round: a run may wrap */
        run = x->slot[i % x->n] != 0 ? run + 1 : 0;
        if (run > longest)
            longest = run;
    }
    return longest < x->n ? longest : x->n;
}

/* 512 hosts whose keys all had the same home slot under FNV-1a (its low
 * 12 bits 0: slot 0 of any table up to 4096 slots), as an agent allowed a
 * wildcard could pick them: they made one run of 512 slots, which every
 * alert of a storm walked. Under the process's random key they spread:
 * 512 keys in 1024 slots make no run of 128 but with a chance under 1e-7. */
static void fold_chosen_hosts_spread(void **state)
{
    (void)state;
    struct fold f;
    struct got g = {0};
    struct alert a = {.kind = ALERT_TIER3_WRITE, .agent = "ci", .detail = "w"};
    char host[32];
    size_t found = 0;
    fold_init(&f);
    for (unsigned i = 0; found < 512 && i < 10000000; i++) {
        snprintf(host, sizeof(host), "n%u.wild.test", i);
        if ((fnv1a_key(a.kind, a.agent, host) & 4095) != 0)
            continue;
        a.host = host;
        assert_true(fold_admit(&f, &a, host, 0, 60000, collect, &g));
        found++;
    }
    assert_int_equal(found, 512);
    assert_int_equal(f.index.n, 1024);
    assert_true(longest_run(&f.index) < 128);
    fold_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(window_counts_within_period),
        cmocka_unit_test(window_edges),
        cmocka_unit_test(window_holds_any_interval_of_its_length),
        cmocka_unit_test(window_forgets_past_eleven_tenths),
        cmocka_unit_test(window_matches_the_interval_bounds),
        cmocka_unit_test(window_empty_at_is_when_the_sum_first_falls_to_zero),
        cmocka_unit_test(fold_one_line_per_period),
        cmocka_unit_test(fold_summary_takes_the_highest_severity),
        cmocka_unit_test(fold_keys_and_zero_period),
        cmocka_unit_test(fold_period_past_the_clock),
        cmocka_unit_test(fold_counts_past_32_bits),
        cmocka_unit_test(fold_period_after_the_clock_went_back),
        cmocka_unit_test(fold_steady_stream_summarised_per_period),
        cmocka_unit_test(fold_trip_after_a_summary_is_written),
        cmocka_unit_test(fold_table_spills_when_full),
        cmocka_unit_test(fold_matches_a_plain_model),
        cmocka_unit_test(fold_chosen_hosts_spread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
