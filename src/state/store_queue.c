/* store_queue: the state store's writes (see store_int.h): queued on the
 * loop (a baseline's or counter's coalesced by key through an index; the
 * queue capped, the oldest dropped and counted, a dropped alert's queue id
 * remembered), handed to the writer's thread (store_writer.c) each tick,
 * taken back committed or put back before those queued since, retried
 * after a backoff; and the stop's last commit and waits. */
#include "state/store_int.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "state/store_writer.h"
#include "util/pos_index.h"
#include "util/units.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- queued writes ---------------------------------------------------------- */

/* The queue row of alert <id> was dropped before it was written. */
static void note_lost_alert(struct store *s, int64_t id)
{
    s->alerts_dropped++;
    if (s->nlost > 0 && id == s->lost[s->nlost - 1].hi + 1) {
        s->lost[s->nlost - 1].hi = id;
    } else if (s->nlost < LOST_RANGES) {
        s->lost[s->nlost].lo = s->lost[s->nlost].hi = id;
        s->nlost++;
    } else if (id > s->lost[s->nlost - 1].hi) {
        s->lost[s->nlost - 1].hi = id;
    }
}

bool store_queue_unwritten(const struct store *s, int64_t id)
{
    return id >= s->qadd_lo && id < s->next_qid;
}

int store_sync(struct store *s)
{
    s->synced = true;
    return store_settle(s, EXIT_BUSY_MS);
}

bool store_queue_lost(const struct store *s, int64_t id)
{
    for (size_t i = 0; i < s->nlost; i++)
        if (id >= s->lost[i].lo && id <= s->lost[i].hi)
            return true;
    return false;
}

/* ---- the index of coalesced writes ------------------------------------------ */

static bool coalesced(enum store_op_kind k)
{
    return k == OP_BASELINE || k == OP_COUNTER;
}

/* FNV-1a over the kind and the key. */
static uint64_t key_hash(enum store_op_kind k, const char *key)
{
    uint64_t h = 14695981039346656037ull ^ (uint64_t)k;
    h *= 1099511628211ull;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        h ^= *p;
        h *= 1099511628211ull;
    }
    return h;
}

/* Indexes every pending coalesced write anew (a new table, or ops moved). */
static void index_fill(struct store *s)
{
    pos_index_empty(&s->index);
    for (size_t i = 0; i < s->nops; i++)
        if (coalesced(s->ops[i].kind))
            pos_index_add(&s->index, key_hash(s->ops[i].kind, s->ops[i].a), i);
}

static void index_off(struct store *s)
{
    pos_index_free(&s->index);
    s->noindex = true;
}

/* Notes the write just queued at ops[nops - 1]. */
static void index_note(struct store *s)
{
    if (s->noindex)
        return;
    int r = pos_index_reserve(&s->index, s->index.used + 1);
    if (r < 0)
        index_off(s);
    else if (r > 0)
        index_fill(s); /* the new table takes the new write too */
    else
        pos_index_add(&s->index, key_hash(s->ops[s->nops - 1].kind, s->ops[s->nops - 1].a),
                      s->nops - 1);
}

/* The pending write of kind <k> for <key>, or NULL. */
static struct store_op *pending_find(struct store *s, enum store_op_kind k, const char *key)
{
    if (s->noindex) {
        for (size_t i = s->nops; i-- > 0;)
            if (s->ops[i].kind == k && strcmp(s->ops[i].a, key) == 0)
                return &s->ops[i];
        return NULL;
    }
    uint64_t h = key_hash(k, key);
    size_t j = POS_INDEX_START, p;
    while ((p = pos_index_next(&s->index, h, &j)) != 0) {
        struct store_op *o = &s->ops[p - 1];
        if (o->kind == k && strcmp(o->a, key) == 0)
            return o;
    }
    return NULL;
}

/* After a commit emptied ops: no table (the next put makes a small one, so
 * that a storm's table is not kept, nor cleared at every commit), and the
 * index back on. */
