/* model: the policy as sluice holds it in memory (the types only).
 *
 * A policy is built by policy_load() (load.c) from SPEC.md's YAML, is
 * immutable once loaded and indexed, and is shared read-only by every
 * request decided under it; a reload builds a new one and swaps it. Every
 * string and array in it is owned by the policy and freed by policy_free(). */
#ifndef SLUICE_POLICY_MODEL_H
#define SLUICE_POLICY_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/host.h"
#include "policy/token_mark.h"
#include "util/ipaddr.h"

enum tier { TIER_NONE = -1, TIER_0 = 0, TIER_1, TIER_2, TIER_3 };

/* Methods a rule may name. A request with any other method matches only
 * rules without a methods restriction. */
enum method_bit {
    METHOD_GET = 1u << 0,
    METHOD_HEAD = 1u << 1,
    METHOD_POST = 1u << 2,
    METHOD_PUT = 1u << 3,
    METHOD_PATCH = 1u << 4,
    METHOD_DELETE = 1u << 5,
    METHOD_OPTIONS = 1u << 6,
    METHOD_TRACE = 1u << 7,
    METHOD_CONNECT = 1u << 8,
    METHOD_OTHER = 1u << 9, /* an extension method; never named by a rule */
};
#define METHODS_WRITE (METHOD_POST | METHOD_PUT | METHOD_PATCH | METHOD_DELETE)

/* Maps a method token (case-sensitive, as HTTP says) to its bit;
 * METHOD_OTHER for anything unknown. */
unsigned method_bit(const char *method);
/* True when <method> is one of method_bit()'s tokens spelt in another case
 * ("post", "Get"): to HTTP another method, but many origins fold the case
 * and take it for the known one, so the gate refuses it. */
bool method_is_case_variant(const char *method);
const char *method_name(unsigned bit);

enum agent_mode { AGENT_ENFORCE = 0, AGENT_REPORT };

struct rate_spec {
    bool set;
    uint64_t requests;  /* tokens added each <per_ms>; 0 = no request bucket */
    uint64_t per_ms;    /* default 1000 */
    uint64_t burst;     /* one-time extra tokens */
    uint64_t bandwidth; /* bytes per second; 0 = unshaped */
    int line;
};

/* An agent's encrypted_client_hello: the network's setting, or its own. */
enum ech_choice { ECH_AS_NETWORK = 0, ECH_REFUSE, ECH_ALLOW };

/* An agent's secret is held only as HMAC-SHA-256 under its policy's key
 * (policy_token_digest()): the policy, however long it is in force, holds
 * no token in clear (the env: variables it was read from stay in the
 * process's environment, which a reload reads again), and a request's
 * secret is hashed once, then compared with each candidate's digest. */
#define TOKEN_KEY_LEN    32
#define TOKEN_DIGEST_LEN 32

struct agent {
    char *id;
    int line;
    /* where id:, sources: and token: are written, for the findings made
     * once every agent is read (a repeated id, a shadowed source, a shared
     * secret) */
    int id_line, sources_line, token_line;
    struct cidr *sources; /* owned array */
    size_t nsources;
    bool unix_source; /* "unix" listed in sources */
    bool has_token;   /* a secret was resolved: token_digest is its digest */
    unsigned char token_digest[TOKEN_DIGEST_LEN];
    /* the secret's token_mark(), the same in every policy of the process:
     * how a reload tells that an open tunnel's secret is still the token */
    unsigned char token_mark[TOKEN_MARK_LEN];
    char *token_ref; /* as written, e.g. "env:SLUICE_TOKEN_CI" (for reports) */
    enum agent_mode mode;
    enum ech_choice encrypted_hello; /* ECH_AS_NETWORK: network.encrypted_client_hello */
};

enum rule_kind { RULE_EXACT, RULE_WILDCARD, RULE_CIDR };

struct rule {
    size_t index; /* position in rules[], for "rules[N]" in logs */
    int line;
    enum rule_kind kind;
    char *pattern;    /* as normalised: "api.github.com", "*.github.com", "10.0.0.0/8" */
    char *host;       /* EXACT: the name; WILDCARD: the suffix; CIDR: NULL */
    int pattern_line; /* where host: or cidr: is written, for findings about it */
    struct cidr cidr; /* CIDR only */
    uint16_t *ports;  /* owned; sorted, unique; default {80, 443} */
    size_t nports;
    unsigned methods; /* 0 = every method */
    enum tier tier;
    char *owner; /* NULL when not given */
    bool has_expires;
    int32_t expires;  /* day number (see util/units.h): valid through that day, UTC */
    int expires_line; /* where expires: is written, for findings about it */
    char **agents;    /* owned; NULL/0 = every agent */
    size_t nagents;
    struct rate_spec rate;
};

struct deny_entry {
    int line;
    struct host_pattern pattern;
};

