#include "gate/conn.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "gate/addr_guard.h"
#include "gate/backlog.h"
#include "gate/deny.h"
#include "gate/gateway.h"
#include "gate/held_body.h"
#include "gate/kept_decision.h"
#include "gate/max_forwards.h"
#include "gate/method_override.h"
#include "gate/progress.h"
#include "gate/stream.h"
#include "gate/tunnel.h"
#include "policy/policy.h"
#include "shape/admit.h"
#include "shape/quota.h"
#include "util/http_date.h"
#include "util/shortage.h"
#include "util/socket_quiet.h"
#include "util/units.h"
#include "util/wall_clock.h"
#include "watch/agent_hash.h"
#include "watch/bus.h"
#include "watch/log_jsonl.h"

static void on_read(struct bufferevent *bev, void *arg);
static void on_write(struct bufferevent *bev, void *arg);
static void on_event(struct bufferevent *bev, short what, void *arg);
static void on_head_deadline(evutil_socket_t fd, short what, void *arg);

uint64_t conn_idle_ms(const struct conn *c)
{
    /* the exchange's (the policy it was decided under), or, between
     * exchanges, the policy in force's */
    uint64_t ms =
        c->ex.pol != NULL ? c->ex.idle_timeout_ms : c->gw->current->policy->limits.idle_timeout_ms;
    return ms > 0 ? ms : 60000;
}

void conn_set_client_timeouts(struct conn *c, bool reading)
{
    uint64_t idle = conn_idle_ms(c);
    uint64_t step_ms = drain_step_ms(idle);
    drain_reset(&c->drain);
    /* The same timeouts set already (drain_step_ms is theirs while not
     * 0), with nothing queued, so no write timer running from an earlier
     * start: nothing to change (each setting costs libevent its pending
     * events' timers re-armed). */
    if (c->drain_step_ms == step_ms && c->client_read_timed == reading &&
        evbuffer_get_length(bufferevent_get_output(c->client)) == 0)
        return;
    struct timeval tv = timeval_of_ms(idle);
    struct timeval step = timeval_of_ms(step_ms);
    c->drain_step_ms = step_ms;
    c->client_read_timed = reading;
    bufferevent_set_timeouts(c->client, reading ? &tv : NULL, &step);
}

/* A write timeout on the client: a step of conn_set_client_timeouts().
 * Returns true when the client made progress or has not been stalled for
 * idle_timeout yet: its writing is enabled again (libevent turned it off)
 * and the exchange goes on. */
static bool client_still_taking(struct conn *c)
{
    if (c->drain_step_ms == 0 ||
        !drain_keeps(&c->drain, drain_send_queue(c->fd), c->drain_step_ms, conn_idle_ms(c)))
        return false;
    bufferevent_enable(c->client, EV_WRITE);
    return true;
}

size_t conn_head_limit(const struct conn *c)
{
    uint64_t h =
        c->ex.pol != NULL ? c->ex.header_bytes : c->gw->current->policy->limits.header_bytes;
    if (h == 0)
        h = 32 * 1024;
    if (h > 16 * 1024 * 1024)
        h = 16 * 1024 * 1024;
    return (size_t)h;
}

/* How long the next request head may take: idle_timeout on a connection
 * that counts against an agent. One that counts against none (a new one,
 * or one whose requests were all refused before an agent was known: no
 * credentials, a wrong token, a source no agent has) gets what is left of
 * min(HEAD_DEADLINE_MS, idle_timeout) from its accept, however many such
 * refusals it collects, so that idle or trickling sockets, or a stream of
 * refused requests, cannot hold the global pool; 0 when that is spent. */
static uint64_t ms_since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t since = (int64_t)(now.tv_sec - t->tv_sec) * 1000 + (now.tv_nsec - t->tv_nsec) / 1000000;
    return since > 0 ? (uint64_t)since : 0;
}

static uint64_t next_head_ms(const struct conn *c)
{
    uint64_t idle = conn_idle_ms(c);
    if (c->counted_agent != NULL)
        return idle;
    uint64_t cap = idle < HEAD_DEADLINE_MS ? idle : HEAD_DEADLINE_MS;
    uint64_t since = ms_since(&c->t_accept);
    return since < cap ? cap - since : 0;
}

void conn_head_wait_reloaded(struct conn *c)
{
    if (c->state != CS_HEAD || c->ex.active || c->head_paused || c->log_waiting ||
        !evtimer_pending(c->timer, NULL))
        return;
    uint64_t left = next_head_ms(c); /* under the policy now in force */
    if (c->counted_agent != NULL) {
        uint64_t since = ms_since(&c->t_head_wait);
        left = since < left ? left - since : 0;
    }
    struct timeval tv = timeval_of_ms(left);
    conn_timer_add(c, &tv); /* 0: on_head_deadline() at the loop's next turn */
}

struct event *conn_progress_mem(struct conn *c)
{
    return (struct event *)(void *)((char *)c->ev_mem + event_get_struct_event_size());
}

void conn_accept(struct gateway *gw, struct listener *l, evutil_socket_t fd,
                 const struct sockaddr *sa, socklen_t salen)
{
    (void)salen;
    /* the head timer, then the progress timer (conn.ev_mem) */
    struct conn *c = calloc(1, sizeof(*c) + 2 * event_get_struct_event_size());
    if (c == NULL) {
        close(fd);
        return;
    }
    c->gw = gw;
    c->id = ++gw->next_conn_id;
    c->fd = fd;
    c->up_fd = -1;
    c->idle_fd = -1;
    c->origin.is_unix = listener_is_unix(l);
    uint16_t port;
    if (!c->origin.is_unix) /* TCP_NODELAY comes from the listener (listener.c) */
        sockaddr_to_ipaddr(sa, &c->origin.addr, &port);
    c->client = bufferevent_socket_new(gw->base, fd, 0);
    if (evtimer_assign((struct event *)(void *)c->ev_mem, gw->base, on_head_deadline, c) == 0)
        c->timer = (struct event *)(void *)c->ev_mem;
    c->next = gw->conns;
    if (gw->conns != NULL)
        gw->conns->prev = c;
    gw->conns = c;
    gw->nconns++;
    gw->counters.accepted++;
    if (c->client == NULL || c->timer == NULL) {
        conn_free(c);
        return;
    }
    bufferevent_setcb(c->client, on_read, on_write, on_event, c);
    (void)stream_own_reads(c->client); /* else libevent reads, with its FIONREAD */
    c->drain_cb = evbuffer_add_cb(bufferevent_get_output(c->client), drain_on_write, &c->drain);
    c->backlog_cb = backlog_track(bufferevent_get_output(c->client), BACKLOG_TO_CLIENT);
    if (c->drain_cb == NULL || c->backlog_cb == NULL) {
        conn_free(c);
        return;
    }
    c->state = CS_HEAD;
    if (stream_set_read_cap(c->client, conn_head_limit(c)) < 0) {
        conn_free(c);
        return;
    }
    conn_set_client_timeouts(c, false); /* the head deadline times the reading */
    clock_gettime(CLOCK_MONOTONIC, &c->t_accept);
    c->t_head_wait = c->t_accept;
    struct timeval tv = timeval_of_ms(next_head_ms(c));
    conn_timer_add(c, &tv);
    bufferevent_enable(c->client, EV_READ);
    /* The head is nearly always there already: read in this round (the
     * listener's event and this read event share the base's middle priority). */
    stream_read_soon(c->client);
}

bool conn_is_idle(const struct conn *c)
{
    return c->state == CS_LINGER || (c->state == CS_HEAD && !c->ex.active &&
                                     evbuffer_get_length(bufferevent_get_input(c->client)) == 0);
}

/* What the gateway still holds toward a plain request's upstream when the
 * exchange ends or that connection is dropped (a client that cut its
 * upload, an upstream that failed) is never sent: bytes_up, what the
 * upstream received, leaves it out (drop_untaken() in forward.c does the
 * same for what it resets). */
static void forget_unsent(struct conn *c)
{
    struct exchange *ex = &c->ex;
    if (c->up == NULL || !ex->active || ex->is_connect || ex->end_published || ex->unsent_dropped)
        return;
    size_t held = evbuffer_get_length(bufferevent_get_output(c->up));
    progress_flush(c); /* progress events count what was handed on, this too */
    ex->bytes_up = ex->bytes_up > held ? ex->bytes_up - held : 0;
    ex->unsent_dropped = true;
}

/* Of the response bytes counted in bytes_down, those the gateway still
 * holds for the client (its output, forward.c's scratch) when a plain
 * exchange ends are never delivered (a client given up on, a response cut):
 * the body being the end of what the exchange sent the client, they are
 * the last min(held, bytes_down) of it. bytes_down then counts what the
 * client's socket took, as a tunnel's does. */
static void forget_undelivered(struct conn *c)
{
    struct exchange *ex = &c->ex;
    if (ex->is_connect || c->client == NULL)
        return;
    size_t held = evbuffer_get_length(bufferevent_get_output(c->client));
    if (c->scratch != NULL)
        held += evbuffer_get_length(c->scratch);
    ex->bytes_down -= held < ex->bytes_down ? held : ex->bytes_down;
}

static void drop_upstream(struct conn *c)
{
    forget_unsent(c);
    if (c->rreq != NULL) {
        resolve_cancel(c->rreq);
        c->rreq = NULL;
    }
    if (c->uc != NULL) {
        upstream_connect_cancel(c->uc);
        c->uc = NULL;
    }
    if (c->up != NULL) {
        forward_untrack_upload(c);
        bufferevent_free(c->up);
        c->up = NULL;
    }
    if (c->up_fd >= 0) {
        close(c->up_fd);
        c->up_fd = -1;
    }
}

/* <ex>'s agent is <id>: hashed once, here, for the watchers that look it
 * up at each of its events (watch/agent_hash.h). */
static void set_agent(struct exchange *ex, const char *id)
{
    ex->agent_id = id;
    ex->agent_hash = id != NULL ? agent_hash(id) : 0;
}

/* The terms of agent <a> (NULL: the default) under policy <p> that the
 * gate applies itself after the decision: report mode for its own checks
 * (conn_gate_denies()) and the Encrypted Client Hello setting of a
 * CONNECT's first bytes (connect.c). Set again by a reload that keeps the
 * exchange (conn_redecide()): first bytes that come after it are judged
 * as the policy in force says, not as the one the 200 was sent under. */
static void set_agent_terms(struct exchange *ex, const struct policy *p, const struct agent *a)
{
    ex->mode = a != NULL ? a->mode : AGENT_ENFORCE;
    ex->ech_allowed = policy_allows_encrypted_hello(p, a);
}

static void fill_event(const struct conn *c, struct egress_event *ev, enum event_kind kind)
{
    const struct exchange *ex = &c->ex;
    memset(ev, 0, sizeof(*ev));
    ev->kind = kind;
    clock_gettime(CLOCK_REALTIME, &ev->ts);
    ev->id = ex->id;
    ev->agent = ex->agent_id;
    ev->agent_hash = ex->agent_hash;
    ev->method = ex->method[0] != '\0' ? ex->method : NULL;
    ev->method_bit = ex->mbit;
    ev->scheme = !ex->have_target ? NULL : ex->is_connect ? "https" : "http";
    ev->host = ex->have_target ? ex->target.name : NULL;
    ev->port = ex->have_target ? ex->port : 0;
    ev->path = ex->path;
    ev->tier = ex->dec.tier;
    ev->rule = ex->dec.rule;
    ev->owner = ex->dec.owner;
    ev->grant = ex->dec.grant;
    ev->verdict = ex->verdict;
    ev->reason = ex->reason;
    ev->ip = ex->ip[0] != '\0' ? ex->ip : NULL;
    ev->redecided = ex->redecided;
    ev->again = ex->again;
    ev->source = c->origin.is_unix ? NULL : &c->origin.addr;
    ev->credentials = ex->credentials;
}