static void index_clear(struct store *s)
{
    index_off(s);
    s->noindex = false;
}

/* The text <o> holds: what STORE_PENDING_BYTES counts. */
static size_t op_bytes(const struct store_op *o)
{
    return (o->a != NULL ? strlen(o->a) + 1 : 0) + (o->b != NULL ? strlen(o->b) + 1 : 0);
}

/* Whether a write of <need> bytes of text more would be over a cap. */
static bool over_caps(const struct store *s, size_t need)
{
    return s->nops + s->ninflight >= STORE_PENDING_MAX || s->bytes + need > STORE_PENDING_BYTES;
}

/* How many of the oldest queued writes go to bring the writes a tenth of
 * each cap under it (with <need> bytes more): at most all of ops. */
static size_t drop_count(const struct store *s, size_t need)
{
    size_t n = s->nops + s->ninflight, bytes = s->bytes + need, drop = 0;
    while (drop < s->nops && (n > STORE_PENDING_MAX - STORE_PENDING_MAX / 10 ||
                              bytes > STORE_PENDING_BYTES - STORE_PENDING_BYTES / 10)) {
        bytes -= op_bytes(&s->ops[drop]);
        n--;
        drop++;
    }
    return drop;
}

/* Makes room in ops for a write that will hold <need> bytes of text. */
static struct store_op *push(struct store *s, size_t need)
{
    if (over_caps(s, need)) {
        /* Over a cap: the oldest go at once, a tenth of the cap's worth,
         * so that a store that stays locked costs a move of the queue per
         * 10,000 writes (or 6.4 MiB), not per write. The batch in the
         * writer's hands is not the loop's to drop: the oldest of those
         * queued since go, and, when that is not room enough (the writer
         * holds the rest, stuck in a commit), the new one. */
        size_t drop = drop_count(s, need);
        for (size_t i = 0; i < drop; i++) {
            if (s->ops[i].kind == OP_QADD) {
                note_lost_alert(s, s->ops[i].n);
                if (s->inflight == NULL) /* else older rows still wait */
                    s->qadd_lo = s->ops[i].n + 1;
            }
            s->bytes -= op_bytes(&s->ops[i]);
            store_op_free(&s->ops[i]);
        }
        memmove(s->ops, s->ops + drop, (s->nops - drop) * sizeof(*s->ops));
        s->nops -= drop;
        s->dropped += drop;
        if (drop > 0 && s->index.n > 0)
            index_fill(s); /* every position moved */
        if (over_caps(s, need)) {
            s->dropped++;
            return NULL;
        }
    }
    if (s->nops == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        struct store_op *no = realloc(s->ops, nc * sizeof(*no));
        if (no == NULL) {
            s->dropped++;
            return NULL;
        }
        s->ops = no;
        s->cap = nc;
    }
    struct store_op *o = &s->ops[s->nops];
    memset(o, 0, sizeof(*o));
    return o;
}

static int commit_op(struct store *s, struct store_op *o, char *a, char *b, bool need_a,
                     bool need_b)
{
    if ((need_a && a == NULL) || (need_b && b == NULL)) {
        free(a);
        free(b);
        s->dropped++;
        return -1;
    }
    o->a = a;
    o->b = b;
    s->nops++;
    s->bytes += op_bytes(o);
    return 0;
}

int store_put_contact(struct store *s, const char *agent, const char *host, int64_t first_ms)
{
    struct store_op *o = push(s, strlen(agent) + strlen(host) + 2);
    if (o == NULL)
        return -1;
    o->kind = OP_CONTACT;
    o->n = first_ms;
    return commit_op(s, o, strdup(agent), strdup(host), true, true);
}

int store_put_baseline(struct store *s, const char *agent, const struct store_baseline *b)
{
    /* Only the latest value of an agent's baseline matters. */
    struct store_op *o = pending_find(s, OP_BASELINE, agent);
    if (o != NULL) {
        o->bl = *b;
        return 0;
    }
    o = push(s, strlen(agent) + 1);
    if (o == NULL)
        return -1;
    o->kind = OP_BASELINE;
    o->bl = *b;
    if (commit_op(s, o, strdup(agent), NULL, true, false) < 0)
        return -1;
    index_note(s);
    return 0;
}

