/* Unit tests for watch/sink_webhook.c: what the sink takes from a webhook
 * URL (host, port, request target, Host header; util/weburl.c parses it
 * and is tested in test_weburl.c), and the deadline of each attempt
 * against a loopback server in the test's own loop, with the deadline cut
 * to 100 ms. Includes the .c to reach parse_url() and the sink's state. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <malloc.h>
#include <stdlib.h>
#include <cmocka.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/http.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "state/store.h"
#include "state/store_writer.h" /* struct store_read: the bytes a read holds */

/* The queue rows the sink reads from the store, counted on their way to
 * its callback: the sink's calls are routed here by the macro below. And
 * the most bytes of bodies a read of the store held (read_bytes_most),
 * looked at in the first row's call, when the read is the loop's again. */
static long rows_read;
static store_queue_fn counted_fn;
static const struct store_read *taking;
static size_t read_bytes_most;

static void count_row(int64_t id, const char *sink, const char *body, int attempts, void *arg)
{
    rows_read++;
    if (taking != NULL) {
        size_t held = 0;
        for (size_t i = 0; i < taking->nrows; i++)
            held += strlen(taking->rows[i].body);
        if (held > read_bytes_most)
            read_bytes_most = held;
        taking = NULL;
    }
    counted_fn(id, sink, body, attempts, arg);
}

static int counted_read_take(struct store *s, struct store_read *r, store_queue_fn fn, void *arg,
                             struct store_read_got *got)
{
    counted_fn = fn;
    taking = r;
    int rc = store_queue_read_take(s, r, count_row, arg, got);
    taking = NULL;
    return rc;
}

/* libevent's own allocations go through these (event_set_mem_functions(),
 * first thing in main): with mem_fail_in at N > 0, the Nth from then on
 * fails, once, and sets mem_failed. mem_live counts the blocks libevent
 * holds (a test that frees all it made must find it as it was). */
static long mem_fail_in;
static bool mem_failed;
static long mem_live;

static bool mem_fails_now(void)
{
    if (mem_fail_in <= 0 || --mem_fail_in > 0)
        return false;
    mem_failed = true;
    return true;
}

static void *mem_malloc(size_t n)
{
    void *p = mem_fails_now() ? NULL : malloc(n);
    mem_live += p != NULL;
    return p;
}

static void *mem_realloc(void *p, size_t n)
{
    void *q = mem_fails_now() ? NULL : realloc(p, n);
    mem_live += p == NULL && q != NULL;
    return q;
}

/* A freed block is filled with garbage first: libevent is not built with
 * the sanitizers, and a read of a block it freed would otherwise find the
 * old contents and go on as if nothing were wrong. */
static void mem_free(void *p)
{
    mem_live -= p != NULL;
    if (p != NULL)
        memset(p, 0xa5, malloc_usable_size(p));
    free(p);
}

/* evhttp_make_request() as the sink calls it: counts the requests handed
 * to evhttp after an allocation failed while they were made (a header or
 * the body missing). */
static unsigned handed_incomplete;

static int counted_make_request(struct evhttp_connection *c, struct evhttp_request *req,
                                enum evhttp_cmd_type type, const char *uri)
{
    if (mem_failed)
        handed_incomplete++;
    return evhttp_make_request(c, req, type, uri);
}

#define store_queue_read_take counted_read_take
#define evhttp_make_request   counted_make_request
#include "../../src/watch/sink_webhook.c"
#undef evhttp_make_request
#undef store_queue_read_take

#include <event2/listener.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "blocked_in.h"

struct parsed {
    int rc;
    bool https;
    const char *why;
    struct webhook w;
};

static struct parsed parse(const char *url)
{
    struct parsed p;
    memset(&p, 0, sizeof(p));
    p.rc = parse_url(&p.w, url, &p.https, &p.why);
    return p;
}

static void parsed_free(struct parsed *p)
{
    free(p->w.host);
    free(p->w.path);
    free(p->w.hosthdr);
}

static void urls_http_and_https(void **state)
{
    (void)state;
    struct parsed p = parse("https://hooks.example.test/services/T0/B0/xyz");
    assert_int_equal(p.rc, 0);
    assert_true(p.https);
    assert_string_equal(p.w.host, "hooks.example.test");
    assert_int_equal(p.w.port, 443);
    assert_string_equal(p.w.path, "/services/T0/B0/xyz");
    assert_string_equal(p.w.hosthdr, "hooks.example.test");
    parsed_free(&p);

    p = parse("http://127.0.0.1:9000/hook");
    assert_int_equal(p.rc, 0);
    assert_false(p.https);
    assert_int_equal(p.w.port, 9000);
    assert_string_equal(p.w.hosthdr, "127.0.0.1:9000");
    parsed_free(&p);

    p = parse("https://[::1]:8443");
    assert_int_equal(p.rc, 0);
    assert_true(p.https);
    assert_string_equal(p.w.host, "::1");
    assert_int_equal(p.w.port, 8443);
    assert_string_equal(p.w.path, "/");
    parsed_free(&p);

    p = parse("http://example.test");
    assert_int_equal(p.w.port, 80);
    parsed_free(&p);
}

static void request_target(void **state)
{
    (void)state;
    /* the path and query are sent; a fragment never is; no path is "/" */
    static const struct {
        const char *url, *path;
    } cases[] = {
        {"https://example.test?token=abc", "/?token=abc"},
        {"https://example.test/hook?token=abc#frag", "/hook?token=abc"},
        {"https://example.test#frag", "/"},
        {"http://[::1]:9000/a/b/", "/a/b/"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct parsed p = parse(cases[i].url);
        assert_int_equal(p.rc, 0);
        assert_string_equal(p.w.path, cases[i].path);
        parsed_free(&p);
    }
}

static void urls_refused(void **state)
{
    (void)state;
    struct parsed p = parse("https://user:secret@example.test/");
    assert_int_equal(p.rc, -1);
    assert_string_equal(p.why, WEBURL_NO_USERINFO);
    assert_null(p.w.host); /* nothing allocated */
    parsed_free(&p);
}

/* ---- the attempt deadline, against a server in the test's own loop ---- */

/* An HTTP server on 127.0.0.1 that answers each request with 200 after
 * delays_ms[i] (cycling); with stall_ms it then blocks the loop that long,
 * so that the answer and the sink's deadline are both due when the loop
 * next looks. */
struct srv {
    struct evconnlistener *l;
    uint16_t port;
    const unsigned *delays_ms;
    size_t ndelays, next;
    unsigned stall_ms;
    unsigned requests, connections;
    struct sconn *open[64]; /* connections still open, freed by srv_stop */
    long got[64];           /* N of each body {"n":N} answered, in order */
    size_t ngot;
};

struct sconn {
    struct srv *s;
    struct bufferevent *bev;
    struct event *later; /* the delayed answer */
    bool waiting;
};

static void sconn_free(struct sconn *c)
{
    for (size_t i = 0; i < sizeof(c->s->open) / sizeof(c->s->open[0]); i++)
        if (c->s->open[i] == c)
            c->s->open[i] = NULL;
    event_free(c->later);
    bufferevent_free(c->bev);
    free(c);
}

static void s_read(struct bufferevent *bev, void *arg);

static void s_answer(evutil_socket_t fd, short what, void *arg)
{
    struct sconn *c = arg;
    static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    (void)fd;
    (void)what;
    c->waiting = false;
    if (c->s->stall_ms > 0) {
        /* in the client's socket now, not when the loop next writes */
        assert_int_equal(send(bufferevent_getfd(c->bev), ok, sizeof(ok) - 1, MSG_NOSIGNAL),
                         (ssize_t)(sizeof(ok) - 1));
        struct timespec ts = {0, (long)c->s->stall_ms * 1000000L};
        nanosleep(&ts, NULL);
    } else {
        bufferevent_write(c->bev, ok, sizeof(ok) - 1);
    }
    s_read(c->bev, c); /* a request already waiting */
}

/* Takes one whole request (head and Content-Length body) from the input. */
static void s_read(struct bufferevent *bev, void *arg)
{
    struct sconn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (c->waiting)
        return;
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    if (end.pos < 0)
        return;
    size_t head = (size_t)end.pos + 4, body = 0;
    char *h = strndup((const char *)evbuffer_pullup(in, (ev_ssize_t)head), head);
    assert_non_null(h);
    const char *cl = strcasestr(h, "\r\nContent-Length:");
    if (cl != NULL)
        body = strtoul(cl + strlen("\r\nContent-Length:"), NULL, 10);
    free(h);
    if (evbuffer_get_length(in) < head + body)
        return;
    char *b = strndup((const char *)evbuffer_pullup(in, (ev_ssize_t)(head + body)) + head, body);
    assert_non_null(b);
    if (strncmp(b, "{\"n\":", 5) == 0 && c->s->ngot < sizeof(c->s->got) / sizeof(c->s->got[0]))
        c->s->got[c->s->ngot++] = strtol(b + 5, NULL, 10);
    free(b);
    evbuffer_drain(in, head + body);
    c->s->requests++;
    unsigned ms = c->s->delays_ms[c->s->next++ % c->s->ndelays];
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    c->waiting = true;
    evtimer_add(c->later, &tv);
}

static void s_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        sconn_free(arg); /* the sink closed it: a cut attempt, or the end */
}

