/* connect: the CONNECT method, after its target was decided and connected.
 *
 * The gate answers "200 OK", then reads the first bytes the client sends
 * (at most PEEK_MAX, for at most PEEK_MS): when they are a TLS ClientHello
 * whose SNI names another host than the CONNECT target, the tunnel is refused (sni_mismatch) and
 * closed before a single byte goes upstream. The 200 has already been sent by then: the agent sees
 * its TLS handshake cut, and the refusal is in the decision log, which is
 * what matters. A client that sends bytes that are not a TLS record, or a
 * complete ClientHello without server_name, is let through (and one that
 * sends nothing within the window: see below).
 * Once the first bytes are a TLS record header (one a server takes: see
 * sni.h), nothing else is: a first record that is not a
 * handshake record (an alert before the hello, which some servers skip), a
 * ClientHello still incomplete when the window closes, when PEEK_MAX bytes
 * have arrived or when the client ends its side, one that is malformed or
 * larger than SNI_MAX_HELLO, is refused as sni_mismatch (fail closed: the
 * name could not be checked). A ClientHello that passes goes up alone (the
 * records that carry it; it must end where its last record ends) and what
 * the client sent behind it waits until the server has answered it
 * (CS_HELLO): a HelloRetryRequest makes the client send a second
 * ClientHello, and a server takes the server_name of that one anew
 * (OpenSSL does), so it is peeked and judged as the first was, a
 * change_cipher_spec record before it allowed, and anything else refused.
 * First bytes that are not TLS but start like an HTTP/1.x request
 * (peek_http.h says precisely when) are waited for, within the same window
 * and PEEK_MAX, until the request head is complete: a Host header or
 * absolute-form target naming another host or port than the CONNECT
 * target is refused as host_mismatch (on a shared front the Host header
 * picks the site), and so is, failing closed, a head still incomplete when
 * the window closes, when PEEK_MAX bytes have arrived or when the client
 * ends its side, or one that cannot be checked. Only the first request is
 * seen: later ones in the same tunnel are not. Bytes that are neither
 * (binary protocols) pass as before. After a HelloRetryRequest only a
 * ClientHello may follow.
 * A window that passes with nothing from the client does not open the
 * tunnel: the gateway then waits for whichever side speaks first (CS_PEEK,
 * peek_quiet). The server (a server-speaks-first protocol: its bytes go to
 * the client, and the tunnel opens), or the client, whose bytes are its
 * first bytes all the same and are judged as above, in a window of their
 * own: else a client that waited 1 s would get any ClientHello or request
 * past the check, since a TLS or HTTP server never speaks first. Nothing
 * from either side for the idle timeout closes the connection.
 * Only then is the agent_egress event published and the rest forwarded;
 * the tunnel is then opaque (tunnel.c). */
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "gate/backlog.h"
#include "gate/conn.h"
#include "gate/drain.h"
#include "gate/gateway.h"
#include "gate/peek_http.h"
#include "gate/progress.h"
#include "gate/sni.h"
#include "gate/stream.h"
#include "gate/tunnel.h"
#include "shape/quota.h"
#include "util/socket_quiet.h"
#include "util/units.h"

/* The shortest 200 a client takes: curl (and so git and every libcurl
 * tool) reads a CONNECT reply one byte per recv(), so each byte of a reason
 * phrase costs a tunnel setup one system call ("Connection established"
 * cost 20 more); RFC 9110 15 has clients ignore the phrase. */
static const char established[] = "HTTP/1.1 200 OK\r\n\r\n";

static void on_tunnel_end(struct tunnel *t, enum tunnel_end how, void *arg)
{
    struct conn *c = arg;
    (void)how;
    (void)t;
    conn_free(c); /* counts the tunnel's bytes, frees it and both sockets */
}

/* Counts <n> bytes the client sent as gone upstream (the end event,
 * progress). Their bandwidth tokens were taken when they were handed to
 * the upstream's socket (take_peeked()). */
static void count_up(struct conn *c, size_t n)
{
    if (n == 0)
        return;
    c->ex.bytes_up += n;
    progress_note(c);
}

/* Takes the bandwidth tokens of <n> peeked bytes handed to the upstream's
 * socket: at once, not once it took them, so that the next tunnel of the
 * agent finds them gone from the bucket (pace_peeked()) even while an
 * upstream that does not read holds them queued. */
