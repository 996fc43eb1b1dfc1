#include "util/ipaddr.h"

#include <stdio.h>
#include <string.h>

#include "util/hex.h"
#include "util/units.h"

/* The longest IPv6 text is 45 bytes (ffff:...:255.255.255.255), 47 with
 * brackets; anything with a ':' longer than this is not an address. An IPv4
 * attempt (ends in a number) longer than this is refused as well, so no
 * spelling can make the parser do unbounded work or hide a huge number. */
#define IP_LITERAL_MAX 64

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool has_hex_prefix(const char *s, size_t len)
{
    return len >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
}

/* Strict dotted quad: four decimal parts of 1-3 digits, no leading zeros,
 * each at most 255. Used for IPv6 tails and for cidr: rules. */
static bool parse_dotted_quad(const char *s, size_t len, uint8_t out[4])
{
    size_t i = 0;
    for (int part = 0; part < 4; part++) {
        if (part > 0) {
            if (i >= len || s[i] != '.')
                return false;
            i++;
        }
        size_t start = i;
        unsigned v = 0;
        while (i < len && is_digit(s[i]) && i - start < 3) {
            v = v * 10 + (unsigned)(s[i] - '0');
            i++;
        }
        size_t n = i - start;
        if (n == 0 || v > 255 || (n > 1 && s[start] == '0'))
            return false;
        if (i < len && is_digit(s[i]))
            return false; /* a fourth digit */
        out[part] = (uint8_t)v;
    }
    return i == len;
}

/* IPv6 text in any RFC 4291 form, without brackets or zone: groups of 1-4
 * hex digits, at most one "::", an optional dotted-quad tail. */
static bool parse_v6(const char *s, size_t len, struct ipaddr *out)
{
    uint16_t g[8];
    int n = 0;
    int gap = -1; /* index of the group where "::" stands */
    size_t i = 0;

    if (len < 2 || len > IP_LITERAL_MAX)
        return false;
    if (s[0] == ':') {
        if (s[1] != ':')
            return false;
        gap = 0;
        i = 2;
    }
    while (i < len) {
        size_t start = i;
        unsigned v = 0;
        while (i < len && hex_digit_value((unsigned char)s[i]) >= 0 && i - start < 4) {
            v = (v << 4) | (unsigned)hex_digit_value((unsigned char)s[i]);
            i++;
        }
        if (i < len && s[i] == '.') {
            /* The dotted-quad tail: the rest of the input, two groups. */
            uint8_t q[4];
            if (n > 6 || !parse_dotted_quad(s + start, len - start, q))
                return false;
            g[n++] = (uint16_t)(q[0] << 8 | q[1]);
            g[n++] = (uint16_t)(q[2] << 8 | q[3]);
            i = len;
            break;
        }
        if (i == start || n == 8)
            return false;
        if (i < len && hex_digit_value((unsigned char)s[i]) >= 0)
            return false; /* a fifth hex digit */
        g[n++] = (uint16_t)v;
        if (i == len)
            break;
        if (s[i] != ':')
            return false;
        i++;
        if (i < len && s[i] == ':') {
            if (gap >= 0)
                return false;
            gap = n;
            i++;
        } else if (i == len) {
            return false; /* one trailing colon */
        }
    }
    if (gap < 0 ? n != 8 : n >= 8)
        return false;

    memset(out->b, 0, sizeof(out->b));
    int k = 0;
    for (int j = 0; j < n; j++) {
        if (j == gap)
            k += 8 - n;
        out->b[2 * k] = (uint8_t)(g[j] >> 8);
        out->b[2 * k + 1] = (uint8_t)g[j];
        k++;
    }
    return true;
}

/* The WHATWG "ends in a number" check, stricter on hex: a last label (one
 * trailing dot ignored) of decimal digits or starting with 0x is an IPv4
 * attempt, so "0x1g" is an invalid address rather than a name. */
static bool ends_in_number(const char *s, size_t len)
{
    if (len > 0 && s[len - 1] == '.')
        len--;
    size_t start = len;
    while (start > 0 && s[start - 1] != '.')
        start--;
    const char *last = s + start;
    size_t n = len - start;
    if (n == 0)
        return false;
    if (has_hex_prefix(last, n))
        return true;
    for (size_t i = 0; i < n; i++)
        if (!is_digit(last[i]))
            return false;
    return true;
}

/* One part of a WHATWG IPv4 address: 0x-hex (digits may be absent: "0x" is
 * 0), 0-octal, or decimal. Values above 2^32-1 fail. */
