/* sink_webhook: POST alerts to an http:// or https:// URL with retries
 * (sinks.h). */
#include "watch/sinks.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h> /* on_head(): response_code */
#include <event2/keyvalq_struct.h>
#include <openssl/ssl.h>

#include "state/store.h"
#include "util/weburl.h"
#include "watch/webhook_dns.h"
#include "watch/webhook_tls.h"
#include "util/env.h"
#include "util/id_set.h"
#include "util/socket_quiet.h"
#include "util/units.h"

/* The most an answer may leave unread in the connection's input: evhttp
 * bounds an answer's head (SINK_WEBHOOK_MAX_HEAD) and body
 * (SINK_WEBHOOK_MAX_BODY), not a chunk-size line, which it reads until its
 * CRLF: one that never ended held all the server sent in the attempt's 5 s
 * (tens of MB, each read scanning it all again for the line's end).
 * Past it the attempt ends as an answer too long (on_input). */
#define WEBHOOK_UNREAD_MAX (SINK_WEBHOOK_MAX_HEAD + SINK_WEBHOOK_MAX_BODY + 16384)
/* on_deadline() waits for the write callback on_head() queued, looking
 * again every WEBHOOK_NUDGE_RECHECK_US, up to WEBHOOK_NUDGE_WAIT_MS past
 * the attempt's limit: the callback runs on the loop's next turn, and the
 * bound keeps a callback that never runs from holding the attempt. */
#define WEBHOOK_NUDGE_RECHECK_US 1000
#define WEBHOOK_NUDGE_WAIT_MS    1000
/* At the deadline, an answer the connection already holds is taken first
 * (answer_held()): the deadline looks again after WEBHOOK_NUDGE_RECHECK_US,
 * at most WEBHOOK_LATE_TURNS times an attempt, while input is left. A turn
 * of the loop reads up to 4096 bytes of the socket: an answer held whole
 * (at most WEBHOOK_UNREAD_MAX) is read in 25; the bound keeps a server
 * that trickles its bytes from holding the attempt much past the deadline. */
#define WEBHOOK_LATE_TURNS 64
/* How often an attempt whose host name is being looked up hands evdns what
 * waits in its servers' sockets (on_lookup_watch()): shorter than a try
 * of evdns (resolv.conf's timeout: is whole seconds, 1 at least, to the C
 * library). */
#define WEBHOOK_LOOKUP_WATCH_MS 99 /* not due with a try's whole seconds */
/* How often the loop looks whether the store's thread has run the sink's
 * read of its queue (a look takes a mutex, never waits for the read). */
#define WEBHOOK_READ_POLL_US 2000

struct item {
    int64_t id; /* in the store; 0 when there is none */
    char *body;
    size_t n;
    int attempts;
};

/* Timings and the memory caps; SLUICE_TEST_WEBHOOK_* shorten them in tests.
 * attempt_ms (SINK_WEBHOOK_TIMEOUT_S) has no such switch: only the unit
 * tests, which include this file, shorten it. */
struct timings {
    uint64_t backoff_ms, backoff_max_ms, sweep_ms;
    size_t queue_max;    /* alerts in memory */
    size_t queue_bytes;  /* bytes of their bodies in memory (one alert however long) */
    size_t stored_max;   /* alerts waiting with a store, in memory and there */
    uint64_t attempt_ms; /* the deadline of an attempt, from its start */
};

struct webhook {
    struct event_base *base;
    struct timings t;
    struct evdns_base *dns;
    struct webhook_dns_socks dns_socks; /* its servers' sockets (borrowed from evdns) */
    struct event *lookup_watch;         /* while an attempt looks its host up */
    struct evhttp_connection *conn;
    struct webhook_tls *tls; /* https:// only */
    char tls_why[200];       /* why TLS failed on the last attempt, or "" */
    uint64_t attempt_ms;     /* CLOCK_MONOTONIC when the attempt started */
    /* The request in flight (owned by evhttp, which frees it after on_done
     * or when it is cancelled), or NULL: set before evhttp_make_request,
     * cleared by on_done and by on_deadline, so the deadline never cancels
     * a request evhttp has finished with. */
    struct evhttp_request *req;
    struct event *deadline; /* ends the attempt t.attempt_ms after it started */
    bool cut;               /* the deadline ended the last attempt */
    bool overlong;          /* the answer left over WEBHOOK_UNREAD_MAX unread */
    unsigned interim;       /* interim (1xx) answers skipped in this attempt */
    bool nudged;            /* on_head() queued a TLS write callback for evhttp */
    unsigned late_turns;    /* times the deadline waited for input held (on_deadline()) */
    struct store *store;
    char *url, *label, *host, *path, *hosthdr;
    /* What the store files the sink's alerts under (webhook_set_listing):
     * weburl_store_key(), the URL's SHA-256, never the URL (its path is
     * often the credential, and the store is a file), followed for the Nth
     * listing of a URL listed more than once by " (listing N)". */
    char *key;
    unsigned listing; /* N of "(listing N)"; 1 for the URL alone */
    uint16_t port;
    struct item *q; /* ring */
    size_t head, len, cap;
    size_t bytes; /* of the bodies in q */
    bool busy;
    bool parked_said; /* "undelivered after N attempts" said since the last delivery */
    enum evhttp_request_error last_error;
    bool errored;
    /* Why the attempt failed without an answer, for its message: errno as
     * evhttp left it (on_error: the socket's error; on_done without an
     * error code: a failed connect), the resolver's error (EAI_*), and
     * whether any of the request went out (the connection was up). */
    int sock_errno;
    int dns_error;
    bool sent;
    /* The attempt went on a connection an earlier answer came on (kept
     * alive), and no byte of an answer came back on it: a server that
     * closed that connection as the request went out (its keep-alive
     * ran out) never saw it, and the alert goes again at once on a new
     * connection, not counted as a failure (stale_conn()). */
    bool reused;
    bool answer_bytes;
    unsigned failures_in_row;
    struct event *retry;
    struct event *sweep;
    uint64_t delivered, failures;
    uint64_t only_stored; /* over the memory cap: kept in the store only */
    /* How many of them, for sluice_webhook_queue (only_stored is a hint
     * for the sweep, not a count): counted at adoption, then one up for
     * each alert kept there, one down for each the sweep takes back, and
     * set exactly when a sweep reads to the end of the sink's rows. */
    uint64_t stored_n;
    /* The store's read of the sink's queue under way (store_queue_read()),
     * or NULL: one at a time, the adoption's or a sweep's, run on the
     * store's thread and taken by on_read_poll() on a later tick. While
     * the adoption's is under way, new alerts wait in the store behind the
     * stored ones, as they do behind those kept in the store only. */
    struct store_read *reading;
    bool adopting;
    struct event *read_poll;
    uint64_t dropped;      /* over the memory cap without a store, or stored_max with one */
    uint64_t dropped_said; /* what standard error was last told */
    /* A reload took the sink out of the policy while an alert was in
     * flight (webhook_retire()): that attempt ends as it would have, never
     * retried, and <over> is called on the loop's next turn to free the
     * sink; nothing else is sent. */
    bool retired;
    void (*over)(struct webhook *w, void *arg);
    void *over_arg;
    /* The gateway stops (webhook_stopping()): no new attempt starts while
     * every alert the sink holds is in the state store. */
    bool stopping;
};

static uint64_t env_ms(const char *name, uint64_t dflt)
{
    return env_number(name, 3600000, dflt);
}

