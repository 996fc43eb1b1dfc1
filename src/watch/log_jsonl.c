/* log_jsonl: the decision log writer (see log_jsonl.h). */
#include "watch/log_jsonl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <linux/magic.h>

#include "util/open_nolinks.h"
#include "util/quiet_thread.h"
#include "util/stderr_relay.h"
#include "util/text_json.h"
#include "util/units.h"
#include "util/utf8.h"
#include "util/word8.h"

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
/* A cut line's strings take at most this many bytes of JSON each (quotes
 * aside), the keys of those cut named in a last "cut" field: ten strings
 * of an agent_egress line, their keys and the field fit in LINE_STACK. */
#define CUT_FIELD_MAX 256
/* The most strings a line has (agent_egress: ten). */
#define LINE_STRINGS 12
/* A write the loop makes that would block, to a descriptor epoll does not
 * take (a regular file on a FUSE or network file system), is tried again
 * after this long: poll() calls such a file always writable, so waiting
 * for it would retry at once, a core spent on writev() calls. */
#define LOOP_AGAIN_MS 100

/* What the writer needs to know of a descriptor (probe_fd). */
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
    const char *why;     /* open_failure() of it */
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
 * with the loop's own drain(), and does the SIGHUP reopens too (it owns
 * the descriptor). From writer_start() on, the log's write state (fd, the
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
    unsigned flags;         /* LOG_JSONL_NO_LINKS */
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
     * does not keep up): log_jsonl_error() says so until drain() has
     * written all that waits. Not the writer thread's: see file_writer. */
    bool over_cap;
    /* A line was dropped for want of memory: as over_cap, until drain()
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

/* At most this many buffer pieces per write. */
#define DRAIN_IOV 16

/* ---------------------------------------------------------------- format */

struct out {
    char *p;
    size_t cap;
    size_t len;                    /* would-be length, may exceed cap */
    size_t field_max;              /* bytes a string's JSON may take: SIZE_MAX, or CUT_FIELD_MAX */
    const char *key;               /* the key of the string put next (PUT_KEY) */
    const char *cut[LINE_STRINGS]; /* the keys of the strings cut */
    size_t ncut;
};

/* An out on <buf> (<cap> bytes, a NUL kept room for) whose strings take
 * <field_max> bytes of JSON at most. */
static struct out out_on(char *buf, size_t cap, size_t field_max)
{
    struct out o = {.p = buf, .cap = cap > 0 ? cap - 1 : 0, .field_max = field_max};
    return o;
}

static void put(struct out *o, const char *s, size_t n)
{
    /* The common case first, as its own memcpy(): with <n> known when
     * compiled (the keys), the compiler makes it a few moves, where the
     * clamped length of the other case is copied byte by byte. */
    if (o->len <= o->cap && n <= o->cap - o->len) {
        memcpy(o->p + o->len, s, n);
    } else if (o->len < o->cap) {
        size_t room = o->cap - o->len;
        memcpy(o->p + o->len, s, n < room ? n : room);
    }
    o->len += n;
}

static void puts_lit(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

static void put_u64(struct out *o, uint64_t v)
{
    char buf[FORMAT_UINT_MAX];
    put(o, buf, format_uint(buf, v, 0));
}

/* Printable ASCII but for " and \\: a JSON string's bytes as they are.
 * A byte per byte value (one load a byte: every string of every line is
 * scanned with it); 0x20-0x7e are 1 but for 0x22 and 0x5c. */
static const unsigned char json_plain_tab[256] = {
    /* 0x00 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* 0x10 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* 0x20 */ 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x30 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x40 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x50 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
    /* 0x60 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x70 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0,
    /* 0x80-0xff: 0 */
};

static bool json_plain(unsigned char c)
{
    return json_plain_tab[c] != 0;
}

/* True when <n> more bytes keep the string begun at <from> (its opening
 * quote's end) within o->field_max; else the string is marked cut, under
 * the key PUT_KEY put last. */
static bool str_room(struct out *o, size_t from, size_t n)
{
    if (o->len - from + n <= o->field_max)
        return true;
    if (o->ncut < LINE_STRINGS && o->key != NULL)
        o->cut[o->ncut++] = o->key;
    return false;
}

/* put_str()'s way for a string that is not all plain bytes, or not
 * within room or o->field_max: <s> (<n> bytes) as a JSON string, cut after
 * o->field_max bytes of JSON (between two characters: never inside an
 * escape nor a UTF-8 sequence). A run of plain bytes is copied at once;
 * UTF-8 is looked at only from a byte past ASCII on. Never inlined: in
 * put_str() its registers and its stack (saved and restored at every
 * call, about 20 instructions) cost every string what only a few need. */
__attribute__((noinline)) static void put_str_escaped(struct out *o, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;

    put(o, "\"", 1);
    size_t from = o->len;
    for (size_t i = 0;;) {
        size_t run = i;
        while (json_plain(p[run])) /* the NUL at <n> is not plain */
            run++;
        if (run > i) {
            if (!str_room(o, from, run - i)) {
                put(o, s + i, o->field_max - (o->len - from)); /* ASCII: cut anywhere */
                break;
            }
            put(o, s + i, run - i);
            i = run;
        }
        unsigned char c = p[i];
        if (c == '\0')
            break;
        /* The next character's JSON (<piece>, <len> bytes; <in> bytes of <s>). */
        char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xf]};
        const char *piece = e;
        size_t len = sizeof(e), in = 1;
        if (c == '"') {
            piece = "\\\"", len = 2;
        } else if (c == '\\') {
            piece = "\\\\", len = 2;
        } else if (c == '\n') {
            piece = "\\n", len = 2;
        } else if (c == '\r') {
            piece = "\\r", len = 2;
        } else if (c == '\t') {
            piece = "\\t", len = 2;
        } else if (c >= 0x20 && c != 0x7f) {
            size_t seq = utf8_seq(p + i, n - i);
            if (seq == 0) {
                piece = "\\ufffd";
            } else if (seq == 3 && p[i] == 0xe2 && p[i + 1] == 0x80 &&
                       (p[i + 2] == 0xa8 || p[i + 2] == 0xa9)) {
                /* U+2028/U+2029 are valid JSON but end lines in JavaScript. */
                piece = p[i + 2] == 0xa8 ? "\\u2028" : "\\u2029";
                in = 3;
            } else {
                piece = s + i, len = seq, in = seq;
            }
        } /* else a control character: \u00XX */
        if (!str_room(o, from, len))
            break;
        put(o, piece, len);
        i += in;
    }
    put(o, "\"", 1);
}

/* Copies to <d> the bytes of <s> (<n> of them) when all are plain (what a
 * JSON string carries as it is), eight at a time, as they are tested:
 * returns <n> then, else how many it copied, a plain start of <s>. The
 * last word is read where it ends at <n> (overlapping the one before), a
 * string under 8 bytes as two 4-byte halves or its first, middle and last
 * byte: never a byte past <n>. */
static size_t json_plain_copy(char *d, const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x = word8_load(s + i);
        if (!word8_json_plain(x))
            return i;
        memcpy(d + i, &x, 8);
    }
    if (i == n)
        return n;
    if (n >= 8) {
        uint64_t x = word8_load(s + n - 8);
        if (!word8_json_plain(x))
            return i;
        memcpy(d + n - 8, &x, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        if (!word8_json_plain((uint64_t)a << 32 | b))
            return 0;
        memcpy(d, &a, 4);
        memcpy(d + n - 4, &b, 4);
    } else {
        unsigned char a = (unsigned char)s[0], b = (unsigned char)s[n / 2];
        unsigned char c = (unsigned char)s[n - 1];
        /* the word's other five bytes: 'A's, plain */
        if (!word8_json_plain(0x4141414141000000u | (uint64_t)a << 16 | (uint64_t)b << 8 | c))
            return 0;
        d[0] = (char)a, d[n / 2] = (char)b, d[n - 1] = (char)c;
    }
    return n;
}

/* Writes <s> as a JSON string (with quotes), or null; cut after
 * o->field_max bytes of JSON (put_str_escaped()). Nearly every string of a
 * line is all plain bytes and short (an id, an agent, a host, an address:
 * 4 to 16 bytes): those are tested and copied a word at a time, quotes
 * around, with no call but strlen(). */
static void put_str(struct out *o, const char *s)
{
    if (s == NULL) {
        put(o, "null", 4);
        return;
    }
    size_t n = strlen(s);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    if (n <= o->field_max && room >= 2 && n <= room - 2) {
        char *d = o->p + o->len;
        if (json_plain_copy(d + 1, s, n) == n) {
            d[0] = '"';
            d[n + 1] = '"';
            o->len += n + 2;
            return;
        }
    }
    put_str_escaped(o, s, n); /* writes again what the copy put */
}

/* ,"key": in one copy of a length known when compiled (keys are literals);
 * <key> is the one a string cut after it is named by (struct out.cut). */
#define PUT_KEY(o, name)                                                                           \
    ((o)->key = (name), put((o), ",\"" name "\":", sizeof(",\"" name "\":") - 1))

/* The cut line's last field, "cut":["path",...], when strings were cut. */
static void put_cut(struct out *o)
{
    if (o->ncut == 0)
        return;
    PUT_KEY(o, "cut");
    put(o, "[", 1);
    for (size_t i = 0; i < o->ncut; i++) {
        if (i > 0)
            put(o, ",", 1);
        put_str(o, o->cut[i]);
    }
    put(o, "]", 1);
}

/* Ends the line in <out> (<cap> bytes) that <o> formatted: its "cut"
 * field, if any, its end, the NUL. Returns its would-be length. */
static size_t out_end(struct out *o, char *out, size_t cap)
{
    put_cut(o);
    put(o, "}\n", 2);
    if (cap > 0)
        out[o->len < cap ? o->len : cap - 1] = '\0';
    return o->len;
}

