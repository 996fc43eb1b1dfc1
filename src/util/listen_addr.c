/* listen_addr: one reading of a listen address for --listen and --admin
 * (listen_addr.h). read_addr() finds what is wrong, as a fault; each
 * option words the fault its own way (listen_why(), admin_why()), so that
 * the two read the same addresses alike and say what they always said. */
#include "util/listen_addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/text_json.h"

enum fault {
    FAULT_NONE,
    FAULT_UNIX_RELATIVE, /* unix: and no absolute path */
    FAULT_UNIX_LONG,     /* a path sun_path cannot hold */
    FAULT_NO_PORT,       /* no ":PORT", or no HOST before it */
    FAULT_BRACKETS,      /* "[" without "]:" after the address */
    FAULT_V6_SIZE,       /* "[]", or brackets holding too long a text */
    FAULT_BARE_COLON,    /* an unbracketed HOST with a colon, or too long */
    FAULT_PORT,          /* not digits only, or past 65535 */
    FAULT_PORT_ZERO,     /* --admin only */
    FAULT_V6_LITERAL,    /* brackets holding no IPv6 literal */
    FAULT_UNRESOLVED,    /* a HOST that names no address */
    FAULT_UNSUPPORTED,   /* an address sockaddr_storage cannot hold */
};

/* getaddrinfo() of <host> as listen_addr_resolver says; <numeric>: a
 * literal only (AI_NUMERICHOST), never a name, so never DNS. */
static int lookup(const char *host, uint16_t port, bool v6_literal, bool numeric,
                  struct sockaddr_storage *ss, socklen_t *sslen)
{
    char service[8];
    snprintf(service, sizeof(service), "%u", (unsigned)port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE | (v6_literal || numeric ? AI_NUMERICHOST : 0);
    hints.ai_family = v6_literal ? AF_INET6 : AF_UNSPEC;
    if (getaddrinfo(host, service, &hints, &res) != 0 || res == NULL)
        return -1;
    int rc = -2;
    if (res->ai_addrlen <= sizeof(*ss)) {
        memcpy(ss, res->ai_addr, res->ai_addrlen);
        *sslen = (socklen_t)res->ai_addrlen;
        rc = 0;
    }
    freeaddrinfo(res);
    return rc;
}

static int resolve_getaddrinfo(const char *host, uint16_t port, bool v6_literal,
                               struct sockaddr_storage *ss, socklen_t *sslen)
{
    return lookup(host, port, v6_literal, false, ss, sslen);
}

int listen_addr_resolve_literal(const char *host, uint16_t port, bool v6_literal,
                                struct sockaddr_storage *ss, socklen_t *sslen)
{
    return lookup(host, port, v6_literal, true, ss, sslen);
}

static listen_addr_resolver resolver = resolve_getaddrinfo;

listen_addr_resolver listen_addr_set_resolver(listen_addr_resolver next)
{
    listen_addr_resolver before = resolver;
    resolver = next != NULL ? next : resolve_getaddrinfo;
    return before;
}

void sockaddr_format(const struct sockaddr *sa, char *out, size_t outlen)
{
    char ip[INET6_ADDRSTRLEN];
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        snprintf(out, outlen, "%s:%u", ip, (unsigned)ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
        snprintf(out, outlen, "[%s]:%u", ip, (unsigned)ntohs(in6->sin6_port));
    } else if (sa->sa_family == AF_UNIX) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)(const void *)sa;
        snprintf(out, outlen, "unix:%.*s", (int)sizeof(un->sun_path), un->sun_path);
    } else {
        snprintf(out, outlen, "?");
    }
}

int sockaddr_to_ipaddr(const struct sockaddr *sa, struct ipaddr *ip, uint16_t *port)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        ipaddr_from_v4(ip, ntohl(in->sin_addr.s_addr));
        *port = ntohs(in->sin_port);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        memcpy(ip->b, &in6->sin6_addr, 16);
        *port = ntohs(in6->sin6_port);
        return 0;
    }
    return -1;
}

/* Decimal digits only: strtoul() alone would skip blanks and take a sign. */
static enum fault read_port(const char *s, uint16_t *port)
{
    char *end;
    if (*s < '0' || *s > '9')
        return FAULT_PORT;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > 65535)
        return FAULT_PORT;
    *port = (uint16_t)v;
    return FAULT_NONE;
}

static enum fault read_unix(const char *path, struct listen_addr *out)
{
    struct sockaddr_un *un = (struct sockaddr_un *)(void *)&out->ss;
    size_t len = strlen(path);
    if (len == 0 || path[0] != '/')
        return FAULT_UNIX_RELATIVE;
    if (len >= sizeof(un->sun_path))
        return FAULT_UNIX_LONG;
    out->kind = LISTEN_UNIX;
    un->sun_family = AF_UNIX;
    memcpy(un->sun_path, path, len + 1);
    out->sslen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
    memcpy(out->text, "unix:", 5);
    text_shown_into(out->text + 5, sizeof(out->text) - 5, path);
    return FAULT_NONE;
}

