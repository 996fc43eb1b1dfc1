/* conn: one client connection and the request it is working on.
 *
 * A client connection is a bufferevent (the one byte-stream abstraction, so
 * the same code can run over a TLS-terminated stream later) carrying a
 * sequence of exchanges: one HTTP request, or one CONNECT. Each exchange
 * flows one way, in this order (conn.c): read and parse the head, identify
 * the agent, normalise the target, check Host, decide, resolve, guard every
 * address, connect (upstream.c), publish the agent_egress event, then
 * forward (forward.c) or tunnel (connect.c, tunnel.c), and publish
 * agent_egress_end when it finishes. Every exchange publishes exactly one
 * of each, denials and bad requests included.
 *
 * Internal to src/gate: conn.c, forward.c and connect.c share these types. */
#ifndef SLUICE_GATE_CONN_H
#define SLUICE_GATE_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <event2/util.h>

#include "gate/agent.h"
#include "gate/chunked.h"
#include "gate/drain.h"
#include "gate/http1.h"
#include "gate/peek_http.h"
#include "gate/resolve.h"
#include "gate/sni.h"
#include "gate/upstream.h"
#include "policy/decision.h"
#include "policy/host.h"

struct gateway;
struct gw_policy;
struct listener;
struct bufferevent;
struct evbuffer;
struct event;
struct evbuffer_cb_entry;
struct tunnel;
struct resolve_req;
struct upstream_connect;
struct quota_flow;
struct kept_decision;

/* Above this many bytes waiting in one direction's output, stop reading the
 * other side; resume when it drains below FLOW_LOW. */
#define FLOW_HIGH (256u * 1024)
#define FLOW_LOW  (64u * 1024)
/* A CONNECT's first bytes are read for at most this long and this much. */
#define PEEK_MS  1000
#define PEEK_MAX (SNI_MAX_HELLO + 2048)
/* A new connection's first request head must be complete within
 * min(HEAD_DEADLINE_MS, idle_timeout) of the accept; so must every later
 * one while the connection counts against no agent (its requests were
 * refused before one was known). */
#define HEAD_DEADLINE_MS 10000
/* A client closed on while its bytes were still unread, or its request body
 * not read to its end, is read (and what it sends dropped) for at most this
 * long after the gateway ended its side. */
#define LINGER_MS 2000
/* A client that is not read while the gateway waits for its upstream or a
 * plain request's answer is looked at this often for a hang-up: its close
 * or reset (conn_watch_hangup()). */
#define HANGUP_CHECK_MS 100

enum conn_state {
    CS_HEAD,    /* reading a request head */
    CS_RESOLVE, /* waiting for DNS */
    CS_CONNECT, /* connecting upstream */
    CS_PEEK,    /* CONNECT: 200 sent, reading the first client bytes */
    CS_HELLO,   /* CONNECT: a ClientHello went up; waiting for the server's answer */
    CS_FLUSH,   /* CONNECT: flushing peeked bytes before the splice tunnel */
    CS_TUNNEL,  /* CONNECT: splicing */
    CS_FORWARD, /* plain HTTP: request and response bodies flowing */
    CS_CLOSING, /* a final response queued: close once it is written */
    CS_LINGER,  /* written and ended (shutdown): reading and dropping what the client still sends */
};