static void put_ts(struct out *o, const struct timespec *ts)
{
    /* The calendar fields of the last second seen (per thread: the
     * formatter stays safe to call from any thread). */
    static _Thread_local time_t last_sec = -1;
    static _Thread_local char last_buf[27];
    struct tm tm;
    char buf[40];
    time_t t = ts->tv_sec;
    long ms = ts->tv_nsec / 1000000;

    if (ms < 0 || ms > 999)
        ms = 0;
    if (t == last_sec) {
        memcpy(buf, last_buf, 26);
        format_uint(buf + 21, (uint64_t)ms, 3);
        put(o, buf, 26);
        return;
    }
    if (gmtime_r(&t, &tm) == NULL) {
        memset(&tm, 0, sizeof(tm));
        tm.tm_year = 70;
        tm.tm_mday = 1;
    }
    long year = tm.tm_year + 1900L;
    if (year < 0 || year > 9999) {
        int n = snprintf(buf, sizeof(buf), "\"%04ld-%02d-%02dT%02d:%02d:%02d.%03ldZ\"", year,
                         tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
        if (n > 0)
            put(o, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
        return;
    }
    /* "YYYY-MM-DDThh:mm:ss.mmmZ", quoted: by hand, it is on every line */
    memcpy(buf, "\"0000-00-00T00:00:00.000Z\"", 26);
    format_uint(buf + 1, (uint64_t)year, 4);
    format_uint(buf + 6, (uint64_t)tm.tm_mon + 1, 2);
    format_uint(buf + 9, (uint64_t)tm.tm_mday, 2);
    format_uint(buf + 12, (uint64_t)tm.tm_hour, 2);
    format_uint(buf + 15, (uint64_t)tm.tm_min, 2);
    format_uint(buf + 18, (uint64_t)tm.tm_sec, 2);
    memcpy(last_buf, buf, 26);
    last_sec = t;
    format_uint(buf + 21, (uint64_t)ms, 3);
    put(o, buf, 26);
}

static void put_tier(struct out *o, enum tier t)
{
    if (t < TIER_0 || t > TIER_3)
        puts_lit(o, "null");
    else
        put_u64(o, (uint64_t)t);
}

/* log_jsonl_format() with each string cut after <field_max> bytes of JSON. */
static size_t format_event(const struct egress_event *ev, char *out, size_t cap, size_t field_max)
{
    struct out o = out_on(out, cap, field_max);

    puts_lit(&o, "{\"ts\":");
    put_ts(&o, &ev->ts);
    PUT_KEY(&o, "event");
    if (ev->kind == EVENT_EGRESS_END)
        put(&o, "\"agent_egress_end\"", 18);
    else
        put(&o, "\"agent_egress\"", 14);
    PUT_KEY(&o, "id");
    put_str(&o, ev->id);
    PUT_KEY(&o, "agent");
    put_str(&o, ev->agent);
    if (ev->kind == EVENT_EGRESS_END) {
        PUT_KEY(&o, "host");
        put_str(&o, ev->host);
        PUT_KEY(&o, "tier");
        put_tier(&o, ev->tier);
        PUT_KEY(&o, "status");
        if (ev->status > 0)
            put_u64(&o, (uint64_t)ev->status);
        else
            puts_lit(&o, "null");
        PUT_KEY(&o, "bytes_up");
        put_u64(&o, ev->bytes_up);
        PUT_KEY(&o, "bytes_down");
        put_u64(&o, ev->bytes_down);
        PUT_KEY(&o, "ms");
        put_u64(&o, ev->ms);
    } else {
        PUT_KEY(&o, "method");
        put_str(&o, ev->method);
        PUT_KEY(&o, "scheme");
        put_str(&o, ev->scheme);
        PUT_KEY(&o, "host");
        put_str(&o, ev->host);
        PUT_KEY(&o, "port");
        if (ev->port != 0)
            put_u64(&o, ev->port);
        else
            puts_lit(&o, "null");
        PUT_KEY(&o, "path");
        put_str(&o, ev->path);
        PUT_KEY(&o, "tier");
        put_tier(&o, ev->tier);
        PUT_KEY(&o, "rule");
        if (ev->rule != NULL) {
            put(&o, "\"rules[", 7);
            put_u64(&o, ev->rule->index);
            put(&o, "]\"", 2);
        } else {
            puts_lit(&o, "null");
        }
        PUT_KEY(&o, "owner");
        put_str(&o, ev->owner);
        PUT_KEY(&o, "decision");
        put_str(&o, verdict_name(ev->verdict));
        PUT_KEY(&o, "reason");
        put_str(&o, ev->reason == REASON_NONE ? NULL : reason_name(ev->reason));
        PUT_KEY(&o, "ip");
        put_str(&o, ev->ip);
    }
    return out_end(&o, out, cap);
}

size_t log_jsonl_format(const struct egress_event *ev, char *out, size_t cap)
{
    return format_event(ev, out, cap, SIZE_MAX);
}

/* Formats the line of <ev> into <stack> (LINE_STACK bytes)
 * or, when it is longer, into a heap buffer of its size. Returns the line
 * (the caller frees it when it is not <stack>), its length in <*n>. A line
 * that can have no heap buffer (past LINE_MAX_LEN, or no memory) is
 * formatted cut into <stack> (CUT_FIELD_MAX): its decision is logged, not
 * dropped. NULL only when the cut line does not fit either (none does). */
static char *format_line(const struct egress_event *ev, char *stack, size_t *n)
{
    *n = format_event(ev, stack, LINE_STACK, SIZE_MAX);
    if (*n < LINE_STACK)
        return stack;
    char *line = *n < LINE_MAX_LEN ? malloc(*n + 1) : NULL;
    char *out = line != NULL ? line : stack;
    size_t cap = line != NULL ? *n + 1 : LINE_STACK;
    *n = format_event(ev, out, cap, line != NULL ? SIZE_MAX : CUT_FIELD_MAX);
    if (*n < cap)
        return out;
    free(line);
    return NULL;
}

/* ---------------------------------------------------------------- writer */

static void on_writable(evutil_socket_t fd, short what, void *arg);
static void loop_look_unlinked(struct log_jsonl *l);
static void reopen_finish(struct log_jsonl *l);
static void writer_publish(struct log_jsonl *l);
static int writer_start(struct log_jsonl *l);

static void report(struct log_jsonl *l, const char *what, int e)
{
    if (l->reported)
        return;
    l->reported = true;
    fprintf(stderr, "sluice: log %s: %s: %s\n", l->path ? l->path : "(stdout)", what, strerror(e));
}

/* The length of the complete lines in the first <n> bytes of <b> (up to
 * and with the last newline there); their number in <*lines>. */
static size_t complete_lines(struct evbuffer *b, size_t n, size_t *lines)
{
    size_t whole = 0;
    struct evbuffer_ptr pos;

    *lines = 0;
    if (n == 0)
        return 0;
    evbuffer_ptr_set(b, &pos, 0, EVBUFFER_PTR_SET);
    for (;;) {
        struct evbuffer_ptr end;
        evbuffer_ptr_set(b, &end, n, EVBUFFER_PTR_SET);
        pos = evbuffer_search_range(b, "\n", 1, &pos, &end);
        if (pos.pos < 0)
            break;
        (*lines)++;
        whole = (size_t)pos.pos + 1;
        if (evbuffer_ptr_set(b, &pos, 1, EVBUFFER_PTR_ADD) < 0)
            break;
    }
    return whole;
}

/* Drops everything pending (the reader is gone), counting the lines. */
static void drop_pending(struct log_jsonl *l)
{
    l->dropped += l->pending_lines;
    l->pending_lines = 0;
    l->line_sent = 0;
    evbuffer_drain(l->pending, evbuffer_get_length(l->pending));
}

/* On a pipe or socket, how many bytes of <pending>, from line_sent on,
 * one write takes: whole lines, at most PIPE_BUF bytes, which the kernel
 * writes atomically (all or, non-blocking, nothing: on a unix stream
 * socket, one buffer of the peer's queue, which a send that small is).
 * Another writer to the same pipe or socket (sluice's own standard error
 * with `2>&1`, or on systemd's StandardOutput=journal socket, which
 * standard error shares; an exec program's output) then cannot land inside
 * a line: a write of many lines is atomic only up to PIPE_BUF, and one
 * that stops short stops mid-line. A line longer than PIPE_BUF cannot be
 * atomic: it goes alone, to its end. */
static size_t pipe_piece(struct log_jsonl *l)
{
    size_t len = evbuffer_get_length(l->pending), lines;
    if (l->line_sent == 0) {
        size_t whole = complete_lines(l->pending, len < PIPE_BUF ? len : PIPE_BUF, &lines);
        if (whole > 0)
            return whole;
    }
    struct evbuffer_ptr from, nl;
    evbuffer_ptr_set(l->pending, &from, l->line_sent, EVBUFFER_PTR_SET);
    nl = evbuffer_search(l->pending, "\n", 1, &from);
    return nl.pos < 0 ? len - l->line_sent : (size_t)nl.pos + 1 - l->line_sent;
}

/* Elsewhere (a file, a terminal), how many bytes of <pending>,
 * from line_sent on, one write takes: all of them, or when they lie in more
 * pieces than one write takes (DRAIN_IOV), the whole lines of those pieces,
 * so that a write does not stop mid-line when it need not. A truncate of
 * the file between two writes (logrotate's copytruncate) would leave the
 * tail of that line first in the file, half a line no reader parses. A
 * line longer than the pieces goes as it is. */
static size_t whole_piece(struct log_jsonl *l)
{
    struct evbuffer_iovec v[DRAIN_IOV];
    struct evbuffer_ptr from;
    evbuffer_ptr_set(l->pending, &from, l->line_sent, EVBUFFER_PTR_SET);
    ev_ssize_t left = (ev_ssize_t)(evbuffer_get_length(l->pending) - l->line_sent);
    if (evbuffer_peek(l->pending, left, &from, v, DRAIN_IOV) <= DRAIN_IOV)
        return SIZE_MAX;
    size_t covered = l->line_sent, lines;
    for (int i = 0; i < DRAIN_IOV; i++)
        covered += v[i].iov_len;
    size_t whole = complete_lines(l->pending, covered, &lines);
    return whole > l->line_sent ? whole - l->line_sent : SIZE_MAX;
}

/* Fills <iov> with at most <max> bytes of <pending> from line_sent on;
 * returns how many pieces it used. */
static int pending_iov(struct log_jsonl *l, struct iovec *iov, size_t max)
{
    struct evbuffer_iovec v[DRAIN_IOV];
    struct evbuffer_ptr from;
    evbuffer_ptr_set(l->pending, &from, l->line_sent, EVBUFFER_PTR_SET);
    int nv = evbuffer_peek(l->pending, max == SIZE_MAX ? -1 : (ev_ssize_t)max, &from, v, DRAIN_IOV);
    size_t total = 0;

    if (nv > DRAIN_IOV)
        nv = DRAIN_IOV;
    for (int i = 0; i < nv; i++) {
        iov[i].iov_base = v[i].iov_base;
        iov[i].iov_len = v[i].iov_len < max - total ? v[i].iov_len : max - total;
        total += iov[i].iov_len;
    }
    return nv;
}

/* A line a write left half written in a regular file (a full disk took
 * part of it) whose file has been truncated since: its rest alone would
 * start the file as half a line, so the line is written whole again. */
static void restart_cut_line(struct log_jsonl *l)
{
    struct stat st;
    if (l->line_sent > 0 && l->line_sent_end > 0 && fstat(l->fd, &st) == 0 && S_ISREG(st.st_mode) &&
        st.st_size < l->line_sent_end)
        l->line_sent = 0;
}

/* writev() of <iov>'s <nv> pieces to the log's descriptor; sendmsg() on a
 * socket, which must not raise SIGPIPE nor block. */
static ssize_t write_pieces(const struct log_jsonl *l, const struct iovec *iov, int nv)
{
    if (l->is_sock) {
        struct msghdr msg = {.msg_iov = (struct iovec *)(uintptr_t)iov, .msg_iovlen = (size_t)nv};
        return sendmsg(l->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    return writev(l->fd, iov, nv);
}

/* Writes what the descriptor takes now. Returns 1 when something is still
 * pending (EAGAIN), 0 when the buffer is empty, -1 on a hard error. */
static int drain(struct log_jsonl *l)
{
    if (l->job != NULL)
        return 1; /* a reopen has the descriptor: wait for it */
    restart_cut_line(l);
    while (evbuffer_get_length(l->pending) > 0) {
        struct iovec iov[DRAIN_IOV];
        int nv = pending_iov(l, iov, l->is_pipe || l->is_sock ? pipe_piece(l) : whole_piece(l));
        ssize_t w = write_pieces(l, iov, nv);

        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 1;
            int e = errno;
            l->write_errno = e;
            report(l, "write failed", e);
            /* An anonymous pipe or a socket whose reader is gone gets no
             * other; a named FIFO does when its reader opens it again (a
             * log shipper restarted): its lines wait, as on a full disk. */
            if ((e == EPIPE && !l->is_fifo) || e == EBADF || e == ECONNRESET) {
                l->broken = true;
                drop_pending(l);
            }
            if (l->fw != NULL)
                writer_publish(l);
            return -1;
        }
        if (w == 0)
            return 1;
        /* Only a partial write needs the lines counted; what it wrote of
         * a line it did not finish stays in <pending>, as line_sent. */
        size_t upto = l->line_sent + (size_t)w, done = l->pending_lines;
        size_t whole = upto == evbuffer_get_length(l->pending)
                           ? upto
                           : complete_lines(l->pending, upto, &done);
        l->pending_lines -= done < l->pending_lines ? done : l->pending_lines;
        evbuffer_drain(l->pending, whole);
        l->line_sent = upto - whole;
        l->line_sent_end =
            l->line_sent > 0 && !l->is_pipe && !l->is_sock ? lseek(l->fd, 0, SEEK_CUR) : 0;
        l->reported = false;
        l->write_errno = 0;
        if (l->fw != NULL)
            writer_publish(l); /* the loop's metrics and cap see the progress */
    }
    if (l->fw == NULL) {
        l->over_cap = false; /* all that waited is written (a writer's: publish()) */
        l->nomem = false;
        loop_look_unlinked(l);
    }
    return 0;
}

/* True while a write is armed: wev (EAGAIN) or the retry (an error). */
static bool write_armed(const struct log_jsonl *l)
{
    return (l->wev != NULL && event_pending(l->wev, EV_WRITE | EV_TIMEOUT, NULL)) ||
           (l->retry != NULL && event_pending(l->retry, EV_TIMEOUT, NULL));
}

/* event_del() of <ev> only when it is pending or active: asking costs
 * half of what a deletion of one that is neither does (each line's
 * schedule() meets two such). */
static void disarm(struct event *ev)
{
    if (event_pending(ev, EV_READ | EV_WRITE | EV_TIMEOUT, NULL))
        event_del(ev);
}

static void schedule(struct log_jsonl *l, int rc)
{
    if (l->wev == NULL || l->job != NULL || l->fw != NULL)
        return; /* none, or a reopen running: its end writes what waits */
    disarm(l->retry);
    if (rc == 1 && l->pollable) {
        if (!event_pending(l->wev, EV_WRITE, NULL))
            event_add(l->wev, NULL);
    } else if (rc == 1) {
        struct timeval tv = timeval_of_ms(LOOP_AGAIN_MS);
        event_add(l->wev, &tv);
    } else if (rc == -1 && evbuffer_get_length(l->pending) > 0) {
        /* A transient error (ENOSPC, EIO): retry within a second. */
        struct timeval tv = {1, 0};
        event_del(l->wev);
        event_add(l->retry, &tv);
    } else {
        disarm(l->wev);
    }
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    struct log_jsonl *l = arg;
    (void)fd;
    (void)what;
    schedule(l, drain(l));
}

static void writer_wake(struct file_writer *fw);

/* The end of a loop round: the lines that could wait (the end lines; with
 * a writer thread, every line) go out together. */
static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct log_jsonl *l = arg;
    (void)fd;
    (void)what;
    l->flush_due = false;
    if (l->fw != NULL)
        writer_wake(l->fw);
    else if (!write_armed(l))
        schedule(l, drain(l));
}

/* True when epoll can watch <fd>. Regular files, and character devices
 * such as /dev/full, are refused (EPERM): their retries go through a plain
 * timer instead. The kernel is asked, with a throwaway epoll instance. */
static bool epoll_takes(int fd)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event e = {.events = EPOLLOUT};
    bool ok = ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) == 0;
    if (ep >= 0)
        close(ep);
    return ok;
}

