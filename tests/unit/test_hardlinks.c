/* test_hardlinks: a file the box keeps read-only with another name (a
 * hard link) on the file system of a writable path, judged on a temporary
 * tree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "box/hardlinks.h"
#include "temp_tree.h"

static void test_another_name_in_the_writable_file_system_is_found(void **state)
{
    (void)state;
    struct temp_tree t = {0};
    tree_init(&t);
    tree_dir(&t, "work");
    tree_dir(&t, "keep");
    tree_file(&t, "keep/log", "");
    char cwd[PATH_MAX], log[PATH_MAX];
    snprintf(cwd, sizeof(cwd), "%s", tree_path(&t, "work"));
    snprintf(log, sizeof(log), "%s", tree_path(&t, "keep/log"));
    struct box_view v = {.cwd = cwd, .paths = NULL, .npaths = 0};
    const char *root = NULL;
    unsigned long names = 0;
    assert_false(hardlinks_other_name(&v, log, &root, &names)); /* one name */

    tree_hardlink(&t, "keep/log", "work/log.again");
    assert_true(hardlinks_other_name(&v, log, &root, &names));
    assert_string_equal(root, cwd);
    assert_int_equal(names, 2);

    /* a --rw path on that file system is found when the working directory
     * is not (the tree's own file system, whatever it is) */
    struct box_path rw = {BOX_PATH_RW, cwd, false};
    struct box_view v2 = {.cwd = "/proc", .paths = &rw, .npaths = 1};
    root = NULL;
    assert_true(hardlinks_other_name(&v2, log, &root, &names));
    assert_string_equal(root, cwd);

    /* the other name kept read-only too (--ro, given twice): no way to
     * write it is left */
    char again[PATH_MAX];
    snprintf(again, sizeof(again), "%s", tree_path(&t, "work/log.again"));
    struct box_path ro[] = {{BOX_PATH_RO, again, false}, {BOX_PATH_RO, again, false}};
    struct box_view v3 = {.cwd = cwd, .paths = ro, .npaths = 2};
    assert_false(hardlinks_other_name(&v3, log, &root, &names));

    /* a third name: one more than the view keeps */
    tree_hardlink(&t, "keep/log", "keep/log.third");
    assert_true(hardlinks_other_name(&v3, log, &root, &names));
    assert_int_equal(names, 3);

    /* folders are not counted (their links are their subfolders) */
    assert_false(hardlinks_other_name(&v, tree_path(&t, "keep"), &root, &names));
    assert_false(hardlinks_other_name(&v, tree_path(&t, "missing"), &root, &names));
    tree_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_another_name_in_the_writable_file_system_is_found),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
