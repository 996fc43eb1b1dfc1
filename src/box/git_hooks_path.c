#include "box/git_guard_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "box/box_int.h"

/* Whether <path> lies strictly below the folder <dir>. */
static bool below(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (strcmp(dir, "/") == 0 ? path[1] != '\0' : path[n] == '/');
}

/* Makes the folder <path>, missing, in <parent>: empty, owned as <parent>
 * is. Returns 1 made, 0 when the box's command could not make it either,
 * -1 with a message. */
static int make_dir(struct git_search *s, const char *path, const char *parent)
{
    struct stat st, owner;
    if (mkdir(path, 0755) < 0) {
        if (errno == EROFS || errno == EACCES || errno == EPERM)
            return 0; /* nor can the box's command, the same user without a capability */
        box_path_error(s->err, s->errlen, "", path, ": cannot make it to keep it read-only",
                       strerror(errno));
        return -1;
    }
    if (lstat(parent, &owner) == 0 && lstat(path, &st) == 0 &&
        (owner.st_uid != st.st_uid || owner.st_gid != st.st_gid) &&
        lchown(path, owner.st_uid, owner.st_gid) < 0) {
        box_path_error(s->err, s->errlen, "", path, ": cannot give it its folder's owner",
                       strerror(errno));
        return -1;
    }
    return 1;
}

/* Resolves <path> (absolute) as the kernel would, into <out> (canonical),
 * component by component: a link's target followed unless the link lies
 * in a folder the box leaves writable (the command would replace it: the
 * run stops), a missing folder made where the box's command could make it
 * (at most GIT_GUARD_DEPTH). Returns 1 resolved to a folder, 0 when git
 * could not run hooks from there nor the command make it so, -1 with a
 * message. */
static int resolve_hooks_dir(struct git_search *s, const char *path, char *out)
{
    struct reach_walk w;
    if (!reach_walk_start(&w, path))
        return 0;
    unsigned made = 0;
    int rc;
    while ((rc = reach_walk_next(&w)) > 0) {
        const char *root = NULL;
        bool writable = reach_writable_dir(s->v, w.cur, &root);
        struct stat st;
        if (lstat(w.next, &st) < 0) {
            if (errno != ENOENT || !writable)
                return 0;
            if (++made > GIT_GUARD_DEPTH) {
                box_path_error(s->err, s->errlen, "", w.next, "",
                               "a core.hooksPath folder more than 8 folders below one that "
                               "exists: make it, or name it with --ro or --rw");
                return -1;
            }
            if ((rc = make_dir(s, w.next, w.cur)) <= 0)
                return rc;
        } else if (S_ISLNK(st.st_mode) && writable) {
            box_path_error(s->err, s->errlen, "", w.next, "",
                           "is a symbolic link on the way to a core.hooksPath folder, in a "
                           "folder the box leaves writable: git would run hooks from where "
                           "the command makes it lead; make it a folder, or name it with "
                           "--ro or --rw");
            return -1;
        } else if (S_ISLNK(st.st_mode)) {
            if (reach_walk_link(&w) < 0)
                return 0;
            continue;
        } else if (!S_ISDIR(st.st_mode)) {
            if (!writable)
                return 0;
            box_path_error(s->err, s->errlen, "", w.next, "",
                           "is on the way to a core.hooksPath folder, not a folder: the command "
                           "could make it one; name it with --ro or --rw");
            return -1;
        }
        reach_walk_enter(&w);
    }
    if (rc < 0 || (size_t)snprintf(out, PATH_MAX, "%s", w.cur) >= PATH_MAX)
        return 0;
    return 1;
}

/* The hooks folder <value> (a core.hooksPath, relative to <top>, the
 * working tree's top or the git directory, or none) read-only in the box,
 * and each folder between it and the writable path that holds it a mount
 * point. One the user named with --rw, or below a folder named with --rw
 * in the working tree, is the user's. A folder named `_` (husky 9: its
 * hooks run those of the folder above, `.husky/pre-commit`) keeps the
 * folder above it instead. */
