/* store: the state store, one SQLite database in WAL mode (DIR/sluice.db).
 *
 * What the gateway remembers across restarts: first-contact memory (agent,
 * host), per-agent traffic baselines, the webhook delivery queue and a few
 * counters. Reads happen once, at start (store_load_*), into the memory of
 * the module that uses them; of the webhook queue, a sink reads only what
 * it has room for, at start and as room frees up, as the writes not yet
 * committed leave it, through the writer's thread (store_queue_read): the
 * loop hands the read over and takes the rows on a later tick. Writes are queued in memory by
 * store_put_* and handed by store_flush(), which the caller runs on a
 * timer, to a writer thread that commits them in one transaction through
 * a connection of its own (store_writer.h): the event loop never waits on
 * a write, not even on a file system that does not answer.
 *
 * A missing database is created (and DIR with it, mode 0750); a DIR
 * writable by every user is refused, and so is one that another user could
 * swap or fill (store_open_as). A database that is not SQLite or fails
 * its integrity check is moved aside to sluice.db.corrupt-<unix time> and a
 * new one created; the warning says so. One of another schema version, or
 * whose tables lack sluice's columns or keys (or are views), or that holds
 * a trigger, or whose alert queue's last id leaves no room for new ones,
 * is not used (left as it is).
 *
 * Owns: the loop's database handle (reads), the writer, and the queue of
 * writes not yet committed. */
#ifndef SLUICE_STATE_STORE_H
#define SLUICE_STATE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define STORE_FILE      "sluice.db"
#define STORE_LOCK_FILE "sluice.lock" /* flock()ed: one gateway per store */
#define STORE_SCHEMA    1
/* Writes waiting for a commit (queued, or in the writer's hands), and the
 * bytes of text they hold (alert bodies of up to 8 KiB, sink keys, agent
 * and host names); beyond either, the oldest of those queued are dropped.
 * By count alone, 100,000 alerts of a few KiB each held hundreds of MiB
 * while the store could not be written. */
#define STORE_PENDING_MAX   100000
#define STORE_PENDING_BYTES (64u << 20)
/* The size the write-ahead log is cut back to when a commit starts it
 * again after a whole checkpoint (PRAGMA journal_size_limit): a burst
 * (100,000 first contacts in one batch) grows it to tens of MB, which
 * SQLite otherwise keeps, reusing it from its start, for as long as the
 * gateway runs. About the checkpoint size (WAL_CHECKPOINT_PAGES). */
#define STORE_WAL_LIMIT (4 << 20)

struct store;

struct store_baseline {
    double req_avg;   /* requests per minute, exponentially weighted */
    double bytes_avg; /* bytes per minute */
    int64_t since_ms; /* when learning started (wall clock ms) */
    int64_t minute;   /* the last minute folded into the averages (unix ms / 60000) */
};

/* Opens (creating when missing) the store in directory <dir>. Returns it,
 * or NULL with <*err> set to a malloc'd message (the caller frees it and
 * runs without a store). A corrupt database is moved aside and replaced:
 * then <*warn> is set to a malloc'd message saying so (NULL otherwise). */
struct store *store_open(const char *dir, char **err, char **warn);
/* As store_open(), for a gateway that will serve as uid <user> (serve
 * --user; 0 for none). DIR and every directory above it (resolved: SQLite
 * opens no store through a symbolic link), and the store's files that
 * exist (sluice.db, its -wal, -shm and -journal, sluice.lock) must be owned by root,
 * the process's effective uid or <user>; no directory above DIR may be
 * writable by every user unless sticky (/tmp), nor a store file by every
 * user: otherwise another
 * user could put a store of their own in place (first contacts that keep
 * alerts quiet) and the store is refused, <*err> naming the path, its
 * owner and what to do. A group-writable DIR is used (its group is the
 * administrator's choice). */
struct store *store_open_as(const char *dir, uid_t user, char **err, char **warn);
/* Why store_open_try() failed, when a later try may succeed. */
enum store_held {
    STORE_FREE,         /* not for a lock */
    STORE_HELD_DB,      /* another process holds a lock on the database that bars reads too */
    STORE_HELD_GATEWAY, /* another gateway holds DIR/sluice.lock */
};
/* As store_open_as(); when it fails because another process holds a lock
 * on the database that bars reads too (PRAGMA locking_mode=EXCLUSIVE, or
 * any lock while the store is in rollback-journal mode) over the open's
 * 200 ms wait, or because another gateway holds DIR/sluice.lock (an
 * overlapping restart: the gateway before ends its --grace), <*held> says
 * which: a later try may succeed (store_opener.h tries again off the event
 * loop). STORE_FREE otherwise. */