static void s_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                     void *arg)
{
    struct srv *s = arg;
    struct sconn *c = calloc(1, sizeof(*c));
    (void)sa;
    (void)salen;
    assert_non_null(c);
    c->s = s;
    c->bev = bufferevent_socket_new(evconnlistener_get_base(l), fd, BEV_OPT_CLOSE_ON_FREE);
    c->later = evtimer_new(evconnlistener_get_base(l), s_answer, c);
    assert_non_null(c->bev);
    assert_non_null(c->later);
    bufferevent_setcb(c->bev, s_read, NULL, s_event, c);
    bufferevent_enable(c->bev, EV_READ);
    size_t i = 0;
    while (i < sizeof(s->open) / sizeof(s->open[0]) && s->open[i] != NULL)
        i++;
    assert_true(i < sizeof(s->open) / sizeof(s->open[0]));
    s->open[i] = c;
    s->connections++;
}

static void srv_stop(struct srv *s)
{
    for (size_t i = 0; i < sizeof(s->open) / sizeof(s->open[0]); i++)
        if (s->open[i] != NULL)
            sconn_free(s->open[i]);
    evconnlistener_free(s->l);
}

static void srv_start(struct srv *s, struct event_base *base)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = 0};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->l = evconnlistener_new_bind(base, s_accept, s, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 16,
                                   (struct sockaddr *)&sin, sizeof(sin));
    assert_non_null(s->l);
    socklen_t n = sizeof(sin);
    assert_int_equal(getsockname(evconnlistener_get_fd(s->l), (struct sockaddr *)&sin, &n), 0);
    s->port = ntohs(sin.sin_port);
}

/* A sink to <s> whose attempts end after 100 ms, retried after 10 ms. */
static struct webhook *sink_to(struct event_base *base, const struct srv *s)
{
    char url[64], *err = NULL;
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/hook", (unsigned)s->port);
    struct webhook *w = webhook_new(base, url, NULL, NULL, &err);
    assert_null(err);
    assert_non_null(w);
    w->t.attempt_ms = 100;
    w->t.backoff_ms = 10;
    w->t.backoff_max_ms = 10;
    return w;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* Runs <base> until <w> delivered <n> alerts or <limit_ms> went by. */
static void run_until_delivered(struct event_base *base, struct webhook *w, uint64_t n,
                                uint64_t limit_ms)
{
    struct event *tick = event_new(base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval tv = {0, 10000};
    event_add(tick, &tv);
    uint64_t until = mono_ms() + limit_ms;
    while (webhook_delivered(w) < n && mono_ms() < until)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(tick);
}

static void send_alerts(struct webhook *w, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        char body[64];
        int len = snprintf(body, sizeof(body), "{\"n\":%u}", i);
        webhook_send(w, body, (size_t)len);
    }
}

/* A slow answer is cut at the deadline and the alert is retried. */
static void deadline_cuts_a_slow_answer(void **state)
{
    (void)state;
    static const unsigned delays[] = {400, 0};
    struct event_base *base = event_base_new();
    struct srv s = {.delays_ms = delays, .ndelays = 2};
    srv_start(&s, base);
    struct webhook *w = sink_to(base, &s);
    send_alerts(w, 1);
    run_until_delivered(base, w, 1, 10000);
    assert_int_equal(webhook_delivered(w), 1);
    assert_int_equal(webhook_failures(w), 1);
    assert_int_equal(s.requests, 2);
    assert_int_equal(s.connections, 2); /* the cut closed the first one */
    assert_null(w->req);
    assert_false(evtimer_pending(w->deadline, NULL));
    webhook_free(w);
    srv_stop(&s);
    event_base_free(base);
}

/* Answers around the deadline, either side of it: each attempt ends once,
 * delivered or cut (ASan checks that no request is touched after evhttp
 * freed it); every alert gets through. */
static void deadline_races_the_answer(void **state)
{
    (void)state;
    static const unsigned delays[] = {0, 80, 90, 95, 97, 98, 99, 100, 101, 102, 103, 105, 110, 150};
    struct event_base *base = event_base_new();
    struct srv s = {.delays_ms = delays, .ndelays = sizeof(delays) / sizeof(delays[0])};
    srv_start(&s, base);
    struct webhook *w = sink_to(base, &s);
    send_alerts(w, 12);
    run_until_delivered(base, w, 12, 20000);
    assert_int_equal(webhook_delivered(w), 12);
    assert_true(webhook_failures(w) > 0); /* those of 100 ms and more were cut */
    assert_int_equal(webhook_delivered(w) + webhook_failures(w), s.requests);
    assert_int_equal(webhook_queued(w), 0);
    webhook_free(w);
    srv_stop(&s);
    event_base_free(base);
}

/* The answer arrives and the deadline falls due before the loop looks
 * again: the answer ends the attempt once, the due deadline is dropped. */
static void deadline_due_with_the_answer(void **state)
{
    (void)state;
    static const unsigned delays[] = {40};
    struct event_base *base = event_base_new();
    struct srv s = {.delays_ms = delays, .ndelays = 1, .stall_ms = 150};
    srv_start(&s, base);
    struct webhook *w = sink_to(base, &s);
    send_alerts(w, 3);
    run_until_delivered(base, w, 3, 10000);
    assert_int_equal(webhook_delivered(w), 3);
    assert_int_equal(webhook_delivered(w) + webhook_failures(w), s.requests);
    assert_null(w->req);
    webhook_free(w);
    srv_stop(&s);
    event_base_free(base);
}

/* A sink of <s> (started on <base>) given <n> alerts, once its first
 * request reached <s>: in flight. */
static struct webhook *sink_in_flight(struct event_base *base, struct srv *s, unsigned n)
{
    srv_start(s, base);
    struct webhook *w = sink_to(base, s);
    send_alerts(w, n);
    uint64_t until = mono_ms() + 5000;
    while (s->requests == 0 && mono_ms() < until)
        event_base_loop(base, EVLOOP_ONCE);
    assert_int_equal(s->requests, 1);
    assert_non_null(w->req);
    return w;
}

/* A sink freed with a request in flight and its deadline armed: nothing of
 * it runs afterwards. */
static void free_with_a_request_in_flight(void **state)
{
    (void)state;
    static const unsigned delays[] = {1000};
    struct event_base *base = event_base_new();
    struct srv s = {.delays_ms = delays, .ndelays = 1};
    struct webhook *w = sink_in_flight(base, &s, 1);
    assert_true(evtimer_pending(w->deadline, NULL));
    webhook_free(w);
    struct timeval tv = {0, 300000}; /* past the deadline the sink had */
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
    srv_stop(&s);
    event_base_free(base);
}

/* What a retired sink's <over> saw of it, before freeing it. */
struct retired_seen {
    unsigned calls;
    uint64_t delivered;
};

static void free_retired(struct webhook *w, void *arg)
{
    struct retired_seen *seen = arg;
    seen->calls++;
    seen->delivered = webhook_delivered(w);
    webhook_free(w);
}

/* A sink a reload took out of the policy with a request in flight and a
 * long queue behind it: memory lets go of the queue at once, the request
 * is answered and counted, nothing else is sent, and <over> frees it. */
static void a_retired_sink_ends_its_flight_and_holds_nothing_else(void **state)
{
    (void)state;
    static const unsigned delays[] = {50};
    struct event_base *base = event_base_new();
    struct srv s = {.delays_ms = delays, .ndelays = 1};
    struct webhook *w = sink_in_flight(base, &s, 1000);
    assert_true(webhook_in_flight(w));
    struct retired_seen seen = {0, 0};
    webhook_retire(w, free_retired, &seen);
    assert_int_equal(webhook_queued(w), 1);
    assert_int_equal(w->bytes, strlen("{\"n\":0}"));
    uint64_t until = mono_ms() + 5000;
    while (seen.calls == 0 && mono_ms() < until)
        event_base_loop(base, EVLOOP_ONCE);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.delivered, 1);
    struct timeval tv = {0, 100000}; /* room for a request it should not make */
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
    assert_int_equal(s.requests, 1);
    assert_int_equal(s.ngot, 1);
    assert_int_equal(s.got[0], 0);
    srv_stop(&s);
    event_base_free(base);
}

