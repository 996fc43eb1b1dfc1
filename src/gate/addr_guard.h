/* addr_guard: the address ranges the gateway refuses to connect to.
 *
 * Built from a policy's network section: the deny set is the default set
 * (deny_ranges: default; see addr_guard.c for each range and why) plus any
 * extra deny_ranges; allow_ranges exempt addresses from it. An IPv6 address
 * that embeds an IPv4 address (NAT64, 6to4, Teredo, ISATAP, v4-compatible) is also
 * denied when the embedded address is in the IPv4 part of the deny set.
 * The resolver's answers and IP-literal targets both pass through here
 * before any connect() (reason private_address).
 *
 * Owns: copies of the ranges; independent of the policy once built. A
 * guard_openings (addr_guard_openings_new()) owns its sorted ranges, whose
 * names point into the guard it was built from. */
#ifndef SLUICE_GATE_ADDR_GUARD_H
#define SLUICE_GATE_ADDR_GUARD_H

#include <stdbool.h>

#include "policy/model.h"
#include "util/ipaddr.h"

struct addr_guard;

/* 169.254.169.254, the cloud metadata address (AWS, GCP, Azure, ...): what
 * an agent that reaches it gets is the host's credentials. As
 * ipaddr_from_v4() takes it; the default deny set holds it, and the policy
 * loader warns for ranges that open it. */
#define ADDR_GUARD_METADATA_V4 0xa9fea9feu

/* Returns a new guard for <cfg> (borrowed; nothing kept), freed with
 * addr_guard_free(), or NULL when out of memory. */
struct addr_guard *addr_guard_new(const struct network_cfg *cfg);

/* Frees <g>. Accepts NULL. */
void addr_guard_free(struct addr_guard *g);

/* True when <a> is in a deny range (directly or through an embedded IPv4
 * address) and not in an allow range. When denied and <range_name> is not
 * NULL, sets it to a static or guard-owned name of the range that matched
 * ("loopback", "rfc1918", "network.deny_ranges[0]", "6to4 of rfc1918", ...),
 * valid as long as <g>. */
bool addr_guard_denies(const struct addr_guard *g, const struct ipaddr *a, const char **range_name);

/* As addr_guard_denies(), and when denied and <range> is not NULL, sets it
 * to the deny range that holds <a>, or for an address that embeds an IPv4
 * one, the IPv4 range that holds that: for a finding that names it. */
bool addr_guard_denies_in(const struct addr_guard *g, const struct ipaddr *a,
                          const char **range_name, struct cidr *range);

/* The most IPv4 addresses addr_guard_embedded() finds in one address. */
#define ADDR_GUARD_MAX_EMBEDDED 5

/* Fills <v4> with the IPv4 addresses (as ipaddr_from_v4() makes them) that
 * the IPv6 address <a> embeds in a form the guard unwraps (v4-compatible,
 * v4-translated, NAT64, 6to4, Teredo's server and client, ISATAP): those
 * a translator or relay on the network may turn it into. Returns how many;
 * 0 for an IPv4 address, or one that embeds none. */
size_t addr_guard_embedded(const struct ipaddr *a, struct ipaddr v4[ADDR_GUARD_MAX_EMBEDDED]);

/* True when an allow range holds <a>. */
bool addr_guard_allows(const struct addr_guard *g, const struct ipaddr *a);

/* True when <c> holds an IPv6 address that a translator (NAT64, local-use
 * NAT64, SIIT) connects to the IPv4 address <v4> (as ipaddr_from_v4() makes
 * it), and that the guard reads as <v4>; then sets <form>, when not NULL,
 * to one such address. Tunnelled forms (6to4, Teredo, v4-compatible) are
 * not counted. */
bool addr_guard_translated_in(const struct cidr *c, const struct ipaddr *v4, struct ipaddr *form);
/* What a cidr: rule opens: the IP literals a cidr: rule allows skip the
 * guard, so a rule over <c> opens every range of the deny set, and every
 * IPv6 prefix whose addresses embed IPv4 ones the guard unwraps (6to4
 * 2002::/16, Teredo, NAT64, v4-translated, v4-compatible; when an IPv4
 * range is denied), that <c> holds without being it (a rule that names a
 * denied range, or lies inside one, means it) and that no allow range
 * holds (those are open anyway). Built once from <g> (borrowed: names
 * point into it) for all the rules of a policy, each looked up in
 * O(log n) plus the few distinct ranges that hold 169.254.169.254: a policy
 * may hold a million rules and as many deny ranges. NULL when out of
 * memory. */
struct guard_openings;
struct guard_openings *addr_guard_openings_new(const struct addr_guard *g);
void addr_guard_openings_free(struct guard_openings *o);

struct guard_opening {
    size_t count;      /* such ranges (repeats once); the rest is set only when not 0 */
    struct cidr first; /* one that holds or embeds 169.254.169.254, else the lowest */
    const char *name;  /* its name ("rfc1918", "6to4", "network.deny_ranges[0]") */
    bool embeds;       /* <first> is an IPv6 prefix that embeds IPv4 addresses */
    bool metadata;     /* <first> holds or embeds a denied 169.254.169.254 */
};

/* Sets <out> for a rule over <c>; ranges that hold IPv4 addresses are
 * left out when <skip_v4>. */
void addr_guard_opened_by(const struct guard_openings *o, const struct cidr *c, bool skip_v4,
                          struct guard_opening *out);

#endif
