/* seccomp: what the command of a box may no longer do.
 *
 * Host unix sockets: a seccomp filter cannot read the path a connect()
 * names (it is a pointer into memory the process can change after the
 * check), and a mount view cannot be sure to cover every socket file on
 * the host (they can appear anywhere the host writes, at any time). So the
 * command may not create AF_UNIX sockets at all: socket(AF_UNIX, ...)
 * fails with EACCES, whatever the upper 32 bits of the domain argument hold
 * (the kernel ignores them). socketpair() stays allowed for stream and
 * seqpacket sockets (they name no address and cannot be reconnected; Node
 * and Python spawn children through them), but not for any other type:
 * a datagram socket can sendto() any socket path, and AF_UNIX makes
 * SOCK_RAW a datagram socket (EACCES). Abstract sockets are per network
 * namespace so the host's are out of reach anyway, and the relay that
 * carries the proxy traffic to the gateway's unix socket runs in the box's
 * init, outside the filter. io_uring is refused too (it can create sockets
 * without the socket syscall).
 *
 * Other socket families: only AF_INET, AF_INET6 and AF_NETLINK (and AF_UNIX
 * with --allow-unix) may be created; AF_VSOCK would reach the services of
 * a VM host, AF_PACKET, AF_ALG, AF_BLUETOOTH and the rest are kernel attack
 * surface the command has no use for (EAFNOSUPPORT, for socket() and
 * socketpair()), and so is AF_PACKET by its obsolete spelling,
 * socket(AF_INET, SOCK_PACKET). Of netlink, NETLINK_NETFILTER and
 * NETLINK_XFRM are refused too (EPROTONOSUPPORT): they answer only a caller
 * with CAP_NET_ADMIN, which the command has only in a network namespace of
 * its own (refuse_admin_only_netlink()). --allow-unix lifts the AF_UNIX and
 * socketpair() rules only.
 *
 * Cgroups: clone3() fails with ENOSYS (the C library falls back to
 * clone()): its CLONE_INTO_CGROUP would start a child in any cgroup of the
 * host whose cgroup.procs the command's user owns, whatever the mount.
 *
 * userfaultfd() fails with ENOSYS: exploits' tool for widening a race in
 * the kernel, of no use to the command.
 *
 * Kernel keyrings: add_key(), request_key() and keyctl() fail with ENOSYS
 * (the user keyring of a root box is the host root's).
 *
 * Process priorities: setpriority(PRIO_PGRP, 0) and ioprio_set(
 * IOPRIO_WHO_PGRP, 0), which name the caller's process group, run's, fail
 * with EPERM (refuse_group_priority()).
 *
 * Mounts: every call that makes, attaches, changes or removes one fails
 * with EPERM, in the namespaces the command may make too (seccomp_mounts.c:
 * a cgroup file system of its own would write the host's cgroups).
 *
 * File system ioctls checked against ownership only, whatever the mount
 * (seccomp_fs_ioctls.c): btrfs snapshots fail with EPERM (one of a
 * subvolume the command owns copies what the box hides below it into a
 * folder it can write), fscrypt's key ioctls with EOPNOTSUPP (removing a
 * key root added locks the host's encrypted folders).
 *
 * bpf() fails with EPERM: a map pinned in the host's bpf file system opens
 * by its path whatever the mount, and its descriptor writes the host's map.
 *
 * perf_event_open() of a whole CPU (pid -1) or of a cgroup
 * (PERF_FLAG_PID_CGROUP) fails with EPERM (refuse_system_wide_perf()).
 *
 * The terminal: ioctl(TIOCSTI), ioctl(TIOCLINUX), the line discipline's
 * ioctl(TIOCSETD) and, for a virtual console, the ioctls that change what
 * its keys type (the key map, dead keys, keyboard mode, lock flags), what
 * its screen shows (mode, font, character maps, palette, lights) or which
 * console is shown fail with EPERM (util/seccomp_tty.h), so the command cannot
 * type into the terminal it shares with the user's shell, now or once run
 * exits, nor leave it in a state the user's shell then runs in. Reads
 * stay allowed.
 *
 * Set-user-ID and set-group-ID files: a file's owner needs no capability
 * to set S_ISUID or S_ISGID on it, and the host's own mounts of the
 * writable paths have no nosuid, so a root box could leave a root-owned
 * set-user-ID program for any local user to run as root (and any box, one
 * that runs as its user). Every call that would put either bit on a file
 * fails with EPERM: chmod(), fchmod(), fchmodat(), fchmodat2(), creat(),
 * mknod(), mknodat(), and open() and openat() that create (O_CREAT or
 * O_TMPFILE). openat2() reads its mode from memory the filter cannot
 * check, so it fails with ENOSYS, as on a kernel before 5.6.
 *
 * Leases: the owner of a file (root, for every root-owned file) may take
 * a read lease on a descriptor opened read-only, and from then on every
 * process that opens the file for writing or truncates it waits until the
 * holder lets go or the kernel's lease-break-time (45 s) runs out, again
 * at each new lease: through a read-only mount the command could stall the
 * host's daemons. fcntl(F_SETLEASE) fails with EACCES (what the kernel
 * answers a caller who may not take a lease); F_GETLEASE still answers.
 * fanotify's permission events would stall opens the same way, but
 * fanotify_init() of those classes needs CAP_SYS_ADMIN, which the command
 * has not (its notification classes, as inotify and dnotify's F_NOTIFY,
 * only watch what the command may read). flock() and fcntl() locks stay:
 * SQLite, git and pip need them in the writable paths, the filter cannot
 * tell which file a descriptor names, and they hold up only processes that
 * take the same lock.
 *
 * The init: once the command's process is forked, the init that relays
 * the command's connections lets go of every capability but the one its
 * relay needs (box_init_let_go()); it is not dumpable already. */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/netlink.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "box/box_int.h"
