#include "gate/tunnel.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "gate/drain.h"
#include "gate/stream.h"
#include "shape/quota.h"
#include "util/socket_quiet.h"
#include "util/units.h"
#include "util/zalloc.h"

/* The copy path's read size (and the most its stash holds). 256 KiB: a
 * streaming direction then costs one recv() and one send() per 256 KiB,
 * and what it sends leaves in skbs of a few large fragments, cheap for a
 * receiver on this host to take (see struct dir). Against 64 KiB, a
 * quarter of the calls, each with a fixed cost in the TCP stack that the
 * copy does not have: about 5% less of the gateway's CPU for a bulk
 * download on loopback (bench/HISTORY.md, 2026-12-06). */
#define TUNNEL_BUF (256 * 1024)
/* The budget of bytes held across all tunnels (<held>): 16 KiB for each
 * connection the gateway may serve (--max-conns: 64 MiB at its default of
 * 4096), at least 1 MiB. While a read of TUNNEL_BUF could take the held
 * bytes past it, the copy path reads at most TUNNEL_TIGHT_READ, so that a
 * direction stalled then holds at most that much: all held at most the
 * budget and 16 KiB a direction. Before, every stalled direction held what
 * its last 256 KiB read left (about 180 KiB measured: 2 GiB at 4096
 * connections that never read). A direction toward a reader that keeps up
 * holds nothing, so the budget costs bulk nothing until a great many
 * stalled tunnels fill it; it then reads in 16 KiB steps (more calls for
 * the same bytes) until they drain or close. */
#define TUNNEL_HELD_PER_CONN (16 * 1024)
#define TUNNEL_HELD_FLOOR    (1024 * 1024)
#define TUNNEL_TIGHT_READ    (16 * 1024)
/* Rounds per wakeup, so one busy tunnel cannot starve the loop: at most
 * 1 MiB of full reads per direction before the loop looks at the others. */
#define TUNNEL_ROUNDS 4
/* A copied read of at least this much means src is streaming (--splice:
 * the direction moves to a pipe; see struct dir). */
#define TUNNEL_STREAMING_READ 65536
/* A direction that has carried this much in splice mode is bulk: its pipe
 * is grown to TUNNEL_PIPE_BIG (F_SETPIPE_SZ; kept as it is when refused),
 * so one splice moves up to that much. */
#define TUNNEL_GROW_AFTER (256u * 1024)
#define TUNNEL_PIPE_BIG   (1024 * 1024)
/* How often a tunnel whose directions are done looks whether a sink's peer
 * has taken the last bytes (over()): no event tells. */
#define TUNNEL_LINGER_MS 20

/* Where the copy path reads to: one buffer for every tunnel, since its
 * bytes are sent on before the next read. Tunnels run on the gateway's one
 * loop thread only (gate/gateway.c). Not _Thread_local: glibc zeroes a
 * thread's static TLS when the thread starts, so each thread of the
 * process (the log writers, the reload, the standard error relay...) held
 * a copy of its own resident, used or not. */
static char scratch[TUNNEL_BUF];

/* Bytes the copy path holds, across all tunnels: the sum of the stashes'
 * sizes (the /metrics gauge sluice_tunnel_held_bytes). Loop thread only,
 * as scratch. */
static size_t held;
static size_t held_budget = 4096 * (size_t)TUNNEL_HELD_PER_CONN; /* tunnel_budget_for_conns() */

/* A direction copies: read into <scratch>, send at once, and keep only what
 * dst did not take (in <stash>, allocated for as long as it holds bytes).
 * That is the default because it is the faster path end to end where the
 * receiver shares the host (an agent, a local upstream): splice(2) passes
 * on the page fragments the bytes arrived in, at most a page each, and the
 * receiving socket pays for every one of them (curl spent about 1.5x the
 * CPU on the same 256 MiB download, and the tunnel ran at 0.67x direct
 * against 0.86x copying; README, Benchmarks). With splicing on (--splice),
 * a read of TUNNEL_STREAMING_READ or more means src is streaming: once
 * nothing is pending, the direction makes its pipe and moves on with
 * splice(2), zero copy for the gateway, while short flights (a TLS
 * handshake, an API call) never make a pipe. Where splice is refused or no
 * pipe can be made it stays on the copy path. */
