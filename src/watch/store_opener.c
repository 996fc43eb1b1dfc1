/* store_opener: the state store's open, tried again off the event loop
 * (store_opener.h). */
#include "watch/store_opener.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/quiet_thread.h"
#include "util/units.h"

enum opener_state { OPENER_TRYING, OPENER_OPEN, OPENER_FAILED, OPENER_TAKEN };

struct store_opener {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* CLOCK_MONOTONIC: the owner's stop ends a wait */
    unsigned refs;       /* the owner and the thread: the last one frees */
    bool stop;
    enum opener_state state;
    char *dir;
    uid_t user;
    atomic_int held;         /* enum store_held: what held the store at the last try */
    uint64_t started_ms;     /* monotonic_ms() at store_opener_start(), set before the thread */
    char *err;               /* OPENER_FAILED's, malloc'd */
    struct store_opened got; /* OPENER_OPEN's (got.store, got.stored owned until taken) */
};

static void opened_free(struct store_opened *g)
{
    store_close(g->store);
    g->store = NULL;
    contact_set_free(&g->stored);
}

/* Drops one reference under o->mu (held on entry, released here); the last
 * frees <o> and whatever it still holds. */
static void unref_unlock(struct store_opener *o)
{
    bool last = --o->refs == 0;
    pthread_mutex_unlock(&o->mu);
    if (!last)
        return;
    if (o->state == OPENER_OPEN)
        opened_free(&o->got);
    else if (o->state != OPENER_TAKEN)
        contact_set_free(&o->got.stored);
    free(o->err);
    free(o->dir);
    pthread_cond_destroy(&o->cond);
    pthread_mutex_destroy(&o->mu);
    free(o);
}

static void add_contact(const char *agent, const char *host, int64_t first_ms, void *arg)
{
    (void)first_ms;
    contact_set_add(arg, agent, host);
}

static void add_counter(const char *name, uint64_t value, void *arg)
{
    struct store_opened *g = arg;
    if (g->ncounters < STORE_OPENER_COUNTERS && strlen(name) < sizeof(g->counters[0].name)) {
        snprintf(g->counters[g->ncounters].name, sizeof(g->counters[0].name), "%s", name);
        g->counters[g->ncounters++].value = value;
    }
}

/* Waits <ms> or until the owner stops the tries; true when stopped. */
static bool wait_or_stop(struct store_opener *o, unsigned ms)
{
    struct timespec until = monotonic_after(ms);
    pthread_mutex_lock(&o->mu);
    while (!o->stop && pthread_cond_timedwait(&o->cond, &o->mu, &until) != ETIMEDOUT)
        ;
    bool stop = o->stop;
    pthread_mutex_unlock(&o->mu);
    return stop;
}

static void *opener_main(void *arg)
{
    struct store_opener *o = arg;
    bool done = false; /* a try ended them, o->mu held */
    for (unsigned ms = STORE_OPENER_FIRST_MS; !wait_or_stop(o, ms);
         ms = ms >= STORE_OPENER_MAX_MS / 2 ? STORE_OPENER_MAX_MS : ms * 2) {
        char *err = NULL, *warn = NULL;
        enum store_held held = STORE_FREE;
        struct store *s = store_open_try(o->dir, o->user, &err, &warn, &held);
        if (warn != NULL)
            fprintf(stderr, "sluice: warning: %s\n", warn);
        free(warn);
        if (s == NULL && held != STORE_FREE) {
            atomic_store(&o->held, (int)held);
            free(err);
            continue;
        }
        /* The loop may not read the store once it serves: what it must
         * know of it is read here, before the hand-over. */
        if (s != NULL) {
            store_load_contacts(s, add_contact, &o->got.stored);
            store_load_counters(s, add_counter, &o->got);
        }
        pthread_mutex_lock(&o->mu);
        o->got.store = s;
        o->err = err;
        o->state = s != NULL ? OPENER_OPEN : OPENER_FAILED;
        done = true;
        break;
    }
    if (!done)
        pthread_mutex_lock(&o->mu); /* stopped by the owner */
    unref_unlock(o);
    return NULL;
}

struct store_opener *store_opener_start(const char *dir, uid_t user, size_t contacts_max,
                                        enum store_held held)
{
    struct store_opener *o = calloc(1, sizeof(*o));
    if (o == NULL || (o->dir = strdup(dir)) == NULL) {
        free(o);
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&o->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&o->mu, NULL);
    o->user = user;
    atomic_init(&o->held, (int)held);
    o->started_ms = monotonic_ms();
    o->refs = 2;
    contact_set_init(&o->got.stored, contacts_max);
    pthread_t t;
    if (quiet_thread_create(&t, opener_main, o) != 0) {
        pthread_mutex_lock(&o->mu);
        o->refs = 1;
        unref_unlock(o);
        return NULL;
    }
    pthread_detach(t); /* a try stuck in a file system must not hold the exit */
    return o;
}

int store_opener_take(struct store_opener *o, struct store_opened *got, char **err)
{
    int rc = 0;
    pthread_mutex_lock(&o->mu);
    if (o->state == OPENER_OPEN) {
        *got = o->got;
        o->state = OPENER_TAKEN;
        rc = 1;
    } else if (o->state == OPENER_FAILED) {
        *err = o->err;
        o->err = NULL;
        contact_set_free(&o->got.stored);
        o->state = OPENER_TAKEN;
        rc = -1;
    }
    pthread_mutex_unlock(&o->mu);
    return rc;
}

const char *store_opener_why(const struct store_opener *o)
{
    if (atomic_load(&o->held) == STORE_HELD_GATEWAY)
        return "not open yet: another sluice gateway holds it (its sluice.lock) (tried again "
               "every 1 s, then up to every 30 s)";
    return "not open yet: another process holds a lock on its database that bars reads too "
           "(tried again every 1 s, then up to every 30 s)";
}

bool store_opener_waits_for_predecessor(const struct store_opener *o, uint64_t now_ms)
{
    return atomic_load(&o->held) == STORE_HELD_GATEWAY &&
           now_ms - o->started_ms < STORE_OPENER_PREDECESSOR_MS;
}

void store_opener_free(struct store_opener *o)
{
    if (o == NULL)
        return;
    pthread_mutex_lock(&o->mu);
    o->stop = true;
    pthread_cond_signal(&o->cond);
    unref_unlock(o);
}
