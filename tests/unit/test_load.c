/* test_load: the policy loader (load.c, yaml_tree.c, model.c). Every error
 * the loader can report is produced here from inline YAML and checked in its
 * exact "file:line: field: message" form. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <fcntl.h>

#include "policy/index.h"
#include "policy/policy.h"
#include "util/env.h"
#include "util/units.h"

#define FILE_NAME "p.yaml"

static struct policy *load(const char *yaml, struct diag *d)
{
    diag_init(d, FILE_NAME);
    return policy_load_buffer(FILE_NAME, yaml, strlen(yaml), d);
}

static void dump(const char *yaml, const struct diag *d)
{
    char buf[1024];
    print_message("--- input:\n%s\n--- diagnostics:\n", yaml);
    for (size_t i = 0; i < d->count; i++) {
        diag_format(d, &d->entries[i], buf, sizeof(buf));
        print_message("%s: %s\n", d->entries[i].level == DIAG_ERROR ? "error" : "warning", buf);
    }
}

static bool has_entry(const struct diag *d, enum diag_level level, const char *want)
{
    char buf[1024];
    for (size_t i = 0; i < d->count; i++) {
        if (d->entries[i].level != level)
            continue;
        diag_format(d, &d->entries[i], buf, sizeof(buf));
        if (strcmp(buf, want) == 0)
            return true;
    }
    return false;
}

/* Loading <yaml> fails, and <want> is among the errors. */
static void expect_error(const char *yaml, const char *want)
{
    struct diag d;
    struct policy *p = load(yaml, &d);
    bool ok = p == NULL && diag_has_errors(&d) && has_entry(&d, DIAG_ERROR, want);
    if (!ok) {
        print_message("wanted error: %s\n", want);
        dump(yaml, &d);
    }
    policy_free(p);
    diag_free(&d);
    assert_true(ok);
}

/* Loading <yaml> succeeds with <want> among the warnings. */
static void expect_warning(const char *yaml, const char *want)
{
    struct diag d;
    struct policy *p = load(yaml, &d);
    bool ok = p != NULL && !diag_has_errors(&d) && has_entry(&d, DIAG_WARNING, want);
    if (!ok) {
        print_message("wanted warning: %s\n", want);
        dump(yaml, &d);
    }
    policy_free(p);
    diag_free(&d);
    assert_true(ok);
}

/* Loading <yaml> succeeds without any diagnostic; the caller frees. */
static struct policy *expect_clean(const char *yaml)
{
    struct diag d;
    struct policy *p = load(yaml, &d);
    if (p == NULL || d.count != 0)
        dump(yaml, &d);
    assert_non_null(p);
    assert_int_equal(d.count, 0);
    diag_free(&d);
    return p;
}

struct error_case {
    const char *yaml;
    const char *want;
};

static void run_errors(const struct error_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++)
        expect_error(cases[i].yaml, cases[i].want);
}

#define RUN(cases) run_errors(cases, sizeof(cases) / sizeof(cases[0]))

#define V "version: 1\n"
#define BIDI_REFUSED                                                                               \
    "must not hold bidirectional formatting characters (U+202A-U+202E, U+2066-U+2069, U+200E, "    \
    "U+200F, U+061C): they reorder the line it is printed in"
#define INVISIBLE_REFUSED                                                                          \
    "must not hold invisible characters (U+00AD, U+180E, U+200B, U+2060, U+FEFF): a name with "    \
    "one prints as another and escapes a search for it"
#define R "rules:\n  - host: a.example.test\n    tier: 0\n"

/* ---- happy paths ------------------------------------------------------ */

static const char spec_example[] =
    "version: 1\n"
    "agents:\n"
    "  - id: ci-bot\n"
    "    sources: [127.0.0.1/32, \"unix\"]\n"
    "    token: env:SLUICE_TEST_TOKEN_CI\n"
    "    mode: enforce\n"
    "  - id: watcher\n"
    "    sources: [10.0.0.0/8, \"::1\"]\n"
    "    mode: report\n"
    "rules:\n"
    "  - host: registry.npmjs.org\n"
    "    ports: [443]\n"
    "    tier: 0\n"
    "  - host: \"*.docker.io\"\n"
    "    tier: 0\n"
    "  - host: api.github.com\n"
    "    methods: [GET, HEAD]\n"
    "    tier: 1\n"
    "  - host: API.GitHub.com.\n"
    "    methods: [POST, PUT, PATCH, DELETE]\n"
    "    tier: 3\n"
    "    owner: chaysen\n"
    "    expires: 2026-12-31\n"
    "    agents: [ci-bot]\n"
    "    rate: {requests: 10, per: 1m, burst: 5, bandwidth: 1MiB/s}\n"
    "  - cidr: 192.168.10.0/24\n"
    "    ports: [8080, 22, 8080]\n"
    "    tier: 2\n"
    "deny:\n"
    "  - gist.github.com\n"
    "  - \"*.evil.example\"\n"
    "network:\n"
    "  deny_ranges: default\n"
    "  allow_ranges: [127.0.0.0/8]\n"
    "dns:\n"
    "  servers: [127.0.0.53, \"127.0.0.1:5353\", \"[::1]:53\", \"::1\"]\n"
    "  static: {api.example.test: 127.0.0.2, B.example.test: \"::1\"}\n"
    "limits:\n"
    "  rate: {requests: 50, per: 1s, burst: 100, bandwidth: 50MiB/s}\n"
    "  max_connections_per_agent: 256\n"
    "  quarantine: 5m\n"
    "  header_bytes: 64KiB\n"
    "  idle_timeout: 2m\n"
    "alerts:\n"
    "  first_contact: true\n"
    "  write_burst: {max: 20, per: 1m}\n"
    "  upload_bytes: {max: 10MiB, per: 30s}\n"
    "  denied_burst: {max: 10}\n"
    "  off_hours: {tz: UTC, hours: \"08:00-19:00\", days: Mon-Fri}\n"
    "  baseline: {factor: 4, floor: 30, learn: 24h}\n"
    "  expiry_warn_days: 7\n"
    "  sinks:\n"
    "    - exec: /usr/local/bin/page-oncall\n"
    "    - webhook: http://127.0.0.1:9000/hook\n"
    "  auth_failures: {max: 5, per: 30s}\n";

static void check_spec_rules(const struct policy *p)
{
    assert_int_equal(p->nrules, 5);
    const struct rule *r = p->rules;
    assert_int_equal(r[0].index, 0);
    assert_int_equal(r[0].line, 11);
    assert_int_equal(r[0].kind, RULE_EXACT);
    assert_string_equal(r[0].pattern, "registry.npmjs.org");
    assert_string_equal(r[0].host, "registry.npmjs.org");
    assert_int_equal(r[0].nports, 1);
    assert_int_equal(r[0].ports[0], 443);
    assert_int_equal(r[0].methods, 0);
    assert_int_equal(r[0].tier, TIER_0);
    assert_null(r[0].owner);
    assert_false(r[0].has_expires);
    assert_null(r[0].agents);
    assert_false(r[0].rate.set);

    assert_int_equal(r[1].kind, RULE_WILDCARD);
    assert_string_equal(r[1].pattern, "*.docker.io");
    assert_string_equal(r[1].host, "docker.io");
    assert_int_equal(r[1].nports, 2);
    assert_int_equal(r[1].ports[0], 80);
    assert_int_equal(r[1].ports[1], 443);

    assert_int_equal(r[2].methods, METHOD_GET | METHOD_HEAD);
    assert_int_equal(r[2].tier, TIER_1);

    assert_string_equal(r[3].pattern, "api.github.com");
    assert_int_equal(r[3].methods, METHODS_WRITE);
    assert_int_equal(r[3].tier, TIER_3);
    assert_string_equal(r[3].owner, "chaysen");
    assert_true(r[3].has_expires);
    int32_t day;
    assert_int_equal(parse_date("2026-12-31", &day), 0);
    assert_int_equal(r[3].expires, day);
    assert_int_equal(r[3].nagents, 1);
    assert_string_equal(r[3].agents[0], "ci-bot");
    assert_true(r[3].rate.set);
    assert_int_equal(r[3].rate.requests, 10);
    assert_int_equal(r[3].rate.per_ms, 60000);
    assert_int_equal(r[3].rate.burst, 5);
    assert_int_equal(r[3].rate.bandwidth, 1024 * 1024);
    assert_int_equal(r[3].rate.line, 25);

    assert_int_equal(r[4].kind, RULE_CIDR);
    assert_string_equal(r[4].pattern, "192.168.10.0/24");
    assert_null(r[4].host);
    assert_int_equal(r[4].cidr.prefix, 120);
    assert_int_equal(r[4].nports, 2);
    assert_int_equal(r[4].ports[0], 22);
    assert_int_equal(r[4].ports[1], 8080);
}

static void check_spec_agents(const struct policy *p)
{
    assert_int_equal(p->nagents, 2);
    const struct agent *a = policy_find_agent(p, "ci-bot");
    assert_ptr_equal(a, &p->agents[0]);
    assert_int_equal(a->line, 3);
    assert_int_equal(a->nsources, 1);
    assert_true(a->unix_source);
    assert_int_equal(a->sources[0].prefix, 128);
    unsigned char want[TOKEN_DIGEST_LEN];
    assert_int_equal(policy_token_digest(p, "s3cret-token-for-tests", 22, want), 0);
    assert_true(a->has_token); /* the secret "s3cret-token-for-tests", as its digest */
    assert_memory_equal(a->token_digest, want, sizeof(want));
    assert_string_equal(a->token_ref, "env:SLUICE_TEST_TOKEN_CI");
    assert_int_equal(a->mode, AGENT_ENFORCE);
    a = policy_find_agent(p, "watcher");
    assert_non_null(a);
    assert_int_equal(a->nsources, 2);
    assert_false(a->unix_source);
    assert_false(a->has_token);
    assert_int_equal(a->mode, AGENT_REPORT);
    assert_null(policy_find_agent(p, "nobody"));
    assert_null(policy_find_agent(NULL, "ci-bot"));
}

static void check_spec_sections(const struct policy *p)
{
    assert_int_equal(p->ndeny, 2);
    assert_int_equal(p->deny[0].line, 30);
    assert_string_equal(p->deny[0].pattern.name, "gist.github.com");
    assert_int_equal(p->deny[1].pattern.kind, PATTERN_WILDCARD);
    assert_true(p->network.default_deny_ranges);
    assert_int_equal(p->network.ndeny_ranges, 0);
    assert_int_equal(p->network.nallow_ranges, 1);
    assert_int_equal(p->dns.nservers, 4);
    assert_string_equal(p->dns.servers[2], "[::1]:53");
    assert_int_equal(p->dns.nstatics, 2);
    assert_string_equal(p->dns.statics[0].name, "api.example.test"); /* sorted */
    assert_string_equal(p->dns.statics[1].name, "b.example.test");
    assert_true(ipaddr_is_v4(&p->dns.statics[0].addr));
    assert_int_equal(ipaddr_v4(&p->dns.statics[0].addr), 0x7f000002);
    assert_false(ipaddr_is_v4(&p->dns.statics[1].addr));
    assert_true(p->limits.rate.set);
    assert_int_equal(p->limits.rate.requests, 50);
    assert_int_equal(p->limits.rate.bandwidth, 50u * 1024 * 1024);
    assert_int_equal(p->limits.max_connections_per_agent, 256);
    assert_int_equal(p->limits.quarantine_ms, 300000);
    assert_int_equal(p->limits.header_bytes, 64 * 1024);
    assert_int_equal(p->limits.idle_timeout_ms, 120000);
}

static void check_spec_alerts(const struct policy *p)
{
    const struct alerts_cfg *a = &p->alerts;
    assert_true(a->present);
    assert_true(a->first_contact);
    assert_true(a->write_burst.set);
    assert_int_equal(a->write_burst.max, 20);
    assert_int_equal(a->write_burst.per_ms, 60000);
    assert_int_equal(a->upload_bytes.max, 10u * 1024 * 1024);
    assert_int_equal(a->upload_bytes.per_ms, 30000);
    assert_int_equal(a->denied_burst.per_ms, 1000); /* SPEC: "`per` defaults to 1s" */
    assert_true(a->auth_failures.set);
    assert_int_equal(a->auth_failures.max, 5);
    assert_int_equal(a->auth_failures.per_ms, 30000);
    assert_true(a->off_hours.set);
    assert_string_equal(a->off_hours.tz, "UTC");
    assert_int_equal(a->off_hours.start_min, 8 * 60);
    assert_int_equal(a->off_hours.end_min, 19 * 60);
    assert_int_equal(a->off_hours.days_mask, 0x1f);
    assert_true(a->baseline.set);
    assert_true(a->baseline.factor == 4.0);
    assert_int_equal(a->baseline.floor, 30);
    assert_int_equal(a->baseline.learn_ms, 24u * 3600 * 1000);
    assert_int_equal(a->expiry_warn_days, 7);
    assert_true(a->expiry_warn_days_set);
    assert_int_equal(a->nsinks, 2);
    assert_int_equal(a->sinks[0].kind, SINK_EXEC);
    assert_string_equal(a->sinks[0].target, "/usr/local/bin/page-oncall");
    assert_int_equal(a->sinks[1].kind, SINK_WEBHOOK);
    assert_int_equal(a->sinks[1].line, 54);
}

static void test_spec_example(void **state)
{
    (void)state;
    setenv("SLUICE_TEST_TOKEN_CI", "s3cret-token-for-tests", 1);
    struct diag d;
    struct policy *p = load(spec_example, &d);
    if (p == NULL || d.count != 3)
        dump(spec_example, &d);
    assert_non_null(p);
    /* the only remarks: the agent in report mode, the repeated port, and
     * the pin to ::1, which allow_ranges (127.0.0.0/8, IPv4) leaves denied */
    assert_int_equal(d.count, 3);
    assert_true(has_entry(&d, DIAG_WARNING,
                          "p.yaml:37: dns.static.b.example.test: b.example.test is pinned to ::1, "
                          "which deny_ranges deny (::1/128, loopback) and no allow_ranges entry "
                          "holds: every request for it is refused as private_address; list the "
                          "address in network.allow_ranges, or pin the name elsewhere"));
    assert_true(has_entry(&d, DIAG_WARNING,
                          "p.yaml:9: agents[1].mode: report: this agent's denials are let "
                          "through (logged as report); only the address guard still refuses for "
                          "it (private_address, self_request)"));
    assert_true(has_entry(&d, DIAG_WARNING,
                          "p.yaml:27: rules[4].ports[2]: port 8080 is listed twice (line 27)"));
    assert_string_equal(p->path, FILE_NAME);
    assert_int_equal(p->version, 1);
    assert_non_null(p->index);
    check_spec_rules(p);
    check_spec_agents(p);
    check_spec_sections(p);
    check_spec_alerts(p);
    struct rule_list l = index_exact(p->index, "api.github.com");
    assert_int_equal(l.count, 2);
    policy_free(p);
    diag_free(&d);
}

/* ---- what the loaded policy holds ----------------------------------- */

#if defined(__SANITIZE_ADDRESS__) /* GCC; clang before 16 says so only by __has_feature */
#define HEAP_SCAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEAP_SCAN 1
#endif
#endif

#ifdef HEAP_SCAN
/* The sanitizer's allocator knows which words are heap blocks (the
 * prototypes of LLVM's sanitizer/allocator_interface.h, which GCC lacks). */
int __sanitizer_get_ownership(const volatile void *p);
size_t __sanitizer_get_allocated_size(const volatile void *p);

struct heap_scan {
    const char *needle;
    const void *seen[4096];
    size_t nseen;
    bool found;
};

static bool heap_scan_seen(struct heap_scan *s, const void *q)
{
    for (size_t i = 0; i < s->nseen; i++)
        if (s->seen[i] == q)
            return true;
    if (s->nseen < sizeof(s->seen) / sizeof(s->seen[0]))
        s->seen[s->nseen++] = q;
    return false;
}

/* Looks for the needle in the <n> bytes at <p> and, <depth> levels down,
 * in every heap block a word of them points to: whatever field holds it,
 * a string the policy owns is found without naming the field. */
static void heap_scan_block(struct heap_scan *s, const unsigned char *p, size_t n, int depth)
{
    if (memmem(p, n, s->needle, strlen(s->needle)) != NULL)
        s->found = true;
    for (size_t off = 0; depth > 0 && off + sizeof(void *) <= n; off += sizeof(void *)) {
        const void *q;
        memcpy(&q, p + off, sizeof(q));
        if (q != NULL && __sanitizer_get_ownership(q) && !heap_scan_seen(s, q))
            heap_scan_block(s, q, __sanitizer_get_allocated_size(q), depth - 1);
    }
}

static bool policy_holds(const struct policy *p, const char *needle)
{
    static struct heap_scan s;
    memset(&s, 0, sizeof(s));
    s.needle = needle;
    heap_scan_block(&s, (const unsigned char *)p, sizeof(*p), 6);
    return s.found;
}
#endif

/* The agents' secrets are held as keyed digests only: nothing the loaded
 * policy owns holds a token in clear (a core dump or a read of the
 * gateway's memory finds none), while their env: names are still there. */
static void test_loaded_policy_holds_no_clear_token(void **state)
{
    (void)state;
#ifdef HEAP_SCAN
    static const char yaml[] =
        V "agents:\n"
          "  - {id: a, sources: [unix], token: env:SLUICE_TEST_TOKEN_SCAN}\n"
          "  - {id: b, sources: [unix], token: env:SLUICE_TEST_TOKEN_SCAN2}\n" R;
    setenv("SLUICE_TEST_TOKEN_SCAN", "clear-token-7e1d-a", 1);
    setenv("SLUICE_TEST_TOKEN_SCAN2", "clear-token-7e1d-b", 1);
    struct diag d;
    struct policy *p = load(yaml, &d);
    if (p == NULL || d.count != 0)
        dump(yaml, &d);
    assert_non_null(p);
    assert_true(policy_holds(p, "env:SLUICE_TEST_TOKEN_SCAN2")); /* the scan reaches them */
    assert_false(policy_holds(p, "clear-token-7e1d-a"));
    assert_false(policy_holds(p, "clear-token-7e1d-b"));
    assert_false(policy_holds(p, "7e1d")); /* nor a piece of one */
    /* What is held is the digest under this policy's own random key:
     * another load of the same file holds another. */
    unsigned char want[TOKEN_DIGEST_LEN];
    assert_int_equal(policy_token_digest(p, "clear-token-7e1d-a", 18, want), 0);
    assert_true(p->agents[0].has_token);
    assert_memory_equal(p->agents[0].token_digest, want, sizeof(want));
    struct diag d2;
    struct policy *again = load(yaml, &d2);
    assert_non_null(again);
    assert_memory_not_equal(again->agents[0].token_digest, want, sizeof(want));
    policy_free(again);
    diag_free(&d2);
    policy_free(p);
    diag_free(&d);
    unsetenv("SLUICE_TEST_TOKEN_SCAN");
    unsetenv("SLUICE_TEST_TOKEN_SCAN2");
#else
    skip(); /* the scan needs the sanitizer's allocator to tell heap blocks */
#endif
}

static void test_defaults(void **state)
{
    (void)state;
    struct policy *p = expect_clean(V R);
    assert_int_equal(p->nagents, 0);
    assert_true(p->network.default_deny_ranges);
    assert_false(p->limits.rate.set);
    assert_int_equal(p->limits.max_connections_per_agent, 0);
    assert_int_equal(p->limits.quarantine_ms, 0);
    assert_int_equal(p->limits.header_bytes, 32 * 1024);
    assert_int_equal(p->limits.idle_timeout_ms, 60000);
    assert_false(p->alerts.present);
    assert_int_equal(p->dns.nservers, 0);
    policy_free(p);

    p = expect_clean(V R "alerts: {}\n");
    assert_true(p->alerts.present);
    assert_int_equal(p->alerts.expiry_warn_days, 14);
    assert_false(p->alerts.expiry_warn_days_set);
    assert_false(p->alerts.write_burst.set);
    assert_false(p->alerts.first_contact);
    policy_free(p);

    /* with /s, or per a second, a bandwidth says what it is */
    policy_free(expect_clean(V R "limits: {rate: {requests: 1, per: 1m, bandwidth: 1KiB/s}}\n"));
    policy_free(expect_clean(V R "limits: {rate: {bandwidth: 1KiB, per: 1s}}\n"));

    p = expect_clean(V R "limits: {rate: {bandwidth: 1KiB}}\nalerts:\n  off_hours: {hours: "
                         "\"22:00-06:00\"}\n  baseline: {factor: 2.5}\n");
    assert_int_equal(p->limits.rate.per_ms, 1000);
    assert_int_equal(p->limits.rate.burst, 0);
    assert_int_equal(p->limits.rate.requests, 0);
    assert_int_equal(p->limits.rate.bandwidth, 1024);
    assert_string_equal(p->alerts.off_hours.tz, "UTC");
    assert_int_equal(p->alerts.off_hours.days_mask, 0x1f);
    assert_int_equal(p->alerts.off_hours.start_min, 22 * 60);
    assert_int_equal(p->alerts.off_hours.end_min, 6 * 60);
    assert_true(p->alerts.baseline.factor == 2.5);
    assert_int_equal(p->alerts.baseline.floor, 0);
    assert_int_equal(p->alerts.baseline.learn_ms, 24u * 3600 * 1000);
    policy_free(p);
}

/* The longest period loads: 87600h, written in any unit. */
/* A CIDR without a prefix length is the one address, /32 or /128, wherever
 * a CIDR is read; one that looks like a network's (IPv4 .0, IPv6 with its
 * last 64 bits zero) was most likely meant as that network, and is warned
 * of, naming both readings. */
static void test_cidr_without_prefix_length(void **state)
{
    (void)state;
    struct policy *p = expect_clean(V "rules:\n  - {cidr: 10.0.0.1, tier: 1}\n"
                                      "  - {cidr: \"2001:db8::1\", tier: 1}\n");
    assert_string_equal(p->rules[0].pattern, "10.0.0.1/32");
    assert_int_equal(p->rules[0].cidr.prefix, 128);
    assert_string_equal(p->rules[1].pattern, "2001:db8::1/128");
    policy_free(p);
#define ONE_ADDRESS(a, len, guess)                                                                 \
    "'" a "' has no prefix length: it is the one address " a "/" len ", not the network it "       \
    "looks like; write the network with its length (" a "/" guess ", say), or " a "/" len          \
    " for the one address"
    expect_warning(V "rules:\n  - {cidr: 192.168.10.0, tier: 1}\n",
                   "p.yaml:3: rules[0].cidr: " ONE_ADDRESS("192.168.10.0", "32", "24"));
    expect_warning(V "rules:\n  - {cidr: \"2001:db8:1::\", tier: 1}\n",
                   "p.yaml:3: rules[0].cidr: " ONE_ADDRESS("2001:db8:1::", "128", "64"));
    expect_warning(V "agents:\n  - {id: a, sources: [unix, 10.0.0.0]}\n" R,
                   "p.yaml:3: agents[0].sources[1]: " ONE_ADDRESS("10.0.0.0", "32", "8"));
    expect_warning(V R "network:\n  allow_ranges: [172.16.0.0]\n",
                   "p.yaml:6: network.allow_ranges[0]: " ONE_ADDRESS("172.16.0.0", "32", "16"));
#undef ONE_ADDRESS
}

/* A cidr: rule's IP literals skip deny_ranges (src/gate/conn.c), so a rule
 * that holds a denied range it does not name opens it: warned, naming the
 * range (those that hold 169.254.169.254 first) and how many more; a rule
 * that names a denied range, or lies inside one, means it and is quiet, and
 * so is one whose denied ranges allow_ranges exempt anyway. */
