/* Unit tests for gate/resolve.c, on a real event loop: the static map, a
 * fake DNS server on 127.0.0.1 (an ephemeral UDP port) answering A/AAAA,
 * NXDOMAIN, SERVFAIL, empty answers and silence, cancellation, reload and
 * the no-server case. Addresses in answers are only parsed, never
 * contacted; no query ever leaves the loopback. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/event_struct.h>

/* The unit under test, with its resolv.conf path under our control. */
static const char *test_resolv_conf = "/nonexistent/resolv.conf";
#define RESOLV_CONF test_resolv_conf
#include "gate/resolve.c"

#include "ev_alloc_count.h"
#include "util/libevent_log.h"

/* ------------------------------------------------------ fake DNS server */

struct fake_dns {
    int fd;
    uint16_t port;
    struct event *ev;
    int queries;
    int answered;
    bool mute;          /* counts questions, never answers */
    uint8_t last_octet; /* distinguishes two servers' answers */
    uint32_t ttl;       /* of every answer record (60) */
    char addr[32];      /* "127.0.0.1:PORT" */
    char last[256];     /* the name of the last question */
};

static size_t put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
    return 2;
}

/* Appends one answer record (name = pointer to the question). */
static size_t add_rr(uint8_t *p, uint16_t type, const uint8_t *rdata, uint16_t len, uint32_t ttl)
{
    size_t o = 0;
    o += put16(p + o, 0xc00c);
    o += put16(p + o, type);
    o += put16(p + o, 1);
    o += put16(p + o, (uint16_t)(ttl >> 16));
    o += put16(p + o, (uint16_t)ttl);
    o += put16(p + o, len);
    memcpy(p + o, rdata, len);
    return o + len;
}

static void on_query(evutil_socket_t fd, short what, void *arg)
{
    struct fake_dns *d = arg;
    uint8_t q[512], r[1500];
    struct sockaddr_storage from;
    socklen_t fromlen = sizeof(from);
    char name[256];
    size_t nlen = 0;
    (void)what;

    ssize_t n = recvfrom(fd, q, sizeof(q), 0, (struct sockaddr *)&from, &fromlen);
    if (n < 12)
        return;
    d->queries++;
    /* Question name, as dotted text (lower case) for the lookup table. */
    size_t o = 12;
    while (o < (size_t)n && q[o] != 0) {
        size_t l = q[o++];
        if (o + l > (size_t)n || nlen + l + 1 >= sizeof(name))
            return;
        if (nlen > 0)
            name[nlen++] = '.';
        for (size_t i = 0; i < l; i++)
            name[nlen++] = (char)(q[o + i] | 0x20);
        o += l;
    }
    name[nlen] = '\0';
    snprintf(d->last, sizeof(d->last), "%s", name);
    if (d->mute || o + 5 > (size_t)n)
        return;
    uint16_t qtype = (uint16_t)(q[o + 1] << 8 | q[o + 2]);
    size_t qend = o + 5;

    int rcode = 0;
    size_t an = 0, ro = qend;
    memcpy(r, q, qend);
    if (strcmp(name, "slow.test") == 0 || (strcmp(name, "half.test") == 0 && qtype == 28) ||
        (strcmp(name, "v6half.test") == 0 && qtype == 1))
        return; /* silence */
    if (strcmp(name, "nx.test") == 0) {
        rcode = 3;
    } else if (strcmp(name, "fail.test") == 0) {
        rcode = 2;
    } else if (strcmp(name, "formerr.test") == 0) {
        rcode = 1;
    } else if (strcmp(name, "notimp.test") == 0) {
        rcode = 4;
    } else if (strcmp(name, "refused.test") == 0) {
        rcode = 5;
    } else if (strcmp(name, "one.test") == 0 || strcmp(name, "half.test") == 0 ||
               strcmp(name, "v6half.test") == 0) {
        if (qtype == 1) {
            uint8_t a[4] = {192, 0, 2, d->last_octet};
            ro += add_rr(r + ro, 1, a, 4, d->ttl);
            an++;
        } else if (qtype == 28) {
            uint8_t a6[16] = {0x20, 0x01, 0x0d, 0xb8};
            a6[15] = d->last_octet;
            ro += add_rr(r + ro, 28, a6, 16, d->ttl);
            an++;
        }
    } else if (strcmp(name, "v6only.test") == 0) {
        if (qtype == 28) {
            uint8_t a6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6};
            ro += add_rr(r + ro, 28, a6, 16, d->ttl);
            an++;
        }
    } else if (strcmp(name, "many.test") == 0) {
        int count = qtype == 1 ? 20 : 3;
        for (int i = 0; i < count; i++) {
            uint8_t a[4] = {203, 0, 113, (uint8_t)(i + 1)};
            uint8_t a6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, (uint8_t)i};
            ro += qtype == 1 ? add_rr(r + ro, 1, a, 4, d->ttl) : add_rr(r + ro, 28, a6, 16, d->ttl);
            an++;
        }
    } else if (strcmp(name, "empty.test") != 0) {
        rcode = 3;
    }
    r[2] = 0x81; /* QR, RD */
    r[3] = (uint8_t)(0x80 | rcode);
    put16(r + 4, 1);
    put16(r + 6, (uint16_t)an);
    put16(r + 8, 0);
    put16(r + 10, 0);
    if (sendto(fd, r, ro, 0, (struct sockaddr *)&from, fromlen) == (ssize_t)ro)
        d->answered++;
}

static void fake_start(struct fake_dns *d, struct event_base *base, uint8_t last_octet)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t len = sizeof(sin);
    memset(d, 0, sizeof(*d));
    d->last_octet = last_octet;
    d->ttl = 60;
    d->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(d->fd >= 0);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(d->fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(getsockname(d->fd, (struct sockaddr *)&sin, &len), 0);
    d->port = ntohs(sin.sin_port);
    snprintf(d->addr, sizeof(d->addr), "127.0.0.1:%u", d->port);
    d->ev = event_new(base, d->fd, EV_READ | EV_PERSIST, on_query, d);
    event_add(d->ev, NULL);
}

static void fake_stop(struct fake_dns *d)
{
    event_free(d->ev);
    close(d->fd);
}

/* ------------------------------------------------------------ helpers */

struct result {
    int calls;
    int err;
    size_t n;
    struct ipaddr a[RESOLVE_MAX_ADDRS];
    struct event_base *base;
};

