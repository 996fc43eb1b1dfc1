/* wal_checkpointer: the state store's checkpoints, on a thread (see
 * wal_checkpointer.h). */
#include "state/wal_checkpointer.h"
#include "state/db_thread.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wal_checkpointer {
    struct db_thread t; /* the thread, its own connection, mu and cond */
    bool wanted;        /* a commit took the log past the threshold; under t.mu */
    bool stopping;      /* under t.mu */
    sqlite3 *writer_db;
    char *shown; /* the database's path as messages show it */
};

static void *checkpoint_thread(void *arg)
{
    struct wal_checkpointer *c = arg;
    bool failing = false;
    for (;;) {
        pthread_mutex_lock(&c->t.mu);
        while (!c->wanted && !c->stopping)
            pthread_cond_wait(&c->t.cond, &c->t.mu);
        bool stop = c->stopping;
        c->wanted = false;
        pthread_mutex_unlock(&c->t.mu);
        if (stop)
            return NULL;
        int rc = sqlite3_wal_checkpoint_v2(c->t.db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        /* BUSY: another checkpoint (the sqlite3 shell's) runs; the next
         * commit past the threshold asks again. */
        if (rc != SQLITE_OK && rc != SQLITE_BUSY && !failing)
            fprintf(stderr, "sluice: state %s: cannot checkpoint the write-ahead log: %s\n",
                    c->shown, sqlite3_errmsg(c->t.db));
        failing = rc != SQLITE_OK && rc != SQLITE_BUSY;
    }
}

/* SQLite's WAL hook, on the writer's connection after each commit: <pages>
 * is the log's size. Wakes the thread; holds the mutex only to set a flag. */
static int on_commit(void *arg, sqlite3 *db, const char *name, int pages)
{
    (void)db;
    (void)name;
    struct wal_checkpointer *c = arg;
    if (pages < WAL_CHECKPOINT_PAGES)
        return SQLITE_OK;
    pthread_mutex_lock(&c->t.mu);
    c->wanted = true;
    pthread_cond_signal(&c->t.cond);
    pthread_mutex_unlock(&c->t.mu);
    return SQLITE_OK;
}

struct wal_checkpointer *wal_checkpointer_start(const char *path, const char *shown,
                                                sqlite3 *writer_db, char **err)
{
    static const char what[] = "checkpoints in the writer's commits";
    struct wal_checkpointer *c = calloc(1, sizeof(*c));
    *err = NULL;
    if (c == NULL || (c->shown = strdup(shown)) == NULL) {
        free(c);
        *err = db_thread_failed(what, "out of memory");
        return NULL;
    }
    c->writer_db = writer_db;
    /* A connection opens the log with its first read: a checkpoint asked
     * of one that has read nothing copies nothing (and says SQLITE_OK). */
    if (db_thread_start(&c->t, path, "SELECT count(*) FROM sqlite_master", checkpoint_thread, c,
                        what, err) < 0) {
        free(c->shown);
        free(c);
        return NULL;
    }
    /* Replaces the autocheckpoint hook: the writer's commits checkpoint
     * nothing from here on. */
    sqlite3_wal_hook(writer_db, on_commit, c);
    return c;
}

void wal_checkpointer_stop(struct wal_checkpointer *c)
{
    if (c == NULL)
        return;
    sqlite3_wal_autocheckpoint(c->writer_db, WAL_CHECKPOINT_PAGES); /* its hook again */
    pthread_mutex_lock(&c->t.mu);
    c->stopping = true;
    pthread_cond_signal(&c->t.cond);
    pthread_mutex_unlock(&c->t.mu);
    db_thread_join(&c->t);
    free(c->shown);
    free(c);
}
