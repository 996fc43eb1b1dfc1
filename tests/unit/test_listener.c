/* Unit tests for gate/listener.c: ADDR parsing (SPEC.md: HOST:PORT,
 * [V6]:PORT, unix:/path), binding on loopback, port 0, listener_covers()
 * (self_request), stale unix sockets replaced and other files refused, and
 * which accept() errors pause the listener (accept4() and accept() are
 * interposed here, to fail once with a chosen error). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "gate/listener.h"

#include "accept_fail.h"

static void test_parse_ok(void **state)
{
    (void)state;
    struct listen_addr a;
    const char *why = NULL;
    assert_int_equal(listen_addr_parse("127.0.0.1:3128", &a, &why), 0);
    assert_int_equal(a.kind, LISTEN_TCP);
    assert_string_equal(a.text, "127.0.0.1:3128");
    assert_string_equal(a.host, "127.0.0.1");
    assert_int_equal(listen_addr_parse("[::1]:8080", &a, &why), 0);
    assert_string_equal(a.text, "[::1]:8080");
    assert_int_equal(listen_addr_parse("unix:/tmp/x.sock", &a, &why), 0);
    assert_int_equal(a.kind, LISTEN_UNIX);
    assert_string_equal(a.text, "unix:/tmp/x.sock");
    assert_int_equal(listen_addr_parse("127.0.0.1:0", &a, &why), 0);
}

static void test_parse_errors(void **state)
{
    (void)state;
    static const char *bad[] = {
        "",
        "3128",
        ":3128",
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:65536",
        "127.0.0.1:-1",
        "127.0.0.1:12x",
        "::1:3128",
        "[::1]3128",
        "[::1",
        "[]:1",
        "unix:",
        "unix:relative.sock",
        "[127.0.0.1]:80",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct listen_addr a;
        const char *why = NULL;
        if (listen_addr_parse(bad[i], &a, &why) == 0)
            fail_msg("accepted '%s'", bad[i]);
        assert_non_null(why);
    }
    char longpath[200];
    memset(longpath, 'a', sizeof(longpath));
    memcpy(longpath, "unix:/", 6);
    longpath[sizeof(longpath) - 1] = '\0';
    struct listen_addr a;
    const char *why;
    assert_int_equal(listen_addr_parse(longpath, &a, &why), -1);
}

static void on_accept(struct listener *l, evutil_socket_t fd, const struct sockaddr *sa,
                      socklen_t salen, void *arg)
{
    (void)l, (void)sa, (void)salen, (void)arg;
    close(fd);
}

/* A listener on 127.0.0.1, on a port the kernel picks. */
static struct listener *open_loopback(struct event_base *base, listener_accept_fn fn)
{
    struct listen_addr a;
    const char *why;
    char err[256];
    assert_non_null(base);
    assert_int_equal(listen_addr_parse("127.0.0.1:0", &a, &why), 0);
    struct listener *l = listener_open(base, &a, fn, NULL, err, sizeof(err));
    assert_non_null(l);
    return l;
}

static void test_bind_and_covers(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct listener *l = open_loopback(base, on_accept);
    struct ipaddr ip, other, any;
    uint16_t port;
    assert_int_equal(sockaddr_to_ipaddr((const struct sockaddr *)&listener_addr(l)->ss, &ip, &port),
                     0);
    assert_true(port != 0);
    assert_true(listener_covers(l, &ip, port));
    assert_false(listener_covers(l, &ip, (uint16_t)(port + 1)));
    ipaddr_from_v4(&other, 0x7f000002);
    assert_false(listener_covers(l, &other, port));
    ipaddr_from_v4(&any, 0);
    assert_true(listener_covers(l, &any, port)); /* 0.0.0.0 reaches the local host */
    /* the host's own addresses; an address routed elsewhere is not one */
    assert_int_equal(listener_address_is_local(&ip), 1);
    struct ipaddr doc;
    ipaddr_from_v4(&doc, 0xc633644d); /* 198.51.100.77: no route, or through a gateway */
    assert_int_equal(listener_address_is_local(&doc), 0);
    listener_shutdown(l);
    assert_true(listener_covers(l, &ip, port)); /* still known after shutdown */
    listener_free(l);

    /* a second bind on a busy port fails with a message */
    char err[256];
    l = open_loopback(base, on_accept);
    struct listen_addr busy = *listener_addr(l);
    struct listener *l2 = listener_open(base, &busy, on_accept, NULL, err, sizeof(err));
    (void)l2; /* SO_REUSEADDR does not allow two listeners on one port */
    assert_null(l2);
    assert_non_null(strstr(err, "cannot listen"));
    listener_free(l);
    event_base_free(base);
}

