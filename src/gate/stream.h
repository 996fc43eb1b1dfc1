/* stream: writing to a bufferevent, socket first; reading more than
 * libevent does per event, and without its ioctl.
 *
 * A bufferevent writes what is queued in its output when its descriptor
 * reports writable: one epoll_ctl() to watch for that, a loop iteration,
 * and another epoll_ctl() once the output is empty. For the small writes
 * that make up most proxied traffic (a request head, a 100-byte response)
 * the socket would have taken the bytes at once. stream_send() therefore
 * writes straight to the socket when nothing is queued ahead, and queues
 * only what the socket did not take; order is kept because nothing else is
 * queued. A write error is left to the bufferevent: the bytes are queued,
 * its own write fails and its event callback reports it as before.
 *
 * What is written directly never reaches the output buffer, so the
 * bufferevent's write callback does not fire for it: a caller that waits
 * for the output to drain checks its length after the call. <fd> is the
 * bufferevent's socket, or -1 when the stream is not a plain socket (a
 * TLS-terminated stream): then everything is queued. */
#ifndef SLUICE_GATE_STREAM_H
#define SLUICE_GATE_STREAM_H

#include <stddef.h>
#include <sys/types.h>

#include <event2/util.h>

struct bufferevent;
struct evbuffer;

/* Moves the first <n> bytes of <src> (which must hold them) to <bev>.
 * Returns 0, or -1 when out of memory. */
int stream_send(struct bufferevent *bev, evutil_socket_t fd, struct evbuffer *src, size_t n);

/* Writes the <n> bytes at <data> (borrowed) to <bev>. Returns 0 or -1. */
int stream_send_bytes(struct bufferevent *bev, evutil_socket_t fd, const void *data, size_t n);

/* libevent 2.1 reads at most 4 KiB per read event (evbuffer_read's cap):
 * a body streamed through a bufferevent costs a loop round, a FIONREAD
 * ioctl and a readv per 4 KiB. Called from <bev>'s read callback, this
 * reads on from <fd> straight into <bev>'s input (readv into reserved
 * space, no ioctl) until the input holds <upto> bytes (at most its read
 * high watermark), or the socket has nothing more. The end of the peer's
 * side is left for the bufferevent's next read: a socket at its end stays
 * readable. Returns the bytes read, or -1 with errno set on an error other
 * than EAGAIN: that error is consumed, so the caller must act on it as on
 * the bufferevent's own (BEV_EVENT_READING | BEV_EVENT_ERROR). <fd> -1 (not
 * a plain socket): reads nothing. */
ssize_t stream_read_more(struct bufferevent *bev, evutil_socket_t fd, size_t upto);

/* As stream_read_more(), past <bev>'s read high watermark: for a socket
 * that failed (a reset), whose peer sends nothing more, to take what it
 * sent before, which stays readable ahead of the error. */
ssize_t stream_read_rest(struct bufferevent *bev, evutil_socket_t fd, size_t upto);

/* libevent 2.1's read of a socket bufferevent asks the kernel how much
 * waits (ioctl(FIONREAD)) before every readv(), whatever it may read: two
 * of a keep-alive request's seven system calls through the gateway.
 * stream_own_reads() gives <bev>'s read event (struct bufferevent's
 * ev_read) a callback of this file instead, which reads as libevent's does
 * but without that ioctl: one read() a read event, of at most 4 KiB
 * (EVBUFFER_MAX_READ) and never past the read high watermark, added to the
 * input (its end unfrozen only meanwhile); then the read callback, under
 * the low watermark's rule, or bufferevent_disable(EV_READ) and the event
 * callback with BEV_EVENT_READING | BEV_EVENT_EOF, ERROR (errno kept) or
 * TIMEOUT, as libevent reports them. The event itself stays the
 * bufferevent's, so bufferevent_enable() and _disable(), the read timeout
 * and bufferevent_priority_set() act on it as before; its cap is
 * stream_set_read_cap()'s (an input callback of this file's). The
 * event also waits for EV_CLOSED (EPOLLRDHUP), as a tunnel's read events
 * do (tunnel.h): a tunnel that takes the socket over finds it registered
 * with epoll as it wants it (no epoll_ctl()).
 *
 * <bev> must be a socket bufferevent (bufferevent_socket_new()) without
 * rate limits (this read takes no bucket), whose descriptor is set and
 * will not change: bufferevent_setfd() and bufferevent_socket_connect()
 * give the event libevent's callback back (so call this once connected).
 * Its read event must not be pending or active. Returns 0, or -1 when it
 * cannot be done (the event pending, no descriptor, not a socket
 * bufferevent): libevent reads on. */
int stream_own_reads(struct bufferevent *bev);

/* Caps <bev>'s input at <cap> bytes (0: no cap), libevent's read high
 * watermark: nothing is read past it, and the read stops when the input
 * reaches it, until the input is drained below it. For a bufferevent
 * whose reads are this file's (stream_own_reads()), the cap is kept
 * without libevent's watermark callback, which enables the read event
 * again (re-adding it, re-arming its timeout) at every change of the
 * input below the mark: here only reaching the cap and leaving it act
 * (an input callback added with the first cap; no cap is then read as
 * SIZE_MAX by bufferevent_getwatermark()). Otherwise it is
 * bufferevent_setwatermark(). Returns 0, or -1 when out of memory for
 * that callback (only a first cap, on reads of this file's, can meet it):
 * then nothing is changed (no cap), and the caller closes the connection,
 * whose input would otherwise be read without its bound. */
int stream_set_read_cap(struct bufferevent *bev, size_t cap);

/* Reads <bev> in the loop round under way, as if its socket had been
 * reported readable: its read event (stream_own_reads()'s, pending) is made
 * active, and the loop runs it after the callback that called this, before
 * it polls again when the caller's event has the same priority (libevent
 * runs a lower one after a poll that does not wait, a read of the same
 * cost). For a socket just accepted: a client sends its first
 * request right behind its connect, so that it is nearly always there by
 * the accept (a CONNECT from curl: 99% of setups), and reading it at once
 * spares the epoll_wait() that would only report it. When nothing is there
 * the read meets EAGAIN and the event waits as before. Does nothing on a
 * bufferevent libevent reads, or whose reads are off. */
void stream_read_soon(struct bufferevent *bev);

/* Makes the close of socket <fd> a reset (SO_LINGER {1,0}): what its send
 * queue still holds is dropped, and the peer reads ECONNRESET, not the end
 * of the stream. A unix socket has no reset: its close stays plain. */
void stream_reset_on_close(evutil_socket_t fd);

#endif
