/* Unit tests for gate/link_walk.c and the policy file warning built on it
 * (gateway_policy_file_warning()): which folder of a policy's path another
 * user could swap, and the line that names it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gate/gateway.h"
#include "gate/link_walk.h"
#include "temp_tree.h"

#define OTHER_UID 65534 /* nobody: a user that owns nothing here */

static struct temp_tree tree; /* each test its own folders in it */

static int make_tree(void **state)
{
    (void)state;
    tree_init(&tree);
    return chmod(tree.root, 0755); /* searchable by OTHER_UID */
}

static int remove_tree(void **state)
{
    (void)state;
    tree_free(&tree);
    return 0;
}

/* <rel> made a folder of <mode> (chmod(), not the umask's), its path in
 * <out>. */
static void folder(const char *rel, mode_t mode, char *out, size_t cap)
{
    snprintf(out, cap, "%s", tree_path(&tree, rel));
    assert_int_equal(mkdir(out, 0700), 0);
    assert_int_equal(chmod(out, mode), 0);
}

/* The walk of <path> finds <want>, in the folder <dir> by the name <entry>
 * (both resolved) when it finds one. */
static void walk_finds(const char *path, enum link_walk_found want, const char *dir,
                       const char *entry)
{
    char got_dir[PATH_MAX], got_entry[PATH_MAX];
    struct stat ds;
    assert_int_equal(
        link_walk_open_folder(path, got_dir, sizeof(got_dir), got_entry, sizeof(got_entry), &ds),
        want);
    if (dir != NULL)
        assert_string_equal(got_dir, dir);
    if (entry != NULL)
        assert_string_equal(got_entry, entry);
}

/* True when OTHER_UID may rename <from> to <to> (a child process that
 * becomes that user tries it; renamed back afterwards). */
static bool other_user_renames(const char *from, const char *to)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setresgid(OTHER_UID, OTHER_UID, OTHER_UID) != 0 ||
            setresuid(OTHER_UID, OTHER_UID, OTHER_UID) != 0)
            _exit(2);
        _exit(rename(from, to) == 0 ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 2);
    if (WEXITSTATUS(status) != 0)
        return false;
    assert_int_equal(rename(to, from), 0);
    return true;
}

/* A plain folder of the path inside a folder every user may write without
 * the sticky bit: another user renames it away within that folder (no
 * right on the folder itself needed) and puts one of theirs in its place,
 * which the next SIGHUP loads. Before, only links and the file were
 * judged, and this path said nothing. */
static void a_plain_folder_in_an_open_folder_is_named(void **state)
{
    (void)state;
    char open[256], d[256], path[256], old[300];
    folder("open", 0777, open, sizeof(open));
    folder("open/d", 0755, d, sizeof(d));
    tree_file(&tree, "open/d/p.yaml", "version: 1\n");
    snprintf(path, sizeof(path), "%s", tree_path(&tree, "open/d/p.yaml"));
    walk_finds(path, LINK_WALK_FOLDER, open, d);
    char out[GATEWAY_FILE_WARNING_MAX], want[GATEWAY_FILE_WARNING_MAX];
    gateway_policy_file_warning(path, out, sizeof(out));
    snprintf(want, sizeof(want),
             "warning: %s: %s, a folder of its path, lies in %s, which is writable by every "
             "user without the sticky bit (mode 0777): anyone on this host, an agent included, "
             "can rename that folder away and put one of their own in its place, in force from "
             "the next SIGHUP (a log rotation sends one); keep the policy's path out of folders "
             "every user may write\n",
             path, d, open);
    assert_string_equal(out, want);
    /* the swap it warns of, by a user who owns neither folder */
    snprintf(old, sizeof(old), "%s.old", d);
    if (geteuid() == 0)
        assert_true(other_user_renames(d, old));
}

/* The same under a sticky folder (/tmp's 01777): only the folder's owner
 * may rename it there, so nothing is said; nor under a private one. */
