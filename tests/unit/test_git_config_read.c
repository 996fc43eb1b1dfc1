/* test_git_config_read: core.hooksPath and core.worktree read from git's
 * config syntax as git reads them, and what is not read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "box/git_config_read.h"

/* <text> parsed into <c>; fails the test on an error. */
static void parse(const char *text, struct git_config *c)
{
    char err[128];
    assert_int_equal(git_config_parse(text, strlen(text), c, err, sizeof(err)), 0);
}

static void test_the_forms_git_reads(void **state)
{
    (void)state;
    struct git_config c;
    parse("# a comment\n[user]\n\tname = x\n\thooksPath = not-core\n"
          "[core]\n\thooksPath = .husky\n"
          "[CORE] HOOKSPATH=\"my hooks\" ; a comment\n"
          "[core]\n  hookspath = a\\\"b\\\\c # comment\n"
          "\thooksPath = \"d;e\"f\\\n g\r\n"
          "[core]hooksPath=  trailing  spaces  \n"
          "\tworktree = ../../lib\n",
          &c);
    assert_int_equal(c.nhooks, 5);
    assert_string_equal(c.hooks_path[0], ".husky");
    assert_string_equal(c.hooks_path[1], "my hooks");
    assert_string_equal(c.hooks_path[2], "a\"b\\c");
    assert_string_equal(c.hooks_path[3], "d;ef g");
    assert_string_equal(c.hooks_path[4], "trailing  spaces");
    assert_string_equal(c.worktree, "../../lib");
    assert_false(c.names_worktreeconfig);
    git_config_free(&c);
}

static void test_what_is_not_read(void **state)
{
    (void)state;
    struct git_config c;
    /* another section, a subsection, a boolean key, an unclosed quote, an
     * include (not followed); worktreeConfig named anywhere */
    parse("[core \"x\"]\n\thooksPath = sub\n[core.x]\n\thooksPath = old\n"
          "[core]\n\thooksPath\n\thooksPath = \"open\n"
          "[include]\n\tpath = ~/.gitconfig.local\n"
          "[extensions]\n\tworkTreeConfig = true\n[core\n\thooksPath = bad-header\n",
          &c);
    assert_int_equal(c.nhooks, 0);
    assert_null(c.worktree);
    assert_true(c.names_worktreeconfig);
    git_config_free(&c);
}

static void test_too_many_values_are_refused(void **state)
{
    (void)state;
    char text[1024] = "[core]\n", err[128];
    for (int i = 0; i <= GIT_CONFIG_HOOKS_MAX; i++)
        strncat(text, "hooksPath = x\n", sizeof(text) - strlen(text) - 1);
    struct git_config c;
    assert_int_equal(git_config_parse(text, strlen(text), &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "core.hooksPath"));
    git_config_free(&c);
}

static void test_a_missing_file_or_a_device_reads_empty(void **state)
{
    (void)state;
    struct git_config c;
    char err[256];
    assert_int_equal(git_config_read("/nonexistent/sluice/config", &c, err, sizeof(err)), 0);
    assert_int_equal(c.nhooks, 0);
    assert_int_equal(git_config_read("/dev/zero", &c, err, sizeof(err)), 0);
    assert_int_equal(c.nhooks, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_forms_git_reads),
        cmocka_unit_test(test_what_is_not_read),
        cmocka_unit_test(test_too_many_values_are_refused),
        cmocka_unit_test(test_a_missing_file_or_a_device_reads_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
