/* log_jsonl: the decision log, one JSON object a line (SPEC.md "Decision log").
 *
 * A bus subscriber: log_jsonl_on_event() formats each egress event as one
 * line, keys in SPEC.md's order, and appends it to the log without ever
 * blocking the event loop. The file is opened O_APPEND|O_NONBLOCK; what the
 * descriptor does not take at once (a pipe or a slow terminal on standard
 * output) waits in a buffer drained by an EV_WRITE event. That buffer is
 * capped (LOG_JSONL_PENDING_MAX); lines beyond the cap are dropped and
 * counted, and the count is reported on standard error by log_jsonl_close():
 * nothing is lost silently.
 *
 * An agent_egress line is written at once (before the request goes
 * upstream, as SPEC.md requires). An agent_egress_end line waits until the
 * callbacks already queued in this round of the event loop have run, so
 * the end of one request and the decision of the next share one write.
 *
 * A regular file is written by a thread of its own, the log's writer: a
 * file write can wait in the kernel (a hung NFS server, a frozen file
 * system, the inode lock another process holds) and O_NONBLOCK does nothing
 * for it (a file whose writer cannot be started is refused at the open:
 * written on the loop, such a write would stop the gateway). The loop
 * hands lines over, in order, those of one loop round
 * together at its end (one wake-up of the writer a round), and never waits
 * for the writer, which also does that file's SIGHUP reopens. What waits is the
 * decision: the gateway lets it take effect once its line is in the file
 * (log_jsonl_seq(), log_jsonl_wait(): SPEC.md, Log writes, write-ahead).
 *
 * A SIGHUP's reopen of anything else (a FIFO) runs on a thread of its own
 * too (log_jsonl_reopen_soon).
 *
 * Owns: its descriptor, its pending buffer, its write and flush events, the
 * writer thread (a file), and the reopen's thread while it runs. A thread
 * still waiting in the kernel when the log is closed is left to end alone
 * (the writer then frees the log). */
#ifndef SLUICE_WATCH_LOG_JSONL_H
#define SLUICE_WATCH_LOG_JSONL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "watch/alert.h"
#include "watch/event.h"

struct event_base;
struct log_jsonl;

/* Bytes allowed to wait for a slow reader before lines are dropped. */
#define LOG_JSONL_PENDING_MAX (64u * 1024 * 1024)
/* A file's write (or reopen) that has not returned for this long waits
 * for a file system that does not answer: log_jsonl_error() says so. */
#define LOG_JSONL_STUCK_MS 5000

/* log_jsonl_open()'s flags. */
#define LOG_JSONL_NO_LINKS 1u /* refuse a path with a symbolic link in it (open_no_links), */
                              /* at the open and at every reopen */

/* Opens the log at <path> ("-" = standard output) for appending (created
 * 0640 when missing; a path naming the file or socket standard output or
 * error has open, such as /dev/stdout, is written through that
 * descriptor's open file description, as "-" is). <flags> is 0 or
 * LOG_JSONL_NO_LINKS. A regular file whose writer thread cannot be started
 * (a pids cgroup at its limit, RLIMIT_NPROC) is refused. Returns a new
 * log, freed with log_jsonl_close(), or NULL with <*err> set to a malloc'd
 * message the caller frees. <base> is
 * borrowed and must outlive the log. */
struct log_jsonl *log_jsonl_open(struct event_base *base, const char *path, unsigned flags,
                                 char **err);

/* The bus subscriber: <arg> is the struct log_jsonl. Never blocks. */
void log_jsonl_on_event(const struct egress_event *ev, void *arg);

/* Formats <ev> as one line, ending in '\n', into <out> (<cap> bytes),
 * NUL-terminated when <cap> > 0. Returns the length of the whole line
 * (without the NUL) like snprintf: a result >= <cap> means <out> was too
 * small and holds a truncated line. Pure: no I/O, no allocation. Strings
 * are escaped as JSON (control characters as \u00XX, invalid UTF-8 bytes
 * as \ufffd); NULL pointers, TIER_NONE, no rule, port 0 and status 0
 * become null. */
size_t log_jsonl_format(const struct egress_event *ev, char *out, size_t cap);

/* Formats alert <a> as SPEC.md's alert line (keys ts, event, kind,
 * severity, agent, host, tier, id, detail, count), like log_jsonl_format;
 * a line that does not fit in <cap> whole (a detail of many KiB) is
 * formatted cut as a decision line that cannot be whole is: each string
 * at most 256 bytes of JSON, a last key "cut" naming those cut. */
size_t log_jsonl_format_alert(const struct alert *a, char *out, size_t cap);

