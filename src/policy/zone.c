/* zone: an off-hours zone's local time (see zone.h). */
#include "policy/zone.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "policy/model.h"
#include "util/env.h"

int zone_localtime_file(const char *path, time_t t, struct tm *tm)
{
    /* ":" says a file, by its full path: by name glibc looks under TZDIR
     * when the environment sets it, and a zone it does not find there is
     * taken for a POSIX TZ string, which "Europe/Berlin" is not. */
    char zone[4096];
    if (snprintf(zone, sizeof(zone), ":%s", path) >= (int)sizeof(zone))
        return gmtime_r(&t, tm) != NULL ? 1 : -1;
    /* Only TZ's value changes (env.h): another thread may be reading the
     * environment without the lock. Unpinned (no env_tz_pin() at start-up),
     * TZ is not changed at all, and the time is UTC's, as for a file glibc
     * cannot read: said by the loader and the detector, never silent. */
    env_lock();
    bool set = env_tz_set(zone) == 0;
    bool ok = true;
    if (set) {
        tzset();
        ok = localtime_r(&t, tm) != NULL;
        /* can fail (memory) only the first time: glibc keeps every value it
         * made; and no child sees TZ's value at any moment (env.h) */
        (void)env_tz_set(NULL);
        tzset();
    }
    env_unlock();
    if (!set)
        return gmtime_r(&t, tm) != NULL ? 1 : -1;
    if (!ok)
        return -1;
    /* glibc's fallback for a file it could not read: UTC without a name
     * (every zone file names its times: "CET", "UTC", "-05") */
    return tm->tm_zone != NULL && tm->tm_zone[0] != '\0' ? 0 : 1;
}

int zone_localtime(const char *tz, time_t t, struct tm *tm)
{
    if (tz == NULL || strcmp(tz, "UTC") == 0)
        return gmtime_r(&t, tm) != NULL ? 0 : -1;
    char path[sizeof(POLICY_ZONEINFO_DIR) + 256];
    if (snprintf(path, sizeof(path), "%s%s", POLICY_ZONEINFO_DIR, tz) >= (int)sizeof(path))
        return gmtime_r(&t, tm) != NULL ? 1 : -1;
    return zone_localtime_file(path, t, tm);
}
