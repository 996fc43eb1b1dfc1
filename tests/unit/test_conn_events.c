/* test_conn_events: a connection's head timer and progress timer are in
 * the connection's own allocation (conn.ev_mem): from its accept to its
 * free, with a progress event held back on the way, it has libevent make
 * no event of its own (an event_new() and an event_free() each cost a
 * setup about 230 instructions). libevent's allocations are counted by
 * size (event_set_mem_functions()): the client's bufferevent and its
 * buffers make others, none of a struct event's size. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "gate/conn.h"
#include "gate/gateway.h"
#include "gate/listener.h"
#include "gate/progress.h"
#include "policy/model.h"

/* libevent's allocations of a struct event's size, counted while
 * <counting> (event_set_mem_functions() in main()) */
static size_t event_allocs;
static size_t event_size;
static bool counting;

static void *count_malloc(size_t n)
{
    if (counting && n == event_size)
        event_allocs++;
    return malloc(n);
}

static void *count_realloc(void *p, size_t n)
{
    if (counting && p == NULL && n == event_size)
        event_allocs++;
    return realloc(p, n);
}

/* While <clock_held>, the monotonic clock reads <held_at>: the test's
 * reading and progress_note()'s are one instant. Read apart, a test
 * preempted for PROGRESS_MS (100 ms) between them saw the event published
 * rather than held back, its progress timer never armed (a loaded machine;
 * a sleep put there fails it every time). */
static bool clock_held;
static struct timespec held_at;

int clock_gettime(clockid_t clk, struct timespec *ts)
{
    if (clock_held && clk == CLOCK_MONOTONIC) {
        *ts = held_at;
        return 0;
    }
    return syscall(SYS_clock_gettime, clk, ts) == 0 ? 0 : -1;
}

static void no_accept(struct listener *l, evutil_socket_t fd, const struct sockaddr *sa,
                      socklen_t len, void *arg)
{
    (void)l;
    (void)sa;
    (void)len;
    (void)arg;
    close(fd);
}

/* One connection's life: accepted on one end of a socket pair, a progress
 * event held back (bytes sent within PROGRESS_MS of the last event: the
 * progress timer is armed), freed. */
static void one_life(struct gateway *gw, struct listener *l)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    conn_accept(gw, l, sv[0], (const struct sockaddr *)&sin, sizeof(sin));
    struct conn *c = gw->conns;
    assert_non_null(c);
    assert_non_null(c->timer);
    assert_true(evtimer_pending(c->timer, NULL));
    c->ex.active = true;
    c->ex.bytes_up = 1;
    clock_gettime(CLOCK_MONOTONIC, &held_at);
    c->ex.up_note_at = held_at;
    clock_held = true;
    progress_note(c);
    clock_held = false;
    assert_non_null(c->progress_timer);
    assert_true(evtimer_pending(c->progress_timer, NULL));
    c->ex.active = false; /* no exchange to publish: no log, no bus here */
    conn_free(c);
    assert_null(gw->conns);
    close(sv[1]);
}

static void test_timers_allocate_nothing(void **state)
{
    (void)state;
    struct policy *p = calloc(1, sizeof(*p)); /* limits 0: the defaults */
    struct gw_policy gp = {.policy = p, .refs = 1};
    struct gateway *gw = calloc(1, sizeof(*gw));
    assert_non_null(p);
    assert_non_null(gw);
    gw->base = event_base_new();
    assert_non_null(gw->base);
    assert_int_equal(event_base_priority_init(gw->base, GATEWAY_PRIORITIES), 0);
    gw->current = &gp;
    struct listen_addr a;
    const char *why;
    char err[256];
    assert_int_equal(listen_addr_parse("127.0.0.1:0", &a, &why), 0);
    struct listener *l = listener_open(gw->base, &a, no_accept, NULL, err, sizeof(err));
    assert_non_null(l);
    one_life(gw, l); /* warms the base up (its slots for a descriptor number) */
    counting = true;
    one_life(gw, l);
    counting = false;
    assert_int_equal(event_allocs, 0);
    listener_free(l);
    event_base_free(gw->base);
    free(gw);
    free(p);
}

/* A connection numbers its requests (the N of a log line's id "cM.N",
 * which a consumer keys on) in 64 bits, as the gateway numbers its
 * connections: a kept connection that a client uses for years (some 4
 * billion requests, 33 hours at 36,000 a second) must not start again at
 * 1 and give a new request the id of an old one. */
static void test_request_numbers_do_not_wrap(void **state)
{
    (void)state;
    struct conn c = {0};
    c.nreq = UINT32_MAX;
    c.nreq++;
    assert_true(c.nreq > UINT32_MAX);
    assert_int_equal(sizeof(c.nreq), sizeof(c.id));
}

int main(void)
{
    /* before any other call into libevent, as it asks */
    event_set_mem_functions(count_malloc, count_realloc, free);
    event_size = event_get_struct_event_size();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timers_allocate_nothing),
        cmocka_unit_test(test_request_numbers_do_not_wrap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
