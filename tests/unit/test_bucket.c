/* test_bucket: the token bucket's arithmetic against hand-computed sequences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "shape/bucket.h"

#define MS 1000000ull
#define S  1000000000ull

static void test_starts_full_then_refills(void **state)
{
    (void)state;
    struct bucket b;
    bucket_init(&b, 10, 0, S, 1000);
    assert_int_equal(bucket_available(&b, 1000), 10);
    assert_true(bucket_take(&b, 10, 1000));
    assert_false(bucket_take(&b, 1, 1000));
    /* 100 ms of 10 tokens/s earns exactly one. */
    assert_int_equal(bucket_available(&b, 1000 + 100 * MS), 1);
    /* 50 ms more is half a token: carried, not lost. */
    assert_int_equal(bucket_available(&b, 1000 + 150 * MS), 1);
    assert_int_equal(b.rem, 5 * 100 * MS); /* 0.5 token = 5e8 token-ns */
    assert_int_equal(bucket_available(&b, 1000 + 200 * MS), 2);
    assert_int_equal(b.rem, 0);
    /* More than a full refill: full, never more. */
    assert_int_equal(bucket_available(&b, 1000 + 5 * S), 10);
    assert_true(bucket_take(&b, 4, 1000 + 5 * S));
    assert_int_equal(bucket_available(&b, 1000 + 5 * S), 6);
}

static void test_fraction_carried_across_many_small_steps(void **state)
{
    (void)state;
    struct bucket b;
    /* 3 tokens a second: one every 333 333 333.3 ns. Updating every 1 ms
     * earns 0.003 token each time: without the carried remainder it would
     * never refill. */
    bucket_init(&b, 3, 0, S, 0);
    assert_true(bucket_take(&b, 3, 0));
    uint64_t t = 0;
    for (int i = 0; i < 333; i++) {
        t += MS;
        assert_int_equal(bucket_available(&b, t), 0);
    }
    t += MS; /* 334 ms: 1.002 tokens */
    assert_int_equal(bucket_available(&b, t), 1);
    for (int i = 334; i < 999; i++) {
        t += MS;
        bucket_refill(&b, t);
    }
    assert_int_equal(bucket_available(&b, t), 2); /* 999 ms: 2.997 */
    t += MS;
    assert_int_equal(bucket_available(&b, t), 3); /* 1 s: exactly 3 */
    assert_int_equal(b.rem, 0);
}

static void test_one_time_burst(void **state)
{
    (void)state;
    struct bucket b;
    bucket_init(&b, 2, 3, S, 0);
    assert_int_equal(bucket_available(&b, 0), 5);
    for (int i = 0; i < 5; i++)
        assert_true(bucket_take(&b, 1, 0));
    assert_false(bucket_take(&b, 1, 0));
    /* The burst is spent first and never comes back, however long the idle. */
    assert_int_equal(bucket_available(&b, 3600 * S), 2);
    assert_int_equal(b.burst, 0);
    /* A take larger than the burst uses burst then budget. */
    bucket_init(&b, 10, 3, S, 0);
    assert_true(bucket_take(&b, 5, 0));
    assert_int_equal(b.burst, 0);
    assert_int_equal(b.budget, 8);
    assert_false(bucket_take(&b, 9, 0));
    assert_int_equal(b.budget, 8); /* all or nothing */
    /* A take within the burst leaves the budget. */
    bucket_init(&b, 10, 3, S, 0);
    assert_true(bucket_take(&b, 2, 0));
    assert_int_equal(b.burst, 1);
    assert_int_equal(b.budget, 10);
    assert_true(bucket_take(&b, 0, 0));
}

static void test_wait_ns(void **state)
{
    (void)state;
    struct bucket b;
    bucket_init(&b, 10, 0, S, 0);
    assert_int_equal(bucket_wait_ns(&b, 1, 0), 0);
    assert_true(bucket_take(&b, 10, 0));
    assert_int_equal(bucket_wait_ns(&b, 1, 0), 100 * MS);
    assert_int_equal(bucket_wait_ns(&b, 10, 0), S);
    /* Beyond the size: waits for a full bucket. */
    assert_int_equal(bucket_wait_ns(&b, 1000, 0), S);
    /* Half a token carried halves the wait. */
    assert_int_equal(bucket_wait_ns(&b, 1, 50 * MS), 50 * MS);
    /* Rounded up: 3 a second is one every 333 333 333.3 ns. */
    bucket_init(&b, 3, 0, S, 0);
    assert_true(bucket_take(&b, 3, 0));
    assert_int_equal(bucket_wait_ns(&b, 1, 0), 333333334);
    assert_int_equal(bucket_available(&b, 333333333), 0);
    assert_int_equal(bucket_available(&b, 333333334), 1);
    /* 1 request a minute, burst 1: two go, the next waits a minute. */
    bucket_init(&b, 1, 1, 60 * S, 0);
    assert_true(bucket_take(&b, 1, 0));
    assert_true(bucket_take(&b, 1, 0));
    assert_false(bucket_take(&b, 1, 0));
    assert_int_equal(bucket_wait_ns(&b, 1, 0), 60 * S);
    assert_int_equal(bucket_wait_ns(&b, 1, 59 * S), S);
    assert_true(bucket_take(&b, 1, 60 * S));
}