#include "util/seccomp_load.h"
#include "util/seccomp_nr.h"
#include "util/seccomp_tty.h"

/* Drops every capability but those of <keep> (a mask of 1 << CAP_*) from
 * the bounding set (so that an execve() as root regains no other), the
 * ambient set, and the effective, permitted and inheritable sets. */
static int drop_capabilities(uint64_t keep, char *err, size_t errlen)
{
    for (int cap = 0; cap <= 63; cap++) {
        if ((keep >> cap) & 1)
            continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
            if (errno == EINVAL)
                break; /* past the last capability this kernel knows */
            snprintf(err, errlen, "cannot drop capability %d from the bounding set: %s", cap,
                     strerror(errno));
            return -1;
        }
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) {
        snprintf(err, errlen, "cannot clear the ambient capabilities: %s", strerror(errno));
        return -1;
    }
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    for (int i = 0; i < 2; i++)
        data[i].effective = data[i].permitted = (uint32_t)(keep >> (32 * i));
    if (syscall(SYS_capset, &hdr, data) < 0) {
        snprintf(err, errlen, "cannot drop capabilities: %s", strerror(errno));
        return -1;
    }
    return 0;
}

int box_init_let_go(char *err, size_t errlen)
{
    if (drop_capabilities(1ULL << CAP_DAC_OVERRIDE, err, errlen) < 0)
        return -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        snprintf(err, errlen, "cannot set no_new_privs: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* Socket families the command may use: IP (through the relay, or nothing:
 * the box's network has only its loopback) and netlink (the box's own
 * interfaces and routes). Every other family below BOX_AF_LIMIT is refused;
 * the kernel refuses those at or above its AF_MAX (46 in Linux 6.x) itself. */
#define BOX_AF_LIMIT 64

static bool family_allowed(unsigned fam, bool allow_unix)
{
    return fam == AF_INET || fam == AF_INET6 || fam == AF_NETLINK || (allow_unix && fam == AF_UNIX);
}

/* socket() and socketpair() with a refused family in the low 32 bits of the
 * domain (the kernel reads it as an int: an EQ on all 64 bits would let
 * 0x100000028 through, which the kernel takes for AF_VSOCK). AF_UNIX is
 * EACCES (a policy, not a missing feature), the rest EAFNOSUPPORT. */
static int refuse_families(scmp_filter_ctx ctx, int sys, bool allow_unix)
{
    int rc = 0;
    for (unsigned fam = 0; fam < BOX_AF_LIMIT && rc == 0; fam++) {
        if (family_allowed(fam, allow_unix) || (sys == SCMP_SYS(socketpair) && fam == AF_UNIX))
            continue;
        const struct scmp_arg_cmp is_fam = {
            .arg = 0, .op = SCMP_CMP_MASKED_EQ, .datum_a = 0xffffffffu, .datum_b = fam};
        int e = fam == AF_UNIX ? EACCES : EAFNOSUPPORT;
        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(e), sys, 1, &is_fam);
    }
    return rc;
}

