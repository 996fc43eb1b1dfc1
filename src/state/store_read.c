/* store_read: the state store's reads (see store_int.h): the tables
 * loaded at start, on the loop's connection (and the start's trim of the
 * queue rows of webhooks no longer configured), and the webhooks' reads of
 * the alert queue, run one at a time on the writer's thread and merged
 * with the writes not yet committed, as those leave the queue. */
#include "state/store_int.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "state/store_writer.h"
#include "util/id_set.h"

/* ---- loading -------------------------------------------------------------- */

static const char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t != NULL ? (const char *)t : "";
}

static int load_fail(struct store *s, sqlite3_stmt *st)
{
    char e[SHOWN_MAX];
    fprintf(stderr, "sluice: state %s: cannot read: %s\n", s->shown,
            store_db_error(s->db, e, sizeof(e)));
    sqlite3_finalize(st);
    return -1;
}

int store_load_contacts(struct store *s, store_contact_fn fn, void *arg)
{
    sqlite3_stmt *st = NULL;
    int n = 0, rc;
    if (sqlite3_prepare_v2(s->db, "SELECT agent, host, first_ms FROM first_contact", -1, &st,
                           NULL) != SQLITE_OK)
        return load_fail(s, st);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        fn(col_text(st, 0), col_text(st, 1), sqlite3_column_int64(st, 2), arg);
        n++;
    }
    if (rc != SQLITE_DONE)
        return load_fail(s, st);
    sqlite3_finalize(st);
    return n;
}

int store_load_baselines(struct store *s, int limit, store_baseline_fn fn, void *arg)
{
    sqlite3_stmt *st = NULL;
    int n = 0, rc;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT agent, req_avg, bytes_avg, since_ms, minute FROM baseline "
                           "ORDER BY minute DESC LIMIT ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return load_fail(s, st);
    sqlite3_bind_int(st, 1, limit > 0 ? limit : 0);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct store_baseline b = {
            .req_avg = sqlite3_column_double(st, 1),
            .bytes_avg = sqlite3_column_double(st, 2),
            .since_ms = sqlite3_column_int64(st, 3),
            .minute = sqlite3_column_int64(st, 4),
        };
        fn(col_text(st, 0), &b, arg);
        n++;
    }
    if (rc != SQLITE_DONE)
        return load_fail(s, st);
    sqlite3_finalize(st);
    return n;
}

/* ---- the queue as the writes not yet committed leave it ----------------------- */

/* The <i>th write not yet committed, oldest first: the writer's batch, then
 * those queued since; NULL past the last. */
static const struct store_op *unwritten_at(const struct store *s, size_t i)
{
    if (i < s->ninflight)
        return &s->inflight[i];
    return i - s->ninflight < s->nops ? &s->ops[i - s->ninflight] : NULL;
}

/* The ids of the queue rows whose deletion is not committed yet, sorted,
 * into <*ids> (malloc'd; NULL when none) and <*n>. Returns 0, or -1 when
 * out of memory. */
static int deleting(const struct store *s, int64_t **ids, size_t *n)
{
    const struct store_op *o;
    *ids = NULL;
    *n = 0;
    size_t count = 0;
    for (size_t i = 0; (o = unwritten_at(s, i)) != NULL; i++)
        count += o->kind == OP_QDEL;
    if (count == 0)
        return 0;
    if ((*ids = malloc(count * sizeof(**ids))) == NULL)
        return -1;
    for (size_t i = 0; (o = unwritten_at(s, i)) != NULL; i++)
        if (o->kind == OP_QDEL)
            (*ids)[(*n)++] = o->n;
    id_set_sort(*ids, *n);
    return 0;
}

/* The next write not yet committed, from the <*at>th on, that adds a queue
 * row of <sink>, or NULL. Such rows' ids rise with their place (handed out
 * in order, batches committed in order). */
static const struct store_op *next_unwritten_row(const struct store *s, size_t *at,
                                                 const char *sink)
{
    const struct store_op *o;
    while ((o = unwritten_at(s, (*at)++)) != NULL)
        if (o->kind == OP_QADD && strcmp(o->a, sink) == 0)
            return o;
    return NULL;
}

/* The committed queue rows a read on the writer's thread brought
 * (store_queue_read()), in id order. */
struct row_src {
    const struct store_read *r;
    size_t at;
    int rc; /* SQLITE_ROW while on a row */
};

static void src_step(struct row_src *src)
{
    src->rc = src->at++ < src->r->nrows ? SQLITE_ROW : SQLITE_DONE;
}

static int64_t src_id(const struct row_src *src)
{
    return src->r->rows[src->at - 1].id;
}

/* Calls <fn> with the row <src> is on. */
static void src_call(const struct row_src *src, const char *sink, store_queue_fn fn, void *arg)
{
    const struct store_row *row = &src->r->rows[src->at - 1];
    fn(row->id, sink, row->body, row->attempts, arg);
}

