/* weburl: webhook URLs and their labels (weburl.h). */
#include "util/weburl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <openssl/sha.h>

#include "util/ipaddr.h"
#include "util/text_json.h"

static bool is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static bool is_alpha(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

/* The text after "SCHEME://" when <s> starts with one (RFC 3986: a letter,
 * then letters, digits, '+', '-' or '.'), else <s> itself. */
static const char *after_scheme(const char *s)
{
    size_t i = 0;
    if (!is_alpha(s[0]))
        return s;
    while (is_alpha(s[i]) || is_digit(s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.')
        i++;
    return strncmp(s + i, "://", 3) == 0 ? s + i + 3 : s;
}

/* Whether the <n> bytes at <s> are a host name libevent's resolver asks DNS
 * for as written: ASCII labels of letters, digits, '-' and '_', none empty
 * or starting or ending with '-', one final dot allowed. Anything else it
 * reads otherwise (evutil_inet_pton takes "1.2.3.+4" and "1.2.3.-0" for
 * addresses) or sends to DNS as bytes no name has. */
static bool is_host_name(const char *s, size_t n)
{
    size_t start = 0;
    if (n > 0 && s[n - 1] == '.')
        n--;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '.') {
            if (!is_alpha(s[i]) && !is_digit(s[i]) && s[i] != '-' && s[i] != '_')
                return false;
            continue;
        }
        if (i == start || s[start] == '-' || s[i - 1] == '-')
            return false;
        start = i + 1;
    }
    return true;
}

/* Checks the host of <len> bytes at <s> (without brackets; <bracketed> when
 * it had them). Returns NULL, or why it is refused. An IP literal must be
 * one the sink's resolver and the C library read alike: IPv6 in brackets
 * (no zone), IPv4 as a plain dotted quad. A name that ip_literal_parse()
 * takes for an IPv4 attempt (0127.0.0.1, 127.1, 0x7f.1, 127.0.0.1.) is
 * not one: libevent reads some as other addresses and asks DNS for the
 * others. */
static const char *host_why(const char *s, size_t len, bool bracketed)
{
    char z[WEBURL_HOST_MAX + 1];
    unsigned char ip[16];
    struct ipaddr a;
    memcpy(z, s, len);
    z[len] = '\0';
    if (bracketed)
        return inet_pton(AF_INET6, z, ip) == 1 ? NULL : "bad host";
    if (!is_host_name(s, len))
        return "bad host";
    if (ip_literal_parse(s, len, &a) != IP_LITERAL_NONE && inet_pton(AF_INET, z, ip) != 1)
        return WEBURL_BAD_IPV4;
    return NULL;
}

bool weburl_is_https(const char *url)
{
    return strncmp(url, "https://", 8) == 0;
}

int weburl_parse(const char *url, struct weburl *u, const char **why)
{
    memset(u, 0, sizeof(*u));
    u->https = weburl_is_https(url);
    if (!u->https && strncmp(url, "http://", 7) != 0) {
        *why = "not an http:// or https:// URL";
        return -1;
    }
    const char *p = url + (u->https ? 8 : 7);
    size_t auth = strcspn(p, "/?#");
    const char *end = p + auth;
    if (memchr(p, '@', auth) != NULL) {
        *why = WEBURL_NO_USERINFO;
        return -1;
    }
    const char *hs = p, *he;
    const char *colon = NULL;
    if (*p == '[') {
        he = memchr(p, ']', auth);
        if (he == NULL) {
            *why = "unterminated [IPv6] host";
            return -1;
        }
        hs = p + 1;
        if (he + 1 < end && he[1] == ':')
            colon = he + 1;
        else if (he + 1 != end) {
            *why = "bad host";
            return -1;
        }
    } else {
        colon = memchr(p, ':', auth);
        he = colon != NULL ? colon : end;
    }
    if (he == hs || he - hs > WEBURL_HOST_MAX) {
        *why = "bad host";
        return -1;
    }
    const char *bad = host_why(hs, (size_t)(he - hs), hs != p);
    if (bad != NULL) {
        *why = bad;
        return -1;
    }
    unsigned long port = u->https ? 443 : 80;
    if (colon != NULL) {
        /* digits only: no sign, no space, at most 5 of them */
        const char *d = colon + 1;
        size_t nd = (size_t)(end - d), i = 0;
        port = 0;
        for (; i < nd && i < 5 && is_digit(d[i]); i++)
            port = port * 10 + (unsigned long)(d[i] - '0');
        if (nd == 0 || i != nd || port == 0 || port > 65535) {
            *why = "bad port";
            return -1;
        }
    }
    u->host = hs;
    u->host_len = (size_t)(he - hs);
    u->hostport = p;
    u->hostport_len = auth;
    u->target = end;
    u->target_len = strcspn(end, "#"); /* a fragment is never sent */
    u->port = (uint16_t)port;
    return 0;
}

/* <s> as text_shown() writes it, in a new string (NULL when out of memory):
 * a label goes to standard error. */
static char *shown_dup(const char *s)
{
    size_t n = 4 * strlen(s) + 1;
    char *out = malloc(n);
    if (out != NULL)
        text_shown_into(out, n, s);
    return out;
}

char *weburl_label(const char *url)
{
    const char *p = after_scheme(url);
    size_t auth = strcspn(p, "/?#");
    const char *at = memrchr(p, '@', auth);
    const char *hp = at != NULL ? at + 1 : p; /* HOST[:PORT], without USER:PASSWORD@ */
    const char *rest = p + auth;
    /* nothing of the path is kept: any segment may be the credential */
    if (at == NULL && (rest[0] == '\0' || strcmp(rest, "/") == 0))
        return shown_dup(url);
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)url, strlen(url), md);
    size_t scheme = (size_t)(p - url), shown = (size_t)(rest - hp);
    char tail[sizeof("/...#12345678")];
    snprintf(tail, sizeof(tail), "/...#%02x%02x%02x%02x", md[0], md[1], md[2], md[3]);
    char *label = malloc(scheme + shown + sizeof(tail));
    if (label == NULL)
        return NULL;
    memcpy(label, url, scheme);
    memcpy(label + scheme, hp, shown);
    memcpy(label + scheme + shown, tail, sizeof(tail));
    char *out = shown_dup(label);
    free(label);
    return out;
}

