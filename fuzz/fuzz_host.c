/* fuzz_host: host_normalise() and host_pattern_parse() on any bytes.
 * Invariants: a normal form is 1..253 bytes of [a-z0-9._-] (names) or the
 * canonical text of the address (IPs); normalising it again gives the same
 * result (a fixed point); a failure always says why; a pattern matches what
 * it names and never its own wildcard suffix; a wildcard "*.X" is accepted
 * only when "X" is, as the same name; the case of ASCII letters changes
 * nothing (the same host, or refused alike), nor does one more trailing
 * dot after a name; host_sent_names() says the input names its normal form
 * exactly when the input is ASCII (any IP spelling), and with the canonical
 * IP spelling asked for never says more, nor anything else of a name; a
 * pattern taken is refused with a port or a scheme, saying so. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/host.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_host(const struct host *h)
{
    struct host again;
    struct ipaddr ip;
    const char *why = NULL;
    char text[IPADDR_STRLEN];
    size_t n = strnlen(h->name, sizeof(h->name));

    if (n == 0 || n > HOST_MAX)
        abort();
    if (h->kind == HOST_NAME) {
        for (size_t i = 0; i < n; i++) {
            char c = h->name[i];
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                  c == '.'))
                abort();
        }
        if (h->name[0] == '.' || h->name[n - 1] == '.')
            abort();
        if (ip_literal_parse(h->name, n, &ip) != IP_LITERAL_NONE)
            abort();
    } else if (h->kind == HOST_IP) {
        ipaddr_format(&h->ip, text, sizeof(text));
        if (strcmp(text, h->name) != 0)
            abort();
    } else {
        abort();
    }
    if (host_normalise(h->name, n, &again, &why) != 0)
        abort();
    if (again.kind != h->kind || strcmp(again.name, h->name) != 0)
        abort();
    if (h->kind == HOST_IP && !ipaddr_equal(&again.ip, &h->ip))
        abort();
}

static void check_pattern(const struct host_pattern *p)
{
    char name[HOST_MAX + 8];
    size_t n = strnlen(p->name, sizeof(p->name));
    if (n == 0 || n > HOST_MAX)
        abort();
    if (p->kind == PATTERN_EXACT) {
        if (!host_pattern_matches(p, p->name))
            abort();
        return;
    }
    if (p->kind != PATTERN_WILDCARD || strchr(p->name, '.') == NULL)
        abort();
    if (host_pattern_matches(p, p->name))
        abort();
    name[0] = 'a';
    name[1] = '.';
    memcpy(name + 2, p->name, n + 1);
    if (!host_pattern_matches(p, name))
        abort();
    name[1] = 'a'; /* "aa" + suffix: glued on, not a label below it */
    if (host_pattern_matches(p, name + 1) || host_pattern_matches(p, name))
        abort();
}

/* The input <s> (<len> bytes) gave <rc> and, when 0, <h>: spelt with its
 * ASCII letters in the other case it gives the same, and a name spelt with
 * one more trailing dot is the same name. */
static void check_spellings(const char *s, size_t len, int rc, const struct host *h)
{
    struct host other;
    const char *why = NULL;
    char *alt = malloc(len + 1);
    if (alt == NULL)
        return;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        alt[i] = (c >= 'a' && c <= 'z')   ? (char)(c - 'a' + 'A')
                 : (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a')
                                          : c;
    }
    if (host_normalise(alt, len, &other, &why) != rc)
        abort();
    if (rc == 0 && (other.kind != h->kind || strcmp(other.name, h->name) != 0))
        abort();
    if (rc == 0 && h->kind == HOST_NAME && s[len - 1] != '.') {
        memcpy(alt, s, len);
        alt[len] = '.';
        if (host_normalise(alt, len + 1, &other, &why) != 0 || other.kind != HOST_NAME ||
            strcmp(other.name, h->name) != 0)
            abort();
    }
    if (rc == 0) {
        bool ascii = true;
        for (size_t i = 0; i < len; i++)
            ascii = ascii && (unsigned char)s[i] < 0x80;
        /* a name is the target when written in ASCII; an IP when it is
         * the target's text as written (an ASCII request target's host) */
        char *written = strndup(s, len);
        if (written != NULL && ascii &&
            !host_sent_names(s, len, h, (struct ip_spelling){.as_written = written}))
            abort();
        if (h->kind == HOST_NAME && host_sent_names(s, len, h, IP_SPELLING_CANONICAL) != ascii)
            abort();
        free(written);
        /* the canonical spelling asks more, never less; a name is read
         * the same either way, an IP's canonical text always passes */
        bool canonical = host_sent_names(s, len, h, IP_SPELLING_CANONICAL);
        if ((canonical && !ascii) || (h->kind == HOST_NAME && canonical != ascii) ||
            (h->kind == HOST_IP &&
             !host_sent_names(h->name, strlen(h->name), h, IP_SPELLING_CANONICAL)))
            abort();
    }
    free(alt);
}

/* A pattern <s> taken, written with a port or as a URL (pasted in a
 * hurry), is refused, and the reason says which: never as what it is not
 * (an "invalid IP literal"). */
static void check_port_and_url(const char *s)
{
    static const char *const forms[][3] = {
        {"", ":443", "port"},
        {"", ":", "port"},
        {"https://", "", "URL"},
        {"http://", ":8080/x", "URL"},
    };
    char buf[HOST_MAX + 64];
    size_t n = strlen(s);
    if (n > HOST_MAX + 8)
        return;
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        struct host_pattern p;
        const char *why = NULL;
        snprintf(buf, sizeof(buf), "%s%s%s", forms[i][0], s, forms[i][1]);
        if (host_pattern_parse(buf, &p, &why) == 0 || why == NULL ||
            strstr(why, forms[i][2]) == NULL)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct host h;
    struct host_pattern p;
    const char *why = NULL;

    int rc = host_normalise((const char *)data, size, &h, &why);
    if (rc == 0)
        check_host(&h);
    else if (why == NULL || why[0] == '\0')
        abort();
    if (size > 0 && size < 1024)
        check_spellings((const char *)data, size, rc, &h);

    if (size < 2048) {
        char *buf = malloc(size + 1);
        if (buf == NULL)
            return 0;
        memcpy(buf, data, size);
        buf[size] = '\0';
        why = NULL;
        if (host_pattern_parse(buf, &p, &why) == 0) {
            check_pattern(&p);
            check_port_and_url(buf);
            /* "*.X" names what "X" names, below it: the suffix is judged
             * as the same name would be, whole, never cut short. */
            struct host_pattern exact;
            if (p.kind == PATTERN_WILDCARD &&
                (host_pattern_parse(buf + 2, &exact, &why) != 0 || exact.kind != PATTERN_EXACT ||
                 strcmp(exact.name, p.name) != 0))
                abort();
        } else if (why == NULL || why[0] == '\0') {
            abort();
        }
        free(buf);
    }
    return 0;
}