static void take_peeked(struct conn *c, size_t n)
{
    if (c->ex.flow != NULL && n > 0 && quota_flow_metered(c->ex.flow))
        quota_flow_take(c->ex.flow, n, quota_now());
}

/* Before <n> peeked bytes go upstream: 1 when the bandwidth bucket holds
 * too little (or is in debt) and <c> now waits, reading neither side, for
 * <resume>(<c>) from the flow's timer; 0 when they may go. The bytes then
 * go whole, into the bucket's debt where it held fewer; the other tunnels
 * of the agent wait until the debt is paid. Without this, each tunnel
 * opened at once put its first bytes (up to PEEK_MAX) upstream whatever
 * the bucket held: many tunnels moved many times the bandwidth. -1 when
 * no timer could be armed (out of memory): <c> was cut (conn_cut(), past
 * its 200) rather than send them unmetered. */
static int pace_peeked(struct conn *c, size_t n, void (*resume)(void *arg))
{
    struct quota_flow *f = c->ex.flow;
    size_t allowed;
    if (f == NULL || n == 0 || !quota_flow_metered(f))
        return 0; /* no bucket: not worth the clock */
    if (quota_flow_allow_or_pause(f, n, quota_now(), resume, c, &allowed) < 0) {
        conn_cut(c);
        return -1;
    }
    if (allowed > 0)
        return 0;
    bufferevent_disable(c->client, EV_READ);
    bufferevent_disable(c->up, EV_READ);
    conn_watch_hangup(c); /* its reset, during a wait a debt may make long */
    return 1;
}

/* Hands both sockets to a tunnel. Called with nothing left in either
 * bufferevent: the client's input was forwarded, the upstream's (its answer
 * to a ClientHello) too, and no output is queued.
 * The tunnel's events are added before the bufferevents' are deleted, so a
 * socket the client's bufferevent was still reading from stays registered
 * with epoll (no epoll_ctl() pair to move it from one event to the other). */
static void go_tunnel(struct conn *c)
{
    count_up(c, c->ex.peek_queued); /* flushed: the upstream's socket took them */
    c->ex.peek_queued = 0;
    evutil_socket_t cfd = c->fd, ufd = c->up_fd;
    struct bufferevent *client = c->client, *up = c->up;
    c->client = NULL;
    c->up = NULL;
    c->fd = -1;
    c->up_fd = -1;
    c->state = CS_TUNNEL;
    bool splice = gateway_tunnel_splices(c->gw, c->origin.is_unix);
    c->tunnel = tunnel_new(c->gw->base, cfd, ufd, conn_idle_ms(c), splice, on_tunnel_end, c);
    backlog_untrack(bufferevent_get_output(client), c->backlog_cb, BACKLOG_TO_CLIENT);
    c->backlog_cb = NULL;
    bufferevent_free(client);
    bufferevent_free(up);
    if (c->tunnel == NULL)
        conn_free(c);
    else {
        tunnel_set_flow(c->tunnel, c->ex.flow);
        tunnel_set_progress(c->tunnel, progress_on_tunnel, c);
    }
}

/* Nothing queued toward either side: the sockets can go to the tunnel. */
static bool flushed(const struct conn *c)
{
    return evbuffer_get_length(bufferevent_get_output(c->client)) == 0 &&
           evbuffer_get_length(bufferevent_get_output(c->up)) == 0;
}

static void tunnel_goes(struct conn *c);

void connect_on_client_write(struct conn *c)
{
    if (c->state != CS_FLUSH || !flushed(c) || quota_flow_paused(c->ex.flow))
        return;
    if (evbuffer_get_length(bufferevent_get_input(c->client)) > 0)
        tunnel_goes(c); /* the first bytes waited for the bucket */
    else
        go_tunnel(c);
}

static void hello_answered(struct conn *c, bool retry);
static void quiet_server_spoke(struct conn *c);

/* CS_HELLO: the server's first bytes, until they tell a HelloRetryRequest
 * (all of it: the client needs the whole message before it sends another
 * ClientHello) from any other answer (at most 228 bytes are needed for
 * that). The read cap (stream_set_read_cap()) bounds them to PEEK_MAX: a
 * HelloRetryRequest longer than that goes to the client as far as it came,
 * and the second ClientHello it never gets to send is refused when the
 * window ends. */
