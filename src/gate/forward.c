/* forward: plain HTTP through the gateway (absolute-form requests).
 *
 * Upstream connections are reused per client connection only (HAProxy's
 * "keep-alive" mode), never through a shared pool: after an exchange whose
 * HTTP/1.1 response was framed (Content-Length, chunked, or no body), with
 * no "Connection: close" from either side, the request fully sent and taken
 * by the upstream before the final response head came (upstream_took_all()),
 * the response fully read, and a request without a body
 * (sends_a_body()), the upstream connection is kept idle (one slot per
 * client connection) and given to that client's next request only when that
 * request, after its own decision, resolution and address guard, is for the
 * same agent and goes to the same checked address and port. So no request
 * can ride on another client's, another agent's or another address's
 * connection, and each request is still decided and logged on its own. An
 * idle connection that the upstream closes, or that sends anything, is
 * dropped (its events run first in each turn that polls it, and one taken
 * up in the turn that kept it has its socket peeked at; again before the
 * request goes out when it waited for its log line: one that sent or ended
 * meanwhile is replaced by a fresh connection to the same address,
 * whatever the request); a reused one that the upstream closed
 * just as the request went out is replaced once by a fresh connection to
 * the same address when the request is a GET or HEAD without body and no
 * byte of a response arrived (else 502). The client
 * connection is kept alive across requests when both sides allow it. Bodies
 * are forwarded unchanged, framed by Content-Length or by the chunked framer
 * (so nothing can hide behind a body), with backpressure: a side stops being
 * read while the other side's output holds more than FLOW_HIGH bytes, or
 * BACKLOG_TIGHT once the bytes waiting across all connections, both ways,
 * pass their budget (gate/backlog.h).
 * Under a bandwidth limit the head counts as the body does: it waits for
 * the bucket, then goes whole into its debt (head_waits()). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "gate/backlog.h"
#include "gate/conn.h"
#include "gate/drain.h"
#include "gate/gateway.h"
#include "gate/progress.h"
#include "gate/routing_host.h"
#include "gate/stream.h"
#include "shape/admit.h"
#include "shape/quota.h"
#include "util/socket_quiet.h"
#include "util/units.h"
#include "util/wall_clock.h"

/* Interim (1xx) responses passed on per request; more is a 502. */
#define INTERIM_MAX 16
/* Body bytes gathered per read event (stream_read_more(): libevent reads
 * 4 KiB at a time); the upload or download moves in pieces of this size. */
#define READ_AHEAD (64u * 1024)
/* What is read at most of a failed upstream's socket (take_rest()). */
#define REST_MAX (4u * 1024 * 1024)
/* The largest Content-Length of a request sent on: below 2^31, as a
 * request's chunk sizes are (CHUNKED_REQUEST_MAX_SIZE). An origin that
 * reads the length into a C int (atoi()) takes 4294967297 for 1, and
 * 2147483648 for a negative length, no body: it would end the body early
 * and run the rest, to the gateway body bytes, as a request of its own. */
#define REQUEST_LENGTH_MAX 0x7fffffff

static void up_read(struct bufferevent *bev, void *arg);
static void up_write(struct bufferevent *bev, void *arg);
static void up_event(struct bufferevent *bev, short what, void *arg);
static bool kept_is_quiet(struct conn *c);
static void reconnect(struct conn *c);
static bool retryable(const struct conn *c);

/* A request with a body, whatever its method: an origin that answers it
 * without reading the body (a GET's, as most do; a POST's, as a CGI script
 * that never reads its input does) reads the body as the next request on
 * its connection, one that no rule decided (a DELETE in a POST's body, a
 * POST behind a read-only rule). The gateway cannot tell such an origin
 * from one that read the body: both took it, as far as its socket tells
 * (the origin's kernel acknowledged it). Such a request goes upstream with
 * "Connection: close", so that an origin stops after its answer and never
 * parses the body, and its connection is never kept for another request,
 * which the body could be waiting in front of. */
static bool sends_a_body(const struct exchange *ex)
{
    return ex->req_body != BODY_NONE;
}

enum deny_reason forward_prepare(struct conn *c, const struct http_request *req, const char **why)
{
    struct exchange *ex = &c->ex;
    if (req->content_length > REQUEST_LENGTH_MAX) {
        *why = "Content-Length above 2147483647: send a body that large chunked";
        return REASON_BAD_REQUEST;
    }
    /* The last exchange's buffer when the connection kept one. */
    ex->uphead = c->spare_head != NULL ? c->spare_head : evbuffer_new();
    c->spare_head = NULL;
    int rc = ex->uphead == NULL ? -1
                                : http1_write_upstream_request_keep(
                                      req, ex->uphead, !req->conn_close && !sends_a_body(ex));
    /* What goes on holds no more than the gateway itself takes, its own
     * fields (Via, Connection, a Host) and the lines it writes anew
     * counted: a next hop with the same limits (a second sluice) would
     * refuse it. Refused as a request that came so. */
    if (rc == HTTP1_TOO_MANY_FIELDS) {
        *why = "too many headers (with those the gateway adds)";
        return REASON_BAD_REQUEST;
    }
    if (rc < 0) {
        *why = "cannot build the upstream request";
        return REASON_BAD_REQUEST;
    }
    if (evbuffer_get_length(ex->uphead) > conn_head_limit(c)) {
        *why = "request head too large (as the gateway would forward it)";
        return REASON_BAD_REQUEST;
    }
    /* ex->req_body: set by handle_request() (conn.c), refusals need it too */
    ex->req_left = req->content_length > 0 ? (uint64_t)req->content_length : 0;
    chunked_init_request(&ex->req_chunked);
    ex->client_close = req->conn_close;
    ex->client_v10 = req->version_minor == 0;

    /* The gateway's own member in its Via: the request went through a
     * sluice gateway, to an origin that sent it back as a proxy request:
     * forwarded again, it would go round until its head outgrew the limit.
     * (The pseudonym is the same for every sluice gateway: one that came
     * through another is refused too.) */
    if (req->via_loop) {
        *why = "its Via says it went through a sluice gateway already: a forwarding loop";
        return REASON_SELF_REQUEST;
    }
    if (req->host_header == NULL && req->version_minor >= 1) {
        *why = "missing Host header";
        return REASON_BAD_REQUEST;
    }
    /* The Host header goes upstream as it came (HTTP/1.0 may have none:
     * the target names the host): it must be the target's name as the
     * origin will read it (host_sent_names(): an IP in its canonical text
     * or as the target wrote it, other spellings being names to the
     * origin), and so must the fields an
     * origin behind a front may pick the site by instead (routing_host.h),
     * with or without a Host. A value without a port means 80. */
    struct ip_spelling spelling = {.as_written = req->host};
    if (req->host_header != NULL &&
        routing_host_names(req->host_header, req->host_header_len, &ex->target, ex->port, 80,
                           spelling) != ROUTING_HOST_MATCH)
        return REASON_HOST_MISMATCH;
    if (routing_fields_name(req, &ex->target, ex->port, 80, spelling, why) != ROUTING_HOST_MATCH)
        return REASON_HOST_MISMATCH;
    return REASON_NONE;
}

static struct timeval idle_tv(const struct conn *c)
{
    return timeval_of_ms(conn_idle_ms(c));
}

/* A step of idle_timeout: the upstream's timeouts until it took the
 * request (upstream_taking()). */
static struct timeval step_tv(const struct conn *c)
{
    return timeval_of_ms(drain_step_ms(conn_idle_ms(c)));
}

