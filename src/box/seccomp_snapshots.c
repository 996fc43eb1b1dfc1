/* seccomp_snapshots: the command of a box snapshots no btrfs subvolume.
 *
 * btrfs lets the owner of a subvolume snapshot it without any capability
 * (btrfs_ioctl_snap_create(): inode_owner_or_capable() on the source),
 * into a folder the caller can write, and looks only at the destination's
 * mount: the source is opened read-only, on a read-only mount of the box
 * or not. The snapshot holds the whole subvolume as the file system has
 * it, so what the box covers below the source (a --hide folder, a file
 * replaced by /dev/null) comes back, readable, in the copy: a box started
 * as root (the owner of /home, of /) snapshotted the subvolume its
 * project lies in into the project and read its user's hidden ~/.ssh
 * there. Both forms of the request, BTRFS_IOC_SNAP_CREATE and
 * BTRFS_IOC_SNAP_CREATE_V2, fail with EPERM (what a caller who does not
 * own the source gets), compared in the low 32 bits (the kernel reads the
 * request as an unsigned int). Creating, listing and deleting subvolumes
 * stay: they copy nothing that was hidden. */
#include <errno.h>
#include <seccomp.h>

#include "box/box_int.h"

/* <linux/btrfs.h>: _IOW(BTRFS_IOCTL_MAGIC, 1, struct btrfs_ioctl_vol_args)
 * and _IOW(BTRFS_IOCTL_MAGIC, 23, struct btrfs_ioctl_vol_args_v2), both
 * structs 4096 bytes (the header is not on every build host) */
static const unsigned snapshot_requests[] = {0x50009401u, 0x50009417u};

int box_refuse_snapshots(scmp_filter_ctx ctx)
{
    int rc = 0;
    for (size_t i = 0; i < sizeof(snapshot_requests) / sizeof(snapshot_requests[0]) && rc == 0;
         i++) {
        const struct scmp_arg_cmp is_req = {.arg = 1,
                                            .op = SCMP_CMP_MASKED_EQ,
                                            .datum_a = 0xffffffffu,
                                            .datum_b = snapshot_requests[i]};
        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1, &is_req);
    }
    return rc;
}
