/* Unit tests for gate/addr_guard.c: the default deny set, the IPv4 forms
 * embedded in IPv6, extra deny ranges and allow_ranges. Addresses are only
 * parsed here, never contacted. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <string.h>

#include "gate/addr_guard.h"

/* Parses an IPv4 or IPv6 address into the 16-byte form (IPv4 mapped). */
static struct ipaddr addr(const char *s)
{
    struct ipaddr a;
    uint8_t v4[4];

    memset(&a, 0, sizeof(a));
    if (inet_pton(AF_INET, s, v4) == 1) {
        a.b[10] = a.b[11] = 0xff;
        memcpy(a.b + 12, v4, 4);
        return a;
    }
    if (inet_pton(AF_INET6, s, a.b) != 1)
        fail_msg("bad test address %s", s);
    return a;
}

static struct cidr cidr(const char *s, unsigned prefix)
{
    struct cidr c;
    c.addr = addr(s);
    c.prefix = (uint8_t)(strchr(s, ':') == NULL ? 96 + prefix : prefix);
    return c;
}

static struct addr_guard *default_guard(void)
{
    struct network_cfg cfg = {.default_deny_ranges = true};
    struct addr_guard *g = addr_guard_new(&cfg);
    assert_non_null(g);
    return g;
}

static void expect_denied(const struct addr_guard *g, const char *s, const char *name)
{
    const char *got = NULL;
    struct ipaddr a = addr(s);
    if (!addr_guard_denies(g, &a, &got))
        fail_msg("%s should be denied", s);
    assert_non_null(got);
    if (name != NULL && strcmp(got, name) != 0)
        fail_msg("%s: range %s, expected %s", s, got, name);
}

static void expect_allowed(const struct addr_guard *g, const char *s)
{
    const char *got = "untouched";
    struct ipaddr a = addr(s);
    if (addr_guard_denies(g, &a, &got))
        fail_msg("%s should be allowed (denied by %s)", s, got);
    assert_string_equal(got, "untouched");
}

/* Each default range: its first and last address are denied, and where
 * the neighbour is public, the address just outside is allowed. */
