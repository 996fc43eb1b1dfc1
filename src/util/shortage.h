/* shortage: whether a failed call's errno says the process (or the system)
 * is short of descriptors or memory, rather than that anything is wrong
 * with what the call was asked to do. Shared by the gate's upstream
 * connects (gateway_overloaded) and the box's relay (a client kept waiting
 * instead of closed). */
#ifndef SLUICE_UTIL_SHORTAGE_H
#define SLUICE_UTIL_SHORTAGE_H

#include <stdbool.h>

/* EMFILE, ENFILE, ENOBUFS or ENOMEM. */
bool errno_is_shortage(int err);

#endif
