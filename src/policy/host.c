#include "policy/host.h"

#include <idn2.h>
#include <libpsl.h>
#include <string.h>
#include <strings.h>

#include "util/utf8.h"

/* Longest input worth looking at: a Unicode name of up to 253 ASCII bytes
 * once encoded can take a few bytes per character before it. */
#define HOST_INPUT_MAX 1024

static const char WHY_EMPTY_HOST[] = "empty host";
static const char WHY_EMPTY_LABEL[] = "empty label";
static const char WHY_LONG_LABEL[] = "label longer than 63 bytes";
static const char WHY_LONG_NAME[] = "name longer than 253 bytes";
static const char WHY_BAD_CHAR[] = "character not allowed in a host name";
static const char WHY_HYPHEN[] = "label starts or ends with a hyphen";
static const char WHY_BAD_IP[] = "invalid IP literal";
static const char WHY_BAD_IDN[] = "invalid internationalised name";

static bool is_ldh(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static void fill_ip(const struct ipaddr *ip, struct host *out)
{
    out->kind = HOST_IP;
    out->ip = *ip;
    ipaddr_format(ip, out->name, sizeof(out->name));
}

/* The IP-literal step of host_normalise(), taken on the input and again
 * after IDNA: 1 when <s> is an IP literal (filled in <out>), 0 when it is
 * not one, -1 when it is a malformed one. */
static int ip_step(const char *s, size_t len, struct host *out)
{
    struct ipaddr ip;
    switch (ip_literal_parse(s, len, &ip)) {
    case IP_LITERAL_V4:
    case IP_LITERAL_V6:
        fill_ip(&ip, out);
        return 1;
    case IP_LITERAL_INVALID:
        return -1;
    case IP_LITERAL_NONE:
    default:
        return 0;
    }
}

/* Checks an ASCII name of <len> bytes label by label. */
static const char *ldh_check(const char *s, size_t len)
{
    size_t start = 0;
    if (len == 0)
        return WHY_EMPTY_HOST;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != '.') {
            if (!is_ldh((unsigned char)s[i]))
                return WHY_BAD_CHAR;
            continue;
        }
        size_t n = i - start;
        if (n == 0)
            return WHY_EMPTY_LABEL;
        if (n > 63)
            return WHY_LONG_LABEL;
        if (s[start] == '-' || s[i - 1] == '-')
            return WHY_HYPHEN;
        start = i + 1;
    }
    if (len > HOST_MAX)
        return WHY_LONG_NAME;
    return NULL;
}

static bool has_alabel(const char *s, size_t len)
{
    for (size_t i = 0; i + 4 <= len; i++) {
        if ((i == 0 || s[i - 1] == '.') && (s[i] == 'x' || s[i] == 'X') &&
            (s[i + 1] == 'n' || s[i + 1] == 'N') && s[i + 2] == '-' && s[i + 3] == '-')
            return true;
    }
    return false;
}

/* UTS 46 to ASCII: non-transitional first, transitional as a fallback.
 * Returns a string the caller frees with idn2_free(), or NULL. */
static char *idna_to_ascii(const char *s, size_t len)
{
    char in[HOST_INPUT_MAX + 1];
    char *res = NULL;
    memcpy(in, s, len);
    in[len] = '\0';
    if (idn2_to_ascii_8z(in, &res, IDN2_NONTRANSITIONAL) == IDN2_OK)
        return res;
    res = NULL;
    if (idn2_to_ascii_8z(in, &res, IDN2_TRANSITIONAL) == IDN2_OK)
        return res;
    return NULL;
}