struct dir {
    struct tunnel *t;
    evutil_socket_t src, dst;
    int pipe[2];       /* splice mode; -1 on the copy path */
    size_t cap;        /* splice mode: the pipe's capacity */
    bool grown;        /* splice mode: the pipe was grown (or that was tried) */
    bool streaming;    /* copy path: a read of TUNNEL_STREAMING_READ or more; splice next */
    bool no_pipe;      /* copy path for good (splicing off, or splice refused) */
    char *stash;       /* copy path: bytes dst did not take (allocated to their size, at
                        * most TUNNEL_BUF); NULL when none */
    size_t off;        /* copy path: first unsent byte in stash */
    size_t pending;    /* bytes read from src and not yet written to dst */
    bool eof;          /* src has ended (or failed) */
    bool src_ended;    /* src's peer ended its side (EV_CLOSED: epoll's EPOLLRDHUP), its end
                        * perhaps not read yet: a short read does not mean src is dry */
    bool done;         /* eof seen, everything delivered, dst shut down for writing (not
                        * when the tunnel failed: its close is a reset, end());
                        * or dst failed (sink) */
    bool sink;         /* dst failed: what src sends is read and dropped */
    bool fin_queued;   /* dst was shut down for writing (its FIN is queued or sent) */
    uint64_t bytes;    /* delivered to dst */
    struct event *rd;  /* src readable (persistent), in the tunnel's ev_mem; NULL until set */
    struct event *wr;  /* dst writable (persistent), in the tunnel's ev_mem; NULL until set */
    bool rd_on, wr_on; /* rd, wr are added: changed only when the wish changes */
};

struct tunnel {
    evutil_socket_t fd[2]; /* client, upstream */
    struct dir d[2];       /* d[0]: client -> upstream; d[1]: upstream -> client */
    /* Idleness is judged in steps of idle_ms / DRAIN_STEPS (drain.h): a
     * tunnel whose bytes wait in a socket toward a peer that takes them
     * slowly moves nothing itself for a long while (Linux reports the
     * socket writable only once a good part of its send queue drained), yet
     * is not idle while those queues shrink. */
    struct event *idle;   /* the next step; armed at a step, not at each move (in ev_mem,
                           * NULL until set) */
    bool moved;           /* bytes moved since the last step, the last at <moved_ms> */
    bool late_read;       /* a step was put off 1 ms since the last move (input_unread()) */
    uint64_t moved_ms;    /* CLOCK_MONOTONIC */
    struct event *linger; /* over() polled: made when first needed, or NULL */
    struct timeval step_tv;
    uint64_t idle_ms, step_ms;
    struct drain drain;
    bool ended;
    bool failed;        /* a socket failed (a reset): the tunnel ends as TUNNEL_ERROR */
    bool reset_counted; /* reset_on_close() took what its reset drops off the counts */
    tunnel_cb cb;
    void *arg;
    struct quota_flow *flow; /* meters d[0] (shape/quota.h); borrowed, or NULL */

    void (*on_up)(void *arg); /* bytes went upstream (tunnel_set_progress) */
    void *up_arg;
    /* The memory of the TUNNEL_EVENTS events a tunnel always has (idle,
     * then each direction's rd and wr), event_assign()ed: one allocation a
     * tunnel, not six (event_new() and event_free() cost a malloc() and a
     * free() each, about 230 instructions, and the whole stays within
     * glibc's per-thread cache of chunks). tunnel_free() deletes them. */
    max_align_t ev_mem[];
};

enum { TUNNEL_EVENTS = 5 };

static void forget_unsent(struct dir *d);

/* Makes tunnel_free()'s close of both sockets a reset (not on unix). That
 * reset drops what each TCP socket still holds: what it never sent is taken
 * off what the direction toward it counts as delivered (forget_unsent()),
 * so that the counts of a tunnel the gateway cut (idle, --grace, a policy
 * that now denies it) are what each side got, not what was handed to a
 * socket toward a side that stopped reading (its whole send buffer, up to
 * megabytes). What it sent but was not acknowledged yet stays counted: the
 * peer may well have it (a delayed ACK), and an upload is not to be
 * counted short. A sink's queue was counted off when its dst failed. Once. */
static void reset_on_close(struct tunnel *t)
{
    if (!t->reset_counted)
        for (int i = 0; i < 2; i++)
            if (!t->d[i].sink)
                forget_unsent(&t->d[i]);
    t->reset_counted = true;
    for (int i = 0; i < 2; i++)
        stream_reset_on_close(t->fd[i]);
}

