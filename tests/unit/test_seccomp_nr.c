/* test_seccomp_nr: the numbers util/seccomp_nr.h gives the calls a
 * libseccomp may not know, against libseccomp's own table where it knows
 * them (x86_64 and aarch64 both), and what a name no one knows gets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <seccomp.h>

#include "util/seccomp_nr.h"

/* A libseccomp that knows no call at all: every number comes from the
 * fallback, or none does. */
static int knows_nothing(const char *name)
{
    (void)name;
    return __NR_SCMP_ERROR;
}

/* Every shared number is the one libseccomp gives on both architectures
 * that share it; a name it does not know here (open_tree_attr before
 * libseccomp 2.6) is left to the integration tests, which call it. */
static void test_shared_numbers_are_libseccomps(void **state)
{
    (void)state;
    size_t compared = 0;
    for (size_t i = 0; i < seccomp_shared_nrs_count; i++) {
        const char *name = seccomp_shared_nrs[i].name;
        int x86 = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, name);
        int arm = seccomp_syscall_resolve_name_arch(SCMP_ARCH_AARCH64, name);
        assert_int_equal(x86, arm);
        if (x86 == __NR_SCMP_ERROR)
            continue;
        if (x86 != seccomp_shared_nrs[i].nr)
            fail_msg("%s: %d, libseccomp says %d", name, seccomp_shared_nrs[i].nr, x86);
        compared++;
    }
    assert_true(compared + 1 >= seccomp_shared_nrs_count);
}

/* The calls the box's and the gateway's filters name that are new enough
 * (Linux 5.1 and later) for a libseccomp to miss: without libseccomp,
 * each still gets the number libseccomp here gives it, so none vanishes
 * from a filter. */
static void test_new_calls_resolve_without_libseccomp(void **state)
{
    (void)state;
    static const char *const names[] = {
        "io_uring_setup",  "io_uring_enter", "io_uring_register", "open_tree",      "move_mount",
        "fsopen",          "fsconfig",       "fsmount",           "fspick",         "pidfd_getfd",
        "process_madvise", "mount_setattr",  "fchmodat2",         "open_tree_attr",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char err[256] = "";
        int want = seccomp_syscall_resolve_name(names[i]);
        int got = seccomp_call_nr_by(knows_nothing, names[i], err, sizeof(err));
#if defined(__x86_64__) || defined(__aarch64__)
        if (got == __NR_SCMP_ERROR)
            fail_msg("%s: no number (%s)", names[i], err);
        if (want != __NR_SCMP_ERROR && got != want)
            fail_msg("%s: %d, libseccomp says %d", names[i], got, want);
#else
        assert_int_equal(got, __NR_SCMP_ERROR); /* numbers not taken on trust */
#endif
        /* and libseccomp's own answer wins where it has one */
        assert_int_equal(seccomp_call_nr(names[i], err, sizeof(err)),
                         want == __NR_SCMP_ERROR ? got : want);
    }
}

/* A name neither knows: no number, and a message that names it. */
static void test_unknown_call_is_told(void **state)
{
    (void)state;
    char err[256] = "";
    assert_int_equal(seccomp_call_nr("no_such_call", err, sizeof(err)), __NR_SCMP_ERROR);
    assert_non_null(strstr(err, "does not know the call no_such_call"));
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    assert_non_null(ctx);
    err[0] = '\0';
    assert_int_equal(seccomp_refuse_call(ctx, SCMP_ACT_ERRNO(1), "no_such_call", err, sizeof(err)),
                     SECCOMP_RC_TOLD);
    assert_non_null(strstr(err, "no_such_call"));
    assert_int_equal(seccomp_refuse_call(ctx, SCMP_ACT_ERRNO(1), "fsopen", err, sizeof(err)), 0);
    seccomp_release(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_numbers_are_libseccomps),
        cmocka_unit_test(test_new_calls_resolve_without_libseccomp),
        cmocka_unit_test(test_unknown_call_is_told),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
