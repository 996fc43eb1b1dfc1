/* test_zalloc: zeroed memory, also when the chunk had been used and freed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/zalloc.h"

static void assert_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            fail_msg("byte %zu of %zu is 0x%02x, not 0", i, n, p[i]);
}

/* A chunk filled, freed and taken again (the cache's next chunk of that
 * size, where malloc() alone would return the old bytes) comes zeroed. */
static void test_reused_chunk_is_zeroed(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 24, 88, 352, 360, 1024, 1728, 5000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        for (int round = 0; round < 3; round++) {
            unsigned char *p = zalloc(n);
            assert_non_null(p);
            assert_zero(p, n);
            memset(p, 0xa5, n);
            free(p);
        }
    }
}

/* Several alive at once are distinct, each zeroed. */
static void test_distinct_blocks(void **state)
{
    (void)state;
    unsigned char *a = zalloc(352), *b = zalloc(352);
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    memset(a, 0xff, 352);
    assert_zero(b, 352);
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reused_chunk_is_zeroed),
        cmocka_unit_test(test_distinct_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
