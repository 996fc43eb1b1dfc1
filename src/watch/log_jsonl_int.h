/* log_jsonl_int: what the files of the decision log share; nothing but
 * them includes this (the interface is log_jsonl.h).
 *
 *   log_jsonl.c   the log on the event loop: open, append, the write and
 *                 flush events, flush, close, what /healthz and the
 *                 metrics read
 *   log_line.c    the lines: each event and alert as JSON, keys in
 *                 SPEC.md's order, strings cut when a line cannot be whole
 *   log_drain.c   the pending buffer written to the descriptor (whole
 *                 lines; PIPE_BUF pieces on a pipe or socket), by the loop
 *                 or by the writer thread
 *   log_fd.c      the descriptor: the path opened (standard output, the
 *                 relay's pipe, a socket, a FIFO), and what it is
 *   log_reopen.c  SIGHUP's reopen of what the loop writes, on a thread
 *   log_writer.c  the writer thread of a regular file, its reopens, and
 *                 the write-ahead gate (log_jsonl_wait()) */
#ifndef SLUICE_WATCH_LOG_JSONL_INT_H
#define SLUICE_WATCH_LOG_JSONL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "watch/log_jsonl.h"

struct evbuffer;
struct event;
struct event_base;
struct stat;

/* A line is formatted on the stack when it fits, else in a heap buffer of
 * the exact size. Event strings are bounded by the gate: the path by the
 * request head (limits.header_bytes, 1 MiB at most), in bytes 0x21-0x7e
 * of which only " and \ grow, to two; the owner by the policy (1 KiB,
 * each byte 6 at most escaped); host, method, agent and id to a few
 * hundred bytes. An agent_egress line is so at most about 2 MiB, and none
 * reaches this cap. A line past it, or one whose heap buffer cannot be had
 * (no memory), is not dropped: it is formatted cut, on the stack. */
#define LINE_STACK   4096
#define LINE_MAX_LEN (16u * 1024 * 1024)

/* What the writer needs to know of a descriptor (log_fd_probe). */
struct fd_kind {
    bool pollable; /* epoll takes it (a pipe, socket or terminal): EV_WRITE works */
    bool is_pipe;  /* a pipe or FIFO */
    bool is_sock;  /* a socket */
    bool is_fifo;  /* a named FIFO */
    bool is_reg;   /* a regular file: written by the writer thread (struct file_writer) */
};

/* A background reopen (log_jsonl_reopen_soon). The thread opens the path,
 * asks what the new descriptor is and, once it has one, closes the old
 * (a close may wait too: on NFS it writes back what the file has cached);
 * then it writes one byte to a pipe whose event, on the loop, puts the new
 * descriptor in place. The log's descriptor is the job's while it runs:
 * the loop writes nothing, lines wait in <pending>. A log closed while its
 * job runs (at exit, the open still waiting) leaves the job to the thread,
 * which frees it once the open returns: the loop never waits for it. */
struct reopen_job {
    pthread_t thread;
    pthread_mutex_t mu;
    bool done;           /* the thread is through with the job (mu) */
    bool abandoned;      /* the log is gone: the thread frees the job (mu) */
    int fds[2];          /* the "done" byte; [0] is watched by <ev> */
    struct event *ev;    /* the loop's, freed by the loop */
    char *path;          /* a copy of the log's */
    unsigned flags;      /* the log's */
    int old_fd;          /* the log's descriptor; -1 once the thread closed it */
    int new_fd;          /* the result, or -1 */
    int err;             /* open's errno when new_fd is -1 */
    const char *why;     /* log_fd_open_failure() of it */
    bool same;           /* new_fd is the file old_fd was */
    struct fd_kind kind; /* what new_fd is */
};

/* What file_writer.busy says the writer thread is doing without its lock:
 * what log_jsonl_close() names when it leaves the thread behind. */
enum writer_busy { WB_NONE, WB_WRITE, WB_REOPEN, WB_POLL };

/* The writer thread of a log on a regular file. A write to a file is no
 * EAGAIN away from done: it can wait in the kernel for as long as the file
 * system does (a hung NFS server, a frozen file system, another process
 * holding the file's inode lock), and O_NONBLOCK does nothing for it. So
 * the loop only appends lines to <incoming> under <mu> and wakes the
 * thread; the thread moves them to the log's <pending> and writes them
 * with the loop's own log_drain(), and does the SIGHUP reopens too (it owns
 * the descriptor). From log_writer_start() on, the log's write state (fd, the
 * kind flags, pending, pending_lines, line_sent, line_sent_end, broken,
 * reported, write_errno, dropped) is the thread's alone; the loop reads
 * what the thread publishes under <mu> (the pub_ fields). A log closed
 * while the thread waits in the kernel is left to the thread (abandoned),
 * which frees it, the log with it, once its call returns. */