static void up_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t len = evbuffer_get_length(in);
    if (c->state == CS_PEEK && c->peek_quiet && len > 0) {
        quiet_server_spoke(c);
        return;
    }
    if (c->state != CS_HELLO || len == 0)
        return;
    size_t n = len < PEEK_MAX ? len : PEEK_MAX;
    const uint8_t *buf = evbuffer_pullup(in, (ev_ssize_t)n);
    if (buf == NULL) {
        conn_free(c);
        return;
    }
    /* A TLS 1.3 server sends one change_cipher_spec record right after its
     * first handshake message (RFC 8446 D.4): after a HelloRetryRequest it
     * may come apart from it, and be read only now, ahead of the answer to
     * the second ClientHello. That answer is what tells: a second
     * HelloRetryRequest fails closed. */
    size_t skip = 0;
    bool more = false;
    if (c->hello_retried) {
        skip = sni_skip_ccs(buf, n, &more);
        if (more && n < PEEK_MAX)
            return;
    }
    enum sni_reply r = sni_server_reply(buf + skip, n - skip);
    if (r != SNI_REPLY_NEED_MORE || n >= PEEK_MAX)
        hello_answered(c, r != SNI_REPLY_OTHER);
}

static void up_write(struct bufferevent *bev, void *arg)
{
    (void)bev;
    connect_on_client_write(arg);
}

/* How often connect_hello_cut() looks whether the client has the bytes
 * (as tunnel.c's TUNNEL_LINGER_MS) while it takes them: no event tells
 * when its peer acknowledged what a socket holds. Each look that finds no
 * progress doubles the wait, up to an idle step (drain_step_ms()). */
#define HELLO_CUT_POLL_MS 20

/* What is read at most of a failed upstream's socket (pass_then_cut()):
 * not read past its first bytes, it holds little more than one receive
 * buffer's worth (128 KiB at the start; megabytes where tcp_rmem is
 * raised). */
#define REST_MAX (1024u * 1024)

/* Passes what the upstream's input holds to the client, after reading
 * more of the failed upstream's socket (c->hello_rest_left at most) as far
 * as the bytes waiting for the client allow: FLOW_HIGH, BACKLOG_TIGHT past
 * the budget of the bytes waiting for all clients (backlog.h), as a
 * download's reads. Before, up to REST_MAX was read at once whatever the
 * budget: 48 clients that read nothing held 39.8 MB at --max-conns 64.
 * Returns the bytes passed, or -1 when they cannot be. */
static ssize_t pass_rest(struct conn *c)
{
    struct evbuffer *up_in = bufferevent_get_input(c->up);
    size_t out = evbuffer_get_length(bufferevent_get_output(c->client));
    size_t mark = backlog_mark(FLOW_HIGH);
    if (c->hello_rest_left > 0 && out < mark) {
        size_t want = mark - out < c->hello_rest_left ? mark - out : c->hello_rest_left;
        size_t had = evbuffer_get_length(up_in);
        ssize_t r = stream_read_rest(c->up, c->up_fd, had + want);
        size_t got = evbuffer_get_length(up_in) - had;
        /* fewer than asked: the socket has nothing more before its reset */
        c->hello_rest_left = r < 0 || got < want ? 0 : c->hello_rest_left - got;
    }
    size_t n = evbuffer_get_length(up_in);
    if (n > 0 && stream_send(c->client, c->fd, up_in, n) < 0)
        return -1;
    c->ex.bytes_down += n;
    return (ssize_t)n;
}

/* Of the bytes passed to <c>'s client (bytes_down), those it took: not in
 * its output nor in its socket's send queue (unacknowledged). */
static uint64_t hello_taken(const struct conn *c)
{
    int64_t queue = drain_send_queue(c->fd);
    uint64_t held =
        evbuffer_get_length(bufferevent_get_output(c->client)) + (queue > 0 ? (uint64_t)queue : 0);
    return c->ex.bytes_down > held ? c->ex.bytes_down - held : 0;
}

/* Waits until the client took what was passed to it, or idle_timeout
 * without its taking any: a client slow but steady gets the whole answer,
 * as in an open tunnel. Before, the reset came at idle_timeout after the
 * failure whatever the client took meanwhile (a 117 KiB answer at 20 KiB/s
 * cut at 44 KiB), and the wait looked every 20 ms throughout, a client
 * that read nothing included (50 wakeups a second each). */