/* A state store in a new temporary directory <dir> ("/tmp/sluice-hook-XXXXXX",
 * filled in); temp_store_remove() closes it and removes the directory. */
static struct store *temp_store(char *dir)
{
    char *err = NULL, *warn = NULL;
    assert_non_null(mkdtemp(dir));
    struct store *st = store_open(dir, &err, &warn);
    assert_non_null(st);
    return st;
}

static void temp_store_remove(struct store *st, const char *dir)
{
    char cmd[64];
    store_close(st);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Runs <w>'s loop until the store's thread has run its read of the queue
 * and the sink has taken it (a hang guard of 120 s: the read waits for
 * the commit before it, 20,000 rows, which a ThreadSanitizer build makes
 * over 10 s). */
static void read_taken(struct webhook *w)
{
    uint64_t until = mono_ms() + 120000;
    while (w->reading != NULL && mono_ms() < until)
        event_base_loop(w->base, EVLOOP_ONCE);
    assert_null(w->reading);
}

/* on_sweep(), and the read it starts taken. */
static void sweep_now(struct webhook *w)
{
    on_sweep(-1, 0, w);
    read_taken(w);
}

/* webhook_adopt_stored(), and the read it starts taken. */
static void adopt_now(struct webhook *w)
{
    webhook_adopt_stored(w);
    read_taken(w);
}

/* The key the store files <url>'s alerts under (its first listing's):
 * weburl_store_key(), in one of 4 buffers used in turn. */
static const char *skey(const char *url)
{
    static char keys[4][128];
    static unsigned turn;
    char *k = weburl_store_key(url, 1);
    assert_non_null(k);
    char *out = keys[turn++ % 4];
    snprintf(out, sizeof(keys[0]), "%s", k);
    free(k);
    return out;
}

/* Stores 20,000 alerts, every other one for <url> (the first row when
 * <url_first>, else the second) and the rest for another sink, and commits
 * them. Returns the id of <url>'s first row. */
static int64_t queue_interleaved(struct store *st, const char *url, bool url_first)
{
    int64_t first = 0;
    for (int i = 0; i < 20000; i++) {
        bool mine = (i % 2 == 0) == url_first;
        int64_t id = store_queue_add(st, skey(mine ? url : "http://127.0.0.1:9/other"), "{}");
        if (mine && first == 0)
            first = id;
    }
    assert_int_equal(store_flush(st), 0);
    return first;
}

/* An alert the sink holds whose row the state store dropped (over
 * STORE_PENDING_MAX writes waiting, a store locked for long) is kept in
 * memory only: a stop must wait for it, or name it as lost, as for one
 * without a store. Nothing is flushed here, so the writes just wait. */
static void alert_whose_stored_row_was_dropped_is_unstored(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-hook-XXXXXX", *err = NULL;
    struct store *st = temp_store(dir);
    struct event_base *base = event_base_new();
    struct webhook *w = webhook_new(base, "http://127.0.0.1:9/hook", st, NULL, &err);
    assert_non_null(w);
    webhook_send(w, "{\"a\":1}", 7);
    assert_int_equal(webhook_queued(w), 1);
    assert_int_equal(webhook_unstored(w, false), 0); /* its row waits in the store */
    char host[32];
    for (int i = 0; i < STORE_PENDING_MAX; i++) {
        snprintf(host, sizeof(host), "h%d.test", i);
        store_put_contact(st, "a", host, 1);
    }
    assert_int_equal(store_dropped(st), STORE_PENDING_MAX / 10);
    assert_int_equal(webhook_unstored(w, false), 1); /* the row was among the oldest */
    webhook_send(w, "{\"a\":2}", 7);
    assert_int_equal(webhook_unstored(w, false), 1); /* a later one's row is kept */
    webhook_free(w);
    temp_store_remove(st, dir);
    event_base_free(base);
}

/* The sweep brings back the oldest alerts kept only in the store, as many
 * as there is room for in memory, and reads no more of the queue than
 * that: 20,000 rows (half another sink's) against room for 8 read at most
 * 8 + the 2 in memory + 1. It used to read the whole queue, on the loop,
 * every minute: 250 ms with 500,000 rows. */
static void sweep_reads_only_what_it_has_room_for(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-hook-XXXXXX", *err = NULL;
    const char *url = "http://127.0.0.1:9/hook";
    struct store *st = temp_store(dir);
    int64_t first = queue_interleaved(st, url, true);
    struct event_base *base = event_base_new();
    struct webhook *w = webhook_new(base, url, st, NULL, &err);
    assert_non_null(w);
    w->t.queue_max = 10;
    enqueue(w, first + 2, "{}", 2, 0); /* in memory already: not taken twice */
    enqueue(w, first + 6, "{}", 2, 0);
    w->only_stored = 9998;
    rows_read = 0;
    sweep_now(w);
    assert_true(rows_read <= 8 + 2 + 1);
    assert_int_equal(webhook_queued(w), 10);
    int64_t want[] = {2, 6, 0, 4, 8, 10, 12, 14, 16, 18};
    for (size_t i = 0; i < 10; i++)
        assert_int_equal(w->q[(w->head + i) % w->cap].id, first + want[i]);
    assert_true(w->only_stored > 0); /* more wait: the next sweep comes back */
    rows_read = 0;
    sweep_now(w); /* no room: nothing read */
    assert_int_equal(rows_read, 0);
    /* room for all that is left: taken, and nothing more to sweep */
    webhook_free(w);
    w = webhook_new(base, "http://127.0.0.1:9/few", st, NULL, &err);
    assert_non_null(w);
    for (int i = 0; i < 3; i++)
        store_queue_add(st, skey("http://127.0.0.1:9/few"), "{}");
    assert_int_equal(store_flush(st), 0);
    w->t.queue_max = 10;
    w->only_stored = 3;
    rows_read = 0;
    sweep_now(w);
    assert_int_equal(rows_read, 3);
    assert_int_equal(webhook_queued(w), 3);
    assert_int_equal(w->only_stored, 0);
    webhook_free(w);
    temp_store_remove(st, dir);
    event_base_free(base);
}

/* Runs <base> until *<count> reached <n> or <limit_ms> went by. */
static void run_until_count(struct event_base *base, const size_t *count, size_t n,
                            uint64_t limit_ms)
{
    struct event *tick = event_new(base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval tv = {0, 10000};
    event_add(tick, &tv);
    uint64_t until = mono_ms() + limit_ms;
    while (*count < n && mono_ms() < until)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(tick);
}

/* Runs <base> until <s> answered <n> bodies or <limit_ms> went by. */
static void run_until_answered(struct event_base *base, const struct srv *s, size_t n,
                               uint64_t limit_ms)
{
    run_until_count(base, &s->ngot, n, limit_ms);
}

/* A new sink takes its oldest stored alerts, as many as its memory holds,
 * and reads no more of the queue than that: 20,000 rows (half another
 * sink's) against a memory cap of 10 read 11 at most, the last over the
 * cap telling the sweep that more wait. The start and each reload that
 * added a sink used to read the whole queue, every sink's rows and bodies,
 * on the loop. */
static void adopting_reads_only_what_memory_holds(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-hook-XXXXXX", *err = NULL;
    const char *url = "http://127.0.0.1:9/hook";
    struct store *st = temp_store(dir);
    int64_t first = queue_interleaved(st, url, false);
    struct event_base *base = event_base_new();
    struct webhook *w = webhook_new(base, url, st, NULL, &err);
    assert_non_null(w);
    w->t.queue_max = 10;
    rows_read = 0;
    adopt_now(w);
    assert_true(rows_read <= 11);
    assert_int_equal(webhook_queued(w), 10);
    for (size_t i = 0; i < 10; i++) /* the sink's oldest, in order */
        assert_int_equal(w->q[(w->head + i) % w->cap].id, first + 2 * (int64_t)i);
    assert_true(w->only_stored > 0); /* the sweep brings the others */
    webhook_free(w);
    /* a sink with nothing stored reads nothing and does not sweep */
    w = webhook_new(base, "http://127.0.0.1:9/none", st, NULL, &err);
    assert_non_null(w);
    rows_read = 0;
    adopt_now(w);
    assert_int_equal(rows_read, 0);
    assert_int_equal(webhook_queued(w), 0);
    assert_int_equal(w->only_stored, 0);
    webhook_free(w);
    temp_store_remove(st, dir);
    event_base_free(base);
}

/* Delivers the <n> oldest alerts in memory, as a 2xx answer would: their
 * rows deleted, memory freed for the sweep. */
static void deliver_oldest(struct webhook *w, int n)
{
    for (int i = 0; i < n && w->len > 0; i++) {
        store_queue_del(w->store, w->key, w->q[w->head].id);
        pop(w);
    }
}

/* The bytes of alert bodies <w>'s memory queue holds. */
static size_t held_bytes(const struct webhook *w)
{
    size_t n = 0;
    for (size_t i = 0; i < w->len; i++)
        n += w->q[(w->head + i) % w->cap].n;
    return n;
}

/* Sends <n> alerts of 8000 bytes (the most an alert line takes, about),
 * numbered from 0 in their first bytes. */
static void send_big_alerts(struct webhook *w, unsigned n)
{
    static char body[8000];
    memset(body, 'x', sizeof(body));
    for (unsigned i = 0; i < n; i++) {
        int len = snprintf(body, sizeof(body), "{\"n\":%u,\"pad\":\"", i);
        body[len] = 'x';
        memcpy(body + sizeof(body) - 2, "\"}", 2);
        webhook_send(w, body, sizeof(body));
    }
}

/* Which alert of send_big_alerts() <it> is. */
static long big_alert_n(const struct item *it)
{
    return strtol(it->body + 5, NULL, 10);
}

/* The memory queue holds at most SINK_WEBHOOK_QUEUE_BYTES of alerts, not
 * only SINK_WEBHOOK_QUEUE_MAX of them. Without a store, past it the oldest
 * not in flight are dropped and counted, as over the count: 10,000 alerts
 * of 8000 bytes to a sink that cannot deliver held 80 MB. With one, those
 * over it are kept in the store only, none dropped, and come back with the
 * sweep in order: 3000 alerts of 8000 bytes (24 MB) all stayed in memory. */
static void memory_queue_holds_at_most_its_bytes(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-hook-XXXXXX", *err = NULL;
    const char *url = "http://127.0.0.1:9/hook";
    size_t fit = SINK_WEBHOOK_QUEUE_BYTES / 8000;
    struct event_base *base = event_base_new();
    struct webhook *w = webhook_new(base, url, NULL, NULL, &err);
    assert_non_null(w);
    send_big_alerts(w, SINK_WEBHOOK_QUEUE_MAX);
    assert_true(held_bytes(w) <= SINK_WEBHOOK_QUEUE_BYTES);
    assert_int_equal(webhook_queued(w), fit);
    assert_int_equal(webhook_dropped(w), SINK_WEBHOOK_QUEUE_MAX - fit);
    /* the newest are kept (and the oldest, if in flight: not dropped) */
    assert_int_equal(big_alert_n(&w->q[(w->head + w->len - 1) % w->cap]),
                     SINK_WEBHOOK_QUEUE_MAX - 1);
    assert_int_equal(big_alert_n(&w->q[(w->head + 1) % w->cap]),
                     SINK_WEBHOOK_QUEUE_MAX - (long)fit + 1);
    webhook_free(w);

    struct store *st = temp_store(dir);
    w = webhook_new(base, url, st, NULL, &err);
    assert_non_null(w);
    send_big_alerts(w, 3000);
    assert_true(held_bytes(w) <= SINK_WEBHOOK_QUEUE_BYTES);
    assert_int_equal(webhook_queued(w), fit);
    assert_int_equal(webhook_waiting(w), 3000);
    assert_int_equal(webhook_dropped(w), 0);
    assert_int_equal(store_flush(st), 0);
    deliver_oldest(w, (int)fit);
    sweep_now(w);
    assert_int_equal(webhook_queued(w), 3000 - fit);
    assert_int_equal(webhook_waiting(w), 3000 - fit);
    for (size_t i = 0; i < w->len; i++)
        assert_int_equal(big_alert_n(&w->q[(w->head + i) % w->cap]), (long)(fit + i));
    webhook_free(w);
    temp_store_remove(st, dir);
    event_base_free(base);
}

/* An alert left in the store over the bytes cap is not overtaken by a
 * later, shorter one that would fit: a new sink and the sweep both stop at
 * the first they leave, so the sink still gets its alerts in order. Room
 * for 100 bytes, stored alerts of 60, 60 and 20: only the first is taken,
 * until it is delivered. */
static void a_shorter_alert_does_not_overtake_one_over_the_bytes_cap(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-hook-XXXXXX", *err = NULL, big[61];
    const char *url = "http://127.0.0.1:9/hook";
    struct store *st = temp_store(dir);
    struct event_base *base = event_base_new();
    struct webhook *w = webhook_new(base, url, st, NULL, &err);
    assert_non_null(w);
    w->t.queue_bytes = 100;
    memset(big, 'x', 60);
    big[60] = '\0';
    int64_t first = store_queue_add(st, skey(url), big);
    assert_true(store_queue_add(st, skey(url), big) > 0);
    assert_true(store_queue_add(st, skey(url), "xxxxxxxxxxxxxxxxxxxx") > 0);
    assert_int_equal(store_flush(st), 0);
    adopt_now(w);
    assert_int_equal(webhook_queued(w), 1);
    assert_int_equal(w->q[w->head].id, first);
    assert_int_equal(webhook_waiting(w), 3);
    sweep_now(w);
    assert_int_equal(webhook_queued(w), 1);
    deliver_oldest(w, 1);
    sweep_now(w);
    assert_int_equal(webhook_queued(w), 2);
    assert_int_equal(w->q[w->head].id, first + 1);
    assert_int_equal(w->q[(w->head + 1) % w->cap].id, first + 2);
    webhook_free(w);
    temp_store_remove(st, dir);
    event_base_free(base);
}

/* Stores <n> alerts of 8000 bytes for <url>, as send_big_alerts() makes
 * them (numbered from 0), without a sink, and commits them. */
static void store_big_alerts(struct store *st, const char *url, unsigned n)
{
    static char body[8001];
    memset(body, 'x', sizeof(body) - 1);
    for (unsigned i = 0; i < n; i++) {
        int len = snprintf(body, sizeof(body), "{\"n\":%u,\"pad\":\"", i);
        body[len] = 'x';
        memcpy(body + sizeof(body) - 3, "\"}", 3);
        assert_true(store_queue_add(st, skey(url), body) > 0);
    }
    assert_int_equal(store_flush(st), 0);
}

/* A read back from the store (a new sink's adoption, the sweep) holds no
 * more bytes than the memory queue has left (and, for the sweep, those of
 * the alerts in memory it reads again): it was sized by the count alone,
 * room for 10,000 alerts, so 5000 stored alerts of 8000 bytes were all
 * read, 40 MB, to take the 16 MiB's worth the memory had room for. Read
 * back by the bytes, all come, in order, none lost. */
static void a_read_back_holds_at_most_the_bytes_left(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-hook-XXXXXX", *err = NULL;
    const char *url = "http://127.0.0.1:9/hook";
    const unsigned total = 5000;
    size_t fit = SINK_WEBHOOK_QUEUE_BYTES / 8000;
    struct store *st = temp_store(dir);
    store_big_alerts(st, url, total);
    struct event_base *base = event_base_new();
    struct webhook *w = webhook_new(base, url, st, NULL, &err);
    assert_non_null(w);
    read_bytes_most = 0;
    adopt_now(w);
    assert_true(read_bytes_most <= SINK_WEBHOOK_QUEUE_BYTES);
    assert_int_equal(webhook_queued(w), fit);
    assert_true(held_bytes(w) <= SINK_WEBHOOK_QUEUE_BYTES);
    assert_int_equal(webhook_waiting(w), total);
    /* Half delivered: the sweep reads the other half again, and what fits. */
    long next = 0;
    for (size_t i = 0; i < fit / 2; i++, next++) {
        assert_int_equal(big_alert_n(&w->q[w->head]), next);
        deliver_oldest(w, 1);
    }
    read_bytes_most = 0;
    sweep_now(w);
    assert_true(read_bytes_most <= SINK_WEBHOOK_QUEUE_BYTES);
    assert_int_equal(webhook_queued(w), fit);
    assert_true(held_bytes(w) <= SINK_WEBHOOK_QUEUE_BYTES);
    /* Then all of them, each sweep after a memory's worth delivered. */
    for (int round = 0; round < 10 && webhook_waiting(w) > 0; round++) {
        while (w->len > 0) {
            assert_int_equal(big_alert_n(&w->q[w->head]), next);
            deliver_oldest(w, 1);
            next++;
        }
        assert_int_equal(store_flush(st), 0);
        read_bytes_most = 0;
        sweep_now(w);
        assert_true(read_bytes_most <= SINK_WEBHOOK_QUEUE_BYTES);
        assert_true(held_bytes(w) <= SINK_WEBHOOK_QUEUE_BYTES);
    }
    assert_int_equal(next, total); /* every one, in order */
    assert_int_equal(webhook_waiting(w), 0);
    assert_int_equal(w->only_stored, 0);
    webhook_free(w);
    temp_store_remove(st, dir);
    event_base_free(base);
}

/* sluice_webhook_queue{sink} counts every alert waiting for the sink, the
 * ones kept in the store only (beyond the memory cap) too: it showed the
 * memory queue alone, at most its cap (10,000), while hundreds of
 * thousands could wait in the store, so a backlog looked flat until its
 * last 10,000. 25 stored for the sink (and 25 for another), a memory cap
 * of 10, three more sent: 28 wait, then fewer as they go, 0 at the end. */
static void every_waiting_alert_is_counted(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-hook-XXXXXX", *err = NULL;
    const char *url = "http://127.0.0.1:9/hook";
    struct store *st = temp_store(dir);
    for (int i = 0; i < 25; i++) {
        assert_true(store_queue_add(st, skey(url), "{}") > 0);
        assert_true(store_queue_add(st, skey("http://127.0.0.1:9/other"), "{}") > 0);
    }
    assert_int_equal(store_flush(st), 0);
    struct event_base *base = event_base_new();
    struct webhook *w = webhook_new(base, url, st, NULL, &err);
    assert_non_null(w);
    w->t.queue_max = 10;
    adopt_now(w);
    assert_int_equal(webhook_queued(w), 10);
    assert_int_equal(webhook_waiting(w), 25);
    for (int i = 0; i < 3; i++)
        webhook_send(w, "{}", 2); /* behind the stored ones */
    assert_int_equal(webhook_queued(w), 10);
    assert_int_equal(webhook_waiting(w), 28);
    deliver_oldest(w, 4);
    assert_int_equal(webhook_waiting(w), 24);
    sweep_now(w);
    assert_int_equal(webhook_queued(w), 10);
    assert_int_equal(webhook_waiting(w), 24);
    for (int round = 0; round < 4; round++) {
        deliver_oldest(w, 10);
        sweep_now(w);
    }
    assert_int_equal(webhook_queued(w), 0);
    assert_int_equal(webhook_waiting(w), 0);
    webhook_free(w);
    temp_store_remove(st, dir);
    event_base_free(base);
}

static void count_queued(const char *sink, uint64_t rows, void *arg)
{
    (void)sink;
    *(uint64_t *)arg += rows;
}

/* With a state store, at most t.stored_max alerts wait for a sink, memory
 * and store together, the oldest dropped first: a sink down for days kept
 * adding rows to the store without a bound. 50 alerts against a cap of 30
 * (memory 10, its head in flight): 30 wait, 20 dropped and counted, and
 * of the store's rows the sink keeps the one in flight (the oldest) and
 * the 29 newest. */
static void a_sink_s_stored_queue_holds_at_most_its_cap(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char dir[] = "/tmp/sluice-hook-XXXXXX", *err = NULL;
    struct store *st = temp_store(dir);
    struct webhook *w = webhook_new(base, "http://127.0.0.1:9/capped", st, NULL, &err);
    assert_non_null(w);
    w->t.queue_max = 10;
    w->t.stored_max = 30;
    /* no request goes out (a retry is due in an hour), and the head is
     * taken for one in flight */
    struct timeval hour = {3600, 0};
    evtimer_add(w->retry, &hour);
    w->busy = true;
    char body[32];
    for (int i = 0; i < 50; i++) {
        int n = snprintf(body, sizeof(body), "{\"n\":%d}", i);
        webhook_send(w, body, (size_t)n);
        event_base_loop(base, EVLOOP_NONBLOCK); /* a sweep it asked for */
        read_taken(w);
    }
    assert_int_equal(webhook_waiting(w), 30);
    assert_int_equal(webhook_dropped(w), 20);
    assert_int_equal(store_sync(st), 0);
    uint64_t rows = 0;
    assert_int_equal(store_count_queue(st, count_queued, &rows), 1);
    assert_int_equal(rows, 30);
    assert_int_equal(w->q[w->head].n, 7);
    assert_memory_equal(w->q[w->head].body, "{\"n\":0}", 7);
    /* n 1 to 20 went, the oldest after the one in flight: memory's, then
     * those the sweep read back from the store */
    w->busy = false;
    deliver_oldest(w, 1);
    assert_int_equal(w->q[w->head].n, 8);
    assert_memory_equal(w->q[w->head].body, "{\"n\":21}", 8);
    assert_int_equal(webhook_waiting(w), 29);
    webhook_free(w);
    temp_store_remove(st, dir);
    event_base_free(base);
}

/* What a new sink did not take at once comes back through the sweep, as
 * memory frees up: 25 stored alerts, a memory cap of 10, a server that
 * answers each: every one is delivered once, oldest first, and none is left
 * in the store. */
static void adopted_and_swept_alerts_are_delivered_once_in_order(void **state)
{
    (void)state;
    static const unsigned delays[] = {0};
    char dir[] = "/tmp/sluice-hook-XXXXXX", *err = NULL, url[64];
    struct store *st = temp_store(dir);
    struct event_base *base = event_base_new();
    struct srv s = {.delays_ms = delays, .ndelays = 1};
    srv_start(&s, base);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/hook", (unsigned)s.port);
    for (int i = 0; i < 25; i++) {
        char body[32];
        snprintf(body, sizeof(body), "{\"n\":%d}", i);
        assert_true(store_queue_add(st, skey(url), body) > 0);
        assert_true(store_queue_add(st, skey("http://127.0.0.1:9/other"), "{\"n\":-1}") > 0);
    }
    assert_int_equal(store_flush(st), 0);
    struct webhook *w = webhook_new(base, url, st, NULL, &err);
    uint64_t left = 0;
    assert_non_null(w);
    w->t.queue_max = 10;
    w->t.sweep_ms = 20;
    struct timeval tv = {0, 20000};
    event_add(w->sweep, &tv);
    rows_read = 0;
    adopt_now(w);
    assert_true(rows_read <= 11);
    run_until_answered(base, &s, 25, 20000);
    assert_int_equal(s.ngot, 25);
    for (size_t i = 0; i < 25; i++)
        assert_int_equal(s.got[i], (long)i);
    /* Nothing more comes: an alert sent now is the next the server gets.
     * One sent twice is older, in memory or in the store (a sweep reads
     * the oldest rows first), and would come before it. */
    webhook_send(w, "{\"n\":25}", 8);
    run_until_answered(base, &s, 26, 20000);
    assert_int_equal(s.ngot, 26);
    assert_int_equal(s.got[25], 25);
    run_until_delivered(base, w, 26, 10000);
    assert_int_equal(webhook_delivered(w), 26);
    assert_int_equal(webhook_queued(w), 0);
    assert_int_equal(store_sync(st), 0); /* the deletions committed (the writer's thread) */
    assert_int_equal(store_count_queue(st, count_queued, &left), 1); /* the other sink's */
    assert_int_equal(left, 25);
    webhook_free(w);
    srv_stop(&s);
    temp_store_remove(st, dir);
    event_base_free(base);
}

/* A sink to a server of <s>, started in <base>, that answers at once. */
static struct webhook *sink_to_prompt(struct event_base *base, struct srv *s)
{
    static const unsigned now[] = {0};
    memset(s, 0, sizeof(*s));
    s->delays_ms = now;
    s->ndelays = 1;
    srv_start(s, base);
    return sink_to(base, s);
}

static void sink_and_srv_free(struct event_base *base, struct srv *s, struct webhook *w)
{
    webhook_free(w);
    srv_stop(s);
    event_base_free(base);
}

/* Whatever allocation of libevent's fails while an alert is sent (the
 * request itself, its buffers, a header, the copy of the target inside
 * evhttp_make_request(), which then frees the request, or one on the way
 * out), the alert goes out again by itself: an attempt is in flight or the
 * retry is armed, and it is delivered with no other alert coming. When
 * evhttp_request_new() failed, try_send() returned with neither and the
 * queue waited for the next alert. ASan checks that no request is leaked
 * or freed twice. The 2nd and 3rd allocations, the header lists of
 * evhttp_request_new(), are left out: libevent 2.1.12 then frees the half
 * made request and crashes (evhttp_clear_headers(NULL)). */
static void an_alert_whose_request_cannot_be_made_is_retried(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct srv s;
    struct webhook *w = sink_to_prompt(base, &s);
    w->t.attempt_ms = 500;
    unsigned sent = 0;
    bool failed = true;
    for (long k = 1; failed && k < 200; k++) {
        if (k == 2 || k == 3)
            continue;
        char body[32];
        int n = snprintf(body, sizeof(body), "{\"n\":%u}", ++sent);
        mem_fail_in = k;
        mem_failed = false;
        webhook_send(w, body, (size_t)n);
        failed = mem_failed; /* else the send needed fewer: done */
        mem_fail_in = 0;
        mem_failed = false;
        assert_true(w->busy || evtimer_pending(w->retry, NULL));
        run_until_delivered(base, w, sent, 10000);
        assert_int_equal(webhook_delivered(w), sent);
    }
    assert_false(failed);
    assert_true(sent > 10);
    assert_int_equal(handed_incomplete, 0);
    assert_int_equal(webhook_queued(w), 0);
    sink_and_srv_free(base, &s, w);
}

/* Sends one alert to <w> with RLIMIT_NOFILE at the lowest free descriptor:
 * no socket can be made. */
static void send_without_descriptors(struct webhook *w)
{
    struct rlimit was, now;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &was), 0);
    int lowest = open("/dev/null", O_RDONLY);
    assert_true(lowest >= 0);
    close(lowest);
    now = was;
    now.rlim_cur = (rlim_t)lowest;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &now), 0);
    send_alerts(w, 1);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &was), 0);
}