/* Response bytes gathered for the client and not yet accepted by it. */
static size_t client_backlog(const struct conn *c)
{
    return evbuffer_get_length(bufferevent_get_output(c->client)) + evbuffer_get_length(c->scratch);
}

/* Hands what read_response_head() and pump_response() gathered in
 * c->scratch to the client: one write for a head and the body bytes that
 * came with it. Returns -1 when <c> was freed. */
static int flush_response(struct conn *c)
{
    size_t n = evbuffer_get_length(c->scratch);
    if (n > 0 && c->ex.rsp_head_done)
        c->ex.rsp_head_sent = true;
    if (stream_send(c->client, c->fd, c->scratch, n) < 0) {
        conn_free(c);
        return -1;
    }
    return 0;
}

/* The response body turned out malformed while its head was still in
 * scratch, unseen by the client: takes the head and body bytes back, so
 * that fail() answers 502 (after any interim heads) instead of cutting a
 * response the client never got. Returns 0, or -1 when out of memory. */
static int unsend_final_head(struct conn *c)
{
    struct exchange *ex = &c->ex;
    struct evbuffer *keep = evbuffer_new();
    if (keep == NULL || evbuffer_remove_buffer(c->scratch, keep, ex->scratch_interim) < 0) {
        if (keep != NULL)
            evbuffer_free(keep);
        return -1;
    }
    evbuffer_drain(c->scratch, evbuffer_get_length(c->scratch));
    int rc = evbuffer_add_buffer(c->scratch, keep);
    evbuffer_free(keep);
    ex->rsp_head_done = false;
    ex->bytes_down = 0;
    return rc;
}

/* The exchange failed before the upstream took the whole request (the
 * agent is told 502 or 400, or its response is cut: the upstream stopped
 * taking the request, sent an invalid head, ended, or the client's body was
 * malformed), or the upstream answered before it was all sent: what the
 * gateway still holds of it (the output, the socket's send queue) is
 * dropped with a reset. What never left the host (the output, and the
 * queue less what was sent and not acknowledged: drain_never_left()) is
 * not counted in bytes_up; what left it stays counted, acknowledged or
 * not, as in a tunnel (tunnel.c forget_never_left()): an origin can read
 * bytes its stack never acknowledges and then reset, and must not keep
 * them out of bytes_up and the upload alerts. An origin the agent is then
 * told failed must not get the rest of it afterwards from the queue a
 * plain close leaves to the kernel, and act on a write the agent believes
 * failed and may send again. */
static void drop_untaken(struct conn *c)
{
    struct exchange *ex = &c->ex;
    int64_t never = drain_never_left(c->up_fd, true); /* the gateway connect()ed it */
    uint64_t held = evbuffer_get_length(bufferevent_get_output(c->up));
    ex->unsent_dropped = true; /* counted here, not again when the connection is dropped */
    if (never > 0)
        held += (uint64_t)never;
    ex->bytes_up = ex->bytes_up > held ? ex->bytes_up - held : 0;
    stream_reset_on_close(c->up_fd);
}

/* The exchange fails: what the upstream has not taken of the request is
 * dropped (drop_untaken()), whichever the failure. */
static void abandon_request(struct conn *c)
{
    if (c->up != NULL && !c->ex.req_taken && !c->ex.unsent_dropped)
        drop_untaken(c);
}

/* Cuts the client connection (the agent has part of a response). */
static void cut(struct conn *c)
{
    abandon_request(c);
    conn_free(c);
}

/* An error after the request went upstream: what the upstream did not
 * take of it is dropped (abandon_request()), then 502 if the agent has not
 * seen a response yet, else the connection is cut. */
static void fail(struct conn *c, const char *why)
{
    abandon_request(c);
    if (!c->ex.rsp_head_done) {
        /* Interim heads gathered before the failure go first. */
        if (c->scratch != NULL && flush_response(c) < 0)
            return;
        conn_refuse(c, REASON_UPSTREAM_UNREACHABLE, why, true);
        return;
    }
    conn_free(c);
}

/* fail() for a response head the gateway will not relay, saying why, so
 * that whoever debugs the origin sees it in the 502. <why> is a static
 * phrase (the parser's, http1.c), never the origin's bytes: those could
 * carry escapes to the agent's terminal. The text is bounded: cut short
 * rather than overrun. */
static void fail_invalid_response(struct conn *c, const char *why)
{
    char what[128];
    snprintf(what, sizeof(what), "the upstream sent an invalid response (%s)", why);
    fail(c, what);
}

/* fail() for a response head the writer did not write (<rc>, its return):
 * out of memory, or a head that would go on with more fields or bytes
 * than the gateway takes, its own counted (Via, Date, Connection), which a
 * client or gateway in front with the same limits (a second sluice) would
 * refuse: refused as one that came so. */
static void fail_written(struct conn *c, int rc)
{
    if (rc == HTTP1_TOO_MANY_FIELDS)
        fail_invalid_response(c, "too many headers, with those the gateway adds");
    else if (rc == HTTP1_TOO_BIG)
        fail_invalid_response(c, "head too large, with the fields the gateway adds");
    else
        fail(c, "out of memory");
}

/* The client's request body is not valid chunked framing: its fault, so
 * 400 bad_request if no response byte was sent yet, else cut. */
static void fail_client(struct conn *c)
{
    abandon_request(c);
    if (!c->ex.rsp_head_done) {
        conn_refuse(c, REASON_BAD_REQUEST, "malformed chunked body", true);
        return;
    }
    conn_free(c);
}

/* The upstream took the whole request (nothing of it is left in its
 * output or its socket's send queue): from now on it has idle_timeout to
 * answer, each time it goes quiet. Until now its silence was no fault: an
 * upload may outlast idle_timeout while neither side is idle. */
static void request_taken(struct conn *c)
{
    struct timeval tv = idle_tv(c);
    c->ex.req_taken = true;
    c->ex.up_idle_timeouts = true;
    bufferevent_set_timeouts(c->up, &tv, &tv);
}

/* The whole request is read from the client and handed to the upstream;
 * the client now has idle_timeout to take each piece of the response (a
 * client that stops reading is given up on, as is one that stops sending;
 * one that reads slowly but steadily is not: the write timeout counts
 * progress, gate/drain.h). What the upstream has not taken yet drains from
 * its output and send queue, megabytes for an origin that reads slowly:
 * the upstream's read timeout is a step that judges that progress
 * (upstream_taking()) until it took it all; no write timeout, which would
 * judge the same progress a second time. After an early answer's head
 * (answer_started()) those timeouts are set already, and the step goes on
 * judging the answer's bytes as progress too. */
static void request_sent(struct conn *c)
{
    if (!c->ex.rsp_head_done) {
        struct timeval step = step_tv(c);
        drain_reset(&c->ex.up_drain);
        c->ex.up_idle_timeouts = false;
        bufferevent_set_timeouts(c->up, &step, NULL);
    }
    conn_set_client_timeouts(c, false);
}

/* The final response head arrived before the upstream took the whole
 * request: an early answer (RFC 9112 9.3), which an origin may go on
 * streaming while it reads the rest of the upload slowly or not at all
 * (full-duplex HTTP/1.1). The client may stop sending and is judged as it
 * takes the answer. The upstream is judged on the exchange as a whole:
 * the answer's bytes (noted by up_read()) are progress as much as its
 * taking request bytes, and it is given up on only when it does neither
 * for idle_timeout. Its read timeout is the step that judges both
 * (upstream_taking()); no write timeout, which would cut it for not
 * taking the request while its answer flows. */
