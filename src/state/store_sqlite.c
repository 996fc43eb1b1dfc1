/* store_sqlite: the state store on SQLite (see store.h).
 *
 * Layout (schema version 1, in table meta; a store of another version is
 * not used):
 *   meta(key TEXT PRIMARY KEY, value TEXT)
 *   first_contact(agent TEXT, host TEXT, first_ms INTEGER, PRIMARY KEY(agent, host))
 *   baseline(agent TEXT PRIMARY KEY, req_avg REAL, bytes_avg REAL, since_ms INTEGER,
 *            minute INTEGER)
 *   alert_queue(id INTEGER PRIMARY KEY, sink TEXT, body TEXT, attempts INTEGER,
 *               created_ms INTEGER), index alert_queue_sink(sink, id)
 *   counter(name TEXT PRIMARY KEY, value INTEGER) */
#include "state/store.h"
#include "state/store_files.h"
#include "state/store_writer.h"
#include "util/id_set.h"
#include "util/pos_index.h"
#include "util/text_json.h"
#include "util/units.h"
#include "util/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3.h>

#define LOST_RANGES 64 /* ranges of queue ids whose rows were dropped */

struct store {
    sqlite3 *db;                 /* the loop's connection: reads */
    struct store_writer *writer; /* commits, on a thread with a connection of its own */
    char *path;
    /* <path> as every message names it, \ooo (text_shown()): the start's
     * and the run's alike, so that a directory named with a line end or a
     * terminal escape writes no line of its own on standard error */
    char *shown;
    int lock_fd; /* DIR/sluice.lock, flock()ed: one gateway per store */
    /* The writes queued since the last handover to the writer, oldest
     * first: the loop's alone. */
    struct store_op *ops;
    size_t nops, cap;
    /* The batch in the writer's hands, oldest first (NULL when none): older
     * than every write in ops. The loop reads it (store_queue_read_take) but
     * neither changes nor frees it until store_writer_collect() gives it
     * back. */
    const struct store_op *inflight;
    size_t ninflight;
    int64_t inflight_qid_end; /* next_qid at the handover: its rows' ids are below */
    size_t bytes;             /* the text the writes of ops and inflight hold (op_bytes()) */
    int64_t next_qid;
    /* The queue ids from here to next_qid - 1 are rows not yet committed
     * (each id is handed out with its row's write, in order; the batches
     * commit in order; a drop takes the oldest) or dropped; next_qid when
     * none waits. */
    int64_t qadd_lo;
    uint64_t dropped;
    uint64_t dropped_said;   /* what standard error was last told */
    uint64_t alerts_dropped; /* of those, webhook alerts' queue rows (OP_QADD) */
    uint64_t trimmed;        /* queue rows committed OP_QTRIMs deleted */
    /* The queue ids whose row was dropped, as ranges (ids rise with the
     * writes, so a drop's ids run together): a webhook then knows that an
     * alert it holds is in memory only. At most LOST_RANGES; past that the
     * last range stretches, counting more ids lost rather than fewer. */
    struct {
        int64_t lo, hi;
    } lost[LOST_RANGES];
    size_t nlost;
    bool failing; /* the last commit failed (reported once) */
    /* Why the last commit failed past the lock (a full disk, the file
     * moved), for /healthz; "" when it did not (committed, or locked) */
    char broken[STORE_WRITER_ERR];
    bool synced; /* store_sync() ran: the stop's commit waited for the lock */
    bool stuck;  /* the stop found the writer in a commit it did not end */
    /* After a commit that failed past the lock (a full disk: every queued
     * write was run, then rolled back), the next waits, doubling from
     * RETRY_MS to RETRY_MAX_MS: redoing up to STORE_PENDING_MAX writes
     * every tick would take the writer's time (and the loop's, to put
     * the batch back). CLOCK_MONOTONIC ms. */
    int64_t retry_at_ms;
    int64_t retry_ms;
    /* Where in ops the pending OP_BASELINE and OP_COUNTER writes are, by
     * kind and key: a put finds the write to update at once, where a scan
     * of up to STORE_PENDING_MAX writes per alert made an alert storm
     * against a locked store quadratic. Cleared when a commit empties ops,
     * refilled when the cap moves them; off (a scan) when out of memory for
     * it. */
    struct pos_index index;
    bool noindex;
    /* The webhooks' reads of the queue (store_queue_read()), run one at a
     * time on the writer's thread: the one in its hands, and those waiting
     * their turn, oldest first. */
    struct store_read *read_held;
    struct store_read *reads, **reads_tail;
    unsigned long commits; /* batches the writer committed, as collected */
};

