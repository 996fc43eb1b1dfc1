/* Unit tests for gate/tunnel.c over socket pairs: bytes both ways (more
 * than one pipe's worth), counts, half-close delivered as shutdown, the
 * end callback once, the idle timeout, TCP urgent data, and that a tunnel's
 * events cost libevent no allocation. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "ev_alloc_count.h"
#include "gate/tunnel.h"

struct result {
    int calls;
    enum tunnel_end how;
    uint64_t up, down;
    struct event_base *base;
};

static void on_end(struct tunnel *t, enum tunnel_end how, void *arg)
{
    struct result *r = arg;
    r->calls++;
    r->how = how;
    r->up = tunnel_bytes_up(t);
    r->down = tunnel_bytes_down(t);
    tunnel_free(t);
    event_base_loopbreak(r->base);
}

static void pair(int sv[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
}

#define BIG (300 * 1024)

struct peer {
    int fd;
    size_t sent, got;
    const char *data;
    bool shut;
};

static void on_peer(evutil_socket_t fd, short what, void *arg)
{
    struct peer *p = arg;
    char buf[65536];
    (void)what;
    if (p->sent < BIG) {
        ssize_t n = write(fd, p->data + p->sent, BIG - p->sent);
        if (n > 0)
            p->sent += (size_t)n;
    } else if (!p->shut) {
        shutdown(fd, SHUT_WR);
        p->shut = true;
    }
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            break;
        p->got += (size_t)n;
    }
}

/* BIG bytes each way at once, both ends closing their side when done: the
 * tunnel delivers all of it, counts it, and ends DONE; copying, or with
 * <splice> (streaming directions move to a pipe). */
static void both_ways_and_half_close(bool splice)
{
    static char data[BIG];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)(i * 7);
    int a[2], b[2];
    pair(a); /* a[0]: the agent's end, a[1]: the gateway's client side */
    pair(b); /* b[0]: the gateway's upstream side, b[1]: the upstream's end */
    struct event_base *base = event_base_new();
    struct result r = {.base = base};
    struct tunnel *t = tunnel_new(base, a[1], b[0], 5000, splice, on_end, &r);
    assert_non_null(t);
    struct peer pa = {.fd = a[0], .data = data}, pb = {.fd = b[1], .data = data};
    struct event *ea = event_new(base, a[0], EV_READ | EV_WRITE | EV_PERSIST, on_peer, &pa);
    struct event *eb = event_new(base, b[1], EV_READ | EV_WRITE | EV_PERSIST, on_peer, &pb);
    event_add(ea, NULL);
    event_add(eb, NULL);
    event_base_dispatch(base);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.how, TUNNEL_DONE);
    assert_int_equal(r.up, BIG);
    assert_int_equal(r.down, BIG);
    /* drain what is still in flight */
    on_peer(a[0], EV_READ, &pa);
    on_peer(b[1], EV_READ, &pb);
    assert_int_equal(pa.got, BIG);
    assert_int_equal(pb.got, BIG);
    event_free(ea);
    event_free(eb);
    close(a[0]);
    close(b[1]);
    event_base_free(base);
}

static void test_both_ways_and_half_close(void **state)
{
    (void)state;
    both_ways_and_half_close(false);
}

static void test_both_ways_and_half_close_spliced(void **state)
{
    (void)state;
    both_ways_and_half_close(true);
}

/* A tunnel on <a> and <b> to its idle end, <a>'s peer having sent "hi". */
static void idle_tunnel(struct event_base *base, int a[2], int b[2])
{
    struct result r = {.base = base};
    struct tunnel *t = tunnel_new(base, a[1], b[0], 50, false, on_end, &r);
    assert_non_null(t);
    assert_int_equal(write(a[0], "hi", 2), 2);
    event_base_dispatch(base);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.how, TUNNEL_IDLE);
    assert_int_equal(r.up, 2);
    assert_int_equal(r.down, 0);
}

static void test_idle_timeout(void **state)
{
    (void)state;
    int a[2], b[2];
    pair(a);
    pair(b);
    struct event_base *base = event_base_new();
    idle_tunnel(base, a, b);
    char buf[4];
    assert_int_equal(read(b[1], buf, sizeof(buf)), 2);
    /* the gateway's descriptors are closed: the peers see end of file */
    assert_int_equal(read(b[1], buf, sizeof(buf)), 0);
    assert_int_equal(read(a[0], buf, sizeof(buf)), 0);
    close(a[0]);
    close(b[1]);
    event_base_free(base);
}