static void answer_started(struct conn *c)
{
    struct timeval step = step_tv(c);
    c->ex.up_idle_timeouts = false;
    bufferevent_set_timeouts(c->up, &step, NULL);
    if (!c->ex.req_done)
        conn_set_client_timeouts(c, false);
}

/* True when nothing of the request is left to the upstream: read whole
 * from the client, gone from the gateway's output and acknowledged (the
 * socket's send queue is empty). */
static bool upstream_took_all(const struct conn *c)
{
    return c->ex.req_done && evbuffer_get_length(bufferevent_get_output(c->up)) == 0 &&
           drain_send_queue(c->up_fd) == 0;
}

/* A step of the upstream's timeouts expired before it took the whole
 * request: the write timeout while the body is being read from the client,
 * the read timeout once it all was (request_sent()) or once an early
 * answer's head came (answer_started()). Progress is what it is for a
 * client taking a response (gate/drain.h): the send queue shrinking, or
 * the bufferevent writing into the socket; after an early answer's head,
 * also bytes of that answer arriving (drain_note_progress()). Returns true
 * when the upstream made progress or has not been stalled for idle_timeout
 * (the timeout's direction is enabled again: libevent turned it off), or
 * took all of the request; false when it stopped taking it (and sending
 * the answer it began). */
static bool upstream_taking(struct conn *c, short what)
{
    struct exchange *ex = &c->ex;
    uint64_t idle = conn_idle_ms(c);
    if (upstream_took_all(c))
        request_taken(c);
    else if (!drain_keeps(&ex->up_drain, drain_send_queue(c->up_fd), drain_step_ms(idle), idle))
        return false;
    bufferevent_enable(c->up, (what & BEV_EVENT_READING) ? EV_READ : EV_WRITE);
    return true;
}

/* A client that frames the response body by the close of its connection
 * (a body without length; a chunked one that an HTTP/1.0 client gets as
 * its data alone) takes a plain close for the end of the body: cut before
 * its end (the upstream closed in the middle of its chunks, sent a
 * malformed one, failed or went silent; the gateway stopping), what it got
 * would pass for the whole answer. A reset tells it the answer was cut,
 * as the missing bytes of a Content-Length or the missing last chunk tell
 * any other client. */
void forward_on_free(struct conn *c)
{
    const struct exchange *ex = &c->ex;
    if (c->fd >= 0 && ex->rsp_head_done && !ex->rsp_done &&
        (ex->rsp_body == BODY_UNTIL_CLOSE || ex->unchunk))
        stream_reset_on_close(c->fd);
}

void forward_untrack_upload(struct conn *c)
{
    if (c->up != NULL)
        backlog_untrack(bufferevent_get_output(c->up), c->up_backlog_cb, BACKLOG_TO_UPSTREAM);
    c->up_backlog_cb = NULL;
}

/* Closes the exchange's upstream connection. */
static void close_upstream(struct conn *c)
{
    forward_untrack_upload(c);
    bufferevent_free(c->up);
    c->up = NULL;
    close(c->up_fd);
    c->up_fd = -1;
}

/* The exchange is over when the response is complete and written out.
 * Complete before the request was all read from the client (an early
 * answer), or before the upstream took all of it (read whole from the
 * client, it may still wait in the gateway's buffer or in the socket's
 * send queue), the rest of the request is not sent: the upstream
 * connection is closed at once, as drop_untaken() has it (reset, so that
 * what the upstream did not take of the request is dropped, not delivered
 * after the exchange ended, and not counted in bytes_up). The client
 * connection is not kept when the rest of its request body is still
 * unread. */
static void maybe_done(struct conn *c)
{
    struct exchange *ex = &c->ex;
    if (!ex->rsp_done)
        return;
    if (!ex->req_done || (c->up != NULL && !ex->req_taken && !upstream_took_all(c))) {
        if (!ex->req_done)
            ex->keep_alive = false; /* the rest of the request body is still unread */
        if (c->up != NULL) {
            drop_untaken(c);
            close_upstream(c);
        }
    }
    struct evbuffer *out = bufferevent_get_output(c->client);
    if (evbuffer_get_length(out) > 0) {
        /* The whole response is here: the exchange waits only for the
         * client to take it, under the client's own timeouts. What the
         * upstream does meanwhile (a kept connection's silence after its
         * answer) is no fault of it, and nothing more of the request goes
         * up (an upstream that answered early is closed already). */
        if (c->up != NULL)
            bufferevent_disable(c->up, EV_READ | EV_WRITE);
        if (!ex->req_done)
            bufferevent_disable(c->client, EV_READ);
        bufferevent_setwatermark(c->client, EV_WRITE, 0, 0);
        return;
    }
    conn_exchange_done(c);
}

bool forward_uploading(const struct conn *c)
{
    const struct exchange *ex = &c->ex;
    return c->state == CS_FORWARD && c->up != NULL && ex->req_body != BODY_NONE && !ex->rsp_done &&
           !ex->req_taken && !upstream_took_all(c);
}

bool forward_answer_only(const struct conn *c)
{
    const struct exchange *ex = &c->ex;
    return c->state == CS_FORWARD && !c->log_waiting && ex->req_done && !forward_uploading(c) &&
           !retryable(c);
}

void forward_hold(struct conn *c)
{
    evtimer_del(c->timer); /* the answer's head deadline: no answer is read */
    /* A head waiting for its bucket never goes (on_head_refill()), nor is
     * a name waiting for it resolved (conn.c, on_name_refill()). */
    c->ex.head_waiting = false;
    c->ex.name_waiting = false;
    bufferevent_disable(c->client, EV_READ);
    if (c->up != NULL)
        bufferevent_disable(c->up, EV_READ | EV_WRITE);
    /* Not CS_FORWARD: the client taking what it was sent, or its upload's
     * bucket refilled (shape/admit.c), must not start the flow again. */
    c->state = CS_CONNECT;
}

void forward_cut_denied(struct conn *c)
{
    abandon_request(c); /* reset: the rest is never delivered, nor counted */
    if (!c->ex.rsp_head_done) {
        /* Interim heads gathered before the denial go first. */
        if (c->scratch != NULL && flush_response(c) < 0)
            return;
        conn_refuse(c, c->ex.reason, NULL, true);
        return;
    }
    c->gw->counters.denied++; /* as conn_refuse() counts one */
    conn_free(c);             /* the agent has part of a response */
}

/* Of the <n> body bytes just fed to <ck> from offset <t0>, how many belong
 * to the trailer section (the fields after the last chunk and the final
 * CRLF): read, never passed on. */
static size_t trailer_bytes(const struct chunked *ck, uint64_t t0, size_t n)
{
    uint64_t tr = ck->trailer_at;
    if (tr == 0 || tr >= t0 + n)
        return 0;
    return n - (tr > t0 ? (size_t)(tr - t0) : 0);
}