/* A tunnel that ended on a failure, or that the gateway cut while a side
 * still held it open (idle here; tunnel_free() before its end: --grace
 * out, a policy that now denies it), closes both sockets with a reset: a
 * side is told the stream broke after the last byte it got, as connected
 * directly it would be of a failure, rather than taking the close for its
 * end (a body framed by the close). Only a tunnel whose two sides ended
 * theirs closes cleanly. */
static void end(struct tunnel *t, enum tunnel_end how)
{
    if (t->ended)
        return;
    t->ended = true;
    if (how != TUNNEL_DONE || t->failed)
        reset_on_close(t);
    tunnel_stop(t);
    t->cb(t, how, t->arg);
}

static void delivered(struct dir *d, size_t n)
{
    d->bytes += (uint64_t)n;
    if (d == &d->t->d[0] && d->t->on_up != NULL)
        d->t->on_up(d->t->up_arg);
}

/* Frees the stash of <d> (if any) and takes its size off <held>: that size
 * is off + pending, the stash being allocated to what waited. */
static void drop_stash(struct dir *d)
{
    if (d->stash == NULL)
        return;
    held -= d->off + d->pending;
    free(d->stash);
    d->stash = NULL;
    d->off = 0;
}

/* Closes the direction's pipe, which must be empty: it copies until its
 * next streaming read makes another. */
static void close_pipe(struct dir *d)
{
    close(d->pipe[0]);
    close(d->pipe[1]);
    d->pipe[0] = d->pipe[1] = -1;
}

/* Leaves splice mode for good (splice refused on this pair of sockets). */
static void drop_pipe(struct dir *d)
{
    close_pipe(d);
    d->no_pipe = true;
}

/* True when the next byte to read from <fd> is TCP urgent data. */
static bool at_urgent_mark(int fd)
{
    int at = 0;
    return ioctl(fd, SIOCATMARK, &at) == 0 && at == 1;
}

/* Makes the direction's pipe; on failure (no descriptors) it stays on the
 * copy path and tries again after its next streaming read. */
static void make_pipe(struct dir *d)
{
    d->streaming = false;
    if (pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
        d->pipe[0] = d->pipe[1] = -1;
        return;
    }
    int cap = fcntl(d->pipe[1], F_GETPIPE_SZ);
    d->cap = cap > 0 ? (size_t)cap : 4096;
}

/* Writes what is pending to dst, once. Returns 1 when bytes went out, 0
 * when dst is full, -1 on error. */