static void a_plain_folder_in_a_sticky_or_private_folder_is_not(void **state)
{
    (void)state;
    char sticky[256], d[256], old[300], priv[256], pd[256];
    folder("sticky", 01777, sticky, sizeof(sticky));
    folder("sticky/d", 0755, d, sizeof(d));
    tree_file(&tree, "sticky/d/p.yaml", "version: 1\n");
    folder("priv", 0755, priv, sizeof(priv));
    folder("priv/d", 0755, pd, sizeof(pd));
    tree_file(&tree, "priv/d/p.yaml", "version: 1\n");
    static const char *const rels[] = {"sticky/d/p.yaml", "priv/d/p.yaml"};
    for (size_t i = 0; i < 2; i++) {
        char path[PATH_MAX], out[GATEWAY_FILE_WARNING_MAX];
        snprintf(path, sizeof(path), "%s", tree_path(&tree, rels[i]));
        walk_finds(path, LINK_WALK_NONE, NULL, NULL);
        gateway_policy_file_warning(path, out, sizeof(out));
        assert_string_equal(out, "");
    }
    snprintf(old, sizeof(old), "%s.old", d);
    if (geteuid() == 0)
        assert_false(other_user_renames(d, old)); /* the kernel's sticky rule */
}

/* The walk meets the names in the kernel's order: a link into an open
 * folder's plain folder is judged at that folder, and a link standing in
 * an open folder is named as a link, not as a folder. */
static void links_and_folders_are_told_apart(void **state)
{
    (void)state;
    char open[PATH_MAX], d[PATH_MAX], l[PATH_MAX];
    folder("links", 0755, l, sizeof(l));
    folder("links/open", 0777, open, sizeof(open));
    folder("links/open/d", 0755, d, sizeof(d));
    tree_file(&tree, "links/open/d/p.yaml", "version: 1\n");
    /* links/to_file -> open/d/p.yaml: the folder open/d */
    tree_symlink(&tree, "links/to_file", "open/d/p.yaml");
    walk_finds(tree_path(&tree, "links/to_file"), LINK_WALK_FOLDER, open, d);
    /* links/via -> open/l -> d: the link open/l comes first */
    tree_symlink(&tree, "links/open/l", "d");
    tree_symlink(&tree, "links/via", "open/l");
    snprintf(l, sizeof(l), "%s", tree_path(&tree, "links/open/l"));
    walk_finds(tree_path(&tree, "links/via/p.yaml"), LINK_WALK_ENTRY, open, l);
}

/* A path of long folder names: the line keeps its reason and remedy, the
 * three names giving way in their middle within the line's bound. */
static void a_long_path_keeps_the_folder_warning_whole(void **state)
{
    (void)state;
    char open[PATH_MAX], path[PATH_MAX], name[241];
    folder("long", 0777, open, sizeof(open));
    memset(name, 'x', 240);
    name[240] = '\0';
    int n = snprintf(path, sizeof(path), "%s", open);
    for (int i = 0; i < 12; i++) {
        n += snprintf(path + n, sizeof(path) - (size_t)n, "/%s", name);
        assert_int_equal(mkdir(path, 0755), 0);
    }
    snprintf(path + n, sizeof(path) - (size_t)n, "/p.yaml");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fclose(f), 0);
    char out[GATEWAY_FILE_WARNING_MAX];
    gateway_policy_file_warning(path, out, sizeof(out));
    const char *end = "(mode 0777): anyone on this host, an agent included, can rename that "
                      "folder away and put one of their own in its place, in force from the next "
                      "SIGHUP (a log rotation sends one); keep the policy's path out of folders "
                      "every user may write\n";
    size_t len = strlen(out), elen = strlen(end);
    assert_true(len > elen && len < sizeof(out) - 1);
    assert_string_equal(out + len - elen, end);
    assert_non_null(strstr(out, "..."));
    assert_non_null(strstr(out, ", a folder of its path, lies in "));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_plain_folder_in_an_open_folder_is_named),
        cmocka_unit_test(a_plain_folder_in_a_sticky_or_private_folder_is_not),
        cmocka_unit_test(links_and_folders_are_told_apart),
        cmocka_unit_test(a_long_path_keeps_the_folder_warning_whole),
    };
    return cmocka_run_group_tests(tests, make_tree, remove_tree);
}