/* Test-only (see SPEC.md): SLUICE_TEST_WEBHOOK_BACKOFF_MS=N makes the
 * backoff start at N ms, cap at 60 x N and the stored queue be re-read every
 * 120 x N; SLUICE_TEST_WEBHOOK_QUEUE_MAX=M caps the memory queue at M
 * alerts, SLUICE_TEST_WEBHOOK_QUEUE_BYTES=B at B bytes of them. */
static struct timings timings_get(void)
{
    struct timings t = {SINK_WEBHOOK_BACKOFF_MS,
                        SINK_WEBHOOK_BACKOFF_MAX,
                        SINK_WEBHOOK_SWEEP_MS,
                        SINK_WEBHOOK_QUEUE_MAX,
                        SINK_WEBHOOK_QUEUE_BYTES,
                        SINK_WEBHOOK_STORED_MAX,
                        (uint64_t)SINK_WEBHOOK_TIMEOUT_S * 1000u};
    uint64_t b = env_ms("SLUICE_TEST_WEBHOOK_BACKOFF_MS", 0);
    if (b > 0) {
        t.backoff_ms = b;
        t.backoff_max_ms = b * 60;
        t.sweep_ms = b * 120;
    }
    t.queue_max = (size_t)env_ms("SLUICE_TEST_WEBHOOK_QUEUE_MAX", SINK_WEBHOOK_QUEUE_MAX);
    t.queue_bytes = (size_t)env_number("SLUICE_TEST_WEBHOOK_QUEUE_BYTES", SINK_WEBHOOK_QUEUE_BYTES,
                                       SINK_WEBHOOK_QUEUE_BYTES);
    return t;
}

static char *errf(const char *label, const char *why)
{
    char buf[600];
    snprintf(buf, sizeof(buf), "webhook %s: %s", label, why);
    return strdup(buf);
}

/* Fills <w>'s host, port, request target and Host header from <url>
 * (weburl.h): the target is the URL's path and query without the fragment,
 * "/" when it has no path. */
static int parse_url(struct webhook *w, const char *url, bool *https, const char **why)
{
    struct weburl u;
    if (weburl_parse(url, &u, why) < 0)
        return -1;
    *https = u.https;
    bool slash = u.target_len > 0 && u.target[0] == '/';
    w->host = strndup(u.host, u.host_len);
    w->path = malloc(u.target_len + 2);
    if (w->path != NULL) {
        w->path[0] = '/';
        memcpy(w->path + !slash, u.target, u.target_len);
        w->path[u.target_len + !slash] = '\0';
    }
    w->hosthdr = strndup(u.hostport, u.hostport_len);
    w->port = u.port;
    if (w->host == NULL || w->path == NULL || w->hosthdr == NULL) {
        *why = "out of memory";
        return -1;
    }
    return 0;
}

static void try_send(struct webhook *w);
static void on_sweep(evutil_socket_t fd, short what, void *arg);
static void on_read_poll(evutil_socket_t fd, short what, void *arg);
static void drop_conn(struct webhook *w);
static bool socket_holds_input(struct bufferevent *bev);

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct webhook *w = arg;
    (void)fd;
    (void)what;
    if (w->retired) {
        w->over(w, w->over_arg); /* frees <w>: nothing of it is touched after */
        return;
    }
    try_send(w);
}

/* Memory is empty while alerts wait in the store only: they are read back
 * now, not at the next sweep (which came once a minute, so a backlog
 * drained at one memory's worth a minute). */
static void refill_soon(struct webhook *w)
{
    if (w->len == 0 && w->only_stored > 0 && w->sweep != NULL)
        event_active(w->sweep, EV_TIMEOUT, 1);
}

static void pop(struct webhook *w)
{
    struct item *it = &w->q[w->head];
    w->bytes -= it->n;
    free(it->body);
    w->head = (w->head + 1) % w->cap;
    w->len--;
}

/* Moves the head to the tail (the others go first next time). */
static void rotate(struct webhook *w)
{
    struct item it = w->q[w->head];
    w->head = (w->head + 1) % w->cap;
    w->q[(w->head + w->len - 1) % w->cap] = it;
}

/* What evhttp does not say of a failed attempt: errno, the resolver's
 * error, kept for failure_text(). */
static void note_failure(struct webhook *w, int err)
{
    struct bufferevent *bev = evhttp_connection_get_bufferevent(w->conn);
    w->sock_errno = err;
    w->dns_error = bev != NULL ? bufferevent_socket_get_dns_error(bev) : 0;
}

static void on_error(enum evhttp_request_error e, void *arg)
{
    struct webhook *w = arg;
    /* evhttp restores the socket's errno for this callback (libevent
     * 2.1.12, evhttp_connection_fail_()) */
    note_failure(w, errno);
    w->last_error = e;
    w->errored = true;
    if (w->tls != NULL && e != EVREQ_HTTP_REQUEST_CANCEL)
        webhook_tls_why(evhttp_connection_get_bufferevent(w->conn), w->tls_why, sizeof(w->tls_why));
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The deadline cut the attempt, or evhttp timed out. evhttp reports a
 * failure before the connection is up (connect, TLS handshake) without an
 * error code; one that took the whole timeout is a timeout all the same. */
static bool timed_out(const struct webhook *w)
{
    if (w->cut)
        return true;
    if (w->errored)
        return w->last_error == EVREQ_HTTP_TIMEOUT;
    return mono_ms() - w->attempt_ms + 50 >= w->t.attempt_ms;
}

/* <err> if it is an error a connect can end with, else 0. */
static int connect_errno(int err)
{
    switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ENETUNREACH:
    case ENETDOWN:
    case EHOSTUNREACH:
    case EHOSTDOWN:
    case ETIMEDOUT:
    case EADDRNOTAVAIL:
    case EAFNOSUPPORT:
    case EACCES:
    case EPERM:
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
        return err;
    default:
        return 0;
    }
}

/* A connect that failed. evhttp calls on_done without an error code when
 * the socket's error was ECONNREFUSED (evhttp_connection_cb(), which has
 * by then closed the socket: errno tells of that close, ENOTCONN), or
 * with errno as connect() left it when it failed at once; on_error (EOF)
 * with errno set for the others. So on_done without an error code and
 * without a connect's errno is a refusal. */
static int connect_failure(const struct webhook *w)
{
    int err = connect_errno(w->sock_errno);
    if (err == 0 && !w->errored)
        err = ECONNREFUSED;
    return err;
}

static const char *failure_text(const struct webhook *w, int code, char *buf, size_t len)
{
    if (code > 0)
        snprintf(buf, len, "answered %d", code);
    else if (w->interim > SINK_WEBHOOK_MAX_INTERIM)
        snprintf(buf, len, "cannot deliver: the answer has more than %d interim (1xx) responses",
                 SINK_WEBHOOK_MAX_INTERIM);
    else if (timed_out(w))
        snprintf(buf, len, "cannot deliver: no answer within %d s", SINK_WEBHOOK_TIMEOUT_S);
    else if (w->errored && w->last_error == EVREQ_HTTP_DATA_TOO_LONG)
        snprintf(buf, len, "cannot deliver: the answer is longer than %d bytes",
                 SINK_WEBHOOK_MAX_BODY);
    else if (w->tls_why[0] != '\0')
        snprintf(buf, len, "cannot deliver: %s", w->tls_why);
    else if (w->dns_error != 0)
        snprintf(buf, len, "cannot deliver: cannot resolve %s: %s", w->host,
                 evutil_gai_strerror(w->dns_error));
    else if (!w->sent && connect_failure(w) != 0)
        snprintf(buf, len, "cannot deliver: cannot connect: %s", strerror(connect_failure(w)));
    else if (w->errored && w->last_error == EVREQ_HTTP_EOF)
        snprintf(buf, len, "cannot deliver: the connection %s before the answer",
                 w->sock_errno == ECONNRESET ? "was reset" : "closed");
    else if (w->errored && w->last_error == EVREQ_HTTP_INVALID_HEADER)
        snprintf(buf, len, "cannot deliver: the answer is malformed");
    else
        snprintf(buf, len, "cannot deliver");
    return buf;
}

