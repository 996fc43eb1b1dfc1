/* admin: the --admin HTTP server, /metrics and /healthz (admin.h).
 *
 * Why not evhttp: evhttp keeps connections alive and reads pipelined
 * requests into its input buffer while a reply waits for a client that
 * does not read (memory without bound), its timeout is per read (a client
 * sending a byte now and then is never closed), it has no connection cap,
 * and its listener has no accept error callback (EMFILE makes it spin).
 * A scraper needs none of what evhttp adds, so this serves one request per
 * connection on a bufferevent, with every bound written out below:
 *
 *   accept -> HEAD (read into a fixed ADMIN_HEAD_MAX array; the read
 *   watermark is what room is left, so libevent never buffers more; the
 *   whole head within ADMIN_HEAD_MS of the accept) -> REPLY (reading off,
 *   the reply queued with Connection: close, written within ADMIN_REPLY_MS:
 *   a client that does not read is dropped then) -> LINGER (our side shut
 *   down after the reply; what the client still sends is read and dropped,
 *   at most ADMIN_LINGER_MAX bytes for ADMIN_LINGER_MS, so that the close
 *   does not turn into a reset that could destroy the reply in flight)
 *   -> closed.
 *
 * A connection's lifetime is thus at most 5 + 10 + 1 s (5 + 30 + 1 when the
 * gateway was frozen while its client read: ADMIN_REPLY_RENEWALS) and its memory the
 * head array plus one reply. ADMIN_CONNS_MAX of them at once. At the cap a
 * new connection takes the slot of the oldest one still waiting for its
 * head (closed without a word), as nginx closes idle keep-alive
 * connections when it runs out of them: before, the listener was disabled there, and 64 local
 * connections trickling their heads (more behind them keeping the listen
 * queue full) held every slot for their 5 s each, so a health check took
 * 10 to 13 s or timed out. An attacker's connection now holds its slot only
 * until 64 newer ones came; a client that sends its head with its connect
 * (every scraper) is answered at the accept (the head is read there, before
 * the listener takes the next connection), so connections queued behind it
 * cannot evict it. Finding the oldest waiting head walks the 64 slots, at
 * the cap only. With none, the new connection takes the slot of the oldest
 * lingering one: its reply is with the kernel, which sends it after the
 * close too (64 clients that neither read nor closed held every slot for
 * their 1 s each). A reply the kernel takes whole at once lingers from the
 * start, so only /metrics replies too large for it hold a slot while their
 * client does not read, and at most ADMIN_METRICS_HELD_MAX (56) of them:
 * a /metrics GET beyond is a 503 at once, the 8 slots left kept for
 * /healthz (a supervisor or a load balancer asks it and must not wait for
 * clients that do not read; before, 64 of them held every slot for their
 * 10 s, the listener off). Only when every slot writes a reply (not
 * expected: the replies that do are 56 at most) is the listener disabled,
 * new clients then waiting in the kernel's queue. */
#include "watch/admin.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "watch/admin_head.h"
#include "watch/metrics.h"
#include "util/accept_error.h"
#include "util/env.h"
#include "util/http_date.h"
#include "util/ipaddr.h"
#include "util/socket_quiet.h"
#include "util/text_json.h"
#include "util/units.h"
#include "util/unix_listen.h"
#include "util/wall_clock.h"

/* A queue a few hundred local connections do not fill: while it is full,
 * the kernel drops new connection attempts, and a health check's waits
 * 1 s, then 3 s, for its retry (128, evhttp's, made one of 5 take 3 s
 * under 400 connections that reconnect as soon as they are evicted). A
 * queued connection costs the kernel's memory, no descriptor here. */
#define ADMIN_BACKLOG       1024
#define ADMIN_WARN_EVERY_MS 60000

/* ------------------------------------------------------------------------
 * The server. */

enum admin_state { AC_HEAD, AC_REPLY, AC_LINGER };