/* True when <src> has no row left and the sink has none past it: a read
 * brings its oldest rows only, and the rows the writes not yet committed
 * add cannot go before those it did not bring. */
static bool src_whole(const struct row_src *src)
{
    return src->r->end;
}

/* The committed rows of <src> and those the writes not yet committed add,
 * merged in id order, without those whose deletion waits, up to <limit> to
 * <fn>; <*all> tells whether the sink has no row past them. A row the
 * writer committed while <src> was read is read once. Returns the number
 * of rows, or -1 when out of memory. */
static int merged_rows(struct store *s, struct row_src *src, const char *sink, int limit,
                       store_queue_fn fn, void *arg, bool *all)
{
    int64_t *del = NULL;
    size_t ndel = 0, at = 0;
    *all = false;
    if (deleting(s, &del, &ndel) < 0) {
        fprintf(stderr, "sluice: state %s: cannot read: out of memory\n", s->shown);
        return -1;
    }
    const struct store_op *add = next_unwritten_row(s, &at, sink);
    int n = 0;
    src_step(src);
    while (n < limit && (src->rc == SQLITE_ROW || (add != NULL && src_whole(src)))) {
        int64_t id = src->rc == SQLITE_ROW ? src_id(src) : INT64_MAX;
        if (add != NULL && add->n <= id) {
            if (add->n == id)
                src_step(src); /* committed meanwhile: once */
            if (!id_set_has(del, ndel, add->n)) {
                fn(add->n, add->a, add->b, 0, arg);
                n++;
            }
            add = next_unwritten_row(s, &at, sink);
            continue;
        }
        if (!id_set_has(del, ndel, id)) {
            src_call(src, sink, fn, arg);
            n++;
        }
        src_step(src);
    }
    free(del);
    *all = n < limit && src->rc != SQLITE_ROW && add == NULL && src_whole(src);
    return n;
}

/* Calls <fn> with the text and the count of each row <sql> yields (a name,
 * then a non-negative integer). Returns the number of rows, or -1. */
static int name_count_rows(struct store *s, const char *sql, store_counter_fn fn, void *arg)
{
    sqlite3_stmt *st = NULL;
    int n = 0, rc;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return load_fail(s, st);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        sqlite3_int64 v = sqlite3_column_int64(st, 1);
        fn(col_text(st, 0), v > 0 ? (uint64_t)v : 0, arg);
        n++;
    }
    if (rc != SQLITE_DONE)
        return load_fail(s, st);
    sqlite3_finalize(st);
    return n;
}

int store_count_queue(struct store *s, store_queued_fn fn, void *arg)
{
    return name_count_rows(s, "SELECT sink, count(*) FROM alert_queue GROUP BY sink ORDER BY sink",
                           fn, arg);
}

int64_t store_trim_unconfigured(struct store *s, const char *const *sinks, size_t n, int64_t keep)
{
    static const char head[] = "DELETE FROM alert_queue WHERE id IN (SELECT id FROM alert_queue "
                               "WHERE sink NOT IN (";
    static const char tail[] = ") ORDER BY id DESC LIMIT -1 OFFSET ?)";
    if (n > STORE_TRIM_SINKS_MAX || keep < 0)
        return -1;
    size_t len = sizeof(head) - 1 + 2 * n + sizeof(tail);
    char *sql = malloc(len);
    if (sql == NULL)
        return -1;
    size_t at = sizeof(head) - 1;
    memcpy(sql, head, at);
    for (size_t i = 0; i < n; i++) { /* "?,?,?" */
        const char *mark = i == 0 ? "?" : ",?";
        size_t mark_len = i == 0 ? 1 : 2;
        memcpy(sql + at, mark, mark_len);
        at += mark_len;
    }
    memcpy(sql + at, tail, sizeof(tail)); /* its NUL too */
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    free(sql);
    for (size_t i = 0; rc == SQLITE_OK && i < n; i++)
        rc = sqlite3_bind_text(st, (int)i + 1, sinks[i], -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, (int)n + 1, keep);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        char e[SHOWN_MAX];
        fprintf(stderr,
                "sluice: state %s: cannot drop the oldest queued alerts of webhooks no longer "
                "configured: %s (tried again at the next start)\n",
                s->shown, store_db_error(s->db, e, sizeof(e)));
        sqlite3_finalize(st);
        return -1;
    }
    sqlite3_finalize(st);
    return sqlite3_changes64(s->db);
}

/* How the writes not yet committed change <sink>'s row count: one up for
 * each row they add, one down for each they delete (a deletion names its
 * row's sink), except the deletion of a row whose addition was dropped
 * (over STORE_PENDING_MAX: never there to delete). */
