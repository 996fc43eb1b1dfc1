/* Unit tests for watch/admin_head.c, the admin server's request head parser: the strict request
 * line (METHOD SP /target SP HTTP/1.x CRLF), header lines, which page and
 * method a head asks for, and that a head fed one byte at a time parses as
 * it does whole; and for watch/admin.c, the memory its /metrics replies
 * hold and which accept() errors pause its listener (accept4() and
 * accept() are interposed here, to fail once with a chosen error). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "watch/admin_head.h"

/* Small, so that two test bodies (~8 MB each) would pass it. */
#define ADMIN_BODIES_MAX (1024 * 1024)
#include "watch/admin.c" /* the unit under test, internals included */

#include "accept_fail.h"
#include "gate/listener.h"

/* The wall clock's second while not 0: clock_gettime(CLOCK_REALTIME) is
 * interposed here, as accept() is, to date a reply in a chosen year. */
static time_t fake_realtime;

int clock_gettime(clockid_t id, struct timespec *ts)
{
    if (id == CLOCK_REALTIME && fake_realtime != 0) {
        ts->tv_sec = fake_realtime;
        ts->tv_nsec = 0;
        return 0;
    }
    int (*real)(clockid_t, struct timespec *) =
        (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    return real(id, ts);
}

/* Parses <s> whole, then one byte at a time; both must agree. */
static enum admin_parse parse(const char *s, struct admin_head *out)
{
    size_t len = strlen(s);
    struct admin_head whole, bytes;
    memset(&whole, 0, sizeof(whole));
    memset(&bytes, 0, sizeof(bytes));
    enum admin_parse r = admin_head_parse(&whole, s, len);
    enum admin_parse rb = ADMIN_PARSE_MORE;
    for (size_t i = 1; i <= len && rb == ADMIN_PARSE_MORE; i++)
        rb = admin_head_parse(&bytes, s, i);
    assert_int_equal(r, rb);
    if (r == ADMIN_PARSE_DONE) {
        assert_int_equal(whole.method, bytes.method);
        assert_int_equal(whole.page, bytes.page);
        assert_int_equal(whole.pos, bytes.pos);
        assert_int_equal(whole.host_is_name, bytes.host_is_name);
    }
    if (out != NULL)
        *out = whole;
    return r;
}

static void heads_that_parse(void **state)
{
    (void)state;
    struct admin_head h;
    assert_int_equal(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &h), ADMIN_PARSE_DONE);
    assert_int_equal(h.method, ADMIN_GET);
    assert_int_equal(h.page, ADMIN_METRICS);
    assert_int_equal(parse("HEAD /healthz?probe=1 HTTP/1.0\r\n\r\n", &h), ADMIN_PARSE_DONE);
    assert_int_equal(h.method, ADMIN_HEAD);
    assert_int_equal(h.page, ADMIN_HEALTHZ);
    assert_int_equal(parse("GET /metrics/ HTTP/1.1\r\n\r\n", &h), ADMIN_PARSE_DONE);
    assert_int_equal(h.page, ADMIN_OTHER_PAGE);
    assert_int_equal(parse("GET /metricsx HTTP/1.1\r\n\r\n", &h), ADMIN_PARSE_DONE);
    assert_int_equal(h.page, ADMIN_OTHER_PAGE);
    assert_int_equal(parse("POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", &h),
                     ADMIN_PARSE_DONE);
    assert_int_equal(h.method, ADMIN_OTHER_METHOD);
    assert_int_equal(h.pos, strlen("POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\n"));
    assert_int_equal(parse("get /metrics HTTP/1.1\r\n\r\n", &h), ADMIN_PARSE_DONE);
    assert_int_equal(h.method, ADMIN_OTHER_METHOD); /* methods are case-sensitive */
    assert_int_equal(parse("GET /metrics HTTP/1.1\r\nX-Empty:\r\nTab:\tv\xc3\xa9\r\n\r\n", &h),
                     ADMIN_PARSE_DONE);
}

