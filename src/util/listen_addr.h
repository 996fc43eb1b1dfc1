/* listen_addr: the addresses sluice listens on, as the operator writes
 * them, read by one parser for --listen (gate/listener.h) and --admin
 * (watch/admin.h), and the formatting of socket addresses.
 *
 * ADDR is SPEC.md's "HOST:PORT", "[V6]:PORT" or "unix:/path/to.sock":
 *   - PORT is decimal digits only (leading zeros taken; no sign, no blank),
 *     at most 65535;
 *   - brackets hold an IPv6 literal only, a zone allowed ("[fe80::1%eth0]");
 *     an unbracketed HOST holds no colon (an IPv6 address needs brackets);
 *   - HOST is an IPv4 literal or a name of at most LISTEN_ADDR_TEXT - 1
 *     bytes: a name is looked up once, here (getaddrinfo(); start-up only,
 *     it may block), and its first address is the one bound;
 *   - a unix path is absolute and at most 107 bytes (sun_path's room).
 * --admin adds "PORT" and ":PORT" for 127.0.0.1 and refuses port 0 (the
 * port the kernel picked would be told nowhere), and words every malformed
 * value as one phrase; --listen tells which part is wrong.
 *
 * Owns nothing beyond the struct it fills; no allocation. */
#ifndef SLUICE_UTIL_LISTEN_ADDR_H
#define SLUICE_UTIL_LISTEN_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "util/ipaddr.h"

/* a HOST's bytes and its NUL: a DNS name is at most 253 bytes */
#define LISTEN_ADDR_TEXT 256
/* "unix:" and a socket path of up to 107 bytes, each shown \ooo at most 4
 * bytes long: whole, so that two paths never print alike */
#define LISTEN_ADDR_SHOWN (5 + 4 * 107 + 1)

/* "--listen ", and a value shown whole when its address is valid (a port
 * of many leading zeros aside, whose middle gives way to "...") */
#define LISTEN_ADDR_NAMED (16 + LISTEN_ADDR_SHOWN)

/* --admin's one phrase for a value it cannot read */
#define LISTEN_ADDR_ADMIN_EXPECTED "expected PORT, HOST:PORT, [V6]:PORT or unix:/path"

enum listen_kind { LISTEN_TCP, LISTEN_UNIX };

struct listen_addr {
    enum listen_kind kind;
    struct sockaddr_storage ss; /* TCP: the address to bind; UNIX: sockaddr_un */
    socklen_t sslen;
    /* TCP: the HOST as written ("127.0.0.1" for --admin's bare port), for
     * self_request by name */
    char host[LISTEN_ADDR_TEXT];
    /* as printed: "127.0.0.1:3128", "[::1]:3128", "unix:/p"; a unix path
     * shown \ooo (text_shown()): the operator's, it may hold a line end or a
     * terminal escape, which would forge lines of standard error */
    char text[LISTEN_ADDR_SHOWN];
    /* what its errors name it by: the option and its value as the operator
     * wrote them ("--listen localhost:3128"), shown \ooo, where <text> is
     * the address it came to (and, for port 0, the one bound); empty: no
     * option gave it (serve's default, run's own socket), <text> names it */
    char named[LISTEN_ADDR_NAMED];
};

/* Parses the --listen value <s> into <out>. Returns 0, or -1 with <*why>
 * set to a static phrase naming what is wrong. */
int listen_addr_parse(const char *s, struct listen_addr *out, const char **why);
/* Parses the --admin value <s> into <out>: as listen_addr_parse(), and
 * "PORT" or ":PORT" for 127.0.0.1:PORT, port 0 refused. Returns 0, or -1
 * with <*why> a static phrase (LISTEN_ADDR_ADMIN_EXPECTED for any
 * malformed value). */
int listen_addr_parse_admin(const char *s, struct listen_addr *out, const char **why);
/* Has <a>'s errors name it as option <opt> given <value> (see named). */
void listen_addr_name(struct listen_addr *a, const char *opt, const char *value);
/* The value as the operator gave it, shown \ooo (named past its option),
 * or <a>'s text when no option gave it. */
const char *listen_addr_given(const struct listen_addr *a);

/* Looks <host> up for a listener on <port> (the PORT already read): its
 * first address into <ss> (<sslen> bytes). <v6_literal>: <host> was in
 * brackets, and only an IPv6 literal (a zone allowed) is taken. Returns 0,
 * -1 when it names no address, -2 when the address does not fit <ss>. */
typedef int (*listen_addr_resolver)(const char *host, uint16_t port, bool v6_literal,
                                    struct sockaddr_storage *ss, socklen_t *sslen);
/* getaddrinfo() unless a test or a fuzzer sets another (one that never
 * asks DNS, or that answers differently from one call to the next).
 * Returns the resolver in force before. */
listen_addr_resolver listen_addr_set_resolver(listen_addr_resolver next);

/* A listen_addr_resolver that takes IP literals only (a name is -1): it
 * never asks DNS, for a fuzzer or a test. */
int listen_addr_resolve_literal(const char *host, uint16_t port, bool v6_literal,
                                struct sockaddr_storage *ss, socklen_t *sslen);

/* Formats "ip:port" / "[v6]:port" / "unix:path" for <sa> into <out>. */
void sockaddr_format(const struct sockaddr *sa, char *out, size_t outlen);
/* Converts an AF_INET/AF_INET6 sockaddr to an ipaddr and port. Returns 0 or -1. */
int sockaddr_to_ipaddr(const struct sockaddr *sa, struct ipaddr *ip, uint16_t *port);

#endif