static void test_debt(void **state)
{
    (void)state;
    struct bucket b;
    bucket_init(&b, 10, 2, S, 0);
    bucket_force(&b, 27, 0); /* 2 burst + 10 budget + 15 owed */
    assert_int_equal(b.debt, 15);
    assert_int_equal(bucket_available(&b, 0), 0);
    assert_false(bucket_take(&b, 1, 0));
    assert_true(bucket_take(&b, 0, 0));
    /* 16 tokens must be earned before one can be taken: 1.6 s. */
    assert_int_equal(bucket_wait_ns(&b, 1, 0), 1600 * MS);
    assert_int_equal(bucket_available(&b, 1500 * MS), 0);
    assert_int_equal(b.debt, 0);
    assert_int_equal(bucket_available(&b, 1600 * MS), 1);
    /* A long gap pays a large debt and fills the bucket. */
    bucket_force(&b, 1000000, 1600 * MS);
    assert_int_equal(bucket_available(&b, 1600 * MS + 99999 * S), 0);
    assert_int_equal(bucket_available(&b, UINT64_MAX), 10);
    /* Debt saturates rather than wraps; so does the wait. */
    bucket_force(&b, UINT64_MAX, UINT64_MAX);
    bucket_force(&b, UINT64_MAX, UINT64_MAX);
    assert_int_equal(b.debt, UINT64_MAX);
    assert_int_equal(bucket_wait_ns(&b, 1, UINT64_MAX), UINT64_MAX);
}

static void test_clock_edges(void **state)
{
    (void)state;
    struct bucket b;
    /* A clock that does not advance refills nothing. */
    bucket_init(&b, 5, 0, S, 7 * S);
    assert_true(bucket_take(&b, 5, 7 * S));
    for (int i = 0; i < 100; i++)
        assert_int_equal(bucket_available(&b, 7 * S), 0);
    /* A time before the last update counts as no time, and does not move
     * the last update back (no tokens from going back and forth). */
    assert_int_equal(bucket_available(&b, 1 * S), 0);
    assert_int_equal(b.last_ns, 7 * S);
    assert_int_equal(bucket_available(&b, 7 * S + 200 * MS), 1);
    assert_int_equal(bucket_wait_ns(&b, 1, 0), 0); /* one is there */
    /* A huge gap: full, no overflow, even at the largest sizes. */
    bucket_init(&b, UINT64_MAX, 0, UINT64_MAX, 0);
    assert_true(bucket_take(&b, UINT64_MAX, 0));
    assert_int_equal(bucket_available(&b, UINT64_MAX - 1), UINT64_MAX - 1);
    bucket_init(&b, UINT64_MAX, 0, 1, 0);
    assert_true(bucket_take(&b, UINT64_MAX, 0));
    assert_int_equal(bucket_available(&b, UINT64_MAX), UINT64_MAX);
    bucket_init(&b, 5, 0, 3600 * S, 0);
    assert_true(bucket_take(&b, 5, 0));
    assert_int_equal(bucket_available(&b, UINT64_MAX), 5);
    /* Full buckets forget elapsed time: no hoarding beyond the size. */
    bucket_init(&b, 4, 0, S, 0);
    assert_int_equal(bucket_available(&b, 100 * S), 4);
    assert_true(bucket_take(&b, 4, 100 * S));
    assert_int_equal(bucket_available(&b, 100 * S + 250 * MS), 1);
    /* A zero refill time is taken as 1 ns: refills at once. */
    bucket_init(&b, 4, 0, 0, 0);
    assert_int_equal(b.refill_ns, 1);
    assert_true(bucket_take(&b, 4, 0));
    assert_int_equal(bucket_available(&b, 1), 4);
    /* Sizes near the top with a burst: available saturates. */
    bucket_init(&b, UINT64_MAX, 5, S, 0);
    assert_int_equal(bucket_available(&b, 0), UINT64_MAX);
    assert_int_equal(bucket_wait_ns(&b, UINT64_MAX, 0), 0);
}

static void test_off(void **state)
{
    (void)state;
    struct bucket b;
    bucket_init(&b, 0, 7, S, 0);
    assert_true(bucket_is_off(&b));
    assert_int_equal(b.burst, 0);
    assert_true(bucket_take(&b, UINT64_MAX, 0));
    bucket_force(&b, UINT64_MAX, 0);
    assert_int_equal(b.debt, 0);
    assert_int_equal(bucket_available(&b, 0), UINT64_MAX);
    assert_int_equal(bucket_wait_ns(&b, UINT64_MAX, 0), 0);
    assert_true(bucket_at_rest(&b, 0, 0));
    bucket_refill(&b, S);
    assert_int_equal(b.last_ns, 0);
}