static void on_result(int err, const struct ipaddr *addrs, size_t n, void *arg)
{
    struct result *r = arg;
    r->calls++;
    r->err = err;
    r->n = n;
    assert_true(n <= RESOLVE_MAX_ADDRS);
    if (n > 0)
        memcpy(r->a, addrs, n * sizeof(*addrs));
    else
        assert_null(addrs);
    event_base_loopbreak(r->base);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

/* Runs <base> until a callback breaks it or <ms> pass. */
static void run(struct event_base *base, int ms)
{
    struct event *t = evtimer_new(base, on_timer, base);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(t, &tv);
    event_base_dispatch(base);
    event_free(t);
}

/* Runs until <r> has been called or <ms> pass. */
static void run_until(struct event_base *base, struct result *r, int ms)
{
    for (int i = 0; i < ms / 10 && r->calls == 0; i++)
        run(base, 10);
}

static struct ipaddr v4(const char *s)
{
    struct ipaddr a;
    memset(&a, 0, sizeof(a));
    a.b[10] = a.b[11] = 0xff;
    assert_int_equal(inet_pton(AF_INET, s, a.b + 12), 1);
    return a;
}

static struct ipaddr v6(const char *s)
{
    struct ipaddr a;
    assert_int_equal(inet_pton(AF_INET6, s, a.b), 1);
    return a;
}

static void assert_addr(const struct ipaddr *got, struct ipaddr want)
{
    assert_memory_equal(got->b, want.b, 16);
}

static struct resolver *new_resolver(struct event_base *base, const char *server,
                                     struct dns_static *statics, size_t nstatics)
{
    char *servers[1] = {(char *)(uintptr_t)server};
    struct dns_cfg cfg = {.servers = server ? servers : NULL,
                          .nservers = server ? 1 : 0,
                          .statics = statics,
                          .nstatics = nstatics};
    char *err = NULL;
    struct resolver *r = resolver_new(base, &cfg, &err);
    if (r == NULL)
        fail_msg("resolver_new: %s", err ? err : "?");
    assert_null(err);
    return r;
}

/* -------------------------------------------------------------- tests */

static void test_static_map(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct dns_static st[] = {
        {.name = "api.example.test", .addr = v4("127.0.0.2")},
        {.name = "dual.example.test", .addr = v4("127.0.0.3")},
        {.name = "dual.example.test", .addr = v6("::1")},
    };
    struct resolver *r = new_resolver(base, d.addr, st, 3);
    /* The resolver copied the map: clobber ours. */
    st[0].name = "changed";

    struct result res = {.base = base};
    assert_non_null(resolver_lookup(r, "api.example.test", on_result, &res));
    /* Never synchronously inside the lookup. */
    assert_int_equal(res.calls, 0);
    run_until(base, &res, 1000);
    assert_int_equal(res.calls, 1);
    assert_int_equal(res.err, 0);
    assert_int_equal(res.n, 1);
    assert_addr(&res.a[0], v4("127.0.0.2"));

    struct result dual = {.base = base};
    assert_non_null(resolver_lookup(r, "dual.example.test", on_result, &dual));
    run_until(base, &dual, 1000);
    assert_int_equal(dual.n, 2);
    assert_addr(&dual.a[0], v4("127.0.0.3"));
    assert_addr(&dual.a[1], v6("::1"));
    /* The server was never asked. */
    assert_int_equal(d.queries, 0);

    /* IP literals are answered as themselves, also without a query. */
    struct result lit = {.base = base};
    assert_non_null(resolver_lookup(r, "192.0.2.9", on_result, &lit));
    assert_int_equal(lit.calls, 0);
    run_until(base, &lit, 1000);
    assert_int_equal(lit.err, 0);
    assert_int_equal(lit.n, 1);
    assert_addr(&lit.a[0], v4("192.0.2.9"));
    struct result lit6 = {.base = base};
    assert_non_null(resolver_lookup(r, "2001:db8::7", on_result, &lit6));
    run_until(base, &lit6, 1000);
    assert_addr(&lit6.a[0], v6("2001:db8::7"));
    assert_int_equal(d.queries, 0);

    resolver_free(r);
    fake_stop(&d);
    event_base_free(base);
}

/* A map of 10,000 names, sorted as the loader sorts it: every name found
 * (the first, the last, one in the middle, and a name listed twice, both
 * its addresses), none that is not listed, and never a server asked. */
#define MANY_STATICS 10000

static void assert_static(struct event_base *base, struct resolver *r, const char *name,
                          struct ipaddr want)
{
    struct result res = {.base = base};
    assert_non_null(resolver_lookup(r, name, on_result, &res));
    run_until(base, &res, 1000);
    assert_int_equal(res.calls, 1);
    assert_int_equal(res.err, 0);
    assert_int_equal(res.n, 1);
    assert_addr(&res.a[0], want);
    assert_false(resolver_asks_servers(r, name));
}

static struct ipaddr v4_of(uint32_t i)
{
    struct ipaddr a = v4("127.0.0.0");
    a.b[13] = (uint8_t)(i >> 16);
    a.b[14] = (uint8_t)(i >> 8);
    a.b[15] = (uint8_t)i;
    return a;
}

static void test_static_map_many(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct dns_static *st = calloc(MANY_STATICS + 1, sizeof(*st));
    char(*names)[32] = calloc(MANY_STATICS, sizeof(*names));
    assert_non_null(st);
    assert_non_null(names);
    for (uint32_t i = 0; i < MANY_STATICS; i++) {
        snprintf(names[i], sizeof(names[i]), "h%05u.example.test", (unsigned)i);
        st[i] = (struct dns_static){.name = names[i], .addr = v4_of(i + 1), .line = (int)i};
    }
    /* the last name twice (a caller's map may list one more than once) */
    st[MANY_STATICS] = (struct dns_static){
        .name = names[MANY_STATICS - 1], .addr = v6("::1"), .line = MANY_STATICS};
    for (size_t i = 1; i <= MANY_STATICS; i++)
        assert_true(dns_static_cmp(&st[i - 1], &st[i]) < 0);
    struct resolver *r = new_resolver(base, d.addr, st, MANY_STATICS + 1);

    assert_static(base, r, "h00000.example.test", v4_of(1));
    assert_static(base, r, "h05000.example.test", v4_of(5001));
    assert_static(base, r, "h09998.example.test", v4_of(9999));
    struct result two = {.base = base};
    assert_non_null(resolver_lookup(r, "h09999.example.test", on_result, &two));
    run_until(base, &two, 1000);
    assert_int_equal(two.n, 2);
    assert_addr(&two.a[0], v4_of(MANY_STATICS));
    assert_addr(&two.a[1], v6("::1"));
    /* every one of them */
    for (uint32_t i = 0; i < MANY_STATICS; i++)
        assert_false(resolver_asks_servers(r, names[i]));
    assert_int_equal(d.queries, 0);
    /* not listed: before the first, after the last, between two */
    assert_true(resolver_asks_servers(r, "a.example.test"));
    assert_true(resolver_asks_servers(r, "h00000.example.tes"));
    assert_true(resolver_asks_servers(r, "h05000x.example.test"));
    assert_true(resolver_asks_servers(r, "h10000.example.test"));
    assert_true(resolver_asks_servers(r, "z.example.test"));
    assert_true(resolver_asks_servers(r, "H00000.example.test")); /* not the normal form */

    resolver_free(r);
    free(names);
    free(st);
    fake_stop(&d);
    event_base_free(base);
}

static void test_server_answers(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);

    struct result res = {.base = base};
    assert_non_null(resolver_lookup(r, "one.test", on_result, &res));
    assert_int_equal(res.calls, 0);
    run_until(base, &res, 3000);
    assert_int_equal(res.calls, 1);
    assert_int_equal(res.err, 0);
    assert_int_equal(res.n, 2);
    assert_addr(&res.a[0], v4("192.0.2.1"));   /* A first */
    assert_addr(&res.a[1], v6("2001:db8::1")); /* then AAAA */
    assert_int_equal(d.queries, 2);

    struct result v6o = {.base = base};
    assert_non_null(resolver_lookup(r, "v6only.test", on_result, &v6o));
    run_until(base, &v6o, 3000);
    assert_int_equal(v6o.err, 0);
    assert_int_equal(v6o.n, 1);
    assert_addr(&v6o.a[0], v6("2001:db8::6"));

    /* 20 A + 3 AAAA records: bounded to RESOLVE_MAX_ADDRS, A first. */
    struct result many = {.base = base};
    assert_non_null(resolver_lookup(r, "many.test", on_result, &many));
    run_until(base, &many, 3000);
    assert_int_equal(many.err, 0);
    assert_int_equal(many.n, RESOLVE_MAX_ADDRS);
    assert_addr(&many.a[0], v4("203.0.113.1"));
    assert_addr(&many.a[15], v4("203.0.113.16"));

    resolver_free(r);
    fake_stop(&d);
    event_base_free(base);
}

static void test_errors(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);

    static const struct {
        const char *name;
        int err;
    } cases[] = {
        {"nx.test", RESOLVE_ERR_NXDOMAIN},
        {"empty.test", RESOLVE_ERR_NODATA},  /* NOERROR, no records: not "no such name" */
        {"999.1.2.3.4", RESOLVE_ERR_FAILED}, /* invalid IP literal: never queried */
        {"", RESOLVE_ERR_FAILED},
        /* SERVFAIL at once: evdns hands it over as a timeout, but it is
         * no timeout (the lone server is asked twice). */
        {"fail.test", RESOLVE_ERR_SERVFAIL},
        /* The other answers of a server that will not answer: each told as
         * what it is, not as a bare failure. */
        {"refused.test", RESOLVE_ERR_REFUSED},
        {"notimp.test", RESOLVE_ERR_NOTIMP},
        {"formerr.test", RESOLVE_ERR_FORMERR},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct result res = {.base = base};
        assert_non_null(resolver_lookup(r, cases[i].name, on_result, &res));
        assert_int_equal(res.calls, 0);
        run_until(base, &res, 3000);
        if (res.calls != 1 || res.err != cases[i].err)
            fail_msg("%s: calls %d err %d, want err %d", cases[i].name, res.calls, res.err,
                     cases[i].err);
        assert_int_equal(res.n, 0);
    }
    /* The SERVFAILs, REFUSEDs, NOTIMPs and FORMERRs were failures of the
     * server, not timeouts nor answers. */
    struct resolve_server_stats st;
    assert_int_equal(resolver_server_stats(r, &st, 1), 1);
    assert_int_equal(st.timeouts, 0);
    assert_int_equal(st.failures, 16); /* four names: A and AAAA, twice each */
    /* A name longer than any host name fails without a query. */
    char longname[300];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    int before = d.queries;
    struct result res = {.base = base};
    assert_non_null(resolver_lookup(r, longname, on_result, &res));
    run_until(base, &res, 1000);
    assert_int_equal(res.err, RESOLVE_ERR_FAILED);
    assert_int_equal(d.queries, before);

    resolver_free(r);
    fake_stop(&d);
    event_base_free(base);
}

