/* wall_clock: the current second of the wall clock, read the way every
 * event's timestamp is (CLOCK_REALTIME).
 *
 * Why not time(NULL): glibc answers it from the vDSO's coarse clock, which
 * moves only at the kernel's tick. For up to a tick after a second begins
 * it still says the second before, so a Date field or an expiry judged by
 * it could name an earlier second than the log line written beside it, or
 * than a client's own clock_gettime() read before it sent the request. */
#ifndef SLUICE_UTIL_WALL_CLOCK_H
#define SLUICE_UTIL_WALL_CLOCK_H

#include <time.h>

static inline time_t wall_clock_seconds(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return time(NULL);
    return ts.tv_sec;
}

#endif