/* The attempt failed because its kept connection had been closed by the
 * server: it closed (or reset) the connection before any byte of an
 * answer, the request having gone on a connection an earlier answer came
 * on. HTTP/1.1 lets a server close an idle connection at any time, and
 * one that does so as the next alert goes out (its keep-alive timeout)
 * never read it: that is no failure of the server's, and the alert is sent
 * again at once, on a new connection (where a failure counts as usual).
 * Delivery is at least once: a server that read it and then closed gets
 * it twice. */
static bool stale_conn(const struct webhook *w, int code)
{
    return code == 0 && w->reused && !w->answer_bytes && !w->cut && !w->overlong && w->errored &&
           w->last_error == EVREQ_HTTP_EOF;
}

/* on_retry() runs on the loop's next turn (a pending retry moved to it),
 * not from evhttp's callback, which must not free what it runs on. */
static void retry_next_turn(struct webhook *w)
{
    struct timeval now = {0, 0};
    evtimer_add(w->retry, &now);
}

/* The attempt in flight when a reload took the sink out of the policy is
 * over (answered <code>, or 0): a 2xx deletes its row, as for any
 * delivery, so that a policy naming the sink again does not send it twice;
 * otherwise the row stays, kept for such a policy, and is not retried (the
 * sink takes no alert). Either way memory lets the alert go and the sink
 * is freed on the loop's next turn (on_retry()), not from evhttp's
 * callback. */
static void retired_over(struct webhook *w, int code)
{
    struct item *it = &w->q[w->head];
    char why[240];
    bool kept = w->len > 0 && w->store != NULL && it->id > 0 && !store_queue_lost(w->store, it->id);
    if (w->len == 0) {
        /* nothing held (never so: webhook_retire() keeps the one in flight) */
    } else if (code >= 200 && code < 300) {
        w->delivered++;
        if (w->store != NULL && it->id > 0)
            store_queue_del(w->store, w->key, it->id);
        fprintf(stderr,
                "sluice: webhook %s: the alert in flight when the sink left the policy was "
                "delivered\n",
                w->label);
    } else {
        w->failures++;
        fprintf(stderr,
                "sluice: webhook %s: the alert in flight when the sink left the policy was not "
                "delivered (%s): %s\n",
                w->label, failure_text(w, code, why, sizeof(why)),
                kept ? "kept in the state store, not retried (a policy that names the sink "
                       "again sends it)"
                     : "in no state store: lost");
    }
    if (w->len > 0)
        pop(w);
    retry_next_turn(w);
}

/* The attempt for the head of the queue is over: answered <code>, or 0
 * when there was no answer. A 2xx delivers it; anything else is a failure,
 * retried after the backoff. */
static void attempt_over(struct webhook *w, int code)
{
    struct item *it = &w->q[w->head];
    char why[240];
    w->busy = false;
    if (w->retired) {
        retired_over(w, code);
        return;
    }
    if (w->len == 0)
        return;
    if (stale_conn(w, code)) {
        retry_next_turn(w);
        return;
    }
    if (code >= 200 && code < 300) {
        w->delivered++;
        w->failures_in_row = 0;
        w->parked_said = false;
        if (w->store != NULL && it->id > 0)
            store_queue_del(w->store, w->key, it->id);
        pop(w);
        refill_soon(w);
        try_send(w);
        return;
    }
    w->failures++;
    it->attempts++;
    if (w->failures_in_row++ == 0)
        fprintf(stderr, "sluice: webhook %s: %s; retrying with backoff\n", w->label,
                failure_text(w, code, why, sizeof(why)));
    if (w->store != NULL && it->id > 0)
        store_queue_attempts(w->store, it->id, it->attempts);
    if (it->attempts >= SINK_WEBHOOK_MAX_ATTEMPTS) {
        /* Never dropped: it goes behind the others, with a fresh set of
         * attempts, and is retried for as long as the gateway runs. */
        if (!w->parked_said)
            fprintf(stderr,
                    "sluice: webhook %s: an alert is undelivered after %d attempts (%s); it stays "
                    "queued%s and is retried with the backoff capped at %llu ms\n",
                    w->label, it->attempts, failure_text(w, code, why, sizeof(why)),
                    w->store != NULL && it->id > 0 ? " (and in the state store)" : "",
                    (unsigned long long)w->t.backoff_max_ms);
        w->parked_said = true;
        it->attempts = 0;
        rotate(w);
    }
    unsigned shift = w->failures_in_row - 1 < 16 ? w->failures_in_row - 1 : 16;
    uint64_t ms = w->t.backoff_ms << shift;
    if (ms > w->t.backoff_max_ms)
        ms = w->t.backoff_max_ms;
    struct timeval tv;
    tv = timeval_of_ms(ms);
    evtimer_add(w->retry, &tv);
}

/* evhttp's callback when the request is over (answered, or failed with
 * on_error first); evhttp frees <req> when it returns. */
static void on_done(struct evhttp_request *req, void *arg)
{
    struct webhook *w = arg;
    if (!w->errored)
        note_failure(w, errno); /* a failed connect, when there is no answer */
    w->req = NULL;
    /* Removes a deadline that is due but has not run yet, too: it can no
     * longer reach this request. */
    evtimer_del(w->deadline);
    attempt_over(w, req != NULL ? evhttp_request_get_response_code(req) : 0);
}

/* At the deadline: whether the connection holds bytes evhttp has not
 * taken yet (in its input, in OpenSSL, or in the socket), an answer that
 * may have come in time; if so, the deadline looks again on a later turn
 * of the loop (at most WEBHOOK_LATE_TURNS times an attempt), after the
 * connection has read them. A gateway that was frozen past the deadline
 * (SIGSTOP, a paused VM, a long stall of the loop) runs the deadline's
 * timer before it reads the socket: after a stop, epoll_wait() comes back
 * with no event (EINTR) and libevent runs the timers that fell due;
 * after a stall, a read event whose own timeout fell due too is reported
 * as that timeout alone; a TLS connection's read callback is deferred
 * behind the timers. The alert, answered in time, was then cut, counted
 * undelivered and sent again: a copy at the receiver. After a freeze
 * that long, evhttp's read timeout (open_conn()) fell due too, queued
 * behind the deadline: turning the read off and on again drops it and
 * starts it anew, or evhttp would end the request as timed out before the
 * read. */
static bool answer_held(struct webhook *w)
{
    struct bufferevent *bev = evhttp_connection_get_bufferevent(w->conn);
    if (w->overlong || w->late_turns >= WEBHOOK_LATE_TURNS ||
        (evbuffer_get_length(bufferevent_get_input(bev)) == 0 && !socket_holds_input(bev)))
        return false;
    w->late_turns++;
    if (bufferevent_get_enabled(bev) & EV_READ) {
        bufferevent_disable(bev, EV_READ);
        bufferevent_enable(bev, EV_READ);
    }
    struct timeval tv = {0, WEBHOOK_NUDGE_RECHECK_US};
    evtimer_add(w->deadline, &tv);
    return true;
}