static void test_timeout(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);
    r->try_ms = 200; /* a try ends after 200 ms here */

    struct result res = {.base = base};
    assert_non_null(resolver_lookup(r, "slow.test", on_result, &res));
    run_until(base, &res, 5000);
    assert_int_equal(res.calls, 1);
    assert_int_equal(res.err, RESOLVE_ERR_TIMEOUT);
    /* attempts:2 -> each of A and AAAA was sent twice. */
    assert_int_equal(d.queries, 4);

    resolver_free(r);
    run(base, 50); /* the tries cancelled at their end report */
    fake_stop(&d);
    event_base_free(base);
}

static void never(int err, const struct ipaddr *addrs, size_t n, void *arg)
{
    (void)err;
    (void)addrs;
    (void)n;
    (void)arg;
    fail_msg("callback after cancel");
}

static void test_cancel(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct dns_static st[] = {{.name = "static.test", .addr = v4("127.0.0.2")}};
    struct resolver *r = new_resolver(base, d.addr, st, 1);

    /* Cancelled before the answer: the server answers, nobody is called. */
    struct resolve_req *q = resolver_lookup(r, "one.test", never, NULL);
    assert_non_null(q);
    resolve_cancel(q);
    /* A static answer cancelled before the next loop turn. */
    q = resolver_lookup(r, "static.test", never, NULL);
    assert_non_null(q);
    resolve_cancel(q);
    /* A failure known up front, cancelled. */
    q = resolver_lookup(r, "", never, NULL);
    resolve_cancel(q);
    resolve_cancel(NULL);
    run(base, 300);

    /* Cancelled half-way: A answered, AAAA outstanding. */
    q = resolver_lookup(r, "half.test", never, NULL);
    for (int i = 0; i < 100 && d.answered < 3; i++)
        run(base, 10);
    assert_true(d.answered >= 1);
    resolve_cancel(q);
    run(base, 200);

    /* The resolver still works afterwards. */
    struct result res = {.base = base};
    assert_non_null(resolver_lookup(r, "one.test", on_result, &res));
    run_until(base, &res, 3000);
    assert_int_equal(res.err, 0);
    assert_int_equal(res.n, 2);

    resolver_free(r);
    fake_stop(&d);
    event_base_free(base);
}

static void test_free_with_lookups_in_flight(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct dns_static st[] = {{.name = "static.test", .addr = v4("127.0.0.2")}};
    struct resolver *r = new_resolver(base, d.addr, st, 1);
    assert_non_null(resolver_lookup(r, "slow.test", never, NULL));
    assert_non_null(resolver_lookup(r, "half.test", never, NULL));
    for (int i = 0; i < 100 && d.answered < 1; i++)
        run(base, 10); /* half.test's A answer is in */
    assert_non_null(resolver_lookup(r, "static.test", never, NULL));
    assert_non_null(resolver_lookup(r, "", never, NULL));
    resolver_free(r);
    resolver_free(NULL);
    /* The loop delivers evdns' cancellations; nothing reaches us, and the
     * requests are released (LeakSanitizer checks). */
    run(base, 200);
    fake_stop(&d);
    event_base_free(base);
}

/* Makes a resolv.conf of <text> under /tmp, its name in <path> (64 bytes),
 * and has the resolver read it (test_resolv_conf); the caller unlinks it. */
static void temp_resolv_conf(char *path, const char *text)
{
    snprintf(path, 64, "/tmp/sluice-test-resolv.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    test_resolv_conf = path;
}

static void test_no_servers(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[64];
    temp_resolv_conf(path, "# nothing here\nsearch example.test\noptions ndots:1\n");

    const char *const confs[] = {"/nonexistent/resolv.conf", path};
    for (size_t i = 0; i < 2; i++) {
        test_resolv_conf = confs[i];
        struct resolver *r = new_resolver(base, NULL, NULL, 0);
        assert_int_equal(r->nns, 0);
        struct result res = {.base = base};
        assert_non_null(resolver_lookup(r, "one.test", on_result, &res));
        assert_int_equal(res.calls, 0);
        run_until(base, &res, 1000);
        assert_int_equal(res.calls, 1);
        assert_int_equal(res.err, RESOLVE_ERR_NO_SERVERS);
        resolver_free(r);
    }
    unlink(path);
    test_resolv_conf = "/nonexistent/resolv.conf";
    event_base_free(base);
}

static void test_resolv_conf_servers(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 4);
    char path[64], text[128];
    snprintf(text, sizeof(text), "search example.test\nnameserver %s\n", d.addr);
    temp_resolv_conf(path, text);

    struct resolver *r = new_resolver(base, NULL, NULL, 0);
    assert_int_equal(r->nns, 1);
    struct result res = {.base = base};
    assert_non_null(resolver_lookup(r, "one.test", on_result, &res));
    run_until(base, &res, 3000);
    assert_int_equal(res.err, 0);
    assert_addr(&res.a[0], v4("192.0.2.4"));
    /* No search domains: "one.test" was asked as is, once per type. */
    assert_int_equal(d.queries, 2);
    /* Nor for a name that does not exist, with few dots, even on a base
     * that has a search list (as one initialised from resolv.conf would):
     * the policy decided on "nx.test", and "nx.test.example.test" is
     * another name. */
    assert_int_equal(evdns_base_set_option(r->ns[0].dns, "ndots:", "5"), 0);
    evdns_base_search_add(r->ns[0].dns, "example.test");
    struct result nx = {.base = base};
    assert_non_null(resolver_lookup(r, "nx.test", on_result, &nx));
    run_until(base, &nx, 3000);
    assert_int_equal(nx.calls, 1);
    assert_int_equal(nx.err, RESOLVE_ERR_NXDOMAIN);
    assert_int_equal(d.queries, 4);

    resolver_free(r);
    unlink(path);
    test_resolv_conf = "/nonexistent/resolv.conf";
    fake_stop(&d);
    event_base_free(base);
}

/* The servers of resolv.conf are asked in the order its lines list them,
 * and the first POLICY_MAX_DNS_SERVERS of them are those kept. */
static void test_resolv_conf_order(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    static const size_t counts[] = {3, POLICY_MAX_DNS_SERVERS + 2};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        char path[64], text[1024] = "search example.test\n";
        for (size_t i = 0; i < counts[c]; i++)
            snprintf(text + strlen(text), sizeof(text) - strlen(text), "nameserver 127.0.0.%zu\n",
                     i + 1);
        temp_resolv_conf(path, text);
        struct resolver *r = new_resolver(base, NULL, NULL, 0);
        struct resolve_server_stats st[POLICY_MAX_DNS_SERVERS + 2];
        size_t n = resolver_server_stats(r, st, sizeof(st) / sizeof(st[0]));
        size_t want = counts[c] < POLICY_MAX_DNS_SERVERS ? counts[c] : POLICY_MAX_DNS_SERVERS;
        assert_int_equal(n, want);
        for (size_t i = 0; i < n; i++) {
            char addr[32];
            snprintf(addr, sizeof(addr), "127.0.0.%zu:53", i + 1);
            assert_string_equal(st[i].addr, addr);
        }
        resolver_free(r);
        unlink(path);
    }
    test_resolv_conf = "/nonexistent/resolv.conf";
    event_base_free(base);
}

static void test_bad_server(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    static const char *const bad[] = {"not-an-ip", "127.0.0.1:99999", "[::1", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *servers[1] = {(char *)(uintptr_t)bad[i]};
        struct dns_cfg cfg = {.servers = servers, .nservers = 1};
        char *err = NULL;
        assert_null(resolver_new(base, &cfg, &err));
        assert_non_null(err);
        free(err);
    }
    event_base_free(base);
}

