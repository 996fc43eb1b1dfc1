/* mounts: the box's view of the file system.
 *
 * In the box's new mount namespace (propagation made private first, so
 * nothing here reaches the host):
 *   0. a sysfs of the box's own network namespace on /sys, with the
 *      host's mounts below /sys bound there again (box_mount_sysfs());
 *   1. every path the view needs is opened (O_PATH) while the host view is
 *      still whole, and whether it was read-only on the host is noted;
 *   2. every mount is made read-only and nodev, in one mount_setattr() on
 *      the whole tree (Linux 5.12), or else per mount (MS_BIND|MS_REMOUNT|
 *      MS_RDONLY|MS_NODEV), keeping its nosuid/noexec/atime flags: in a
 *      user namespace those are locked and a remount that dropped them
 *      fails. nodev: a read-only mount refuses to write files, not to open
 *      devices, and the host's view has device nodes outside /dev (a
 *      chroot's /dev bound from the host's);
 *   3. /tmp and /dev/shm become private empty tmpfs, /dev the box's own
 *      (see dev_setup), read-only once step 4 is done;
 *   4. the working directory, each --rw, --ro and --hide (and the protected
 *      files run adds) are applied, shallowest path first and in the order
 *      given among equals, so a --ro below a --rw wins: a bind of the
 *      opened path (recursive, so mounts below come along, read-only),
 *      remounted writable or read-only (nodev as on the host); a hidden
 *      directory becomes an empty read-only tmpfs, a hidden file an empty
 *      read-only file (/dev/null); one below /proc waits for the box's own
 *      /proc (box_mount_proc()), which would cover it; then every proc
 *      mount of the host outside /proc and every sysfs outside /sys (a
 *      chroot's), brought along or not, is covered as a hidden directory
 *      is (cover_host_proc_and_sysfs());
 *   5. every mount still writable is checked against the writable paths:
 *      one left over is an error, never a half-boxed run.
 * A writable path that is read-only on the host stays read-only. Paths are
 * opened, and mounts made on targets reached, one component at a time
 * without following symbolic links (run refuses links on the command line;
 * one swapped in since fails the set-up). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "box/box_int.h"
#include "box/mountinfo.h"
#include "util/text_json.h"

#define MAX_OPS 512

/* <linux/mount.h>, <linux/fcntl.h> */
#define BOX_MOUNT_ATTR_RDONLY 0x1
#define BOX_MOUNT_ATTR_NODEV  0x4
#define BOX_AT_RECURSIVE      0x8000

struct op {
    enum box_path_kind kind;
    const char *path;
    int fd;          /* O_PATH of the source, -1 when it does not exist */
    bool is_dir;     /* the source is a directory */
    bool host_ro;    /* read-only on the host: a --rw stays read-only */
    bool host_nodev; /* nodev on the host: the bind stays nodev */
    size_t order;
    size_t depth;
};

/* Opens <path> (absolute) O_PATH one component at a time, following no
 * symbolic link: a path that is or passes through one fails with ELOOP.
 * Returns the descriptor, or -1 with errno; then, when <stopped_in> is not
 * NULL, the directory the walk had reached, where the component that
 * failed was looked up, is left open in <*stopped_in> (-1 when none). */