/* <value> as the counter table holds it: SQLite's integers are signed, and
 * one past INT64_MAX was stored negative, read back as 0 at the next
 * start; it stays at INT64_MAX. */
static int64_t counter_row(uint64_t value)
{
    return value > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)value;
}

int store_put_counter(struct store *s, const char *name, uint64_t value)
{
    struct store_op *o = pending_find(s, OP_COUNTER, name);
    if (o != NULL) {
        o->n = counter_row(value);
        return 0;
    }
    o = push(s, strlen(name) + 1);
    if (o == NULL)
        return -1;
    o->kind = OP_COUNTER;
    o->n = counter_row(value);
    if (commit_op(s, o, strdup(name), NULL, true, false) < 0)
        return -1;
    index_note(s);
    return 0;
}

int64_t store_queue_add(struct store *s, const char *sink, const char *body)
{
    struct store_op *o = push(s, strlen(sink) + strlen(body) + 2);
    if (o == NULL)
        return -1;
    o->kind = OP_QADD;
    o->n = s->next_qid;
    o->m = now_ms();
    if (commit_op(s, o, strdup(sink), strdup(body), true, true) < 0)
        return -1;
    return s->next_qid++;
}

int store_queue_attempts(struct store *s, int64_t id, int attempts)
{
    struct store_op *o = push(s, 0);
    if (o == NULL)
        return -1;
    o->kind = OP_QATTEMPTS;
    o->n = id;
    o->m = attempts;
    return commit_op(s, o, NULL, NULL, false, false);
}

int store_queue_trim_later(struct store *s, const char *const *sinks, size_t n, int64_t keep)
{
    json_t *keys = json_array();
    for (size_t i = 0; keys != NULL && i < n; i++)
        if (json_array_append_new(keys, json_string(sinks[i])) != 0) {
            json_decref(keys);
            keys = NULL;
        }
    char *text = keys != NULL ? json_dumps(keys, JSON_COMPACT) : NULL;
    json_decref(keys);
    struct store_op *o = text != NULL ? push(s, strlen(text) + 1) : NULL;
    if (o == NULL) {
        free(text);
        s->dropped++;
        return -1;
    }
    o->kind = OP_QTRIM;
    o->n = keep;
    o->m = 0;
    return commit_op(s, o, NULL, text, false, true);
}

uint64_t store_queue_trimmed(const struct store *s)
{
    return s->trimmed;
}

int store_queue_del(struct store *s, const char *sink, int64_t id)
{
    struct store_op *o = push(s, strlen(sink) + 1);
    if (o == NULL)
        return -1;
    o->kind = OP_QDEL;
    o->n = id;
    return commit_op(s, o, strdup(sink), NULL, true, false);
}

const char *store_broken(const struct store *s)
{
    return s != NULL && s->broken[0] != '\0' ? s->broken : NULL;
}

const char *store_stuck(const struct store *s)
{
    return s != NULL && s->writer != NULL ? store_writer_stuck(s->writer) : NULL;
}

bool store_dirty(const struct store *s)
{
    return s != NULL && (s->nops > 0 || store_writer_holding(s->writer));
}

size_t store_pending(const struct store *s)
{
    return s->nops + s->ninflight;
}

size_t store_pending_bytes(const struct store *s)
{
    return s->bytes;
}

uint64_t store_dropped(const struct store *s)
{
    return s->dropped;
}

/* Says on standard error how many writes were dropped since it last did. */
void store_tell_dropped(struct store *s)
{
    if (s->dropped == s->dropped_said)
        return;
    fprintf(stderr,
            "sluice: state %s: %" PRIu64 " write(s) dropped so far (over %u, or %u MiB, "
            "waiting for a commit, or out of memory), %" PRIu64 " of them queued webhook "
            "alerts: first contacts, baselines, queued webhook alerts or counters written "
            "meanwhile may be missing after a restart\n",
            s->shown, s->dropped, (unsigned)STORE_PENDING_MAX,
            (unsigned)(STORE_PENDING_BYTES >> 20), s->alerts_dropped);
    s->dropped_said = s->dropped;
}

