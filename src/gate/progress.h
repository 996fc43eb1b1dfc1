/* progress: EVENT_EGRESS_PROGRESS, upload bytes published as they flow.
 *
 * The places that send bytes upstream (forward.c's request bodies,
 * connect.c's peeked bytes, the tunnel's splice loop through its progress
 * callback) call progress_note(); it publishes the bytes sent since the
 * last progress event when PROGRESS_BYTES have gathered or PROGRESS_MS
 * have passed, so a long upload is seen while it runs without flooding
 * the bus; bytes it holds back are published by a timer PROGRESS_MS after
 * the last event, whether or not more bytes come. conn_end_exchange()
 * calls progress_flush() just before the end event: the deltas of an
 * exchange add up to its bytes_up, except when forward.c dropped bytes
 * handed to an upstream that did not take them (drop_untaken(): a stopped
 * upstream, an early answer): bytes_up then says what the upstream
 * received, and the deltas, already published (a counter cannot take them
 * back), what was handed on. Counting at the hand-over keeps upload alerts
 * prompt; an attempted upload counts. */
#ifndef SLUICE_GATE_PROGRESS_H
#define SLUICE_GATE_PROGRESS_H

struct conn;

/* <c>'s exchange sent bytes upstream (ex->bytes_up, plus the tunnel's). */
void progress_note(struct conn *c);
/* The tunnel callback: <arg> is the struct conn. */
void progress_on_tunnel(void *arg);
/* Publishes what is left (ex->bytes_up is final: the tunnel's bytes are in it). */
void progress_flush(struct conn *c);

#endif