/* Moves request body bytes from the client to the upstream. */
static void pump_request(struct conn *c)
{
    struct exchange *ex = &c->ex;
    struct evbuffer *in = bufferevent_get_input(c->client);
    struct evbuffer *out = bufferevent_get_output(c->up);
    if (ex->rsp_done && !ex->req_done) {
        bufferevent_disable(c->client, EV_READ); /* answered: the rest is not sent (maybe_done()) */
        return;
    }
    while (!ex->req_done && evbuffer_get_length(in) > 0) {
        /* Past the budget of bytes waiting (gate/backlog.h): BACKLOG_TIGHT. */
        if (evbuffer_get_length(out) >= backlog_mark(FLOW_HIGH)) {
            bufferevent_disable(c->client, EV_READ);
            return; /* up_write resumes */
        }
        size_t n = evbuffer_get_length(in);
        if (ex->req_body == BODY_LENGTH && n > ex->req_left)
            n = (size_t)ex->req_left; /* what follows is the next request's */
        if (ex->flow != NULL && shape_meter_upload(c, n, &n) < 0) {
            fail(c, "out of memory (no timer to wait for the bandwidth bucket)");
            return;
        }
        /* None: read again once the bucket has refilled (shape_meter_upload()). */
        if (n == 0)
            return;
        size_t skip = 0; /* bytes of a chunked trailer section: read, not sent */
        if (ex->req_body == BODY_LENGTH) {
            ex->req_left -= n;
            if (ex->req_left == 0)
                ex->req_done = true;
        } else {
            struct evbuffer_iovec v;
            if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
                break;
            uint64_t t0 = ex->req_chunked.total;
            int rc = chunked_feed(&ex->req_chunked, v.iov_base, v.iov_len < n ? v.iov_len : n, &n);
            if (rc == CHUNKED_ERROR) {
                fail_client(c);
                return;
            }
            skip = trailer_bytes(&ex->req_chunked, t0, n);
            if (rc == CHUNKED_DONE)
                ex->req_done = true;
        }
        /* The trailer section (it could carry Proxy-Authorization or any
         * hop-by-hop field) never goes upstream: the body ends "0\r\n\r\n". */
        bool end = ex->req_done && ex->req_body == BODY_CHUNKED;
        if (stream_send(c->up, c->up_fd, in, n - skip) < 0 || evbuffer_drain(in, skip) < 0 ||
            (end && stream_send_bytes(c->up, c->up_fd, "\r\n", 2) < 0)) {
            fail(c, "out of memory");
            return;
        }
        size_t sent = n - skip + (end ? 2 : 0); /* what the upstream gets */
        ex->bytes_up += sent;
        progress_note(c);
        if (ex->flow != NULL)
            quota_flow_take(ex->flow, sent, quota_now());
    }
    if (ex->req_done) {
        /* The client stays readable, as after a request without a body: a
         * reset while the answer is awaited ends the exchange at once
         * (forward_on_client_event()) and its end is seen (conn.c,
         * client_half_closed()); what it sends next turns reading off
         * (forward_on_client_read()) and waits in its input. */
        request_sent(c);
        forward_client_gone(c);
    } else if (ex->client_eof && evbuffer_get_length(in) == 0) {
        conn_free(c); /* the client ended its side in the middle of the body */
    }
}

static int add_data(void *arg, const char *data, size_t len)
{
    return evbuffer_add(arg, data, len);
}

/* Moves response body bytes from the upstream to the client, after the
 * head; <force> when the upstream ended (its input is bounded: see
 * forward_start()): all of it, over the FLOW_HIGH mark. Returns -1 when <c>
 * was freed. */
static int pump_response(struct conn *c, bool force)
{
    struct exchange *ex = &c->ex;
    struct evbuffer *in = bufferevent_get_input(c->up);
    if (!ex->rsp_head_done)
        return 0; /* never a byte before the final head is parsed */
    while (!ex->rsp_done && evbuffer_get_length(in) > 0) {
        if (!force && client_backlog(c) >= backlog_mark(FLOW_HIGH)) {
            bufferevent_disable(c->up, EV_READ);
            return 0; /* forward_on_client_write resumes */
        }
        size_t n = evbuffer_get_length(in), before = evbuffer_get_length(c->scratch);
        uint64_t t0 = ex->rsp_chunked.total;
        if (ex->rsp_body == BODY_LENGTH) {
            if (n > ex->rsp_left)
                n = (size_t)ex->rsp_left;
            ex->rsp_left -= n;
            if (ex->rsp_left == 0)
                ex->rsp_done = true;
        } else if (ex->rsp_body == BODY_CHUNKED) {
            struct evbuffer_iovec v;
            if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
                break;
            int rc = ex->unchunk ? chunked_feed_data(&ex->rsp_chunked, v.iov_base, v.iov_len, &n,
                                                     add_data, c->scratch)
                                 : chunked_feed(&ex->rsp_chunked, v.iov_base, v.iov_len, &n);
            if (rc == CHUNKED_ERROR) {
                if (!ex->rsp_head_sent && unsend_final_head(c) == 0)
                    fail(c, "the upstream sent a malformed chunked body");
                else
                    cut(c); /* the head went out */
                return -1;
            }
            if (rc == CHUNKED_DONE)
                ex->rsp_done = true;
        }
        if (ex->unchunk) {
            evbuffer_drain(in, n); /* its data is in scratch already */
            ex->bytes_down += evbuffer_get_length(c->scratch) - before;
            continue;
        }
        /* Nor does a response's trailer section reach the client: it could
         * carry the gateway's own fields (Sluice-*) or hop-by-hop ones, and
         * a forwarder may drop trailers (RFC 9112 7.1.2). */
        size_t skip = ex->rsp_body == BODY_CHUNKED ? trailer_bytes(&ex->rsp_chunked, t0, n) : 0;
        bool end = ex->rsp_done && ex->rsp_body == BODY_CHUNKED;
        if (evbuffer_remove_buffer(in, c->scratch, n - skip) != (int)(n - skip) ||
            evbuffer_drain(in, skip) < 0 || (end && evbuffer_add(c->scratch, "\r\n", 2) < 0)) {
            cut(c);
            return -1;
        }
        ex->bytes_down += n - skip + (end ? 2 : 0);
    }
    return 0;
}

/* The largest response head taken: limits.header_bytes (64 KiB when unset
 * or over 1 MiB). */
static size_t response_head_limit(const struct conn *c)
{
    uint64_t limit = c->ex.header_bytes;
    return limit == 0 || limit > 1024 * 1024 ? 64 * 1024 : (size_t)limit;
}

/* Each response head (interim or final) must be complete within
 * idle_timeout of its first byte (c->timer, free while forwarding): the
 * read timeout alone would let an upstream that sends one byte of it at a
 * time, each within idle_timeout, hold the agent for header_bytes times
 * idle_timeout without an answer. Armed once part of a head is in. */
static void head_deadline_arm(struct conn *c)
{
    if (!evtimer_pending(c->timer, NULL)) {
        struct timeval tv = idle_tv(c);
        conn_timer_add(c, &tv);
    }
}

void forward_on_head_deadline(struct conn *c)
{
    if (c->up == NULL || c->ex.rsp_head_done)
        return;
    /* fail() drops what the upstream did not take (abandon_request()) */
    fail(c, "the upstream did not send its response head in time");
}

/* The date a response that came without a Date goes on with: now, to the
 * second (RFC 9110 6.6.1). */
static const char *response_date(struct conn *c)
{
    return http_date_of(&c->gw->date_clock, wall_clock_seconds());
}

/* Reads response heads until the final one. Interim (1xx) ones are passed
 * on, at most INTERIM_MAX per request (more: 502), under the same FLOW_HIGH
 * backpressure as body bytes unless <force> (the upstream ended: its input
 * is bounded, see forward_start()). Returns -1 when <c> was freed. */