static void test_unix_socket(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[64], spec[80], err[256];
    snprintf(path, sizeof(path), "/tmp/sluice-test-%d.sock", (int)getpid());
    snprintf(spec, sizeof(spec), "unix:%s", path);
    struct listen_addr a;
    const char *why;
    assert_int_equal(listen_addr_parse(spec, &a, &why), 0);
    struct listener *l = listener_open(base, &a, on_accept, NULL, err, sizeof(err));
    assert_non_null(l);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0660);
    assert_true(listener_is_unix(l));
    listener_shutdown(l); /* removes the file, like a clean exit */
    assert_int_equal(lstat(path, &st), -1);
    listener_free(l);

    /* a stale socket file (its server gone without removing it) is replaced */
    int stale = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(stale >= 0);
    assert_int_equal(bind(stale, (const struct sockaddr *)&a.ss, a.sslen), 0);
    close(stale);
    assert_int_equal(lstat(path, &st), 0);
    l = listener_open(base, &a, on_accept, NULL, err, sizeof(err));
    assert_non_null(l);
    /* a socket another server listens on is not taken over: a second
     * gateway given the same path fails, and the first keeps it */
    struct listener *l2 = listener_open(base, &a, on_accept, NULL, err, sizeof(err));
    assert_null(l2);
    assert_non_null(strstr(err, "in use by another server"));
    assert_int_equal(lstat(path, &st), 0);
    int probe = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(probe >= 0);
    assert_int_equal(connect(probe, (const struct sockaddr *)&a.ss, a.sslen), 0);
    close(probe);
    /* its exit removes its own socket only: not one another server bound
     * at the path once the file was removed from under it */
    assert_int_equal(unlink(path), 0);
    int other = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(other >= 0);
    assert_int_equal(bind(other, (const struct sockaddr *)&a.ss, a.sslen), 0);
    listener_free(l);
    assert_int_equal(lstat(path, &st), 0);
    close(other);
    unlink(path);
    /* a regular file is never removed */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    l = listener_open(base, &a, on_accept, NULL, err, sizeof(err));
    assert_null(l);
    assert_non_null(strstr(err, "not a socket"));
    assert_int_equal(lstat(path, &st), 0);
    unlink(path);
    event_base_free(base);
}

static int accepted;

static void count_accept(struct listener *l, evutil_socket_t fd, const struct sockaddr *sa,
                         socklen_t salen, void *arg)
{
    (void)l, (void)sa, (void)salen, (void)arg;
    accepted++;
    close(fd);
}

/* Makes one accept() on a fresh listener fail with <err> while a client
 * waits, then runs the loop without blocking, at most 20 rounds, until the
 * client is accepted. Returns whether it was, and what the listener wrote
 * to standard error meanwhile in <said>. */
static bool accept_after_error(int err, char *said, size_t cap)
{
    struct event_base *base = event_base_new();
    struct listener *l = open_loopback(base, count_accept);
    int cl = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(cl >= 0);
    assert_int_equal(
        connect(cl, (const struct sockaddr *)&listener_addr(l)->ss, listener_addr(l)->sslen), 0);
    struct stderr_capture capture;
    stderr_capture_begin(&capture);
    accepted = 0;
    fail_next_accept = err;
    for (int i = 0; i < 20 && accepted == 0; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    stderr_capture_end(&capture, said, cap);
    fail_next_accept = 0;
    close(cl);
    listener_free(l);
    event_base_free(base);
    return accepted == 1;
}

/* A connection that arrives alone costs one accept(), not a second one that
 * meets EAGAIN; several waiting are each taken, one per loop round (the
 * listening socket's event is level-triggered), with no accept() more. */
static void test_one_accept_per_connection(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct listener *l = open_loopback(base, count_accept);
    int cl[4];
    accepted = 0;
    accept_calls = 0;
    for (int i = 0; i < 4; i++) {
        cl[i] = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(cl[i] >= 0);
        assert_int_equal(
            connect(cl[i], (const struct sockaddr *)&listener_addr(l)->ss, listener_addr(l)->sslen),
            0);
        if (i == 0) {
            event_base_loop(base, EVLOOP_ONCE);
            assert_int_equal(accepted, 1);
            assert_int_equal(accept_calls, 1);
        }
    }
    for (int i = 0; i < 20 && accepted < 4; i++)
        event_base_loop(base, EVLOOP_ONCE);
    assert_int_equal(accepted, 4);
    assert_int_equal(accept_calls, 4);
    event_base_loop(base, EVLOOP_NONBLOCK);
    assert_int_equal(accept_calls, 4);
    for (int i = 0; i < 4; i++)
        close(cl[i]);
    listener_free(l);
    event_base_free(base);
}

/* Which accept() errors pause it (accept_fail.h). */
static void test_accept_error_pause(void **state)
{
    (void)state;
    check_accept_errors(accept_after_error, "Too many open files: pausing for 100 ms");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_ok),           cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_bind_and_covers),    cmocka_unit_test(test_unix_socket),
        cmocka_unit_test(test_accept_error_pause), cmocka_unit_test(test_one_accept_per_connection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
