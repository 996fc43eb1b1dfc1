/* test_seccomp_nr: the numbers util/seccomp_nr.h gives the calls a
 * libseccomp may not know, against libseccomp's own table where it knows
 * them (x86_64 and aarch64 both), and what a name no one knows gets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <seccomp.h>

#include "box/box_int.h"
#include "gate/lockdown.h"
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
 * (Linux 5.1 and later) for a libseccomp, or the kernel headers sluice is
 * built with (RHEL 8's 4.18), to miss. */
static const char *const names[] = {
    "io_uring_setup",  "io_uring_enter", "io_uring_register", "open_tree",
    "move_mount",      "fsopen",         "fsconfig",          "fsmount",
    "fspick",          "clone3",         "openat2",           "pidfd_getfd",
    "process_madvise", "mount_setattr",  "fchmodat2",         "open_tree_attr",
};

/* Without libseccomp, each still gets the number libseccomp here gives
 * it, so none vanishes from a filter. */
static void test_new_calls_resolve_without_libseccomp(void **state)
{
    (void)state;
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

/* The names the filters looked up, by a resolver that answers as
 * libseccomp does. */
static const char *asked[128];
static size_t asked_count;

static int recording_resolver(const char *name)
{
    if (asked_count < sizeof(asked) / sizeof(asked[0]))
        asked[asked_count++] = name;
    return seccomp_syscall_resolve_name(name);
}

static bool was_asked(const char *name)
{
    for (size_t i = 0; i < asked_count; i++) {
        if (strcmp(asked[i], name) == 0)
            return true;
    }
    return false;
}

/* Which filter names each of names[] (every one is named by one). */
static const struct {
    const char *name;
    bool box;
    bool gate;
} named_by[] = {
    {"io_uring_setup", true, true},
    {"io_uring_enter", true, true},
    {"io_uring_register", true, true},
    {"open_tree", true, true},
    {"move_mount", true, true},
    {"fsopen", true, true},
    {"fsconfig", true, true},
    {"fsmount", true, true},
    {"fspick", true, true},
    {"clone3", false, true},
    {"openat2", true, false},
    {"pidfd_getfd", false, true},
    {"process_madvise", false, true},
    {"mount_setattr", true, true},
    {"fchmodat2", true, false},
    {"open_tree_attr", true, true},
};

/* Builds the gateway's filter (<gate>) or the box's, recording in asked[] the
 * names it looks up. */
static void records_for(bool gate)
{
    char err[256] = "";
    size_t open_calls = 0;
    asked_count = 0;
    seccomp_name_resolver before = seccomp_nr_set_resolver(recording_resolver);
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    assert_non_null(ctx);
    int rc = gate ? gateway_lockdown_rules(ctx, err, sizeof(err), &open_calls)
                  : box_seccomp_rules(ctx, false, err, sizeof(err));
    seccomp_nr_set_resolver(before);
    seccomp_release(ctx);
    if (rc != 0 || open_calls != 0)
        fail_msg("%s filter: rc %d, %zu calls open (%s)", gate ? "gateway" : "box", rc, open_calls,
                 err);
    assert_true(asked_count < sizeof(asked) / sizeof(asked[0]));
}

/* Every new call a filter names takes its number from seccomp_call_nr(),
 * which neither an old libseccomp nor old kernel headers leave without
 * one: SCMP_SYS(openat2) built against headers before Linux 5.6 is a
 * pseudo-number, and its rule would match nothing. Each is in the carried
 * table too. */
static void test_filters_name_new_calls_by_name(void **state)
{
    (void)state;
    assert_int_equal(sizeof(named_by) / sizeof(named_by[0]), sizeof(names) / sizeof(names[0]));
    for (int gate = 0; gate <= 1; gate++) {
        records_for(gate);
        for (size_t i = 0; i < sizeof(named_by) / sizeof(named_by[0]); i++) {
            assert_string_equal(named_by[i].name, names[i]);
            assert_true(named_by[i].box || named_by[i].gate);
            if ((gate ? named_by[i].gate : named_by[i].box) && !was_asked(names[i]))
                fail_msg("%s: the %s filter does not look its number up by name", names[i],
                         gate ? "gateway's" : "box's");
        }
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        bool carried = false;
        for (size_t j = 0; j < seccomp_shared_nrs_count; j++)
            carried = carried || strcmp(seccomp_shared_nrs[j].name, names[i]) == 0;
        if (!carried)
            fail_msg("%s: no number carried for it", names[i]);
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
        cmocka_unit_test(test_filters_name_new_calls_by_name),
        cmocka_unit_test(test_unknown_call_is_told),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
