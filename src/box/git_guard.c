#include "box/git_guard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "box/box_int.h"
#include "box/git_config_read.h"
#include "box/git_guard_int.h"

/* The most bytes of a `.git` file (`gitdir: PATH`) or a `commondir` read. */
#define GITFILE_MAX 4096

/* Whether <path> is already in <g>. */
static bool have(const struct git_guard *g, const char *path)
{
    for (size_t i = 0; i < g->n; i++)
        if (strcmp(g->v[i].path, path) == 0)
            return true;
    return false;
}

int git_guard_add(struct git_search *s, enum box_path_kind kind, const char *path)
{
    if (have(s->g, path))
        return 0;
    if (s->g->n >= GIT_GUARD_MAX) {
        box_path_error(s->err, s->errlen, "", path, "",
                       "one git directory path too many to keep read-only in the box "
                       "(at most 128, submodules' and worktrees' included): name the "
                       "modules or worktrees folder above it with --ro or --rw to decide for it");
        return -1;
    }
    char *c = strdup(path);
    if (c == NULL) {
        snprintf(s->err, s->errlen, "out of memory");
        return -1;
    }
    s->g->owned[s->g->n] = c;
    s->g->v[s->g->n++] = (struct box_path){kind, c, false};
    return 0;
}

/* Whether the view leaves <path> writable by the same path as <root> (the
 * git directory's): one the user named, or below a folder the user named
 * between the two, is the user's to decide. */
static bool ours(const struct git_search *s, const char *path, const char *root)
{
    const char *r = NULL;
    return reach_writable_dir(s->v, path, &r) && r != NULL && strcmp(r, root) == 0;
}

int git_guard_join(struct git_search *s, char *out, const char *dir, const char *name)
{
    if ((size_t)snprintf(out, PATH_MAX, "%s/%s", dir, name) < PATH_MAX)
        return 0;
    box_path_error(s->err, s->errlen, "", dir, "", strerror(ENAMETOOLONG));
    return -1;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* <dir>/<name> read-only in the box: a folder (<folder>) or a file, made
 * on the host, empty and owned as <dir> is, when missing and <make>. */
static int keep(struct git_search *s, const char *dir, const char *name, bool folder, bool make,
                const char *root)
{
    char path[PATH_MAX];
    if (git_guard_join(s, path, dir, name) < 0)
        return -1;
    if (!ours(s, path, root))
        return 0;
    struct stat st, owner;
    if (lstat(path, &st) < 0) {
        if (errno != ENOENT || !make)
            return 0;
        int rc = folder ? mkdir(path, 0755) : -1;
        if (!folder) {
            int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
            rc = fd < 0 ? -1 : close(fd);
        }
        if (rc < 0 && (errno == EROFS || errno == EACCES || errno == EPERM))
            return 0; /* nor can the box's command, the same user without a capability */
        if (rc < 0 || lstat(path, &st) < 0) {
            box_path_error(s->err, s->errlen, "", path, ": cannot make it to keep it read-only",
                           strerror(errno));
            return -1;
        }
        if (lstat(dir, &owner) == 0 && (owner.st_uid != st.st_uid || owner.st_gid != st.st_gid) &&
            lchown(path, owner.st_uid, owner.st_gid) < 0) {
            box_path_error(s->err, s->errlen, "", path, ": cannot give it its folder's owner",
                           strerror(errno));
            return -1;
        }
    }
    if (folder ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
        box_path_error(s->err, s->errlen, "", path, "",
                       folder ? "is not a folder (a symbolic link?): git would run hooks from "
                                "where it leads, outside the box; make it a folder, or name it "
                                "with --rw or --ro"
                              : "is not a regular file (a symbolic link?): git would read its "
                                "config from where it leads, outside the box; make it a file, or "
                                "name it with --rw or --ro");
        return -1;
    }
    return git_guard_add(s, BOX_PATH_RO, path);
}

int git_guard_keep_config(struct git_search *s, const char *path, bool make)
{
    char real[PATH_MAX], dir[PATH_MAX];
    struct stat st;
    const char *root = NULL;
    if (realpath(path, real) == NULL) {
        char *slash = strrchr(path, '/');
        if (!make || errno != ENOENT || slash == NULL || lstat(path, &st) == 0)
            return 0; /* a dangling link: git reads nothing there either */
        snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
        if (realpath(dir, real) == NULL || !is_dir(real) ||
            !reach_writable_dir(s->v, real, &root) || root == NULL)
            return 0;
        return keep(s, real, slash + 1, false, true, root);
    }
    char *slash = strrchr(real, '/');
    if (stat(real, &st) < 0 || !S_ISREG(st.st_mode) || slash == NULL || slash == real ||
        !reach_writable_dir(s->v, real, &root) || root == NULL || strcmp(root, real) == 0)
        return 0;
    *slash = '\0';
    return keep(s, real, slash + 1, false, false, root);
}

static int guard_gitdir(struct git_search *s, const char *gd, unsigned depth, const char *top);

/* The entries of the folder <dir> (a `modules/` folder or one below it,
 * or a `worktrees/` folder when <worktrees>), the folder itself made a
 * mount point. */
static int walk(struct git_search *s, const char *dir, bool worktrees, bool wtc, const char *root,
                unsigned depth)
{
    if (!is_dir(dir) || !ours(s, dir, root))
        return 0;
    if (depth > GIT_GUARD_DEPTH) {
        box_path_error(s->err, s->errlen, "", dir, "",
                       "more than 8 folders below a git directory's modules folder: name it "
                       "with --ro or --rw to decide for it");
        return -1;
    }
    if (git_guard_add(s, BOX_PATH_RW, dir) < 0)
        return -1;
    DIR *d = opendir(dir);
    if (d == NULL) {
        box_path_error(s->err, s->errlen, "", dir, ": cannot read it", strerror(errno));
        return -1;
    }
    int rc = 0;
    size_t seen = 0;
    struct dirent *e;
    char sub[PATH_MAX], head[PATH_MAX];
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (++seen > GIT_GUARD_ENTRIES) {
            box_path_error(s->err, s->errlen, "", dir, "",
                           "more than 1024 entries in a git directory's modules or worktrees "
                           "folder: name it with --ro or --rw to decide for it");
            rc = -1;
            break;
        }
        if (git_guard_join(s, sub, dir, e->d_name) < 0 ||
            git_guard_join(s, head, sub, "HEAD") < 0) {
            rc = -1;
            break;
        }
        if (!is_dir(sub) || !ours(s, sub, root))
            continue;
        struct stat st;
        if (worktrees)
            rc = git_guard_add(s, BOX_PATH_RW, sub) < 0
                     ? -1
                     : keep(s, sub, "config.worktree", false, wtc, root);
        else if (lstat(head, &st) == 0)
            rc = guard_gitdir(s, sub, depth + 1, NULL);
        else
            rc = walk(s, sub, false, false, root, depth + 1);
    }
    closedir(d);
    return rc;
}

