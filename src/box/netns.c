/* netns: the namespaces of a box, its uid/gid maps and its loopback. */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "box/box_int.h"

int box_ns_flags(bool as_root)
{
    int flags =
        CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
    if (!as_root)
        flags |= CLONE_NEWUSER;
    return flags;
}

/* Tries unshare(<flags>) in a child; returns 0 or the errno it got. */
static int probe(int flags)
{
    pid_t pid = fork();
    if (pid < 0)
        return errno;
    if (pid == 0)
        _exit(unshare(flags) == 0 ? 0 : (errno & 0x7f));
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return errno;
    return WIFEXITED(st) ? WEXITSTATUS(st) : EPERM;
}

void box_ns_explain(int flags, int err_no, char *err, size_t errlen)
{
    static const struct {
        int flag;
        const char *name;
        const char *sysctl;
    } ns[] = {
        {CLONE_NEWUSER, "user", "max_user_namespaces"},
        {CLONE_NEWPID, "PID", "max_pid_namespaces"},
        {CLONE_NEWNET, "network", "max_net_namespaces"},
        {CLONE_NEWNS, "mount", "max_mnt_namespaces"},
        {CLONE_NEWIPC, "IPC", "max_ipc_namespaces"},
        {CLONE_NEWUTS, "UTS", "max_uts_namespaces"},
        {CLONE_NEWCGROUP, "cgroup", "max_cgroup_namespaces"},
    };
    int user = flags & CLONE_NEWUSER;
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        if (!(flags & ns[i].flag))
            continue;
        /* the other namespaces are created inside the user namespace */
        int e = probe(ns[i].flag == CLONE_NEWUSER ? CLONE_NEWUSER : (user | ns[i].flag));
        if (e == 0)
            continue;
        const char *how;
        if (ns[i].flag == CLONE_NEWUSER)
            how = "enable unprivileged user namespaces (sysctl -w "
                  "kernel.unprivileged_userns_clone=1 on Debian kernels, sysctl -w "
                  "user.max_user_namespaces=15000, and on Ubuntu sysctl -w "
                  "kernel.apparmor_restrict_unprivileged_userns=0), or run as root";
        else if (e == ENOSPC || e == EUSERS)
            how = NULL;
        else
            how = "run as root, or allow namespaces in this container (e.g. a seccomp profile "
                  "or --privileged for the container that runs sluice)";
        if (how == NULL)
            snprintf(err, errlen,
                     "the kernel refuses a new %s namespace (%s): the limit is reached; raise "
                     "it with sysctl -w user.%s=15000",
                     ns[i].name, strerror(e), ns[i].sysctl);
        else
            snprintf(err, errlen, "the kernel refuses a new %s namespace (%s); %s", ns[i].name,
                     strerror(e), how);
        return;
    }
    snprintf(err, errlen, "the kernel refuses the box's namespaces (clone: %s)", strerror(err_no));
}

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = strlen(text);
    ssize_t w = write(fd, text, n);
    int e = errno;
    close(fd);
    if (w != (ssize_t)n) {
        errno = w < 0 ? e : EIO;
        return -1;
    }
    return 0;
}

int box_userns_map(uid_t uid, gid_t gid, char *err, size_t errlen)
{
    char map[64];
    if (write_file("/proc/self/setgroups", "deny") < 0 && errno != ENOENT) {
        snprintf(err, errlen, "cannot deny setgroups in the user namespace: %s", strerror(errno));
        return -1;
    }
    snprintf(map, sizeof(map), "%lu %lu 1\n", (unsigned long)uid, (unsigned long)uid);
    if (write_file("/proc/self/uid_map", map) < 0) {
        snprintf(err, errlen, "cannot write the user namespace's uid map: %s", strerror(errno));
        return -1;
    }
    snprintf(map, sizeof(map), "%lu %lu 1\n", (unsigned long)gid, (unsigned long)gid);
    if (write_file("/proc/self/gid_map", map) < 0) {
        snprintf(err, errlen, "cannot write the user namespace's gid map: %s", strerror(errno));
        return -1;
    }
    return 0;
}

int box_loopback_up(char *err, size_t errlen)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "cannot bring up the loopback interface: socket: %s",
                 strerror(errno));
        return -1;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    int rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
    if (rc == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
    }
    if (rc < 0)
        snprintf(err, errlen, "cannot bring up the loopback interface: %s", strerror(errno));
    close(fd);
    return rc < 0 ? -1 : 0;
}