struct store *store_open_try(const char *dir, uid_t user, char **err, char **warn,
                             enum store_held *held);

/* Commits the queued writes (as store_sync()), then closes. A writer stuck
 * in a commit is left to the exit, and standard error says how many writes
 * were not written. Accepts NULL. */
void store_close(struct store *s);

/* The database's path ("DIR/sluice.db", DIR resolved) as every message
 * names it: each control character and backslash \ooo (text_shown()), so
 * that a directory named with a line end writes no line of its own on
 * standard error. Owned by <s>. */
const char *store_shown(const struct store *s);

typedef void (*store_contact_fn)(const char *agent, const char *host, int64_t first_ms, void *arg);
typedef void (*store_baseline_fn)(const char *agent, const struct store_baseline *b, void *arg);
typedef void (*store_queue_fn)(int64_t id, const char *sink, const char *body, int attempts,
                               void *arg);
typedef void (*store_counter_fn)(const char *name, uint64_t value, void *arg);
typedef void (*store_queued_fn)(const char *sink, uint64_t rows, void *arg);

/* Each calls <fn> for every stored row. Returns the number of rows, or -1
 * on a database error (reported on stderr). */
int store_load_contacts(struct store *s, store_contact_fn fn, void *arg);
/* The baselines of the <limit> agents whose stored minute is the latest:
 * a store keeps one for every agent ever evicted, far more than a gateway
 * holds. */
int store_load_baselines(struct store *s, int limit, store_baseline_fn fn, void *arg);
int store_load_counters(struct store *s, store_counter_fn fn, void *arg);
/* A read of webhook <sink>'s oldest queue rows for the event loop: run on
 * the writer's thread, between two of its batches, never on the loop (a
 * read of a file system that does not answer would stall every request).
 * store_queue_read() puts it in line (one runs at a time) and returns at
 * once; store_queue_read_take(), on a later tick, gives them oldest first,
 * as the writes not yet committed at the take leave them: a row they add
 * is given (with 0 attempts), one they delete is not. The queue is never
 * read whole: it can hold hundreds of thousands of alerts (a sink down for
 * days). The read holds at most <limit> rows, and at most <max_bytes>
 * bytes of their bodies: it stops before the row that would pass them (the
 * first row too, unless <one_over>: then that one is read alone, however
 * long), and the sink's rows past it are not "all" (got->all false). Rows
 * whose deletion waits for a commit are passed over, not held. Returns the
 * read (its caller's until taken or cancelled), or NULL when out of
 * memory. */
struct store_read;
struct store_read_got {
    int rows;      /* given to the callback */
    bool all;      /* the sink has no row past them */
    int64_t count; /* the sink's rows, counted in the index alert_queue_sink, as the
                    * writes not yet committed leave them: those they add are counted,
                    * those they delete are not */
};
struct store_read *store_queue_read(struct store *s, const char *sink, int limit, size_t max_bytes,
                                    bool one_over);
/* Once <r> was read: calls <fn> for the sink's oldest rows, oldest first,
 * at most the read's <limit>, fills <got>, frees <r> and returns 0 (-1,
 * <r> freed, on a database error, reported on stderr). Returns 1 while it
 * waits for the thread (<r> kept): a batch the thread committed after <r>
 * ran and the loop has collected since has it read again, as the rows it
 * added are then in neither the read nor memory. <fn> must not queue
 * writes (the rows the writes not yet committed add are read in place).
 * Never waits. */
int store_queue_read_take(struct store *s, struct store_read *r, store_queue_fn fn, void *arg,
                          struct store_read_got *got);
/* Drops <r> (freed now, or by the store once the thread gives it back).
 * Accepts NULL. Every read is taken or cancelled before store_close(). */
void store_queue_read_cancel(struct store *s, struct store_read *r);
/* Calls <fn> once per webhook sink that has queue rows, with how many:
 * counted in the index alert_queue_sink, without reading the rows' bodies.
 * Committed rows only (for the start, when none waits).
 * Returns the number of sinks, or -1 on a database error (reported on
 * stderr). */
int store_count_queue(struct store *s, store_queued_fn fn, void *arg);
/* Queue rows kept for webhooks no longer configured (kept, not sent: a
 * policy that names the sink again sends them), in all: a sink removed or
 * renamed (a URL whose secret is rotated is a new sink) left its rows
 * for ever, up to its cap each (SINK_WEBHOOK_STORED_MAX). */