/* t.attempt_ms (SINK_WEBHOOK_TIMEOUT_S) after the request started, and it
 * is not over. evhttp's own timeout restarts with every read, so a server
 * that trickles its answer would hold the queue for as long as it liked:
 * the deadline bounds the whole attempt. evhttp_cancel_request() frees the
 * request and resets the connection (the next attempt reconnects); it
 * calls on_error (EVREQ_HTTP_REQUEST_CANCEL) but not on_done, so the
 * failure is counted here. No race with the request's own end: everything
 * runs on the one loop, and on_done clears w->req and removes this timer,
 * so a request evhttp has finished with is never cancelled; the reset
 * unhooks the connection's bufferevent callbacks, so a read already
 * queued for it (a TLS bufferevent defers its callbacks) does not reach
 * the freed request. An attempt cut while evhttp was still looking up the
 * host name (its connection has no socket yet) leaves that connection
 * behind: libevent 2.1 cancels a pending lookup when a socket bufferevent
 * is reset, not a TLS one, whose late answer then connected, or failed,
 * the next attempt's connection (seen: the next attempt ended "cannot
 * connect: Connection refused" when the first one's lookup came back
 * NXDOMAIN while its own was under way). Freed, the connection's
 * bufferevent keeps no callback and lives until that answer (an address
 * opens a socket there, closed at once); the next attempt gets a new one
 * (fresh_conn()). */
/* Whether <w>'s connection is still looking up its host: it has no socket. */
static bool looking_up(const struct webhook *w)
{
    return w->dns != NULL && w->conn != NULL &&
           bufferevent_getfd(evhttp_connection_get_bufferevent(w->conn)) < 0;
}

/* Every WEBHOOK_LOOKUP_WATCH_MS while an attempt looks its host up: evdns
 * is handed what waits in its servers' sockets. After a freeze (SIGSTOP, a
 * paused VM, a long stall of the loop) past evdns' timer for a try, the
 * timers run before the reads, and this one, due before evdns' (its period
 * is shorter than any try), runs first: the answer that came in time ends
 * the try, and evdns' timer with it. Before, evdns' timer ran first and
 * asked again, or, its attempts spent, failed the lookup ("cannot
 * resolve"), the answer in its socket then dropped. */
static void on_lookup_watch(evutil_socket_t fd, short what, void *arg)
{
    struct webhook *w = arg;
    (void)fd;
    (void)what;
    if (w->req == NULL || !looking_up(w))
        return;
    (void)webhook_dns_read_now(w->base, &w->dns_socks);
    struct timeval tv = timeval_of_ms(WEBHOOK_LOOKUP_WATCH_MS);
    evtimer_add(w->lookup_watch, &tv);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct webhook *w = arg;
    struct evhttp_request *req = w->req;
    (void)fd;
    (void)what;
    if (req == NULL)
        return;
    if (w->nudged &&
        (bufferevent_get_enabled(evhttp_connection_get_bufferevent(w->conn)) & EV_WRITE) &&
        mono_ms() - w->attempt_ms < w->t.attempt_ms + WEBHOOK_NUDGE_WAIT_MS) {
        /* The write callback on_head() queued has not run: cancelled now,
         * it would reach evhttp for a request that is gone. It runs first
         * on the next turn of the loop (bounded all the same). */
        struct timeval tv = {0, WEBHOOK_NUDGE_RECHECK_US};
        evtimer_add(w->deadline, &tv);
        return;
    }
    if (answer_held(w))
        return;
    bool resolving = looking_up(w);
    w->req = NULL;
    w->cut = !w->overlong;
    evhttp_cancel_request(req);
    if (resolving)
        drop_conn(w);
    if (w->overlong) { /* after the cancel, which reported EVREQ_HTTP_REQUEST_CANCEL */
        w->errored = true;
        w->last_error = EVREQ_HTTP_DATA_TOO_LONG;
    }
    attempt_over(w, 0);
}

/* evhttp's callback once the head of an answer is read. An interim answer
 * (1xx: 102 Processing, 103 Early Hints; RFC 9110 15.2), which a server may
 * send before its final one whether asked for or not, is not the answer:
 * evhttp reads on after a 100 Continue only, and took any other for the
 * final answer ("answered 103"), so the alert was sent again and again
 * and never counted delivered while the server answered so. Each is made a
 * 100 for evhttp, its headers dropped, at most SINK_WEBHOOK_MAX_INTERIM
 * per attempt, as the gate allows an upstream; one more fails the attempt
 * (evhttp then calls on_error and on_done). A 101 is no interim answer
 * here: no upgrade was asked for. evhttp's 100 path writes what is left of
 * the request (nothing: the body went with the head) and reads the next
 * head once its write callback says the output is empty, which a socket
 * bufferevent reports when the socket is writable but a TLS one only after
 * it wrote something: for https:// the callback is queued here (deferred:
 * it runs once evhttp is done with this head; before the connection's own
 * events, so that no error ends the request first, and on_deadline() waits
 * for it). Without it a TLS answer with a 100 Continue waited for the
 * deadline. */
static int on_head(struct evhttp_request *req, void *arg)
{
    struct webhook *w = arg;
    int code = evhttp_request_get_response_code(req);
    if (code < 100 || code > 199 || code == 101)
        return 0;
    if (++w->interim > SINK_WEBHOOK_MAX_INTERIM)
        return -1;
    evhttp_clear_headers(evhttp_request_get_input_headers(req));
    req->response_code = 100;
    if (w->tls != NULL) {
        w->nudged = true;
        bufferevent_trigger(evhttp_connection_get_bufferevent(w->conn), EV_WRITE,
                            BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
    }
    return 0;
}

/* Data came into the connection's input. Past WEBHOOK_UNREAD_MAX not
 * consumed by evhttp, the attempt ends now, through on_deadline on the
 * next turn of the loop (not from inside evhttp's read). */
static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct webhook *w = arg;
    if (info->n_added > 0 && w->req != NULL)
        w->answer_bytes = true;
    if (info->n_added == 0 || w->req == NULL || w->overlong ||
        evbuffer_get_length(buf) <= WEBHOOK_UNREAD_MAX)
        return;
    w->overlong = true;
    evtimer_del(w->deadline); /* now, not also when it was due */
    event_active(w->deadline, EV_TIMEOUT, 1);
}

/* evhttp wrote the request into the connection's output: it is written
 * only once the connection is up (and a TLS one's handshake done). */
static void on_output(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct webhook *w = arg;
    (void)buf;
    if (info->n_added > 0 && w->req != NULL)
        w->sent = true;
}

/* Opens <w>'s connection, kept while its answers end where they say:
 * evhttp's own for http://, one over a TLS bufferevent for https://.
 * evhttp reconnects it when the server closed it or a request failed, with
 * a new handshake (tested: a server that closes after every answer, a
 * refused handshake retried, a server that comes up late); fresh_conn()
 * replaces it. On failure <w> has no connection. */