void conn_publish_egress(struct conn *c)
{
    struct egress_event ev;
    if (c->ex.egress_published)
        return;
    c->ex.egress_published = true;
    fill_event(c, &ev, EVENT_EGRESS);
    ev.head_bytes = c->ex.head_bytes;
    bus_publish(&c->gw->bus, &ev);
}

void conn_end_exchange(struct conn *c)
{
    struct exchange *ex = &c->ex;
    if (!ex->active)
        return;
    if (!ex->egress_published)
        conn_publish_egress(c);
    if (!ex->end_published) {
        struct egress_event ev;
        struct timespec now;
        forget_unsent(c);
        forget_undelivered(c);
        ex->end_published = true;
        progress_flush(c); /* the upload bytes not yet in a progress event */
        clock_gettime(CLOCK_MONOTONIC, &now);
        fill_event(c, &ev, EVENT_EGRESS_END);
        ev.status = ex->status;
        ev.bytes_up = ex->bytes_up;
        ev.bytes_down = ex->bytes_down;
        int64_t ms = (int64_t)(now.tv_sec - ex->t_decided.tv_sec) * 1000 +
                     (now.tv_nsec - ex->t_decided.tv_nsec) / 1000000;
        ev.ms = ms > 0 ? (uint64_t)ms : 0;
        bus_publish(&c->gw->bus, &ev);
    }
    c->request_unfinished = ex->req_body != BODY_NONE && !ex->req_done;
    quota_flow_close(ex->flow);
    free(ex->path);
    kept_decision_free(ex->kept); /* after the events, which read it */
    if (ex->uphead != NULL) {
        /* Kept, empty, for the connection's next request (forward_prepare()) */
        evbuffer_drain(ex->uphead, evbuffer_get_length(ex->uphead));
        if (c->spare_head == NULL)
            c->spare_head = ex->uphead;
        else
            evbuffer_free(ex->uphead);
    }
    gw_policy_unref(ex->pol);
    gw_policy_unref(ex->redecided_pol);
    memset(ex, 0, sizeof(*ex));
}

/* <c> no longer counts against its agent's connections. */
static void release_agent(struct conn *c)
{
    if (c->counted_agent != NULL) {
        gateway_agent_release(c->gw, c->counted_agent, c->counted_agent_hash);
        free(c->counted_agent);
        c->counted_agent = NULL;
    }
}

/* Wipes what is still unread in the client's input <in> before it is
 * dropped or freed, which libevent does to its chains as they are: a head
 * never finished (a client that left, or ran out of time) holds a
 * Proxy-Authorization that was never read, so never wiped. Bounded by the
 * read cap (stream_set_read_cap(): a head's limit, FLOW_HIGH); only for
 * input that is never read again. */
static void wipe_unread(struct evbuffer *in)
{
    struct evbuffer_iovec v[8];
    struct evbuffer_ptr at;
    size_t left = evbuffer_get_length(in);
    if (left == 0 || evbuffer_ptr_set(in, &at, 0, EVBUFFER_PTR_SET) != 0)
        return;
    while (left > 0) {
        int n = evbuffer_peek(in, -1, &at, v, 8);
        size_t done = 0;
        for (int i = 0; i < n && i < 8; i++) {
            explicit_bzero(v[i].iov_base, v[i].iov_len);
            done += v[i].iov_len;
        }
        if (n <= 0 || done == 0 || done >= left ||
            evbuffer_ptr_set(in, &at, done, EVBUFFER_PTR_ADD) != 0)
            return;
        left -= done;
    }
}
static void log_wait_unlink(struct conn *c);

void conn_free(struct conn *c)
{
    struct gateway *gw = c->gw;
    if (c->tunnel != NULL) {
        tunnel_settle(c->tunnel); /* one cut while open: what its reset drops is not counted */
        c->ex.bytes_up += tunnel_bytes_up(c->tunnel);
        c->ex.bytes_down += tunnel_bytes_down(c->tunnel);
        /* The tunnel borrows the exchange's flow, which conn_end_exchange()
         * closes before the tunnel goes: it lets go of it first. */
        tunnel_set_flow(c->tunnel, NULL);
    }
    connect_settle(c);  /* a CONNECT's first bytes, cut before its tunnel */
    forward_on_free(c); /* a response cut before its end */
    conn_end_exchange(c);
    drop_upstream(c);
    forward_drop_idle(c);
    if (c->tunnel != NULL)
        tunnel_free(c->tunnel); /* closes both descriptors */
    if (c->timer != NULL)
        event_del(c->timer); /* in c->ev_mem, freed with <c> */
    if (c->hangup_timer != NULL)
        event_free(c->hangup_timer);
    if (c->progress_timer != NULL)
        event_del(c->progress_timer); /* in c->ev_mem too */
    if (c->client != NULL) {
        /* go_tunnel() (connect.c) frees the bufferevent, and the callback
         * with its output, itself: then c->client is NULL. */
        if (c->drain_cb != NULL)
            evbuffer_remove_cb_entry(bufferevent_get_output(c->client), c->drain_cb);
        backlog_untrack(bufferevent_get_output(c->client), c->backlog_cb, BACKLOG_TO_CLIENT);
        wipe_unread(bufferevent_get_input(c->client));
        bufferevent_free(c->client);
    }
    if (c->scratch != NULL)
        evbuffer_free(c->scratch);
    if (c->spare_head != NULL)
        evbuffer_free(c->spare_head);
    if (c->fd >= 0)
        close(c->fd);
    release_agent(c);
    log_wait_unlink(c);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        gw->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    gw->nconns--;
    free(c);
    gateway_conn_gone(gw);
}

/* What <c>'s CONNECT passed to the client before its tunnel opened (the
 * server's first bytes) and a cut's reset drops, its output and what its
 * TCP socket never sent (SIOCOUTQNSD), is not counted in bytes_down: as
 * for a tunnel the gateway cuts (tunnel.c), the count is what the client
 * got. They are the last of the stream (the 200, which is not counted,
 * comes first): the last min(held, bytes_down) of it. Before, a client
 * that read nothing of an answer cut by the server's reset was counted all
 * of it (119808 bytes for the 6144 it got). */
static void forget_cut_down(struct conn *c)
{
    struct exchange *ex = &c->ex;
    if (!ex->active || !ex->is_connect || ex->end_published || c->client == NULL ||
        ex->bytes_down == 0)
        return;
    int64_t unsent = c->fd >= 0 ? drain_unsent(c->fd) : -1;
    uint64_t held = evbuffer_get_length(bufferevent_get_output(c->client)) +
                    (unsent > 0 ? (uint64_t)unsent : 0);
    ex->bytes_down -= held < ex->bytes_down ? held : ex->bytes_down;
}

void conn_cut(struct conn *c)
{
    if (c->state == CS_PEEK || c->state == CS_HELLO || c->state == CS_FLUSH) {
        forget_cut_down(c);
        if (c->fd >= 0)
            stream_reset_on_close(c->fd);
        if (c->up_fd >= 0)
            stream_reset_on_close(c->up_fd);
    }
    conn_free(c); /* an open tunnel: tunnel_free() resets both sides */
}

/* Drops what the client sent and the gateway read (lingering). */
static void drop_client_input(struct conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->client);
    wipe_unread(in); /* a head cut short among them: its secret */
    evbuffer_drain(in, evbuffer_get_length(in));
}

/* True when the client sent bytes, beyond the first <skip> of its input,
 * that wait unread: in its input, or in its socket's receive queue. */
static bool client_unread_beyond(const struct conn *c, size_t skip)
{
    int n = 0;
    return evbuffer_get_length(bufferevent_get_input(c->client)) > skip ||
           (ioctl(c->fd, FIONREAD, &n) == 0 && n > 0);
}

/* The output is written: closes <c>. Not at once when the client's bytes
 * wait unread, or are still to come (a request body the exchange ended
 * without: an early answer from the origin, a refusal; bytes of it that
 * arrive after the close count as much as those already here): that close
 * would be a reset, and with it the kernel drops what of the answer its
 * send queue still holds (with a pipelined request, the end of an earlier
 * answer too). So the gateway ends its side (shutdown: the queue is
 * delivered, then the end) and reads and drops what the client sends until
 * it ends its own, for at most LINGER_MS (a lingering close). A clean
 * close (the request complete, nothing unread) is immediate. */
static void close_flushed(struct conn *c)
{
    if (c->state != CS_LINGER && c->client != NULL &&
        (c->request_unfinished || client_unread_beyond(c, 0)) && shutdown(c->fd, SHUT_WR) == 0) {
        struct timeval tv = timeval_of_ms(LINGER_MS);
        /* The exchange is over: its end line now, not at the close, and
         * neither its upstream nor the agent's connection count is kept
         * while the gateway only drops what the client still sends. */
        conn_end_exchange(c);
        drop_upstream(c);
        forward_drop_idle(c);
        release_agent(c);
        c->state = CS_LINGER;
        c->drain_step_ms = 0;
        bufferevent_set_timeouts(c->client, NULL, NULL);
        drop_client_input(c);
        conn_timer_add(c, &tv);
        bufferevent_enable(c->client, EV_READ);
        return;
    }
    conn_free(c);
}

/* Queues nothing more: closes once the output is written. The caller must
 * not touch <c> afterwards. */
static void close_when_flushed(struct conn *c)
{
    /* A client that reset the connection takes nothing more: what waits
     * for it (a 200 whose send failed, queued) is never written, libevent
     * having turned writing off on the error, so there is no flush to
     * wait for (nor can it be drained: a socket bufferevent's output is
     * frozen at its start). */
    if (c->client_reset) {
        conn_free(c);
        return;
    }
    c->state = CS_CLOSING;
    bufferevent_disable(c->client, EV_READ);
    evtimer_del(c->timer);
    conn_set_client_timeouts(c, false);
    /* Held for the log, the close (a refusal without an answer) waits too:
     * log_release() makes it. */
    if (evbuffer_get_length(bufferevent_get_output(c->client)) == 0 && !c->log_hold)
        close_flushed(c);
}

void conn_stop_idle(struct conn *c)
{
    /* Between requests, a kept connection may still owe its client the
     * answer of the last one (a refusal): held for its log line, or not
     * taken yet. That answer was decided and is logged: it goes out first,
     * within --grace, then the connection closes (log_release(), on_write). */
    if (c->state == CS_HEAD &&
        (c->log_hold || evbuffer_get_length(bufferevent_get_output(c->client)) > 0)) {
        close_when_flushed(c);
        return;
    }
    conn_free(c);
}

/* --- write-ahead ------------------------------------------------------------
 * A decision takes effect only once its agent_egress line is in the log
 * (SPEC.md, Decision log): the answer of a refusal (or the close that
 * stands for one) is held in the client's output, a request or a tunnel's
 * first bytes wait before going up. The loop never waits: the log's writer
 * thread writes, and wakes the loop (conn_log_written()) for all the
 * connections its round let go. */

static void log_wait_link(struct conn *c, uint64_t seq)
{
    struct gateway *gw = c->gw;
    if (seq > c->log_seq)
        c->log_seq = seq;
    if (c->log_waiting)
        return;
    c->log_waiting = true;
    c->log_prev = NULL;
    c->log_next = gw->log_waiters;
    if (gw->log_waiters != NULL)
        gw->log_waiters->log_prev = c;
    gw->log_waiters = c;
}