static int settle(struct store *s, int busy_ms);
static void wait_read(struct store *s);
static void say_unwritten(const struct store *s, const char *when);
static void tell_dropped(struct store *s);

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE IF NOT EXISTS first_contact(agent TEXT NOT NULL, host TEXT NOT NULL,"
    " first_ms INTEGER NOT NULL, PRIMARY KEY(agent, host));"
    "CREATE TABLE IF NOT EXISTS baseline(agent TEXT PRIMARY KEY, req_avg REAL NOT NULL,"
    " bytes_avg REAL NOT NULL, since_ms INTEGER NOT NULL, minute INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS alert_queue(id INTEGER PRIMARY KEY, sink TEXT NOT NULL,"
    " body TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS counter(name TEXT PRIMARY KEY, value INTEGER NOT NULL);";

/* The schema version meta holds (a store made before needs no write to
 * open), into <ver>: SQLITE_ROW, SQLITE_DONE when there is none (no meta
 * table yet: a new store), or the error. */
static int schema_row(sqlite3 *db, char *ver, size_t verlen)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(
        db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta' COLLATE NOCASE", -1,
        &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    sqlite3_finalize(st);
    st = NULL;
    if (rc != SQLITE_ROW)
        return rc;
    rc = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'schema'", -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const unsigned char *v = sqlite3_column_text(st, 0);
        snprintf(ver, verlen, "%s", v != NULL ? (const char *)v : "");
    }
    sqlite3_finalize(st);
    return rc;
}

/* The longest message msg() makes: with serve's words around it ("sluice:
 * warning: ...; running without a state store (...)") it stays under
 * PIPE_BUF (4096), which the standard error relay takes whole (it cuts a
 * longer line's end: the remedy). A path runs to 4 KB, and a message may
 * name three (the directory as given, resolved, and one on the way). */
#define MSG_MAX  3072
#define MSG_TAIL 1536 /* kept whole past MSG_MAX: the remedy, the path's end */

/* Cuts the middle of <s> (<n> bytes) to MSG_MAX bytes, "..." in its place,
 * never within a UTF-8 sequence: its start (the directory) and its end
 * (the remedy) stay. */
static void cut_middle(char *s, size_t n)
{
    utf8_cut_middle(s, s, n, MSG_MAX - MSG_TAIL - 3, MSG_TAIL, NULL);
}

/* A new message (NULL when out of memory): whole up to MSG_MAX bytes, its
 * middle cut beyond (cut_middle()). */
__attribute__((format(printf, 1, 2))) static char *msg(const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *out = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (out != NULL) {
        vsnprintf(out, (size_t)n + 1, fmt, again);
        if ((size_t)n > MSG_MAX)
            cut_middle(out, (size_t)n);
    }
    va_end(again);
    return out;
}

#define SHOWN_MAX         1024 /* the store's text as standard error shows it */
#define QUICK_CHECK_SHOWN 256  /* of a failed quick_check's findings */

/* SQLite's last error on <db>, for standard error, in <buf>: it can hold
 * text of the store's own (a constraint's name, a trigger's message), whose
 * control characters would write lines of their own there. */
static const char *db_error(sqlite3 *db, char *buf, size_t n)
{
    text_shown_into(buf, n, sqlite3_errmsg(db));
    return buf;
}

#define LAYOUT_COLS 6

/* The columns of each table and their place in its primary key (1, 2; 0
 * when not in it), as <schema> makes them. */
static const struct {
    const char *table;
    struct {
        const char *name;
        int pk;
    } col[LAYOUT_COLS];
} layout[] = {
    {"meta", {{"key", 1}, {"value", 0}}},
    {"first_contact", {{"agent", 1}, {"host", 2}, {"first_ms", 0}}},
    {"baseline", {{"agent", 1}, {"req_avg", 0}, {"bytes_avg", 0}, {"since_ms", 0}, {"minute", 0}}},
    {"alert_queue", {{"id", 1}, {"sink", 0}, {"body", 0}, {"attempts", 0}, {"created_ms", 0}}},
    {"counter", {{"name", 1}, {"value", 0}}},
};

/* Checks that each table of <db> that exists has the columns and the key
 * of <layout> (a missing table is made later) and is a table, not a view,
 * and no other column a write would have to fill (NOT NULL without a
 * default). Tables are looked up by name without regard to case, as SQLite
 * names them: a table First_Contact is the first_contact sluice writes to.
 * A store that says schema 1 but was made by other hands (edited, a
 * tool's) would otherwise fail every commit, each batch holding a write to
 * the odd table (or view), or, without the key, take a row per write for
 * ever. Returns SQLITE_OK, SQLITE_ERROR with <*why> (malloc'd), or a
 * database error. */
