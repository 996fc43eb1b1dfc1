/* test_shortage: which shortage an errno is, and what the warning advises. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/shortage.h"

static void test_kinds(void **state)
{
    (void)state;
    assert_int_equal(shortage_kind(EMFILE), SHORTAGE_FDS);
    assert_int_equal(shortage_kind(EADDRNOTAVAIL), SHORTAGE_PORTS);
    assert_int_equal(shortage_kind(EAGAIN), SHORTAGE_PORTS);
    assert_int_equal(shortage_kind(ENOBUFS), SHORTAGE_MEMORY);
    assert_int_equal(shortage_kind(ENOMEM), SHORTAGE_MEMORY);
    /* The system's file table full is a kind of its own, on a minute of its
     * own: a warning of this process's limit must not hide it. */
    assert_int_not_equal(shortage_kind(ENFILE), shortage_kind(EMFILE));
    assert_int_not_equal(shortage_kind(ENFILE), SHORTAGE_PORTS);
    assert_int_not_equal(shortage_kind(ENFILE), SHORTAGE_MEMORY);
    assert_true(shortage_kind(ENFILE) < SHORTAGE_KINDS);
    for (int k = 0; k < SHORTAGE_KINDS; k++)
        assert_non_null(shortage_what((enum shortage_kind)k));
}

static void test_advice(void **state)
{
    (void)state;
    assert_string_equal(shortage_advice(SHORTAGE_FDS), "raise the limit or lower --max-conns");
    assert_string_equal(shortage_advice(SHORTAGE_PORTS),
                        "widen net.ipv4.ip_local_port_range or lower --max-conns");
    assert_string_equal(shortage_advice(SHORTAGE_MEMORY), "lower --max-conns");
    /* This process's limit is not what ran out: the system's table is. */
    const char *sys = shortage_advice(shortage_kind(ENFILE));
    assert_non_null(strstr(sys, "fs.file-max"));
    assert_null(strstr(sys, "raise the limit"));
    assert_string_equal(shortage_what(shortage_kind(ENFILE)), "file descriptors");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_advice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