/* Out of descriptors (EMFILE), the connect fails inside
 * evhttp_make_request(): libevent 2.1.12 runs on_done (no answer), frees
 * the request and returns 0. The attempt counts as failed, the retry is
 * armed, nothing is in flight (ASan: nothing leaked or freed twice); with
 * descriptors back, the alert is delivered. */
static void an_alert_sent_out_of_descriptors_is_retried(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct srv s;
    struct webhook *w = sink_to_prompt(base, &s);
    send_without_descriptors(w);
    assert_false(w->busy);
    assert_null(w->req);
    assert_false(evtimer_pending(w->deadline, NULL));
    assert_true(evtimer_pending(w->retry, NULL));
    assert_int_equal(webhook_failures(w), 1);
    assert_int_equal(s.connections, 0);
    run_until_delivered(base, w, 1, 10000);
    assert_int_equal(webhook_delivered(w), 1);
    assert_int_equal(s.requests, 1);
    sink_and_srv_free(base, &s, w);
}

/* The same over https://: the TLS bufferevent defers its callbacks, so the
 * failed connect reaches on_done on the loop, after evhttp_make_request()
 * returned 0 and the deadline was armed; the deadline is then removed and
 * the retry armed, once (ASan: the request freed once, by evhttp). */
static void an_https_alert_sent_out_of_descriptors_is_retried(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char *err = NULL;
    struct webhook *w = webhook_new(base, "https://127.0.0.1:9/hook", NULL, NULL, &err);
    assert_non_null(w);
    send_without_descriptors(w);
    assert_non_null(w->req);
    assert_true(evtimer_pending(w->deadline, NULL));
    for (int i = 0; i < 100 && w->req != NULL; i++)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_null(w->req);
    assert_false(w->busy);
    assert_false(evtimer_pending(w->deadline, NULL));
    assert_true(evtimer_pending(w->retry, NULL));
    assert_int_equal(webhook_failures(w), 1);
    webhook_free(w);
    event_base_free(base);
}