/* What <fd> is. Asks the kernel (fstat, fstatfs, epoll): a background
 * reopen calls it on its thread. */
static struct fd_kind probe_fd(int fd)
{
    struct fd_kind k = {.pollable = epoll_takes(fd)};
    struct stat st;
    bool known = fstat(fd, &st) == 0;
    k.is_pipe = known && S_ISFIFO(st.st_mode);
    k.is_sock = known && S_ISSOCK(st.st_mode);
    k.is_reg = known && S_ISREG(st.st_mode);
    struct statfs fs;
    k.is_fifo = k.is_pipe && fstatfs(fd, &fs) == 0 && fs.f_type != PIPEFS_MAGIC;
    return k;
}

/* Takes <k> as what l->fd is. */
static void set_kind(struct log_jsonl *l, const struct fd_kind *k)
{
    l->pollable = k->pollable;
    l->is_pipe = k->is_pipe;
    l->is_sock = k->is_sock;
    l->is_fifo = k->is_fifo;
    l->is_reg = k->is_reg;
}

/* Takes <k> as what l->fd is and makes the write event for it. No system
 * call: safe on the loop whatever the descriptor is. */
static int make_event(struct log_jsonl *l, const struct fd_kind *k)
{
    if (l->wev != NULL)
        event_free(l->wev);
    l->wev = NULL;
    set_kind(l, k);
    l->wev =
        event_new(l->base, l->pollable ? l->fd : -1, l->pollable ? EV_WRITE : 0, on_writable, l);
    return l->wev != NULL ? 0 : -1;
}

/* Standard output or the original standard error, when <st> is the file
 * or socket it has open, else -1. */
static int inherited_fd(const struct stat *st)
{
    int fds[] = {STDOUT_FILENO, stderr_relay_original()};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
        struct stat have;
        if (fstat(fds[i], &have) == 0 && have.st_dev == st->st_dev && have.st_ino == st->st_ino)
            return fds[i];
    }
    return -1;
}

/* A descriptor of our own for the inherited descriptor <fd> (standard
 * output, or the standard error the relay took over), without making the
 * one we share with the parent non-blocking: a regular file never blocks,
 * so it is used as is; a pipe or terminal is reopened through /proc for a
 * private open file description; a socket is written with MSG_DONTWAIT.
 * Without /proc, and only when <may_share>, the description is shared and
 * made non-blocking (standard output's; the relay writes the original
 * standard error with blocking writes, which that would break). */
static int open_inherited(int fd, bool may_share)
{
    struct stat st;
    char self[32];

    if (fstat(fd, &st) < 0)
        return -1;
    if (S_ISREG(st.st_mode) || S_ISSOCK(st.st_mode))
        return fcntl(fd, F_DUPFD_CLOEXEC, 3);
    snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
    int own = open(self, O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
    if (own >= 0 || !may_share)
        return own;
    own = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (own >= 0) {
        int fl = fcntl(own, F_GETFL);
        if (fl < 0 || fcntl(own, F_SETFL, fl | O_NONBLOCK) < 0) {
            close(own);
            return -1;
        }
    }
    return own;
}

static bool same_file(int a, int b);

/* True when <fd> is the relay's pipe (stderr_relay.h), which descriptor 2
 * is while the relay runs: /dev/stderr, /dev/fd/2 or /proc/self/fd/2,
 * opened then. Such a path names the standard error the process was
 * started with: through the relay, the log would not see what becomes of
 * its lines (a reader gone, a file that does not take them: /healthz
 * saying "ok" while they are lost), nor wait for a file's writes. */
static bool is_relay_pipe(int fd)
{
    return stderr_relay_original() != STDERR_FILENO && same_file(fd, STDERR_FILENO);
}

/* Opens the log's path. One that names the regular file or the socket
 * standard output or error has open (/dev/stdout, /dev/fd/1, a file `>` or
 * systemd's StandardOutput= opened) is written through that descriptor's
 * open file description, as `--log -` is: a socket cannot be opened by name
 * (ENXIO; systemd's StandardOutput=journal is one), and a description of
 * its own, with an offset of its own, would write over what the other
 * writes (standard error with `2>&1`: a message landed on a log line). A
 * path that names the relay's pipe is the original standard error's
 * (is_relay_pipe()), opened as `--log -` opens standard output. */
static int open_path(const char *path, unsigned lflags)
{
    int flags = O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC;
    int fd =
        (lflags & LOG_JSONL_NO_LINKS) ? open_no_links(path, flags, 0640) : open(path, flags, 0640);
    struct stat st;
    if (fd >= 0 && is_relay_pipe(fd)) {
        close(fd);
        return open_inherited(stderr_relay_original(), false);
    }
    if (fd < 0) {
        int e = errno;
        if (e != ENXIO || stat(path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
            errno = e;
            return -1;
        }
    }
    if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)))
        return fd;
    int shared = inherited_fd(&st);
    int dup = shared >= 0 ? fcntl(shared, F_DUPFD_CLOEXEC, 3) : -1;
    if (dup < 0) {
        if (fd < 0)
            errno = ENXIO;
        return fd;
    }
    if (fd >= 0)
        close(fd);
    return dup;
}

