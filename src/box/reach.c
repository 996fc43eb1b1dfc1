#include "box/reach.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether <path> lies at or below <dir> (both canonical; <dir> may be /). */
static bool in_view_path(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strcmp(dir, "/") == 0 ||
           (strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/'));
}

bool reach_writable_dir(const struct box_view *v, const char *dir, const char **root)
{
    const char *best = in_view_path(dir, v->cwd) ? v->cwd : NULL;
    bool writable = best != NULL;
    for (size_t k = 0; k < v->npaths; k++) {
        const char *q = v->paths[k].path;
        if (in_view_path(dir, q) && (best == NULL || strlen(q) >= strlen(best))) {
            best = q;
            writable = v->paths[k].kind == BOX_PATH_RW;
        }
    }
    *root = best;
    return writable;
}

/* Whether <path> (canonical) is a mount point of the box's view, which the
 * command can neither rename nor remove (EBUSY). A --hide path that does
 * not exist is not mounted. */
static bool view_mount_point(const struct box_view *v, const char *path)
{
    struct stat st;
    if (strcmp(path, v->cwd) == 0)
        return true;
    for (size_t k = 0; k < v->npaths; k++)
        if (strcmp(v->paths[k].path, path) == 0 &&
            (v->paths[k].kind != BOX_PATH_HIDE || lstat(path, &st) == 0))
            return true;
    return false;
}

bool reach_walk_start(struct reach_walk *w, const char *path)
{
    memcpy(w->cur, "/", 2);
    w->links = 0;
    w->r = w->rest;
    return (size_t)snprintf(w->rest, sizeof(w->rest), "%s", path) < sizeof(w->rest);
}

int reach_walk_next(struct reach_walk *w)
{
    for (;;) {
        while (*w->r == '/')
            w->r++;
        if (*w->r == '\0')
            return 0;
        size_t len = strcspn(w->r, "/");
        const char *name = w->r;
        w->r += len;
        if (len == 1 && name[0] == '.')
            continue;
        if (len == 2 && name[0] == '.' && name[1] == '.') {
            char *slash = strrchr(w->cur, '/');
            slash[slash == w->cur ? 1 : 0] = '\0';
            continue;
        }
        return (size_t)snprintf(w->next, sizeof(w->next), "%s%s%.*s", w->cur,
                                strcmp(w->cur, "/") == 0 ? "" : "/", (int)len,
                                name) < sizeof(w->next)
                   ? 1
                   : -1;
    }
}

int reach_walk_link(struct reach_walk *w)
{
    char target[PATH_MAX], joined[PATH_MAX];
    ssize_t t = readlink(w->next, target, sizeof(target) - 1);
    if (t <= 0 || ++w->links > 40)
        return -1;
    target[t] = '\0';
    if ((size_t)snprintf(joined, sizeof(joined), "%s/%s", target, w->r) >= sizeof(joined))
        return -1;
    memcpy(w->rest, joined, strlen(joined) + 1);
    w->r = w->rest;
    if (target[0] == '/')
        memcpy(w->cur, "/", 2);
    return 0;
}

void reach_walk_enter(struct reach_walk *w)
{
    memcpy(w->cur, w->next, strlen(w->next) + 1);
}

bool reach_can_change(const struct box_view *v, const char *path, const char **root)
{
    struct reach_walk w; /* w.cur, resolved so far: no link in it */
    if (!reach_walk_start(&w, path))
        return false;
    int rc;
    while ((rc = reach_walk_next(&w)) > 0) {
        if (!view_mount_point(v, w.next) && reach_writable_dir(v, w.cur, root))
            return true;
        struct stat st;
        if (lstat(w.next, &st) < 0 || !S_ISLNK(st.st_mode))
            reach_walk_enter(&w);
        else if (reach_walk_link(&w) < 0)
            return false;
    }
    return rc == 0 && reach_writable_dir(v, w.cur, root); /* the file itself */
}