/* socket(AF_INET, SOCK_PACKET): the kernel still takes this obsolete
 * spelling for socket(AF_PACKET, ...) (__sock_create()), which the rule on
 * the family does not see. In the box's network namespace the command
 * lacks CAP_NET_RAW (EPERM), but in one of its own, under a user namespace
 * it makes, it has it, and the socket was made: AF_PACKET's code, kernel
 * attack surface the box refuses, within reach. EAFNOSUPPORT, as
 * AF_PACKET itself; the type compared in the bits the kernel reads it from
 * (SOCK_TYPE_MASK: above them SOCK_CLOEXEC and SOCK_NONBLOCK). */
static int refuse_inet_packet(scmp_filter_ctx ctx)
{
    const struct scmp_arg_cmp cmp[2] = {
        {.arg = 0, .op = SCMP_CMP_MASKED_EQ, .datum_a = 0xffffffffu, .datum_b = AF_INET},
        {.arg = 1, .op = SCMP_CMP_MASKED_EQ, .datum_a = 0xf, .datum_b = SOCK_PACKET},
    };
    return seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 2, cmp);
}

/* Netlink protocols whose every message needs CAP_NET_ADMIN over the
 * socket's network namespace (nfnetlink_rcv(), xfrm_user_rcv_msg()): in
 * the box's own network the command has no capability, and nothing it
 * could send them would be answered but EPERM. In a network namespace of
 * its own, under a user namespace it makes, it holds CAP_NET_ADMIN, and
 * nf_tables and the IPsec transforms are code it reaches with every byte
 * chosen (most of the kernel exploits that start in an unprivileged user
 * namespace go through nf_tables) to configure a network that leads
 * nowhere. The socket is refused as a kernel without them would
 * (EPROTONOSUPPORT), the protocol compared in the low 32 bits the kernel
 * reads it from. NETLINK_ROUTE (addresses and routes: glibc's
 * getaddrinfo() reads them, `ip addr` lists them), NETLINK_SOCK_DIAG
 * (`ss`), NETLINK_GENERIC, NETLINK_AUDIT and the others are let be. */
static const unsigned admin_only_netlink[] = {NETLINK_NETFILTER, NETLINK_XFRM};

static int refuse_admin_only_netlink(scmp_filter_ctx ctx)
{
    int rc = 0;
    for (size_t i = 0; i < sizeof(admin_only_netlink) / sizeof(admin_only_netlink[0]) && rc == 0;
         i++) {
        const struct scmp_arg_cmp cmp[2] = {
            {.arg = 0, .op = SCMP_CMP_MASKED_EQ, .datum_a = 0xffffffffu, .datum_b = AF_NETLINK},
            {.arg = 2,
             .op = SCMP_CMP_MASKED_EQ,
             .datum_a = 0xffffffffu,
             .datum_b = admin_only_netlink[i]},
        };
        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), SCMP_SYS(socket), 2, cmp);
    }
    return rc;
}

/* The bits the command may not put on a file. Each is a rule of its own
 * (seccomp ANDs the comparisons of one rule; the rules of a call are ORed).
 * A bit is tested with a mask of itself, so whatever else the argument
 * holds, in its upper 32 bits too, does not matter: the kernel reads a
 * mode as a umode_t (16 bits) and compares nothing above these. */
static const unsigned setid_bits[] = {S_ISUID, S_ISGID};

/* <sys> with S_ISUID or S_ISGID in its mode argument <mode_arg> fails with
 * EPERM. */
static int refuse_setid_mode(scmp_filter_ctx ctx, int sys, unsigned mode_arg)
{
    int rc = 0;
    for (size_t i = 0; i < sizeof(setid_bits) / sizeof(setid_bits[0]) && rc == 0; i++) {
        const struct scmp_arg_cmp has_bit = {.arg = mode_arg,
                                             .op = SCMP_CMP_MASKED_EQ,
                                             .datum_a = setid_bits[i],
                                             .datum_b = setid_bits[i]};
        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), sys, 1, &has_bit);
    }
    return rc;
}

/* open() or openat() (<sys>, its flags in argument <flags_arg> and its mode
 * in the next) fails with EPERM when it may create a file and the mode holds
 * S_ISUID or S_ISGID. The kernel reads the mode only when the flags hold
 * O_CREAT or __O_TMPFILE (build_open_how()): glibc passes 0 otherwise, but
 * other C libraries and languages pass whatever they hold, so a set-ID
 * mode without those flags, which creates nothing, is let through. The
 * kernel's __O_TMPFILE is O_TMPFILE without O_DIRECTORY (glibc's
 * __O_TMPFILE includes O_DIRECTORY). Both flags lie in the low 32 bits the
 * kernel reads as an int; masks of one bit ignore the rest. */