static void test_reload(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d1, d2;
    fake_start(&d1, base, 1);
    fake_start(&d2, base, 2);
    struct dns_static st1[] = {{.name = "s.test", .addr = v4("127.0.0.2")}};
    struct resolver *r = new_resolver(base, d1.addr, st1, 1);
    r->resolution_delay_ms = 60000; /* half.test's AAAA waited for until the end */

    struct result res = {.base = base};
    assert_non_null(resolver_lookup(r, "one.test", on_result, &res));
    run_until(base, &res, 3000);
    assert_addr(&res.a[0], v4("192.0.2.1"));

    /* Swap the static map and the server. */
    struct dns_static st2[] = {{.name = "s.test", .addr = v4("127.0.0.3")}};
    char *servers2[1] = {d2.addr};
    struct dns_cfg cfg2 = {.servers = servers2, .nservers = 1, .statics = st2, .nstatics = 1};
    /* A lookup in flight on the old server moves to the new one. */
    struct result moved = {.base = base};
    assert_non_null(resolver_lookup(r, "half.test", on_result, &moved));
    assert_int_equal(resolver_reload(r, &cfg2), 0);
    struct result s = {.base = base};
    assert_non_null(resolver_lookup(r, "s.test", on_result, &s));
    run_until(base, &s, 1000);
    assert_addr(&s.a[0], v4("127.0.0.3"));
    res = (struct result){.base = base};
    assert_non_null(resolver_lookup(r, "one.test", on_result, &res));
    run_until(base, &res, 3000);
    assert_int_equal(res.err, 0);
    assert_addr(&res.a[0], v4("192.0.2.2"));

    /* An invalid server list is refused and the old one stays. */
    char *bad[1] = {"nonsense"};
    struct dns_cfg cfgbad = {.servers = bad, .nservers = 1};
    assert_int_equal(resolver_reload(r, &cfgbad), -1);
    res = (struct result){.base = base};
    assert_non_null(resolver_lookup(r, "s.test", on_result, &res));
    run_until(base, &res, 1000);
    assert_addr(&res.a[0], v4("127.0.0.3"));

    /* Reload to no server at all: lookups still in flight end now. The
     * one moved to the new server delivers the A record that server gave
     * (its AAAA never came); the silent one fails. */
    struct result stuck = {.base = base};
    assert_non_null(resolver_lookup(r, "slow.test", on_result, &stuck));
    run(base, 50);
    assert_int_equal(moved.calls, 0);
    assert_int_equal(stuck.calls, 0);
    int d1_queries = d1.queries;
    struct dns_cfg none = {0};
    assert_int_equal(resolver_reload(r, &none), 0);
    for (int i = 0; i < 100 && (moved.calls == 0 || stuck.calls == 0); i++)
        run(base, 10);
    assert_int_equal(moved.calls, 1);
    assert_int_equal(moved.err, 0);
    assert_int_equal(moved.n, 1);
    assert_addr(&moved.a[0], v4("192.0.2.2"));
    assert_int_equal(stuck.calls, 1);
    assert_true(stuck.err < 0);
    assert_int_equal(d1.queries, d1_queries);
    res = (struct result){.base = base};
    assert_non_null(resolver_lookup(r, "one.test", on_result, &res));
    run_until(base, &res, 1000);
    assert_int_equal(res.err, RESOLVE_ERR_NO_SERVERS);
    /* And the static map is gone with the old policy. */
    res = (struct result){.base = base};
    assert_non_null(resolver_lookup(r, "s.test", on_result, &res));
    run_until(base, &res, 1000);
    assert_int_equal(res.err, RESOLVE_ERR_NO_SERVERS);

    resolver_free(r);
    fake_stop(&d1);
    fake_stop(&d2);
    event_base_free(base);
}

/* Looks <name> up and runs the loop until answered (or 3 s). */
static struct result lookup_wait(struct event_base *base, struct resolver *r, const char *name)
{
    struct result res = {.base = base};
    assert_non_null(resolver_lookup(r, name, on_result, &res));
    assert_int_equal(res.calls, 0); /* never inside resolver_lookup() */
    run_until(base, &res, 3000);
    assert_int_equal(res.calls, 1);
    return res;
}

/* Several servers, each asked in turn: a silent one is passed over for the
 * next, which then gets the lookups that follow; a server failure is asked
 * of the next server too; with every server silent a query is tried 4
 * times, never more. */
static void test_failover(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d[5];
    char *servers[5];
    for (int i = 0; i < 5; i++) {
        fake_start(&d[i], base, (uint8_t)(i + 1));
        servers[i] = d[i].addr;
    }
    d[0].mute = true;
    struct dns_cfg cfg = {.servers = servers, .nservers = 2};
    char *err = NULL;
    struct resolver *r = resolver_new(base, &cfg, &err);
    assert_non_null(r);
    assert_int_equal(r->nns, 2);
    r->try_ms = 200; /* a try ends after 200 ms here */

    struct result res = lookup_wait(base, r, "one.test");
    assert_int_equal(res.err, 0);
    assert_addr(&res.a[0], v4("192.0.2.2"));
    assert_int_equal(d[0].queries, 2); /* A and AAAA, once each */
    assert_int_equal(d[1].queries, 2);
    res = lookup_wait(base, r, "v6only.test");
    assert_int_equal(res.err, 0);
    assert_int_equal(d[0].queries, 2); /* not asked again */
    assert_int_equal(d[1].queries, 4);
    struct resolve_server_stats st[3];
    assert_int_equal(resolver_server_stats(r, st, 3), 2);
    assert_string_equal(st[0].addr, d[0].addr);
    assert_string_equal(st[1].addr, d[1].addr);
    assert_int_equal(st[0].timeouts, 2);
    assert_int_equal(st[0].answers + st[0].failures, 0);
    assert_true(st[0].down);
    assert_false(st[1].down);
    assert_int_equal(st[1].answers, 4);
    assert_int_equal(st[1].timeouts + st[1].failures, 0);

    /* SERVFAIL from the one that answers: the other is asked too (evdns
     * reports a SERVFAIL as a timeout, at once; it is counted a failure). */
    d[0].mute = false;
    res = lookup_wait(base, r, "fail.test");
    assert_int_equal(res.err, RESOLVE_ERR_SERVFAIL);
    assert_int_equal(d[0].queries, 4);
    assert_int_equal(d[1].queries, 6);
    assert_int_equal(resolver_server_stats(r, st, 1), 1); /* bounded by <cap> */
    assert_int_equal(resolver_server_stats(r, st, 3), 2);
    assert_int_equal(st[0].timeouts, 2);
    assert_int_equal(st[0].failures, 2);
    assert_int_equal(st[1].timeouts, 0);
    assert_int_equal(st[1].failures, 2);
    resolver_free(r);

    /* Five silent servers: 4 tries per query in all. */
    cfg.nservers = 5;
    r = resolver_new(base, &cfg, &err);
    assert_non_null(r);
    r->try_ms = 200; /* a try ends after 200 ms here */
    int before = 0, after = 0;
    for (int i = 0; i < 5; i++) {
        before += d[i].queries;
        d[i].mute = true;
    }
    res = lookup_wait(base, r, "one.test");
    assert_int_equal(res.err, RESOLVE_ERR_TIMEOUT);
    for (int i = 0; i < 5; i++)
        after += d[i].queries;
    assert_int_equal(after - before, 8);
    resolver_free(r);
    run(base, 50); /* the cancelled tries report */
    for (int i = 0; i < 5; i++)
        fake_stop(&d[i]);
    event_base_free(base);
}

/* A reload that replaces a server frees its base when the server answered
 * last; one that timed out last is kept (evdns' probe of it may be about to
 * report into the base), NAME_SERVER_RETIRED at most. */
static void test_reload_retires_down_servers(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d1, d2;
    fake_start(&d1, base, 1);
    fake_start(&d2, base, 2);
    struct resolver *r = new_resolver(base, d1.addr, NULL, 0);
    char *s1[1] = {d1.addr}, *s2[1] = {d2.addr};
    struct dns_cfg c1 = {.servers = s1, .nservers = 1}, c2 = {.servers = s2, .nservers = 1};

    struct result res = lookup_wait(base, r, "one.test");
    assert_int_equal(res.err, 0);
    assert_false(r->ns[0].st.down);
    assert_int_equal(resolver_reload(r, &c2), 0);
    assert_int_equal(r->retired.n, 0);
    for (size_t i = 0; i < NAME_SERVER_RETIRED + 3; i++) {
        r->ns[0].st.down = true; /* as after a timeout */
        assert_int_equal(resolver_reload(r, i % 2 == 0 ? &c1 : &c2), 0);
        assert_int_equal(r->retired.n, i + 1 < NAME_SERVER_RETIRED ? i + 1 : NAME_SERVER_RETIRED);
    }
    res = lookup_wait(base, r, "one.test");
    assert_int_equal(res.err, 0);
    resolver_free(r);
    fake_stop(&d1);
    fake_stop(&d2);
    event_base_free(base);
}

/* A server evdns took as down is probed (a question for google.com); a
 * base freed while that probe waits for its answer (at a stop, or the
 * oldest retired base going) must not touch the probe's freed handle
 * (evdns_base_free() frees the request, then the server, which cancels the
 * probe it still points to). A REFUSED answer takes the server down at
 * once; the probe comes 100 ms later here, and the mute server holds it
 * (evdns drops a probe's timer whenever nothing is in flight on the base
 * (EVDNS_BASE_DISABLE_WHEN_INACTIVE): slow.test's queries, never answered,
 * keep it). */
