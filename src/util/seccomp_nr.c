/* seccomp_nr: a call's number for a filter (seccomp_nr.h).
 *
 * libseccomp resolves a name from a table of its own release: a
 * distribution that pairs a newer kernel with an older libseccomp (Debian
 * 12's 2.5.4 knows no open_tree_attr, nor fchmodat2 before 2.5.5) answers
 * __NR_SCMP_ERROR, and a filter that skipped such a rule would leave the
 * call open while it claims to refuse it. So the calls that are new enough
 * to be missing carry their numbers here. Those numbers are taken on trust
 * only where the kernel shares them (x86_64 and the generic table of
 * aarch64: alpha, MIPS and ia64 offset theirs); elsewhere a name libseccomp
 * does not know is told, never skipped in silence: the box does not start
 * (a command the box promises a refused call must not get it open), and
 * the gateway, which serves on with a warning when the kernel refuses its
 * whole filter, loads the rest and warns which call stays open
 * (gate/lockdown.c). */
#include "util/seccomp_nr.h"

#include <seccomp.h>
#include <stdio.h>
#include <string.h>

/* From the kernel's arch/x86/entry/syscalls/syscall_64.tbl and
 * scripts/syscall.tbl (aarch64); tests/unit/test_seccomp_nr.c compares
 * each with libseccomp's table for both architectures. */
const struct seccomp_shared_nr seccomp_shared_nrs[] = {
    {"io_uring_setup", 425},  {"io_uring_enter", 426}, {"io_uring_register", 427},
    {"open_tree", 428},       {"move_mount", 429},     {"fsopen", 430},
    {"fsconfig", 431},        {"fsmount", 432},        {"fspick", 433},
    {"clone3", 435},          {"openat2", 437},        {"pidfd_getfd", 438},
    {"process_madvise", 440}, {"mount_setattr", 442},  {"fchmodat2", 452},
    {"open_tree_attr", 467},
};
const size_t seccomp_shared_nrs_count = sizeof(seccomp_shared_nrs) / sizeof(seccomp_shared_nrs[0]);

#if defined(__x86_64__) || defined(__aarch64__)
static int shared_nr(const char *name)
{
    for (size_t i = 0; i < seccomp_shared_nrs_count; i++) {
        if (strcmp(seccomp_shared_nrs[i].name, name) == 0)
            return seccomp_shared_nrs[i].nr;
    }
    return __NR_SCMP_ERROR;
}
#else
static int shared_nr(const char *name)
{
    (void)name;
    return __NR_SCMP_ERROR; /* not taken on trust on this architecture */
}
#endif

int seccomp_call_nr_by(seccomp_name_resolver resolve, const char *name, char *err, size_t errlen)
{
    int nr = resolve(name);
    if (nr == __NR_SCMP_ERROR)
        nr = shared_nr(name);
    if (nr == __NR_SCMP_ERROR) {
        const struct scmp_version *v = seccomp_version();
        snprintf(err, errlen,
                 "seccomp: libseccomp %u.%u.%u does not know the call %s, nor sluice its number"
                 " on this architecture (a newer libseccomp knows it)",
                 v ? v->major : 0, v ? v->minor : 0, v ? v->micro : 0, name);
    }
    return nr;
}

/* libseccomp's, but for a test that reads which names a filter asks for */
static seccomp_name_resolver resolver = seccomp_syscall_resolve_name;

seccomp_name_resolver seccomp_nr_set_resolver(seccomp_name_resolver next)
{
    seccomp_name_resolver before = resolver;
    resolver = next;
    return before;
}

int seccomp_call_nr(const char *name, char *err, size_t errlen)
{
    return seccomp_call_nr_by(resolver, name, err, errlen);
}

int seccomp_refuse_call(scmp_filter_ctx ctx, uint32_t action, const char *name, char *err,
                        size_t errlen)
{
    int nr = seccomp_call_nr(name, err, errlen);
    if (nr == __NR_SCMP_ERROR)
        return SECCOMP_RC_TOLD;
    return seccomp_rule_add(ctx, action, nr, 0);
}
