/* store_schema: the state store's database (see store_int.h): opened
 * without following a link, refused when read-only, corrupt (quick_check),
 * of another schema version, or with tables sluice did not make (a view, a
 * trigger, another key, a column it would not fill); its tables and index
 * made when missing (those of stores made before). The schema itself is
 * described at the top of store_sqlite.c. */
#include "state/store_int.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "util/text_json.h"
#include "util/weburl.h"

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
        *why = store_msg("it holds a trigger (%s), which sluice never makes", shown);
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
                *why = store_msg("%s is a view, not a table", layout[t].table);
                break;
            }
            while (c < LAYOUT_COLS && layout[t].col[c].name != NULL &&
                   (name == NULL || strcmp(name, layout[t].col[c].name) != 0))
                c++;
            if (c < LAYOUT_COLS && layout[t].col[c].name != NULL) {
                seen[c] = true;
                if (pk != layout[t].col[c].pk)
                    *why = store_msg("table %s does not have sluice's key", layout[t].table);
            } else if (pk != 0) {
                *why = store_msg("table %s does not have sluice's key", layout[t].table);
            } else if (sqlite3_column_int(st, 1) != 0 &&
                       sqlite3_column_type(st, 2) == SQLITE_NULL) {
                char shown[SHOWN_MAX]; /* the store's text */
                text_shown_into(shown, sizeof(shown), name != NULL ? name : "");
                *why = store_msg(
                    "table %s has a column %s that sluice does not fill (NOT NULL, without "
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
                *why =
                    store_msg("table %s has no column %s", layout[t].table, layout[t].col[c].name);
        if (*why != NULL)
            rc = SQLITE_ERROR;
    }
    sqlite3_finalize(st);
    return rc;
}

/* The rows an earlier sluice filed under their webhook's URL ("URL" or
 * "URL (listing N)"), which the index alert_queue_sink finds by range. */
#define URL_KEYED                                                                                  \
    "(sink >= 'http://' AND sink < 'http:/0') OR (sink >= 'https://' AND sink < 'https:/0')"

/* sluice_store_key(KEY): weburl_store_key_of_old(KEY), or KEY itself when
 * it is no URL key. */
static void store_key_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const char *old = (const char *)sqlite3_value_text(argv[0]);
    bool nomem = false;
    char *key = old != NULL ? weburl_store_key_of_old(old, &nomem) : NULL;
    if (nomem)
        sqlite3_result_error_nomem(ctx);
    else if (key == NULL)
        sqlite3_result_value(ctx, argv[0]);
    else
        sqlite3_result_text(ctx, key, -1, free);
}

/* Files the queued alerts a store made before weburl_store_key() holds
 * under their webhook's URL (whose path is often its credential) under
 * that key, so that their sinks find them and the URL leaves the file:
 * secure_delete overwrites the bytes the old keys held (free pages left by
 * earlier deletions are not rewritten: VACUUM does that). Best effort, as
 * the index: a store another process holds locked is re-keyed at a later
 * open, its rows kept meanwhile as those of sinks no longer configured.
 * Nothing is written when no row has such a key. */
static void rekey_url_rows(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int any = 0;
    if (sqlite3_prepare_v2(db, "SELECT EXISTS(SELECT 1 FROM alert_queue WHERE " URL_KEYED ")", -1,
                           &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        any = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (!any || sqlite3_create_function(db, "sluice_store_key", 1,
                                        SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_DIRECTONLY,
                                        NULL, store_key_fn, NULL, NULL) != SQLITE_OK)
        return;
    sqlite3_exec(db, "PRAGMA secure_delete=ON", NULL, NULL, NULL);
    sqlite3_exec(db, "UPDATE alert_queue SET sink = sluice_store_key(sink) WHERE " URL_KEYED, NULL,
                 NULL, NULL);
    sqlite3_exec(db, "PRAGMA secure_delete=OFF", NULL, NULL, NULL);
    sqlite3_create_function(db, "sluice_store_key", 1, SQLITE_UTF8, NULL, NULL, NULL, NULL);
}

/* Opens <path> and makes sure it is a healthy sluice database. Returns
 * SQLITE_OK, or the error (with *db closed and NULL). */
int store_db_open(const char *path, sqlite3 **db, char **why)
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
        *why = store_msg("PRAGMA quick_check: %s", shown);
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
            *why =
                store_msg("it has schema %s, and this sluice knows schema %d only (a store made by "
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
        char *w =
            store_msg("%s (a store sluice did not make, or one edited by hand): not used", *why);
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
    rekey_url_rows(*db);
    return SQLITE_OK;
err:
    /* "disk I/O error" is SQLite's word for any system call that failed:
     * the system's error says why (a full disk, a file size limit) */
    if (*db != NULL && sqlite3_system_errno(*db) != 0)
        *why = store_msg("%s (%s)", store_db_error(*db, e, sizeof(e)),
                         strerror(sqlite3_system_errno(*db)));
    else
        *why = strdup(*db != NULL ? store_db_error(*db, e, sizeof(e)) : sqlite3_errstr(rc));
    if (st != NULL)
        sqlite3_finalize(st);
    sqlite3_close(*db);
    *db = NULL;
    return rc != SQLITE_OK ? rc : SQLITE_ERROR; /* never "ok" with <why> set and no db */
}
