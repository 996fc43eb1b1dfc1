/* addr_guard: the address ranges the gateway refuses to connect to
 * (see addr_guard.h). Addresses are 16 bytes, IPv4 as ::ffff:a.b.c.d, so
 * one prefix test serves both families. */
#include "gate/addr_guard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The ways an IPv6 address can carry an IPv4 one that some router or
 * relay will turn into a real IPv4 destination. */
enum embed {
    EMBED_COMPAT,    /* ::a.b.c.d, IPv4-compatible (RFC 4291 2.5.5.1, deprecated) */
    EMBED_SIIT,      /* ::ffff:0:a.b.c.d, IPv4-translated (RFC 2765 SIIT) */
    EMBED_NAT64,     /* 64:ff9b::a.b.c.d, the NAT64 well-known prefix (RFC 6052) */
    EMBED_NAT64_LOC, /* 64:ff9b:1::/48, local-use NAT64 prefixes (RFC 8215) */
    EMBED_6TO4,      /* 2002:aabb:ccdd::/48, 6to4 (RFC 3056) */
    EMBED_TEREDO,    /* 2001:0::/32, Teredo server and client (RFC 4380) */
    EMBED_ISATAP,    /* any prefix with the interface id [0-3]00:5efe:a.b.c.d (RFC 5214) */
    EMBED_COUNT
};

static const char *const embed_names[EMBED_COUNT] = {
    "v4-compatible", "v4-translated", "nat64", "nat64 local-use", "6to4", "teredo", "isatap"};

/* An address block the registry says is globally reachable inside a
 * default range that is not: left out of that range. */
struct hole {
    uint8_t b[16];
    uint8_t prefix;
};

struct range {
    struct cidr c;
    const struct hole *holes; /* static: what <c> leaves out; NULL: nothing */
    size_t nholes;
    const char *name; /* static, or <owned> */
    char *owned;
    char *embedded[EMBED_COUNT]; /* IPv4 ranges: "6to4 of loopback", ... */
    bool v4;                     /* holds IPv4 addresses (see cidr_holds_v4()) */
};

struct addr_guard {
    struct range *deny;
    size_t ndeny;
    struct cidr *allow;
    size_t nallow;
};

/* The default deny set: every range where an address does not name a
 * public host on the Internet, plus the ranges that reach this host, its
 * LAN or its cloud provider's control plane. */
struct default_range {
    uint8_t b[16];  /* the prefix: IPv4 in its last 4 bytes when v4 */
    uint8_t prefix; /* on the IPv4 (32) or IPv6 (128) scale */
    bool v4;
    const char *name;
    const struct hole *holes; /* NULL: none */
    size_t nholes;
};

/* The blocks of 2001::/23 (IETF protocol assignments, RFC 2928) that the
 * IANA special-purpose registry says are globally reachable: anycast
 * services and identifiers a public host may have. Teredo is here too,
 * whose reachability the registry leaves open: the guard judges a Teredo
 * address by the IPv4 ones it embeds (embedded_v4()). The rest of the
 * block, unassigned or not globally reachable, is denied, and so are the
 * PCP, TURN and DNS-SD SRP anycast addresses 2001:1::1-3 the registry
 * calls reachable: what answers there is the nearest box on the path (the
 * site's router, the operator's), a service of the local network: PCP
 * opens port mappings on it, a TURN relay forwards to any peer past this
 * guard, SRP registers services on the link. So are their IPv4 peers
 * 192.0.0.9 and 192.0.0.10, inside 192.0.0.0/24, as 192.88.99.0/24 is. */
static const struct hole ietf_v6_reachable[] = {
    {{0x20, 0x01}, 32},                      /* Teredo (RFC 4380) */
    {{0x20, 0x01, 0, 0x03}, 32},             /* AMT (RFC 7450) */
    {{0x20, 0x01, 0, 0x04, 0x01, 0x12}, 48}, /* AS112-v6 (RFC 7535) */
    {{0x20, 0x01, 0, 0x20}, 28},             /* ORCHIDv2 (RFC 7343) */
    {{0x20, 0x01, 0, 0x30}, 28},             /* DETs (RFC 9374) */
};