static int walk_nofollow(const char *path, int *stopped_in)
{
    if (stopped_in != NULL)
        *stopped_in = -1;
    if (path[0] != '/') {
        errno = EINVAL;
        return -1;
    }
    int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    const char *s = path;
    while (fd >= 0) {
        while (*s == '/')
            s++;
        if (*s == '\0')
            return fd;
        const char *e = strchr(s, '/');
        size_t len = e != NULL ? (size_t)(e - s) : strlen(s);
        char name[NAME_MAX + 1];
        if (len > NAME_MAX || (len == 2 && s[0] == '.' && s[1] == '.')) {
            close(fd);
            errno = len > NAME_MAX ? ENAMETOOLONG : EINVAL;
            return -1;
        }
        memcpy(name, s, len);
        name[len] = '\0';
        int next = openat(fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        int e_no = errno;
        struct stat st;
        if (next >= 0 && fstat(next, &st) == 0 && S_ISLNK(st.st_mode)) {
            close(next);
            next = -1;
            e_no = ELOOP;
        }
        if (next < 0 && stopped_in != NULL)
            *stopped_in = fd;
        else
            close(fd);
        errno = e_no;
        fd = next;
        s += len;
    }
    return -1;
}

int box_open_nofollow(const char *path)
{
    return walk_nofollow(path, NULL);
}

/* The flags a remount of the mount <fd> is on keeps (they are locked in a
 * user namespace), with nodev as <nodev> says: the host's view is nodev in
 * the box, its /dev and the paths named on the command line as the host
 * has them. */
static unsigned long keep_flags_fd(int fd, bool nodev)
{
    struct statvfs sv;
    unsigned long f = nodev ? MS_NODEV : 0;
    if (fstatvfs(fd, &sv) < 0)
        return f;
    if (sv.f_flag & ST_NOSUID)
        f |= MS_NOSUID;
    if (sv.f_flag & ST_NOEXEC)
        f |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME)
        f |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME)
        f |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME)
        f |= MS_RELATIME;
    return f;
}

static int remount(const char *path, bool ro, bool nodev)
{
    int fd = open(path, O_PATH | O_CLOEXEC);
    unsigned long flags = MS_BIND | MS_REMOUNT |
                          (fd >= 0 ? keep_flags_fd(fd, nodev)
                           : nodev ? MS_NODEV
                                   : 0);
    if (fd >= 0)
        close(fd);
    return mount(NULL, path, NULL, flags | (ro ? MS_RDONLY : 0), NULL);
}

/* Remounts the mount on top of <path>, reached without following a link. */
static int remount_nofollow(const char *path, bool ro, bool nodev)
{
    int fd = box_open_nofollow(path);
    if (fd < 0)
        return -1;
    char p[64];
    snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
    unsigned long flags = MS_BIND | MS_REMOUNT | keep_flags_fd(fd, nodev) | (ro ? MS_RDONLY : 0);
    int rc = mount(NULL, p, NULL, flags, NULL);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* mount(<src>, <target>) where <target> is reached without following a
 * link (the mount goes on the descriptor's path). */
static int mount_on(const char *src, const char *target, const char *fstype, unsigned long flags,
                    const char *data)
{
    int fd = box_open_nofollow(target);
    if (fd < 0)
        return -1;
    char p[64];
    snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
    int rc = mount(src, p, fstype, flags, data);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Step 2 in one call: every mount of the tree below the root made
 * read-only and nodev by mount_setattr(2) with AT_RECURSIVE (Linux 5.12),
 * which walks the mounts themselves, not their paths. Remounting each by
 * the path mountinfo gives cannot be sure to reach it: another process
 * (a second box sharing a writable folder) can rename a folder above it
 * between the read and the remount, and one behind a folder the box's
 * uid cannot search is out of the init's reach. Returns 0, or -1 (ENOSYS
 * on an older kernel; EINVAL when the root is not a mount's, as in a
 * chroot) for the caller to go mount by mount. The other flags of each
 * mount are left as they are. */
static int all_read_only(void)
{
#ifdef SYS_mount_setattr
    struct {
        uint64_t attr_set, attr_clr, propagation, userns_fd;
    } attr = {.attr_set = BOX_MOUNT_ATTR_RDONLY | BOX_MOUNT_ATTR_NODEV};
    return (int)syscall(SYS_mount_setattr, -1, "/", BOX_AT_RECURSIVE, &attr, sizeof(attr));
#else
    errno = ENOSYS;
    return -1;
#endif
}

int box_read_mountinfo(struct mountinfo *mi, char *err, size_t errlen)
{
    int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot read /proc/self/mountinfo: %s", strerror(errno));
        return -1;
    }
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    int rc = -1;
    if (buf == NULL) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (;;) {
        if (n == cap) {
            if (cap >= MOUNTINFO_MAX_BYTES)
                break;
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL)
                break;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = r == 0 ? 0 : -1;
            break;
        }
        n += (size_t)r;
    }
    close(fd);
    char perr[256];
    if (rc < 0 || mountinfo_parse(buf, n, mi, perr, sizeof(perr)) < 0) {
        snprintf(err, errlen, "cannot parse /proc/self/mountinfo: %s",
                 rc < 0 ? "read failed or too large" : perr);
        free(buf);
        mountinfo_free(mi);
        return -1;
    }
    free(buf);
    return 0;
}

