/* index: hash tables that keep a decision's cost independent of the number
 * of rules.
 *
 * Every table is open addressing with linear probing, a power-of-two
 * capacity at least twice the number of keys it may hold (load <= 0.5), and
 * SipHash-1-3 under a per-index random key, so a policy author (or anyone
 * who can guess host names) cannot aim collisions at one bucket. A slot maps
 * a key (a normal host name, a wildcard suffix, or a masked 16-byte address)
 * to a run of rule positions in one shared array, kept in file order.
 *
 * The index copies every key it stores: it never points into the policy's
 * strings, so it stays valid however the policy's arrays are managed. */
#include <stdlib.h>
#include <string.h>

#include "policy/index.h"
#include "util/siphash.h"

struct slot {
    uint64_t hash;
    uint8_t *key; /* owned copy; NULL = empty slot */
    uint32_t keylen;
    uint32_t off;   /* count 1: the rule position itself; else the run's start in items */
    uint32_t count; /* rule positions for this key */
    uint32_t fill;  /* build cursor */
};

struct table {
    struct slot *slots;
    size_t mask; /* capacity - 1; capacity 0 when the table is empty */
    uint32_t *items;
    size_t nitems;
};

struct cidr_table {
    unsigned prefix;
    struct table t;
};

struct policy_index {
    struct siphash_key key; /* SipHash key */
    struct table exact;
    struct table wild;
    struct table deny_exact;
    struct table deny_wild;
    struct cidr_table *cidr; /* longest prefix first */
    size_t ncidr;
};

/* ---- tables ---- */

/* Returns the position of <key>'s slot in <t>, or SIZE_MAX. */
static size_t table_probe(const struct policy_index *ix, const struct table *t, const uint8_t *key,
                          size_t len)
{
    if (t->slots == NULL)
        return SIZE_MAX;
    uint64_t h = siphash13(&ix->key, key, len);
    for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
        const struct slot *s = &t->slots[i];
        if (s->key == NULL)
            return SIZE_MAX;
        if (s->hash == h && s->keylen == len && memcmp(s->key, key, len) == 0)
            return i;
    }
}

static const struct slot *table_find(const struct policy_index *ix, const struct table *t,
                                     const uint8_t *key, size_t len)
{
    size_t i = table_probe(ix, t, key, len);
    return i == SIZE_MAX ? NULL : &t->slots[i];
}

/* Sizes <t> for up to <nkeys> distinct keys. Returns 0 or -1. */
static int table_init(struct table *t, size_t nkeys)
{
    memset(t, 0, sizeof(*t));
    if (nkeys == 0)
        return 0;
    size_t cap = 8;
    while (cap < nkeys * 2) {
        if (cap > SIZE_MAX / 4)
            return -1;
        cap *= 2;
    }
    t->slots = calloc(cap, sizeof(*t->slots));
    if (t->slots == NULL)
        return -1;
    t->mask = cap - 1;
    return 0;
}

/* First pass: adds one occurrence of <key>. Returns 0 or -1. */
static int table_count(const struct policy_index *ix, struct table *t, const uint8_t *key,
                       size_t len)
{
    uint64_t h = siphash13(&ix->key, key, len);
    for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
        struct slot *s = &t->slots[i];
        if (s->key == NULL) {
            s->key = malloc(len ? len : 1);
            if (s->key == NULL)
                return -1;
            memcpy(s->key, key, len);
            s->keylen = (uint32_t)len;
            s->hash = h;
            s->count = 1;
            return 0;
        }
        if (s->hash == h && s->keylen == len && memcmp(s->key, key, len) == 0) {
            s->count++;
            return 0;
        }
    }
}

/* Between the passes: gives each slot holding more than one position its
 * run in one items array. A single position (the common case) stays in the
 * slot itself, saving a cache miss per lookup. Returns 0 or -1. */
static int table_layout(struct table *t)
{
    if (t->slots == NULL)
        return 0;
    size_t total = 0;
    for (size_t i = 0; i <= t->mask; i++) {
        struct slot *s = &t->slots[i];
        if (s->key != NULL && s->count > 1) {
            s->off = (uint32_t)total;
            total += s->count;
        }
    }
    t->nitems = total;
    if (total == 0)
        return 0;
    t->items = calloc(total, sizeof(*t->items));
    return t->items == NULL ? -1 : 0;
}

/* Second pass: appends rule position <pos> to <key>'s run (file order). */
static void table_fill(const struct policy_index *ix, struct table *t, const uint8_t *key,
                       size_t len, uint32_t pos)
{
    size_t i = table_probe(ix, t, key, len);
    if (i != SIZE_MAX) {
        struct slot *s = &t->slots[i];
        if (s->count == 1)
            s->off = pos;
        else
            t->items[s->off + s->fill++] = pos;
    }
}