/* A line end, when the regular file <fd> (the log's path, just opened)
 * ends inside a line: its last write was cut short (a full disk at the
 * last stop, a SIGKILL in the middle of a write), and the log's first line
 * would go on at that half line, the two one line no reader parses, the
 * new decision lost with it. The last byte is read through a descriptor of
 * its own (the log's is write-only), opened through /proc on the very
 * file; one that cannot be read so, or a line end the disk does not take,
 * is let be. Not for the file standard output or error has open: others
 * write it, a line of theirs may be under way. */
static void end_cut_line(int fd)
{
    struct stat st;
    char self[32], last;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0 || inherited_fd(&st) >= 0)
        return;
    snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
    int rd = open(self, O_RDONLY | O_CLOEXEC);
    if (rd < 0)
        return;
    if (pread(rd, &last, 1, st.st_size - 1) == 1 && last != '\n') {
        ssize_t w = write(fd, "\n", 1); /* O_APPEND: at the end */
        (void)w;
    }
    close(rd);
}

/* What a failed open (or, with <reopen>, reopen) with errno <e> says: ELOOP
 * under LOG_JSONL_NO_LINKS is a refusal, not a loop of links; ENXIO on a
 * FIFO is one that no one has open for reading (opened O_NONBLOCK, so as
 * not to wait for a reader for ever). */
static const char *open_failure(const char *path, unsigned flags, int e, bool reopen)
{
    struct stat st;
    if (e == ELOOP && (flags & LOG_JSONL_NO_LINKS))
        return reopen ? "cannot reopen (a symbolic link on its path is refused)"
                      : "cannot open log (a symbolic link on its path is refused)";
    if (e == ENXIO && path != NULL && stat(path, &st) == 0 && S_ISFIFO(st.st_mode))
        return reopen ? "cannot reopen (a FIFO no one reads: start its reader first)"
                      : "cannot open log (a FIFO no one reads: start its reader first)";
    return reopen ? "cannot reopen" : "cannot open log";
}

/* log_jsonl_open()'s refusal of a regular file whose writer thread cannot
 * be started. */
#define NO_WRITER_OPEN_TEXT                                                                        \
    "cannot open log (its writer thread cannot be started: written on the event loop, a file "     \
    "system that does not answer would stop the gateway)"

/* "PATH: WHAT: ERROR". The path is the operator's (up to PATH_MAX), and the
 * message goes into the callers' 512-byte buffers ("--alerts: " before
 * it): cut there, a long path took the reason with it. It gives way in its
 * middle instead (text_shown_fit(), control characters shown \ooo), so
 * that its start, its end and the reason stay. */
static char *errmsg(const char *path, const char *what, int e)
{
    char shown[300], buf[512];
    text_shown_fit(shown, sizeof(shown), path);
    int n = snprintf(buf, sizeof(buf), "%s: %s: %s", shown, what, strerror(e));
    return n > 0 ? strdup(buf) : NULL;
}

struct log_jsonl *log_jsonl_open(struct event_base *base, const char *path, unsigned flags,
                                 char **err)
{
    struct log_jsonl *l = calloc(1, sizeof(*l));
    bool std = strcmp(path, "-") == 0;

    *err = NULL;
    if (l == NULL)
        goto nomem;
    l->base = base;
    l->flags = flags;
    l->fd = -1;
    l->pending_max = LOG_JSONL_PENDING_MAX;
    if (!std && (l->path = strdup(path)) == NULL)
        goto nomem;
    if ((l->pending = evbuffer_new()) == NULL)
        goto nomem;
    l->fd = std ? open_inherited(STDOUT_FILENO, true) : open_path(l->path, l->flags);
    if (l->fd < 0) {
        int e = errno;
        *err = errmsg(std ? "standard output" : path, open_failure(l->path, l->flags, e, false), e);
        goto err;
    }
    if (!std)
        end_cut_line(l->fd);
    struct fd_kind kind = probe_fd(l->fd);
    if (make_event(l, &kind) < 0 || (l->fev = event_new(base, -1, 0, on_flush, l)) == NULL ||
        (l->retry = evtimer_new(base, on_writable, l)) == NULL)
        goto nomem;
    /* A regular file's writes go to a thread of their own. Without one
     * (none can be started: a pids cgroup at its limit, RLIMIT_NPROC) the
     * file is refused: written on the loop, a write the file system holds
     * would stop the whole gateway, /healthz and SIGTERM with it, with
     * nobody told. */
    int e = kind.is_reg ? writer_start(l) : 0;
    if (e != 0) {
        *err = errmsg(std ? "standard output" : path, NO_WRITER_OPEN_TEXT, e);
        goto err;
    }
    return l;
nomem:
    if (*err == NULL)
        *err = errmsg(path, "cannot open log", ENOMEM);
err:
    if (l != NULL) {
        if (l->fd >= 0)
            close(l->fd);
        if (l->pending != NULL)
            evbuffer_free(l->pending);
        if (l->wev != NULL)
            event_free(l->wev);
        if (l->fev != NULL)
            event_free(l->fev);
        if (l->retry != NULL)
            event_free(l->retry);
        free(l->path);
        free(l);
    }
    return NULL;
}

/* Appends <line>; written at once, or when <soon>, before the event loop
 * waits again (with the lines that come after it in this round). A line
 * for the writer thread always waits for the round's end (writer_append). */
static void writer_append(struct log_jsonl *l, const char *line, size_t n);

/* A line that nothing waits before (<pending> empty, no write armed, no
 * reopen running), written from where it lies: <pending> neither takes a
 * copy of it nor gives one to writev(). Returns true when it is done with:
 * written whole, or written in part with the rest (the whole line, from
 * line_sent) in <pending>; false when nothing went, for the usual path,
 * whose drain() writes again and deals with what that write meets. A line
 * alone is as whole_piece() and pipe_piece() would write it. */
static bool write_alone(struct log_jsonl *l, const char *line, size_t n)
{
    if (n > l->pending_max || l->job != NULL || evbuffer_get_length(l->pending) > 0 ||
        write_armed(l))
        return false; /* past the cap: the usual path drops it */
    /* One piece, written as drain() writes: const dropped through
     * uintptr_t, the kernel only reads it */
    struct iovec iov = {.iov_base = (void *)(uintptr_t)line, .iov_len = n};
    ssize_t w = write_pieces(l, &iov, 1);
    if (w <= 0)
        return false;
    l->reported = false;
    l->write_errno = 0;
    loop_look_unlinked(l);
    if ((size_t)w == n) {
        l->nomem = false; /* nothing waited: all is written */
        return true;
    }
    if (evbuffer_add(l->pending, line, n) < 0) {
        l->dropped++; /* its start is out: the rest has nowhere to wait */
        l->nomem = true;
        return true;
    }
    l->pending_lines++;
    l->line_sent = (size_t)w;
    l->line_sent_end = !l->is_pipe && !l->is_sock ? lseek(l->fd, 0, SEEK_CUR) : 0;
    schedule(l, 1); /* a write that stopped short: the next would meet EAGAIN */
    return true;
}

static void append_line(struct log_jsonl *l, const char *line, size_t n, bool soon)
{
    if (l->fw != NULL) {
        writer_append(l, line, n);
    } else if (l->broken) {
        l->dropped++;
    } else if (!soon && write_alone(l, line, n)) {
        return;
    } else if (evbuffer_get_length(l->pending) + n > l->pending_max) {
        l->dropped++;
        l->over_cap = l->over_cap || evbuffer_get_length(l->pending) > 0;
    } else if (evbuffer_add(l->pending, line, n) < 0) {
        l->dropped++;
        l->nomem = true;
    } else {
        l->pending_lines++;
        /* A write is already armed: keep order, let the event drain. */
        if (write_armed(l))
            return;
        if (!soon) {
            schedule(l, drain(l));
        } else if (!l->flush_due) {
            l->flush_due = true;
            event_active(l->fev, EV_TIMEOUT, 0);
        }
    }
}

/* A line dropped on the loop for want of memory (its buffer refused). */
static void count_drop(struct log_jsonl *l)
{
    if (l->fw == NULL) {
        l->dropped++;
        l->nomem = true;
        return;
    }
    pthread_mutex_lock(&l->fw->mu);
    l->fw->dropped++;
    l->fw->nomem = true;
    pthread_mutex_unlock(&l->fw->mu);
}

void log_jsonl_write_line(struct log_jsonl *l, const char *line, size_t n)
{
    append_line(l, line, n, false);
}

void log_jsonl_on_event(const struct egress_event *ev, void *arg)
{
    struct log_jsonl *l = arg;
    char stack[LINE_STACK];
    size_t n;

    if (ev->kind == EVENT_EGRESS_PROGRESS)
        return;                       /* not a decision: only the detectors and metrics count it */
    if (l->fw == NULL && l->broken) { /* the thread's to know, with one */
        l->dropped++;
        return;
    }
    char *line = format_line(ev, stack, &n);
    if (line == NULL) {
        count_drop(l);
        return;
    }
    /* The decision line goes out before the request does (SPEC); the end
     * line may join the next write of this round. */
    append_line(l, line, n, ev->kind == EVENT_EGRESS_END);
    if (line != stack)
        free(line);
}

/* log_jsonl_format_alert()'s line with each string cut after <field_max>
 * bytes of JSON. */