static int check_layout(sqlite3 *db, char **why)
{
    sqlite3_stmt *st = NULL;
    /* Nor a trigger: sluice makes none, and one runs code of the store's
     * own at each commit (one that drops the rows written without a word,
     * one that computes for seconds, holding every later write). */
    int rc = sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type = 'trigger' LIMIT 1",
                                -1, &st, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        char shown[SHOWN_MAX]; /* the store's text */
        const unsigned char *name = sqlite3_column_text(st, 0);
        text_shown_into(shown, sizeof(shown), name != NULL ? (const char *)name : "");
        *why = msg("it holds a trigger (%s), which sluice never makes", shown);
        sqlite3_finalize(st);
        return SQLITE_ERROR;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (rc != SQLITE_DONE)
        return rc;
    rc = sqlite3_prepare_v2(db,
                            "SELECT p.name, p.\"notnull\", p.dflt_value, p.pk, m.type FROM"
                            " sqlite_master m, pragma_table_info(m.name) p WHERE m.type IN"
                            " ('table', 'view') AND m.name = ?1 COLLATE NOCASE",
                            -1, &st, NULL);
    for (size_t t = 0; rc == SQLITE_OK && t < sizeof(layout) / sizeof(layout[0]); t++) {
        bool seen[LAYOUT_COLS] = {false};
        int ncols = 0;
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, layout[t].table, -1, SQLITE_STATIC);
        while (*why == NULL && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            const char *name = (const char *)sqlite3_column_text(st, 0);
            const char *type = (const char *)sqlite3_column_text(st, 4);
            int pk = sqlite3_column_int(st, 3);
            size_t c = 0;
            ncols++;
            if (type != NULL && strcmp(type, "view") == 0) {
                *why = msg("%s is a view, not a table", layout[t].table);
                break;
            }
            while (c < LAYOUT_COLS && layout[t].col[c].name != NULL &&
                   (name == NULL || strcmp(name, layout[t].col[c].name) != 0))
                c++;
            if (c < LAYOUT_COLS && layout[t].col[c].name != NULL) {
                seen[c] = true;
                if (pk != layout[t].col[c].pk)
                    *why = msg("table %s does not have sluice's key", layout[t].table);
            } else if (pk != 0) {
                *why = msg("table %s does not have sluice's key", layout[t].table);
            } else if (sqlite3_column_int(st, 1) != 0 &&
                       sqlite3_column_type(st, 2) == SQLITE_NULL) {
                char shown[SHOWN_MAX]; /* the store's text */
                text_shown_into(shown, sizeof(shown), name != NULL ? name : "");
                *why = msg("table %s has a column %s that sluice does not fill (NOT NULL, without "
                           "a default)",
                           layout[t].table, shown);
            }
        }
        if (*why == NULL && rc != SQLITE_DONE)
            break;
        rc = SQLITE_OK;
        for (size_t c = 0;
             *why == NULL && ncols > 0 && c < LAYOUT_COLS && layout[t].col[c].name != NULL; c++)
            if (!seen[c])
                *why = msg("table %s has no column %s", layout[t].table, layout[t].col[c].name);
        if (*why != NULL)
            rc = SQLITE_ERROR;
    }
    sqlite3_finalize(st);
    return rc;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* How long a statement waits for a lock another process holds (the sqlite3
 * shell, a backup): at start and at exit a little; during the run
 * (store_flush) not at all: the writer would hold its batch, and the
 * writes queued behind it, for the wait; a batch that finds the database
 * locked comes back and is handed over again on the next tick. The loop's
 * own reads never wait either. */
#define STARTUP_BUSY_MS 200
#define EXIT_BUSY_MS    1000
/* At the stop, the writer is waited for as long as it runs statements: a
 * commit of 100,000 writes on a slow disk goes through, while one stuck in
 * a write() (a file system that does not answer) is given up on once it
 * has run none for EXIT_STALL_MS (more than the lock's EXIT_BUSY_MS). */
#define EXIT_STALL_MS 2000
#define RETRY_MS      1000
#define RETRY_MAX_MS  30000

/* Opens <path> and makes sure it is a healthy sluice database. Returns
 * SQLITE_OK, or the error (with *db closed and NULL). */
