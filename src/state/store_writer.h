/* store_writer: the state store's commits, on a thread of their own with a
 * database connection of their own, off the event loop.
 *
 * A commit appends its pages to DIR/sluice.db-wal: write()s that wait for
 * as long as the file system takes (a slow disk, a hung network mount, a
 * file another process holds the inode lock of). On the loop, every
 * connection the gateway holds would wait with it. So the loop only hands
 * over a batch of queued writes (store_writer_hand(): a pointer swapped
 * under a mutex, never a wait) and, on a later tick, collects the outcome
 * (store_writer_collect()). One batch at a time: the batches commit in the
 * order they were handed over, so a queue row added in one and deleted in
 * the next is deleted after it was added.
 *
 * The thread's commits wake the wal_checkpointer (wal_checkpointer.h),
 * whose checkpoints run through a third connection.
 *
 * The webhook's reads of the queue go through the same thread (a read of a
 * file system that does not answer stalls the loop as a write does): one read
 * at a time, handed over and collected as a batch is, run between two
 * batches, so that the loop knows which of its writes the read saw
 * (store_read.commits).
 *
 * Owns: the thread, its connection, its mutex and condition, a batch
 * while the thread commits it (the ops stay readable by the loop, which
 * neither changes nor frees them until it collects them), and a read while
 * the thread runs it. */
#ifndef SLUICE_STATE_STORE_WRITER_H
#define SLUICE_STATE_STORE_WRITER_H

#include "state/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum store_op_kind {
    OP_CONTACT,
    OP_BASELINE,
    OP_COUNTER,
    OP_QADD,
    OP_QATTEMPTS,
    OP_QDEL,
    OP_QTRIM, /* b: the configured sinks (a JSON array), n: the rows kept; m: rows deleted */
};

/* One queued write. */
struct store_op {
    enum store_op_kind kind;
    char *a, *b; /* agent/host, agent, name, sink/body, sink (OP_QDEL) */
    int64_t n;   /* first_ms, counter value, queue id */
    int64_t m;   /* attempts, created_ms */
    struct store_baseline bl;
};

/* Frees what <o> holds (not <o>). */
void store_op_free(struct store_op *o);

/* How a batch ended. */
enum store_commit {
    STORE_COMMITTED = 0,
    STORE_LOCKED = -2, /* could not begin: another process holds the lock */
    STORE_FAILED = -1, /* failed after it began (a full disk): rolled back */
};

#define STORE_WRITER_ERR 1024 /* the error text a failed batch comes back with */

/* A read of one webhook sink's committed queue rows, run on the writer's
 * thread between its commits (so that its snapshot sits exactly between
 * two batches: see <commits>). The loop fills the request, hands it over
 * (store_writer_read()) and, on a later tick, collects it
 * (store_writer_read_done()); the thread fills the outcome. */
struct store_row {
    int64_t id;
    char *body;
    int attempts;
};

struct store_read {
    /* The request: the loop's until handed over, read by the thread. */
    char *sink;
    int limit; /* rows at most, oldest first */
    /* and no more bytes of their bodies than max_bytes: the read stops
     * before the row that would pass it, the first too unless one_over
     * (then that one is read alone, however long) */
    size_t max_bytes;
    bool one_over;
    int64_t *skip; /* rows passed over (util/id_set.h): neither read nor counted */
    size_t nskip;
    /* The outcome: the thread's until store_writer_read_done() gives the
     * read back. */
    struct store_row *rows;
    size_t nrows;
    bool end;              /* no committed row of the sink past those read */
    int64_t count;         /* the sink's committed rows */
    unsigned long commits; /* batches the thread had committed when it read */
    int rc;                /* 0, or -1: err says why */
    char err[STORE_WRITER_ERR];
    /* The store's own (store_queue.c), never touched by the thread. */
    struct store_read *next;
    int want;       /* the rows the caller asked for */
    int state;      /* waiting, handed over, done */
    bool cancelled; /* its caller is gone: freed once the thread gives it back */
};