void connect_hello_cut(struct conn *c)
{
    if (!c->client_reset && pass_rest(c) < 0) {
        conn_cut(c);
        return;
    }
    uint64_t now = monotonic_ms(), idle = conn_idle_ms(c), step = drain_step_ms(idle);
    uint64_t taken = hello_taken(c);
    if (taken > c->hello_taken || c->hello_poll_ms == 0) {
        c->hello_taken = taken;
        c->hello_cut_at = now + idle;
        c->hello_poll_ms = HELLO_CUT_POLL_MS;
    } else if (c->hello_poll_ms < step) {
        c->hello_poll_ms = 2 * c->hello_poll_ms < step ? 2 * c->hello_poll_ms : step;
    }
    if (c->client_reset || now >= c->hello_cut_at ||
        (c->hello_rest_left == 0 && evbuffer_get_length(bufferevent_get_output(c->client)) == 0 &&
         drain_send_queue(c->fd) <= 0)) {
        conn_cut(c);
        return;
    }
    uint64_t wait =
        c->hello_cut_at - now < c->hello_poll_ms ? c->hello_cut_at - now : c->hello_poll_ms;
    struct timeval tv = timeval_of_ms(wait);
    conn_timer_add(c, &tv);
}

/* True when bytes the server sent were passed to the client (bytes_down)
 * and some of them may not have reached it yet: queued in its output, or in
 * its socket's send queue, unacknowledged (a client slow to read: its
 * receive buffer full). A reset now would drop them. */
static bool server_bytes_on_their_way(const struct conn *c)
{
    return c->ex.bytes_down > 0 && (evbuffer_get_length(bufferevent_get_output(c->client)) > 0 ||
                                    drain_send_queue(c->fd) > 0);
}

/* The server failed in CS_HELLO after it sent the start of its answer to
 * the ClientHello, too little to tell it, or in CS_FLUSH after its answer:
 * those bytes go to the client, as an open tunnel passes on what came
 * before a reset, and both sides are reset once the client acknowledged
 * them (a reset drops what its peer has not), or after idle_timeout
 * (connect_hello_cut(), in CS_HELLO: CS_FLUSH would open the tunnel). On a
 * failure (<what> has BEV_EVENT_ERROR) what the socket still holds is read
 * too (pass_rest(), as the client takes it): Linux keeps the bytes that
 * came before a reset readable ahead of it, and a write that met the reset
 * first reports it before libevent read them (the ClientHello queued, or
 * what the client sent behind it). An answer read whole before the
 * failure, already passed to a client that has not taken it all, is
 * waited for the same way, with nothing to add. Returns false when there
 * is nothing on its way to the client (or it cannot be passed on): the
 * caller resets at once. */
static bool pass_then_cut(struct conn *c, short what)
{
    if ((c->state != CS_HELLO && c->state != CS_FLUSH) || c->client_reset)
        return false;
    c->hello_rest_left = (what & BEV_EVENT_ERROR) ? REST_MAX : 0;
    ssize_t n = pass_rest(c);
    if (n < 0 || (n == 0 && c->hello_rest_left == 0 && !server_bytes_on_their_way(c)))
        return false;
    bufferevent_disable(c->up, EV_READ | EV_WRITE);
    bufferevent_disable(c->client, EV_READ);
    c->state = CS_HELLO;
    c->hello_cut = true;
    c->hello_poll_ms = 0; /* connect_hello_cut() starts the wait */
    evtimer_del(c->timer);
    connect_hello_cut(c);
    return true;
}

static void up_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;
    /* A read timeout while the socket holds bytes (or the server's end):
     * they came while the gateway did not run (stopped, a paused VM, a long
     * stall of its loop), and libevent ran the timeout before the read
     * (epoll_wait() comes back with no event after SIGCONT). The server
     * answered in time: reading goes on (the bufferevent turned it off),
     * its timeout restarted. Before, the tunnel was reset, the answer to
     * the ClientHello thrown away. As forward.c's up_event(). */
    if (socket_read_timeout_held_input(bev, what))
        return;
    if (c->state == CS_HELLO && (what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR)) {
        hello_answered(c, false); /* the server closed: nothing more to check */
        return;
    }
    if (c->state == CS_PEEK && c->peek_quiet && (what & BEV_EVENT_EOF) &&
        !(what & BEV_EVENT_ERROR)) {
        quiet_server_spoke(c); /* the server ended its side first */
        return;
    }
    /* The upstream failed (a reset, an error, a timeout) while the first
     * bytes were checked: the client, which has its 200 and perhaps the
     * server's first bytes, is reset as by an open tunnel (conn_cut()), not
     * handed a clean end of stream; after the server's answer to the
     * ClientHello, or its start, once it has those bytes too
     * (pass_then_cut()). */
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
        if (!pass_then_cut(c, what))
            conn_cut(c);
    } else {
        conn_free(c);
    }
}

