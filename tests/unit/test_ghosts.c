/* test_ghosts: a key the quota table forgot before its buckets were full
 * comes back no fuller than it would be had it stayed (its one-time burst
 * included), whatever met it in its slot; a key that never went is untouched
 * unless it shares a slot with keys that still owe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "shape/ghosts.h"

#define MS 1000000ull
#define S  1000000000ull

/* Three keys in one slot (the same low bits), each its own fingerprint
 * (the high 32 bits), and one in another slot. */
#define H1    (5ull | 0xaaaaull << 32)
#define H2    (5ull | 0xbbbbull << 32)
#define H3    (5ull | 0xccccull << 32)
#define OTHER (6ull | 0xaaaaull << 32)

/* A request bucket of 10 tokens refilled in 10 s (one a second) with a
 * one-time burst of 5, made at <now> as quota.c makes one. */
static struct bucket requests(uint64_t now)
{
    struct bucket b;
    bucket_init(&b, 10, 5, 10 * S, now);
    return b;
}

/* What a request bucket (as requests(), with a burst of <burst>) made for
 * the key of <hash> at <now> holds, once its ghost is drained from it. */
static uint64_t comes_back_with(const struct ghosts *g, uint64_t hash, uint64_t burst, uint64_t now)
{
    struct bucket b = requests(now);
    b.burst = burst;
    ghosts_drain_requests(g, hash, &b, now);
    return bucket_available(&b, now);
}

static struct bucket off(void)
{
    struct bucket b;
    bucket_init(&b, 0, 0, S, 0);
    return b;
}

static void test_nothing_forgotten_drains_nothing(void **state)
{
    (void)state;
    struct bucket b = requests(0), bw = off();
    ghosts_drain_requests(NULL, H1, &b, 0);
    assert_int_equal(bucket_available(&b, 0), 15);
    struct ghosts *g = ghosts_new(16);
    assert_non_null(g);
    ghosts_keep(g, H1, &b, 5, &bw, 0); /* full, burst intact: nothing to keep */
    assert_int_equal(comes_back_with(g, H1, 5, S), 15);
    ghosts_free(g);
    ghosts_free(NULL);
}

/* Forgotten at any point of its refill, the key's bucket made again holds
 * what the one kept would, at most one token less (rounded toward
 * denial), never more; its spent burst stays spent. */
static void test_a_key_comes_back_as_drained_as_it_went(void **state)
{
    (void)state;
    for (uint64_t gone = 1 * S; gone <= 12 * S; gone += 250 * MS) {
        struct ghosts *g = ghosts_new(16);
        struct bucket kept = requests(0), bw = off();
        assert_true(bucket_take(&kept, 15, 1 * S)); /* the burst and all 10 */
        struct bucket forgotten = kept;
        ghosts_keep(g, H1, &forgotten, 5, &bw, gone);
        for (uint64_t back = gone; back <= 13 * S; back += 250 * MS) {
            uint64_t want = bucket_available(&kept, back), got = comes_back_with(g, H1, 5, back);
            if (got > want || want - got > 1)
                fail_msg("forgotten at %llu ms, back at %llu ms: %llu tokens, kept %llu",
                         (unsigned long long)(gone / MS), (unsigned long long)(back / MS),
                         (unsigned long long)got, (unsigned long long)want);
        }
        ghosts_free(g);
    }
}

static void test_another_key_in_the_slot_is_untouched(void **state)
{
    (void)state;
    struct ghosts *g = ghosts_new(16);
    struct bucket b = requests(0), bw = off();
    assert_true(bucket_take(&b, 15, 0));
    ghosts_keep(g, H1, &b, 5, &bw, 0);
    assert_int_equal(comes_back_with(g, H2, 5, S), 15);
    assert_int_equal(comes_back_with(g, OTHER, 5, S), 15);
    ghosts_free(g);
}

/* Two keys that still owe meet in a slot: it holds for every key there
 * from then on, the later full time and the spent burst, until both
 * would be full (the burst: for good). */
static void test_keys_meeting_in_a_slot_err_toward_denial(void **state)
{
    (void)state;
    struct ghosts *g = ghosts_new(16);
    struct bucket b1 = requests(0), b2 = requests(0), bw = off();
    assert_true(bucket_take(&b1, 15, 0)); /* full again at 10 s, no burst */
    assert_true(bucket_take(&b2, 3, 0));  /* burst 2 left, full */
    ghosts_keep(g, H1, &b1, 5, &bw, 0);
    ghosts_keep(g, H2, &b2, 5, &bw, 0);
    assert_int_equal(comes_back_with(g, H2, 5, 4 * S), 4);     /* H1's six missing tokens too */
    assert_int_equal(comes_back_with(g, H3, 5, 4 * S), 4);     /* a key never forgotten, there */
    assert_int_equal(comes_back_with(g, OTHER, 5, 4 * S), 15); /* elsewhere: untouched */
    assert_int_equal(comes_back_with(g, H3, 5, 20 * S), 10);   /* full by then; burst spent */
    ghosts_free(g);
}

/* Once all it held would be full, a slot takes the next key's ghost
 * alone, told by its fingerprint again. */
static void test_a_slot_is_free_again_once_its_buckets_are_full(void **state)
{
    (void)state;
    struct ghosts *g = ghosts_new(16);
    struct bucket b1 = requests(0), b2 = requests(0), bw = off();
    b1.burst = b2.burst = 0; /* no burst to spend: a slot that frees */
    assert_true(bucket_take(&b1, 10, 0));
    ghosts_keep(g, H1, &b1, 0, &bw, 0);
    assert_true(bucket_take(&b2, 10, 20 * S));
    ghosts_keep(g, H2, &b2, 0, &bw, 20 * S);
    assert_int_equal(comes_back_with(g, H1, 0, 21 * S), 10);
    assert_int_equal(comes_back_with(g, H2, 0, 21 * S), 1);
    ghosts_free(g);
}

static void test_bandwidth_comes_back_as_drained(void **state)
{
    (void)state;
    struct ghosts *g = ghosts_new(16);
    struct bucket req = off(), bw;
    bucket_init(&bw, 1000, 0, S, 0);
    bucket_force(&bw, 1000, 0); /* drained to nothing, no debt */
    ghosts_keep(g, H1, &req, 0, &bw, 0);
    struct bucket again;
    bucket_init(&again, 1000, 0, S, 500 * MS);
    ghosts_drain_bandwidth(g, H1, &again, 500 * MS);
    assert_int_equal(bucket_available(&again, 500 * MS), 500);
    /* The request bucket it did not have is made full. */
    assert_int_equal(comes_back_with(g, H1, 5, 500 * MS), 15);
    ghosts_free(g);
}

static void test_size(void **state)
{
    (void)state;
    assert_true(ghosts_size(8192) >= 4 * 8192 * 40);
    assert_true(ghosts_size(8192) <= 4 * 8192 * 48 + 64);
    assert_int_equal(ghosts_size(1), ghosts_size(16));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nothing_forgotten_drains_nothing),
        cmocka_unit_test(test_a_key_comes_back_as_drained_as_it_went),
        cmocka_unit_test(test_another_key_in_the_slot_is_untouched),
        cmocka_unit_test(test_keys_meeting_in_a_slot_err_toward_denial),
        cmocka_unit_test(test_a_slot_is_free_again_once_its_buckets_are_full),
        cmocka_unit_test(test_bandwidth_comes_back_as_drained),
        cmocka_unit_test(test_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