struct admin_conn {
    struct admin *a;                /* the server; its list holds this connection */
    struct admin_conn *prev, *next; /* a->conns */
    struct bufferevent *bev;        /* owned; closes the socket when freed */
    struct event *deadline;         /* owned; ends the current state */
    enum admin_state state;
    bool via_loopback; /* its local address is loopback: the Host check applies */
    uint64_t body_gen; /* the /metrics body its reply holds (a->latest_gen's), or 0 */
    size_t body_len;
    size_t lingered;     /* bytes read and dropped in AC_LINGER */
    unsigned late_reads; /* head or linger deadlines put off for input waiting (on_deadline()) */
    unsigned renewals;   /* reply windows renewed for a client that took all (on_deadline()) */
    struct admin_head head;
    size_t len;               /* bytes in buf */
    char buf[ADMIN_HEAD_MAX]; /* the request head as it arrives */
};

struct admin {
    struct event_base *base;    /* borrowed */
    struct metrics *m;          /* borrowed */
    struct evconnlistener *lev; /* owned; closes the listening socket */
    struct event *resume;       /* owned; ends the pause after an accept error */
    struct event *expire;       /* owned; lets the newest body go once it is stale */
    unsigned fresh_ms;          /* ADMIN_BODY_FRESH_MS, or SLUICE_TEST_METRICS_FRESH_MS */
    bool backing_off;           /* paused after an accept error */
    uint64_t warned_ms;         /* when an accept error was told last (tell_due()) */
    /* The address as parsed, then as bound (getsockname(): what
     * self_request covers); its named and listen_addr_given(), as given to
     * --admin and shown \ooo, for messages: a unix: path may hold a line
     * end, and up to 107 bytes, each shown in 4 at most. Before, it was
     * written as given and cut at 63 bytes. */
    struct listen_addr addr;
    bool is_unix;             /* a unix: address, whose socket file is removed at the end */
    struct stat sock_file;    /* its file as bound (unix_listen_unlink_own()) */
    struct admin_conn *conns; /* owned, every open connection */
    unsigned nconns;
    unsigned nheads;         /* of them in AC_HEAD: a new one at the cap may take a slot */
    unsigned nlingers;       /* of them in AC_LINGER: so may it take one of these */
    struct evbuffer *latest; /* owned: the newest /metrics body, shared (metrics_body) */
    uint64_t latest_gen;     /* counts bodies made; 0: none yet */
    uint64_t latest_ms;      /* when it was made */
    bool latest_expired;     /* the expire timer ran since it was made */
    size_t latest_len;
    /* ADMIN_HEAD_MS, ADMIN_REPLY_MS, ADMIN_BODY_REUSE_MS: fields, so that a
     * unit test pins them, as fresh_ms, whatever a build costs where it runs */
    unsigned head_ms, reply_ms, reuse_ms;
};

static void arm(struct event *ev, unsigned ms)
{
    struct timeval tv = timeval_of_ms(ms);
    evtimer_add(ev, &tv);
}

/* Accepts while below the cap, or at it while a connection waits for its
 * head or lingers (the new one takes its slot), and not backing off; else
 * leaves new clients in the kernel's queue. */
static void admin_listen_update(struct admin *a)
{
    if (a->lev == NULL)
        return;
    if (a->backing_off || (a->nconns >= ADMIN_CONNS_MAX && a->nheads == 0 && a->nlingers == 0))
        evconnlistener_disable(a->lev);
    else
        evconnlistener_enable(a->lev);
}

/* The bytes of /metrics bodies the replies queued hold, each body counted
 * once however many replies share it (replies partly written count whole:
 * a bound, not a measure). */
static size_t bodies_held(const struct admin *a)
{
    size_t held = 0;
    for (const struct admin_conn *c = a->conns; c != NULL; c = c->next) {
        bool seen = false;
        for (const struct admin_conn *d = a->conns; d != c && !seen; d = d->next)
            seen = d->body_gen == c->body_gen;
        if (c->body_gen != 0 && !seen)
            held += c->body_len;
    }
    return held;
}

/* True while the newest body may be served again without a new build.
 * The expire timer ends that too: it may run a little before the clock
 * read here says a->fresh_ms went by, and a body it found fresh would be
 * held until the next scrape. */