static int open_conn(struct webhook *w)
{
    /* The bufferevent closes its socket when it is freed, as the TLS one
     * does: evhttp's own does not (evhttp closes it), and one a name
     * lookup outlived its connection with (drop_conn(), webhook_free())
     * connects if that lookup ends with an address (the A record came
     * before the sink was freed, the AAAA one not), a socket no one closed. */
    struct bufferevent *bev = w->tls == NULL
                                  ? bufferevent_socket_new(w->base, -1, BEV_OPT_CLOSE_ON_FREE)
                                  : webhook_tls_bev(w->tls, w->base);
    if (bev == NULL)
        return -1;
    w->conn = evhttp_connection_base_bufferevent_new(w->base, w->dns, bev, w->host, w->port);
    if (w->conn == NULL) {
        bufferevent_free(bev);
        return -1;
    }
    /* The attempt's deadline (on_deadline()) ends an attempt; evhttp's
     * own timeout, restarted by each read, is a second longer, so that it
     * never falls due before the deadline: after a freeze past both, the
     * deadline runs first and an answer held is still taken (answer_held()). */
    evhttp_connection_set_timeout(w->conn, SINK_WEBHOOK_TIMEOUT_S + 1);
    evhttp_connection_set_retries(w->conn, 0);
    /* The answer is hostile input too: only its status matters. */
    evhttp_connection_set_max_headers_size(w->conn, SINK_WEBHOOK_MAX_HEAD);
    evhttp_connection_set_max_body_size(w->conn, SINK_WEBHOOK_MAX_BODY);
    /* kept across reconnections: evhttp reuses the bufferevent */
    if (evbuffer_add_cb(bufferevent_get_input(bev), on_input, w) == NULL ||
        evbuffer_add_cb(bufferevent_get_output(bev), on_output, w) == NULL) {
        drop_conn(w);
        return -1;
    }
    return 0;
}

/* Frees <w>'s connection, if any (a request in flight is dropped, no
 * callback). Its bufferevent may outlive it, held by a name lookup under
 * way (on_deadline()): it keeps no callback of the sink's. */
static void drop_conn(struct webhook *w)
{
    if (w->conn == NULL)
        return;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(w->conn);
    if (bev != NULL) {
        evbuffer_remove_cb(bufferevent_get_input(bev), on_input, w);
        evbuffer_remove_cb(bufferevent_get_output(bev), on_output, w);
    }
    evhttp_connection_free(w->conn);
    w->conn = NULL;
}

/* Whether <bev>'s socket holds bytes not read yet, or its end: the
 * bufferevent reads at most 4096 bytes at a time (libevent 2.1's
 * EVBUFFER_MAX_READ), so an answer that ended a read left what the server
 * sent past it in the socket, where the input buffer does not show it. For
 * https:// any record there is no answer either (a second one, a
 * close_notify), nor are bytes OpenSSL holds decrypted. */
static bool socket_holds_input(struct bufferevent *bev)
{
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd < 0)
        return false; /* not connected: the request goes on a new connection */
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    if (ssl != NULL && SSL_pending(ssl) > 0)
        return true;
    return !socket_is_quiet(fd);
}

/* Before a request goes out: bytes the connection already holds came
 * before it was sent, so they are no answer to it. evhttp reads a kept
 * connection's input from where the last answer ended, so what a server
 * sent past its answer (a second answer, a body longer than its
 * Content-Length) was taken for the next request's answer: a stale 200
 * counted an alert delivered that the server never answered, a stale error
 * had it sent again. Such a connection is dropped (evhttp has no call to
 * reset one) and the request goes on a new one. evhttp resets an idle
 * connection itself when bytes arrive while it waits; these came with the
 * answer, in the same read. Called when no request is in flight, from
 * on_done() too: evhttp_connection_done() (libevent 2.1) and its callers
 * do not touch the connection after calling it (it is no
 * evhttp_connection_free_on_completion() one). A sink without a
 * connection (on_deadline() dropped it, or opening one failed) opens one. */
static int fresh_conn(struct webhook *w)
{
    struct bufferevent *bev = w->conn != NULL ? evhttp_connection_get_bufferevent(w->conn) : NULL;
    if (bev != NULL && evbuffer_get_length(bufferevent_get_input(bev)) == 0 &&
        !socket_holds_input(bev))
        return 0;
    drop_conn(w);
    return open_conn(w);
}

/* No request went out for the head of the queue (out of memory, or
 * evhttp_make_request() refused it): tried again after the backoff's
 * first step, not when the next alert comes, which on a quiet system may
 * be never. Not an attempt: nothing is counted. */
static void send_later(struct webhook *w)
{
    w->busy = false;
    w->req = NULL;
    struct timeval tv;
    tv = timeval_of_ms(w->t.backoff_ms);
    evtimer_add(w->retry, &tv);
}

static void try_send(struct webhook *w)
{
    if (w->busy || w->len == 0 || w->retired || evtimer_pending(w->retry, NULL))
        return;
    if (w->stopping && webhook_unstored(w, true) == 0)
        return; /* the next start sends them */
    struct item *it = &w->q[w->head];
    if (fresh_conn(w) < 0) {
        send_later(w);
        return;
    }
    struct evhttp_request *req = evhttp_request_new(on_done, w);
    if (req == NULL) {
        send_later(w);
        return;
    }
    w->errored = false;
    w->cut = false;
    w->overlong = false;
    w->interim = 0;
    w->nudged = false;
    w->late_turns = 0;
    w->sent = false;
    w->answer_bytes = false;
    /* connected: an earlier answer came on it (evhttp closes the socket
     * of a connection that ends or fails, and connects anew) */
    w->reused = bufferevent_getfd(evhttp_connection_get_bufferevent(w->conn)) >= 0;
    w->sock_errno = 0;
    w->dns_error = 0;
    w->tls_why[0] = '\0';
    w->attempt_ms = mono_ms();
    evhttp_request_set_error_cb(req, on_error);
    evhttp_request_set_header_cb(req, on_head);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    char len[24];
    snprintf(len, sizeof(len), "%zu", it->n);
    /* A request missing a header or its body is never sent: a server
     * would wait for the body it announces, or refuse it. */
    if (evhttp_add_header(h, "Host", w->hosthdr) != 0 ||
        evhttp_add_header(h, "Content-Type", "application/json") != 0 ||
        evhttp_add_header(h, "Content-Length", len) != 0 ||
        evhttp_add_header(h, "User-Agent", "sluice-alerts") != 0 ||
        evbuffer_add(evhttp_request_get_output_buffer(req), it->body, it->n) != 0) {
        evhttp_request_free(req); /* not handed to evhttp yet: ours */
        send_later(w);
        return;
    }
    w->busy = true;
    w->req = req;
    if (w->dns != NULL && !w->reused) { /* before evhttp's lookup and evdns' timer */
        struct timeval watch = timeval_of_ms(WEBHOOK_LOOKUP_WATCH_MS);
        evtimer_add(w->lookup_watch, &watch);
    }
    /* evhttp may end the request before this returns: a connect that fails
     * at once (socket() out of descriptors, say) runs on_done from inside
     * it, frees the request and returns 0; only a request still in flight
     * gets a deadline. In libevent 2.1.12 it returns -1 in two cases: the
     * copy of the target failed (it freed the request), or binding the
     * local address failed (the request is left to the caller), which
     * needs evhttp_connection_set_local_address() or _port(), never called
     * here; so -1 means freed, and the request is not touched again. */
    if (evhttp_make_request(w->conn, req, EVHTTP_REQ_POST, w->path) != 0) {
        if (w->req == req)
            send_later(w);
    } else if (w->req == req) {
        struct timeval tv;
        tv = timeval_of_ms(w->t.attempt_ms);
        evtimer_add(w->deadline, &tv);
    }
}