#define V4(a, b, c, d, n, name)                                                                    \
    {                                                                                              \
        {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, a, b, c, d}, n, true, name, NULL, 0                   \
    }

static const struct default_range default_ranges[] = {
    /* "This network" (RFC 791, RFC 1122 3.2.1.3): 0.0.0.0 reaches the local
     * host on Linux, and the rest is never a valid destination. */
    V4(0, 0, 0, 0, 8, "this-network"),
    /* Private networks (RFC 1918): the LAN, internal services. */
    V4(10, 0, 0, 0, 8, "rfc1918"),
    /* Shared address space for carrier-grade NAT (RFC 6598): the ISP's
     * side of a NAT, and cloud-internal addresses (Tailscale and others). */
    V4(100, 64, 0, 0, 10, "cgnat"),
    /* Loopback (RFC 1122): this host's own services, including us. */
    V4(127, 0, 0, 0, 8, "loopback"),
    /* Azure's WireServer: a virtual address in public space that every
     * Azure VM reaches on its host, which hands a VM its goal state,
     * extension settings (secrets among them) and the certificates that
     * decrypt them. Not a host on the Internet: nothing to lose. */
    V4(168, 63, 129, 16, 32, "azure-wireserver"),
    /* Link-local (RFC 3927), which holds 169.254.169.254, the cloud
     * instance metadata service that hands out credentials. */
    V4(169, 254, 0, 0, 16, "link-local"),
    /* Private networks (RFC 1918). */
    V4(172, 16, 0, 0, 12, "rfc1918"),
    /* IETF protocol assignments (RFC 6890): DS-Lite, NAT64 discovery, and
     * the PCP and TURN anycast addresses (see ietf_v6_reachable). */
    V4(192, 0, 0, 0, 24, "ietf-protocol"),
    /* TEST-NET-1 documentation range (RFC 5737): never routed. */
    V4(192, 0, 2, 0, 24, "documentation"),
    /* The deprecated 6to4 relay anycast prefix (RFC 7526): not globally
     * reachable in the IANA registry; what answers there, if anything, is
     * the nearest leftover relay router, never a named service. */
    V4(192, 88, 99, 0, 24, "6to4-relay-anycast"),
    /* Private networks (RFC 1918): home and office LANs, routers. */
    V4(192, 168, 0, 0, 16, "rfc1918"),
    /* Benchmarking (RFC 2544): lab networks, never on the Internet. */
    V4(198, 18, 0, 0, 15, "benchmarking"),
    /* TEST-NET-2 and TEST-NET-3 documentation ranges (RFC 5737). */
    V4(198, 51, 100, 0, 24, "documentation"),
    V4(203, 0, 113, 0, 24, "documentation"),
    /* Multicast (RFC 5771): not a single host; reaches the local segment. */
    V4(224, 0, 0, 0, 4, "multicast"),
    /* Reserved, formerly class E (RFC 1112): not routable. */
    V4(240, 0, 0, 0, 4, "reserved"),
    /* Limited broadcast (RFC 919): every host on the local segment. */
    V4(255, 255, 255, 255, 32, "broadcast"),

    /* Unspecified (RFC 4291 2.5.2): connecting to :: reaches this host. */
    {{0}, 128, false, "unspecified", NULL, 0},
    /* Loopback (RFC 4291 2.5.3). */
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, false, "loopback", NULL, 0},
    /* Unique local addresses (RFC 4193): the IPv6 private networks. */
    {{0xfc}, 7, false, "ula", NULL, 0},
    /* Link-local (RFC 4291 2.5.6): the local segment; fe80::a9fe:a9fe
     * style metadata endpoints live here too. */
    {{0xfe, 0x80}, 10, false, "link-local", NULL, 0},
    /* Site-local (RFC 3879, deprecated), still treated as private. */
    {{0xfe, 0xc0}, 10, false, "site-local", NULL, 0},
    /* Multicast (RFC 4291 2.7). */
    {{0xff}, 8, false, "multicast", NULL, 0},
    /* Documentation (RFC 3849, and RFC 9637's larger prefix): never routed. */
    {{0x20, 0x01, 0x0d, 0xb8}, 32, false, "documentation", NULL, 0},
    {{0x3f, 0xff}, 20, false, "documentation", NULL, 0},
    /* Discard-only (RFC 6666): a black hole by design. */
    {{0x01, 0x00}, 64, false, "discard-only", NULL, 0},
    /* The dummy prefix (RFC 9780): for addresses that must never leave a
     * link or a site. */
    {{0x01, 0x00, 0, 0, 0, 0, 0, 0x01}, 64, false, "dummy", NULL, 0},
    /* Benchmarking (RFC 5180), as 198.18.0.0/15 for IPv4: lab networks. */
    {{0x20, 0x01, 0, 0x02}, 48, false, "benchmarking", NULL, 0},
    /* ORCHID (RFC 4843, deprecated): cryptographic identifiers, never the
     * address of a host on the Internet. */
    {{0x20, 0x01, 0, 0x10}, 28, false, "orchid", NULL, 0},
    /* The rest of the IETF protocol assignments (RFC 2928, 2001::/23),
     * not globally reachable, but for the blocks the registry says are. */
    {{0x20, 0x01},
     23,
     false,
     "ietf-protocol",
     ietf_v6_reachable,
     sizeof(ietf_v6_reachable) / sizeof(ietf_v6_reachable[0])},
    /* SRv6 segment identifiers (RFC 9602): the network functions of an
     * operator's segment-routing domain, not reachable from the Internet. */
    {{0x5f, 0x00}, 16, false, "srv6-sid", NULL, 0},
};