static bool latest_is_fresh(const struct admin *a, uint64_t now)
{
    return a->latest != NULL && !a->latest_expired && now - a->latest_ms < a->fresh_ms;
}

/* The newest body is let go once it is stale and no reply holds it: an
 * idle server holds none a->fresh_ms after its last build (the expire
 * timer). */
static void latest_release(struct admin *a)
{
    if (latest_is_fresh(a, monotonic_ms()))
        return;
    for (const struct admin_conn *c = a->conns; c != NULL; c = c->next)
        if (c->body_gen == a->latest_gen)
            return;
    if (a->latest != NULL)
        evbuffer_free(a->latest);
    a->latest = NULL;
}

/* <c> leaves AC_HEAD, or closes in it. */
static void leave_head(struct admin_conn *c)
{
    if (c->state == AC_HEAD)
        c->a->nheads--;
}

/* The oldest connection in <state>, or NULL: the list is newest first,
 * and holds at most ADMIN_CONNS_MAX. */
static struct admin_conn *oldest_in(const struct admin *a, enum admin_state state)
{
    struct admin_conn *oldest = NULL;
    for (struct admin_conn *c = a->conns; c != NULL; c = c->next)
        if (c->state == state)
            oldest = c;
    return oldest;
}

/* The connection a new one takes the slot of at the cap: the oldest still
 * waiting for its head, else the oldest lingering (its reply is with the
 * kernel, which sends it after the close too); NULL when every slot writes
 * a reply. */
static struct admin_conn *evictable(const struct admin *a)
{
    struct admin_conn *c = oldest_in(a, AC_HEAD);
    return c != NULL ? c : oldest_in(a, AC_LINGER);
}

/* The /metrics replies being written: those the kernel did not take whole
 * (conn_reply() hands it what it takes at once), waiting for their client
 * to read. */
static unsigned metrics_replies_held(const struct admin *a)
{
    unsigned n = 0;
    for (const struct admin_conn *c = a->conns; c != NULL; c = c->next)
        n += c->state == AC_REPLY && c->body_gen != 0;
    return n;
}

/* Closes <c> and frees it; the caller must not touch <c> afterwards. */
static void conn_free(struct admin_conn *c)
{
    struct admin *a = c->a;
    leave_head(c);
    if (c->state == AC_LINGER)
        a->nlingers--;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        a->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    a->nconns--;
    event_free(c->deadline);
    bufferevent_free(c->bev);
    free(c);
    latest_release(a);
    admin_listen_update(a);
}

static void conn_linger(struct admin_conn *c)
{
    c->state = AC_LINGER;
    c->a->nlingers++;
    c->late_reads = 0; /* the linger's own: see on_deadline() */
    c->body_gen = 0;   /* written whole: it holds no body now */
    latest_release(c->a);
    admin_listen_update(c->a); /* a slot a new connection may take */
    bufferevent_disable(c->bev, EV_WRITE);
    /* FIN after the reply; the client sees the end, then closes */
    if (shutdown(bufferevent_getfd(c->bev), SHUT_WR) != 0) {
        conn_free(c);
        return;
    }
    bufferevent_setwatermark(c->bev, EV_READ, 0, ADMIN_HEAD_MAX);
    bufferevent_enable(c->bev, EV_READ);
    arm(c->deadline, ADMIN_LINGER_MS);
}

/* Queues the reply: the status line, the headers and, unless <head_only>,
 * <body> (emptied), and hands the kernel at once what it takes: a reply
 * taken whole (every one but a large /metrics body's) lingers from here,
 * its slot one a new connection may take, so that only the replies that
 * wait for their client to read hold theirs. Reading stops for good: one
 * request per connection. */