int host_normalise(const char *s, size_t len, struct host *out, const char **why)
{
    char name[HOST_INPUT_MAX + 1];
    const char *w;
    bool ascii = true;

    if (s == NULL || len == 0) {
        w = WHY_EMPTY_HOST;
        goto err;
    }
    if (len > HOST_INPUT_MAX) {
        w = WHY_LONG_NAME;
        goto err;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80)
            ascii = false;
        else if (c < 0x20 || c == 0x7f)
            goto bad_char;
    }

    int lit = ip_step(s, len, out);
    if (lit != 0) {
        if (lit > 0)
            return 0;
        w = WHY_BAD_IP;
        goto err;
    }

    /* A name: plain ASCII bytes other than letters, digits, '-', '_' and
     * '.' are refused before IDNA can map them (it allows ':' or '/'). */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80 && c != '.' && !is_ldh(c))
            goto bad_char;
    }
    if (s[len - 1] == '.')
        len--;
    if (len == 0) {
        w = WHY_EMPTY_HOST;
        goto err;
    }
    if (s[len - 1] == '.') {
        w = WHY_EMPTY_LABEL;
        goto err;
    }

    if (ascii && !has_alabel(s, len)) {
        for (size_t i = 0; i < len; i++) {
            char c = s[i];
            name[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
        }
    } else {
        if (!ascii && !utf8_valid((const unsigned char *)s, len)) {
            w = WHY_BAD_IDN;
            goto err;
        }
        char *res = idna_to_ascii(s, len);
        if (res == NULL) {
            w = WHY_BAD_IDN;
            goto err;
        }
        size_t rlen = strlen(res);
        if (rlen > HOST_INPUT_MAX) {
            idn2_free(res);
            w = WHY_LONG_NAME;
            goto err;
        }
        memcpy(name, res, rlen);
        idn2_free(res);
        len = rlen;
        /* IDNA maps full-width digits and dots: "１２７.０.０.１" is an IP. */
        for (size_t i = 0; i < len; i++)
            if (name[i] != '.' && !is_ldh((unsigned char)name[i]))
                goto bad_char;
        if ((lit = ip_step(name, len, out)) != 0) {
            if (lit > 0)
                return 0;
            w = WHY_BAD_IP;
            goto err;
        }
    }

    w = ldh_check(name, len);
    if (w != NULL)
        goto err;
    out->kind = HOST_NAME;
    memcpy(out->name, name, len);
    out->name[len] = '\0';
    memset(&out->ip, 0, sizeof(out->ip));
    return 0;

bad_char:
    w = WHY_BAD_CHAR;
err:
    if (why != NULL)
        *why = w;
    return -1;
}

/* Whether <s> (<len> bytes) is <text>, in any case, IPv6 bare or
 * bracketed. */
static bool ip_text_sent(const char *s, size_t len, const char *text)
{
    size_t n = strlen(text);
    if (strchr(text, ':') != NULL && len == n + 2 && s[0] == '[' && s[len - 1] == ']') {
        s++;
        len -= 2;
    }
    return len == n && strncasecmp(s, text, n) == 0;
}

bool host_sent_names(const char *s, size_t len, const struct host *target,
                     struct ip_spelling spelling)
{
    struct host h;
    const char *why;
    /* An IP is named by its text (the parse of the canonical one would
     * give the same address and text back), never by another spelling. */
    if (target->kind == HOST_IP)
        return ip_text_sent(s, len, target->name) ||
               (spelling.as_written != NULL && ip_text_sent(s, len, spelling.as_written));
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80)
            return false;
    if (host_normalise(s, len, &h, &why) < 0)
        return false;
    return h.kind == target->kind && strcmp(h.name, target->name) == 0;
}

bool host_sni_names(const char *s, size_t len, const struct host *target)
{
    return (len == 0 || s[0] != '[') && host_sent_names(s, len, target, IP_SPELLING_CANONICAL);
}

/* True when libpsl's built-in Public Suffix List holds <name> (a normal
 * form) as a suffix of <section> (PSL_TYPE_ICANN or PSL_TYPE_PRIVATE), by
 * an explicit rule: the implicit "*" rule (any unlisted last label) is left
 * out, single labels being refused before this is asked. Without the list
 * every name is one, so a wildcard fails closed. The only reader of the
 * list. */
static bool psl_lists(const char *name, int section)
{
    const psl_ctx_t *psl = psl_builtin();
    return psl == NULL || psl_is_public_suffix2(psl, name, section | PSL_TYPE_NO_STAR_RULE);
}