static void test_free_with_a_probe_in_flight(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);
    assert_int_equal(evdns_base_set_option(r->ns[0].dns, "initial-probe-timeout:", "0.1"), 0);

    assert_non_null(resolver_lookup(r, "slow.test", never, NULL));
    struct result res = lookup_wait(base, r, "refused.test");
    assert_int_equal(res.err, RESOLVE_ERR_REFUSED);
    d.mute = true;
    int before = d.queries;
    for (int i = 0; i < 300 && d.queries == before; i++)
        run(base, 10);
    assert_int_equal(d.queries, before + 1); /* the probe, held */
    assert_string_equal(d.last, "google.com");
    resolver_free(r);
    run(base, 200);
    fake_stop(&d);
    event_base_free(base);
}

/* Each try ends by the resolver's own timer (r->try_ms), never by evdns':
 * here evdns' own timer is set far past it, and evdns holds one query at a
 * time, so the AAAA query waits in its queue. The lookup still ends after
 * its tries, each counted a timeout, none a SERVFAIL (what evdns' timeout
 * for a try still running is taken for: only a SERVFAIL ends a try so),
 * and nothing queued is sent after it. */
static void test_tries_end_by_their_own_timer(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    d.mute = true;
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);
    assert_int_equal(evdns_base_set_option(r->ns[0].dns, "timeout:", "60"), 0);
    assert_int_equal(evdns_base_set_option(r->ns[0].dns, "max-inflight:", "1"), 0);
    r->try_ms = 100;
    struct result res = lookup_wait(base, r, "one.test");
    assert_int_equal(res.err, RESOLVE_ERR_TIMEOUT);
    struct resolve_server_stats st;
    assert_int_equal(resolver_server_stats(r, &st, 1), 1);
    assert_int_equal(st.timeouts, 4); /* A and AAAA, twice each */
    assert_int_equal(st.failures, 0);
    assert_true(st.down);
    run(base, 100); /* the fake server reads what was sent before the end */
    int sent = d.queries;
    assert_true(sent >= 1 && sent <= 4);
    run(base, 300); /* the cancelled tries report; nothing queued is sent */
    assert_int_equal(d.queries, sent);
    resolver_free(r);
    fake_stop(&d);
    event_base_free(base);
}

/* A waiting request that records when it was called, and may cancel
 * another request or start a lookup of its own from its callback. */
struct waiter {
    struct result res;
    int order; /* 1 for the first called */
    int *seq;
    struct resolve_req **cancel; /* cancelled (and cleared) when called */
    struct resolver *r;
    const char *again; /* looked up again when called, into again_res */
    struct result *again_res;
};

static void on_waiter(int err, const struct ipaddr *addrs, size_t n, void *arg)
{
    struct waiter *w = arg;
    w->order = ++*w->seq;
    if (w->cancel != NULL && *w->cancel != NULL) {
        resolve_cancel(*w->cancel);
        *w->cancel = NULL;
    }
    if (w->again != NULL)
        assert_non_null(resolver_lookup(w->r, w->again, on_result, w->again_res));
    on_result(err, addrs, n, &w->res);
}

/* Lookups of one name while it is in flight share its queries: 16 first
 * contacts send one A and one AAAA query, and all 16 get the answer, in
 * the order they asked. */
static void test_shared_lookup(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);
    struct waiter w[16];
    int seq = 0;

    for (int i = 0; i < 16; i++) {
        w[i] = (struct waiter){.res = {.base = base}, .seq = &seq};
        assert_non_null(resolver_lookup(r, "one.test", on_waiter, &w[i]));
    }
    assert_int_equal(r->nflights, 1);
    for (int i = 0; i < 300 && seq < 16; i++)
        run(base, 10);
    assert_int_equal(seq, 16);
    assert_int_equal(d.queries, 2);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(w[i].order, i + 1);
        assert_int_equal(w[i].res.calls, 1);
        assert_int_equal(w[i].res.err, 0);
        assert_int_equal(w[i].res.n, 2);
        assert_addr(&w[i].res.a[0], v4("192.0.2.1"));
        assert_addr(&w[i].res.a[1], v6("2001:db8::1"));
    }
    assert_int_equal(r->nflights, 0);

    /* Different names are not shared. */
    struct result a = {.base = base}, b = {.base = base};
    assert_non_null(resolver_lookup(r, "v6only.test", on_result, &a));
    assert_non_null(resolver_lookup(r, "many.test", on_result, &b));
    assert_int_equal(r->nflights, 2);
    for (int i = 0; i < 300 && (a.calls == 0 || b.calls == 0); i++)
        run(base, 10);
    assert_int_equal(d.queries, 6);
    assert_int_equal(a.n, 1);
    assert_int_equal(b.n, RESOLVE_MAX_ADDRS);

    resolver_free(r);
    fake_stop(&d);
    event_base_free(base);
}

/* A shared lookup runs while anyone waits for it: cancelling some of its
 * requests leaves it to the others, cancelling the last cancels its
 * queries. One that joins late gets the same answer at the same time. */
static void test_shared_lookup_cancel(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);
    r->try_ms = 200;                /* a try ends after 200 ms here */
    r->resolution_delay_ms = 60000; /* half.test's AAAA tries run out (no resolution delay) */

    /* Three wait for a silent name; all three leave: nothing is left. */
    struct resolve_req *q[3];
    for (int i = 0; i < 3; i++)
        assert_non_null(q[i] = resolver_lookup(r, "slow.test", never, NULL));
    assert_int_equal(r->nflights, 1);
    resolve_cancel(q[1]);
    resolve_cancel(q[0]);
    assert_int_equal(r->nflights, 1);
    resolve_cancel(q[2]);
    assert_int_equal(r->nflights, 0);
    run(base, 500); /* past evdns' timer: no retry is sent, no callback runs */
    assert_int_equal(d.queries, 2);

    /* half.test: the A answer comes, the AAAA never. A request that joins
     * after the A answer gets it too, when the AAAA tries have run out; the
     * one that left in between is not called. */
    struct result first = {.base = base}, late = {.base = base};
    assert_non_null(resolver_lookup(r, "half.test", on_result, &first));
    struct resolve_req *leaver = resolver_lookup(r, "half.test", never, NULL);
    assert_non_null(leaver);
    for (int i = 0; i < 100 && d.answered < 1; i++)
        run(base, 10);
    assert_int_equal(d.answered, 1);
    resolve_cancel(leaver);
    assert_non_null(resolver_lookup(r, "half.test", on_result, &late));
    for (int i = 0; i < 300 && (first.calls == 0 || late.calls == 0); i++)
        run(base, 10);
    assert_int_equal(first.calls, 1);
    assert_int_equal(late.calls, 1);
    assert_int_equal(first.n, 1);
    assert_int_equal(late.n, 1);
    assert_addr(&late.a[0], v4("192.0.2.1"));
    assert_int_equal(d.queries, 2 + 3); /* A once, AAAA twice */

    resolver_free(r);
    run(base, 50); /* the tries cancelled at their end report */
    fake_stop(&d);
    event_base_free(base);
}

/* The callbacks of a shared lookup may cancel a request still waiting for
 * it (which is then not called), or look the same name up again (a new
 * lookup, not the one ending). */
static void test_shared_lookup_reentry(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);
    r->try_ms = 200; /* a try ends after 200 ms here */
    int seq = 0;
    struct result again = {.base = base};
    struct resolve_req *victim = NULL;
    struct waiter w0 = {.res = {.base = base}, .seq = &seq, .cancel = &victim};
    struct waiter w2 = {
        .res = {.base = base}, .seq = &seq, .r = r, .again = "fail.test", .again_res = &again};

    /* fail.test: SERVFAIL each time, never cached. */
    /* w0 cancels the last request still waiting: the lookup is ending,
     * and stays whole until its callbacks are done. */
    assert_non_null(resolver_lookup(r, "fail.test", on_waiter, &w2));
    assert_non_null(resolver_lookup(r, "fail.test", on_waiter, &w0));
    assert_non_null(victim = resolver_lookup(r, "fail.test", never, NULL));
    for (int i = 0; i < 300 && seq < 2; i++)
        run(base, 10);
    assert_int_equal(w2.order, 1);
    assert_int_equal(w0.order, 2);
    assert_null(victim);
    assert_int_equal(w0.res.err, RESOLVE_ERR_SERVFAIL);
    assert_int_equal(w2.res.err, w0.res.err);
    int sent = d.queries;
    assert_int_equal(r->nflights, 1); /* the lookup w2 started */
    run_until(base, &again, 3000);
    assert_int_equal(again.calls, 1);
    assert_int_equal(again.err, w0.res.err);
    assert_true(d.queries > sent);
    assert_int_equal(r->nflights, 0);

    resolver_free(r);
    fake_stop(&d);
    event_base_free(base);
}

/* A reload keeps where lookups start when that server is still listed, and
 * does not move the deadline of a lookup whose queries it moves. */