static void conn_reply(struct admin_conn *c, int code, const char *why, const char *ctype,
                       const char *extra, struct evbuffer *body, bool head_only)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    char date[HTTP_DATE_FIELD_LEN + 1]; /* "" for a clock past year 9999: no field */
    (void)http_date_field_format(wall_clock_seconds(), date);
    leave_head(c);
    c->state = AC_REPLY;
    admin_listen_update(c->a); /* the last one to evict, perhaps */
    bufferevent_disable(c->bev, EV_READ);
    if (evbuffer_add_printf(out,
                            "HTTP/1.1 %d %s\r\n%sContent-Type: %s\r\n"
                            "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
                            code, why, date, ctype, evbuffer_get_length(body), extra) < 0 ||
        (!head_only && evbuffer_add_buffer(out, body) != 0)) {
        conn_free(c);
        return;
    }
    /* A socket bufferevent keeps its output's front frozen, drained by its
     * own writes only: opened for this one, as those are. */
    evbuffer_unfreeze(out, 1);
    int wrote = evbuffer_write(out, bufferevent_getfd(c->bev));
    int err = errno;
    evbuffer_freeze(out, 1);
    if (wrote < 0 && err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
        conn_free(c); /* the client is gone: nothing to write to */
        return;
    }
    if (evbuffer_get_length(out) == 0) {
        conn_linger(c);
        return;
    }
    arm(c->deadline, c->a->reply_ms);
    bufferevent_enable(c->bev, EV_WRITE);
}

/* A reply with a text/plain body of its own: errors, /healthz, 404. */
static void conn_reply_text(struct admin_conn *c, int code, const char *why, const char *extra,
                            const char *text)
{
    struct evbuffer *body = evbuffer_new();
    if (body == NULL || evbuffer_add(body, text, strlen(text)) != 0) {
        evbuffer_free(body);
        conn_free(c);
        return;
    }
    conn_reply(c, code, why, "text/plain", extra, body, c->head.method == ADMIN_HEAD);
    evbuffer_free(body);
}

/* Whether a scrape at <now> gets a new body rather than the newest one.
 *
 * A body is built on the event loop that proxies traffic: for 4096 agents
 * (~12.7 MB) that is ~65 ms (-O3), so a client scraping in a loop, or 64
 * at once, each scrape building its own, took up to the whole loop. So a
 * body under a->fresh_ms (ADMIN_BODY_FRESH_MS, 1 s) old is served again,
 * whatever asks: at most one build a second, however many scrape
 * (Prometheus scrapes every 15 to 60 s: a body 1 s old is as good).
 *
 * Past that, a new one unless the bodies queued replies hold and a new one
 * would pass ADMIN_BODIES_MAX and the newest is under ADMIN_BODY_REUSE_MS
 * old: 64 clients that ask and do not read made the server hold 64 bodies
 * for ADMIN_REPLY_MS (up to ~190 MB with 4096 agents). Now what they hold
 * is at most ADMIN_BODIES_MAX plus the bodies made once each
 * ADMIN_BODY_REUSE_MS past it, and a scraper gets a body that old at the
 * most, and only then. */
static bool body_wanted(struct admin *a, uint64_t now)
{
    if (a->latest == NULL)
        return true;
    if (latest_is_fresh(a, now))
        return false;
    return now - a->latest_ms >= a->reuse_ms || bodies_held(a) + a->latest_len <= ADMIN_BODIES_MAX;
}

/* The body of <c>'s /metrics reply: a reference to a->latest, made anew
 * when body_wanted(); one for a HEAD (<head_only>) tells its length only,
 * and the reply holds none of it. NULL when out of memory.
 *
 * A HEAD builds the body as a GET would: its Content-Length is the sum of
 * every line, each label value escaped, which only formatting them tells,
 * and formatting is what a build costs (the copy into one chain is a
 * fraction of it). So a HEAD costs no less than a GET and no more: one
 * build per a->fresh_ms at most, the body kept for the GETs that follow
 * within it. */