static int read_response_head(struct conn *c, bool force)
{
    struct exchange *ex = &c->ex;
    struct evbuffer *in = bufferevent_get_input(c->up);
    size_t limit = response_head_limit(c);
    while (!ex->rsp_head_done) {
        size_t len = evbuffer_get_length(in);
        if (len == 0)
            return 0;
        if (!force && client_backlog(c) >= backlog_mark(FLOW_HIGH)) {
            bufferevent_disable(c->up, EV_READ);
            evtimer_del(c->timer); /* the client is judged meanwhile; the head anew after */
            return 0;              /* forward_on_client_write resumes */
        }
        size_t n = len < limit ? len : limit;
        const char *buf = (const char *)evbuffer_pullup(in, (ev_ssize_t)n);
        const char *why = NULL;
        /* On the stack: at 3 KiB it is past glibc's per-thread cache, so
         * each malloc() and free() of it took malloc's slower paths. */
        struct http_response head, *rsp = &head;
        if (buf == NULL) {
            fail(c, "out of memory");
            return -1;
        }
        /* Parsed once its end is there, found looking at the new bytes
         * alone (as a request head: conn.c, read_head()). */
        int rc = http1_parse_response_scan(&ex->rsp_scan, buf, n, limit, rsp, &why);
        if (rc == HTTP1_NEED_MORE) {
            head_deadline_arm(c);
            return 0;
        }
        evtimer_del(c->timer);
        if (rc < 0 || rsp->status == 101) {
            fail_invalid_response(c, rc >= 0       ? "a 101 Switching Protocols, which the gateway "
                                                     "does not relay"
                                     : why != NULL ? why
                                                   : "malformed head");
            return -1;
        }
        if (rsp->status < 200) {
            if (++ex->interim > INTERIM_MAX) {
                fail(c, "the upstream sent too many interim responses");
                return -1;
            }
            /* Not to an HTTP/1.0 client (RFC 9110 15.2), which would take
             * it for the answer. */
            int wr = ex->client_v10 ? 0
                                    : http1_write_upstream_response_max(rsp, c->scratch, 0,
                                                                        response_date(c), limit);
            if (wr < 0) {
                fail_written(c, wr);
                return -1;
            }
            evbuffer_drain(in, rsp->head_len);
            memset(&ex->rsp_scan, 0, sizeof(ex->rsp_scan)); /* the next head is another */
            continue;
        }
        ex->rsp_body = http1_response_body(rsp, ex->mbit);
        /* HTTP/1.0 has no Transfer-Encoding (RFC 9112 6.1): a body still
         * in a coding other than chunked (gzip) would reach an HTTP/1.0
         * client with nothing saying so, its coded bytes passing for the
         * body. The gateway does not decode them. */
        if (ex->client_v10 && rsp->other_coding && ex->rsp_body != BODY_NONE) {
            fail(c, "the upstream sent a transfer coding other than chunked, which an HTTP/1.0 "
                    "client cannot take");
            return -1;
        }
        ex->status = rsp->status;
        /* A framed response keeps the client connection even when the
         * upstream closes its own: the two are separate hops. Not when it
         * answers before the request body is through (a 413 to an upload):
         * the rest of that body will not be read, so the client must not
         * be told the connection stays. */
        /* An HTTP/1.0 client cannot take chunked framing (RFC 9112 6.1): it
         * gets the data alone, ended by the close. */
        ex->unchunk = ex->client_v10 && ex->rsp_body == BODY_CHUNKED;
        ex->keep_alive = ex->req_done && !ex->client_close && ex->rsp_body != BODY_UNTIL_CLOSE &&
                         !ex->unchunk && !c->gw->stopping;
        /* Nor is the upstream connection kept after a request with a body
         * (sends_a_body()), nor when this head came before the upstream
         * took the whole request head (upstream_took_all(): a syscall,
         * made only for an answer that would be kept otherwise). Such a
         * request counts as taken from the start (forward_start(): its
         * wait for the answer starts at once), so req_taken cannot tell:
         * an origin that answered once it read the request line, the rest
         * of a large head still in the socket's send queue, would read
         * that rest, then the client's next request, as one request.
         * An HTTP/1.0 answer is kept when it says keep-alive (conn_close
         * is false then, http1.c): RFC 9112 9.3 lets it persist, and the
         * request asked for it (kept only when it went with "Connection:
         * keep-alive": forward_prepare()); its body is framed, as
         * keep_alive requires (HTTP/1.0 has no chunked: a length, or
         * none). */
        ex->up_keep =
            ex->keep_alive && !rsp->conn_close && !sends_a_body(ex) && upstream_took_all(c);
        ex->rsp_left = rsp->content_length > 0 ? (uint64_t)rsp->content_length : 0;
        chunked_init(&ex->rsp_chunked);
        ex->scratch_interim = evbuffer_get_length(c->scratch);
        /* Nor Transfer-Encoding on a head without body (HEAD, 304): to it,
         * it says how a body it has not would be framed. */
        bool no_te = ex->unchunk || (ex->client_v10 && ex->rsp_body == BODY_NONE);
        unsigned flags =
            (ex->keep_alive ? HTTP1_RSP_KEEP_ALIVE : 0u) | (no_te ? HTTP1_RSP_UNCHUNKED : 0u);
        int wr = http1_write_upstream_response_max(rsp, c->scratch, flags, response_date(c), limit);
        if (wr < 0) {
            fail_written(c, wr);
            return -1;
        }
        evbuffer_drain(in, rsp->head_len);
        ex->rsp_head_done = true;
        if (!ex->req_taken)
            answer_started(c);
        if (ex->rsp_body == BODY_NONE || (ex->rsp_body == BODY_LENGTH && ex->rsp_left == 0))
            ex->rsp_done = true;
    }
    return 0;
}

/* Reads what the upstream sent (heads, then body bytes) and hands it to
 * the client. Returns -1 when <c> was freed. */
static int take_response(struct conn *c, bool force)
{
    for (;;) {
        if (read_response_head(c, force) < 0)
            return -1;
        if (c->ex.rsp_head_done && pump_response(c, force) < 0)
            return -1;
        if (flush_response(c) < 0)
            return -1;
        /* Backpressure paused the upstream for bytes still in scratch (a
         * head over FLOW_HIGH), and the socket took them all at once: no
         * write callback will come to resume it, so go on here. Each turn
         * takes what the input holds; nothing is read meanwhile. */
        if (c->ex.rsp_done || (bufferevent_get_enabled(c->up) & EV_READ) ||
            evbuffer_get_length(bufferevent_get_output(c->client)) > backlog_low_mark(FLOW_LOW))
            return 0;
        bufferevent_enable(c->up, EV_READ);
    }
}

/* The bucket refilled for a head that waited (head_waits()): the request
 * goes on, unless it was held meanwhile (forward_hold(): a reload denied
 * it). forward_start() looks at the bucket again. */
static void on_head_refill(void *arg)
{
    struct conn *c = arg;
    if (!c->ex.head_waiting)
        return;
    c->ex.head_waiting = false;
    forward_start(c);
}

/* Before <c>'s head goes upstream: 1 when the bandwidth bucket of its
 * body is in debt or holds less than it lets an upload move at once
 * (quota_flow_allow()), and the request now waits in CS_CONNECT, its
 * upstream not read nor timed, its client untimed, for on_head_refill()
 * from the flow's timer; -1 when no timer could be armed (out of memory):
 * the request failed (fail()) rather than go unmetered. Else 0, its
 * tokens taken: the head goes
 * whole (into the bucket's debt where it held fewer, as a tunnel's first
 * bytes: connect.c), taken as it is handed on so that the agent's next
 * request finds the debt; a head sent again (retry()) is taken again.
 * Without this, heads went unmetered: a request's head, up to
 * header_bytes, moved out at any rate, as many requests as the agent
 * sent. A kept connection is looked at again when the wait ends
 * (kept_is_quiet(), with a peek): its upstream may have spoken or ended
 * meanwhile. */
