/* Unit tests for util/dns_pin.c: the socket evdns makes for a name server,
 * found among the descriptors and connected to the server, then takes no
 * datagram from another port of the server's address; dns_pin_add() on a
 * real evdns resolver. Loopback only. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>

#include "util/dns_pin.h"

/* A datagram socket bound to 127.0.0.1 on a port of the kernel's choice,
 * its address in <sa>. */
static int bound_udp(struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)sa, sizeof(*sa)), 0);
    socklen_t l = sizeof(*sa);
    assert_int_equal(getsockname(fd, (struct sockaddr *)sa, &l), 0);
    return fd;
}

/* What <fd> (non-blocking) holds after <from> sent it a byte: true when the
 * byte came. */
static bool takes_from(int from, int fd)
{
    struct sockaddr_in to;
    socklen_t l = sizeof(to);
    char b = 'x';
    assert_int_equal(getsockname(fd, (struct sockaddr *)&to, &l), 0);
    /* loopback delivers within sendto(): nothing to wait for */
    assert_int_equal(sendto(from, &b, 1, 0, (struct sockaddr *)&to, sizeof(to)), 1);
    return recv(fd, &b, 1, MSG_DONTWAIT) == 1;
}

/* True when <fd> is connected to <sa>'s port. */
static bool connected_to(int fd, const struct sockaddr_in *sa)
{
    struct sockaddr_in peer;
    socklen_t l = sizeof(peer);
    return getpeername(fd, (struct sockaddr *)&peer, &l) == 0 && peer.sin_port == sa->sin_port;
}

/* A datagram socket as evdns makes one: neither bound nor connected. */
static int evdns_like(int family)
{
    return socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

static void test_pins_the_new_socket(void **state)
{
    (void)state;
    struct sockaddr_in server_sa, other_sa, second_sa;
    int server = bound_udp(&server_sa); /* the name server */
    int other = bound_udp(&other_sa);   /* a forger on its address, another port */
    struct dns_pin_mark m;
    dns_pin_mark(&m, AF_INET);
    int made = evdns_like(AF_INET);
    assert_true(made >= 0);
    const char *why = NULL;
    assert_int_equal(dns_pin((struct sockaddr *)&server_sa, sizeof(server_sa), &m, &why), 0);
    assert_true(connected_to(made, &server_sa));
    assert_true(takes_from(server, made));
    assert_false(takes_from(other, made));
    /* a second server's socket is found beside the first, connected now */
    int second = bound_udp(&second_sa);
    dns_pin_mark(&m, AF_INET);
    int made2 = evdns_like(AF_INET);
    assert_int_equal(dns_pin((struct sockaddr *)&second_sa, sizeof(second_sa), &m, &why), 0);
    assert_true(connected_to(made2, &second_sa));
    close(made2);
    close(second);
    close(made);
    close(other);
    close(server);
}

static void test_an_older_unbound_socket_is_left_alone(void **state)
{
    (void)state;
    struct sockaddr_in server_sa, peer;
    socklen_t l = sizeof(peer);
    int server = bound_udp(&server_sa);
    const char *why = NULL;
    /* a webhook sink's resolver that has not asked yet: there before the mark */
    int older = evdns_like(AF_INET);
    struct dns_pin_mark m;
    dns_pin_mark(&m, AF_INET);
    int made = evdns_like(AF_INET);
    assert_int_equal(dns_pin((struct sockaddr *)&server_sa, sizeof(server_sa), &m, &why), 0);
    assert_true(connected_to(made, &server_sa));
    assert_int_equal(getpeername(older, (struct sockaddr *)&peer, &l), -1);
    assert_int_equal(errno, ENOTCONN);
    close(made);
    /* one the mark saw, closed, its number taken by the server's socket:
     * told apart by inode, not by number */
    int gone = evdns_like(AF_INET);
    dns_pin_mark(&m, AF_INET);
    close(gone);
    made = evdns_like(AF_INET);
    assert_int_equal(made, gone);
    assert_int_equal(dns_pin((struct sockaddr *)&server_sa, sizeof(server_sa), &m, &why), 0);
    assert_true(connected_to(made, &server_sa));
    close(made);
    close(older);
    close(server);
}

static void test_never_guesses(void **state)
{
    (void)state;
    struct sockaddr_in server_sa;
    int server = bound_udp(&server_sa);
    const char *why = NULL;
    struct dns_pin_mark m;
    /* none made */
    dns_pin_mark(&m, AF_INET);
    assert_int_equal(dns_pin((struct sockaddr *)&server_sa, sizeof(server_sa), &m, &why), -1);
    assert_string_equal(why, "its socket was not found");
    /* another family's socket is not the server's */
    int v6 = evdns_like(AF_INET6);
    assert_int_equal(dns_pin((struct sockaddr *)&server_sa, sizeof(server_sa), &m, &why), -1);
    assert_string_equal(why, "its socket was not found");
    /* two that could be it: neither is touched */
    int a = evdns_like(AF_INET), b = evdns_like(AF_INET);
    assert_int_equal(dns_pin((struct sockaddr *)&server_sa, sizeof(server_sa), &m, &why), -1);
    assert_string_equal(why, "its socket cannot be told from another");
    assert_false(connected_to(a, &server_sa));
    assert_false(connected_to(b, &server_sa));
    if (v6 >= 0)
        close(v6);
    close(a);
    close(b);
    close(server);
}

/* The descriptors (below 1024) connected to <sa>'s port. */
static int count_connected_to(const struct sockaddr_in *sa)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += connected_to(fd, sa);
    return n;
}