/* A Host that names a host (a DNS rebinding page's) is told apart from
 * an address, localhost or none, whatever its case and blanks. */
static void host_names_told_apart(void **state)
{
    (void)state;
    static const char *const names[] = {"rebind.attacker.test",
                                        "evil.test:9128",
                                        "localhost.evil.test",
                                        "127.0.0.1.nip.io:9128",
                                        "x",
                                        ":9128",
                                        "a:b:c"};
    static const char *const addresses[] = {
        "127.0.0.1:9128",  "127.0.0.1", "[::1]:9128", "localhost",
        "LocalHost.:9128", " \t",       "  127.1  ",
    };
    char buf[128];
    struct admin_head h;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(buf, sizeof(buf), "GET /metrics HTTP/1.1\r\nhOsT: %s\r\n\r\n", names[i]);
        assert_int_equal(parse(buf, &h), ADMIN_PARSE_DONE);
        assert_true(h.host_is_name);
    }
    for (size_t i = 0; i < sizeof(addresses) / sizeof(addresses[0]); i++) {
        snprintf(buf, sizeof(buf), "GET /metrics HTTP/1.1\r\nHost:%s\r\n\r\n", addresses[i]);
        assert_int_equal(parse(buf, &h), ADMIN_PARSE_DONE);
        assert_false(h.host_is_name);
    }
    /* one of two Host headers a name: a name */
    assert_int_equal(parse("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: e.test\r\n\r\n", &h),
                     ADMIN_PARSE_DONE);
    assert_true(h.host_is_name);
    /* a header that only starts like Host: is not one */
    assert_int_equal(parse("GET / HTTP/1.1\r\nHostx: e.test\r\n\r\n", &h), ADMIN_PARSE_DONE);
    assert_false(h.host_is_name);
}

static void heads_not_yet_complete(void **state)
{
    (void)state;
    assert_int_equal(parse("", NULL), ADMIN_PARSE_MORE);
    assert_int_equal(parse("GET /metrics HTTP/1.1", NULL), ADMIN_PARSE_MORE);
    assert_int_equal(parse("GET /metrics HTTP/1.1\r", NULL), ADMIN_PARSE_MORE);
    assert_int_equal(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n", NULL), ADMIN_PARSE_MORE);
    assert_int_equal(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n\r", NULL), ADMIN_PARSE_MORE);
}

static void heads_that_are_bad(void **state)
{
    (void)state;
    static const char *bad[] = {
        "GET /metrics HTTP/1.1\nHost: x\n\n",
        "GET /metrics HTTP/1.1\r\nHost: x\n\r\n",
        "GET  /metrics HTTP/1.1\r\n\r\n",
        "GET /metrics  HTTP/1.1\r\n\r\n",
        " GET /metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1 \r\n\r\n",
        "GET\t/metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.10\r\n\r\n",
        "GET /metrics HTTP/1.x\r\n\r\n",
        "GET /metrics HTTP/2.0\r\n\r\n",
        "GET /metrics http/1.1\r\n\r\n",
        "GET /metrics\r\n\r\n",
        "GET  HTTP/1.1\r\n\r\n",
        "GET metrics HTTP/1.1\r\n\r\n",
        "GET http://x/metrics HTTP/1.1\r\n\r\n",
        "GET * HTTP/1.1\r\n\r\n",
        "GET /m\x7f HTTP/1.1\r\n\r\n",
        "GET /m\xc3\xa9 HTTP/1.1\r\n\r\n",
        "\r\nGET /metrics HTTP/1.1\r\n\r\n",
        "G(T /metrics HTTP/1.1\r\n\r\n",
        "AVERYLONGMETHODNAMEMUCHLONGERTHAN32 /metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1\r\n folded: x\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nX : y\r\n\r\n",
        "GET /metrics HTTP/1.1\r\n: y\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nnocolon\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nX: a\rb\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nX: \x01\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nX: \x7f\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (parse(bad[i], NULL) != ADMIN_PARSE_BAD)
            fail_msg("accepted '%s'", bad[i]);
    /* a NUL anywhere (strlen() above would stop at it) */
    static const char nul[] = "GET /metrics HTTP/1.1\r\nX: a\0b\r\n\r\n";
    struct admin_head h;
    memset(&h, 0, sizeof(h));
    assert_int_equal(admin_head_parse(&h, nul, sizeof(nul) - 1), ADMIN_PARSE_BAD);
    static const char nul_line[] = "GET /me\0trics HTTP/1.1\r\n\r\n";
    memset(&h, 0, sizeof(h));
    assert_int_equal(admin_head_parse(&h, nul_line, sizeof(nul_line) - 1), ADMIN_PARSE_BAD);
}

static unsigned formats; /* scrapes: metrics_format() calls gauges() once each */

static void count_format(void *arg, struct metrics_gauges *g)
{
    (void)arg;
    (void)g;
    formats++;
}

/* A TCP port on 127.0.0.1 nothing listens on now. */
static uint16_t free_port(void)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    close(fd);
    return ntohs(sin.sin_port);
}

/* admin_new() on the --admin value <text>, read as serve reads it. */
static struct admin *admin_at(struct event_base *base, const char *text, struct metrics *m,
                              char *err, size_t errlen)
{
    struct listen_addr addr;
    const char *why = NULL;
    if (listen_addr_parse_admin(text, &addr, &why) < 0)
        fail_msg("--admin %s: %s", text, why);
    listen_addr_name(&addr, "--admin", text);
    return admin_new(base, &addr, m, err, errlen);
}

/* A new admin server on <base> serving <m> on a free 127.0.0.1 port, its
 * address in <sin>; scrapes of <m> counted in <formats>. Free it with
 * admin_free(). */
static struct admin *counting_server(struct event_base *base, struct metrics *m,
                                     struct sockaddr_in *sin)
{
    metrics_set_gauges(m, count_format, NULL, NULL);
    char addr[32], err[256];
    uint16_t port = free_port();
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)port);
    struct admin *a = admin_at(base, addr, m, err, sizeof(err));
    assert_non_null(a);
    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin->sin_port = htons(port);
    return a;
}