void connect_start(struct conn *c)
{
    struct timeval tv = timeval_of_ms(PEEK_MS);
    c->state = CS_PEEK;
    c->peek_over = false;
    c->hello_retried = false;
    c->peek_quiet = false;
    c->peek_hello_wait = 0;
    c->ex.peek_scan = (struct peek_http_scan){0};
    c->ex.status = 200;
    struct timeval up_tv = timeval_of_ms(conn_idle_ms(c));
    bufferevent_setcb(c->up, up_read, up_write, up_event, c);
    bufferevent_set_timeouts(c->up, NULL, &up_tv);
    if (bufferevent_get_enabled(c->up) & EV_READ) /* a new bufferevent's is off */
        bufferevent_disable(c->up, EV_READ);
    if (stream_send_bytes(c->client, c->fd, established, sizeof(established) - 1) < 0) {
        conn_free(c);
        return;
    }
    if (stream_set_read_cap(c->client, PEEK_MAX) < 0) {
        conn_free(c);
        return;
    }
    bufferevent_setwatermark(c->client, EV_WRITE, 0, 0);
    struct timeval idle = timeval_of_ms(conn_idle_ms(c));
    bufferevent_set_timeouts(c->client, NULL, &idle);
    /* These timeouts are this module's: conn_set_client_timeouts() must not
     * take them for its own and skip setting its own (untime_client()
     * zeroed it already on the way here; said again so that no path can
     * rely on that). */
    c->drain_step_ms = 0;
    if (c->ex.client_eof) {
        /* The client ended its side while its target was resolved or
         * connected: what it sent is all there will be. */
        c->peek_over = true;
        connect_on_client_read(c);
        return;
    }
    /* Read since its accept, unless bytes came early (on_read() turned it
     * off): enabling it again would add its event anew (about 180
     * instructions). */
    if (!(bufferevent_get_enabled(c->client) & EV_READ))
        bufferevent_enable(c->client, EV_READ);
    conn_timer_add(c, &tv);
    /* Bytes sent right behind the CONNECT head are already here. */
    if (evbuffer_get_length(bufferevent_get_input(c->client)) > 0)
        connect_on_client_read(c);
}

enum peek_verdict {
    PEEK_WAIT,        /* a valid prefix: read more while the window is open */
    PEEK_PASS,        /* neither TLS nor HTTP, nothing, or a request naming the target */
    PEEK_HELLO,       /* a ClientHello without server_name or with the target's */
    PEEK_REFUSE,      /* another name, or a TLS handshake that could not be checked */
    PEEK_REFUSE_HOST, /* an HTTP request naming another host, or one that could not be checked */
    PEEK_REFUSE_ECH, /* a ClientHello that passed but hides an inner one (Encrypted Client Hello) */
};

/* The deny reason of a refusing verdict. */
static enum deny_reason peek_reason(enum peek_verdict v)
{
    switch (v) {
    case PEEK_REFUSE_HOST:
        return REASON_HOST_MISMATCH;
    case PEEK_REFUSE_ECH:
        return REASON_ENCRYPTED_CLIENT_HELLO;
    default:
        return REASON_SNI_MISMATCH;
    }
}

/* A ClientHello that names the target (or no name) and carries an
 * encrypted one: its server_name is an outer name, and a front that
 * decrypts the inner hello serves whatever site that one names. Refused
 * unless the policy in force allows it (the agent's
 * encrypted_client_hello, else network.encrypted_client_hello: c->ex's
 * ech_allowed), since the gateway cannot tell a real inner hello from the
 * GREASE Chromium sends. */
static enum peek_verdict hello_verdict(const struct conn *c, bool encrypted)
{
    if (encrypted && !c->ex.ech_allowed)
        return PEEK_REFUSE_ECH;
    return PEEK_HELLO;
}