static void test_cidr_rule_over_denied_ranges(void **state)
{
    (void)state;
#define OPENS                                                                                      \
    "an IP literal this rule allows skips deny_ranges, so the rule opens it; name a "              \
    "narrower range, or the denied range itself if you mean it"
    expect_warning(V "rules:\n  - {cidr: 2000::/3, tier: 0}\n",
                   "p.yaml:3: rules[0].cidr: '2000::/3' holds 2002::/16 (6to4, whose addresses "
                   "embed IPv4 ones such as 169.254.169.254, the cloud metadata address) and 6 "
                   "other denied ranges: " OPENS);
    expect_warning(
        V "rules:\n  - {cidr: 10.0.0.0/8, tier: 0}\n  - {cidr: 0.0.0.0/0, tier: 0}\n",
        "p.yaml:4: rules[1].cidr: '0.0.0.0/0' holds 169.254.0.0/16 (link-local, with "
        "169.254.169.254, the cloud metadata address) and 16 other denied ranges: " OPENS);
    expect_warning(
        V "rules:\n  - {cidr: \"64:ff9b::/64\", tier: 0}\n",
        "p.yaml:3: rules[0].cidr: '64:ff9b::/64' holds 64:ff9b::/96 (nat64, whose "
        "addresses embed IPv4 ones such as 169.254.169.254, the cloud metadata address): " OPENS);
    expect_warning(
        V "rules:\n  - {cidr: \"fc00::/6\", tier: 0}\n",
        "p.yaml:3: rules[0].cidr: 'fc00::/6' holds fc00::/7 (ula) and 3 other denied ranges: " OPENS);
    /* "::/0" has the warning about IPv4 besides; this one names what it
     * opens in IPv6. */
    expect_warning(V "rules:\n  - {cidr: \"::/0\", tier: 0}\n",
                   "p.yaml:3: rules[0].cidr: '::/0' holds 2002::/16 (6to4, whose addresses embed "
                   "IPv4 ones such as 169.254.169.254, the cloud metadata address) and 19 other "
                   "denied ranges: " OPENS);
    /* A denied range listed twice counts once; one that allow_ranges hold
     * (an outer allow range over an inner one too) is open anyway and not
     * counted, and 169.254.169.254 allowed is named no more. */
    expect_warning(
        V "rules:\n  - {cidr: 0.0.0.0/0, tier: 0}\n"
          "network: {deny_ranges: [default, 10.0.0.0/8, 10.0.0.0/8]}\n",
        "p.yaml:3: rules[0].cidr: '0.0.0.0/0' holds 169.254.0.0/16 (link-local, with "
        "169.254.169.254, the cloud metadata address) and 16 other denied ranges: " OPENS);
    expect_warning(V "rules:\n  - {cidr: 0.0.0.0/0, tier: 0}\n"
                     "network: {allow_ranges: [169.254.0.0/16, 100.0.0.0/8, 100.64.0.0/10]}\n",
                   "p.yaml:3: rules[0].cidr: '0.0.0.0/0' holds 0.0.0.0/8 (this-network) and 14 "
                   "other denied ranges: " OPENS);
    /* An operator's own deny range, and the embedded forms of it alone. */
    expect_warning(V "rules:\n  - {cidr: 8.8.0.0/16, tier: 0}\n"
                     "network: {deny_ranges: [8.8.8.0/24]}\n",
                   "p.yaml:3: rules[0].cidr: '8.8.0.0/16' holds 8.8.8.0/24 "
                   "(network.deny_ranges[0]): " OPENS);
    /* No IPv4 range denied: the embedded forms deny nothing. */
    struct diag d;
    struct policy *p = load(V "rules:\n  - {cidr: 2000::/3, tier: 0}\n"
                              "network: {deny_ranges: [\"fd00::/8\"]}\n",
                            &d);
    assert_non_null(p);
    assert_int_equal(d.warnings, 1); /* deny_ranges without "default" */
    diag_free(&d);
    policy_free(p);
    p = expect_clean(
        V "rules:\n  - {cidr: 10.0.0.0/8, tier: 0}\n  - {cidr: 10.1.2.0/24, tier: 0}\n"
          "  - {cidr: 169.254.169.254/32, tier: 0}\n  - {cidr: 2002::/16, tier: 0}\n"
          "  - {cidr: \"2002:a9fe:a9fe::/48\", tier: 0}\n  - {cidr: 2600::/12, tier: 0}\n"
          "  - {cidr: 8.8.8.0/24, tier: 0}\n  - {cidr: \"fd00::/8\", tier: 0}\n");
    policy_free(p);
    p = expect_clean(V "rules:\n  - {cidr: 2000::/3, tier: 0}\n"
                       "network: {allow_ranges: [2000::/3]}\n");
    policy_free(p);
    p = expect_clean(V "rules:\n  - {cidr: 2000::/3, tier: 0}\n"
                       "network: {allow_ranges: [2002::/16, 2001::/32, 2001:2::/48, "
                       "2001:10::/28, 2001::/23, 2001:db8::/32, \"3fff::/20\"]}\n");
    policy_free(p);
#undef OPENS
}

/* A dns.static pin is its name's only address, and the address guard
 * refuses a name's address in deny_ranges whatever rule allows it (only an
 * IP literal's cidr: rule exempts one): a pin into a denied range that no
 * allow_ranges entry holds makes every request for the name
 * private_address. Warned with the pin's line, the address and the range
 * (the default set's, the operator's, the IPv4 one an IPv6 address
 * embeds); quiet when allow_ranges holds the address or nothing denies it. */
static void test_pin_into_denied_range(void **state)
{
    (void)state;
#define REFUSED                                                                                    \
    "and no allow_ranges entry holds: every request for it is refused as private_address; list "   \
    "the address in network.allow_ranges, or pin the name elsewhere"
    expect_warning(V R "dns:\n  static:\n    api.example.test: 10.1.2.3\n",
                   "p.yaml:7: dns.static.api.example.test: api.example.test is pinned to "
                   "10.1.2.3, which deny_ranges deny (10.0.0.0/8, rfc1918) " REFUSED);
    expect_warning(V R "dns: {static: {md.example.test: 169.254.169.254}}\n",
                   "p.yaml:5: dns.static.md.example.test: md.example.test is pinned to "
                   "169.254.169.254, which deny_ranges deny (169.254.0.0/16, link-local) " REFUSED);
    expect_warning(V R "dns: {static: {Six.Example.Test.: \"2002:a01:203::\"}}\n",
                   "p.yaml:5: dns.static.six.example.test: six.example.test is pinned to "
                   "2002:a01:203::, which deny_ranges deny (10.0.0.0/8, 6to4 of rfc1918) " REFUSED);
    /* an allow range elsewhere leaves it denied; the operator's own range */
    expect_warning(V R "network: {deny_ranges: [default, 93.184.216.0/24], "
                       "allow_ranges: [10.0.0.0/8]}\n"
                       "dns: {static: {www.example.test: 93.184.216.34}}\n",
                   "p.yaml:6: dns.static.www.example.test: www.example.test is pinned to "
                   "93.184.216.34, which deny_ranges deny (93.184.216.0/24, "
                   "network.deny_ranges[0]) " REFUSED);
    /* --strict fails on it: a warning like the others, one per pin */
    struct diag d;
    struct policy *p = load(V R "dns: {static: {a.example.test: 127.0.0.2, "
                                "b.example.test: \"fd00::1\", c.example.test: 8.8.8.8}}\n",
                            &d);
    assert_non_null(p);
    assert_int_equal(d.warnings, 2);
    assert_true(diag_fails_strict(&d));
    diag_free(&d);
    policy_free(p);
    /* allowed, public, or nothing denied: quiet */
    p = expect_clean(V R "network: {allow_ranges: [10.1.0.0/16, \"fd00::/8\"]}\n"
                         "dns: {static: {a.example.test: 10.1.2.3, b.example.test: \"fd00::1\", "
                         "c.example.test: 8.8.8.8, d.example.test: \"2606:4700::1111\"}}\n");
    policy_free(p);
    p = load(V R "network: {deny_ranges: []}\ndns: {static: {a.example.test: 127.0.0.2}}\n", &d);
    assert_non_null(p);
    assert_int_equal(d.warnings, 1); /* deny_ranges without "default", not the pin */
    assert_int_equal(strncmp(d.entries[0].field, "network.deny_ranges", 19), 0);
    diag_free(&d);
    policy_free(p);
#undef REFUSED
}

static void test_longest_period(void **state)
{
    (void)state;
    struct policy *p = expect_clean(V R "alerts:\n  baseline: {factor: 2, learn: 87600h}\n"
                                        "  write_burst: {max: 1, per: 5256000m}\n"
                                        "  denied_burst: {max: 1, per: 315360000s}\n");
    assert_int_equal(p->alerts.baseline.learn_ms, 87600ull * 3600 * 1000);
    assert_int_equal(p->alerts.write_burst.per_ms, 87600ull * 3600 * 1000);
    assert_int_equal(p->alerts.denied_burst.per_ms, 87600ull * 3600 * 1000);
    policy_free(p);
}

/* SPEC, Defaults: "`per` defaults to 1s", for the alert thresholds as for
 * a rate: a threshold without it counted over a minute, sixty times the
 * window the policy's reader was promised (and the quarantine that
 * denied_burst trips came sixty times as easily). */
static void test_thresholds_per_defaults_to_1s(void **state)
{
    (void)state;
    struct policy *p =
        expect_clean(V R "alerts:\n  write_burst: {max: 2}\n  upload_bytes: {max: 1KiB}\n"
                         "  denied_burst: {max: 3}\n  auth_failures: {max: 4}\n");
    assert_int_equal(p->alerts.write_burst.per_ms, 1000);
    assert_int_equal(p->alerts.upload_bytes.per_ms, 1000);
    assert_int_equal(p->alerts.denied_burst.per_ms, 1000);
    assert_int_equal(p->alerts.auth_failures.per_ms, 1000);
    policy_free(p);
}

static void test_network_and_days(void **state)
{
    (void)state;
    struct policy *p =
        expect_clean(V R "network:\n  deny_ranges: [10.0.0.0/8, default, fd00::/8]\n");
    assert_true(p->network.default_deny_ranges);
    assert_int_equal(p->network.ndeny_ranges, 2);
    assert_false(p->network.allow_encrypted_hello); /* refused unless allowed */
    policy_free(p);
    expect_warning(V R "network: {encrypted_client_hello: allow}\n",
                   "p.yaml:5: network.encrypted_client_hello: a ClientHello that carries an "
                   "encrypted one (Encrypted Client Hello) is let through: its server_name is "
                   "an outer name, so on a shared front (a CDN) an agent reaches any site "
                   "behind an allowed name; it holds for every agent of the policy: allow it "
                   "only when all of them are trusted (or for one agent, in its own entry), or "
                   "turn ECH off in the clients");
    expect_warning(V "agents:\n  - {id: a, sources: [unix], encrypted_client_hello: allow}\n" R,
                   "p.yaml:3: agents[0].encrypted_client_hello: a ClientHello that carries an "
                   "encrypted one (Encrypted Client Hello) is let through: its server_name is "
                   "an outer name, so on a shared front (a CDN) this agent reaches any site "
                   "behind a name it is allowed");
    struct diag d;
    p = load(V R "network: {encrypted_client_hello: allow}\n", &d);
    assert_non_null(p);
    assert_true(p->network.allow_encrypted_hello);
    diag_free(&d);
    policy_free(p);
    p = expect_clean(V R "network: {encrypted_client_hello: refuse}\n");
    assert_false(p->network.allow_encrypted_hello);
    policy_free(p);
    /* A list without "default" loads, with a warning that says what it
     * leaves open. */
#define OPEN_RANGES                                                                                \
    "network.deny_ranges: deny_ranges does not include \"default\": loopback, RFC 1918, "          \
    "link-local (169.254.169.254, cloud metadata) and the other default ranges are not denied "    \
    "unless listed; add \"default\" to the list to keep them"
    expect_warning(V R "network: {deny_ranges: [], allow_ranges: []}\n", "p.yaml:5: " OPEN_RANGES);
    expect_warning(V R "network:\n  deny_ranges: [10.0.0.0/8]\n", "p.yaml:6: " OPEN_RANGES);
    /* An IPv6 prefix that holds ::ffff:0:0/96 covers all of IPv4 too:
     * warned wherever a CIDR is read; narrower ones, IPv4 ones and the
     * mapped range written as such are not. */
#define ALL_V4(s)                                                                                  \
    "'" s "' also covers every IPv4 address (IPv4 is matched as ::ffff:0:0/96); list IPv4 "        \
    "ranges on their own, or use a narrower IPv6 prefix such as 2000::/3"
    expect_warning(V R "network: {deny_ranges: default, allow_ranges: [\"::/0\"]}\n",
                   "p.yaml:5: network.allow_ranges[0]: " ALL_V4("::/0"));
    expect_warning(V "rules:\n  - {cidr: \"::/1\", tier: 0}\n",
                   "p.yaml:3: rules[0].cidr: " ALL_V4("::/1"));
    expect_warning(V "agents:\n  - {id: a, sources: [\"0::/64\"]}\n" R,
                   "p.yaml:3: agents[0].sources[0]: " ALL_V4("0::/64"));
    p = expect_clean(V R "network: {deny_ranges: default, allow_ranges: [\"2000::/3\", "
                         "\"::/96\", 10.0.0.0/8, 127.0.0.0/8, 169.254.0.0/24]}\n");
    policy_free(p);
    /* allow_ranges that hold 169.254.169.254 open the cloud metadata
     * address: warned, once (an IPv6 prefix over all of IPv4 has its own). */
#define METADATA(s)                                                                                \
    "'" s "' exempts 169.254.169.254, the cloud metadata address (the host's credentials), from "  \
    "deny_ranges; list a narrower range"
    expect_warning(V R "network: {allow_ranges: [10.0.0.0/8, 0.0.0.0/0]}\n",
                   "p.yaml:5: network.allow_ranges[1]: " METADATA("0.0.0.0/0"));
    expect_warning(V R "network: {allow_ranges: [169.254.0.0/16]}\n",
                   "p.yaml:5: network.allow_ranges[0]: " METADATA("169.254.0.0/16"));
    expect_warning(V R "network: {allow_ranges: [\"::ffff:0:0/96\"]}\n",
                   "p.yaml:5: network.allow_ranges[0]: " METADATA("::ffff:0:0/96"));
    /* So do those that hold an IPv6 address a translator connects to
     * 169.254.169.254 (NAT64, local-use NAT64 at any of its positions,
     * SIIT), which the guard denies as the metadata address: exempted, it
     * is reached through the translator. Tunnels (6to4, Teredo, the
     * v4-compatible form) only wrap packets for it, and a range of NAT64
     * that leaves it out is quiet. */
#define TRANSLATED(s, a)                                                                           \
    "'" s "' holds " a ", which a NAT64 or SIIT translator connects to 169.254.169.254, the "      \
    "cloud metadata address (the host's credentials): it exempts that from deny_ranges; list a "   \
    "narrower range"
    expect_warning(
        V R "network: {allow_ranges: [\"64:ff9b::/96\"]}\n",
        "p.yaml:5: network.allow_ranges[0]: " TRANSLATED("64:ff9b::/96", "64:ff9b::a9fe:a9fe"));
    expect_warning(V R "network: {allow_ranges: [10.0.0.0/8, \"64:ff9b::a9fe:0/112\"]}\n",
                   "p.yaml:5: network.allow_ranges[1]: " TRANSLATED("64:ff9b::a9fe:0/112",
                                                                    "64:ff9b::a9fe:a9fe"));
    expect_warning(
        V R "network: {allow_ranges: [\"64:ff9b:1::/48\"]}\n",
        "p.yaml:5: network.allow_ranges[0]: " TRANSLATED("64:ff9b:1::/48", "64:ff9b:1::a9fe:a9fe"));
    expect_warning(V R "network: {allow_ranges: [\"64:ff9b:1:a9:fe:a9fe::/128\"]}\n",
                   "p.yaml:5: network.allow_ranges[0]: " TRANSLATED("64:ff9b:1:a9:fe:a9fe::/128",
                                                                    "64:ff9b:1:a9:fe:a9fe::"));
    expect_warning(
        V R "network: {allow_ranges: [\"::ffff:0:0:0/96\"]}\n",
        "p.yaml:5: network.allow_ranges[0]: " TRANSLATED("::ffff:0:0:0/96", "::ffff:0:a9fe:a9fe"));
    p = expect_clean(V R "network: {allow_ranges: [\"64:ff9b::a00:0/104\", \"2002::/16\", "
                         "\"2001::/32\", \"::a9fe:a9fe/128\"]}\n");
    policy_free(p);
    p = load(V R "network: {allow_ranges: [\"::/0\"]}\n", &d);
    assert_non_null(p);
    assert_int_equal(d.warnings, 1);
    diag_free(&d);
    policy_free(p);
#undef TRANSLATED

    p = expect_clean(V R "alerts: {off_hours: {hours: \"00:00-24:00\", days: \"Mon,Wed,Fri\"}}\n");
    assert_int_equal(p->alerts.off_hours.days_mask, 0x15);
    assert_int_equal(p->alerts.off_hours.end_min, 24 * 60);
    policy_free(p);
    p = expect_clean(V R "alerts: {off_hours: {hours: \"09:30-17:45\", days: [Sat, Sun]}}\n");
    assert_int_equal(p->alerts.off_hours.days_mask, 0x60);
    assert_int_equal(p->alerts.off_hours.start_min, 9 * 60 + 30);
    policy_free(p);
    p = expect_clean(V R "alerts: {off_hours: {hours: \"09:00-17:00\", days: \"Sat-Mon, Wed\"}}\n");
    assert_int_equal(p->alerts.off_hours.days_mask, 0x65);
    policy_free(p);
}

static void test_quoted_scalars_stay_strings(void **state)
{
    (void)state;
    struct policy *p = expect_clean(V "rules:\n  - host: a.example.test\n    tier: 3\n    owner: "
                                      "\"null\"\n    expires: \"2027-01-01\"\n");
    assert_string_equal(p->rules[0].owner, "null");
    policy_free(p);
    p = expect_clean(V "rules:\n  - {host: a.example.test, tier: 3, owner: !!str true, "
                       "expires: 2027-01-01}\n");
    assert_string_equal(p->rules[0].owner, "true");
    policy_free(p);
    expect_error(V "rules:\n  - host: a.example.test\n    tier: 3\n    owner: null\n    expires: "
                   "2027-01-01\n",
                 "p.yaml:5: rules[0].owner: must name a person, not be blank");
}

/* A plain owner that YAML reads as a boolean (1.2's true and false, 1.1's
 * yes, no, on, off, y, n) names no one: "owner: no" signed a tier-3 grant.
 * Quoted, or tagged !!str, it is a name like any other. */
static void test_owner_boolean_refused(void **state)
{
    (void)state;
    static const struct {
        const char *word, *means;
    } words[] = {{"no", "false"}, {"false", "false"}, {"Off", "false"}, {"N", "false"},
                 {"yes", "true"}, {"TRUE", "true"},   {"on", "true"},   {"y", "true"}};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        char yaml[256], want[256];
        snprintf(yaml, sizeof(yaml),
                 V "rules:\n  - host: a.example.test\n    methods: [POST]\n    tier: 3\n"
                   "    owner: %s\n    expires: 2027-01-01\n",
                 words[i].word);
        snprintf(want, sizeof(want),
                 "p.yaml:6: rules[0].owner: '%s' is YAML's boolean %s, not a person's name: name "
                 "the person who signs for the rule (in quotes, if that is what they are called)",
                 words[i].word, words[i].means);
        expect_error(yaml, want);
    }
    struct policy *p = expect_clean(V "rules:\n  - {host: a.example.test, tier: 0, owner: \"no\"}\n"
                                      "  - {host: b.example.test, tier: 0, owner: !!str off}\n"
                                      "  - {host: c.example.test, tier: 0, owner: nobody}\n");
    assert_string_equal(p->rules[0].owner, "no");
    assert_string_equal(p->rules[1].owner, "off");
    assert_string_equal(p->rules[2].owner, "nobody");
    policy_free(p);
}

/* A plain owner that YAML reads as a number (YAML 1.2's core schema or
 * YAML 1.1's: 0x1F, 1e3, .nan, 12:30, 1_000) names no one, and YAML tools
 * read it as another value (31, 1000.0, NaN, 750): refused as a boolean
 * is. Quoted, or tagged !!str, it is a name like any other, and so is a
 * word that only looks like a number. */
static void test_owner_number_refused(void **state)
{
    (void)state;
    static const char *const numbers[] = {
        "0x1F",  "1e3", ".nan",  ".NaN",  "-.Inf", "+.inf", "12345", "-12", "1_000",  "0o17",
        "0b101", "017", "12:30", "1:2:3", "3.14",  ".5",    "1.",    "+7",  "1.5e+3", "2E-4"};
    for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
        char yaml[256], want[256];
        snprintf(yaml, sizeof(yaml),
                 V "rules:\n  - host: a.example.test\n    methods: [POST]\n    tier: 3\n"
                   "    owner: %s\n    expires: 2027-01-01\n",
                 numbers[i]);
        snprintf(want, sizeof(want),
                 "p.yaml:6: rules[0].owner: '%s' is a number to YAML, not a person's name: name "
                 "the person who signs for the rule (in quotes, if that is what they are called)",
                 numbers[i]);
        expect_error(yaml, want);
    }
    struct policy *p =
        expect_clean(V "rules:\n  - {host: a.example.test, tier: 0, owner: \"0x1F\"}\n"
                       "  - {host: b.example.test, tier: 0, owner: !!str 1e3}\n"
                       "  - {host: c.example.test, tier: 0, owner: 1.2.3}\n"
                       "  - {host: d.example.test, tier: 0, owner: nan}\n"
                       "  - {host: e.example.test, tier: 0, owner: 0x}\n"
                       "  - {host: f.example.test, tier: 0, owner: 7of9}\n"
                       "  - {host: g.example.test, tier: 0, owner: e3}\n"
                       "  - {host: h.example.test, tier: 0, owner: \"-\"}\n");
    assert_string_equal(p->rules[0].owner, "0x1F");
    assert_string_equal(p->rules[1].owner, "1e3");
    assert_string_equal(p->rules[2].owner, "1.2.3");
    assert_string_equal(p->rules[5].owner, "7of9");
    policy_free(p);
}

/* A name the policy gives (a host, a deny entry, an agent id, a rule's
 * agent, a dns.static name) written as a plain word YAML reads as a
 * boolean or a null is refused at its line: "host: no" loaded as a host
 * called "no", which no one meant and PyYAML reads as False. Quoted, or
 * tagged !!str, it is the name. A field of fixed values keeps its own
 * message, which names them. */
static void test_yaml_words_are_not_names(void **state)
{
    (void)state;
#define NOT_A_NAME(line, field, word, means)                                                       \
    "p.yaml:" #line ": " field ": '" word "' is YAML's boolean " means                             \
    ", not a string: write it in quotes (\"" word "\") if that is what you mean"
    static const struct error_case cases[] = {
        {V "rules:\n  - {host: no, tier: 0}\n", NOT_A_NAME(3, "rules[0].host", "no", "false")},
        {V "rules:\n  - {host: yes, tier: 0}\n", NOT_A_NAME(3, "rules[0].host", "yes", "true")},
        {V "rules:\n  - {host: On, tier: 0}\n", NOT_A_NAME(3, "rules[0].host", "On", "true")},
        {V "rules:\n  - {host: OFF, tier: 0}\n", NOT_A_NAME(3, "rules[0].host", "OFF", "false")},
        {V "rules:\n  - {host: n, tier: 0}\n", NOT_A_NAME(3, "rules[0].host", "n", "false")},
        {V "rules:\n  - {host: ~, tier: 0}\n",
         "p.yaml:3: rules[0].host: expected a string, not YAML's null '~'"},
        {V "rules:\n  - {host: null, tier: 0}\n",
         "p.yaml:3: rules[0].host: expected a string, not YAML's null 'null'"},
        {V R "deny: [gist.example.test, no]\n", NOT_A_NAME(5, "deny[1]", "no", "false")},
        {V "agents:\n  - {id: on, sources: [unix]}\n", NOT_A_NAME(3, "agents[0].id", "on", "true")},
        {V "agents:\n  - {id: ci, sources: [unix]}\n"
           "rules:\n  - {host: a.example.test, tier: 0, agents: [ci, off]}\n",
         NOT_A_NAME(5, "rules[0].agents[1]", "off", "false")},
        {V R "dns: {static: {yes: 127.0.0.2}}\n", NOT_A_NAME(5, "dns.static.yes", "yes", "true")},
        {V R "dns: {static: {null: 127.0.0.2}}\n",
         "p.yaml:5: dns.static.null: expected a string, not YAML's null 'null'"},
        /* fixed values name themselves */
        {V "agents:\n  - {id: ci, sources: [unix], mode: on}\n",
         "p.yaml:3: agents[0].mode: unknown mode 'on' (expected enforce or report)"},
        {V R "network: {encrypted_client_hello: no}\n",
         "p.yaml:5: network.encrypted_client_hello: unknown value 'no' (expected refuse or "
         "allow)"},
    };
#undef NOT_A_NAME
    RUN(cases);
    struct policy *p = expect_clean(V "agents:\n  - {id: \"on\", sources: [unix]}\n"
                                      "rules:\n  - {host: \"no\", tier: 0, agents: [\"on\"]}\n"
                                      "  - {host: !!str yes, tier: 0}\n"
                                      "deny: [\"off\"]\n"
                                      "dns: {static: {\"null\": 203.0.114.1}}\n");
    assert_string_equal(p->agents[0].id, "on");
    assert_int_equal(p->nrules, 2);
    assert_int_equal(p->ndeny, 1);
    policy_free(p);
}

/* An owner with blanks around it (" alice ") is refused, not trimmed:
 * kept, it is another owner than "alice" to a search of the log or a
 * metric's label, and the report shows no difference. Blanks inside a
 * name, and a joiner an Indic name ends with, are a name's. */
/* A URL or a name with its port where a host pattern goes (a rule's host,
 * a deny entry) is refused naming the file, line and field, and saying
 * what it is, not "invalid IP literal". */