static int keep_hooks_dir(struct git_search *s, const char *value, const char *top)
{
    char path[PATH_MAX], dir[PATH_MAX];
    const char *home = getenv("HOME");
    int n;
    if (value[0] == '\0')
        return 0;
    if (value[0] == '~' && (value[1] == '/' || value[1] == '\0'))
        n = home != NULL && home[0] == '/' ? snprintf(path, sizeof(path), "%s%s", home, value + 1)
                                           : -1;
    else if (value[0] == '/')
        n = snprintf(path, sizeof(path), "%s", value);
    else
        n = top != NULL ? snprintf(path, sizeof(path), "%s/%s", top, value) : -1;
    if (n < 0 || (size_t)n >= sizeof(path))
        return 0; /* ~user/, or no path git could open either */
    int rc = resolve_hooks_dir(s, path, dir);
    const char *r = NULL;
    if (rc <= 0 || !reach_writable_dir(s->v, dir, &r) || r == NULL || strcmp(r, dir) == 0 ||
        (top != NULL && below(r, top) && below(dir, r)))
        return rc;
    char *base = strrchr(dir, '/');
    if (strcmp(base, "/_") == 0 && base != dir && below(dir, r)) {
        *base = '\0';
        if (strcmp(r, dir) == 0)
            return 0;
    }
    size_t rl = strcmp(r, "/") == 0 ? 0 : strlen(r);
    for (char *slash = strchr(dir + rl + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        rc = git_guard_add(s, BOX_PATH_RW, dir);
        *slash = '/';
        if (rc < 0)
            return -1;
    }
    return git_guard_add(s, BOX_PATH_RO, dir);
}

/* The hooks folders <c> names, with <top> as keep_hooks_dir() takes it. */
static int keep_hooks_dirs(struct git_search *s, const struct git_config *c, const char *top)
{
    for (size_t i = 0; i < c->nhooks; i++)
        if (keep_hooks_dir(s, c->hooks_path[i], top) < 0)
            return -1;
    return 0;
}

/* The hooks folders the config files of the git directory <gd> and the
 * user's name, relative ones from the working tree's top <top> (core.worktree
 * when the config names it, else <top>, else <gd>). Sets <*wtc> when the
 * config names extensions.worktreeConfig. */
int git_guard_hooks_paths(struct git_search *s, const char *gd, const char *top, bool *wtc)
{
    char path[PATH_MAX], wt[PATH_MAX];
    struct git_config c = {0}, cw = {0};
    int rc = git_guard_join(s, path, gd, "config") < 0
                 ? -1
                 : git_config_read(path, &c, s->err, s->errlen);
    *wtc = rc == 0 && c.names_worktreeconfig;
    if (rc == 0 && *wtc)
        rc = git_guard_join(s, path, gd, "config.worktree") < 0
                 ? -1
                 : git_config_read(path, &cw, s->err, s->errlen);
    const char *w = cw.worktree != NULL ? cw.worktree : c.worktree;
    if (rc == 0 && w != NULL) {
        int n = w[0] == '/' ? snprintf(path, sizeof(path), "%s", w)
                            : snprintf(path, sizeof(path), "%s/%s", gd, w);
        top = n > 0 && (size_t)n < sizeof(path) && realpath(path, wt) != NULL ? wt : NULL;
    }
    if (top == NULL)
        top = gd;
    for (size_t i = 0; rc == 0 && i < GIT_GUARD_GLOBAL_FILES; i++)
        rc = keep_hooks_dirs(s, &s->global[i], top);
    if (rc == 0)
        rc = keep_hooks_dirs(s, &c, top) < 0 || keep_hooks_dirs(s, &cw, top) < 0 ? -1 : 0;
    git_config_free(&c);
    git_config_free(&cw);
    return rc;
}

/* Reads the user's and the system's config files, as git finds them, and
 * keeps the absolute hooks folders they name. */
int git_guard_global(struct git_search *s)
{
    const char *home = getenv("HOME"), *xdg = getenv("XDG_CONFIG_HOME");
    char paths[GIT_GUARD_GLOBAL_FILES][PATH_MAX] = {"/etc/gitconfig"};
    const char *env[] = {"GIT_CONFIG_SYSTEM", "GIT_CONFIG_GLOBAL"};
    for (size_t i = 0; i < 2; i++)
        if (getenv(env[i]) != NULL)
            snprintf(paths[1 + i], PATH_MAX, "%s", getenv(env[i]));
    if (xdg != NULL && xdg[0] == '/')
        snprintf(paths[3], PATH_MAX, "%s/git/config", xdg);
    else if (home != NULL && home[0] == '/')
        snprintf(paths[3], PATH_MAX, "%s/.config/git/config", home);
    if (home != NULL && home[0] == '/')
        snprintf(paths[4], PATH_MAX, "%s/.gitconfig", home);
    for (size_t i = 0; i < GIT_GUARD_GLOBAL_FILES; i++)
        if (paths[i][0] != '\0' &&
            (git_config_read(paths[i], &s->global[i], s->err, s->errlen) < 0 ||
             keep_hooks_dirs(s, &s->global[i], NULL) < 0))
            return -1;
    /* the user's (git config --global writes ~/.gitconfig unless only the
     * XDG file exists: an empty one made then would change where) */
    struct stat st;
    for (size_t i = 2; i < GIT_GUARD_GLOBAL_FILES; i++)
        if (paths[i][0] != '\0' &&
            git_guard_keep_config(s, paths[i], i == 4 && stat(paths[3], &st) < 0) < 0)
            return -1;
    return 0;
}