struct file_writer {
    pthread_t thread;
    pthread_mutex_t mu;
    /* The thread waits on it (a futex word) for lines, a reopen, the stop:
     * writer_sleep(), writer_kick(). */
    _Atomic uint32_t wake_word;
    pthread_cond_t progress;     /* flush and close wait on it for the thread's rounds */
    struct evbuffer *incoming;   /* (mu) lines handed over, not yet taken */
    size_t incoming_lines;       /* (mu) */
    uint64_t dropped;            /* (mu) lines the loop dropped (the cap) */
    bool waiting;                /* (mu) the thread waits on <wake> */
    bool hurry;                  /* (mu) a flush waits: a failed write is retried every 50 ms */
    bool stop;                   /* (mu) log_jsonl_close(): one last try, then end */
    bool exited;                 /* (mu) the thread is through: join it */
    bool abandoned;              /* (mu) the log is gone: the thread frees it */
    enum writer_busy busy;       /* (mu) what it does without the lock */
    bool reopen_due;             /* (mu) a reopen asked, not started yet */
    uint64_t reopen_asked;       /* (mu) reopens asked so far */
    uint64_t reopen_done;        /* (mu) the reopen_asked a finished reopen took in */
    int reopen_rc;               /* (mu) that reopen's result */
    const char *reopen_fail_msg; /* (mu) */
    /* (mu) CLOCK_MONOTONIC when the write or reopen under way (busy) began,
     * or when its last write() returned: a call that waits in the kernel
     * for LOG_JSONL_STUCK_MS makes the log unwritable (log_jsonl_error()),
     * as a failed one does, where /healthz said "ok" all along. */
    struct timespec busy_since;
    /* (mu; written by the thread only) The file's last write failed with
     * EAGAIN, the first of a run of them at <again_since>. A pipe's EAGAIN
     * is a reader behind, whom no decision waits for; a regular file's (a
     * FUSE or network file system that would block) is a write that has
     * not gone through: retried as a short write is, every
     * WRITER_AGAIN_MS, the decisions waiting for their lines, and after
     * LOG_JSONL_STUCK_MS log_jsonl_error() says so, as for a write that
     * waits in the kernel. Cleared by a write that returns anything else. */
    bool again;
    struct timespec again_since;
    /* (mu) A line was dropped over the cap while others waited: the
     * reader or disk does not keep up. Until all that waits is written
     * (publish()), log_jsonl_error() says so. */
    bool over_cap;
    /* (mu) A line was dropped for want of memory (no room to append it, or
     * its buffer refused: count_drop()). Until all that waits is written
     * after it (publish()), log_jsonl_error() says so. */
    bool nomem;
    /* (mu; written by the thread only) The open file has no name left
     * (st_nlink 0: deleted, or moved to another file system, without a
     * SIGHUP): its lines go where nobody reads them. Until a reopen,
     * log_jsonl_error() says so. */
    bool unlinked;
    /* The thread's: CLOCK_MONOTONIC when the next look at st_nlink is due
     * (writer_look_unlinked(): after a write, at most once a second). */
    struct timespec nlink_due;
    /* Published by the thread under <mu>, read by the loop. */
    size_t pub_len;       /* evbuffer_get_length(pending) */
    size_t pub_sent;      /* line_sent */
    size_t pub_lines;     /* pending_lines */
    int pub_errno;        /* write_errno */
    bool pub_broken;      /* broken */
    uint64_t pub_dropped; /* dropped (a reader gone) */
    /* The write-ahead gate (log_jsonl_wait()). Lines are numbered from 1
     * in the order the loop hands them over; <pub_done> is the number of
     * the last one in the file (or dropped by the thread: a reader gone),
     * <pub_stalled> says the last round's write failed or would block. */
    uint64_t handed;   /* the loop's alone: the number of the last line handed over */
    uint64_t taken;    /* the thread's: lines moved to the log's <pending> */
    uint64_t pub_done; /* (mu) taken - pending_lines */
    bool pub_stalled;  /* (mu) */
    /* What the three above let through, for the loop to read without <mu>
     * (gate_open()): pub_done, or GATE_ALL while the log cannot be written
     * (pub_stalled, pub_broken). Stored by the thread, with <mu> held,
     * each time one of them changes (gate_publish()).
     *
     * Memory order: the thread stores it with release after the write()
     * that put those lines in the file returned; the loop loads it with
     * acquire, so the write happens before whatever the loop then does
     * for a decision that the value lets go (the answer sent, the bytes
     * sent up): the line is in the file before its effect. A load that
     * is stale only says "not yet": the loop then takes <mu> to ask for
     * its wake-up (log_jsonl_wait()), and under <mu> it reads the value
     * last stored, since every store is made with <mu> held; and before
     * the thread waits, it stores the gate and looks at wake_seq in one
     * hold of <mu> (writer_main(): gate_publish(), wake_loop_if_due()).
     * So either the loop sees the line written, or the thread sees the
     * loop waiting: no wake-up is lost. */
    _Atomic uint64_t gate;
    /* (mu) The number the loop waits for, or 0: the thread writes to
     * <efd> (the loop's <done_ev>) once pub_done reaches it or a write
     * fails, once a round, never for a loop that does not wait. */
    uint64_t wake_seq;
    bool wake_pending; /* (mu) written to <efd>, not read by the loop yet */
    int efd;
    struct event *done_ev;      /* the loop's, on <efd> */
    void (*done_fn)(void *arg); /* the loop's callback (log_jsonl_on_written) */
    void *done_arg;
};