/* Connections in <a> whose /metrics reply is queued. */
static unsigned replying(const struct admin *a)
{
    unsigned n = 0;
    for (const struct admin_conn *c = a->conns; c != NULL; c = c->next)
        n += c->state == AC_REPLY;
    return n;
}

/* <n> clients that ask for /metrics at once, each connected to <sin>
 * with a receive buffer of <rcvbuf> bytes (0: the system's); their sockets
 * in <fds>. */
static void ask_metrics(const struct sockaddr_in *sin, int *fds, int n, int rcvbuf)
{
    static const char req[] = "GET /metrics HTTP/1.1\r\n\r\n";
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fds[i] >= 0);
        if (rcvbuf > 0)
            setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
        assert_int_equal(connect(fds[i], (const struct sockaddr *)sin, sizeof(*sin)), 0);
        assert_int_equal(write(fds[i], req, sizeof(req) - 1), (ssize_t)(sizeof(req) - 1));
    }
}

/* An admin server on metrics of 4000 agents with long names, a body of
 * ~8 MB, with its event base; rig_close() frees it all. More than the
 * kernel takes of a reply at once (the server's send buffer on loopback
 * grows to tcp_wmem's 4 MiB at the most), so that a client that does not
 * read leaves the rest of it to the server. */
struct rig {
    struct metrics *m;
    struct event_base *base;
    struct admin *a;
    struct sockaddr_in sin;
};