static void test_reconfigure(void **state)
{
    (void)state;
    struct bucket b;
    bucket_init(&b, 10, 5, S, 0);
    assert_true(bucket_take(&b, 8, 0)); /* burst 0, budget 7 */
    /* Smaller: clamped. */
    bucket_reconfigure(&b, 4, 5, S, 0);
    assert_int_equal(b.budget, 4);
    assert_int_equal(b.size, 4);
    /* Larger: nothing granted; refills at the new rate. */
    bucket_reconfigure(&b, 20, 5, S, 0);
    assert_int_equal(b.budget, 4);
    assert_int_equal(b.burst, 0);
    assert_int_equal(bucket_available(&b, 100 * MS), 6);
    /* The burst left is clamped to the new burst. */
    bucket_init(&b, 10, 5, S, 0);
    bucket_reconfigure(&b, 10, 2, S, 0);
    assert_int_equal(b.burst, 2);
    /* Time elapsed under the old rate counts at the old rate. */
    bucket_init(&b, 10, 0, S, 0);
    assert_true(bucket_take(&b, 10, 0));
    bucket_reconfigure(&b, 100, 0, S, 500 * MS);
    assert_int_equal(b.budget, 5);
    assert_int_equal(b.last_ns, 500 * MS);
    /* Off to on: a fresh full bucket. On to off: off. */
    bucket_init(&b, 0, 0, S, 0);
    bucket_reconfigure(&b, 3, 1, S, 9);
    assert_int_equal(bucket_available(&b, 9), 4);
    bucket_reconfigure(&b, 0, 0, S, 9);
    assert_true(bucket_is_off(&b));
    /* Reconfigured with a time behind the last update: last stays. */
    bucket_init(&b, 10, 0, S, 5 * S);
    bucket_reconfigure(&b, 8, 0, S, 1 * S);
    assert_int_equal(b.last_ns, 5 * S);
}

static void test_at_rest(void **state)
{
    (void)state;
    struct bucket b;
    bucket_init(&b, 10, 2, S, 0);
    assert_true(bucket_at_rest(&b, 2, 0));
    assert_false(bucket_at_rest(&b, 3, 0)); /* another configuration */
    assert_true(bucket_take(&b, 1, 0));
    assert_false(bucket_at_rest(&b, 2, 10 * S)); /* the burst never comes back */
    bucket_init(&b, 10, 0, S, 0);
    assert_true(bucket_take(&b, 1, 0));
    assert_false(bucket_at_rest(&b, 0, 50 * MS));
    assert_true(bucket_at_rest(&b, 0, 100 * MS));
    bucket_force(&b, 30, 100 * MS);
    assert_false(bucket_at_rest(&b, 0, 2 * S));
    assert_true(bucket_at_rest(&b, 0, 4 * S));
}

/* How long a bucket takes to be full again, rounded up, debt included;
 * and a drain takes only what it holds, never its burst, never into debt. */
static void test_full_in_and_drain(void **state)
{
    (void)state;
    struct bucket b;
    bucket_init(&b, 10, 5, 10 * S, 0); /* a token a second */
    assert_int_equal(bucket_full_in_ns(&b, 0), 0);
    assert_true(bucket_take(&b, 12, 0)); /* the burst, then 7 of the 10 */
    assert_int_equal(bucket_full_in_ns(&b, 0), 7 * S);
    assert_int_equal(bucket_full_in_ns(&b, 500 * MS), 6500 * MS); /* half a token carried */
    bucket_force(&b, 5, 500 * MS);                                /* 3 held, 2 owed */
    assert_int_equal(bucket_full_in_ns(&b, 500 * MS), 11500 * MS);
    assert_int_equal(bucket_full_in_ns(&b, 12 * S), 0);
    bucket_init(&b, 10, 5, 10 * S, 0);
    bucket_drain(&b, 4, 0);
    assert_int_equal(b.budget, 6);
    assert_int_equal(b.burst, 5);
    bucket_drain(&b, 100, 0);
    assert_int_equal(b.budget, 0);
    assert_int_equal(b.debt, 0);
    assert_int_equal(bucket_available(&b, 3 * S), 5 + 3);
    bucket_init(&b, 0, 0, S, 0); /* off: nothing to wait for or take */
    assert_int_equal(bucket_full_in_ns(&b, 0), 0);
    bucket_drain(&b, 4, 0);
    assert_true(bucket_is_off(&b));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_starts_full_then_refills),
        cmocka_unit_test(test_fraction_carried_across_many_small_steps),
        cmocka_unit_test(test_one_time_burst),
        cmocka_unit_test(test_wait_ns),
        cmocka_unit_test(test_debt),
        cmocka_unit_test(test_clock_edges),
        cmocka_unit_test(test_off),
        cmocka_unit_test(test_reconfigure),
        cmocka_unit_test(test_at_rest),
        cmocka_unit_test(test_full_in_and_drain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
