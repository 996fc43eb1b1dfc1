/* store_writer: the state store's commits, on a thread (see store_writer.h). */
#include "state/store_writer.h"
#include "state/db_thread.h"
#include "state/wal_checkpointer.h"
#include "util/id_set.h"
#include "util/text_json.h"
#include "util/units.h"

#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include <sqlite3.h>

enum slot { SLOT_EMPTY, SLOT_QUEUED, SLOT_RUNNING, SLOT_DONE }; /* RUNNING: reads only */

struct store_writer {
    /* The thread, its own connection, mu, and cond: a batch came (the
     * thread waits), or one is done (a stop waits). */
    struct db_thread t;
    enum slot slot;       /* under mu */
    bool stopping;        /* under mu */
    struct store_op *ops; /* the batch; under mu, read by the thread while SLOT_QUEUED */
    size_t n;
    int busy_ms;
    enum store_commit rc;       /* under mu, once SLOT_DONE */
    char err[STORE_WRITER_ERR]; /* likewise */
    bool held;                  /* the loop's own: handed over, not collected */
    unsigned long commits;      /* batches committed; under mu */
    /* The read (store_writer_read()): under mu, the request's and the
     * outcome's fields the thread's while RSLOT is SLOT_QUEUED. */
    enum slot rslot;
    struct store_read *read;
    bool read_held;        /* the loop's own */
    atomic_ulong progress; /* statements the thread has run */
    /* CLOCK_MONOTONIC ms when the thread last moved (took a batch or a
     * read, or ran a statement of it), or when work was handed to an idle
     * thread: a batch or read under way that has not moved for
     * STORE_WRITER_STUCK_MS waits for a file system that does not answer
     * (store_writer_stuck()). */
    atomic_uint_least64_t moved_ms;
    struct wal_checkpointer *checkpointer;
};

/* A writer left inside a commit at exit (store_writer_stop()): still the
 * thread's, so kept reachable rather than freed (or reported as a leak). */
static struct store_writer *volatile abandoned;

void store_op_free(struct store_op *o)
{
    free(o->a);
    free(o->b);
}

void store_read_free(struct store_read *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->nrows; i++)
        free(r->rows[i].body);
    free(r->rows);
    free(r->skip);
    free(r->sink);
    free(r);
}

static const char *const op_sql[] = {
    [OP_CONTACT] = "INSERT OR IGNORE INTO first_contact(agent, host, first_ms) VALUES(?1, ?2, ?3)",
    [OP_BASELINE] = "INSERT OR REPLACE INTO baseline(agent, req_avg, bytes_avg, since_ms, minute)"
                    " VALUES(?1, ?4, ?5, ?3, ?6)",
    [OP_COUNTER] = "INSERT OR REPLACE INTO counter(name, value) VALUES(?1, ?3)",
    [OP_QADD] = "INSERT OR REPLACE INTO alert_queue(id, sink, body, attempts, created_ms)"
                " VALUES(?3, ?1, ?2, 0, ?6)",
    [OP_QATTEMPTS] = "UPDATE alert_queue SET attempts = ?6 WHERE id = ?3",
    [OP_QDEL] = "DELETE FROM alert_queue WHERE id = ?3",
    [OP_QTRIM] =
        "DELETE FROM alert_queue WHERE id IN (SELECT id FROM alert_queue WHERE sink NOT IN "
        "(SELECT value FROM json_each(?2)) ORDER BY id DESC LIMIT -1 OFFSET ?3)",
};