static void rig_open(struct rig *r)
{
    r->m = metrics_new();
    assert_non_null(r->m);
    char id[640];
    for (int i = 0; i < 4000; i++) {
        snprintf(id, sizeof(id), "agent-%0618d", i);
        struct egress_event ev = {.kind = EVENT_EGRESS, .agent = id};
        metrics_on_event(&ev, r->m);
    }
    r->base = event_base_new();
    assert_non_null(r->base);
    r->a = counting_server(r->base, r->m, &r->sin);
    /* Windows no client here outlasts, however long a build of this body
     * takes where the test runs: under ThreadSanitizer on a loaded machine
     * one took seconds, the heads behind it met ADMIN_HEAD_MS, the replies
     * ADMIN_REPLY_MS, and each scrape past ADMIN_BODY_REUSE_MS built anew. */
    r->a->head_ms = r->a->reply_ms = r->a->reuse_ms = 3600000;
}

/* Closes the <n> clients <fds>, then frees <r>. */
static void rig_close(struct rig *r, const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        close(fds[i]);
    admin_free(r->a);
    event_base_free(r->base);
    metrics_free(r->m);
}

/* Runs <base> until <n> of <a>'s connections have their reply queued (at
 * most 1000 turns). */
static void run_until_replying(struct event_base *base, const struct admin *a, unsigned n)
{
    for (int turn = 0; turn < 1000 && replying(a) < n; turn++)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_int_equal(replying(a), n);
}

/* Clients that ask for /metrics and never read the reply each made the
 * server hold a body of its own, for up to ADMIN_REPLY_MS: 64 of them, 64
 * bodies (a gateway with 4096 agents has a body of ~12 MB). Past
 * ADMIN_BODIES_MAX held, a scrape gets the body the last one got, shared,
 * instead of a new one. */
static void slow_scrapers_share_one_body(void **state)
{
    (void)state;
    struct rig r;
    rig_open(&r);
    r.a->fresh_ms = 0; /* no body served again for being fresh: only the cap shares */
    formats = 0;

    enum { NCLIENTS = 8 };
    int fds[NCLIENTS];
    ask_metrics(&r.sin, fds, NCLIENTS, 4096);
    run_until_replying(r.base, r.a, NCLIENTS); /* none could be written whole */
    assert_int_equal(formats, 1);
    assert_true(r.a->latest_len > ADMIN_BODIES_MAX / 2); /* two bodies would pass it */
    rig_close(&r, fds, NCLIENTS);
}

/* Bytes libevent holds now (its allocations, counted in main()). */
static size_t libevent_bytes;

static void *counting_malloc(size_t n)
{
    void *p = malloc(n);
    if (p != NULL)
        libevent_bytes += malloc_usable_size(p);
    return p;
}

static void *counting_realloc(void *p, size_t n)
{
    size_t was = p != NULL ? malloc_usable_size(p) : 0;
    void *q = realloc(p, n);
    if (q != NULL)
        libevent_bytes += malloc_usable_size(q) - was;
    return q;
}

static void counting_free(void *p)
{
    if (p != NULL)
        libevent_bytes -= malloc_usable_size(p);
    free(p);
}

/* A reply shares the body: what each client that does not read makes the
 * server hold beside it is a few KiB, whatever the body's size. Before, a
 * reply referred to each of the body's evbuffer chains with a chain of its
 * own (libevent allocates 1 KiB at least for each): here 1,036,986 bytes
 * beside this 1,346,830-byte body, each; 64 clients that asked for a 32 MB
 * body and did not read took a gateway from 88 to 746 MB, past the 64 MiB
 * ADMIN_BODIES_MAX says. */
static void a_shared_body_costs_each_reply_little(void **state)
{
    (void)state;
    struct rig r;
    rig_open(&r);
    r.a->fresh_ms = 3600000; /* one body, however slow the machine */
    formats = 0;

    enum { NCLIENTS = 8 };
    int fds[NCLIENTS];
    ask_metrics(&r.sin, fds, 1, 4096); /* the first builds the body */
    run_until_replying(r.base, r.a, 1);
    size_t one = libevent_bytes;
    ask_metrics(&r.sin, fds + 1, NCLIENTS - 1, 4096);
    run_until_replying(r.base, r.a, NCLIENTS); /* none could be written whole */
    assert_int_equal(formats, 1);
    size_t body = r.a->latest_len;
    assert_true(body > 1000000);
    /* each: its bufferevent, its head's chain, one chain that refers to
     * the body */
    size_t each = (libevent_bytes - one) / (NCLIENTS - 1);
    rig_close(&r, fds, NCLIENTS);
    if (each >= 16384)
        fail_msg("each reply of a %zu-byte body holds %zu bytes beside it", body, each);
}