static size_t format_alert(const struct alert *a, char *out, size_t cap, size_t field_max)
{
    struct out o = out_on(out, cap, field_max);

    puts_lit(&o, "{\"ts\":");
    put_ts(&o, &a->ts);
    PUT_KEY(&o, "event");
    put_str(&o, "alert");
    PUT_KEY(&o, "kind");
    put_str(&o, alert_kind_name(a->kind));
    PUT_KEY(&o, "severity");
    put_str(&o, alert_severity_name(a->severity));
    PUT_KEY(&o, "agent");
    put_str(&o, a->agent);
    PUT_KEY(&o, "host");
    put_str(&o, a->host);
    PUT_KEY(&o, "tier");
    put_tier(&o, a->tier);
    PUT_KEY(&o, "id");
    put_str(&o, a->id);
    PUT_KEY(&o, "detail");
    put_str(&o, a->detail);
    PUT_KEY(&o, "count");
    put_u64(&o, a->count > 0 ? a->count : 1);
    return out_end(&o, out, cap);
}

size_t log_jsonl_format_alert(const struct alert *a, char *out, size_t cap)
{
    size_t n = format_alert(a, out, cap, SIZE_MAX);
    if (n < cap)
        return n;
    return format_alert(a, out, cap, CUT_FIELD_MAX); /* as a decision line that cannot be whole */
}

static int writer_flush(struct log_jsonl *l, const struct timespec *start, int timeout_ms);

int log_jsonl_flush(struct log_jsonl *l, int timeout_ms)
{
    struct timespec start, now;
    int rc;

    clock_gettime(CLOCK_MONOTONIC, &start);
    if (l->fw != NULL)
        return writer_flush(l, &start, timeout_ms);
    if (l->job != NULL) {
        /* A reopen running: wait for it (in the time given), then write
         * to what it leaves in place. A reopen still queued is dropped. */
        if (!quiet_thread_job_ended_within(l->job->fds[0], (unsigned)timeout_ms))
            return evbuffer_get_length(l->pending) == 0 ? 0 : -1;
        l->reopen_queued = false;
        reopen_finish(l);
        if (l->fw != NULL) /* it opened a regular file */
            return writer_flush(l, &start, timeout_ms);
    }
    for (;;) {
        rc = drain(l);
        if (rc == 0 || (rc < 0 && l->broken))
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long spent = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (spent >= timeout_ms)
            break;
        int left = timeout_ms - (int)spent;
        if (rc < 0) {
            /* A transient error: wait a little and retry. */
            poll(NULL, 0, left < 50 ? left : 50);
            continue;
        }
        if (!l->pollable) {
            poll(NULL, 0, left < LOOP_AGAIN_MS ? left : LOOP_AGAIN_MS); /* as schedule() */
            continue;
        }
        struct pollfd pfd = {.fd = l->fd, .events = POLLOUT};
        if (poll(&pfd, 1, left) < 0 && errno != EINTR)
            break;
    }
    schedule(l, rc);
    return evbuffer_get_length(l->pending) == 0 ? 0 : -1;
}