static struct evbuffer *metrics_body(struct admin_conn *c, bool head_only)
{
    struct admin *a = c->a;
    uint64_t now = monotonic_ms();
    if (body_wanted(a, now)) {
        struct evbuffer *fresh = evbuffer_new();
        /* One contiguous chain, so that a reply's reference to it is one
         * chain too: a reference makes a chain (1 KiB at least) for each
         * chain it refers to, and a body written by many small writes is
         * made of thousands (a reply that was not read held ~78% of the
         * body beside it; 64 of a 32 MB body, ~580 MB). */
        if (fresh == NULL || metrics_format(a->m, fresh) != 0 ||
            evbuffer_pullup(fresh, -1) == NULL) {
            evbuffer_free(fresh);
            return NULL;
        }
        if (a->latest != NULL) /* replies that hold it keep its memory */
            evbuffer_free(a->latest);
        a->latest = fresh;
        a->latest_gen++;
        a->latest_ms = now;
        a->latest_len = evbuffer_get_length(fresh);
        a->latest_expired = false;
        arm(a->expire, a->fresh_ms);
    }
    struct evbuffer *body = evbuffer_new();
    if (body == NULL || evbuffer_add_buffer_reference(body, a->latest) != 0) {
        evbuffer_free(body);
        latest_release(a);
        return NULL;
    }
    if (!head_only) {
        c->body_gen = a->latest_gen;
        c->body_len = a->latest_len;
    }
    return body;
}

static void conn_answer(struct admin_conn *c)
{
    const struct admin_head *h = &c->head;
    if (c->via_loopback && h->host_is_name) {
        /* DNS rebinding: a web page whose name now resolves to 127.0.0.1
         * would read /metrics (agents, hosts, grant owners) through the
         * browser of whoever opened it on this machine. Judged by the
         * address the client reached, not the one bound: a server on
         * 0.0.0.0 or [::] is reached through 127.0.0.1 too. */
        conn_reply_text(c, 403, "Forbidden", "",
                        "forbidden: the Host header names another host than this server's "
                        "address; ask for 127.0.0.1 or localhost\n");
    } else if (h->method == ADMIN_OTHER_METHOD) {
        conn_reply_text(c, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n",
                        "method not allowed\n");
    } else if (h->page == ADMIN_METRICS && h->method == ADMIN_GET &&
               metrics_replies_held(c->a) >= ADMIN_METRICS_HELD_MAX) {
        /* The slots left are for /healthz, which a supervisor or a load
         * balancer asks and must not wait for clients that do not read:
         * before, 64 of them held every slot for ADMIN_REPLY_MS each, the
         * listener off, and a health check waited up to 10 s or timed out. */
        conn_reply_text(c, 503, "Service Unavailable", "Retry-After: 1\r\n",
                        "busy: too many /metrics replies wait for their clients to read them; "
                        "try again\n");
    } else if (h->page == ADMIN_METRICS) {
        struct evbuffer *body = metrics_body(c, h->method == ADMIN_HEAD);
        if (body == NULL) {
            conn_reply_text(c, 500, "Internal Server Error", "", "out of memory\n");
            return;
        }
        conn_reply(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", "", body,
                   h->method == ADMIN_HEAD);
        evbuffer_free(body);
    } else if (h->page == ADMIN_HEALTHZ) {
        char why[256], text[300];
        if (metrics_health(c->a->m, why, sizeof(why))) {
            if (why[0] == '\0') {
                conn_reply_text(c, 200, "OK", "", "ok\n");
            } else {
                snprintf(text, sizeof(text), "ok: %s\n", why);
                conn_reply_text(c, 200, "OK", "", text);
            }
        } else {
            snprintf(text, sizeof(text), "unhealthy: %s\n", why);
            conn_reply_text(c, 503, "Service Unavailable", "", text);
        }
    } else {
        conn_reply_text(c, 404, "Not Found", "", "not found: try /metrics or /healthz\n");
    }
}

static void head_progress(struct admin_conn *c);

static void on_read(struct bufferevent *bev, void *arg)
{
    struct admin_conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (c->state != AC_HEAD) {
        size_t n = evbuffer_get_length(in);
        evbuffer_drain(in, n);
        c->lingered += n;
        if (c->state == AC_LINGER && c->lingered >= ADMIN_LINGER_MAX)
            conn_free(c);
        return;
    }
    /* the watermark keeps <in> within the room left in buf */
    int got = evbuffer_remove(in, c->buf + c->len, sizeof(c->buf) - c->len);
    if (got > 0)
        c->len += (size_t)got;
    evbuffer_drain(in, evbuffer_get_length(in));
    head_progress(c);
}

