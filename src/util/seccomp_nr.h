/* seccomp_nr: the number of a system call a seccomp filter names, whatever
 * libseccomp's age; a filter never goes without a rule because a name was
 * unknown. */
#ifndef SLUICE_UTIL_SECCOMP_NR_H
#define SLUICE_UTIL_SECCOMP_NR_H

#include <stddef.h>
#include <stdint.h>

#include <seccomp.h>

/* A call's number in the syscall table x86_64 and the generic one (aarch64)
 * share for every call added since Linux 5.1. */
struct seccomp_shared_nr {
    const char *name;
    int nr;
};

/* The calls sluice's filters name that a libseccomp older than the kernel
 * may not know, with their shared numbers. Every rule on a call newer than
 * the oldest kernel sluice supports takes its number from seccomp_call_nr(),
 * never SCMP_SYS(): built against older kernel headers (RHEL 8's 4.18),
 * SCMP_SYS(openat2) is a pseudo-number whose rule matches nothing. */
extern const struct seccomp_shared_nr seccomp_shared_nrs[];
extern const size_t seccomp_shared_nrs_count;

/* What the build step that failed returns when it wrote <err> itself
 * (seccomp_load_and_release() then keeps that message): no libseccomp
 * error is this low. */
#define SECCOMP_RC_TOLD (-100000)

/* Looks a name up as seccomp_syscall_resolve_name() does. */
typedef int (*seccomp_name_resolver)(const char *name);

/* The number of the call <name> on this architecture: libseccomp's (a
 * negative pseudo-number, matching no call, for one the architecture lacks:
 * iopl on aarch64), else, on x86_64 and aarch64, its shared number. A name
 * known to neither gets -1 with <err> filled ("seccomp: this libseccomp
 * does not know the call NAME ..."): the caller must not leave it out in
 * silence. */
int seccomp_call_nr(const char *name, char *err, size_t errlen);

/* Adds to <ctx> the rule that answers every call <name> with <action>.
 * Returns 0, libseccomp's negative error, or SECCOMP_RC_TOLD with <err>
 * filled when the number of <name> is unknown. */
int seccomp_refuse_call(scmp_filter_ctx ctx, uint32_t action, const char *name, char *err,
                        size_t errlen);

/* seccomp_call_nr() with another resolver than libseccomp's (tests). */
int seccomp_call_nr_by(seccomp_name_resolver resolve, const char *name, char *err, size_t errlen);

/* Makes seccomp_call_nr() ask <next> instead of libseccomp, and returns the
 * resolver it asked before (tests: which names a filter looks up). */
seccomp_name_resolver seccomp_nr_set_resolver(seccomp_name_resolver next);

#endif