/* Reads <fd>'s reply to its end (at most <cap> - 1 bytes kept, NUL
 * ended), running <base> while nothing is there yet; at most 2000 rounds. */
static size_t read_reply(struct event_base *base, int fd, char *buf, size_t cap)
{
    size_t len = 0;
    for (int turn = 0; turn < 2000; turn++) {
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        char chunk[4096];
        ssize_t n = recv(fd, chunk, sizeof(chunk), MSG_DONTWAIT);
        if (n == 0)
            break;
        if (n < 0)
            continue;
        size_t take = (size_t)n < cap - 1 - len ? (size_t)n : cap - 1 - len;
        memcpy(buf + len, chunk, take);
        len += take;
    }
    buf[len] = '\0';
    return len;
}

/* Connections in <a> that linger: their reply written, our side shut. */
static unsigned lingering(const struct admin *a)
{
    unsigned n = 0;
    for (const struct admin_conn *c = a->conns; c != NULL; c = c->next)
        n += c->state == AC_LINGER;
    return n;
}

/* A health check's answer while <base> runs: the reply of a new client
 * that asks "GET /healthz", read into <buf> (empty when none came). */
static void health_check(struct event_base *base, const struct sockaddr_in *sin, char *buf,
                         size_t cap)
{
    static const char req[] = "GET /healthz HTTP/1.1\r\n\r\n";
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (const struct sockaddr *)sin, sizeof(*sin)), 0);
    assert_int_equal(write(fd, req, sizeof(req) - 1), (ssize_t)(sizeof(req) - 1));
    read_reply(base, fd, buf, cap);
    close(fd);
}

/* 64 clients that ask for /metrics and never read held every slot, each
 * for ADMIN_REPLY_MS (10 s), the listener off meanwhile: a health check
 * (a supervisor's, a load balancer's) waited that long or timed out. Now
 * 8 slots are kept from /metrics replies that wait: the 57th scrape at
 * once gets a 503, and the health check its answer. */