/* Answers <c> once its head in c->buf is complete, malformed or too
 * long; else lets in no more than the room left. */
static void head_progress(struct admin_conn *c)
{
    switch (admin_head_parse(&c->head, c->buf, c->len)) {
    case ADMIN_PARSE_DONE:
        conn_answer(c);
        return;
    case ADMIN_PARSE_BAD:
        c->head.method = ADMIN_GET; /* an error always carries its text */
        conn_reply_text(c, 400, "Bad Request", "", "bad request\n");
        return;
    case ADMIN_PARSE_MORE:
        break;
    }
    if (c->len == sizeof(c->buf)) {
        c->head.method = ADMIN_GET;
        conn_reply_text(c, 431, "Request Header Fields Too Large", "", "request head too large\n");
        return;
    }
    bufferevent_setwatermark(c->bev, EV_READ, 0, sizeof(c->buf) - c->len);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    struct admin_conn *c = arg;
    if (c->state == AC_REPLY && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        conn_linger(c);
}

/* The client ended its side or the connection failed: nothing more to do
 * in any state (a complete head was answered before its EOF was read). */
static void on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)what;
    conn_free(arg);
}

/* True when the kernel holds no byte of <fd>'s that its peer has not taken
 * (SIOCOUTQ: TCP, not acknowledged; unix stream, not read); false when it
 * does or cannot be told. */
static bool send_queue_empty(evutil_socket_t fd)
{
    int n = -1;
    return ioctl(fd, SIOCOUTQ, &n) == 0 && n == 0;
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct admin_conn *c = arg;
    (void)fd;
    (void)what;
    if (c->state == AC_HEAD) {
        /* Input waiting at the deadline came while the gateway did not run
         * (stopped, a paused VM, a long stall of its loop): after SIGCONT
         * epoll_wait() comes back with EINTR and no event, and this timer
         * runs before the read. The client sent in time: the read goes
         * first (the next turn polls), and the deadline comes again 1 ms
         * later, a bounded number of times (each read takes all the buffer
         * has room for). Before, a head that came in time got a 408. */
        if (c->late_reads < ADMIN_LATE_READS && !socket_is_quiet(bufferevent_getfd(c->bev))) {
            c->late_reads++;
            arm(c->deadline, 1);
            return;
        }
        c->head.method = ADMIN_GET;
        conn_reply_text(c, 408, "Request Timeout", "", "request timeout\n");
    } else if (c->state == AC_LINGER && c->late_reads < ADMIN_LATE_READS &&
               !socket_is_quiet(bufferevent_getfd(c->bev))) {
        /* The same for the linger's end: what the client sent while the
         * gateway was frozen is read and dropped first. Closed with it
         * unread, the socket sent a reset, which threw away what of the
         * reply the client had not taken yet: a reply cut short. */
        c->late_reads++;
        arm(c->deadline, 1);
    } else if (c->state == AC_REPLY && c->renewals < ADMIN_REPLY_RENEWALS &&
               send_queue_empty(bufferevent_getfd(c->bev))) {
        /* The client took every byte the kernel held, and the reply is not
         * written whole: the gateway did not write meanwhile (frozen, as
         * above; this timer runs before the write). A client that does not
         * read leaves bytes in the queue and is dropped as before; this
         * one gets another window. Before, a freeze past the window cut a
         * reply that its client was reading. */
        c->renewals++;
        arm(c->deadline, c->a->reply_ms);
    } else {
        conn_free(c); /* a reply not taken, or the linger is over */
    }
}

/* <ss> is an address of this machine's loopback (ipaddr_is_loopback():
 * 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104). */
static bool sockaddr_is_loopback(const struct sockaddr_storage *ss)
{
    struct ipaddr ip;
    uint16_t port;
    return sockaddr_to_ipaddr((const struct sockaddr *)ss, &ip, &port) == 0 &&
           ipaddr_is_loopback(&ip);
}

