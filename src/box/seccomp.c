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
 * without the socket syscall). --allow-unix loads no filter. */
#include <errno.h>
#include <linux/capability.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "box/box_int.h"

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

static int load_filter(char *err, size_t errlen)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == NULL) {
        snprintf(err, errlen, "seccomp: cannot initialise the filter");
        return -1;
    }
    /* socket(AF_UNIX, ...): the kernel reads the domain as an int, so only
     * its low 32 bits are compared (an EQ on all 64 would let
     * 0x100000001 through, which the kernel takes for AF_UNIX). */
    const struct scmp_arg_cmp is_unix = {
        .arg = 0, .op = SCMP_CMP_MASKED_EQ, .datum_a = 0xffffffffu, .datum_b = AF_UNIX};
    int rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1, &is_unix);
    /* socketpair(): stream and seqpacket pairs only. A datagram socket can
     * sendto() any path, connected or not, and AF_UNIX turns SOCK_RAW into
     * SOCK_DGRAM, so every other type (the low 4 bits of the int; above
     * them only SOCK_CLOEXEC and SOCK_NONBLOCK) is refused. */
    for (unsigned type = 0; type <= 0xf && rc == 0; type++) {
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
    if (rc == 0)
        rc = seccomp_load(ctx);
    seccomp_release(ctx);
    if (rc != 0) {
        snprintf(err, errlen, "seccomp: cannot load the filter: %s", strerror(-rc));
        return -1;
    }
    return 0;
}

int box_lock_down(bool allow_unix, char *err, size_t errlen)
{
    if (drop_capabilities(err, errlen) < 0)
        return -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        snprintf(err, errlen, "cannot set no_new_privs: %s", strerror(errno));
        return -1;
    }
    if (!allow_unix && load_filter(err, errlen) < 0)
        return -1;
    return 0;
}