static void test_host_with_port_or_url(void **state)
{
    (void)state;
    static const struct error_case cases[] = {
        {V "rules:\n  - host: api.github.com:443\n    tier: 0\n",
         "p.yaml:3: rules[0].host: invalid host pattern 'api.github.com:443': a host pattern "
         "holds no port: write the name alone (a rule's ports go in ports:, and deny covers "
         "every port)"},
        {V R "deny: [\"gist.github.com:443\"]\n",
         "p.yaml:5: deny[0]: invalid host pattern 'gist.github.com:443': a host pattern holds no "
         "port: write the name alone (a rule's ports go in ports:, and deny covers every port)"},
        {V "rules:\n  - host: https://api.github.com/repos\n    tier: 0\n",
         "p.yaml:3: rules[0].host: invalid host pattern 'https://api.github.com/repos': a host "
         "pattern is a name, not a URL: write the name alone, without scheme, port or path"},
        /* brackets hold an IPv6 literal only, and a port goes nowhere */
        {V "rules:\n  - host: \"[api.github.com]:443\"\n    tier: 0\n",
         "p.yaml:3: rules[0].host: invalid host pattern '[api.github.com]:443': brackets hold an "
         "IPv6 literal only, and a host pattern holds no port: write the name alone"},
        {V R "deny: [\"[gist.github.com]\"]\n",
         "p.yaml:5: deny[0]: invalid host pattern '[gist.github.com]': brackets hold an IPv6 "
         "literal only, and a host pattern holds no port: write the name alone"},
        {V "rules:\n  - host: \"[::1]:443\"\n    tier: 0\n",
         "p.yaml:3: rules[0].host: invalid host pattern '[::1]:443': a host pattern holds no "
         "port: write the name alone (a rule's ports go in ports:, and deny covers every port)"},
        {V R "dns: {static: {\"[api.example.test]\": 127.0.0.2}}\n",
         "p.yaml:5: dns.static.[api.example.test]: invalid name '[api.example.test]': brackets "
         "hold an IPv6 literal only, and a dns.static name holds no port: write the name alone"},
        /* a dns.static name is told the same way (host_name_extra()) */
        {V R "dns: {static: {\"api.example.test:443\": 127.0.0.2}}\n",
         "p.yaml:5: dns.static.api.example.test:443: invalid name 'api.example.test:443': a "
         "dns.static name holds no port: write the name alone (its address serves every port)"},
        {V R "dns: {static: {\"https://api.example.test\": 127.0.0.2}}\n",
         "p.yaml:5: dns.static.https://api.example.test: invalid name 'https://api.example.test': "
         "a dns.static name is a name, not a URL: write the name alone, without scheme, port or "
         "path"},
    };
    RUN(cases);
}

static void test_owner_blank_edges_refused(void **state)
{
    (void)state;
#define EDGE(owner, shown)                                                                         \
    {                                                                                              \
        V "rules:\n  - {host: a.example.test, tier: 3, expires: 2027-01-01,\n     owner: " owner   \
          "}\n",                                                                                   \
            "p.yaml:4: rules[0].owner: '" shown                                                    \
            "' starts or ends with a blank: write the person's "                                   \
            "name without blanks around it"                                                        \
    }
    static const struct error_case cases[] = {
        EDGE("\" alice \"", " alice "),
        EDGE("\"alice \"", "alice "),
        EDGE("\" alice\"", " alice"),
        EDGE("\"\\_alice\"", "??alice"),      /* U+00A0, a no-break space */
        EDGE("\"alice\\u3000\"", "alice???"), /* U+3000, an ideographic space */
        EDGE("\"alice\\u2003\"", "alice???"), /* U+2003, an em space */
    };
#undef EDGE
    RUN(cases);
    struct policy *p =
        expect_clean(V "rules:\n  - {host: a.example.test, tier: 0, owner: \"Alice Smith\"}\n"
                       "  - {host: b.example.test, tier: 0, owner: \"\\u0d23\\u0d4d\\u200d\"}\n");
    assert_string_equal(p->rules[0].owner, "Alice Smith");
    assert_string_equal(p->rules[1].owner, "\xe0\xb4\xa3\xe0\xb5\x8d\xe2\x80\x8d");
    policy_free(p);
}

/* An owner that holds '/' names a team, not a person: GitHub's
 * "@org/team", a GitLab group "org/team". A warning, not an error: the
 * contract only requires someone to be named. A user handle ("@chaysen")
 * and a name with other marks ("O'Brien", "Anne-Marie") are a person's. */
static void test_owner_team_warned(void **state)
{
    (void)state;
#define TEAM(owner)                                                                                \
    V "rules:\n  - {host: a.example.test, tier: 3, expires: 2027-01-01,\n     owner: \"" owner     \
      "\"}\n",                                                                                     \
        "p.yaml:4: rules[0].owner: '" owner "' names a team or a group (it holds '/', as "         \
        "GitHub's @org/team does), not a person: name the person who signs for the rule"
    expect_warning(TEAM("@acme/platform"));
    expect_warning(TEAM("acme/platform"));
    expect_warning(TEAM("@acme/"));
#undef TEAM
    struct policy *p =
        expect_clean(V "rules:\n  - {host: a.example.test, tier: 0, owner: \"@chaysen\"}\n"
                       "  - {host: b.example.test, tier: 0, owner: \"O'Brien\"}\n"
                       "  - {host: c.example.test, tier: 0, owner: \"Anne-Marie Dupont\"}\n");
    assert_string_equal(p->rules[0].owner, "@chaysen");
    policy_free(p);
    /* the warning keeps the rule: a team still names someone to ask */
    struct diag d;
    p = load(V "rules:\n  - {host: a.example.test, tier: 0, owner: \"@acme/platform\"}\n", &d);
    assert_non_null(p);
    assert_string_equal(p->rules[0].owner, "@acme/platform");
    policy_free(p);
    diag_free(&d);
}

static void test_rule_agents_sorted(void **state)
{
    (void)state;
    struct policy *p =
        expect_clean(V "agents:\n  - {id: b, sources: [unix]}\n  - {id: a, sources: [10.0.0.0/8]}\n"
                       "rules:\n  - {host: a.example.test, tier: 0, agents: [b, a]}\n"
                       "  - {host: a.example.test, tier: 0, agents: [b]}\n"
                       "  - {host: a.example.test, tier: 0, methods: [GET]}\n"
                       "  - {host: a.example.test, tier: 0, ports: [8080]}\n"
                       "  - {host: \"*.a.example.test\", tier: 0}\n");
    assert_int_equal(p->rules[0].nagents, 2);
    assert_string_equal(p->rules[0].agents[0], "a");
    assert_string_equal(p->rules[0].agents[1], "b");
    policy_free(p);
}

/* Makes the temporary folder <dir> (a mkdtemp() template, changed in
 * place) and in it <path> (<len> bytes), dir/policy.yaml holding <text>. */
static void write_policy_file(char *dir, char *path, size_t len, const char *text)
{
    assert_non_null(mkdtemp(dir));
    snprintf(path, len, "%s/policy.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_load.XXXXXX";
    char path[256], missing[256];
    write_policy_file(dir, path, sizeof(path), V R);
    snprintf(missing, sizeof(missing), "%s/none.yaml", dir);

    struct diag d;
    diag_init(&d, path);
    struct policy *p = policy_load(path, &d);
    assert_non_null(p);
    assert_string_equal(p->path, path);
    assert_int_equal(p->nrules, 1);
    policy_free(p);
    diag_free(&d);

    char want[600];
    diag_init(&d, missing);
    assert_null(policy_load(missing, &d));
    snprintf(want, sizeof(want), "%s: cannot read %s: No such file or directory", missing, missing);
    assert_true(has_entry(&d, DIAG_ERROR, want));
    assert_int_equal(d.entries[0].line, 0);
    diag_free(&d);

    diag_init(&d, dir);
    assert_null(policy_load(dir, &d));
    snprintf(want, sizeof(want), "%s: cannot read %s: Is a directory", dir, dir);
    assert_true(has_entry(&d, DIAG_ERROR, want));
    diag_free(&d);

    /* a diag without a file name takes the policy's */
    d = (struct diag){0};
    assert_null(policy_load_buffer("x.yaml", "version: 2\n", 11, &d));
    assert_true(has_entry(
        &d, DIAG_ERROR, "x.yaml:1: version: unsupported version 2 (this sluice reads version 1)"));
    diag_free(&d);

    unlink(path);
    rmdir(dir);
}

/* read() is interposed for this program: when <grow_path> is set, the first
 * read() that returns bytes then appends <grow_text> to that file, as a
 * writer still at work on the policy while the loader reads it. */
static const char *grow_path;
static const char *grow_text;
/* ... and when <rename_from> is set, that first read() renames it over
 * <rename_to>, as "mv new.yaml policy.yaml" while the loader reads. */
static const char *rename_from;
static const char *rename_to;
/* ... when <link_from> is set, makes <link_to> a hard link to it, as a
 * backup an editor or a tool makes while the loader reads (and, with
 * <link_moves>, unlinks <link_from>: a rename of it elsewhere) ... */
static const char *link_from;
static const char *link_to;
static bool link_moves;
/* ... and when <rewrite_path> is set, writes <rewrite_text> over its first
 * bytes in place, then puts its modification time back (cp -p, touch -d). */
static const char *rewrite_path;
static const char *rewrite_text;
/* every byte read() returned in this program */
static size_t read_bytes;

/* Makes sure the change time of the file <path> moved from <before>'s: a
 * change within the clock tick of the last one leaves it where it was on
 * a file system with coarse timestamps, so the mode is set again, as it
 * is, until it has moved (waited on, for 2 s at most). The clock is read
 * before each chmod, and the wait given up only after a chmod made once
 * the 2 s were over: a program held back past them (a loaded machine)
 * before it set the mode at all gave up with the time unmoved. */
static void ctime_moved_from(const char *path, const struct stat *before)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    struct stat st;
    while (stat(path, &st) == 0 && st.st_ctim.tv_sec == before->st_ctim.tv_sec &&
           st.st_ctim.tv_nsec == before->st_ctim.tv_nsec) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        bool over = now.tv_sec - start.tv_sec > 2;
        if (chmod(path, st.st_mode & 07777) != 0 || over)
            return;
    }
}

/* Writes <text> over the start of the file <path> in place, its
 * modification time put back to what it was. */
static void rewrite_keeping_mtime(const char *path, const char *text)
{
    int w = open(path, O_WRONLY | O_CLOEXEC);
    struct stat st;
    if (w < 0)
        return;
    if (fstat(w, &st) == 0 && pwrite(w, text, strlen(text), 0) == (ssize_t)strlen(text)) {
        struct timespec times[2] = {st.st_atim, st.st_mtim};
        int put = futimens(w, times);
        (void)put;
    }
    close(w);
}

ssize_t read(int fd, void *buf, size_t n)
{
    ssize_t (*real)(int, void *, size_t) =
        (ssize_t(*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
    ssize_t r = real(fd, buf, n);
    if (r > 0)
        read_bytes += (size_t)r;
    if (rename_from != NULL && r > 0) {
        int renamed = rename(rename_from, rename_to);
        (void)renamed;
        rename_from = NULL;
    }
    struct stat was;
    if (link_from != NULL && r > 0 && stat(link_from, &was) == 0) {
        int linked = link(link_from, link_to);
        if (linked == 0 && link_moves)
            linked = unlink(link_from);
        (void)linked;
        ctime_moved_from(link_to, &was);
        link_from = NULL;
    }
    if (rewrite_path != NULL && r > 0 && stat(rewrite_path, &was) == 0) {
        rewrite_keeping_mtime(rewrite_path, rewrite_text);
        ctime_moved_from(rewrite_path, &was);
        rewrite_path = NULL;
    }
    if (grow_path != NULL && r > 0) {
        int w = open(grow_path, O_WRONLY | O_APPEND | O_CLOEXEC);
        if (w >= 0) {
            ssize_t put = write(w, grow_text, strlen(grow_text));
            (void)put;
            close(w);
        }
        grow_path = NULL;
    }
    return r;
}

/* Asserts that the policy at <path> (<what> happening to it) fails to load
 * with "cannot read PATH: <why> (is it still being written?); ...". */
static void refused_while_written(const char *path, const char *what, const char *why)
{
    struct diag d;
    diag_init(&d, path);
    struct policy *p = policy_load(path, &d);
    if (p != NULL) {
        char title[256];
        snprintf(title, sizeof(title), "(the file above, %s)", what);
        dump(title, &d);
    }
    assert_null(p);
    char want[1024];
    snprintf(want, sizeof(want),
             "%s: cannot read %s: %s (is it still being written?); write the new policy to "
             "another file in its folder and rename it over %s",
             path, path, why, path);
    assert_true(has_entry(&d, DIAG_ERROR, want));
    diag_free(&d);
}

/* A policy written while it is read is not loaded as far as it was read:
 * its first part, the rules without the deny list that follows them, is a
 * valid policy that allows what the whole file denies. */
static void test_file_changed_while_read(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_load.XXXXXX";
    char path[256];
    write_policy_file(dir, path, sizeof(path),
                      V "rules:\n  - {host: \"*.example.test\", tier: 0}\n");

    grow_path = path;
    grow_text = "deny:\n  - gist.example.test\n";
    refused_while_written(path, "its deny list written while it was read",
                          "it changed while it was read");
    grow_path = NULL;

    /* once written, it loads whole */
    struct diag d;
    diag_init(&d, path);
    struct policy *p = policy_load(path, &d);
    assert_non_null(p);
    assert_int_equal(p->ndeny, 1);
    policy_free(p);
    diag_free(&d);

    /* written over in place, its size and modification time put back as
     * they were (cp -p, touch -d): its change time alone moves, and its
     * bytes, read again, differ from those read */
    rewrite_path = path;
    rewrite_text = "# a comment!";
    refused_while_written(path, "written over in place, its modification time put back",
                          "it changed while it was read");
    rewrite_path = NULL;

    unlink(path);
    rmdir(dir);
}

/* A policy renamed over while the old one is read (mv, as the README
 * asks) is read whole, old or new: the old file's change time moves as it
 * loses its name, its content does not. Before, that was "it changed while
 * it was read", a reload refused for doing what the README says. So is one
 * that gains or loses a name otherwise. */
static void test_file_renamed_over_while_read(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_load.XXXXXX";
    char path[256], next[300];
    write_policy_file(dir, path, sizeof(path),
                      V "rules:\n  - {host: \"*.example.test\", tier: 0}\n");
    snprintf(next, sizeof(next), "%s.new", path);
    FILE *f = fopen(next, "w");
    assert_non_null(f);
    fputs(V "rules:\n  - {host: a.example.test, tier: 0}\n  - {host: b.example.test, tier: "
            "0}\n",
          f);
    fclose(f);

    struct diag d;
    diag_init(&d, path);
    rename_from = next;
    rename_to = path;
    struct policy *p = policy_load(path, &d);
    rename_from = NULL;
    if (p == NULL)
        dump("(the file above, renamed over while it was read)", &d);
    assert_non_null(p);
    assert_int_equal(p->nrules, 1); /* the old one, whole */
    policy_free(p);
    diag_free(&d);

    diag_init(&d, path);
    p = policy_load(path, &d);
    assert_non_null(p);
    assert_int_equal(p->nrules, 2); /* the new one */
    policy_free(p);
    diag_free(&d);

    /* A hard link made to it while it is read, or a rename of it
     * elsewhere (an editor's backup): it is read whole too, its change
     * time moved, its bytes not. Before, both were "it changed while it
     * was read" (the link count grew, or stayed). */
    for (int moves = 0; moves < 2; moves++) {
        diag_init(&d, path);
        link_from = path;
        link_to = next;
        link_moves = moves;
        p = policy_load(path, &d);
        link_from = NULL;
        if (p == NULL)
            dump(moves ? "(the file above, renamed elsewhere while it was read)"
                       : "(the file above, linked while it was read)",
                 &d);
        assert_non_null(p);
        assert_int_equal(p->nrules, 2);
        policy_free(p);
        diag_free(&d);
        assert_int_equal(access(path, F_OK), moves ? -1 : 0);
        assert_int_equal(access(next, F_OK), 0); /* the link was made */
        if (!moves)
            assert_int_equal(unlink(next), 0);
    }
    unlink(next);
    rmdir(dir);
}

/* A policy another process (here, this one) keeps open for writing is not
 * read meanwhile: its load waits for the close, and fails once the wait
 * (SLUICE_TEST_POLICY_FIFO_WAIT_S, 1 s here) is over. The file is this
 * process's own, so the kernel can tell (a lease needs that, or
 * CAP_LEASE). */
static void test_file_open_for_writing(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_load.XXXXXX";
    char path[256];
    write_policy_file(dir, path, sizeof(path),
                      V "rules:\n  - {host: \"*.example.test\", tier: 0}\n");
    int w = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    assert_true(w >= 0);
    setenv("SLUICE_TEST_POLICY_FIFO_WAIT_S", "1", 1);

    refused_while_written(path, "open for writing while it was loaded",
                          "another process kept it open for writing for 1 s");

    /* closed, it loads */
    close(w);
    struct diag d;
    diag_init(&d, path);
    struct policy *p = policy_load(path, &d);
    assert_non_null(p);
    policy_free(p);
    diag_free(&d);
    unsetenv("SLUICE_TEST_POLICY_FIFO_WAIT_S");
    unlink(path);
    rmdir(dir);
}

/* ---- the YAML layer ------------------------------------------------------ */

static void test_yaml_errors(void **state)
{
    (void)state;
    static const struct error_case cases[] = {
        {"", "p.yaml: the policy is empty (expected a mapping with version: 1)"},
        {"# only a comment\n", "p.yaml: the policy is empty (expected a mapping with version: 1)"},
        {"---\n", "p.yaml: the policy is empty (expected a mapping with version: 1)"},
        {"- a\n- b\n", "p.yaml:1: expected a mapping"},
        {V "rules: [\n", "p.yaml:3: YAML syntax error: did not find expected node content"},
        /* at the end of a file without a final line end: its last line,
         * not the one after it that libyaml's mark is on */
        {V "rules: [", "p.yaml:2: YAML syntax error: did not find expected node content"},
        {V "t:e:\n(", "p.yaml:3: YAML syntax error: could not find expected ':'"},
        {V "x: {a: 1\r\n", "p.yaml:3: YAML syntax error: did not find expected ',' or '}'"},
        {V "a: b: c\n",
         "p.yaml:2: YAML syntax error: mapping values are not allowed in this context"},
        /* a byte that is not UTF-8 is named at its line, not line 1 */
        {V "rules: []\n# \xff\n", "p.yaml:3: YAML syntax error: invalid leading UTF-8 octet"},
        {"version: 1\r\nrules: []\r\n# \xc2\xa0\n# \xe2\x80\xa0\nx: [\"caf\xc3\"]\n",
         "p.yaml:5: YAML syntax error: invalid trailing UTF-8 octet"},
        /* line breaks that YAML knows and a reviewer's diff does not: the
         * rule after them would load unseen in a comment's line */
        {V "rules: []\n# note\xc2\x85x: 1\n",
         "p.yaml:3: a line break other than LF or CR LF: U+0085 (NEL), where YAML ends a line "
         "and git diff and most editors do not, so what sluice reads is not what a reviewer "
         "sees; end every line with LF"},
        {V "rules: []\r\n# note\xe2\x80\xa8x: 1\n",
         "p.yaml:3: a line break other than LF or CR LF: U+2028 (LINE SEPARATOR), where YAML "
         "ends a line and git diff and most editors do not, so what sluice reads is not what a "
         "reviewer sees; end every line with LF"},
        {V "# \xe2\x80\xa9\n",
         "p.yaml:2: a line break other than LF or CR LF: U+2029 (PARAGRAPH SEPARATOR), where "
         "YAML ends a line and git diff and most editors do not, so what sluice reads is not "
         "what a reviewer sees; end every line with LF"},
        {V "rules: []\r# x\r\n",
         "p.yaml:2: a line break other than LF or CR LF: a CR without an LF after it, where YAML "
         "ends a line and git diff and most editors do not, so what sluice reads is not what a "
         "reviewer sees; end every line with LF"},
        {V "x: 1\r",
         "p.yaml:2: a line break other than LF or CR LF: a CR without an LF after it, where YAML "
         "ends a line and git diff and most editors do not, so what sluice reads is not what a "
         "reviewer sees; end every line with LF"},
        /* UTF-16 shows as binary in a diff: its changes are never read */
        {"\xff\xfev\0", "p.yaml:1: the file is UTF-16 (it starts with a UTF-16 byte order mark): "
                        "git diff and code review show it as binary, so a change to it is "
                        "never read; write it in UTF-8"},
        {"\xfe\xff\0v", "p.yaml:1: the file is UTF-16 (it starts with a UTF-16 byte order mark): "
                        "git diff and code review show it as binary, so a change to it is "
                        "never read; write it in UTF-8"},
        {V "rules: []\ndeny: [\"caf\xc3\"]\n",
         "p.yaml:3: YAML syntax error: invalid trailing UTF-8 octet"},
        {V "x: \"\\0\"\n", "p.yaml:2: x: a string contains a NUL byte"},
        {V R "    owner: \"a\\0\"\n", "p.yaml:5: rules[0].owner: a string contains a NUL byte"},
        {V "rules: &r []\n", "p.yaml:2: rules: anchors and aliases are not supported"},
        {V "rules: *r\n", "p.yaml:2: rules: aliases are not supported"},
        {V "deny: [&x a.example.test]\n",
         "p.yaml:2: deny[0]: anchors and aliases are not supported"},
        {V "deny: [a.example.test, *x]\n", "p.yaml:2: deny[1]: aliases are not supported"},
        {V "&k deny: []\n", "p.yaml:2: deny: anchors and aliases are not supported"},
        {V "rules:\n  - {host: a.example.test, tier: 0}\n  - {host: !!binary YQ==, tier: 0}\n",
         "p.yaml:4: rules[1].host: YAML tags are not supported"},
        {V "rules:\n  - {host: a.example.test, tier: 0, ports: !!set {80}}\n",
         "p.yaml:3: rules[0].ports: YAML tags are not supported"},
        {V "\"x\\ty\": {\"\\e[31m\": [&a 1]}\n",
         "p.yaml:2: x?y.?[31m[0]: anchors and aliases are not supported"},
        {V "---\nversion: 1\n", "p.yaml:2: multiple documents are not supported"},
        {"version: !!int 1\n", "p.yaml:1: version: YAML tags are not supported"},
        {V "rules: !!seq []\n", "p.yaml:2: rules: YAML tags are not supported"},
        {V "x: [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]\n",
         "p.yaml:2: x[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]: nesting deeper than 16 levels"},
        {V "{a: 1}: 2\n", "p.yaml:2: expected a string key"},
        {V "version: 1\n", "p.yaml:2: version: duplicate key 'version' (first at line 1)"},
        {V "prots: 1\n", "p.yaml:2: unknown key 'prots' (expected one of version, agents, rules, "
                         "deny, network, dns, limits, alerts)"},
        {V "\"bad\\x01key\": 1\n", "p.yaml:2: unknown key 'bad?key' (expected one of version, "
                                   "agents, rules, deny, network, dns, limits, alerts)"},
        {"rules: []\n", "p.yaml:1: version: is required"},
        {"version: 2\n", "p.yaml:1: version: unsupported version 2 (this sluice reads version 1)"},
        {"version: 18446744073709551616\n", "p.yaml:1: version: unsupported version "
                                            "18446744073709551616 (this sluice reads version 1)"},
        {"version: \"1\"\n", "p.yaml:1: version: expected an integer, not a quoted string"},
        {"version: one\n", "p.yaml:1: version: expected an integer, got 'one'"},
        {"version: -1\n", "p.yaml:1: version: expected an integer, got '-1'"},
        {"version: 0x1\n", "p.yaml:1: version: expected an integer, got '0x1'"},
        {"version: 1.0\n", "p.yaml:1: version: expected an integer, got '1.0'"},
        {"version:\n", "p.yaml:1: version: expected an integer"},
        {"version: [1]\n", "p.yaml:1: version: expected an integer"},
        {"version: 99999999999999999999\n",
         "p.yaml:1: version: unsupported version 99999999999999999999 (this sluice reads version 1)"},
        {"version: 01\n",
         "p.yaml:1: version: '01' has a leading zero, which YAML 1.1 tools read as octal; write 1"},
        {V R "limits: {header_bytes: 040000}\n",
         "p.yaml:5: limits.header_bytes: '040000' has a leading zero, which YAML 1.1 tools read "
         "as octal; write 40000"},
        {V "rules:\n  - {host: a.example.test, tier: 0, ports: [443, 0443]}\n",
         "p.yaml:3: rules[0].ports[1]: '0443' has a leading zero, which YAML 1.1 tools read as "
         "octal; write 443"},
        {V "rules:\n  - {host: a.example.test, tier: 00}\n",
         "p.yaml:3: rules[0].tier: '00' has a leading zero, which YAML 1.1 tools read as octal; "
         "write 0"},
    };
    RUN(cases);
}

static void test_size_cap(void **state)
{
    (void)state;
    struct diag d;
    diag_init(&d, FILE_NAME);
    /* the cap is checked before a single byte is read */
    assert_null(policy_load_buffer(FILE_NAME, "", (size_t)POLICY_MAX_BYTES + 1, &d));
    assert_true(has_entry(&d, DIAG_ERROR,
                          "p.yaml: the policy is larger than 16 MiB (16777216 bytes), the most "
                          "sluice loads"));
    diag_free(&d);
}

/* Makes <path> a file of <size> bytes: a hole, so no disk and no memory. */
static void make_sparse(const char *path, off_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, size), 0);
    close(fd);
}