#define NDEFAULT (sizeof(default_ranges) / sizeof(default_ranges[0]))

static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static bool is_v4(const struct ipaddr *a)
{
    return memcmp(a->b, v4_mapped, sizeof(v4_mapped)) == 0;
}

/* True when <c> holds IPv4 addresses: an IPv4 range, or an IPv6 one
 * holding ::ffff:0:0/96 (::/0 up to /95), which holds all of them. */
static bool cidr_holds_v4(const struct cidr *c)
{
    static const struct ipaddr v4_zero = {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}};
    return c->prefix >= 96 ? is_v4(&c->addr) : cidr_contains(c, &v4_zero);
}

/* Sets <out> to the IPv4 address made of the 32 bits of <a> starting at
 * byte <at>, skipping byte 8 (RFC 6052's "u" octet) when <skip_u>. */
static void v4_from(struct ipaddr *out, const struct ipaddr *a, unsigned at, bool skip_u)
{
    memcpy(out->b, v4_mapped, sizeof(v4_mapped));
    for (unsigned i = 0, j = at; i < 4; i++, j++) {
        if (skip_u && j == 8)
            j++;
        out->b[12 + i] = a->b[j];
    }
}

/* v4_from()'s inverse: writes the IPv4 address <v4> into <a> there. */
static void v4_into(struct ipaddr *a, const struct ipaddr *v4, unsigned at, bool skip_u)
{
    for (unsigned i = 0, j = at; i < 4; i++, j++) {
        if (skip_u && j == 8)
            j++;
        a->b[j] = v4->b[12 + i];
    }
}

