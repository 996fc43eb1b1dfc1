/* open_nolinks: see open_nolinks.h. */
#include "util/open_nolinks.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

int open_no_links(const char *path, int flags, mode_t mode)
{
    /* glibc 2.36 (Debian 12) has no openat2() wrapper. */
    struct open_how how = {
        .flags = (unsigned long long)flags,
        .mode = (flags & (O_CREAT | O_TMPFILE)) != 0 ? mode : 0,
        .resolve = RESOLVE_NO_SYMLINKS,
    };
    long fd = syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM))
        return (int)fd;
    /* ENOSYS: an older kernel; EPERM: a seccomp filter that predates the
     * call. The last component is still checked. */
    return open(path, flags | O_NOFOLLOW, mode);
}