struct exchange {
    bool active;
    char id[48]; /* "c17.1" */
    /* The policy this request is decided under (a reference), which all
     * it borrows comes from; the policy in force once a reload kept it,
     * or left it its answer alone to finish (<kept>). */
    struct gw_policy *pol;
    /* limits.idle_timeout and header_bytes of the policy it was first
     * decided under: a reload that keeps it leaves them as they were. */
    uint64_t idle_timeout_ms, header_bytes;
    /* Read while it is decided (again); NULL once a reload left it its
     * answer alone to finish (<kept>). */
    const struct agent *agent;
    const char *agent_id; /* NULL when unknown (auth failed); borrowed (<pol>'s, or <kept>'s) */
    uint64_t agent_hash;  /* agent_hash(agent_id), set with it (set_agent()), or 0 */
    bool by_secret;       /* identified by the secret it presented (a token agent) */
    /* with by_secret, its agent's token_mark(): a reload that rotates the
     * token cuts what this request still does (conn_redecide()) */
    unsigned char token_mark[TOKEN_MARK_LEN];
    bool credentials;     /* refused for credentials naming no agent (event.h) */
    enum agent_mode mode; /* the agent's, under the policy in force (conn_redecide()) */
    bool ech_allowed;     /* an Encrypted Client Hello passes (the agent's or network's
                             encrypted_client_hello under the policy in force) */
    char method[HTTP_METHOD_MAX + 1];
    unsigned mbit;
    bool is_connect;
    bool have_target;
    struct host target;
    uint16_t port;
    char *path; /* owned copy; NULL for CONNECT */
    struct decision dec;
    enum verdict verdict;    /* final: allow, deny or report */
    enum deny_reason reason; /* why (kept in report mode) */
    char ip[IPADDR_STRLEN];  /* the address connected to or refused */
    struct ipaddr addrs[RESOLVE_MAX_ADDRS];
    size_t naddrs;
    /* gw->counters.reloads when the address guard let <addrs> through: a
     * connection that comes after a reload is checked again (conn.c). */
    uint64_t guarded_at;
    struct timespec t_decided; /* CLOCK_MONOTONIC */
    bool egress_published, end_published;
    bool redecided; /* a tunnel denied or reported when decided again (conn_redecide()) */
    bool again;     /* its agent_egress published again (event.h) */
    /* The policy <dec> names a rule of once a re-decision denied the
     * exchange (a reference; NULL until then): a reload while its denial
     * waits for the log may replace gw->current. One a re-decision keeps
     * moves to the policy in force instead (<pol>: conn.c,
     * rebase_exchange()). */
    struct gw_policy *redecided_pol;
    int status;
    uint64_t bytes_up, bytes_down;
    uint64_t head_bytes;        /* the request head as read (event.h's head_bytes) */
    uint64_t up_reported;       /* bytes_up already in progress events (gate/progress.h) */
    struct timespec up_note_at; /* CLOCK_MONOTONIC of the last progress event */

    /* What a plain exchange whose answer alone is left to come keeps of
     * its decision once a reload replaced the policy it was decided under
     * (conn.c, keep_decision()): <agent_id> and <dec>'s rule, grant and
     * owner point into it, no longer into that policy. Owned; NULL before. */
    struct kept_decision *kept;

    unsigned retry_after;    /* seconds, for rate_limited and quarantined (shape/admit.c) */
    struct quota_flow *flow; /* upload shaping (shape/quota.h), or NULL; owned */

    /* plain HTTP forwarding */
    struct evbuffer *uphead; /* the rewritten head, sent once connected */
    enum body_kind req_body, rsp_body;
    uint64_t req_left, rsp_left;
    struct chunked req_chunked, rsp_chunked;
    bool req_done, rsp_head_done, rsp_done;
    /* Its client ended its side, and the end of the body is among the
     * bytes left of it (conn.c, upload_cut_short()). */
    bool body_end_held;
    /* A TRACE or OPTIONS with Max-Forwards: 0, answered by the gateway
     * once allowed (gate/max_forwards.h). */
    bool ends_here;
    /* Until the upstream took the whole request (req_taken), its timeouts
     * are steps of idle_timeout that judge its progress (forward.c,
     * gate/drain.h); then it has idle_timeout to answer. */
    bool req_taken;
    /* c->up's timeouts are idle_timeout both ways (set once the upstream
     * took the request), as a kept connection's are (forward_park()). */
    bool up_idle_timeouts;
    /* What the gateway held toward the upstream is out of bytes_up already
     * (drop_untaken(): the connection was reset); conn.c's
     * forget_unsent() does not take it out again. */
    bool unsent_dropped;
    struct drain up_drain;
    bool client_close; /* the client asked to close after this request */
    bool client_v10;   /* the client spoke HTTP/1.0: no 1xx, no chunked framing to it */
    bool unchunk;      /* the response is chunked and the client gets its data alone */
    bool client_eof;   /* the client ended its side after its request (conn.c) */
    bool keep_alive;   /* the client connection survives this exchange */
    /* It closed its connection altogether (its socket hung up): the exchange
     * ends once the request is handed on (forward_client_gone()). */
    bool client_gone;
    /* A refusal may keep the client connection: set when the request has no
     * body to skip and the client did not ask to close. */
    bool refusal_keeps;
    size_t head_pending;        /* head bytes still in the client's input buffer */
    struct http1_scan rsp_scan; /* the response head being read (forward.c) */