/* A policy file over the cap is refused by its size, before a byte of it
 * is read: loading costs up to some 25 times the file (a 60 MiB one, under the
 * former 64 MiB cap, took 0.75 to 2 GB). One at the cap is read. */
static void test_file_size_cap(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_load.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], want[600];
    snprintf(path, sizeof(path), "%s/big.yaml", dir);
    make_sparse(path, (off_t)POLICY_MAX_BYTES + 1);
    struct diag d;
    diag_init(&d, path);
    read_bytes = 0;
    assert_null(policy_load(path, &d));
    assert_int_equal(read_bytes, 0);
    snprintf(want, sizeof(want),
             "%s: the policy is 16777217 bytes, larger than 16 MiB (16777216 bytes), the most "
             "sluice loads",
             path);
    if (!has_entry(&d, DIAG_ERROR, want))
        dump("(a file of 16 MiB + 1 bytes)", &d);
    assert_true(has_entry(&d, DIAG_ERROR, want));
    assert_int_equal(d.count, 1);
    diag_free(&d);

    /* at the cap: read whole (its NUL bytes are then what YAML refuses) */
    make_sparse(path, (off_t)POLICY_MAX_BYTES);
    diag_init(&d, path);
    read_bytes = 0;
    assert_null(policy_load(path, &d));
    assert_int_equal(read_bytes, POLICY_MAX_BYTES);
    assert_false(has_entry(&d, DIAG_ERROR, want));
    diag_free(&d);
    unlink(path);
    rmdir(dir);
}

/* Every scalar is a YAML node: a file under the byte cap written to make
 * one node a byte (a flow mapping of keys without values, "a," a key and
 * its null value) is stopped at the node cap while the tree is built,
 * which bounds the tree at 128 MiB (it was 16 Mi nodes of 40 bytes). */
static void test_node_cap(void **state)
{
    (void)state;
    /* 4 Mi + 2 nodes in the mapping: one over the cap (written as a
     * number, not from YTREE_MAX_NODES: the figure is the contract) */
    size_t pairs = (1u << 21) + 1, cap = pairs * 2 + 64, o = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    o += (size_t)snprintf(buf, cap, "version: 1\nx: {");
    for (size_t i = 0; i < pairs; i++) {
        buf[o++] = 'a';
        buf[o++] = ',';
    }
    buf[o - 1] = '}';
    assert_true(o < POLICY_MAX_BYTES);
    struct diag d;
    diag_init(&d, FILE_NAME);
    assert_null(policy_load_buffer(FILE_NAME, buf, o, &d));
    if (!has_entry(&d, DIAG_ERROR, "p.yaml:2: too many YAML nodes (at most 4194304)"))
        dump("(x: {a,a,...} of 2 Mi + 1 keys)", &d);
    assert_true(has_entry(&d, DIAG_ERROR, "p.yaml:2: too many YAML nodes (at most 4194304)"));
    assert_int_equal(d.count, 1);
    diag_free(&d);
    free(buf);
}

static void test_depth_cap_exact(void **state)
{
    (void)state;
    /* root mapping (1) + 15 nested lists = 16 levels: accepted by the tree,
     * then refused by the schema as an unknown key */
    expect_error(V "x: [[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]\n",
                 "p.yaml:2: unknown key 'x' (expected one of version, agents, rules, deny, "
                 "network, dns, limits, alerts)");
}

/* ---- agents ---------------------------------------------------------------- */

/* webhook: env:NAME reads the URL from the variable: the sink holds its
 * value, and its reference for run and the exec sinks to hide; unset,
 * empty or misnamed is an error (a warning for check, the sink left out). */
static void test_webhook_url_from_the_environment(void **state)
{
    (void)state;
    const char *url = "https://hooks.example.com/services/T0/B0/s3cret";
    setenv("SLUICE_TEST_HOOK", url, 1);
    setenv("SLUICE_TEST_EMPTY", "", 1);
    unsetenv("SLUICE_TEST_UNSET");
    const char *yaml = V R "alerts: {sinks: [{webhook: \"env:SLUICE_TEST_HOOK\"}]}\n";
    struct diag d;
    struct policy *p = load(yaml, &d);
    assert_non_null(p);
    assert_int_equal(p->alerts.nsinks, 1);
    assert_string_equal(p->alerts.sinks[0].target, url);
    assert_string_equal(p->alerts.sinks[0].env_ref, "env:SLUICE_TEST_HOOK");
    policy_free(p);
    diag_free(&d);
    /* a URL written inline has no reference */
    p = load(V R "alerts: {sinks: [{webhook: \"http://127.0.0.1/h\"}]}\n", &d);
    assert_non_null(p);
    assert_null(p->alerts.sinks[0].env_ref);
    policy_free(p);
    diag_free(&d);
    static const struct error_case cases[] = {
        {V R "alerts: {sinks: [{webhook: \"env:SLUICE_TEST_UNSET\"}]}\n",
         "p.yaml:5: alerts.sinks[0]: webhook env:SLUICE_TEST_UNSET: environment variable "
         "SLUICE_TEST_UNSET is not set"},
        {V R "alerts: {sinks: [{webhook: \"env:SLUICE_TEST_EMPTY\"}]}\n",
         "p.yaml:5: alerts.sinks[0]: webhook env:SLUICE_TEST_EMPTY: environment variable "
         "SLUICE_TEST_EMPTY is empty"},
        {V R "alerts: {sinks: [{webhook: \"env:A-B\"}]}\n",
         "p.yaml:5: alerts.sinks[0]: webhook: invalid environment variable name 'A-B'"},
    };
    RUN(cases);
    /* the variable's value is checked as a URL written inline is, but
     * never shown when it is none: it may be the secret alone (a token
     * pasted without its URL, the wrong variable named), which a label
     * would show whole ("xoxb-1-s3cret", or up to its first '/') */
    static const char *const not_urls[] = {"ftp://127.0.0.1/x", "xoxb-1-s3cret", "s3cret/x",
                                           "https://h.example/s3cret\n"};
    for (size_t i = 0; i < sizeof(not_urls) / sizeof(not_urls[0]); i++) {
        setenv("SLUICE_TEST_HOOK", not_urls[i], 1);
        expect_error(yaml, "p.yaml:5: alerts.sinks[0]: webhook env:SLUICE_TEST_HOOK: environment "
                           "variable SLUICE_TEST_HOOK does not hold an http:// or https:// URL "
                           "(its value is not shown: it may be a secret)");
    }
    setenv("SLUICE_TEST_HOOK", "https://h.example:99999/s3cret", 1);
    expect_error(yaml, "p.yaml:5: alerts.sinks[0]: webhook env:SLUICE_TEST_HOOK "
                       "(https://h.example:99999/...#c8ff3094): bad port");
    /* check audits without the secrets: a warning, the sink left out */
    const char *unset = V R "alerts: {sinks: [{webhook: \"env:SLUICE_TEST_UNSET\"}]}\n";
    diag_init(&d, FILE_NAME);
    p = policy_load_buffer_flags(FILE_NAME, unset, strlen(unset), POLICY_LOAD_SECRETS_OPTIONAL, &d);
    assert_non_null(p);
    assert_int_equal(p->alerts.nsinks, 0);
    assert_true(has_entry(&d, DIAG_WARNING,
                          "p.yaml:5: alerts.sinks[0]: webhook env:SLUICE_TEST_UNSET: environment "
                          "variable SLUICE_TEST_UNSET is not set here; serve refuses to start "
                          "without it"));
    assert_false(diag_fails_strict(&d));
    policy_free(p);
    diag_free(&d);
    unsetenv("SLUICE_TEST_HOOK");
}

static void test_agent_errors(void **state)
{
    (void)state;
    setenv("SLUICE_TEST_EMPTY", "", 1);
    unsetenv("SLUICE_TEST_UNSET");
    static const struct error_case cases[] = {
        {V "agents: {id: a}\n", "p.yaml:2: agents: expected a list"},
        {V "agents:\n  - a\n", "p.yaml:3: agents[0]: expected a mapping"},
        {V "agents:\n  - sources: [unix]\n", "p.yaml:3: agents[0].id: is required"},
        {V "agents:\n  - id: a\n", "p.yaml:3: agents[0].sources: is required"},
        {V "agents:\n  - {id: Bad, sources: [unix]}\n",
         "p.yaml:3: agents[0].id: invalid agent id 'Bad' (use 1-64 of a-z, 0-9, '.', '_', '-')"},
        {V "agents:\n  - {id: \"\", sources: [unix]}\n",
         "p.yaml:3: agents[0].id: invalid agent id '' (use 1-64 of a-z, 0-9, '.', '_', '-')"},
        {V "agents:\n  - {id: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, "
           "sources: [unix]}\n",
         "p.yaml:3: agents[0].id: invalid agent id 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaaaaaaa...' (use 1-64 of a-z, 0-9, '.', '_', '-')"},
        {V "agents:\n  - {id: a, sources: [unix]}\n  - {id: b, sources: [unix]}\n"
           "  - {id: a, sources: [unix]}\n",
         "p.yaml:5: agents[2].id: duplicate agent id 'a' (first at line 3)"},
        {V "agents:\n  - {id: a, sources: []}\n", "p.yaml:3: agents[0].sources: must not be empty"},
        {V "agents:\n  - {id: a, sources: unix}\n", "p.yaml:3: agents[0].sources: expected a list"},
        {V "agents:\n  - {id: a, sources: [10.0.0.1/8]}\n",
         "p.yaml:3: agents[0].sources[0]: invalid CIDR '10.0.0.1/8': host bits set below the "
         "prefix"},
        {V "agents:\n  - {id: a, sources: [unix, 10.1/16]}\n",
         "p.yaml:3: agents[0].sources[1]: invalid CIDR '10.1/16'"},
        {V "agents:\n  - {id: a, sources: [[1]]}\n",
         "p.yaml:3: agents[0].sources[0]: expected a string"},
        {V "agents:\n  - {id: a, sources: [unix], token: hunter2}\n",
         "p.yaml:3: agents[0].token: write the secret as env:NAME, never in the policy file"},
        {V "agents:\n  - {id: a, sources: [unix], token: \"\"}\n",
         "p.yaml:3: agents[0].token: must not be empty (write env:NAME)"},
        {V "agents:\n  - {id: a, sources: [unix], token: \"env:\"}\n",
         "p.yaml:3: agents[0].token: invalid environment variable name ''"},
        {V "agents:\n  - {id: a, sources: [unix], token: \"env:1X\"}\n",
         "p.yaml:3: agents[0].token: invalid environment variable name '1X'"},
        {V "agents:\n  - {id: a, sources: [unix], token: \"env:A-B\"}\n",
         "p.yaml:3: agents[0].token: invalid environment variable name 'A-B'"},
        {V "agents:\n  - {id: a, sources: [unix], token: \"env:SLUICE_TEST_UNSET\"}\n",
         "p.yaml:3: agents[0].token: environment variable SLUICE_TEST_UNSET is not set"},
        {V "agents:\n  - {id: a, sources: [unix], token: \"env:SLUICE_TEST_EMPTY\"}\n",
         "p.yaml:3: agents[0].token: environment variable SLUICE_TEST_EMPTY is empty"},
        {V "agents:\n  - {id: a, sources: [unix], mode: audit}\n",
         "p.yaml:3: agents[0].mode: unknown mode 'audit' (expected enforce or report)"},
        {V "agents:\n  - {id: a, sources: [unix], mdoe: report}\n",
         "p.yaml:3: agents[0]: unknown key 'mdoe' (expected one of id, sources, token, mode, "
         "encrypted_client_hello)"},
        {V "agents:\n  - {id: a, sources: [unix], encrypted_client_hello: yes}\n",
         "p.yaml:3: agents[0].encrypted_client_hello: unknown value 'yes' (expected refuse or "
         "allow)"},
        {V "agents:\n  - {id: a, id: b, sources: [unix]}\n",
         "p.yaml:3: agents[0].id: duplicate key 'id' (first at line 3)"},
    };
    RUN(cases);
}

/* "agents: []" reads as "no agent may use the gateway", and lets every
 * client in as agent default, as a policy without the key does: warned. */
static void test_empty_agents_warned(void **state)
{
    (void)state;
    expect_warning(V "agents: []\n" R,
                   "p.yaml:2: agents: the list is empty: every client, from any source and "
                   "without a token, is agent 'default', as without an agents section; list the "
                   "agents, or remove the key");
    struct diag d;
    struct policy *p = load(V "agents: []\n" R, &d);
    assert_non_null(p);
    assert_int_equal(p->nagents, 0);
    policy_free(p);
    diag_free(&d);
}

/* A secret holding a blank or a control character (a line end a secret
 * file ended with) cannot be sent as a Bearer token: warned, never shown. */
static void test_token_a_bearer_header_cannot_carry(void **state)
{
    (void)state;
    static const char *const values[] = {"s3cret\n", " s3cret", "s3c ret", "s3cret\t",
                                         "\x7fs3cret"};
#define UNCARRIED                                                                                  \
    "p.yaml:3: agents[0].token: environment variable SLUICE_TEST_BLANK holds a blank or a "        \
    "control character (a line end at its end?): a Bearer token cannot carry it, and a Basic "     \
    "password must hold it as it is; remove it from the variable"
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        setenv("SLUICE_TEST_BLANK", values[i], 1);
        expect_warning(
            V "agents:\n  - {id: a, sources: [unix], token: \"env:SLUICE_TEST_BLANK\"}\n" R,
            UNCARRIED);
    }
#undef UNCARRIED
    setenv("SLUICE_TEST_BLANK", "s3cret-token-\xc3\xa9~!", 1);
    struct policy *p = expect_clean(
        V "agents:\n  - {id: a, sources: [unix], token: \"env:SLUICE_TEST_BLANK\"}\n" R);
    policy_free(p);
    unsetenv("SLUICE_TEST_BLANK");
}

/* A secret shorter than 16 bytes can be guessed: wrong ones are 407s that
 * nothing throttles. Warned with the agent and its variable, never the
 * value; the length is counted in bytes. */
static void test_token_too_short_to_resist_guessing(void **state)
{
    (void)state;
#define SHORT_TOKEN(line, n, id, var)                                                              \
    "p.yaml:" #line ": agents[" #n "].token: environment variable " var " holds a secret shorter " \
    "than 16 bytes: anyone who reaches the gateway can guess it (wrong tokens are not "            \
    "throttled); give agent '" id "' a long random one, e.g. openssl rand -hex 16 (32 characters)"
    static const char *const shorts[] = {"s3cret", "x", "0123456789abcde"};
    for (size_t i = 0; i < sizeof(shorts) / sizeof(shorts[0]); i++) {
        setenv("SLUICE_TEST_SHORT", shorts[i], 1);
        expect_warning(
            V "agents:\n  - {id: a, sources: [unix], token: \"env:SLUICE_TEST_SHORT\"}\n" R,
            SHORT_TOKEN(3, 0, "a", "SLUICE_TEST_SHORT"));
    }
    /* the id written after the token is still named */
    expect_warning(V "agents:\n  - {id: a, sources: [unix]}\n"
                     "  - {token: \"env:SLUICE_TEST_SHORT\", sources: [unix], id: late}\n" R,
                   SHORT_TOKEN(4, 1, "late", "SLUICE_TEST_SHORT"));
    /* bytes, not characters: five two-byte letters and six ASCII are 16 */
    setenv("SLUICE_TEST_SHORT", "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9s3cret", 1);
    struct policy *p = expect_clean(
        V "agents:\n  - {id: a, sources: [unix], token: \"env:SLUICE_TEST_SHORT\"}\n" R);
    policy_free(p);
    setenv("SLUICE_TEST_SHORT", "0123456789abcdef", 1);
    p = expect_clean(V
                     "agents:\n  - {id: a, sources: [unix], token: \"env:SLUICE_TEST_SHORT\"}\n" R);
    policy_free(p);
    /* never the value, nor a part of it */
    setenv("SLUICE_TEST_SHORT", "q7Zk", 1);
    const char *yaml =
        V "agents:\n  - {id: a, sources: [unix], token: \"env:SLUICE_TEST_SHORT\"}\n" R;
    struct diag d;
    p = load(yaml, &d);
    assert_non_null(p);
    assert_int_equal(d.count, 1);
    char buf[1024];
    for (size_t i = 0; i < d.count; i++) {
        diag_format(&d, &d.entries[i], buf, sizeof(buf));
        assert_null(strstr(buf, "q7Z"));
    }
    policy_free(p);
    diag_free(&d);
#undef SHORT_TOKEN
    unsetenv("SLUICE_TEST_SHORT");
}

/* A source of a token-less agent that an earlier token-less agent holds is
 * never that agent's: a client there without a secret is the earlier one
 * (file order, not the most specific). */
static void test_shadowed_agent_sources(void **state)
{
    (void)state;
    setenv("SLUICE_TEST_TOKEN", "s3cret-token-for-tests", 1);
    setenv("SLUICE_TEST_TOKEN2", "another-s3cret-token", 1);
#define SHADOWED(src, n, id)                                                                       \
    "'" src "' is never used: agents[" #n "] (" id "), earlier in the file and without a token, "  \
    "holds it too (a client that presents no secret is the first agent whose sources hold it, "    \
    "not the most specific)"
    expect_warning(V "agents:\n  - {id: wide, sources: [127.0.0.0/8]}\n"
                     "  - {id: narrow, sources: [10.0.0.0/8, 127.0.0.1/32]}\n" R,
                   "p.yaml:4: agents[1].sources: " SHADOWED("127.0.0.1/32", 0, "wide"));
    expect_warning(V "agents:\n  - {id: a, sources: [unix]}\n  - {id: b, sources: [\"::1\"]}\n"
                     "  - {id: c, sources: [\"::/0\", 10.0.0.0/8]}\n"
                     "  - {id: d, sources: [10.1.2.3/32, unix]}\n" R,
                   "p.yaml:6: agents[3].sources: " SHADOWED("10.1.2.3/32", 2, "c"));
    expect_warning(V "agents:\n  - {id: a, sources: [unix]}\n  - {id: b, sources: [\"::1\"]}\n"
                     "  - {id: c, sources: [\"::/0\", 10.0.0.0/8]}\n"
                     "  - {id: d, sources: [10.1.2.3/32, unix]}\n" R,
                   "p.yaml:6: agents[3].sources: " SHADOWED("unix", 0, "a"));
    expect_warning(V "agents:\n  - {id: a, sources: [\"::1\"]}\n  - {id: b, sources: [\"::/0\"]}\n"
                     "  - {id: c, sources: [\"::1/128\"]}\n" R,
                   "p.yaml:5: agents[2].sources: " SHADOWED("::1/128", 0, "a"));
    /* the narrower first, a token agent in front, or its own sources
     * overlapping: nothing shadowed */
    struct policy *p = expect_clean(
        V "agents:\n  - {id: narrow, sources: [127.0.0.1/32]}\n"
          "  - {id: tok, sources: [127.0.0.0/8], token: \"env:SLUICE_TEST_TOKEN\"}\n"
          "  - {id: wide, sources: [127.0.0.0/8, 127.0.0.0/16, unix]}\n"
          "  - {id: tok2, sources: [127.0.0.1/32, unix], token: \"env:SLUICE_TEST_TOKEN2\"}\n" R);
    policy_free(p);
#undef SHADOWED
}

/* POLICY_LOAD_SECRETS_UNUSED (run's gateway): an unset or empty token
 * variable is neither an error nor a warning; the agent has no secret, and
 * its variable is still named. Without the flag, an error. */
static void test_secrets_unused(void **state)
{
    (void)state;
    unsetenv("SLUICE_TEST_UNSET");
    setenv("SLUICE_TEST_EMPTY", "", 1);
    setenv("SLUICE_TEST_TOKEN", "s3cret-token-for-tests", 1);
    const char *yaml = V "agents:\n  - {id: a, sources: [unix], token: \"env:SLUICE_TEST_UNSET\"}\n"
                         "  - {id: b, sources: [unix], token: \"env:SLUICE_TEST_EMPTY\"}\n"
                         "  - {id: c, sources: [unix], token: \"env:SLUICE_TEST_TOKEN\"}\n" R;
    struct diag d;
    diag_init(&d, FILE_NAME);
    struct policy *p =
        policy_load_buffer_flags(FILE_NAME, yaml, strlen(yaml), POLICY_LOAD_SECRETS_UNUSED, &d);
    if (p == NULL || d.count != 0)
        dump(yaml, &d);
    assert_non_null(p);
    assert_int_equal(d.count, 0);
    assert_false(p->agents[0].has_token);
    assert_string_equal(p->agents[0].token_ref, "env:SLUICE_TEST_UNSET");
    assert_false(p->agents[1].has_token);
    assert_string_equal(p->agents[1].token_ref, "env:SLUICE_TEST_EMPTY");
    assert_true(p->agents[2].has_token);
    policy_free(p);
    diag_free(&d);
    expect_error(yaml,
                 "p.yaml:3: agents[0].token: environment variable SLUICE_TEST_UNSET is not set");
    unsetenv("SLUICE_TEST_EMPTY");
}

/* Two agents with one secret: a client that presents it is the first of
 * them whose sources hold it, the later never where both do. */
static void test_agents_sharing_a_token(void **state)
{
    (void)state;
    setenv("SLUICE_TEST_TOKEN", "s3cret-token-for-tests", 1);
    setenv("SLUICE_TEST_TOKEN2", "s3cret-token-for-tests", 1);
    setenv("SLUICE_TEST_TOKEN3", "other-token-for-tests", 1);
#define SHARED(n, id, line)                                                                        \
    "the same secret as agents[" #n "] (" id ", line " #line "), earlier in the file: a client "   \
    "that presents it is the first of them whose sources hold it; give each agent a token of its " \
    "own"
    /* one variable, and two variables holding one value */
    expect_warning(
        V "agents:\n  - {id: a, sources: [127.0.0.0/8], token: \"env:SLUICE_TEST_TOKEN\"}\n"
          "  - {id: b, sources: [127.0.0.1/32], token: \"env:SLUICE_TEST_TOKEN\"}\n" R,
        "p.yaml:4: agents[1].token: " SHARED(0, "a", 3));
    expect_warning(V "agents:\n  - {id: a, sources: [unix], token: \"env:SLUICE_TEST_TOKEN3\"}\n"
                     "  - {id: b, sources: [unix], token: \"env:SLUICE_TEST_TOKEN2\"}\n"
                     "  - {id: c, sources: [unix]}\n"
                     "  - {id: d, sources: [unix], token: \"env:SLUICE_TEST_TOKEN\"}\n" R,
                   "p.yaml:6: agents[3].token: " SHARED(1, "b", 4));
    struct policy *p =
        expect_clean(V "agents:\n  - {id: a, sources: [unix], token: \"env:SLUICE_TEST_TOKEN\"}\n"
                       "  - {id: b, sources: [unix], token: \"env:SLUICE_TEST_TOKEN3\"}\n"
                       "  - {id: c, sources: [unix]}\n  - {id: d, sources: [10.0.0.0/8]}\n" R);
    policy_free(p);
#undef SHARED
    unsetenv("SLUICE_TEST_TOKEN2");
    unsetenv("SLUICE_TEST_TOKEN3");
}

/* A token read from a variable every process on the host has (PATH, HOME,
 * USER...) is no secret: anyone who knows the host knows or guesses it.
 * Warned whether or not it is set here (check runs without the secrets),
 * naming the variable and the agent, never the value. */
static void test_token_from_a_variable_that_is_no_secret(void **state)
{
    (void)state;
#define NO_SECRET(n, id, var)                                                                      \
    "p.yaml:3: agents[" #n "].token: environment variable " var " is no secret: every process "    \
    "and user on the host can read it, or guess it; give agent '" id "' a variable of its own "    \
    "that holds a long random secret"
    static const char *const names[] = {
        "PATH", "HOME",     "USER",   "LOGNAME", "SHELL",           "PWD", "LANG",
        "TERM", "HOSTNAME", "TMPDIR", "LC_ALL",  "XDG_RUNTIME_DIR", "TZ"};
    char yaml[256], want[512];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        /* set to a long value: the finding is about the name */
        char *old = getenv(names[i]) != NULL ? strdup(getenv(names[i])) : NULL;
        setenv(names[i], "a-value-long-enough-for-the-length-check", 1);
        snprintf(yaml, sizeof(yaml), V "agents:\n  - {id: a, sources: [unix], token: env:%s}\n" R,
                 names[i]);
        snprintf(want, sizeof(want),
                 "p.yaml:3: agents[0].token: environment variable %s is no secret: every process "
                 "and user on the host can read it, or guess it; give agent 'a' a variable of "
                 "its own that holds a long random secret",
                 names[i]);
        expect_warning(yaml, want);
        if (old != NULL)
            setenv(names[i], old, 1);
        else
            unsetenv(names[i]);
        free(old);
    }
    /* unset, as in a CI job that checks the policy without its secrets */
    unsetenv("HOSTNAME");
    const char *unset = V "agents:\n  - {id: b, sources: [unix], token: env:HOSTNAME}\n" R;
    struct diag d;
    diag_init(&d, FILE_NAME);
    struct policy *p =
        policy_load_buffer_flags(FILE_NAME, unset, strlen(unset), POLICY_LOAD_SECRETS_OPTIONAL, &d);
    assert_non_null(p);
    if (!has_entry(&d, DIAG_WARNING, NO_SECRET(0, "b", "HOSTNAME")))
        dump(unset, &d);
    assert_true(has_entry(&d, DIAG_WARNING, NO_SECRET(0, "b", "HOSTNAME")));
    policy_free(p);
    diag_free(&d);
    /* names that only start or end like one are a variable of their own */
    setenv("PATHFINDER_TOKEN", "s3cret-token-for-tests", 1);
    setenv("MY_HOME", "another-s3cret-token-for-tests", 1);
    p = expect_clean(V "agents:\n  - {id: a, sources: [unix], token: env:PATHFINDER_TOKEN}\n"
                       "  - {id: b, sources: [\"::1\"], token: env:MY_HOME}\n" R);
    policy_free(p);
    unsetenv("PATHFINDER_TOKEN");
    unsetenv("MY_HOME");
