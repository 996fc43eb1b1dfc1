/* store_opener: the state store's open, tried again off the event loop.
 *
 * A store another process holds under a lock that bars reads too (PRAGMA
 * locking_mode=EXCLUSIVE, or any lock on a store in rollback-journal mode)
 * for longer than the start's 200 ms wait, or whose sluice.lock another
 * gateway holds (one that ends its --grace while this one starts), cannot
 * be opened then. Rather
 * than leave the gateway without its store for the whole run, a thread of
 * its own tries again, 1 s after the start, then after a wait that doubles
 * up to 30 s, for as long as the lock is the reason; any other failure
 * ends the tries (told once, as at a start). Once the store opens, the
 * thread also reads what the event loop may not read once it serves: the
 * stored first contacts (into a contact set) and the alert counters; the
 * loop takes the store and what was read on its tick (store_opener_take).
 *
 * Owns: the thread's job, shared with the thread (the last of the two to
 * let go frees it: a thread stuck in a file system at exit is left to it),
 * and, until taken, the store opened and what was read from it. */
#ifndef SLUICE_WATCH_STORE_OPENER_H
#define SLUICE_WATCH_STORE_OPENER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "state/store.h"
#include "watch/contact_set.h"

#define STORE_OPENER_FIRST_MS 1000
#define STORE_OPENER_MAX_MS   30000
#define STORE_OPENER_COUNTERS 64 /* counters read at most (sluice writes one per alert kind) */

struct store_opener;

struct store_opened {
    struct store *store;       /* the caller's now */
    struct contact_set stored; /* the stored first contacts, the caller's now */
    size_t ncounters;
    struct {
        char name[64];
        uint64_t value;
    } counters[STORE_OPENER_COUNTERS];
};

/* Starts the tries for the store in <dir> (store_open_try()'s <dir> and
 * <user>), holding at most <contacts_max> stored pairs; <held> is what
 * held it at the first try. NULL when no thread could be started (out of
 * memory or threads). */
struct store_opener *store_opener_start(const char *dir, uid_t user, size_t contacts_max,
                                        enum store_held held);

/* On the event loop: 1 and <*got> filled once the store opened (the tries
 * are over: free the opener), -1 with <*err> a malloc'd message once a try
 * failed for another reason than the lock (over too), 0 while the tries go
 * on. */
int store_opener_take(struct store_opener *o, struct store_opened *got, char **err);

/* Why the store is not open yet (what held it at the last try), for /healthz. */
const char *store_opener_why(const struct store_opener *o);

/* How long a store held by another gateway's sluice.lock is taken for a
 * predecessor's: the longest --grace (1 h) an old gateway drains for, and
 * a minute. */
#define STORE_OPENER_PREDECESSOR_MS (3600000u + 60000u)

/* True while what holds the store, at <now_ms> (monotonic_ms()), may be an
 * old gateway still draining: another gateway's sluice.lock held it at the
 * last try, and the tries began less than STORE_OPENER_PREDECESSOR_MS ago.
 * /healthz stays "ok" then (naming the wait): an overlapping restart whose
 * orchestrator waits for the new gateway to be healthy before it stops the
 * old one would never end were it 503. Past that, a second gateway holds
 * the store, a mistake /healthz tells (503). */
bool store_opener_waits_for_predecessor(const struct store_opener *o, uint64_t now_ms);

/* Ends the tries (a try under way is left to its thread, which closes
 * what it opens). Accepts NULL. */
void store_opener_free(struct store_opener *o);

#endif
