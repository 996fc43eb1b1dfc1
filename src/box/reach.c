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

bool reach_can_change(const struct box_view *v, const char *path, const char **root)
{
    char cur[PATH_MAX] = "/"; /* resolved so far: no link in it */
    char rest[PATH_MAX], next[PATH_MAX], target[PATH_MAX], joined[PATH_MAX];
    if ((size_t)snprintf(rest, sizeof(rest), "%s", path) >= sizeof(rest))
        return false;
    const char *r = rest;
    for (int links = 0;;) {
        while (*r == '/')
            r++;
        if (*r == '\0')
            break;
        size_t len = strcspn(r, "/");
        const char *name = r;
        r += len;
        if (len == 1 && name[0] == '.')
            continue;
        if (len == 2 && name[0] == '.' && name[1] == '.') {
            char *slash = strrchr(cur, '/');
            slash[slash == cur ? 1 : 0] = '\0';
            continue;
        }
        if ((size_t)snprintf(next, sizeof(next), "%s%s%.*s", cur, strcmp(cur, "/") == 0 ? "" : "/",
                             (int)len, name) >= sizeof(next))
            return false;
        if (!view_mount_point(v, next) && reach_writable_dir(v, cur, root))
            return true;
        struct stat st;
        if (lstat(next, &st) < 0 || !S_ISLNK(st.st_mode)) {
            memcpy(cur, next, strlen(next) + 1);
            continue;
        }
        ssize_t t = readlink(next, target, sizeof(target) - 1);
        if (t <= 0 || ++links > 40)
            return false;
        target[t] = '\0';
        if ((size_t)snprintf(joined, sizeof(joined), "%s/%s", target, r) >= sizeof(joined))
            return false;
        memcpy(rest, joined, strlen(joined) + 1);
        r = rest;
        if (target[0] == '/')
            memcpy(cur, "/", 2);
    }
    return reach_writable_dir(v, cur, root); /* the file itself */
}
