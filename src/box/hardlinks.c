#include "box/hardlinks.h"

#include <string.h>
#include <sys/stat.h>

/* How many names of the file <st> describes <v> keeps read-only: the
 * distinct --ro paths that name it, and <path> itself when it is none of
 * them. */
static unsigned long kept_names(const struct box_view *v, const char *path, const struct stat *st)
{
    unsigned long n = 1; /* <path> */
    for (size_t k = 0; k < v->npaths; k++) {
        const char *q = v->paths[k].path;
        struct stat o;
        bool again = strcmp(q, path) == 0;
        for (size_t j = 0; j < k && !again; j++)
            again = v->paths[j].kind == BOX_PATH_RO && strcmp(v->paths[j].path, q) == 0;
        if (!again && v->paths[k].kind == BOX_PATH_RO && stat(q, &o) == 0 &&
            o.st_dev == st->st_dev && o.st_ino == st->st_ino)
            n++;
    }
    return n;
}

bool hardlinks_other_name(const struct box_view *v, const char *path, const char **root,
                          unsigned long *names)
{
    struct stat st, w;
    if (stat(path, &st) < 0 || S_ISDIR(st.st_mode) || st.st_nlink <= kept_names(v, path, &st))
        return false;
    *names = (unsigned long)st.st_nlink;
    *root = stat(v->cwd, &w) == 0 && w.st_dev == st.st_dev ? v->cwd : NULL;
    for (size_t k = 0; k < v->npaths && *root == NULL; k++)
        if (v->paths[k].kind == BOX_PATH_RW && stat(v->paths[k].path, &w) == 0 &&
            w.st_dev == st.st_dev)
            *root = v->paths[k].path;
    return *root != NULL;
}