static void table_free(struct table *t)
{
    if (t->slots != NULL) {
        for (size_t i = 0; i <= t->mask; i++)
            free(t->slots[i].key);
    }
    free(t->slots);
    free(t->items);
    memset(t, 0, sizeof(*t));
}

static struct rule_list table_list(const struct table *t, const struct slot *s)
{
    struct rule_list l = {NULL, 0};
    if (s != NULL) {
        l.items = s->count == 1 ? &s->off : t->items + s->off;
        l.count = s->count;
    }
    return l;
}

/* ---- keys ---- */

static size_t name_len(const char *name)
{
    return strnlen(name, HOST_MAX + 1);
}

static void mask_addr(uint8_t out[16], const struct ipaddr *a, unsigned prefix)
{
    for (unsigned i = 0; i < 16; i++) {
        unsigned bits = prefix > i * 8 ? prefix - i * 8 : 0;
        uint8_t m = bits >= 8 ? 0xff : (uint8_t)(0xff << (8 - bits));
        out[i] = a->b[i] & m;
    }
}

static const char *rule_host(const struct rule *r)
{
    if (r->kind == RULE_CIDR || r->host == NULL)
        return NULL;
    return r->host;
}

static struct table *cidr_table_for(struct policy_index *ix, unsigned prefix)
{
    for (size_t i = 0; i < ix->ncidr; i++) {
        if (ix->cidr[i].prefix == prefix)
            return &ix->cidr[i].t;
    }
    return NULL;
}

/* ---- build ---- */

static int build_cidr(struct policy_index *ix, const struct policy *p)
{
    size_t per_len[129] = {0};
    for (size_t i = 0; i < p->nrules; i++) {
        if (p->rules[i].kind == RULE_CIDR && p->rules[i].cidr.prefix <= 128)
            per_len[p->rules[i].cidr.prefix]++;
    }
    for (unsigned l = 0; l <= 128; l++) {
        if (per_len[l] != 0)
            ix->ncidr++;
    }
    if (ix->ncidr == 0)
        return 0;
    ix->cidr = calloc(ix->ncidr, sizeof(*ix->cidr));
    if (ix->cidr == NULL) {
        ix->ncidr = 0;
        return -1;
    }
    size_t n = 0;
    for (int l = 128; l >= 0; l--) {
        if (per_len[l] == 0)
            continue;
        ix->cidr[n].prefix = (unsigned)l;
        if (table_init(&ix->cidr[n].t, per_len[l]) < 0)
            return -1;
        n++;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < p->nrules; i++) {
            const struct rule *r = &p->rules[i];
            if (r->kind != RULE_CIDR || r->cidr.prefix > 128)
                continue;
            uint8_t key[16];
            mask_addr(key, &r->cidr.addr, r->cidr.prefix);
            struct table *t = cidr_table_for(ix, r->cidr.prefix);
            if (pass == 0) {
                if (table_count(ix, t, key, sizeof(key)) < 0)
                    return -1;
            } else {
                table_fill(ix, t, key, sizeof(key), (uint32_t)i);
            }
        }
        if (pass == 0) {
            for (size_t c = 0; c < ix->ncidr; c++) {
                if (table_layout(&ix->cidr[c].t) < 0)
                    return -1;
            }
        }
    }
    return 0;
}

static int build_hosts(struct policy_index *ix, const struct policy *p)
{
    size_t nexact = 0, nwild = 0, ndx = 0, ndw = 0;
    for (size_t i = 0; i < p->nrules; i++) {
        if (rule_host(&p->rules[i]) == NULL)
            continue;
        if (p->rules[i].kind == RULE_EXACT)
            nexact++;
        else
            nwild++;
    }
    for (size_t i = 0; i < p->ndeny; i++) {
        if (p->deny[i].pattern.kind == PATTERN_EXACT)
            ndx++;
        else
            ndw++;
    }
    if (table_init(&ix->exact, nexact) < 0 || table_init(&ix->wild, nwild) < 0 ||
        table_init(&ix->deny_exact, ndx) < 0 || table_init(&ix->deny_wild, ndw) < 0)
        return -1;

    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < p->nrules; i++) {
            const char *h = rule_host(&p->rules[i]);
            if (h == NULL)
                continue;
            struct table *t = p->rules[i].kind == RULE_EXACT ? &ix->exact : &ix->wild;
            if (pass == 0) {
                if (table_count(ix, t, (const uint8_t *)h, name_len(h)) < 0)
                    return -1;
            } else {
                table_fill(ix, t, (const uint8_t *)h, name_len(h), (uint32_t)i);
            }
        }
        for (size_t i = 0; i < p->ndeny; i++) {
            const struct host_pattern *hp = &p->deny[i].pattern;
            struct table *t = hp->kind == PATTERN_EXACT ? &ix->deny_exact : &ix->deny_wild;
            size_t len = strnlen(hp->name, sizeof(hp->name));
            if (pass == 0) {
                if (table_count(ix, t, (const uint8_t *)hp->name, len) < 0)
                    return -1;
            } else {
                table_fill(ix, t, (const uint8_t *)hp->name, len, (uint32_t)i);
            }
        }
        if (pass == 0) {
            if (table_layout(&ix->exact) < 0 || table_layout(&ix->wild) < 0 ||
                table_layout(&ix->deny_exact) < 0 || table_layout(&ix->deny_wild) < 0)
                return -1;
        }
    }
    return 0;
}