/* The first bytes are not TLS: judges them as an HTTP/1.x request head
 * (peek_http.h), which must name the target. The judging goes on from
 * where the last read's stopped (c->ex.peek_scan): a head sent a few bytes
 * at a time is looked at once, not once per read. */
static enum peek_verdict peek_judge_http(struct conn *c, const char *buf, size_t len, bool final)
{
    const char *why = NULL;
    switch (
        peek_http_resume(&c->ex.peek_scan, buf, len, PEEK_MAX, &c->ex.target, c->ex.port, &why)) {
    case PEEK_HTTP_NOT_HTTP:
    case PEEK_HTTP_MATCH:
        return PEEK_PASS;
    case PEEK_HTTP_NEED_MORE:
        return final ? PEEK_REFUSE_HOST : PEEK_WAIT;
    case PEEK_HTTP_MISMATCH:
    default:
        return PEEK_REFUSE_HOST;
    }
}

/* Judges the first <len> bytes the client sent, or after a
 * HelloRetryRequest the bytes that must carry its second ClientHello;
 * <final> when no more will be read (window over, PEEK_MAX reached, client
 * EOF). On PEEK_HELLO sets <*used> to the length of the records that carry
 * the hello. */
static enum peek_verdict peek_judge(struct conn *c, const char *buf, size_t len, bool final,
                                    size_t *used)
{
    char name[SNI_NAME_MAX + 1];
    size_t nlen = 0, skip = 0, hello_len = 0, missing = 0, whole = len;
    bool encrypted = false;
    if (!final && len < c->peek_hello_wait)
        return PEEK_WAIT; /* the ClientHello cannot be complete yet */
    if (c->hello_retried) {
        /* The server waits for a ClientHello, which a change_cipher_spec
         * record may precede (RFC 8446 D.4): nothing else passes. */
        bool more;
        skip = sni_skip_ccs((const uint8_t *)buf, len, &more);
        if (more)
            return final ? PEEK_REFUSE : PEEK_WAIT;
        buf += skip;
        len -= skip;
        if (len == 0)
            return final ? PEEK_REFUSE : PEEK_WAIT;
    } else if (len == 0) {
        return final ? PEEK_PASS : PEEK_WAIT; /* server speaks first */
    }
    enum sni_result r = sni_parse_missing((const uint8_t *)buf, len, name, sizeof(name), &nlen,
                                          &hello_len, &encrypted, &missing);
    *used = skip + hello_len;
    /* Incomplete: parsed again once the bytes it lacks may be in, not at
     * every read (a hello trickled in small records would else be parsed
     * from its start each time: CPU quadratic in its size). A hello that
     * is malformed further on is then refused when those bytes are in, or
     * when the window ends, rather than at the read that showed it. */
    c->peek_hello_wait = r == SNI_NEED_MORE ? whole + missing : 0;
    switch (r) {
    case SNI_NOT_TLS:
        /* After a HelloRetryRequest only a ClientHello may follow. */
        return c->hello_retried ? PEEK_REFUSE : peek_judge_http(c, buf, len, final);
    case SNI_ABSENT:
        return hello_verdict(c, encrypted);
    case SNI_NEED_MORE:
        return final ? PEEK_REFUSE : PEEK_WAIT;
    case SNI_FOUND:
        if (!host_sni_names(name, nlen, &c->ex.target))
            return PEEK_REFUSE;
        return hello_verdict(c, encrypted);
    case SNI_MALFORMED:
    default:
        return PEEK_REFUSE;
    }
}

void connect_settle(struct conn *c)
{
    struct exchange *ex = &c->ex;
    if (c->up == NULL || ex->peek_queued == 0)
        return;
    size_t queued = evbuffer_get_length(bufferevent_get_output(c->up));
    size_t took = ex->peek_queued > queued ? ex->peek_queued - queued : 0;
    ex->bytes_up += took;
    ex->peek_queued -= took;
}

/* The flow's timer of a tunnel whose first bytes wait for the bucket
 * (pace_peeked(), CS_FLUSH). */
static void on_flush_refill(void *arg)
{
    connect_on_client_write(arg);
}

/* The check is over and its line in the log: sends everything the client
 * sent upstream, and hands both sockets to the tunnel once nothing is
 * queued (CS_FLUSH, without reading either side meanwhile: what comes next
 * is the tunnel's to move). */