static void test_add_pins_each_server_of_a_resolver(void **state)
{
    (void)state;
    struct sockaddr_in one_sa, two_sa;
    int one = bound_udp(&one_sa), two = bound_udp(&two_sa);
    struct event_base *base = event_base_new();
    assert_non_null(base);
    /* another resolver's socket that could not be pinned, there before */
    int older = evdns_like(AF_INET);
    struct evdns_base *dns = evdns_base_new(base, 0);
    assert_non_null(dns);
    const char *why = "unset";
    int one_fd = -2, two_fd = -2;
    assert_int_equal(dns_pin_add(dns, (struct sockaddr *)&one_sa, sizeof(one_sa), &why, &one_fd),
                     DNS_PIN_TIED);
    assert_null(why);
    why = "unset";
    assert_int_equal(dns_pin_add(dns, (struct sockaddr *)&two_sa, sizeof(two_sa), &why, &two_fd),
                     DNS_PIN_TIED);
    assert_null(why);
    assert_int_equal(evdns_base_count_nameservers(dns), 2);
    assert_int_equal(count_connected_to(&one_sa), 1);
    assert_int_equal(count_connected_to(&two_sa), 1);
    /* the socket told is the one tied to its server */
    assert_true(connected_to(one_fd, &one_sa) && connected_to(two_fd, &two_sa));
    assert_false(connected_to(older, &one_sa) || connected_to(older, &two_sa));
    /* more sockets of the kind than a mark remembers: the new one is not
     * guessed at, and the server is added all the same, unpinned */
    int many[DNS_PIN_SEEN + 1];
    for (size_t i = 0; i < DNS_PIN_SEEN + 1; i++)
        assert_true((many[i] = evdns_like(AF_INET)) >= 0);
    struct sockaddr_in three_sa;
    int three = bound_udp(&three_sa);
    why = NULL;
    int three_fd = -2;
    assert_int_equal(
        dns_pin_add(dns, (struct sockaddr *)&three_sa, sizeof(three_sa), &why, &three_fd),
        DNS_PIN_LOOSE);
    assert_int_equal(three_fd, -1);
    assert_string_equal(why, "too many sockets like it");
    assert_int_equal(evdns_base_count_nameservers(dns), 3);
    assert_int_equal(count_connected_to(&three_sa), 0);
    for (size_t i = 0; i < DNS_PIN_SEEN + 1; i++)
        close(many[i]);
    evdns_base_free(dns, 0);
    event_base_free(base);
    close(older);
    close(three);
    close(two);
    close(one);
}

/* A server no datagram socket can be connected to now: 255.255.255.255,
 * which connect() refuses (EACCES) to a socket without SO_BROADCAST on any
 * host, as it refuses one with no route to its address (ENETUNREACH). Its
 * socket could not be tied to it, and would take an answer from any port
 * of its address once it could be reached: it is not added (before: added,
 * unpinned, "connect() failed"). */
static void test_a_server_no_socket_can_connect_to_is_not_added(void **state)
{
    (void)state;
    struct sockaddr_in bcast = {.sin_family = AF_INET, .sin_port = htons(53)};
    bcast.sin_addr.s_addr = htonl(INADDR_BROADCAST);
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct evdns_base *dns = evdns_base_new(base, 0);
    assert_non_null(dns);
    const char *why = NULL;
    assert_int_equal(dns_pin_add(dns, (struct sockaddr *)&bcast, sizeof(bcast), &why, NULL),
                     DNS_PIN_UNREACHABLE);
    assert_string_equal(why, strerror(EACCES));
    assert_int_equal(evdns_base_count_nameservers(dns), 0);
    /* dns_pin() on a socket made for it says connect() refused it */
    struct dns_pin_mark m;
    dns_pin_mark(&m, AF_INET);
    int made = evdns_like(AF_INET);
    assert_true(made >= 0);
    why = NULL;
    assert_int_equal(dns_pin((struct sockaddr *)&bcast, sizeof(bcast), &m, &why), -2);
    assert_string_equal(why, strerror(EACCES));
    close(made);
    evdns_base_free(dns, 0);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pins_the_new_socket),
        cmocka_unit_test(test_an_older_unbound_socket_is_left_alone),
        cmocka_unit_test(test_never_guesses),
        cmocka_unit_test(test_add_pins_each_server_of_a_resolver),
        cmocka_unit_test(test_a_server_no_socket_can_connect_to_is_not_added),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
