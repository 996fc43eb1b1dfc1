/* shortage: errors that say descriptors, memory or ports ran out (shortage.h). */
#include "util/shortage.h"

#include <errno.h>

bool errno_is_shortage(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

bool errno_is_port_shortage(int err)
{
    return err == EADDRNOTAVAIL || err == EAGAIN;
}