/* The IPv6 prefixes whose addresses embed IPv4 ones (ISATAP, an interface
 * identifier under any /64, is none: isatap_v4()), each with where the
 * IPv4 address sits: <bits> (a multiple of 8) of <prefix>, then the address
 * at each of the first <npos> of <pos>. embedded_v4() (the guard's
 * reading), addr_guard_translated_in() (the policy loader's warning) and
 * addr_guard_openings_new() (the ranges a cidr: rule opens, preferred in
 * this order in its warning) all take them from here. The <translated>
 * forms are those a translator connects to the IPv4 address they embed;
 * 6to4, Teredo and the v4-compatible form only tunnel, and the IPv4 host
 * gets a wrapped packet, never the connection. The prefixes are disjoint. */
static const struct embed_form {
    enum embed kind;
    uint8_t prefix[12];
    uint8_t bits;
    bool translated;
    uint8_t npos;
    struct {
        uint8_t at;
        bool skip_u; /* byte 8 skipped: RFC 6052's "u" octet */
        bool invert; /* stored with every bit inverted */
    } pos[4];
} embed_forms[] = {
    /* 6to4 (RFC 3056): 2002:V4ADDR::/48, bits 16..47. */
    {EMBED_6TO4, {0x20, 0x02}, 16, false, 1, {{2, false, false}}},
    /* Teredo (RFC 4380): the server's address in bits 32..63, the
     * client's in the last 32 bits, inverted. */
    {EMBED_TEREDO, {0x20, 0x01, 0, 0}, 32, false, 2, {{4, false, false}, {12, false, true}}},
    /* NAT64's well-known prefix (RFC 6052), 64:ff9b::/96. */
    {EMBED_NAT64, {0, 0x64, 0xff, 0x9b}, 96, true, 1, {{12, false, false}}},
    /* Local-use NAT64 (RFC 8215), 64:ff9b:1::/48. The operator picks the
     * prefix length inside the /48, so every RFC 6052 position that fits
     * is a candidate: /96 (the last 32 bits), /64 (bits 72-103), /56
     * (56-63, 72-95) and /48 (48-63, 72-87). */
    {EMBED_NAT64_LOC,
     {0, 0x64, 0xff, 0x9b, 0, 1},
     48,
     true,
     4,
     {{12, false, false}, {9, false, false}, {7, true, false}, {6, true, false}}},
    /* SIIT's v4-translated addresses (RFC 7915), ::ffff:0:0:0/96: a
     * stateless translator maps them to the IPv4 address. */
    {EMBED_SIIT, {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 96, true, 1, {{12, false, false}}},
    /* IPv4-compatible (RFC 4291 2.5.5.1, deprecated): ::a.b.c.d. */
    {EMBED_COMPAT, {0}, 96, false, 1, {{12, false, false}}},
};

#define NEMBED (sizeof(embed_forms) / sizeof(embed_forms[0]))

/* The IPv4 address at position <p> of <f> in <a>, into <out>. */
static void read_pos(struct ipaddr *out, const struct ipaddr *a, const struct embed_form *f,
                     size_t p)
{
    v4_from(out, a, f->pos[p].at, f->pos[p].skip_u);
    if (f->pos[p].invert)
        for (int i = 12; i < 16; i++)
            out->b[i] ^= 0xff;
}

/* Fills <v4> with the IPv4 addresses at <f>'s positions in <a> and
 * returns how many. A tunnel form's are all read. For a translated one,
 * a read in 0.0.0.0/8 means nothing is encoded there (local-use NAT64's
 * other formats leave those bits zero) and is skipped, unless every
 * position reads so: then the first one's is the address. Any other
 * private read denies: erring on the safe side for prefixes that public
 * DNS does not return. */
static size_t form_v4(const struct ipaddr *a, const struct embed_form *f, struct ipaddr v4[4])
{
    size_t n = 0;
    for (size_t i = 0; i < f->npos; i++) {
        read_pos(&v4[n], a, f, i);
        if (!f->translated || v4[n].b[12] != 0)
            n++;
    }
    if (n == 0)
        read_pos(&v4[n++], a, f, 0);
    return n;
}

/* Fills <v4> with the IPv4 addresses <a> embeds and returns how many
 * (0 when <a> is IPv4 itself or embeds nothing); <*kind> says how. */
static size_t embedded_v4(const struct ipaddr *a, struct ipaddr v4[4], enum embed *kind)
{
    if (is_v4(a))
        return 0;
    for (size_t f = 0; f < NEMBED; f++) {
        if (memcmp(a->b, embed_forms[f].prefix, embed_forms[f].bits / 8) == 0) {
            *kind = embed_forms[f].kind;
            return form_v4(a, &embed_forms[f], v4);
        }
    }
    return 0;
}

/* ISATAP (RFC 5214): under any /64, the interface identifier 0000:5efe
 * (the u and g bits, 0x02 and 0x01 of its first byte, may be set) holds
 * the IPv4 address that the prefix's ISATAP router, or this host's own
 * ISATAP interface, tunnels the packet to. True when <a> has one, copied
 * into <v4>. */
static bool isatap_v4(const struct ipaddr *a, struct ipaddr *v4)
{
    if ((a->b[8] & ~0x03u) != 0 || a->b[9] != 0 || a->b[10] != 0x5e || a->b[11] != 0xfe)
        return false;
    v4_from(v4, a, 12, false);
    return true;
}

/* True when the guard reads <v4> among the addresses <a> embeds. */
static bool embeds(const struct ipaddr *a, const struct ipaddr *v4)
{
    struct ipaddr got[4];
    enum embed kind;
    size_t n = embedded_v4(a, got, &kind);
    for (size_t i = 0; i < n; i++)
        if (memcmp(got[i].b, v4->b, sizeof(got[i].b)) == 0)
            return true;
    return false;
}

bool addr_guard_translated_in(const struct cidr *c, const struct ipaddr *v4, struct ipaddr *form)
{
    for (size_t f = 0; f < NEMBED; f++) {
        const struct embed_form *t = &embed_forms[f];
        for (size_t p = 0; t->translated && p < t->npos; p++) {
            /* <c>'s own address with the form written over it: the bits
             * <c> leaves free take any value, so when the result is still
             * in <c>, <c> holds that form of <v4>. Read back as the guard
             * reads it: a local-use NAT64 address whose other positions
             * hold other addresses is still denied as this one (any read
             * denies), and this makes sure the form is one it reads. */
            struct ipaddr a = c->addr;
            memcpy(a.b, t->prefix, t->bits / 8);
            v4_into(&a, v4, t->pos[p].at, t->pos[p].skip_u);
            if (cidr_contains(c, &a) && embeds(&a, v4)) {
                if (form != NULL)
                    *form = a;
                return true;
            }
        }
    }
    return false;
}

size_t addr_guard_embedded(const struct ipaddr *a, struct ipaddr v4[ADDR_GUARD_MAX_EMBEDDED])
{
    enum embed kind;
    size_t n = embedded_v4(a, v4, &kind);
    if (isatap_v4(a, &v4[n]))
        n++;
    return n;
}

static int add_names(struct range *r)
{
    if (!r->v4)
        return 0;
    for (int e = 0; e < EMBED_COUNT; e++) {
        size_t len = strlen(embed_names[e]) + strlen(r->name) + 5;
        r->embedded[e] = malloc(len);
        if (r->embedded[e] == NULL)
            return -1;
        snprintf(r->embedded[e], len, "%s of %s", embed_names[e], r->name);
    }
    return 0;
}

struct addr_guard *addr_guard_new(const struct network_cfg *cfg)
{
    struct addr_guard *g = calloc(1, sizeof(*g));
    size_t n;

    if (g == NULL)
        return NULL;
    n = (cfg->default_deny_ranges ? NDEFAULT : 0) + cfg->ndeny_ranges;
    if (n > 0 && (g->deny = calloc(n, sizeof(*g->deny))) == NULL)
        goto err;
    if (cfg->default_deny_ranges) {
        for (size_t i = 0; i < NDEFAULT; i++) {
            const struct default_range *d = &default_ranges[i];
            struct range *r = &g->deny[g->ndeny++];
            memcpy(r->c.addr.b, d->b, 16);
            if (d->v4)
                memcpy(r->c.addr.b, v4_mapped, sizeof(v4_mapped));
            r->c.prefix = (uint8_t)(d->v4 ? 96 + d->prefix : d->prefix);
            r->v4 = d->v4;
            r->name = d->name;
            r->holes = d->holes;
            r->nholes = d->nholes;
            if (add_names(r) < 0)
                goto err;
        }
    }
    for (size_t i = 0; i < cfg->ndeny_ranges; i++) {
        struct range *r = &g->deny[g->ndeny++];
        char buf[48];
        r->c = cfg->deny_ranges[i];
        r->v4 = cidr_holds_v4(&r->c);
        snprintf(buf, sizeof(buf), "network.deny_ranges[%zu]", i);
        if ((r->owned = strdup(buf)) == NULL)
            goto err;
        r->name = r->owned;
        if (add_names(r) < 0)
            goto err;
    }
    if (cfg->nallow_ranges > 0) {
        g->allow = calloc(cfg->nallow_ranges, sizeof(*g->allow));
        if (g->allow == NULL)
            goto err;
        memcpy(g->allow, cfg->allow_ranges, cfg->nallow_ranges * sizeof(*g->allow));
        g->nallow = cfg->nallow_ranges;
    }
    return g;
err:
    addr_guard_free(g);
    return NULL;
}

void addr_guard_free(struct addr_guard *g)
{
    if (g == NULL)
        return;
    for (size_t i = 0; i < g->ndeny; i++) {
        free(g->deny[i].owned);
        for (int e = 0; e < EMBED_COUNT; e++)
            free(g->deny[i].embedded[e]);
    }
    free(g->deny);
    free(g->allow);
    free(g);
}

/* True when <r> holds <a>: inside its range, outside its holes. */
static bool range_holds(const struct range *r, const struct ipaddr *a)
{
    if (!cidr_contains(&r->c, a))
        return false;
    for (size_t i = 0; i < r->nholes; i++) {
        struct cidr h = {.prefix = r->holes[i].prefix};
        memcpy(h.addr.b, r->holes[i].b, sizeof(h.addr.b));
        if (cidr_contains(&h, a))
            return false;
    }
    return true;
}

/* Returns the first deny range holding <a>, or NULL. */
static const struct range *find_deny(const struct addr_guard *g, const struct ipaddr *a,
                                     bool v4_only)
{
    for (size_t i = 0; i < g->ndeny; i++) {
        if (v4_only && !g->deny[i].v4)
            continue;
        if (range_holds(&g->deny[i], a))
            return &g->deny[i];
    }
    return NULL;
}

bool addr_guard_allows(const struct addr_guard *g, const struct ipaddr *a)
{
    for (size_t i = 0; i < g->nallow; i++)
        if (cidr_contains(&g->allow[i], a))
            return true;
    return false;
}

bool addr_guard_denies(const struct addr_guard *g, const struct ipaddr *a, const char **range_name)
{
    return addr_guard_denies_in(g, a, range_name, NULL);
}

bool addr_guard_denies_in(const struct addr_guard *g, const struct ipaddr *a,
                          const char **range_name, struct cidr *range)
{
    const struct range *r = find_deny(g, a, false);
    const char *name = r != NULL ? r->name : NULL;

    if (r == NULL) {
        struct ipaddr v4[4];
        enum embed kind = EMBED_COMPAT;
        size_t n = embedded_v4(a, v4, &kind);
        for (size_t i = 0; i < n && r == NULL; i++)
            r = find_deny(g, &v4[i], true);
        if (r == NULL && isatap_v4(a, &v4[0])) {
            kind = EMBED_ISATAP;
            r = find_deny(g, &v4[0], true);
        }
        if (r != NULL)
            name = r->embedded[kind];
    }
    /* allow_ranges exempt the address actually connected to. */
    if (r == NULL || addr_guard_allows(g, a))
        return false;
    if (range_name != NULL)
        *range_name = name;
    if (range != NULL)
        *range = r->c;
    return true;
}

struct opening_range {
    struct cidr c;
    const char *name;
    size_t order; /* preference among equals: embeddings first, then the deny set's order */
    bool v4, embeds, metadata;
};

struct guard_openings {
    struct opening_range *r; /* sorted by address, then prefix; no two alike */
    size_t n;
    size_t *v4_before;        /* [i]: how many of r[0..i-1] hold IPv4 addresses */
    size_t *next_v6;          /* [i]: the first index >= i that holds no IPv4 address, or n */
    struct opening_range *md; /* those with <metadata>, by <order> */
    size_t nmd;
};

static int cidr_cmp(const struct cidr *a, const struct cidr *b)
{
    int r = memcmp(a->addr.b, b->addr.b, sizeof(a->addr.b));
    return r != 0 ? r : (a->prefix > b->prefix) - (a->prefix < b->prefix);
}

static int opening_cmp(const void *x, const void *y)
{
    const struct opening_range *a = x, *b = y;
    int r = cidr_cmp(&a->c, &b->c);
    return r != 0 ? r : (a->order > b->order) - (a->order < b->order);
}

static int opening_order_cmp(const void *x, const void *y)
{
    const struct opening_range *a = x, *b = y;
    return (a->order > b->order) - (a->order < b->order);
}

/* True when <outer> holds <inner>. */
static bool cidr_holds(const struct cidr *outer, const struct cidr *inner)
{
    return outer->prefix <= inner->prefix && cidr_contains(outer, &inner->addr);
}

/* Sorts <a> and keeps only the ranges no other holds: disjoint, so the
 * only one that can hold a range is the last that starts at or before it. */
static size_t outermost(struct opening_range *a, size_t n)
{
    qsort(a, n, sizeof(*a), opening_cmp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || !cidr_holds(&a[k - 1].c, &a[i].c))
            a[k++] = a[i];
    return k;
}

/* The first index of <a> (sorted) whose range is not below <key>. */
static size_t lower_bound(const struct opening_range *a, size_t n, const struct cidr *key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cidr_cmp(&a[mid].c, key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void addr_guard_openings_free(struct guard_openings *o)
{
    if (o == NULL)
        return;
    free(o->r);
    free(o->v4_before);
    free(o->next_v6);
    free(o->md);
    free(o);
}

struct guard_openings *addr_guard_openings_new(const struct addr_guard *g)
{
    struct guard_openings *o = calloc(1, sizeof(*o));
    struct opening_range *allow = NULL;
    struct ipaddr metadata;
    ipaddr_from_v4(&metadata, ADDR_GUARD_METADATA_V4);
    bool md = addr_guard_denies(g, &metadata, NULL), any_v4 = false;
    if (o == NULL || (o->r = calloc(g->ndeny + NEMBED, sizeof(*o->r))) == NULL ||
        (allow = calloc(g->nallow + 1, sizeof(*allow))) == NULL)
        goto err;
    for (size_t i = 0; i < g->ndeny; i++) {
        const struct range *r = &g->deny[i];
        any_v4 = any_v4 || r->v4;
        o->r[o->n++] = (struct opening_range){.c = r->c,
                                              .name = r->name,
                                              .order = NEMBED + i,
                                              .v4 = r->v4,
                                              .metadata = md && cidr_contains(&r->c, &metadata)};
    }
    for (size_t i = 0; any_v4 && i < NEMBED; i++) {
        struct opening_range *e = &o->r[o->n++];
        *e = (struct opening_range){.c.prefix = embed_forms[i].bits,
                                    .name = embed_names[embed_forms[i].kind],
                                    .order = i,
                                    .embeds = true,
                                    .metadata = md};
        memcpy(e->c.addr.b, embed_forms[i].prefix, sizeof(embed_forms[i].prefix));
    }
    /* Leave out what allow_ranges hold (open anyway) and repeats. */
    for (size_t i = 0; i < g->nallow; i++)
        allow[i].c = g->allow[i];
    size_t nallow = outermost(allow, g->nallow);
    qsort(o->r, o->n, sizeof(*o->r), opening_cmp);
    size_t k = 0;
    for (size_t i = 0; i < o->n; i++) {
        size_t a = lower_bound(allow, nallow, &o->r[i].c);
        if (a < nallow && cidr_cmp(&allow[a].c, &o->r[i].c) == 0)
            continue;
        if (a > 0 && cidr_holds(&allow[a - 1].c, &o->r[i].c))
            continue;
        if (k > 0 && cidr_cmp(&o->r[k - 1].c, &o->r[i].c) == 0)
            continue;
        o->r[k++] = o->r[i];
    }
    o->n = k;
    if ((o->v4_before = calloc(o->n + 1, sizeof(size_t))) == NULL ||
        (o->next_v6 = calloc(o->n + 1, sizeof(size_t))) == NULL ||
        (o->md = calloc(o->n + 1, sizeof(*o->md))) == NULL)
        goto err;
    for (size_t i = 0; i < o->n; i++) {
        o->v4_before[i + 1] = o->v4_before[i] + o->r[i].v4;
        if (o->r[i].metadata)
            o->md[o->nmd++] = o->r[i];
    }
    o->next_v6[o->n] = o->n;
    for (size_t i = o->n; i-- > 0;)
        o->next_v6[i] = o->r[i].v4 ? o->next_v6[i + 1] : i;
    qsort(o->md, o->nmd, sizeof(*o->md), opening_order_cmp);
    free(allow);
    return o;
err:
    free(allow);
    addr_guard_openings_free(o);
    return NULL;
}

static void opening_set(struct guard_opening *out, const struct opening_range *r)
{
    out->first = r->c;
    out->name = r->name;
    out->embeds = r->embeds;
    out->metadata = r->metadata;
}

void addr_guard_opened_by(const struct guard_openings *o, const struct cidr *c, bool skip_v4,
                          struct guard_opening *out)
{
    memset(out, 0, sizeof(*out));
    if (c->prefix >= 128)
        return;
    /* The ranges <c> holds and is wider than: from (its address, its
     * prefix + 1) to the last that starts within it. */
    struct cidr key = {.addr = c->addr, .prefix = (uint8_t)(c->prefix + 1)};
    size_t lo = lower_bound(o->r, o->n, &key);
    struct cidr last = {.prefix = 128};
    for (unsigned i = 0; i < sizeof(last.addr.b); i++) {
        unsigned keep = c->prefix > 8 * i ? c->prefix - 8 * i : 0;
        uint8_t mask = keep >= 8 ? 0xff : (uint8_t)(0xff00u >> keep);
        last.addr.b[i] = (uint8_t)(c->addr.b[i] | (uint8_t)~mask);
    }
    size_t hi = lower_bound(o->r, o->n, &last);
    if (hi < o->n && cidr_cmp(&o->r[hi].c, &last) == 0)
        hi++;
    if (hi <= lo)
        return;
    out->count = hi - lo;
    if (skip_v4)
        out->count -= o->v4_before[hi] - o->v4_before[lo];
    if (out->count == 0)
        return;
    for (size_t i = 0; i < o->nmd; i++) {
        const struct opening_range *r = &o->md[i];
        if (c->prefix < r->c.prefix && cidr_contains(c, &r->c.addr) && !(skip_v4 && r->v4)) {
            opening_set(out, r);
            return;
        }
    }
    opening_set(out, &o->r[skip_v4 ? o->next_v6[lo] : lo]);
}