static bool parse_v4_number(const char *s, size_t len, uint64_t *out)
{
    unsigned base = 10;
    uint64_t v = 0;
    if (len == 0)
        return false;
    if (has_hex_prefix(s, len)) {
        base = 16;
        s += 2;
        len -= 2;
    } else if (len > 1 && s[0] == '0') {
        base = 8;
        s++;
        len--;
    }
    for (size_t i = 0; i < len; i++) {
        int d = hex_digit_value((unsigned char)s[i]);
        if (d < 0 || (unsigned)d >= base)
            return false;
        v = v * base + (unsigned)d;
        if (v > UINT32_MAX)
            return false;
    }
    *out = v;
    return true;
}

static enum ip_literal_kind parse_v4(const char *s, size_t len, struct ipaddr *out)
{
    uint64_t parts[4];
    size_t nparts = 0;
    size_t i = 0;

    if (len > 0 && s[len - 1] == '.')
        len--;
    if (len > IP_LITERAL_MAX)
        return IP_LITERAL_INVALID;
    while (i <= len) {
        size_t start = i;
        while (i < len && s[i] != '.')
            i++;
        if (nparts == 4 || !parse_v4_number(s + start, i - start, &parts[nparts]))
            return IP_LITERAL_INVALID;
        nparts++;
        i++; /* past the dot, or past the end */
    }
    for (size_t k = 0; k + 1 < nparts; k++)
        if (parts[k] > 255)
            return IP_LITERAL_INVALID;
    uint64_t last = parts[nparts - 1];
    if (last >= (uint64_t)1 << (8 * (5 - nparts)))
        return IP_LITERAL_INVALID;
    uint32_t v = (uint32_t)last;
    for (size_t k = 0; k + 1 < nparts; k++)
        v |= (uint32_t)parts[k] << (8 * (3 - k));
    ipaddr_from_v4(out, v);
    return IP_LITERAL_V4;
}

enum ip_literal_kind ip_literal_parse(const char *s, size_t len, struct ipaddr *out)
{
    struct ipaddr tmp;
    if (s == NULL || len == 0)
        return IP_LITERAL_NONE;

    bool bracketed = s[0] == '[' || s[len - 1] == ']';
    if (bracketed || memchr(s, ':', len) != NULL) {
        if (bracketed) {
            if (len < 2 || s[0] != '[' || s[len - 1] != ']')
                return IP_LITERAL_INVALID;
            s++;
            len -= 2;
        }
        if (!parse_v6(s, len, &tmp))
            return IP_LITERAL_INVALID;
        *out = tmp;
        return IP_LITERAL_V6;
    }
    if (!ends_in_number(s, len))
        return IP_LITERAL_NONE;
    enum ip_literal_kind k = parse_v4(s, len, &tmp);
    if (k == IP_LITERAL_V4)
        *out = tmp;
    return k;
}

static const uint8_t v4_mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

bool ipaddr_is_v4(const struct ipaddr *a)
{
    return memcmp(a->b, v4_mapped_prefix, sizeof(v4_mapped_prefix)) == 0;
}

void ipaddr_from_v4(struct ipaddr *out, uint32_t host_order)
{
    memcpy(out->b, v4_mapped_prefix, sizeof(v4_mapped_prefix));
    out->b[12] = (uint8_t)(host_order >> 24);
    out->b[13] = (uint8_t)(host_order >> 16);
    out->b[14] = (uint8_t)(host_order >> 8);
    out->b[15] = (uint8_t)host_order;
}

uint32_t ipaddr_v4(const struct ipaddr *a)
{
    return (uint32_t)a->b[12] << 24 | (uint32_t)a->b[13] << 16 | (uint32_t)a->b[14] << 8 |
           (uint32_t)a->b[15];
}

/* RFC 5952: lower-case hex without leading zeros, the longest run of two or
 * more zero groups (the first on a tie) shortened to "::". */
static void format_v6(const struct ipaddr *a, char *buf, size_t buflen)
{
    unsigned g[8];
    int best = -1, bestlen = 0;
    for (int i = 0; i < 8; i++)
        g[i] = (unsigned)a->b[2 * i] << 8 | a->b[2 * i + 1];
    for (int i = 0; i < 8;) {
        if (g[i] != 0) {
            i++;
            continue;
        }
        int j = i;
        while (j < 8 && g[j] == 0)
            j++;
        if (j - i > bestlen) {
            best = i;
            bestlen = j - i;
        }
        i = j;
    }
    if (bestlen < 2)
        best = -1;

    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < 8 && n < buflen; i++) {
        int w;
        if (i == best) {
            w = snprintf(buf + n, buflen - n, "::");
            i += bestlen - 1;
        } else {
            bool sep = i > 0 && i != best + bestlen;
            w = snprintf(buf + n, buflen - n, "%s%x", sep ? ":" : "", g[i]);
        }
        if (w < 0)
            break;
        n += (size_t)w;
    }
}