struct webhook *webhook_new(struct event_base *base, const char *url, struct store *store,
                            const struct webhook_tls_ca *ca, char **err)
{
    struct webhook *w = calloc(1, sizeof(*w));
    const char *why = NULL;
    bool https = false;
    *err = NULL;
    if (w == NULL || (w->url = strdup(url)) == NULL ||
        (w->key = weburl_store_key(url, 1)) == NULL || (w->label = weburl_label(url)) == NULL) {
        if (w != NULL) {
            free(w->url);
            free(w->key);
        }
        free(w);
        *err = errf("(a sink)", "out of memory");
        return NULL;
    }
    w->base = base;
    w->store = store;
    w->listing = 1;
    w->t = timings_get();
    if (parse_url(w, url, &https, &why) < 0)
        goto err;
    unsigned char ip[16];
    bool is_ip = inet_pton(AF_INET, w->host, ip) == 1 || inet_pton(AF_INET6, w->host, ip) == 1;
    if (https && (w->tls = webhook_tls_new(w->host, is_ip, ca, &why)) == NULL)
        goto err;
    if (!is_ip) {
        /* a name: resolve it without blocking the loop */
        if ((w->dns = webhook_dns_new(base, w->label, &w->dns_socks, &why)) == NULL)
            goto err;
    }
    w->retry = evtimer_new(base, on_retry, w);
    w->deadline = evtimer_new(base, on_deadline, w);
    w->lookup_watch = evtimer_new(base, on_lookup_watch, w);
    w->sweep = event_new(base, -1, EV_PERSIST, on_sweep, w);
    w->read_poll = evtimer_new(base, on_read_poll, w);
    w->cap = 64;
    w->q = calloc(w->cap, sizeof(*w->q));
    if (open_conn(w) < 0 || w->retry == NULL || w->deadline == NULL || w->lookup_watch == NULL ||
        w->sweep == NULL || w->read_poll == NULL || w->q == NULL) {
        why = "out of memory";
        goto err;
    }
    struct timeval tv;
    tv = timeval_of_ms(w->t.sweep_ms);
    event_add(w->sweep, &tv);
    return w;
err:
    *err = errf(w->label, why != NULL ? why : "error");
    webhook_free(w);
    return NULL;
}

const char *webhook_url(const struct webhook *w)
{
    return w->url;
}

int webhook_set_listing(struct webhook *w, unsigned n)
{
    char *key = weburl_store_key(w->url, n);
    if (key == NULL)
        return -1;
    free(w->key);
    w->key = key;
    w->listing = n > 1 ? n : 1;
    return 0;
}

const char *webhook_store_key(const struct webhook *w)
{
    return w->key;
}

const char *webhook_label(const struct webhook *w)
{
    return w->label;
}

/* Memory has room for one more alert of <n> bytes: under both caps, or
 * empty (an alert longer than SINK_WEBHOOK_QUEUE_BYTES is held alone). */
static bool has_room(const struct webhook *w, size_t n)
{
    return w->len < w->t.queue_max && (w->len == 0 || w->bytes + n <= w->t.queue_bytes);
}

/* Drops the oldest alert not in flight, to make room: over the memory
 * queue for an alert the store does not hold, or, <with_row>, over
 * t.stored_max waiting (its row deleted too). */
static void drop_oldest(struct webhook *w, bool with_row)
{
    /* Said of a gateway without --state, and of one whose store is not
     * open yet (a lock held at the start) or did not take the alert (its
     * writes over their caps, out of memory): "no state store" misled the
     * operator of the last two, who gave one. */
    if (w->dropped == 0 && !with_row)
        fprintf(stderr,
                "sluice: webhook %s: %zu alerts (%zu bytes) queued in memory only (%s): "
                "dropping the oldest (memory holds at most %zu alerts and %zu bytes; counted in "
                "sluice_webhook_dropped_total)\n",
                w->label, w->len, w->bytes,
                w->store == NULL ? "no state store is open" : "the state store did not take them",
                w->t.queue_max, w->t.queue_bytes);
    else if (w->dropped == 0)
        fprintf(stderr,
                "sluice: webhook %s: %zu alerts waiting, in memory and the state store: "
                "dropping the oldest (at most %zu wait; counted in "
                "sluice_webhook_dropped_total)\n",
                w->label, webhook_waiting(w), w->t.stored_max);
    size_t gone = w->busy && w->len >= 2 ? (w->head + 1) % w->cap : w->head;
    if (with_row && w->q[gone].id > 0)
        store_queue_del(w->store, w->key, w->q[gone].id);
    if (w->busy && w->len >= 2) {
        size_t second = (w->head + 1) % w->cap;
        w->bytes -= w->q[second].n;
        free(w->q[second].body);
        w->q[second] = w->q[w->head];
        w->head = second;
        w->len--;
    } else {
        pop(w);
    }
    if (w->dropped++ == 0)
        w->dropped_said = 1;
}

/* Out of memory for an alert: one in the store waits there for the sweep;
 * one that is not is dropped and counted like one over the cap. */
static void lost_to_memory(struct webhook *w, int64_t id)
{
    if (id > 0)
        w->only_stored++;
    else
        w->dropped++;
}

static void enqueue(struct webhook *w, int64_t id, const char *json, size_t n, int attempts)
{
    if (!has_room(w, n)) {
        if (id > 0) { /* it is in the store: the sweep brings it back when there is room */
            w->only_stored++;
            return;
        }
        /* the one in flight stays: it alone may be held with the new one */
        while (!has_room(w, n) && w->len > (w->busy ? 1u : 0u))
            drop_oldest(w, false);
    }
    if (w->len == w->cap) {
        size_t nc = w->cap * 2;
        struct item *nq = calloc(nc, sizeof(*nq));
        if (nq == NULL) {
            lost_to_memory(w, id);
            return;
        }
        for (size_t i = 0; i < w->len; i++)
            nq[i] = w->q[(w->head + i) % w->cap];
        free(w->q);
        w->q = nq;
        w->head = 0;
        w->cap = nc;
    }
    struct item *it = &w->q[(w->head + w->len) % w->cap];
    it->body = malloc(n > 0 ? n : 1);
    if (it->body == NULL) {
        lost_to_memory(w, id);
        return;
    }
    memcpy(it->body, json, n);
    it->n = n;
    w->bytes += n;
    it->id = id;
    it->attempts = attempts;
    w->len++;
    try_send(w);
}

/* ---- the periodic sweep ------------------------------------------------------ */

struct sweep_ctx {
    struct webhook *w;
    int64_t *ids; /* the ids in memory, sorted */
    size_t nids;
    uint64_t left;  /* rows of this sink not in memory and not taken */
    uint64_t taken; /* rows taken into memory */
};

static void sweep_row(int64_t id, const char *sink, const char *body, int attempts, void *arg)
{
    struct sweep_ctx *c = arg;
    (void)attempts;
    if (strcmp(sink, c->w->key) != 0 || id_set_has(c->ids, c->nids, id))
        return;
    size_t n = strlen(body);
    if (c->left > 0 || !has_room(c->w, n)) { /* none goes before an older one left */
        c->left++;
        return;
    }
    size_t before = c->w->len;
    enqueue(c->w, id, body, n, 0);
    if (c->w->len == before)
        c->left++;
    else
        c->taken++;
}

/* What <w>'s memory queue holds of the store's rows: the alerts that were
 * given a row (<with_id>), and of those the ones whose row is still in the
 * store (<stored>, with the <bytes> of their bodies). One walk for the
 * sweep's read and for the count after it. */
struct in_memory {
    size_t with_id;
    uint64_t stored;
    size_t bytes;
};

