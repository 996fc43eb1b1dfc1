/* held_body: whether a request body whose client ended its side can still
 * be whole, told from the bytes of it that are left: those the gateway
 * holds (the client's input buffer) and those the client's socket still
 * has queued, neither consumed. A body paused for its bandwidth bucket
 * (conn.c, upload_cut_short()) is cut at once when they cannot make it
 * whole, rather than sent at the bucket's pace only for its end to be
 * read short. A Content-Length body is short when they are fewer than the
 * bytes it has left; a chunked one when a copy of its framer, run over
 * them, finds neither its last-chunk nor a framing error (which the
 * forwarder answers as it reads it: 400 bad_request). */
#ifndef SLUICE_GATE_HELD_BODY_H
#define SLUICE_GATE_HELD_BODY_H

#include <stddef.h>

struct evbuffer;
struct exchange;

/* The most of a socket's queue looked at (peeked, held transiently): past
 * it, a chunked body's end cannot be told. A socket the gateway does not
 * read queues its default receive buffer (128 KiB for TCP on Linux). */
#define HELD_PEEK_MAX (256u * 1024)

enum held_body {
    HELD_BODY_ENDS,    /* the end is among the bytes left (or a framing error is) */
    HELD_BODY_SHORT,   /* they can never make the body whole */
    HELD_BODY_UNKNOWN, /* cannot be told (a socket's queue over HELD_PEEK_MAX, no memory) */
};

/* The bytes left of the request body of <ex> (BODY_LENGTH or
 * BODY_CHUNKED, not done yet): those in <in> (its client's input buffer)
 * and those queued on its client's socket <fd>, to be read no more (its
 * client ended its side). */
enum held_body held_body_check(const struct exchange *ex, struct evbuffer *in, int fd);

#endif
