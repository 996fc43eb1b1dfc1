#include "util/env.h"

#include <pthread.h>
#include <stdlib.h>

#include "util/xalloc.h"

static pthread_mutex_t env_mutex = PTHREAD_MUTEX_INITIALIZER;

void env_lock(void)
{
    pthread_mutex_lock(&env_mutex);
}

void env_unlock(void)
{
    pthread_mutex_unlock(&env_mutex);
}

char *env_dup(const char *name)
{
    env_lock();
    const char *v = getenv(name);
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
