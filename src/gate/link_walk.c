#include "gate/link_walk.h"
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A walk's state: <done> the folders resolved so far (absolute, no link
 * in it), <rest> the names still to walk ('/'-separated, as written). */
struct walk {
    char done[PATH_MAX];
    char rest[2 * PATH_MAX];
    unsigned hops;
};

/* Takes the next name of w->rest into <name> (NUL-ended, at most
 * <cap> - 1 bytes); false at the end of the path or for a name too long. */
static bool next_name(struct walk *w, char *name, size_t cap)
{
    char *s = w->rest;
    while (*s == '/')
        s++;
    size_t n = strcspn(s, "/");
    if (n == 0 || n >= cap)
        return false;
    memcpy(name, s, n);
    name[n] = '\0';
    memmove(w->rest, s + n, strlen(s + n) + 1);
    return true;
}

/* True when no name is left after the one taken last. */
static bool at_end(const struct walk *w)
{
    return w->rest[strspn(w->rest, "/")] == '\0';
}

/* Drops the last name of w->done ("/" stays "/"): ".." of a folder with
 * no link in it. */
static void go_up(struct walk *w)
{
    char *slash = strrchr(w->done, '/');
    if (slash != NULL)
        slash[slash == w->done] = '\0';
}

/* Puts the link <at>'s target before w->rest; an absolute one starts the
 * walk again from "/". False past LINK_WALK_MAX_HOPS or on a target that
 * does not fit. */
static bool follow(struct walk *w, const char *at)
{
    char target[PATH_MAX];
    if (++w->hops > LINK_WALK_MAX_HOPS)
        return false;
    ssize_t n = readlink(at, target, sizeof(target));
    if (n <= 0 || (size_t)n >= sizeof(target))
        return false;
    target[n] = '\0';
    size_t rest = strlen(w->rest);
    if ((size_t)n + 1 + rest >= sizeof(w->rest))
        return false;
    memmove(w->rest + n + 1, w->rest, rest + 1);
    memcpy(w->rest, target, (size_t)n);
    w->rest[n] = '/';
    if (target[0] == '/')
        snprintf(w->done, sizeof(w->done), "/");
    return true;
}

bool folder_open_to_all(const char *dir, struct stat *ds)
{
    return stat(dir, ds) == 0 && (ds->st_mode & S_IWOTH) != 0 && (ds->st_mode & S_ISVTX) == 0;
}

enum link_walk_found link_walk_open_folder(const char *path, char *dir, size_t dircap, char *entry,
                                           size_t entrycap, struct stat *ds)
{
    struct walk w = {.hops = 0};
    if (path[0] == '/')
        snprintf(w.done, sizeof(w.done), "/");
    else if (getcwd(w.done, sizeof(w.done)) == NULL)
        return LINK_WALK_NONE;
    if (strlen(path) >= sizeof(w.rest))
        return LINK_WALK_NONE;
    snprintf(w.rest, sizeof(w.rest), "%s", path);
    char name[NAME_MAX + 1], at[PATH_MAX];
    while (next_name(&w, name, sizeof(name))) {
        if (strcmp(name, ".") == 0)
            continue;
        if (strcmp(name, "..") == 0) {
            go_up(&w);
            continue;
        }
        int n =
            snprintf(at, sizeof(at), "%s%s%s", w.done, strcmp(w.done, "/") == 0 ? "" : "/", name);
        struct stat st;
        if (n < 0 || (size_t)n >= sizeof(at) || lstat(at, &st) != 0)
            return LINK_WALK_NONE;
        bool link = S_ISLNK(st.st_mode), end = at_end(&w);
        /* every name of the walk: a plain folder too, which a rename in
         * its folder moves away as it would a link */
        if ((link || end || S_ISDIR(st.st_mode)) && folder_open_to_all(w.done, ds)) {
            snprintf(dir, dircap, "%s", w.done);
            snprintf(entry, entrycap, "%s", at);
            return link || end ? LINK_WALK_ENTRY : LINK_WALK_FOLDER;
        }
        if (link && !follow(&w, at))
            return LINK_WALK_NONE;
        if (!link)
            snprintf(w.done, sizeof(w.done), "%s", at);
    }
    return LINK_WALK_NONE;
}