#define STORE_KEPT_MAX       10000
#define STORE_TRIM_SINKS_MAX 1000 /* sinks store_trim_unconfigured() takes */
/* At start, before the gateway serves (on the loop's connection, as the
 * start's reads): of the queue rows of sinks not among the <n> keys
 * <sinks> (at most STORE_TRIM_SINKS_MAX), keeps the newest <keep> and
 * deletes the others. Returns how many it deleted, or -1 (reported on
 * stderr; nothing deleted, as when the database is locked). */
int64_t store_trim_unconfigured(struct store *s, const char *const *sinks, size_t n, int64_t keep);
/* The same as a queued write, committed by the writer's thread in its
 * turn (a reload's: never on the loop): the rows a reload's removed sinks
 * left are kept to <keep> in all then, not at the next start only. Their
 * number, once committed, adds to store_queue_trimmed(). Returns 0, or -1
 * as the writes below (nothing trimmed until the next call or start). */
int store_queue_trim_later(struct store *s, const char *const *sinks, size_t n, int64_t keep);
/* Rows store_queue_trim_later()'s committed trims deleted, in all. */
uint64_t store_queue_trimmed(const struct store *s);
/* Queued writes (committed by store_flush). Strings are copied. Each
 * returns 0, or -1 when out of memory, or when the writer holds every
 * write and the caps leave no room (the write is dropped and counted). */
int store_put_contact(struct store *s, const char *agent, const char *host, int64_t first_ms);
int store_put_baseline(struct store *s, const char *agent, const struct store_baseline *b);
int store_put_counter(struct store *s, const char *name, uint64_t value);
/* Queues an alert <body> for the webhook <sink>; returns its id (> 0), or
 * -1 as the writes above. */
int64_t store_queue_add(struct store *s, const char *sink, const char *body);
int store_queue_attempts(struct store *s, int64_t id, int attempts);
/* Queues the deletion of the row of alert <id>, filed under <sink> (the
 * sink's count of rows leaves it out at once: store_read_got.count). */
int store_queue_del(struct store *s, const char *sink, int64_t id);

/* Takes back the writer's last batch if it has finished it, then hands it
 * every queued write, to be committed in one transaction, unless it still
 * holds one (the next call hands them over): never waits. Returns 0, or -1
 * while commits fail: a batch that failed comes back queued before the
 * writes queued since, in order, for the next try (at most
 * STORE_PENDING_MAX in all, holding at most STORE_PENDING_BYTES; beyond,
 * the oldest of those queued are dropped, a tenth of either cap) and the
 * error is reported once on stderr until a commit succeeds again. A
 * batch that found the database locked is handed over again on the next
 * call; one that failed after it began (a full disk) only after a backoff
 * doubling from 1 s to 30 s. Drops are told on stderr: the first, then the
 * count each time a commit succeeds again, and at close. */
int store_flush(struct store *s);
/* True when writes are waiting for store_flush(): queued, or a batch in
 * the writer's hands. */
bool store_dirty(const struct store *s);
/* Writes waiting for a commit: queued, and in the writer's hands. */
size_t store_pending(const struct store *s);
/* The bytes of text those writes hold (at most STORE_PENDING_BYTES). */
size_t store_pending_bytes(const struct store *s);
/* Why the last commit failed after it began (a full disk, the database
 * file moved or replaced), its writes kept for retry; NULL when it did
 * not (it committed, or another process held the lock). For /healthz. */
const char *store_broken(const struct store *s);
/* That a commit (or a read of the alert queue) has not returned for
 * STORE_WRITER_STUCK_MS: a file system that does not answer (a hung NFS
 * server, a frozen file system), which fails nothing while the writes pile
 * up. A static text, NULL when not so (or without a writer). For /healthz. */
const char *store_stuck(const struct store *s);
/* Writes dropped so far (out of memory, or over STORE_PENDING_MAX or
 * STORE_PENDING_BYTES). */
uint64_t store_dropped(const struct store *s);
/* True when the queue row of alert <id> (from store_queue_add) was dropped
 * over a cap (STORE_PENDING_MAX, STORE_PENDING_BYTES) before it was
 * written: the alert is no longer kept in the store (and may be counted so
 * when it still is). */
bool store_queue_lost(const struct store *s, int64_t id);
/* True when the queue row of alert <id> waits for a commit: after a
 * store_sync() that failed, one the stop loses. */
bool store_queue_unwritten(const struct store *s, int64_t id);
/* Commits what waits through the writer and waits for it, up to 1 s for a
 * lock another process holds, and for the writes as long as the writer
 * moves (a commit that runs no statement for 2 s is taken as stuck): at a
 * stop, before the sinks tell what they lose (store_close() then does not
 * wait again for a lock, nor at all for a stuck writer). Returns 0, or -1
 * when writes are left waiting. */
int store_sync(struct store *s);

#endif
