/* seccomp_load: the last step of every seccomp filter sluice builds (the
 * box's in box/seccomp.c, the gateway's in gate/lockdown.c). */
#ifndef SLUICE_UTIL_SECCOMP_LOAD_H
#define SLUICE_UTIL_SECCOMP_LOAD_H

#include <stddef.h>

#include <seccomp.h>

/* When <rc> (the result of building <ctx>) is 0, loads <ctx> into the
 * kernel. Releases <ctx> either way. Returns 0, or -1 with <err> filled
 * ("seccomp: cannot load the filter: ..."), or kept as the step that
 * failed wrote it when <rc> is SECCOMP_RC_TOLD (util/seccomp_nr.h). */
int seccomp_load_and_release(scmp_filter_ctx ctx, int rc, char *err, size_t errlen);

#endif
