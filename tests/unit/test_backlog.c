/* Unit tests for gate/backlog.c: the bytes waiting for clients and for
 * upstreams, summed through a callback on each output buffer (evbuffers,
 * no sockets), and the marks that shrink once the sums pass the budget. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/buffer.h>

#include "gate/backlog.h"

#define NORMAL_HIGH (256u * 1024)
#define NORMAL_LOW  (64u * 1024)
#define C           BACKLOG_TO_CLIENT
#define U           BACKLOG_TO_UPSTREAM

static char bytes[64 * 1024];

static void the_sum_follows_adds_and_drains(void **state)
{
    (void)state;
    struct evbuffer *a = evbuffer_new(), *b = evbuffer_new();
    struct evbuffer_cb_entry *ea = backlog_track(a, C), *eb = backlog_track(b, C);
    assert_non_null(ea);
    assert_non_null(eb);
    size_t base = backlog_held(C);
    evbuffer_add(a, bytes, 1000);
    evbuffer_add(b, bytes, 300);
    assert_int_equal(backlog_held(C), base + 1300);
    evbuffer_drain(a, 400); /* as libevent's write to the socket does */
    assert_int_equal(backlog_held(C), base + 900);
    backlog_untrack(a, ea, C); /* freed with 600 bytes left */
    evbuffer_free(a);
    assert_int_equal(backlog_held(C), base + 300);
    backlog_untrack(b, eb, C);
    evbuffer_free(b);
    assert_int_equal(backlog_held(C), base);
}

static void an_untracked_buffer_changes_nothing(void **state)
{
    (void)state;
    struct evbuffer *a = evbuffer_new();
    size_t base = backlog_held(C);
    evbuffer_add(a, bytes, 100);
    backlog_untrack(a, NULL, C); /* never tracked (its connection failed first) */
    assert_int_equal(backlog_held(C), base);
    evbuffer_free(a);
}

static void past_the_budget_the_marks_shrink(void **state)
{
    (void)state;
    backlog_budget_for_conns(64); /* 1 MiB */
    assert_int_equal(backlog_mark(NORMAL_HIGH), NORMAL_HIGH);
    assert_int_equal(backlog_low_mark(NORMAL_LOW), NORMAL_LOW);
    struct evbuffer *a = evbuffer_new();
    struct evbuffer_cb_entry *e = backlog_track(a, C);
    for (int i = 0; i < 17; i++) /* 1 MiB and 64 KiB */
        evbuffer_add(a, bytes, sizeof(bytes));
    assert_int_equal(backlog_mark(NORMAL_HIGH), BACKLOG_TIGHT);
    assert_int_equal(backlog_low_mark(NORMAL_LOW), BACKLOG_TIGHT_LOW);
    assert_true(backlog_low_mark(NORMAL_LOW) < backlog_mark(NORMAL_HIGH));
    assert_int_equal(backlog_mark(4096), 4096); /* a smaller mark stays */
    evbuffer_drain(a, sizeof(bytes) * 2);
    assert_int_equal(backlog_mark(NORMAL_HIGH), NORMAL_HIGH);
    backlog_untrack(a, e, C);
    evbuffer_free(a);
}

static void the_budget_has_a_floor(void **state)
{
    (void)state;
    backlog_budget_for_conns(1); /* 16 KiB, raised to 1 MiB */
    struct evbuffer *a = evbuffer_new();
    struct evbuffer_cb_entry *e = backlog_track(a, C);
    evbuffer_add(a, bytes, sizeof(bytes));
    assert_int_equal(backlog_mark(NORMAL_HIGH), NORMAL_HIGH);
    backlog_untrack(a, e, C);
    evbuffer_free(a);
    backlog_budget_for_conns(4096);
}

/* Uploads to origins that take nothing count apart (their own gauge) but
 * under the same budget: past it, both directions' marks shrink. */
static void uploads_share_the_budget(void **state)
{
    (void)state;
    backlog_budget_for_conns(64); /* 1 MiB */
    size_t base_c = backlog_held(C), base_u = backlog_held(U);
    struct evbuffer *down = evbuffer_new(), *up = evbuffer_new();
    struct evbuffer_cb_entry *ed = backlog_track(down, C), *eu = backlog_track(up, U);
    for (int i = 0; i < 9; i++) /* 576 KiB each way: 1.1 MiB together */
        evbuffer_add(down, bytes, sizeof(bytes)), evbuffer_add(up, bytes, sizeof(bytes));
    assert_int_equal(backlog_held(C), base_c + 9 * sizeof(bytes));
    assert_int_equal(backlog_held(U), base_u + 9 * sizeof(bytes));
    assert_int_equal(backlog_mark(NORMAL_HIGH), BACKLOG_TIGHT);
    assert_int_equal(backlog_low_mark(NORMAL_LOW), BACKLOG_TIGHT_LOW);
    backlog_untrack(up, eu, U); /* freed full: taken off its own sum only */
    evbuffer_free(up);
    assert_int_equal(backlog_held(U), base_u);
    assert_int_equal(backlog_held(C), base_c + 9 * sizeof(bytes));
    assert_int_equal(backlog_mark(NORMAL_HIGH), NORMAL_HIGH);
    backlog_untrack(down, ed, C);
    evbuffer_free(down);
    backlog_budget_for_conns(4096);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_sum_follows_adds_and_drains),
        cmocka_unit_test(an_untracked_buffer_changes_nothing),
        cmocka_unit_test(past_the_budget_the_marks_shrink),
        cmocka_unit_test(the_budget_has_a_floor),
        cmocka_unit_test(uploads_share_the_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