    /* upstream connection reuse (forward.c) */
    bool up_keep;  /* the upstream's response lets its connection be reused */
    bool reused;   /* c->up was kept from an earlier request of this client */
    bool retried;  /* the request was already sent again on a fresh connection */
    bool rsp_seen; /* a byte of the response arrived */
    /* c->up was reused, and the request waited for its log line (or its
     * head for the bandwidth bucket) after it took c->up: forward_start()
     * looks at c->up again (forward_try_reuse(), head_waits()) */
    bool reuse_waited;
    /* The head waits for the bandwidth bucket of its body, in CS_CONNECT
     * (forward.c, head_waits()); forward_hold() ends the wait. */
    bool head_waiting;
    /* The target's name waits for the bandwidth bucket before it is
     * resolved, in CS_RESOLVE (conn.c, resolve_target()). */
    bool name_waiting;
    /* gw->turns when that wait began, and whether c->up's events were then
     * at GATEWAY_PRI_FIRST: a later turn has polled it (kept_is_quiet()). */
    bool reuse_wait_first;
    uint64_t reuse_wait_turn;

    size_t peek_queued;     /* CONNECT: peeked bytes sent upstream, not yet counted (connect.c) */
    unsigned interim;       /* interim (1xx) responses passed on (forward.c) */
    size_t scratch_interim; /* scratch bytes ahead of the final head: interim heads */
    bool rsp_head_sent;     /* the final response head was handed to the client */

    /* CONNECT: how far the first bytes were judged as an HTTP request
     * (connect.c), so that a read judges only the bytes it brought. */
    struct peek_http_scan peek_scan;
};

