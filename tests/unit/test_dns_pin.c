/* Unit tests for gate/dns_pin.c: the socket evdns makes for a name server,
 * found among the descriptors and connected to the server, then takes no
 * datagram from another port of the server's address. Loopback only. */
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

#include "gate/dns_pin.h"

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

static void test_pins_the_new_socket(void **state)
{
    (void)state;
    struct sockaddr_in server_sa, other_sa, peer;
    int server = bound_udp(&server_sa); /* the name server */
    int other = bound_udp(&other_sa);   /* a forger on its address, another port */
    int mark = dns_pin_mark();
    int made = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0); /* as evdns */
    assert_true(made >= 0);
    const char *why = NULL;
    assert_int_equal(dns_pin((struct sockaddr *)&server_sa, sizeof(server_sa), mark, &why), 0);
    socklen_t l = sizeof(peer);
    assert_int_equal(getpeername(made, (struct sockaddr *)&peer, &l), 0);
    assert_int_equal(peer.sin_port, server_sa.sin_port);
    assert_true(takes_from(server, made));
    assert_false(takes_from(other, made));
    /* a second server's socket is found beside the first, connected now */
    struct sockaddr_in second_sa;
    int second = bound_udp(&second_sa);
    mark = dns_pin_mark();
    int made2 = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_int_equal(dns_pin((struct sockaddr *)&second_sa, sizeof(second_sa), mark, &why), 0);
    l = sizeof(peer);
    assert_int_equal(getpeername(made2, (struct sockaddr *)&peer, &l), 0);
    assert_int_equal(peer.sin_port, second_sa.sin_port);
    close(made2);
    close(second);
    close(made);
    close(other);
    close(server);
}

static void test_never_guesses(void **state)
{
    (void)state;
    struct sockaddr_in server_sa;
    int server = bound_udp(&server_sa);
    const char *why = NULL;
    /* none made */
    assert_int_equal(
        dns_pin((struct sockaddr *)&server_sa, sizeof(server_sa), dns_pin_mark(), &why), -1);
    assert_string_equal(why, "its socket was not found");
    /* two that could be it: neither is touched */
    int mark = dns_pin_mark();
    int a = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int b = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_int_equal(dns_pin((struct sockaddr *)&server_sa, sizeof(server_sa), mark, &why), -1);
    assert_string_equal(why, "its socket cannot be told from another");
    struct sockaddr_in peer;
    socklen_t l = sizeof(peer);
    assert_int_equal(getpeername(a, (struct sockaddr *)&peer, &l), -1);
    assert_int_equal(errno, ENOTCONN);
    /* another family's socket is not the server's */
    close(b);
    int v6 = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_int_equal(dns_pin((struct sockaddr *)&server_sa, sizeof(server_sa), mark, &why), 0);
    l = sizeof(peer);
    assert_int_equal(getpeername(a, (struct sockaddr *)&peer, &l), 0);
    if (v6 >= 0)
        close(v6);
    close(a);
    close(server);
    assert_int_equal(dns_pin((struct sockaddr *)&server_sa, sizeof(server_sa), -1, &why), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pins_the_new_socket),
        cmocka_unit_test(test_never_guesses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
