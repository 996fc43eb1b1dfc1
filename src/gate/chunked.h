/* chunked: an incremental framer for chunked message bodies (RFC 9112 7.1).
 *
 * Mostly not a decoder: the gateway forwards chunked bytes unchanged and
 * only needs to know where the body ends and that its framing is valid, so
 * that no second message can hide inside a body (request smuggling); only
 * an HTTP/1.0 client gets the data alone (chunked_feed_data). Strict: hex
 * sizes of at most 16 digits and below 2^63, CRLF line ends only (a bare LF
 * is an error), CRLF after each chunk's data, chunk-size lines (extensions
 * included) of at most CHUNKED_MAX_LINE bytes, extensions held to their
 * grammar (chunk_ext.h), a trailer section of at most
 * CHUNKED_MAX_TRAILERS bytes made of "name: value" lines. Works for any split
 * of the input across calls. A request body's framer is stricter about
 * sizes (chunked_init_request()). The struct is plain data: no allocation,
 * no cleanup. */
#ifndef SLUICE_GATE_CHUNKED_H
#define SLUICE_GATE_CHUNKED_H

#include <stddef.h>
#include <stdint.h>

#define CHUNKED_MAX_LINE     1024
#define CHUNKED_MAX_TRAILERS 8192
#define CHUNKED_MAX_DIGITS   16
/* A request body's chunk sizes: what clients send, and what an origin that
 * keeps 32 bits of a size, or reads 8 digits of it, frames as the gateway
 * does (a size it read otherwise would end the body elsewhere and run what
 * follows as a request of its own). */
#define CHUNKED_REQUEST_MAX_DIGITS 8
#define CHUNKED_REQUEST_MAX_SIZE   0x7fffffffu

enum chunked_result {
    CHUNKED_MORE = 0,   /* every byte consumed; the body goes on */
    CHUNKED_DONE = 1,   /* the body ended inside this piece */
    CHUNKED_ERROR = -1, /* invalid framing; see <why> */
};

struct chunked {
    int state;          /* internal */
    uint64_t remaining; /* data bytes left in the current chunk, or the size being read */
    unsigned ndigits;   /* hex digits read in the current size */
    size_t line_len;    /* bytes of the current size line */
    size_t trailer_len; /* bytes of the trailer section so far */
    uint64_t total;     /* bytes of the body framed so far */
    unsigned char ext;  /* where in a size line's extensions (chunk_ext.h) */
    const char *why;    /* static phrase after CHUNKED_ERROR, else NULL */

    /* Once the last-chunk line ended, the bytes of the body before the
     * trailer section (they end with "0\r\n"), else 0: a forwarder can drop
     * the trailer section and end the body with "\r\n". */
    uint64_t trailer_at;

    /* The hex digits of a size (leading zeros included), its largest value. */
    unsigned max_digits;
    uint64_t max_size;
};

/* A framer for a body: sizes of CHUNKED_MAX_DIGITS and below 2^63. */
void chunked_init(struct chunked *c);
/* The same for a request body, forwarded to an origin: sizes of at most
 * CHUNKED_REQUEST_MAX_DIGITS and CHUNKED_REQUEST_MAX_SIZE ("chunk size too
 * long", "chunk size too large" else). */
void chunked_init_request(struct chunked *c);

/* Receives a run of chunk data (a piece of what the body carries, without
 * its framing); returns 0, or -1 to stop (chunked_feed_data fails). */
typedef int (*chunked_data_fn)(void *arg, const char *data, size_t len);

/* Feeds the next <len> bytes of the body. Returns CHUNKED_MORE with
 * <*consumed> = <len>; CHUNKED_DONE with <*consumed> = the bytes up to and
 * including the CRLF that ends the trailer section (what follows belongs to
 * the next message); or CHUNKED_ERROR with <*consumed> = the offset of the
 * offending byte and c->why set. Once DONE or ERROR, every further call
 * returns the same result with <*consumed> = 0. */
int chunked_feed(struct chunked *c, const char *data, size_t len, size_t *consumed);

/* As chunked_feed(), and hands each run of chunk data among the bytes it
 * consumes to <emit>(<arg>, ...) in order: a decoder, for a client that
 * cannot take chunked framing (HTTP/1.0). Should <emit> fail, so does the
 * body (CHUNKED_ERROR, why "out of memory"). */
int chunked_feed_data(struct chunked *c, const char *data, size_t len, size_t *consumed,
                      chunked_data_fn emit, void *arg);

#endif