static void log_wait_unlink(struct conn *c)
{
    if (!c->log_waiting)
        return;
    if (c->log_prev != NULL)
        c->log_prev->log_next = c->log_next;
    else
        c->gw->log_waiters = c->log_next;
    if (c->log_next != NULL)
        c->log_next->log_prev = c->log_prev;
    c->log_next = c->log_prev = NULL;
    c->log_waiting = false;
    c->log_seq = 0;
}

/* The number of the log line just handed over when the log has still to
 * write it (the wake-up asked for), else 0: the decision may take effect. */
static uint64_t log_behind(const struct conn *c)
{
    struct log_jsonl *log = c->gw->log;
    if (log == NULL)
        return 0;
    uint64_t seq = log_jsonl_seq(log);
    return log_jsonl_wait(log, seq) ? 0 : seq;
}

/* Holds what <c>'s client is sent from now on until the log has the
 * decision line just published. */
static void hold_client_for_log(struct conn *c)
{
    uint64_t seq = c->client != NULL ? log_behind(c) : 0;
    if (seq == 0)
        return;
    bufferevent_disable(c->client, EV_WRITE);
    c->log_hold = true;
    log_wait_link(c, seq);
}

/* An upstream that sends while its request waits for the log line: what
 * one read took stays in its input (forward_start() takes it, or finds a
 * kept connection spoke), and reading stops until the request goes, which
 * turns it on again. Without this, an origin could fill the gateway's
 * memory for as long as the file holds the line. Only an upstream that
 * sends before its request gets here: no epoll_ctl() a request. */
static void up_read_while_held(struct bufferevent *bev, void *arg)
{
    (void)arg;
    bufferevent_disable(bev, EV_READ);
}

bool conn_after_log(struct conn *c, void (*go)(struct conn *c))
{
    uint64_t seq = log_behind(c);
    if (seq == 0) {
        go(c);
        return false;
    }
    /* Nothing goes up meanwhile: only <go> sends. A CONNECT's sides are
     * not read either, nor its peek window timed (it is over): what they
     * send is the tunnel's. A plain request waits in CS_CONNECT, its client
     * watched as during a connect, its upstream's events left as they are
     * (no epoll_ctl() a request; a kept one's raised to the first priority
     * by forward_try_reuse(), so that what it sends is taken before the
     * release), its callback only up_read_while_held(): forward_start()
     * sets them. What a fresh upstream sent before its
     * request, if any, it then takes as an early answer with its next
     * bytes; a kept one that sent anything or ended meanwhile is not used
     * (forward_try_reuse(), forward_start()). */
    if (c->tunnel != NULL) {
        tunnel_stop(c->tunnel); /* decided again, denied: only its cut waits */
    } else if (c->ex.is_connect && c->client != NULL) {
        bufferevent_disable(c->up, EV_READ | EV_WRITE);
        bufferevent_disable(c->client, EV_READ);
    } else if (c->up != NULL) {
        bufferevent_setcb(c->up, up_read_while_held, NULL, NULL, NULL);
    }
    /* A wait like any other: one that lasts idle_timeout (a file that does
     * not take the line) is given up (log_gives_up()). Not a cut that
     * waits: that is the denial's own effect (a tunnel's, a plain
     * request's decided again: deny_plain_again()). */
    if (c->tunnel == NULL && (c->ex.is_connect || c->ex.verdict != VERDICT_DENY)) {
        struct timeval idle = timeval_of_ms(conn_idle_ms(c));
        conn_timer_add(c, &idle);
    }
    c->log_go = go;
    log_wait_link(c, seq);
    return true;
}

/* True when c->timer times <c>'s wait for its log line (conn_after_log()),
 * and, when <over>, gives the wait up: the decision never took effect, and
 * now will not (nothing went upstream): <c> is closed, a tunnel's sides
 * reset, as a client that left would leave it (its end line without an
 * answer's status, a CONNECT's 200 aside). The caller must not touch <c>
 * afterwards then. */
static bool log_gives_up(struct conn *c, bool over)
{
    if (!c->log_waiting || c->log_go == NULL || c->tunnel != NULL)
        return false;
    if (over)
        conn_cut(c);
    return true;
}

static bool client_hung_up(const struct conn *c);

/* True when <c> is a CONNECT past its 200 whose tunnel waited for its line
 * (conn_after_log(): neither side read meanwhile, so no read saw it) and
 * whose TCP client reset its connection in that wait (its socket hung up:
 * client_hung_up()). Then nothing it sent is to go upstream, and no
 * tunnel opens, as after a reset in the peek window (connect.c) or in a
 * wait for the bandwidth bucket (ended_in_bucket_wait()); before, what it
 * sent behind a ClientHello went up once the line was in. A unix client's
 * close is the end of its side, after which what it sent still goes. One
 * poll() a wait, none on the way that did not wait. */
static bool reset_in_tunnel_wait(const struct conn *c)
{
    return c->ex.is_connect && c->tunnel == NULL && c->client != NULL && !c->origin.is_unix &&
           (c->state == CS_PEEK || c->state == CS_HELLO) && client_hung_up(c);
}

/* <c>'s lines are in: what waited takes effect. */
static void log_release(struct conn *c)
{
    void (*go)(struct conn * c) = c->log_go;
    if (log_gives_up(c, false))
        evtimer_del(c->timer); /* the wait's limit: over */
    log_wait_unlink(c);
    c->log_go = NULL;
    if (c->log_hold) {
        c->log_hold = false;
        bufferevent_enable(c->client, EV_WRITE); /* writes what waits in its output */
        if (c->state == CS_CLOSING && evbuffer_get_length(bufferevent_get_output(c->client)) == 0) {
            close_flushed(c);
            return;
        }
    }
    if (go != NULL && reset_in_tunnel_wait(c)) {
        c->client_reset = true;
        conn_cut(c); /* its upstream reset, as an open tunnel's would be */
        return;
    }
    if (go != NULL)
        go(c);
}

void conn_log_written(struct gateway *gw)
{
    struct conn *c, *next;
    /* log_jsonl_wait() asks for the next wake-up for those left. A release
     * touches no connection but its own (nor links another). */
    for (c = gw->log_waiters; c != NULL; c = next) {
        next = c->log_next;
        if (log_jsonl_wait(gw->log, c->log_seq))
            log_release(c);
    }
}

/* A refusal keeps the client connection when the request left nothing
 * unread and the reason says nothing about the connection itself: an agent
 * that is told "no" for one host may go on asking for others on the same
 * connection, each request decided and logged on its own. Not a CONNECT
 * with bytes behind its head (a client that did not wait for the 200: an
 * optimistic ClientHello): they are tunnel bytes, never a next request. */
static bool refusal_keeps_connection(const struct conn *c, enum deny_reason reason, bool respond)
{
    const struct exchange *ex = &c->ex;
    if (!respond || !ex->refusal_keeps || c->gw->stopping)
        return false;
    /* A client that ended its side (client_eof) has nothing more to ask:
     * kept, the connection would be found at its end and closed before the
     * refusal went out. */
    if (ex->client_eof || ex->client_close)
        return false;
    if (next_head_ms(c) == 0) /* no time left for another head (see there) */
        return false;
    if (c->state == CS_TUNNEL || c->state == CS_FLUSH || c->state == CS_PEEK ||
        c->state == CS_HELLO || (ex->is_connect && client_unread_beyond(c, ex->head_pending)))
        return false;
    switch (reason) {
    case REASON_BAD_REQUEST:          /* the framing is not to be trusted */
    case REASON_TOO_MANY_CONNECTIONS: /* the connection is the problem */
    case REASON_GATEWAY_OVERLOADED:   /* its descriptor is better given back */
    case REASON_SNI_MISMATCH:         /* inside a tunnel: nothing to answer */
    case REASON_ENCRYPTED_CLIENT_HELLO:
        return false;
    default:
        return true;
    }
}

/* The gateway answered the current exchange itself (a refusal, or
 * conn_answer_own()): on to the next request when <keep>, else closing
 * once the answer is out. */
static void answered_here(struct conn *c, bool keep)
{
    struct exchange *ex = &c->ex;
    if (keep) {
        /* The head may still be in the buffer (an agent refused before it was consumed). */
        evbuffer_drain(bufferevent_get_input(c->client), ex->head_pending);
        ex->head_pending = 0;
        ex->keep_alive = true;
        conn_exchange_done(c);
        return;
    }
    conn_end_exchange(c);
    close_when_flushed(c);
}

void conn_refuse(struct conn *c, enum deny_reason reason, const char *detail, bool respond)
{
    struct exchange *ex = &c->ex;
    bool keep = refusal_keeps_connection(c, reason, respond);
    ex->verdict = VERDICT_DENY;
    ex->reason = reason;
    c->gw->counters.denied++;
    drop_upstream(c);
    conn_publish_egress(c);
    hold_client_for_log(c);
    if (respond) {
        struct deny_info d = {
            .reason = reason,
            .host = ex->have_target ? ex->target.name : NULL,
            .port = ex->port,
            .agent = ex->agent_id,
            .method = ex->method[0] != '\0' ? ex->method : NULL,
            .ip = ex->ip[0] != '\0' ? ex->ip : NULL,
            .detail = detail,
            .retry_after = ex->retry_after > 0 ? ex->retry_after : 1,
            .keep_alive = keep,
            .head_only = ex->mbit == METHOD_HEAD,
            .date_field = http_date_field_of(&c->gw->date_clock, wall_clock_seconds()),
        };
        int st = deny_write(&d, bufferevent_get_output(c->client));
        ex->status = st > 0 ? st : 0;
        if (st < 0)
            keep = false;
    } else if (ex->status == 0) {
        ex->status = reason_status(reason);
    }
    answered_here(c, keep);
}

void conn_answer_own(struct conn *c, int status, own_answer_fn *write)
{
    bool keep = refusal_keeps_connection(c, REASON_NONE, true);
    drop_upstream(c);
    conn_publish_egress(c);
    hold_client_for_log(c);
    c->ex.status = status;
    if (write(c, bufferevent_get_output(c->client), keep) < 0)
        keep = false;
    answered_here(c, keep);
}

#define SHORT_TELL_EVERY_MS 60000