/* A name written with its final dot (https://hooks.example.test./hook, a
 * URL `check` takes) is sent as SNI and checked against the certificate
 * without it, as curl does: X509_check_host() does not match
 * "hooks.example.test." to a certificate for hooks.example.test, so every
 * delivery failed with "hostname mismatch", and RFC 6066 sends no dot. */
static void a_name_with_a_final_dot_is_checked_without_it(void **state)
{
    (void)state;
    static const char *const urls[] = {"https://hooks.example.test./hook",
                                       "https://hooks.example.test/hook"};
    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
        struct event_base *base = event_base_new();
        char *err = NULL;
        struct webhook *w = webhook_new(base, urls[i], NULL, NULL, &err);
        assert_non_null(w);
        struct bufferevent *bev = webhook_tls_bev(w->tls, base);
        assert_non_null(bev);
        SSL *ssl = bufferevent_openssl_get_ssl(bev);
        assert_non_null(ssl);
        assert_string_equal(SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name),
                            "hooks.example.test");
        const char *checked = X509_VERIFY_PARAM_get0_host(SSL_get0_param(ssl), 0);
        assert_non_null(checked);
        assert_string_equal(checked, "hooks.example.test");
        bufferevent_free(bev);
        webhook_free(w);
        event_base_free(base);
    }
}