char *weburl_store_key(const char *url, unsigned listing)
{
    static const char digits[] = "0123456789abcdef";
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)url, strlen(url), md);
    size_t cap = sizeof("sha256:") - 1 + 2 * sizeof(md) + sizeof(" (listing 4294967295)");
    char *key = malloc(cap);
    if (key == NULL)
        return NULL;
    memcpy(key, "sha256:", 7);
    for (size_t i = 0; i < sizeof(md); i++) {
        key[7 + 2 * i] = digits[md[i] >> 4];
        key[8 + 2 * i] = digits[md[i] & 15];
    }
    size_t at = 7 + 2 * sizeof(md);
    key[at] = '\0';
    if (listing > 1)
        snprintf(key + at, cap - at, " (listing %u)", listing);
    return key;
}

char *weburl_store_key_of_old(const char *old, bool *nomem)
{
    *nomem = false;
    if (strncmp(old, "http://", 7) != 0 && strncmp(old, "https://", 8) != 0)
        return NULL;
    /* "URL (listing N)", N from 2 up, as webhook_set_listing() wrote it */
    const char *sp = strchr(old, ' ');
    unsigned listing = 1;
    char *url = NULL;
    if (sp != NULL) {
        char *end = NULL;
        unsigned long n = strncmp(sp, " (listing ", 10) == 0 && sp[10] >= '1' && sp[10] <= '9'
                              ? strtoul(sp + 10, &end, 10)
                              : 0;
        if (n < 2 || n > 4294967295ul || end == NULL || strcmp(end, ")") != 0)
            sp = NULL; /* no listing: the key whole is the URL */
        else
            listing = (unsigned)n;
    }
    if (sp != NULL && (url = strndup(old, (size_t)(sp - old))) == NULL) {
        *nomem = true;
        return NULL;
    }
    char *key = weburl_store_key(url != NULL ? url : old, listing);
    free(url);
    *nomem = key == NULL;
    return key;
}
