#include "util/env.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/xalloc.h"

static pthread_mutex_t env_mutex = PTHREAD_MUTEX_INITIALIZER;

/* Set once by env_tz_pin(), before any thread, and only read after: owned
 * here for the process's life. */
static bool tz_pinned;
static char *tz_rest;  /* the value TZ holds between conversions */
static char *tz_given; /* "TZ=<value>" as the operator gave it; NULL: unset */

/* TZ unset, in glibc's tzset(): its TZDEFAULT, the file it reads then
 * ("/etc/localtime", as Debian builds it). The ":" it drops; a name equal to
 * TZDEFAULT whose file cannot be read is UTC, as for TZ unset. */
#define TZ_UNSET_EQUIVALENT ":/etc/localtime"

void env_lock(void)
{
    pthread_mutex_lock(&env_mutex);
}

void env_unlock(void)
{
    pthread_mutex_unlock(&env_mutex);
}

/* <name>'s value, under env_lock(), where no conversion holds TZ: the
 * stand-in env_tz_pin() gave a TZ the operator left unset reads as unset. */
static const char *given_value(const char *name)
{
    const char *v = getenv(name);
    if (v != NULL && tz_pinned && tz_given == NULL && strcmp(name, "TZ") == 0 &&
        strcmp(v, tz_rest) == 0)
        return NULL;
    return v;
}

char *env_dup(const char *name)
{
    env_lock();
    const char *v = given_value(name);
    char *copy = v != NULL ? xstrdup(v) : NULL;
    env_unlock();
    return copy;
}

uint64_t env_number(const char *name, uint64_t max, uint64_t dflt)
{
    char *v = env_dup(name), *end;
    uint64_t n = dflt;
    if (v != NULL && *v != '\0') {
        unsigned long long x = strtoull(v, &end, 10);
        if (*end == '\0' && x > 0 && x <= max)
            n = (uint64_t)x;
    }
    free(v);
    return n;
}

void env_tz_pin(void)
{
    if (tz_pinned)
        return;
    const char *v = getenv("TZ");
    if (v != NULL) {
        tz_given = xasprintf("TZ=%s", v);
        tz_rest = xstrdup(v);
    } else {
        tz_rest = xstrdup(TZ_UNSET_EQUIVALENT);
        if (setenv("TZ", tz_rest, 1) != 0) /* EINVAL is not possible */
            fatal("out of memory");
    }
    tz_pinned = true;
}

int env_tz_set(const char *value)
{
    if (!tz_pinned || getenv("TZ") == NULL) /* unset since (not by sluice): never add it */
        return -1;
    return setenv("TZ", value != NULL ? value : tz_rest, 1) == 0 ? 0 : -1;
}

char *env_child_entry(char *kv)
{
    return tz_pinned && strncmp(kv, "TZ=", 3) == 0 ? tz_given : kv;
}