static void test_reload_keeps_preferred_and_deadline(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d[3];
    for (int i = 0; i < 3; i++)
        fake_start(&d[i], base, (uint8_t)(i + 1));
    d[0].mute = true;
    char *s1[2] = {d[0].addr, d[1].addr}, *s2[2] = {d[2].addr, d[1].addr};
    struct dns_cfg c1 = {.servers = s1, .nservers = 2}, c2 = {.servers = s2, .nservers = 2};
    char *err = NULL;
    struct resolver *r = resolver_new(base, &c1, &err);
    assert_non_null(r);
    r->try_ms = 200; /* a try ends after 200 ms here */
    struct result res = lookup_wait(base, r, "one.test");
    assert_addr(&res.a[0], v4("192.0.2.2"));
    assert_int_equal(r->preferred, 1);

    assert_int_equal(resolver_reload(r, &c2), 0);
    assert_int_equal(r->preferred, 1); /* d[1], still second */
    res = lookup_wait(base, r, "v6only.test");
    assert_int_equal(res.err, 0);
    assert_int_equal(d[2].queries, 0); /* the first server was not needed */

    /* A lookup on a silent server, moved by a reload: same deadline. It is
     * minutes away: one of 1.2 s (try_ms 100) could pass in a test held
     * back that long before the reload, and the flight was freed under it
     * (heap-use-after-free); it is run by hand once compared. The deadline
     * compared is libevent's (its monotonic clock): event_pending() gives
     * it as a time of day, through an offset libevent takes again every
     * 5 s, so a base older than that gave one deadline two readings 1 ms
     * apart. */
    d[1].mute = d[2].mute = true;
    r->try_ms = 60000;
    struct result stuck = {.base = base};
    assert_non_null(resolver_lookup(r, "slow.test", on_result, &stuck));
    struct flight *f = flight_find(r, "slow.test");
    assert_non_null(f);
    assert_true(event_pending(f->ev, EV_TIMEOUT, NULL));
    struct timeval before = f->ev->ev_timeout;
    run(base, 50);
    assert_int_equal(resolver_reload(r, &c1), 0);
    assert_null(flight_find(r, "slow.test")); /* new lookups start their own */
    assert_int_equal(stuck.calls, 0);
    assert_true(event_pending(f->ev, EV_TIMEOUT, NULL));
    assert_int_equal(before.tv_sec, f->ev->ev_timeout.tv_sec);
    assert_int_equal(before.tv_usec, f->ev->ev_timeout.tv_usec);
    event_active(f->ev, EV_TIMEOUT, 1); /* the deadline's timer, come now */
    run_until(base, &stuck, 3000);
    assert_int_equal(stuck.calls, 1);
    assert_int_equal(stuck.err, RESOLVE_ERR_TIMEOUT);

    resolver_free(r);
    run(base, 50);
    for (int i = 0; i < 3; i++)
        fake_stop(&d[i]);
    event_base_free(base);
}

/* A reload that changes the servers leaves the flights in flight to those
 * already waiting on them: a lookup after it asks the new servers, and
 * never gets an answer the old ones gave (here the A of half.test, whose
 * AAAA no server answers). */
static void test_lookup_after_a_server_change_asks_the_new_servers(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d[2];
    for (int i = 0; i < 2; i++)
        fake_start(&d[i], base, (uint8_t)(i + 1));
    char *s1[1] = {d[0].addr}, *s2[1] = {d[1].addr};
    struct dns_cfg c1 = {.servers = s1, .nservers = 1}, c2 = {.servers = s2, .nservers = 1};
    char *err = NULL;
    struct resolver *r = resolver_new(base, &c1, &err);
    assert_non_null(r);
    r->try_ms = 100;
    struct result before = {.base = base};
    assert_non_null(resolver_lookup(r, "half.test", on_result, &before));
    for (int i = 0; i < 50 && d[0].answered == 0; i++)
        run(base, 10);
    assert_int_equal(d[0].answered, 1); /* the A; the AAAA waits */
    assert_int_equal(resolver_reload(r, &c2), 0);
    r->try_ms = 200; /* a try ends after 200 ms here */
    struct result after = lookup_wait(base, r, "half.test");
    assert_int_equal(after.n, 1);
    assert_addr(&after.a[0], v4("192.0.2.2")); /* the new server's */
    run_until(base, &before, 3000);
    assert_int_equal(before.calls, 1);
    assert_addr(&before.a[0], v4("192.0.2.1")); /* its own flight, as it was */
    resolver_free(r);
    run(base, 50);
    for (int i = 0; i < 2; i++)
        fake_stop(&d[i]);
    event_base_free(base);
}

static void test_cache_positive(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    d.ttl = 1;
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);
    assert_int_equal(r->cache.max, 4096);

    struct result res = lookup_wait(base, r, "one.test");
    assert_int_equal(res.err, 0);
    assert_int_equal(d.queries, 2);
    assert_int_equal(r->cache.n, 1);

    /* Within the TTL: the same answer, no query. */
    res = lookup_wait(base, r, "one.test");
    assert_int_equal(res.err, 0);
    assert_int_equal(res.n, 2);
    assert_addr(&res.a[0], v4("192.0.2.1"));
    assert_addr(&res.a[1], v6("2001:db8::1"));
    assert_int_equal(d.queries, 2);

    /* A cached answer can be cancelled before its turn. */
    struct resolve_req *q = resolver_lookup(r, "one.test", never, NULL);
    assert_non_null(q);
    resolve_cancel(q);
    run(base, 50);
    assert_int_equal(d.queries, 2);

    /* After the TTL (1 s): asked again. */
    run(base, 1100);
    res = lookup_wait(base, r, "one.test");
    assert_int_equal(res.err, 0);
    assert_int_equal(d.queries, 4);

    /* A long TTL is capped at 300 s. */
    d.ttl = 86400;
    res = lookup_wait(base, r, "many.test");
    assert_int_equal(res.n, RESOLVE_MAX_ADDRS);
    assert_non_null(r->cache.lru_head);
    assert_string_equal(r->cache.lru_head->name, "many.test");
    uint64_t left = r->cache.lru_head->expires_ms - monotonic_ms();
    assert_true(left <= 300000 && left > 290000);
    res = lookup_wait(base, r, "many.test");
    assert_int_equal(res.n, RESOLVE_MAX_ADDRS);
    assert_addr(&res.a[15], v4("203.0.113.16"));
    assert_int_equal(d.queries, 6);

    /* TTL 0: not cached. */
    d.ttl = 0;
    res = lookup_wait(base, r, "v6only.test");
    res = lookup_wait(base, r, "v6only.test");
    assert_int_equal(res.err, 0);
    assert_int_equal(d.queries, 10);

    /* A TTL with its top bit set (2^31 s or more) counts as 0 (RFC 2181
     * section 8), not as a long one: not cached either. */
    static const uint32_t huge[] = {0x80000000u, 0xffffffffu};
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
        d.ttl = huge[i];
        res = lookup_wait(base, r, "v6only.test");
        assert_int_equal(res.err, 0);
        assert_addr(&res.a[0], v6("2001:db8::6"));
        res = lookup_wait(base, r, "v6only.test");
        assert_int_equal(res.err, 0);
        assert_int_equal(d.queries, 14 + 4 * (int)i);
        assert_int_equal(r->cache.n, 2); /* one.test and many.test only */
    }

    resolver_free(r);
    fake_stop(&d);
    event_base_free(base);
}

static void test_cache_negative(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);
    assert_int_equal(r->neg_ttl_ms, 5000);
    r->neg_ttl_ms = 300;

    struct result res = lookup_wait(base, r, "nx.test");
    assert_int_equal(res.err, RESOLVE_ERR_NXDOMAIN);
    assert_int_equal(d.queries, 2);
    res = lookup_wait(base, r, "nx.test");
    assert_int_equal(res.err, RESOLVE_ERR_NXDOMAIN);
    assert_int_equal(res.n, 0);
    assert_int_equal(d.queries, 2);
    /* NOERROR without records is negative too, and stays told apart from
     * "no such name" when answered from the cache. */
    res = lookup_wait(base, r, "empty.test");
    assert_int_equal(res.err, RESOLVE_ERR_NODATA);
    res = lookup_wait(base, r, "empty.test");
    assert_int_equal(res.err, RESOLVE_ERR_NODATA);
    assert_int_equal(res.n, 0);
    assert_int_equal(d.queries, 4);
    /* Briefly: gone after neg_ttl_ms. */
    run(base, 400);
    res = lookup_wait(base, r, "nx.test");
    assert_int_equal(res.err, RESOLVE_ERR_NXDOMAIN);
    assert_int_equal(d.queries, 6);

    resolver_free(r);
    fake_stop(&d);
    event_base_free(base);
}

