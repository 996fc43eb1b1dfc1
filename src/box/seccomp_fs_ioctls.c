/* seccomp_fs_ioctls: the file system ioctls that would let the command of
 * a box reach past its read-only mounts and hidden paths.
 *
 * Each of these acts on the file system as a whole, or on what it holds
 * below the descriptor it is given, and is checked against the owner of a
 * file or key only, never the mount the descriptor was opened on: a box
 * started as root owns the host's root-owned files and keys, and a
 * descriptor opened read-only on a read-only mount of the box did.
 *
 * btrfs snapshots (BTRFS_IOC_SNAP_CREATE, BTRFS_IOC_SNAP_CREATE_V2): the
 * owner of a subvolume may snapshot it with no capability
 * (btrfs_ioctl_snap_create(): inode_owner_or_capable() on the source) into
 * a folder the caller can write; the snapshot holds the whole subvolume as
 * the file system has it, so what the box covers below the source (a
 * --hide folder, a file replaced by /dev/null) came back, readable, in the
 * copy: a root box snapshotted the subvolume its project lies in (/home)
 * into the project and read its user's hidden ~/.ssh there. EPERM, what a
 * caller who does not own the source gets. Creating, listing and deleting
 * subvolumes stay: they copy nothing that was hidden.
 *
 * fscrypt keys (FS_IOC_ADD_ENCRYPTION_KEY, FS_IOC_REMOVE_ENCRYPTION_KEY,
 * FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS): the user who added a key to a
 * file system's keyring removes it through any descriptor on that file
 * system, and the folders it unlocked are locked again: a root box locked
 * the host's encrypted folders (root's keys) through a read-only mount. The
 * keyring calls are refused already (seccomp.c); these are the file
 * systems' keyrings. EOPNOTSUPP, a file system without encryption; the
 * key's status and a folder's policy can still be read.
 *
 * Each request is compared in its low 32 bits (the kernel reads an
 * unsigned int). The numbers are those of <linux/btrfs.h> and
 * <linux/fscrypt.h>, written out: neither header is on every build host
 * (fscrypt's key ioctls came with Linux 5.4). */
#include <errno.h>
#include <seccomp.h>

#include "box/box_int.h"

static const struct {
    unsigned request;
    int errno_value;
} fs_refused[] = {
    {0x50009401u, EPERM},      /* BTRFS_IOC_SNAP_CREATE: _IOW(0x94, 1, 4096 bytes) */
    {0x50009417u, EPERM},      /* BTRFS_IOC_SNAP_CREATE_V2: _IOW(0x94, 23, 4096 bytes) */
    {0xc0506617u, EOPNOTSUPP}, /* FS_IOC_ADD_ENCRYPTION_KEY: _IOWR('f', 23, 80 bytes) */
    {0xc0406618u, EOPNOTSUPP}, /* FS_IOC_REMOVE_ENCRYPTION_KEY: _IOWR('f', 24, 64 bytes) */
    {0xc0406619u, EOPNOTSUPP}, /* FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS: _IOWR('f', 25, 64) */
};

int box_refuse_fs_ioctls(scmp_filter_ctx ctx)
{
    int rc = 0;
    for (size_t i = 0; i < sizeof(fs_refused) / sizeof(fs_refused[0]) && rc == 0; i++) {
        const struct scmp_arg_cmp is_req = {.arg = 1,
                                            .op = SCMP_CMP_MASKED_EQ,
                                            .datum_a = 0xffffffffu,
                                            .datum_b = fs_refused[i].request};
        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(fs_refused[i].errno_value), SCMP_SYS(ioctl),
                                    1, &is_req);
    }
    return rc;
}