/* Appends the complete line <line> (<n> bytes, ending in '\n') to the log
 * like the subscribers do: never blocks, dropped and counted past the cap. */
void log_jsonl_write_line(struct log_jsonl *l, const char *line, size_t n);

/* Writes what is pending, waiting with poll() at most <timeout_ms> in all
 * (used at shutdown). Returns 0 when nothing is left pending, -1 otherwise. */
int log_jsonl_flush(struct log_jsonl *l, int timeout_ms);

/* Reopens the log file by name (after rotation); pending lines go to the
 * new file. A no-op for standard output. Returns 0, or -1 when the file
 * cannot be opened (the old descriptor stays in use). Waits for open():
 * not for the event loop, whose reopen is log_jsonl_reopen_soon(). */
int log_jsonl_reopen(struct log_jsonl *l);

/* SIGHUP's reopen: as log_jsonl_reopen(), but open() (which can wait for
 * ever: a hung NFS server, a directory another process holds locked) runs
 * on a thread of its own, the event loop going on. Meanwhile lines wait in
 * memory (the pending cap applies) and go, in order, to the descriptor the
 * reopen leaves in place: the new file, or the old one when the open fails
 * (reported on standard error, followed by <fail_msg> when not NULL; a
 * static string). A call while a reopen runs queues one more after it.
 * Without a thread (none can be started) the reopen is refused, the
 * descriptor in use kept (told on standard error, <fail_msg> after it):
 * run on the loop, an open() that does not return would stop the gateway.
 * A no-op for standard output. */
void log_jsonl_reopen_soon(struct log_jsonl *l, const char *fail_msg);

/* The write-ahead gate (SPEC.md, Decision log): a line's decision takes
 * effect once the line is in the file. Only a log written by its writer
 * thread (a regular file) keeps anyone waiting; other logs are written on
 * the loop as soon as the descriptor takes them, and a reader behind holds
 * no request.
 *
 * The number of the last line handed to the writer thread (lines are
 * numbered from 1 in the order they are appended; a line dropped at the
 * cap gets none), or 0 when the log has no writer thread. */
uint64_t log_jsonl_seq(const struct log_jsonl *l);

/* True when line <seq> may take effect now: 0, no writer thread, the line
 * is in the file, or the log cannot be written now (its last write failed,
 * or would block on what the path names after a reopen, a FIFO: as ever, a
 * log that cannot be written does not hold traffic; its lines wait in
 * memory under the cap). A regular file's write that fails with EAGAIN (a
 * FUSE or network file system) is one that has not gone through yet, as
 * one that waits in the kernel: the line waits, retried. Otherwise false, and
 * the callback of log_jsonl_on_written() runs on the loop once it may (or
 * once an earlier <seq> asked for may: the caller asks again). Never
 * blocks. */
bool log_jsonl_wait(struct log_jsonl *l, uint64_t seq);

/* Sets the loop callback that log_jsonl_wait() promises (<fn>(<arg>)). */
void log_jsonl_on_written(struct log_jsonl *l, void (*fn)(void *arg), void *arg);

/* Lines dropped so far (pending buffer full, or the reader gone). */
uint64_t log_jsonl_dropped(const struct log_jsonl *l);

/* Bytes waiting to be written. */
size_t log_jsonl_pending_bytes(const struct log_jsonl *l);

/* Why the log cannot be written now (the last write's error, such as "No
 * space left on device", until a write succeeds; "its reader is gone"; for
 * a regular file, that a write or reopen has not returned for
 * LOG_JSONL_STUCK_MS, or that its writes have failed with EAGAIN for as
 * long (until one goes through), or that the open file has no name left (deleted, or
 * moved to another file system, without a SIGHUP: found after a write, at
 * most once a second; until a reopen), or that no writer thread could be
 * started for the file a reopen put in place (the loop writes it; until a
 * reopen starts one); or that lines past
 * LOG_JSONL_PENDING_MAX were dropped while others waited, or that a line
 * was dropped for want of memory, until all that waits is written), or
 * NULL when it can. The text is static (strerror's, or a literal). */
const char *log_jsonl_error(const struct log_jsonl *l);

/* Sets the pending cap (tests); 0 restores LOG_JSONL_PENDING_MAX. */
void log_jsonl_set_pending_max(struct log_jsonl *l, size_t max);

/* Tries once more to write what is pending (no waiting; a file's writer
 * gets 250 ms for it and is left behind when it still waits then), reports
 * dropped and unwritten lines on standard error, and frees <l>. Returns the
 * lines so lost in all (0 for a log that wrote every line). Accepts NULL
 * (returns 0). */
uint64_t log_jsonl_close(struct log_jsonl *l);

#endif
