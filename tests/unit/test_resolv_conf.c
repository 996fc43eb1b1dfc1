/* Unit tests for util/resolv_conf.c: a resolv.conf's name servers, in the
 * order of its lines, the first ones only, as evdns spells them. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "util/resolv_conf.h"

/* A file holding <text>, its path in <path> (room for 64); removed by the
 * caller. */
static void write_conf(char *path, const char *text)
{
    snprintf(path, 64, "/tmp/sluice-resolv-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* "IP:PORT" or "[V6]:PORT" of <ss>. */
static const char *spell(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    char ip[INET6_ADDRSTRLEN];
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
        snprintf(out, cap, "[%s]:%u", ip, (unsigned)ntohs(s6->sin6_port));
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)ss;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
        snprintf(out, cap, "%s:%u", ip, (unsigned)ntohs(s4->sin_port));
    }
    return out;
}

static void test_servers_in_the_order_of_the_lines(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    assert_non_null(base);
    char path[64], buf[80];
    write_conf(path, "search example.test\n"
                     "nameserver 127.0.0.53\n"
                     "options timeout:1\n"
                     "nameserver 127.0.0.1:5300\n"
                     "nameserver [::1]:53\n"
                     "nameserver 127.0.0.4\n");
    struct sockaddr_storage ss[3];
    socklen_t len[3];
    size_t n = 99;
    assert_int_equal(resolv_conf_addrs(base, path, ss, len, 3, &n), 0);
    assert_int_equal(n, 3); /* the first 3 lines: the 4th is past <cap> */
    assert_string_equal(spell(&ss[0], buf, sizeof(buf)), "127.0.0.53:53");
    assert_int_equal(len[0], sizeof(struct sockaddr_in));
    assert_string_equal(spell(&ss[1], buf, sizeof(buf)), "127.0.0.1:5300");
    assert_string_equal(spell(&ss[2], buf, sizeof(buf)), "[::1]:53");
    assert_int_equal(len[2], sizeof(struct sockaddr_in6));
    unlink(path);
    event_base_free(base);
}

static void test_none_is_none(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    assert_non_null(base);
    char path[64];
    struct sockaddr_storage ss[2];
    socklen_t len[2];
    size_t n = 99;
    /* no nameserver line: not the 127.0.0.1 evdns would assume */
    write_conf(path, "search example.test\n");
    assert_int_equal(resolv_conf_addrs(base, path, ss, len, 2, &n), 0);
    assert_int_equal(n, 0);
    unlink(path);
    n = 99;
    assert_int_equal(resolv_conf_addrs(base, path, ss, len, 2, &n), 0); /* missing */
    assert_int_equal(n, 0);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_servers_in_the_order_of_the_lines),
        cmocka_unit_test(test_none_is_none),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