static struct in_memory in_memory_of(const struct webhook *w)
{
    struct in_memory m = {0, 0, 0};
    for (size_t i = 0; i < w->len; i++) {
        const struct item *it = &w->q[(w->head + i) % w->cap];
        if (it->id <= 0)
            continue;
        m.with_id++;
        if (!store_queue_lost(w->store, it->id)) {
            m.stored++;
            m.bytes += it->n;
        }
    }
    return m;
}

/* After a read of the store: how many of the sink's alerts wait there
 * only, from the sink's row count (<got>), for sluice_webhook_queue; and
 * whether the sweep must come back (<left> rows read and not taken, or
 * more rows than the read brought). */
static void after_read(struct webhook *w, const struct store_read_got *got, uint64_t left)
{
    uint64_t mem = in_memory_of(w).stored;
    w->stored_n = (uint64_t)got->count > mem ? (uint64_t)got->count - mem : 0;
    w->only_stored = left > 0 || got->all ? left : 1;
}

/* Starts the store's read of the sink's <limit> oldest rows, taken on a
 * later tick (on_read_poll), sized by bytes too: no more of them than the
 * bytes memory has left, and <again> more, the bytes of the alerts in
 * memory the read brings again (the sweep's, passed over). A read of
 * 10,000 rows of 8 KiB held 80 MB, over the memory's 16 MiB, until it was
 * taken; the alert memory had no room for was read to be thrown away. As
 * has_room(): an empty memory takes one alert however long. */
static void read_start(struct webhook *w, int limit, size_t again, bool adopting)
{
    size_t left = w->bytes < w->t.queue_bytes ? w->t.queue_bytes - w->bytes : 0;
    w->reading = store_queue_read(w->store, w->key, limit, left + again, w->len == 0);
    if (w->reading == NULL) {
        w->only_stored = w->only_stored > 0 ? w->only_stored : 1; /* the sweep tries again */
        return;
    }
    w->adopting = adopting;
    struct timeval tv = {0, WEBHOOK_READ_POLL_US};
    evtimer_add(w->read_poll, &tv);
}

/* Every sweep period: alerts kept only in the store (over the memory cap)
 * come back into memory as room frees up, oldest first; drops are reported.
 * It reads only the sink's oldest rows, never the whole queue: an agent can
 * queue hundreds of thousands of alerts while the webhook is down, and
 * reading them all each minute stalled the loop. Among the sink's first
 * room + nids + 1 rows at most nids are in memory already, so they hold
 * the room's worth of others and tell whether more wait (only_stored needs
 * no more than that: it only says whether to sweep); and no more bytes
 * than the room's and those nids' (read_start()). The read runs on the
 * store's thread (a store on a file system that does not answer holds it,
 * not the loop): sweep_take() takes its rows. */
static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    struct webhook *w = arg;
    (void)fd;
    (void)what;
    if (w->retired)
        return; /* refill_soon() activates it by hand */
    if (w->dropped != w->dropped_said) {
        fprintf(stderr,
                "sluice: webhook %s: %llu alert(s) dropped so far (queue full: over the "
                "memory queue without a state store, or over %zu waiting with one)\n",
                w->label, (unsigned long long)w->dropped, w->t.stored_max);
        w->dropped_said = w->dropped;
    }
    if (w->store == NULL || w->reading != NULL || w->only_stored == 0 || w->len >= w->t.queue_max ||
        (w->len > 0 && w->bytes >= w->t.queue_bytes))
        return;
    struct in_memory m = in_memory_of(w);
    size_t limit = w->t.queue_max - w->len + m.with_id + 1;
    read_start(w, limit < INT_MAX ? (int)limit : INT_MAX, m.bytes, false);
}

/* Takes the sweep's read: the rows as the writes not yet committed leave
 * them now (every row queued so far is seen, none whose deletion waits),
 * those in memory already passed over. Returns false while it waits. */
static bool sweep_take(struct webhook *w)
{
    struct sweep_ctx c = {w, calloc(w->len + 1, sizeof(int64_t)), 0, 0, 0};
    struct store_read_got got;
    if (c.ids == NULL)
        return false; /* out of memory: looked at again on the next poll */
    for (size_t i = 0; i < w->len; i++)
        if (w->q[(w->head + i) % w->cap].id > 0)
            c.ids[c.nids++] = w->q[(w->head + i) % w->cap].id;
    id_set_sort(c.ids, c.nids);
    int rc = store_queue_read_take(w->store, w->reading, sweep_row, &c, &got);
    free(c.ids);
    if (rc > 0)
        return false;
    if (rc == 0)
        after_read(w, &got, c.left);
    return true;
}

/* With a store, at most t.stored_max alerts wait for <w>, in memory and
 * in the store (sinks.h): a sink down for days kept adding rows without a
 * bound. Makes room for one more by dropping the oldest in memory (those
 * kept in the store only are newer: memory holds the oldest). False when
 * memory holds none to drop (the new alert is then dropped instead). When
 * memory is left with none, the sweep is asked to read the stored ones
 * back, the oldest, to drop next. */
static bool stored_room(struct webhook *w)
{
    size_t kept = w->busy ? 1u : 0u; /* the one in flight stays */
    if (webhook_waiting(w) < w->t.stored_max)
        return true;
    while (webhook_waiting(w) >= w->t.stored_max && w->len > kept)
        drop_oldest(w, true);
    /* memory has none left to drop next: the stored ones are read back
     * now, not at the next sweep */
    if (w->len <= kept && w->only_stored > 0 && w->sweep != NULL && w->reading == NULL)
        event_active(w->sweep, EV_TIMEOUT, 1);
    return webhook_waiting(w) < w->t.stored_max;
}

void webhook_send(struct webhook *w, const char *json, size_t n)
{
    int64_t id = 0;
    if (w->store != NULL && !stored_room(w)) {
        w->dropped++;
        return;
    }
    if (w->store != NULL) {
        char *body = strndup(json, n);
        if (body != NULL)
            id = store_queue_add(w->store, w->key, body);
        free(body);
        if (id < 0)
            id = 0;
    }
    if (id > 0 && (w->only_stored > 0 || w->adopting)) {
        /* Older alerts wait in the store (or are being read from it): this
         * one waits behind them, so that the sink gets them in the order
         * they were raised. */
        w->only_stored++;
        w->stored_n++;
        refill_soon(w);
        return;
    }
    size_t before = w->len;
    enqueue(w, id, json, n, 0);
    if (id > 0 && w->len == before)
        w->stored_n++; /* over the cap, or out of memory: in the store only */
}

static void adopt_row(int64_t id, const char *sink, const char *body, int attempts, void *arg)
{
    struct webhook *w = arg;
    (void)sink;
    (void)attempts;           /* a new run gives every stored alert a fresh set of attempts */
    if (w->only_stored > 0) { /* behind one left in the store (over the bytes cap) */
        w->only_stored++;
        return;
    }
    enqueue(w, id, body, strlen(body), 0);
}

/* Reads the sink's oldest rows, as many as memory has room for and one
 * more: that one, over the cap, is counted in only_stored, which tells the
 * sweep that more wait (a read stopped by the bytes memory has room for
 * says so by not being all: after_read()). However many alerts wait (a
 * sink down for days), no more than that is read, on the store's thread
 * (adopt_take() takes them on a later tick). The read takes in the writes
 * not committed yet, as for the sweep: a row not written yet is not
 * missed, and one whose deletion waits (delivered by the sink this URL had
 * before a reload removed it) is not sent twice. */
void webhook_adopt_stored(struct webhook *w)
{
    if (w->store == NULL || w->reading != NULL)
        return;
    size_t room = w->len < w->t.queue_max ? w->t.queue_max - w->len : 0;
    if (room > INT_MAX - 1)
        room = INT_MAX - 1;
    read_start(w, (int)room + 1, 0, true);
}

