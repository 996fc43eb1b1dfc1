/* wal_checkpointer: the state store's checkpoints, on a thread (see
 * wal_checkpointer.h). */
#include "state/wal_checkpointer.h"
#include "util/quiet_thread.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wal_checkpointer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool wanted;   /* a commit took the log past the threshold; under mu */
    bool stopping; /* under mu */
    sqlite3 *db;   /* the thread's own connection */
    sqlite3 *loop_db;
    char *path;
};

static void *checkpoint_thread(void *arg)
{
    struct wal_checkpointer *c = arg;
    bool failing = false;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (!c->wanted && !c->stopping)
            pthread_cond_wait(&c->cond, &c->mu);
        bool stop = c->stopping;
        c->wanted = false;
        pthread_mutex_unlock(&c->mu);
        if (stop)
            return NULL;
        int rc = sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        /* BUSY: another checkpoint (the sqlite3 shell's) runs; the next
         * commit past the threshold asks again. */
        if (rc != SQLITE_OK && rc != SQLITE_BUSY && !failing)
            fprintf(stderr, "sluice: state %s: cannot checkpoint the write-ahead log: %s\n",
                    c->path, sqlite3_errmsg(c->db));
        failing = rc != SQLITE_OK && rc != SQLITE_BUSY;
    }
}

/* SQLite's WAL hook, on the loop's connection after each commit: <pages>
 * is the log's size. Wakes the thread; holds the mutex only to set a flag. */
static int on_commit(void *arg, sqlite3 *db, const char *name, int pages)
{
    (void)db;
    (void)name;
    struct wal_checkpointer *c = arg;
    if (pages < WAL_CHECKPOINT_PAGES)
        return SQLITE_OK;
    pthread_mutex_lock(&c->mu);
    c->wanted = true;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->mu);
    return SQLITE_OK;
}

static char *failed(const char *what, const char *why)
{
    size_t n = strlen(what) + strlen(why) + 3;
    char *m = malloc(n);
    if (m != NULL)
        snprintf(m, n, "%s: %s", what, why);
    return m;
}

struct wal_checkpointer *wal_checkpointer_start(const char *path, sqlite3 *loop_db, char **err)
{
    struct wal_checkpointer *c = calloc(1, sizeof(*c));
    *err = NULL;
    if (c == NULL || (c->path = strdup(path)) == NULL) {
        free(c);
        *err = failed("checkpoints on the event loop", "out of memory");
        return NULL;
    }
    c->loop_db = loop_db;
    /* No CREATE: the loop's connection made the database; NOFOLLOW as a
     * symbolic link put in its place since then is not ours to follow. */
    int rc = sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL);
    if (rc != SQLITE_OK) {
        *err = failed("checkpoints on the event loop: cannot open a second connection",
                      c->db != NULL ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
        goto fail;
    }
    /* A connection opens the log with its first read: a checkpoint asked
     * of one that has read nothing copies nothing (and says SQLITE_OK). */
    rc = sqlite3_exec(c->db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        *err = failed("checkpoints on the event loop: cannot read through a second connection",
                      sqlite3_errmsg(c->db));
        goto fail;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cond, NULL);
    /* The gateway's signals (SIGTERM, SIGHUP) are the loop's to take. */
    int e = quiet_thread_create(&c->thread, checkpoint_thread, c);
    if (e != 0) {
        *err = failed("checkpoints on the event loop: cannot start a thread", strerror(e));
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->mu);
        goto fail;
    }
    /* Replaces the autocheckpoint hook: the loop's commits checkpoint
     * nothing from here on. */
    sqlite3_wal_hook(loop_db, on_commit, c);
    return c;
fail:
    sqlite3_close(c->db);
    free(c->path);
    free(c);
    return NULL;
}

void wal_checkpointer_stop(struct wal_checkpointer *c)
{
    if (c == NULL)
        return;
    sqlite3_wal_autocheckpoint(c->loop_db, WAL_CHECKPOINT_PAGES); /* its hook again */
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->mu);
    sqlite3_close(c->db);
    free(c->path);
    free(c);
}