struct conn {
    struct conn *next, *prev;
    struct conn *log_next, *log_prev; /* in gw->log_waiters while log_waiting */
    struct gateway *gw;
    uint64_t id;
    uint64_t nreq; /* requests begun on it: the N of its ids "c<id>.N" */
    evutil_socket_t fd;
    struct bufferevent *client;
    struct evbuffer *scratch;    /* a response head on its way to the client (forward.c); or NULL */
    struct evbuffer *spare_head; /* an empty buffer for the next ex.uphead (forward.c); or NULL */
    struct client_origin origin;
    enum conn_state state;
    char *counted_agent;         /* the agent this connection counts against */
    uint64_t counted_agent_hash; /* its agent_hash() (watch/agent_hash.h) */
    struct timespec t_accept;    /* CLOCK_MONOTONIC: the head deadline counts from it */
    struct timespec t_head_wait; /* CLOCK_MONOTONIC: when the wait for the next head began */
    struct resolve_req *rreq;
    struct upstream_connect *uc;
    struct bufferevent *up;
    evutil_socket_t up_fd;
    struct tunnel *tunnel;
    /* HANGUP_CHECK_MS: an unread client's close (conn_watch_hangup());
     * owned, made when first needed, freed by conn_free() */
    struct event *hangup_timer;
    /* Upload bytes held back from a progress event (gate/progress.h) are
     * published when PROGRESS_MS has passed, whether or not more come;
     * assigned in ev_mem when first needed (conn_progress_mem()), NULL
     * before */
    struct event *progress_timer;
    /* The head deadline (a response head's too); CONNECT peek window; the
     * wait of CS_HELLO's cut (connect_hello_cut()); in ev_mem */
    struct event *timer;
    /* Write-ahead (SPEC.md, Decision log): the decision waits until the log
     * has line <log_seq>. <log_hold>: what the client is sent (a refusal)
     * is held, its writes off; <log_go>: what runs then (the request or
     * the tunnel's first bytes going up), the upstream's events off. */
    bool log_waiting;
    bool log_hold;
    uint64_t log_seq;
    void (*log_go)(struct conn *c);
    bool peek_over;     /* the peek window closed (timer or client EOF) */
    bool client_reset;  /* ... by a reset: judged, then no tunnel is opened */
    bool hello_retried; /* CONNECT: the server asked for a second ClientHello (connect.c) */
    bool peek_quiet;    /* CONNECT: the window passed with nothing sent; who speaks first? */
    /* CONNECT: the server failed in CS_HELLO after the start of its answer
     * (or in CS_FLUSH after its answer), whose bytes go to the client
     * before both are reset (connect.c; the state is CS_HELLO then); until
     * hello_cut_at (monotonic_ms()) at the latest: idle_timeout after the
     * client last took some (hello_taken: of bytes_down, those it took),
     * looked at every hello_poll_ms. hello_rest_left: what may still be
     * read of the failed upstream's socket for the client (REST_MAX in
     * all), read as the client takes what waits for it. */
    bool hello_cut;
    uint64_t hello_cut_at;
    uint64_t hello_taken;
    uint64_t hello_poll_ms;
    size_t hello_rest_left;
    /* CONNECT: a ClientHello still incomplete is parsed again only once the
     * client's bytes reach this length (connect.c; 0: at the next read). */
    size_t peek_hello_wait;
    /* CONNECT: bytes of a judged ClientHello that wait for the bandwidth
     * bucket before they go upstream (connect.c, send_hello()); 0: none */
    size_t hello_paced;
    /* The client's write timeout as conn_set_client_timeouts() set it, a
     * step of idle_timeout (gate/drain.h); 0 while the timeouts are another
     * module's (a CONNECT's, connect.c; a tunnel has its own timer). */
    uint64_t drain_step_ms;
    bool client_read_timed; /* ... and a read timeout of idle_timeout with it */
    struct drain drain;
    struct evbuffer_cb_entry *drain_cb;   /* notes writes into the client's socket */
    struct evbuffer_cb_entry *backlog_cb; /* counts its output in backlog_held() */
    /* counts c->up's output (a plain exchange's) in backlog_held(): set by
     * forward_start(), removed before c->up is freed or kept idle
     * (forward_untrack_upload()) */
    struct evbuffer_cb_entry *up_backlog_cb;
    struct exchange ex;
    /* The last exchange ended before its request body was read to its end
     * (conn_end_exchange()): the rest may still come, so the close lingers. */
    bool request_unfinished;
    /* Between requests: the next head waits until the client took the
     * answers queued for it down to FLOW_LOW, or BACKLOG_TIGHT_LOW past the
     * clients' budget (conn.c, head_waits()). */
    bool head_paused;
    struct http1_scan head_scan; /* the request head being read (conn.c, read_head()) */
    bool head_crlf_skipped;      /* the one empty line allowed before that head was dropped */
    /* <timer> was put off 1 ms, once since it was armed (conn_timer_add()),
     * for bytes waiting unread in a socket when it ran (conn.c,
     * timer_before_read()). */
    bool timer_put_off;
    /* The client ended its side with requests pipelined before the end
     * still in its input: they are answered in order, then the connection
     * closes (conn.c, client_ended_with_requests()). */
    bool client_ended;
    struct ipaddr up_addr; /* the checked address c->up is connected to */
    /* An upstream connection kept idle after a plain-HTTP exchange, for the
     * next request of this client connection only (forward.c). */
    struct bufferevent *idle_up;
    evutil_socket_t idle_fd; /* -1 when none */
    struct ipaddr idle_addr;
    char idle_ip[IPADDR_STRLEN]; /* idle_addr, formatted */
    uint16_t idle_port;
    char *idle_agent; /* the agent whose request it carried; owned */
    /* gw->turns when idle_up was kept, and whether its events are then at
     * GATEWAY_PRI_FIRST: a later turn has polled it (forward_try_reuse()). */
    uint64_t idle_turn;
    bool idle_first;
    /* Its idle timeout was put off, once, for a request waiting in the
     * client's socket when it ran (forward.c, idle_event()). */
    bool idle_put_off;
    /* The memory of <timer> and <progress_timer>, event_get_struct_event_size()
     * bytes each, event_assign()ed: no event_new() and event_free() of them a
     * connection, and 16 bytes less each than their own allocations took
     * (malloc's chunk header and rounding). The progress timer's is there
     * whether or not a progress event is ever held back: a tunnel that
     * carried a TLS handshake has one (the client's Finished follows its
     * ClientHello within PROGRESS_MS); one that never carried a byte after
     * its ClientHello has none, and holds 112 bytes more than with both
     * timers allocated apart. */
    max_align_t ev_mem[];
};