static int head_waits(struct conn *c)
{
    struct exchange *ex = &c->ex;
    size_t n = evbuffer_get_length(ex->uphead), allowed;
    uint64_t now = quota_now();
    if (quota_flow_allow_or_pause(ex->flow, n, now, on_head_refill, c, &allowed) < 0) {
        fail(c, "out of memory (no timer to wait for the bandwidth bucket)");
        return -1;
    }
    if (allowed > 0) {
        quota_flow_take(ex->flow, n, now);
        return 0;
    }
    ex->head_waiting = true;
    bufferevent_disable(c->up, EV_READ | EV_WRITE);
    conn_untime_client(c);
    if (ex->reused) {
        ex->reuse_waited = true;
        ex->reuse_wait_first = false;
    }
    return 1;
}

void forward_start(struct conn *c)
{
    struct exchange *ex = &c->ex;
    struct timeval tv = idle_tv(c);
    if (ex->reuse_waited) {
        ex->reuse_waited = false;
        if (!kept_is_quiet(c)) {
            reconnect(c); /* comes back here (retry_connected()) */
            return;
        }
    }
    /* A request that waited for its line (on a kept connection or a fresh
     * one) may meet a reload meanwhile: its address is checked again under
     * the policy in force, as any connection's is. One compare otherwise. */
    if (conn_upstream_refused(c))
        return;
    /* A head counts against the bandwidth of its body: one look at the
     * flow when none applies, no clock. */
    if (ex->flow != NULL && quota_flow_metered(ex->flow) && head_waits(c) != 0)
        return;
    c->state = CS_FORWARD;
    if (c->scratch == NULL && (c->scratch = evbuffer_new()) == NULL) {
        fail(c, "out of memory");
        return;
    }
    bufferevent_setcb(c->up, up_read, up_write, up_event, c);
    /* What waits for the upstream counts against the budget that bounds
     * uploads to origins that take nothing (gate/backlog.h). */
    if (c->up_backlog_cb == NULL)
        c->up_backlog_cb = backlog_track(bufferevent_get_output(c->up), BACKLOG_TO_UPSTREAM);
    if (c->up_backlog_cb == NULL) {
        fail(c, "out of memory");
        return;
    }
    memset(&ex->rsp_scan, 0, sizeof(ex->rsp_scan)); /* a retry's connection starts afresh */
    /* The upstream's wait for its answer (a read timeout of idle_timeout)
     * starts once it took the request: at once without a body. With one,
     * until then (or an early answer's head: answer_started()), its write
     * timeout is a step that judges its progress in taking the body
     * (upstream_taking()), noting the bufferevent's writes into its
     * socket; a reused connection has the callback already. */
    bool no_body = ex->req_body == BODY_NONE;
    ex->req_taken = no_body;
    ex->up_idle_timeouts = no_body;
    if (no_body) {
        /* Set even when a reused connection has them already: the wait
         * for the answer starts now, not at the connection's last read. */
        bufferevent_set_timeouts(c->up, &tv, &tv);
    } else {
        struct evbuffer *out = bufferevent_get_output(c->up);
        struct timeval step = step_tv(c);
        drain_reset(&ex->up_drain);
        evbuffer_remove_cb(out, drain_on_write, &ex->up_drain);
        if (evbuffer_add_cb(out, drain_on_write, &ex->up_drain) == NULL) {
            fail(c, "out of memory");
            return;
        }
        bufferevent_set_timeouts(c->up, NULL, &step);
    }
    bufferevent_setwatermark(c->up, EV_WRITE, FLOW_LOW, 0);
    /* No read cap on the upstream (stream_set_read_cap()): its input is
     * bounded without one, as each read is taken up at once (up_read()): a
     * head until it is complete or found over its limit
     * (read_response_head()), body bytes until the client's backlog reaches
     * FLOW_HIGH, when reading stops; a read takes at most READ_AHEAD. */
    bufferevent_setwatermark(c->client, EV_WRITE, FLOW_LOW, 0);
    /* A body is read up to FLOW_HIGH ahead; without one the client is not
     * read during the exchange (forward_on_client_read()), and its next
     * head keeps the head's limit. */
    if (!no_body && stream_set_read_cap(c->client, FLOW_HIGH) < 0) {
        fail(c, "out of memory");
        return;
    }
    /* A copy: the head is kept in case the request must be sent again. */
    size_t hl = evbuffer_get_length(ex->uphead);
    const unsigned char *head = evbuffer_pullup(ex->uphead, -1);
    if (head == NULL || stream_send_bytes(c->up, c->up_fd, head, hl) < 0) {
        fail(c, "out of memory");
        return;
    }
    /* Only what is off: enabling EV_WRITE arms the write event even with
     * nothing queued (a bufferevent starts with it on), and enabling
     * EV_READ again re-adds the read event with its timer (a reused
     * connection is read while idle; the timeouts set above are running). */
    short off = (short)((EV_READ | EV_WRITE) & ~bufferevent_get_enabled(c->up));
    if (off != 0)
        bufferevent_enable(c->up, off);
    if (no_body) {
        ex->req_done = true;
        conn_set_client_timeouts(c, false); /* see request_sent() */
        forward_client_gone(c);
        return;
    }
    conn_set_client_timeouts(c, true);
    bufferevent_enable(c->client, EV_READ);
    pump_request(c);
}

void forward_on_client_read(struct conn *c)
{
    /* The request is all read (a GET's at once), or there is no upstream
     * while retry() connects again (only a request without a body is sent
     * again): what the client sends now belongs to its next request and
     * waits in its input. Not through pump_request(), whose request_sent()
     * would make the upstream's wait for the answer a step again. */
    if (c->up == NULL || c->ex.req_done) {
        bufferevent_disable(c->client, EV_READ);
        conn_watch_hangup(c); /* its reset or close, while the answer is awaited */
        return;
    }
    /* A body streaming toward an upstream that takes it: read on past
     * libevent's 4 KiB; an error ends the connection as the bufferevent's
     * own would (forward_on_client_event()). */
    if (evbuffer_get_length(bufferevent_get_output(c->up)) < backlog_mark(FLOW_HIGH) &&
        stream_read_more(c->client, c->fd, backlog_mark(READ_AHEAD)) < 0) {
        conn_free(c);
        return;
    }
    pump_request(c);
}

void forward_on_client_write(struct conn *c)
{
    struct exchange *ex = &c->ex;
    if (ex->rsp_done) {
        maybe_done(c);
        return;
    }
    if (c->up != NULL &&
        evbuffer_get_length(bufferevent_get_output(c->client)) <= backlog_low_mark(FLOW_LOW)) {
        bufferevent_enable(c->up, EV_READ);
        /* After an interim head drained: the rest may already be buffered. */
        if (take_response(c, false) < 0)
            return;
        maybe_done(c);
    }
}

void forward_on_client_event(struct conn *c, short what)
{
    (void)what;
    conn_free(c); /* the client went away or timed out: nothing left to do */
}

