/* quiet_server: a name server for unit tests that takes questions and
 * never answers: a datagram socket bound to 127.0.0.1. Include after
 * <cmocka.h>. */
#ifndef SLUICE_TESTS_QUIET_SERVER_H
#define SLUICE_TESTS_QUIET_SERVER_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

/* Its descriptor; "127.0.0.1:PORT" in <text> (<cap> bytes), its port in
 * <*port> unless NULL. */
static inline int quiet_server(char *text, size_t cap, uint16_t *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t l = sizeof(sa);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &l), 0);
    snprintf(text, cap, "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
    if (port != NULL)
        *port = ntohs(sa.sin_port);
    return fd;
}

#endif