/* conn.c */
/* The memory progress.c assigns <c>'s progress timer in (conn.ev_mem). */
struct event *conn_progress_mem(struct conn *c);
/* Takes ownership of <fd>, accepted by <l>. Closes it when out of memory. */
void conn_accept(struct gateway *gw, struct listener *l, evutil_socket_t fd,
                 const struct sockaddr *sa, socklen_t salen);
/* Frees <c>: cancels what is pending, publishes the end event of an
 * exchange that was decided, closes both sides. */
void conn_free(struct conn *c);
/* Frees <c>, cut by the gateway while it was going on (--grace ran out,
 * or a policy now denies its tunnel): a CONNECT past its 200 whose first
 * bytes are being checked (CS_PEEK, CS_HELLO, CS_FLUSH) closes both sides
 * with a reset, as an open tunnel does (tunnel_free()): its client got the
 * 200, perhaps the server's first bytes, and must not take a plain close
 * for the stream's end; also one whose client took nothing for
 * idle_timeout then (on_event), or failed then (a reset, a failed write:
 * on_event, connect.c), whose upstream must not take it for a clean end
 * either. Any other state: conn_free(). */
void conn_cut(struct conn *c);
/* True when <c> is between requests or lingering (may be closed at once on shutdown). */
bool conn_is_idle(const struct conn *c);
/* Closes <c>, idle (conn_is_idle()), for the gateway's stop: at once, or
 * once the answer it still holds for its client is written. The caller
 * must not touch <c> afterwards. */
void conn_stop_idle(struct conn *c);
/* Publishes the agent_egress event of the current exchange (once). */
void conn_publish_egress(struct conn *c);
/* Publishes agent_egress_end (once) and releases the exchange. */
void conn_end_exchange(struct conn *c);
/* Runs <go>(<c>) once the log holds the decision line just published for
 * <c>: at once when it does (or needs no waiting), else from
 * conn_log_written(), <c>'s upstream events (its tunnel, if open) off
 * meanwhile; a wait of idle_timeout is given up (<c> closed, <go> never
 * run), but for an open tunnel's (its cut). Returns true
 * when <go> waits (<c> untouched until it runs), false when it ran (<c>
 * may be freed). */
bool conn_after_log(struct conn *c, void (*go)(struct conn *c));
/* The log wrote what a waiting connection may wait for: releases those
 * whose lines are in (the log's on_written callback). */
void conn_log_written(struct gateway *gw);
/* Refuses the current exchange with <reason> (a response is written when
 * <respond>), publishes both events and closes once the response is out. */
void conn_refuse(struct conn *c, enum deny_reason reason, const char *detail, bool respond);
/* Writes the gateway's own answer to <c>'s request into <out>, with
 * "Connection: keep-alive" when <keep>, else "close". Returns 0, or -1
 * (out of memory: the connection then closes). */
typedef int own_answer_fn(struct conn *c, struct evbuffer *out, bool keep);
/* Answers the current exchange, allowed, with the gateway's own <status>
 * response that <write> writes, nothing going upstream: both events are
 * published (the answer held until agent_egress is in the log, as a
 * refusal is), and the connection goes on to its next request when a
 * refusal's would, else closes once the answer is out. */
void conn_answer_own(struct conn *c, int status, own_answer_fn *write);
/* Refuses the current exchange as gateway_overloaded: no socket could be
 * had for its upstream connection, socket() or connect() failing with <e>
 * (EMFILE, ENFILE: descriptors; ENOBUFS, ENOMEM: memory; EADDRNOTAVAIL,
 * EAGAIN: local ports). Says so on standard error, at most once a minute,
 * naming the open-file limit or net.ipv4.ip_local_port_range. */
void conn_refuse_short(struct conn *c, int e);
/* <c>'s request is to go to c->up_addr, guarded when the request was
 * decided or connected: on the connection it waited for its line on (kept
 * or fresh: forward_start()), or sent again on a fresh one (forward.c,
 * reconnect()). When a reload came since, the address is checked again
 * under the policy in force: refused, the request is denied as
 * private_address (a second agent_egress line, its first being out,
 * flagged as the policy's act), its upstream connection, if any, closed
 * (a kept one never used again), and answered 403; when the gateway cannot
 * tell (no socket to ask the kernel with), refused as gateway_overloaded.
 * Still allowed, the connection is left as it is. Returns true when
 * refused: <c> may be gone. */