static void up_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    c->ex.rsp_seen = true;
    /* A body streaming toward a client that takes it: read on past
     * libevent's 4 KiB. An error met doing so is the bufferevent's to
     * report, once what was read went on; the connection is not kept. */
    bool failed = c->ex.rsp_head_done && !c->ex.rsp_done &&
                  client_backlog(c) < backlog_mark(FLOW_HIGH) &&
                  stream_read_more(bev, c->up_fd, backlog_mark(READ_AHEAD)) < 0;
    int err = failed ? errno : 0;
    if (failed)
        c->ex.up_keep = false;
    if (take_response(c, false) < 0)
        return;
    if (failed && !c->ex.rsp_done) {
        EVUTIL_SET_SOCKET_ERROR(err);
        bufferevent_disable(bev, EV_READ);
        up_event(bev, BEV_EVENT_READING | BEV_EVENT_ERROR, c);
        return;
    }
    if (c->ex.rsp_head_done && !c->ex.req_taken)
        drain_note_progress(&c->ex.up_drain); /* an early answer moving (answer_started()) */
    maybe_done(c);
}

static void up_write(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    if (!c->ex.req_done) {
        /* At FLOW_LOW (the write watermark), or below BACKLOG_TIGHT_LOW
         * past the budget: libevent calls again as the upstream takes more. */
        if (evbuffer_get_length(bufferevent_get_output(bev)) > backlog_low_mark(FLOW_LOW))
            return;
        bufferevent_enable(c->client, EV_READ);
        pump_request(c);
    } else if (c->ex.client_gone && evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
        /* The request is all in the upstream's socket, which a plain close
         * still delivers, then its end: the origin can stop. */
        conn_free(c);
    }
}

void forward_client_gone(struct conn *c)
{
    /* Resolving or connecting: forward_start() sends the request and comes
     * back here. Deferred: the callers go on with <c>. */
    if (c->ex.client_gone && c->state == CS_FORWARD && c->up != NULL && c->ex.req_done)
        bufferevent_trigger(c->up, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

/* A reused connection ended before any byte of a response: the upstream
 * closed it as the request went out. Sending again is safe only for a
 * GET or HEAD without body, and only once. */
static bool retryable(const struct conn *c)
{
    const struct exchange *ex = &c->ex;
    return ex->reused && !ex->retried && !ex->rsp_seen && !ex->rsp_head_done &&
           ex->req_body == BODY_NONE && (ex->mbit == METHOD_GET || ex->mbit == METHOD_HEAD) &&
           ex->uphead != NULL && !c->gw->stopping;
}

static void retry_connected(int err, struct bufferevent *bev, evutil_socket_t fd, size_t idx,
                            void *arg)
{
    struct conn *c = arg;
    (void)idx;
    c->uc = NULL;
    if (err == UPSTREAM_ERR_SHORT) { /* retryable(): nothing was answered yet */
        conn_refuse_short(c, errno);
        return;
    }
    if (err != 0) { /* the fresh connection failed: as any connect does (conn.c, on_connected()) */
        conn_refuse(c, REASON_UPSTREAM_UNREACHABLE, NULL, true);
        return;
    }
    c->up = bev;
    c->up_fd = fd;
    forward_start(c);
}

/* Closes <c>'s upstream connection and connects again to the same checked
 * address: retry_connected() sends the request on the fresh connection.
 * The address is checked again when a reload came since it was guarded
 * (conn_upstream_refused()): the request may have waited for its line. */
static void reconnect(struct conn *c)
{
    struct exchange *ex = &c->ex;
    close_upstream(c);
    ex->reused = false;
    ex->reuse_waited = false;
    if (conn_upstream_refused(c))
        return;
    uint64_t t = conn_idle_ms(c);
    if (t > GATEWAY_CONNECT_TIMEOUT_MS)
        t = GATEWAY_CONNECT_TIMEOUT_MS;
    c->uc = upstream_connect_start(c->gw->base, &c->up_addr, 1, ex->port, (unsigned)t,
                                   retry_connected, c);
    if (c->uc == NULL)
        fail(c, "out of memory");
}

/* Sends the request again on a fresh connection to the same checked address. */
static void retry(struct conn *c)
{
    c->ex.retried = true;
    reconnect(c);
}

/* The upstream failed (a reset: it closed with some of the request
 * unread, which a write of the body then meets) before its answer was all
 * taken: libevent reports the error as soon as a write meets it, while
 * what the upstream sent before, an answer perhaps whole (a 413 to an
 * upload), still waits in the socket ahead of the error. A client sending
 * a body reads on and takes a response that comes (RFC 9112 9.6): reads
 * it into the input, at most REST_MAX bytes (nothing more comes after a
 * reset), to be taken as at the upstream's close; an answer it leaves
 * short is cut. The connection is not kept. Returns true when there is an
 * answer to go on with (bytes in the input, or its head taken already). */
static bool take_rest(struct conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->up);
    size_t had = evbuffer_get_length(in);
    c->ex.up_keep = false;
    (void)stream_read_rest(c->up, c->up_fd, had + REST_MAX); /* its error is the one reported */
    if (evbuffer_get_length(in) > had)
        c->ex.rsp_seen = true;
    return c->ex.rsp_head_done || evbuffer_get_length(in) > 0;
}

static void up_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;
    struct exchange *ex = &c->ex;
    /* A read timeout while the socket holds bytes (or the upstream's end):
     * they came while the gateway did not run (stopped, a paused VM, a long
     * stall of its loop), and libevent ran the timeout before the read
     * (epoll_wait() comes back with no event after SIGCONT; a read that
     * fell due with its timeout is reported as the timeout alone). The
     * upstream spoke in time: reading goes on (the bufferevent turned it
     * off), its timeout restarted, and what it reads is progress as any
     * read. Before, the agent got a 502 "did not answer in time". */
    if (socket_read_timeout_held_input(bev, what))
        return;
    /* Until it took the request, its timeouts are steps (answer_started(),
     * request_sent(), forward_start()). */
    if ((what & BEV_EVENT_TIMEOUT) && !ex->req_taken) {
        if (!upstream_taking(c, what)) /* fail() drops what it did not take */
            fail(c, "the upstream stopped taking the request");
        return;
    }
    /* An error before the answer was all taken ends the upstream as its
     * close does, once what it sent before is taken (take_rest()). */
    bool ended =
        (what & BEV_EVENT_EOF) || ((what & BEV_EVENT_ERROR) && !ex->rsp_done && take_rest(c));
    /* Heads held back by backpressure are still in the input. */
    if (ended && !ex->rsp_head_done && read_response_head(c, true) < 0)
        return;
    if (ended && ex->rsp_head_done) {
        if (pump_response(c, true) < 0 || flush_response(c) < 0)
            return;
        /* A reset does not end a body framed by the close: it cuts it. */
        if (ex->rsp_body == BODY_UNTIL_CLOSE && (what & BEV_EVENT_EOF))
            ex->rsp_done = true;
        if (!ex->rsp_done) {
            cut(c); /* truncated by the upstream: the agent must see it cut */
            return;
        }
        maybe_done(c);
        return;
    }
    if (!(what & BEV_EVENT_TIMEOUT) && retryable(c)) {
        retry(c);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT)
        fail(c, "the upstream did not answer in time");
    else
        fail(c, "the upstream closed the connection");
}

void forward_drop_idle(struct conn *c)
{
    if (c->idle_up != NULL) {
        bufferevent_free(c->idle_up);
        c->idle_up = NULL;
    }
    if (c->idle_fd >= 0) {
        close(c->idle_fd);
        c->idle_fd = -1;
    }
    free(c->idle_agent);
    c->idle_agent = NULL;
}

/* An idle connection that sends anything, ends or times out is not reused. */
static void idle_read(struct bufferevent *bev, void *arg)
{
    (void)bev;
    forward_drop_idle(arg);
}

