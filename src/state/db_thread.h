/* db_thread: a thread of the state store's with a database connection of
 * its own, and the mutex and condition it is woken by: the writer's
 * (store_writer.h) and the checkpointer's (wal_checkpointer.h).
 *
 * Owns: the thread, the connection, the mutex and the condition. */
#ifndef SLUICE_STATE_DB_THREAD_H
#define SLUICE_STATE_DB_THREAD_H

#include <pthread.h>
#include <sqlite3.h>

struct db_thread {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    sqlite3 *db;
};

/* Opens the database at <path> as <t>->db (no CREATE: the store's first
 * connection made it; no symbolic link followed, as one put in its place
 * since is not ours), runs <sql> through it (the connection's settings, a
 * first read), then starts <fn>(<arg>) with every signal blocked (the
 * gateway's signals are the loop's to take). Returns 0, or -1 with <*err>
 * a malloc'd message that begins with <what>, and nothing left open. */
int db_thread_start(struct db_thread *t, const char *path, const char *sql, void *(*fn)(void *),
                    void *arg, const char *what, char **err);

/* Joins <t>'s thread (told to end by its owner), destroys the mutex and
 * the condition, and closes the connection. */
void db_thread_join(struct db_thread *t);

/* "<what>: <why>", malloc'd (NULL when out of memory). */
char *db_thread_failed(const char *what, const char *why);

#endif