/* The git directory <gd>: a mount point, its hooks and config read-only,
 * then its submodules' and linked worktrees'. */
static int guard_gitdir(struct git_search *s, const char *gd, unsigned depth, const char *top)
{
    bool wtc = false;
    if (git_guard_hooks_paths(s, gd, top, &wtc) < 0)
        return -1;
    const char *root = NULL;
    if (!reach_writable_dir(s->v, gd, &root) || root == NULL || have(s->g, gd))
        return 0; /* read-only in the box, or kept already */
    if (strcmp(root, gd) != 0 && git_guard_add(s, BOX_PATH_RW, gd) < 0)
        return -1;
    char sub[PATH_MAX];
    if (keep(s, gd, "hooks", true, true, root) < 0 ||
        keep(s, gd, "config", false, true, root) < 0 ||
        keep(s, gd, "config.worktree", false, wtc, root) < 0 ||
        git_guard_join(s, sub, gd, "modules") < 0 || walk(s, sub, false, false, root, depth) < 0 ||
        git_guard_join(s, sub, gd, "worktrees") < 0)
        return -1;
    return walk(s, sub, true, wtc, root, depth);
}

/* The path a `.git` file (<file>, `gitdir: PATH`) or a `commondir` file
 * names, relative to <dir>, made canonical into <out>, and <prefix> (the
 * file's first word, "gitdir:" or none). Returns 1 when it names an
 * existing folder, 0 otherwise. */
