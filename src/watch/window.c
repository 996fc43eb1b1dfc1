/* window: sliding windows in tenths and the fold table (see window.h). */
#include "watch/window.h"
#include "util/siphash.h"
#include "util/units.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void window_init(struct window *w, uint64_t per_ms)
{
    memset(w, 0, sizeof(*w));
    w->per_ms = per_ms > 0 ? per_ms : 1;
    /* Rounded up, so that ten tenths span the whole period (policies
     * give whole seconds, which a tenth divides). */
    w->width_ms = w->per_ms / WINDOW_TENTHS + (w->per_ms % WINDOW_TENTHS != 0);
    for (int i = 0; i < WINDOW_SLOTS; i++)
        w->epoch[i] = -1;
}

static int64_t bucket_of(const struct window *w, int64_t now_ms)
{
    return now_ms >= 0 ? now_ms / (int64_t)w->width_ms : 0;
}

/* Sums the slots holding tenth b (now) and the ten before it: the oldest
 * is partly out of the period, so that none of the period is. */
uint64_t window_sum(const struct window *w, int64_t now_ms)
{
    int64_t b = bucket_of(w, now_ms);
    uint64_t sum = 0;
    for (int i = 0; i < WINDOW_SLOTS; i++) {
        int64_t e = w->epoch[i];
        if (e >= 0 && e <= b && e > b - WINDOW_SLOTS && sum + w->slot[i] >= sum)
            sum += w->slot[i];
        else if (e >= 0 && e <= b && e > b - WINDOW_SLOTS)
            sum = UINT64_MAX;
    }
    return sum;
}

int64_t window_empty_at(const struct window *w, int64_t now_ms)
{
    if (window_sum(w, now_ms) == 0)
        return INT64_MIN;
    int64_t b = bucket_of(w, now_ms), newest = INT64_MIN, width = (int64_t)w->width_ms;
    for (int i = 0; i < WINDOW_SLOTS; i++) {
        int64_t e = w->epoch[i];
        if (e < 0 || w->slot[i] == 0 || e <= b - WINDOW_SLOTS)
            continue;
        if (e > b) /* a count still to come in: the sum holds only this tenth */
            return (b + 1) * width;
        newest = e > newest ? e : newest;
    }
    return (newest + WINDOW_SLOTS) * width; /* the first tenth that leaves it out */
}

uint64_t window_add(struct window *w, int64_t now_ms, uint64_t n)
{
    int64_t b = bucket_of(w, now_ms);
    int i = (int)(b % WINDOW_SLOTS);
    if (w->epoch[i] != b) {
        /* A new bucket, or a clock that went back: start this slot over. */
        w->epoch[i] = b;
        w->slot[i] = 0;
    }
    w->slot[i] = w->slot[i] + n >= w->slot[i] ? w->slot[i] + n : UINT64_MAX;
    return window_sum(w, now_ms);
}

/* ---- fold ------------------------------------------------------------------ */

void fold_init(struct fold *f)
{
    memset(f, 0, sizeof(*f));
}

static void entry_clear_last(struct fold_entry *e)
{
    free(e->alert_host);
    free(e->id);
    free(e->detail);
    e->alert_host = e->id = e->detail = NULL;
}

static void entry_free(struct fold_entry *e)
{
    free(e->agent);
    free(e->host);
    entry_clear_last(e);
}

void fold_free(struct fold *f)
{
    for (size_t i = 0; i < f->n; i++)
        entry_free(&f->e[i]);
    free(f->e);
    pos_index_free(&f->index);
    memset(f, 0, sizeof(*f));
}

/* SipHash of the key (kind, agent, host) under a key drawn once per
 * process, on the loop thread (the only caller). The hosts are the
 * agents' choice: under an unkeyed hash (FNV-1a before) an agent allowed a
 * wildcard could pick thousands whose keys share a slot, and every alert of
 * a storm would walk them all. Agent and host are hashed apart, then the
 * pair with the kind: no separator to escape, no copy of the strings. */
static uint64_t key_hash(enum alert_kind kind, const char *agent, const char *host)
{
    static struct siphash_key key;
    static bool keyed;
    if (!keyed) {
        siphash_random_key(&key, &key);
        keyed = true;
    }
    uint64_t parts[3] = {(uint64_t)kind, siphash13(&key, agent, strlen(agent)),
                         siphash13(&key, host, strlen(host))};
    return siphash13(&key, parts, sizeof(parts));
}

static void index_put(struct fold *f, size_t i)
{
    const struct fold_entry *e = &f->e[i];
    pos_index_add(&f->index, key_hash(e->kind, e->agent, e->host), i);
}