static int open_db(const char *path, sqlite3 **db, char **why)
{
    /* NOFOLLOW: a symbolic link in place of sluice.db (the gateway is
     * root when it opens its files) would have it write its tables into
     * the link's target, another program's database, or make one wherever
     * the link points; the lock and the checkpointer refuse links too. */
    int rc = sqlite3_open_v2(
        path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW, NULL);
    sqlite3_stmt *st = NULL;
    char e[SHOWN_MAX];
    *why = NULL;
    if (rc == SQLITE_CANTOPEN && *db != NULL &&
        sqlite3_extended_errcode(*db) == SQLITE_CANTOPEN_SYMLINK) {
        *why = strdup("it is a symbolic link, not followed (a link in the state directory is "
                      "not sluice's own): not used");
        sqlite3_close(*db);
        *db = NULL;
        return SQLITE_CANTOPEN;
    }
    if (rc != SQLITE_OK)
        goto err;
    /* A file sluice may not write (mode 0444, a read-only file system) is
     * opened read-only without a word: every commit would then fail, the
     * writes kept until dropped. Not used, as a store that cannot be
     * opened is not. */
    if (sqlite3_db_readonly(*db, "main") == 1) {
        *why = strdup("the database is read-only (its file mode or file system): every write "
                      "would fail");
        sqlite3_close(*db);
        *db = NULL;
        return SQLITE_READONLY;
    }
    sqlite3_busy_timeout(*db, STARTUP_BUSY_MS);
    rc = sqlite3_exec(*db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        goto err;
    rc = sqlite3_prepare_v2(*db, "PRAGMA quick_check", -1, &st, NULL);
    if (rc != SQLITE_OK)
        goto err;
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        rc = rc == SQLITE_DONE ? SQLITE_CORRUPT : rc;
        goto err;
    }
    const unsigned char *res = sqlite3_column_text(st, 0);
    if (res == NULL || strcmp((const char *)res, "ok") != 0) {
        /* What the check found is the reason (SQLite's message now says
         * only that a row came): its first finding, which names the
         * page; its lines may be many, so at most QUICK_CHECK_SHOWN. */
        char shown[QUICK_CHECK_SHOWN];
        text_shown_into(shown, sizeof(shown), res != NULL ? (const char *)res : "no result");
        *why = msg("PRAGMA quick_check: %s", shown);
        sqlite3_finalize(st);
        sqlite3_close(*db);
        *db = NULL;
        return SQLITE_CORRUPT;
    }
    sqlite3_finalize(st);
    st = NULL;
    rc = sqlite3_exec(*db,
                      "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=OFF;"
                      "PRAGMA wal_autocheckpoint=1000;",
                      NULL, NULL, NULL);
    /* A store of another schema (a newer sluice's) is not ours to write:
     * its tables may hold columns this one would not fill, and every commit
     * would fail. It is left as it is, not moved aside. */
    char ver[32] = "";
    if (rc == SQLITE_OK) {
        rc = schema_row(*db, ver, sizeof(ver));
        if (rc == SQLITE_ROW && strcmp(ver, "1") != 0) {
            char shown[4 * sizeof(ver)]; /* the store's text */
            text_shown_into(shown, sizeof(shown), ver);
            *why = msg("it has schema %s, and this sluice knows schema %d only (a store made by "
                       "another version of sluice): not used",
                       shown, STORE_SCHEMA);
            sqlite3_close(*db);
            *db = NULL;
            return SQLITE_ERROR;
        }
        rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    /* Before anything is written: such a store is left as it is. */
    if (rc == SQLITE_OK && (rc = check_layout(*db, why)) == SQLITE_ERROR && *why != NULL) {
        char *w = msg("%s (a store sluice did not make, or one edited by hand): not used", *why);
        free(*why);
        *why = w;
        sqlite3_close(*db);
        *db = NULL;
        return SQLITE_ERROR;
    }
    /* CREATE TABLE IF NOT EXISTS writes nothing when the tables are there,
     * and an INSERT takes the write lock even when it inserts nothing: a
     * store opened while another process holds that lock (the sqlite3
     * shell, a backup) reads as usual, its writes waiting for the lock,
     * instead of leaving the gateway without a store for its whole run. */
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(*db, schema, NULL, NULL, NULL);
    if (rc == SQLITE_OK && ver[0] == '\0')
        rc = sqlite3_exec(*db, "INSERT INTO meta(key, value) VALUES('schema', '1')", NULL, NULL,
                          NULL);
    if (rc != SQLITE_OK)
        goto err;
    /* The webhook's sweep reads a sink's oldest rows (store_queue_read()):
     * with this index that reads those rows, not the whole queue. Made by
     * stores before it on their first open; best effort, as the query
     * works without it (slower) and a store another process holds locked
     * at that moment opens all the same. */
    sqlite3_exec(*db, "CREATE INDEX IF NOT EXISTS alert_queue_sink ON alert_queue(sink, id)", NULL,
                 NULL, NULL);
    return SQLITE_OK;
err:
    /* "disk I/O error" is SQLite's word for any system call that failed:
     * the system's error says why (a full disk, a file size limit) */
    if (*db != NULL && sqlite3_system_errno(*db) != 0)
        *why = msg("%s (%s)", db_error(*db, e, sizeof(e)), strerror(sqlite3_system_errno(*db)));
    else
        *why = strdup(*db != NULL ? db_error(*db, e, sizeof(e)) : sqlite3_errstr(rc));
    if (st != NULL)
        sqlite3_finalize(st);
    sqlite3_close(*db);
    *db = NULL;
    return rc != SQLITE_OK ? rc : SQLITE_ERROR; /* never "ok" with <why> set and no db */
}

static bool is_corruption(int rc)
{
    rc &= 0xff;
    return rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB;
}

/* Renames <from> to <to> unless <to> exists. Returns 0, or -1 (errno). */
static int rename_noreplace(const char *from, const char *to)
{
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -1;
    /* A file system without RENAME_NOREPLACE: we hold the directory's lock,
     * so no other gateway makes <to> between the look and the rename. */
    struct stat st;
    if (lstat(to, &st) == 0) {
        errno = EEXIST;
        return -1;
    }
    return rename(from, to);
}

#define ASIDE_TRIES 1000 /* names tried per second: .corrupt-T, .corrupt-T.1, ... */

/* Moves <path> (and its -wal, -shm and -journal) to <path>.corrupt-<unix time>, or
 * .corrupt-<unix time>.N when that name is taken: two stores found corrupt
 * in the same second (a restart loop) each keep a copy, where the second
 * rename replaced the first. The name moved to goes to <dst>. */
static void move_aside(const char *path, char *dst, size_t dstlen)
{
    static const char *const sfx[] = {"-wal", "-shm", "-journal"};
    long t = (long)time(NULL);
    char to[4300];
    for (int i = 0;; i++) {
        if (i == 0)
            snprintf(to, sizeof(to), "%s.corrupt-%ld", path, t);
        else
            snprintf(to, sizeof(to), "%s.corrupt-%ld.%d", path, t, i);
        if (rename_noreplace(path, to) == 0)
            break;
        if (errno != EEXIST || i == ASIDE_TRIES)
            return; /* not moved: the warning says so */
    }
    snprintf(dst, dstlen, "%s", to);
    /* The log, shared memory and rollback journal follow under the name
     * just taken (a file of that name without its database is a stray
     * one: replaced), so that none is left for the new store to find: a
     * journal left behind was deleted by SQLite at the new store's open
     * (a journal beside an empty database is a stray to it), and the copy
     * lost it. */
    for (size_t k = 0; k < sizeof(sfx) / sizeof(sfx[0]); k++) {
        char from[4200], to_k[4400];
        snprintf(from, sizeof(from), "%s%s", path, sfx[k]);
        snprintf(to_k, sizeof(to_k), "%s%s", to, sfx[k]);
        rename(from, to_k);
    }
}

/* Takes DIR/sluice.lock for <s>, <real> the resolved state directory
 * (shown as <shown>): two gateways writing one store would hand out the same queue
 * ids and overwrite each other's queued alerts. Returns 0, or -1 with
 * <*err> (another gateway holds it, or it cannot be made). */
static int lock_dir(struct store *s, const char *shown, const char *real, char **err)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", real, STORE_LOCK_FILE);
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
    char sp[4 * sizeof(path)]; /* as <shown> is: see store_open_try() */
    if (s->lock_fd < 0) {
        int e = errno;
        text_shown_into(sp, sizeof(sp), path);
        *err = msg("%s: cannot open the state lock: %s", sp, strerror(e));
        return -1;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        text_shown_into(sp, sizeof(sp), path);
        *err = e == EWOULDBLOCK ? msg("%s: %s", shown,
                                      "the state store is in use by another sluice gateway "
                                      "(each needs a --state directory of its own)")
                                : msg("%s: cannot lock the state store: %s", sp, strerror(e));
        close(s->lock_fd);
        s->lock_fd = -1;
        return -1;
    }
    return 0;
}