/* mkdir -p <path> (directories) and, when !<dir>, an empty file at the end.
 * The file is made with O_EXCL, which opens nothing already there: in a
 * folder another process can write, a FIFO put at the path since the
 * caller found it missing would make open() wait for a reader for ever
 * (and a link would be followed); what is there is left to the bind,
 * which covers it, or fails on a link. */
static int make_target(const char *path, bool dir)
{
    char tmp[4096];
    size_t n = strlen(path);
    if (n >= sizeof(tmp))
        return -1;
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i < n; i++) {
        if (tmp[i] != '/')
            continue;
        tmp[i] = '\0';
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
            return -1;
        tmp[i] = '/';
    }
    if (dir)
        return mkdir(path, 0755) < 0 && errno != EEXIST ? -1 : 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return errno == EEXIST ? 0 : -1;
    close(fd);
    return 0;
}

/* The box's /dev, as bubblewrap's --dev builds it: a tmpfs holding binds of
 * the host's harmless devices, a devpts instance of its own (when the
 * kernel allows one here), the private /dev/shm and the usual links. The
 * host's kmsg, kvm, loop, fuse, disks and the rest are not there. */
static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
#define DEV_NODES (sizeof(dev_nodes) / sizeof(dev_nodes[0]))

/* Opens the host's devices (before /dev is covered); -1 for one missing. */
static void dev_open(int fds[DEV_NODES])
{
    for (size_t i = 0; i < DEV_NODES; i++) {
        char p[32];
        snprintf(p, sizeof(p), "/dev/%s", dev_nodes[i]);
        fds[i] = box_open_nofollow(p);
        struct stat st;
        if (fds[i] >= 0 && (fstat(fds[i], &st) < 0 || !S_ISCHR(st.st_mode))) {
            close(fds[i]);
            fds[i] = -1;
        }
    }
}