#undef NO_SECRET
}

/* An agent in report mode is let through where the policy denies it: a
 * canary that learns what a task needs, or a policy left in trial that
 * enforces nothing for it. Warned, so that `check --strict` can refuse it. */
static void test_report_mode_agent_warns(void **state)
{
    (void)state;
#define REPORT_MODE(line, n)                                                                       \
    "p.yaml:" #line ": agents[" #n "].mode: report: this agent's denials are let through "         \
    "(logged as report); only the address guard still refuses for it (private_address, "           \
    "self_request)"
    expect_warning(V "agents:\n  - {id: a, sources: [unix], mode: report}\n" R, REPORT_MODE(3, 0));
    expect_warning(V "agents:\n  - {id: a, sources: [unix]}\n  - id: b\n    sources: [\"::1\"]\n"
                     "    mode: report\n" R,
                   REPORT_MODE(6, 1));
    struct policy *p = expect_clean(V "agents:\n  - {id: a, sources: [unix], mode: enforce}\n" R);
    policy_free(p);
#undef REPORT_MODE
}

/* ---- rules ----------------------------------------------------------------- */

#define RULE "rules:\n  - host: a.example.test\n    tier: 0\n"

static void test_rule_shape_errors(void **state)
{
    (void)state;
    static const struct error_case cases[] = {
        {V "rules: {host: a.example.test}\n", "p.yaml:2: rules: expected a list"},
        {V "rules:\n  - a.example.test\n", "p.yaml:3: rules[0]: expected a mapping"},
        {V "rules:\n  - {tier: 0}\n", "p.yaml:3: rules[0]: needs a host or a cidr"},
        {V "rules:\n  - {host: a.example.test, cidr: 10.0.0.0/8, tier: 0}\n",
         "p.yaml:3: rules[0]: give exactly one of host and cidr, not both"},
        {V "rules:\n  - {cidr: 10.0.0.0/8, host: a.example.test, tier: 0}\n",
         "p.yaml:3: rules[0]: give exactly one of host and cidr, not both"},
        {V "rules:\n  - {host: a.example.test}\n", "p.yaml:3: rules[0].tier: is required"},
        {V "rules:\n  - {host: a.example.test, prots: [443], tier: 0}\n",
         "p.yaml:3: rules[0]: unknown key 'prots' (expected one of host, cidr, ports, tier, "
         "methods, owner, expires, agents, rate)"},
        {V "rules:\n  - host: a.example.test\n    tier: 0\n    tier: 1\n",
         "p.yaml:5: rules[0].tier: duplicate key 'tier' (first at line 4)"},
        {V "rules:\n  - {host: \"*\", tier: 0}\n", NULL},
        {V "rules:\n  - {host: [a], tier: 0}\n", "p.yaml:3: rules[0].host: expected a string"},
        {V "rules:\n  - {host: a.example.test, tier: 5}\n",
         "p.yaml:3: rules[0].tier: tier 5 is outside 0-3"},
        {V "rules:\n  - {host: a.example.test, tier: 99999999999999999999}\n",
         "p.yaml:3: rules[0].tier: tier 99999999999999999999 is outside 0-3"},
        {V "rules:\n  - {host: a.example.test, tier: high}\n",
         "p.yaml:3: rules[0].tier: expected an integer, got 'high'"},
        {V "rules:\n  - {cidr: 10.0.0.1/8, tier: 0}\n",
         "p.yaml:3: rules[0].cidr: invalid CIDR '10.0.0.1/8': host bits set below the prefix"},
        {V "rules:\n  - {cidr: 10.0.0.0/33, tier: 0}\n",
         "p.yaml:3: rules[0].cidr: invalid CIDR '10.0.0.0/33'"},
        {V "rules:\n  - {cidr: ~, tier: 0}\n",
         "p.yaml:3: rules[0].cidr: expected a string, not YAML's null '~'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (cases[i].want != NULL) {
            expect_error(cases[i].yaml, cases[i].want);
            continue;
        }
        /* the host module's own phrase follows the pattern */
        struct diag d;
        assert_null(load(cases[i].yaml, &d));
        char buf[512];
        diag_format(&d, diag_first_error(&d), buf, sizeof(buf));
        assert_int_equal(strncmp(buf, "p.yaml:3: rules[0].host: invalid host pattern '*': ", 51),
                         0);
        assert_true(strlen(buf) > 51);
        diag_free(&d);
    }
}

static void test_owner_not_ascii(void **state)
{
    /* Letters beyond ASCII are a name's (U+00A0 and up, U+00EB here): only
     * the controls are refused, C1 (U+0080 to U+009F) as C0. */
    (void)state;
    struct policy *p = expect_clean(V "rules:\n  - {host: a.example.test, tier: 0, owner: "
                                      "\"Zo\xc3\xab \xc2\xa0"
                                      "D\"}\n");
    assert_string_equal(p->rules[0].owner, "Zo\xc3\xab \xc2\xa0"
                                           "D");
    policy_free(p);
    /* Letters written right to left are a name's too (Arabic U+0639
     * U+0644 U+064A, Hebrew U+05D3 U+05E0 U+05D4): only the formatting
     * characters that reorder a line are refused. */
    p = expect_clean(V "rules:\n  - {host: a.example.test, tier: 0, owner: "
                       "\"\xd8\xb9\xd9\x84\xd9\x8a \xd7\x93\xd7\xa0\xd7\x94\"}\n");
    assert_string_equal(p->rules[0].owner, "\xd8\xb9\xd9\x84\xd9\x8a \xd7\x93\xd7\xa0\xd7\x94");
    policy_free(p);
    /* The zero-width non-joiner is a letter's in Persian (U+0645 U+06CC
     * ZWNJ U+0631): allowed, where the invisible characters are not. */
    p = expect_clean(V "rules:\n  - {host: a.example.test, tier: 0, owner: "
                       "\"\xd9\x85\xdb\x8c\xe2\x80\x8c\xd8\xb1\"}\n");
    assert_string_equal(p->rules[0].owner, "\xd9\x85\xdb\x8c\xe2\x80\x8c\xd8\xb1");
    policy_free(p);
}

/* Every decision line under a rule carries its owner: one of 17 MiB made
 * each over the decision log's line cap (16 MiB), and the log dropped the
 * line of every request the grant let through. */
static void test_owner_length_capped(void **state)
{
    (void)state;
    char yaml[2048];
    char owner[1026];
    memset(owner, 'a', sizeof(owner) - 1);
    owner[1025] = '\0';
    owner[1024] = '\0'; /* 1024 bytes: the most */
    snprintf(yaml, sizeof(yaml), V "rules:\n  - {host: a.example.test, tier: 0, owner: %s}\n",
             owner);
    struct diag d;
    struct policy *p = load(yaml, &d);
    assert_non_null(p);
    assert_int_equal(strlen(p->rules[0].owner), 1024);
    policy_free(p);
    diag_free(&d);
    owner[1024] = 'a'; /* 1025: one too many */
    snprintf(yaml, sizeof(yaml), V "rules:\n  - {host: a.example.test, tier: 0, owner: %s}\n",
             owner);
    expect_error(yaml, "p.yaml:3: rules[0].owner: is 1025 bytes long: a person's name is at "
                       "most 1024 bytes (each decision line under the rule carries it)");
}

#define GRANT "    tier: 3\n    owner: chaysen\n    expires: 2027-03-31\n"

/* A tier-3 grant that a lower tier outranks for a method both name: check
 * listed it as signed for POST while every POST went through at tier 1
 * (match.c: among rules naming the method, the lower tier wins). */
static void test_outranked_grant_warned(void **state)
{
    (void)state;
    expect_warning(V
                   "rules:\n  - host: api.github.com\n    methods: [POST, PUT]\n" GRANT
                   "  - {host: api.github.com, methods: [GET, PUT, POST], tier: 1, ports: [443]}\n",
                   "p.yaml:3: rules[0]: this tier-3 grant does not decide POST PUT: rules[1] (line "
                   "8) names it too for this host, with a port and an agent in common, at tier 1, "
                   "and the lower tier wins; those requests go through at tier 1, without this "
                   "grant's owner, expiry or tier3_write alert");
    expect_warning(V "rules:\n  - {host: \"*.github.com\", methods: [DELETE], tier: 2}\n"
                     "  - host: \"*.github.com\"\n    methods: [DELETE]\n    agents: [ci]\n" GRANT,
                   "p.yaml:4: rules[1]: this tier-3 grant does not decide DELETE: rules[0] (line "
                   "3) names it too for this host, with a port and an agent in common, at tier 2, "
                   "and the lower tier wins; those requests go through at tier 2, without this "
                   "grant's owner, expiry or tier3_write alert");
    /* the grant decides: the other rule names no method (the one naming
     * it wins), another method, another port or another agent */
    policy_free(expect_clean(V "rules:\n  - host: api.github.com\n    methods: [POST]\n" GRANT
                               "  - {host: api.github.com, tier: 1}\n"));
    policy_free(expect_clean(V "rules:\n  - host: api.github.com\n    methods: [POST]\n" GRANT
                               "  - {host: api.github.com, methods: [GET], tier: 1}\n"));
    policy_free(expect_clean(
        V "rules:\n  - host: api.github.com\n    methods: [POST]\n    ports: [443]\n" GRANT
          "  - {host: api.github.com, methods: [POST], tier: 1, ports: [80]}\n"));
    policy_free(expect_clean(
        V "agents: [{id: a, sources: [unix]}, {id: b, sources: [127.0.0.1/32]}]\n"
          "rules:\n  - host: api.github.com\n    methods: [POST]\n    agents: [a]\n" GRANT
          "  - {host: api.github.com, methods: [POST], tier: 1, agents: [b]}\n"));
    policy_free(expect_clean(V "rules:\n  - host: api.github.com\n    methods: [POST]\n" GRANT
                               "  - {host: uploads.github.com, methods: [POST], tier: 1}\n"));
}

/* A tier-3 grant that names no methods, outranked by a lower-tier rule of
 * its pattern that names none either (their agents differ, else they are
 * duplicates): a POST by agent ci under a grant for ci went upstream at
 * tier 0 (rule rules[1], owner null) while check listed the grant as
 * signed for ci, without a word. */
static void test_unrestricted_grant_outranked_warned(void **state)
{
    (void)state;
#define SHARES(r, line, t)                                                                         \
    "this tier-3 grant does not decide the plain requests it shares with " r " (line " line        \
    "), which covers this host too without naming methods either, at tier " t ", for a port and "  \
    "an agent in common: the lower tier wins, so those requests go through at tier " t ", "        \
    "without this grant's owner, expiry or tier3_write alert (only a CONNECT and an extension "    \
    "method take tier 3)"
    expect_warning(V "agents: [{id: ci, sources: [unix]}]\n"
                     "rules:\n  - host: api.example.com\n    agents: [ci]\n" GRANT
                     "  - {host: api.example.com, tier: 0}\n",
                   "p.yaml:4: rules[0]: " SHARES("rules[1]", "9", "0"));
    /* the other way round: a lower rule for one agent under a grant for all */
    expect_warning(V "agents: [{id: ci, sources: [unix]}]\n"
                     "rules:\n  - {host: \"*.example.com\", tier: 2, agents: [ci], ports: [443]}\n"
                     "  - host: \"*.example.com\"\n" GRANT,
                   "p.yaml:5: rules[1]: " SHARES("rules[0]", "4", "2"));
    /* the grant decides: another port or agent, or the lower rule names
     * methods (a read carved out: its methods only) */
    policy_free(
        expect_clean(V "agents: [{id: a, sources: [unix]}, {id: b, sources: [127.0.0.1/32]}]\n"
                       "rules:\n  - host: api.example.com\n    agents: [a]\n" GRANT
                       "  - {host: api.example.com, tier: 0, agents: [b]}\n"));
    policy_free(expect_clean(V "agents: [{id: a, sources: [unix]}]\n"
                               "rules:\n  - host: api.example.com\n    ports: [443]\n" GRANT
                               "  - {host: api.example.com, tier: 0, ports: [80], agents: [a]}\n"));
    policy_free(expect_clean(V "agents: [{id: a, sources: [unix]}]\n"
                               "rules:\n  - host: api.example.com\n    agents: [a]\n" GRANT
                               "  - {host: api.example.com, tier: 0, methods: [GET]}\n"));
#undef SHARES
}

#define TAKES_TAIL                                                                                 \
    ": its pattern is more specific, so it decides those requests, without the grant's owner, "    \
    "expiry or tier3_write alert; write it as tier 3 or restrict its methods"

/* A lower-tier rule of a more specific pattern takes requests from a
 * tier-3 grant: an exact host beats a wildcard whatever the tiers (match.c),
 * so every POST to api.example.com went through at tier 1, without the
 * grant's owner, expiry or tier3_write alert, and nothing warned. */
static void test_grant_taken_by_more_specific_rule_warned(void **state)
{
    (void)state;
    expect_warning(V "rules:\n  - host: \"*.example.com\"\n    methods: [POST]\n" GRANT
                     "  - {host: api.example.com, tier: 1}\n",
                   "p.yaml:8: rules[1]: takes POST to api.example.com at tier 1 from the tier-3 "
                   "grant rules[0] (line 3) for *.example.com" TAKES_TAIL);
    /* a wildcard under a wildcard, both for every method; a second grant */
    expect_warning(V "rules:\n  - {host: \"*.a.example.com\", tier: 0}\n"
                     "  - host: \"*.example.com\"\n" GRANT "  - host: \"*.com.example.com\"\n" GRANT
                     "  - {host: x.a.example.com, tier: 2}\n",
                   "p.yaml:3: rules[0]: takes every method to *.a.example.com at tier 0 from the "
                   "tier-3 grant rules[1] (line 4) for *.example.com" TAKES_TAIL);
    expect_warning(V "rules:\n  - host: \"*.example.com\"\n    methods: [PUT, POST]\n" GRANT
                     "  - host: \"*.b.example.com\"\n    methods: [POST]\n" GRANT
                     "  - {host: a.b.example.com, methods: [GET, POST], tier: 1}\n",
                   "p.yaml:13: rules[2]: takes POST to a.b.example.com at tier 1 from the tier-3 "
                   "grant rules[0] (line 3) for *.example.com (and from 1 other tier-3 "
                   "grant)" TAKES_TAIL);
    /* a longer cidr: prefix wins as an exact host does */
    expect_warning(V "rules:\n  - cidr: 10.0.0.0/8\n    methods: [DELETE]\n" GRANT
                     "  - {cidr: 10.1.2.0/24, methods: [DELETE], tier: 2}\n",
                   "p.yaml:8: rules[1]: takes DELETE to 10.1.2.0/24 at tier 2 from the tier-3 "
                   "grant rules[0] (line 3) for 10.0.0.0/8" TAKES_TAIL);
}

/* No warning where the grant still decides, or never met the rule. */
static void test_grant_not_taken_not_warned(void **state)
{
    (void)state;
    static const char *const clean[] = {
        /* the lower rule's methods are not the grant's */
        V "rules:\n  - host: \"*.example.com\"\n    methods: [POST]\n" GRANT
          "  - {host: api.example.com, methods: [GET, HEAD], tier: 1}\n",
        /* a read carved out below a grant for every method, on purpose */
        V "rules:\n  - host: \"*.example.com\"\n" GRANT
          "  - {host: api.example.com, methods: [GET], tier: 1}\n",
        /* hosts that cannot meet (another domain, the suffix itself), or
         * a less specific lower rule: the grant wins */
        V "rules:\n  - host: \"*.example.com\"\n    methods: [POST]\n" GRANT
          "  - {host: api.example.org, tier: 1}\n  - {host: example.com, tier: 1}\n"
          "  - {host: \"*.badexample.com\", tier: 1}\n",
        V "rules:\n  - cidr: 10.1.0.0/16\n    methods: [POST]\n" GRANT
          "  - {cidr: 10.0.0.0/8, tier: 1}\n  - {cidr: 10.2.0.0/24, tier: 1}\n",
        /* no agent or no port in common */
        V "agents: [{id: a, sources: [unix]}, {id: b, sources: [127.0.0.1/32]}]\n"
          "rules:\n  - host: \"*.example.com\"\n    methods: [POST]\n    agents: [a]\n" GRANT
          "  - {host: api.example.com, tier: 1, agents: [b]}\n"
          "  - {host: web.example.com, tier: 1, ports: [8443]}\n",
        /* a grant of its own pattern names every method a rule can name:
         * the extension methods left to the lower rule take the highest
         * tier of every class (match.c), so nothing is taken (before, it
         * warned that they went at tier 1, as they then did) */
        V "rules:\n  - host: \"*.example.com\"\n" GRANT
          "  - {host: api.example.com, tier: 1}\n  - host: api.example.com\n"
          "    methods: [GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE]\n" GRANT,
        /* a tier-3 grant of the rule's own pattern decides the POSTs */
        V "rules:\n  - host: \"*.example.com\"\n    methods: [POST]\n" GRANT
          "  - {host: api.example.com, tier: 1}\n"
          "  - host: api.example.com\n    methods: [POST]\n" GRANT,
    };
    for (size_t i = 0; i < sizeof(clean) / sizeof(clean[0]); i++)
        policy_free(expect_clean(clean[i]));
    /* the more specific rule is itself tier 3 */
    policy_free(expect_clean(V "rules:\n  - host: \"*.example.com\"\n    methods: [POST]\n" GRANT
                               "  - host: api.example.com\n" GRANT));
}

static void test_rule_field_errors(void **state)
{
    (void)state;
    static const struct error_case cases[] = {
        {V "rules:\n  - {host: a.example.test, tier: 0, ports: []}\n",
         "p.yaml:3: rules[0].ports: must not be empty"},
        {V "rules:\n  - {host: a.example.test, tier: 0, ports: 443}\n",
         "p.yaml:3: rules[0].ports: expected a list"},
        {V "rules:\n  - {host: a.example.test, tier: 0, ports: [443, 0]}\n",
         "p.yaml:3: rules[0].ports[1]: port 0 is outside 1-65535"},
        {V "rules:\n  - {host: a.example.test, tier: 0, ports: [65536]}\n",
         "p.yaml:3: rules[0].ports[0]: port 65536 is outside 1-65535"},
        {V "rules:\n  - {host: a.example.test, tier: 0, ports: [443, 18446744073709551616]}\n",
         "p.yaml:3: rules[0].ports[1]: port 18446744073709551616 is outside 1-65535"},
        {V "rules:\n  - {host: a.example.test, tier: 0, ports: [http]}\n",
         "p.yaml:3: rules[0].ports[0]: expected an integer, got 'http'"},
        {V "rules:\n  - {host: a.example.test, tier: 0, methods: []}\n",
         "p.yaml:3: rules[0].methods: must not be empty"},
        {V "rules:\n  - {host: a.example.test, tier: 0, methods: [GET, CONNECT]}\n",
         "p.yaml:3: rules[0].methods[1]: CONNECT is decided by the host rule; leave methods out "
         "to allow tunnels"},
        {V "rules:\n  - {host: a.example.test, tier: 0, methods: [get]}\n",
         "p.yaml:3: rules[0].methods[0]: unknown method 'get' (expected GET, HEAD, POST, PUT, "
         "PATCH, DELETE, OPTIONS or TRACE, in upper case)"},
        {V "rules:\n  - {host: a.example.test, tier: 0, methods: [PROPFIND]}\n",
         "p.yaml:3: rules[0].methods[0]: unknown method 'PROPFIND' (expected GET, HEAD, POST, "
         "PUT, PATCH, DELETE, OPTIONS or TRACE, in upper case)"},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"\"}\n",
         "p.yaml:3: rules[0].owner: must name a person, not be blank"},
        {V "rules:\n  - {host: a.example.test, tier: 3, owner: , expires: 9999-12-31}\n",
         "p.yaml:3: rules[0].owner: must name a person, not be blank"},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: [alice]}\n",
         "p.yaml:3: rules[0].owner: expected a string"},
        {V "rules:\n  - {host: a.example.test, tier: 3, owner: \" \\t\", expires: 9999-12-31}\n",
         "p.yaml:3: rules[0].owner: must name a person, not be blank"},
        /* Unicode spaces and line ends are as blank as ASCII ones: a
         * no-break space, an ideographic space, a line separator. */
        {V "rules:\n  - {host: a.example.test, tier: 3, owner: \"\\_\", expires: 9999-12-31}\n",
         "p.yaml:3: rules[0].owner: must name a person, not be blank"},
        {V "rules:\n  - {host: a.example.test, tier: 3, owner: \"\\u3000 \\u2003\", expires: "
           "9999-12-31}\n",
         "p.yaml:3: rules[0].owner: must name a person, not be blank"},
        {V "rules:\n  - {host: a.example.test, tier: 3, owner: \"\\L\\P\\u202f\\u205f\\u1680\", "
           "expires: 9999-12-31}\n",
         "p.yaml:3: rules[0].owner: must name a person, not be blank"},
        /* ... and so are the zero-width ones, which print as nothing. */
        {V "rules:\n  - {host: a.example.test, tier: 3, owner: \"\\u200b\\ufeff\", expires: "
           "9999-12-31}\n",
         "p.yaml:3: rules[0].owner: must name a person, not be blank"},
        {V "rules:\n  - {host: a.example.test, tier: 3, owner: \" \\u200c\\u200d\\u2060\\u180e \", "
           "expires: 9999-12-31}\n",
         "p.yaml:3: rules[0].owner: must name a person, not be blank"},
        /* ... and the fillers and other default-ignorable characters,
         * which print as nothing too: the Hangul fillers (U+3164 is a
         * well-known "blank name"), the Braille blank, the combining
         * grapheme joiner, the invisible operators, the variation
         * selectors and the tags. */
        {V "rules:\n  - {host: a.example.test, tier: 3, owner: \"\\u3164\", expires: 9999-12-31}\n",
         "p.yaml:3: rules[0].owner: must name a person, not be blank"},
        {V "rules:\n  - {host: a.example.test, tier: 3, owner: \"\\u2800 \\uffa0\\u115f\\u1160\", "
           "expires: 9999-12-31}\n",
         "p.yaml:3: rules[0].owner: must name a person, not be blank"},
        {V
         "rules:\n  - {host: a.example.test, tier: 3, owner: \"\\u034f\\u2062\\u206f\\u17b4\\u180b\", "
         "expires: 9999-12-31}\n",
         "p.yaml:3: rules[0].owner: must name a person, not be blank"},
        {V "rules:\n  - {host: a.example.test, tier: 3, owner: \"\\ufe0f\\U000E0041\\U000E007F\", "
           "expires: 9999-12-31}\n",
         "p.yaml:3: rules[0].owner: must name a person, not be blank"},
        {V "rules:\n  - {host: a.example.test, tier: 3, owner: \"alice\\nresult: 0 errors, 0 "
           "warnings\", expires: 9999-12-31}\n",
         "p.yaml:3: rules[0].owner: must be a name on one line, without control characters"},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"bob\\e[2J\"}\n",
         "p.yaml:3: rules[0].owner: must be a name on one line, without control characters"},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"carol\\x7f\"}\n",
         "p.yaml:3: rules[0].owner: must be a name on one line, without control characters"},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"dave\\Nresult: 0 errors\"}\n",
         "p.yaml:3: rules[0].owner: must be a name on one line, without control characters"},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"erin\\x9b2A\"}\n",
         "p.yaml:3: rules[0].owner: must be a name on one line, without control characters"},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"frank\\Lresult: 0 errors\"}\n",
         "p.yaml:3: rules[0].owner: must be a name on one line, without control characters"},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"grace\\u2029x\"}\n",
         "p.yaml:3: rules[0].owner: must be a name on one line, without control characters"},
        /* Bidirectional overrides, isolates and marks reorder the line
         * check prints the owner in ("alice" + RLO + "13-21-6202" reads
         * as a date that is not the grant's). */
        {V "rules:\n  - {host: a.example.test, tier: 3, owner: \"alice\\u202e13-21-6202\", "
           "expires: 2026-12-31}\n",
         "p.yaml:3: rules[0].owner: " BIDI_REFUSED},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"\\u202abob\\u202c\"}\n",
         "p.yaml:3: rules[0].owner: " BIDI_REFUSED},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"carol \\u2067x\\u2069\"}\n",
         "p.yaml:3: rules[0].owner: " BIDI_REFUSED},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"dave\\u200f\"}\n",
         "p.yaml:3: rules[0].owner: " BIDI_REFUSED},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"erin\\u061c\\u200e\"}\n",
         "p.yaml:3: rules[0].owner: " BIDI_REFUSED},
        /* Invisible characters inside a name: "al" ZWSP "ice" prints as
         * alice, which a search for the owner does not find. */
        {V "rules:\n  - {host: a.example.test, tier: 3, owner: \"al\\u200bice\", "
           "expires: 2026-12-31}\n",
         "p.yaml:3: rules[0].owner: " INVISIBLE_REFUSED},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"\\ufeffbob\"}\n",
         "p.yaml:3: rules[0].owner: " INVISIBLE_REFUSED},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"car\\u00adol\"}\n",
         "p.yaml:3: rules[0].owner: " INVISIBLE_REFUSED},
        {V "rules:\n  - {host: a.example.test, tier: 0, owner: \"da\\u2060ve \\u180eX\"}\n",
         "p.yaml:3: rules[0].owner: " INVISIBLE_REFUSED},
        {V "rules:\n  - {host: a.example.test, tier: 0, expires: 2026-02-30}\n",
         "p.yaml:3: rules[0].expires: 2026-02-30 is not a day of the calendar"},
        {V "rules:\n  - {host: a.example.test, tier: 0, expires: 2026-13-01}\n",
         "p.yaml:3: rules[0].expires: 2026-13-01 is not a day of the calendar"},
        /* well formed, but before day 0 */
        {V "rules:\n  - {host: a.example.test, tier: 0, expires: 1969-12-31}\n",
         "p.yaml:3: rules[0].expires: 1969-12-31 is before 1970-01-01, the earliest date sluice "
         "reads (dates count days from it)"},
        {V "rules:\n  - {host: a.example.test, tier: 0, expires: 31/12/2026}\n",
         "p.yaml:3: rules[0].expires: invalid date '31/12/2026' (expected YYYY-MM-DD)"},
        {V "rules:\n  - {host: a.example.test, tier: 0, agents: []}\n",
         "p.yaml:3: rules[0].agents: must not be empty"},
        {V "rules:\n  - {host: a.example.test, tier: 0, agents: [\"Ci Bot\"]}\n",
         "p.yaml:3: rules[0].agents[0]: invalid agent id 'Ci Bot' (use 1-64 of a-z, 0-9, '.', "
         "'_', '-')"},
        {V "rules:\n  - host: a.example.test\n    tier: 3\n    expires: 2026-12-31\n",
         "p.yaml:3: rules[0].owner: tier-3 rule needs an owner (the person who signs for it)"},
        {V "rules:\n  - host: a.example.test\n    tier: 3\n    owner: chaysen\n",
         "p.yaml:3: rules[0].expires: tier-3 rule needs an expiry date"},
        {V "rules:\n  - {host: a.example.test, tier: 0, rate: 10}\n",
         "p.yaml:3: rules[0].rate: expected a mapping"},
        {V "rules:\n  - {host: a.example.test, tier: 0, rate: {burst: 5}}\n",
         "p.yaml:3: rules[0].rate: needs requests or bandwidth"},
        {V "rules:\n  - {host: a.example.test, tier: 0, rate: {requests: 1, per: 0s}}\n",
         "p.yaml:3: rules[0].rate.per: must be greater than 0"},
        {V "rules:\n  - {host: a.example.test, tier: 0, rate: {requests: 1, per: 1d}}\n",
         "p.yaml:3: rules[0].rate.per: invalid period '1d' (expected e.g. 30s, 5m, 1h)"},
        {V "rules:\n  - {host: a.example.test, tier: 0, rate: {bandwidth: 1MB/s}}\n",
         "p.yaml:3: rules[0].rate.bandwidth: invalid size '1MB/s' (expected e.g. 512KiB, 10MiB, "
         "1MiB/s)"},
        {V "rules:\n  - {host: a.example.test, tier: 0, rate: {bandwidth: /s}}\n",
         "p.yaml:3: rules[0].rate.bandwidth: invalid size '/s' (expected e.g. 512KiB, 10MiB, "
         "1MiB/s)"},
        {V "rules:\n  - {host: a.example.test, tier: 0, rate: {bandwidth: 17179869184GiB/s}}\n",
         "p.yaml:3: rules[0].rate.bandwidth: '17179869184GiB/s' is too large (at most "
         "18446744073709551615 bytes, 1 byte under 16 EiB)"},
        /* per paces requests only: a bandwidth without /s next to another
         * per reads as bytes per that period, and is bytes a second */
        {V "rules:\n  - {host: a.example.test, tier: 0, rate: {bandwidth: 100MiB, per: 1h}}\n",
         "p.yaml:3: rules[0].rate.bandwidth: 100MiB is bytes a second, not per 1h: per paces "
         "requests only; write 100MiB/s if a second is meant"},
        {V "rules:\n  - host: a.example.test\n    tier: 0\n    rate:\n      requests: 600\n"
           "      per: 1m\n      bandwidth: 60MiB\n",
         "p.yaml:8: rules[0].rate.bandwidth: 60MiB is bytes a second, not per 1m: per paces "
         "requests only; write 60MiB/s if a second is meant"},
        {V "rules:\n  - {host: a.example.test, tier: 0, rate: {requests: 1, burst: -1}}\n",
         "p.yaml:3: rules[0].rate.burst: expected an integer, got '-1'"},
        {V "rules:\n  - {host: a.example.test, tier: 0, rate: {requests: 1, rps: 1}}\n",
         "p.yaml:3: rules[0].rate: unknown key 'rps' (expected one of requests, per, burst, "
         "bandwidth)"},
    };
    RUN(cases);
}

