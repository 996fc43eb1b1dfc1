/* Unit tests for gate/stream.c's stream_read_more() on real socket
 * bufferevents (whose input libevent keeps frozen at its end): it reads
 * past libevent's 4 KiB up to what it is asked, never past the read high
 * watermark, leaves the end of the peer's side for the bufferevent's next
 * read, reports a reset as an error, and reads nothing without a socket;
 * stream_read_rest() reads past the watermark, up to what it is asked,
 * and takes what came before a reset. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "gate/stream.h"

struct fixture {
    struct event_base *base;
    struct bufferevent *bev; /* on sv[0], which it closes */
    int sv[2];
};

static int setup(void **state)
{
    static struct fixture f;
    f.base = event_base_new();
    assert_non_null(f.base);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, f.sv), 0);
    f.bev = bufferevent_socket_new(f.base, f.sv[0], BEV_OPT_CLOSE_ON_FREE);
    assert_non_null(f.bev);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    bufferevent_free(f->bev);
    if (f->sv[1] >= 0)
        close(f->sv[1]);
    event_base_free(f->base);
    return 0;
}

/* Writes <n> bytes (a pattern) to <fd>; the socket must take them all. */
static void put(int fd, size_t n)
{
    char buf[4096];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (char)i;
    while (n > 0) {
        size_t k = n < sizeof(buf) ? n : sizeof(buf);
        assert_int_equal(write(fd, buf, k), (ssize_t)k);
        n -= k;
    }
}

static size_t input_length(const struct fixture *f)
{
    return evbuffer_get_length(bufferevent_get_input(f->bev));
}

/* The input holds <n> bytes of put()'s pattern, in order. */
static void input_is_the_pattern(const struct fixture *f, size_t n)
{
    assert_int_equal(input_length(f), n);
    const unsigned char *p = evbuffer_pullup(bufferevent_get_input(f->bev), -1);
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i % 4096))
            fail_msg("byte %zu out of order", i);
}

static void reads_up_to_what_it_is_asked(void **state)
{
    struct fixture *f = *state;
    put(f->sv[1], 100000);
    assert_int_equal(stream_read_more(f->bev, f->sv[0], 65536), 65536);
    assert_int_equal(input_length(f), 65536);
    /* the input already holds that much: nothing more */
    assert_int_equal(stream_read_more(f->bev, f->sv[0], 65536), 0);
    /* the rest, and then the socket has no more (EAGAIN is not an error) */
    assert_int_equal(stream_read_more(f->bev, f->sv[0], 200000), 100000 - 65536);
    assert_int_equal(stream_read_more(f->bev, f->sv[0], 200000), 0);
    assert_int_equal(input_length(f), 100000);
    input_is_the_pattern(f, 100000);
}

static void stops_at_the_read_high_watermark(void **state)
{
    struct fixture *f = *state;
    bufferevent_setwatermark(f->bev, EV_READ, 0, 10000);
    put(f->sv[1], 50000);
    assert_int_equal(stream_read_more(f->bev, f->sv[0], 65536), 10000);
    assert_int_equal(input_length(f), 10000);
}

static void leaves_the_end_for_the_bufferevent(void **state)
{
    struct fixture *f = *state;
    put(f->sv[1], 1000);
    close(f->sv[1]);
    f->sv[1] = -1;
    assert_int_equal(stream_read_more(f->bev, f->sv[0], 65536), 1000);
    char c;
    assert_int_equal(read(f->sv[0], &c, 1), 0); /* the end is still there to be read */
}

static void reads_nothing_without_a_socket(void **state)
{
    struct fixture *f = *state;
    put(f->sv[1], 1000);
    assert_int_equal(stream_read_more(f->bev, -1, 65536), 0);
    assert_int_equal(input_length(f), 0);
}

/* A connected pair of loopback TCP sockets: *a non-blocking, *b blocking. */
static void tcp_pair(int *l, int *a, int *b)
{
    *l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    assert_int_equal(bind(*l, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(listen(*l, 1), 0);
    assert_int_equal(getsockname(*l, (struct sockaddr *)&sin, &len), 0);
    *a = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (connect(*a, (struct sockaddr *)&sin, sizeof(sin)) != 0)
        assert_int_equal(errno, EINPROGRESS);
    *b = accept(*l, NULL, NULL);
    assert_true(*b >= 0);
}

static void reports_a_reset(void **state)
{
    (void)state;
    int l, a, b;
    tcp_pair(&l, &a, &b);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    assert_int_equal(setsockopt(b, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
    close(b); /* a reset */
    usleep(20000);
    struct event_base *base = event_base_new();
    struct bufferevent *bev = bufferevent_socket_new(base, a, BEV_OPT_CLOSE_ON_FREE);
    errno = 0;
    assert_int_equal(stream_read_more(bev, a, 65536), -1);
    assert_int_equal(errno, ECONNRESET);
    bufferevent_free(bev);
    event_base_free(base);
    close(l);
}

static void rest_reads_past_the_watermark(void **state)
{
    struct fixture *f = *state;
    put(f->sv[1], 150000);
    bufferevent_setwatermark(f->bev, EV_READ, 0, 10000);
    assert_int_equal(stream_read_rest(f->bev, f->sv[0], 140000), 140000);
    /* the rest, and then the socket has no more */
    assert_int_equal(stream_read_rest(f->bev, f->sv[0], 1 << 20), 10000);
    assert_int_equal(stream_read_rest(f->bev, f->sv[0], 1 << 20), 0);
    input_is_the_pattern(f, 150000);
}

static void rest_takes_what_came_before_a_reset(void **state)
{
    (void)state;
    int l, a, b;
    tcp_pair(&l, &a, &b);
    put(b, 30000);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    assert_int_equal(setsockopt(b, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
    close(b); /* a reset, behind the bytes */
    usleep(20000);
    struct event_base *base = event_base_new();
    struct bufferevent *bev = bufferevent_socket_new(base, a, BEV_OPT_CLOSE_ON_FREE);
    /* what a write meeting the reset consumes: the error, not the bytes */
    assert_int_equal(send(a, "x", 1, MSG_NOSIGNAL), -1);
    assert_int_equal(stream_read_rest(bev, a, 1 << 20), 30000);
    assert_int_equal(evbuffer_get_length(bufferevent_get_input(bev)), 30000);
    bufferevent_free(bev);
    event_base_free(base);
    close(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(reads_up_to_what_it_is_asked, setup, teardown),
        cmocka_unit_test_setup_teardown(stops_at_the_read_high_watermark, setup, teardown),
        cmocka_unit_test_setup_teardown(leaves_the_end_for_the_bufferevent, setup, teardown),
        cmocka_unit_test_setup_teardown(reads_nothing_without_a_socket, setup, teardown),
        cmocka_unit_test(reports_a_reset),
        cmocka_unit_test_setup_teardown(rest_reads_past_the_watermark, setup, teardown),
        cmocka_unit_test(rest_takes_what_came_before_a_reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
