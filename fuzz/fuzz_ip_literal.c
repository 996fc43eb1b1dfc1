/* fuzz_ip_literal: ip_literal_parse() and cidr_parse() on any bytes.
 * Invariants: a parsed address formats to text that parses back to the same
 * address (as a host prefix too); anything with ':' is never a name; a
 * parsed CIDR formats to text that parses back to the same CIDR; what the C
 * library reads as an address (inet_aton(), which getaddrinfo() and most
 * clients use for IPv4 in all its spellings, and inet_pton() for IPv6) is
 * that same address or refused (INVALID), never another address, never a
 * name that DNS would then be asked for. */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/ipaddr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_address(const struct ipaddr *a)
{
    char text[IPADDR_STRLEN], cidr_text[IPADDR_STRLEN + 5];
    struct ipaddr back;
    struct cidr c, c2;

    ipaddr_format(a, text, sizeof(text));
    size_t n = strlen(text);
    if (n == 0 || n >= IPADDR_STRLEN)
        abort();
    enum ip_literal_kind k = ip_literal_parse(text, n, &back);
    if (k != (ipaddr_is_v4(a) ? IP_LITERAL_V4 : IP_LITERAL_V6))
        abort();
    if (!ipaddr_equal(a, &back))
        abort();
    /* The canonical text is also a valid host prefix in a policy. */
    if (cidr_parse(text, &c) != 0 || c.prefix != 128 || !cidr_contains(&c, a))
        abort();
    cidr_format(&c, cidr_text, sizeof(cidr_text));
    if (cidr_parse(cidr_text, &c2) != 0 || c2.prefix != 128 || !ipaddr_equal(&c2.addr, a))
        abort();
}

/* The invariant against the C library on <s> (<k>, <a> from
 * ip_literal_parse()). inet_aton() stops at the first white space, which
 * no host reaches the parser with: only inputs without any are compared. */
static void check_libc(const char *s, size_t size, enum ip_literal_kind k, const struct ipaddr *a)
{
    char buf[128];
    struct in_addr v4;
    unsigned char v6[16];
    struct ipaddr want;
    if (size >= sizeof(buf) || memchr(s, '\0', size) != NULL)
        return;
    for (size_t i = 0; i < size; i++)
        if (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))
            return;
    memcpy(buf, s, size);
    buf[size] = '\0';
    if (inet_aton(buf, &v4) != 0)
        ipaddr_from_v4(&want, ntohl(v4.s_addr));
    else if (inet_pton(AF_INET6, buf, v6) == 1)
        memcpy(want.b, v6, sizeof(want.b));
    else
        return;
    if (k == IP_LITERAL_NONE ||
        ((k == IP_LITERAL_V4 || k == IP_LITERAL_V6) && !ipaddr_equal(a, &want)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ipaddr a;
    const char *s = (const char *)data;

    enum ip_literal_kind k = ip_literal_parse(s, size, &a);
    if (k == IP_LITERAL_V4 || k == IP_LITERAL_V6)
        check_address(&a);
    if (k == IP_LITERAL_V4 && !ipaddr_is_v4(&a))
        abort();
    if (size > 0 && memchr(s, ':', size) != NULL && k != IP_LITERAL_V6 && k != IP_LITERAL_INVALID)
        abort();
    check_libc(s, size, k, &a);

    /* cidr_parse takes a terminated string; stop at the first NUL. */
    if (size < 256) {
        char buf[256], text[IPADDR_STRLEN + 5];
        struct cidr c, c2;
        memcpy(buf, data, size);
        buf[size] = '\0';
        int rc = cidr_parse(buf, &c);
        if (rc != 0 && rc != -1 && rc != -2)
            abort();
        if (rc == 0) {
            if (c.prefix > 128 || !cidr_contains(&c, &c.addr))
                abort();
            cidr_format(&c, text, sizeof(text));
            if (cidr_parse(text, &c2) != 0 || c2.prefix != c.prefix ||
                !ipaddr_equal(&c.addr, &c2.addr))
                abort();
        }
    }
    return 0;
}
