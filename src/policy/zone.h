/* zone: the local time of an off-hours time zone, as the C library reads
 * its compiled file under POLICY_ZONEINFO_DIR.
 *
 * glibc has one time zone per process, set through TZ: each conversion
 * sets it (under env_lock()), converts, and puts the caller's back, only
 * ever replacing TZ's value, which env_tz_pin() made present at start-up
 * (util/env.h: threads read the environment without the lock). A file
 * glibc cannot read (gone since the policy loaded, as a tzdata upgrade
 * that drops a legacy name does, or cut short) is not an error to glibc:
 * it goes by UTC without a word. zone_localtime_file() tells that apart
 * (the converted time has no zone abbreviation, which every zone file
 * gives), so that the loader refuses such a zone and the detector says it
 * judges by UTC.
 *
 * Owns nothing. */
#ifndef SLUICE_POLICY_ZONE_H
#define SLUICE_POLICY_ZONE_H

#include <time.h>

/* Fills <tm> with <t> in the zone of the file <path> (an absolute path).
 * Returns 0; 1 when the C library could not read the file as a zone (<tm>
 * then holds <t> in UTC, as the library took it; also when TZ was not
 * pinned by env_tz_pin(), which it never adds); -1 when <t> cannot be
 * converted at all (a year past int's). */
int zone_localtime_file(const char *path, time_t t, struct tm *tm);

/* As zone_localtime_file() for zone <tz> ("UTC", or NULL for UTC, or an
 * IANA name whose file is under POLICY_ZONEINFO_DIR). */
int zone_localtime(const char *tz, time_t t, struct tm *tm);

#endif
