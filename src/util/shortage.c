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

enum shortage_kind shortage_kind(int err)
{
    if (err == EMFILE)
        return SHORTAGE_FDS;
    if (err == ENFILE)
        return SHORTAGE_SYSTEM_FDS;
    if (errno_is_port_shortage(err))
        return SHORTAGE_PORTS;
    return SHORTAGE_MEMORY;
}

const char *shortage_what(enum shortage_kind k)
{
    switch (k) {
    case SHORTAGE_FDS:
    case SHORTAGE_SYSTEM_FDS:
        return "file descriptors";
    case SHORTAGE_PORTS:
        return "local ports";
    default:
        return "memory for sockets";
    }
}

const char *shortage_advice(enum shortage_kind k)
{
    switch (k) {
    case SHORTAGE_FDS:
        return "raise the limit or lower --max-conns";
    case SHORTAGE_SYSTEM_FDS: /* not this process's limit: the host's */
        return "raise the system's fs.file-max (sysctl) or close files elsewhere on the host";
    case SHORTAGE_PORTS:
        return "widen net.ipv4.ip_local_port_range or lower --max-conns";
    default:
        return "lower --max-conns";
    }
}