static void bind_op(sqlite3_stmt *st, const struct store_op *o)
{
    int np = sqlite3_bind_parameter_count(st);
    for (int i = 1; i <= np; i++) {
        const char *name = sqlite3_bind_parameter_name(st, i);
        int which = name != NULL ? atoi(name + 1) : i;
        switch (which) {
        case 1:
            sqlite3_bind_text(st, i, o->a, -1, SQLITE_STATIC);
            break;
        case 2:
            sqlite3_bind_text(st, i, o->b, -1, SQLITE_STATIC);
            break;
        case 3:
            sqlite3_bind_int64(st, i, o->kind == OP_BASELINE ? o->bl.since_ms : o->n);
            break;
        case 4:
            sqlite3_bind_double(st, i, o->bl.req_avg);
            break;
        case 5:
            sqlite3_bind_double(st, i, o->bl.bytes_avg);
            break;
        case 6:
            sqlite3_bind_int64(st, i, o->kind == OP_BASELINE ? o->bl.minute : o->m);
            break;
        default:
            break;
        }
    }
}

/* The thread moves: one more statement, or a batch or read taken up. */
static void thread_moved(struct store_writer *w)
{
    atomic_fetch_add_explicit(&w->progress, 1, memory_order_relaxed);
    atomic_store_explicit(&w->moved_ms, monotonic_ms(), memory_order_relaxed);
}