static void health_checks_answered_while_scrapes_wait(void **state)
{
    (void)state;
    struct rig r;
    rig_open(&r);
    enum { NCLIENTS = ADMIN_CONNS_MAX, KEPT = 8 };
    int fds[NCLIENTS];
    static char reply[65536];
    ask_metrics(&r.sin, fds, NCLIENTS, 4096);
    for (int turn = 0; turn < 2000 && r.a->nconns + lingering(r.a) < NCLIENTS + KEPT; turn++)
        event_base_loop(r.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_true(r.a->latest_len > (6u << 20)); /* more than the kernel takes at once */
    unsigned held = replying(r.a);
    unsigned refused = 0;
    for (int i = 0; i < NCLIENTS; i++) {
        ssize_t n = recv(fds[i], reply, 64, MSG_PEEK | MSG_DONTWAIT);
        refused += n > 0 && strncmp(reply, "HTTP/1.1 503 ", 13) == 0;
    }
    health_check(r.base, &r.sin, reply, sizeof(reply));
    bool answered = strncmp(reply, "HTTP/1.1 200 OK\r\n", 17) == 0 && strstr(reply, "\r\n\r\nok\n");
    rig_close(&r, fds, NCLIENTS);
    if (held != NCLIENTS - KEPT || refused != KEPT || !answered)
        fail_msg("%u /metrics replies held, %u refused, health check %s", held, refused,
                 answered ? "answered" : "not answered");
}

/* 64 clients whose reply is written but who neither read it nor close
 * held every slot for ADMIN_LINGER_MS, the listener off: a new connection
 * now takes the slot of the oldest of them (its reply is the kernel's to
 * send), and a health check is answered at once. */
static void lingering_clients_give_way(void **state)
{
    (void)state;
    struct rig r;
    rig_open(&r);
    static const char req[] = "GET /healthz HTTP/1.1\r\n\r\n";
    enum { NCLIENTS = ADMIN_CONNS_MAX };
    int fds[NCLIENTS];
    static char reply[4096];
    for (int i = 0; i < NCLIENTS; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fds[i] >= 0);
        assert_int_equal(connect(fds[i], (const struct sockaddr *)&r.sin, sizeof(r.sin)), 0);
        assert_int_equal(write(fds[i], req, sizeof(req) - 1), (ssize_t)(sizeof(req) - 1));
    }
    for (int turn = 0; turn < 2000 && lingering(r.a) < NCLIENTS; turn++)
        event_base_loop(r.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    unsigned lingered = lingering(r.a);
    health_check(r.base, &r.sin, reply, sizeof(reply));
    bool answered = strncmp(reply, "HTTP/1.1 200 OK\r\n", 17) == 0;
    rig_close(&r, fds, NCLIENTS);
    if (lingered != NCLIENTS || !answered)
        fail_msg("%u lingering, health check %s", lingered, answered ? "answered" : "not answered");
}

/* Each scrape built a body of its own on the event loop (~65 ms for 4096
 * agents, -O3), so a client scraping in a loop, or 64 at once, took the
 * loop from proxied traffic. 20 scrapes in a burst now build one body (20
 * before); a scrape once the window is over sees what was counted since,
 * and an idle server lets the body go. */
static void a_burst_of_scrapes_builds_one_body(void **state)
{
    (void)state;
    struct metrics *m = metrics_new();
    assert_non_null(m);
    struct egress_event ev = {.kind = EVENT_EGRESS, .agent = "early"};
    metrics_on_event(&ev, m);
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct sockaddr_in sin;
    struct admin *a = counting_server(base, m, &sin);

    enum { NCLIENTS = 20 };
    int fds[NCLIENTS];
    static char reply[8192];
    a->fresh_ms = 3600000; /* the burst within the window however slow the machine */
    formats = 0;
    ask_metrics(&sin, fds, NCLIENTS, 0);
    for (int i = 0; i < NCLIENTS; i++) {
        read_reply(base, fds[i], reply, sizeof(reply));
        assert_non_null(strstr(reply, "HTTP/1.1 200 OK\r\n"));
        assert_non_null(strstr(reply, "agent=\"early\""));
        close(fds[i]);
    }
    assert_int_equal(formats, 1);

    /* the window over: a new body, with what was counted meanwhile */
    ev.agent = "late";
    metrics_on_event(&ev, m);
    a->fresh_ms = 1;
    for (int i = 0; i < 100 && monotonic_ms() - a->latest_ms < a->fresh_ms; i++)
        usleep(2000);
    ask_metrics(&sin, fds, 1, 0);
    read_reply(base, fds[0], reply, sizeof(reply));
    close(fds[0]);
    assert_int_equal(formats, 2);
    assert_non_null(strstr(reply, "agent=\"late\""));
    /* and once no reply holds it, its expiry lets it go */
    for (int turn = 0; turn < 100 && a->latest != NULL; turn++) {
        usleep(2000);
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
    assert_null(a->latest);

    admin_free(a);
    event_base_free(base);
    metrics_free(m);
}

/* The head of the reply to "GET /healthz" of a fresh admin server on a
 * clock that reads <now>, into <head> (the part before the blank line). */
static void healthz_head_at(time_t now, char *head, size_t cap)
{
    struct metrics *m = metrics_new();
    assert_non_null(m);
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct sockaddr_in sin;
    struct admin *a = counting_server(base, m, &sin);
    static const char req[] = "GET /healthz HTTP/1.1\r\n\r\n";
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (const struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(write(fd, req, sizeof(req) - 1), (ssize_t)(sizeof(req) - 1));
    fake_realtime = now;
    read_reply(base, fd, head, cap);
    fake_realtime = 0;
    close(fd);
    char *end = strstr(head, "\r\n\r\n");
    assert_non_null(end);
    end[2] = '\0';
    admin_free(a);
    event_base_free(base);
    metrics_free(m);
}

/* RFC 9110 6.6.1: a reply carries the Date of the clock, right after its
 * status line; a clock past year 9999, whose date has no IMF-fixdate,
 * leaves the field out (it was sent empty: "Date: "). */
static void replies_dated_or_undated(void **state)
{
    (void)state;
    char head[1024];
    healthz_head_at(784111777, head, sizeof(head));
    assert_string_equal(head, "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
                              "Content-Type: text/plain\r\nContent-Length: 3\r\n"
                              "Connection: close\r\n");
    healthz_head_at((time_t)253402300800, head, sizeof(head)); /* 10000-01-01 */
    assert_string_equal(head, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                              "Content-Length: 3\r\nConnection: close\r\n");
}

/* Makes one accept() of a fresh admin server fail with <err> while a
 * client waits, then runs the loop without blocking, at most 20 rounds,
 * until the client is taken. Returns whether it was, and what the server
 * wrote to standard error meanwhile in <said>. */
static bool accept_after_error(int err, char *said, size_t cap)
{
    struct metrics *m = metrics_new();
    assert_non_null(m);
    struct event_base *base = event_base_new();
    assert_non_null(base);
    char addr[32], msg[256];
    uint16_t port = free_port();
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)port);
    struct admin *a = admin_at(base, addr, m, msg, sizeof(msg));
    assert_non_null(a);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    sin.sin_port = htons(port);
    int cl = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(cl >= 0);
    assert_int_equal(connect(cl, (struct sockaddr *)&sin, sizeof(sin)), 0);
    struct stderr_capture capture;
    stderr_capture_begin(&capture);
    fail_next_accept = err;
    for (int i = 0; i < 20 && a->nconns == 0; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    bool taken = a->nconns == 1;
    stderr_capture_end(&capture, said, cap);
    fail_next_accept = 0;
    close(cl);
    admin_free(a);
    event_base_free(base);
    metrics_free(m);
    return taken;
}

/* Which accept() errors pause it (accept_fail.h). */
static void accept_errors_that_pause(void **state)
{
    (void)state;
    check_accept_errors(accept_after_error, "accept: Too many open files: pausing for 250 ms");
}

/* Which listen addresses are loopback, so that no warning says the admin
 * server is reachable from beyond this host: an IPv4-mapped 127/8 address
 * is loopback too (an AF_INET6 socket bound to it takes only 127.0.0.1).
 * A name is judged by the address it gave. */
static void loopback_addresses(void **state)
{
    (void)state;
    const char *const yes[] = {
        "127.0.0.1:1",          "127.255.0.9:1", "[::1]:1", "[::ffff:127.0.0.1]:1",
        "[::FFFF:127.1.2.3]:1", "localhost:1",   "1"};
    const char *const no[] = {
        "0.0.0.0:1",           "10.0.0.1:1",      "128.0.0.1:1",        "[::]:1",
        "[::ffff:10.0.0.1]:1", "[::127.0.0.1]:1", "[::ffff:0.0.0.0]:1", "[fe80::1]:1"};
    struct listen_addr a;
    const char *why;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        assert_int_equal(listen_addr_parse_admin(yes[i], &a, &why), 0);
        if (!sockaddr_is_loopback(&a.ss))
            fail_msg("%s is not loopback", yes[i]);
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        assert_int_equal(listen_addr_parse_admin(no[i], &a, &why), 0);
        if (sockaddr_is_loopback(&a.ss))
            fail_msg("%s is loopback", no[i]);
    }
}

/* An admin server on [::ffff:127.0.0.1] binds and says no warning. */
static void mapped_loopback_is_not_warned_about(void **state)
{
    (void)state;
    struct metrics *m = metrics_new();
    assert_non_null(m);
    struct event_base *base = event_base_new();
    assert_non_null(base);
    char addr[48], msg[256], said[512];
    snprintf(addr, sizeof(addr), "[::ffff:127.0.0.1]:%u", (unsigned)free_port());
    struct stderr_capture capture;
    stderr_capture_begin(&capture);
    struct admin *a = admin_at(base, addr, m, msg, sizeof(msg));
    stderr_capture_end(&capture, said, sizeof(said));
    assert_non_null(a);
    assert_string_equal(said, "");
    admin_free(a);
    event_base_free(base);
    metrics_free(m);
}

static unsigned flip_lookups; /* names flip_resolver() was asked */

/* A name that gives another address at each lookup, as a /etc/hosts
 * edited between two would: 127.0.0.1, then 127.0.0.2, ... */
static int flip_resolver(const char *host, uint16_t port, bool v6_literal,
                         struct sockaddr_storage *ss, socklen_t *sslen)
{
    (void)host;
    (void)v6_literal;
    struct sockaddr_in *in = (struct sockaddr_in *)(void *)ss;
    memset(ss, 0, sizeof(*ss));
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    in->sin_addr.s_addr = htonl(0x7f000001 + flip_lookups++);
    *sslen = sizeof(*in);
    return 0;
}

/* A named --admin is looked up once, as serve reads the option: the
 * server binds the address that gave, and admin_addr() tells the address
 * bound, which the gateway's self_request covers (listener_describe() of
 * it, gate/gateway.c describe_admin()). Before, the bind and the gateway
 * looked the name up again each: a name that moved between them had the
 * guard cover an address nothing listened on. */
static void a_named_admin_is_looked_up_once(void **state)
{
    (void)state;
    struct metrics *m = metrics_new();
    struct event_base *base = event_base_new();
    assert_non_null(m);
    assert_non_null(base);
    char text[64], msg[256];
    uint16_t port = free_port();
    snprintf(text, sizeof(text), "adm.flip.test:%u", (unsigned)port);
    flip_lookups = 0;
    listen_addr_resolver before = listen_addr_set_resolver(flip_resolver);
    struct admin *a = admin_at(base, text, m, msg, sizeof(msg));
    listen_addr_set_resolver(before);
    assert_non_null(a);
    assert_int_equal(flip_lookups, 1);
    const struct listen_addr *bound = admin_addr(a);
    char want[32];
    snprintf(want, sizeof(want), "127.0.0.1:%u", (unsigned)port);
    assert_string_equal(bound->text, want);
    assert_string_equal(bound->host, "adm.flip.test"); /* self_request by name */
    struct listener *self = listener_describe(bound);
    assert_non_null(self);
    struct ipaddr first, second;
    ipaddr_from_v4(&first, 0x7f000001);
    ipaddr_from_v4(&second, 0x7f000002);
    assert_true(listener_covers(self, &first, port));
    assert_false(listener_covers(self, &second, port));
    listener_free(self);
    admin_free(a);
    event_base_free(base);
    metrics_free(m);
}

int main(void)
{
    event_set_mem_functions(counting_malloc, counting_realloc, counting_free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(heads_that_parse),
        cmocka_unit_test(host_names_told_apart),
        cmocka_unit_test(heads_not_yet_complete),
        cmocka_unit_test(heads_that_are_bad),
        cmocka_unit_test(slow_scrapers_share_one_body),
        cmocka_unit_test(a_shared_body_costs_each_reply_little),
        cmocka_unit_test(health_checks_answered_while_scrapes_wait),
        cmocka_unit_test(lingering_clients_give_way),
        cmocka_unit_test(a_burst_of_scrapes_builds_one_body),
        cmocka_unit_test(replies_dated_or_undated),
        cmocka_unit_test(accept_errors_that_pause),
        cmocka_unit_test(loopback_addresses),
        cmocka_unit_test(mapped_loopback_is_not_warned_about),
        cmocka_unit_test(a_named_admin_is_looked_up_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