/* <s> (not unix:) split into out->host and the text of its port. A bare
 * port, or an empty HOST, is 127.0.0.1's when <port_alone>. */
static enum fault split_host(const char *s, bool port_alone, struct listen_addr *out,
                             const char **port_text)
{
    const char *colon;
    size_t hlen;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (rb == NULL || rb[1] != ':')
            return FAULT_BRACKETS;
        hlen = (size_t)(rb - s - 1);
        if (hlen == 0 || hlen >= sizeof(out->host))
            return FAULT_V6_SIZE;
        memcpy(out->host, s + 1, hlen);
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        hlen = colon != NULL ? (size_t)(colon - s) : 0;
        if (hlen == 0 && !port_alone)
            return FAULT_NO_PORT;
        if (hlen >= sizeof(out->host) || memchr(s, ':', hlen) != NULL)
            return FAULT_BARE_COLON;
        if (hlen == 0)
            hlen = (size_t)snprintf(out->host, sizeof(out->host), "127.0.0.1");
        else
            memcpy(out->host, s, hlen);
    }
    out->host[hlen] = '\0';
    *port_text = colon != NULL ? colon + 1 : s;
    return FAULT_NONE;
}

/* <s> read into <out>; <admin>: --admin's, whose bare port (or empty HOST)
 * is 127.0.0.1's and whose port 0 is refused. */
static enum fault read_addr(const char *s, bool admin, struct listen_addr *out)
{
    memset(out, 0, sizeof(*out));
    if (strncmp(s, "unix:", 5) == 0)
        return read_unix(s + 5, out);
    const char *port_text;
    uint16_t port;
    enum fault f = split_host(s, admin, out, &port_text);
    if (f == FAULT_NONE)
        f = read_port(port_text, &port);
    if (f != FAULT_NONE)
        return f;
    /* A port the kernel picks is told nowhere, so nothing could scrape it,
     * and the gateway could not refuse requests to it (self_request). */
    if (admin && port == 0)
        return FAULT_PORT_ZERO;
    bool v6_literal = s[0] == '[';
    int rc = resolver(out->host, port, v6_literal, &out->ss, &out->sslen);
    if (rc == -2)
        return FAULT_UNSUPPORTED;
    if (rc != 0)
        return v6_literal ? FAULT_V6_LITERAL : FAULT_UNRESOLVED;
    out->kind = LISTEN_TCP;
    sockaddr_format((const struct sockaddr *)&out->ss, out->text, sizeof(out->text));
    return FAULT_NONE;
}

/* The words of a unix: fault, the same for both options. */
static const char *unix_why(enum fault f)
{
    return f == FAULT_UNIX_RELATIVE ? "unix socket path must be absolute"
                                    : "unix socket path too long";
}

static const char *listen_why(enum fault f)
{
    switch (f) {
    case FAULT_UNIX_RELATIVE:
    case FAULT_UNIX_LONG:
        return unix_why(f);
    case FAULT_BRACKETS:
        return "expected [V6]:PORT";
    case FAULT_V6_SIZE:
        return "invalid IPv6 address";
    case FAULT_BARE_COLON:
        return "expected HOST:PORT (IPv6 needs brackets)";
    case FAULT_PORT:
    case FAULT_PORT_ZERO:
        return "invalid port";
    case FAULT_V6_LITERAL:
    case FAULT_UNRESOLVED:
        return "cannot resolve listen address";
    case FAULT_UNSUPPORTED:
        return "unsupported address";
    case FAULT_NO_PORT:
    case FAULT_NONE:
        break;
    }
    return "expected HOST:PORT, [V6]:PORT or unix:/path";
}

static const char *admin_why(enum fault f)
{
    switch (f) {
    case FAULT_UNIX_RELATIVE:
    case FAULT_UNIX_LONG:
        return unix_why(f);
    case FAULT_PORT_ZERO:
        return "port 0 is not allowed: name the port to serve on";
    case FAULT_UNRESOLVED:
        return "cannot resolve the host name";
    case FAULT_UNSUPPORTED:
        return "unsupported address";
    default:
        return LISTEN_ADDR_ADMIN_EXPECTED;
    }
}

int listen_addr_parse(const char *s, struct listen_addr *out, const char **why)
{
    enum fault f = read_addr(s, false, out);
    if (f == FAULT_NONE)
        return 0;
    *why = listen_why(f);
    return -1;
}

int listen_addr_parse_admin(const char *s, struct listen_addr *out, const char **why)
{
    enum fault f = read_addr(s, true, out);
    if (f == FAULT_NONE)
        return 0;
    *why = admin_why(f);
    return -1;
}

void listen_addr_name(struct listen_addr *a, const char *opt, const char *value)
{
    int n = snprintf(a->named, sizeof(a->named), "%s ", opt);
    if (n > 0 && (size_t)n < sizeof(a->named))
        text_shown_fit(a->named + n, sizeof(a->named) - (size_t)n, value);
}

const char *listen_addr_given(const struct listen_addr *a)
{
    const char *space = strchr(a->named, ' ');
    return space != NULL ? space + 1 : a->text;
}
