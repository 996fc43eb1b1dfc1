/* Unit tests for gate/backlog.c: the bytes waiting for clients, summed
 * through a callback on each output buffer (evbuffers, no sockets), and the
 * marks that shrink once the sum passes the budget. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/buffer.h>

#include "gate/backlog.h"

#define NORMAL_HIGH (256u * 1024)
#define NORMAL_LOW  (64u * 1024)

static char bytes[64 * 1024];

static void the_sum_follows_adds_and_drains(void **state)
{
    (void)state;
    struct evbuffer *a = evbuffer_new(), *b = evbuffer_new();
    struct evbuffer_cb_entry *ea = backlog_track(a), *eb = backlog_track(b);
    assert_non_null(ea);
    assert_non_null(eb);
    size_t base = backlog_held();
    evbuffer_add(a, bytes, 1000);
    evbuffer_add(b, bytes, 300);
    assert_int_equal(backlog_held(), base + 1300);
    evbuffer_drain(a, 400); /* as libevent's write to the socket does */
    assert_int_equal(backlog_held(), base + 900);
    backlog_untrack(a, ea); /* freed with 600 bytes left */
    evbuffer_free(a);
    assert_int_equal(backlog_held(), base + 300);
    backlog_untrack(b, eb);
    evbuffer_free(b);
    assert_int_equal(backlog_held(), base);
}

static void an_untracked_buffer_changes_nothing(void **state)
{
    (void)state;
    struct evbuffer *a = evbuffer_new();
    size_t base = backlog_held();
    evbuffer_add(a, bytes, 100);
    backlog_untrack(a, NULL); /* never tracked (its connection failed first) */
    assert_int_equal(backlog_held(), base);
    evbuffer_free(a);
}

static void past_the_budget_the_marks_shrink(void **state)
{
    (void)state;
    backlog_budget_for_conns(64); /* 1 MiB */
    assert_int_equal(backlog_mark(NORMAL_HIGH), NORMAL_HIGH);
    assert_int_equal(backlog_low_mark(NORMAL_LOW), NORMAL_LOW);
    struct evbuffer *a = evbuffer_new();
    struct evbuffer_cb_entry *e = backlog_track(a);
    for (int i = 0; i < 17; i++) /* 1 MiB and 64 KiB */
        evbuffer_add(a, bytes, sizeof(bytes));
    assert_int_equal(backlog_mark(NORMAL_HIGH), BACKLOG_TIGHT);
    assert_int_equal(backlog_low_mark(NORMAL_LOW), BACKLOG_TIGHT_LOW);
    assert_true(backlog_low_mark(NORMAL_LOW) < backlog_mark(NORMAL_HIGH));
    assert_int_equal(backlog_mark(4096), 4096); /* a smaller mark stays */
    evbuffer_drain(a, sizeof(bytes) * 2);
    assert_int_equal(backlog_mark(NORMAL_HIGH), NORMAL_HIGH);
    backlog_untrack(a, e);
    evbuffer_free(a);
}

static void the_budget_has_a_floor(void **state)
{
    (void)state;
    backlog_budget_for_conns(1); /* 16 KiB, raised to 1 MiB */
    struct evbuffer *a = evbuffer_new();
    struct evbuffer_cb_entry *e = backlog_track(a);
    evbuffer_add(a, bytes, sizeof(bytes));
    assert_int_equal(backlog_mark(NORMAL_HIGH), NORMAL_HIGH);
    backlog_untrack(a, e);
    evbuffer_free(a);
    backlog_budget_for_conns(4096);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_sum_follows_adds_and_drains),
        cmocka_unit_test(an_untracked_buffer_changes_nothing),
        cmocka_unit_test(past_the_budget_the_marks_shrink),
        cmocka_unit_test(the_budget_has_a_floor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