#define QID_MAX (INT64_MAX / 2) /* a store whose last queue id is above is not used */

/* Sets <s>'s next queue id past the highest stored, and at 1 at least: the
 * webhook takes an id of 0 or less for an alert not in the store, whose row
 * it would never delete (a store edited by hand can hold any id). Returns
 * SQLITE_OK, or the error with <*why>: a store whose ids were handed out
 * from 1 again would write new alerts over the stored ones (INSERT OR
 * REPLACE), so it is not used; nor is one whose last id leaves too few
 * (the next would overflow). */
static int read_next_qid(struct store *s, char **why)
{
    sqlite3_stmt *q = NULL;
    int rc =
        sqlite3_prepare_v2(s->db, "SELECT coalesce(max(id), 0) FROM alert_queue", -1, &q, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(q);
    if (rc == SQLITE_ROW && sqlite3_column_int64(q, 0) > QID_MAX) {
        *why = msg("the alert queue's last id is %lld: no queue ids are left for new alerts "
                   "(a store edited by hand?)",
                   (long long)sqlite3_column_int64(q, 0));
        rc = SQLITE_ERROR;
    } else if (rc == SQLITE_ROW) {
        int64_t last = sqlite3_column_int64(q, 0);
        s->next_qid = (last > 0 ? last : 0) + 1;
        s->qadd_lo = s->next_qid;
        rc = SQLITE_OK;
    } else {
        char e[SHOWN_MAX];
        *why = msg("cannot read the alert queue's last id (%s): new alerts would take the ids of "
                   "stored ones",
                   db_error(s->db, e, sizeof(e)));
        rc = rc == SQLITE_OK || rc == SQLITE_DONE ? SQLITE_ERROR : rc;
    }
    sqlite3_finalize(q);
    return rc;
}

/* ---- who may own the store ------------------------------------------------- */

/* Whether <uid> may own the state directory, a directory or link on the way
 * to it, or one of the store's files: root, the user the gateway runs as,
 * or the one it will serve as (<user>, serve --user; 0 for none). Any
 * other user could put a store of their own in place of sluice.db (first
 * contacts that keep alerts quiet, forged queued alerts) or move the
 * directory away and put one of theirs in its place. */
static bool trusted_uid(uid_t uid, uid_t user)
{
    return uid == 0 || uid == geteuid() || uid == user;
}

/* "user alice (uid 1000)", or "uid 1000" for a uid no user has, in <buf>. */
static const char *owner_text(uid_t uid, char *buf, size_t n)
{
    struct passwd pw, *found = NULL;
    char names[1024];
    if (getpwuid_r(uid, &pw, names, sizeof(names), &found) == 0 && found != NULL)
        snprintf(buf, n, "user %s (uid %lu)", found->pw_name, (unsigned long)uid);
    else
        snprintf(buf, n, "uid %lu", (unsigned long)uid);
    return buf;
}

enum owned { OWNED_DIR, OWNED_ON_THE_WAY, OWNED_FILE };

/* The message for <path>, <what> of the state directory <dir>, owned by
 * <uid>, an untrusted user. */
static char *untrusted(const char *dir, const char *raw, enum owned what, uid_t uid, uid_t user)
{
    char who[192], me[192], as[192], ok[448], path[4 * 4200];
    text_shown_into(path, sizeof(path), raw); /* as <dir> is: see store_open_try() */
    owner_text(uid, who, sizeof(who));
    owner_text(geteuid(), me, sizeof(me));
    int n = snprintf(ok, sizeof(ok), "root%s%s%s", geteuid() != 0 ? " or " : "",
                     geteuid() != 0 ? me : "", geteuid() != 0 ? " (the gateway)" : "");
    if (user != 0 && user != geteuid() && n > 0 && (size_t)n < sizeof(ok))
        snprintf(ok + n, sizeof(ok) - (size_t)n, " or %s (--user)",
                 owner_text(user, as, sizeof(as)));
    if (what == OWNED_DIR)
        return msg("%s: the state directory is owned by %s, not by %s: that user could put a "
                   "store of their own there (first contacts that keep alerts quiet); chown it, "
                   "or use a directory of sluice's own",
                   dir, who, ok);
    if (what == OWNED_FILE)
        return msg("%s: owned by %s, not by %s: that user could put a store of their own in its "
                   "place (first contacts that keep alerts quiet); remove it, or chown it if it "
                   "is sluice's",
                   path, who, ok);
    return msg("%s: %s, on the way to the state directory, is owned by %s, not by %s: that user "
               "could move the state directory away and put one of their own in its place; use "
               "a state directory whose every parent is root's or the gateway's",
               dir, path, who, ok);
}

#define ON_THE_WAY "on the way to the state directory"

/* Checks <path>, the state directory resolved (resolve_dir(); shown as
 * <dir>), and each directory above it: each must be owned by a trusted
 * uid, and none above it may be writable by every user but with the
 * sticky bit (/tmp: there only an entry's owner may move it). Returns 0,
 * or -1 with <*err>. */
static int check_chain(const char *dir, const char *path, uid_t user, char **err)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s", path);
    for (bool first = true;; first = false) {
        struct stat st;
        if (lstat(p, &st) != 0) {
            int e = errno;
            char *sp = text_shown(p);
            *err = msg("%s: cannot check %s, " ON_THE_WAY ": %s", dir, sp, strerror(e));
            free(sp);
            return -1;
        }
        if (!trusted_uid(st.st_uid, user)) {
            *err = untrusted(dir, p, first ? OWNED_DIR : OWNED_ON_THE_WAY, st.st_uid, user);
            return -1;
        }
        if (!first && (st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
            char *sp = text_shown(p);
            *err = msg("%s: %s, " ON_THE_WAY ", is writable by every user (mode %04o) without "
                       "the sticky bit: any user could move the state directory away and put "
                       "one of their own in its place; use a state directory whose every parent "
                       "is root's or the gateway's",
                       dir, sp, (unsigned)(st.st_mode & 07777));
            free(sp);
            return -1;
        }
        char *slash = strrchr(p, '/');
        if (slash == NULL || strcmp(p, "/") == 0)
            return 0;
        slash[slash == p] = '\0'; /* "/a" -> "/" */
    }
}

/* What kind of file <mode> is not a regular file nor a link of: "a FIFO". */
static const char *odd_kind(mode_t mode)
{
    return S_ISFIFO(mode)   ? "a FIFO"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
                            : "not a file";
}

/* Checks the state directory <real>, resolved (shown as <shown>), and the
 * directories above it, then the store's files that exist: each owned by
 * a trusted uid, no file writable by every user, and each a regular file
 * (or a link, which the open refuses): SQLite opened a store whose -wal
 * was a FIFO or whose -shm was a directory, and failed every commit of the
 * run ("disk I/O error (Illegal seek)"), where it should be said at the
 * start, as a store that cannot be written is. The directory then
 * holds nothing another user put there, nor can they add or swap a file
 * between this check and the open. Returns 0, or -1 with <*err>. */
static int check_owners(const char *shown, const char *real, uid_t user, char **err)
{
    int rc = check_chain(shown, real, user, err);
    /* -journal too: SQLite plays a hot rollback journal back into the
     * database at the open, WAL mode or not, so one another user put there
     * (the member of a group-writable DIR's group) wrote the pages of their
     * choice into the store, first contacts that keep alerts quiet. */
    static const char *const files[] = {STORE_FILE, STORE_FILE "-wal", STORE_FILE "-shm",
                                        STORE_FILE "-journal", STORE_LOCK_FILE};
    for (size_t k = 0; rc == 0 && k < sizeof(files) / sizeof(files[0]); k++) {
        char path[4200];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", real, files[k]);
        char *sp = text_shown(path);
        if (lstat(path, &st) != 0) {
            if (errno != ENOENT) {
                *err = msg("%s: cannot check: %s", sp, strerror(errno));
                rc = -1;
            }
        } else if (!trusted_uid(st.st_uid, user)) {
            *err = untrusted(shown, path, OWNED_FILE, st.st_uid, user);
            rc = -1;
        } else if (!S_ISLNK(st.st_mode) && (st.st_mode & S_IWOTH)) {
            *err = msg("%s: writable by every user (mode %04o): any user could write a store of "
                       "their own into it (first contacts that keep alerts quiet); remove it, or "
                       "chmod o-w it if it is sluice's",
                       sp, (unsigned)(st.st_mode & 07777));
            rc = -1;
        } else if (!S_ISLNK(st.st_mode) && !S_ISREG(st.st_mode)) {
            *err = msg("%s: not a regular file (%s), which the state store cannot use (every "
                       "commit would fail): remove it",
                       sp, odd_kind(st.st_mode));
            rc = -1;
        }
        free(sp);
    }
    return rc;
}

/* The state directory <dir> resolved (realpath) into <*real>, and the name
 * its messages give it into <*shown>: <given> (<dir> as messages name it),
 * or "DIR (resolved: REAL)" when a symbolic link on its path leads
 * elsewhere, REAL shown as DIR is. Returns 0, or -1 with <*err>. */
static int resolve_dir(const char *dir, const char *given, char **real, char **shown, char **err)
{
    *real = realpath(dir, NULL);
    if (*real == NULL) {
        *err = msg("%s: cannot resolve the state directory: %s", given, strerror(errno));
        return -1;
    }
    char *sr = text_shown(*real);
    *shown = strcmp(*real, dir) == 0 ? strdup(given) : msg("%s (resolved: %s)", given, sr);
    free(sr);
    if (*shown == NULL) {
        free(*real);
        *real = NULL;
        *err = msg("%s: %s", given, "out of memory");
        return -1;
    }
    return 0;
}

/* Opens the store of the resolved state directory <real> (shown as
 * <shown>) for store_open_as(), which checked it. */
static struct store *open_resolved(const char *shown, const char *real, char **err, char **warn,
                                   bool *locked)
{
    char *why = NULL;
    struct store *s = calloc(1, sizeof(*s));
    if (s == NULL)
        goto nomem;
    s->lock_fd = -1;
    s->reads_tail = &s->reads;
    if (lock_dir(s, shown, real, err) < 0) {
        free(s);
        return NULL;
    }
    size_t n = strlen(real) + sizeof("/" STORE_FILE);
    if ((s->path = malloc(n)) == NULL)
        goto nomem;
    snprintf(s->path, n, "%s/%s", real, STORE_FILE);
    if ((s->shown = text_shown(s->path)) == NULL)
        goto nomem;
    /* Before SQLite makes or opens a file: see store_files.h */
    int rc = store_files_private(real, &why) == 0 ? open_db(s->path, &s->db, &why) : SQLITE_PERM;
    if (rc != SQLITE_OK && is_corruption(rc)) {
        char moved[4400] = "";
        move_aside(s->path, moved, sizeof(moved));
        char *sm = text_shown(moved);
        *warn =
            msg("%s: the state store is corrupt (%s); moved to %s and started afresh: first-"
                "contact memory, baselines and queued webhook alerts are lost",
                s->shown, why ? why : "corrupt", moved[0] && sm != NULL ? sm : "(could not move)");
        free(sm);
        free(why);
        why = NULL;
        rc = store_files_private(real, &why) == 0 ? open_db(s->path, &s->db, &why) : SQLITE_PERM;
    }
    /* Another process's lock that bars reads too (locking_mode=EXCLUSIVE,
     * any lock on a store in rollback-journal mode, which the open must
     * hold alone to turn to WAL): the caller may try again later. */
    *locked = rc == SQLITE_BUSY || rc == SQLITE_LOCKED;
    if (rc == SQLITE_OK)
        rc = read_next_qid(s, &why);
    /* Commits go through the writer's thread only: without it, no store
     * (a commit on the loop could stall every request). */
    if (rc == SQLITE_OK && (s->writer = store_writer_start(s->path, s->shown, &why)) == NULL)
        rc = SQLITE_ERROR;
    if (rc != SQLITE_OK) {
        /* The state directory as given too, when a link on its path led
         * elsewhere: the operator knows it by that name. */
        char *sr = text_shown(real);
        bool linked = sr == NULL || strcmp(shown, sr) != 0;
        *err = msg("%s: cannot open the state store%s%s: %s", s->shown, linked ? " of " : "",
                   linked ? shown : "", why ? why : "error");
        free(sr);
        free(why);
        sqlite3_close(s->db);
        free(s->path);
        free(s->shown);
        close(s->lock_fd);
        free(s);
        return NULL;
    }
    return s;
nomem:
    if (s != NULL) {
        free(s->path);
        free(s->shown);
        if (s->lock_fd >= 0)
            close(s->lock_fd);
    }
    free(s);
    *err = msg("%s: %s", shown, "out of memory");
    return NULL;
}

struct store *store_open_as(const char *dir, uid_t user, char **err, char **warn)
{
    bool locked;
    return store_open_try(dir, user, err, warn, &locked);
}

/* store_open_try() for <dir>, named <given> in its messages. */
static struct store *open_dir(const char *dir, const char *given, uid_t user, char **err,
                              char **warn, bool *locked)
{
    struct stat st;

    if (dir[0] == '\0' || strlen(dir) > 4000) {
        *err = msg("%s: not a usable state directory", given);
        return NULL;
    }
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT || mkdir(dir, 0750) != 0) {
            int e = errno;
            /* mkdir() makes nothing at a link's target ("File exists"):
             * the gateway, root here, would make a directory wherever a
             * link put in its way points. Said as such. */
            *err = e == EEXIST && lstat(dir, &st) == 0 && S_ISLNK(st.st_mode)
                       ? msg("%s: cannot create the state directory: it is a symbolic link to "
                             "a directory that does not exist (not made through a link): make "
                             "that directory, or name one that exists",
                             given)
                       : msg("%s: cannot create the state directory: %s", given, strerror(e));
            return NULL;
        }
    } else if (!S_ISDIR(st.st_mode)) {
        *err = msg("%s: %s", given, "not a directory");
        return NULL;
    } else if (st.st_mode & S_IWOTH) {
        /* Any user could put a store of their own there (first contacts
         * that keep alerts quiet), a symbolic link in place of sluice.db
         * (followed by a gateway started as root), or take the lock. */
        *err = msg("%s: the state directory is writable by every user (mode %04o): another user "
                   "could put a store of their own or a symbolic link there; use a directory "
                   "of sluice's own",
                   given, (unsigned)(st.st_mode & 07777));
        return NULL;
    }
    /* The directory is resolved once, here, and only the resolved path is
     * used from then on: a symbolic link the operator put on the way to it
     * (/var/lib/sluice -> /data/sluice) is followed this once, where
     * SQLite's SQLITE_OPEN_NOFOLLOW refused every link on the path, and
     * the store ran from memory. Links in the directory (sluice.db, its
     * -wal and -shm, sluice.lock) are still refused: the lock is opened
     * O_NOFOLLOW, the database SQLITE_OPEN_NOFOLLOW. No race: what is
     * checked is the resolved path, every directory of which check_chain()
     * finds owned by a trusted uid and not writable by every user but
     * with the sticky bit, so only a trusted user (or one of the group of
     * a group-writable directory there, the administrator's choice) could
     * swap one for a link after the check; and SQLite, opening the
     * resolved path with NOFOLLOW, would refuse such a link rather than
     * follow it. A link on the given path changed after the resolution
     * changes nothing: that path is not used again. */
    char *real = NULL, *shown = NULL;
    if (resolve_dir(dir, given, &real, &shown, err) < 0)
        return NULL;
    struct store *s = NULL;
    if (check_owners(shown, real, user, err) == 0)
        s = open_resolved(shown, real, err, warn, locked);
    free(real);
    free(shown);
    return s;
}