bool conn_upstream_refused(struct conn *c);
/* The exchange finished cleanly: next request or close. */
void conn_exchange_done(struct conn *c);
/* A denial found by the gate (not the policy): refuses (returns true, <c>
 * may be gone), or for an agent in report mode records it and returns
 * false so the request goes on. */
bool conn_gate_denies(struct conn *c, enum deny_reason r, bool respond);
/* Decides the CONNECT of <c>, or its plain request whose body the
 * upstream has not all taken (the body is the write), again under the
 * policy in force (gw->current) at <now>, as it was first decided (agent,
 * method, target, port; the agent looked up by id, denied as
 * agent_not_allowed when gone): when it is now denied, publishes
 * agent_egress again with the denial and, once the log has that line
 * (conn_after_log(): nothing moves meanwhile), closes both sides of a
 * tunnel, or cuts a plain request (forward_cut_denied()); one not under way
 * yet (a CONNECT not answered, a plain request resolving or connecting,
 * its line not out) is refused instead; returns true: <c> may be gone.
 * When its agent is in report mode and the new decision reports it with a
 * reason its exchange does not carry yet, the exchange takes the new
 * decision, published at once as a second agent_egress (report) when its
 * first one is out, and <c> goes on; returns false. Anything else (a
 * plain request without a body or whose body went up, a tunnel still
 * allowed, one reported already with that reason) is left as it is;
 * returns false; but a tunnel or plain request kept goes on under the
 * policy in force, the one it was decided under let go (conn.c,
 * rebase_exchange()), and its upload is metered from then on by the
 * bandwidth of the rule the new decision names (quota_flow_set_rule());
 * and a plain request whose answer alone is left to come
 * (forward_answer_only()) lets go of that policy too, keeping what its
 * lines still say of its decision (conn.c, keep_decision()).
 * Not to be called from <c>'s own callbacks. */
bool conn_redecide(struct conn *c, time_t now);
/* A reload put another policy in force: a connection waiting for its next
 * request head (nothing of it decided) is held to that policy's
 * limits.idle_timeout from when its wait began (a new connection's
 * min(HEAD_DEADLINE_MS, idle_timeout) from its accept), not to the time it
 * was given under the policy before: a reload that shortens it closes
 * connections that have waited longer (at the head deadline's next run). */
void conn_head_wait_reloaded(struct conn *c);
uint64_t conn_idle_ms(const struct conn *c);
/* The largest request head <c> reads: its limits.header_bytes (32 KiB
 * when unset, 16 MiB at most). A head the gateway forwards is held to it
 * too (forward_prepare()). */
size_t conn_head_limit(const struct conn *c);
/* The client of <c> is no longer read while its exchange waits (it ended
 * its side, or bytes it sent wait in its input: a body or a CONNECT's
 * first bytes come early, a request pipelined behind a plain one): its
 * socket is looked at every HANGUP_CHECK_MS for a close (a unix client's,
 * which hangs it up) or a TCP client's reset, which nothing else would
 * tell before the answer (a CONNECT's 200) is written; one found ends or
 * shortens the exchange (conn.c, client_left()). So is a client whose
 * bytes wait for the bandwidth bucket (an upload's body, a tunnel's first
 * bytes: conn.c, ended_in_bucket_wait()), for a reset or an end that
 * leaves its body short. The look stops by itself once that no longer
 * holds. A look already due is not put off. */
void conn_watch_hangup(struct conn *c);
/* Arms the client's timeouts: reading (when <reading>) for idle_timeout;
 * writing for idle_timeout without progress: a client that keeps taking
 * bytes, however slowly, is kept (gate/drain.h). */
void conn_set_client_timeouts(struct conn *c, bool reading);
/* Arms c->timer for <tv>, a wait of its own: one that runs while what it
 * waits for lies unread in a socket (the gateway was stopped, by SIGSTOP,
 * in a paused VM or a long stall of its loop, and libevent ran the timer
 * before the read) is put off 1 ms, once, for that read (conn.c,
 * timer_before_read()). */
