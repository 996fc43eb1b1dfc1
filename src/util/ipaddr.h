/* ipaddr: IP addresses, IP literals and CIDR prefixes.
 *
 * Owns the one parser that recognises an IP literal in every spelling an
 * agent might use to dodge a host rule, shared by the policy (cidr: rules,
 * sources, ranges) and the gate (request targets, resolved addresses):
 *   dotted 127.0.0.1, short dotted 127.1 / 127.0.1, a single number
 *   2130706433, octal parts 0177.0.0.1, hex parts 0x7f.0.0.1 or 0x7f000001,
 *   IPv6 in any RFC 4291 form (with or without [brackets]), and
 *   IPv4-mapped/embedded IPv6 (::ffff:127.0.0.1).
 * Every address is stored as 16 bytes; IPv4 as ::ffff:a.b.c.d, so one
 * prefix structure serves both families and a v4-mapped literal matches the
 * IPv4 rules it really addresses. */
#ifndef SLUICE_UTIL_IPADDR_H
#define SLUICE_UTIL_IPADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ipaddr {
    uint8_t b[16]; /* network order; IPv4 is ::ffff:a.b.c.d */
};

struct cidr {
    struct ipaddr addr; /* host bits cleared */
    uint8_t prefix;     /* 0..128, counted on the 16-byte form (IPv4 /24 is 120) */
};

enum ip_literal_kind {
    IP_LITERAL_NONE = 0, /* not an IP literal: treat as a host name */
    IP_LITERAL_V4,       /* some IPv4 spelling */
    IP_LITERAL_V6,       /* IPv6 (including v4-mapped) */
    IP_LITERAL_INVALID,  /* looks like an IP (ends in a number, or has ':') but is not one */
};

/* Classifies and parses <s> (<len> bytes, not necessarily terminated).
 * The WHATWG URL rule decides what "looks like IPv4": a host whose last
 * dot-separated label is a number (decimal, 0x-hex or 0-octal) is an IPv4
 * attempt, valid or not. Brackets around IPv6 are accepted. Zone ids (%eth0)
 * are rejected as invalid. Fills <out> only for V4 and V6. */
enum ip_literal_kind ip_literal_parse(const char *s, size_t len, struct ipaddr *out);

bool ipaddr_is_v4(const struct ipaddr *a);
void ipaddr_from_v4(struct ipaddr *out, uint32_t host_order);
uint32_t ipaddr_v4(const struct ipaddr *a); /* host order; only for v4 */

/* Writes the canonical text (dotted quad for IPv4, RFC 5952 for IPv6,
 * without brackets) into <out>; returns <out>. */
#define IPADDR_STRLEN 46
char *ipaddr_format(const struct ipaddr *a, char *out, size_t outlen);

bool ipaddr_equal(const struct ipaddr *a, const struct ipaddr *b);
/* This machine's loopback: 127.0.0.0/8 (written ::ffff:127.x.y.z too, the
 * same address) or ::1. */
bool ipaddr_is_loopback(const struct ipaddr *a);

/* Parses "a.b.c.d/n", "v6/n" or a bare address (a host prefix). Only
 * canonical dotted-quad IPv4 and standard IPv6 are accepted here: a policy
 * is written by people, and "10.1/16" is more likely a typo than intent.
 * Host bits set below the prefix are an error (returns -2) so that
 * "10.0.0.1/8" is reported, not silently widened. Returns 0 or -1. */
int cidr_parse(const char *s, struct cidr *out);
bool cidr_contains(const struct cidr *c, const struct ipaddr *a);
/* Formats as written in policies: "10.0.0.0/8", "fd00::/8" (IPv4 prefixes
 * shown on the 32-bit scale). */
char *cidr_format(const struct cidr *c, char *out, size_t outlen);

#endif