struct store *store_open_try(const char *dir, uid_t user, char **err, char **warn, bool *locked)
{
    *err = NULL;
    *warn = NULL;
    *locked = false;
    if (dir == NULL) {
        *err = msg("%s", ": not a usable state directory");
        return NULL;
    }
    /* <dir> as every message names it: each control character and
     * backslash \ooo, as serve shows the policy and log paths (a directory
     * named with a line end wrote a line of its own into standard error);
     * the paths resolved from it are shown the same way where named */
    char *given = text_shown(dir);
    struct store *s = open_dir(dir, given, user, err, warn, locked);
    free(given);
    return s;
}

struct store *store_open(const char *dir, char **err, char **warn)
{
    return store_open_as(dir, 0, err, warn);
}

const char *store_shown(const struct store *s)
{
    return s->shown;
}

void store_close(struct store *s)
{
    if (s == NULL)
        return;
    /* After a store_sync() that failed, the lock is not waited for again. */
    if (settle(s, s->synced ? 0 : EXIT_BUSY_MS) < 0)
        say_unwritten(s, "at exit");
    wait_read(s);
    tell_dropped(s);
    for (size_t i = 0; i < s->nops; i++)
        store_op_free(&s->ops[i]);
    free(s->ops);
    pos_index_free(&s->index);
    /* A writer stuck in a commit keeps its batch: the process exits. The
     * read in its hands is its own to free (or keep) too; those waiting
     * their turn, cancelled by their sinks, are the store's. */
    store_writer_stop(s->writer);
    for (struct store_read *r = s->reads, *next; r != NULL; r = next) {
        next = r->next;
        store_read_free(r);
    }
    sqlite3_close(s->db); /* the last connection: checkpoints, removes the log */
    free(s->path);
    free(s->shown);
    close(s->lock_fd); /* releases the lock */
    free(s);
}

