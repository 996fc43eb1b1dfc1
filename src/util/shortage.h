/* shortage: whether a failed call's errno says the process (or the system)
 * is short of descriptors, memory or local ports, rather than that anything
 * is wrong with what the call was asked to do. Shared by the gate's upstream
 * connects (gateway_overloaded) and the box's relay (a client kept waiting
 * instead of closed). */
#ifndef SLUICE_UTIL_SHORTAGE_H
#define SLUICE_UTIL_SHORTAGE_H

#include <stdbool.h>

/* EMFILE, ENFILE, ENOBUFS or ENOMEM. */
bool errno_is_shortage(int err);

/* EADDRNOTAVAIL or EAGAIN, from connect() on a TCP socket not bound before:
 * no local port is left toward that address and port (every port of
 * net.ipv4.ip_local_port_range is in a connection to it; EAGAIN is what
 * older kernels said, and what Linux says of a full routing cache). The
 * host's shortage, not the peer's, and one address's only: a port may still
 * be free toward another. */
bool errno_is_port_shortage(int err);

/* The kinds of shortage the gate warns of on standard error, each at most
 * once a minute on a timer of its own (conn_refuse_short()): one told must
 * not hide another. */
enum shortage_kind {
    SHORTAGE_FDS,        /* EMFILE: this process's RLIMIT_NOFILE */
    SHORTAGE_SYSTEM_FDS, /* ENFILE: the whole system's file table (fs.file-max) */
    SHORTAGE_PORTS,      /* errno_is_port_shortage() */
    SHORTAGE_MEMORY,     /* ENOBUFS, ENOMEM, anything else */
    SHORTAGE_KINDS
};

/* The kind of shortage <err> (an errno of socket() or connect()) is. */
enum shortage_kind shortage_kind(int err);

/* What ran out, for "out of WHAT": "file descriptors", "local ports", "memory
 * for sockets". */
const char *shortage_what(enum shortage_kind k);

/* What the operator can do about it, for the warning. */
const char *shortage_advice(enum shortage_kind k);

#endif