static int drain(struct dir *d)
{
    for (;;) {
        ssize_t n;
        if (d->pipe[0] >= 0)
            n = splice(d->pipe[0], NULL, d->dst, NULL, d->pending,
                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        else
            n = send(d->dst, d->stash + d->off, d->pending, MSG_NOSIGNAL);
        if (n > 0) {
            d->pending -= (size_t)n;
            if (d->stash != NULL) {
                d->off += (size_t)n;
                if (d->pending == 0) /* no memory held while nothing waits */
                    drop_stash(d);
            }
            delivered(d, (size_t)n);
            return 1;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return -1;
    }
}

/* Copy path: sends the <n> bytes just read into scratch and keeps in the
 * stash what dst does not take. Returns -1 when dst failed, -2 when out of
 * memory (bytes read from src are lost: the stream cannot go on). */
static int pass_on(struct dir *d, size_t n, bool *dst_full)
{
    size_t sent = 0;
    while (sent < n) {
        ssize_t w = send(d->dst, scratch + sent, n - sent, MSG_NOSIGNAL);
        if (w > 0) {
            sent += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            *dst_full = true;
            break;
        }
        if (sent > 0)
            delivered(d, sent); /* the counts are what dst got, to the end */
        return -1;
    }
    if (sent < n) { /* before delivered(): its callback must not find scratch in use */
        d->stash = malloc(n - sent); /* only what waits: dst took the rest */
        if (d->stash == NULL)
            return -2;
        memcpy(d->stash, scratch + sent, n - sent);
        d->off = 0;
        d->pending = n - sent;
        held += n - sent;
    }
    if (sent > 0)
        delivered(d, sent);
    return 0;
}

static void on_io(evutil_socket_t fd, short what, void *arg);
static bool tcp_closed(evutil_socket_t fd);

/* True when the source of <d> is a TCP socket that a reset closed: closed
 * (tcp_closed()) with the reset's error not read yet (POLLERR; a read
 * would meet it after the bytes before it), or read already by a write of
 * the other direction that met it (a dst failed: d->t->failed). Closed
 * otherwise, it was ended both ways, its peer's FIN after the gateway's
 * own, and the bytes it holds unread are whole. */
static bool src_reset(const struct dir *d)
{
    struct pollfd p = {.fd = d->src, .events = 0};
    return tcp_closed(d->src) &&
           (d->t->failed || (poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0));
}

/* The bandwidth bucket's timer of the client's direction <arg>: the client
 * is not read while it waits (a debt, the first bytes', may make that
 * seconds or minutes), so its reset is looked for at each (at least once
 * a second): the tunnel ends then, with a reset on both sides, as the read
 * meeting it would, rather than go on sending what the client sent before
 * it at the bucket's pace, to the last byte. */
static void on_refill(void *arg)
{
    struct dir *d = arg;
    if (src_reset(d)) {
        end(d->t, TUNNEL_ERROR);
        return;
    }
    on_io(-1, 0, arg);
}

/* Sets <*n> to the bytes d may read now: <max>, or fewer when its
 * bandwidth is metered; 0 when the bucket is empty (the refill timer is
 * armed: src is not read). Returns -1 when no timer could be armed (out of
 * memory): the tunnel ends rather than move its bytes unmetered. */
static int metered(struct dir *d, size_t max, size_t *n)
{
    struct quota_flow *f = d->t->flow;
    *n = max;
    if (f == NULL || d != &d->t->d[0] || !quota_flow_metered(f))
        return 0; /* no bucket: not worth the clock */
    return quota_flow_allow_or_pause(f, max, quota_now(), on_refill, d, n);
}

void tunnel_set_flow(struct tunnel *t, struct quota_flow *flow)
{
    t->flow = flow;
}

void tunnel_budget_for_conns(unsigned conns)
{
    size_t b = (size_t)conns * TUNNEL_HELD_PER_CONN;
    held_budget = b > TUNNEL_HELD_FLOOR ? b : TUNNEL_HELD_FLOOR;
}

/* How much the copy path reads at once: TUNNEL_BUF while what it could
 * leave held stays within the budget, else TUNNEL_TIGHT_READ. */
static size_t copy_read_size(void)
{
    return held <= held_budget && held_budget - held >= TUNNEL_BUF ? TUNNEL_BUF : TUNNEL_TIGHT_READ;
}

/* Room for more bytes from src: what the pipe has left, or a read's worth
 * (copy_read_size()) once nothing waits. */
static size_t room(const struct dir *d)
{
    if (d->pipe[1] >= 0)
        return d->pending < d->cap ? d->cap - d->pending : 0;
    return d->pending == 0 ? copy_read_size() : 0; /* the stash is not added to */
}

static void watch(struct dir *d, bool rd, bool wr);

/* True when <fd> is a TCP socket that is closed: it got a reset (its send
 * queue, SIOCOUTQ, then still counts what its peer never acknowledged), or
 * it was ended both ways, its peer's FIN after the gateway's, everything
 * sent acknowledged (src_reset() tells the two apart). */
static bool tcp_closed(evutil_socket_t fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_state == TCP_CLOSE;
}

/* What send() took toward a dst that then failed but never left the host
 * (the send queue of a reset socket, less what was sent once at least and
 * not acknowledged) did not reach its peer: taken off what the direction
 * counts as delivered. What left it stays counted, acknowledged or not: a
 * peer may read bytes its stack never acknowledges and then reset, and
 * counting only acknowledged ones would let it keep up to a congestion
 * window of each upload out of bytes_up (the peer's kernel may also have
 * refused them after its reset: the count errs toward what may have left). */
static void forget_never_left(struct dir *d)
{
    if (!tcp_closed(d->dst))
        return;
    /* the upstream's socket is the one the gateway connect()ed */
    int64_t never = drain_never_left(d->dst, d->dst == d->t->fd[1]);
    if (never > 0)
        d->bytes -= (uint64_t)never < d->bytes ? (uint64_t)never : d->bytes;
}

/* Takes off what <d> counts as delivered what its dst, a TCP socket, never
 * sent (SIOCOUTQNSD), which a reset drops. Not on a unix socket: its queue
 * is its peer's receive buffer, read to the end whatever the close. A FIN
 * queued by the shutdown of dst is a sequence number of its own, counted
 * by SIOCOUTQNSD (write_seq - snd_nxt) until it is sent, after the bytes:
 * with any of them unsent it is unsent too, and is no byte (counted, the
 * direction came out one byte short of what its peer got). */
static void forget_unsent(struct dir *d)
{
    int proto = 0;
    socklen_t len = sizeof(proto);
    if (getsockopt(d->dst, SOL_SOCKET, SO_PROTOCOL, &proto, &len) != 0 || proto != IPPROTO_TCP)
        return;
    int64_t unsent = drain_unsent(d->dst);
    if (unsent > 0 && d->fin_queued)
        unsent--;
    if (unsent > 0)
        d->bytes -= (uint64_t)unsent < d->bytes ? (uint64_t)unsent : d->bytes;
}

/* dst failed (a reset: its peer is gone): d is over and what it held is
 * never sent (its stash, still counted in <held>, is freed with the
 * tunnel, which ends soon). The other direction goes on: it reads from
 * that socket what came before the failure (then the failure, or the end:
 * fill()) and delivers it, so a reset the gateway meets first while
 * writing takes none of those bytes with it. What src sends meanwhile is
 * read and dropped (sink()), and the tunnel ends only once src's peer has
 * those bytes (over()): closing a socket with unread bytes is a reset,
 * which would drop what its peer has not acknowledged yet. */
static void dst_failed(struct dir *d)
{
    forget_never_left(d);
    d->done = true;
    d->sink = true;
    d->t->failed = true;
    watch(d, true, false);
}

/* Reads and drops what src sends (d->sink), until its end or a failure. */
static void sink(struct dir *d)
{
    for (int round = 0; round < TUNNEL_ROUNDS; round++) {
        ssize_t n = recv(d->src, scratch, TUNNEL_BUF, 0);
        if (n > 0 || (n < 0 && errno == EINTR))
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        watch(d, false, false); /* nothing more will come */
        return;
    }
}

enum fill_result {
    FILL_ERROR = -1,
    FILL_WAIT,
    FILL_DATA,
    FILL_DATA_SHORT,
    FILL_PAUSED,
    FILL_DST_FAILED,
};

/* Reads from src once: into the pipe in splice mode; on the copy path into
 * scratch, sent on at once (setting <dst_full> when dst took less).
 * FILL_DATA (bytes moved, or EOF or a failure of src seen: the pending
 * bytes are still delivered), FILL_DATA_SHORT (fewer bytes than
 * there was room for: src is most likely drained, and a level-triggered
 * event says so if not, so no read is tried again only to meet EAGAIN),
 * FILL_WAIT (nothing to read, or the pipe is full), FILL_PAUSED (the
 * bandwidth bucket is empty: its timer is armed), FILL_DST_FAILED (copying,
 * dst failed), FILL_ERROR (out of memory, for a buffer or the bucket's
 * timer). */
static enum fill_result fill(struct dir *d, bool *dst_full)
{
    if (d->pipe[1] < 0 && d->streaming && d->pending == 0 && !d->no_pipe)
        make_pipe(d);
    for (;;) {
        ssize_t n;
        size_t max;
        if (metered(d, room(d), &max) < 0)
            return FILL_ERROR;
        if (max == 0)
            return FILL_PAUSED;
        if (d->pipe[1] >= 0)
            n = splice(d->src, NULL, d->pipe[1], NULL, max, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        else
            n = recv(d->src, scratch, max, 0);
        if (n > 0) {
            if (d->t->flow != NULL && d == &d->t->d[0] && quota_flow_metered(d->t->flow))
                quota_flow_take(d->t->flow, (size_t)n, quota_now());
            if (d->pipe[1] >= 0) {
                d->pending += (size_t)n;
            } else {
                if ((size_t)n >= TUNNEL_STREAMING_READ)
                    d->streaming = true;
                int rc = pass_on(d, (size_t)n, dst_full);
                if (rc < 0)
                    return rc == -1 ? FILL_DST_FAILED : FILL_ERROR;
            }
            return (size_t)n < max ? FILL_DATA_SHORT : FILL_DATA;
        }
        if (n < 0 && errno == EINTR)
            continue;
        /* splice() stops at TCP urgent data (tcp_read_sock), where recv()
         * goes on: it then reads nothing, EAGAIN while the socket still
         * reads as readable, or 0 as at the end once the peer ended its
         * side. The pipe, once empty, gives way to a copy that takes the
         * urgent byte (inline: see tunnel.h) and what follows it. */
        if ((n == 0 || errno == EAGAIN || errno == EWOULDBLOCK) && d->pipe[1] >= 0 &&
            at_urgent_mark(d->src)) {
            if (d->pending > 0)
                return FILL_WAIT; /* the pipe drains first; src is then readable */
            close_pipe(d);
            continue;
        }
        if (n == 0) {
            d->eof = true;
            return FILL_DATA;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return FILL_WAIT;
        if (errno == EINVAL && d->pipe[1] >= 0 && d->pending == 0) {
            drop_pipe(d);
            continue;
        }
        /* src failed: Linux reports a reset only once every byte that
         * came before it was read, and a spliced direction may read it
         * with some of those still in its pipe. They are delivered first;
         * the other direction, which writes to src, is over (a sink). */
        d->eof = true;
        d->t->failed = true;
        struct dir *o = &d->t->d[d == &d->t->d[0] ? 1 : 0];
        if (!o->done)
            dst_failed(o);
        return FILL_DATA;
    }
}

static void grow_pipe(struct dir *d)
{
    d->grown = true;
    int n = fcntl(d->pipe[1], F_SETPIPE_SZ, TUNNEL_PIPE_BIG);
    if (n > 0 && (size_t)n > d->cap)
        d->cap = (size_t)n;
}

/* Adds or deletes <ev> when <want> differs from <*on>. */
static void want_event(struct event *ev, bool *on, bool want)
{
    if (want == *on)
        return;
    if (want)
        event_add(ev, NULL);
    else
        event_del(ev);
    *on = want;
}

/* Sets which of src readable and dst writable <d> waits for; the events
 * are persistent, so a wakeup that leaves the wish as it was costs no
 * epoll_ctl(). */
static void watch(struct dir *d, bool rd, bool wr)
{
    want_event(d->rd, &d->rd_on, rd);
    want_event(d->wr, &d->wr_on, wr);
}

/* Moves what it can in one direction: reads and writes until both sides
 * would block, or for at most TUNNEL_ROUNDS rounds. Returns -1 on error. */
static int pump(struct dir *d)
{
    bool progress = false, paused = false, src_dry = false, dst_full = false;
    if (d->sink) {
        sink(d);
        return 0;
    }
    if (!d->grown && d->pipe[1] >= 0 && d->bytes >= TUNNEL_GROW_AFTER)
        grow_pipe(d);
    for (int round = 0; round < TUNNEL_ROUNDS && !d->done; round++) {
        bool moved = false;
        if (!d->eof && !paused && !src_dry && room(d) > 0) {
            enum fill_result fr = fill(d, &dst_full);
            if (fr == FILL_ERROR)
                return -1;
            if (fr == FILL_DST_FAILED) {
                dst_failed(d);
                break;
            }
            if (fr == FILL_DATA || fr == FILL_DATA_SHORT)
                moved = true;
            /* After a short read src most likely has nothing more, but
             * once its peer ended its side it has that end to read: read
             * now, not at a wakeup of its own (a client's close_notify
             * and FIN, a server's last response and FIN, come together). */
            if (fr == FILL_WAIT || (fr == FILL_DATA_SHORT && !d->src_ended))
                src_dry = true;
            else if (fr == FILL_PAUSED)
                paused = true;
        }
        if (d->pending > 0 && !dst_full) {
            int rc = drain(d);
            if (rc < 0) {
                dst_failed(d);
                break;
            }
            if (rc > 0)
                moved = true;
            else
                dst_full = true;
        }
        if (d->eof && d->pending == 0) {
            /* Not when the tunnel failed: the reset of the close ends it
             * (end()). Nor when the other direction is done: the tunnel is
             * then over, and the close of its end (tunnel_free(), from the
             * end callback) sends dst the same FIN, src having been read to
             * its end: one system call less for every tunnel. */
            if (!d->t->failed && !d->t->d[d == &d->t->d[0] ? 1 : 0].done)
                d->fin_queued = shutdown(d->dst, SHUT_WR) == 0;
            d->done = true;
            break;
        }
        if (!moved)
            break;
        progress = true;
        if (src_dry && d->pending == 0)
            break;
    }
    /* A full pipe also reads as "nothing to read": while bytes are
     * pending, wait for dst only (draining makes room), so a readable src
     * with a full pipe never spins the loop. */
    if (!d->sink)
        watch(d, !d->done && d->pending == 0 && !d->eof && !paused, !d->done && d->pending > 0);
    if (progress) { /* told at the next step: no timer re-armed at every move */
        d->t->moved = true;
        d->t->moved_ms = monotonic_ms();
    }
    return 0;
}

/* True when the tunnel has nothing left to do: both directions are done,
 * and, when it failed, neither socket still holds bytes delivered to it
 * (its peer acknowledged them, or the socket failed too): the close is
 * then a reset (end()), which drops what its peer has not acknowledged,
 * also when that peer ended its side (a direction that ended before the
 * failure was no sink, yet its destination may still hold its last
 * bytes). */
static bool over(const struct tunnel *t)
{
    if (!t->d[0].done || !t->d[1].done)
        return false;
    for (int i = 0; i < 2 && t->failed; i++) {
        if (drain_send_queue(t->fd[i]) > 0 && !tcp_closed(t->fd[i]))
            return false;
    }
    return true;
}

static void on_linger(evutil_socket_t fd, short what, void *arg);

/* Ends <t> when it is over(); when only a sink's peer has yet to take the
 * last bytes, looks again in TUNNEL_LINGER_MS (else at the next idle step:
 * on_idle()). */
static void end_if_over(struct tunnel *t)
{
    if (over(t)) {
        end(t, t->failed ? TUNNEL_ERROR : TUNNEL_DONE);
        return;
    }
    if (!t->d[0].done || !t->d[1].done)
        return;
    if (t->linger == NULL)
        t->linger = evtimer_new(event_get_base(t->idle), on_linger, t);
    if (t->linger != NULL) {
        struct timeval tv = timeval_of_ms(TUNNEL_LINGER_MS);
        evtimer_add(t->linger, &tv);
    }
}

static void on_linger(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    end_if_over(arg);
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
    struct dir *d = arg;
    struct tunnel *t = d->t;
    if ((what & EV_CLOSED) && fd == d->src)
        d->src_ended = true;
    if (pump(d) < 0) {
        end(t, TUNNEL_ERROR);
        return;
    }
    end_if_over(t);
}

/* True when what the client sent waits for the bandwidth bucket: its
 * refill timer is armed and the client's socket is readable (bytes not
 * read, or the end of its side). */
static bool upload_held(const struct tunnel *t)
{
    struct pollfd p = {.fd = t->fd[0], .events = POLLIN | POLLRDHUP};
    return quota_flow_paused(t->flow) && poll(&p, 1, 0) == 1 &&
           (p.revents & (POLLIN | POLLRDHUP | POLLHUP)) != 0;
}

/* True when a socket the tunnel reads holds what it has not read: it came
 * while the gateway was stopped (SIGSTOP, a paused VM, a long stall of its
 * loop), and libevent ran the idle step before the read. The step that
 * would end the tunnel is put off 1 ms for that read, once since the last
 * move. Before, a tunnel whose client or server spoke in time was closed
 * as idle. */
static bool input_unread(const struct tunnel *t)
{
    for (int i = 0; i < 2; i++) {
        const struct dir *d = &t->d[i];
        if (d->rd_on && !d->eof && !socket_is_quiet(d->src))
            return true;
    }
    return false;
}

/* A step passed. When bytes moved during it, the wait starts anew from
 * the last move, the next step a step after it (pump() only notes a
 * move, with the time: re-arming the timer at every wakeup that moved
 * bytes cost an event_add() each); else the tunnel ends once neither
 * socket's send queue has shrunk for idle_timeout. A tunnel whose upload
 * waits for its bandwidth bucket is not idle: the gateway holds the
 * agent's bytes, not the agent. One that waited only for a sink's peer to
 * take the last bytes (over()) ends once it has. */
static void on_idle(evutil_socket_t fd, short what, void *arg)
{
    struct tunnel *t = arg;
    (void)fd;
    (void)what;
    if (over(t)) { /* a sink's peer took the last bytes without a word */
        end(t, TUNNEL_ERROR);
        return;
    }
    if (t->moved || upload_held(t)) {
        struct timeval tv = t->step_tv;
        uint64_t now = monotonic_ms();
        /* The wait starts at the last move, as if the timer had been
         * re-armed then: the next step is a step after it (1 ms later at
         * most, so that the whole milliseconds never make it early). */
        if (t->moved && now >= t->moved_ms && now - t->moved_ms < t->step_ms)
            tv = timeval_of_ms(t->step_ms - (now - t->moved_ms) + 1);
        t->moved = false;
        t->late_read = false;
        drain_reset(&t->drain);
        event_add(t->idle, &tv);
        return;
    }
    int64_t a = drain_send_queue(t->fd[0]), b = drain_send_queue(t->fd[1]);
    if (drain_keeps(&t->drain, a < 0 || b < 0 ? -1 : a + b, t->step_ms, t->idle_ms)) {
        event_add(t->idle, &t->step_tv);
        return;
    }
    if (!t->late_read && input_unread(t)) {
        static const struct timeval one_ms = {0, 1000};
        t->late_read = true;
        event_add(t->idle, &one_ms);
        return;
    }
    end(t, TUNNEL_IDLE);
}

struct tunnel *tunnel_new(struct event_base *base, evutil_socket_t client_fd,
                          evutil_socket_t upstream_fd, uint64_t idle_ms, bool splice, tunnel_cb cb,
                          void *arg)
{
    size_t ev_size = event_get_struct_event_size();
    struct tunnel *t = zalloc(sizeof(*t) + TUNNEL_EVENTS * ev_size);
    if (t == NULL) {
        close(client_fd);
        close(upstream_fd);
        return NULL;
    }
    t->fd[0] = client_fd;
    t->fd[1] = upstream_fd;
    t->cb = cb;
    t->arg = arg;
    t->idle_ms = idle_ms;
    t->step_ms = drain_step_ms(idle_ms);
    t->step_tv = timeval_of_ms(t->step_ms);
    drain_reset(&t->drain);
    for (int i = 0; i < 2; i++) {
        struct dir *d = &t->d[i];
        d->t = t;
        d->src = t->fd[i];
        d->dst = t->fd[1 - i];
        d->pipe[0] = d->pipe[1] = -1;
    }
    /* each pointer is set once its event is assigned: tunnel_free()
     * deletes only those */
    char *mem = (char *)t->ev_mem;
    if (evtimer_assign((struct event *)(void *)mem, base, on_idle, t) < 0)
        goto err;
    t->idle = (struct event *)(void *)mem;
    for (int i = 0; i < 2; i++) {
        struct dir *d = &t->d[i];
        struct event *rd = (struct event *)(void *)(mem + (1 + 2 * i) * ev_size);
        struct event *wr = (struct event *)(void *)(mem + (2 + 2 * i) * ev_size);
        d->no_pipe = !splice;
        /* EV_CLOSED as the bufferevents that read these sockets before
         * have it (stream_own_reads()): the same epoll events, so taking
         * the sockets over costs no epoll_ctl(). */
        if (event_assign(rd, base, d->src, EV_READ | EV_CLOSED | EV_PERSIST, on_io, d) < 0)
            goto err;
        d->rd = rd;
        if (event_assign(wr, base, d->dst, EV_WRITE | EV_PERSIST, on_io, d) < 0)
            goto err;
        d->wr = wr;
        watch(d, true, false);
    }
    event_add(t->idle, &t->step_tv);
    return t;
err:
    tunnel_free(t);
    return NULL;
}

void tunnel_free(struct tunnel *t)
{
    if (t == NULL)
        return;
    tunnel_stop(t); /* the events in ev_mem leave the loop before it is freed */
    for (int i = 0; i < 2; i++) {
        struct dir *d = &t->d[i];
        if (d->pipe[0] >= 0)
            close(d->pipe[0]);
        if (d->pipe[1] >= 0)
            close(d->pipe[1]);
        drop_stash(d);
    }
    if (t->linger != NULL)
        event_free(t->linger);
    if (!t->ended) /* cut while open */
        reset_on_close(t);
    close(t->fd[0]);
    close(t->fd[1]);
    free(t);
}

void tunnel_settle(struct tunnel *t)
{
    if (!t->ended) /* cut while open: tunnel_free() resets it */
        reset_on_close(t);
}

void tunnel_stop(struct tunnel *t)
{
    /* rd_on and wr_on say which of the persistent events are added (an
     * event neither added nor made active by hand, which a tunnel never
     * does, is not active either): those alone are deleted, here and at
     * the second stop, tunnel_free()'s */
    for (int i = 0; i < 2; i++) {
        struct dir *d = &t->d[i];
        if (d->rd != NULL && d->wr != NULL)
            watch(d, false, false);
    }
    if (t->idle != NULL)
        event_del(t->idle);
    if (t->linger != NULL)
        event_del(t->linger);
}

void tunnel_set_progress(struct tunnel *t, void (*cb)(void *arg), void *arg)
{
    t->on_up = cb;
    t->up_arg = arg;
}

uint64_t tunnel_bytes_up(const struct tunnel *t)
{
    return t->d[0].bytes;
}

uint64_t tunnel_bytes_down(const struct tunnel *t)
{
    return t->d[1].bytes;
}

size_t tunnel_held_bytes(void)
{
    return held;
}