/* ---- loading -------------------------------------------------------------- */

static const char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t != NULL ? (const char *)t : "";
}

static int load_fail(struct store *s, sqlite3_stmt *st)
{
    char e[SHOWN_MAX];
    fprintf(stderr, "sluice: state %s: cannot read: %s\n", s->shown, db_error(s->db, e, sizeof(e)));
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
        memcpy(sql + at, ",?" + (i == 0), 2 - (i == 0));
        at += 2 - (i == 0);
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
                s->shown, db_error(s->db, e, sizeof(e)));
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
    return settle(s, EXIT_BUSY_MS);
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
static void tell_dropped(struct store *s)
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
        tell_dropped(s); /* the first drop, then once writing again */
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
static void wait_read(struct store *s)
{
    (void)wait_moving(s, store_writer_wait_read);
}

/* At the stop: commits what waits through the writer and waits for it
 * (wait_writer()): the batch it holds, then once more what is left, whose
 * locks wait up to <busy_ms> for another process. Returns 0, or -1 when
 * writes are left (the commit failed, or the writer is stuck in it). */
static int settle(struct store *s, int busy_ms)
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
static void say_unwritten(const struct store *s, const char *when)
{
    if (store_writer_holding(s->writer))
        fprintf(stderr,
                "sluice: state %s: %zu write(s) not written %s: the writer's commit has not "
                "moved for %d ms (its file system does not answer?)\n",
                s->shown, s->nops + s->ninflight, when, EXIT_STALL_MS);
    else
        fprintf(stderr, "sluice: state %s: %zu write(s) lost %s\n", s->shown, s->nops, when);
}
