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
 * Owns: copies of the ranges; independent of the policy once built. */
#ifndef SLUICE_GATE_ADDR_GUARD_H
#define SLUICE_GATE_ADDR_GUARD_H

#include <stdbool.h>

#include "policy/model.h"
#include "util/ipaddr.h"

struct addr_guard;

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

#endif
