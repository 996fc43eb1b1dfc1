/* store_int: what the files of the state store share; nothing but them
 * includes this (the interface is store.h).
 *
 *   store_sqlite.c  the store's open (the state directory resolved, its
 *                   lock, a corrupt store moved aside) and close, and the
 *                   messages they make
 *   store_owners.c  who may own the state directory, the directories on
 *                   the way to it and the store's files
 *   store_schema.c  the database: opened, checked (quick_check, schema
 *                   version, tables as sluice makes them) and made
 *   store_read.c    the loop's reads: the tables loaded at start, the
 *                   queue's counts and its trim at start, and the webhooks'
 *                   reads of the queue merged with the writes not yet
 *                   committed
 *   store_queue.c   the writes queued on the loop (coalesced, capped), their
 *                   hand-over to the writer (store_writer.c), the stop */
#ifndef SLUICE_STATE_STORE_INT_H
#define SLUICE_STATE_STORE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <sqlite3.h>

#include "state/store.h"
#include "state/store_writer.h"
#include "util/pos_index.h"

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

#define SHOWN_MAX         1024 /* the store's text as standard error shows it */
#define QUICK_CHECK_SHOWN 256  /* of a failed quick_check's findings */

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

/* store_sqlite.c */
/* A new message (NULL when out of memory): whole up to MSG_MAX bytes, its
 * middle cut beyond. */
__attribute__((format(printf, 1, 2))) char *store_msg(const char *fmt, ...);
/* SQLite's last error on <db>, for standard error, in <buf> (<n> bytes),
 * its control characters shown \ooo. Returns <buf>. */
const char *store_db_error(sqlite3 *db, char *buf, size_t n);

/* store_schema.c */
/* Opens <path> and makes sure it is a healthy sluice database. Returns
 * SQLITE_OK, or the error (with *db closed and NULL) and <*why>
 * (malloc'd). */
int store_db_open(const char *path, sqlite3 **db, char **why);

/* store_owners.c */
/* Checks the state directory <real>, resolved (shown as <shown>), the
 * directories above it and the store's files that exist: owned by a
 * trusted uid (root, the gateway's, <user>), none writable by every user,
 * each file a regular file. Returns 0, or -1 with <*err> (malloc'd). */
int store_check_owners(const char *shown, const char *real, uid_t user, char **err);

/* store_queue.c */
/* At the stop: commits what waits through the writer and waits for it,
 * its locks waiting up to <busy_ms>. Returns 0, or -1 when writes are
 * left. */
int store_settle(struct store *s, int busy_ms);
/* At the stop: waits for the read the writer runs, while it moves. */
void store_wait_read(struct store *s);
/* Says on standard error which writes a stop leaves unwritten <when>. */
void store_say_unwritten(const struct store *s, const char *when);
/* Says on standard error how many writes were dropped since it last did. */
void store_tell_dropped(struct store *s);

#endif