struct log_jsonl {
    struct event_base *base;
    struct file_writer *fw; /* the writer thread (a regular file), or NULL */
    char *path;             /* NULL for standard output */
    /* What messages name it by: the path with its control characters
     * shown \ooo (text_shown_into()), as the open's refusal shows it, so
     * that a path holding a line end writes no line of its own on standard
     * error; "(stdout)" for standard output. */
    char *shown;
    unsigned flags; /* LOG_JSONL_NO_LINKS */
    int fd;
    bool is_sock;  /* write with send(MSG_DONTWAIT), PIPE_BUF at most at a time (pipe_piece) */
    bool is_pipe;  /* a pipe or FIFO: written PIPE_BUF at most at a time (pipe_piece) */
    bool is_fifo;  /* a named FIFO, whose reader can come back after it left (EPIPE) */
    bool is_reg;   /* a regular file: EAGAIN is no reader behind (file_writer.again) */
    bool pollable; /* epoll takes it (a pipe, socket or terminal): EV_WRITE works */
    bool broken;   /* the reader is gone (EPIPE, but for a named FIFO): drop from now on */
    bool reported;
    int write_errno; /* the last write's error while it lasts, else 0 */
    /* A line was dropped over pending_max while others waited (the reader
     * does not keep up): log_jsonl_error() says so until log_drain() has
     * written all that waits. Not the writer thread's: see file_writer. */
    bool over_cap;
    /* A line was dropped for want of memory: as over_cap, until log_drain()
     * (or write_alone()) has written all that waits after it. Not the
     * writer thread's: see file_writer. */
    bool nomem;
    struct evbuffer *pending;
    size_t pending_lines; /* complete lines in <pending> */
    /* Bytes of <pending>'s first line already on the descriptor (a write
     * that stopped mid-line): <pending> always starts at a line's start, so
     * that a reopen after rotation writes that line whole to the new file
     * rather than its tail alone. */
    size_t line_sent;
    /* With line_sent: where that part ends in a regular file (its offset
     * after the write), else 0. A file shorter than that has been
     * truncated since (logrotate's copytruncate): the line starts over. */
    off_t line_sent_end;
    size_t pending_max;
    struct event *wev;
    /* Retries after a failed write: a timer of its own, since a descriptor
     * that fails may still be writable to epoll for ever (a terminal that
     * hung up fails with EIO and polls ready): wev would spin the loop. */
    struct event *retry;
    struct event *fev; /* at the round's end: writes the end lines gathered, or wakes <fw> */
    bool flush_due;    /* fev is active */
    uint64_t dropped;
    /* A reopen running on a thread of its own (log_jsonl_reopen_soon), or
     * NULL. While it runs the job owns <fd>: lines wait in <pending>. */
    struct reopen_job *job;
    bool reopen_queued;               /* a SIGHUP came during the job: one more after it */
    const char *reopen_fail_msg;      /* printed when a background reopen fails, or NULL */
    void (*on_written_fn)(void *arg); /* log_jsonl_on_written(), for a writer started later */
    void *on_written_arg;
    /* A reopen put a regular file in place (the path named a FIFO before)
     * and no writer thread could be started for it: the loop writes it,
     * where a write the file system holds stops the gateway. The error
     * (an errno value) until a reopen, else 0: log_jsonl_error() says so.
     * log_jsonl_open() refuses such a file instead. */
    int no_writer;
    /* With <no_writer>, the loop's own look at st_nlink (as the writer's:
     * file_writer.unlinked, .nlink_due). */
    bool unlinked;
    struct timespec nlink_due;
};

/* log_line.c */
/* Formats the line of <ev> into <stack> (LINE_STACK bytes)
 * or, when it is longer, into a heap buffer of its size. Returns the line
 * (the caller frees it when it is not <stack>), its length in <*n>. A line
 * that can have no heap buffer (past LINE_MAX_LEN, or no memory) is
 * formatted cut into <stack>: its decision is logged, not dropped. NULL
 * only when the cut line does not fit either (none does). */