enum name_extra host_name_extra(const char *s, size_t len)
{
    const char *colon = memchr(s, ':', len);
    if (colon != NULL && len - (size_t)(colon - s) >= 3 && memcmp(colon, "://", 3) == 0)
        return NAME_EXTRA_URL;
    if (len > 0 && s[0] == '[') {
        /* brackets hold an IPv6 literal (a ':' inside): around a name or
         * an IPv4 address ("[a.com]", "[a.com]:443") they are a URL's
         * authority pasted whole */
        const char *close = memchr(s, ']', len);
        size_t inner = close != NULL ? (size_t)(close - s) - 1 : len - 1;
        if (memchr(s + 1, ':', inner) == NULL)
            return NAME_EXTRA_BRACKETS;
        if (close != NULL && (size_t)(close - s) + 1 < len && close[1] == ':')
            return NAME_EXTRA_PORT;
        return NAME_EXTRA_NONE;
    }
    if (colon != NULL && memchr(colon + 1, ':', len - (size_t)(colon + 1 - s)) == NULL)
        return NAME_EXTRA_PORT;
    return NAME_EXTRA_NONE;
}

int host_pattern_parse(const char *s, struct host_pattern *out, const char **why)
{
    struct host h;
    const char *w;
    enum pattern_kind kind = PATTERN_EXACT;

    if (s == NULL) {
        w = WHY_EMPTY_HOST;
        goto err;
    }
    size_t len = strnlen(s, HOST_INPUT_MAX + 1);
    if (strcmp(s, "*") == 0) {
        w = "'*' matches everything; name the hosts";
        goto err;
    }
    /* A URL or a name with its port, pasted in a hurry: refused as before,
     * but said so. */
    switch (host_name_extra(s, len)) {
    case NAME_EXTRA_URL:
        w = "a host pattern is a name, not a URL: write the name alone, without scheme, port "
            "or path";
        goto err;
    case NAME_EXTRA_PORT:
        w = "a host pattern holds no port: write the name alone (a rule's ports go in ports:, "
            "and deny covers every port)";
        goto err;
    case NAME_EXTRA_BRACKETS:
        w = "brackets hold an IPv6 literal only, and a host pattern holds no port: write the "
            "name alone";
        goto err;
    case NAME_EXTRA_NONE:
        break;
    }
    if (len >= 2 && s[0] == '*' && s[1] == '.') {
        kind = PATTERN_WILDCARD;
        s += 2;
        /* Measured again: <len> stopped counting at HOST_INPUT_MAX + 1, and
         * two less would let a longer suffix through cut short. */
        len = strnlen(s, HOST_INPUT_MAX + 1);
    }
    if (memchr(s, '*', len) != NULL) {
        w = "'*' is allowed only as the whole first label, as in *.example.com";
        goto err;
    }
    if (host_normalise(s, len, &h, &w) != 0)
        goto err;
    if (h.kind == HOST_IP) {
        w = "IP literals belong in a cidr: rule";
        goto err;
    }
    if (kind == PATTERN_WILDCARD) {
        if (strchr(h.name, '.') == NULL) {
            w = "a wildcard needs a suffix of two labels or more";
            goto err;
        }
        if (psl_lists(h.name, PSL_TYPE_ICANN)) {
            w = "a wildcard over a public suffix matches other owners' hosts";
            goto err;
        }
    }
    out->kind = kind;
    memcpy(out->name, h.name, sizeof(out->name));
    return 0;

err:
    if (why != NULL)
        *why = w;
    return -1;
}

bool host_pattern_matches(const struct host_pattern *p, const char *name)
{
    if (p == NULL || name == NULL)
        return false;
    if (p->kind == PATTERN_EXACT)
        return strcmp(p->name, name) == 0;
    size_t n = strlen(name), sl = strlen(p->name);
    if (sl == 0 || n < sl + 2)
        return false;
    return name[n - sl - 1] == '.' && name[0] != '.' && memcmp(name + n - sl, p->name, sl) == 0;
}

bool host_pattern_over_private_suffix(const struct host_pattern *p)
{
    return p != NULL && p->kind == PATTERN_WILDCARD && psl_lists(p->name, PSL_TYPE_PRIVATE);
}