static int64_t unwritten_count_of(const struct store *s, const char *sink, size_t from)
{
    const struct store_op *o;
    int64_t n = 0;
    for (size_t i = from; (o = unwritten_at(s, i)) != NULL; i++) {
        if ((o->kind != OP_QADD && o->kind != OP_QDEL) || o->a == NULL || strcmp(o->a, sink) != 0)
            continue;
        if (o->kind == OP_QADD)
            n++;
        else if (!store_queue_lost(s, o->n))
            n--;
    }
    return n;
}

/* ---- the webhooks' reads, on the writer's thread ---------------------------- */

enum { READ_WAITING, READ_HELD, READ_DONE };

/* Takes back the read the writer ran, if it has, and hands it the next
 * one waiting, if any. Never waits. */
static void reads_move(struct store *s)
{
    struct store_read *r;
    if (s->read_held != NULL && store_writer_read_done(s->writer, &r)) {
        s->read_held = NULL;
        if (r->cancelled)
            store_read_free(r);
        else
            r->state = READ_DONE;
    }
    if (s->read_held != NULL || (r = s->reads) == NULL)
        return;
    if ((s->reads = r->next) == NULL)
        s->reads_tail = &s->reads;
    r->next = NULL;
    /* The rows whose deletion waits are passed over by the thread, as the
     * merge leaves them out: neither their bodies held nor their bytes
     * counted against the read's (a sink that just delivered a memory's
     * worth would read it all again). One whose deletion is committed by
     * the take has the read run again (store_queue_read_take()). Out of
     * memory for the list, they are read, and left out by the merge. */
    free(r->skip);
    (void)deleting(s, &r->skip, &r->nskip); /* out of memory: NULL and 0 */
    r->limit = r->want;
    store_writer_read(s->writer, r); /* holds none: read_held is NULL */
    r->state = READ_HELD;
    s->read_held = r;
}

/* Puts <r> in line: first when <first> (a read to run again), else last. */
static void reads_queue(struct store *s, struct store_read *r, bool first)
{
    r->state = READ_WAITING;
    if (first) {
        if ((r->next = s->reads) == NULL)
            s->reads_tail = &r->next;
        s->reads = r;
    } else {
        r->next = NULL;
        *s->reads_tail = r;
        s->reads_tail = &r->next;
    }
}

struct store_read *store_queue_read(struct store *s, const char *sink, int limit, size_t max_bytes,
                                    bool one_over)
{
    struct store_read *r = calloc(1, sizeof(*r));
    if (r == NULL || (r->sink = strdup(sink)) == NULL) {
        free(r);
        return NULL;
    }
    r->want = limit > 0 ? limit : 0;
    r->max_bytes = max_bytes;
    r->one_over = one_over;
    reads_queue(s, r, false);
    reads_move(s);
    return r;
}

/* Forgets what the writer's thread brought for <r>, to be read again. */
static void read_reset(struct store_read *r)
{
    for (size_t i = 0; i < r->nrows; i++)
        free(r->rows[i].body);
    free(r->rows);
    r->rows = NULL;
    r->nrows = 0;
    r->end = false;
    r->count = 0;
    r->rc = 0;
}

int store_queue_read_take(struct store *s, struct store_read *r, store_queue_fn fn, void *arg,
                          struct store_read_got *got)
{
    reads_move(s);
    if (r->state != READ_DONE)
        return 1;
    if (r->commits < s->commits) {
        /* A batch committed after the read ran has been collected since:
         * its writes, which the read did not see, no longer wait in
         * memory either. Read again. */
        read_reset(r);
        reads_queue(s, r, true);
        reads_move(s);
        return 1;
    }
    int rc = -1;
    if (r->rc < 0) {
        fprintf(stderr, "sluice: state %s: cannot read: %s\n", s->shown, r->err);
        goto out;
    }
    /* The batch in the writer's hands was committed before the read ran
     * when the read counted one commit more than the loop collected: its
     * rows are in the read (the merge takes them once), and its writes are
     * not counted again. */
    size_t seen = r->commits > s->commits ? s->ninflight : 0;
    struct row_src src = {.r = r};
    got->rows = merged_rows(s, &src, r->sink, r->want, fn, arg, &got->all);
    if (got->rows < 0)
        goto out;
    int64_t count = r->count + unwritten_count_of(s, r->sink, seen);
    got->count = count > 0 ? count : 0;
    rc = 0;
out:
    store_read_free(r);
    return rc;
}

void store_queue_read_cancel(struct store *s, struct store_read *r)
{
    if (r == NULL)
        return;
    if (r->state == READ_HELD) {
        r->cancelled = true; /* the writer's: freed when it gives it back */
        return;
    }
    if (r->state == READ_WAITING) {
        struct store_read **p = &s->reads;
        while (*p != r)
            p = &(*p)->next;
        if ((*p = r->next) == NULL)
            s->reads_tail = p;
    }
    store_read_free(r);
}

int store_load_counters(struct store *s, store_counter_fn fn, void *arg)
{
    return name_count_rows(s, "SELECT name, value FROM counter", fn, arg);
}
