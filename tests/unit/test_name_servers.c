/* Unit tests for gate/name_servers.c: which servers the gateway's resolver
 * asks, and how a server it cannot use is named. connect() is interposed,
 * to refuse a chosen server's socket once evdns made it. Loopback only;
 * nothing is sent. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "gate/name_servers.h"
#include "util/dns_pin.h"

#include "quiet_server.h"
#include "stderr_capture.h"

/* A connect() to 127.0.0.1:<refuse_port> fails with EACCES once
 * <refuse_after> such calls went through (0: none is refused). */
static uint16_t refuse_port;
static int refuse_after;

int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
    if (refuse_port != 0 && sa->sa_family == AF_INET && ntohs(s4->sin_port) == refuse_port &&
        refuse_after-- <= 0) {
        errno = EACCES;
        return -1;
    }
    int (*real)(int, const struct sockaddr *, socklen_t) =
        (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
    return real(fd, sa, len);
}

/* A server whose socket cannot be told among the descriptors (more
 * unbound datagram sockets than a mark remembers: dns_pin.h) is not asked:
 * untied, its socket would take an answer from any port of its address,
 * a forger's on this host. Before, it was asked all the same, standard
 * error saying an answer from another port would be taken too. */
static void test_a_server_whose_socket_cannot_be_tied_is_not_asked(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    assert_non_null(base);
    char text[32], said[1024], want[256];
    uint16_t port;
    int server = quiet_server(text, sizeof(text), &port);
    char *servers[1] = {text};
    struct dns_cfg cfg = {.servers = servers, .nservers = 1};
    int many[DNS_PIN_SEEN + 1];
    for (size_t i = 0; i < DNS_PIN_SEEN + 1; i++)
        assert_true((many[i] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) >= 0);

    struct name_server *ns = NULL;
    size_t n = 99;
    char *err = NULL;
    struct stderr_capture cap;
    stderr_capture_begin(&cap);
    int rc = name_servers_open(base, &cfg, "/nonexistent/resolv.conf", &ns, &n, &err);
    stderr_capture_end(&cap, said, sizeof(said));
    assert_int_equal(rc, 0);
    assert_null(err);
    assert_int_equal(n, 0);
    assert_null(ns);
    snprintf(want, sizeof(want),
             "sluice: dns: server %s: not asked: its socket cannot be tied to its port (too "
             "many sockets like it), and an untied one takes an answer from any port of its "
             "address; a reload tries it again\n",
             text);
    assert_string_equal(said, want);

    /* once its socket can be found, it is asked, tied */
    for (size_t i = 0; i < DNS_PIN_SEEN + 1; i++)
        close(many[i]);
    assert_int_equal(name_servers_open(base, &cfg, "/nonexistent/resolv.conf", &ns, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(ns[0].st.addr, text);
    name_servers_free(ns, n);
    close(server);
    event_base_free(base);
}

/* A resolv.conf server whose socket connect() refuses once evdns made it
 * (the check before found it reachable) fails the open, and the error
 * names it by its address. Before, it named its place among the servers
 * evdns kept, "server 2", while evdns had skipped a line it could not read
 * and a repeated one before it: the third nameserver line, whose address
 * the operator could not tell from the message. */
static void test_a_server_that_cannot_be_used_is_named_by_its_address(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    assert_non_null(base);
    char one[32], two[32], conf[256], path[] = "/tmp/sluice-test-resolv.XXXXXX", want[256];
    uint16_t port_one, port_two;
    int s1 = quiet_server(one, sizeof(one), &port_one);
    int s2 = quiet_server(two, sizeof(two), &port_two);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    int len = snprintf(conf, sizeof(conf),
                       "nameserver not-an-address\nnameserver %s\nnameserver %s\nnameserver %s\n",
                       one, one, two);
    assert_int_equal(write(fd, conf, (size_t)len), len);
    close(fd);
    struct dns_cfg none = {0};

    struct name_server *ns = NULL;
    size_t n = 0;
    char *err = NULL;
    refuse_port = port_two;
    refuse_after = 1; /* the reachability check's connect() goes through */
    int rc = name_servers_open(base, &none, path, &ns, &n, &err);
    refuse_port = 0;
    assert_int_equal(rc, -1);
    assert_non_null(err);
    snprintf(want, sizeof(want), "dns: cannot use server %s of %s", two, path);
    assert_string_equal(err, want);
    assert_null(ns);
    free(err);

    /* and with nothing refused, both servers are asked, in their order */
    assert_int_equal(name_servers_open(base, &none, path, &ns, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(ns[0].st.addr, one);
    assert_string_equal(ns[1].st.addr, two);
    name_servers_free(ns, n);
    unlink(path);
    close(s1);
    close(s2);
    event_base_free(base);
}

/* A reload that keeps a server keeps its counts (sluice_dns_responses_total
 * is a counter): the Nth listing of an address takes the Nth's of before;
 * a new server, or a listing more than before, starts at 0. */
static void test_a_reload_keeps_the_counts_of_the_servers_it_keeps(void **state)
{
    (void)state;
    struct name_server old[3] = {0}, ns[4] = {0};
    const char *was[3] = {"127.0.0.1:53", "127.0.0.1:53", "127.0.0.2:53"};
    const char *is[4] = {"127.0.0.1:53", "127.0.0.3:53", "127.0.0.1:53", "127.0.0.1:53"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(old[i].st.addr, sizeof(old[i].st.addr), "%s", was[i]);
        old[i].st.answers = 10 * (i + 1);
        old[i].st.timeouts = 10 * (i + 1) + 1;
        old[i].st.failures = 10 * (i + 1) + 2;
    }
    for (size_t i = 0; i < 4; i++)
        snprintf(ns[i].st.addr, sizeof(ns[i].st.addr), "%s", is[i]);
    name_servers_keep_counts(old, 3, ns, 4);
    const uint64_t answers[4] = {10, 0, 20, 0};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(ns[i].st.answers, answers[i]);
        assert_int_equal(ns[i].st.timeouts, answers[i] ? answers[i] + 1 : 0);
        assert_int_equal(ns[i].st.failures, answers[i] ? answers[i] + 2 : 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_server_that_cannot_be_used_is_named_by_its_address),
        cmocka_unit_test(test_a_server_whose_socket_cannot_be_tied_is_not_asked),
        cmocka_unit_test(test_a_reload_keeps_the_counts_of_the_servers_it_keeps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