static int refuse_setid_open(scmp_filter_ctx ctx, int sys, unsigned flags_arg)
{
    static const unsigned creating[] = {O_CREAT, O_TMPFILE & ~O_DIRECTORY};
    int rc = 0;
    for (size_t c = 0; c < sizeof(creating) / sizeof(creating[0]) && rc == 0; c++) {
        for (size_t i = 0; i < sizeof(setid_bits) / sizeof(setid_bits[0]) && rc == 0; i++) {
            const struct scmp_arg_cmp cmp[2] = {
                {.arg = flags_arg,
                 .op = SCMP_CMP_MASKED_EQ,
                 .datum_a = creating[c],
                 .datum_b = creating[c]},
                {.arg = flags_arg + 1,
                 .op = SCMP_CMP_MASKED_EQ,
                 .datum_a = setid_bits[i],
                 .datum_b = setid_bits[i]},
            };
            rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), sys, 2, cmp);
        }
    }
    return rc;
}

/* Set-user-ID and set-group-ID files (see the header). The mode's place in
 * each call: chmod(path, mode), fchmod(fd, mode), fchmodat(dfd, path,
 * mode), fchmodat2(dfd, path, mode, flags), creat(path, mode),
 * mknod(path, mode, dev), mknodat(dfd, path, mode, dev); open(path, flags,
 * mode), openat(dfd, path, flags, mode). Those the architecture lacks
 * (aarch64 has no chmod, creat, mknod or open) get libseccomp's
 * pseudo-numbers, whose rules match no call. The filter cannot tell a
 * directory from a file, so chmod() cannot set or keep S_ISGID on a
 * directory either. mkdir() is let be: the kernel keeps only the
 * permission and sticky bits of its mode (a directory is set-group-ID only
 * by inheriting it from its parent), and a set-group-ID directory runs
 * nothing: files created in it take its group but not the bit (only
 * directories inherit it), and no one without CAP_FSETID can set S_ISGID
 * on a file of a group they are not in (setattr_prepare()). */
static int refuse_setid(scmp_filter_ctx ctx, char *err, size_t errlen)
{
    int fchmodat2 = seccomp_call_nr("fchmodat2", err, errlen);
    if (fchmodat2 == __NR_SCMP_ERROR)
        return SECCOMP_RC_TOLD;
    const struct {
        int sys;
        unsigned mode_arg;
    } mode_calls[] = {
        {SCMP_SYS(chmod), 1}, {SCMP_SYS(fchmod), 1}, {SCMP_SYS(fchmodat), 2}, {fchmodat2, 2},
        {SCMP_SYS(creat), 1}, {SCMP_SYS(mknod), 1},  {SCMP_SYS(mknodat), 2},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof(mode_calls) / sizeof(mode_calls[0]) && rc == 0; i++) {
        rc = refuse_setid_mode(ctx, mode_calls[i].sys, mode_calls[i].mode_arg);
    }
    if (rc == 0)
        rc = refuse_setid_open(ctx, SCMP_SYS(open), 1);
    if (rc == 0)
        rc = refuse_setid_open(ctx, SCMP_SYS(openat), 2);
    /* openat2(dfd, path, how, size) takes flags and mode in a struct
     * open_how the filter cannot read (a pointer into memory the process
     * can change after the check), so it is refused whole: ENOSYS, a kernel
     * before 5.6, after which callers fall back to openat() (glibc 2.36
     * does not call it at all). */
    if (rc == 0)
        rc = seccomp_refuse_call(ctx, SCMP_ACT_ERRNO(ENOSYS), "openat2", err, errlen);
    return rc;
}

/* fcntl(fd, F_SETLEASE, ...) fails with EACCES (see the header), compared
 * in the low 32 bits of the command (the kernel reads an unsigned int);
 * fcntl64() too where the architecture has it (elsewhere libseccomp's
 * pseudo-number matches no call). */
static int refuse_leases(scmp_filter_ctx ctx)
{
    const struct scmp_arg_cmp is_setlease = {
        .arg = 1, .op = SCMP_CMP_MASKED_EQ, .datum_a = 0xffffffffu, .datum_b = F_SETLEASE};
    int rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(fcntl), 1, &is_setlease);
    if (rc == 0)
        rc =
            seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(fcntl64), 1, &is_setlease);
    return rc;
}