/* True when the local address of the connected socket <fd> is loopback;
 * an address that cannot be read counts as loopback, so the Host check
 * applies. */
static bool reached_through_loopback(evutil_socket_t fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return true;
    if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)
        return true;
    return sockaddr_is_loopback(&ss);
}

static void on_accept(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    struct admin *a = arg;
    (void)lev;
    (void)sa;
    (void)salen;
    if (a->nconns >= ADMIN_CONNS_MAX) {
        struct admin_conn *oldest = evictable(a);
        if (oldest == NULL) { /* not expected: the listener is off then */
            evutil_closesocket(fd);
            admin_listen_update(a);
            return;
        }
        conn_free(oldest);
    }
    struct admin_conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        evutil_closesocket(fd);
        return;
    }
    c->a = a;
    c->via_loopback = reached_through_loopback(fd);
    c->bev = bufferevent_socket_new(a->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (c->bev == NULL) {
        evutil_closesocket(fd);
        free(c);
        return;
    }
    c->deadline = evtimer_new(a->base, on_deadline, c);
    if (c->deadline == NULL) {
        bufferevent_free(c->bev);
        free(c);
        return;
    }
    c->next = a->conns;
    if (a->conns != NULL)
        a->conns->prev = c;
    a->conns = c;
    a->nconns++;
    a->nheads++; /* calloc: c->state is AC_HEAD */
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    bufferevent_setwatermark(c->bev, EV_READ, 0, sizeof(c->buf));
    bufferevent_enable(c->bev, EV_READ);
    arm(c->deadline, a->head_ms);
    admin_listen_update(a);
    /* What arrived with the connect is read now, before the listener takes
     * the next connection: a head already here is answered (its slot then
     * no longer one to evict), whatever is queued behind it. */
    ssize_t got = recv(fd, c->buf, sizeof(c->buf), MSG_DONTWAIT);
    if (got > 0) {
        c->len = (size_t)got;
        head_progress(c);
    }
}

static void on_expire(evutil_socket_t fd, short what, void *arg)
{
    struct admin *a = arg;
    (void)fd;
    (void)what;
    a->latest_expired = true;
    latest_release(a);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct admin *a = arg;
    (void)fd;
    (void)what;
    a->backing_off = false;
    admin_listen_update(a);
}

/* accept() failed (EMFILE, ENFILE, ENOBUFS...): the client stays queued,
 * so retrying at once would fail again at once; pause instead. An error
 * that was the dequeued connection's alone (accept_error.h) pauses
 * nothing: a pause would hold every other scraper for it. */
static void on_accept_error(struct evconnlistener *lev, void *arg)
{
    struct admin *a = arg;
    int err = EVUTIL_SOCKET_ERROR();
    if (accept_error_is_per_conn(err))
        return;
    a->backing_off = true;
    evconnlistener_disable(lev);
    arm(a->resume, ADMIN_BACKOFF_MS);
    uint64_t now = monotonic_ms();
    if (tell_due(&a->warned_ms, now, ADMIN_WARN_EVERY_MS))
        fprintf(stderr,
                "sluice: admin server %s: accept: %s: pausing for %d ms at a time (told at "
                "most once a minute)\n",
                listen_addr_given(&a->addr), evutil_socket_error_to_string(err), ADMIN_BACKOFF_MS);
}

/* How <a>'s errors name its address: as the operator gave it, when an
 * option did ("--admin localhost:9128"). */
static const char *named(const struct admin *a)
{
    return a->addr.named[0] != '\0' ? a->addr.named : a->addr.text;
}

/* Listens on <a>'s unix: address (<a> set up but for its listener); frees
 * <a> and fills <err> when it cannot. */