static void tunnel_goes(struct conn *c)
{
    struct exchange *ex = &c->ex;
    struct evbuffer *in = bufferevent_get_input(c->client);
    struct evbuffer *up_out = bufferevent_get_output(c->up);
    size_t len = evbuffer_get_length(in);
    c->state = CS_FLUSH;
    if (pace_peeked(c, len, on_flush_refill) != 0)
        return; /* connect_on_client_write() once the bucket has refilled, or cut */
    if (stream_send(c->up, c->up_fd, in, len) < 0) {
        conn_free(c);
        return;
    }
    take_peeked(c, len);
    /* The peeked bytes count as sent once the upstream's socket took them:
     * those it took now, the rest when the flush is over (go_tunnel). */
    size_t queued = evbuffer_get_length(up_out);
    count_up(c, ex->peek_queued + len - queued);
    ex->peek_queued = queued;
    if (!flushed(c)) {
        bufferevent_disable(c->client, EV_READ);
        bufferevent_disable(c->up, EV_READ); /* read during CS_HELLO */
        if (queued > 0)
            bufferevent_enable(c->up, EV_WRITE);
    }
    connect_on_client_write(c);
}

/* The check is over: publishes the decision; tunnel_goes() once the log
 * has its line. */
static void open_tunnel(struct conn *c)
{
    conn_publish_egress(c);
    (void)conn_after_log(c, tunnel_goes);
}

static void send_hello(struct conn *c, size_t used);

/* The flow's timer of a ClientHello that waits for the bucket
 * (pace_peeked(), CS_PEEK, <c>->hello_paced bytes of it judged): it goes,
 * the client read again as in CS_HELLO. */
static void on_hello_refill(void *arg)
{
    struct conn *c = arg;
    size_t used = c->hello_paced;
    if (c->state != CS_PEEK || used == 0)
        return;
    c->hello_paced = 0;
    bufferevent_enable(c->client, EV_READ);
    send_hello(c, used);
}

/* Sends the <used> bytes of a ClientHello's records upstream and waits for
 * the server's answer (CS_HELLO). What the client sends behind them waits
 * in its input (at most PEEK_MAX bytes: the read cap) until then: a
 * second ClientHello must not reach the server before the gateway knows
 * whether it asked for one. */
static void send_hello(struct conn *c, size_t used)
{
    struct evbuffer *in = bufferevent_get_input(c->client);
    int paced = pace_peeked(c, used, on_hello_refill);
    if (paced > 0)
        c->hello_paced = used; /* on_hello_refill() sends it */
    if (paced != 0)
        return;
    if (stream_send(c->up, c->up_fd, in, used) < 0) {
        conn_free(c);
        return;
    }
    take_peeked(c, used);
    c->ex.peek_queued += used;
    c->state = CS_HELLO;
    struct timeval idle = timeval_of_ms(conn_idle_ms(c));
    bufferevent_set_timeouts(c->up, &idle, &idle);
    if (stream_set_read_cap(c->up, PEEK_MAX) < 0) {
        conn_free(c);
        return;
    }
    bufferevent_enable(c->up, EV_READ);
    if (evbuffer_get_length(bufferevent_get_output(c->up)) > 0)
        bufferevent_enable(c->up, EV_WRITE);
}

/* The server answered the ClientHello (or closed): its bytes go to the
 * client. A HelloRetryRequest (<retry>) makes the client send a second
 * ClientHello, whose server_name a server takes anew (OpenSSL does): it is
 * peeked and judged as the first was. A second HelloRetryRequest, which no
 * server may send (RFC 8446 4.1.4), fails closed. Any other answer ends
 * the check. */
static void hello_answered(struct conn *c, bool retry)
{
    struct evbuffer *up_in = bufferevent_get_input(c->up);
    size_t n = evbuffer_get_length(up_in);
    if (c->client_reset) {
        evbuffer_drain(up_in, n); /* nobody to take it */
    } else if (stream_send(c->client, c->fd, up_in, n) < 0) {
        conn_free(c);
        return;
    } else {
        c->ex.bytes_down += n;
    }
    if (retry && !c->hello_retried) {
        struct timeval tv = timeval_of_ms(PEEK_MS);
        c->hello_retried = true;
        c->peek_hello_wait = 0;
        c->state = CS_PEEK;
        bufferevent_disable(c->up, EV_READ);
        c->peek_over = c->ex.client_eof;
        if (!c->peek_over) {
            bufferevent_enable(c->client, EV_READ);
            conn_timer_add(c, &tv);
        }
        if (c->peek_over || evbuffer_get_length(bufferevent_get_input(c->client)) > 0)
            connect_on_client_read(c);
        return;
    }
    if (retry) {
        connect_settle(c);
        if (conn_gate_denies(c, REASON_SNI_MISMATCH, false))
            return;
    }
    if (c->client_reset) {
        conn_cut(c); /* judged; nothing left to carry: the upstream is reset as by a tunnel */
        return;
    }
    open_tunnel(c);
}

