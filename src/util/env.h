/* env: the process environment, shared by the event loop and the policy
 * reload thread.
 *
 * setenv() and getenv() are not safe against each other across threads.
 * sluice reads policy secrets (env: tokens) on the reload thread and
 * switches TZ, on the loop (the off-hours detector) and on the reload
 * thread (the loader's check of a zone), to compute an off-hours time
 * zone's local time, so both go through one lock.
 *
 * Not every reader takes that lock: libraries call getenv() on threads of
 * their own (SQLite's SQLITE_TMPDIR and TMPDIR for a temporary file, on the
 * store's threads; OpenSSL's, the C library's own); an exec sink's
 * environment, copied from environ on the loop, is copied under it. So TZ
 * is made a variable of the environment once, before any thread exists
 * (env_tz_pin()), and from then on only its value is replaced: glibc's
 * setenv() reallocates environ's array when it adds a variable, freeing
 * the old one under any reader, and unsetenv() moves entries under it,
 * while a replaced value swaps one pointer and frees no string. */
#ifndef SLUICE_UTIL_ENV_H
#define SLUICE_UTIL_ENV_H

#include <stdint.h>

/* Returns a copy of the variable <name> (the caller frees it), or NULL when
 * it is not set: TZ too when the operator left it unset, whatever stand-in
 * env_tz_pin() gave it. Fatal only when memory runs out. */
char *env_dup(const char *name);

/* The variable <name> as a decimal number from 1 to <max>, or <dflt> when
 * it is not set, empty, not such a number or out of range (test-only
 * switches such as SLUICE_TEST_WEBHOOK_BACKOFF_MS). */
uint64_t env_number(const char *name, uint64_t max, uint64_t dflt);

/* Hold the lock around any setenv()/unsetenv()/tzset() sequence. */
void env_lock(void);
void env_unlock(void);

/* Before any thread exists (main() calls it before any command): makes TZ
 * a variable of the environment for the process's life, with the value the
 * operator gave it, or ":/etc/localtime" when it was unset: what glibc
 * reads then (its TZDEFAULT, and UTC when that file cannot be read, as for
 * an unset TZ). Fatal only when memory runs out. */
void env_tz_pin(void);

/* Under env_lock(), once env_tz_pin() ran: replaces TZ's value with
 * <value>, or puts back the one env_tz_pin() left when <value> is NULL.
 * Never adds or removes a variable. Returns 0, or -1 (TZ unchanged) when
 * TZ is not pinned or memory runs out. */
int env_tz_set(const char *value);

/* The entry a child process (an exec sink's program, run's command) gets
 * for the environment entry <kv> ("NAME=value", one of environ's): <kv>
 * itself, but for TZ, once pinned, the entry the operator gave sluice, or
 * NULL (none) when TZ was unset: never the pinned stand-in, nor a zone
 * another thread's conversion holds for the moment. The entry lives as
 * long as the process. */
char *env_child_entry(char *kv);

#endif