/* setpriority(PRIO_PGRP, 0, ...) and ioprio_set(IOPRIO_WHO_PGRP, 0, ...): 0
 * names the caller's process group, which for the command is run's (see
 * the header), found as it is, outside the box's PID namespace too: every
 * process of it the box's user owns and whose capabilities the command's
 * cover (a script's shell and what it starts, the other commands of a
 * pipeline, run itself, in a box not started as root) would be reniced or
 * put in the idle I/O class, and would stay so once the box ended. EPERM,
 * what the kernel answers for a process the caller may not change. A group
 * the command made in the box is named by its number, which the box's PID
 * namespace shows, and run's by none. */
#define BOX_IOPRIO_WHO_PGRP 2 /* <linux/ioprio.h> */

static int refuse_group_priority(scmp_filter_ctx ctx)
{
    const struct {
        int sys;
        unsigned who_pgrp;
    } calls[] = {{SCMP_SYS(setpriority), PRIO_PGRP}, {SCMP_SYS(ioprio_set), BOX_IOPRIO_WHO_PGRP}};
    int rc = 0;
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]) && rc == 0; i++) {
        const struct scmp_arg_cmp cmp[2] = {
            {.arg = 0,
             .op = SCMP_CMP_MASKED_EQ,
             .datum_a = 0xffffffffu,
             .datum_b = calls[i].who_pgrp},
            {.arg = 1, .op = SCMP_CMP_MASKED_EQ, .datum_a = 0xffffffffu, .datum_b = 0},
        };
        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), calls[i].sys, 2, cmp);
    }
    return rc;
}

/* perf_event_open(attr, pid, cpu, group_fd, flags) watching more than the
 * command's own processes: pid -1 counts (and samples: instruction
 * addresses, call chains) whatever runs on a CPU, the host's processes
 * included, and PERF_FLAG_PID_CGROUP whatever runs in a cgroup named by
 * its folder, the host's services too. Only kernel.perf_event_paranoid
 * stood in the way: at 1 or above the kernel refuses both with EACCES, at
 * 0 or below it lets any process have them. EPERM, the filter's own answer,
 * so that it is told from the kernel's. The pid is an int, compared in the
 * low 32 bits as the kernel reads it; the flags an unsigned long whose
 * every bit the kernel reads. Watching a process (pid 0, the caller's
 * own; another's only as ptrace() could reach it) stays as the kernel has
 * it. */
#define BOX_PERF_FLAG_PID_CGROUP (1u << 2) /* <linux/perf_event.h> */

static int refuse_system_wide_perf(scmp_filter_ctx ctx)
{
    const struct scmp_arg_cmp any_cpu_task = {
        .arg = 1, .op = SCMP_CMP_MASKED_EQ, .datum_a = 0xffffffffu, .datum_b = 0xffffffffu};
    int rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(perf_event_open), 1,
                                    &any_cpu_task);
    if (rc != 0)
        return rc;
    const struct scmp_arg_cmp of_cgroup = {.arg = 4,
                                           .op = SCMP_CMP_MASKED_EQ,
                                           .datum_a = BOX_PERF_FLAG_PID_CGROUP,
                                           .datum_b = BOX_PERF_FLAG_PID_CGROUP};
    return seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(perf_event_open), 1,
                                  &of_cgroup);
}

