/* tunnel: the opaque byte pipe of an allowed CONNECT.
 *
 * Moves bytes between two connected sockets. Each direction copies: a read
 * of at most 256 KiB into a buffer shared by all tunnels, sent on at once;
 * what the destination does not take waits in a buffer of the direction's
 * own, and its source is not read meanwhile. With <splice>, a direction
 * whose read brings 64 KiB or more is streaming and moves on with splice(2)
 * through a pipe of its own (zero copy for the gateway, dearer for a
 * receiver on the same host: tunnel.c), so short flights such as a TLS
 * handshake make no pipe either way; it stays on the copy path where
 * splice is refused (EINVAL: a socket type that cannot splice). Counts
 * bytes both ways. Half-close: when one side ends, what it sent is
 * delivered and the other side gets shutdown(SHUT_WR); the tunnel is done
 * when both directions have ended, on an error (a side that resets: once
 * what came from it is delivered and taken, what the other side sends
 * meanwhile being dropped), or after <idle_ms> without a byte either way.
 * A tunnel that ended on an error closes both sockets with a reset (no
 * shutdown(SHUT_WR) before it), so the other side sees the failure after
 * the last byte rather than the end of the stream; so does one that ended
 * idle, or that tunnel_free() cuts before its end: only a tunnel whose two
 * sides ended theirs closes cleanly.
 *
 * Owns: both sockets (closed by tunnel_free), its pipes, the bytes a
 * destination did not take yet, and its events. */
#ifndef SLUICE_GATE_TUNNEL_H
#define SLUICE_GATE_TUNNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/util.h>

struct event_base;
struct tunnel;
struct quota_flow;

enum tunnel_end { TUNNEL_DONE, TUNNEL_IDLE, TUNNEL_ERROR };

/* Called once when the tunnel ends; the callee frees it with tunnel_free(),
 * whose close ends the side that ended last (no shutdown(SHUT_WR) before
 * it): a callee that keeps the tunnel holds that end back. */
typedef void (*tunnel_cb)(struct tunnel *t, enum tunnel_end how, void *arg);

/* Starts a tunnel between <client_fd> and <upstream_fd> (takes ownership of
 * both, also on failure); <splice>: streaming directions move to splice(2).
 * Each socket's read event waits for EV_CLOSED too (EPOLLRDHUP): after a
 * short read from a side that ended its own, the tunnel reads on to that
 * end at once rather than at a wakeup of its own.
 * Both sockets have SO_OOBINLINE, so that TCP urgent data stays in the
 * stream and is carried as a plain byte (the gateway's listeners and
 * upstream connects set it on every socket they make). Returns NULL when
 * out of memory or descriptors. */
struct tunnel *tunnel_new(struct event_base *base, evutil_socket_t client_fd,
                          evutil_socket_t upstream_fd, uint64_t idle_ms, bool splice, tunnel_cb cb,
                          void *arg);
/* Closes both sockets (with a reset unless <t> ended as TUNNEL_DONE) and
 * frees <t>. Accepts NULL. */
void tunnel_free(struct tunnel *t);
/* Stops <t> moving bytes either way, for good: it reads, writes and times
 * nothing more, and its callback is not called; tunnel_free() then closes
 * it (with a reset, as a tunnel cut while open). */
void tunnel_stop(struct tunnel *t);
/* Meters the client -> upstream direction of <t> through <flow> (borrowed:
 * it must outlive the tunnel's use of it; NULL: unmetered). */
void tunnel_set_flow(struct tunnel *t, struct quota_flow *flow);
/* Calls <cb>(<arg>) each time bytes were delivered upstream (client ->
 * upstream), for progress events (gate/progress.h); NULL: none. <cb> must
 * not free the tunnel. */
void tunnel_set_progress(struct tunnel *t, void (*cb)(void *arg), void *arg);
/* Before the counts of <t> are read for the last time: a tunnel still open,
 * which tunnel_free() will cut with a reset, has what that reset drops taken
 * off them now (see tunnel_bytes_up()), as a tunnel that ended on a reset
 * (idle, an error) had when it ended. */
void tunnel_settle(struct tunnel *t);
/* The bytes each direction sent its peer: taken by its destination's
 * socket, less what never left that socket when it failed (its queue less
 * what went out unacknowledged: a peer may read bytes it never
 * acknowledges), or had not even sent when the tunnel's close is a reset
 * (a reset drops it: the peer never received it; a unix socket's queue is
 * its peer's, and counts). */
uint64_t tunnel_bytes_up(const struct tunnel *t);   /* client -> upstream */
uint64_t tunnel_bytes_down(const struct tunnel *t); /* upstream -> client */
/* The bytes all tunnels hold that their destinations did not take yet
 * (the copy path's buffers of their own; not what splice pipes hold). */
size_t tunnel_held_bytes(void);
/* Sets the budget of those bytes for a gateway of at most <conns>
 * connections (--max-conns): 16 KiB each, at least 1 MiB; past it the copy
 * path reads 16 KiB at a time, not 256 KiB (tunnel.c). */
void tunnel_budget_for_conns(unsigned conns);

#endif
