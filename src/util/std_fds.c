/* std_fds: descriptors 0, 1 and 2 open (see std_fds.h). */
#include "util/std_fds.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static unsigned closed_at_start; /* bit N: descriptor N was closed (std_fds_closed()) */

int std_fds_ensure(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
            continue;
        /* The lowest free number is <fd> itself (those below are open);
         * no O_CLOEXEC: standard descriptors are inherited. */
        int nul = open("/dev/null", O_RDWR);
        if (nul < 0)
            return -1;
        closed_at_start |= 1u << fd;
        if (nul != fd) {
            int r = dup2(nul, fd);
            close(nul);
            if (r < 0)
                return -1;
        }
    }
    return 0;
}

unsigned std_fds_closed(void)
{
    return closed_at_start;
}
