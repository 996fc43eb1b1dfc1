/* dns_cache: the resolver's answer cache (see dns_cache.h). */
#include "gate/dns_cache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/siphash.h"

/* Keyed once per process, on the loop thread (the only caller): the names
 * are the agents' choice, and under an unkeyed hash (FNV-1a before) an
 * agent allowed a wildcard could pick thousands of names for one bucket. */
uint32_t dns_name_hash(const char *name)
{
    static struct siphash_key key;
    static bool keyed;
    if (!keyed) {
        siphash_random_key(&key, &key);
        keyed = true;
    }
    return (uint32_t)siphash13(&key, name, strlen(name));
}

static size_t bucket_of(const char *name)
{
    return dns_name_hash(name) & (DNS_CACHE_BUCKETS - 1);
}

static void lru_unlink(struct dns_cache *c, struct dns_cache_entry *e)
{
    if (e->lprev != NULL)
        e->lprev->lnext = e->lnext;
    else
        c->lru_head = e->lnext;
    if (e->lnext != NULL)
        e->lnext->lprev = e->lprev;
    else
        c->lru_tail = e->lprev;
    e->lprev = e->lnext = NULL;
}

static void lru_push(struct dns_cache *c, struct dns_cache_entry *e)
{
    e->lprev = NULL;
    e->lnext = c->lru_head;
    if (c->lru_head != NULL)
        c->lru_head->lprev = e;
    c->lru_head = e;
    if (c->lru_tail == NULL)
        c->lru_tail = e;
}

static void remove_entry(struct dns_cache *c, struct dns_cache_entry *e)
{
    struct dns_cache_entry **pp = &c->buckets[bucket_of(e->name)];
    while (*pp != NULL && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp == e)
        *pp = e->hnext;
    lru_unlink(c, e);
    c->n--;
    free(e);
}

void dns_cache_init(struct dns_cache *c, size_t max)
{
    memset(c, 0, sizeof(*c));
    c->max = max;
}

void dns_cache_clear(struct dns_cache *c)
{
    while (c->lru_head != NULL)
        remove_entry(c, c->lru_head);
}

/* The entry for <name>, live or not; NULL when there is none. */
static struct dns_cache_entry *lookup(struct dns_cache *c, const char *name)
{
    struct dns_cache_entry *e = c->buckets[bucket_of(name)];
    while (e != NULL && strcmp(e->name, name) != 0)
        e = e->hnext;
    return e;
}

const struct dns_cache_entry *dns_cache_find(struct dns_cache *c, const char *name, uint64_t now_ms)
{
    struct dns_cache_entry *e = lookup(c, name);
    if (e == NULL)
        return NULL;
    if (now_ms >= e->expires_ms) {
        remove_entry(c, e);
        return NULL;
    }
    lru_unlink(c, e);
    lru_push(c, e);
    return e;
}

struct dns_cache_entry *dns_cache_put(struct dns_cache *c, const char *name, const struct ipaddr *a,
                                      size_t n, uint64_t now_ms, uint64_t ttl_ms)
{
    size_t len = strlen(name);
    struct dns_cache_entry *e;

    if (ttl_ms == 0 || len > HOST_MAX || c->max == 0)
        return NULL;
    if ((e = lookup(c, name)) != NULL) {
        lru_unlink(c, e);
        lru_push(c, e);
    } else {
        while (c->n >= c->max && c->lru_tail != NULL)
            remove_entry(c, c->lru_tail);
        if ((e = calloc(1, sizeof(*e))) == NULL)
            return NULL; /* not cached: no harm */
        memcpy(e->name, name, len + 1);
        size_t b = bucket_of(name);
        e->hnext = c->buckets[b];
        c->buckets[b] = e;
        lru_push(c, e);
        c->n++;
    }
    if (n > RESOLVE_MAX_ADDRS)
        n = RESOLVE_MAX_ADDRS;
    e->n = n;
    e->err = 0;
    if (n > 0)
        memcpy(e->a, a, n * sizeof(*a));
    e->expires_ms = now_ms + ttl_ms;
    return e;
}