/* A name server on 127.0.0.1, in the test's loop, that answers every
 * question NXDOMAIN: the question sent back with QR, RD, RA and rcode 3. */
static void nxdomain_answer(evutil_socket_t fd, short what, void *arg)
{
    unsigned char q[512];
    struct sockaddr_storage from;
    socklen_t fromlen = sizeof(from);
    (void)what;
    (void)arg;
    ssize_t n = recvfrom(fd, q, sizeof(q), 0, (struct sockaddr *)&from, &fromlen);
    if (n < 12)
        return;
    q[2] = 0x81;
    q[3] = 0x83;
    memset(q + 6, 0, 6); /* no answer, authority or additional records */
    (void)sendto(fd, q, (size_t)n, 0, (struct sockaddr *)&from, fromlen);
}

/* A UDP socket on 127.0.0.1 whose questions go to <cb> (<arg>) in <base>'s
 * loop, for a test name server; *<ev> is its event, *<port> its port. */
static int ns_open(struct event_base *base, event_callback_fn cb, void *arg, struct event **ev,
                   uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sinlen = sizeof(sin);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &sinlen), 0);
    *ev = event_new(base, fd, EV_READ | EV_PERSIST, cb, arg);
    assert_non_null(*ev);
    assert_int_equal(event_add(*ev, NULL), 0);
    *port = ntohs(sin.sin_port);
    return fd;
}

/* A sink to <url> whose resolver asks the name server on 127.0.0.1:<port>
 * only (never the host's). */
static struct webhook *sink_asking(struct event_base *base, const char *url, uint16_t port)
{
    char *err = NULL;
    struct webhook *w = webhook_new(base, url, NULL, NULL, &err);
    assert_non_null(w);
    evhttp_connection_free(w->conn);
    evdns_base_free(w->dns, 0);
    w->dns = evdns_base_new(base, 0);
    assert_non_null(w->dns);
    char server[32];
    snprintf(server, sizeof(server), "127.0.0.1:%u", (unsigned)port);
    assert_int_equal(evdns_base_nameserver_ip_add(w->dns, server), 0);
    assert_int_equal(open_conn(w), 0);
    return w;
}

/* A sink whose host name does not resolve says so, with the resolver's
 * reason, where it said only "cannot deliver". Its resolver is pointed at
 * the loopback name server above (never at the host's). */
