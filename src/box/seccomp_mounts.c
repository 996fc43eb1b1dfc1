/* seccomp_mounts: the command of a box mounts nothing, in any namespace.
 *
 * In the box's own namespaces the command has no capability, and every
 * mount call fails already. But it may make a user namespace of its own
 * (Chrome's sandbox does), with mount and cgroup namespaces, where it holds
 * every capability. The box's mounts stay locked there (read-only ones
 * cannot be made writable, covered ones not uncovered), and proc or sysfs
 * mount only as read-only as the box shows them; a cgroup file system has
 * no such rule. A cgroup namespace made in the box has for its root the
 * cgroup run runs in, the host's (a service's, a login session's, or the
 * root cgroup itself), and a cgroup or cgroup2 mount of it is writable and
 * locked by nothing: the command, as the user that owns the cgroups'
 * files (root, in a box started as root), could kill or freeze the host's
 * processes of every cgroup below (cgroup.kill, cgroup.freeze, the v1
 * freezer) or starve them (memory.max, pids.max). Landlock, where the
 * kernel has it, refuses every mount of a process it restricts; on a
 * kernel without it, nothing did. So the calls that make, attach, change
 * or remove a mount fail with EPERM, as Landlock and a caller without
 * CAP_SYS_ADMIN get: mount(), umount(), umount2(), pivot_root(), the new
 * mount API (fsopen(), fsconfig(), fsmount(), fspick(), move_mount(),
 * mount_setattr(), open_tree_attr()), and open_tree() when it clones
 * (OPEN_TREE_CLONE: a detached copy of a mount); open_tree() without it
 * opens a path as O_PATH does, and is let be. chroot() is no mount and
 * stays: Chrome's sandbox needs it in its user namespace. */
#include <errno.h>
#include <seccomp.h>

#include "box/box_int.h"
#include "util/seccomp_nr.h"

#define BOX_OPEN_TREE_CLONE 1 /* <linux/mount.h> */

int box_refuse_mounts(scmp_filter_ctx ctx, char *err, size_t errlen)
{
    /* open_tree_attr() (Linux 6.15) clones, and sets the clone's attributes
     * too, from a struct the filter cannot read: refused whole. */
    static const char *const mount_calls[] = {
        "mount",   "umount", "umount2",    "pivot_root",    "fsopen",         "fsconfig",
        "fsmount", "fspick", "move_mount", "mount_setattr", "open_tree_attr",
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof(mount_calls) / sizeof(mount_calls[0]) && rc == 0; i++) {
        rc = seccomp_refuse_call(ctx, SCMP_ACT_ERRNO(EPERM), mount_calls[i], err, errlen);
    }
    int open_tree = rc == 0 ? seccomp_call_nr("open_tree", err, errlen) : 0;
    if (open_tree == __NR_SCMP_ERROR)
        rc = SECCOMP_RC_TOLD;
    const struct scmp_arg_cmp clones = {.arg = 2,
                                        .op = SCMP_CMP_MASKED_EQ,
                                        .datum_a = BOX_OPEN_TREE_CLONE,
                                        .datum_b = BOX_OPEN_TREE_CLONE};
    if (rc == 0)
        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), open_tree, 1, &clones);
    return rc;
}
