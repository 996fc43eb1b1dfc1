/* test_hardlinks: a file the box keeps read-only with another name (a
 * hard link), searched for in the writable paths of the view, judged on a
 * temporary tree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "box/hardlinks.c" /* the unit under test, internals included */
#include "temp_tree.h"

/* work (the working directory, writable) and keep (out of reach), with
 * the kept file keep/log. */
struct fixture {
    struct temp_tree t;
    char cwd[PATH_MAX], log[PATH_MAX];
    struct box_path paths[4];
    char path[4][PATH_MAX]; /* paths[k].path */
    struct box_view v;
};

/* Makes each of <rels> (NULL-ended) below the tree of <t>: a folder where
 * it ends in '/', else an empty file. */
static void make(struct temp_tree *t, const char *const *rels)
{
    for (; *rels != NULL; rels++)
        if ((*rels)[strlen(*rels) - 1] == '/')
            tree_dir(t, *rels);
        else
            tree_file(t, *rels, "");
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    tree_init(&f->t);
    make(&f->t, (const char *const[]){"work/", "keep/", "keep/log", NULL});
    snprintf(f->cwd, sizeof(f->cwd), "%s", tree_path(&f->t, "work"));
    snprintf(f->log, sizeof(f->log), "%s", tree_path(&f->t, "keep/log"));
    f->v = (struct box_view){.cwd = f->cwd, .paths = f->paths, .npaths = 0};
    *state = f;
    return 0;
}

/* Adds <rel> to the view as a path of <kind>. */
static void view_add(struct fixture *f, enum box_path_kind kind, const char *rel)
{
    size_t k = f->v.npaths++;
    snprintf(f->path[k], PATH_MAX, "%s", tree_path(&f->t, rel));
    f->paths[k] = (struct box_path){kind, f->path[k], false};
}

/* Asserts that keep/log is refused for the other name <rel>, found below
 * the writable path <root_rel> ("" for the working directory). */
static void assert_found(struct fixture *f, const char *rel, const char *root_rel)
{
    struct hardlinks_finding g = {0};
    assert_true(hardlinks_other_name(&f->v, f->log, &g));
    assert_int_equal(g.stop, HARDLINKS_FOUND);
    assert_string_equal(g.at, tree_path(&f->t, rel));
    assert_string_equal(g.root, root_rel[0] == '\0' ? f->cwd : tree_path(&f->t, root_rel));
}

static bool refused(struct fixture *f)
{
    struct hardlinks_finding g = {0};
    return hardlinks_other_name(&f->v, f->log, &g);
}

static void test_a_name_in_the_working_directory_is_found(void **state)
{
    struct fixture *f = *state;
    assert_false(refused(f)); /* one name */
    tree_hardlink(&f->t, "keep/log", "work/log.again");
    assert_found(f, "work/log.again", "");
    struct hardlinks_finding g = {0};
    hardlinks_other_name(&f->v, f->log, &g);
    assert_int_equal(g.names, 2);

    /* a --rw path on that file system is searched when the working
     * directory is not (the tree's own file system, whatever it is) */
    struct box_path rw = {BOX_PATH_RW, f->cwd, false};
    struct box_view v2 = {.cwd = "/proc", .paths = &rw, .npaths = 1};
    assert_true(hardlinks_other_name(&v2, f->log, &g));
    assert_string_equal(g.root, f->cwd);

    /* folders are not searched for (their links are their subfolders) */
    assert_false(hardlinks_other_name(&f->v, tree_path(&f->t, "keep"), &g));
    assert_false(hardlinks_other_name(&f->v, tree_path(&f->t, "missing"), &g));
}

/* perf's ~/.debug, Debian's perl5.36.0, a Nix store: read-only in the box
 * like the rest of the host. Before, the count of names alone refused. */
static void test_a_name_outside_the_writable_paths_is_no_reason(void **state)
{
    struct fixture *f = *state;
    tree_dir(&f->t, "store");
    tree_hardlink(&f->t, "keep/log", "store/log");
    tree_hardlink(&f->t, "keep/log", "keep/log.third");
    assert_false(refused(f));
    /* nor one a link in the working directory leads to: links are not
     * followed, the name is outside */
    tree_symlink(&f->t, "work/store", "../store");
    tree_symlink(&f->t, "work/log", "../store/log");
    assert_false(refused(f));
    tree_hardlink(&f->t, "keep/log", "work/log.again");
    assert_true(refused(f));
}

static void test_a_name_deep_in_the_working_directory_is_found(void **state)
{
    struct fixture *f = *state;
    make(&f->t,
         (const char *const[]){"work/a/", "work/b/", "work/b/c/", "work/a/x", "work/b/y", NULL});
    tree_hardlink(&f->t, "keep/log", "work/b/c/.log");
    assert_found(f, "work/b/c/.log", "");
}

/* The other name itself kept read-only (--ro, given twice): no way to
 * write the file is left, and it is not searched for; so below a --ro or
 * a --hide folder in the working directory, where the box shows it
 * read-only or not at all. */