/* Indexes every entry anew (after entries moved). */
static void index_refill(struct fold *f)
{
    if (f->index.n == 0)
        return;
    pos_index_empty(&f->index);
    for (size_t i = 0; i < f->n; i++)
        index_put(f, i);
}

/* Makes room in the index for <want> entries. Returns 0, or -1 when out of
 * memory (the index stays as it was, valid for the entries there are). */
static int index_reserve(struct fold *f, size_t want)
{
    int r = pos_index_reserve(&f->index, want);
    if (r > 0)
        index_refill(f);
    return r < 0 ? -1 : 0;
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

static struct fold_entry *find(const struct fold *f, enum alert_kind kind, const char *agent,
                               const char *host)
{
    uint64_t h = key_hash(kind, agent, host);
    size_t j = POS_INDEX_START, p;
    while ((p = pos_index_next(&f->index, h, &j)) != 0) {
        struct fold_entry *e = &f->e[p - 1];
        if (e->kind == kind && strcmp(e->agent, agent) == 0 && strcmp(e->host, host) == 0)
            return e;
    }
    return NULL;
}

static void summarise(struct fold_entry *e, int64_t now_ms, fold_emit_fn fn, void *arg);

/* The key part a spilled entry has in place of a host (and an agent): no
 * host name or agent id holds a newline. */
#define FOLD_SPILL "\n"

/* The entry <a> folds into: its own key's, or, when the table has no room
 * for a new one at a level, the next level's. NULL when that key has no
 * entry yet: <*level>, <*agent> and <*host> then say which key to open. */
static struct fold_entry *entry_for(struct fold *f, const struct alert *a, enum fold_level *level,
                                    const char **agent, const char **host)
{
    static const size_t room[FOLD_LEVELS] = {FOLD_MAX, FOLD_SPILL_MAX, ALERT_KIND_COUNT};
    for (enum fold_level lv = FOLD_BY_HOST; lv < FOLD_LEVELS; lv++) {
        if (lv == FOLD_BY_AGENT)
            *host = FOLD_SPILL;
        else if (lv == FOLD_BY_KIND)
            *agent = FOLD_SPILL;
        *level = lv;
        struct fold_entry *e = find(f, a->kind, *agent, *host);
        if (e != NULL || f->at[lv] < room[lv])
            return e;
    }
    return NULL; /* every kind has its entry: not reached */
}

/* <now_ms> + <period_ms>, at most INT64_MAX (the loader caps periods at
 * 3650 days; this holds whatever a caller passes). */
static int64_t period_end(int64_t now_ms, uint64_t period_ms)
{
    if (now_ms >= 0 && period_ms > (uint64_t)(INT64_MAX - now_ms))
        return INT64_MAX;
    if (now_ms < 0 && period_ms > (uint64_t)INT64_MAX)
        return now_ms + INT64_MAX; /* a clock before 1970: still no overflow */
    return now_ms + (int64_t)period_ms;
}

/* True while <e>'s period runs at <now_ms>: not ended, and not ending
 * further off than one period, which only a wall clock that stepped back
 * since the period opened does (the period then ends now, as windows and
 * baselines start over: otherwise its key would fold every repeat, with no
 * line, for as long as the clock went back). */
static bool period_runs(const struct fold_entry *e, int64_t now_ms)
{
    return now_ms < e->until_ms && (uint64_t)e->until_ms - (uint64_t)now_ms <= e->period_ms;
}

bool fold_holds(const struct fold *f, enum alert_kind kind, const char *agent, const char *host,
                int64_t now_ms)
{
    const struct fold_entry *e =
        find(f, kind, agent != NULL ? agent : "", host != NULL ? host : "");
    return e != NULL && period_runs(e, now_ms);
}

/* fold_admit(), and fold_admit_trip() when <trip>. */
static bool admit(struct fold *f, const struct alert *a, const char *key_host, int64_t now_ms,
                  uint64_t period_ms, bool trip, fold_emit_fn fn, void *arg)
{
    const char *agent = a->agent != NULL ? a->agent : "";
    const char *host = key_host != NULL ? key_host : "";
    enum fold_level level;
    if (period_ms == 0)
        return true;
    struct fold_entry *e = entry_for(f, a, &level, &agent, &host);
    if (e != NULL && period_runs(e, now_ms) && !(trip && e->by_summary)) {
        /* The summary's severity is the highest of the repeats it counts,
         * not the last one's: first contacts fold denied (medium) and let
         * through (low) alike, and an agent that ended a storm of denied
         * ones with one let through had the summary of them all said low. */
        if (e->repeats == 0 || a->severity > e->severity)
            e->severity = a->severity;
        e->repeats++;
        e->tier = a->tier;
        entry_clear_last(e);
        e->alert_host = dup_or_null(a->host);
        e->id = dup_or_null(a->id);
        e->detail = dup_or_null(a->detail);
        return false;
    }
    if (e != NULL) {
        /* A period that ended before fold_expire() came round (or one a
         * summary opened, which a new burst ends): its repeats are
         * summarised now, then this alert opens the next period. */
        if (e->repeats > 0)
            summarise(e, now_ms, fn, arg);
        e->until_ms = period_end(now_ms, period_ms);
        e->period_ms = period_ms;
        e->by_summary = false;
        return true;
    }
    if (index_reserve(f, f->n + 1) < 0)
        return true; /* out of memory: written, not folded */
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 16;
        struct fold_entry *ne = realloc(f->e, nc * sizeof(*ne));
        if (ne == NULL)
            return true;
        f->e = ne;
        f->cap = nc;
    }
    e = &f->e[f->n];
    memset(e, 0, sizeof(*e));
    e->agent = strdup(agent);
    e->host = strdup(host);
    if (e->agent == NULL || e->host == NULL) {
        entry_free(e);
        return true;
    }
    e->kind = a->kind;
    e->level = level;
    e->until_ms = period_end(now_ms, period_ms);
    e->period_ms = period_ms;
    f->n++;
    f->at[level]++;
    index_put(f, f->n - 1);
    return true;
}

