/* sysfs: the box's own /sys.
 *
 * A sysfs shows, in /sys/class/net (and the net folders of /sys/devices),
 * the interfaces of the network namespace of the process that mounted it:
 * the host's /sys, even read-only, showed the command the host network's
 * interfaces, their MAC addresses and counters. The init, in the box's
 * network namespace (and user namespace, which owns it), mounts a sysfs of
 * its own over /sys, read-only, before the view is built (so a --ro or
 * --hide below /sys applies to it, and step 2 makes all it holds
 * read-only too), and binds there again the host's mounts below /sys (its
 * cgroup file systems, bpf, tracefs...), recursively, so the view keeps
 * them. Everything else in sysfs (the CPUs, the devices) is the host's in
 * either: only the network's folders depend on the mounter. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "box/box_int.h"
#include "box/mountinfo.h"

#define MAX_SYS_MOUNTS 256 /* mounts right below /sys kept */

struct sys_mount {
    char *path; /* the mount point, below /sys */
    int fd;     /* O_PATH of its root, opened before /sys is covered */
};

/* Whether /sys, reached without following a link, is a sysfs: a chroot or
 * a container may have none there, and then there is nothing to replace. */
static bool sys_is_sysfs(void)
{
    int fd = box_open_nofollow("/sys");
    struct statfs sf;
    bool yes = fd >= 0 && fstatfs(fd, &sf) == 0 && sf.f_type == BOX_SYSFS_MAGIC;
    if (fd >= 0)
        close(fd);
    return yes;
}

static void free_mounts(struct sys_mount *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].path);
        if (v[i].fd >= 0)
            close(v[i].fd);
    }
    free(v);
}

/* Opens the root of each mount right below the top mount on /sys (not
 * covered by another); each one's own mounts come along with its
 * recursive bind. Returns the count, or -1 with a message. */
static int open_sys_mounts(struct sys_mount **out, char *err, size_t errlen)
{
    struct mountinfo mi;
    if (box_read_mountinfo(&mi, err, errlen) < 0)
        return -1;
    unsigned top = 0;
    bool found = false;
    for (size_t i = 0; i < mi.n && !found; i++)
        if (strcmp(mi.v[i].mount_point, "/sys") == 0 && !mountinfo_is_covered(&mi, &mi.v[i])) {
            top = mi.v[i].id;
            found = true;
        }
    struct sys_mount *v = calloc(MAX_SYS_MOUNTS, sizeof(*v));
    if (v == NULL) {
        mountinfo_free(&mi);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; i < mi.n && found && rc == 0; i++) {
        const struct mountinfo_entry *e = &mi.v[i];
        if (e->parent != top || e->id == top || strncmp(e->mount_point, "/sys/", 5) != 0 ||
            mountinfo_is_covered(&mi, e))
            continue;
        if (n == MAX_SYS_MOUNTS) {
            snprintf(err, errlen, "more than %d mounts below /sys", MAX_SYS_MOUNTS);
            rc = -1;
            break;
        }
        int fd = box_open_nofollow(e->mount_point);
        int open_errno = errno;
        if (fd < 0 && (open_errno == ENOENT || open_errno == EACCES))
            continue; /* gone since, or out of the box's reach as it was */
        v[n].path = strdup(e->mount_point);
        v[n].fd = fd;
        if (fd < 0 || v[n].path == NULL) {
            box_path_error(err, errlen, "cannot keep ", e->mount_point, " in the box's /sys",
                           fd < 0 ? strerror(open_errno) : "out of memory");
            rc = -1;
        }
        n++;
    }
    mountinfo_free(&mi);
    if (rc < 0) {
        free_mounts(v, n);
        return -1;
    }
    *out = v;
    return (int)n;
}

/* Binds <m>'s root, with the mounts below it, on its path in the new
 * sysfs; a path that is not there (a network folder of the host's) is
 * let be: what it held was the host network's. */
static int bind_again(const struct sys_mount *m, char *err, size_t errlen)
{
    int to = box_open_nofollow(m->path);
    if (to < 0 && errno == ENOENT)
        return 0;
    char src[64], dst[64];
    snprintf(src, sizeof(src), "/proc/self/fd/%d", m->fd);
    snprintf(dst, sizeof(dst), "/proc/self/fd/%d", to);
    if (to < 0 || mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0) {
        box_path_error(err, errlen, "cannot keep ", m->path, " in the box's /sys", strerror(errno));
        if (to >= 0)
            close(to);
        return -1;
    }
    close(to);
    return 0;
}

int box_mount_sysfs(char *err, size_t errlen)
{
    if (!sys_is_sysfs())
        return 0;
    struct sys_mount *v = NULL;
    int n = open_sys_mounts(&v, err, errlen);
    if (n < 0)
        return -1;
    int sys = box_open_nofollow("/sys");
    char p[64];
    snprintf(p, sizeof(p), "/proc/self/fd/%d", sys);
    int rc = 0;
    if (sys < 0 ||
        mount("sysfs", p, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
        /* a user namespace may mount a sysfs only where one is wholly in
         * view (mount_too_revealing()): a container's masked folders of
         * /sys leave none. The interfaces are only seen: the run goes on
         * with the host's /sys, read-only, rather than not at all. */
        int e = errno;
        fprintf(stderr,
                "sluice run: warning: the kernel refuses the box a /sys of its own (%s): it "
                "shows the host's, read-only, with the host network's interfaces in "
                "/sys/class/net\n",
                strerror(e));
    } else {
        for (int i = 0; i < n && rc == 0; i++)
            rc = bind_again(&v[i], err, errlen);
    }
    if (sys >= 0)
        close(sys);
    free_mounts(v, (size_t)n);
    return rc;
}