void conn_timer_add(struct conn *c, const struct timeval *tv);
/* Clears the client's timeouts while its exchange waits on the gateway's
 * side (resolving, connecting, a head waiting for its bandwidth bucket):
 * conn_set_client_timeouts() sets them again. */
void conn_untime_client(struct conn *c);

/* forward.c */
/* Starts forwarding the current request over the connected <c->up>; its
 * address is checked again first when a reload came since it was guarded
 * (conn_upstream_refused()). Its head waits first, in CS_CONNECT, while
 * the bandwidth bucket of its body is in debt (forward.c, head_waits()). */
void forward_start(struct conn *c);
/* Called once the current plain-HTTP request is decided and its addresses
 * guarded (ex->addrs holds those that may be connected to): when the idle
 * upstream connection of <c> goes to one of them on ex->port for the same
 * agent, takes it, publishes the egress event and starts forwarding
 * (returns true; <c> may be gone). Otherwise closes it and returns false. */
bool forward_try_reuse(struct conn *c);
/* Keeps <c->up> idle for the next request when HTTP allows it (called when
 * an exchange ends, before it is released). */
void forward_park(struct conn *c);
/* Stops counting c->up's output in the bytes waiting for upstreams
 * (gate/backlog.h): called before c->up is freed or kept idle. */
void forward_untrack_upload(struct conn *c);
/* Closes the idle upstream connection of <c>, if any. */
void forward_drop_idle(struct conn *c);
void forward_on_client_read(struct conn *c);
void forward_on_client_write(struct conn *c);
void forward_on_client_event(struct conn *c, short what);
/* The client's socket hung up after its request was read (ex->client_gone):
 * ends the exchange, without waiting for the answer, once the request is
 * all handed to the upstream's socket (at once, or from the upstream's
 * write callback, which this schedules). */
void forward_client_gone(struct conn *c);
/* The response head's deadline passed (c->timer while forwarding). */
void forward_on_head_deadline(struct conn *c);
/* Called as <c> is freed: when its client frames the response body by the
 * close (a body without length, or a chunked one it gets as its data
 * alone) and that body was cut before its end, makes the close a reset. */
void forward_on_free(struct conn *c);
/* True when <c> forwards a request with a body that its upstream has not
 * all taken (in the gateway's output, or unacknowledged in its socket's
 * send queue), and the answer is not complete. */
bool forward_uploading(const struct conn *c);
/* True when <c>'s plain request went up whole and will not go up again
 * (no retry on a fresh connection is left to it): all that is left of its
 * exchange is its answer coming back. */
bool forward_answer_only(const struct conn *c);
/* The request of <c>, decided again and denied (conn_redecide()), waits
 * for its denial's line: nothing more of its body is read or sent, nothing
 * of its answer read; <c> waits in CS_CONNECT, as a request waits for its
 * first line. */
void forward_hold(struct conn *c);
/* Cuts the held request of <c> (forward_hold()), its denial in the log:
 * what its upstream did not take is dropped with a reset and the
 * connection closed (its origin has part of a body: never used again);
 * the client gets the refusal (ex->reason) when no response head reached
 * it, else the close; then agent_egress_end. <c> may be gone. */
void forward_cut_denied(struct conn *c);
/* Parses and checks the plain-HTTP parts of the request head (called from
 * conn.c while the head is still in the input buffer): writes the upstream
 * head into ex->uphead. Returns 0, or a deny reason. */
enum deny_reason forward_prepare(struct conn *c, const struct http_request *req, const char **why);

/* connect.c */
/* Called once the upstream of a CONNECT is up: sends 200 and peeks. */
void connect_start(struct conn *c);
void connect_on_client_read(struct conn *c);
void connect_on_client_write(struct conn *c);
/* c->timer in CS_HELLO with c->hello_cut: resets both sides once the
 * client has the server's bytes (or at c->hello_cut_at), else looks again. */
void connect_hello_cut(struct conn *c);
/* Counts in bytes_up the peeked bytes the upstream's socket took and that
 * were not counted yet (before a refusal or conn_free(); no progress event:
 * the decision comes first). */
void connect_settle(struct conn *c);

#endif
