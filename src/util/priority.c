/* priority: see priority.h. */
#include "util/priority.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

/* The nice the process was started with, and whether priority_apply()
 * changed it: the calling thread's (the loop's), as the nice is per thread
 * on Linux, not process-wide. */
static int start_nice;
static bool changed;

int priority_apply(int nice, bool given, char *err, size_t errlen)
{
    errno = 0;
    int now = getpriority(PRIO_PROCESS, 0); /* -1 is a valid nice: errno tells */
    if (now == -1 && errno != 0) {
        snprintf(err, errlen, "cannot read the nice value: %s", strerror(errno));
        return given ? -1 : 1;
    }
    if (!given && now != 0)
        return 1;
    if (now == nice)
        return 0;
    if (setpriority(PRIO_PROCESS, 0, nice) != 0) {
        snprintf(err, errlen, "cannot set nice %d: %s", nice, strerror(errno));
        return given ? -1 : 1;
    }
    start_nice = now;
    changed = true;
    return 0;
}

void priority_restore_thread(void)
{
    /* start_nice and changed are set before any thread is made. */
    if (changed)
        (void)setpriority(PRIO_PROCESS, 0, start_nice); /* 0: this thread (Linux) */
}