/* Drops <ops> (<n>), counted, and frees the array. */
static void drop_ops(struct store *s, struct store_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ops[i].kind == OP_QADD)
            note_lost_alert(s, ops[i].n);
        s->bytes -= op_bytes(&ops[i]);
        store_op_free(&ops[i]);
    }
    s->dropped += n;
    free(ops);
}

/* Puts <ops> (<n>), a batch the writer could not commit, back before the
 * writes queued since (taking the array), so that they commit in the order
 * they were queued: a queue row's deletion never before its insertion. A
 * baseline or counter queued again since holds the newer value: the
 * batch's copy goes, as a put would have updated it in place. Out of
 * memory, the batch is dropped (counted). */
static void requeue(struct store *s, struct store_op *ops, size_t n)
{
    size_t keep = 0;
    for (size_t i = 0; i < n; i++) {
        if (coalesced(ops[i].kind) && pending_find(s, ops[i].kind, ops[i].a) != NULL) {
            s->bytes -= op_bytes(&ops[i]);
            store_op_free(&ops[i]);
        } else
            ops[keep++] = ops[i];
    }
    if (keep == 0) {
        free(ops);
        return;
    }
    struct store_op *all = realloc(ops, (keep + s->nops) * sizeof(*all));
    if (all == NULL) {
        drop_ops(s, ops, keep);
        return;
    }
    if (s->nops > 0)
        memcpy(all + keep, s->ops, s->nops * sizeof(*all));
    free(s->ops);
    s->ops = all;
    s->nops += keep;
    s->cap = s->nops;
    if (s->noindex)
        return;
    if (pos_index_reserve(&s->index, s->nops) < 0)
        index_off(s);
    else
        index_fill(s); /* every position moved */
}

/* Takes back the writer's batch when it has finished it: frees it once
 * committed, puts it back before the writes queued since when not (and
 * says so once). <*came>: whether one came back. Never waits. */
static enum store_commit collect(struct store *s, bool *came)
{
    struct store_op *ops = NULL;
    size_t n = 0;
    enum store_commit rc = STORE_COMMITTED;
    char err[STORE_WRITER_ERR];
    *came = store_writer_collect(s->writer, &ops, &n, &rc, err);
    if (!*came)
        return STORE_COMMITTED;
    s->inflight = NULL;
    s->ninflight = 0;
    if (rc == STORE_COMMITTED) {
        s->commits++;
        for (size_t i = 0; i < n; i++) {
            if (ops[i].kind == OP_QTRIM && ops[i].m > 0)
                s->trimmed += (uint64_t)ops[i].m;
            s->bytes -= op_bytes(&ops[i]);
            store_op_free(&ops[i]);
        }
        free(ops);
        if (s->qadd_lo < s->inflight_qid_end)
            s->qadd_lo = s->inflight_qid_end;
        if (s->failing)
            fprintf(stderr, "sluice: state %s: writing again\n", s->shown);
        s->failing = false;
        s->broken[0] = '\0';
        return rc;
    }
    if (rc == STORE_FAILED)
        snprintf(s->broken, sizeof(s->broken), "%s", err);
    else
        s->broken[0] = '\0';
    if (!s->failing)
        fprintf(stderr,
                "sluice: state %s: cannot write: %s (%zu write(s) kept for retry; the gate "
                "goes on)\n",
                s->shown, err, n + s->nops);
    s->failing = true;
    requeue(s, ops, n);
    return rc;
}

/* Hands the queued writes to the writer, whose locks wait up to <busy_ms>,
 * unless it holds a batch still. Never waits. */