static int dev_setup(const int fds[DEV_NODES], char *err, size_t errlen)
{
    if (mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") < 0) {
        snprintf(err, errlen, "cannot mount a private /dev: %s", strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < DEV_NODES; i++) {
        if (fds[i] < 0)
            continue;
        char p[32], src[64];
        snprintf(p, sizeof(p), "/dev/%s", dev_nodes[i]);
        snprintf(src, sizeof(src), "/proc/self/fd/%d", fds[i]);
        if (make_target(p, false) < 0 || mount(src, p, NULL, MS_BIND, NULL) < 0 ||
            remount(p, true, false) < 0) {
            snprintf(err, errlen, "cannot bind %s in the box: %s", p, strerror(errno));
            return -1;
        }
    }
    static const char *const links[][2] = {{"/proc/self/fd", "/dev/fd"},
                                           {"/proc/self/fd/0", "/dev/stdin"},
                                           {"/proc/self/fd/1", "/dev/stdout"},
                                           {"/proc/self/fd/2", "/dev/stderr"}};
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
        if (symlink(links[i][0], links[i][1]) < 0) {
            snprintf(err, errlen, "cannot link %s in the box: %s", links[i][1], strerror(errno));
            return -1;
        }
    if (mkdir("/dev/shm", 01777) < 0 || mkdir("/dev/pts", 0755) < 0) {
        snprintf(err, errlen, "cannot make /dev/shm and /dev/pts in the box: %s", strerror(errno));
        return -1;
    }
    /* a devpts of its own: ptys for the command, none of the host's */
    if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC | MS_RDONLY,
              "newinstance,ptmxmode=0666,mode=0620") == 0 &&
        symlink("pts/ptmx", "/dev/ptmx") < 0) {
        snprintf(err, errlen, "cannot link /dev/ptmx in the box: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static int cmp_ops(const void *a, const void *b)
{
    const struct op *x = a, *y = b;
    if (x->depth != y->depth)
        return x->depth < y->depth ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order ? 1 : 0;
}

static size_t depth_of(const char *p)
{
    size_t d = 0;
    for (; *p != '\0'; p++)
        d += *p == '/';
    return d;
}

/* Whether <path> lies below /proc, where the box's own /proc goes once the
 * view is built (box_mount_proc()): a --hide there is applied then, on the
 * box's /proc, not on the host's one it covers. */
static bool below_proc(const char *path)
{
    return strncmp(path, "/proc/", 6) == 0;
}

/* <path> hidden as --hide shows it: a directory becomes an empty
 * read-only tmpfs, anything else /dev/null, read-only. An error names
 * the path after <what> ("--hide "). */
static int cover_path(const char *what, const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return 0; /* not visible in the box: nothing to hide */
    int rc;
    if (S_ISDIR(st.st_mode))
        rc = mount_on("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
                      "mode=0755,size=4k");
    else
        rc = mount_on("/dev/null", path, NULL, MS_BIND, NULL) == 0
                 ? remount_nofollow(path, true, false)
                 : -1;
    if (rc < 0) {
        box_path_error(err, errlen, what, path, "", strerror(errno));
        return -1;
    }
    return 0;
}

static int hide_path(const char *path, char *err, size_t errlen)
{
    return cover_path("--hide ", path, err, errlen);
}

static int apply_op(const struct op *o, char *err, size_t errlen)
{
    struct stat st;
    if (o->kind == BOX_PATH_HIDE && below_proc(o->path))
        return 0; /* on the box's /proc, by box_mount_proc() */
    if (o->fd < 0)
        return 0; /* an optional path that does not exist */
    if (o->kind == BOX_PATH_HIDE)
        return hide_path(o->path, err, errlen);
    if (stat(o->path, &st) < 0 && make_target(o->path, o->is_dir) < 0) {
        box_path_error(err, errlen, o->kind == BOX_PATH_RW ? "--rw " : "--ro ", o->path,
                       ": cannot make it in the box", strerror(errno));
        return -1;
    }
    char src[64];
    snprintf(src, sizeof(src), "/proc/self/fd/%d", o->fd);
    bool ro = o->kind == BOX_PATH_RO || o->host_ro;
    if (mount_on(src, o->path, NULL, MS_BIND | MS_REC, NULL) < 0 ||
        remount_nofollow(o->path, ro, o->host_nodev) < 0) {
        box_path_error(err, errlen, o->kind == BOX_PATH_RW ? "--rw " : "--ro ", o->path, "",
                       strerror(errno));
        return -1;
    }
    return 0;
}

/* Whether the command can never reach the mount on <mount_point>: the
 * path does not lead to it (covered, moved or deleted), or a directory on
 * the way denies the init its search (EACCES: the box's uid has no access
 * to it, and the user namespace's capabilities do not apply to a
 * directory whose group it does not map) and is not the box's own. One
 * the box's uid owns, the command can chmod() open again where it is
 * writable (an agent makes it 000 in one run; in the next, step 2 cannot
 * reach the mount below it to remount it read-only), so a mount behind
 * it counts as reachable, whatever mount the directory is on. In a user
 * namespace an owner it does not map reads as the overflow uid (nobody):
 * a box run as nobody takes such a directory for its own, and fails. */
static bool out_of_reach(const char *mount_point)
{
    struct stat st;
    if (stat(mount_point, &st) == 0)
        return false;
    if (errno != EACCES)
        return true;
    int in;
    int fd = walk_nofollow(mount_point, &in);
    bool blocked = fd < 0 && errno == EACCES && in >= 0;
    bool others = blocked && fstat(in, &st) == 0 && st.st_uid != geteuid();
    if (fd >= 0)
        close(fd);
    if (in >= 0)
        close(in);
    return others;
}

/* The kernel's file systems whose every mount shows the host, whatever
 * it is mounted on, and whose home the box gives one of its own: a proc
 * file system shows the processes of the PID namespace it was mounted in
 * (their command lines, a secret passed as an argument) and, through a
 * process's net/, the sockets of its network namespace; a sysfs, in
 * class/net and the net folders of devices/, the interfaces of the
 * network namespace it was mounted in (the host's: their MAC addresses
 * and counters). The box's /proc and /sys are its own (box_mount_proc(),
 * box_mount_sysfs()); one mounted elsewhere (a chroot's /srv/chroot/proc
 * or /srv/chroot/sys, a container's rootfs/proc or rootfs/sys), or brought
 * along below a path of step 4 by its recursive bind, is the host's, and
 * read-only it is still readable. One at home is let be: the box's own, or
 * the host's /sys where the kernel refused the box a sysfs, which
 * box_mount_sysfs() warns of. */
struct host_fs {
    const char *fstype; /* as mountinfo names it, and the errors the mount */
    const char *home;   /* where the box has its own */
    long magic;         /* statfs()'s f_type <linux/magic.h> */
};

static const struct host_fs host_fss[] = {
    {"proc", "/proc", 0x9fa0 /* PROC_SUPER_MAGIC */},
    {"sysfs", "/sys", BOX_SYSFS_MAGIC},
};
#define HOST_FSS (sizeof(host_fss) / sizeof(host_fss[0]))

/* Whether <path> is <home> or lies below it. */
static bool at_or_below(const char *path, const char *home)
{
    size_t n = strlen(home);
    return strncmp(path, home, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* The kind of <e> when it is such a mount of the host that the box's view
 * would still show (not its own at home or below, where the box's covers
 * the host's, and not covered), or NULL. */
static const struct host_fs *host_fs_of(const struct mountinfo *mi, const struct mountinfo_entry *e)
{
    for (size_t k = 0; k < HOST_FSS; k++)
        if (strcmp(e->fstype, host_fss[k].fstype) == 0)
            return at_or_below(e->mount_point, host_fss[k].home) || mountinfo_is_covered(mi, e)
                       ? NULL
                       : &host_fss[k];
    return NULL;
}

/* Whether <path>, reached without following a link, is on a file system
 * of <fs>'s kind: 1, 0, or -1 with errno when it cannot be reached. A
 * mount's point can lead to another mount than the one mountinfo lists
 * there: a bind of a folder above it (the working directory's, recursive)
 * put a copy of it on top, by a path mountinfo does not call covered. */
static int shows_fs(const char *path, const struct host_fs *fs)
{
    int fd = box_open_nofollow(path);
    if (fd < 0)
        return -1;
    struct statfs sf;
    int rc = fstatfs(fd, &sf) < 0 ? -1 : sf.f_type == fs->magic;
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Step 4's last part: the path of each such proc or sysfs mount that
 * leads to a file system of its kind is covered as a --hide path is (an
 * empty read-only folder; /dev/null for one on a file), after the binds
 * that may bring one along, on top of any --ro or --hide path on or below
 * it. One below another is covered with it: its path, leading into the
 * empty folder now, finds nothing. Then none may be left that the command
 * can reach (one moved by a rename above it since mountinfo was read, or
 * one whose path the init cannot walk where the command may): the set-up
 * fails, naming it. */
static int cover_host_proc_and_sysfs(char *err, size_t errlen)
{
    struct mountinfo mi;
    if (box_read_mountinfo(&mi, err, errlen) < 0)
        return -1;
    int rc = 0;
    char what[64];
    for (size_t i = 0; i < mi.n && rc == 0; i++) {
        const struct host_fs *fs = host_fs_of(&mi, &mi.v[i]);
        if (fs == NULL || shows_fs(mi.v[i].mount_point, fs) != 1)
            continue;
        snprintf(what, sizeof(what), "cannot cover the host's %s mount ", fs->fstype);
        rc = cover_path(what, mi.v[i].mount_point, err, errlen);
    }
    mountinfo_free(&mi);
    if (rc < 0 || box_read_mountinfo(&mi, err, errlen) < 0)
        return -1;
    for (size_t i = 0; i < mi.n && rc == 0; i++) {
        const char *mp = mi.v[i].mount_point;
        const struct host_fs *fs = host_fs_of(&mi, &mi.v[i]);
        if (fs == NULL)
            continue;
        int shown = shows_fs(mp, fs);
        if (shown == 1 || (shown < 0 && errno != ENOENT && !out_of_reach(mp))) {
            snprintf(what, sizeof(what), "the host's %s mount ", fs->fstype);
            box_path_error(err, errlen, what, mp, "", "still shown in the box");
            rc = -1;
        }
    }
    mountinfo_free(&mi);
    return rc;
}

/* Whether the mount <id> has left the box's view since mountinfo was read:
 * it is no longer listed, or is covered. Its folder removed on the host
 * (rmdir() of a mount point unmounts it in every namespace) between the
 * walk that reached it and the remount, the remount fails with EINVAL,
 * though no path in the box leads to it any more. A mountinfo that
 * cannot be read again is no answer: false. */
static bool mount_gone(unsigned id)
{
    char err[256];
    struct mountinfo mi;
    if (box_read_mountinfo(&mi, err, sizeof(err)) < 0)
        return false;
    bool gone = true;
    for (size_t i = 0; i < mi.n && gone; i++)
        if (mi.v[i].id == id)
            gone = mountinfo_is_covered(&mi, &mi.v[i]);
    mountinfo_free(&mi);
    errno = EINVAL; /* the remount's, for its message */
    return gone;
}

typedef int (*writable_fn)(const struct mountinfo_entry *e, void *arg, char *err, size_t errlen);

/* Calls <fn> for each mount of the current view that is writable and not
 * covered by another, until one returns -1. Returns 0, or -1 with a
 * message. */
static int each_writable(writable_fn fn, void *arg, char *err, size_t errlen)
{
    struct mountinfo mi;
    if (box_read_mountinfo(&mi, err, errlen) < 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < mi.n && rc == 0; i++) {
        const struct mountinfo_entry *e = &mi.v[i];
        if (mountinfo_is_writable(e) && !mountinfo_is_covered(&mi, e))
            rc = fn(e, arg, err, errlen);
    }
    mountinfo_free(&mi);
    return rc;
}

struct ops_list {
    const struct op *v;
    size_t n;
};

static int verify_one(const struct mountinfo_entry *e, void *arg, char *err, size_t errlen)
{
    const struct ops_list *ops = arg;
    /* a mount below /tmp is not the box's own: the host's are out of
     * reach below the private /tmp (ENOENT), and one below a --rw
     * path there is checked like one below any other */
    bool ok = strcmp(e->mount_point, "/tmp") == 0 || strcmp(e->mount_point, "/dev/shm") == 0 ||
              strcmp(e->mount_point, "/proc") == 0 || strcmp(e->mount_point, "/dev/pts") == 0;
    for (size_t k = 0; k < ops->n && !ok; k++)
        ok = ops->v[k].kind == BOX_PATH_RW && strcmp(ops->v[k].path, e->mount_point) == 0;
    if (!ok)
        ok = out_of_reach(e->mount_point);
    if (!ok) {
        /* names the agent may have chosen (a folder in its writable one):
         * shown as run's other paths are, so a line end forges no line */
        char *point = text_shown(e->mount_point), *fstype = text_shown(e->fstype),
             *source = text_shown(e->source);
        snprintf(err, errlen, "%s is still writable in the box (%s %s)", point, fstype, source);
        free(point);
        free(fstype);
        free(source);
        return -1;
    }
    return 0;
}

/* Step 5: a writable mount that is not one of ours is an error. */
static int verify(const struct op *ops, size_t nops, char *err, size_t errlen)
{
    struct ops_list list = {ops, nops};
    return each_writable(verify_one, &list, err, errlen);
}

int box_mounts_setup(const struct box_config *cfg, char *err, size_t errlen)
{
    size_t nops = cfg->npaths + 1;
    if (nops > MAX_OPS) {
        snprintf(err, errlen, "too many --ro/--rw/--hide paths (at most %d)", MAX_OPS - 8);
        return -1;
    }
    struct op *ops = calloc(nops, sizeof(*ops));
    if (ops == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = -1;
    int dev_fds[DEV_NODES];
    for (size_t i = 0; i < DEV_NODES; i++)
        dev_fds[i] = -1;
    ops[0] = (struct op){.kind = BOX_PATH_RW, .path = cfg->cwd, .fd = -1};
    for (size_t i = 0; i < cfg->npaths; i++)
        ops[i + 1] = (struct op){.kind = cfg->paths[i].kind, .path = cfg->paths[i].path, .fd = -1};

    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        snprintf(err, errlen, "cannot make the mounts private: %s", strerror(errno));
        goto out;
    }
    /* 0. the box's own /sys, before anything is opened below it */
    if (box_mount_sysfs(err, errlen) < 0)
        goto out;
    /* 1. open what the view needs while the host view is whole */
    for (size_t i = 0; i < nops; i++) {
        struct op *o = &ops[i];
        o->order = i;
        o->depth = depth_of(o->path);
        o->fd = box_open_nofollow(o->path);
        struct stat st;
        if (o->fd < 0 || fstat(o->fd, &st) < 0) {
            bool optional = i > 0 && cfg->paths[i - 1].optional;
            if (errno == ENOENT && (optional || o->kind == BOX_PATH_HIDE)) {
                if (o->fd >= 0)
                    close(o->fd);
                o->fd = -1;
                continue;
            }
            box_path_error(err, errlen, "", o->path, "",
                           errno == ELOOP ? "is or passes through a symbolic link (replaced "
                                            "since run checked it?)"
                                          : strerror(errno));
            goto out;
        }
        o->is_dir = S_ISDIR(st.st_mode);
        struct statvfs sv;
        bool got = fstatvfs(o->fd, &sv) == 0;
        o->host_ro = got && (sv.f_flag & ST_RDONLY);
        o->host_nodev = got && (sv.f_flag & ST_NODEV);
    }
    qsort(ops, nops, sizeof(*ops), cmp_ops);
    /* among ops on the same path the last wins and covers the others:
     * mounted too, each recursive bind would copy the ones stacked there
     * before it (2^k mounts for a path given k times) */
    for (size_t i = 0; i + 1 < nops; i++)
        for (size_t k = i + 1; k < nops && ops[k].depth == ops[i].depth && ops[i].fd >= 0; k++)
            if (strcmp(ops[k].path, ops[i].path) == 0) {
                close(ops[i].fd);
                ops[i].fd = -1;
            }
    dev_open(dev_fds);

    /* 2. everything read-only: in one call where the kernel has it, else
     * mount by mount as mountinfo names them. A mount covered by another
     * is passed over: no path leads to it (its path leads into the mount
     * on top, remounted in its turn; where that holds a folder of the
     * same name, to no mount's root, and the remount failed with EINVAL),
     * and step 5 lets it be. Each is reached one folder at a time, as the
     * paths of the view are: a mount point longer than PATH_MAX, which
     * the command can reach as well, failed the remount whole
     * (ENAMETOOLONG), and a link put on the way by another process since
     * mountinfo was read fails it (ELOOP), where it led to another mount. */
    struct mountinfo mi = {0};
    if (all_read_only() < 0 && box_read_mountinfo(&mi, err, errlen) < 0)
        goto out;
    for (size_t i = 0; i < mi.n; i++) {
        const char *mp = mi.v[i].mount_point;
        if (mountinfo_is_covered(&mi, &mi.v[i]))
            continue;
        if (remount_nofollow(mp, true, true) < 0 && errno != ENOENT && errno != EACCES &&
            !(errno == EINVAL && mount_gone(mi.v[i].id))) {
            box_path_error(err, errlen, "cannot remount ", mp, " read-only", strerror(errno));
            mountinfo_free(&mi);
            goto out;
        }
    }
    mountinfo_free(&mi);

    /* 3. private /tmp, /dev and /dev/shm, bounded: each would otherwise
     * take up to half the machine's memory, and the two of them all of it */
    char tmp_opts[64];
    snprintf(tmp_opts, sizeof(tmp_opts), "mode=1777,size=%s", cfg->tmp_size);
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp_opts) < 0) {
        snprintf(err, errlen, "cannot mount a private /tmp: %s", strerror(errno));
        goto out;
    }
    if (dev_setup(dev_fds, err, errlen) < 0)
        goto out;
    if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, tmp_opts) < 0) {
        snprintf(err, errlen, "cannot mount a private /dev/shm: %s", strerror(errno));
        goto out;
    }

    /* 4. the working directory, --rw, --ro, --hide */
    for (size_t i = 0; i < nops; i++)
        if (apply_op(&ops[i], err, errlen) < 0)
            goto out;
    if (cover_host_proc_and_sysfs(err, errlen) < 0)
        goto out;

    /* /dev itself read-only once the paths below it are in place */
    if (mount(NULL, "/dev", NULL, MS_REMOUNT | MS_NOSUID | MS_NOEXEC | MS_RDONLY,
              "mode=0755,size=64k") < 0) {
        snprintf(err, errlen, "cannot remount /dev read-only: %s", strerror(errno));
        goto out;
    }

    /* 5. nothing else writable */
    rc = verify(ops, nops, err, errlen);
out:
    for (size_t i = 0; i < DEV_NODES; i++)
        if (dev_fds[i] >= 0)
            close(dev_fds[i]);
    for (size_t i = 0; i < nops; i++)
        if (ops[i].fd >= 0)
            close(ops[i].fd);
    free(ops);
    return rc;
}

int box_mount_proc(const struct box_config *cfg, char *err, size_t errlen)
{
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, NULL) < 0) {
        snprintf(err, errlen, "cannot mount a private /proc: %s", strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < cfg->npaths; i++)
        if (cfg->paths[i].kind == BOX_PATH_HIDE && below_proc(cfg->paths[i].path) &&
            hide_path(cfg->paths[i].path, err, errlen) < 0)
            return -1;
    return 0;
}

struct fd_fn {
    int (*fn)(int fd, void *arg);
    void *arg;
};

static int open_one(const struct mountinfo_entry *e, void *arg, char *err, size_t errlen)
{
    const struct fd_fn *f = arg;
    int fd = box_open_nofollow(e->mount_point);
    if (fd < 0)
        return 0; /* out of the command's reach (verify() checked why) */
    int rc = f->fn(fd, f->arg);
    if (rc < 0)
        box_path_error(err, errlen, "cannot allow writes below ", e->mount_point, "",
                       strerror(errno));
    close(fd);
    return rc;
}

int box_each_writable_mount(int (*fn)(int fd, void *arg), void *arg, char *err, size_t errlen)
{
    struct fd_fn f = {fn, arg};
    return each_writable(open_one, &f, err, errlen);
}
