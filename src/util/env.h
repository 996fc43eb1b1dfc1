/* env: the process environment, shared by the event loop and the policy
 * reload thread.
 *
 * setenv() and getenv() are not safe against each other across threads.
 * sluice reads policy secrets (env: tokens) on the reload thread and
 * switches TZ on the loop to compute an off-hours time zone's local time,
 * so both go through one lock. */
#ifndef SLUICE_UTIL_ENV_H
#define SLUICE_UTIL_ENV_H

#include <stdint.h>

/* Returns a copy of the variable <name> (the caller frees it), or NULL when
 * it is not set. Fatal only when memory runs out. */
char *env_dup(const char *name);

/* The variable <name> as a decimal number from 1 to <max>, or <dflt> when
 * it is not set, empty, not such a number or out of range (test-only
 * switches such as SLUICE_TEST_WEBHOOK_BACKOFF_MS). */
uint64_t env_number(const char *name, uint64_t max, uint64_t dflt);

/* Hold the lock around any setenv()/unsetenv()/tzset() sequence. */
void env_lock(void);
void env_unlock(void);

#endif
