/* Unit tests for gate/drain.c: a client's progress at its write timeouts,
 * judged from send-queue readings (plain integers, no sockets), the
 * output callback that notes writes (an evbuffer, no socket), and the
 * bytes in flight read from TCP_INFO (counters, then a loopback pair). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "gate/drain.h"

#define IDLE 1000
#define STEP 250

static void step_is_a_quarter(void **state)
{
    (void)state;
    assert_int_equal(drain_step_ms(60000), 15000);
    assert_int_equal(drain_step_ms(1000), 250);
    assert_int_equal(drain_step_ms(1001), 251);
    assert_int_equal(drain_step_ms(3), 1); /* never 0: that would be no timeout */
    assert_int_equal(drain_step_ms(0), 1);
}

/* Steps a client taking nothing survives from <d>'s state, counting the one that closes. */
static int steps_to_close(struct drain *d, int64_t queue)
{
    for (int i = 1; i <= 100; i++)
        if (!drain_keeps(d, queue, STEP, IDLE))
            return i;
    return -1;
}

static void a_client_taking_nothing_is_closed_within_idle_and_a_step(void **state)
{
    (void)state;
    struct drain d;
    drain_reset(&d);
    /* the first reading has no predecessor: not held against the client;
     * then DRAIN_STEPS steps of no progress are idle_timeout */
    assert_int_equal(steps_to_close(&d, 4000000), DRAIN_STEPS + 1);
}

static void nothing_in_flight_is_closed_within_idle(void **state)
{
    (void)state;
    struct drain d;
    drain_reset(&d);
    /* an empty queue at the first reading: there was nothing to take, so
     * the step counts (an idle tunnel is closed at idle_timeout) */
    assert_int_equal(steps_to_close(&d, 0), DRAIN_STEPS);
    /* a queue that empties is progress, once */
    drain_reset(&d);
    assert_true(drain_keeps(&d, 100, STEP, IDLE));
    assert_true(drain_keeps(&d, 0, STEP, IDLE));
    assert_int_equal(d.stalled_ms, 0);
    assert_int_equal(steps_to_close(&d, 0), DRAIN_STEPS);
}

static void a_shrinking_queue_keeps_the_client(void **state)
{
    (void)state;
    struct drain d;
    drain_reset(&d);
    int64_t q = 4000000;
    for (int i = 0; i < 50; i++) {
        assert_true(drain_keeps(&d, q, STEP, IDLE));
        q -= 1; /* one byte acknowledged per step is progress */
    }
    assert_int_equal(d.stalled_ms, 0);
}

static void progress_resets_the_stall(void **state)
{
    (void)state;
    struct drain d;
    drain_reset(&d);
    assert_true(drain_keeps(&d, 1000, STEP, IDLE)); /* first reading */
    assert_true(drain_keeps(&d, 1000, STEP, IDLE));
    assert_true(drain_keeps(&d, 1000, STEP, IDLE));
    assert_true(drain_keeps(&d, 1000, STEP, IDLE)); /* 750 ms stalled */
    assert_int_equal(d.stalled_ms, 750);
    assert_true(drain_keeps(&d, 999, STEP, IDLE)); /* progress just in time */
    assert_int_equal(d.stalled_ms, 0);
    assert_int_equal(steps_to_close(&d, 999), DRAIN_STEPS);
}

static void a_write_counts_as_progress(void **state)
{
    (void)state;
    struct drain d;
    drain_reset(&d);
    assert_true(drain_keeps(&d, 5000, STEP, IDLE));
    assert_true(drain_keeps(&d, 5000, STEP, IDLE));
    /* the bufferevent wrote: the queue is larger than before, yet the
     * socket took bytes, so the client had drained some */
    drain_note_progress(&d);
    assert_true(drain_keeps(&d, 9000, STEP, IDLE));
    assert_int_equal(d.stalled_ms, 0);
    assert_false(d.moved);
    /* compared with the reading after the write from now on */
    assert_true(drain_keeps(&d, 8999, STEP, IDLE));
    assert_int_equal(steps_to_close(&d, 8999), DRAIN_STEPS);
}