static void test_rule_warnings(void **state)
{
    (void)state;
    expect_warning(V "rules: []\n", "p.yaml:2: rules: no rules: every request will be denied");
    expect_warning(V, "p.yaml:1: rules: no rules: every request will be denied");
    expect_warning(V "rules:\n  - {host: a.example.test, tier: 0, ports: [443, 80, 443]}\n",
                   "p.yaml:3: rules[0].ports[2]: port 443 is listed twice (line 3)");
    expect_warning(V "rules:\n  - {host: a.example.test, tier: 0, methods: [GET, GET]}\n",
                   "p.yaml:3: rules[0].methods[1]: method GET is listed twice (line 3)");
    expect_warning(V "rules:\n  - {host: a.example.test, tier: 0, agents: [x]}\n",
                   "p.yaml:3: rules[0].agents[0]: agent 'x' is not defined in agents (it can "
                   "still be named by `sluice run --agent`)");
    expect_warning(V "agents: [{id: x, sources: [unix]}]\n"
                     "rules:\n  - {host: a.example.test, tier: 0, agents: [x, x]}\n",
                   "p.yaml:4: rules[0].agents[1]: agent 'x' is listed twice (line 4)");
    expect_warning(V R
                   "alerts: {sinks: [{webhook: \"http://hooks.example.test:8080/T0/secret\"}]}\n",
                   "p.yaml:5: alerts.sinks[0]: webhook to hooks.example.test:8080 over http://: "
                   "every alert, and the URL with any secret in it, would cross the network in "
                   "clear text; use https://");
    expect_warning(V R "dns: {servers: [127.0.0.53, \"192.0.2.53:5353\"]}\n",
                   "p.yaml:5: dns.servers[1]: DNS server 192.0.2.53:5353 is neither on this host "
                   "nor on a local network: its answers come over plain UDP, where a forged one "
                   "needs only a 16-bit ID; prefer a resolver on this host or on a network you "
                   "trust");
    expect_warning(V R "dns: {servers: [\"[2001:db8::53]:53\"]}\n",
                   "p.yaml:5: dns.servers[0]: DNS server [2001:db8::53]:53 is neither on this "
                   "host nor on a local network: its answers come over plain UDP, where a forged "
                   "one needs only a 16-bit ID; prefer a resolver on this host or on a network "
                   "you trust");
    expect_warning(V R "alerts: {sinks: [{webhook: \"http://10.0.0.7/hook\"}]}\n",
                   "p.yaml:5: alerts.sinks[0]: webhook to 10.0.0.7 over http://: every alert, "
                   "and the URL with any secret in it, would cross the network in clear text; "
                   "use https://");
}

/* A host written with other than ASCII matches its IDNA form: a look-alike
 * ("а" is Cyrillic) allows, or fails to deny, another name than it shows. */
static void test_unicode_host_warned(void **state)
{
    (void)state;
    expect_warning(V "rules:\n  - {host: \"\xd0\xb0pi.github.com\", tier: 1}\n",
                   "p.yaml:3: rules[0].host: '??pi.github.com' is written with characters other "
                   "than ASCII and matches xn--pi-6kc.github.com, which may not be the name it "
                   "looks like; write that form");
    expect_warning(V R "deny: [\"*.git\xd0\xbdub.com\"]\n",
                   "p.yaml:5: deny[0]: '*.git??ub.com' is written with characters other than "
                   "ASCII and matches *.xn--gitub-fye.com, which may not be the name it looks "
                   "like; write that form");
    /* a dns.static name too: a full-width "a" pins the real name to the
     * address, where a search for api.github.com finds nothing */
    expect_warning(V R "dns: {static: {\"\xef\xbd\x81pi.github.com\": 203.0.113.7}}\n",
                   "p.yaml:5: dns.static.???pi.github.com: '???pi.github.com' is written with "
                   "characters other than ASCII and matches api.github.com, which may not be the "
                   "name it looks like; write that form");
    /* the ASCII form, and an xn-- label written as such, say nothing */
    struct diag d;
    struct policy *p =
        load(V "rules:\n  - {host: xn--pi-6kc.github.com, tier: 1}\ndeny: [API.github.com]\n"
               "dns: {static: {xn--pi-6kc.github.com: 203.0.113.7}}\n"
               "network: {allow_ranges: [203.0.113.7]}\n", /* a pin denied warns */
             &d);
    assert_non_null(p);
    assert_int_equal(d.count, 0);
    policy_free(p);
    diag_free(&d);
}

/* A wildcard over a suffix of the Public Suffix List's private section
 * (workers.dev, github.io, ...) loads, with a warning at its line naming
 * the suffix: anyone registers a name under it, so the wildcard reaches
 * strangers' hosts. A company's own domain, and a deny entry, say nothing. */
static void test_private_suffix_wildcard_warned(void **state)
{
    (void)state;
    static const char *const suffixes[] = {
        "workers.dev",      "herokuapp.com",         "github.io", "blogspot.com",
        "s3.amazonaws.com", "githubusercontent.com", "ngrok.io",
    };
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        char yaml[256], want[512];
        snprintf(yaml, sizeof(yaml), V "rules:\n  - {host: \"*.%s\", tier: 0}\n", suffixes[i]);
        snprintf(want, sizeof(want),
                 "p.yaml:3: rules[0].host: *.%s: names under %s are registered by anyone "
                 "(Public Suffix List, private section): the wildcard lets the agent reach any "
                 "of them; name the hosts",
                 suffixes[i], suffixes[i]);
        expect_warning(yaml, want);
    }
    /* written in another case, with a trailing dot: the normal form named */
    expect_warning(V R "  - {host: \"*.Workers.DEV.\", tier: 0}\n",
                   "p.yaml:5: rules[1].host: *.workers.dev: names under workers.dev are "
                   "registered by anyone (Public Suffix List, private section): the wildcard "
                   "lets the agent reach any of them; name the hosts");
    /* a company's domains (github.com is no suffix of the list), one name
     * under a private suffix, the suffix itself, and a deny wildcard over
     * one: nothing to say */
    policy_free(expect_clean(V "rules:\n  - {host: \"*.example.com\", tier: 0}\n"
                               "  - {host: \"*.github.com\", tier: 0}\n"
                               "  - {host: \"*.my-app.workers.dev\", tier: 0}\n"
                               "  - {host: my-app.workers.dev, tier: 0}\n"
                               "  - {host: workers.dev, tier: 0}\n"
                               "deny: [\"*.herokuapp.com\"]\n"));
}

/* http:// to this machine (a local relay) and any https:// say nothing. */
static void test_loopback_and_https_webhooks_are_quiet(void **state)
{
    (void)state;
    static const char *quiet[] = {
        "http://127.0.0.1:9000/hook", "http://127.8.9.10/x",
        "http://localhost/x",         "http://LOCALHOST:1/",
        "http://[::1]:9000/hook",     "https://hooks.example.test/T0/secret",
    };
    for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++) {
        char yaml[256];
        snprintf(yaml, sizeof(yaml), V R "alerts: {sinks: [{webhook: \"%s\"}]}\n", quiet[i]);
        policy_free(expect_clean(yaml));
    }
}

/* A sink listed twice would get every alert twice: a warning naming both
 * lines, a webhook by its label; different sinks are not warned about. */
static void test_repeated_sink_warned(void **state)
{
    (void)state;
    expect_warning(V R "alerts:\n  sinks:\n    - webhook: https://h.example.test/a/SECRET\n"
                       "    - exec: /bin/true\n    - webhook: https://h.example.test/a/SECRET\n",
                   "p.yaml:9: alerts.sinks[2]: webhook https://h.example.test/...#ae7e3200 is "
                   "listed twice (line 7): every alert would be sent twice");
    expect_warning(V R "alerts:\n  sinks:\n    - exec: /bin/true\n    - exec: /bin/true\n",
                   "p.yaml:8: alerts.sinks[1]: exec /bin/true is listed twice (line 7): every "
                   "alert would run it twice");
    policy_free(expect_clean(V R "alerts:\n  sinks:\n    - exec: /bin/true\n"
                                 "    - webhook: https://h.example.test/a\n"
                                 "    - webhook: https://h.example.test/b\n"));
}

/* Every list that names things warns of an entry listed twice at its
 * second line, naming the first's: deny entries (as normalised), an
 * agent's sources, deny_ranges and allow_ranges (as parsed), a rule's
 * ports, methods and agents. Before, a repeated deny or sources entry
 * loaded without a word. */
static void test_repeated_list_entries_warned(void **state)
{
    (void)state;
    const char *yaml = V "agents:\n  - id: ci\n    sources:\n      - 10.0.0.0/8\n      - unix\n"
                         "      - 10.0.0.0/8\n      - unix\n"
                         "rules:\n  - host: a.example.test\n    tier: 0\n"
                         "    ports:\n      - 443\n      - 443\n"
                         "    methods:\n      - GET\n      - HEAD\n      - GET\n"
                         "    agents:\n      - ci\n      - ci\n"
                         "deny:\n  - gist.example.test\n  - \"*.b.example.test\"\n"
                         "  - Gist.Example.Test.\n  - \"*.B.example.test\"\n"
                         "network:\n  deny_ranges: [default, 192.0.2.0/24, default, 192.0.2.0/24]\n"
                         "  allow_ranges:\n    - \"::1\"\n    - ::1/128\n";
    struct diag d;
    struct policy *p = load(yaml, &d);
    static const char *const want[] = {
        "p.yaml:7: agents[0].sources[2]: 10.0.0.0/8 is listed twice (line 5)",
        "p.yaml:8: agents[0].sources[3]: unix is listed twice (line 6)",
        "p.yaml:14: rules[0].ports[1]: port 443 is listed twice (line 13)",
        "p.yaml:18: rules[0].methods[2]: method GET is listed twice (line 16)",
        "p.yaml:21: rules[0].agents[1]: agent 'ci' is listed twice (line 20)",
        "p.yaml:25: deny[2]: gist.example.test is listed twice (line 23)",
        "p.yaml:26: deny[3]: *.b.example.test is listed twice (line 24)",
        "p.yaml:28: network.deny_ranges[2]: default is listed twice (line 28)",
        "p.yaml:28: network.deny_ranges[3]: 192.0.2.0/24 is listed twice (line 28)",
        "p.yaml:31: network.allow_ranges[1]: ::1/128 is listed twice (line 30)",
    };
    bool ok = p != NULL && !diag_has_errors(&d) && d.warnings == sizeof(want) / sizeof(want[0]);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!has_entry(&d, DIAG_WARNING, want[i])) {
            print_message("wanted warning: %s\n", want[i]);
            ok = false;
        }
    if (!ok)
        dump(yaml, &d);
    assert_true(ok);
    assert_int_equal(p->ndeny, 4); /* warned of, kept: the report lists the file as written */
    policy_free(p);
    diag_free(&d);
    /* different entries are not repeats */
    policy_free(expect_clean(V "agents:\n  - {id: ci, sources: [10.0.0.0/8, 10.0.0.0/16, unix]}\n"
                               "rules:\n  - {host: a.example.test, tier: 0, agents: [ci]}\n"
                               "deny: [gist.example.test, \"*.gist.example.test\"]\n"));
}

/* Loads <head>, then 100,000 lines <pre>N<post> (N from 0),
 * then <last>: a repeat of one of them, which must be the one warning,
 * <want>. Each entry was once compared with every one before it: n^2 / 2
 * comparisons, minutes here (and hours for a 64 MiB policy in serve's
 * reload thread) before the test's timeout. The caller frees the policy. */
static struct policy *expect_one_repeat_of_many(const char *head, const char *pre, const char *post,
                                                const char *last, const char *want)
{
    size_t n = 100000, cap = n * 32 + 256, o = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    o += (size_t)snprintf(buf + o, cap - o, "%s", head);
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%zu%s", pre, i, post);
    o += (size_t)snprintf(buf + o, cap - o, "%s", last);
    struct diag d;
    diag_init(&d, FILE_NAME);
    struct policy *p = policy_load_buffer(FILE_NAME, buf, o, &d);
    assert_non_null(p);
    assert_int_equal(d.warnings, 1);
    assert_true(has_entry(&d, DIAG_WARNING, want));
    diag_free(&d);
    free(buf);
    return p;
}

/* 100,000 distinct deny entries and one repeat at the end: warned about,
 * and fast (the entries are sorted, never compared pairwise). */
static void test_repeated_deny_scale(void **state)
{
    (void)state;
    struct policy *p = expect_one_repeat_of_many(
        V R "deny:\n", "  - h", ".example.test\n", "  - h7.example.test\n",
        "p.yaml:100006: deny[100000]: h7.example.test is listed twice (line 13)");
    assert_int_equal(p->ndeny, 100001);
    policy_free(p);
}

/* A webhook URL the sink could not use fails the load (so `check` sees it)
 * and every message names it by its label: never a user:password@ nor any
 * segment of the path, nor the query, where the secret often is. */
static void test_webhook_url_errors_hide_secrets(void **state)
{
    (void)state;
    static const struct {
        const char *url, *want;
    } cases[] = {
        {"https://alerts:hunter2-SECRET@127.0.0.1:9/hook",
         "p.yaml:5: alerts.sinks[0]: webhook https://127.0.0.1:9/...#9781161c: a user name "
         "or password in the URL (USER:PASSWORD@ before the host) is not supported: sluice would "
         "not send it"},
        {"http://user:SECRETPW@hooks.example.test",
         "p.yaml:5: alerts.sinks[0]: webhook http://hooks.example.test/...#421bdd99: a user name "
         "or password in the URL (USER:PASSWORD@ before the host) is not supported: sluice would "
         "not send it"},
        {"https://a:SECRET@[::1]:8443/x?y=1",
         "p.yaml:5: alerts.sinks[0]: webhook https://[::1]:8443/...#8f376898: a user name or "
         "password in the URL (USER:PASSWORD@ before the host) is not supported: sluice would "
         "not send it"},
        {"https://hooks.example.com/services/T000/B000/XOXB-SECRET-TOKEN extra",
         "p.yaml:5: alerts.sinks[0]: webhook needs an http:// or https:// URL, got "
         "'https://hooks.example.com/...#ee8e07f8'"},
        {"https://hooks.example.test:80x/T0/SECRET-TOKEN",
         "p.yaml:5: alerts.sinks[0]: webhook https://hooks.example.test:80x/...#f80433a5: bad "
         "port"},
        {"https://[::1/T0/SECRET-TOKEN",
         "p.yaml:5: alerts.sinks[0]: webhook https://[::1/...#b1f030f5: unterminated [IPv6] "
         "host"},
        {"https://example.test:+443/", "p.yaml:5: alerts.sinks[0]: webhook "
                                       "https://example.test:+443/: bad port"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml), V R "alerts: {sinks: [{webhook: \"%s\"}]}\n", cases[i].url);
        expect_error(yaml, cases[i].want);
        struct diag d;
        policy_free(load(yaml, &d));
        char buf[1024];
        for (size_t j = 0; j < d.count; j++) {
            diag_format(&d, &d.entries[j], buf, sizeof(buf));
            if (strstr(buf, "SECRET") != NULL)
                dump(yaml, &d);
            assert_null(strstr(buf, "SECRET"));
        }
        diag_free(&d);
    }
}

static void test_duplicate_rules(void **state)
{
    (void)state;
    static const struct error_case cases[] = {
        {V "rules:\n  - {host: a.example.test, tier: 0}\n  - {host: A.Example.Test., tier: 1, "
           "ports: [443]}\n",
         "p.yaml:4: rules[1]: duplicates rules[0] (line 3): same host, methods and agents, and "
         "overlapping ports"},
        {V "rules:\n  - {host: \"*.example.test\", tier: 0}\n  - {host: b.example.test, tier: 0}\n"
           "  - {host: \"*.EXAMPLE.test\", tier: 0, ports: [80]}\n",
         "p.yaml:5: rules[2]: duplicates rules[0] (line 3): same host, methods and agents, and "
         "overlapping ports"},
        {V "rules:\n  - {cidr: 10.0.0.0/8, tier: 0, ports: [1, 2]}\n  - {cidr: 10.0.0.0/8, tier: "
           "0, ports: [3]}\n  - {cidr: 10.0.0.0/8, tier: 0, ports: [3, 4]}\n",
         "p.yaml:5: rules[2]: duplicates rules[1] (line 4): same host, methods and agents, and "
         "overlapping ports"},
        {V "agents: [{id: x, sources: [unix]}, {id: z, sources: [unix]}]\n"
           "rules:\n  - {host: a.example.test, tier: 0, methods: [GET, POST], agents: [x, z]}\n"
           "  - {host: a.example.test, tier: 0, methods: [POST, GET], agents: [z, x]}\n",
         "p.yaml:5: rules[1]: duplicates rules[0] (line 4): same host, methods and agents, and "
         "overlapping ports"},
    };
    RUN(cases);
    /* different ports, methods, agents or kind: not duplicates */
    struct policy *p = expect_clean(V "rules:\n  - {host: a.example.test, tier: 0, ports: [80]}\n"
                                      "  - {host: a.example.test, tier: 0, ports: [443]}\n"
                                      "  - {host: a.example.test, tier: 0, methods: [GET]}\n"
                                      "  - {host: \"*.a.example.test\", tier: 0}\n"
                                      "  - {cidr: 10.0.0.0/8, tier: 0}\n"
                                      "  - {cidr: 10.0.0.0/16, tier: 0}\n");
    policy_free(p);
}

/* 100,000 distinct rules and one duplicate at the end: found, and fast. */
static void test_duplicate_rules_scale(void **state)
{
    (void)state;
    size_t n = 100000, cap = n * 48 + 256, o = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    o += (size_t)snprintf(buf + o, cap - o, "version: 1\nrules:\n");
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(buf + o, cap - o, "  - {host: h%zu.example.test, tier: 0}\n", i);
    o += (size_t)snprintf(buf + o, cap - o, "  - {host: h7.example.test, tier: 1, ports: [80]}\n");
    struct diag d;
    diag_init(&d, FILE_NAME);
    assert_null(policy_load_buffer(FILE_NAME, buf, o, &d));
    assert_int_equal(d.errors, 1);
    assert_true(has_entry(&d, DIAG_ERROR,
                          "p.yaml:100003: rules[100000]: duplicates rules[7] (line 10): same host, "
                          "methods and agents, and overlapping ports"));
    diag_free(&d);
    free(buf);
}

/* A list of 5,000 bad ports: the first 1,000 errors are listed and the
 * rest counted in one closing error. Every finding was kept: a 4 MB policy
 * made two million of them, 294 MB in serve and 2.2 GB in check. The same
 * for warnings, and the policy still loads. */
static char *ports_policy(size_t n, const char *port, size_t *len)
{
    size_t cap = n * (strlen(port) + 2) + 256, o = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    o += (size_t)snprintf(buf + o, cap - o,
                          V "rules:\n  - host: a.example.test\n    tier: 0\n"
                            "    ports: [");
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? "," : "", port);
    o += (size_t)snprintf(buf + o, cap - o, "]\n");
    *len = o;
    return buf;
}

static void test_findings_capped(void **state)
{
    (void)state;
    size_t len;
    char *buf = ports_policy(5000, "x", &len);
    struct diag d;
    diag_init(&d, FILE_NAME);
    assert_null(policy_load_buffer(FILE_NAME, buf, len, &d));
    assert_int_equal(d.errors, 1001);
    assert_true(has_entry(&d, DIAG_ERROR,
                          "p.yaml:5: rules[0].ports[999]: expected an integer, "
                          "got 'x'"));
    assert_false(has_entry(&d, DIAG_ERROR,
                           "p.yaml:5: rules[0].ports[1000]: expected an integer, "
                           "got 'x'"));
    assert_true(has_entry(&d, DIAG_ERROR,
                          "p.yaml: 4000 more errors not listed (the first 1000 "
                          "are): fix those and check again"));
    diag_free(&d);
    free(buf);

    buf = ports_policy(5000, "443", &len);
    diag_init(&d, FILE_NAME);
    struct policy *p = policy_load_buffer(FILE_NAME, buf, len, &d);
    assert_non_null(p);
    assert_int_equal(p->rules[0].nports, 1);
    assert_int_equal(d.errors, 0);
    assert_int_equal(d.warnings, 1001);
    assert_true(
        has_entry(&d, DIAG_WARNING, "p.yaml: 3999 more warnings not listed (the first 1000 are)"));
    policy_free(p);
    diag_free(&d);
    free(buf);
}