static int admin_listen_unix(struct admin *a, char *err, size_t errlen)
{
    struct sockaddr_un *un = (struct sockaddr_un *)(void *)&a->addr.ss;
    int fd = unix_listen_bind(un, a->addr.sslen, named(a), &a->sock_file, err, errlen);
    if (fd < 0) {
        admin_free(a);
        return -1;
    }
    a->is_unix = true;
    a->lev = evconnlistener_new(a->base, on_accept, a,
                                LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, ADMIN_BACKLOG, fd);
    if (a->lev == NULL) {
        snprintf(err, errlen, "%s: listen: %s", named(a), strerror(errno));
        close(fd);
        admin_free(a);
        return -1;
    }
    evconnlistener_set_error_cb(a->lev, on_accept_error);
    return 0;
}

/* Binds and listens on <a>'s TCP address, which then becomes the address
 * bound, as getsockname() tells it (what self_request must cover); frees
 * <a> and fills <err> when it cannot. */
static int admin_listen_tcp(struct admin *a, char *err, size_t errlen)
{
    errno = 0;
    a->lev = evconnlistener_new_bind(
        a->base, on_accept, a, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE,
        ADMIN_BACKLOG, (const struct sockaddr *)&a->addr.ss, (int)a->addr.sslen);
    if (a->lev == NULL) {
        /* errno is bind()'s or listen()'s: the close after it keeps it.
         * The address as a --listen error writes it (listener.c). */
        int e = errno;
        snprintf(err, errlen, "%s: cannot listen on %s: %s", named(a), a->addr.text,
                 e != 0 ? strerror(e) : "unknown error");
        admin_free(a);
        return -1;
    }
    evconnlistener_set_error_cb(a->lev, on_accept_error);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(evconnlistener_get_fd(a->lev), (struct sockaddr *)&ss, &sl) == 0 &&
        sl <= sizeof(ss)) {
        memcpy(&a->addr.ss, &ss, sl);
        a->addr.sslen = sl;
        sockaddr_format((const struct sockaddr *)&ss, a->addr.text, sizeof(a->addr.text));
    }
    return 0;
}

struct admin *admin_new(struct event_base *base, const struct listen_addr *addr, struct metrics *m,
                        char *err, size_t errlen)
{
    struct admin *a = calloc(1, sizeof(*a));
    if (a == NULL || (a->resume = evtimer_new(base, on_resume, a)) == NULL ||
        (a->expire = evtimer_new(base, on_expire, a)) == NULL) {
        snprintf(err, errlen, "%s: out of memory",
                 addr->named[0] != '\0' ? addr->named : addr->text);
        admin_free(a);
        return NULL;
    }
    /* test-only (README): a window a test can outlast, or never reach */
    a->fresh_ms =
        (unsigned)env_number("SLUICE_TEST_METRICS_FRESH_MS", 3600000, ADMIN_BODY_FRESH_MS);
    a->head_ms = ADMIN_HEAD_MS;
    a->reply_ms = ADMIN_REPLY_MS;
    a->reuse_ms = ADMIN_BODY_REUSE_MS;
    a->base = base;
    a->m = m;
    a->addr = *addr;
    if (addr->kind == LISTEN_UNIX)
        return admin_listen_unix(a, err, errlen) == 0 ? a : NULL;
    if (admin_listen_tcp(a, err, errlen) < 0)
        return NULL;
    if (!sockaddr_is_loopback(&a->addr.ss))
        fprintf(stderr,
                "sluice: warning: the admin server on %s is reachable from beyond this host\n",
                listen_addr_given(&a->addr));
    return a;
}

const struct listen_addr *admin_addr(const struct admin *a)
{
    return &a->addr;
}

void admin_free(struct admin *a)
{
    if (a == NULL)
        return;
    if (a->lev != NULL)
        evconnlistener_free(a->lev);
    a->lev = NULL; /* conn_free() must not re-enable it */
    if (a->is_unix)
        unix_listen_unlink_own(((const struct sockaddr_un *)(const void *)&a->addr.ss)->sun_path,
                               &a->sock_file);
    while (a->conns != NULL)
        conn_free(a->conns);
    if (a->latest != NULL)
        evbuffer_free(a->latest);
    if (a->resume != NULL)
        event_free(a->resume);
    if (a->expire != NULL)
        event_free(a->expire);
    free(a);
}