char *log_line_format(const struct egress_event *ev, char *stack, size_t *n);

/* log_drain.c */
/* writev() of <iov>'s <nv> pieces to the log's descriptor; sendmsg() on a
 * socket, which must not raise SIGPIPE nor block. */
ssize_t log_write_pieces(const struct log_jsonl *l, const struct iovec *iov, int nv);
/* Writes what the descriptor takes now. Returns 1 when something is still
 * pending (EAGAIN), 0 when the buffer is empty, -1 on a hard error. */
int log_drain(struct log_jsonl *l);

/* log_fd.c */
/* What <fd> is. Asks the kernel (fstat, fstatfs, epoll): a background
 * reopen calls it on its thread. */
struct fd_kind log_fd_probe(int fd);
/* True when <st> is the file or socket standard output or the original
 * standard error has open. */
bool log_fd_is_inherited(const struct stat *st);
/* A descriptor of our own for the inherited descriptor <fd> (standard
 * output, or the standard error the relay took over); see log_fd.c. */
int log_fd_open_inherited(int fd, bool may_share);
/* Opens the log's path (<lflags>: log_jsonl_open()'s); see log_fd.c for
 * the paths that name standard output or error. The descriptor, or -1 with
 * errno. */
int log_fd_open_path(const char *path, unsigned lflags);
/* Ends a line the regular file <fd> (the log's path, just opened) was left
 * inside by a write cut short. */
void log_fd_end_cut_line(int fd);
/* What a failed open (or, with <reopen>, reopen) with errno <e> says. */
const char *log_fd_open_failure(const char *path, unsigned flags, int e, bool reopen);
/* True when <a> and <b> are descriptors of one file. */
bool log_fd_same_file(int a, int b);

/* log_reopen.c */
/* Ends the finished background reopen: joins its thread, puts its result
 * in place. */
void log_reopen_finish(struct log_jsonl *l);

/* log_writer.c */
/* Hands <l>'s writes (and what is pending) to a new writer thread. Returns
 * 0, or the error (an errno value) when none can be started: the loop's
 * write events are disarmed then, <l> the loop's still. */
int log_writer_start(struct log_jsonl *l);
/* The thread's state for the loop to read. Called with <mu> not held. */
void log_writer_publish(struct log_jsonl *l);
/* Wakes the thread when it waits (on the loop: on_flush). */
void log_writer_wake(struct file_writer *fw);
/* The loop's append: to <incoming>; the thread is woken at the end of this
 * loop round (on_flush). */
void log_writer_append(struct log_jsonl *l, const char *line, size_t n);
/* log_jsonl_flush() with a writer thread: waits until nothing is left (or
 * the reader is gone), <timeout_ms> from <start> at most. */
int log_writer_flush(struct log_jsonl *l, const struct timespec *start, int timeout_ms);
/* Asks the thread for a reopen (log_jsonl_reopen_soon()). */
void log_writer_reopen_ask(struct log_jsonl *l, const char *fail_msg);
/* log_jsonl_reopen() with a writer thread: asks, and waits for the answer. */
int log_writer_reopen_wait(struct log_jsonl *l);
/* Ends the writer thread for log_jsonl_close(): see log_writer.c. Returns
 * false when <l> is left to the thread, which frees it. */
bool log_writer_close(struct log_jsonl *l, uint64_t *lost);
/* Whether the file the loop writes (no_writer) has lost its name: after a
 * write of the loop's. */
void log_loop_look_unlinked(struct log_jsonl *l);
/* What a writer stuck in the kernel (or on EAGAIN) for LOG_JSONL_STUCK_MS
 * is doing, or NULL. With <mu>. */
const char *log_writer_stuck_text(const struct file_writer *fw);

/* log_jsonl.c */
/* Tells on standard error that <l> drops lines: past its cap while others
 * wait (a reader or disk that does not keep up), or, <nomem>, for want of
 * memory. Called at the first drop of a spell (over_cap or nomem set),
 * so told once until all that waits is written: /healthz and /metrics
 * told it, a serve without --admin nobody until its exit. */
void log_tell_dropping(const struct log_jsonl *l, bool nomem);
/* Arms the write the last log_drain() (<rc>) calls for: the write event, a
 * retry, or none. */
void log_schedule(struct log_jsonl *l, int rc);
/* Takes <k> as what l->fd is. */
void log_set_kind(struct log_jsonl *l, const struct fd_kind *k);
/* Takes <k> as what l->fd is and makes the write event for it. */
int log_make_event(struct log_jsonl *l, const struct fd_kind *k);
/* Frees <l>'s loop events (on the loop: they are its). */
void log_free_events(struct log_jsonl *l);
/* Frees <l> and what it holds but its writer; its events already freed
 * when the writer thread calls it. */
void log_free(struct log_jsonl *l);

#endif
