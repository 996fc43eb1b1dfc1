/* window: the arithmetic of the detectors, pure and clock-free.
 *
 * A window counts events (or bytes) over the last <per> milliseconds in
 * tenths: buckets of per/10 each (rounded up; at least 1 ms), aligned to
 * time 0. The sum covers the current tenth and the ten before it, the
 * oldest of which has partly left the period: between per and 1.1 x per
 * of history. So every event of the last <per> (the interval [now - per,
 * now]) counts, and any interval of that length holding more than a
 * threshold shows a sum over it; an event leaves the sum between per and
 * 1.1 x per after it happened, never earlier. (Ten tenths alone covered
 * only 0.9 x per to per: twenty events at a tenth's last millisecond and
 * twenty at the next period's start, 0.9 x per later, were never summed
 * together, and a window let through up to twice its threshold.)
 *
 * A fold table keeps one alert per (kind, agent, host) per period: the
 * first one of a period is written at once; repeats within the period are
 * only counted; when the period ends with repeats, one summary alert
 * carrying their count is written and a new period opens, so a storm
 * yields one line per period. Times are milliseconds of any one clock.
 * The table is bounded: past FOLD_MAX open (kind, agent, host) periods, an
 * alert of a new key folds by (kind, agent) over all hosts, and past
 * FOLD_SPILL_MAX of those by kind alone, so that an agent writing to
 * thousands of hosts under a wildcard rule cannot turn folding off (each
 * alert its own line, to every sink) for everyone else.
 *
 * Owns: a fold table owns its keys and the summaries' strings. */
#ifndef SLUICE_WATCH_WINDOW_H
#define SLUICE_WATCH_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/pos_index.h"
#include "watch/alert.h"

#define WINDOW_TENTHS  10                  /* a bucket is per/WINDOW_TENTHS */
#define WINDOW_SLOTS   (WINDOW_TENTHS + 1) /* the current tenth and ten before it */
#define FOLD_MAX       4096 /* open (kind, agent, host) periods; beyond, new keys spill */
#define FOLD_SPILL_MAX 1024 /* open (kind, agent) spill periods; beyond, by kind alone */

/* What an entry's key holds: a spilled one stands for many hosts (and
 * agents), and its summary says so. */
enum fold_level { FOLD_BY_HOST, FOLD_BY_AGENT, FOLD_BY_KIND, FOLD_LEVELS };

struct window {
    uint64_t per_ms;
    uint64_t width_ms; /* per_ms / WINDOW_TENTHS rounded up, at least 1 */
    uint64_t slot[WINDOW_SLOTS];
    int64_t epoch[WINDOW_SLOTS]; /* bucket number each slot holds; -1 empty */
};

void window_init(struct window *w, uint64_t per_ms);
/* Adds <n> at <now_ms> and returns the window's sum afterwards. */
uint64_t window_add(struct window *w, int64_t now_ms, uint64_t n);
/* The sum over the window ending at <now_ms>. */
uint64_t window_sum(const struct window *w, int64_t now_ms);
/* When the sum, not 0 at <now_ms>, can first be 0 if nothing is added: the
 * start of the tenth in which its newest count leaves it, or, when it holds
 * counts dated after <now_ms> (the clock went back), the end of the
 * current tenth, before which it cannot change. Always after <now_ms>;
 * INT64_MIN when the sum is 0 at <now_ms>. */
int64_t window_empty_at(const struct window *w, int64_t now_ms);

struct fold_entry {
    enum alert_kind kind;
    enum fold_level level;
    char *agent; /* "" for NULL; FOLD_SPILL at FOLD_BY_KIND */
    char *host;  /* "" for NULL, or for per-agent kinds; FOLD_SPILL when spilled */
    int64_t until_ms;
    uint64_t period_ms;
    uint64_t repeats; /* folded since the period opened */
    /* the period was opened by a summary, and holds no line of its own:
     * see fold_admit_trip() */
    bool by_summary;
    /* the last folded alert, for the summary */
    enum alert_severity severity;
    enum tier tier;
    char *alert_host;
    char *id;
    char *detail;
};

struct fold {
    struct fold_entry *e;
    size_t n, cap;
    size_t at[FOLD_LEVELS]; /* entries of each level */
    /* The entries by key: an alert finds its period without a scan of
     * thousands during a storm. */
    struct pos_index index;
};

void fold_init(struct fold *f);
void fold_free(struct fold *f);

typedef void (*fold_emit_fn)(struct alert *a, void *arg);

/* Returns true when <a> should be written now (and opens a period of
 * <period_ms> for its key), false when it is folded into the open period
 * (counted; kept for the summary). <key_host> is the host the key uses
 * (NULL for per-agent kinds). A period of 0 never folds. When the key's
 * period has ended with repeats that fold_expire() has not summarised yet,
 * their summary goes to <fn> first, so that a steady stream of alerts still
 * gets one summary per period. */
bool fold_admit(struct fold *f, const struct alert *a, const char *key_host, int64_t now_ms,
                uint64_t period_ms, fold_emit_fn fn, void *arg);

/* As fold_admit(), for <a>, the alert of a threshold that went over its
 * max from at or under it (a new burst, not one going on): when its key's
 * period was opened by a summary and holds no line yet, <a> is written
 * now (returns true), the repeats before it summarised first, and opens a
 * period of its own. Else folded into it, the burst told only at the end
 * of a period opened before it began, up to that period's length later
 * (a day, for a daily threshold). A storm that goes on keeps its sum over
 * the max and stays folded; a period holds at most a summary and one
 * such line. */
bool fold_admit_trip(struct fold *f, const struct alert *a, const char *key_host, int64_t now_ms,
                     uint64_t period_ms, fold_emit_fn fn, void *arg);

/* True when an alert of key (<kind>, <agent>, <host>) (NULL for "") at
 * <now_ms> would fold into its own key's running period: no line. */
bool fold_holds(const struct fold *f, enum alert_kind kind, const char *agent, const char *host,
                int64_t now_ms);

/* Closes the periods ended by <now_ms>: each with repeats becomes one
 * summary alert (count = repeats) handed to <fn>, and opens a new period;
 * the others are forgotten. Returns the number of summaries. */
size_t fold_expire(struct fold *f, int64_t now_ms, fold_emit_fn fn, void *arg);
/* At shutdown: closes every open period now, ended or not (<now_ms> is the
 * real time); each with repeats becomes a summary handed to <fn>. Returns
 * the number of summaries. */
size_t fold_flush(struct fold *f, int64_t now_ms, fold_emit_fn fn, void *arg);

#endif
