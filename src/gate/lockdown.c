/* lockdown: what the gateway process may no longer do once it serves
 * (lockdown.h). */
#include "gate/lockdown.h"

#include <errno.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdbool.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/seccomp_load.h"
#include "util/seccomp_nr.h"
#include "util/seccomp_tty.h"

/* LeakSanitizer stops the world at exit with ptrace(): the test build
 * (ASan) keeps that one call, or its leak check would fail. */
#if defined(__SANITIZE_ADDRESS__)
#define LOCKDOWN_KEEP_PTRACE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOCKDOWN_KEEP_PTRACE 1
#endif
#endif

/* Refused with EPERM whatever their arguments. */
static const char *const refused_calls[] = {
    /* namespaces: the usual first step of an unprivileged kernel exploit */
    "unshare",
    "setns",
    /* the file system tree */
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "open_tree_attr", /* open_tree() with a mount's attributes (Linux 6.15) */
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    /* other processes' memory and files: each of these needs ptrace access
     * to its target, which the gateway never has a use for */
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise", /* advice on another process's memory */
    "pidfd_getfd",     /* a copy of another process's file descriptor */
    "kcmp",            /* compares other processes' files, memory, ... */
    /* kernel attack surface the gateway has no use for */
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "add_key",
    "request_key",
    "keyctl",
    /* the machine itself */
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    "iopl",
    "ioperm",
    "quotactl",
    "lookup_dcookie",
    "open_by_handle_at",
    "name_to_handle_at",
};

/* clone() flags that make a new namespace. */
static const unsigned long clone_ns_flags[] = {
    CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
    CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET,
};

/* Whether CAP_SYS_ADMIN is in the effective set: what a filter loaded
 * without no_new_privs needs. Root need not have it (a container's root:
 * Docker's default capabilities leave it out). */
static bool sys_admin_effective(void)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    if (syscall(SYS_capget, &hdr, data) < 0)
        return false;
    return (data[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective & CAP_TO_MASK(CAP_SYS_ADMIN)) != 0;
}

/* The number of <name>, or __NR_SCMP_ERROR with the first such call told in
 * <unknown> and counted in <open_calls>. */
static int lockdown_nr(const char *name, char *unknown, size_t unknownlen, size_t *open_calls)
{
    int nr = seccomp_call_nr(name, unknown, *open_calls == 0 ? unknownlen : 0);
    if (nr == __NR_SCMP_ERROR)
        (*open_calls)++;
    return nr;
}

int gateway_lockdown_rules(scmp_filter_ctx ctx, char *unknown, size_t unknownlen,
                           size_t *open_calls)
{
    int rc = 0;
    for (size_t i = 0; i < sizeof(refused_calls) / sizeof(refused_calls[0]) && rc == 0; i++) {
#ifdef LOCKDOWN_KEEP_PTRACE
        if (strcmp(refused_calls[i], "ptrace") == 0)
            continue;
#endif
        /* a call this architecture lacks (iopl on aarch64) gets a
         * pseudo-number whose rule matches nothing; one no one can name
         * stays open, told (the rest of the filter is worth more than a
         * gateway without any) */
        int nr = lockdown_nr(refused_calls[i], unknown, unknownlen, open_calls);
        if (nr != __NR_SCMP_ERROR)
            rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
    }
    for (size_t i = 0; i < sizeof(clone_ns_flags) / sizeof(clone_ns_flags[0]) && rc == 0; i++) {
        const struct scmp_arg_cmp has_flag = {.arg = 0,
                                              .op = SCMP_CMP_MASKED_EQ,
                                              .datum_a = clone_ns_flags[i],
                                              .datum_b = clone_ns_flags[i]};
        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, &has_flag);
    }
    /* clone3 (Linux 5.3) by name, not SCMP_SYS(): kernel headers older than
     * it (RHEL 8's 4.18) give SCMP_SYS() a pseudo-number matching nothing,
     * and clone3 would make namespaces past the clone() rules above */
    int clone3 = rc == 0 ? lockdown_nr("clone3", unknown, unknownlen, open_calls) : 0;
    if (rc == 0 && clone3 != __NR_SCMP_ERROR)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), clone3, 0);
    /* Serve started as root in a terminal keeps it as --user: code that took
     * the gateway over would type into the root shell's terminal. */
    if (rc == 0)
        rc = seccomp_refuse_tty_ioctls(ctx);
    return rc;
}

int gateway_lockdown(char *err, size_t errlen)
{
    /* A call of another architecture (an i386 alert program's) kills the
     * process, libseccomp's default, as in the box: the rules name the
     * native calls only, and an error for each call would not make such a
     * program usable either (docs/SPEC.md, Lockdown). */
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == NULL) {
        snprintf(err, errlen, "seccomp: cannot initialise the filter");
        return -1;
    }
    int rc = 0;
    char unknown[256] = ""; /* what libseccomp and sluice could not name */
    size_t open_calls = 0;
    if (geteuid() == 0 && sys_admin_effective())
        rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
    if (rc == 0)
        rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
    if (rc == 0)
        rc = gateway_lockdown_rules(ctx, unknown, sizeof(unknown), &open_calls);
    if (seccomp_load_and_release(ctx, rc, err, errlen) < 0)
        return -1;
    if (open_calls == 0)
        return 0;
    snprintf(err, errlen, "%s: the gateway serves with it open (%zu such call%s in all)", unknown,
             open_calls, open_calls == 1 ? "" : "s");
    return 1;
}