static void a_growing_queue_without_a_write_is_no_progress(void **state)
{
    (void)state;
    struct drain d;
    drain_reset(&d);
    assert_true(drain_keeps(&d, 100, STEP, IDLE));
    assert_true(drain_keeps(&d, 200, STEP, IDLE));
    assert_int_equal(d.stalled_ms, STEP);
}

static void an_unreadable_queue_falls_back_to_writes_alone(void **state)
{
    (void)state;
    struct drain d;
    drain_reset(&d);
    /* the old behaviour: closed after idle_timeout without a write */
    assert_int_equal(steps_to_close(&d, -1), DRAIN_STEPS);
    drain_reset(&d);
    drain_note_progress(&d);
    assert_true(drain_keeps(&d, -1, STEP, IDLE));
    assert_int_equal(steps_to_close(&d, -1), DRAIN_STEPS);
    /* a reading after unreadable ones has nothing to compare with */
    drain_reset(&d);
    assert_true(drain_keeps(&d, -1, STEP, IDLE));
    assert_true(drain_keeps(&d, 500, STEP, IDLE));
    assert_int_equal(d.stalled_ms, 0);
}

static void reset_forgets_the_past(void **state)
{
    (void)state;
    struct drain d;
    drain_reset(&d);
    assert_true(drain_keeps(&d, 100, STEP, IDLE));
    assert_true(drain_keeps(&d, 100, STEP, IDLE));
    drain_reset(&d);
    assert_int_equal(d.stalled_ms, 0);
    assert_int_equal(d.queue, -1);
    assert_false(d.moved);
}

static void an_idle_not_a_multiple_of_the_step(void **state)
{
    (void)state;
    struct drain d;
    uint64_t step = drain_step_ms(1001);
    assert_int_equal(step, 251); /* rounded up: four steps make idle_timeout */
    drain_reset(&d);
    int closed_at = 0;
    for (int i = 1; i <= 10 && closed_at == 0; i++)
        if (!drain_keeps(&d, 7, step, 1001))
            closed_at = i;
    assert_int_equal(closed_at, DRAIN_STEPS + 1);
}

static void bytes_leaving_the_output_are_a_write(void **state)
{
    (void)state;
    struct drain d;
    drain_reset(&d);
    struct evbuffer *out = evbuffer_new();
    assert_non_null(out);
    assert_non_null(evbuffer_add_cb(out, drain_on_write, &d));
    /* bytes queued are not bytes written */
    assert_int_equal(evbuffer_add(out, "abcdef", 6), 0);
    assert_false(d.moved);
    /* the bufferevent takes what it wrote out of its output */
    assert_int_equal(evbuffer_drain(out, 4), 0);
    assert_true(d.moved);
    assert_true(drain_keeps(&d, 9000, STEP, IDLE));
    assert_false(d.moved);
    evbuffer_free(out);
}

static void noted_progress_keeps_a_stalled_peer(void **state)
{
    (void)state;
    struct drain d;
    drain_reset(&d);
    /* an upstream neither taking a request nor, so far, answering */
    for (int i = 0; i < DRAIN_STEPS - 1; i++)
        assert_true(drain_keeps(&d, 5000, STEP, IDLE));
    /* its answer's bytes arrived: progress, though its queue stays */
    drain_note_progress(&d);
    assert_true(drain_keeps(&d, 5000, STEP, IDLE));
    assert_int_equal(d.stalled_ms, 0);
    assert_false(d.moved);
    assert_int_equal(steps_to_close(&d, 5000), DRAIN_STEPS);
}

/* What went out unacknowledged when a tunnel's side failed stays counted
 * (tunnel.c forget_never_left()). A socket that connect()ed has its SYN in
 * bytes_acked (ss -ti: bytes_sent:1000 bytes_acked:1001 once all is taken),
 * an accepted one not: 500 bytes in flight are 500 on both, not 499 on the
 * upstream's side, which took one byte more off bytes_up at each reset. */