static void a_name_that_does_not_resolve_says_why(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct event *nsev;
    uint16_t port;
    int ns = ns_open(base, nxdomain_answer, NULL, &nsev, &port);
    struct webhook *w = sink_asking(base, "http://hook.example.test:9/hook", port);
    w->t.attempt_ms = 3000;
    w->t.backoff_ms = w->t.backoff_max_ms = 60000; /* no retry meanwhile */

    send_alerts(w, 1);
    struct event *tick = event_new(base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval tv = {0, 10000};
    event_add(tick, &tv);
    uint64_t until = mono_ms() + 5000;
    while (webhook_failures(w) == 0 && mono_ms() < until)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(tick);
    assert_int_equal(webhook_failures(w), 1);
    char why[240];
    failure_text(w, 0, why, sizeof(why));
    if (strstr(why, "cannot deliver: cannot resolve hook.example.test: ") != why)
        fail_msg("said \"%s\"", why);

    webhook_free(w);
    event_free(nsev);
    close(ns);
    event_base_free(base);
}

/* A name server on 127.0.0.1, in the test's loop, that holds the first 8
 * questions it receives (those past them are dropped) until the test has it
 * answer some NXDOMAIN (held_answer). */
struct held_ns {
    int fd;
    unsigned char q[8][512];
    size_t n[8];
    struct sockaddr_storage from[8];
    socklen_t fromlen[8];
    size_t asked;
};

static void held_question(evutil_socket_t fd, short what, void *arg)
{
    struct held_ns *ns = arg;
    unsigned char drop[512];
    (void)what;
    size_t i = ns->asked < 8 ? ns->asked : 0;
    ns->fromlen[i] = sizeof(ns->from[i]);
    ssize_t n = recvfrom(fd, ns->asked < 8 ? ns->q[i] : drop, sizeof(drop), 0,
                         (struct sockaddr *)&ns->from[i], &ns->fromlen[i]);
    if (n < 12 || ns->asked >= 8)
        return;
    ns->n[i] = (size_t)n;
    ns->asked++;
}

/* Answers questions <from> to <to> (excluded) NXDOMAIN. */
static void held_answer(struct held_ns *ns, size_t from, size_t to)
{
    for (size_t i = from; i < to && i < ns->asked; i++) {
        ns->q[i][2] = 0x81;
        ns->q[i][3] = 0x83;
        memset(ns->q[i] + 6, 0, 6);
        assert_int_equal(
            sendto(ns->fd, ns->q[i], ns->n[i], 0, (struct sockaddr *)&ns->from[i], ns->fromlen[i]),
            (ssize_t)ns->n[i]);
    }
}

/* Runs <base> until it has nothing to run now: every callback made due,
 * those queued for the loop's next turn too (libevent counts them active:
 * evdns fails a freed resolver's requests, and reports a lookup's answer,
 * on a later turn), has run. What a turn sets going is run to its end, not
 * guessed ended after some milliseconds. Hang guard: 10 s. */
static void run_until_idle(struct event_base *base)
{
    uint64_t until = mono_ms() + 10000;
    do
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    while (event_base_get_num_events(base, EVENT_BASE_COUNT_ACTIVE) > 0 && mono_ms() < until);
    assert_int_equal(event_base_get_num_events(base, EVENT_BASE_COUNT_ACTIVE), 0);
}

/* This process's UDP socket that <ns>'s question <i> came from: the
 * resolver's, on the port the question came from (bound to any address:
 * the kernel chose 127.0.0.1 for it). */
static int resolver_socket(const struct held_ns *ns, size_t i)
{
    const struct sockaddr_in *from = (const struct sockaddr_in *)&ns->from[i];
    assert_int_equal(from->sin_family, AF_INET);
    for (int fd = 0; fd < 1024; fd++) {
        struct sockaddr_in at;
        socklen_t atlen = sizeof(at);
        int type = 0;
        socklen_t typelen = sizeof(type);
        if (fd == ns->fd || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &typelen) != 0 ||
            type != SOCK_DGRAM || getsockname(fd, (struct sockaddr *)&at, &atlen) != 0)
            continue;
        if (at.sin_family == AF_INET && at.sin_port == from->sin_port)
            return fd;
    }
    fail_msg("no socket of this process asked question %zu", i);
    return -1;
}

/* Runs <base> until the resolver that asked <ns>'s question <i> has read
 * every answer sent to it (the kernel holds none for its socket) and
 * reported them (run_until_idle()). Hang guard: 10 s. */
static void run_until_answers_read(struct event_base *base, const struct held_ns *ns, size_t i)
{
    int fd = resolver_socket(ns, i), unread = 1;
    uint64_t until = mono_ms() + 10000;
    while ((ioctl(fd, FIONREAD, &unread) != 0 || unread > 0) && mono_ms() < until)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_int_equal(unread, 0);
    run_until_idle(base);
}

/* A new loop in *<base>, <ns> answering in it, and a sink to <url> that
 * asks it (sink_asking()); held_end() frees them. */
static struct webhook *sink_held(struct event_base **base, struct held_ns *ns, struct event **nsev,
                                 const char *url)
{
    *base = event_base_new();
    assert_non_null(*base);
    memset(ns, 0, sizeof(*ns));
    uint16_t port;
    ns->fd = ns_open(*base, held_question, ns, nsev, &port);
    return sink_asking(*base, url, port);
}

static void held_end(struct event_base *base, struct held_ns *ns, struct event *nsev)
{
    event_free(nsev);
    close(ns->fd);
    event_base_free(base);
}

/* An attempt cut at its deadline while its host name was being looked up:
 * the lookup's answer, coming later, must not reach the connection, nor
 * end the next attempt, whose own lookup is under way. */
static void a_late_name_lookup_reaches_nothing(void **state)
{
    (void)state;
    static const char *const urls[] = {"http://hook.example.test:9/hook",
                                       "https://hook.example.test:9/hook"};
    for (size_t u = 0; u < sizeof(urls) / sizeof(urls[0]); u++) {
        struct event_base *base;
        struct held_ns ns;
        struct event *nsev;
        struct webhook *w = sink_held(&base, &ns, &nsev, urls[u]);
        w->t.attempt_ms = 1000;
        w->t.backoff_ms = w->t.backoff_max_ms = 10; /* well within evdns' 5 s per try */

        send_alerts(w, 1);
        run_until_count(base, &ns.asked, 2, 5000); /* the first attempt's A and AAAA */
        assert_int_equal(ns.asked, 2);
        run_until_count(base, &ns.asked, 4, 5000); /* cut; the second attempt's */
        assert_int_equal(ns.asked, 4);
        assert_int_equal(webhook_failures(w), 1);
        assert_non_null(w->req);
        held_answer(&ns, 0, 2); /* the first attempt's lookup fails now */
        run_until_answers_read(base, &ns, 0);
        char why[240];
        if (webhook_failures(w) != 1 || w->req == NULL)
            fail_msg("%s: the second attempt ended: %s", urls[u],
                     failure_text(w, 0, why, sizeof(why)));
        w->t.backoff_ms = w->t.backoff_max_ms = 60000; /* no third attempt */
        held_answer(&ns, 2, 4);                        /* and its own */
        uint64_t until = mono_ms() + 5000;
        while (webhook_failures(w) == 1 && mono_ms() < until)
            event_base_loop(base, EVLOOP_ONCE);
        assert_int_equal(webhook_failures(w), 2);
        failure_text(w, 0, why, sizeof(why));
        if (strstr(why, "cannot deliver: cannot resolve hook.example.test: ") != why)
            fail_msg("%s: said \"%s\"", urls[u], why);

        webhook_free(w);
        held_end(base, &ns, nsev);
    }
}

/* A sink freed while its host name is being looked up (a reload that
 * drops or changes it, the gateway's exit) leaves nothing behind once the
 * loop has turned: the lookup held the connection's bufferevent, which
 * only its answer released, and its resolver, freed with it, dropped the
 * lookup without answering: the bufferevent, its buffers and the lookup
 * were never freed. Also with the lookup of an attempt the deadline cut
 * (on_deadline() left its connection's bufferevent to it) still held. */
