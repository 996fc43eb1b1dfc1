/* test_reach: what of the host's files the command in the box could
 * change, judged on a temporary tree: the view's writable and read-only
 * paths, mount points, folders that could be renamed away, links and "..". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "box/reach.h"
#include "temp_tree.h"

/* The tree: work (the working directory) with bin/prog, ro/prog (--ro
 * work/ro), deep/sub/prog (--ro work/deep/sub), lnk -> outside/prog; rw
 * (--rw) with x; outside with prog, tobin -> work/bin/prog; twice (--rw
 * then --ro) with prog. */
struct fixture {
    struct temp_tree t;
    char cwd[PATH_MAX];
    char paths[5][PATH_MAX];
    struct box_path view_paths[5];
    struct box_view v;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct temp_tree *t = &f->t;
    tree_init(t);
    const char *dirs[] = {"work",          "work/bin", "work/ro", "work/deep",
                          "work/deep/sub", "rw",       "outside", "twice"};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        tree_dir(t, dirs[i]);
    const char *files[] = {"work/bin/prog", "work/ro/prog", "work/deep/sub/prog",
                           "rw/x",          "outside/prog", "twice/prog"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        tree_file(t, files[i], "#!/bin/sh\n");
    tree_symlink(t, "work/lnk", tree_path(t, "outside/prog"));
    tree_symlink(t, "outside/tobin", "../work/bin/prog");
    const struct {
        enum box_path_kind kind;
        const char *rel;
    } given[] = {{BOX_PATH_RO, "work/ro"},
                 {BOX_PATH_RO, "work/deep/sub"},
                 {BOX_PATH_RW, "rw"},
                 {BOX_PATH_RW, "twice"},
                 {BOX_PATH_RO, "twice"}};
    for (size_t i = 0; i < 5; i++) {
        snprintf(f->paths[i], PATH_MAX, "%s", tree_path(t, given[i].rel));
        f->view_paths[i] = (struct box_path){given[i].kind, f->paths[i], false};
    }
    snprintf(f->cwd, sizeof(f->cwd), "%s", tree_path(t, "work"));
    f->v = (struct box_view){.cwd = f->cwd, .paths = f->view_paths, .npaths = 5};
    *state = f;
    return 0;
}

/* reach_can_change() on <rel>, with the writable root it names ("" when
 * none, NULL when the answer is false). */
static const char *can_change(struct fixture *f, const char *rel, const char **root)
{
    *root = NULL;
    const char *path = tree_path(&f->t, rel);
    return reach_can_change(&f->v, path, root) ? (*root != NULL ? *root : "") : NULL;
}

static void test_writable_dir_takes_the_deepest_path_and_the_last_given(void **state)
{
    struct fixture *f = *state;
    const char *root;
    assert_true(reach_writable_dir(&f->v, tree_path(&f->t, "work/bin"), &root));
    assert_string_equal(root, f->v.cwd);
    assert_false(reach_writable_dir(&f->v, tree_path(&f->t, "work/ro"), &root));
    assert_string_equal(root, f->paths[0]);
    assert_true(reach_writable_dir(&f->v, tree_path(&f->t, "rw/x"), &root));
    assert_string_equal(root, f->paths[2]);
    /* --rw then --ro of one path: the last given wins */
    assert_false(reach_writable_dir(&f->v, tree_path(&f->t, "twice/prog"), &root));
    assert_string_equal(root, f->paths[4]);
    /* outside every path of the view: the host's, read-only */
    assert_false(reach_writable_dir(&f->v, tree_path(&f->t, "outside"), &root));
    assert_null(root);
    assert_false(reach_writable_dir(&f->v, "/", &root));
}

static void test_files_in_writable_paths_can_be_changed(void **state)
{
    struct fixture *f = *state;
    const char *root;
    assert_string_equal(can_change(f, "work/bin/prog", &root), f->v.cwd);
    assert_string_equal(can_change(f, "rw/x", &root), f->paths[2]);
    /* one not there yet is made there as well */
    assert_string_equal(can_change(f, "work/bin/missing", &root), f->v.cwd);
}

static void test_read_only_mount_points_keep_their_path(void **state)
{
    struct fixture *f = *state;
    const char *root;
    /* work/ro is a mount point: it cannot be renamed away */
    assert_null(can_change(f, "work/ro/prog", &root));
    /* work/deep is a plain folder above the --ro work/deep/sub: renamed away,
     * a new one takes its place */
    assert_string_equal(can_change(f, "work/deep/sub/prog", &root), f->v.cwd);
    assert_null(can_change(f, "twice/prog", &root));
    assert_null(can_change(f, "outside/prog", &root));
}

static void test_links_are_followed_and_judged_on_the_way(void **state)
{
    struct fixture *f = *state;
    const char *root;
    /* out of reach, but its target is in the working directory */
    assert_string_equal(can_change(f, "outside/tobin", &root), f->v.cwd);
    /* the target is out of reach, but the link itself can be replaced */
    assert_string_equal(can_change(f, "work/lnk", &root), f->v.cwd);
    /* ".." walks back from what is resolved so far */
    assert_string_equal(can_change(f, "outside/../work/bin/prog", &root), f->v.cwd);
    assert_null(can_change(f, "work/../outside/prog", &root));
}

static void test_a_loop_of_links_is_not_followed(void **state)
{
    struct fixture *f = *state;
    const char *root;
    tree_symlink(&f->t, "outside/a", "b");
    tree_symlink(&f->t, "outside/b", "a");
    assert_null(can_change(f, "outside/a", &root));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_writable_dir_takes_the_deepest_path_and_the_last_given,
                                        setup, tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_files_in_writable_paths_can_be_changed, setup,
                                        tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_read_only_mount_points_keep_their_path, setup,
                                        tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_links_are_followed_and_judged_on_the_way, setup,
                                        tree_fixture_free),
        cmocka_unit_test_setup_teardown(test_a_loop_of_links_is_not_followed, setup,
                                        tree_fixture_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
