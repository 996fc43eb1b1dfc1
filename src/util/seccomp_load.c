/* seccomp_load: the last step of every seccomp filter (seccomp_load.h). */
#include "util/seccomp_load.h"

#include <stdio.h>
#include <string.h>

#include "util/seccomp_nr.h"

int seccomp_load_and_release(scmp_filter_ctx ctx, int rc, char *err, size_t errlen)
{
    if (rc == 0)
        rc = seccomp_load(ctx);
    seccomp_release(ctx);
    if (rc != 0) {
        if (rc != SECCOMP_RC_TOLD) /* else the failed step wrote <err> */
            snprintf(err, errlen, "seccomp: cannot load the filter: %s", strerror(-rc));
        return -1;
    }
    return 0;
}
