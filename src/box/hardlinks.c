#include "box/hardlinks.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A search of the writable paths of a view for another name of one file. */
struct search {
    const struct box_view *v;
    dev_t dev; /* the file's */
    ino_t ino;
    unsigned long left; /* entries still to look at */
    unsigned depth_max; /* folders below a writable path to go down */
    /* f->root: the writable path searched; f->at: the path looked at */
    struct hardlinks_finding *f;
};

/* Ends the search for <why> (<error>, an errno, with HARDLINKS_UNREADABLE).
 * Returns true. */
static bool stop(struct search *s, enum hardlinks_stop why, int error)
{
    s->f->stop = why;
    s->f->error = error;
    return true;
}

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

static bool search_entry(struct search *s, int dir, const char *name, size_t len, unsigned depth);

/* Looks at each entry of the folder open at <fd> (takes ownership), whose
 * path, <depth> folders below the writable path searched, is the first
 * <len> bytes of s->f->at. Returns true when the search stops there. */
static bool search_folder(struct search *s, int fd, size_t len, unsigned depth)
{
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        int e = errno;
        close(fd);
        return stop(s, HARDLINKS_UNREADABLE, e);
    }
    bool stopped = false;
    for (;;) {
        errno = 0;
        const struct dirent *e = readdir(d);
        if (e == NULL) {
            s->f->at[len] = '\0';
            stopped = errno != 0 && stop(s, HARDLINKS_UNREADABLE, errno);
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        stopped = search_entry(s, dirfd(d), e->d_name, len, depth);
        if (stopped)
            break;
    }
    closedir(d);
    return stopped;
}

/* Looks at the entry <name> of the folder open at <dir> (see
 * search_folder()): a name of the file the view leaves writable stops the
 * search, a folder it leaves writable is searched in turn. The names there
 * before the command starts are all that count: in the box it cannot make
 * one (link() from the read-only bind, another mount, fails with EXDEV).
 * An entry gone meanwhile is passed over (another process moving names
 * about during the search can hide one from it: a limit). */
static bool search_entry(struct search *s, int dir, const char *name, size_t len, unsigned depth)
{
    char *at = s->f->at;
    size_t n = len + 1 + strlen(name);
    at[len] = '\0';
    if (s->left == 0)
        return stop(s, HARDLINKS_ENTRIES, 0);
    if (n >= sizeof(s->f->at))
        return stop(s, HARDLINKS_UNREADABLE, ENAMETOOLONG);
    s->left--;
    at[len] = '/';
    memcpy(at + len + 1, name, n - len);
    struct stat st;
    if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno != ENOENT && stop(s, HARDLINKS_UNREADABLE, errno);
    /* another file system holds no name of the file: a mount below a
     * writable path is read-only in the box, and a --rw one is searched
     * as a writable path of its own */
    if (st.st_dev != s->dev || (!S_ISDIR(st.st_mode) && st.st_ino != s->ino))
        return false;
    /* below a --ro or --hide path the view keeps the entry out of reach;
     * below a deeper --rw path it is that path's, searched on its own */
    const char *root;
    if (!reach_writable_dir(s->v, at, &root) || root != s->f->root)
        return false;
    if (!S_ISDIR(st.st_mode))
        return stop(s, HARDLINKS_FOUND, 0);
    if (depth >= s->depth_max)
        return stop(s, HARDLINKS_DEPTH, 0);
    int fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno != ENOENT && stop(s, HARDLINKS_UNREADABLE, errno);
    return search_folder(s, fd, n, depth + 1);
}

/* Searches <root>, a path of the view (canonical), when the view leaves it
 * writable, as the deepest path naming it (the last of equal ones), and
 * it lies on the file's file system. */
static bool search_root(struct search *s, const char *root)
{
    const char *deepest;
    struct stat st;
    size_t len = strlen(root);
    if (!reach_writable_dir(s->v, root, &deepest) || deepest != root)
        return false;
    s->f->root = root;
    if (len >= sizeof(s->f->at))
        return stop(s, HARDLINKS_UNREADABLE, ENAMETOOLONG);
    memcpy(s->f->at, root, len + 1);
    if (fstatat(AT_FDCWD, root, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return stop(s, HARDLINKS_UNREADABLE, errno);
    if (st.st_dev != s->dev)
        return false;
    if (!S_ISDIR(st.st_mode)) /* a --rw file */
        return st.st_ino == s->ino && stop(s, HARDLINKS_FOUND, 0);
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return stop(s, HARDLINKS_UNREADABLE, errno);
    return search_folder(s, fd, len, 0);
}

/* hardlinks_other_name() within the bounds <entries> and <depth_max>. */
static bool other_name_within(const struct box_view *v, const char *path, unsigned long entries,
                              unsigned depth_max, struct hardlinks_finding *f)
{
    struct stat st;
    if (stat(path, &st) < 0 || S_ISDIR(st.st_mode) || st.st_nlink <= kept_names(v, path, &st))
        return false;
    f->names = (unsigned long)st.st_nlink;
    struct search s = {.v = v,
                       .dev = st.st_dev,
                       .ino = st.st_ino,
                       .left = entries,
                       .depth_max = depth_max,
                       .f = f};
    if (search_root(&s, v->cwd))
        return true;
    for (size_t k = 0; k < v->npaths; k++)
        if (v->paths[k].kind == BOX_PATH_RW && search_root(&s, v->paths[k].path))
            return true;
    return false;
}

bool hardlinks_other_name(const struct box_view *v, const char *path, struct hardlinks_finding *f)
{
    return other_name_within(v, path, HARDLINKS_ENTRIES_MAX, HARDLINKS_DEPTH_MAX, f);
}
