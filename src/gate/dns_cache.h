/* dns_cache: the resolver's answer cache (see resolve.h for what it keeps).
 *
 * Maps a name (host_normalise()'s normal form, at most HOST_MAX bytes) to
 * its addresses, or to "no such name" (no address), until an expiry time;
 * at most <max> names, the least recently used evicted first. A hash table
 * (chained, DNS_CACHE_BUCKETS buckets, SipHash under a random key) with an
 * LRU list. Pure: no
 * I/O, and the time is passed in (milliseconds on a monotonic clock).
 *
 * Owns: its entries. */
#ifndef SLUICE_GATE_DNS_CACHE_H
#define SLUICE_GATE_DNS_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "gate/resolve.h"
#include "policy/host.h"
#include "util/ipaddr.h"

#define DNS_CACHE_BUCKETS 1024 /* power of two */

struct dns_cache_entry {
    struct dns_cache_entry *hnext;         /* bucket chain */
    struct dns_cache_entry *lprev, *lnext; /* LRU list, most recent first */
    uint64_t expires_ms;
    size_t n; /* 0: a negative answer */
    int err;  /* with n 0, the caller's error for it (0 until it sets one) */
    struct ipaddr a[RESOLVE_MAX_ADDRS];
    char name[HOST_MAX + 1];
};

struct dns_cache {
    struct dns_cache_entry *buckets[DNS_CACHE_BUCKETS];
    struct dns_cache_entry *lru_head, *lru_tail;
    size_t n;   /* names held */
    size_t max; /* names at most; 0 keeps nothing */
};

/* The hash of the NUL-terminated <name> under the process's random key
 * (util/siphash.h): the cache's buckets, and the resolver's table of
 * lookups in flight. Loop thread only. */
uint32_t dns_name_hash(const char *name);

/* Makes <c> empty, holding at most <max> names. */
void dns_cache_init(struct dns_cache *c, size_t max);

/* Frees every entry. */
void dns_cache_clear(struct dns_cache *c);

/* The entry for <name> still live at <now_ms>, made the most recent; an
 * expired one is dropped. NULL when there is none. The entry is valid until
 * the next call that changes <c>. */
const struct dns_cache_entry *dns_cache_find(struct dns_cache *c, const char *name,
                                             uint64_t now_ms);

/* Stores <n> addresses of <a> (at most RESOLVE_MAX_ADDRS are kept; 0: a
 * negative answer) for <name> until <now_ms> + <ttl_ms>, replacing what it
 * held, and returns its entry (err 0; valid until the next call that
 * changes <c>). A <ttl_ms> of 0, a name over HOST_MAX bytes, or no memory
 * stores nothing: NULL. */
struct dns_cache_entry *dns_cache_put(struct dns_cache *c, const char *name, const struct ipaddr *a,
                                      size_t n, uint64_t now_ms, uint64_t ttl_ms);

#endif