/* A server that answers A at once and drops the AAAA questions (broken
 * resolvers and middleboxes do): the answer comes without waiting for
 * AAAA's tries (RFC 8305 section 3, its resolution delay), and it is
 * cached for its TTL but at most 30 s, AAAA taken as not answered, not as
 * a failure: the next request asks the server nothing, and the silent
 * query is neither a timeout nor a failure of the server. Not the other
 * way round: with AAAA answered and A dropped, A's tries are waited for (a
 * gateway without IPv6 routes could reach none of the AAAA addresses), and
 * that answer, with A timed out, is not cached. */
static void test_one_family_answered(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);

    struct result res = {.base = base};
    assert_non_null(resolver_lookup(r, "half.test", on_result, &res));
    run_until(base, &res, 10000); /* a bound, not a timing */
    assert_int_equal(res.calls, 1);
    assert_int_equal(res.err, 0);
    assert_int_equal(res.n, 1);
    assert_addr(&res.a[0], v4("192.0.2.1"));
    assert_non_null(r->cache.lru_head);
    assert_string_equal(r->cache.lru_head->name, "half.test");
    uint64_t left = r->cache.lru_head->expires_ms - monotonic_ms();
    assert_true(left <= 30000 && left > 20000); /* the answer's 60 s TTL, cut to 30 s */
    int before = d.queries;
    res = lookup_wait(base, r, "half.test");
    assert_int_equal(res.err, 0);
    assert_int_equal(res.n, 1);
    assert_addr(&res.a[0], v4("192.0.2.1"));
    assert_int_equal(d.queries, before); /* from the cache */
    struct resolve_server_stats st;
    assert_int_equal(resolver_server_stats(r, &st, 1), 1);
    assert_int_equal(st.timeouts + st.failures, 0);
    assert_false(st.down);

    /* AAAA answered, A silent: A's tries run out (shortened here). */
    r->try_ms = 200; /* a try ends after 200 ms here */
    size_t cached = r->cache.n;
    res = lookup_wait(base, r, "v6half.test");
    assert_int_equal(res.err, 0);
    assert_int_equal(res.n, 1);
    assert_addr(&res.a[0], v6("2001:db8::1"));
    assert_int_equal(r->cache.n, cached); /* A timed out: not cached */
    assert_int_equal(resolver_server_stats(r, &st, 1), 1);
    assert_true(st.timeouts > 0); /* A's tries, not abandoned */

    resolver_free(r);
    run(base, 50); /* the abandoned tries report */
    fake_stop(&d);
    event_base_free(base);
}

static void test_cache_not_failures(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);
    r->try_ms = 200; /* a try ends after 200 ms here */

    /* Timeouts are never cached. */
    struct result res = lookup_wait(base, r, "slow.test");
    assert_int_equal(res.err, RESOLVE_ERR_TIMEOUT);
    assert_int_equal(d.queries, 4);
    res = lookup_wait(base, r, "slow.test");
    assert_int_equal(res.err, RESOLVE_ERR_TIMEOUT);
    assert_int_equal(d.queries, 8);
    /* Nor a partial answer (A came, AAAA timed out): here the resolution
     * delay outlasts the deadline, so the AAAA tries run out (a timeout,
     * not a query abandoned after the delay: test_one_family_answered). */
    r->resolution_delay_ms = 60000;
    res = lookup_wait(base, r, "half.test");
    assert_int_equal(res.err, 0);
    assert_int_equal(res.n, 1);
    int before = d.queries;
    res = lookup_wait(base, r, "half.test");
    assert_int_equal(res.n, 1);
    assert_true(d.queries > before);
    /* Nor a cancelled lookup. */
    struct resolve_req *q = resolver_lookup(r, "one.test", never, NULL);
    resolve_cancel(q);
    run(base, 100);
    assert_int_equal(r->cache.n, 0);
    /* Nor IP literals. */
    res = lookup_wait(base, r, "192.0.2.9");
    assert_int_equal(r->cache.n, 0);

    resolver_free(r);
    run(base, 50); /* the tries cancelled at their end report */
    fake_stop(&d);
    event_base_free(base);
}

/* Writes a resolv.conf naming <addr> (or no server when NULL) at <path>. */
static void write_resolv_conf(const char *path, const char *addr)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    if (addr != NULL)
        fprintf(f, "nameserver %s\n", addr);
    else
        fprintf(f, "# no server\n");
    assert_int_equal(fclose(f), 0);
}

/* A policy without dns.servers uses resolv.conf as it is at each reload:
 * a new server there is asked after SIGHUP; the same servers are kept
 * (their bases and what they did), also when a reload cannot read them for
 * want of descriptors, and none left means no server. */
static void test_reload_rereads_resolv_conf(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d1, d2;
    fake_start(&d1, base, 1);
    fake_start(&d2, base, 2);
    char path[64];
    temp_resolv_conf(path, "");
    write_resolv_conf(path, d1.addr);
    struct dns_cfg none = {0};

    struct resolver *r = new_resolver(base, NULL, NULL, 0);
    assert_int_equal(r->nns, 1);
    struct result res = lookup_wait(base, r, "one.test");
    assert_addr(&res.a[0], v4("192.0.2.1"));

    /* Unchanged: the same server set stays, with its counts. */
    struct name_server *before = r->ns;
    uint64_t answers = r->ns[0].st.answers;
    assert_int_equal(resolver_reload(r, &none), 0);
    assert_ptr_equal(r->ns, before);
    assert_int_equal(r->ns[0].st.answers, answers);

    /* Changed: the new server answers. */
    write_resolv_conf(path, d2.addr);
    assert_int_equal(resolver_reload(r, &none), 0);
    assert_int_equal(r->nns, 1);
    assert_string_equal(r->ns[0].st.addr, d2.addr);
    res = lookup_wait(base, r, "one.test");
    assert_int_equal(res.err, 0);
    assert_addr(&res.a[0], v4("192.0.2.2"));

    /* Short of descriptors (evdns opens a socket for each nameserver line
     * as it reads resolv.conf, and drops, without a word, the ones it
     * cannot open, as it does the file): the reload fails, and the servers
     * in use are kept. It installed an empty set, or one without the
     * servers it could not open, and every lookup failed until the next
     * reload. Both the file (no descriptor free) and the second server's
     * socket (one free: the file is read and closed, the first server
     * takes it) are tried. */
    char text[128];
    snprintf(text, sizeof(text), "nameserver %s\nnameserver %s\n", d1.addr, d2.addr);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(resolver_reload(r, &none), 0);
    assert_int_equal(r->nns, 2);
    before = r->ns;
    struct rlimit was;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &was), 0);
    for (int spare = 0; spare < 2; spare++) {
        int lowest = dup(0); /* the lowest descriptor free: none below it */
        assert_true(lowest >= 0);
        close(lowest);
        struct rlimit low = {(rlim_t)(lowest + spare), was.rlim_max};
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
        int rc = resolver_reload(r, &none);
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &was), 0);
        assert_int_equal(rc, -1);
        assert_ptr_equal(r->ns, before);
        assert_int_equal(r->nns, 2);
    }
    res = lookup_wait(base, r, "one.test");
    assert_int_equal(res.err, 0);

    /* Gone: no server. */
    write_resolv_conf(path, NULL);
    assert_int_equal(resolver_reload(r, &none), 0);
    assert_int_equal(r->nns, 0);
    res = lookup_wait(base, r, "two.test");
    assert_int_equal(res.err, RESOLVE_ERR_NO_SERVERS);

    resolver_free(r);
    unlink(path);
    test_resolv_conf = "/nonexistent/resolv.conf";
    fake_stop(&d1);
    fake_stop(&d2);
    event_base_free(base);
}

/* A link-local server of resolv.conf is known by its zone too: a reload
 * after its interface changed opens it anew, on the new interface, and
 * /metrics tells the two apart. Compared as name_servers_unchanged() does
 * at a reload, without opening them: whether a socket can be connected to
 * fe80::53 on interface 1 or 2 depends on the host (one that cannot is
 * left out: name_servers_open()). */
static void test_reload_sees_a_new_zone(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[64];
    temp_resolv_conf(path, "");
    write_resolv_conf(path, "fe80::53%1");
    struct dns_cfg none = {0};
    struct name_server ns[1];
    memset(ns, 0, sizeof(ns));
    snprintf(ns[0].st.addr, sizeof(ns[0].st.addr), "[fe80::53%%1]:53");

    assert_true(name_servers_unchanged(base, &none, path, ns, 1));
    write_resolv_conf(path, "fe80::53%2");
    assert_false(name_servers_unchanged(base, &none, path, ns, 1));
    snprintf(ns[0].st.addr, sizeof(ns[0].st.addr), "[fe80::53%%2]:53");
    assert_true(name_servers_unchanged(base, &none, path, ns, 1));

    unlink(path);
    test_resolv_conf = "/nonexistent/resolv.conf";
    event_base_free(base);
}

