/* drain: is a client still taking the bytes it is sent?
 *
 * libevent's write timeout fires when a socket did not become writable for
 * so long, not when its peer took nothing: Linux reports a TCP socket
 * writable only once about a third of its send queue (autotuned, up to
 * megabytes) drained, a unix stream socket once three quarters of it did.
 * With the timeout at idle_timeout, a client reading a large response
 * slowly but steadily was cut in the middle of it.
 *
 * So the client's write timeout (conn_set_client_timeouts) is a step of
 * idle_timeout / DRAIN_STEPS. At each step conn.c reads the socket's send
 * queue (SIOCOUTQ: bytes not yet acknowledged by a TCP peer, or not yet
 * read by a unix one) and drain_keeps() judges: the client made progress
 * when the queue shrank since the last step, or when the bufferevent wrote
 * into the socket since (drain_on_write(), a callback on the output
 * buffer, tells without a system call). No progress adds a step to the time the
 * client is stalled; progress resets it; a client stalled for idle_timeout
 * is closed: between idle_timeout and idle_timeout plus one step after the
 * last byte it took, never before (within idle_timeout exactly when nothing
 * was in flight: an empty queue at the first step counts against it). The
 * normal path costs nothing more: the queue is read only when a step
 * expires. tunnel.c judges a CONNECT tunnel's idleness the same way, from
 * the send queues of both its sockets, and forward.c an upstream taking a
 * request body, from its own: its timeouts are steps until it took all of
 * the request, and only then does it have idle_timeout to answer (once
 * the head of an early answer came, the answer's bytes are progress too:
 * drain_note_progress()).
 *
 * drain_keeps() is pure: no sockets, no clock (tests/unit/test_drain.c);
 * drain_send_queue() is the one reading of a socket its callers make, and
 * drain_on_write() the one way they learn of writes. */
#ifndef SLUICE_GATE_DRAIN_H
#define SLUICE_GATE_DRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/util.h>

struct evbuffer;
struct evbuffer_cb_info;

/* Steps per idle_timeout: the bound on closing is idle_timeout * (1 + 1/DRAIN_STEPS). */
#define DRAIN_STEPS 4

struct drain {
    uint64_t stalled_ms; /* time without progress, in whole steps */
    int64_t queue;       /* the send queue at the last step; -1: not known */
    bool moved;          /* progress the queue does not show, since the last step:
                          * bytes went into the socket, or drain_note_progress() */
};

/* A new wait (the write timeout was set again): nothing known yet. */
void drain_reset(struct drain *d);
/* The write timeout for <idle_ms>: idle_ms / DRAIN_STEPS rounded up, at least 1 ms. */
uint64_t drain_step_ms(uint64_t idle_ms);
/* A write timeout of <step_ms> expired with <queue> bytes in the socket's
 * send queue (-1 when it could not be read: then only a write counts as
 * progress, as before). Updates <d>; returns true to keep the client
 * (progress, or stalled for less than <idle_ms>), false to close it. */
bool drain_keeps(struct drain *d, int64_t queue, uint64_t step_ms, uint64_t idle_ms);
/* The bytes in <fd>'s send queue (SIOCOUTQ; TCP: not yet acknowledged,
 * unix stream: not yet read by the peer); -1 when they cannot be read. */
int64_t drain_send_queue(evutil_socket_t fd);
/* The bytes in <fd>'s send queue that were never sent (SIOCOUTQNSD; TCP:
 * not yet handed to the network, so its peer cannot have them); -1 when
 * they cannot be read. */
int64_t drain_unsent(evutil_socket_t fd);
/* The bytes of <fd>'s send queue (a TCP socket, reset or not) that never
 * left the host: the queue less what was sent at least once and not yet
 * acknowledged (TCP_INFO's bytes_sent, bytes_retrans and bytes_acked).
 * Unlike SIOCOUTQNSD, it does not count again what a retransmission timeout
 * took back to send anew; -1 when they cannot be read. <connected>: <fd>
 * was opened by connect() (see drain_in_flight()). */
int64_t drain_never_left(evutil_socket_t fd, bool connected);
/* The data bytes sent at least once and not acknowledged, from TCP_INFO's
 * bytes_sent, bytes_retrans and bytes_acked. bytes_acked counts the
 * sequence number of the SYN it acknowledged on a socket that connect()ed
 * (<connected>: 1001 after 1000 bytes taken, measured with ss -ti; an
 * accepted socket's shows 1000), which is no data byte. */
uint64_t drain_in_flight(uint64_t sent, uint64_t retrans, uint64_t acked, bool connected);
/* An evbuffer callback for a bufferevent's output, <drain> the struct
 * drain of its socket: notes that bytes went from <buf> into the socket. */
void drain_on_write(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *drain);
/* Progress <d>'s peer made another way than taking bytes (an upstream
 * sending its answer): the next drain_keeps() keeps it. */
void drain_note_progress(struct drain *d);

#endif