static void hand_over(struct store *s, int busy_ms)
{
    if (s->nops == 0 || store_writer_hand(s->writer, s->ops, s->nops, busy_ms) < 0)
        return;
    s->inflight = s->ops;
    s->ninflight = s->nops;
    s->inflight_qid_end = s->next_qid;
    s->ops = NULL;
    s->nops = s->cap = 0;
    index_clear(s);
}

/* After a batch came back <rc>: a lock is cheap to try again next tick; a
 * commit that failed past it waits, doubling from RETRY_MS. */
static void back_off(struct store *s, enum store_commit rc)
{
    if (rc != STORE_FAILED) {
        s->retry_at_ms = 0;
        s->retry_ms = 0;
        return;
    }
    s->retry_ms = s->retry_ms == 0 ? RETRY_MS : s->retry_ms * 2;
    if (s->retry_ms > RETRY_MAX_MS)
        s->retry_ms = RETRY_MAX_MS;
    s->retry_at_ms = (int64_t)monotonic_ms() + s->retry_ms;
}

int store_flush(struct store *s)
{
    if (s == NULL)
        return 0;
    bool came = false;
    sqlite3_busy_timeout(s->db, 0); /* the loop's reads from here on: never wait for a lock */
    enum store_commit rc = collect(s, &came);
    if (came)
        back_off(s, rc);
    if ((came && rc == STORE_COMMITTED) || s->dropped_said == 0)
        store_tell_dropped(s); /* the first drop, then once writing again */
    if (s->retry_at_ms == 0 || (int64_t)monotonic_ms() >= s->retry_at_ms)
        hand_over(s, 0); /* from the loop: the writer never waits for a lock */
    return s->failing ? -1 : 0;
}

/* Waits for the writer with <wait> (its batch, or the read it runs) as
 * long as the thread makes progress (a statement within EXIT_STALL_MS);
 * not at all once it was found stuck. Returns true when the wait ended
 * (or there was nothing to wait for). For the stop only. */
static bool wait_moving(struct store *s, bool (*wait)(struct store_writer *, int64_t))
{
    if (s->stuck)
        return wait(s->writer, 0);
    unsigned long seen = store_writer_progress(s->writer);
    while (!wait(s->writer, (int64_t)monotonic_ms() + EXIT_STALL_MS)) {
        unsigned long now = store_writer_progress(s->writer);
        if (now == seen) {
            s->stuck = true;
            return false;
        }
        seen = now;
    }
    return true;
}

/* The writer's batch. */
static bool wait_writer(struct store *s)
{
    return wait_moving(s, store_writer_wait);
}

/* The read the writer runs (a sink's, cancelled or not): one in the
 * thread's hands at store_writer_stop() keeps the writer (and its memory)
 * for the process's life, as a stuck commit does; a read that ends by
 * itself is waited for. */
void store_wait_read(struct store *s)
{
    (void)wait_moving(s, store_writer_wait_read);
}

/* At the stop: commits what waits through the writer and waits for it
 * (wait_writer()): the batch it holds, then once more what is left, whose
 * locks wait up to <busy_ms> for another process. Returns 0, or -1 when
 * writes are left (the commit failed, or the writer is stuck in it). */
int store_settle(struct store *s, int busy_ms)
{
    for (bool handed = false;; handed = true) {
        bool came = false;
        if (!wait_writer(s))
            return -1;
        collect(s, &came);
        if (s->nops == 0 || handed)
            break;
        hand_over(s, busy_ms);
    }
    return s->nops == 0 && s->ninflight == 0 ? 0 : -1;
}

/* Says on standard error which writes a stop leaves unwritten <when>. */
void store_say_unwritten(const struct store *s, const char *when)
{
    if (store_writer_holding(s->writer))
        fprintf(stderr,
                "sluice: state %s: %zu write(s) not written %s: the writer's commit has not "
                "moved for %d ms (its file system does not answer?)\n",
                s->shown, s->nops + s->ninflight, when, EXIT_STALL_MS);
    else
        fprintf(stderr, "sluice: state %s: %zu write(s) lost %s\n", s->shown, s->nops, when);
}