static void idle_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;
    /* Its idle timeout while the client's next request waits unread in
     * the client's socket: the request came in time while the gateway was
     * stopped (SIGSTOP, a paused VM, a long stall of its loop), and
     * libevent ran this timeout before the client's read. Kept for that
     * read (its timeout restarted, once a wait): before, the request went
     * on a new connection. */
    if (!c->idle_put_off && socket_read_timeout_held_for(bev, what, c->fd)) {
        c->idle_put_off = true;
        return;
    }
    forward_drop_idle(c);
}

void forward_park(struct conn *c)
{
    struct exchange *ex = &c->ex;
    if (c->up == NULL || c->state != CS_FORWARD || ex->is_connect || !ex->up_keep ||
        !ex->keep_alive || !ex->req_done || !ex->rsp_done || ex->agent_id == NULL ||
        c->gw->stopping || evbuffer_get_length(bufferevent_get_input(c->up)) != 0 ||
        evbuffer_get_length(bufferevent_get_output(c->up)) != 0)
        return;
    forward_drop_idle(c);
    c->idle_agent = strdup(ex->agent_id);
    if (c->idle_agent == NULL)
        return;
    forward_untrack_upload(c); /* nothing waits in it: it waits for a request */
    c->idle_up = c->up;
    c->idle_fd = c->up_fd;
    c->idle_addr = c->up_addr;
    memcpy(c->idle_ip, ex->ip, sizeof(c->idle_ip)); /* the address of c->up, formatted */
    c->idle_port = ex->port;
    c->up = NULL;
    c->up_fd = -1;
    c->idle_put_off = false;
    bufferevent_setcb(c->idle_up, idle_read, NULL, idle_event, c);
    /* Idle for idle_timeout at most: the exchange's own timeouts mostly
     * say so already (its last read armed the read timer), and setting
     * them again costs libevent a timer re-armed in its heap. The write
     * timeout has nothing to time: nothing is queued. */
    if (!ex->up_idle_timeouts) {
        struct timeval tv = idle_tv(c);
        bufferevent_set_timeouts(c->idle_up, &tv, &tv);
    }
    /* EV_WRITE as it was: forward_start() turns it on */
    if (!(bufferevent_get_enabled(c->idle_up) & EV_READ))
        bufferevent_enable(c->idle_up, EV_READ);
    /* What the connection sends or its end, once polled, is handled before
     * any other callback of the turn: before a client's request could take
     * the connection up (forward_try_reuse()). */
    c->idle_turn = c->gw->turns;
    c->idle_first = bufferevent_priority_set(c->idle_up, GATEWAY_PRI_FIRST) == 0;
    if (!c->idle_first) /* an event of it queued in this turn: looked at with a peek */
        (void)bufferevent_priority_set(c->idle_up, GATEWAY_PRI_NORMAL);
}

/* True when nothing waits in the idle connection's socket: no byte and no
 * end. idle_read() and idle_event() tell only once the loop reads the
 * socket again, and a pipelined request is taken up before that, in the
 * turn that ended the exchange: after a response that ended exactly where
 * a read did, what the upstream sent behind it (a forged response, its
 * close) would otherwise be found only once the next request went out, and
 * be taken for its answer. A later turn has polled the socket, and what the
 * poll found ran first (GATEWAY_PRI_FIRST: forward_park()), so the
 * connection would be gone; only a request of the turn that kept it has
 * the socket looked at (recv(MSG_PEEK), a system call). */
static bool idle_is_quiet(const struct conn *c)
{
    return (c->idle_first && c->gw->turns != c->idle_turn) || socket_is_quiet(c->idle_fd);
}

/* True when the kept connection a request took up (c->up) is as quiet as
 * forward_try_reuse() found it: its request waited for the log line, its
 * upstream's reads on but no callback (conn_after_log()), so what the
 * upstream sent meanwhile waits in its input or socket, its end in the
 * socket (a read that met it turned reading off, unreported). The wait
 * kept c->up's events at GATEWAY_PRI_FIRST (forward_try_reuse()), and
 * nothing turns its reading on meanwhile: when a later turn than the one
 * the wait began in runs this (the release comes from the writer's
 * eventfd, at GATEWAY_PRI_NORMAL) and reading is still on, every poll
 * since found the socket quiet, or its read (bytes, which stay in the
 * input; an end or an error, which turn reading off) ran first, so the
 * socket is not looked at (recv(MSG_PEEK), a system call). The events go
 * back to GATEWAY_PRI_NORMAL for the exchange; they cannot while one is
 * queued (the socket spoke in this turn): not quiet then. */
static bool kept_is_quiet(struct conn *c)
{
    const struct exchange *ex = &c->ex;
    if (evbuffer_get_length(bufferevent_get_input(c->up)) != 0)
        return false;
    if (!ex->reuse_wait_first)
        return socket_is_quiet(c->up_fd);
    if (bufferevent_priority_set(c->up, GATEWAY_PRI_NORMAL) != 0)
        return false;
    return (c->gw->turns != ex->reuse_wait_turn && (bufferevent_get_enabled(c->up) & EV_READ)) ||
           socket_is_quiet(c->up_fd);
}

bool forward_try_reuse(struct conn *c)
{
    struct exchange *ex = &c->ex;
    if (c->idle_up == NULL)
        return false;
    bool match = !ex->is_connect && c->idle_port == ex->port && ex->agent_id != NULL &&
                 strcmp(c->idle_agent, ex->agent_id) == 0 &&
                 evbuffer_get_length(bufferevent_get_input(c->idle_up)) == 0 && idle_is_quiet(c) &&
                 (!c->idle_first || bufferevent_priority_set(c->idle_up, GATEWAY_PRI_NORMAL) == 0);
    size_t i = 0;
    while (match && i < ex->naddrs && !ipaddr_equal(&ex->addrs[i], &c->idle_addr))
        i++;
    if (!match || i == ex->naddrs) {
        forward_drop_idle(c);
        return false;
    }
    c->up = c->idle_up;
    c->up_fd = c->idle_fd;
    c->up_addr = c->idle_addr;
    c->idle_up = NULL;
    c->idle_fd = -1;
    free(c->idle_agent);
    c->idle_agent = NULL;
    ex->reused = true;
    memcpy(ex->ip, c->idle_ip, sizeof(ex->ip));
    conn_publish_egress(c);
    c->state = CS_CONNECT; /* while the log line is written: as a connect's wait */
    /* The connection was quiet when taken up; a wait for the log line lets
     * the upstream speak (or end) before the request went out: a forged
     * answer, never to be taken for this request's. forward_start() looks
     * again then, not when the request goes at once (no peek a request).
     * One that spoke is replaced by a fresh connection to the same
     * address (reconnect()): nothing of the request went out, so any
     * method, its body still waiting in the client's input (CS_CONNECT). */
    if (conn_after_log(c, forward_start)) {
        /* What the upstream sends or its end, once polled, is taken (and
         * reading turned off) before the log's release of the request:
         * kept_is_quiet() then needs no peek. */
        ex->reuse_waited = true;
        ex->reuse_wait_turn = c->gw->turns;
        ex->reuse_wait_first = bufferevent_priority_set(c->up, GATEWAY_PRI_FIRST) == 0;
        if (!ex->reuse_wait_first) /* an event of it queued: looked at with a peek */
            (void)bufferevent_priority_set(c->up, GATEWAY_PRI_NORMAL);
    }
    return true;
}
