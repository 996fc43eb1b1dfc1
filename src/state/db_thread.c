/* db_thread: a state store thread with a connection of its own (see
 * db_thread.h). */
#include "state/db_thread.h"
#include "util/quiet_thread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

char *db_thread_failed(const char *what, const char *why)
{
    size_t n = strlen(what) + strlen(why) + 3;
    char *m = malloc(n);
    if (m != NULL)
        snprintf(m, n, "%s: %s", what, why);
    return m;
}

int db_thread_start(struct db_thread *t, const char *path, const char *sql, void *(*fn)(void *),
                    void *arg, const char *what, char **err)
{
    char doing[256];
    t->db = NULL;
    int rc = sqlite3_open_v2(path, &t->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL);
    if (rc != SQLITE_OK) {
        snprintf(doing, sizeof(doing), "%s: cannot open a second connection", what);
        *err = db_thread_failed(doing, t->db != NULL ? sqlite3_errmsg(t->db) : sqlite3_errstr(rc));
        goto fail;
    }
    if (sqlite3_exec(t->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(doing, sizeof(doing), "%s: cannot read through a second connection", what);
        *err = db_thread_failed(doing, sqlite3_errmsg(t->db));
        goto fail;
    }
    pthread_mutex_init(&t->mu, NULL);
    /* Timed waits on it (the stop's wait for the writer) go by the
     * monotonic clock: a step of the wall clock must not stretch them. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cond, &ca);
    pthread_condattr_destroy(&ca);
    int e = quiet_thread_create(&t->thread, fn, arg);
    if (e != 0) {
        snprintf(doing, sizeof(doing), "%s: cannot start a thread", what);
        *err = db_thread_failed(doing, strerror(e));
        pthread_cond_destroy(&t->cond);
        pthread_mutex_destroy(&t->mu);
        goto fail;
    }
    return 0;
fail:
    sqlite3_close(t->db);
    t->db = NULL;
    return -1;
}

void db_thread_join(struct db_thread *t)
{
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->mu);
    sqlite3_close(t->db);
    t->db = NULL;
}
