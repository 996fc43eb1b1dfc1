/* Unit tests for gate/held_body.c: a body's end looked for among the bytes
 * left of it, those in the client's input buffer (an evbuffer of several
 * chains) and those its socket still has queued (one end of a socketpair),
 * none of them consumed, the body's own framer left as it was. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "gate/chunked.h"
#include "gate/conn.h"
#include "gate/held_body.h"

struct left {
    struct evbuffer *in; /* what the gateway holds */
    int sv[2];           /* sv[0]: the client's socket as the gateway has it */
};

static void left_open(struct left *l)
{
    l->in = evbuffer_new();
    assert_non_null(l->in);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, l->sv), 0);
}

static void left_close(struct left *l)
{
    evbuffer_free(l->in);
    close(l->sv[0]);
    close(l->sv[1]);
}

/* Holds <s> in a chain of its own (evbuffer_add() would append it to the
 * last chain): the framer must go from one chain to the next. */
static void hold(struct left *l, const char *s)
{
    assert_int_equal(evbuffer_add_reference(l->in, s, strlen(s), NULL, NULL), 0);
}

/* Queues <s> on the client's socket, then ends the client's side. */
static void queue_and_end(struct left *l, const char *s)
{
    size_t n = strlen(s);
    assert_int_equal(send(l->sv[1], s, n, 0), (ssize_t)n);
    assert_int_equal(shutdown(l->sv[1], SHUT_WR), 0);
}

static int queued(const struct left *l)
{
    int n = -1;
    assert_int_equal(ioctl(l->sv[0], FIONREAD, &n), 0);
    return n;
}

/* A chunked exchange whose framer has read (and sent) <sent> already. */
static void chunked_exchange(struct exchange *ex, const char *sent)
{
    size_t used;
    memset(ex, 0, sizeof(*ex));
    ex->req_body = BODY_CHUNKED;
    chunked_init_request(&ex->req_chunked);
    assert_int_equal(chunked_feed(&ex->req_chunked, sent, strlen(sent), &used), CHUNKED_MORE);
}

static enum held_body check_chunked(const char *sent, const char *h1, const char *h2, const char *q)
{
    struct left l;
    struct exchange ex;
    left_open(&l);
    chunked_exchange(&ex, sent);
    struct chunked before = ex.req_chunked;
    hold(&l, h1);
    hold(&l, h2);
    queue_and_end(&l, q);
    enum held_body r = held_body_check(&ex, l.in, l.sv[0]);
    /* Nothing consumed: the buffer, the socket's queue, the body's framer. */
    assert_int_equal(evbuffer_get_length(l.in), strlen(h1) + strlen(h2));
    assert_int_equal(queued(&l), (int)strlen(q));
    assert_memory_equal(&ex.req_chunked, &before, sizeof(before));
    left_close(&l);
    return r;
}

static void chunked_without_last_chunk_is_short(void **state)
{
    (void)state;
    /* a chunk begun before, its rest and another held, a third queued */
    assert_int_equal(check_chunked("5\r\nab", "cde\r\n3\r\n", "xyz\r\n", "4\r\nwxyz\r\n"),
                     HELD_BODY_SHORT);
    /* nothing queued: what is held decides */
    assert_int_equal(check_chunked("", "3\r\nabc\r\n", "", ""), HELD_BODY_SHORT);
    /* a last-chunk begun, its final CRLF not come */
    assert_int_equal(check_chunked("", "3\r\nabc\r\n", "0\r\n", "X-A: 1\r\n"), HELD_BODY_SHORT);
    /* data that looks like a last-chunk is data */
    assert_int_equal(check_chunked("", "5\r\n", "0\r\n\r\n", "\r\n"), HELD_BODY_SHORT);
}

static void chunked_end_held_or_queued_ends(void **state)
{
    (void)state;
    /* the last-chunk across the two chains held */
    assert_int_equal(check_chunked("3\r\na", "bc\r\n0\r", "\n\r\n", ""), HELD_BODY_ENDS);
    /* in the socket's queue, behind held chunks, with a trailer section */
    assert_int_equal(check_chunked("", "3\r\nabc\r\n", "2\r\nde\r\n", "0\r\nX-A: 1\r\n\r\n"),
                     HELD_BODY_ENDS);
    /* split between what is held and what is queued, a request behind it */
    assert_int_equal(check_chunked("", "3\r\nabc\r\n0", "\r", "\n\r\nGET / HTTP/1.1\r\n"),
                     HELD_BODY_ENDS);
    /* a framing error ends it too: the forwarder answers it (400) */
    assert_int_equal(check_chunked("", "3\r\nabc\r\n", "", "zz\r\n"), HELD_BODY_ENDS);
}

static enum held_body check_length(uint64_t left, const char *h, const char *q)
{
    struct left l;
    struct exchange ex;
    left_open(&l);
    memset(&ex, 0, sizeof(ex));
    ex.req_body = BODY_LENGTH;
    ex.req_left = left;
    hold(&l, h);
    queue_and_end(&l, q);
    enum held_body r = held_body_check(&ex, l.in, l.sv[0]);
    assert_int_equal(queued(&l), (int)strlen(q));
    left_close(&l);
    return r;
}

static void length_counts_held_and_queued(void **state)
{
    (void)state;
    assert_int_equal(check_length(10, "abcd", "efghi"), HELD_BODY_SHORT);
    assert_int_equal(check_length(10, "abcd", "efghij"), HELD_BODY_ENDS);
    assert_int_equal(check_length(10, "", "abcdefghijk"), HELD_BODY_ENDS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunked_without_last_chunk_is_short),
        cmocka_unit_test(chunked_end_held_or_queued_ends),
        cmocka_unit_test(length_counts_held_and_queued),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