int policy_index_build(struct policy *p)
{
    if (p->nrules > UINT32_MAX || p->ndeny > UINT32_MAX)
        return -1;
    struct policy_index *ix = calloc(1, sizeof(*ix));
    if (ix == NULL)
        return -1;
    siphash_random_key(&ix->key, ix);
    if (build_hosts(ix, p) < 0 || build_cidr(ix, p) < 0) {
        policy_index_free(ix);
        return -1;
    }
    policy_index_free(p->index);
    p->index = ix;
    return 0;
}

void policy_index_free(struct policy_index *ix)
{
    if (ix == NULL)
        return;
    table_free(&ix->exact);
    table_free(&ix->wild);
    table_free(&ix->deny_exact);
    table_free(&ix->deny_wild);
    for (size_t i = 0; i < ix->ncidr; i++)
        table_free(&ix->cidr[i].t);
    free(ix->cidr);
    free(ix);
}

/* ---- lookups ---- */

struct rule_list index_exact(const struct policy_index *ix, const char *name)
{
    struct rule_list none = {NULL, 0};
    if (ix == NULL || name == NULL)
        return none;
    return table_list(&ix->exact,
                      table_find(ix, &ix->exact, (const uint8_t *)name, name_len(name)));
}

struct rule_list index_wildcard(const struct policy_index *ix, const char *suffix)
{
    struct rule_list none = {NULL, 0};
    if (ix == NULL || suffix == NULL)
        return none;
    return table_list(&ix->wild,
                      table_find(ix, &ix->wild, (const uint8_t *)suffix, name_len(suffix)));
}

int index_cidr_each(const struct policy_index *ix, const struct ipaddr *a,
                    int (*fn)(struct rule_list rules, unsigned prefix, void *arg), void *arg)
{
    if (ix == NULL || a == NULL)
        return 0;
    for (size_t i = 0; i < ix->ncidr; i++) {
        const struct cidr_table *ct = &ix->cidr[i];
        uint8_t key[16];
        mask_addr(key, a, ct->prefix);
        const struct slot *s = table_find(ix, &ct->t, key, sizeof(key));
        if (s == NULL)
            continue;
        int rc = fn(table_list(&ct->t, s), ct->prefix, arg);
        if (rc != 0)
            return rc;
    }
    return 0;
}

bool index_denied(const struct policy_index *ix, const char *name)
{
    if (ix == NULL || name == NULL)
        return false;
    size_t len = name_len(name);
    if (table_find(ix, &ix->deny_exact, (const uint8_t *)name, len) != NULL)
        return true;
    if (ix->deny_wild.slots == NULL)
        return false;
    /* Each proper suffix that starts after a label boundary: "*.b.c" covers
     * "a.b.c" and "x.a.b.c", never "b.c" itself. */
    for (size_t i = 0; i < len; i++) {
        if (name[i] != '.' || i + 1 >= len)
            continue;
        if (table_find(ix, &ix->deny_wild, (const uint8_t *)name + i + 1, len - i - 1) != NULL)
            return true;
    }
    return false;
}

/* The first deny position of the slot of <key> in <t>, or -1. */
static int64_t first_deny(const struct policy_index *ix, const struct table *t, const char *key,
                          size_t len)
{
    struct rule_list l = table_list(t, table_find(ix, t, (const uint8_t *)key, len));
    return l.count > 0 ? (int64_t)l.items[0] : -1;
}

int64_t index_deny_covering(const struct policy_index *ix, const struct rule *r)
{
    const char *name = ix != NULL && r != NULL ? rule_host(r) : NULL;
    if (name == NULL)
        return -1;
    size_t len = name_len(name);
    int64_t pos = -1;
    /* An exact name denied as such; a wildcard rule "*.S" by "*.S" itself. */
    if (r->kind == RULE_EXACT)
        pos = first_deny(ix, &ix->deny_exact, name, len);
    else
        pos = first_deny(ix, &ix->deny_wild, name, len);
    /* Then "*.T" for each proper suffix T of the name or of S. */
    for (size_t i = 0; pos < 0 && i < len; i++) {
        if (name[i] == '.' && i + 1 < len)
            pos = first_deny(ix, &ix->deny_wild, name + i + 1, len - i - 1);
    }
    return pos;
}
