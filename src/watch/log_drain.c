/* log_drain: the decision log's pending buffer written to its descriptor
 * (see log_jsonl_int.h).
 *
 * Owns how a write is cut: whole lines, so that neither a reopen after
 * rotation nor a copytruncate leaves half a line; on a pipe or socket
 * pieces of PIPE_BUF bytes at most, which the kernel writes atomically.
 * Called by the loop (log_jsonl.c) or, for a regular file, by the writer
 * thread (log_writer.c), whichever owns the log's write state. */
#include "watch/log_jsonl_int.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>

/* At most this many buffer pieces per write. */
#define DRAIN_IOV 16

static void report(struct log_jsonl *l, const char *what, int e)
{
    if (l->reported)
        return;
    l->reported = true;
    fprintf(stderr, "sluice: log %s: %s: %s\n", l->shown, what, strerror(e));
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
ssize_t log_write_pieces(const struct log_jsonl *l, const struct iovec *iov, int nv)
{
    if (l->is_sock) {
        struct msghdr msg = {.msg_iov = (struct iovec *)(uintptr_t)iov, .msg_iovlen = (size_t)nv};
        return sendmsg(l->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    return writev(l->fd, iov, nv);
}

/* Writes what the descriptor takes now. Returns 1 when something is still
 * pending (EAGAIN), 0 when the buffer is empty, -1 on a hard error. */
int log_drain(struct log_jsonl *l)
{
    if (l->job != NULL)
        return 1; /* a reopen has the descriptor: wait for it */
    restart_cut_line(l);
    while (evbuffer_get_length(l->pending) > 0) {
        struct iovec iov[DRAIN_IOV];
        int nv = pending_iov(l, iov, l->is_pipe || l->is_sock ? pipe_piece(l) : whole_piece(l));
        ssize_t w = log_write_pieces(l, iov, nv);

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
                log_writer_publish(l);
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
            log_writer_publish(l); /* the loop's metrics and cap see the progress */
    }
    if (l->fw == NULL) {
        l->over_cap = false; /* all that waited is written (a writer's: publish()) */
        l->nomem = false;
        log_loop_look_unlinked(l);
    }
    return 0;
}
