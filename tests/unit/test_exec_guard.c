/* test_exec_guard: an alert program and its scripts' interpreters, walked
 * on a temporary tree for the first file the command could change. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "box/exec_guard.h"
#include "temp_tree.h"

struct fixture {
    struct temp_tree t;
    char cwd[PATH_MAX];
    struct box_view v;
};

/* work (the working directory) and hooks (out of reach). */
static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    tree_init(&f->t);
    tree_dir(&f->t, "work");
    tree_dir(&f->t, "hooks");
    snprintf(f->cwd, sizeof(f->cwd), "%s", tree_path(&f->t, "work"));
    f->v = (struct box_view){.cwd = f->cwd, .paths = NULL, .npaths = 0};
    *state = f;
    return 0;
}

/* <rel>, a file that is no script (a binary's first bytes); its path
 * copied into <out> (PATH_MAX). */
static const char *binary(struct fixture *f, const char *rel, char *out)
{
    tree_file(&f->t, rel, "\177ELF");
    snprintf(out, PATH_MAX, "%s", tree_path(&f->t, rel));
    return out;
}

/* Asserts that <prog> is found <verdict> at <level> of its interpreters,
 * by <file>, below the working directory. */
static void assert_found(struct fixture *f, const char *prog, enum exec_guard_verdict verdict,
                         int level, const char *file)
{
    struct exec_guard_finding g = {0};
    assert_int_equal(exec_guard_check(&f->v, prog, &g), verdict);
    assert_int_equal(g.level, level);
    assert_string_equal(g.file, file);
    assert_string_equal(g.root, f->cwd);
}

/* hooks/<name>, a script whose "#!" line names <interp>. */
static const char *script(struct fixture *f, const char *name, const char *interp)
{
    char rel[64], text[PATH_MAX + 16];
    snprintf(rel, sizeof(rel), "hooks/%s", name);
    snprintf(text, sizeof(text), "#!%s -e\nexit 0\n", interp);
    tree_file(&f->t, rel, text);
    return tree_path(&f->t, rel);
}

static void test_a_program_out_of_reach_is_safe(void **state)
{
    struct fixture *f = *state;
    struct exec_guard_finding g = {0};
    /* an interpreter of the tree's own: the host's /bin/sh may have other
     * names on the tree's file system (perf's ~/.debug, an image's layers) */
    char interp[PATH_MAX];
    binary(f, "hooks/binary", interp);
    assert_int_equal(exec_guard_check(&f->v, script(f, "alert", interp), &g), EXEC_GUARD_SAFE);
    assert_int_equal(exec_guard_check(&f->v, interp, &g), EXEC_GUARD_SAFE);
}

static void test_a_program_in_the_working_directory_is_changeable(void **state)
{
    struct fixture *f = *state;
    char prog[PATH_MAX];
    assert_found(f, binary(f, "work/alert", prog), EXEC_GUARD_CHANGEABLE, 0, prog);
}

static void test_interpreters_are_walked(void **state)
{
    struct fixture *f = *state;
    /* hooks/alert -> hooks/mid (a script too) -> work/python */
    char python[PATH_MAX], mid[PATH_MAX];
    binary(f, "work/python", python);
    snprintf(mid, sizeof(mid), "%s", script(f, "mid", python));
    assert_found(f, script(f, "alert", mid), EXEC_GUARD_CHANGEABLE, 2, python);
}

static void test_a_relative_interpreter_is_found_from_the_root(void **state)
{
    struct fixture *f = *state;
    char sh[PATH_MAX];
    binary(f, "work/sh", sh);
    assert_found(f, script(f, "alert", sh + 1), EXEC_GUARD_CHANGEABLE, 1, sh);
}

static void test_more_levels_than_the_kernel_follows_are_not_walked(void **state)
{
    struct fixture *f = *state;
    struct exec_guard_finding g = {0};
    /* hooks/s4 -> s3 -> ... -> s0 -> work/sh: work/sh is the 5th
     * interpreter, one more than the kernel follows */
    char sh[PATH_MAX], prev[PATH_MAX], name[8];
    snprintf(prev, sizeof(prev), "%s", binary(f, "work/sh", sh));
    for (int i = 0; i <= 4; i++) {
        snprintf(name, sizeof(name), "s%d", i);
        snprintf(prev, sizeof(prev), "%s", script(f, name, prev));
    }
    assert_int_equal(exec_guard_check(&f->v, prev, &g), EXEC_GUARD_SAFE);
    /* from s3 it is the 4th: found */
    assert_found(f, tree_path(&f->t, "hooks/s3"), EXEC_GUARD_CHANGEABLE, 4, sh);
}

static void test_another_name_of_the_interpreter_is_found(void **state)
{
    struct fixture *f = *state;
    char perl[PATH_MAX];
    binary(f, "hooks/perl", perl);
    tree_hardlink(&f->t, "hooks/perl", "work/perl");
    assert_found(f, script(f, "alert", perl), EXEC_GUARD_OTHER_NAMES, 1, perl);
    struct exec_guard_finding g = {0};
    exec_guard_check(&f->v, perl, &g);
    assert_int_equal(g.links.names, 2);
    assert_string_equal(g.links.at, tree_path(&f->t, "work/perl"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_program_out_of_reach_is_safe, setup,
                                        tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_a_program_in_the_working_directory_is_changeable,
                                        setup, tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_interpreters_are_walked, setup, tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_a_relative_interpreter_is_found_from_the_root, setup,
                                        tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_more_levels_than_the_kernel_follows_are_not_walked,
                                        setup, tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_another_name_of_the_interpreter_is_found, setup,
                                        tree_fixture_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
