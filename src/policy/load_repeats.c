/* load_repeats: the loader's warning about an entry listed twice in a
 * list of the policy (deny, an agent's sources, deny_ranges,
 * allow_ranges): a repeat changes nothing the gateway does, but it is
 * most often an edit that meant another entry (a host typed twice where a
 * second host was meant), and it makes the list longer to review.
 *
 * The entries are sorted by what they name, so that a hostile list of a
 * million entries costs n log n comparisons, not n^2, and the warnings
 * still come in file order. */
#include <stdlib.h>

#include "policy/load_ctx.h"
#include "util/xalloc.h"

struct repeat_order {
    const struct load_entry *v;
    int (*cmp)(const void *a, const void *b);
};

/* Orders indices into the entries by key, then by place in the list. */
static int cmp_by_key(const void *a, const void *b, void *arg)
{
    const struct repeat_order *o = arg;
    const struct load_entry *x = &o->v[*(const size_t *)a], *y = &o->v[*(const size_t *)b];
    int r = o->cmp(x->key, y->key);
    if (r != 0)
        return r;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

void load_warn_repeats(struct load_ctx *c, struct load_entry *v, size_t n,
                       int (*cmp)(const void *a, const void *b),
                       void (*show)(const void *key, char *buf, size_t size))
{
    if (n < 2)
        return;
    /* indices are sorted, not the entries, which stay in file order */
    size_t *order = xcalloc(n, sizeof(*order));
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    struct repeat_order by = {v, cmp};
    qsort_r(order, n, sizeof(*order), cmp_by_key, &by);
    for (size_t i = 0, first = 0; i < n; i++) {
        struct load_entry *e = &v[order[i]];
        e->repeat = i > 0 && cmp(e->key, v[order[first]].key) == 0;
        if (e->repeat)
            e->first_line = v[order[first]].line;
        else
            first = i;
    }
    free(order);
    char text[LOAD_ENTRY_SHOW_MAX];
    for (size_t i = 0; i < n; i++) {
        if (!v[i].repeat)
            continue;
        show(v[i].key, text, sizeof(text));
        size_t m = load_field_push(c, "[%zu]", v[i].pos);
        load_warn(c, v[i].line, "%s is listed twice (line %d)", load_show(c, text),
                  v[i].first_line);
        load_field_pop(c, m);
    }
}
