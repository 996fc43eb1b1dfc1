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
 * socketpair()). --allow-unix lifts the AF_UNIX and socketpair() rules only.
 *
 * Kernel keyrings: add_key(), request_key() and keyctl() fail with ENOSYS
 * (the user keyring of a root box is the host root's).
 *
 * The terminal: ioctl(TIOCSTI) and ioctl(TIOCLINUX) fail with EPERM, so the
 * command cannot type into the terminal it shares with the user's shell. */
#include <errno.h>
#include <linux/capability.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "box/box_int.h"
#include "util/seccomp_load.h"

static int drop_capabilities(char *err, size_t errlen)
{
    for (int cap = 0; cap <= 63; cap++) {
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
    if (syscall(SYS_capset, &hdr, data) < 0) {
        snprintf(err, errlen, "cannot drop capabilities: %s", strerror(errno));
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

static int load_filter(bool allow_unix, char *err, size_t errlen)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == NULL) {
        snprintf(err, errlen, "seccomp: cannot initialise the filter");
        return -1;
    }
    int rc = refuse_families(ctx, SCMP_SYS(socket), allow_unix);
    if (rc == 0)
        rc = refuse_families(ctx, SCMP_SYS(socketpair), allow_unix);
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
    if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(io_uring_setup), 0);
    if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(io_uring_enter), 0);
    if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(io_uring_register), 0);
    /* Kernel keyrings: the box joins a fresh session keyring, but the
     * user keyring (@u) belongs to the uid, and as root (no user namespace)
     * that is the host root's, with whatever tickets and keys it holds.
     * The command gets no keyring calls at all (as Docker's default
     * profile): ENOSYS, a kernel without keyrings. */
    static const int keyring_calls[] = {SCMP_SYS(add_key), SCMP_SYS(request_key), SCMP_SYS(keyctl)};
    for (size_t i = 0; i < sizeof(keyring_calls) / sizeof(keyring_calls[0]) && rc == 0; i++)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), keyring_calls[i], 0);
    /* The terminal: the command stays in run's session and foreground
     * process group (a terminal's ^C reaches it directly), so TIOCSTI
     * would let it push a command line into the terminal's input queue,
     * read and run, unboxed, by the user's shell once run exits
     * (bubblewrap's CVE-2017-5226); TIOCLINUX pastes a virtual console's
     * selection likewise. Both fail with EPERM, the request compared in
     * its low 32 bits (the kernel reads an unsigned int). */
    static const unsigned long tty_inject[] = {TIOCSTI, TIOCLINUX};
    for (size_t i = 0; i < sizeof(tty_inject) / sizeof(tty_inject[0]) && rc == 0; i++) {
        const struct scmp_arg_cmp is_req = {
            .arg = 1, .op = SCMP_CMP_MASKED_EQ, .datum_a = 0xffffffffu, .datum_b = tty_inject[i]};
        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1, &is_req);
    }
    return seccomp_load_and_release(ctx, rc, err, errlen);
}

int box_lock_down(bool allow_unix, char *err, size_t errlen)
{
    if (drop_capabilities(err, errlen) < 0)
        return -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        snprintf(err, errlen, "cannot set no_new_privs: %s", strerror(errno));
        return -1;
    }
    if (load_filter(allow_unix, err, errlen) < 0)
        return -1;
    return 0;
}