static void test_default_v4(void **state)
{
    (void)state;
    struct addr_guard *g = default_guard();
    static const struct {
        const char *first, *last, *name, *before, *after;
    } cases[] = {
        {"0.0.0.0", "0.255.255.255", "this-network", NULL, "1.0.0.0"},
        {"10.0.0.0", "10.255.255.255", "rfc1918", "9.255.255.255", "11.0.0.0"},
        {"100.64.0.0", "100.127.255.255", "cgnat", "100.63.255.255", "100.128.0.0"},
        {"127.0.0.0", "127.255.255.255", "loopback", "126.255.255.255", "128.0.0.0"},
        {"169.254.0.0", "169.254.255.255", "link-local", "169.253.255.255", "169.255.0.0"},
        {"172.16.0.0", "172.31.255.255", "rfc1918", "172.15.255.255", "172.32.0.0"},
        {"192.0.0.0", "192.0.0.255", "ietf-protocol", "191.255.255.255", "192.0.1.0"},
        {"192.0.2.0", "192.0.2.255", "documentation", "192.0.1.255", "192.0.3.0"},
        {"192.88.99.0", "192.88.99.255", "6to4-relay-anycast", "192.88.98.255", "192.88.100.0"},
        {"192.168.0.0", "192.168.255.255", "rfc1918", "192.167.255.255", "192.169.0.0"},
        {"198.18.0.0", "198.19.255.255", "benchmarking", "198.17.255.255", "198.20.0.0"},
        {"198.51.100.0", "198.51.100.255", "documentation", "198.51.99.255", "198.51.101.0"},
        {"203.0.113.0", "203.0.113.255", "documentation", "203.0.112.255", "203.0.114.0"},
        {"224.0.0.0", "239.255.255.255", "multicast", "223.255.255.255", NULL},
        {"240.0.0.0", "255.255.255.254", "reserved", NULL, NULL},
        /* a single address: Azure's WireServer */
        {"168.63.129.16", "168.63.129.16", "azure-wireserver", "168.63.129.15", "168.63.129.17"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        expect_denied(g, cases[i].first, cases[i].name);
        expect_denied(g, cases[i].last, cases[i].name);
        if (cases[i].before != NULL)
            expect_allowed(g, cases[i].before);
        if (cases[i].after != NULL)
            expect_allowed(g, cases[i].after);
    }
    expect_denied(g, "169.254.169.254", "link-local"); /* cloud metadata */
    expect_denied(g, "2002:a83f:8110::1", "6to4 of azure-wireserver");
    /* 255.255.255.255 lies inside 240/4, which is listed first. */
    expect_denied(g, "255.255.255.255", NULL);
    expect_allowed(g, "1.1.1.1");
    expect_allowed(g, "8.8.8.8");
    expect_allowed(g, "140.82.112.6");
    addr_guard_free(g);
}

static void test_default_v6(void **state)
{
    (void)state;
    struct addr_guard *g = default_guard();
    expect_denied(g, "::", "unspecified");
    expect_denied(g, "::1", "loopback");
    expect_denied(g, "fc00::", "ula");
    expect_denied(g, "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ula");
    expect_allowed(g, "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
    expect_denied(g, "fe80::1", "link-local");
    expect_denied(g, "febf:ffff::1", "link-local");
    expect_denied(g, "fec0::1", "site-local");
    expect_denied(g, "feff:ffff::1", "site-local");
    expect_denied(g, "ff00::", "multicast");
    expect_denied(g, "ff02::1", "multicast");
    expect_denied(g, "2001:db8::1", "documentation");
    expect_denied(g, "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "documentation");
    expect_allowed(g, "2001:db9::1");
    expect_denied(g, "3fff::1", "documentation");
    expect_denied(g, "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "documentation");
    expect_allowed(g, "3fff:1000::1");
    expect_allowed(g, "3ffe:ffff::1");
    expect_denied(g, "100::", "discard-only");
    expect_denied(g, "100::ffff:ffff:ffff:ffff", "discard-only");
    /* The IPv6 ranges of the IANA special-purpose registry that are not
     * globally reachable: each one's first and last address, and a
     * neighbour outside it. */
    static const struct {
        const char *first, *last, *outside, *name;
    } unreachable[] = {
        /* RFC 9780's dummy prefix, the /64 after the discard-only one */
        {"100:0:0:1::", "100:0:0:1:ffff:ffff:ffff:ffff", "100:0:0:2::", "dummy"},
        /* benchmarking (RFC 5180), the IPv6 peer of 198.18.0.0/15; its
         * neighbours are in 2001::/23, below */
        {"2001:2::", "2001:2:0:ffff:ffff:ffff:ffff:ffff", "2001:3::", "benchmarking"},
        /* ORCHID (RFC 4843, deprecated): identifiers, never a host's */
        {"2001:10::", "2001:1f:ffff:ffff:ffff:ffff:ffff:ffff", "2001:20::", "orchid"},
        /* SRv6 segment identifiers (RFC 9602): an operator's functions */
        {"5f00::", "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "5f01::", "srv6-sid"},
    };
    for (size_t i = 0; i < sizeof(unreachable) / sizeof(unreachable[0]); i++) {
        expect_denied(g, unreachable[i].first, unreachable[i].name);
        expect_denied(g, unreachable[i].last, unreachable[i].name);
        expect_allowed(g, unreachable[i].outside);
    }
    /* The rest of 2001::/23 (IETF protocol assignments, RFC 2928) is not
     * globally reachable, but for the blocks the registry says are. */
    static const char *const ietf_denied[] = {
        "2001:1::",
        "2001:1::4",
        /* anycast to the nearest box on the path: PCP (RFC 7723), TURN
         * (RFC 8155), DNS-SD SRP (RFC 9665), denied as their IPv4 peers */
        "2001:1::1",
        "2001:1::2",
        "2001:1::3",
        "2001:1:0:1::1",
        "2001:1:ffff::1",
        "2001:2:1::",
        "2001:2:ffff::1",
        "2001:4::1",
        "2001:4:111:ffff::1",
        "2001:4:113::",
        "2001:5::1",
        "2001:f:ffff::1",
        "2001:40::1",
        "2001:100::1",
        "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
    };
    for (size_t i = 0; i < sizeof(ietf_denied) / sizeof(ietf_denied[0]); i++)
        expect_denied(g, ietf_denied[i], "ietf-protocol");
    /* The IPv4 peers of the anycast addresses above, PCP and TURN. */
    expect_denied(g, "192.0.0.9", "ietf-protocol");
    expect_denied(g, "192.0.0.10", "ietf-protocol");
    static const char *const ietf_reachable[] = {
        "2001:3::", /* AMT (RFC 7450) */
        "2001:3:ffff:ffff:ffff:ffff:ffff:ffff",
        "2001:4:112::1", /* AS112-v6 (RFC 7535) */
        "2001:4:112:ffff:ffff:ffff:ffff:ffff",
        "2001:20::1", /* ORCHIDv2 (RFC 7343) */
        "2001:30::1", /* DETs (RFC 9374) */
        "2001:3f:ffff:ffff:ffff:ffff:ffff:ffff",
        "2001:0:4136:e378:8000:63bf:3ffe:fdd2", /* Teredo of public addresses */
        "2001:200::1",                          /* past the /23 */
    };
    for (size_t i = 0; i < sizeof(ietf_reachable) / sizeof(ietf_reachable[0]); i++)
        expect_allowed(g, ietf_reachable[i]);
    expect_allowed(g, "5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
    expect_allowed(g, "2606:4700::1111");
    expect_allowed(g, "2a00:1450:4001:81a::200e");
    addr_guard_free(g);
}

static void test_v4_mapped(void **state)
{
    (void)state;
    struct addr_guard *g = default_guard();
    /* The mapped form is the IPv4 representation itself. */
    expect_denied(g, "::ffff:127.0.0.1", "loopback");
    expect_denied(g, "::ffff:169.254.169.254", "link-local");
    expect_denied(g, "::ffff:10.1.2.3", "rfc1918");
    expect_allowed(g, "::ffff:1.1.1.1");
    addr_guard_free(g);
}

static void test_v4_compatible(void **state)
{
    (void)state;
    struct addr_guard *g = default_guard();
    expect_denied(g, "::127.0.0.1", "v4-compatible of loopback");
    expect_denied(g, "::10.0.0.1", "v4-compatible of rfc1918");
    expect_denied(g, "::0.0.0.2", "v4-compatible of this-network");
    expect_allowed(g, "::8.8.8.8");
    addr_guard_free(g);
}

static void test_nat64(void **state)
{
    (void)state;
    struct addr_guard *g = default_guard();
    expect_denied(g, "64:ff9b::127.0.0.1", "nat64 of loopback");
    expect_denied(g, "64:ff9b::a9fe:a9fe", "nat64 of link-local");
    expect_denied(g, "64:ff9b::192.168.1.1", "nat64 of rfc1918");
    expect_allowed(g, "64:ff9b::8.8.8.8");
    /* Bits 32..95 must be zero for the well-known prefix: otherwise it is
     * not NAT64, and 64:ff9b:0:1::/64 is an ordinary (public) address. */
    expect_allowed(g, "64:ff9b:0:1::7f00:1");
    /* Local-use prefixes (RFC 8215), every RFC 6052 position. */
    expect_denied(g, "64:ff9b:1::10.0.0.1", "nat64 local-use of rfc1918");     /* /96 */
    expect_denied(g, "64:ff9b:1:7f00:0:100::", "nat64 local-use of loopback"); /* /48 */
    /* /56 for 169.254.169.254; the /64 position reads 254.169.254.0 (reserved)
     * first, which denies as well. */
    expect_denied(g, "64:ff9b:1:aa9:fe:a9fe::", NULL);
    expect_denied(g, "64:ff9b:1:a0a:1:203::", "nat64 local-use of rfc1918"); /* /56, 10.1.2.3 */
    expect_denied(g, "64:ff9b:1:0:a:0:1::", "nat64 local-use of rfc1918");   /* /64 */
    expect_allowed(g, "64:ff9b:1::8.8.8.8");
    addr_guard_free(g);
}

static void test_v4_translated(void **state)
{
    (void)state;
    struct addr_guard *g = default_guard();
    /* ::ffff:0:a.b.c.d (RFC 2765 SIIT): a translator maps it to a.b.c.d. */
    expect_denied(g, "::ffff:0:a9fe:a9fe", "v4-translated of link-local");
    expect_denied(g, "::ffff:0:7f00:1", "v4-translated of loopback");
    expect_denied(g, "::ffff:0:10.1.2.3", "v4-translated of rfc1918");
    expect_allowed(g, "::ffff:0:808:808");
    addr_guard_free(g);
}

static void test_6to4(void **state)
{
    (void)state;
    struct addr_guard *g = default_guard();
    expect_denied(g, "2002:7f00:1::", "6to4 of loopback");
    expect_denied(g, "2002:a00:1::1", "6to4 of rfc1918");
    expect_denied(g, "2002:a9fe:a9fe::1", "6to4 of link-local");
    expect_denied(g, "2002:c0a8:101:1::1", "6to4 of rfc1918");
    expect_allowed(g, "2002:808:808::1");
    addr_guard_free(g);
}

static void test_teredo(void **state)
{
    (void)state;
    struct addr_guard *g = default_guard();
    /* RFC 4380's example: server 65.54.227.120 (public), client
     * 192.0.2.45 (~c000:022d = 3fff:fdd2), a documentation address. */
    expect_denied(g, "2001:0:4136:e378:8000:63bf:3fff:fdd2", "teredo of documentation");
    /* Client 127.0.0.1: ~7f00:0001 = 80ff:fffe. */
    expect_denied(g, "2001:0:4136:e378:8000:63bf:80ff:fffe", "teredo of loopback");
    /* Server in RFC 1918, client public (~8.8.8.8 = f7f7:f7f7). */
    expect_denied(g, "2001:0:a00:1:8000:63bf:f7f7:f7f7", "teredo of rfc1918");
    /* Both public. */
    expect_allowed(g, "2001:0:4136:e378:8000:63bf:f7f7:f7f7");
    /* A client address written without inversion is not private. */
    expect_allowed(g, "2001:0:4136:e378:8000:63bf:7f00:1");
    addr_guard_free(g);
}

static void test_isatap(void **state)
{
    (void)state;
    struct addr_guard *g = default_guard();
    /* RFC 5214: the interface identifier 0000:5efe (0200:5efe when the
     * IPv4 address is global; the u/g bits may be set) carries the IPv4
     * address an ISATAP router tunnels the packet to, under any prefix. */
    expect_denied(g, "2001:4860:1:2:0:5efe:7f00:1", "isatap of loopback");
    expect_denied(g, "2001:4860:1:2:200:5efe:a00:5", "isatap of rfc1918");
    expect_denied(g, "2a00:1450::100:5efe:a9fe:a9fe", "isatap of link-local");
    expect_denied(g, "2a00:1450::300:5efe:c0a8:101", "isatap of rfc1918");
    expect_allowed(g, "2001:4860:1:2:200:5efe:808:808");
    /* Not an ISATAP identifier: other bits in the first 32. */
    expect_allowed(g, "2001:4860:1:2:400:5efe:7f00:1");
    expect_allowed(g, "2001:4860:1:2:1:5efe:7f00:1");
    addr_guard_free(g);
}

/* <s> embeds exactly the IPv4 addresses <want> (NULL-terminated), in order. */
static void expect_embedded(const char *s, const char *const *want)
{
    struct ipaddr a = addr(s), v4[ADDR_GUARD_MAX_EMBEDDED];
    size_t n = addr_guard_embedded(&a, v4), i = 0;
    for (; want[i] != NULL; i++) {
        struct ipaddr w = addr(want[i]);
        if (i >= n || memcmp(v4[i].b, w.b, sizeof(w.b)) != 0)
            fail_msg("%s: embedded address %zu is not %s (%zu found)", s, i, want[i], n);
    }
    if (n != i)
        fail_msg("%s: %zu embedded addresses, expected %zu", s, n, i);
}

/* What the own-host check asks the kernel of besides the address itself:
 * each IPv4 address a translator or relay may turn it into. */
static void test_embedded(void **state)
{
    (void)state;
    expect_embedded("11.22.33.44", (const char *const[]){NULL});
    expect_embedded("::ffff:11.22.33.44", (const char *const[]){NULL});
    expect_embedded("2a00:1450::1", (const char *const[]){NULL});
    expect_embedded("::b16:212c", (const char *const[]){"11.22.33.44", NULL});
    expect_embedded("::ffff:0:b16:212c", (const char *const[]){"11.22.33.44", NULL});
    expect_embedded("64:ff9b::b16:212c", (const char *const[]){"11.22.33.44", NULL});
    expect_embedded("64:ff9b:1::b16:212c", (const char *const[]){"11.22.33.44", NULL});
    expect_embedded("2002:b16:212c::1", (const char *const[]){"11.22.33.44", NULL});
    /* Teredo: the server, then the client (stored inverted) */
    expect_embedded("2001:0:4136:e378:8000:63bf:f4e9:ded3",
                    (const char *const[]){"65.54.227.120", "11.22.33.44", NULL});
    expect_embedded("2a00:1450::200:5efe:b16:212c", (const char *const[]){"11.22.33.44", NULL});
    /* 6to4 and ISATAP at once: both */
    expect_embedded("2002:808:808:1:200:5efe:b16:212c",
                    (const char *const[]){"8.8.8.8", "11.22.33.44", NULL});
}

static void test_allow_ranges(void **state)
{
    (void)state;
    struct cidr allow[] = {cidr("127.0.0.0", 8), cidr("fd00::", 8)};
    struct network_cfg cfg = {
        .default_deny_ranges = true, .allow_ranges = allow, .nallow_ranges = 2};
    struct addr_guard *g = addr_guard_new(&cfg);
    assert_non_null(g);
    expect_allowed(g, "127.0.0.1");
    expect_allowed(g, "127.0.0.2");
    expect_allowed(g, "::ffff:127.0.0.1");
    expect_allowed(g, "fd12::1");
    expect_denied(g, "fc00::1", "ula");
    expect_denied(g, "10.0.0.1", "rfc1918");
    expect_denied(g, "::1", "loopback");
    /* The exemption is for the address connected to, not what it embeds. */
    expect_denied(g, "64:ff9b::127.0.0.1", "nat64 of loopback");
    expect_denied(g, "2002:7f00:1::", "6to4 of loopback");
    /* addr_guard_allows(): what an allow range holds, denied or not */
    struct ipaddr a = addr("127.0.0.9"), b = addr("8.8.8.8"), c = addr("fd00::1");
    assert_true(addr_guard_allows(g, &a));
    assert_true(addr_guard_allows(g, &c));
    assert_false(addr_guard_allows(g, &b));
    addr_guard_free(g);
}

static void test_extra_deny(void **state)
{
    (void)state;
    struct cidr deny[] = {cidr("8.8.8.0", 24), cidr("2606:4700::", 32)};
    struct cidr allow[] = {cidr("8.8.8.8", 32)};
    struct network_cfg cfg = {.default_deny_ranges = true,
                              .deny_ranges = deny,
                              .ndeny_ranges = 2,
                              .allow_ranges = allow,
                              .nallow_ranges = 1};
    struct addr_guard *g = addr_guard_new(&cfg);
    assert_non_null(g);
    expect_denied(g, "8.8.8.4", "network.deny_ranges[0]");
    expect_allowed(g, "8.8.8.8");
    expect_allowed(g, "8.8.9.1");
    expect_denied(g, "2606:4700::1111", "network.deny_ranges[1]");
    expect_denied(g, "2002:808:804::1", "6to4 of network.deny_ranges[0]");
    expect_denied(g, "127.0.0.1", "loopback");
    addr_guard_free(g);
}

static void test_no_default(void **state)
{
    (void)state;
    struct cidr deny[] = {cidr("10.0.0.0", 8)};
    struct network_cfg none = {.default_deny_ranges = false};
    struct addr_guard *g = addr_guard_new(&none);
    assert_non_null(g);
    expect_allowed(g, "127.0.0.1");
    expect_allowed(g, "::1");
    expect_allowed(g, "64:ff9b::127.0.0.1");
    addr_guard_free(g);

    struct network_cfg only = {
        .default_deny_ranges = false, .deny_ranges = deny, .ndeny_ranges = 1};
    g = addr_guard_new(&only);
    assert_non_null(g);
    expect_denied(g, "10.9.9.9", "network.deny_ranges[0]");
    expect_denied(g, "::10.9.9.9", "v4-compatible of network.deny_ranges[0]");
    expect_allowed(g, "127.0.0.1");
    addr_guard_free(g);
}

/* An IPv6 deny range that holds all of IPv4 (::ffff:0:0/96, which a
 * prefix shorter than /96 may hold) denies the IPv4 addresses embedded in
 * IPv6 as well, like an IPv4 range. */
static void test_v6_range_over_ipv4(void **state)
{
    (void)state;
    struct cidr deny[] = {cidr("::", 16), cidr("2606:4700::", 32)};
    struct network_cfg cfg = {.default_deny_ranges = false, .deny_ranges = deny, .ndeny_ranges = 2};
    struct addr_guard *g = addr_guard_new(&cfg);
    assert_non_null(g);
    expect_denied(g, "8.8.8.8", "network.deny_ranges[0]");
    expect_denied(g, "64:ff9b::808:808", "nat64 of network.deny_ranges[0]");
    expect_denied(g, "2002:808:808::1", "6to4 of network.deny_ranges[0]");
    expect_denied(g, "2001:0:4136:e378:8000:63bf:f7f7:f7f7", "teredo of network.deny_ranges[0]");
    expect_denied(g, "2606:4700::1111", "network.deny_ranges[1]");
    expect_allowed(g, "2a00:1450::1");
    addr_guard_free(g);
}

static void test_null_name_and_free(void **state)
{
    (void)state;
    struct addr_guard *g = default_guard();
    struct ipaddr a = addr("127.0.0.1");
    assert_true(addr_guard_denies(g, &a, NULL));
    a = addr("64:ff9b::127.0.0.1");
    assert_true(addr_guard_denies(g, &a, NULL));
    addr_guard_free(g);
    addr_guard_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_v4),
        cmocka_unit_test(test_default_v6),
        cmocka_unit_test(test_v4_mapped),
        cmocka_unit_test(test_v4_compatible),
        cmocka_unit_test(test_nat64),
        cmocka_unit_test(test_v4_translated),
        cmocka_unit_test(test_6to4),
        cmocka_unit_test(test_teredo),
        cmocka_unit_test(test_isatap),
        cmocka_unit_test(test_embedded),
        cmocka_unit_test(test_allow_ranges),
        cmocka_unit_test(test_extra_deny),
        cmocka_unit_test(test_no_default),
        cmocka_unit_test(test_v6_range_over_ipv4),
        cmocka_unit_test(test_null_name_and_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
