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

/* How much of a config file is read for extensions.worktreeConfig; one
 * longer is taken to name it. */
#define CONFIG_READ_MAX (1024 * 1024)

struct search {
    const struct box_view *v;
    struct git_guard *g;
    char *err;
    size_t errlen;
};

/* Whether <path> is already in <g>. */
static bool have(const struct git_guard *g, const char *path)
{
    for (size_t i = 0; i < g->n; i++)
        if (strcmp(g->v[i].path, path) == 0)
            return true;
    return false;
}

static int add(struct search *s, enum box_path_kind kind, const char *path)
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
static bool ours(const struct search *s, const char *path, const char *root)
{
    const char *r = NULL;
    return reach_writable_dir(s->v, path, &r) && r != NULL && strcmp(r, root) == 0;
}

static int join(struct search *s, char *out, const char *dir, const char *name)
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

/* Whether the config file at <path> names extensions.worktreeConfig (read
 * as text, any case; one too long to read whole is taken to). */
static bool names_worktree_config(const char *path)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    char *buf = malloc(CONFIG_READ_MAX + 1);
    size_t n = 0;
    ssize_t r = 0;
    while (buf != NULL && n < CONFIG_READ_MAX &&
           ((r = read(fd, buf + n, CONFIG_READ_MAX - n)) > 0 || (r < 0 && errno == EINTR)))
        n += r > 0 ? (size_t)r : 0;
    close(fd);
    bool named = buf == NULL || n == CONFIG_READ_MAX;
    for (size_t i = 0; !named && i + 14 <= n; i++)
        named = strncasecmp(buf + i, "worktreeconfig", 14) == 0;
    free(buf);
    return named;
}

/* <dir>/<name> read-only in the box: a folder (<folder>) or a file, made
 * on the host, empty and owned as <dir> is, when missing and <make>. */
static int keep(struct search *s, const char *dir, const char *name, bool folder, bool make,
                const char *root)
{
    char path[PATH_MAX];
    if (join(s, path, dir, name) < 0)
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
    return add(s, BOX_PATH_RO, path);
}

static int guard_gitdir(struct search *s, const char *gd, unsigned depth);

/* The entries of the folder <dir> (a `modules/` folder or one below it,
 * or a `worktrees/` folder when <worktrees>), the folder itself made a
 * mount point. */
static int walk(struct search *s, const char *dir, bool worktrees, bool wtc, const char *root,
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
    if (add(s, BOX_PATH_RW, dir) < 0)
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
        if (join(s, sub, dir, e->d_name) < 0 || join(s, head, sub, "HEAD") < 0) {
            rc = -1;
            break;
        }
        if (!is_dir(sub) || !ours(s, sub, root))
            continue;
        struct stat st;
        if (worktrees)
            rc = add(s, BOX_PATH_RW, sub) < 0 ? -1
                                              : keep(s, sub, "config.worktree", false, wtc, root);
        else if (lstat(head, &st) == 0)
            rc = guard_gitdir(s, sub, depth + 1);
        else
            rc = walk(s, sub, false, false, root, depth + 1);
    }
    closedir(d);
    return rc;
}

/* The git directory <gd>: a mount point, its hooks and config read-only,
 * then its submodules' and linked worktrees'. */
static int guard_gitdir(struct search *s, const char *gd, unsigned depth)
{
    const char *root = NULL;
    if (!reach_writable_dir(s->v, gd, &root) || root == NULL || have(s->g, gd))
        return 0; /* read-only in the box, or kept already */
    if (strcmp(root, gd) != 0 && add(s, BOX_PATH_RW, gd) < 0)
        return -1;
    char config[PATH_MAX], sub[PATH_MAX];
    if (join(s, config, gd, "config") < 0)
        return -1;
    bool wtc = names_worktree_config(config);
    if (keep(s, gd, "hooks", true, true, root) < 0 ||
        keep(s, gd, "config", false, true, root) < 0 ||
        keep(s, gd, "config.worktree", false, wtc, root) < 0 || join(s, sub, gd, "modules") < 0 ||
        walk(s, sub, false, false, root, depth) < 0 || join(s, sub, gd, "worktrees") < 0)
        return -1;
    return walk(s, sub, true, wtc, root, depth);
}

/* The folder <dir>'s own git directory: <dir>/.git when it is a folder. */
static int guard_folder(struct search *s, const char *dir)
{
    char gd[PATH_MAX];
    if (join(s, gd, strcmp(dir, "/") == 0 ? "" : dir, ".git") < 0)
        return -1;
    return is_dir(gd) ? guard_gitdir(s, gd, 0) : 0;
}

/* The writable path <top>, itself a git directory when a folder named
 * `.git`, and it and each folder above it that the view leaves writable. */
static int guard_top(struct search *s, const char *top)
{
    const char *base = strrchr(top, '/');
    if (base != NULL && strcmp(base, "/.git") == 0 && is_dir(top) && guard_gitdir(s, top, 0) < 0)
        return -1;
    char dir[PATH_MAX];
    if ((size_t)snprintf(dir, sizeof(dir), "%s", top) >= sizeof(dir))
        return 0; /* canonical paths of run's: shorter than PATH_MAX */
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
    struct search s = {v, g, err, errlen};
    g->n = 0;
    if (guard_top(&s, v->cwd) < 0)
        return -1;
    for (size_t i = 0; i < v->npaths; i++)
        if (v->paths[i].kind == BOX_PATH_RW && guard_top(&s, v->paths[i].path) < 0)
            return -1;
    return 0;
}

void git_guard_free(struct git_guard *g)
{
    for (size_t i = 0; i < g->n; i++)
        free(g->owned[i]);
    g->n = 0;
}
