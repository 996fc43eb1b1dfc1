/* host: host-name normalisation and host-pattern validation.
 *
 * Owns the one definition of "the same host" that policy matching relies on:
 * lower case, one trailing dot removed, IDNA (UTS 46, via libidn2) to its
 * ASCII form, then strict LDH validation: labels of 1-63 bytes of
 * [a-z0-9_-], no leading or trailing hyphen, 253 bytes at most. A name whose
 * last label is numeric is an IP literal (valid or not), never a name.
 * There is no suffix or "tail" comparison anywhere in this module's users:
 * two names are the same host only when their normal forms are equal. */
#ifndef SLUICE_POLICY_HOST_H
#define SLUICE_POLICY_HOST_H

#include <stdbool.h>
#include <stddef.h>

#include "util/ipaddr.h"

#define HOST_MAX 253

enum host_kind {
    HOST_NAME, /* <name> holds the normal form */
    HOST_IP,   /* <ip> holds the address (an IP literal in any spelling) */
};

struct host {
    enum host_kind kind;
    char name[HOST_MAX + 1]; /* HOST_NAME: normal form; HOST_IP: canonical address text */
    struct ipaddr ip;        /* HOST_IP only */
};

/* Normalises the host <s> (<len> bytes, hostile: any bytes at all) as found
 * in a request target, Host header, SNI or policy. IPv6 may be bracketed.
 * Returns 0 and fills <out>, or -1 and sets <*why> to a static phrase
 * ("empty label", "invalid IP literal", ...). */
int host_normalise(const char *s, size_t len, struct host *out, const char **why);

/* How a host a client sends a server must write an IP target to name it:
 * its canonical text (a.b.c.d without leading zeros, IPv6 as RFC 5952
 * writes it, bare or in brackets, hex digits in either case), or else
 * <as_written> in any case (bare or in brackets for IPv6), when not NULL.
 * To a server any other spelling (0x7f.0.0.1, 2130706433) is a name, which
 * its default site may take. */
struct ip_spelling {
    /* A plain-HTTP request target's host as the client wrote it (brackets
     * removed): its Host goes upstream as it came, and a client spells it
     * as it did the target the gateway decided on. NULL in a tunnel's
     * first bytes, which alone tell its server the host. */
    const char *as_written;
};

/* The canonical text alone. */
#define IP_SPELLING_CANONICAL ((struct ip_spelling){.as_written = NULL})

/* True when the host <s> (<len> bytes, hostile) that a client sends a server
 * (a Host header, a request target, a TLS server_name) names <target>: a
 * name that normalises to <target> and is ASCII, an IP spelled as
 * <spelling> allows. A server looks its sites up by the bytes it got,
 * without IDNA's mapping: to nginx "\uff41pi.example.com" (a full-width
 * "a") or a name with a soft hyphen in it is another host, which its
 * *.example.com site takes, not api.example.com. */
bool host_sent_names(const char *s, size_t len, const struct host *target,
                     struct ip_spelling spelling);

/* host_sent_names() for a TLS server_name: an IP in its canonical text,
 * without brackets. RFC 6066 keeps IP literals out of server_name, but a
 * client that puts one there writes the address's text, which names what
 * the CONNECT does (a server whose site is set up for the address,
 * server_name 127.0.0.1 in nginx, takes it): that passes, and any other
 * spelling is another host. */
bool host_sni_names(const char *s, size_t len, const struct host *target);

enum pattern_kind {
    PATTERN_EXACT,    /* "api.github.com" */
    PATTERN_WILDCARD, /* "*.github.com": one or more labels below the suffix */
};

struct host_pattern {
    enum pattern_kind kind;
    char name[HOST_MAX + 1]; /* exact: the normal name; wildcard: the suffix, without "*." */
};

/* What a value written where a bare name belongs (a host pattern, a
 * dns.static name) holds besides the name: a URL's "://"
 * (NAME_EXTRA_URL), a port, one ':' outside brackets or a ':' after an
 * IPv6 literal's "]" (NAME_EXTRA_PORT), or brackets around what is no
 * IPv6 literal, no ':' inside them ("[a.com]", "[a.com]:443":
 * NAME_EXTRA_BRACKETS). A name holds no ':' and an IPv6 literal two or
 * more: those are NAME_EXTRA_NONE, left to host_normalise(), whose
 * "invalid IP literal" for the others would name what the value is not. */
enum name_extra { NAME_EXTRA_NONE, NAME_EXTRA_URL, NAME_EXTRA_PORT, NAME_EXTRA_BRACKETS };
enum name_extra host_name_extra(const char *s, size_t len);

/* Validates and normalises a policy host pattern. Rejects "*", globs other
 * than one leading "*." label, wildcards over a public suffix (ICANN section
 * of the Public Suffix List, e.g. "*.com", "*.co.uk"; its private section
 * is host_pattern_over_private_suffix()'s) or over any single
 * label, IP literals (they belong in cidr: rules), URLs and names with a
 * port (":443", said so), and everything host_normalise() rejects.
 * Returns 0, or -1 with <*why> set. */
int host_pattern_parse(const char *s, struct host_pattern *out, const char **why);

/* True when <p> is a wildcard directly over a suffix of the private section
 * of the Public Suffix List ("*.workers.dev", "*.github.io",
 * "*.s3.amazonaws.com"): anyone can register a name under such a suffix,
 * so the wildcard matches strangers' hosts. host_pattern_parse() lets it
 * through (the loader warns of it in an allow rule; a deny entry over one
 * is welcome); "*.app.workers.dev", one owner's names, is not one. */
bool host_pattern_over_private_suffix(const struct host_pattern *p);

/* True when <name> (a normal form) is matched by <p>. Used by tests and by
 * the report; the matcher uses its index, never a scan. */
bool host_pattern_matches(const struct host_pattern *p, const char *name);

#endif