static void a_sink_freed_during_a_name_lookup_leaves_nothing(void **state)
{
    (void)state;
    static const char *const urls[] = {
        "http://hook.example.test:9/hook", "https://hook.example.test:9/hook",
        "http://hook.example.test:9/hook", "https://hook.example.test:9/hook"};
    for (size_t u = 0; u < sizeof(urls) / sizeof(urls[0]); u++) {
        bool cut = u >= 2;
        long before = mem_live;
        struct event_base *base;
        struct held_ns ns;
        struct event *nsev;
        struct webhook *w = sink_held(&base, &ns, &nsev, urls[u]);
        w->t.attempt_ms = cut ? 100 : 60000;
        w->t.backoff_ms = w->t.backoff_max_ms = 10;

        send_alerts(w, 1);
        run_until_count(base, &ns.asked, cut ? 4 : 2, 5000); /* A and AAAA, held */
        assert_int_equal(ns.asked, cut ? 4 : 2);
        assert_int_equal(webhook_failures(w), cut);
        assert_non_null(w->req);
        webhook_free(w);
        run_until_idle(base); /* the loop turns on (a reload) */
        held_end(base, &ns, nsev);
        if (mem_live != before)
            fail_msg("%s%s: %ld of libevent's blocks left", urls[u], cut ? " (cut)" : "",
                     mem_live - before);
    }
}

/* A sink freed while evdns probes its name server (a question for
 * google.com, which it sends to a server it took as down: here a REFUSED
 * answer, the probe 100 ms later, held) must not leave the probe to report,
 * on the loop's next turn, into the freed server record: failing the
 * resolver's requests (webhook_free()) queued the probe's callback too. */
static void a_sink_freed_while_its_server_is_probed_survives(void **state)
{
    (void)state;
    struct event_base *base;
    struct held_ns ns;
    struct event *nsev;
    struct webhook *w = sink_held(&base, &ns, &nsev, "http://hook.example.test:9/hook");
    assert_int_equal(evdns_base_set_option(w->dns, "initial-probe-timeout:", "0.1"), 0);
    w->t.attempt_ms = 60000;
    w->t.backoff_ms = w->t.backoff_max_ms = 60000; /* no second attempt */

    send_alerts(w, 1);
    run_until_count(base, &ns.asked, 2, 5000); /* A and AAAA, held */
    assert_int_equal(ns.asked, 2);
    for (size_t i = 0; i < 2; i++) { /* REFUSED: evdns takes the server as down */
        ns.q[i][2] = 0x81;
        ns.q[i][3] = 0x85;
        memset(ns.q[i] + 6, 0, 6);
        assert_int_equal(
            sendto(ns.fd, ns.q[i], ns.n[i], 0, (struct sockaddr *)&ns.from[i], ns.fromlen[i]),
            (ssize_t)ns.n[i]);
    }
    run_until_count(base, &ns.asked, 3, 3000); /* the probe, held */
    assert_int_equal(ns.asked, 3);
    assert_int_equal(webhook_failures(w), 1);
    webhook_free(w);
    run_until_idle(base); /* the loop turns on (a reload): the probe's report runs */
    held_end(base, &ns, nsev);
}

/* Answers question <i> with the address 127.0.0.1 if it asks for an A
 * record; returns whether it did. */
static bool held_answer_a(struct held_ns *ns, size_t i)
{
    unsigned char *q = ns->q[i];
    size_t at = 12;
    while (at < ns->n[i] && q[at] != 0)
        at += 1u + q[at];
    if (at + 5 > ns->n[i] || q[at + 1] != 0 || q[at + 2] != 1)
        return false;
    static const unsigned char rr[] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1};
    unsigned char a[512 + sizeof(rr)];
    size_t n = at + 5;
    memcpy(a, q, n);
    memcpy(a + n, rr, sizeof(rr));
    a[2] = 0x81;
    a[3] = 0x80;
    memset(a + 6, 0, 6);
    a[7] = 1; /* one answer */
    assert_int_equal(
        sendto(ns->fd, a, n + sizeof(rr), 0, (struct sockaddr *)&ns->from[i], ns->fromlen[i]),
        (ssize_t)(n + sizeof(rr)));
    return true;
}

static int open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += fcntl(fd, F_GETFD) != -1;
    return n;
}

/* The sockets this process holds. */
static int open_sockets(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++) {
        int type;
        socklen_t typelen = sizeof(type);
        n += getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &typelen) == 0;
    }
    return n;
}

/* A loop, and how many sockets this process should hold. */
struct loop_sockets {
    struct event_base *base;
    int n;
};

/* Turns <arg>'s loop once without waiting; whether the process holds as
 * many sockets as it says (waited_until()). */
static bool loop_sockets_are(void *arg)
{
    struct loop_sockets *l = arg;
    event_base_loop(l->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    return open_sockets() == l->n;
}

/* A sink freed while its lookup is half answered (the A record in, the
 * AAAA question still out) leaves no descriptor and no memory behind: the
 * resolver's end hands the address it has to the freed connection's
 * bufferevent, which connects, and closes that socket as it goes. */
static void a_sink_freed_during_a_half_answered_lookup_leaves_nothing(void **state)
{
    (void)state;
    static const char *const urls[] = {"http://hook.example.test:9/hook",
                                       "https://hook.example.test:9/hook"};
    for (size_t u = 0; u < sizeof(urls) / sizeof(urls[0]); u++) {
        long before = mem_live;
        int fds = open_fds(), sockets = open_sockets();
        struct event_base *base;
        struct held_ns ns;
        struct event *nsev;
        struct webhook *w = sink_held(&base, &ns, &nsev, urls[u]);
        w->t.attempt_ms = 60000;

        send_alerts(w, 1);
        run_until_count(base, &ns.asked, 2, 5000); /* its A and AAAA, held */
        assert_int_equal(ns.asked, 2);
        assert_true(held_answer_a(&ns, 0) || held_answer_a(&ns, 1));
        run_until_answers_read(base, &ns, 0); /* the A answer is in */
        assert_non_null(w->req);
        webhook_free(w);
        /* The loop turns on (a reload) until the freed connection's socket,
         * whose connect the A answer set going, is closed: only the name
         * server's is left (a socket left open runs to the hang guard). */
        struct loop_sockets left = {base, sockets + 1};
        wait_until(loop_sockets_are, &left, "the freed sink's sockets to be closed");
        run_until_idle(base);
        held_end(base, &ns, nsev);
        if (open_fds() != fds || mem_live != before)
            fail_msg("%s: %d descriptors and %ld of libevent's blocks left", urls[u],
                     open_fds() - fds, mem_live - before);
    }
}

int main(void)
{
    event_set_mem_functions(mem_malloc, mem_realloc, mem_free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(urls_http_and_https),
        cmocka_unit_test(request_target),
        cmocka_unit_test(urls_refused),
        cmocka_unit_test(deadline_cuts_a_slow_answer),
        cmocka_unit_test(deadline_races_the_answer),
        cmocka_unit_test(deadline_due_with_the_answer),
        cmocka_unit_test(free_with_a_request_in_flight),
        cmocka_unit_test(a_retired_sink_ends_its_flight_and_holds_nothing_else),
        cmocka_unit_test(alert_whose_stored_row_was_dropped_is_unstored),
        cmocka_unit_test(sweep_reads_only_what_it_has_room_for),
        cmocka_unit_test(adopting_reads_only_what_memory_holds),
        cmocka_unit_test(adopted_and_swept_alerts_are_delivered_once_in_order),
        cmocka_unit_test(every_waiting_alert_is_counted),
        cmocka_unit_test(a_sink_s_stored_queue_holds_at_most_its_cap),
        cmocka_unit_test(memory_queue_holds_at_most_its_bytes),
        cmocka_unit_test(a_shorter_alert_does_not_overtake_one_over_the_bytes_cap),
        cmocka_unit_test(a_read_back_holds_at_most_the_bytes_left),
        cmocka_unit_test(an_alert_whose_request_cannot_be_made_is_retried),
        cmocka_unit_test(an_alert_sent_out_of_descriptors_is_retried),
        cmocka_unit_test(an_https_alert_sent_out_of_descriptors_is_retried),
        cmocka_unit_test(a_name_with_a_final_dot_is_checked_without_it),
        cmocka_unit_test(a_name_that_does_not_resolve_says_why),
        cmocka_unit_test(a_late_name_lookup_reaches_nothing),
        cmocka_unit_test(a_sink_freed_during_a_name_lookup_leaves_nothing),
        cmocka_unit_test(a_sink_freed_while_its_server_is_probed_survives),
        cmocka_unit_test(a_sink_freed_during_a_half_answered_lookup_leaves_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