static int read_pointer(const char *file, const char *dir, const char *prefix, char *out)
{
    char buf[GITFILE_MAX + 1], path[PATH_MAX];
    int fd = open(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n;
    while ((n = read(fd, buf, GITFILE_MAX)) < 0 && errno == EINTR)
        ;
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    size_t pl = strlen(prefix);
    if (strncmp(buf, prefix, pl) != 0)
        return 0;
    const char *p = buf + pl;
    p += strspn(p, " \t");
    int len = p[0] == '/' ? snprintf(path, sizeof(path), "%s", p)
                          : snprintf(path, sizeof(path), "%s/%s", dir, p);
    if (p[0] == '\0' || len < 0 || (size_t)len >= sizeof(path) || realpath(path, out) == NULL)
        return 0;
    return is_dir(out) ? 1 : 0;
}

/* The `.git` file <file> of the folder <dir>: read-only, and the git
 * directory it names kept, a linked worktree's (with a `commondir`) as its
 * folder and its repository's. A folder without a HEAD is no git's. */
static int guard_gitfile(struct git_search *s, const char *file, const char *dir)
{
    const char *root = NULL;
    char gd[PATH_MAX], common[PATH_MAX], path[PATH_MAX];
    if (reach_writable_dir(s->v, dir, &root) && root != NULL && ours(s, file, root) &&
        git_guard_add(s, BOX_PATH_RO, file) < 0)
        return -1;
    if (read_pointer(file, dir, "gitdir:", gd) <= 0 || git_guard_join(s, path, gd, "HEAD") < 0)
        return 0;
    struct stat st;
    if (lstat(path, &st) < 0)
        return 0;
    if (git_guard_join(s, path, gd, "commondir") < 0)
        return -1;
    if (read_pointer(path, gd, "", common) <= 0)
        return guard_gitdir(s, gd, 0, dir);
    if (reach_writable_dir(s->v, gd, &root) && root != NULL && strcmp(root, gd) != 0 &&
        git_guard_add(s, BOX_PATH_RW, gd) < 0)
        return -1;
    return guard_gitdir(s, common, 0, dir);
}

/* The folder <dir>'s own git directory: <dir>/.git, a folder or a file. */
static int guard_folder(struct git_search *s, const char *dir)
{
    char gd[PATH_MAX];
    struct stat st;
    if (git_guard_join(s, gd, strcmp(dir, "/") == 0 ? "" : dir, ".git") < 0)
        return -1;
    if (lstat(gd, &st) < 0)
        return 0;
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        return 0;
    /* each folder between the writable path and <dir> a mount point: none
     * renamed away with the git directory and a new repository made here */
    const char *root = NULL;
    if (reach_writable_dir(s->v, dir, &root) && root != NULL && strcmp(root, dir) != 0) {
        size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
        snprintf(gd, sizeof(gd), "%s", dir);
        for (char *slash = strchr(gd + rl + 1, '/');; slash = strchr(slash + 1, '/')) {
            if (slash != NULL)
                *slash = '\0';
            if (git_guard_add(s, BOX_PATH_RW, gd) < 0)
                return -1;
            if (slash == NULL)
                break;
            *slash = '/';
        }
    }
    if (git_guard_join(s, gd, strcmp(dir, "/") == 0 ? "" : dir, ".git") < 0)
        return -1;
    return S_ISDIR(st.st_mode) ? guard_gitdir(s, gd, 0, dir) : guard_gitfile(s, gd, dir);
}

/* The writable path <top>, itself a git directory when a folder named
 * `.git`, and it and each folder above it that the view leaves writable. */
static int guard_top(struct git_search *s, const char *top)
{
    char dir[PATH_MAX];
    if ((size_t)snprintf(dir, sizeof(dir), "%s", top) >= sizeof(dir))
        return 0; /* canonical paths of run's: shorter than PATH_MAX */
    const char *base = strrchr(top, '/');
    if (base != NULL && strcmp(base, "/.git") == 0 && is_dir(top)) {
        char tree[PATH_MAX];
        snprintf(tree, sizeof(tree), "%.*s", base == top ? 1 : (int)(base - top), top);
        if (guard_gitdir(s, top, 0, tree) < 0)
            return -1;
    }
    for (;;) {
        const char *root = NULL;
        if (!reach_writable_dir(s->v, dir, &root))
            return 0;
        if (guard_folder(s, dir) < 0)
            return -1;
        char *slash = strrchr(dir, '/');
        if (slash == NULL || strcmp(dir, "/") == 0)
            return 0;
        slash[slash == dir ? 1 : 0] = '\0';
    }
}

int git_guard_find(const struct box_view *v, struct git_guard *g, char *err, size_t errlen)
{
    struct git_search s = {.v = v, .g = g, .err = err, .errlen = errlen};
    g->n = 0;
    int rc = git_guard_global(&s) < 0 || guard_top(&s, v->cwd) < 0 ? -1 : 0;
    for (size_t i = 0; rc == 0 && i < v->npaths; i++)
        if (v->paths[i].kind == BOX_PATH_RW && guard_top(&s, v->paths[i].path) < 0)
            rc = -1;
    for (size_t i = 0; i < GIT_GUARD_GLOBAL_FILES; i++)
        git_config_free(&s.global[i]);
    return rc;
}

void git_guard_free(struct git_guard *g)
{
    for (size_t i = 0; i < g->n; i++)
        free(g->owned[i]);
    g->n = 0;
}
