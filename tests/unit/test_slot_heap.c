/* Unit tests for util/slot_heap.c: against a plain array of keys. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <string.h>

#include "util/slot_heap.h"

/* The smallest key of <in>, INT64_MAX when none is in. */
static int64_t smallest(const bool *in, const int64_t *key)
{
    int64_t m = INT64_MAX;
    for (int i = 0; i < SLOT_HEAP_MAX; i++)
        if (in[i] && key[i] < m)
            m = key[i];
    return m;
}

/* 50,000 random puts (new slots and new keys for slots in), removals
 * (of slots in and not in) and clears: the top is always the smallest key
 * the plain array holds, and its slot holds that key. */
static void heap_matches_a_plain_array(void **state)
{
    (void)state;
    static struct slot_heap h; /* zeroed: empty */
    static bool in[SLOT_HEAP_MAX];
    static int64_t key[SLOT_HEAP_MAX];
    unsigned r = 3;
    for (int op = 0; op < 50000; op++) {
        r = r * 1103515245u + 12345u;
        uint32_t s = (r >> 8) % SLOT_HEAP_MAX;
        unsigned what = (r >> 24) % 100;
        if (what < 60) {
            r = r * 1103515245u + 12345u;
            int64_t k = (int64_t)((r >> 4) % 5000) - 2500; /* ties and negatives */
            slot_heap_put(&h, s, k);
            in[s] = true;
            key[s] = k;
        } else if (what < 99) {
            slot_heap_remove(&h, s);
            in[s] = false;
        } else {
            slot_heap_clear(&h);
            memset(in, 0, sizeof(in));
        }
        uint32_t ts;
        int64_t tk;
        int64_t m = smallest(in, key);
        if (m == INT64_MAX) {
            assert_false(slot_heap_top(&h, &ts, &tk));
            continue;
        }
        assert_true(slot_heap_top(&h, &ts, &tk));
        assert_true(tk == m);
        assert_true(in[ts] && key[ts] == m);
    }
    /* out-of-range slots change nothing */
    size_t n = h.n;
    slot_heap_put(&h, SLOT_HEAP_MAX, 0);
    slot_heap_remove(&h, SLOT_HEAP_MAX);
    assert_int_equal(h.n, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(heap_matches_a_plain_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