static void test_a_name_the_view_keeps_out_of_reach_is_no_reason(void **state)
{
    struct fixture *f = *state;
    tree_hardlink(&f->t, "keep/log", "work/log.again");
    view_add(f, BOX_PATH_RO, "work/log.again");
    view_add(f, BOX_PATH_RO, "work/log.again");
    assert_false(refused(f));

    f->v.npaths = 0;
    make(&f->t, (const char *const[]){"work/ro/", "work/hidden/", "work/hidden/deeper/", NULL});
    tree_hardlink(&f->t, "keep/log", "work/ro/log");
    tree_hardlink(&f->t, "keep/log", "work/hidden/deeper/log");
    view_add(f, BOX_PATH_RO, "work/ro");
    view_add(f, BOX_PATH_HIDE, "work/hidden");
    view_add(f, BOX_PATH_HIDE, "work/log.again"); /* a file hidden: /dev/null */
    assert_false(refused(f));
    f->v.npaths = 2;
    assert_found(f, "work/log.again", "");
}

/* A --rw path below a read-only one (--ro, or the host's, outside the
 * working directory) is searched on its own, and only it. */
static void test_a_writable_path_below_a_read_only_one_is_searched(void **state)
{
    struct fixture *f = *state;
    make(&f->t, (const char *const[]){"work/ro/", "work/ro/rw/", "keep/out/", NULL});
    tree_hardlink(&f->t, "keep/log", "work/ro/log");
    tree_hardlink(&f->t, "keep/log", "keep/log.again");
    view_add(f, BOX_PATH_RO, "work/ro");
    view_add(f, BOX_PATH_RO, "keep");
    view_add(f, BOX_PATH_RW, "work/ro/rw");
    view_add(f, BOX_PATH_RW, "keep/out");
    assert_false(refused(f));
    tree_hardlink(&f->t, "keep/log", "keep/out/log");
    assert_found(f, "keep/out/log", "keep/out");
    assert_int_equal(unlink(tree_path(&f->t, "keep/out/log")), 0);
    tree_hardlink(&f->t, "keep/log", "work/ro/rw/log");
    assert_found(f, "work/ro/rw/log", "work/ro/rw");
    /* a --rw file that is another name */
    assert_int_equal(unlink(tree_path(&f->t, "work/ro/rw/log")), 0);
    assert_int_equal(unlink(tree_path(&f->t, "work/ro/log")), 0);
    f->v.npaths = 0;
    view_add(f, BOX_PATH_RW, "keep/log.again");
    assert_found(f, "keep/log.again", "keep/log.again");
}

/* Each writable path is searched once, as the deepest path of the view
 * that names it has it: a --rw path in the working directory is its own,
 * and one given as the working directory too is searched once. */
static void test_each_writable_path_is_searched_once(void **state)
{
    struct fixture *f = *state;
    tree_hardlink(&f->t, "keep/log", "keep/log.again"); /* out of reach */
    make(&f->t, (const char *const[]){"work/rw/", "work/x", NULL});
    view_add(f, BOX_PATH_RW, "work");
    view_add(f, BOX_PATH_RW, "work/rw");
    struct hardlinks_finding g = {0};
    assert_false(other_name_within(&f->v, f->log, 2, 3, &g)); /* rw, x */
    tree_hardlink(&f->t, "keep/log", "work/rw/log");
    assert_found(f, "work/rw/log", "work/rw");
}

/* A search that cannot end within its bounds refuses, saying where it
 * stopped: a name beyond them could be there. */
static void test_a_search_past_its_bounds_refuses(void **state)
{
    struct fixture *f = *state;
    tree_hardlink(&f->t, "keep/log", "keep/log.again"); /* out of reach */
    make(&f->t,
         (const char *const[]){"work/a/", "work/a/b/", "work/a/b/c/", "work/x", "work/y", NULL});
    struct hardlinks_finding g = {0};
    assert_false(other_name_within(&f->v, f->log, 6, 3, &g)); /* a, b, c, x, y: 5 */
    assert_true(other_name_within(&f->v, f->log, 4, 3, &g));
    assert_int_equal(g.stop, HARDLINKS_ENTRIES);
    assert_string_equal(g.root, f->cwd);
    assert_true(other_name_within(&f->v, f->log, 6, 2, &g));
    assert_int_equal(g.stop, HARDLINKS_DEPTH);
    assert_string_equal(g.at, tree_path(&f->t, "work/a/b/c"));

    /* the public bound: HARDLINKS_DEPTH_MAX folders deep */
    char rel[PATH_MAX] = "work/a/b/c";
    for (unsigned i = 3; i <= HARDLINKS_DEPTH_MAX; i++) {
        size_t n = strlen(rel);
        snprintf(rel + n, sizeof(rel) - n, "/d");
        tree_dir(&f->t, rel);
    }
    assert_true(hardlinks_other_name(&f->v, f->log, &g));
    assert_int_equal(g.stop, HARDLINKS_DEPTH);
    assert_string_equal(g.at, tree_path(&f->t, rel));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_name_in_the_working_directory_is_found, setup,
                                        tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_a_name_outside_the_writable_paths_is_no_reason, setup,
                                        tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_a_name_deep_in_the_working_directory_is_found, setup,
                                        tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_a_name_the_view_keeps_out_of_reach_is_no_reason, setup,
                                        tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_a_writable_path_below_a_read_only_one_is_searched,
                                        setup, tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_each_writable_path_is_searched_once, setup,
                                        tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_a_search_past_its_bounds_refuses, setup,
                                        tree_fixture_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