static void test_rule_errors_past_the_cap(void **state)
{
    /* A rule whose errors come after the first 1000 still has them: it
     * stays out of the duplicate check, which reads each rule's host
     * (a rule without one went there and crashed the load). */
    (void)state;
    size_t len;
    char *ports = ports_policy(1000, "x", &len);
    const char tail[] = "  - tier: 1\n  - tier: 1\n";
    char *buf = malloc(len + sizeof(tail));
    assert_non_null(buf);
    memcpy(buf, ports, len);
    memcpy(buf + len, tail, sizeof(tail));
    struct diag d;
    diag_init(&d, FILE_NAME);
    assert_null(policy_load_buffer(FILE_NAME, buf, len + sizeof(tail) - 1, &d));
    assert_int_equal(d.errors, 1001);
    assert_true(has_entry(&d, DIAG_ERROR,
                          "p.yaml: 2 more errors not listed (the first 1000 are): fix those "
                          "and check again"));
    diag_free(&d);
    free(buf);
    free(ports);
}

/* Loads a policy whose <section> (after "version: 1\n<before>") is a flow
 * list of <n> items <item>, and expects it refused with the error <want>
 * alone (the list is refused whole, before its items are read). */
static void expect_list_too_long(const char *before, const char *section, const char *item,
                                 size_t n, const char *want)
{
    size_t ilen = strlen(item), cap = n * (ilen + 1) + 128, o = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    o += (size_t)snprintf(buf + o, cap - o, "version: 1\n%s%s: [", before, section);
    for (size_t i = 0; i < n; i++) {
        memcpy(buf + o, item, ilen);
        buf[o + ilen] = ',';
        o += ilen + 1;
    }
    buf[o - 1] = ']';
    struct diag d;
    diag_init(&d, FILE_NAME);
    assert_null(policy_load_buffer(FILE_NAME, buf, o, &d));
    assert_true(has_entry(&d, DIAG_ERROR, want));
    assert_int_equal(d.errors, 1);
    diag_free(&d);
    free(buf);
}

static void test_too_many_rules(void **state)
{
    (void)state;
    expect_list_too_long("", "rules", "{}", POLICY_MAX_RULES + 1,
                         "p.yaml:2: rules: too many rules (at most 1000000)");
}

/* alerts.sinks holds at most POLICY_MAX_SINKS (64): each webhook makes a
 * TLS context of its own, the system's CA store read into it (some 45 ms
 * and hundreds of KiB), at start and for each new one at a reload, on the
 * loop. 512 webhooks held serve's start 24 s; 200,000 (an 8 MB policy)
 * had it at 11 GB after 10 minutes, not serving yet. The list is refused
 * whole, its items unread; 64 load, a repeat among them still warned of. */
static void test_too_many_sinks(void **state)
{
    (void)state;
    expect_list_too_long(R "alerts:\n  ", "sinks", "{exec: /usr/bin/s}", POLICY_MAX_SINKS + 1,
                         "p.yaml:6: alerts.sinks: too many alert sinks (at most 64)");
    expect_list_too_long(R "alerts:\n  ", "sinks", "{webhook: \"https://127.0.0.1:9/x\"}", 100001,
                         "p.yaml:6: alerts.sinks: too many alert sinks (at most 64)");
    char yaml[8192];
    size_t o = (size_t)snprintf(yaml, sizeof(yaml), V R "alerts:\n  sinks:\n");
    for (int i = 0; i < POLICY_MAX_SINKS - 1; i++)
        o += (size_t)snprintf(yaml + o, sizeof(yaml) - o, "    - exec: /usr/bin/s%d\n", i);
    snprintf(yaml + o, sizeof(yaml) - o, "    - exec: /usr/bin/s7\n");
    expect_warning(yaml, "p.yaml:70: alerts.sinks[63]: exec /usr/bin/s7 is listed twice (line "
                         "14): every alert would run it twice");
}

/* A rule whose every host the deny list covers never applies (deny is
 * checked first): check's report would list it in every agent's reach. */
static void test_rules_the_deny_list_covers(void **state)
{
    (void)state;
    expect_warning(
        V "rules:\n  - host: gist.github.com\n    tier: 0\ndeny: [x.test, GIST.github.com]\n",
        "p.yaml:3: rules[0].host: gist.github.com is denied by deny[1] (line 5): the deny "
        "list is checked first, so this rule never applies");
    expect_warning(V
                   "rules:\n  - host: a.b.example.test\n    tier: 0\ndeny: [\"*.example.test\"]\n",
                   "p.yaml:3: rules[0].host: a.b.example.test is denied by deny[0] (line 5): the "
                   "deny list is checked first, so this rule never applies");
    expect_warning(
        V "rules:\n  - host: \"*.example.test\"\n    tier: 0\ndeny: [\"*.example.test\"]\n",
        "p.yaml:3: rules[0].host: *.example.test is denied by deny[0] (line 5): the "
        "deny list is checked first, so this rule never applies");
    expect_warning(V "rules:\n  - host: \"*.a.example.test\"\n    tier: 0\ndeny:\n  - "
                     "\"*.example.test\"\n",
                   "p.yaml:3: rules[0].host: *.a.example.test is denied by deny[0] (line 6): the "
                   "deny list is checked first, so this rule never applies");
    /* Covered in part only, or not at all: no warning. */
    policy_free(expect_clean(V "rules:\n  - host: \"*.example.test\"\n    tier: 0\ndeny: "
                               "[a.example.test, \"*.a.example.test\"]\n"));
    policy_free(expect_clean(V "rules:\n  - host: example.test\n    tier: 0\ndeny: "
                               "[\"*.example.test\", b.example.test]\n"));
    policy_free(
        expect_clean(V "rules:\n  - cidr: 10.0.0.0/8\n    tier: 0\ndeny: [\"*.example.test\"]\n"));
}

/* A tunnel is held to its deciding rule's rate and DECISION_LIMITS_MAX
 * (8) others' (match.c, conclude_limits()): a tenth rate over the same
 * name, agent and port is not applied to it, which the load warns of at
 * that rate; nine (the deciding one and 8) load clean. */
static void test_tunnel_rates_past_the_slots(void **state)
{
    (void)state;
#define NINE                                                                                       \
    "rules:\n  - {host: a.example.test, tier: 0, rate: {requests: 10}}\n"                          \
    "  - {host: a.example.test, tier: 0, methods: [GET], rate: {requests: 10}}\n"                  \
    "  - {host: a.example.test, tier: 0, methods: [HEAD], rate: {requests: 10}}\n"                 \
    "  - {host: a.example.test, tier: 0, methods: [POST], rate: {requests: 10}}\n"                 \
    "  - {host: a.example.test, tier: 0, methods: [PUT], rate: {requests: 10}}\n"                  \
    "  - {host: a.example.test, tier: 0, methods: [PATCH], rate: {requests: 10}}\n"                \
    "  - {host: a.example.test, tier: 0, methods: [DELETE], rate: {requests: 10}}\n"               \
    "  - {host: a.example.test, tier: 0, methods: [OPTIONS], rate: {requests: 10}}\n"              \
    "  - {host: a.example.test, tier: 0, methods: [TRACE], rate: {requests: 10}}\n"
#define LEFT_OUT(who)                                                                              \
    "p.yaml:12: rules[9].rate: not applied to tunnels to a.example.test (" who ", port 80): 10 "   \
    "rules with a rate cover them, and a tunnel (CONNECT, or a method no rule names) is held to "  \
    "its deciding rule's and 8 others' only (the grant that sets its tier first, then the most "   \
    "specific pattern, then file order); this rate is left out: merge the rates, or narrow the "   \
    "rules"
    policy_free(expect_clean(V NINE));
    expect_warning(V NINE "  - {host: \"*.example.test\", tier: 0, rate: {requests: 10}}\n",
                   LEFT_OUT("every agent"));
    expect_warning(V NINE "  - {host: \"*.example.test\", tier: 0, agents: [ci], rate: "
                          "{bandwidth: 1KiB/s}}\n",
                   LEFT_OUT("agent 'ci'"));
    /* on another port, or without a rate, the tenth meets no full slots */
    policy_free(expect_clean(V NINE "  - {host: \"*.example.test\", tier: 0, ports: [8443], "
                                    "rate: {requests: 10}}\n"));
    policy_free(expect_clean(V NINE "  - {host: \"*.example.test\", tier: 0}\n"));
#undef LEFT_OUT
#undef NINE
}

/* A bucket of size 0 is off (SPEC, Shaping): "requests: 0" or
 * "bandwidth: 0B" reads as none at all, and let everything through
 * unshaped (a rate whose buckets were both off loaded with a warning; one
 * beside a limit of the other kind, silently). Each is an error at its
 * own line that says what to write instead; a rate that limits something
 * loads clean. */
static void test_rate_of_zero(void **state)
{
    (void)state;
#define ZERO_REQ                                                                                   \
    "0 is not no requests: a bucket of size 0 is off, so it would let every request through; "     \
    "what should get nothing needs no rule (what no rule allows is denied) or a deny entry, and "  \
    "a rate that limits bandwidth only leaves requests out"
#define ZERO_BW(v)                                                                                 \
    v " is not no bytes: a bucket of size 0 is off, so it would let every byte through; what "     \
      "should get nothing needs no rule (what no rule allows is denied) or a deny entry, and a "   \
      "rate that limits requests only leaves bandwidth out"
    expect_error(V "rules:\n  - host: a.example.test\n    tier: 0\n    rate: {requests: 0}\n",
                 "p.yaml:5: rules[0].rate.requests: " ZERO_REQ);
    expect_error(V "rules:\n  - host: a.example.test\n    tier: 0\n    rate:\n"
                   "      requests: 0\n      burst: 5\n      per: 1m\n",
                 "p.yaml:6: rules[0].rate.requests: " ZERO_REQ);
    expect_error(V R "limits:\n  rate: {requests: 0, bandwidth: 1KiB/s}\n",
                 "p.yaml:6: limits.rate.requests: " ZERO_REQ);
    expect_error(V R "limits:\n  rate: {requests: 1, bandwidth: 0B}\n",
                 "p.yaml:6: limits.rate.bandwidth: " ZERO_BW("0B"));
    expect_error(V R "limits:\n  rate:\n    bandwidth: 0\n",
                 "p.yaml:7: limits.rate.bandwidth: " ZERO_BW("0"));
    expect_error(V "rules:\n  - host: a.example.test\n    tier: 0\n    rate:\n"
                   "      requests: 5\n      bandwidth: 0KiB/s\n",
                 "p.yaml:7: rules[0].rate.bandwidth: " ZERO_BW("0KiB/s"));
    /* both: each is told at its line */
    struct diag d;
    struct policy *p = load(V R "limits:\n  rate:\n    requests: 0\n    bandwidth: 0B/s\n", &d);
    assert_null(p);
    assert_int_equal(d.errors, 2);
    assert_true(has_entry(&d, DIAG_ERROR, "p.yaml:7: limits.rate.requests: " ZERO_REQ));
    assert_true(has_entry(&d, DIAG_ERROR, "p.yaml:8: limits.rate.bandwidth: " ZERO_BW("0B/s")));
    diag_free(&d);
    policy_free(expect_clean(V R "limits:\n  rate: {bandwidth: 1KiB/s}\n"));
    policy_free(expect_clean(V R "limits:\n  rate: {requests: 1, burst: 0}\n"));
    /* an error in it is told as such, not as a rate of 0 */
    p = load(V R "limits:\n  rate: {requests: -1}\n", &d);
    assert_null(p);
    assert_int_equal(d.count, 1);
    assert_true(has_entry(&d, DIAG_ERROR,
                          "p.yaml:6: limits.rate.requests: expected an integer, "
                          "got '-1'"));
    diag_free(&d);
#undef ZERO_BW
#undef ZERO_REQ
}

/* The findings made once the whole file is read (a rule the deny list
 * covers, a cidr: rule that opens a denied range, a shadowed source, a
 * shared secret, a repeated agent id) name the line of the field they name,
 * as the others do: in block style that is not the line of the item's
 * first key. */
static void test_late_findings_name_their_fields_line(void **state)
{
    (void)state;
    expect_warning(V "rules:\n  - tier: 0\n    host: gist.github.com\ndeny: [gist.github.com]\n",
                   "p.yaml:4: rules[0].host: gist.github.com is denied by deny[0] (line 5): the "
                   "deny list is checked first, so this rule never applies");
    expect_warning(V "rules:\n  - tier: 0\n    ports: [80]\n    cidr: \"64:ff9b::/64\"\n",
                   "p.yaml:5: rules[0].cidr: '64:ff9b::/64' holds 64:ff9b::/96 (nat64, whose "
                   "addresses embed IPv4 ones such as 169.254.169.254, the cloud metadata "
                   "address): an IP literal this rule allows skips deny_ranges, so the rule opens "
                   "it; name a narrower range, or the denied range itself if you mean it");
    expect_warning(V "agents:\n  - id: wide\n    sources: [127.0.0.0/8]\n  - id: narrow\n"
                     "    mode: enforce\n    sources: [127.0.0.1/32]\n" R,
                   "p.yaml:7: agents[1].sources: '127.0.0.1/32' is never used: agents[0] (wide), "
                   "earlier in the file and without a token, holds it too (a client that "
                   "presents no secret is the first agent whose sources hold it, not the most "
                   "specific)");
    setenv("SLUICE_TEST_TOKEN", "s3cret-token-for-tests", 1);
    expect_warning(V "agents:\n  - id: a\n    sources: [unix]\n    token: env:SLUICE_TEST_TOKEN\n"
                     "  - id: b\n    sources: [10.0.0.0/8]\n    token: env:SLUICE_TEST_TOKEN\n" R,
                   "p.yaml:8: agents[1].token: the same secret as agents[0] (a, line 3), earlier "
                   "in the file: a client that presents it is the first of them whose sources "
                   "hold it; give each agent a token of its own");
    expect_error(V "agents:\n  - sources: [unix]\n    id: a\n  - sources: [10.0.0.0/8]\n"
                   "    id: a\n" R,
                 "p.yaml:6: agents[1].id: duplicate agent id 'a' (first at line 4)");
}

/* Each deny entry holds a whole host pattern (some 260 bytes): a 64 MiB
 * list of "a.b," would have made 16 million of them, over 4 GB. */
static void test_too_many_deny_entries(void **state)
{
    (void)state;
    expect_list_too_long("rules: []\n", "deny", "a.b", POLICY_MAX_DENY + 1,
                         "p.yaml:3: deny: too many deny entries (at most 1000000)");
}

/* Each item of agents: gets a struct agent before it is read: a 64 MiB
 * list of "1," would have made 32 million of them, some 2 GB. */
static void test_too_many_agents(void **state)
{
    (void)state;
    expect_list_too_long("rules: []\n", "agents", "1", POLICY_MAX_AGENTS + 1,
                         "p.yaml:3: agents: too many agents (at most 1000000)");
}

/* ---- deny, network, dns, limits ----------------------------------------- */

static void test_other_section_errors(void **state)
{
    (void)state;
    static const struct error_case cases[] = {
        {V R "deny: gist.github.com\n", "p.yaml:5: deny: expected a list"},
        {V R "deny: [ok.example.test, 127.0.0.1]\n", NULL},
        {V R "network: []\n", "p.yaml:5: network: expected a mapping"},
        {V R "network: {deny_ranges: none}\n",
         "p.yaml:5: network.deny_ranges: expected \"default\" or a list of CIDRs"},
        {V R "network: {deny_ranges: [default, 10.0.0.1/8]}\n",
         "p.yaml:5: network.deny_ranges[1]: invalid CIDR '10.0.0.1/8': host bits set below the "
         "prefix"},
        {V R "network: {allow_ranges: 127.0.0.0/8}\n",
         "p.yaml:5: network.allow_ranges: expected a list"},
        {V R "network: {allow_ranges: [default]}\n",
         "p.yaml:5: network.allow_ranges[0]: invalid CIDR 'default'"},
        {V R "network: {allow: []}\n",
         "p.yaml:5: network: unknown key 'allow' (expected one of deny_ranges, allow_ranges, "
         "encrypted_client_hello)"},
        {V R "network: {encrypted_client_hello: pass}\n",
         "p.yaml:5: network.encrypted_client_hello: unknown value 'pass' (expected refuse or "
         "allow)"},
        {V R "network: {encrypted_client_hello: [allow]}\n",
         "p.yaml:5: network.encrypted_client_hello: expected a string"},
        {V R "dns: []\n", "p.yaml:5: dns: expected a mapping"},
        {V R "dns: {servers: 1.1.1.1}\n", "p.yaml:5: dns.servers: expected a list"},
        {V R "dns: {servers: [127.0.0.1, 127.0.0.2, 127.0.0.3, 127.0.0.4, 127.0.0.5, 127.0.0.6, "
             "127.0.0.7, 127.0.0.8, 127.0.0.9]}\n",
         "p.yaml:5: dns.servers: too many DNS servers (at most 8)"},
        {V R "dns: {servers: [\"1.1.1.1:0\"]}\n",
         "p.yaml:5: dns.servers[0]: invalid DNS server '1.1.1.1:0' (expected IP, IP:PORT or "
         "[IPv6]:PORT)"},
        {V R "dns: {servers: [dns.example.test]}\n",
         "p.yaml:5: dns.servers[0]: invalid DNS server 'dns.example.test' (expected IP, IP:PORT or "
         "[IPv6]:PORT)"},
        {V R "dns: {servers: [\"[::1]\"]}\n",
         "p.yaml:5: dns.servers[0]: invalid DNS server '[::1]' (expected IP, IP:PORT or "
         "[IPv6]:PORT)"},
        {V R "dns: {servers: [\"[1.2.3.4]:53\"]}\n",
         "p.yaml:5: dns.servers[0]: invalid DNS server '[1.2.3.4]:53' (expected IP, IP:PORT or "
         "[IPv6]:PORT)"},
        {V R "dns: {servers: [\"127.1\"]}\n",
         "p.yaml:5: dns.servers[0]: invalid DNS server '127.1' (expected IP, IP:PORT or "
         "[IPv6]:PORT)"},
        {V R "dns: {static: [a]}\n", "p.yaml:5: dns.static: expected a mapping"},
        {V R "dns: {static: {bad_name!: 127.0.0.1}}\n", NULL},
        {V R "dns: {static: {127.0.0.1: 127.0.0.2}}\n",
         "p.yaml:5: dns.static.127.0.0.1: '127.0.0.1' is an IP address, not a name"},
        {V R "dns: {static: {a.example.test: 127.1}}\n",
         "p.yaml:5: dns.static.a.example.test: invalid IP address '127.1' (write it canonically, "
         "e.g. 127.0.0.2 or ::1)"},
        {V R "dns: {static: {a.example.test: \"0:0::1\"}}\n",
         "p.yaml:5: dns.static.a.example.test: invalid IP address '0:0::1' (write it "
         "canonically, e.g. 127.0.0.2 or ::1)"},
        {V R "dns: {static: {a.example.test: ~}}\n",
         "p.yaml:5: dns.static.a.example.test: expected a string, not YAML's null '~'"},
        {V R "dns: {static: {[a]: 127.0.0.1}}\n", "p.yaml:5: dns.static: expected a string key"},
        {V R "dns:\n  static:\n    a.example.test: 127.0.0.1\n    A.example.test.: 127.0.0.2\n",
         "p.yaml:8: dns.static.a.example.test: duplicate key 'a.example.test' (first at line 7)"},
        {V R "limits: 1\n", "p.yaml:5: limits: expected a mapping"},
        {V R "limits: {max_connections_per_agent: 0}\n",
         "p.yaml:5: limits.max_connections_per_agent: must be at least 1"},
        {V R "limits: {max_connections_per_agent: 4294967296}\n",
         "p.yaml:5: limits.max_connections_per_agent: 4294967296 is too large (at most "
         "4294967295)"},
        {V R "limits: {quarantine: soon}\n",
         "p.yaml:5: limits.quarantine: invalid period 'soon' (expected e.g. 30s, 5m, 1h)"},
        {V R "limits: {header_bytes: 512B}\n",
         "p.yaml:5: limits.header_bytes: 512B is outside 1KiB-1MiB"},
        {V R "limits: {header_bytes: 2MiB}\n",
         "p.yaml:5: limits.header_bytes: 2MiB is outside 1KiB-1MiB"},
        {V R "limits: {header_bytes: 99999999999999999999GiB}\n",
         "p.yaml:5: limits.header_bytes: 99999999999999999999GiB is outside 1KiB-1MiB"},
        {V R "alerts: {upload_bytes: {max: 99999999999999999999GiB, per: 1m}}\n",
         "p.yaml:5: alerts.upload_bytes.max: '99999999999999999999GiB' is too large (at most "
         "18446744073709551615 bytes, 1 byte under 16 EiB)"},
        {V R "limits: {header_bytes: 32KB}\n",
         "p.yaml:5: limits.header_bytes: invalid size '32KB' (expected e.g. 512KiB, 10MiB)"},
        {V R "limits: {header_bytes: 32KiB/s}\n",
         "p.yaml:5: limits.header_bytes: invalid size '32KiB/s' (expected e.g. 512KiB, 10MiB)"},
        {V R "limits: {idle_timeout: 0s}\n", "p.yaml:5: limits.idle_timeout: must be at least 1s"},
        {V R "limits: {rate: {per: 1s}}\n", "p.yaml:5: limits.rate: needs requests or bandwidth"},
        {V R "limits: {max_conns: 1}\n",
         "p.yaml:5: limits: unknown key 'max_conns' (expected one of rate, "
         "max_connections_per_agent, quarantine, header_bytes, idle_timeout)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (cases[i].want != NULL) {
            expect_error(cases[i].yaml, cases[i].want);
            continue;
        }
        struct diag d; /* host module phrases: only the prefix is ours */
        assert_null(load(cases[i].yaml, &d));
        char buf[512];
        diag_format(&d, diag_first_error(&d), buf, sizeof(buf));
        bool ok =
            strncmp(buf, "p.yaml:5: deny[1]: invalid host pattern '127.0.0.1': ", 53) == 0 ||
            strncmp(buf, "p.yaml:5: dns.static.bad_name!: invalid name 'bad_name!': ", 58) == 0;
        if (!ok)
            print_message("got: %s\n", buf);
        assert_true(ok);
        diag_free(&d);
    }
}

/* ---- alerts ---------------------------------------------------------------- */