static void test_peer_reset_is_error_or_done(void **state)
{
    (void)state;
    int a[2], b[2];
    pair(a);
    pair(b);
    struct event_base *base = event_base_new();
    struct result r = {.base = base};
    struct tunnel *t = tunnel_new(base, a[1], b[0], 5000, false, on_end, &r);
    assert_non_null(t);
    close(b[1]); /* the upstream vanishes */
    assert_int_equal(write(a[0], "data", 4), 4);
    close(a[0]);
    event_base_dispatch(base);
    assert_int_equal(r.calls, 1);
    assert_true(r.how == TUNNEL_ERROR || r.how == TUNNEL_DONE);
    event_base_free(base);
}

/* A connected TCP pair on loopback, both ends non-blocking, with
 * SO_OOBINLINE as the gateway's listeners and upstream connects set it
 * (tunnel.h): urgent data (MSG_OOB) is TCP's alone. */
static void tcp_pair(int sv[2])
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t len = sizeof(sin);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(l >= 0);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(l, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(listen(l, 1), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&sin, &len), 0);
    sv[0] = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(sv[0], (struct sockaddr *)&sin, sizeof(sin)), 0);
    sv[1] = accept(l, NULL, NULL);
    assert_true(sv[1] >= 0);
    close(l);
    int one = 1;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(fcntl(sv[i], F_SETFL, O_NONBLOCK), 0);
        assert_int_equal(setsockopt(sv[i], SOL_SOCKET, SO_OOBINLINE, &one, sizeof(one)), 0);
    }
}

/* A side's last bytes and its end, arriving together (a client's
 * close_notify and FIN): the tunnel passes on both at the wakeup that
 * told of them, not the end at a wakeup of its own. */
static void test_last_bytes_and_end_at_one_wakeup(void **state)
{
    (void)state;
    int a[2], b[2];
    tcp_pair(a); /* a[0]: the agent's end, a[1]: the gateway's client side */
    tcp_pair(b); /* b[0]: the gateway's upstream side, b[1]: the upstream's end */
    struct event_base *base = event_base_new();
    struct result r = {.base = base};
    struct tunnel *t = tunnel_new(base, a[1], b[0], 5000, false, on_end, &r);
    assert_non_null(t);
    assert_int_equal(write(a[0], "close_notify", 12), 12);
    assert_int_equal(shutdown(a[0], SHUT_WR), 0);
    struct pollfd p = {.fd = a[1], .events = POLLRDHUP};
    assert_int_equal(poll(&p, 1, 5000), 1); /* both are at the gateway's socket */
    assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
    char buf[16];
    assert_int_equal(read(b[1], buf, sizeof(buf)), 12);
    assert_int_equal(read(b[1], buf, sizeof(buf)), 0); /* the end came with them */
    assert_int_equal(r.calls, 0);                      /* the other way is open */
    assert_int_equal(shutdown(b[1], SHUT_WR), 0);
    event_base_dispatch(base);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.how, TUNNEL_DONE);
    assert_int_equal(r.up, 12);
    assert_int_equal(read(a[0], buf, sizeof(buf)), 0);
    close(a[0]);
    close(b[1]);
    event_base_free(base);
}

#define BEFORE_URGENT (300 * 1024)

/* The upstream's end: BEFORE_URGENT bytes (enough to stream, and so to
 * splice), one urgent byte, "world", then the end of its side. */
struct urgent_sender {
    int fd;
    size_t sent;
    int stage;
};

static void on_urgent_sender(evutil_socket_t fd, short what, void *arg)
{
    static char fill[65536];
    struct urgent_sender *u = arg;
    (void)what;
    memset(fill, 'a', sizeof(fill));
    while (u->stage == 0 && u->sent < BEFORE_URGENT) {
        size_t n = BEFORE_URGENT - u->sent;
        ssize_t w = write(fd, fill, n < sizeof(fill) ? n : sizeof(fill));
        if (w <= 0)
            return;
        u->sent += (size_t)w;
    }
    if (u->stage == 0) {
        /* after the bytes before it are in flight: the mark falls in the
         * middle of the stream */
        if (send(fd, "X", 1, MSG_OOB) != 1 || send(fd, "world", 5, 0) != 5)
            return;
        shutdown(fd, SHUT_WR);
        u->stage = 1;
    }
}

