/* fuzz_listen_addr: listen_addr_parse() (--listen) and
 * listen_addr_parse_admin() (--admin) on any bytes, names looked up by a
 * resolver that never asks DNS (numeric literals, and "*.test" names at
 * 127.0.0.7). Invariants: a refusal says why; an address taken is a TCP
 * one of AF_INET or AF_INET6 within sockaddr_storage, or a unix path
 * equal to what followed "unix:"; its text and its named hold no control
 * byte (a value may hold a line end, which must not forge a line of
 * standard error) and end within their arrays; a TCP text parses back to
 * the same address and port; the two options agree: what --listen takes,
 * --admin takes as the same address (port 0 aside), and what --admin
 * takes with a HOST, --listen takes alike. */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "util/listen_addr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define INPUT_MAX 1024

static int numeric_resolver(const char *host, uint16_t port, bool v6_literal,
                            struct sockaddr_storage *ss, socklen_t *sslen)
{
    size_t n = strlen(host);
    if (!v6_literal && n > 5 && strcmp(host + n - 5, ".test") == 0) {
        struct sockaddr_in *in = (struct sockaddr_in *)(void *)ss;
        memset(ss, 0, sizeof(*ss));
        in->sin_family = AF_INET;
        in->sin_port = htons(port);
        in->sin_addr.s_addr = htonl(0x7f000007);
        *sslen = sizeof(*in);
        return 0;
    }
    return listen_addr_resolve_literal(host, port, v6_literal, ss, sslen);
}

static void check_shown(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    if (n == cap)
        abort();
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            abort();
}

static bool same_tcp(const struct listen_addr *a, const struct listen_addr *b)
{
    struct ipaddr ia, ib;
    uint16_t pa, pb;
    return sockaddr_to_ipaddr((const struct sockaddr *)&a->ss, &ia, &pa) == 0 &&
           sockaddr_to_ipaddr((const struct sockaddr *)&b->ss, &ib, &pb) == 0 &&
           ipaddr_equal(&ia, &ib) && pa == pb && a->ss.ss_family == b->ss.ss_family;
}

static void check_taken(const char *s, struct listen_addr *a)
{
    check_shown(a->text, sizeof(a->text));
    if (strnlen(a->host, sizeof(a->host)) == sizeof(a->host))
        abort();
    if (a->kind == LISTEN_UNIX) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)(const void *)&a->ss;
        if (un->sun_family != AF_UNIX || strcmp(un->sun_path, s + 5) != 0 ||
            strncmp(a->text, "unix:", 5) != 0)
            abort();
    } else {
        if (a->sslen > sizeof(a->ss) || (a->ss.ss_family != AF_INET && a->ss.ss_family != AF_INET6))
            abort();
        struct listen_addr back;
        const char *why = NULL;
        if (listen_addr_parse(a->text, &back, &why) != 0 || !same_tcp(a, &back))
            abort();
    }
    listen_addr_name(a, "--listen", s);
    check_shown(a->named, sizeof(a->named));
    check_shown(listen_addr_given(a), sizeof(a->named));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool set;
    if (!set) {
        listen_addr_set_resolver(numeric_resolver);
        set = true;
    }
    char s[INPUT_MAX + 1];
    if (size > INPUT_MAX)
        size = INPUT_MAX;
    memcpy(s, data, size);
    s[size] = '\0';

    struct listen_addr l, ad;
    const char *lwhy = NULL, *awhy = NULL;
    int lrc = listen_addr_parse(s, &l, &lwhy);
    int arc = listen_addr_parse_admin(s, &ad, &awhy);
    if ((lrc != 0 && (lwhy == NULL || lwhy[0] == '\0')) ||
        (arc != 0 && (awhy == NULL || awhy[0] == '\0')))
        abort();
    if (lrc == 0)
        check_taken(s, &l);
    if (arc == 0)
        check_taken(s, &ad);
    uint16_t port = 0;
    struct ipaddr ip;
    bool port0 = lrc == 0 && l.kind == LISTEN_TCP &&
                 sockaddr_to_ipaddr((const struct sockaddr *)&l.ss, &ip, &port) == 0 && port == 0;
    if (lrc == 0 && !port0 && (arc != 0 || (l.kind == LISTEN_TCP && !same_tcp(&l, &ad))))
        abort();
    /* a HOST given (not --admin's bare port): --listen reads it alike */
    const char *colon = strrchr(s, ':');
    bool has_host = colon != NULL && colon != s;
    if (arc == 0 && ad.kind == LISTEN_TCP && has_host && (lrc != 0 || !same_tcp(&l, &ad)))
        abort();
    return 0;
}
