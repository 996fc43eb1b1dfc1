/* Unit tests for util/read_now.c: the read callback of the event that
 * watches a socket runs at once when input waits in it, and only then. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "util/read_now.h"

struct seen {
    int calls;
    evutil_socket_t fd;
    short what;
};

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct seen *s = arg;
    s->calls++;
    s->fd = fd;
    s->what = what;
}

struct world {
    struct event_base *base;
    struct event *ev; /* reads sv[0] */
    int sv[2];
    struct seen seen;
};

static int setup(void **state)
{
    static struct world w;
    w = (struct world){0};
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, w.sv), 0);
    w.base = event_base_new();
    assert_non_null(w.base);
    w.ev = event_new(w.base, w.sv[0], EV_READ | EV_PERSIST, on_read, &w.seen);
    assert_non_null(w.ev);
    *state = &w;
    return 0;
}

static int teardown(void **state)
{
    struct world *w = *state;
    event_free(w->ev);
    event_base_free(w->base);
    close(w->sv[0]);
    close(w->sv[1]);
    return 0;
}

static void test_input_waiting_runs_the_read_callback(void **state)
{
    struct world *w = *state;
    assert_int_equal(event_add(w->ev, NULL), 0);
    assert_int_equal(write(w->sv[1], "x", 1), 1);
    assert_true(read_now(w->base, w->sv[0]));
    assert_int_equal(w->seen.calls, 1);
    assert_int_equal(w->seen.fd, w->sv[0]);
    assert_int_equal(w->seen.what, EV_READ);
    /* the event stays as it was: pending, not active */
    assert_true(event_pending(w->ev, EV_READ, NULL));
}

static void test_a_quiet_socket_runs_nothing(void **state)
{
    struct world *w = *state;
    assert_int_equal(event_add(w->ev, NULL), 0);
    assert_false(read_now(w->base, w->sv[0]));
    assert_false(read_now(w->base, -1));
    assert_int_equal(w->seen.calls, 0);
}

static void test_the_end_of_the_stream_is_input(void **state)
{
    struct world *w = *state;
    assert_int_equal(event_add(w->ev, NULL), 0);
    assert_int_equal(shutdown(w->sv[1], SHUT_WR), 0);
    assert_true(read_now(w->base, w->sv[0]));
    assert_int_equal(w->seen.calls, 1);
}

static void test_no_event_reads_it(void **state)
{
    struct world *w = *state;
    /* input waits, but the event is not added: nobody reads the socket */
    assert_int_equal(write(w->sv[1], "x", 1), 1);
    assert_false(read_now(w->base, w->sv[0]));
    assert_int_equal(w->seen.calls, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_input_waiting_runs_the_read_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_quiet_socket_runs_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_end_of_the_stream_is_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_event_reads_it, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