/* The agent's end: counts what arrives, keeps the last bytes, and ends its
 * own side at the end of the stream. */
struct urgent_reader {
    size_t got;
    char tail[8];
    bool shut;
};

static void on_urgent_reader(evutil_socket_t fd, short what, void *arg)
{
    struct urgent_reader *r = arg;
    char buf[65536];
    (void)what;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n > 0) {
            size_t k = (size_t)n < sizeof(r->tail) ? (size_t)n : sizeof(r->tail);
            memmove(r->tail, r->tail + k, sizeof(r->tail) - k);
            memcpy(r->tail + sizeof(r->tail) - k, buf + n - (ssize_t)k, k);
            r->got += (size_t)n;
            continue;
        }
        if (n == 0 && !r->shut) {
            shutdown(fd, SHUT_WR);
            r->shut = true;
        }
        return;
    }
}

/* TCP urgent data in a stream: it reaches the agent as a plain byte, in its
 * place, and what follows it too. Spliced, the read stops at the urgent
 * mark (splice() does not pass it, and the socket stays readable): without
 * a way past it the rest never came and the loop spun until the guard
 * below. Copied, recv() skipped the byte unless the socket keeps it inline. */
static void urgent_data_stays_in_the_stream(bool splice)
{
    int a[2], b[2];
    tcp_pair(a); /* a[0]: the agent's end, a[1]: the gateway's client side */
    tcp_pair(b); /* b[0]: the gateway's upstream side, b[1]: the upstream's end */
    struct event_base *base = event_base_new();
    struct result r = {.base = base};
    struct tunnel *t = tunnel_new(base, a[1], b[0], 5000, splice, on_end, &r);
    assert_non_null(t);
    struct urgent_sender us = {.fd = b[1]};
    struct urgent_reader ur = {.got = 0};
    struct event *es = event_new(base, b[1], EV_WRITE | EV_PERSIST, on_urgent_sender, &us);
    struct event *er = event_new(base, a[0], EV_READ | EV_PERSIST, on_urgent_reader, &ur);
    event_add(es, NULL);
    event_add(er, NULL);
    struct timeval guard = {.tv_sec = 5};
    event_base_loopexit(base, &guard);
    event_base_dispatch(base);
    on_urgent_reader(a[0], EV_READ, &ur); /* what is still in flight */
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.how, TUNNEL_DONE);
    assert_int_equal(ur.got, BEFORE_URGENT + 6);
    assert_memory_equal(ur.tail + 2, "Xworld", 6);
    assert_int_equal(r.down, BEFORE_URGENT + 6);
    event_free(es);
    event_free(er);
    close(a[0]);
    close(b[1]);
    event_base_free(base);
}

static void test_urgent_data_copied(void **state)
{
    (void)state;
    urgent_data_stays_in_the_stream(false);
}

static void test_urgent_data_spliced(void **state)
{
    (void)state;
    urgent_data_stays_in_the_stream(true);
}

/* A tunnel's events are in its own allocation: from its start to its end
 * it has libevent allocate nothing (event_new() for each of its five
 * events cost a malloc() and a free() a setup). The first tunnel warms
 * the base up (libevent's per-descriptor slots, made once a number); the
 * second, on the same numbers, is counted. */
static void test_events_allocate_nothing(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    int a[2], b[2];
    pair(a);
    pair(b);
    int first[4] = {a[0], a[1], b[0], b[1]};
    idle_tunnel(base, a, b);
    close(a[0]);
    close(b[1]);
    pair(a);
    pair(b);
    int second[4] = {a[0], a[1], b[0], b[1]};
    assert_memory_equal(first, second, sizeof(first));
    ev_allocs = 0;
    idle_tunnel(base, a, b);
    assert_int_equal(ev_allocs, 0);
    close(a[0]);
    close(b[1]);
    event_base_free(base);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as `sluice serve` does */
    /* before any other call into libevent, as it asks */
    event_set_mem_functions(count_malloc, count_realloc, free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_both_ways_and_half_close),
        cmocka_unit_test(test_both_ways_and_half_close_spliced),
        cmocka_unit_test(test_idle_timeout),
        cmocka_unit_test(test_peer_reset_is_error_or_done),
        cmocka_unit_test(test_urgent_data_copied),
        cmocka_unit_test(test_urgent_data_spliced),
        cmocka_unit_test(test_last_bytes_and_end_at_one_wakeup),
        cmocka_unit_test(test_events_allocate_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
