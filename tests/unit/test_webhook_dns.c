/* Unit tests for watch/webhook_dns.c: a webhook sink's resolver asks only
 * the servers whose sockets are tied to them. Its resolv.conf is one the
 * test writes, in the working directory. Loopback only; nothing is sent. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>

#define WEBHOOK_RESOLV_CONF "test_webhook_dns.resolv.conf"
#include "watch/webhook_dns.c"

#include "quiet_server.h"
#include "stderr_capture.h"

/* Servers whose sockets cannot be told among the descriptors (more
 * unbound datagram sockets than a mark remembers: dns_pin.h) are left out,
 * each said on standard error, and with none left the sink gets no
 * resolver. Before, they were asked, untied: an answer from any port of
 * their address was taken (a forger's on this host, sending the sink's
 * alerts where it chose). */
static void test_servers_whose_sockets_cannot_be_tied_are_not_asked(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    assert_non_null(base);
    char one[32], two[32], said[2048], want[512];
    int s1 = quiet_server(one, sizeof(one), NULL), s2 = quiet_server(two, sizeof(two), NULL);
    FILE *f = fopen(WEBHOOK_RESOLV_CONF, "w");
    assert_non_null(f);
    fprintf(f, "nameserver %s\nnameserver %s\n", one, two);
    assert_int_equal(fclose(f), 0);

    /* tied: both asked, their sockets told */
    const char *why = NULL;
    struct webhook_dns_socks socks;
    struct evdns_base *dns = webhook_dns_new(base, "hook", &socks, &why);
    assert_non_null(dns);
    assert_int_equal(evdns_base_count_nameservers(dns), 2);
    assert_int_equal(socks.n, 2);
    assert_true(socks.fd[0] >= 0 && socks.fd[1] >= 0 && socks.fd[0] != socks.fd[1]);
    evdns_base_free(dns, 0);

    int many[DNS_PIN_SEEN + 1];
    for (size_t i = 0; i < DNS_PIN_SEEN + 1; i++)
        assert_true((many[i] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) >= 0);
    struct stderr_capture cap;
    stderr_capture_begin(&cap);
    dns = webhook_dns_new(base, "hook", &socks, &why);
    stderr_capture_end(&cap, said, sizeof(said));
    for (size_t i = 0; i < DNS_PIN_SEEN + 1; i++)
        close(many[i]);
    assert_null(dns);
    assert_string_equal(why, "no name server of " WEBHOOK_RESOLV_CONF
                             " can be asked (see standard error)");
    snprintf(want, sizeof(want),
             "sluice: webhook hook: name server %s of " WEBHOOK_RESOLV_CONF
             ": not asked: its socket cannot be tied to its port (too many sockets like it), "
             "and an untied one takes an answer from any port of its address\n"
             "sluice: webhook hook: name server %s of " WEBHOOK_RESOLV_CONF
             ": not asked: its socket cannot be tied to its port (too many sockets like it), "
             "and an untied one takes an answer from any port of its address\n",
             one, two);
    assert_string_equal(said, want);

    unlink(WEBHOOK_RESOLV_CONF);
    close(s1);
    close(s2);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_servers_whose_sockets_cannot_be_tied_are_not_asked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