static void test_alert_errors(void **state)
{
    (void)state;
    static const struct error_case cases[] = {
        {V R "alerts: []\n", "p.yaml:5: alerts: expected a mapping"},
        {V R "alerts: {first_contact: yes}\n",
         "p.yaml:5: alerts.first_contact: expected true or false"},
        {V R "alerts: {first_contact: \"true\"}\n",
         "p.yaml:5: alerts.first_contact: expected true or false"},
        {V R "alerts: {write_burst: 5}\n", "p.yaml:5: alerts.write_burst: expected a mapping"},
        {V R "alerts: {write_burst: {per: 1m}}\n", "p.yaml:5: alerts.write_burst.max: is required"},
        {V R "alerts: {denied_burst: {max: 0}}\n",
         "p.yaml:5: alerts.denied_burst.max: must be at least 1"},
        {V R "alerts: {denied_burst: {max: 1, per: 0}}\n",
         "p.yaml:5: alerts.denied_burst.per: must be greater than 0"},
        {V R "alerts: {auth_failures: {max: 0}}\n",
         "p.yaml:5: alerts.auth_failures.max: must be at least 1"},
        {V R "alerts: {auth_failures: {max: 1, per: 0}}\n",
         "p.yaml:5: alerts.auth_failures.per: must be greater than 0"},
        {V R "alerts: {auth_failures: {per: 1m}}\n",
         "p.yaml:5: alerts.auth_failures.max: is required"},
        {V R "alerts: {auth_failures: {max: ten}}\n",
         "p.yaml:5: alerts.auth_failures.max: expected an integer, got 'ten'"},
        {V R "alerts: {auth_failures: {max: 1, window: 1m}}\n",
         "p.yaml:5: alerts.auth_failures: unknown key 'window' (expected one of max, per)"},
        {V R "alerts: {auth_failures: 10}\n", "p.yaml:5: alerts.auth_failures: expected a mapping"},
        {V R "alerts: {upload_bytes: {max: 0B}}\n",
         "p.yaml:5: alerts.upload_bytes.max: must be at least 1B"},
        {V R "alerts: {upload_bytes: {max: lots}}\n",
         "p.yaml:5: alerts.upload_bytes.max: invalid size 'lots' (expected e.g. 512KiB, 10MiB)"},
        {V R "alerts: {upload_bytes: {max: 1, window: 1m}}\n",
         "p.yaml:5: alerts.upload_bytes: unknown key 'window' (expected one of max, per)"},
        {V R "alerts: {off_hours: 1}\n", "p.yaml:5: alerts.off_hours: expected a mapping"},
        {V R "alerts: {off_hours: {tz: UTC}}\n", "p.yaml:5: alerts.off_hours.hours: is required"},
        {V R "alerts: {off_hours: {tz: ../etc/passwd, hours: \"08:00-19:00\"}}\n",
         "p.yaml:5: alerts.off_hours.tz: invalid time zone '../etc/passwd'"},
        {V R "alerts: {off_hours: {tz: /etc/passwd, hours: \"08:00-19:00\"}}\n",
         "p.yaml:5: alerts.off_hours.tz: invalid time zone '/etc/passwd'"},
        {V R "alerts: {off_hours: {tz: Mars/Olympus, hours: \"08:00-19:00\"}}\n",
         "p.yaml:5: alerts.off_hours.tz: unknown time zone 'Mars/Olympus' (no such file under "
         "/usr/share/zoneinfo/)"},
        {V R "alerts: {off_hours: {hours: \"8:00-19:00\"}}\n",
         "p.yaml:5: alerts.off_hours.hours: invalid hours '8:00-19:00' (expected HH:MM-HH:MM, "
         "e.g. 08:00-19:00)"},
        {V R "alerts: {off_hours: {hours: \"08:00-19:60\"}}\n",
         "p.yaml:5: alerts.off_hours.hours: invalid hours '08:00-19:60' (expected HH:MM-HH:MM, "
         "e.g. 08:00-19:00)"},
        {V R "alerts: {off_hours: {hours: \"24:00-08:00\"}}\n",
         "p.yaml:5: alerts.off_hours.hours: invalid hours '24:00-08:00' (expected HH:MM-HH:MM, "
         "e.g. 08:00-19:00)"},
        {V R "alerts: {off_hours: {hours: \"08:00-24:01\"}}\n",
         "p.yaml:5: alerts.off_hours.hours: invalid hours '08:00-24:01' (expected HH:MM-HH:MM, "
         "e.g. 08:00-19:00)"},
        {V R "alerts: {off_hours: {hours: \"08:00 19:00\"}}\n",
         "p.yaml:5: alerts.off_hours.hours: invalid hours '08:00 19:00' (expected HH:MM-HH:MM, "
         "e.g. 08:00-19:00)"},
        {V R "alerts: {off_hours: {hours: \"08:00-08:00\"}}\n",
         "p.yaml:5: alerts.off_hours.hours: start and end of '08:00-08:00' are the same"},
        {V R "alerts: {off_hours: {hours: \"08:00-19:00\", days: mon-fri}}\n",
         "p.yaml:5: alerts.off_hours.days: invalid days 'mon-fri' (expected e.g. Mon-Fri, "
         "Mon,Wed,Fri or a list of Mon..Sun)"},
        {V R "alerts: {off_hours: {hours: \"08:00-19:00\", days: \"Mon,\"}}\n",
         "p.yaml:5: alerts.off_hours.days: invalid days 'Mon,' (expected e.g. Mon-Fri, "
         "Mon,Wed,Fri or a list of Mon..Sun)"},
        {V R "alerts: {off_hours: {hours: \"08:00-19:00\", days: Monday}}\n",
         "p.yaml:5: alerts.off_hours.days: invalid days 'Monday' (expected e.g. Mon-Fri, "
         "Mon,Wed,Fri or a list of Mon..Sun)"},
        {V R "alerts: {off_hours: {hours: \"08:00-19:00\", days: []}}\n",
         "p.yaml:5: alerts.off_hours.days: must not be empty"},
        {V R "alerts: {off_hours: {hours: \"08:00-19:00\", days: [Mon, Fry]}}\n",
         "p.yaml:5: alerts.off_hours.days[1]: invalid day 'Fry' (expected Mon, Tue, Wed, Thu, "
         "Fri, Sat or Sun)"},
        {V R "alerts: {baseline: {floor: 1}}\n", "p.yaml:5: alerts.baseline.factor: is required"},
        {V R "alerts: {baseline: {factor: 1}}\n",
         "p.yaml:5: alerts.baseline.factor: must be greater than 1"},
        {V R "alerts: {baseline: {factor: 1.0}}\n",
         "p.yaml:5: alerts.baseline.factor: must be greater than 1"},
        {V R "alerts: {baseline: {factor: 1e3}}\n",
         "p.yaml:5: alerts.baseline.factor: expected a number such as 4 or 2.5"},
        {V R "alerts: {baseline: {factor: 2.}}\n",
         "p.yaml:5: alerts.baseline.factor: expected a number such as 4 or 2.5"},
        {V R "alerts: {baseline: {factor: .nan}}\n",
         "p.yaml:5: alerts.baseline.factor: expected a number such as 4 or 2.5"},
        {V R "alerts: {baseline: {factor: \"3\"}}\n",
         "p.yaml:5: alerts.baseline.factor: expected a number such as 4 or 2.5"},
        {V R "alerts: {baseline: {factor: 2, learn: 0s}}\n",
         "p.yaml:5: alerts.baseline.learn: must be greater than 0"},
        {V R "alerts: {baseline: {factor: 2, floor: x}}\n",
         "p.yaml:5: alerts.baseline.floor: expected an integer, got 'x'"},
        {V R "alerts: {expiry_warn_days: 3651}\n",
         "p.yaml:5: alerts.expiry_warn_days: 3651 is too large (at most 3650)"},
        {V R "alerts: {expiry_warn_days: 18446744073709551616}\n",
         "p.yaml:5: alerts.expiry_warn_days: 18446744073709551616 is too large (at most 3650)"},
        /* periods: at most 87600h (3650 days); the watch adds them to clocks
         * in ms, which 2.5 billion hours overflowed */
        {V R "alerts: {baseline: {factor: 2, learn: 3000000000h}}\n",
         "p.yaml:5: alerts.baseline.learn: 3000000000h is too long (at most 87600h, 3650 days)"},
        {V R "alerts: {write_burst: {max: 1, per: 87601h}}\n",
         "p.yaml:5: alerts.write_burst.per: 87601h is too long (at most 87600h, 3650 days)"},
        {V R "alerts: {denied_burst: {max: 1, per: 5256000001s}}\n",
         "p.yaml:5: alerts.denied_burst.per: 5256000001s is too long (at most 87600h, 3650 "
         "days)"},
        {V R "limits: {quarantine: 5256001m}\n",
         "p.yaml:5: limits.quarantine: 5256001m is too long (at most 87600h, 3650 days)"},
        /* past 64 bits too: too long, not an invalid period */
        {V R "limits: {quarantine: 18446744073709551616s}\n",
         "p.yaml:5: limits.quarantine: 18446744073709551616s is too long (at most 87600h, 3650 "
         "days)"},
        {V R "alerts: {write_burst: {max: 1, per: 5124095576031h}}\n",
         "p.yaml:5: alerts.write_burst.per: 5124095576031h is too long (at most 87600h, 3650 "
         "days)"},
        {V R "limits: {idle_timeout: 87601h}\n",
         "p.yaml:5: limits.idle_timeout: 87601h is too long (at most 87600h, 3650 days)"},
        {V R "limits: {rate: {requests: 1, per: 87601h}}\n",
         "p.yaml:5: limits.rate.per: 87601h is too long (at most 87600h, 3650 days)"},
        {V R "alerts: {sinks: {exec: /bin/true}}\n", "p.yaml:5: alerts.sinks: expected a list"},
        {V R "alerts: {sinks: [/bin/true]}\n",
         "p.yaml:5: alerts.sinks[0]: expected a mapping with one key, exec or webhook"},
        {V R "alerts: {sinks: [{exec: /bin/true, webhook: http://127.0.0.1/}]}\n",
         "p.yaml:5: alerts.sinks[0]: expected a mapping with one key, exec or webhook"},
        {V R "alerts: {sinks: [{mail: root}]}\n",
         "p.yaml:5: alerts.sinks[0]: unknown key 'mail' (expected one of exec, webhook)"},
        {V R "alerts: {sinks: [{exec: page-oncall}]}\n",
         "p.yaml:5: alerts.sinks[0]: exec needs an absolute path, got 'page-oncall'"},
        {V R "alerts: {sinks: [{exec: \"/bin/page me\"}]}\n",
         "p.yaml:5: alerts.sinks[0]: exec needs an absolute path, got '/bin/page me'"},
        {V R "alerts: {sinks: [{webhook: ftp://127.0.0.1/}]}\n",
         "p.yaml:5: alerts.sinks[0]: webhook needs an http:// or https:// URL, got "
         "'ftp://127.0.0.1/'"},
        {V R "alerts: {sinks: [{webhook: \"https://\"}]}\n",
         "p.yaml:5: alerts.sinks[0]: webhook needs an http:// or https:// URL, got 'https://'"},
        {V R "alerts: {sinks: [{webhook: ~}]}\n",
         "p.yaml:5: alerts.sinks[0]: expected a string, not YAML's null '~'"},
        {V R "alerts: {paging: true}\n",
         "p.yaml:5: alerts: unknown key 'paging' (expected one of first_contact, write_burst, "
         "upload_bytes, denied_burst, auth_failures, off_hours, baseline, expiry_warn_days, sinks)"},
    };
    RUN(cases);
}

/* A size or period written as bare digits has no unit: SPEC.md lists the
 * suffixed forms only, and `rate: {bandwidth: 10}` read as 10 bytes a
 * second (meant as 10 MiB/s, it throttled every transfer to a crawl) and
 * `per: 10` as 10 s, silently. 0, the same in every unit, stays. */
static void test_bare_numbers_need_a_unit(void **state)
{
    (void)state;
#define NO_SIZE_UNIT(n)                                                                            \
    "'" n "' has no unit, and a size needs one: write " n "B, " n "KiB, " n "MiB or " n "GiB"
#define NO_RATE_UNIT(n)                                                                            \
    "'" n "' has no unit, and a bandwidth needs one: write " n "B/s, " n "KiB/s, " n "MiB/s or " n \
    "GiB/s"
#define NO_PERIOD_UNIT(n)                                                                          \
    "'" n "' has no unit, and a period needs one: write " n "s, " n "m or " n "h"
    static const struct error_case cases[] = {
        {V R "limits: {rate: {bandwidth: 10}}\n",
         "p.yaml:5: limits.rate.bandwidth: " NO_RATE_UNIT("10")},
        {V R "limits: {rate: {bandwidth: 10/s}}\n",
         "p.yaml:5: limits.rate.bandwidth: " NO_RATE_UNIT("10")},
        {V R "limits: {rate: {requests: 5, per: 10}}\n",
         "p.yaml:5: limits.rate.per: " NO_PERIOD_UNIT("10")},
        {V "rules:\n  - {host: a.example.test, tier: 0, rate: {requests: 1, per: \"10\"}}\n",
         "p.yaml:3: rules[0].rate.per: " NO_PERIOD_UNIT("10")},
        {V R "limits: {quarantine: 300}\n", "p.yaml:5: limits.quarantine: " NO_PERIOD_UNIT("300")},
        {V R "limits: {header_bytes: 32768}\n",
         "p.yaml:5: limits.header_bytes: " NO_SIZE_UNIT("32768")},
        {V R "limits: {idle_timeout: 60}\n",
         "p.yaml:5: limits.idle_timeout: " NO_PERIOD_UNIT("60")},
        {V R "alerts: {upload_bytes: {max: 1000, per: 1m}}\n",
         "p.yaml:5: alerts.upload_bytes.max: " NO_SIZE_UNIT("1000")},
        {V R "alerts: {write_burst: {max: 5, per: 60}}\n",
         "p.yaml:5: alerts.write_burst.per: " NO_PERIOD_UNIT("60")},
        {V R "alerts: {baseline: {factor: 4, floor: 30, learn: 86400}}\n",
         "p.yaml:5: alerts.baseline.learn: " NO_PERIOD_UNIT("86400")},
    };
#undef NO_SIZE_UNIT
#undef NO_RATE_UNIT
#undef NO_PERIOD_UNIT
    RUN(cases);
    /* 0 means the same in any unit (a bandwidth of 0 is refused for its
     * own reason: test_rate_of_zero); counts (requests, burst, max,
     * floor) have no unit */
    struct policy *p =
        expect_clean(V R "limits:\n  quarantine: 0\n"
                         "  rate: {requests: 5, per: 1s, burst: 10}\n"
                         "alerts: {write_burst: {max: 5}, baseline: {factor: 4, floor: 30}}\n");
    assert_int_equal(p->limits.quarantine_ms, 0);
    policy_free(p);
}

/* A quarantine starts when alerts.denied_burst trips (src/shape/quota.c):
 * without it, limits.quarantine never does, which the policy's reader
 * would not guess. */
static void test_quarantine_without_denied_burst_warns(void **state)
{
    (void)state;
    static const char want[] =
        "p.yaml:5: limits.quarantine: 5m never starts: a quarantine starts when "
        "alerts.denied_burst trips, and the policy has no alerts.denied_burst; add one (e.g. "
        "denied_burst: {max: 10, per: 1m}) or remove quarantine";
    expect_warning(V R "limits: {quarantine: 5m}\n", want);
    expect_warning(V R "limits: {quarantine: 5m}\nalerts: {write_burst: {max: 5}}\n", want);
    /* with denied_burst, or a quarantine of 0 (alert only), nothing to say */
    policy_free(
        expect_clean(V R "limits: {quarantine: 5m}\nalerts: {denied_burst: {max: 10, per: 1m}}\n"));
    policy_free(expect_clean(V R "limits: {quarantine: 0s}\n"));
}

static void test_iana_tz(void **state)
{
    (void)state;
    struct stat st;
    if (stat("/usr/share/zoneinfo/Europe/Paris", &st) != 0)
        skip();
    struct policy *p =
        expect_clean(V R "alerts: {off_hours: {tz: Europe/Paris, hours: \"08:00-19:00\"}}\n");
    assert_string_equal(p->alerts.off_hours.tz, "Europe/Paris");
    policy_free(p);
    /* A file of the zone database that is not a zone: glibc cannot read it
     * as one, and takes the name for a POSIX TZ string, which is UTC. */
    if (stat("/usr/share/zoneinfo/leapseconds", &st) != 0)
        skip();
    expect_error(V R "alerts: {off_hours: {tz: leapseconds, hours: \"08:00-19:00\"}}\n",
                 "p.yaml:5: alerts.off_hours.tz: unknown time zone 'leapseconds' (/usr/share/"
                 "zoneinfo/leapseconds is not a time zone file)");
}

/* A zone under right/ counts leap seconds: glibc's clock would put every
 * off-hours boundary some 27 s late. posix/ holds the plain zones. */
static void test_right_tz_refused(void **state)
{
    (void)state;
    struct stat st;
    if (stat("/usr/share/zoneinfo/right/Europe/Berlin", &st) != 0 ||
        stat("/usr/share/zoneinfo/posix/Europe/Berlin", &st) != 0)
        skip();
    expect_error(V R "alerts: {off_hours: {tz: right/Europe/Berlin, hours: \"08:00-19:00\"}}\n",
                 "p.yaml:5: alerts.off_hours.tz: 'right/Europe/Berlin' counts leap seconds, "
                 "which would put off-hours boundaries some 27 s late; write 'Europe/Berlin'");
    struct policy *p = expect_clean(
        V R "alerts: {off_hours: {tz: posix/Europe/Berlin, hours: \"08:00-19:00\"}}\n");
    assert_string_equal(p->alerts.off_hours.tz, "posix/Europe/Berlin");
    policy_free(p);
}

/* Many errors in one file: every one is reported, not just the first. */
static void test_reports_everything(void **state)
{
    (void)state;
    static const char yaml[] = "version: 2\n"
                               "rules:\n"
                               "  - {host: a.example.test, tier: 9}\n"
                               "  - {host: a.example.test, tier: 3}\n"
                               "limits: {idle_timeout: 0s}\n";
    struct diag d;
    assert_null(load(yaml, &d));
    assert_int_equal(d.errors, 5);
    assert_true(has_entry(&d, DIAG_ERROR, "p.yaml:3: rules[0].tier: tier 9 is outside 0-3"));
    assert_true(
        has_entry(&d, DIAG_ERROR, "p.yaml:4: rules[1].expires: tier-3 rule needs an expiry date"));
    diag_free(&d);
}

/* ---- model.c ---------------------------------------------------------------- */

static void test_methods(void **state)
{
    (void)state;
    static const char *const names[] = {"GET",    "HEAD",    "POST",  "PUT",    "PATCH",
                                        "DELETE", "OPTIONS", "TRACE", "CONNECT"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        unsigned bit = method_bit(names[i]);
        assert_int_equal(bit, 1u << i);
        assert_string_equal(method_name(bit), names[i]);
    }
    assert_int_equal(method_bit("get"), METHOD_OTHER);
    assert_int_equal(method_bit("PROPFIND"), METHOD_OTHER);
    assert_int_equal(method_bit("CONNECTS"), METHOD_OTHER);
    assert_int_equal(method_bit("CONNEC"), METHOD_OTHER);
    assert_int_equal(method_bit("PO"), METHOD_OTHER);
    assert_int_equal(method_bit("T"), METHOD_OTHER);
    assert_int_equal(method_bit(""), METHOD_OTHER);
    assert_int_equal(method_bit(NULL), METHOD_OTHER);
    assert_string_equal(method_name(METHOD_OTHER), "OTHER");
    assert_string_equal(method_name(METHOD_GET | METHOD_HEAD), "?");
    assert_string_equal(method_name(0), "?");
    /* a known method in another case: refused by the gate */
    assert_true(method_is_case_variant("get"));
    assert_true(method_is_case_variant("Post"));
    assert_true(method_is_case_variant("connect"));
    assert_false(method_is_case_variant("GET"));
    assert_false(method_is_case_variant("PROPFIND"));
    assert_false(method_is_case_variant("propfind"));
    assert_false(method_is_case_variant("GETS"));
    assert_false(method_is_case_variant(""));
    assert_false(method_is_case_variant(NULL));
    policy_free(NULL);
}

/* A load whose read ends after the stop (a reload left at exit, its file
 * system answering at last) is not parsed: the process is exiting, and
 * the parse would use OpenSSL while exit() may be tearing it down. */
static void test_no_parse_once_stopping(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_load.XXXXXX";
    char path[256];
    write_policy_file(dir, path, sizeof(path), V R);
    policy_load_stop();
    struct diag d;
    diag_init(&d, path);
    assert_null(policy_load(path, &d));
    char want[600];
    snprintf(want, sizeof(want), "%s: cannot load %s: the gateway is stopping: it is not parsed",
             path, path);
    assert_true(has_entry(&d, DIAG_ERROR, want));
    diag_free(&d);
    unlink(path);
    rmdir(dir);
}

struct load_job {
    char path[256];
    struct policy *policy;
    bool not_parsed; /* refused as "the gateway is stopping" */
};

static void *load_on_thread(void *arg)
{
    struct load_job *j = arg;
    struct diag d;
    diag_init(&d, j->path);
    j->policy = policy_load(j->path, &d);
    char want[600];
    snprintf(want, sizeof(want), "%s: cannot load %s: the gateway is stopping: it is not parsed",
             j->path, j->path);
    j->not_parsed = has_entry(&d, DIAG_ERROR, want);
    diag_free(&d);
    return NULL;
}

/* A stop that comes while a load parses (its file read: a reload, the
 * start-up load) returns once the parse is over, which uses OpenSSL that
 * the exit after a stop tears down; the load is not cut. Before, the stop
 * returned at once, the parse going on beside the exit. */
static void test_stop_waits_for_a_parse_under_way(void **state)
{
    (void)state;
    enum { RULES = 20000 };
    static const char rule[] = "  - host: h%05u.example.test\n    tier: 0\n";
    size_t cap = sizeof(V) + sizeof("rules:\n") + RULES * sizeof(rule);
    char *text = malloc(cap);
    assert_non_null(text);
    size_t n = (size_t)snprintf(text, cap, V "rules:\n");
    for (unsigned i = 0; i < RULES; i++)
        n += (size_t)snprintf(text + n, cap - n, rule, i);
    char dir[] = "/tmp/test_load.XXXXXX";
    struct load_job job = {.policy = NULL};
    write_policy_file(dir, job.path, sizeof(job.path), text);
    free(text);

    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, load_on_thread, &job), 0);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do { /* until the parse is under way (30 s: a hang guard) */
        sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (policy_loads_parsing() == 0 && now.tv_sec - start.tv_sec < 30);
    assert_int_equal(policy_loads_parsing(), 1);
    /* The parse takes some 100 ms here: 5 ms into it, the load has looked
     * at the stop and found none (else it is refused unparsed: below). */
    nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
    policy_load_stop();
    assert_int_equal(policy_loads_parsing(), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    /* parsed whole, or (the stop came before it looked) not parsed at all */
    assert_true(job.policy != NULL || job.not_parsed);
    policy_free(job.policy);
    unlink(job.path);
    rmdir(dir);
}

int main(void)
{
    /* as sluice's main(): off-hours zones are converted only so (util/env.h) */
    env_tz_pin();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_example),
        cmocka_unit_test(test_owner_blank_edges_refused),
        cmocka_unit_test(test_owner_team_warned),
        cmocka_unit_test(test_repeated_list_entries_warned),
        cmocka_unit_test(test_repeated_deny_scale),
        cmocka_unit_test(test_yaml_words_are_not_names),
        cmocka_unit_test(test_host_with_port_or_url),
        cmocka_unit_test(test_unicode_host_warned),
        cmocka_unit_test(test_private_suffix_wildcard_warned),
        cmocka_unit_test(test_owner_length_capped),
        cmocka_unit_test(test_outranked_grant_warned),
        cmocka_unit_test(test_unrestricted_grant_outranked_warned),
        cmocka_unit_test(test_grant_taken_by_more_specific_rule_warned),
        cmocka_unit_test(test_grant_not_taken_not_warned),
        cmocka_unit_test(test_loaded_policy_holds_no_clear_token),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_thresholds_per_defaults_to_1s),
        cmocka_unit_test(test_network_and_days),
        cmocka_unit_test(test_cidr_without_prefix_length),
        cmocka_unit_test(test_cidr_rule_over_denied_ranges),
        cmocka_unit_test(test_pin_into_denied_range),
        cmocka_unit_test(test_longest_period),
        cmocka_unit_test(test_quoted_scalars_stay_strings),
        cmocka_unit_test(test_owner_boolean_refused),
        cmocka_unit_test(test_owner_number_refused),
        cmocka_unit_test(test_rule_agents_sorted),
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_file_changed_while_read),
        cmocka_unit_test(test_file_open_for_writing),
        cmocka_unit_test(test_file_renamed_over_while_read),
        cmocka_unit_test(test_yaml_errors),
        cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_file_size_cap),
        cmocka_unit_test(test_node_cap),
        cmocka_unit_test(test_depth_cap_exact),
        cmocka_unit_test(test_webhook_url_from_the_environment),
        cmocka_unit_test(test_agent_errors),
        cmocka_unit_test(test_empty_agents_warned),
        cmocka_unit_test(test_rule_shape_errors),
        cmocka_unit_test(test_rule_field_errors),
        cmocka_unit_test(test_owner_not_ascii),
        cmocka_unit_test(test_shadowed_agent_sources),
        cmocka_unit_test(test_agents_sharing_a_token),
        cmocka_unit_test(test_report_mode_agent_warns),
        cmocka_unit_test(test_token_from_a_variable_that_is_no_secret),
        cmocka_unit_test(test_secrets_unused),
        cmocka_unit_test(test_token_a_bearer_header_cannot_carry),
        cmocka_unit_test(test_token_too_short_to_resist_guessing),
        cmocka_unit_test(test_rule_warnings),
        cmocka_unit_test(test_loopback_and_https_webhooks_are_quiet),
        cmocka_unit_test(test_repeated_sink_warned),
        cmocka_unit_test(test_too_many_sinks),
        cmocka_unit_test(test_webhook_url_errors_hide_secrets),
        cmocka_unit_test(test_duplicate_rules),
        cmocka_unit_test(test_duplicate_rules_scale),
        cmocka_unit_test(test_too_many_rules),
        cmocka_unit_test(test_too_many_deny_entries),
        cmocka_unit_test(test_too_many_agents),
        cmocka_unit_test(test_rules_the_deny_list_covers),
        cmocka_unit_test(test_late_findings_name_their_fields_line),
        cmocka_unit_test(test_rate_of_zero),
        cmocka_unit_test(test_tunnel_rates_past_the_slots),
        cmocka_unit_test(test_findings_capped),
        cmocka_unit_test(test_rule_errors_past_the_cap),
        cmocka_unit_test(test_other_section_errors),
        cmocka_unit_test(test_alert_errors),
        cmocka_unit_test(test_bare_numbers_need_a_unit),
        cmocka_unit_test(test_quarantine_without_denied_burst_warns),
        cmocka_unit_test(test_iana_tz),
        cmocka_unit_test(test_right_tz_refused),
        cmocka_unit_test(test_reports_everything),
        cmocka_unit_test(test_methods),
        /* last: policy_load_stop() is for good, as at a real stop */
        cmocka_unit_test(test_stop_waits_for_a_parse_under_way),
        cmocka_unit_test(test_no_parse_once_stopping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
