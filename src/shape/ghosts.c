#include "shape/ghosts.h"

#include <stdbool.h>
#include <stdlib.h>

#include "util/zalloc.h"

#define GHOSTS_MIN      64u
#define SLOTS_PER_ENTRY 4u
#define FP_EMPTY        0u
#define FP_SHARED       UINT32_MAX /* keys met here: the slot holds for every key */
#define BURST_INTACT    UINT64_MAX

typedef unsigned __int128 u128;

/* When a forgotten bucket would be full again, and the time it took to
 * refill from empty: a bucket made anew lacks the part still to run. */
struct trace {
    uint64_t full_ns; /* 0, or a time past: nothing owed */
    uint64_t refill_ns;
};

struct ghost {
    uint32_t fp;         /* FP_EMPTY, a key's fingerprint(), or FP_SHARED */
    uint64_t burst_left; /* the request bucket's one-time burst left */
    struct trace req, bw;
};

struct ghosts {
    size_t mask; /* slots - 1 */
    struct ghost slot[];
};

/* The part of <hash> the slot's index does not use, never FP_EMPTY nor
 * FP_SHARED. */
static uint32_t fingerprint(uint64_t hash)
{
    uint32_t fp = (uint32_t)(hash >> 32);
    return fp == FP_EMPTY || fp == FP_SHARED ? 1 : fp;
}

static size_t slots_for(size_t n)
{
    size_t s = GHOSTS_MIN;
    n = n > SIZE_MAX / SLOTS_PER_ENTRY ? SIZE_MAX : n * SLOTS_PER_ENTRY;
    while (s < n && s <= SIZE_MAX / 2)
        s <<= 1;
    return s;
}

size_t ghosts_size(size_t n)
{
    return sizeof(struct ghosts) + slots_for(n) * sizeof(struct ghost);
}

struct ghosts *ghosts_new(size_t n)
{
    size_t s = slots_for(n);
    if (s > (SIZE_MAX - sizeof(struct ghosts)) / sizeof(struct ghost))
        return NULL;
    struct ghosts *g = zalloc(sizeof(*g) + s * sizeof(struct ghost));
    if (g == NULL)
        return NULL;
    g->mask = s - 1;
    for (size_t i = 0; i < s; i++)
        g->slot[i].burst_left = BURST_INTACT;
    return g;
}

void ghosts_free(struct ghosts *g)
{
    free(g);
}

static bool owes(const struct trace *t, uint64_t now)
{
    return t->full_ns > now;
}

static bool live(const struct ghost *s, uint64_t now)
{
    return s->fp != FP_EMPTY &&
           (owes(&s->req, now) || owes(&s->bw, now) || s->burst_left != BURST_INTACT);
}

static struct trace trace_of(struct bucket *b, uint64_t now)
{
    uint64_t in = bucket_full_in_ns(b, now);
    if (in == 0)
        return (struct trace){0, 0};
    return (struct trace){in > UINT64_MAX - now ? UINT64_MAX : now + in, b->refill_ns};
}

/* Merges <t> into <into>, erring toward denial: the later full time, the
 * shorter refill (more of the bucket still missing for either key). */
static void merge(struct trace *into, struct trace t, uint64_t now)
{
    if (!owes(&t, now))
        return;
    if (!owes(into, now)) {
        *into = t;
        return;
    }
    if (t.full_ns > into->full_ns)
        into->full_ns = t.full_ns;
    if (t.refill_ns < into->refill_ns)
        into->refill_ns = t.refill_ns;
}

void ghosts_keep(struct ghosts *g, uint64_t hash, struct bucket *req, uint64_t burst,
                 struct bucket *bw, uint64_t now_ns)
{
    struct ghost k = {fingerprint(hash), BURST_INTACT, trace_of(req, now_ns), trace_of(bw, now_ns)};
    if (!bucket_is_off(req) && req->burst < burst)
        k.burst_left = req->burst;
    if (!live(&k, now_ns))
        return; /* as a bucket made anew: nothing to remember */
    struct ghost *s = &g->slot[hash & g->mask];
    if (!live(s, now_ns)) {
        *s = k;
        return;
    }
    if (s->fp != k.fp)
        s->fp = FP_SHARED;
    merge(&s->req, k.req, now_ns);
    merge(&s->bw, k.bw, now_ns);
    if (k.burst_left < s->burst_left)
        s->burst_left = k.burst_left;
}

/* The ghost that holds for the key of <hash> at <now>, or NULL. */
static const struct ghost *find(const struct ghosts *g, uint64_t hash, uint64_t now)
{
    if (g == NULL)
        return NULL;
    const struct ghost *s = &g->slot[hash & g->mask];
    if (!live(s, now) || (s->fp != FP_SHARED && s->fp != fingerprint(hash)))
        return NULL;
    return s;
}

/* Takes from <b> the tokens <t> says are still missing at <now>: the part
 * of the refill still to run, in <b>'s size, rounded up (toward denial). */
static void drain(struct bucket *b, const struct trace *t, uint64_t now)
{
    if (!owes(t, now) || bucket_is_off(b))
        return;
    /* < (2^64-1)^2 + 2^64: no overflow */
    u128 missing = ((u128)(t->full_ns - now) * b->size + t->refill_ns - 1) / t->refill_ns;
    bucket_drain(b, missing > b->size ? b->size : (uint64_t)missing, now);
}

void ghosts_drain_requests(const struct ghosts *g, uint64_t hash, struct bucket *req,
                           uint64_t now_ns)
{
    const struct ghost *s = find(g, hash, now_ns);
    if (s == NULL)
        return;
    drain(req, &s->req, now_ns);
    if (req->burst > s->burst_left)
        req->burst = s->burst_left;
}

void ghosts_drain_bandwidth(const struct ghosts *g, uint64_t hash, struct bucket *bw,
                            uint64_t now_ns)
{
    const struct ghost *s = find(g, hash, now_ns);
    if (s != NULL)
        drain(bw, &s->bw, now_ns);
}