static int run_op(struct store_writer *w, sqlite3_stmt **cache, const struct store_op *o)
{
    sqlite3 *db = w->t.db;
    sqlite3_stmt **st = &cache[o->kind];
    thread_moved(w);
    if (*st == NULL && sqlite3_prepare_v2(db, op_sql[o->kind], -1, st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_reset(*st);
    sqlite3_clear_bindings(*st);
    bind_op(*st, o);
    return sqlite3_step(*st) == SQLITE_DONE ? 0 : -1;
}

/* Whether the store's path can be looked at. Once serve has dropped to a
 * --user that may not search the store's folder (one root made 0750), the
 * stat() of SQLite's moved check fails with EACCES, which it takes for
 * "moved": every commit would fail, though the descriptors opened before
 * the drop still reach the file. Only root or the folder's owner can move
 * it then; the check is skipped rather than failing every commit. */
static bool store_path_visible(sqlite3 *db)
{
    const char *path = sqlite3_db_filename(db, "main");
    struct stat st;
    return path == NULL || path[0] == '\0' || stat(path, &st) == 0 ||
           (errno != EACCES && errno != EPERM);
}

/* Readies the system's error of the statement about to run on <db>, for
 * db_failure_into(): errno cleared, so that what its failure leaves is its
 * own, and SQLite's record of one returned, to tell whether the statement
 * changed it. */
static int statement_starts(sqlite3 *db)
{
    errno = 0;
    return sqlite3_system_errno(db);
}

/* Writes <db>'s last error into <err> (STORE_WRITER_ERR bytes), shown
 * safely (the store's own text can be in it: a constraint's name), and,
 * where a system call failed, the system's error after it: SQLite says
 * "disk I/O error" for a log past RLIMIT_FSIZE, a failing disk or a file
 * system gone read-only alike, and only errno tells them apart. SQLite
 * records errno for its connection on some paths only (a statement's
 * failing step, not a COMMIT's write of the log), and keeps it until it
 * records another: its record counts only when it changed during the
 * statement (<recorded_before>, statement_starts()'s), else a later
 * failure was told with an earlier one's error ('File too large' long
 * after room was back). Otherwise <sys_errno>, errno as the failed
 * statement left it, stands in; with neither, no system error is named. */
static void db_failure_into(sqlite3 *db, int recorded_before, int sys_errno, char *err)
{
    text_shown_into(err, STORE_WRITER_ERR, sqlite3_errmsg(db));
    int code = sqlite3_errcode(db) & 0xff, sys = sqlite3_system_errno(db);
    if (sys == recorded_before)
        sys = sys_errno;
    size_t n = strlen(err);
    /* only these two codes come from a system call's failure */
    if ((code == SQLITE_IOERR || code == SQLITE_CANTOPEN) && sys != 0 && n < STORE_WRITER_ERR)
        snprintf(err + n, STORE_WRITER_ERR - n, " (%s)", strerror(sys));
}

/* Commits <w>'s batch in one transaction, on the thread. On failure SQLite's
 * error goes to <err>. */
static enum store_commit commit_batch(struct store_writer *w, char *err)
{
    sqlite3_stmt *cache[OP_QTRIM + 1] = {NULL};
    enum store_commit rc = STORE_COMMITTED;
    /* sluice.db moved, deleted, or replaced (by a symbolic link, which the
     * start refuses) since it was opened: SQLite writes on, in WAL mode
     * without an error, through the descriptors it holds, into a file a
     * restart does not open, and every first contact and queued alert
     * committed since would be lost without a word. The path looked at
     * (two stat()s), here on the writer's thread (a hung file system holds it, not
     * the loop); the batch fails, told and kept for retry like a full disk. */
    int moved = 0;
    if (store_path_visible(w->t.db) &&
        sqlite3_file_control(w->t.db, "main", SQLITE_FCNTL_HAS_MOVED, &moved) == SQLITE_OK &&
        moved) {
        snprintf(err, STORE_WRITER_ERR,
                 "the database file was moved, replaced or deleted since the gateway opened it: "
                 "its writes would reach no file a restart reads (put it back, or restart)");
        return STORE_FAILED;
    }
    /* errno is cleared before each statement and kept as its failure
     * leaves it: cleared once, before BEGIN, a failed COMMIT was told with
     * what a call of an earlier statement had left */
    int sys_errno = 0;
    int recorded = statement_starts(w->t.db);
    if (sqlite3_exec(w->t.db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        sys_errno = errno;
        rc = STORE_LOCKED;
        goto out;
    }
    for (size_t i = 0; i < w->n && rc == STORE_COMMITTED; i++) {
        recorded = statement_starts(w->t.db);
        if (run_op(w, cache, &w->ops[i]) < 0) {
            sys_errno = errno;
            rc = STORE_FAILED;
        } else if (w->ops[i].kind == OP_QTRIM) {
            w->ops[i].m = sqlite3_changes64(w->t.db); /* the loop counts them once committed */
        }
    }
    thread_moved(w);
    if (rc == STORE_COMMITTED)
        recorded = statement_starts(w->t.db);
    if (rc == STORE_COMMITTED && sqlite3_exec(w->t.db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        sys_errno = errno;
        rc = STORE_FAILED;
    }
out:
    if (rc != STORE_COMMITTED) {
        db_failure_into(w->t.db, recorded, sys_errno,
                        err); /* before the rollback, which may clear it */
        sqlite3_exec(w->t.db, "ROLLBACK", NULL, NULL, NULL);
    }
    for (size_t i = 0; i < sizeof(cache) / sizeof(cache[0]); i++)
        sqlite3_finalize(cache[i]);
    return rc;
}

/* Appends the row <st> is on to <r>'s rows. Returns 0, or -1 when out of
 * memory. */
static int read_row(struct store_read *r, sqlite3_stmt *st, size_t *cap)
{
    if (r->nrows == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        struct store_row *nr = realloc(r->rows, nc * sizeof(*nr));
        if (nr == NULL)
            return -1;
        r->rows = nr;
        *cap = nc;
    }
    const unsigned char *body = sqlite3_column_text(st, 1);
    struct store_row *row = &r->rows[r->nrows];
    row->id = sqlite3_column_int64(st, 0);
    row->attempts = sqlite3_column_int(st, 2);
    if ((row->body = strdup(body != NULL ? (const char *)body : "")) == NULL)
        return -1;
    r->nrows++;
    return 0;
}

/* Steps <st> (bound and ready) until <r> has its rows, or the bytes of
 * their bodies would pass its max_bytes with the next (at a row left, the
 * read is not at the end), or to the end; returns SQLite's last code. */
static int read_rows(struct store_read *r, sqlite3_stmt *st)
{
    size_t cap = 0, bytes = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && (int)r->nrows < r->limit) {
        int64_t id = sqlite3_column_int64(st, 0);
        if (id_set_has(r->skip, r->nskip, id))
            continue;
        size_t n = (size_t)sqlite3_column_bytes(st, 1);
        if (n > r->max_bytes - bytes && !(r->nrows == 0 && r->one_over))
            break;
        if (read_row(r, st, &cap) < 0)
            return SQLITE_NOMEM;
        bytes = n > r->max_bytes - bytes ? r->max_bytes : bytes + n; /* one over: full */
    }
    r->end = rc == SQLITE_DONE;
    return rc == SQLITE_ROW ? SQLITE_DONE : rc;
}

/* Runs <r> through <db> in one read transaction: the sink's oldest rows
 * (one more is stepped, to know whether any follow, and those passed over
 * besides) and its count, from the same snapshot. On the thread. */
static void run_read(sqlite3 *db, struct store_read *r)
{
    sqlite3_stmt *rows = NULL, *count = NULL;
    int recorded = statement_starts(db);
    int rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db,
                                "SELECT id, body, attempts FROM alert_queue WHERE sink = ?1 "
                                "ORDER BY id LIMIT ?2",
                                -1, &rows, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM alert_queue WHERE sink = ?1", -1, &count,
                                NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(rows, 1, r->sink, -1, SQLITE_STATIC);
        sqlite3_bind_int64(rows, 2, (int64_t)r->limit + (int64_t)r->nskip + 1);
        sqlite3_bind_text(count, 1, r->sink, -1, SQLITE_STATIC);
        rc = read_rows(r, rows);
    }
    if (rc == SQLITE_DONE && (rc = sqlite3_step(count)) == SQLITE_ROW)
        r->count = sqlite3_column_int64(count, 0);
    r->rc = rc == SQLITE_ROW ? 0 : -1;
    if (r->rc < 0 && rc == SQLITE_NOMEM)
        text_shown_into(r->err, STORE_WRITER_ERR, "out of memory");
    else if (r->rc < 0)
        db_failure_into(db, recorded, errno, r->err);
    sqlite3_finalize(rows);
    sqlite3_finalize(count);
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
}

/* Runs the read handed over, then gives it back. Called with mu held;
 * returns with it held. */
static void serve_read(struct store_writer *w)
{
    struct store_read *r = w->read;
    r->commits = w->commits;
    w->rslot = SLOT_RUNNING;
    pthread_mutex_unlock(&w->t.mu);
    thread_moved(w);
    run_read(w->t.db, r);
    thread_moved(w);
    pthread_mutex_lock(&w->t.mu);
    w->rslot = SLOT_DONE;
    pthread_cond_broadcast(&w->t.cond);
}

static void *writer_thread(void *arg)
{
    struct store_writer *w = arg;
    char err[STORE_WRITER_ERR];
    for (;;) {
        pthread_mutex_lock(&w->t.mu);
        while (w->slot != SLOT_QUEUED && w->rslot != SLOT_QUEUED && !w->stopping)
            pthread_cond_wait(&w->t.cond, &w->t.mu);
        if (w->rslot == SLOT_QUEUED) {
            /* first: a sink waits for its rows, a batch only for its turn */
            serve_read(w);
            pthread_mutex_unlock(&w->t.mu);
            continue;
        }
        if (w->slot != SLOT_QUEUED) {
            pthread_mutex_unlock(&w->t.mu);
            return NULL;
        }
        int busy_ms = w->busy_ms;
        pthread_mutex_unlock(&w->t.mu);
        thread_moved(w);
        /* The batch is the thread's until SLOT_DONE: the loop only reads it. */
        err[0] = '\0';
        sqlite3_busy_timeout(w->t.db, busy_ms);
        enum store_commit rc = commit_batch(w, err);
        pthread_mutex_lock(&w->t.mu);
        w->rc = rc;
        w->commits += rc == STORE_COMMITTED;
        memcpy(w->err, err, sizeof(err));
        w->slot = SLOT_DONE;
        pthread_cond_broadcast(&w->t.cond);
        pthread_mutex_unlock(&w->t.mu);
    }
}

struct store_writer *store_writer_start(const char *path, const char *shown, char **err)
{
    static const char what[] = "the writer";
    struct store_writer *w = calloc(1, sizeof(*w));
    *err = NULL;
    if (w == NULL) {
        *err = db_thread_failed(what, "out of memory");
        return NULL;
    }
    /* synchronous is the connection's own: NORMAL, as the loop's is (no
     * sync per commit in WAL mode). So is journal_size_limit: this
     * connection's commits start the log again after a whole checkpoint,
     * and cut it to STORE_WAL_LIMIT then (a burst left it tens of MB for
     * the rest of the run). The thread waits for a batch: the checkpointer
     * is set up on its connection before one comes. */
    char sql[160];
    snprintf(sql, sizeof(sql),
             "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=OFF; PRAGMA journal_size_limit=%d",
             STORE_WAL_LIMIT);
    if (db_thread_start(&w->t, path, sql, writer_thread, w, what, err) < 0) {
        free(w);
        return NULL;
    }
    char *why_not = NULL;
    w->checkpointer = wal_checkpointer_start(path, shown, w->t.db, &why_not);
    if (w->checkpointer == NULL) {
        /* The writer's own commits checkpoint then: on its thread still. */
        fprintf(stderr, "sluice: state %s: %s (checkpoints run on the writer's thread)\n", shown,
                why_not != NULL ? why_not : "out of memory");
        free(why_not);
    }
    return w;
}

/* True while the thread has a batch or a read to do (with mu). */
static bool thread_busy(const struct store_writer *w)
{
    return w->slot == SLOT_QUEUED || w->rslot == SLOT_QUEUED || w->rslot == SLOT_RUNNING;
}

/* Work is handed over (with mu): to an idle thread, the wait for it to
 * move starts now, not at its last statement, perhaps minutes ago. One
 * busy already goes on being judged by its own moves. */
static void handed_work(struct store_writer *w)
{
    if (!thread_busy(w))
        atomic_store_explicit(&w->moved_ms, monotonic_ms(), memory_order_relaxed);
}

int store_writer_hand(struct store_writer *w, struct store_op *ops, size_t n, int busy_ms)
{
    if (w->held)
        return -1;
    pthread_mutex_lock(&w->t.mu);
    handed_work(w);
    w->ops = ops;
    w->n = n;
    w->busy_ms = busy_ms;
    w->slot = SLOT_QUEUED;
    pthread_cond_broadcast(&w->t.cond);
    pthread_mutex_unlock(&w->t.mu);
    w->held = true;
    return 0;
}

bool store_writer_holding(const struct store_writer *w)
{
    return w->held;
}

bool store_writer_collect(struct store_writer *w, struct store_op **ops, size_t *n,
                          enum store_commit *rc, char *err)
{
    if (!w->held)
        return false;
    pthread_mutex_lock(&w->t.mu);
    bool done = w->slot == SLOT_DONE;
    if (done) {
        *ops = w->ops;
        *n = w->n;
        *rc = w->rc;
        memcpy(err, w->err, STORE_WRITER_ERR);
        w->ops = NULL;
        w->n = 0;
        w->slot = SLOT_EMPTY;
    }
    pthread_mutex_unlock(&w->t.mu);
    if (done)
        w->held = false;
    return done;
}

int store_writer_read(struct store_writer *w, struct store_read *r)
{
    if (w->read_held)
        return -1;
    pthread_mutex_lock(&w->t.mu);
    handed_work(w);
    w->read = r;
    w->rslot = SLOT_QUEUED;
    pthread_cond_broadcast(&w->t.cond);
    pthread_mutex_unlock(&w->t.mu);
    w->read_held = true;
    return 0;
}

bool store_writer_read_done(struct store_writer *w, struct store_read **r)
{
    if (!w->read_held)
        return false;
    pthread_mutex_lock(&w->t.mu);
    bool done = w->rslot == SLOT_DONE;
    if (done) {
        *r = w->read;
        w->read = NULL;
        w->rslot = SLOT_EMPTY;
    }
    pthread_mutex_unlock(&w->t.mu);
    if (done)
        w->read_held = false;
    return done;
}

/* CLOCK_MONOTONIC's <deadline_ms> as the condition's clock takes it (its
 * own: db_thread_start()). Converted to the wall clock, the wait was
 * stretched by a step back of that clock during it (a stop held an hour
 * more by an hour's step). */
static struct timespec deadline_of(int64_t deadline_ms)
{
    if (deadline_ms < 0)
        deadline_ms = 0;
    return (struct timespec){.tv_sec = (time_t)(deadline_ms / 1000),
                             .tv_nsec = (long)(deadline_ms % 1000) * 1000000};
}

/* Waits while the thread holds the batch (<read> false) or runs the read
 * (<read> true), or until CLOCK_MONOTONIC <deadline_ms>. Returns true when
 * it no longer does. */
static bool wait_thread(struct store_writer *w, bool read, int64_t deadline_ms)
{
    struct timespec until = deadline_of(deadline_ms);
    pthread_mutex_lock(&w->t.mu);
    int e = 0;
    bool busy;
    while ((busy = read ? w->rslot == SLOT_RUNNING : w->slot == SLOT_QUEUED) && e != ETIMEDOUT)
        e = pthread_cond_timedwait(&w->t.cond, &w->t.mu, &until);
    pthread_mutex_unlock(&w->t.mu);
    return !busy;
}

bool store_writer_wait(struct store_writer *w, int64_t deadline_ms)
{
    return !w->held || wait_thread(w, false, deadline_ms);
}

bool store_writer_wait_read(struct store_writer *w, int64_t deadline_ms)
{
    return !w->read_held || wait_thread(w, true, deadline_ms);
}

unsigned long store_writer_progress(struct store_writer *w)
{
    return atomic_load_explicit(&w->progress, memory_order_relaxed);
}

_Static_assert(STORE_WRITER_STUCK_MS == 5000, "store_writer_stuck() says 5 s");

const char *store_writer_stuck(struct store_writer *w)
{
    pthread_mutex_lock(&w->t.mu);
    bool busy = thread_busy(w);
    bool reading = w->rslot == SLOT_RUNNING;
    pthread_mutex_unlock(&w->t.mu);
    uint64_t since = atomic_load_explicit(&w->moved_ms, memory_order_relaxed);
    if (!busy || monotonic_ms() < since + STORE_WRITER_STUCK_MS)
        return NULL;
    return reading ? "a read of the alert queue has not returned for 5 s or more (a hung or "
                     "frozen file system?)"
                   : "a commit has not returned for 5 s or more (a hung or frozen file system?)";
}

bool store_writer_stop(struct store_writer *w)
{
    if (w == NULL)
        return true;
    pthread_mutex_lock(&w->t.mu);
    w->stopping = true;
    /* A read not begun is withdrawn (freed below with the writer). */
    if (w->rslot == SLOT_QUEUED)
        w->rslot = SLOT_EMPTY;
    bool busy = w->slot == SLOT_QUEUED || w->rslot == SLOT_RUNNING;
    pthread_cond_broadcast(&w->t.cond);
    pthread_mutex_unlock(&w->t.mu);
    if (busy) {
        /* Its thread, its connection and its batch are in use: kept. The
         * thread ends by itself if its commit ever does; nobody joins it. */
        abandoned = w;
        pthread_detach(w->t.thread);
        return false;
    }
    /* Not in a commit, the thread no longer uses the connection: the
     * checkpointer gives it its own checkpoints back before the close. */
    wal_checkpointer_stop(w->checkpointer);
    db_thread_join(&w->t);
    /* A batch done and not collected is nobody else's. */
    for (size_t i = 0; i < w->n; i++)
        store_op_free(&w->ops[i]);
    free(w->ops);
    store_read_free(w->read);
    free(w);
    return true;
}
