/* temp_tree: a throw-away tree of folders, files and links for the unit
 * tests of code that walks the file system (src/box/reach.c and those
 * built on it). Paths are given relative to the tree's canonical root;
 * each helper fails the test when the file system refuses. Include after
 * <cmocka.h>. */
#ifndef SLUICE_TESTS_TEMP_TREE_H
#define SLUICE_TESTS_TEMP_TREE_H

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct temp_tree {
    char root[256]; /* canonical: the code under test takes no link in it */
    char buf[4][PATH_MAX];
    unsigned next; /* the next of buf that tree_path() fills */
};

static inline void tree_init(struct temp_tree *t)
{
    char dir[] = "/tmp/sluice-tree-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *real = realpath(dir, NULL);
    assert_non_null(real);
    assert_true((size_t)snprintf(t->root, sizeof(t->root), "%s", real) < sizeof(t->root));
    free(real);
    t->next = 0;
}

/* <rel> below the root, absolute, in one of four rotating buffers. */
static inline const char *tree_path(struct temp_tree *t, const char *rel)
{
    char *b = t->buf[t->next++ % 4];
    assert_true((size_t)snprintf(b, PATH_MAX, "%s/%s", t->root, rel) < PATH_MAX);
    return b;
}

static inline void tree_dir(struct temp_tree *t, const char *rel)
{
    assert_int_equal(mkdir(tree_path(t, rel), 0755), 0);
}

static inline void tree_file(struct temp_tree *t, const char *rel, const char *text)
{
    int fd = open(tree_path(t, rel), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* A symbolic link <rel> to <target>, as written. */
static inline void tree_symlink(struct temp_tree *t, const char *rel, const char *target)
{
    assert_int_equal(symlink(target, tree_path(t, rel)), 0);
}

/* A hard link <rel> to the file <existing>. */
static inline void tree_hardlink(struct temp_tree *t, const char *existing, const char *rel)
{
    const char *from = tree_path(t, existing);
    assert_int_equal(link(from, tree_path(t, rel)), 0);
}

static inline int tree_remove_one(const char *path, const struct stat *st, int flag,
                                  struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline void tree_free(struct temp_tree *t)
{
    nftw(t->root, tree_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A cmocka teardown for fixtures allocated whole with malloc() whose first
 * member is their struct temp_tree: removes the tree, frees the fixture. */
static inline int tree_fixture_free(void **state)
{
    struct temp_tree *t = *state;
    tree_free(t);
    free(t);
    return 0;
}

#endif