/* Frees <r>, its request and its outcome. Accepts NULL. */
void store_read_free(struct store_read *r);

struct store_writer;

/* Opens a second connection to the database at <path> (made and checked
 * by the loop's connection) and starts the thread, and the checkpointer on
 * the thread's connection; their messages name the database <shown> (the
 * path as the store's messages show it: text_shown()). Returns the
 * writer, or NULL with <*err> set to a malloc'd message the caller frees.
 * All signals are blocked in the thread. */
struct store_writer *store_writer_start(const char *path, const char *shown, char **err);

/* Hands <ops> (<n> of them) to the thread, to be committed in one
 * transaction whose locks wait up to <busy_ms> for another process. The
 * writer takes the array and its strings until store_writer_collect()
 * gives them back. Returns 0, or -1 when a batch is still in the writer's
 * hands (nothing taken). Never waits for the thread. */
int store_writer_hand(struct store_writer *w, struct store_op *ops, size_t n, int busy_ms);

/* True while a batch is in the writer's hands (being committed, or
 * committed and not yet collected). */
bool store_writer_holding(const struct store_writer *w);

/* When the thread has finished the batch: gives it back into <*ops> and
 * <*n> (the caller frees or keeps it), its outcome into <*rc> and, when it
 * failed, SQLite's error into <err> (STORE_WRITER_ERR bytes), and returns
 * true. False while it commits (or when none was handed over). Never waits. */
bool store_writer_collect(struct store_writer *w, struct store_op **ops, size_t *n,
                          enum store_commit *rc, char *err);

/* Hands <r> to the thread, which runs it before any batch that waits
 * (taking it until store_writer_read_done()). Returns 0, or -1 when a read
 * is still in the writer's hands (nothing taken). Never waits. */
int store_writer_read(struct store_writer *w, struct store_read *r);

/* When the thread has run the read handed over: gives it back into <*r>
 * and returns true. False while it runs (or when none was handed over).
 * Never waits. */
bool store_writer_read_done(struct store_writer *w, struct store_read **r);

/* Waits until the thread has finished its batch, or until CLOCK_MONOTONIC
 * <deadline_ms>. Returns true when it has (or none was handed over). For
 * the stop only: the event loop never calls it. */
bool store_writer_wait(struct store_writer *w, int64_t deadline_ms);

/* Waits until the read the thread is running, if any, is given back, or
 * until CLOCK_MONOTONIC <deadline_ms>. Returns true when no read runs. A
 * read not begun is not waited for (store_writer_stop() withdraws it). For
 * the stop only. */
bool store_writer_wait_read(struct store_writer *w, int64_t deadline_ms);

/* How many statements the thread has run so far: a stop tells a writer
 * that is slow (it goes on) from one that is stuck (it does not). */
unsigned long store_writer_progress(struct store_writer *w);

/* A batch (or a read) the thread has not moved on for this long, in a
 * statement or between two, waits for a file system that does not answer:
 * store_writer_stuck() says so. */
#define STORE_WRITER_STUCK_MS 5000

/* What the thread does that has not moved for STORE_WRITER_STUCK_MS ("a
 * commit has not returned for 5 s or more (...)", or a read of the alert
 * queue), a static text; NULL while it moves or waits for work. Never
 * waits but for the thread's mutex (the thread holds it only between its
 * calls into SQLite). */
const char *store_writer_stuck(struct store_writer *w);

/* Stops and joins the thread, closes its connection and the checkpointer.
 * A writer still inside a commit (a write() the file system does not end)
 * cannot be joined: it is left running, its memory kept for the thread,
 * and false returned (the process is about to exit); so is one inside a
 * read. True otherwise (a read run and not collected is freed).
 * Accepts NULL. */
bool store_writer_stop(struct store_writer *w);

#endif
