/* contact_set: the first-contact pairs (see contact_set.h). */
#include "watch/contact_set.h"

#include <stdlib.h>
#include <string.h>

#define FIRST_CAP 1024

void contact_set_init(struct contact_set *s, size_t max)
{
    memset(s, 0, sizeof(*s));
    s->max = max;
    siphash_random_key(&s->key, s);
}

void contact_set_free(struct contact_set *s)
{
    for (size_t i = 0; i < s->cap; i++)
        free(s->slot[i]);
    free(s->slot);
    s->slot = NULL;
    s->n = s->cap = s->bytes = 0;
}

static size_t home(const struct contact_set *s, const char *pair, size_t cap)
{
    return (size_t)siphash13(&s->key, pair, strlen(pair)) & (cap - 1);
}

/* Doubles the table (kept at most half full), the pairs placed anew. */
static int grow(struct contact_set *s)
{
    size_t cap = s->cap ? s->cap * 2 : FIRST_CAP;
    char **slot = calloc(cap, sizeof(*slot));
    if (slot == NULL)
        return -1;
    for (size_t i = 0; i < s->cap; i++) {
        if (s->slot[i] == NULL)
            continue;
        size_t j = home(s, s->slot[i], cap);
        while (slot[j] != NULL)
            j = (j + 1) & (cap - 1);
        slot[j] = s->slot[i];
    }
    free(s->slot);
    s->slot = slot;
    s->cap = cap;
    return 0;
}

/* Returns "agent\nhost" (the caller frees it), or NULL. */
static char *pair_new(const char *agent, const char *host)
{
    size_t a = strlen(agent), h = strlen(host);
    char *p = malloc(a + h + 2);
    if (p == NULL)
        return NULL;
    memcpy(p, agent, a);
    p[a] = '\n';
    memcpy(p + a + 1, host, h + 1);
    return p;
}

int contact_set_add(struct contact_set *s, const char *agent, const char *host)
{
    char *p = pair_new(agent, host);
    if (p == NULL)
        return -1;
    if (s->cap > 0)
        for (size_t j = home(s, p, s->cap); s->slot[j] != NULL; j = (j + 1) & (s->cap - 1))
            if (strcmp(s->slot[j], p) == 0) {
                free(p);
                return 0;
            }
    size_t len = strlen(p) + 1;
    if (s->n >= s->max || len > CONTACT_SET_BYTES_MAX - s->bytes ||
        ((s->n + 1) * 2 > s->cap && grow(s) < 0)) {
        free(p);
        return -1;
    }
    size_t j = home(s, p, s->cap);
    while (s->slot[j] != NULL)
        j = (j + 1) & (s->cap - 1);
    s->slot[j] = p;
    s->n++;
    s->bytes += len;
    return 1;
}

void contact_set_each(const struct contact_set *s, void (*fn)(const char *pair, void *arg),
                      void *arg)
{
    for (size_t j = 0; j < s->cap; j++)
        if (s->slot[j] != NULL)
            fn(s->slot[j], arg);
}