/* The window passed with nothing from the client, which has not ended its
 * side: waits for the first side to speak (peek_quiet), at most the idle
 * timeout. The server's first bytes are read (and bounded) as a
 * ClientHello's answer would be. */
static void quiet_start(struct conn *c)
{
    struct timeval tv = timeval_of_ms(conn_idle_ms(c));
    c->peek_quiet = true;
    c->peek_over = false;
    conn_timer_add(c, &tv);
    if (stream_set_read_cap(c->up, PEEK_MAX) < 0) {
        conn_free(c);
        return;
    }
    bufferevent_enable(c->up, EV_READ);
}

/* The server spoke (or ended its side) before the client said anything: a
 * server-speaks-first protocol. Its bytes go to the client and the tunnel
 * opens, what the client sends from now on being its answer. */
static void quiet_server_spoke(struct conn *c)
{
    c->peek_quiet = false;
    evtimer_del(c->timer);
    hello_answered(c, false);
}

/* Ends the quiet wait of connect_on_client_read() (the client sent bytes,
 * ended its side, or the idle timeout passed). Returns true when <c> was
 * dealt with: the server had spoken first after all, or the wait was idle
 * for the whole timeout (closed as an idle tunnel is: <c> is freed). Else
 * the client's bytes are judged, within a new window. */
static bool quiet_end(struct conn *c, size_t len)
{
    if (evbuffer_get_length(bufferevent_get_input(c->up)) > 0) {
        quiet_server_spoke(c);
        return true;
    }
    if (len == 0 && !c->ex.client_eof) {
        conn_free(c); /* idle: logged as the tunnel that carried nothing */
        return true;
    }
    c->peek_quiet = false;
    bufferevent_disable(c->up, EV_READ);
    c->peek_over = c->ex.client_eof;
    if (!c->peek_over) {
        struct timeval tv = timeval_of_ms(PEEK_MS);
        conn_timer_add(c, &tv);
    }
    return false;
}

void connect_on_client_read(struct conn *c)
{
    if (c->state != CS_PEEK)
        return;
    struct evbuffer *in = bufferevent_get_input(c->client);
    size_t len = evbuffer_get_length(in);
    if (c->peek_quiet) {
        if (len == 0 && !c->peek_over)
            return;
        if (quiet_end(c, len))
            return;
    } else if (len == 0 && c->peek_over && !c->ex.client_eof && !c->hello_retried) {
        quiet_start(c); /* nothing within the window: who speaks first? */
        return;
    }
    size_t n = len < PEEK_MAX ? len : PEEK_MAX;
    size_t used = 0;
    const char *buf = "";
    if (n > 0 && (buf = (const char *)evbuffer_pullup(in, (ev_ssize_t)n)) == NULL) {
        conn_free(c);
        return;
    }
    enum peek_verdict v = peek_judge(c, buf, n, c->peek_over || n >= PEEK_MAX, &used);
    if (v == PEEK_WAIT)
        return; /* wait for more, until the window closes */
    evtimer_del(c->timer);
    if (v == PEEK_REFUSE || v == PEEK_REFUSE_HOST || v == PEEK_REFUSE_ECH) {
        connect_settle(c); /* a first ClientHello that went up */
        if (conn_gate_denies(c, peek_reason(v), false))
            return;
        v = v == PEEK_REFUSE_ECH ? PEEK_HELLO : v; /* report mode: the hello goes on */
    }
    if (c->client_reset) {
        /* Nothing is left to carry: no tunnel, no hello upstream. What it
         * sent passed the check, so the decision is the policy's. The
         * upstream is reset, as an open tunnel's would be (conn_cut()). */
        conn_cut(c);
        return;
    }
    if (v == PEEK_HELLO)
        send_hello(c, used);
    else
        open_tunnel(c);
}
