/* wal_checkpointer: copies the state store's write-ahead log back into the
 * database on a thread of its own, off the event loop.
 *
 * In WAL mode with synchronous=NORMAL a commit appends its pages to
 * DIR/sluice.db-wal and does not wait for the disk; the waits (two fsyncs
 * and the copy of up to a few MB) come with the checkpoint. Left to SQLite,
 * the checkpoint runs inside the commit that takes the log past its
 * autocheckpoint size, which the store's writer thread makes
 * (store_writer.h): the next batches would wait for the disk behind it, for
 * as long as a slow or busy disk takes. So the writer's connection
 * checkpoints nothing; its commits wake this thread once the log holds
 * WAL_CHECKPOINT_PAGES pages, and the thread checkpoints through a
 * connection of its own.
 *
 * Checkpoints are PASSIVE: the thread never waits for the writer's
 * commits, and those never wait for it (SQLite's WAL takes separate locks for the
 * writer and the checkpointer). A log the thread has copied whole starts
 * again from its beginning at the next commit, so it stays near its
 * threshold in size; that commit syncs the log's new header (SQLite's
 * synchronous=NORMAL does, so that frames of the old log are never taken
 * for new ones): one small sync per cycle of the log, on the writer's
 * thread, where a checkpoint's two syncs and copy were.
 *
 * Owns: the thread, its database connection, its mutex and condition. */
#ifndef SLUICE_STATE_WAL_CHECKPOINTER_H
#define SLUICE_STATE_WAL_CHECKPOINTER_H

#include <sqlite3.h>

/* Log pages past which a commit wakes the thread (SQLite's own default
 * autocheckpoint threshold, about 4 MB with 4 KiB pages). */
#define WAL_CHECKPOINT_PAGES 1000

struct wal_checkpointer;

/* Starts the thread for the database at <path> (named <shown> in its
 * messages: the path as the store's messages show it), to which <writer_db> (the
 * connection that commits, the store writer's; borrowed: it must outlive
 * the checkpointer, and no thread may use it while this starts or stops)
 * writes, and turns <writer_db>'s own checkpoints off. Returns the
 * checkpointer, or NULL when the thread or its connection cannot be had:
 * then <writer_db> is left checkpointing as before, with <*err> set to a
 * malloc'd message the caller frees. All signals are blocked in the thread. */
struct wal_checkpointer *wal_checkpointer_start(const char *path, const char *shown,
                                                sqlite3 *writer_db, char **err);

/* Runs a last checkpoint request to its end, stops and joins the thread,
 * closes its connection and gives <writer_db> its own checkpoints back (its
 * close then checkpoints and removes the log, as the last connection's
 * does). Accepts NULL. */
void wal_checkpointer_stop(struct wal_checkpointer *c);

#endif