struct network_cfg {
    bool default_deny_ranges; /* "default": see addr guard for the set */
    struct cidr *deny_ranges; /* extra ranges, owned */
    size_t ndeny_ranges;
    struct cidr *allow_ranges;
    size_t nallow_ranges;
    /* encrypted_client_hello: allow. By default (false) a CONNECT whose
     * ClientHello carries an encrypted one is refused: its server_name is
     * an outer name, and the site the server serves may be another. */
    bool allow_encrypted_hello;
};

struct dns_static {
    char *name; /* normal form */
    struct ipaddr addr;
    int line;
};

/* dns.static's order, a qsort() comparator of two struct dns_static: by
 * name (strcmp() of the normal forms), then line. The loader sorts the
 * list so; dns_static_find() searches a list so sorted. */
int dns_static_cmp(const void *a, const void *b);

/* The first of the entries of <s> (<n> of them, sorted by dns_static_cmp())
 * whose name is <name> (normal form), the others with it following it; or
 * NULL. A binary search: a list of 10,000 names is not scanned for each
 * lookup. */
const struct dns_static *dns_static_find(const struct dns_static *s, size_t n, const char *name);

/* alerts.sinks holds at most this many: each webhook makes a TLS context
 * of its own, the system's CA store read into it (some 45 ms and hundreds
 * of KiB), at start and, for a new one, at a reload, on the loop. */
#define POLICY_MAX_SINKS 64

/* dns.servers holds at most this many (the gateway asks them in turn). */
#define POLICY_MAX_DNS_SERVERS 8

struct dns_cfg {
    char **servers; /* "IP" or "IP:PORT" / "[V6]:PORT", validated; <= POLICY_MAX_DNS_SERVERS */
    size_t nservers;
    struct dns_static *statics;
    size_t nstatics;
};

struct limits_cfg {
    struct rate_spec rate;
    uint32_t max_connections_per_agent; /* 0 = unlimited */
    uint64_t quarantine_ms;
    int quarantine_line;      /* where quarantine: is written, for a finding about it */
    uint64_t header_bytes;    /* default 32 KiB */
    uint64_t idle_timeout_ms; /* default 60 s */
};

struct threshold {
    bool set;
    uint64_t max;
    uint64_t per_ms;
    int line;
};

/* Where an off_hours tz names its file: the loader checks it there, and
 * the detector reads it from there (whatever TZDIR says). */
#define POLICY_ZONEINFO_DIR "/usr/share/zoneinfo/"

struct off_hours_cfg {
    bool set;
    char *tz;          /* IANA zone name (a file under POLICY_ZONEINFO_DIR) or "UTC" */
    int start_min;     /* minutes after midnight, working hours start */
    int end_min;       /* working hours end (exclusive) */
    uint8_t days_mask; /* bit 0 = Monday ... bit 6 = Sunday: working days */
    int line;
};

struct baseline_cfg {
    bool set;
    double factor;
    uint64_t floor;
    uint64_t learn_ms;
    int line;
};

enum sink_kind { SINK_EXEC, SINK_WEBHOOK };

struct sink {
    enum sink_kind kind;
    char *target; /* program path or URL */
    /* A webhook's `env:NAME` as written, NULL for a URL written inline:
     * <target> then holds the variable's value, a secret kept out of the
     * file (run's box reads the file; run and the exec sinks hide NAME). */
    char *env_ref;
    int line;
    size_t index; /* in the file's alerts.sinks list, for a finding's field */
};

struct alerts_cfg {
    bool present; /* the alerts section exists */
    bool first_contact;
    struct threshold write_burst;
    struct threshold upload_bytes;
    struct threshold denied_burst;
    struct threshold auth_failures; /* per client source, of credentials naming no agent */
    struct off_hours_cfg off_hours;
    struct baseline_cfg baseline;
    int expiry_warn_days; /* default 14 */
    bool expiry_warn_days_set;
    struct sink *sinks;
    size_t nsinks;
};

struct policy_index; /* index.h */

struct policy {
    char *path;
    int version;
    struct agent *agents;
    size_t nagents;
    struct rule *rules;
    size_t nrules;
    struct deny_entry *deny;
    size_t ndeny;
    struct network_cfg network;
    struct dns_cfg dns;
    struct limits_cfg limits;
    struct alerts_cfg alerts;
    struct policy_index *index; /* built by policy_index_build(); owned */
    /* Random for each policy loaded (a reload draws another): the agents'
     * digests in memory cannot be matched against precomputed ones. */
    unsigned char token_key[TOKEN_KEY_LEN];
};

/* The keyed digest of the <len> bytes of <secret> under <p>'s token key
 * into <out>: 0, or -1 when OpenSSL fails (<out> then wiped). */
int policy_token_digest(const struct policy *p, const void *secret, size_t len,
                        unsigned char out[TOKEN_DIGEST_LEN]);

#endif