/* Writes the dotted quad of IPv4 <a> and its NUL at <p> (16 bytes of
 * room). By hand: a literal target is formatted on every request. */
static void format_v4(const struct ipaddr *a, char *p)
{
    for (int i = 12; i < 16; i++) {
        p += format_uint(p, a->b[i], 0);
        *p++ = i < 15 ? '.' : '\0';
    }
}

char *ipaddr_format(const struct ipaddr *a, char *out, size_t outlen)
{
    char buf[IPADDR_STRLEN];
    if (out == NULL || outlen == 0)
        return out;
    if (ipaddr_is_v4(a) && outlen >= sizeof("255.255.255.255")) {
        format_v4(a, out); /* the longest fits: no copy through <buf> */
        return out;
    }
    if (ipaddr_is_v4(a))
        format_v4(a, buf);
    else
        format_v6(a, buf, sizeof(buf));
    size_t n = strlen(buf);
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, buf, n);
    out[n] = '\0';
    return out;
}

bool ipaddr_equal(const struct ipaddr *a, const struct ipaddr *b)
{
    return memcmp(a->b, b->b, sizeof(a->b)) == 0;
}

bool ipaddr_is_loopback(const struct ipaddr *a)
{
    static const struct ipaddr lo6 = {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
    return ipaddr_is_v4(a) ? (ipaddr_v4(a) >> 24) == 127 : ipaddr_equal(a, &lo6);
}

static bool prefix_has_host_bits(const struct ipaddr *a, unsigned prefix)
{
    for (unsigned bit = prefix; bit < 128; bit++)
        if (a->b[bit / 8] & (0x80u >> (bit % 8)))
            return true;
    return false;
}

int cidr_parse(const char *s, struct cidr *out)
{
    struct ipaddr a;
    unsigned prefix;
    if (s == NULL)
        return -1;
    size_t len = strnlen(s, IP_LITERAL_MAX + 5);
    if (len > IP_LITERAL_MAX + 4)
        return -1;
    const char *slash = memchr(s, '/', len);
    size_t alen = slash ? (size_t)(slash - s) : len;
    bool v6 = memchr(s, ':', alen) != NULL;

    if (v6) {
        if (!parse_v6(s, alen, &a))
            return -1;
    } else {
        uint8_t q[4];
        if (!parse_dotted_quad(s, alen, q))
            return -1;
        ipaddr_from_v4(&a,
                       (uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3]);
    }
    if (slash == NULL) {
        prefix = 128;
    } else {
        const char *p = slash + 1;
        size_t plen = len - alen - 1;
        if (plen == 0 || plen > 3 || (plen > 1 && p[0] == '0'))
            return -1;
        prefix = 0;
        for (size_t i = 0; i < plen; i++) {
            if (!is_digit(p[i]))
                return -1;
            prefix = prefix * 10 + (unsigned)(p[i] - '0');
        }
        if (prefix > (v6 ? 128u : 32u))
            return -1;
        if (!v6)
            prefix += 96;
    }
    if (prefix_has_host_bits(&a, prefix))
        return -2;
    out->addr = a;
    out->prefix = (uint8_t)prefix;
    return 0;
}

bool cidr_contains(const struct cidr *c, const struct ipaddr *a)
{
    unsigned full = c->prefix / 8, rest = c->prefix % 8;
    if (c->prefix > 128)
        return false;
    if (memcmp(c->addr.b, a->b, full) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xffu << (8 - rest));
    return (c->addr.b[full] & mask) == (a->b[full] & mask);
}

char *cidr_format(const struct cidr *c, char *out, size_t outlen)
{
    char addr[IPADDR_STRLEN];
    unsigned prefix = c->prefix;
    if (out == NULL || outlen == 0)
        return out;
    ipaddr_format(&c->addr, addr, sizeof(addr));
    if (ipaddr_is_v4(&c->addr) && prefix >= 96)
        prefix -= 96;
    snprintf(out, outlen, "%s/%u", addr, prefix);
    return out;
}