static void in_flight_leaves_out_the_syn_of_a_connected_socket(void **state)
{
    (void)state;
    /* 1000 bytes sent, the first 500 acknowledged */
    assert_int_equal(drain_in_flight(1000, 0, 501, true), 500);
    assert_int_equal(drain_in_flight(1000, 0, 500, false), 500);
    /* all taken */
    assert_int_equal(drain_in_flight(1000, 0, 1001, true), 0);
    assert_int_equal(drain_in_flight(1000, 0, 1000, false), 0);
    /* 200 of them sent twice: 1200 sent, 200 again */
    assert_int_equal(drain_in_flight(1200, 200, 501, true), 500);
    /* nothing sent yet; counters read mid-change never wrap */
    assert_int_equal(drain_in_flight(0, 0, 1, true), 0);
    assert_int_equal(drain_in_flight(0, 0, 0, true), 0);
    assert_int_equal(drain_in_flight(100, 200, 0, false), 0);
    assert_int_equal(drain_in_flight(UINT64_MAX, 0, 1, true), UINT64_MAX);
}

/* <n> bytes from <from> read whole by <to>, then waits (1000 times 1 ms at
 * most) until <from>'s queue says they were acknowledged. */
static void send_taken(int from, int to, size_t n)
{
    char buf[1000] = {0};
    assert_true(n <= sizeof(buf));
    assert_int_equal(send(from, buf, n, 0), (ssize_t)n);
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(to, buf, sizeof(buf), 0);
        assert_true(r > 0);
        got += (size_t)r;
    }
    for (int i = 0; i < 1000 && drain_send_queue(from) != 0; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    assert_int_equal(drain_send_queue(from), 0);
}

static void read_info(int fd, struct tcp_info *ti)
{
    socklen_t len = sizeof(*ti);
    assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_INFO, ti, &len), 0);
}

/* What drain_in_flight() takes from the kernel, on a loopback pair: once
 * all is taken, the side that connect()ed has its SYN in bytes_acked, the
 * accepted side not, and neither has a byte in flight. */
static void a_connected_socket_has_its_syn_in_bytes_acked(void **state)
{
    (void)state;
    int lst = socket(AF_INET, SOCK_STREAM, 0), cli = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    assert_true(lst >= 0 && cli >= 0);
    assert_int_equal(bind(lst, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(lst, (struct sockaddr *)&sa, &sl), 0);
    assert_int_equal(listen(lst, 1), 0);
    assert_int_equal(connect(cli, (struct sockaddr *)&sa, sizeof(sa)), 0);
    int srv = accept(lst, NULL, NULL);
    assert_true(srv >= 0);
    send_taken(cli, srv, 1000);
    send_taken(srv, cli, 1000);
    struct tcp_info c, s;
    read_info(cli, &c);
    read_info(srv, &s);
    assert_int_equal(c.tcpi_bytes_acked, c.tcpi_bytes_sent + 1);
    assert_int_equal(s.tcpi_bytes_acked, s.tcpi_bytes_sent);
    assert_int_equal(
        drain_in_flight(c.tcpi_bytes_sent, c.tcpi_bytes_retrans, c.tcpi_bytes_acked, true), 0);
    assert_int_equal(
        drain_in_flight(s.tcpi_bytes_sent, s.tcpi_bytes_retrans, s.tcpi_bytes_acked, false), 0);
    assert_int_equal(drain_never_left(cli, true), 0);
    assert_int_equal(drain_never_left(srv, false), 0);
    close(srv);
    close(cli);
    close(lst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(step_is_a_quarter),
        cmocka_unit_test(a_client_taking_nothing_is_closed_within_idle_and_a_step),
        cmocka_unit_test(nothing_in_flight_is_closed_within_idle),
        cmocka_unit_test(a_shrinking_queue_keeps_the_client),
        cmocka_unit_test(progress_resets_the_stall),
        cmocka_unit_test(a_write_counts_as_progress),
        cmocka_unit_test(a_growing_queue_without_a_write_is_no_progress),
        cmocka_unit_test(an_unreadable_queue_falls_back_to_writes_alone),
        cmocka_unit_test(reset_forgets_the_past),
        cmocka_unit_test(an_idle_not_a_multiple_of_the_step),
        cmocka_unit_test(bytes_leaving_the_output_are_a_write),
        cmocka_unit_test(noted_progress_keeps_a_stalled_peer),
        cmocka_unit_test(in_flight_leaves_out_the_syn_of_a_connected_socket),
        cmocka_unit_test(a_connected_socket_has_its_syn_in_bytes_acked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