static void test_cache_static_and_reload(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    char *servers[1] = {d.addr};
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);

    struct result res = lookup_wait(base, r, "one.test");
    assert_int_equal(d.queries, 2);
    assert_int_equal(r->cache.n, 1);

    /* Reload (same servers) empties the cache. */
    struct dns_cfg same = {.servers = servers, .nservers = 1};
    assert_int_equal(resolver_reload(r, &same), 0);
    assert_int_equal(r->cache.n, 0);
    res = lookup_wait(base, r, "one.test");
    assert_int_equal(d.queries, 4);

    /* The static map wins over a cached answer and is never cached. */
    struct dns_static st[] = {{.name = "one.test", .addr = v4("127.0.0.2")}};
    struct dns_cfg withst = {.servers = servers, .nservers = 1, .statics = st, .nstatics = 1};
    res = lookup_wait(base, r, "one.test");
    assert_int_equal(d.queries, 4); /* cached */
    assert_int_equal(resolver_reload(r, &withst), 0);
    res = lookup_wait(base, r, "one.test");
    assert_int_equal(res.n, 1);
    assert_addr(&res.a[0], v4("127.0.0.2"));
    assert_int_equal(r->cache.n, 0);
    assert_int_equal(d.queries, 4);

    /* A lookup in flight across a reload is not stored. */
    assert_int_equal(resolver_reload(r, &same), 0);
    res = (struct result){.base = base};
    assert_non_null(resolver_lookup(r, "one.test", on_result, &res));
    assert_int_equal(resolver_reload(r, &same), 0);
    run_until(base, &res, 3000);
    assert_int_equal(res.err, 0);
    assert_int_equal(r->cache.n, 0);
    res = lookup_wait(base, r, "one.test");
    assert_int_equal(r->cache.n, 1);

    /* resolver_free releases the cache (LeakSanitizer checks). */
    resolver_free(r);
    fake_stop(&d);
    event_base_free(base);
}

static void test_cache_eviction(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);
    r->cache.max = 2;

    (void)lookup_wait(base, r, "one.test");
    (void)lookup_wait(base, r, "v6only.test");
    assert_int_equal(d.queries, 4);
    (void)lookup_wait(base, r, "one.test"); /* cached; now the most recent */
    assert_int_equal(d.queries, 4);
    (void)lookup_wait(base, r, "nx.test"); /* evicts v6only.test */
    assert_int_equal(d.queries, 6);
    assert_int_equal(r->cache.n, 2);
    (void)lookup_wait(base, r, "one.test");
    (void)lookup_wait(base, r, "nx.test");
    assert_int_equal(d.queries, 6);
    struct result res = lookup_wait(base, r, "v6only.test");
    assert_int_equal(res.err, 0);
    assert_addr(&res.a[0], v6("2001:db8::6"));
    assert_int_equal(d.queries, 8);
    assert_int_equal(r->cache.n, 2);

    /* Many names: never more than the bound. */
    r->cache.max = 3;
    char name[32];
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof(name), "n%d.test", i); /* NXDOMAIN from the fake */
        (void)lookup_wait(base, r, name);
        assert_true(r->cache.n <= 3);
    }
    assert_int_equal(r->cache.n, 3);
    /* A cache of 0 names stores nothing. */
    r->cache.max = 0;
    dns_cache_clear(&r->cache);
    (void)lookup_wait(base, r, "one.test");
    assert_int_equal(r->cache.n, 0);

    resolver_free(r);
    fake_stop(&d);
    event_base_free(base);
}

/* A lookup answered at once (a static name, an IP literal, a name the
 * cache holds, a failure known at once) has libevent allocate nothing: its
 * event is in the request's own allocation (event_new() and event_free()
 * cost a malloc() and a free() a lookup: one for each of these four). */
static void test_answered_at_once_allocate_nothing(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct dns_static st[] = {{.name = "api.example.test", .addr = v4("127.0.0.2")}};
    struct resolver *r = new_resolver(base, NULL, st, 1);
    static const char *const names[] = {"api.example.test", "192.0.2.9", "1.2.3.999",
                                        "nothing.example.test"};
    ev_allocs = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct result res = {.base = base};
        assert_non_null(resolver_lookup(r, names[i], on_result, &res));
        event_base_loop(base, EVLOOP_NONBLOCK); /* it is active: run_until()'s timer allocates */
        assert_int_equal(res.calls, 1);
    }
    /* and one cancelled before its answer ran */
    struct result res = {.base = base};
    resolve_cancel(resolver_lookup(r, "api.example.test", on_result, &res));
    event_base_loop(base, EVLOOP_NONBLOCK);
    assert_int_equal(res.calls, 0);
    assert_int_equal(ev_allocs, 0);
    resolver_free(r);
    event_base_free(base);
}

/* libevent's allocations fail while this is set (lost_callback_main's
 * allocator, below). */
static bool ev_alloc_fails;

static void *count_or_fail_malloc(size_t n)
{
    return ev_alloc_fails ? NULL : count_malloc(n);
}

/* evdns, out of memory for the record that schedules a request's callback
 * as the answer comes, frees the request's handle and never calls back
 * (resolve.c, "Out of memory in evdns"). The attempts kept those handles:
 * each try's timer passed its freed handle to evdns_cancel_request(), a
 * crash (SIGSEGV in evdns_cancel_request(), from on_try_end()). Now the
 * warning libevent gives (through the gateway's log callback) has the
 * tries sent before it left uncancelled; they end by their timer as
 * timeouts, and the second tries find the answer. */
static void test_lost_callback(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct fake_dns d;
    fake_start(&d, base, 1);
    struct resolver *r = new_resolver(base, d.addr, NULL, 0);
    r->try_ms = 200;
    event_set_log_callback(libevent_log);
    unsigned long lost = libevent_log_evdns_lost();

    struct result res = {.base = base};
    assert_non_null(resolver_lookup(r, "one.test", on_result, &res));
    /* Both answers are read with no memory for their callbacks: all that
     * allocates meanwhile (the loop, the fake server allocate nothing). */
    ev_alloc_fails = true;
    for (int i = 0; i < 200 && libevent_log_evdns_lost() < lost + 2; i++)
        event_base_loop(base, EVLOOP_ONCE);
    ev_alloc_fails = false;
    assert_int_equal(libevent_log_evdns_lost(), lost + 2);
    assert_int_equal(d.answered, 2);
    assert_int_equal(res.calls, 0);

    run_until(base, &res, 5000);
    assert_int_equal(res.calls, 1);
    assert_int_equal(res.err, 0);
    assert_int_equal(res.n, 2);
    assert_int_equal(d.queries, 4); /* each query asked again once */
    assert_int_equal(r->ns[0].st.timeouts, 2);
    /* the two lost attempts are held, not leaked (LeakSanitizer) */
    size_t held = 0;
    for (const struct attempt *at = uncancelled; at != NULL; at = at->unext)
        held++;
    assert_int_equal(held, 2);

    event_set_log_callback(NULL);
    resolver_free(r);
    run(base, 50);
    fake_stop(&d);
    event_base_free(base);
}

int main(void)
{
    /* before any other call into libevent, as it asks */
    event_set_mem_functions(count_or_fail_malloc, count_realloc, free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_static_map),
        cmocka_unit_test(test_static_map_many),
        cmocka_unit_test(test_server_answers),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_free_with_lookups_in_flight),
        cmocka_unit_test(test_no_servers),
        cmocka_unit_test(test_resolv_conf_servers),
        cmocka_unit_test(test_reload_rereads_resolv_conf),
        cmocka_unit_test(test_reload_sees_a_new_zone),
        cmocka_unit_test(test_resolv_conf_order),
        cmocka_unit_test(test_bad_server),
        cmocka_unit_test(test_reload),
        cmocka_unit_test(test_failover),
        cmocka_unit_test(test_reload_retires_down_servers),
        cmocka_unit_test(test_free_with_a_probe_in_flight),
        cmocka_unit_test(test_tries_end_by_their_own_timer),
        cmocka_unit_test(test_shared_lookup),
        cmocka_unit_test(test_shared_lookup_cancel),
        cmocka_unit_test(test_shared_lookup_reentry),
        cmocka_unit_test(test_reload_keeps_preferred_and_deadline),
        cmocka_unit_test(test_lookup_after_a_server_change_asks_the_new_servers),
        cmocka_unit_test(test_cache_positive),
        cmocka_unit_test(test_cache_negative),
        cmocka_unit_test(test_cache_not_failures),
        cmocka_unit_test(test_one_family_answered),
        cmocka_unit_test(test_cache_static_and_reload),
        cmocka_unit_test(test_cache_eviction),
        cmocka_unit_test(test_answered_at_once_allocate_nothing),
        cmocka_unit_test(test_lost_callback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