void conn_refuse_short(struct conn *c, int e)
{
    enum shortage_kind kind = shortage_kind(e);
    uint64_t now = monotonic_ms();
    /* Each kind its own minute: one told must not hide another. */
    uint64_t *told = &c->gw->short_told_ms[kind];
    if (tell_due(told, now, SHORT_TELL_EVERY_MS)) {
        struct rlimit rl;
        char why[96];
        if (e == ENFILE)
            snprintf(why, sizeof(why), "the system's open-file table is full");
        else if (e == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
            snprintf(why, sizeof(why), "the open-file limit is %llu",
                     (unsigned long long)rl.rlim_cur);
        else
            snprintf(why, sizeof(why), "%s", strerror(e));
        fprintf(stderr,
                "sluice: warning: out of %s (%s): requests are refused with 503 "
                "gateway_overloaded; %s (told at most once a minute)\n",
                shortage_what(kind), why, shortage_advice(kind));
    }
    char detail[64];
    snprintf(detail, sizeof(detail), "out of %s", shortage_what(kind));
    conn_refuse(c, REASON_GATEWAY_OVERLOADED, detail, true);
}

/* Reasons the gate finds itself (not the policy) that an agent in report
 * mode is let through with: the request can still be carried out. Not
 * private_address (nor self_request): the address guard protects the
 * network the gateway stands in, not the policy, and holds in every mode. */
static bool reportable(enum deny_reason r)
{
    return r == REASON_HOST_MISMATCH || r == REASON_SNI_MISMATCH ||
           r == REASON_ENCRYPTED_CLIENT_HELLO;
}

bool conn_gate_denies(struct conn *c, enum deny_reason r, bool respond)
{
    if (c->ex.mode == AGENT_REPORT && reportable(r)) {
        if (c->ex.verdict == VERDICT_ALLOW) {
            c->ex.verdict = VERDICT_REPORT;
            c->ex.reason = r;
        }
        return false;
    }
    conn_refuse(c, r, NULL, respond);
    return true;
}

/* Waits for the next head, for <head_ms> at most: reads the client's
 * socket unless it ended its side (its end would be found again), and
 * takes up at once what its input already holds (pipelined requests). */
static void await_head(struct conn *c, uint64_t head_ms)
{
    struct timeval tv = timeval_of_ms(head_ms);
    clock_gettime(CLOCK_MONOTONIC, &c->t_head_wait);
    conn_timer_add(c, &tv);
    if (!c->client_ended)
        bufferevent_enable(c->client, EV_READ);
    if (evbuffer_get_length(bufferevent_get_input(c->client)) > 0)
        bufferevent_trigger(c->client, EV_READ,
                            BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

void conn_exchange_done(struct conn *c)
{
    uint64_t head_ms = next_head_ms(c);
    struct evbuffer *in = bufferevent_get_input(c->client);
    /* A client that ended its side is answered up to its last request. */
    bool more = !c->client_ended || evbuffer_get_length(in) > 0;
    bool keep = c->ex.keep_alive && !c->gw->stopping && head_ms > 0 && more;
    if (keep)
        forward_park(c); /* may keep c->up for the next request */
    conn_end_exchange(c);
    drop_upstream(c);
    if (!keep) {
        close_when_flushed(c);
        return;
    }
    c->state = CS_HEAD;
    /* Its input holds at most a head. Capped since its accept, so never
     * out of memory here: closed all the same if it were. */
    if (stream_set_read_cap(c->client, conn_head_limit(c)) < 0) {
        close_when_flushed(c);
        return;
    }
    /* No read timeout while a head is awaited: the head deadline
     * (await_head(), at most idle_timeout) ends the wait first, and a read
     * timeout would only be re-armed, in libevent's timer heap, at each
     * read. */
    conn_set_client_timeouts(c, false);
    await_head(c, head_ms);
}

/* "c<conn>.<request>" into <id>, whose 48 bytes hold any two 64-bit
 * numbers: without printf, it is on every request. */
static void format_exchange_id(char id[48], uint64_t conn, uint64_t req)
{
    char *p = id;
    *p++ = 'c';
    p += format_uint(p, conn, 0);
    *p++ = '.';
    p += format_uint(p, req, 0);
    *p = '\0';
}

static void begin_exchange(struct conn *c)
{
    struct exchange *ex = &c->ex;
    memset(ex, 0, sizeof(*ex));
    ex->active = true;
    ex->pol = gw_policy_ref(c->gw->current);
    ex->idle_timeout_ms = ex->pol->policy->limits.idle_timeout_ms;
    ex->header_bytes = ex->pol->policy->limits.header_bytes;
    ex->dec.tier = TIER_NONE;
    ex->verdict = VERDICT_ALLOW;
    format_exchange_id(ex->id, c->id, ++c->nreq);
    memset(&c->head_scan, 0, sizeof(c->head_scan)); /* the next head is another */
    c->head_crlf_skipped = false;
    clock_gettime(CLOCK_MONOTONIC, &ex->t_decided);
    c->gw->counters.requests++;
    evtimer_del(c->timer);
}

/* Wipes <len> bytes of the request head at <field>, which points into the
 * client's input as evbuffer_pullup() made it contiguous (writable
 * memory): a Proxy-Authorization value (a secret, in clear for Bearer)
 * once it was read, or a head refused unread. libevent frees its buffers
 * as they are, where the secret would stay until the memory is reused. */
static void wipe_head_bytes(const char *field, size_t len)
{
    if (field != NULL)
        explicit_bzero((void *)(uintptr_t)field, len);
}

/* The first <n> bytes of the client's input <in> in one piece, as
 * evbuffer_pullup() makes them, without leaving a copy of them behind.
 * When a head came in more than one read it lies in several chains, and
 * pullup copies it into one and frees the others as they are: with the
 * Proxy-Authorization value in clear, which the later wipe (in the copy)
 * never reaches. Here the bytes are copied into a chain of their own and
 * wiped where they were before those chains go. NULL: out of memory. */
static const char *head_pullup(struct evbuffer *in, size_t n)
{
    int nvec = evbuffer_peek(in, (ev_ssize_t)n, NULL, NULL, 0);
    if (nvec <= 1)
        return (const char *)evbuffer_pullup(in, (ev_ssize_t)n); /* no copy made */
    struct evbuffer_iovec *from = calloc((size_t)nvec, sizeof(*from));
    struct evbuffer *one = evbuffer_new();
    struct evbuffer_iovec to;
    if (from == NULL || one == NULL || evbuffer_reserve_space(one, (ev_ssize_t)n, &to, 1) != 1 ||
        to.iov_len < n) {
        free(from);
        if (one != NULL)
            evbuffer_free(one);
        return NULL;
    }
    nvec = evbuffer_peek(in, (ev_ssize_t)n, NULL, from, nvec);
    size_t off = 0;
    for (int i = 0; i < nvec && off < n; i++) {
        size_t len = from[i].iov_len < n - off ? from[i].iov_len : n - off;
        memcpy((char *)to.iov_base + off, from[i].iov_base, len);
        explicit_bzero(from[i].iov_base, len); /* the input's own memory */
        off += len;
    }
    free(from);
    to.iov_len = n;
    if (evbuffer_commit_space(one, &to, 1) != 0 || evbuffer_drain(in, n) != 0 ||
        evbuffer_prepend_buffer(in, one) != 0) {
        explicit_bzero(to.iov_base, n); /* the copy, still <one>'s */
        evbuffer_free(one);
        return NULL;
    }
    evbuffer_free(one);                                      /* empty: its chain went into <in> */
    return (const char *)evbuffer_pullup(in, (ev_ssize_t)n); /* one chain: no copy */
}

/* Finds the agent; returns false (after refusing) when there is none. The
 * Proxy-Authorization value <auth> is wiped in the head either way. */
static bool identify(struct conn *c, const char *auth, size_t auth_len)
{
    struct exchange *ex = &c->ex;
    const struct policy *p = ex->pol->policy;
    const struct agent *a = NULL;
    if (c->gw->cfg.forced_agent != NULL) {
        wipe_head_bytes(auth, auth_len);
        a = policy_find_agent(p, c->gw->cfg.forced_agent);
        set_agent(ex, c->gw->cfg.forced_agent);
    } else {
        const char *why = NULL;
        enum agent_result r = agent_identify_why(p, &c->origin, auth, auth_len, &a, &why);
        wipe_head_bytes(auth, auth_len);
        /* auth_failures counts the refusals of these */
        ex->credentials = r == AGENT_AUTH_REQUIRED && agent_why_is_wrong_credentials(why);
        if (r != AGENT_OK) {
            conn_refuse(c,
                        r == AGENT_AUTH_REQUIRED ? REASON_AUTH_REQUIRED : REASON_AGENT_NOT_ALLOWED,
                        r == AGENT_AUTH_REQUIRED ? why : NULL, true);
            return false;
        }
        set_agent(ex, a != NULL ? a->id : AGENT_DEFAULT_ID);
        ex->by_secret = a != NULL && a->has_token; /* only a matching secret names one */
        if (ex->by_secret)
            memcpy(ex->token_mark, a->token_mark, sizeof(ex->token_mark));
    }
    ex->agent = a;
    set_agent_terms(ex, p, a);
    if (c->counted_agent == NULL || strcmp(c->counted_agent, ex->agent_id) != 0) {
        release_agent(c);
        if (gateway_agent_acquire(c->gw, ex->agent_id, ex->agent_hash,
                                  p->limits.max_connections_per_agent) < 0) {
            conn_refuse(c, REASON_TOO_MANY_CONNECTIONS, NULL, true);
            return false;
        }
        c->counted_agent = strdup(ex->agent_id);
        c->counted_agent_hash = ex->agent_hash;
        if (c->counted_agent == NULL) {
            gateway_agent_release(c->gw, ex->agent_id, ex->agent_hash);
            conn_refuse(c, REASON_TOO_MANY_CONNECTIONS, NULL, true);
            return false;
        }
    }
    return true;
}

/* 1 when <a> is an address of this host, or an IPv6 address that embeds
 * one in a form the guard unwraps (a NAT64 translator, a 6to4 or Teredo
 * relay on the network delivers it there, to the host's services, as it
 * would the embedded address itself), 0 when not, -1 when the kernel
 * cannot be asked (errno set). */
static int own_host_address(const struct ipaddr *a)
{
    int local = listener_address_is_local(a);
    struct ipaddr v4[ADDR_GUARD_MAX_EMBEDDED];
    size_t n = local == 0 ? addr_guard_embedded(a, v4) : 0;
    for (size_t i = 0; i < n && local == 0; i++)
        local = listener_address_is_local(&v4[i]);
    return local;
}

/* What the address guard of <gp> says of <a> for <ex>'s request, decided
 * as <dec>: 0 it may be connected to, 1 it is refused (private_address),
 * -1 it cannot tell, errno set (no socket to ask the kernel with). An IP
 * literal that the cidr: rule allowing it names is exempt from deny_ranges
 * (not one whose rule is expired or method-restricted, which report mode
 * lets through); a name is exempt only through allow_ranges. An address of
 * the gateway's own host (its public one, or an IPv6 form that embeds it)
 * reaches the host's services as loopback does: private too, unless an
 * allow range opens it (the kernel is asked only of what the guard lets
 * by). */
static int address_refused(const struct exchange *ex, const struct gw_policy *gp,
                           const struct decision *dec, const struct ipaddr *a)
{
    const struct rule *r = dec->rule;
    if (ex->target.kind == HOST_IP && r != NULL && r->kind == RULE_CIDR &&
        dec->verdict == VERDICT_ALLOW && cidr_contains(&r->cidr, a))
        return 0;
    if (addr_guard_denies(gp->guard, a, NULL))
        return 1;
    if (addr_guard_allows(gp->guard, a))
        return 0;
    return own_host_address(a);
}

/* Writes <a>, the address connected to (or tried last), in ex->ip. An IP
 * literal target is that address, in the same text already
 * (host_normalise() formats it with ipaddr_format()): copied, not
 * formatted again (about 130 instructions). */
static void note_address(struct exchange *ex, const struct ipaddr *a)
{
    size_t n;
    if (ex->target.kind == HOST_IP && ipaddr_equal(a, &ex->target.ip) &&
        (n = strlen(ex->target.name)) < sizeof(ex->ip))
        memcpy(ex->ip, ex->target.name, n + 1);
    else
        ipaddr_format(a, ex->ip, sizeof(ex->ip));
}

static void on_connected(int err, struct bufferevent *bev, evutil_socket_t fd, size_t idx,
                         void *arg)
{
    struct conn *c = arg;
    struct exchange *ex = &c->ex;
    c->uc = NULL;
    if (err == UPSTREAM_ERR_SHORT) { /* no address could be tried for sure: ip stays null */
        conn_refuse_short(c, errno);
        return;
    }
    if (idx < ex->naddrs)
        note_address(ex, &ex->addrs[idx]);
    if (err != 0) {
        conn_refuse(c, REASON_UPSTREAM_UNREACHABLE, NULL, true);
        return;
    }
    /* A reload while connecting: the address is checked again, under the
     * policy now in force, as connect_checked() would have. */
    if (ex->guarded_at != c->gw->counters.reloads) {
        int refused = address_refused(ex, c->gw->current, &ex->dec, &ex->addrs[idx]);
        if (refused != 0) {
            int e = errno;
            bufferevent_free(bev);
            close(fd);
            if (refused < 0)
                conn_refuse_short(c, e);
            else
                conn_refuse(c, REASON_PRIVATE_ADDRESS, NULL, true);
            return;
        }
        ex->guarded_at = c->gw->counters.reloads; /* not checked again by forward_start() */
    }
    c->up = bev;
    c->up_fd = fd;
    c->up_addr = ex->addrs[idx];
    if (ex->is_connect) {
        connect_start(c);
    } else {
        conn_publish_egress(c);
        (void)conn_after_log(c, forward_start); /* in CS_CONNECT meanwhile */
    }
}

/* The client is not timed while its target is resolved or connected (or
 * its head waits for the bandwidth bucket: forward.c): it waits, and what
 * it was sent before is not judged meanwhile. forward.c sets its timeouts
 * again; a CONNECT's are connect.c's. Not on a request that goes at once
 * on a kept connection: forward_start() sets them.
 * With conn_set_client_timeouts()'s untimed read and nothing queued for
 * the client, no timeout of its can run: the usual case, a connection's
 * first request, is left as it is (clearing them costs libevent about 200
 * instructions: its pending read event added again). Its write timeout
 * is then one nothing uses: whatever writes next sets its own first
 * (connect_start(), forward.c), or right after (close_when_flushed(),
 * which drain_step_ms 0 keeps from skipping it). */
static void untime_client(struct conn *c)
{
    bool untimed = c->drain_step_ms != 0 && !c->client_read_timed &&
                   evbuffer_get_length(bufferevent_get_output(c->client)) == 0;
    if (!untimed)
        bufferevent_set_timeouts(c->client, NULL, NULL);
    c->drain_step_ms = 0;
}

/* untime_client() for forward.c; conn.c's callers keep it inlined. */
void conn_untime_client(struct conn *c)
{
    untime_client(c);
}

bool conn_upstream_refused(struct conn *c)
{
    struct exchange *ex = &c->ex;
    if (ex->guarded_at == c->gw->counters.reloads)
        return false;
    int refused = address_refused(ex, c->gw->current, &ex->dec, &c->up_addr);
    if (refused == 0) {
        ex->guarded_at = c->gw->counters.reloads;
        return false;
    }
    if (refused < 0) {
        conn_refuse_short(c, errno);
        return true;
    }
    /* A new verdict on a request whose line is out: a second one, as for
     * a plain request a reload denies (conn_redecide()), the policy's act. */
    ex->dec.verdict = VERDICT_DENY;
    ex->dec.reason = REASON_PRIVATE_ADDRESS;
    ex->redecided = true;
    ex->again = ex->egress_published;
    ex->egress_published = false;
    ipaddr_format(&c->up_addr, ex->ip, sizeof(ex->ip));
    conn_refuse(c, REASON_PRIVATE_ADDRESS, NULL, true); /* closes c->up; report mode too */
    return true;
}

/* Guards every address, keeps those that may be connected to, connects.
 * The guard is that of the policy in force now, not the one the request
 * was decided under: a reload while its name was being resolved may have
 * taken an address out of allow_ranges (or put it in deny_ranges). */
static void connect_checked(struct conn *c)
{
    struct exchange *ex = &c->ex;
    struct ipaddr keep[RESOLVE_MAX_ADDRS], priv[RESOLVE_MAX_ADDRS];
    size_t nkeep = 0, npriv = 0;
    char self_ip[IPADDR_STRLEN] = "";
    for (size_t i = 0; i < ex->naddrs; i++) {
        const struct ipaddr *a = &ex->addrs[i];
        if (gateway_is_self(c->gw, a, ex->port)) {
            if (self_ip[0] == '\0')
                ipaddr_format(a, self_ip, sizeof(self_ip));
            continue;
        }
        int refused = address_refused(ex, c->gw->current, &ex->dec, a);
        if (refused < 0) {
            conn_refuse_short(c, errno);
            return;
        }
        if (refused > 0)
            priv[npriv++] = *a;
        else
            keep[nkeep++] = *a;
    }
    ex->guarded_at = c->gw->counters.reloads;
    if (nkeep == 0 && npriv == 0) {
        memcpy(ex->ip, self_ip, sizeof(self_ip));
        conn_refuse(c, REASON_SELF_REQUEST, NULL, true);
        return;
    }
    if (nkeep == 0) {
        /* A kept connection to a refused address (made before a reload
         * that refuses it) is closed, never reused; one to an address
         * still allowed waits for a request of its own, as kept ones do. */
        for (size_t i = 0; c->idle_up != NULL && i < npriv; i++)
            if (ipaddr_equal(&priv[i], &c->idle_addr))
                forward_drop_idle(c);
        ipaddr_format(&priv[0], ex->ip, sizeof(ex->ip));
        conn_refuse(c, REASON_PRIVATE_ADDRESS, NULL, true); /* report mode too */
        return;
    }
    memcpy(ex->addrs, keep, nkeep * sizeof(keep[0]));
    ex->naddrs = nkeep;
    if (forward_try_reuse(c))
        return; /* an idle upstream connection to a checked address */
    uint64_t t = conn_idle_ms(c);
    if (t > GATEWAY_CONNECT_TIMEOUT_MS)
        t = GATEWAY_CONNECT_TIMEOUT_MS;
    c->state = CS_CONNECT;
    untime_client(c);
    c->uc = upstream_connect_start(c->gw->base, ex->addrs, ex->naddrs, ex->port, (unsigned)t,
                                   on_connected, c);
    if (c->uc == NULL)
        conn_refuse(c, REASON_UPSTREAM_UNREACHABLE, NULL, true);
}

static void on_resolved(int err, const struct ipaddr *addrs, size_t n, void *arg)
{
    struct conn *c = arg;
    struct exchange *ex = &c->ex;
    c->rreq = NULL;
    if (err != 0 || n == 0) {
        const char *why =
            err == RESOLVE_ERR_NXDOMAIN   ? "no such name"
            : err == RESOLVE_ERR_TIMEOUT  ? "timed out"
            : err == RESOLVE_ERR_SERVFAIL ? "the name server failed (SERVFAIL)"
            : err == RESOLVE_ERR_REFUSED  ? "the name server refused the query (REFUSED)"
            : err == RESOLVE_ERR_NOTIMP   ? "the name server does not implement the query (NOTIMP)"
            : err == RESOLVE_ERR_FORMERR  ? "the name server could not read the query (FORMERR)"
            : err == RESOLVE_ERR_NO_SERVERS ? "no name server"
            : err == RESOLVE_ERR_NODATA     ? "the name has no address (no A or AAAA record)"
            : err == RESOLVE_ERR_TRUNCATED
                ? "the answer is too large for DNS over UDP (truncated), "
                  "and the gateway does not ask over TCP"
                : "lookup failed";
        conn_refuse(c, REASON_DNS_FAILURE, why, true);
        return;
    }
    if (n > RESOLVE_MAX_ADDRS)
        n = RESOLVE_MAX_ADDRS;
    memcpy(ex->addrs, addrs, n * sizeof(addrs[0]));
    ex->naddrs = n;
    connect_checked(c);
}

/* Decides <ex>'s request (its agent id, method, target and port) under
 * <p> for agent <a> at <now>, into <dec>: at its head, and again for an
 * open tunnel (conn_redecide()), whose agent is then <p>'s. */
static void decide_exchange(const struct policy *p, const struct exchange *ex,
                            const struct agent *a, time_t now, struct decision *dec)
{
    struct decision_query q = {
        .agent = a,
        .agent_id = ex->agent_id,
        .method = ex->mbit,
        .target = &ex->target,
        .port = ex->port,
        .now = now,
    };
    policy_decide(p, &q, dec);
}

/* True when <c> carries a CONNECT decided to go ahead: resolving or
 * connecting its target, or its tunnel opening or open. */
static bool connect_going(const struct conn *c)
{
    if (!c->ex.active || !c->ex.is_connect || c->ex.verdict == VERDICT_DENY)
        return false;
    switch (c->state) {
    case CS_RESOLVE:
    case CS_CONNECT:
    case CS_PEEK:
    case CS_HELLO:
    case CS_FLUSH:
    case CS_TUNNEL:
        return true;
    default:
        return false;
    }
}

/* <c>'s tunnel (or CONNECT not answered yet), which the policy in force
 * would now deny for an agent in report mode, as <dec> (a VERDICT_REPORT)
 * says: once per reason, the exchange takes <dec> (holding the policy it
 * names a rule of) and, when its agent_egress is out already, publishes a
 * second one, flagged redecided; one not out yet (resolving, connecting,
 * first bytes being checked) goes out later with <dec>, as a new
 * request's would. The tunnel goes on, as report mode lets it. */
static void report_again(struct conn *c, const struct decision *dec)
{
    struct exchange *ex = &c->ex;
    if (ex->verdict == VERDICT_REPORT && ex->reason == dec->reason)
        return;     /* told already: not again at each reload and day change */
    ex->dec = *dec; /* rebase_exchange() holds its policy */
    ex->verdict = VERDICT_REPORT;
    ex->reason = dec->reason;
    if (!ex->egress_published)
        return;
    ex->redecided = true;
    ex->again = true;
    ex->egress_published = false;
    conn_publish_egress(c);
}

/* <c>'s tunnel (or CONNECT going ahead, or plain request whose body is
 * still to go up), let through by decision <dec> for agent <a> under the
 * policy in force, goes on under that policy: what its exchange borrows
 * (its agent, its agent's id, the rule, owner, grant and limits of its decision;
 * its flow's too) is taken from there, and the policy it was decided
 * under is let go. Before, each exchange held that policy for its life:
 * tunnels kept open across reloads (config management reloads every
 * minute, an agent keeps a stream open) held one policy each, every
 * generation they lived through, a large policy's megabytes at a time.
 * Its line's verdict, reason and tier stay those it went out with (and
 * its idle_timeout and header_bytes those it was decided under); its
 * rule is from now on the one the policy in force lets it through with,
 * which the address guard reads for a cidr: rule (address_refused()).
 *
 * Its upload is metered from now on by the bandwidth of that rule, as a
 * new one's would be, not by that of the rule it opened under, whose
 * identity the reload may have changed (a port added) or whose place
 * another rule took: quota_reshape(), by identity, would leave it
 * unmetered or under a limit no longer its own. */
static void rebase_exchange(struct conn *c, const struct agent *a, const struct decision *dec)
{
    struct exchange *ex = &c->ex;
    struct gw_policy *old = ex->pol;
    ex->pol = gw_policy_ref(c->gw->current);
    ex->agent = a;
    if (c->gw->cfg.forced_agent == NULL) /* found again by id: the same text */
        ex->agent_id = a != NULL ? a->id : AGENT_DEFAULT_ID;
    ex->dec.rule = dec->rule;
    ex->dec.owner = dec->owner;
    ex->dec.grant = dec->grant;
    memcpy(ex->dec.limits, dec->limits, sizeof(ex->dec.limits));
    ex->dec.nlimits = dec->nlimits;
    if (ex->flow != NULL) {
        quota_flow_set_agent_id(ex->flow, ex->agent_id);
        quota_flow_set_rule(ex->flow, dec->rule, dec->limits, dec->nlimits, quota_now());
    }
    gw_policy_unref(old); /* nothing of <c> borrows from it any more */
}

/* <c>'s plain exchange, whose answer alone is left to come (a long
 * download, an event stream: forward_answer_only()), and which no reload
 * decides again (its write is done), lets go of the policy it was decided
 * under once a reload replaced it: it keeps copies of what its lines
 * still read of its decision (gate/kept_decision.h) and goes on under the
 * policy in force. Before, it held that policy until its answer ended:
 * streams opened one after each of frequent reloads held a whole policy
 * each. Its lines say what they would have said; its idle_timeout is its
 * own already. Its flow, which borrows from that policy, meters nothing
 * more (its request went up whole): closed. Out of memory, it holds the
 * policy on, and a later reload tries again. */
static void keep_decision(struct conn *c)
{
    struct exchange *ex = &c->ex;
    if (ex->pol == c->gw->current)
        return;
    if (ex->kept == NULL) { /* kept at an earlier reload: only moved on */
        struct kept_decision *k = kept_decision_new(&ex->dec, ex->agent_id);
        if (k == NULL)
            return;
        ex->kept = k;
        kept_decision_apply(k, &ex->dec);
        ex->agent_id = k->agent_id; /* the same text: agent_hash stays */
        ex->agent = NULL;
        quota_flow_close(ex->flow);
        ex->flow = NULL;
    }
    gw_policy_unref(ex->pol); /* nothing of <c> borrows from it any more */
    ex->pol = gw_policy_ref(c->gw->current);
}

/* True when <c> is a plain request let through whose answer alone is left
 * to come: nothing of it is decided again, nor connected, nor metered. */
static bool answer_only(const struct conn *c)
{
    const struct exchange *ex = &c->ex;
    return ex->active && !ex->is_connect && ex->verdict != VERDICT_DENY &&
           ex->redecided_pol == NULL && forward_answer_only(c);
}

/* The agent of <c>'s exchange as a new request of its client would be
 * named under the policy in force <p>: by id (the exchange's agent is the
 * old policy's), into <*a>. */
static enum agent_result agent_again(const struct conn *c, const struct policy *p,
                                     const struct agent **a)
{
    *a = NULL;
    if (c->gw->cfg.forced_agent != NULL) {
        *a = policy_find_agent(p, c->gw->cfg.forced_agent);
        return AGENT_OK;
    }
    return agent_find_again(p, c->ex.agent_id, c->ex.by_secret ? c->ex.token_mark : NULL,
                            &c->origin, a);
}

/* True when <c> carries a plain request with a body, decided to go ahead,
 * that the upstream has not all taken: being resolved or connected, its
 * line being written, or its body going up (forward_uploading()). The body
 * is the write: such a request is decided again as a tunnel is. So is one
 * without a body whose head (forward.c), or whose target's name
 * (resolve_target()), waits for its bandwidth bucket, for seconds
 * perhaps: nothing of it went out yet, and its head may carry as much as
 * a body. */
static bool plain_going(const struct conn *c)
{
    const struct exchange *ex = &c->ex;
    if (!ex->active || ex->is_connect || ex->verdict == VERDICT_DENY)
        return false;
    if (ex->req_body == BODY_NONE)
        return ex->head_waiting || ex->name_waiting; /* nothing of it has gone out yet */
    return c->state == CS_RESOLVE || c->state == CS_CONNECT || forward_uploading(c);
}

/* <c>'s plain request, its agent_egress out already, now denied as ex->dec
 * says: a second agent_egress for its id (the denial), then, once the log
 * has it, its cut (forward_cut_denied()): nothing more goes up meanwhile
 * (forward_hold()). A wait for its first line is over: it never goes. */
static void deny_plain_again(struct conn *c)
{
    struct exchange *ex = &c->ex;
    log_wait_unlink(c);
    c->log_go = NULL;
    ex->verdict = VERDICT_DENY;
    ex->reason = ex->dec.reason;
    ex->again = true;
    ex->egress_published = false;
    forward_hold(c);
    conn_publish_egress(c);
    (void)conn_after_log(c, forward_cut_denied);
}

/* True when <c>'s upstream connection goes to an address that the address
 * guard in force refuses for its request decided again as <dec>: a reload
 * took it out of allow_ranges or put it in deny_ranges. Not when the
 * gateway cannot tell whether it is its host's own (no socket to ask
 * with): that was checked as it connected, and no policy changes it. A
 * request still resolving or connecting is checked when it connects
 * (connect_checked(), on_connected()). */
static bool connected_refused(const struct conn *c, const struct decision *dec)
{
    bool connected = c->up != NULL || c->tunnel != NULL; /* a tunnel holds c->up's socket */
    return connected && address_refused(&c->ex, c->gw->current, dec, &c->up_addr) > 0;
}

bool conn_redecide(struct conn *c, time_t now)
{
    struct exchange *ex = &c->ex;
    bool plain = plain_going(c);
    if (!plain && !connect_going(c)) {
        if (answer_only(c))
            keep_decision(c);
        return false;
    }
    const struct policy *p = c->gw->current->policy;
    const struct agent *a = NULL;
    struct decision dec = {
        .verdict = VERDICT_DENY, .reason = REASON_AGENT_NOT_ALLOWED, .tier = TIER_NONE};
    enum agent_result r = agent_again(c, p, &a);
    if (r == AGENT_AUTH_REQUIRED) /* its agent now wants a token it never presented */
        dec.reason = REASON_AUTH_REQUIRED;
    if (r == AGENT_OK) {
        decide_exchange(p, ex, a, now, &dec);
        if ((dec.verdict == VERDICT_ALLOW || dec.verdict == VERDICT_REPORT) &&
            connected_refused(c, &dec)) {
            dec.verdict = VERDICT_DENY; /* in report mode too: the guard is never reported */
            dec.reason = REASON_PRIVATE_ADDRESS;
        }
        if (dec.verdict == VERDICT_ALLOW || dec.verdict == VERDICT_REPORT) {
            rebase_exchange(c, a, &dec);
            set_agent_terms(ex, p, a); /* for first bytes still to be judged */
        }
        if (dec.verdict == VERDICT_ALLOW)
            return false; /* still allowed: kept */
        if (dec.verdict == VERDICT_REPORT) {
            report_again(c, &dec); /* an agent in report mode: kept */
            return false;
        }
    }
    /* The new decision names gw->current's rule, held until the exchange
     * ends here (or, refused before its 200, is released by conn_refuse()):
     * a reload while its denial waits for the log may replace gw->current.
     * Its agent's id may be one that policy no longer has: it stays the
     * old policy's. */
    gw_policy_unref(ex->redecided_pol);
    ex->redecided_pol = gw_policy_ref(c->gw->current);
    ex->dec = dec;
    ex->redecided = true;
    if (plain && ex->egress_published) {
        deny_plain_again(c); /* its body going up, or its line being written */
        return true;
    }
    if (c->state == CS_RESOLVE || c->state == CS_CONNECT) {
        /* no 200 yet, nothing sent: refused as it is asked now */
        conn_refuse(c, dec.reason, NULL, true);
        return true;
    }
    ex->verdict = VERDICT_DENY;
    ex->reason = dec.reason;
    c->gw->counters.denied++;
    /* A second agent_egress for the tunnel's id when the first said allow
     * (SPEC.md); the first when the tunnel was still being checked. */
    ex->again = ex->egress_published;
    ex->egress_published = false;
    conn_publish_egress(c);
    /* The cut is the denial's effect, all the agent sees of it: it comes
     * once the log has the line (write-ahead), nothing moving meanwhile;
     * then agent_egress_end, with the bytes moved; both sides reset. */
    (void)conn_after_log(c, conn_cut);
    return true;
}

static void resolve_target(struct conn *c);

/* The flow's timer, the bucket refilled for the name of <c>'s target:
 * looked at again, unless the wait ended meanwhile (forward_hold()). */
static void on_name_refill(void *arg)
{
    struct conn *c = arg;
    if (c->ex.name_waiting)
        resolve_target(c);
}

/* Resolves <c>'s target (in CS_RESOLVE), once a name that goes out to the
 * name servers has had its turn at the bandwidth bucket
 * (shape_name_waits()): a query carries it, and a name made up under a
 * wildcard rule is bytes of the agent's choosing, which went out at any
 * rate when nothing went upstream (every name NXDOMAIN). A name answered
 * without a query (dns.static, the cache, a lookup already asking) is
 * not metered: nothing of it leaves. */
static void resolve_target(struct conn *c)
{
    struct exchange *ex = &c->ex;
    int waits = 0;
    ex->name_waiting = false;
    if (ex->flow != NULL && quota_flow_metered(ex->flow) &&
        resolver_asks_servers(c->gw->resolver, ex->target.name))
        waits = shape_name_waits(c, ex->target.name, on_name_refill);
    if (waits < 0) {
        conn_refuse(c, REASON_UPSTREAM_UNREACHABLE,
                    "out of memory (no timer to wait for the bandwidth bucket)", true);
        return;
    }
    if (waits > 0) {
        ex->name_waiting = true; /* the flow's timer, closed with the exchange, resumes it */
        return;
    }
    c->rreq = resolver_lookup(c->gw->resolver, ex->target.name, on_resolved, c);
    if (c->rreq == NULL)
        conn_refuse(c, REASON_DNS_FAILURE, "out of memory", true);
}

/* Everything after the head has been parsed and consumed. */
static void decide_and_go(struct conn *c)
{
    struct exchange *ex = &c->ex;
    if (gateway_is_self_name(c->gw, ex->target.name, ex->port) ||
        (ex->target.kind == HOST_IP && gateway_is_self(c->gw, &ex->target.ip, ex->port))) {
        conn_refuse(c, REASON_SELF_REQUEST, NULL, true);
        return;
    }
    decide_exchange(ex->pol->policy, ex, ex->agent, wall_clock_seconds(), &ex->dec);
    if (ex->dec.verdict == VERDICT_DENY) {
        conn_refuse(c, ex->dec.reason, NULL, true);
        return;
    }
    if (ex->dec.verdict == VERDICT_REPORT && ex->verdict == VERDICT_ALLOW) {
        ex->verdict = VERDICT_REPORT;
        ex->reason = ex->dec.reason;
    }
    if (shape_check_rate(c))
        return;
    if (ex->ends_here) {
        conn_answer_own(c, 200, max_forwards_answer);
        return;
    }
    /* The client stays readable while its target is resolved and connected:
     * turning that off and on again costs two epoll_ctl() per request, and
     * on_read() turns it off should bytes come early (a plain request's
     * body, or what a CONNECT client sends before its 200: connect_start()
     * takes those up). */
    if (ex->target.kind == HOST_IP) {
        ex->addrs[0] = ex->target.ip;
        ex->naddrs = 1;
        connect_checked(c);
        return;
    }
    c->state = CS_RESOLVE;
    untime_client(c);
    resolve_target(c);
}

static void handle_request(struct conn *c, const struct http_request *req)
{
    struct exchange *ex = &c->ex;
    struct evbuffer *in = bufferevent_get_input(c->client);
    const char *why = NULL, *bad = NULL;
    memcpy(ex->method, req->method, sizeof(ex->method));
    ex->mbit = req->method_bit;
    ex->head_pending = req->head_len;
    ex->head_bytes = req->head_len;
    /* The framing first: a refusal that leaves a body unread closes lingering. */
    ex->req_body = http1_request_body(req);
    ex->refusal_keeps = !req->conn_close && ex->req_body == BODY_NONE;
    ex->is_connect = req->method_bit == METHOD_CONNECT;
    /* The target first, so that even a refused agent's event names it. */
    if (ex->is_connect ? req->form != TARGET_AUTHORITY : req->form != TARGET_ABSOLUTE) {
        bad = ex->is_connect
                  ? "CONNECT needs host:port"
                  : "not a proxy request (the target must be absolute: http://host/path)";
    } else if (host_normalise(req->host, strlen(req->host), &ex->target, &why) < 0) {
        bad = why != NULL ? why : "invalid host";
    } else {
        ex->have_target = true;
        ex->port = req->port;
        if (ex->port == 0)
            bad = "port 0";
    }
    if (!ex->is_connect && req->path != NULL) {
        ex->path = strndup(req->path, req->path_len);
        if (ex->path == NULL)
            bad = "out of memory";
    }
    /* Decided as an extension method, "post" would miss every rule naming
     * POST, and its tier, while the origin may well run it as a POST. */
    if (bad == NULL && method_is_case_variant(req->method))
        bad = "method names are case-sensitive; write GET, POST, ... in upper case";
    /* Decided as its request line's method, a GET whose override header
     * names DELETE would be a DELETE at an origin that honours it. */
    if (bad == NULL && !ex->is_connect)
        bad = method_override_refusal(req);
    if (!identify(c, req->proxy_authorization, req->proxy_authorization_len) ||
        shape_check_quarantine(c))
        return;
    if (bad != NULL) {
        conn_refuse(c, REASON_BAD_REQUEST, bad, true);
        return;
    }
    enum deny_reason r = REASON_NONE;
    if (!ex->is_connect) {
        ex->ends_here = max_forwards_ends_here(req);
        r = forward_prepare(c, req, &why);
        if (r == REASON_BAD_REQUEST || r == REASON_SELF_REQUEST) {
            conn_refuse(c, r, why, true);
            return;
        }
    }
    evbuffer_drain(in, req->head_len);
    ex->head_pending = 0;
    if (r != REASON_NONE && conn_gate_denies(c, r, true))
        return;
    decide_and_go(c);
}

/* A refusal that keeps the connection goes on to the next request at once,
 * without waiting for the client to take it (an allowed answer is waited
 * for: forward.c's maybe_done()). So a client that pipelines requests and
 * reads nothing would have their refusals, ten times their size, pile up
 * in its output without bound. Past FLOW_HIGH bytes there (BACKLOG_TIGHT
 * once the clients' backlog passed its budget, as a download's reads stop:
 * backlog.h), the next head is not read until the client took them down to
 * FLOW_LOW (BACKLOG_TIGHT_LOW; on_write()); meanwhile the client's write
 * timeout judges its progress, and the head deadline waits, but on a
 * connection that counts against no agent, whose deadline counts from the
 * accept (next_head_ms()). Returns true when the head waits. Before the
 * budget counted here, 48 pipeliners that read nothing held 6.5 to 10 MB
 * past a budget of 1 MiB. */
static bool head_waits(struct conn *c)
{
    if (evbuffer_get_length(bufferevent_get_output(c->client)) <= backlog_mark(FLOW_HIGH))
        return false;
    c->head_paused = true;
    bufferevent_disable(c->client, EV_READ);
    bufferevent_setwatermark(c->client, EV_WRITE, FLOW_LOW, 0);
    if (c->counted_agent != NULL)
        evtimer_del(c->timer);
    return true;
}

/* The client took its answers down to FLOW_LOW (BACKLOG_TIGHT_LOW past the
 * clients' budget): reads the next head, with
 * what is left of its deadline. */
static void head_resumes(struct conn *c)
{
    uint64_t head_ms = next_head_ms(c);
    c->head_paused = false;
    if (head_ms == 0) {
        close_when_flushed(c);
        return;
    }
    await_head(c, head_ms);
}

static void read_head(struct conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->client);
    size_t len = evbuffer_get_length(in);
    if (len == 0 || head_waits(c))
        return;
    if (!c->head_crlf_skipped && c->head_scan.scanned == 0) {
        /* RFC 9112 2.2: one empty line before a request line is ignored
         * (some clients send CRLF after a POST body); a second is a 400. */
        char two[2];
        ev_ssize_t got = evbuffer_copyout(in, two, 2);
        if (got >= 1 && two[0] == '\r') {
            if (got < 2) {
                if (c->client_ended)
                    close_when_flushed(c);
                return; /* the LF may follow; the head's deadline runs */
            }
            if (two[1] == '\n') {
                evbuffer_drain(in, 2);
                c->head_crlf_skipped = true;
                if ((len -= 2) == 0) {
                    if (c->client_ended)
                        close_when_flushed(c);
                    return;
                }
            }
        }
    }
    size_t max = conn_head_limit(c);
    size_t n = len < max ? len : max;
    const char *buf = head_pullup(in, n);
    if (buf == NULL) {
        conn_free(c);
        return;
    }
    /* The parser goes over the head from its start: only once its end (or
     * an error) is there, which the scan finds looking at the new bytes
     * alone (http1_parse_request_scan()). Else a head sent a byte at a
     * time was parsed once per byte, CPU quadratic in its size. */
    const char *why = NULL;
    /* On the stack: at 3.5 KiB it is past glibc's per-thread cache, so
     * each malloc() and free() of it took malloc's slower paths. */
    struct http_request head, *req = &head;
    int rc = http1_parse_request_scan(&c->head_scan, buf, n, max, req, &why);
    if (rc == HTTP1_NEED_MORE) {
        if (c->client_ended)
            close_when_flushed(c); /* the rest of this head will not come */
        return;
    }
    begin_exchange(c);
    if (rc < 0) {
        /* Best effort: name the agent a client without a secret would be,
         * unless a secret could have named another (the malformed head's
         * Proxy-Authorization is not read): then nobody is blamed, and no
         * agent's denials are counted for it. */
        const struct agent *a = NULL;
        if (c->gw->cfg.forced_agent != NULL)
            set_agent(&c->ex, c->gw->cfg.forced_agent);
        else if (!agent_token_possible(c->ex.pol->policy, &c->origin) &&
                 agent_identify(c->ex.pol->policy, &c->origin, NULL, 0, &a) == AGENT_OK)
            set_agent(&c->ex, a != NULL ? a->id : AGENT_DEFAULT_ID);
        /* Never read again (a 400 closes): its Proxy-Authorization, not
         * looked for in a head that does not parse, goes with the rest. */
        wipe_head_bytes(buf, n);
        conn_refuse(c, REASON_BAD_REQUEST,
                    rc == HTTP1_TOO_BIG ? "request head too large"
                    : why != NULL       ? why
                                        : "malformed",
                    true);
        return;
    }
    handle_request(c, req);
}

void conn_timer_add(struct conn *c, const struct timeval *tv)
{
    c->timer_put_off = false;
    evtimer_add(c->timer, tv);
}

/* True when what c->timer, running now, waits for lies unread in a socket:
 * the gateway was stopped (SIGSTOP, a paused VM, a long stall of its loop)
 * while it came, and libevent ran the timer before the read. Then the
 * timer is put off 1 ms, once a wait (conn_timer_add()), for that read: a
 * head, hello or quiet wait still unanswered then is over its time.
 * Before, a head that came in time was cut by its deadline, a ClientHello
 * judged cut short, a first side that spoke taken for none, and a
 * linger's end closed with the client's bytes unread: a reset, which
 * dropped what of the answer the kernel had not delivered yet. */
static bool timer_before_read(struct conn *c)
{
    bool unread;
    if (c->timer_put_off)
        return false;
    switch (c->state) {
    case CS_HEAD: /* the client's next request head */
        unread = !c->client_ended && !socket_is_quiet(c->fd);
        break;
    case CS_PEEK: /* a CONNECT's first bytes; in the quiet wait, the server's too */
        unread = !socket_is_quiet(c->fd) || (c->peek_quiet && !socket_is_quiet(c->up_fd));
        break;
    case CS_FORWARD: /* the rest of a response head (forward.c, head_deadline_arm()) */
        unread = c->up != NULL && !c->ex.rsp_head_done && !socket_is_quiet(c->up_fd);
        break;
    case CS_LINGER: /* what the client sent: closed unread, it was a reset */
        unread = !socket_is_quiet(c->fd);
        break;
    default:
        unread = false;
        break;
    }
    if (!unread)
        return false;
    static const struct timeval one_ms = {0, 1000};
    c->timer_put_off = true;
    evtimer_add(c->timer, &one_ms);
    return true;
}

static void on_head_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    (void)fd;
    (void)what;
    if (log_gives_up(c, true))
        return; /* its log line waited for idle_timeout */
    if (timer_before_read(c))
        return;
    if (c->state == CS_HEAD && evbuffer_get_length(bufferevent_get_output(c->client)) > 0)
        /* No next head in time, but the last answer (a refusal that kept
         * the connection: interim heads and a 502, say) was decided and
         * logged and is still going out to a client that may be taking it
         * slowly: it goes out first, the client judged by its progress
         * (idle_timeout without any), then the connection closes. Freed
         * here, the client got an end of stream short of it. */
        close_when_flushed(c);
    else if (c->state == CS_HEAD || c->state == CS_LINGER)
        conn_free(c); /* a head over its deadline (see conn_accept), or lingering's end */
    else if (c->state == CS_PEEK) {
        c->peek_over = true; /* the peek window is over: decide now */
        connect_on_client_read(c);
    } else if (c->state == CS_FORWARD) {
        forward_on_head_deadline(c);
    } else if (c->state == CS_HELLO && c->hello_cut) {
        connect_hello_cut(c);
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    (void)bev;
    switch (c->state) {
    case CS_HEAD:
        read_head(c);
        break;
    case CS_FORWARD:
        forward_on_client_read(c);
        break;
    case CS_PEEK:
        connect_on_client_read(c);
        break;
    case CS_HELLO:
        break; /* held in the input until the server answered (connect.c) */
    case CS_LINGER:
        drop_client_input(c);
        break;
    case CS_RESOLVE:
    case CS_CONNECT:
        /* Bytes behind a plain request (its body, or the next request) or
         * a CONNECT: they wait in the input until forwarding or the peek
         * starts. The client, no longer read, is watched for a hang-up
         * meanwhile (conn_watch_hangup()). */
        bufferevent_disable(c->client, EV_READ);
        conn_watch_hangup(c);
        break;
    default:
        break;
    }
}

/* True when the client's socket hung up (poll() says POLLHUP): the peer
 * closed its connection altogether, which Linux tells apart from a
 * half-close (shutdown(SHUT_WR)) on a unix socket; a TCP peer's close is
 * only its FIN, a half-close as far as the gateway can tell. */
static bool client_hung_up(const struct conn *c)
{
    struct pollfd p = {.fd = c->fd, .events = 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLHUP) != 0;
}

static void on_hangup_check(evutil_socket_t fd, short what, void *arg);

void conn_watch_hangup(struct conn *c)
{
    struct timeval tv = timeval_of_ms(HANGUP_CHECK_MS);
    if (c->hangup_timer == NULL &&
        (c->hangup_timer = evtimer_new(c->gw->base, on_hangup_check, c)) == NULL)
        return; /* out of memory: the answer is waited for, as before */
    /* Not put off when already due: a paused upload pauses again at each
     * refill (every 62 ms under 1KiB/s), which would keep it from firing. */
    if (!evtimer_pending(c->hangup_timer, NULL))
        evtimer_add(c->hangup_timer, &tv);
}

/* True while <c>'s client is not read because its bytes wait for the
 * bandwidth bucket: a plain request's body (shape_meter_upload()) or a
 * CONNECT's first bytes (connect.c, pace_peeked()). Not once the upstream
 * answered the request whole (an early answer: forward.c, maybe_done()):
 * the rest of the body never goes up, whatever the bucket's timer armed
 * before says, and the answer waits only for the client to take it. */
static bool waits_for_bucket(const struct conn *c)
{
    if (!quota_flow_paused(c->ex.flow))
        return false;
    return c->state == CS_PEEK || c->state == CS_FLUSH ||
           (c->state == CS_FORWARD && !c->ex.req_done && !c->ex.rsp_done);
}

/* True when <c>'s paused upload can never be whole: its client ended its
 * side (or closed: <revents>, poll()'s for POLLRDHUP on its socket) and
 * what the gateway holds and its socket still has queued cannot make up
 * the rest of its body: fewer bytes than its Content-Length has left, or
 * a chunked body's bytes without its last-chunk (held_body.h). Once its
 * end is found among them, it is not looked for again: no more bytes come
 * after the client's end, and those sent go through the body's framer. */
static bool upload_cut_short(struct conn *c, short revents)
{
    struct exchange *ex = &c->ex;
    if (ex->body_end_held || !(revents & (POLLRDHUP | POLLHUP)))
        return false;
    switch (held_body_check(ex, bufferevent_get_input(c->client), c->fd)) {
    case HELD_BODY_SHORT:
        return true;
    case HELD_BODY_ENDS:
        ex->body_end_held = true;
        return false;
    default:
        return false; /* a socket's queue too long to look at: left to go */
    }
}

/* <c> waits for its bucket (waits_for_bucket()): its client, not read
 * meanwhile, is looked at as reading it would, not only once the bucket
 * has refilled, which a debt puts off for seconds or minutes. A reset
 * (a TCP socket hangs up at a reset only) ends it now, as its read would:
 * a tunnel's first bytes are not sent, its upstream is reset (conn_cut());
 * an upload is cut. So is an upload whose client ended its side, or
 * closed, in the middle of its body: what the gateway holds of it is not
 * sent (upload_cut_short()). A unix client's close, and any client's end
 * of its side, after bytes that can still make the request whole (the
 * rest of a body, a tunnel's first bytes) leaves them to go as they
 * would have. Returns true when <c> was freed. */
static bool ended_in_bucket_wait(struct conn *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
    short revents = poll(&p, 1, 0) == 1 ? p.revents : 0;
    bool reset = !c->origin.is_unix && (revents & POLLHUP) != 0; /* as client_hung_up() */
    if (c->state == CS_FORWARD) {
        if (!reset && !upload_cut_short(c, revents))
            return false;
        conn_free(c); /* as forward_on_client_event() at its end or reset */
        return true;
    }
    if (!reset)
        return false;
    c->client_reset = true;
    conn_cut(c);
    return true;
}

/* True while a hang-up of <c>'s client would be seen by
 * conn_watch_hangup() alone: the exchange waits for its upstream
 * (resolving, connecting) or for a plain request's answer, and its client
 * is not read: it ended its side, or sent bytes that wait in its input (a
 * body or a CONNECT's first bytes, come early; a request pipelined behind
 * a plain one). Once the answer (or a CONNECT's 200) is being written, the
 * writes tell; while a body is forwarded, its reads do. */
static bool hangup_unseen(const struct conn *c)
{
    const struct exchange *ex = &c->ex;
    if (!ex->active || ex->client_gone || ex->rsp_head_sent || c->client == NULL)
        return false;
    switch (c->state) {
    case CS_RESOLVE:
    case CS_CONNECT:
        return ex->client_eof || !(bufferevent_get_enabled(c->client) & EV_READ);
    case CS_FORWARD: /* a body still going up is read again once held back: its reads tell */
        return ex->client_eof || (ex->req_done && !(bufferevent_get_enabled(c->client) & EV_READ));
    default:
        return false; /* a tunnel's client is the tunnel's (c->client NULL) */
    }
}

/* <c>'s client closed its connection altogether (its socket hung up: a
 * unix client's close, a TCP client's reset), found at its end or by
 * conn_watch_hangup(). A CONNECT not answered yet ends here: nothing could
 * take its 200 or use its tunnel, so its target is not connected (the
 * resolving or connecting is given up) and what the client sent behind
 * its head goes nowhere; its agent_egress_end says status null, nothing
 * moved. So does a plain request whose TCP client reset (a TCP socket
 * hangs up at a reset, never at a FIN alone) before it went up, as a
 * reset read then does (on_event()). Else a plain request still goes
 * upstream whole (a unix client's upload written just before its close);
 * its answer is not waited for (forward_client_gone()). */
static void client_left(struct conn *c)
{
    c->ex.client_gone = true;
    if (c->ex.is_connect ||
        (!c->origin.is_unix && (c->state == CS_RESOLVE || c->state == CS_CONNECT))) {
        conn_free(c);
        return;
    }
    c->ex.keep_alive = false; /* requests it pipelined are not taken up */
    forward_client_gone(c);
}

static void on_hangup_check(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    (void)fd;
    (void)what;
    if (waits_for_bucket(c)) {
        if (!ended_in_bucket_wait(c))
            conn_watch_hangup(c);
        return;
    }
    if (!hangup_unseen(c))
        return; /* the exchange is over, or its client's socket is read again */
    if (!client_hung_up(c)) {
        conn_watch_hangup(c);
        return;
    }
    client_left(c);
}

/* Called with the client's bufferevent event <what>: when it is the end of
 * the client's side while a plain request is being resolved, connected or
 * forwarded, or a CONNECT resolved or connected, marks the exchange (no
 * keep-alive, unless requests pipelined behind a plain one wait in the
 * input: c->client_ended; no more reading) and returns true: the exchange goes on (a
 * CONNECT client that sent its head and shut its side, as `nc -N` does,
 * still gets its 200, and what it sent goes through: connect_start()),
 * unless the client closed altogether (ex->client_gone: the caller calls
 * client_left()). Else returns false. */
static bool client_half_closed(struct conn *c, short what)
{
    struct exchange *ex = &c->ex;
    if (!(what & BEV_EVENT_EOF) || (what & BEV_EVENT_ERROR) || !ex->active)
        return false;
    if (ex->is_connect) {
        if (c->state != CS_RESOLVE && c->state != CS_CONNECT)
            return false;
        ex->client_eof = true;
        bufferevent_disable(c->client, EV_READ);
        /* A unix client that closed (its socket hung up) is gone: the
         * caller ends the exchange (client_left()). A half-close is
         * watched for a later close or reset. */
        if (client_hung_up(c))
            ex->client_gone = true;
        else
            conn_watch_hangup(c);
        return true;
    }
    if (c->state != CS_RESOLVE && c->state != CS_CONNECT &&
        (c->state != CS_FORWARD || !ex->req_done))
        return false; /* ended in the middle of a body being forwarded: cut */
    bufferevent_disable(c->client, EV_READ);
    if (client_hung_up(c)) {
        /* Not a half-close: the client closed its connection altogether
         * (over the unix socket, where that is seen). What it sent still
         * goes upstream; no answer is waited for (nobody can read it),
         * nor are requests it pipelined taken up. */
        ex->client_gone = true;
        ex->client_eof = true;
        ex->keep_alive = false;
        return true;
    }
    /* Its input then holds nothing of this request: what is there is
     * requests it pipelined behind it, answered in order. */
    if ((ex->req_body == BODY_NONE || ex->req_done) &&
        evbuffer_get_length(bufferevent_get_input(c->client)) > 0) {
        c->client_ended = true;
        return true;
    }
    /* The client ended its side after its request: the response still goes
     * back, then the connection closes. A body it did not finish before
     * forwarding started is found short by forward.c (pump_request). */
    ex->client_eof = true;
    ex->client_close = true;
    ex->keep_alive = false;
    conn_watch_hangup(c);
    return true;
}

/* The end of the client's side between requests, with requests it
 * pipelined before it still in its input (refusals that kept the
 * connection go on to the next request at once, so the end is found
 * while they wait): they are answered in order, as the request of a
 * client that ends its side after it is, and the connection closes after
 * the last one (conn_exchange_done(); read_head() for a head left
 * incomplete). Returns true then. */
static bool client_ended_with_requests(struct conn *c, short what)
{
    if (c->state != CS_HEAD || !(what & BEV_EVENT_EOF) || (what & BEV_EVENT_ERROR) ||
        evbuffer_get_length(bufferevent_get_input(c->client)) == 0)
        return false;
    c->client_ended = true;
    bufferevent_disable(c->client, EV_READ);
    bufferevent_trigger(c->client, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
    return true;
}

static void on_write(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    (void)bev;
    switch (c->state) {
    case CS_HEAD:
        if (c->head_paused &&
            evbuffer_get_length(bufferevent_get_output(c->client)) <= backlog_low_mark(FLOW_LOW))
            head_resumes(c);
        break;
    case CS_CLOSING:
        if (evbuffer_get_length(bufferevent_get_output(c->client)) == 0)
            close_flushed(c);
        break;
    case CS_FORWARD:
        forward_on_client_write(c);
        break;
    case CS_FLUSH:
        connect_on_client_write(c);
        break;
    default:
        break;
    }
}

/* A client error during a CONNECT's check: the client reset the connection
 * (or can no longer be written to). Nothing will reach it: a refusal then
 * closes at once (close_when_flushed()) rather than wait for a flush that
 * libevent, having turned the events off, would never start. */
static void note_client_reset(struct conn *c, short what)
{
    if (!(what & BEV_EVENT_ERROR))
        return;
    c->client_reset = true;
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;
    if (what == (BEV_EVENT_TIMEOUT | BEV_EVENT_WRITING) && client_still_taking(c))
        return;
    /* A read timeout while the client's socket holds bytes: they came
     * while the loop was held (a stopped or starved gateway) and libevent
     * ran the timeout first; reading goes on (its timeout restarted), as
     * for an upstream (forward.c, connect.c). */
    if (socket_read_timeout_held_input(bev, what))
        return;
    if (client_half_closed(c, what)) {
        if (c->ex.client_gone)
            client_left(c);
        return;
    }
    if (c->state == CS_FORWARD) {
        forward_on_client_event(c, what);
        return;
    }
    if (c->state == CS_PEEK && (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))) {
        /* The client ended its side, or reset the connection: decide on
         * what it sent. A reset ends it as surely as a FIN: a ClientHello
         * or request head it cut short is refused all the same (fail
         * closed), not logged as the allowed tunnel it never was. */
        c->ex.client_eof = true;
        c->peek_over = true;
        note_client_reset(c, what);
        connect_on_client_read(c);
        return;
    }
    if (c->state == CS_HELLO && (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))) {
        /* What it sent is all: judged after the server's answer (a second
         * ClientHello waiting behind the first is judged, reset or not). */
        c->ex.client_eof = true;
        note_client_reset(c, what);
        return;
    }
    if (client_ended_with_requests(c, what))
        return;
    if (c->state == CS_FLUSH && (what & BEV_EVENT_ERROR)) {
        /* The client failed while what the tunnel starts with was written
         * to it: its upstream is reset, as by an open tunnel. */
        note_client_reset(c, what);
        conn_cut(c);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT) {
        /* A client that took nothing for idle_timeout: while a CONNECT's
         * first bytes are checked (or the start of an answer waits for it:
         * connect_hello_cut()), a cut after its 200, so a reset on both
         * sides like every other (conn_cut(); a plain close otherwise). */
        conn_cut(c);
        return;
    }
    conn_free(c);
}