bool fold_admit(struct fold *f, const struct alert *a, const char *key_host, int64_t now_ms,
                uint64_t period_ms, fold_emit_fn fn, void *arg)
{
    return admit(f, a, key_host, now_ms, period_ms, false, fn, arg);
}

bool fold_admit_trip(struct fold *f, const struct alert *a, const char *key_host, int64_t now_ms,
                     uint64_t period_ms, fold_emit_fn fn, void *arg)
{
    return admit(f, a, key_host, now_ms, period_ms, true, fn, arg);
}

/* Hands the summary of <e>'s repeats to <fn> and opens its next period.
 * <fn> may not touch the table. */
static void summarise(struct fold_entry *e, int64_t now_ms, fold_emit_fn fn, void *arg)
{
    static const char *const how[FOLD_LEVELS] = {
        [FOLD_BY_HOST] = "folded",
        [FOLD_BY_AGENT] = "folded over all hosts (the fold table is full)",
        [FOLD_BY_KIND] = "folded over all agents and hosts (the fold table is full)",
    };
    char per[32], detail[1200];
    format_period_ms(e->period_ms, per, sizeof(per));
    snprintf(detail, sizeof(detail), "%" PRIu64 " more within %s, %s; the last: %s", e->repeats,
             per, how[e->level], e->detail != NULL ? e->detail : "");
    /* A spilled summary stands for many hosts (and agents): it names none. */
    struct alert s = {
        .kind = e->kind,
        .severity = e->severity,
        .agent = e->level != FOLD_BY_KIND && e->agent[0] != '\0' ? e->agent : NULL,
        .host = e->level == FOLD_BY_HOST ? e->alert_host : NULL,
        .tier = e->tier,
        .id = e->id,
        .detail = detail,
        .count = e->repeats,
    };
    e->repeats = 0;
    e->until_ms = period_end(now_ms, e->period_ms);
    e->by_summary = true;
    fn(&s, arg);
    entry_clear_last(e);
}

static size_t expire(struct fold *f, int64_t now_ms, bool all, fold_emit_fn fn, void *arg)
{
    size_t summaries = 0, before = f->n;
    for (size_t i = 0; i < f->n;) {
        struct fold_entry *e = &f->e[i];
        if (!all && period_runs(e, now_ms)) {
            i++;
            continue;
        }
        if (e->repeats == 0) {
            f->at[e->level]--;
            entry_free(e);
            f->e[i] = f->e[--f->n];
            continue;
        }
        summarise(e, now_ms, fn, arg);
        summaries++;
        i++;
    }
    if (f->n != before)
        index_refill(f); /* entries moved into the places of those removed */
    return summaries;
}

size_t fold_expire(struct fold *f, int64_t now_ms, fold_emit_fn fn, void *arg)
{
    return expire(f, now_ms, false, fn, arg);
}

size_t fold_flush(struct fold *f, int64_t now_ms, fold_emit_fn fn, void *arg)
{
    return expire(f, now_ms, true, fn, arg);
}
