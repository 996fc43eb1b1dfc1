/* Unit tests for gate/upstream.c: how the connect budget is shared among the
 * addresses still to try (upstream_attempt_ms(), plain integers, no sockets
 * and no clock: "fast failures" are attempts that used none of their share). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "gate/upstream.h"

#define BUDGET 10000 /* GATEWAY_CONNECT_TIMEOUT_MS, the largest budget callers pass */
#define FLOOR  UPSTREAM_ATTEMPT_FLOOR_MS

static void one_address_gets_the_whole_budget(void **state)
{
    (void)state;
    assert_int_equal(upstream_attempt_ms(BUDGET, 1), BUDGET);
    assert_int_equal(upstream_attempt_ms(2000, 1), 2000);
}

static void sixteen_addresses_share_it_with_the_floor(void **state)
{
    (void)state;
    /* 10 s / 16 is 625 ms: raised to the floor */
    assert_int_equal(upstream_attempt_ms(BUDGET, UPSTREAM_MAX_ADDRS), FLOOR);
    /* a budget large enough is shared evenly */
    assert_int_equal(upstream_attempt_ms(32000, UPSTREAM_MAX_ADDRS), 2000);
    assert_int_equal(upstream_attempt_ms(BUDGET, 4), 2500);
}

/* Attempts that each time out use their whole share: how many are made
 * before the budget is spent, and their timeouts added up. */
static void all_timing_out(uint64_t budget, size_t n, size_t *made, uint64_t *spent)
{
    uint64_t left = budget;
    *made = 0;
    *spent = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned ms = upstream_attempt_ms(left, n - i);
        if (ms == 0)
            break;
        assert_true(ms <= left);
        left -= ms;
        *spent += ms;
        (*made)++;
    }
}

static void sixteen_timeouts_end_within_the_budget(void **state)
{
    (void)state;
    size_t made;
    uint64_t spent;
    all_timing_out(BUDGET, UPSTREAM_MAX_ADDRS, &made, &spent);
    assert_int_equal(spent, BUDGET); /* never more: 10 attempts of the floor */
    assert_int_equal(made, BUDGET / FLOOR);
    all_timing_out(2000, 4, &made, &spent); /* idle_timeout 2 s, 4 addresses */
    assert_int_equal(spent, 2000);
    assert_int_equal(made, 2);
}

static void an_address_after_fast_failures_gets_the_remainder(void **state)
{
    (void)state;
    /* 4 addresses, the first three refused at once (3 ms used in all): the
     * last one gets all that is left, not a quarter of the budget */
    assert_int_equal(upstream_attempt_ms(BUDGET, 4), 2500);
    assert_int_equal(upstream_attempt_ms(BUDGET - 3, 1), BUDGET - 3);
    /* two refused of three: the two left share what remains */
    assert_int_equal(upstream_attempt_ms(BUDGET - 1, 2), (BUDGET - 1) / 2);
}

static void never_more_than_remains(void **state)
{
    (void)state;
    for (uint64_t left = 0; left <= 3 * FLOOR; left += 7)
        for (size_t n = 1; n <= UPSTREAM_MAX_ADDRS; n++)
            assert_true(upstream_attempt_ms(left, n) <= left);
    assert_int_equal(upstream_attempt_ms(1500, 3), 1000); /* floor, then 500 left */
    assert_int_equal(upstream_attempt_ms(500, 2), 500);
}

static void a_budget_smaller_than_the_floor(void **state)
{
    (void)state;
    assert_int_equal(upstream_attempt_ms(300, 4), 300);
    assert_int_equal(upstream_attempt_ms(300, 1), 300);
    assert_int_equal(upstream_attempt_ms(1, UPSTREAM_MAX_ADDRS), 1);
}

static void nothing_left_is_no_attempt(void **state)
{
    (void)state;
    assert_int_equal(upstream_attempt_ms(0, 3), 0);
    assert_int_equal(upstream_attempt_ms(BUDGET, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_address_gets_the_whole_budget),
        cmocka_unit_test(sixteen_addresses_share_it_with_the_floor),
        cmocka_unit_test(sixteen_timeouts_end_within_the_budget),
        cmocka_unit_test(an_address_after_fast_failures_gets_the_remainder),
        cmocka_unit_test(never_more_than_remains),
        cmocka_unit_test(a_budget_smaller_than_the_floor),
        cmocka_unit_test(nothing_left_is_no_attempt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
