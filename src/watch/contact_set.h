/* contact_set: the (agent, host) pairs the first_contact detector has
 * seen, as one string "agent\nhost" each (no agent id or host holds a
 * newline).
 *
 * An open-addressing table with linear probing, hashed with SipHash under
 * a key drawn when the set is made. The hosts are the agents' own choice,
 * denied ones included: under an unkeyed hash (FNV-1a before) an agent
 * could pick thousands of made-up hosts whose pairs share a home slot, and
 * every later request to a host not yet seen would walk that run with a
 * string compare per slot, on the event loop.
 *
 * Owns: every pair string it holds. */
#ifndef SLUICE_WATCH_CONTACT_SET_H
#define SLUICE_WATCH_CONTACT_SET_H

#include <stddef.h>

#include "util/siphash.h"

/* The bytes of pair strings a set holds at most, whatever its <max>: a
 * million pairs of 253-byte hosts (made-up names an agent is refused) held
 * 275 MB of the gateway's memory; a million of common names (20-40 bytes)
 * stay well below it. */
#define CONTACT_SET_BYTES_MAX (64u * 1024 * 1024)

struct contact_set {
    char **slot; /* cap slots, NULL when free; cap a power of two */
    size_t n, cap;
    size_t max;   /* pairs it holds at most */
    size_t bytes; /* of the pair strings held, their NULs included */
    struct siphash_key key;
};

/* An empty set that holds at most <max> pairs. */
void contact_set_init(struct contact_set *s, size_t max);
void contact_set_free(struct contact_set *s);

/* Remembers the pair. Returns 1 when it was new (and is now held), 0 when
 * it was known, -1 when it cannot be held (out of memory, <max> pairs held
 * already, or it would take the strings past CONTACT_SET_BYTES_MAX). */
int contact_set_add(struct contact_set *s, const char *agent, const char *host);

/* Calls <fn> for every pair held, in no order; <pair> is "agent\nhost",
 * owned by the set. */
void contact_set_each(const struct contact_set *s, void (*fn)(const char *pair, void *arg),
                      void *arg);

#endif
