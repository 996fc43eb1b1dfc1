/* landlock: writes that a read-only mount does not stop.
 *
 * A read-only mount refuses to change the file system, not to write into
 * a FIFO (writing one changes nothing there): in a box showing the host's
 * /run read-only, the command could still feed any FIFO it sees, such as
 * systemd's /run/initctl, which takes runlevel changes and power-offs from
 * root. Nothing about the mounts can refuse that (nodev covers devices
 * only), and seccomp cannot see what open() opens; Landlock checks every
 * open for writing of a non-directory, FIFOs and devices included.
 *
 * The ruleset handles writing files (LANDLOCK_ACCESS_FS_WRITE_FILE),
 * making and removing them (MAKE_*, REMOVE_*), truncating them (TRUNCATE,
 * ABI 3) and reparenting them (REFER: with any ruleset in force Landlock
 * refuses to link or rename a file into another directory with EXDEV
 * unless REFER is handled and allowed, so it is allowed wherever the
 * others are). It allows them all below each mount the box leaves
 * writable, as its mountinfo shows them (the working directory, each
 * writable --rw path, /tmp, /dev/shm), below /dev (its devices and
 * terminals; /dev itself is read-only), on each --ro or --rw path that is
 * not a directory (a device or FIFO named on the command line is opened
 * as the host has it) and on the files standard input, output or error
 * are open for writing (a terminal, a log: `echo > /dev/stderr` opens
 * one again). Elsewhere the mount refuses first (EROFS) what changes the
 * file system, and Landlock what does not (EACCES). Reading and executing
 * are not handled.
 *
 * Landlock rules add up: a read-only mount below a writable one (a --ro
 * below a --rw, a read-only host mount below a --rw path) is below a rule,
 * and a FIFO there stays writable. A kernel without Landlock of ABI 2
 * (Linux 5.19) or later, or with it disabled, gets the mounts and seccomp
 * only, as before; box.c says so on standard error.
 *
 * Signals: the command stays in run's process group (the terminal's ^C and
 * ^Z reach it directly), and kill(0) signals that group as it is, outside
 * the box's PID namespace too: run, and whatever else run's caller put in
 * it (a script's shell and all it started). From ABI 6 (Linux 6.12) the
 * ruleset also scopes signals (LANDLOCK_SCOPE_SIGNAL): the command, and all
 * it starts, may signal only processes of its own ruleset's domain, the
 * box's; kill(0) still reaches those (`kill 0`, `timeout` work in the
 * box), and a signal to any other process (the box's init too) fails with
 * EPERM. Signals the kernel sends (the terminal's, SIGCHLD) are not
 * scoped, nor those sent into the box. */
#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "box/box_int.h"

/* the same numbers on every architecture */
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#ifndef SYS_landlock_add_rule
#define SYS_landlock_add_rule 445
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif

#define BOX_LANDLOCK_TRUNCATE     (1ULL << 14) /* ABI 3 */
#define BOX_LANDLOCK_SCOPE_SIGNAL (1ULL << 1)  /* ABI 6 */

/* struct landlock_ruleset_attr as of ABI 6: older kernel headers (Debian
 * 12's 6.1) have only its first field. A kernel of an older ABI takes it
 * whole as long as the fields it does not know are 0. */
struct box_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net; /* ABI 4; none handled */
    uint64_t scoped;             /* ABI 6 */
};

#define DIR_RIGHTS                                                                                 \
    (LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |                               \
     LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | \
     LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |   \
     LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM | LANDLOCK_ACCESS_FS_REFER)

struct ruleset {
    int fd;
    uint64_t dir_rights;  /* every right handled */
    uint64_t file_rights; /* those that apply to a file that is not a directory */
};

/* Allows the rights on <fd>'s file: below it for a directory. */
static int allow(int fd, void *arg)
{
    const struct ruleset *rs = arg;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -1;
    struct landlock_path_beneath_attr rule = {
        .allowed_access = S_ISDIR(st.st_mode) ? rs->dir_rights : rs->file_rights,
        .parent_fd = fd,
    };
    return (int)syscall(SYS_landlock_add_rule, rs->fd, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
}

static int allow_path(struct ruleset *rs, const char *path, bool dir_only, char *err, size_t errlen)
{
    int fd = box_open_nofollow(path);
    if (fd < 0)
        return 0; /* not in the box: nothing to allow */
    struct stat st;
    int rc = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) == dir_only ? allow(fd, rs) : 0;
    if (rc < 0)
        box_path_error(err, errlen, "cannot allow writes on ", path, "", strerror(errno));
    close(fd);
    return rc;
}

static int add_rules(const struct box_config *cfg, struct ruleset *rs, char *err, size_t errlen)
{
    if (box_each_writable_mount(allow, rs, err, errlen) < 0 ||
        allow_path(rs, "/dev", true, err, errlen) < 0)
        return -1;
    for (size_t i = 0; i < cfg->npaths; i++)
        if (cfg->paths[i].kind != BOX_PATH_HIDE &&
            allow_path(rs, cfg->paths[i].path, false, err, errlen) < 0)
            return -1;
    for (int fd = 0; fd <= 2; fd++) {
        int flags = fcntl(fd, F_GETFL);
        /* a pipe or socket is no file Landlock checks (nor takes a rule on) */
        if (flags >= 0 && (flags & O_ACCMODE) != O_RDONLY && allow(fd, rs) < 0 && errno != EBADFD) {
            snprintf(err, errlen, "cannot allow writes on standard descriptor %d: %s", fd,
                     strerror(errno));
            return -1;
        }
    }
    return 0;
}

int box_landlock(const struct box_config *cfg, char *err, size_t errlen)
{
    long abi = cfg->landlock_off ? -1
                                 : syscall(SYS_landlock_create_ruleset, NULL, 0,
                                           (unsigned)LANDLOCK_CREATE_RULESET_VERSION);
    /* ABI 1 refuses every reparenting (REFER cannot be allowed): renames
     * across folders would fail where the box documents them writable */
    if (abi < 2)
        return 1;
    struct ruleset rs = {.dir_rights = DIR_RIGHTS, .file_rights = LANDLOCK_ACCESS_FS_WRITE_FILE};
    if (abi >= 3) {
        rs.dir_rights |= BOX_LANDLOCK_TRUNCATE;
        rs.file_rights |= BOX_LANDLOCK_TRUNCATE;
    }
    struct box_ruleset_attr attr = {.handled_access_fs = rs.dir_rights,
                                    .scoped = abi >= 6 ? BOX_LANDLOCK_SCOPE_SIGNAL : 0};
    rs.fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
    if (rs.fd < 0) {
        snprintf(err, errlen, "cannot create a Landlock ruleset: %s", strerror(errno));
        return -1;
    }
    int rc = add_rules(cfg, &rs, err, errlen);
    if (rc == 0 && syscall(SYS_landlock_restrict_self, rs.fd, 0) < 0) {
        snprintf(err, errlen, "cannot apply the Landlock ruleset: %s", strerror(errno));
        rc = -1;
    }
    close(rs.fd);
    return rc;
}