void webhook_take_store(struct webhook *w, struct store *store)
{
    if (w->store != NULL)
        return;
    w->store = store;
    for (size_t i = 0; i < w->len; i++) {
        struct item *it = &w->q[(w->head + i) % w->cap];
        char *body = it->id == 0 ? strndup(it->body, it->n) : NULL;
        if (body != NULL) {
            int64_t id = store_queue_add(store, w->key, body);
            it->id = id > 0 ? id : 0;
        }
        free(body);
    }
}

/* Takes the adoption's read. The alerts sent meanwhile wait in the store
 * (webhook_send()), in the read's rows when memory has room for them.
 * Returns false while it waits. */
static bool adopt_take(struct webhook *w)
{
    struct store_read_got got;
    uint64_t waited = w->only_stored;
    w->only_stored = 0; /* counted anew by enqueue() over the cap */
    int rc = store_queue_read_take(w->store, w->reading, adopt_row, w, &got);
    if (rc > 0) {
        w->only_stored = waited;
        return false;
    }
    w->adopting = false;
    if (rc == 0)
        after_read(w, &got, w->only_stored);
    else
        w->only_stored = 1; /* the sweep reads them */
    return true;
}

/* Looks whether the store's thread has run the sink's read; takes it when
 * it has, else looks again on a later tick. */
static void on_read_poll(evutil_socket_t fd, short what, void *arg)
{
    struct webhook *w = arg;
    (void)fd;
    (void)what;
    if (!(w->adopting ? adopt_take(w) : sweep_take(w))) {
        struct timeval tv = {0, WEBHOOK_READ_POLL_US};
        evtimer_add(w->read_poll, &tv);
        return;
    }
    w->reading = NULL; /* taken: freed by the store */
    refill_soon(w);
}

size_t webhook_queued(const struct webhook *w)
{
    return w->len;
}

size_t webhook_waiting(const struct webhook *w)
{
    return w->len + (size_t)w->stored_n;
}

size_t webhook_unstored(const struct webhook *w, bool stopping)
{
    size_t n = 0;
    for (size_t i = 0; i < w->len; i++) {
        int64_t id = w->q[(w->head + i) % w->cap].id;
        if (id <= 0 || (w->store != NULL && (store_queue_lost(w->store, id) ||
                                             (stopping && store_queue_unwritten(w->store, id)))))
            n++;
    }
    return n;
}

uint64_t webhook_delivered(const struct webhook *w)
{
    return w->delivered;
}

uint64_t webhook_failures(const struct webhook *w)
{
    return w->failures;
}

uint64_t webhook_dropped(const struct webhook *w)
{
    return w->dropped;
}

void webhook_say_lost(const struct webhook *w, const char *when, bool stopping)
{
    size_t lost = webhook_unstored(w, stopping);
    if (lost > 0)
        fprintf(stderr,
                "sluice: webhook %s: %zu alert%s undelivered %s and in no state store: lost\n",
                w->label, lost, lost == 1 ? "" : "s", when);
}

unsigned webhook_listing(const struct webhook *w)
{
    return w->listing;
}

bool webhook_in_flight(const struct webhook *w)
{
    return w->req != NULL;
}

void webhook_retire(struct webhook *w, void (*over)(struct webhook *w, void *arg), void *arg)
{
    size_t lost = 0;
    /* Memory lets go of every alert but the one in flight (a queue of
     * thousands is not held for the attempt's 5 s): those with a row stay
     * in the store, kept for a policy that names the sink again. */
    while (w->len > 1) {
        struct item *it = &w->q[(w->head + w->len - 1) % w->cap];
        if (it->id <= 0 || (w->store != NULL && store_queue_lost(w->store, it->id)))
            lost++;
        w->bytes -= it->n;
        free(it->body);
        it->body = NULL;
        w->len--;
    }
    if (w->store != NULL)
        store_queue_read_cancel(w->store, w->reading);
    w->reading = NULL;
    w->adopting = false;
    evtimer_del(w->read_poll);
    event_del(w->sweep);
    evtimer_del(w->retry);
    w->only_stored = 0;
    w->stored_n = 0;
    w->retired = true;
    w->over = over;
    w->over_arg = arg;
    fprintf(stderr,
            "sluice: webhook %s: left the policy with an alert in flight: that attempt is let "
            "finish (at most %d s), not retried\n",
            w->label, SINK_WEBHOOK_TIMEOUT_S);
    if (lost > 0)
        fprintf(stderr,
                "sluice: webhook %s: %zu alert%s undelivered when the sink left the policy and "
                "in no state store: lost\n",
                w->label, lost, lost == 1 ? "" : "s");
    if (!w->busy) /* not in flight after all: over on the next turn */
        retry_next_turn(w);
}

void webhook_revive(struct webhook *w)
{
    w->retired = false;
    w->over = NULL;
    w->over_arg = NULL;
    evtimer_del(w->retry); /* an over already due */
    struct timeval tv;
    tv = timeval_of_ms(w->t.sweep_ms);
    event_add(w->sweep, &tv);
    fprintf(stderr, "sluice: webhook %s: back in the policy%s: the sink goes on with its queue\n",
            w->label, w->busy ? " while the alert it had in flight is not answered yet" : "");
    if (w->store != NULL) {
        /* its stored alerts, read back past the one in memory (the sweep
         * passes over the rows memory holds); new ones wait behind them */
        w->only_stored = 1;
        event_active(w->sweep, EV_TIMEOUT, 1);
    }
    try_send(w);
}

void webhook_stopping(struct webhook *w)
{
    w->stopping = true;
}

void webhook_free(struct webhook *w)
{
    if (w == NULL)
        return;
    drop_conn(w);
    if (w->store != NULL)
        store_queue_read_cancel(w->store, w->reading);
    /* A name lookup under way holds its connection's bufferevent (and the
     * buffers under it) until its callback runs: freed with 0, the resolver
     * dropped it unanswered and they were never freed (each reload that
     * dropped or changed a sink during a lookup, a cut one's included,
     * leaked them). Failed with 1, each lookup's callback is queued on the
     * loop with DNS_ERR_SHUTDOWN, for its next turn; libevent 2.1.12's
     * evdns_getaddrinfo_gotresolve() does not touch the freed resolver
     * then, and the bufferevent, with no callback of evhttp's or the
     * sink's left, is released. At exit the gateway turns the loop once
     * more for them (gateway_free()). evdns' own probe of a server it took
     * as down would be failed too, and its callback then reads the freed
     * server's record: the servers go first, which cancels a probe (a
     * cancelled probe's callback touches nothing) and leaves the lookups
     * waiting, for the free to fail. */
    if (w->dns != NULL) {
        evdns_base_clear_nameservers_and_suspend(w->dns);
        evdns_base_free(w->dns, 1);
    }
    webhook_tls_free(w->tls);
    if (w->retry != NULL)
        event_free(w->retry);
    if (w->deadline != NULL)
        event_free(w->deadline);
    if (w->lookup_watch != NULL)
        event_free(w->lookup_watch);
    if (w->sweep != NULL)
        event_free(w->sweep);
    if (w->read_poll != NULL)
        event_free(w->read_poll);
    while (w->q != NULL && w->len > 0)
        pop(w);
    free(w->q);
    free(w->url);
    free(w->key);
    free(w->label);
    free(w->host);
    free(w->path);
    free(w->hosthdr);
    free(w);
}