/* True when <a> and <b> are descriptors of one file. */
static bool same_file(int a, int b)
{
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* Puts <fd>, just opened for the path (<kind>: what it is; <same>: the file
 * l->fd is), in place of l->fd, which is closed unless <old_closed>, and
 * writes what waits. Returns 0, or -1 out of memory. */
static int reopen_apply(struct log_jsonl *l, int fd, const struct fd_kind *kind, bool same,
                        bool old_closed)
{
    /* A line the old file got part of goes whole to a new one (rotated);
     * the same file (a SIGHUP for a policy reload) gets the rest of it. */
    if (!same)
        l->line_sent = 0;
    if (l->wev != NULL)
        event_del(l->wev);
    event_del(l->retry);
    if (!old_closed)
        close(l->fd);
    l->fd = fd;
    l->broken = false;
    l->reported = false;
    l->write_errno = 0;
    if (make_event(l, kind) < 0) {
        fprintf(stderr, "sluice: log %s: out of memory\n", l->path);
        return -1;
    }
    /* A regular file now (the path named a FIFO before): its thread. */
    l->no_writer = kind->is_reg ? writer_start(l) : 0;
    l->unlinked = false;
    if (l->no_writer != 0) {
        /* The old descriptor is gone: the loop writes the file, told to
         * be unhealthy until a SIGHUP starts its thread (see no_writer). */
        clock_gettime(CLOCK_MONOTONIC, &l->nlink_due);
        fprintf(stderr,
                "sluice: log %s: its writer thread cannot be started (%s): the event loop "
                "writes it, and a file system that does not answer stops the gateway (send "
                "SIGHUP to try again)\n",
                l->path, strerror(l->no_writer));
    }
    if (l->fw == NULL)
        schedule(l, drain(l));
    return 0;
}

static int writer_reopen_wait(struct log_jsonl *l);
static void writer_reopen_ask(struct log_jsonl *l, const char *fail_msg);

int log_jsonl_reopen(struct log_jsonl *l)
{
    if (l->path == NULL)
        return 0;
    if (l->fw != NULL)
        return writer_reopen_wait(l);
    if (l->job != NULL) {
        l->reopen_queued = true; /* after the one running */
        return 0;
    }
    int fd = open_path(l->path, l->flags);
    if (fd < 0) {
        int e = errno;
        fprintf(stderr, "sluice: log %s: %s: %s\n", l->path,
                open_failure(l->path, l->flags, e, true), strerror(e));
        return -1;
    }
    struct fd_kind kind = probe_fd(fd);
    return reopen_apply(l, fd, &kind, same_file(l->fd, fd), false);
}

/* Frees <j>, closing what it holds; its event is already freed. */
static void job_free(struct reopen_job *j)
{
    int fds[] = {j->fds[0], j->fds[1], j->old_fd, j->new_fd};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    pthread_mutex_destroy(&j->mu);
    free(j->path);
    free(j);
}

static void *reopen_thread(void *arg)
{
    struct reopen_job *j = arg;
    j->new_fd = open_path(j->path, j->flags);
    if (j->new_fd < 0) {
        j->err = errno;
        j->why = open_failure(j->path, j->flags, j->err, true);
    } else {
        j->kind = probe_fd(j->new_fd);
        j->same = same_file(j->old_fd, j->new_fd);
        close(j->old_fd);
        j->old_fd = -1;
    }
    if (quiet_thread_job_end(&j->mu, &j->abandoned, &j->done, j->fds[1]))
        job_free(j);
    return NULL;
}

/* Ends the finished job: joins its thread, puts its result in place. */
static void reopen_finish(struct log_jsonl *l)
{
    struct reopen_job *j = l->job;
    pthread_join(j->thread, NULL);
    l->job = NULL;
    event_free(j->ev);
    if (j->new_fd < 0) {
        fprintf(stderr, "sluice: log %s: %s: %s\n", l->path, j->why, strerror(j->err));
        if (l->reopen_fail_msg != NULL)
            fputs(l->reopen_fail_msg, stderr);
        j->old_fd = -1; /* still l->fd, in use again */
        schedule(l, drain(l));
    } else {
        int fd = j->new_fd;
        j->new_fd = -1;
        if (reopen_apply(l, fd, &j->kind, j->same, true) < 0 && l->reopen_fail_msg != NULL)
            fputs(l->reopen_fail_msg, stderr);
    }
    job_free(j);
}

static void on_reopen_done(evutil_socket_t fd, short what, void *arg)
{
    struct log_jsonl *l = arg;
    (void)fd;
    (void)what;
    reopen_finish(l);
    if (l->reopen_queued) {
        l->reopen_queued = false;
        log_jsonl_reopen_soon(l, l->reopen_fail_msg);
    }
}

/* Starts a background reopen. Returns 0, or the error (an errno value)
 * when it cannot (no thread, no pipe, no memory): nothing changed then. */
static int reopen_start(struct log_jsonl *l)
{
    struct reopen_job *j = calloc(1, sizeof(*j));
    int e = ENOMEM;
    if (j == NULL)
        return e;
    j->mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    j->fds[0] = j->fds[1] = j->old_fd = j->new_fd = -1;
    j->flags = l->flags;
    if ((j->path = strdup(l->path)) == NULL)
        goto fail;
    if (pipe2(j->fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        e = errno;
        goto fail;
    }
    if ((j->ev = event_new(l->base, j->fds[0], EV_READ, on_reopen_done, l)) == NULL ||
        event_add(j->ev, NULL) < 0)
        goto fail;
    /* The descriptor becomes the job's: no write may be armed on it (the
     * thread closes it, and its number may come back for another file). */
    if (l->wev != NULL)
        event_del(l->wev);
    event_del(l->retry);
    j->old_fd = l->fd;
    e = quiet_thread_create(&j->thread, reopen_thread, j);
    if (e != 0) {
        j->old_fd = -1;
        schedule(l, drain(l));
        goto fail;
    }
    l->job = j;
    return 0;
fail:
    if (j->ev != NULL)
        event_free(j->ev);
    job_free(j);
    return e;
}

void log_jsonl_reopen_soon(struct log_jsonl *l, const char *fail_msg)
{
    if (l->path == NULL)
        return;
    if (l->fw != NULL) {
        writer_reopen_ask(l, fail_msg);
        return;
    }
    l->reopen_fail_msg = fail_msg;
    if (l->job != NULL) {
        l->reopen_queued = true;
        return;
    }
    int e = reopen_start(l);
    if (e == 0)
        return;
    /* No thread to be had (nor a pipe, nor memory): the reopen is refused,
     * the descriptor in use kept, as a reload is. Run here, an open() the
     * file system does not answer (a path on a hung NFS server) would stop
     * the gateway, /healthz and SIGTERM with it. */
    fprintf(stderr,
            "sluice: log %s: cannot reopen (its open's thread cannot be started): %s; the "
            "descriptor in use is kept\n",
            l->path, strerror(e));
    if (fail_msg != NULL)
        fputs(fail_msg, stderr);
}

/* ------------------------------------------------------------ writer thread */

/* How long log_jsonl_close() waits for the thread's last try before it
 * leaves the thread to the kernel call it waits in: log_jsonl_flush(),
 * which comes first at a stop, has had the log's time already. */
#define WRITER_CLOSE_WAIT_MS 250

/* A failed write is retried after this long (a flush waiting: 50 ms). */
#define WRITER_RETRY_MS 1000
#define WRITER_HURRY_MS 50
/* A write that would block (the path is a FIFO now, its reader behind; a
 * regular file's EAGAIN: file_writer.again). */
#define WRITER_AGAIN_MS 100

/* <t> moved <ms> later. */
static void ts_add_ms(struct timespec *t, long ms)
{
    t->tv_sec += ms / 1000;
    t->tv_nsec += (ms % 1000) * 1000000L;
    if (t->tv_nsec >= 1000000000L) {
        t->tv_sec++;
        t->tv_nsec -= 1000000000L;
    }
}

static bool passed(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

/* The gate's value when every line may take effect. */
#define GATE_ALL UINT64_MAX

/* Stores the gate (see file_writer.gate) from the pub_ fields. With <mu>,
 * or before the thread starts. */
static void gate_publish(struct file_writer *fw)
{
    uint64_t upto = fw->pub_stalled || fw->pub_broken ? GATE_ALL : fw->pub_done;
    atomic_store_explicit(&fw->gate, upto, memory_order_release);
}

/* Copies the write state to the pub_ fields: with <mu>, or before the
 * thread starts. */
static void publish(struct log_jsonl *l)
{
    struct file_writer *fw = l->fw;
    fw->pub_len = evbuffer_get_length(l->pending);
    fw->pub_sent = l->line_sent;
    fw->pub_lines = l->pending_lines;
    fw->pub_errno = l->write_errno;
    fw->pub_broken = l->broken;
    fw->pub_dropped = l->dropped;
    fw->pub_done = fw->taken - l->pending_lines;
    gate_publish(fw);
    if (fw->busy == WB_WRITE) { /* a write() returned: the file system answers */
        clock_gettime(CLOCK_MONOTONIC, &fw->busy_since);
        fw->again = false;
    }
    if (fw->pub_len == 0 && evbuffer_get_length(fw->incoming) == 0) {
        fw->over_cap = false; /* all that waited is written */
        fw->nomem = false;
    }
}

/* The thread's state for the loop to read. Called with <mu> not held. */
static void writer_publish(struct log_jsonl *l)
{
    pthread_mutex_lock(&l->fw->mu);
    publish(l);
    pthread_mutex_unlock(&l->fw->mu);
}

/* Frees what the writer holds; <l>'s own fields are the caller's. */
static void writer_free(struct file_writer *fw)
{
    pthread_mutex_destroy(&fw->mu);
    pthread_cond_destroy(&fw->progress);
    if (fw->incoming != NULL)
        evbuffer_free(fw->incoming);
    if (fw->efd >= 0)
        close(fw->efd);
    free(fw);
}

/* The thread's reopen (it owns the descriptor): as log_jsonl_reopen(), the
 * open and the old file's close without the lock. Returns 0 or -1. */
static int writer_reopen(struct log_jsonl *l, const char *fail_msg)
{
    int fd = open_path(l->path, l->flags);
    if (fd < 0) {
        int e = errno;
        fprintf(stderr, "sluice: log %s: %s: %s\n", l->path,
                open_failure(l->path, l->flags, e, true), strerror(e));
        if (fail_msg != NULL)
            fputs(fail_msg, stderr);
        return -1;
    }
    struct fd_kind kind = probe_fd(fd);
    /* A line the old file got part of goes whole to a new one (rotated);
     * the same file (a SIGHUP for a policy reload) gets the rest of it. */
    if (!same_file(l->fd, fd)) {
        l->line_sent = 0;
        end_cut_line(fd);
    }
    close(l->fd);
    l->fd = fd;
    set_kind(l, &kind);
    l->broken = false;
    l->reported = false;
    l->write_errno = 0;
    return 0;
}

/* A look at st_nlink at most this often, after a write. */
#define WRITER_NLINK_MS 1000

/* True when a look is due (<*due> passed: the next is set WRITER_NLINK_MS
 * on) and finds the log's open file without a name (st_nlink 0), but for
 * the file standard output or error has open (see writer_look_unlinked()). */
static bool name_lost(const struct log_jsonl *l, struct timespec *due)
{
    struct stat st;
    if (l->path == NULL || !passed(due))
        return false;
    *due = monotonic_after(WRITER_NLINK_MS);
    return fstat(l->fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 0 &&
           inherited_fd(&st) < 0;
}

/* Tells, once a file, that its lines go where no name reaches. */
static void tell_unlinked(const struct log_jsonl *l)
{
    fprintf(stderr,
            "sluice: log %s: its file was deleted or moved: its lines go to a file no name "
            "reaches (send SIGHUP to reopen the path)\n",
            l->path);
}

/* After a write, without <mu>: whether the open file has lost its last
 * name (deleted, or moved to another file system: logrotate's compression
 * without a SIGHUP, an rm), looked at WRITER_NLINK_MS apart at most, never
 * per line. The lines that follow go on to that file (held back, every
 * decision would wait for a SIGHUP; a reopen of our own would take a
 * rename for a deletion, and the SPEC has the operator's SIGHUP reopen):
 * told once on standard error, and by log_jsonl_error() until a reopen. A
 * rename within its file system leaves it a name (rotation: its lines
 * reach the renamed file until the SIGHUP). Not for the file standard
 * output or error has open (`--log -`, /dev/stdout under `> FILE`): a
 * SIGHUP does not reopen what the parent opened. */
static void writer_look_unlinked(struct log_jsonl *l)
{
    struct file_writer *fw = l->fw;
    if (fw->unlinked || !name_lost(l, &fw->nlink_due))
        return;
    pthread_mutex_lock(&fw->mu);
    fw->unlinked = true;
    pthread_mutex_unlock(&fw->mu);
    tell_unlinked(l);
}

/* writer_look_unlinked() for a file the loop writes (no_writer): after a
 * write of the loop's. */
static void loop_look_unlinked(struct log_jsonl *l)
{
    if (l->no_writer == 0 || l->unlinked || !name_lost(l, &l->nlink_due))
        return;
    l->unlinked = true;
    tell_unlinked(l);
}

/* Moves what the loop handed over to <pending>. With <mu>. */
static void writer_take(struct log_jsonl *l)
{
    struct file_writer *fw = l->fw;
    if (fw->incoming_lines == 0)
        return;
    if (evbuffer_get_length(l->pending) == 0) {
        /* The usual case, all written: the buffers change places. */
        struct evbuffer *empty = l->pending;
        l->pending = fw->incoming;
        fw->incoming = empty;
        l->pending_lines = fw->incoming_lines;
    } else if (evbuffer_add_buffer(l->pending, fw->incoming) == 0) {
        l->pending_lines += fw->incoming_lines;
    } else {
        fw->dropped += fw->incoming_lines;
        fw->nomem = true;
        evbuffer_drain(fw->incoming, evbuffer_get_length(fw->incoming));
    }
    /* Lines dropped here count as done: nobody waits for them for ever. */
    fw->taken += fw->incoming_lines;
    fw->pub_done = fw->taken - l->pending_lines;
    gate_publish(fw);
    fw->incoming_lines = 0;
    fw->pub_len = evbuffer_get_length(l->pending);
    fw->pub_lines = l->pending_lines;
}

/* Sleeps, with <mu>, let go meanwhile, until writer_kick() (or <until>, on
 * CLOCK_MONOTONIC, when not NULL; or a signal): the caller looks again.
 * Not a condition variable: a thread woken from pthread_cond_wait() takes
 * the mutex back marked as contended (glibc), so its next unlock makes a
 * futex call whether or not anyone waits, one more system call each
 * round. A kick after <seen> is read (the kicker reads <waiting> under
 * <mu>, then changes the word) makes the wait return at once. */
static void writer_sleep(struct file_writer *fw, const struct timespec *until)
{
    uint32_t seen = atomic_load_explicit(&fw->wake_word, memory_order_relaxed);
    fw->waiting = true;
    pthread_mutex_unlock(&fw->mu);
    syscall(SYS_futex, &fw->wake_word, FUTEX_WAIT_BITSET_PRIVATE, seen, until, NULL,
            FUTEX_BITSET_MATCH_ANY);
    pthread_mutex_lock(&fw->mu);
    fw->waiting = false;
}

/* Ends the thread's writer_sleep(), if any. With or without <mu>; what the
 * thread is woken for is set under <mu> before. */
static void writer_kick(struct file_writer *fw)
{
    atomic_fetch_add_explicit(&fw->wake_word, 1, memory_order_relaxed);
    syscall(SYS_futex, &fw->wake_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Waits, with <mu>, after a round whose drain() returned <rc>: for new
 * lines when all went (or the reader is gone for good), else until the
 * retry is due; a reopen or the stop ends any wait. */
static void writer_wait(struct log_jsonl *l, int rc)
{
    struct file_writer *fw = l->fw;
    struct timespec since, until;
    clock_gettime(CLOCK_MONOTONIC, &since);
    for (;;) {
        if (fw->stop || fw->reopen_due)
            return;
        if ((rc == 0 || l->broken) && fw->incoming_lines > 0)
            return;
        if (rc == 0 || l->broken) {
            writer_sleep(fw, NULL);
            continue;
        }
        long ms = rc == 1 ? WRITER_AGAIN_MS : fw->hurry ? WRITER_HURRY_MS : WRITER_RETRY_MS;
        until = since;
        ts_add_ms(&until, ms);
        if (passed(&until))
            return;
        writer_sleep(fw, &until);
    }
}

/* A FIFO's reader is behind (the path named one at a reopen): waits for
 * room without the lock, WRITER_AGAIN_MS at most. With <mu>. */
static void writer_poll(struct log_jsonl *l)
{
    struct file_writer *fw = l->fw;
    struct pollfd pfd = {.fd = l->fd, .events = POLLOUT};
    fw->busy = WB_POLL;
    pthread_mutex_unlock(&fw->mu);
    poll(&pfd, 1, WRITER_AGAIN_MS);
    pthread_mutex_lock(&fw->mu);
    fw->busy = WB_NONE;
}

/* Frees <l>'s loop events (on the loop: they are its). */
static void free_events(struct log_jsonl *l)
{
    struct event *none = NULL;
    struct event **evs[] = {&l->wev, &l->fev, &l->retry, l->fw != NULL ? &l->fw->done_ev : &none};
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
        if (*evs[i] != NULL)
            event_free(*evs[i]);
        *evs[i] = NULL;
    }
}

/* Frees <l> and what it holds but its writer; its events already freed
 * when the writer thread calls it. */
static void log_free(struct log_jsonl *l)
{
    free_events(l);
    evbuffer_free(l->pending);
    if (l->fd >= 0)
        close(l->fd);
    free(l->path);
    free(l);
}

/* Frees <l> (abandoned by log_jsonl_close(), which freed its events). */
static void writer_free_log(struct log_jsonl *l)
{
    struct file_writer *fw = l->fw;
    l->fw = NULL;
    log_free(l);
    writer_free(fw);
}

/* True when the gate lets line <seq> take effect: it is in the file, or
 * the log cannot be written now (a write failed or would block), when the
 * contract's "a log that cannot be written does not stop traffic" holds
 * (its lines wait in memory under the cap). With or without <mu> (see
 * file_writer.gate for the order). */
static bool gate_open(struct file_writer *fw, uint64_t seq)
{
    return atomic_load_explicit(&fw->gate, memory_order_acquire) >= seq;
}

/* Wakes the loop when what it waits for is done. With <mu>, let go for
 * the write only (so the caller looks at what may have changed after, as
 * after any wait: the stop). One wake-up a round at most, whatever number
 * of connections wait: the loop releases all those whose lines the round
 * wrote. */
static void wake_loop_if_due(struct file_writer *fw)
{
    if (fw->wake_seq == 0 || !gate_open(fw, fw->wake_seq))
        return;
    fw->wake_seq = 0;
    if (fw->wake_pending)
        return; /* the loop is to read <efd> still: it looks at every waiter then */
    fw->wake_pending = true;
    /* The write goes after the unlock: the loop, woken, takes <mu> at once
     * (on_written()), and finding it still held it would wait for it (a
     * futex call each side). <wake_pending> already says the write comes:
     * the efd, closed only once the thread is through, outlives it. */
    pthread_mutex_unlock(&fw->mu);
    uint64_t one = 1;
    ssize_t w = write(fw->efd, &one, sizeof(one)); /* an eventfd: never blocks short of 2^64 */
    (void)w;
    pthread_mutex_lock(&fw->mu);
}

static void *writer_main(void *arg)
{
    struct log_jsonl *l = arg;
    struct file_writer *fw = l->fw;
    pthread_mutex_lock(&fw->mu);
    for (;;) {
        writer_take(l);
        if (fw->reopen_due && !fw->stop) {
            uint64_t asked = fw->reopen_asked;
            const char *msg = fw->reopen_fail_msg;
            fw->reopen_due = false;
            fw->busy = WB_REOPEN;
            clock_gettime(CLOCK_MONOTONIC, &fw->busy_since);
            pthread_mutex_unlock(&fw->mu);
            int rc = writer_reopen(l, msg);
            writer_publish(l);
            pthread_mutex_lock(&fw->mu);
            fw->busy = WB_NONE;
            if (rc == 0) {
                fw->unlinked = false; /* the path's file: looked at after the next write */
                clock_gettime(CLOCK_MONOTONIC, &fw->nlink_due);
            }
            if (fw->abandoned)
                break;
            fw->reopen_done = asked;
            fw->reopen_rc = rc;
            pthread_cond_broadcast(&fw->progress);
            continue;
        }
        int rc = 0;
        if (evbuffer_get_length(l->pending) > 0 && !l->broken) {
            fw->busy = WB_WRITE;
            clock_gettime(CLOCK_MONOTONIC, &fw->busy_since);
            pthread_mutex_unlock(&fw->mu);
            rc = drain(l); /* publishes as it goes */
            writer_look_unlinked(l);
            pthread_mutex_lock(&fw->mu);
            fw->busy = WB_NONE;
            if (fw->abandoned)
                break;
        }
        /* A regular file's EAGAIN holds the decisions (file_writer.again). */
        bool file_again = rc == 1 && l->is_reg;
        if (file_again && !fw->again)
            clock_gettime(CLOCK_MONOTONIC, &fw->again_since);
        fw->again = file_again;
        fw->pub_stalled = rc != 0 && !file_again;
        gate_publish(fw);
        wake_loop_if_due(fw);
        pthread_cond_broadcast(&fw->progress);
        if (fw->stop)
            break; /* the last try is made */
        if (rc == 1 && l->pollable && !l->is_reg)
            writer_poll(l);
        else
            writer_wait(l, rc);
        if (fw->abandoned)
            break;
    }
    if (fw->abandoned) {
        pthread_mutex_unlock(&fw->mu);
        writer_free_log(l);
        return NULL;
    }
    fw->exited = true;
    pthread_cond_broadcast(&fw->progress);
    pthread_mutex_unlock(&fw->mu);
    return NULL;
}

/* The thread wrote what the loop waits for (wake_loop_if_due()). */
static void on_written(evutil_socket_t fd, short what, void *arg)
{
    struct log_jsonl *l = arg;
    uint64_t n;
    (void)what;
    ssize_t r = read(fd, &n, sizeof(n)); /* resets the count; EAGAIN when read already */
    (void)r;
    /* Before the callback looks: a write after this wakes it again. */
    pthread_mutex_lock(&l->fw->mu);
    l->fw->wake_pending = false;
    pthread_mutex_unlock(&l->fw->mu);
    if (l->fw->done_fn != NULL)
        l->fw->done_fn(l->fw->done_arg);
}

/* Hands <l>'s writes (and what is pending) to a new writer thread. Returns
 * 0, or the error (an errno value) when none can be started: the loop's
 * write events are disarmed then, <l> the loop's still. */
static int writer_start(struct log_jsonl *l)
{
    struct file_writer *fw = calloc(1, sizeof(*fw));
    pthread_condattr_t ca;
    if (fw == NULL)
        return ENOMEM;
    fw->efd = -1;
    fw->mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* its timed waits */
    pthread_cond_init(&fw->progress, &ca);
    pthread_condattr_destroy(&ca);
    fw->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    int efd_errno = errno;
    if ((fw->incoming = evbuffer_new()) == NULL || fw->efd < 0 ||
        (fw->done_ev = event_new(l->base, fw->efd, EV_READ | EV_PERSIST, on_written, l)) == NULL ||
        event_add(fw->done_ev, NULL) < 0) {
        int e = fw->efd < 0 ? efd_errno : ENOMEM;
        if (fw->done_ev != NULL)
            event_free(fw->done_ev);
        writer_free(fw);
        return e;
    }
    /* No write armed on the loop from now on. */
    if (l->wev != NULL)
        event_del(l->wev);
    event_del(l->retry);
    l->fw = fw;
    /* Lines pending already are numbered as handed and taken. */
    fw->handed = fw->taken = l->pending_lines;
    fw->done_fn = l->on_written_fn;
    fw->done_arg = l->on_written_arg;
    publish(l);
    int e = quiet_thread_create(&fw->thread, writer_main, l);
    if (e != 0) {
        l->fw = NULL;
        event_free(fw->done_ev);
        writer_free(fw);
        return e;
    }
    return 0;
}

/* Wakes the thread when it waits (on the loop: on_flush). The kick goes
 * after the unlock, so that the thread, woken, does not find <mu> still
 * held and wait for it again (a second futex call each side). Nothing is
 * lost so: a thread that does not wait when <waiting> is read looks at
 * <incoming> under <mu> before it waits (writer_wait()), and a kick that
 * comes once it has stopped waiting for another reason makes at most its
 * next sleep return at once, to look again. */
static void writer_wake(struct file_writer *fw)
{
    pthread_mutex_lock(&fw->mu);
    bool asleep = fw->waiting;
    pthread_mutex_unlock(&fw->mu);
    if (asleep)
        writer_kick(fw);
}

/* The loop's append: to <incoming>; the thread is woken at the end of this
 * loop round (on_flush), once for all the lines of the round, decision
 * lines included, which then share a write. Woken at once for each
 * decision line, it cost a futex call or two on each side a line (a wake,
 * a wait, the lock the woken thread found held), to let a decision go in
 * its own round now and then (when the thread wrote the line before the
 * loop's log_jsonl_wait()); now each decision waits for the thread's
 * wake-up of the loop (one eventfd write and read a round, for all the
 * round's decisions), which comes in the next round: a lone request on an
 * idle gateway waits the rest of its round and the write, no timer. */
static void writer_append(struct log_jsonl *l, const char *line, size_t n)
{
    struct file_writer *fw = l->fw;
    bool numbered = false;
    pthread_mutex_lock(&fw->mu);
    size_t have = evbuffer_get_length(fw->incoming) + fw->pub_len - fw->pub_sent;
    bool over = have + n > l->pending_max;
    bool lost = !fw->pub_broken && !over && evbuffer_add(fw->incoming, line, n) < 0;
    if (fw->pub_broken || over || lost) {
        fw->dropped++; /* not numbered: who waits for it waits for the line before */
        fw->over_cap = fw->over_cap || (over && have > 0);
        fw->nomem = fw->nomem || lost;
    } else {
        fw->incoming_lines++;
        numbered = true;
    }
    pthread_mutex_unlock(&fw->mu);
    if (!numbered)
        return;
    fw->handed++;
    if (!l->flush_due) {
        l->flush_due = true;
        event_active(l->fev, EV_TIMEOUT, 0);
    }
}

/* log_jsonl_flush() with a writer thread: wakes it, failed writes retried
 * every 50 ms meanwhile, and waits until nothing is left (or the reader is
 * gone), <timeout_ms> from <start> at most. */
static int writer_flush(struct log_jsonl *l, const struct timespec *start, int timeout_ms)
{
    struct file_writer *fw = l->fw;
    struct timespec until = *start;
    ts_add_ms(&until, timeout_ms);
    pthread_mutex_lock(&fw->mu);
    fw->hurry = true;
    writer_kick(fw);
    while ((fw->incoming_lines > 0 || fw->pub_len > 0 || fw->reopen_due || fw->busy == WB_REOPEN) &&
           !fw->pub_broken && !fw->exited) {
        if (pthread_cond_timedwait(&fw->progress, &fw->mu, &until) == ETIMEDOUT)
            break;
    }
    fw->hurry = false;
    bool left = fw->incoming_lines > 0 || fw->pub_len > 0;
    pthread_mutex_unlock(&fw->mu);
    return left ? -1 : 0;
}

static void writer_reopen_ask(struct log_jsonl *l, const char *fail_msg)
{
    struct file_writer *fw = l->fw;
    pthread_mutex_lock(&fw->mu);
    fw->reopen_fail_msg = fail_msg;
    fw->reopen_due = true; /* one more after a reopen running, never two */
    fw->reopen_asked++;
    writer_kick(fw);
    pthread_mutex_unlock(&fw->mu);
}

/* log_jsonl_reopen() with a writer thread: asks, and waits for the answer. */
static int writer_reopen_wait(struct log_jsonl *l)
{
    struct file_writer *fw = l->fw;
    writer_reopen_ask(l, NULL);
    pthread_mutex_lock(&fw->mu);
    uint64_t mine = fw->reopen_asked;
    while (fw->reopen_done < mine && !fw->exited)
        pthread_cond_wait(&fw->progress, &fw->mu);
    int rc = fw->reopen_done >= mine ? fw->reopen_rc : -1;
    pthread_mutex_unlock(&fw->mu);
    return rc;
}

/* Ends the writer thread for log_jsonl_close(): its last try, then join.
 * Returns true with <l> the caller's again (its writes single-threaded,
 * the loop's drops in l->dropped), or false when the thread still waits
 * in the kernel after WRITER_CLOSE_WAIT_MS: what it could not write is
 * reported here, counted in <*lost>, and the thread frees <l> once its
 * call returns. */
static bool writer_close(struct log_jsonl *l, uint64_t *lost)
{
    struct file_writer *fw = l->fw;
    struct timespec until = monotonic_after(WRITER_CLOSE_WAIT_MS);
    pthread_mutex_lock(&fw->mu);
    fw->stop = true;
    writer_kick(fw);
    while (!fw->exited && pthread_cond_timedwait(&fw->progress, &fw->mu, &until) != ETIMEDOUT)
        continue;
    if (fw->exited) {
        pthread_mutex_unlock(&fw->mu);
        pthread_join(fw->thread, NULL);
        l->dropped += fw->dropped;
        event_free(fw->done_ev);
        l->fw = NULL;
        writer_free(fw);
        return true;
    }
    /* Stuck in the kernel: the log becomes the thread's. */
    const char *name = l->path ? l->path : "(stdout)";
    if (fw->busy == WB_REOPEN)
        fprintf(stderr, "sluice: log %s: the reopen is still waiting for open()\n", name);
    else
        fprintf(stderr,
                "sluice: log %s: a write is still waiting for the file system (a hung NFS "
                "server, a frozen file system?)\n",
                name);
    size_t lines = fw->incoming_lines + fw->pub_lines;
    size_t bytes = evbuffer_get_length(fw->incoming) + fw->pub_len - fw->pub_sent;
    if (lines > 0)
        fprintf(stderr, "sluice: log %s: %zu line(s) (%zu bytes) not written at exit\n", name,
                lines, bytes);
    uint64_t dropped = fw->dropped + fw->pub_dropped + lines;
    if (dropped > 0)
        fprintf(stderr, "sluice: log %s: %" PRIu64 " line(s) dropped in all\n", name, dropped);
    *lost = dropped;
    free_events(l);
    fw->wake_seq = 0; /* the loop's event is gone */
    fw->abandoned = true;
    pthread_detach(fw->thread);
    pthread_mutex_unlock(&fw->mu);
    return false;
}

uint64_t log_jsonl_seq(const struct log_jsonl *l)
{
    return l->fw != NULL ? l->fw->handed : 0; /* the loop's own count: no lock */
}

/* A test's seam (test_log_jsonl.c defines it before it includes this
 * file): where the loop, having found line <seq> not written yet, is about
 * to take <mu> to ask for its wake-up; the writer may end its round here. */
#ifndef LOG_JSONL_WAIT_SEAM
#define LOG_JSONL_WAIT_SEAM(fw, seq) ((void)0)
#endif

bool log_jsonl_wait(struct log_jsonl *l, uint64_t seq)
{
    struct file_writer *fw = l->fw;
    if (fw == NULL || seq == 0 || gate_open(fw, seq))
        return true; /* the common case: no lock */
    LOG_JSONL_WAIT_SEAM(fw, seq);
    pthread_mutex_lock(&fw->mu);
    /* Again: the thread may have written the line and ended its round,
     * wake_seq unseen, since the look above (see file_writer.gate). */
    bool open = gate_open(fw, seq);
    if (!open && (fw->wake_seq == 0 || seq < fw->wake_seq))
        fw->wake_seq = seq;
    pthread_mutex_unlock(&fw->mu);
    return open;
}

void log_jsonl_on_written(struct log_jsonl *l, void (*fn)(void *arg), void *arg)
{
    l->on_written_fn = fn;
    l->on_written_arg = arg;
    if (l->fw != NULL) {
        l->fw->done_fn = fn;
        l->fw->done_arg = arg;
    }
}

uint64_t log_jsonl_dropped(const struct log_jsonl *l)
{
    if (l->fw == NULL)
        return l->dropped;
    pthread_mutex_lock(&l->fw->mu);
    uint64_t n = l->fw->dropped + l->fw->pub_dropped;
    pthread_mutex_unlock(&l->fw->mu);
    return n;
}

size_t log_jsonl_pending_bytes(const struct log_jsonl *l)
{
    if (l->fw == NULL)
        return evbuffer_get_length(l->pending) - l->line_sent;
    pthread_mutex_lock(&l->fw->mu);
    size_t n = evbuffer_get_length(l->fw->incoming) + l->fw->pub_len - l->fw->pub_sent;
    pthread_mutex_unlock(&l->fw->mu);
    return n;
}

static const char *error_text(bool broken, int e)
{
    if (broken || e == EPIPE)
        return "its reader is gone";
    return e != 0 ? strerror(e) : NULL;
}

_Static_assert(LOG_JSONL_STUCK_MS == 5000, "stuck_text() says 5 s");

/* What a writer whose write or reopen has waited LOG_JSONL_STUCK_MS in the
 * kernel is doing, or whose writes have failed with EAGAIN for as long
 * (file_writer.again), or NULL. With <mu>. */
static const char *stuck_text(const struct file_writer *fw)
{
    struct timespec until = fw->again_since;
    ts_add_ms(&until, LOG_JSONL_STUCK_MS);
    if (fw->again && passed(&until))
        return "a write has not gone through for 5 s or more: its file system answers EAGAIN "
               "(it would block)";
    if (fw->busy != WB_WRITE && fw->busy != WB_REOPEN)
        return NULL;
    until = fw->busy_since;
    ts_add_ms(&until, LOG_JSONL_STUCK_MS);
    if (!passed(&until))
        return NULL;
    return fw->busy == WB_WRITE ? "a write has not returned for 5 s or more (a hung or frozen "
                                  "file system?)"
                                : "its reopen has not returned for 5 s or more (a hung or frozen "
                                  "file system?)";
}

/* The open file has no name left (file_writer.unlinked). */
#define UNLINKED_TEXT "its file was deleted or moved: send SIGHUP to reopen"

/* Lines past the cap are dropped (the cap reached while lines waited). */
#define OVER_CAP_TEXT                                                                              \
    "lines are dropped: the memory they wait in is full (its reader or disk does not keep up)"

/* Lines dropped for want of memory (struct log_jsonl's nomem). */
#define NOMEM_TEXT "lines are dropped: there is no memory for them"

/* A regular file the loop writes (struct log_jsonl's no_writer). */
#define NO_WRITER_TEXT                                                                             \
    "its writer thread cannot be started: the event loop writes its file, and a file system "      \
    "that does not answer would stop the gateway (send SIGHUP to try again)"

const char *log_jsonl_error(const struct log_jsonl *l)
{
    const char *why;
    if (l->fw == NULL) {
        why = error_text(l->broken, l->write_errno);
        if (why == NULL && l->unlinked)
            why = UNLINKED_TEXT;
        if (why == NULL && l->no_writer != 0)
            why = NO_WRITER_TEXT;
        if (why == NULL && l->over_cap)
            why = OVER_CAP_TEXT;
        return why == NULL && l->nomem ? NOMEM_TEXT : why;
    }
    pthread_mutex_lock(&l->fw->mu);
    why = stuck_text(l->fw);
    if (why == NULL)
        why = error_text(l->fw->pub_broken, l->fw->pub_errno);
    if (why == NULL && l->fw->unlinked)
        why = UNLINKED_TEXT;
    if (why == NULL && l->fw->over_cap)
        why = OVER_CAP_TEXT;
    if (why == NULL && l->fw->nomem)
        why = NOMEM_TEXT;
    pthread_mutex_unlock(&l->fw->mu);
    return why;
}

void log_jsonl_set_pending_max(struct log_jsonl *l, size_t max)
{
    l->pending_max = max > 0 ? max : LOG_JSONL_PENDING_MAX;
}

static bool writer_close(struct log_jsonl *l, uint64_t *lost);

uint64_t log_jsonl_close(struct log_jsonl *l)
{
    if (l == NULL)
        return 0;
    bool tried = false; /* the writer thread made the last try */
    if (l->job != NULL) {
        struct reopen_job *j = l->job;
        pthread_mutex_lock(&j->mu);
        bool done = j->done;
        if (!done) {
            /* Its open still waits: the thread frees the job when it
             * returns, the descriptor with it; the lines are not written.
             * Once the lock is let go the job may be gone: what is done
             * with it is done before. */
            event_free(j->ev);
            j->ev = NULL;
            pthread_detach(j->thread);
            j->abandoned = true;
        }
        pthread_mutex_unlock(&j->mu);
        if (done) {
            reopen_finish(l);
        } else {
            fprintf(stderr, "sluice: log %s: the reopen is still waiting for open()\n", l->path);
            l->job = NULL;
            l->fd = -1;
        }
    }
    if (l->fw != NULL) { /* after the job: its reopen may have started the thread */
        uint64_t lost = 0;
        if (!writer_close(l, &lost))
            return lost; /* left to the thread, which frees it */
        tried = true;
    }
    if (!tried && !l->broken && l->fd >= 0)
        drain(l);
    if (evbuffer_get_length(l->pending) > 0) {
        size_t bytes = log_jsonl_pending_bytes(l);
        size_t lines = l->pending_lines;
        fprintf(stderr, "sluice: log %s: %zu line(s) (%zu bytes) not written at exit\n",
                l->path ? l->path : "(stdout)", lines, bytes);
        l->dropped += lines;
        l->pending_lines = 0;
    }
    uint64_t lost = l->dropped;
    if (lost > 0)
        fprintf(stderr, "sluice: log %s: %" PRIu64 " line(s) dropped in all\n",
                l->path ? l->path : "(stdout)", lost);
    log_free(l);
    return lost;
}