int box_seccomp_rules(scmp_filter_ctx ctx, bool allow_unix, char *err, size_t errlen)
{
    int rc = refuse_families(ctx, SCMP_SYS(socket), allow_unix);
    if (rc == 0)
        rc = refuse_families(ctx, SCMP_SYS(socketpair), allow_unix);
    if (rc == 0)
        rc = refuse_inet_packet(ctx);
    if (rc == 0)
        rc = refuse_admin_only_netlink(ctx);
    /* socketpair(): stream and seqpacket pairs only. A datagram socket can
     * sendto() any path, connected or not, and AF_UNIX turns SOCK_RAW into
     * SOCK_DGRAM, so every other type (the low 4 bits of the int; above
     * them only SOCK_CLOEXEC and SOCK_NONBLOCK) is refused. */
    for (unsigned type = 0; type <= 0xf && rc == 0 && !allow_unix; type++) {
        if (type == SOCK_STREAM || type == SOCK_SEQPACKET)
            continue;
        const struct scmp_arg_cmp is_type = {
            .arg = 1, .op = SCMP_CMP_MASKED_EQ, .datum_a = 0xf, .datum_b = type};
        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socketpair), 1, &is_type);
    }
    /* by name, not SCMP_SYS(): kernel headers older than the call (RHEL 8's
     * 4.18) give SCMP_SYS() a pseudo-number whose rule matches nothing */
    static const char *const io_uring_calls[] = {"io_uring_setup", "io_uring_enter",
                                                 "io_uring_register"};
    for (size_t i = 0; i < sizeof(io_uring_calls) / sizeof(io_uring_calls[0]) && rc == 0; i++)
        rc = seccomp_refuse_call(ctx, SCMP_ACT_ERRNO(ENOSYS), io_uring_calls[i], err, errlen);
    /* clone3(2): CLONE_INTO_CGROUP starts the child in the cgroup of a
     * folder's descriptor, checked against the owner and mode of its
     * cgroup.procs file, never the mount, so the host's cgroups, read-only
     * in the box, took the box's processes all the same: as root (their
     * owner) any cgroup of the host, out of the limits run was started
     * under (systemd-run --scope -p MemoryMax=...) or into a service's, to
     * use up its memory until its OOM killer ends the service. Its flags
     * lie in memory the filter cannot read, so the call is refused whole:
     * ENOSYS, a kernel before 5.3, on which the C library falls back to
     * clone(), which has no such flag (as Docker's default profile and the
     * gateway's lockdown do). */
    if (rc == 0)
        rc = seccomp_refuse_call(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", err, errlen);
    /* userfaultfd(2): a page fault of the process's own memory held until
     * its handler answers, which kernel exploits use to stop the kernel in
     * the middle of a copy from user memory and widen a race; any process
     * may make one for faults in user space (vm.unprivileged_userfaultfd
     * 0 still allows UFFD_USER_MODE_ONLY), and an agent has no use for it.
     * ENOSYS, a kernel without it, as Docker's default profile. */
    if (rc == 0)
        rc = seccomp_refuse_call(ctx, SCMP_ACT_ERRNO(ENOSYS), "userfaultfd", err, errlen);
    /* bpf(2): BPF_OBJ_GET opens an object pinned in a bpf file system of
     * the host's view (/sys/fs/bpf: a firewall's maps) by its path, with
     * the file's permission alone, never the mount's: the descriptor of a
     * map pinned on a read-only mount writes the host's map. EPERM, what
     * an unprivileged caller gets where unprivileged bpf is disabled. */
    if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(bpf), 0);
    if (rc == 0)
        rc = refuse_system_wide_perf(ctx);
    /* Kernel keyrings: the box joins a fresh session keyring, but the
     * user keyring (@u) belongs to the uid, and as root (no user namespace)
     * that is the host root's, with whatever tickets and keys it holds.
     * The command gets no keyring calls at all (as Docker's default
     * profile): ENOSYS, a kernel without keyrings. */
    static const int keyring_calls[] = {SCMP_SYS(add_key), SCMP_SYS(request_key), SCMP_SYS(keyctl)};
    for (size_t i = 0; i < sizeof(keyring_calls) / sizeof(keyring_calls[0]) && rc == 0; i++)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), keyring_calls[i], 0);
    if (rc == 0)
        rc = seccomp_refuse_tty_ioctls(ctx);
    if (rc == 0)
        rc = refuse_setid(ctx, err, errlen);
    if (rc == 0)
        rc = refuse_leases(ctx);
    if (rc == 0)
        rc = box_refuse_mounts(ctx, err, errlen);
    if (rc == 0)
        rc = box_refuse_fs_ioctls(ctx);
    if (rc == 0)
        rc = refuse_group_priority(ctx);
    return rc;
}

static int load_filter(bool allow_unix, char *err, size_t errlen)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == NULL) {
        snprintf(err, errlen, "seccomp: cannot initialise the filter");
        return -1;
    }
    int rc = box_seccomp_rules(ctx, allow_unix, err, errlen);
    return seccomp_load_and_release(ctx, rc, err, errlen);
}

int box_lock_down(const struct box_config *cfg, bool *landlocked, char *err, size_t errlen)
{
    if (drop_capabilities(0, err, errlen) < 0)
        return -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        snprintf(err, errlen, "cannot set no_new_privs: %s", strerror(errno));
        return -1;
    }
    int ll = box_landlock(cfg, err, errlen);
    if (ll < 0)
        return -1;
    *landlocked = ll == 0;
    if (load_filter(cfg->allow_unix, err, errlen) < 0)
        return -1;
    return 0;
}
