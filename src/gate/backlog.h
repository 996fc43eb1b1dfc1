/* backlog: the bytes waiting in the gateway's memory for the other side of
 * a plain exchange to take them, summed over every connection, and the
 * budget they share: toward clients (answers, refusals and response bodies
 * in each client's output buffer) and toward upstreams (request heads and
 * bodies in each upstream's output buffer), two sums under one budget.
 *
 * A connection reads its upstream's answer until FLOW_HIGH (256 KiB) waits
 * for its client, then one more read of up to 64 KiB: clients that ask a
 * fast origin for a large answer and never read held about 330 KiB each,
 * 1.3 GiB for a gateway of 4096 connections. So, as tunnels' held bytes
 * (tunnel.h), they share a budget of 16 KiB per connection --max-conns
 * allows (at least 1 MiB): past it, a connection stops reading at
 * BACKLOG_TIGHT bytes waiting and reads that much at a time, so stalled
 * clients hold at most the budget plus 32 KiB each.
 *
 * Uploads are the same attack the other way: a connection reads its
 * client's body until FLOW_HIGH waits for its upstream, then one more read,
 * and an origin that takes nothing made each hold about 260 KiB (48 held
 * 12.9 MB; 1 GiB and more at 4096 connections). They count in the same
 * budget (memory is memory, whichever way it waits): past it, a body is
 * read BACKLOG_TIGHT at a time and waits at most that much more.
 *
 * Each sum is kept by a callback on each output buffer tracked
 * (backlog_track()), so it follows every write libevent makes to the
 * socket without a scan. Event-loop thread only. */
#ifndef SLUICE_GATE_BACKLOG_H
#define SLUICE_GATE_BACKLOG_H

#include <stddef.h>

#include <event2/buffer.h>

#define BACKLOG_PER_CONN  (16u * 1024)        /* budget per connection --max-conns allows */
#define BACKLOG_FLOOR     (1024u * 1024)      /* the budget, at least */
#define BACKLOG_TIGHT     (16u * 1024)        /* a connection's mark past the budget */
#define BACKLOG_TIGHT_LOW (BACKLOG_TIGHT / 2) /* and where its reads resume */

/* Sets the budget for a gateway of at most <conns> connections. */
void backlog_budget_for_conns(unsigned conns);
/* Which way the bytes of a tracked buffer go. */
enum backlog_way {
    BACKLOG_TO_CLIENT,   /* a client's output buffer */
    BACKLOG_TO_UPSTREAM, /* an upstream's output buffer (a plain exchange's) */
};

/* Counts the bytes of <out> (an output buffer going <way>) in that way's
 * sum from now on. Returns the callback entry to hand to backlog_untrack(),
 * or NULL when out of memory. */
struct evbuffer_cb_entry *backlog_track(struct evbuffer *out, enum backlog_way way);
/* Takes what <out> still holds off the sum of <way> (as it was tracked)
 * and removes entry <e> (from backlog_track(); NULL: nothing to do), before
 * <out> is freed or no longer counted. */
void backlog_untrack(struct evbuffer *out, struct evbuffer_cb_entry *e, enum backlog_way way);
/* The bytes waiting to go <way>, summed. */
size_t backlog_held(enum backlog_way way);
/* How many bytes may wait for one side before the other is no longer
 * read, and how much one read takes at most: <normal> while both sums
 * together are within the budget, BACKLOG_TIGHT past it (when <normal> is
 * larger). */
size_t backlog_mark(size_t normal);
/* How few bytes must wait for one side before the other is read again:
 * <normal> within the budget, BACKLOG_TIGHT_LOW past it. Always below
 * backlog_mark()'s, so that a connection read again moves what it reads
 * (at or over that mark it would stop at once, and each read libevent
 * makes would pile up in the upstream's input). */
size_t backlog_low_mark(size_t normal);

#endif
