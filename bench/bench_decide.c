/* bench_decide: the cost of one policy_decide() as the policy grows.
 *
 * Generates policies in code with 10, 1,000 and 100,000 rules (80% exact
 * hosts, 15% wildcards, 5% cidr:, plus a deny list of 1% + 2), indexes them, and
 * times decisions over a fixed mix of hits and misses (allowed names,
 * names under a wildcard, addresses in a cidr rule, unknown names, unknown
 * addresses, denied names, wrong ports and CONNECTs).
 *
 *   bench_decide                      time every size; one line per size:
 *                                     "decide rules=N ns_per_decision=X ratio_vs_10=R"
 *   bench_decide --count N [--rules R]
 *                                     build the R-rule policy (default 10)
 *                                     and run exactly N decisions, untimed,
 *                                     for valgrind --tool=callgrind (run it
 *                                     with N = 0 too, and subtract). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "policy/decision.h"
#include "policy/index.h"

#define NQUERIES 4096 /* a power of two */
#define ROUNDS   7

static uint16_t web_ports[2] = {80, 443};
static uint16_t tls_port[1] = {443};

struct query {
    struct host target;
    unsigned method;
    uint16_t port;
    bool want_allow;
};

/* A tiny deterministic PRNG (xorshift64*), so every size sees the same mix. */
static uint64_t rng_state = 0x2545f4914f6cdd1dULL;

static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dULL;
}

__attribute__((format(printf, 1, 2))) static char *dup_fmt(const char *fmt, ...)
{
    char buf[HOST_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(buf)) {
        fputs("bench_decide: name too long\n", stderr);
        exit(1);
    }
    char *s = malloc((size_t)n + 1);
    if (s == NULL) {
        fputs("bench_decide: out of memory\n", stderr);
        exit(1);
    }
    memcpy(s, buf, (size_t)n + 1);
    return s;
}

/* Names have the same length at every size (zero-padded numbers), so that
 * only the number of rules changes. Exact rule i names
 * "api<i>.vendor<i%509>.com"; wildcard rule i covers
 * "*.cdn<i>.example<i%31>.net"; cidr rule i is 10.<i>.x.0/24 (v4) or, one in
 * five, 2001:db8:<i>::/48. */
static void v4_24(struct ipaddr *a, size_t i)
{
    memset(a, 0, sizeof(*a));
    a->b[10] = 0xff;
    a->b[11] = 0xff;
    a->b[12] = 10;
    a->b[13] = (uint8_t)(i >> 8);
    a->b[14] = (uint8_t)i;
}

static void v6_48(struct ipaddr *a, size_t i)
{
    memset(a, 0, sizeof(*a));
    a->b[0] = 0x20;
    a->b[1] = 0x01;
    a->b[2] = 0x0d;
    a->b[3] = 0xb8;
    a->b[4] = (uint8_t)(i >> 8);
    a->b[5] = (uint8_t)i;
}

struct mix {
    size_t nexact, nwild, ncidr;
};

static struct mix mix_for(size_t n)
{
    struct mix m;
    m.nexact = n * 80 / 100;
    m.nwild = n * 15 / 100;
    m.ncidr = n - m.nexact - m.nwild;
    return m;
}

static void make_policy(struct policy *p, size_t n)
{
    struct mix m = mix_for(n);
    memset(p, 0, sizeof(*p));
    p->rules = calloc(n ? n : 1, sizeof(*p->rules));
    p->ndeny = n / 100 + 2; /* at least one exact and one wildcard */
    p->deny = calloc(p->ndeny, sizeof(*p->deny));
    if (p->rules == NULL || p->deny == NULL) {
        fputs("bench_decide: out of memory\n", stderr);
        exit(1);
    }
    p->nrules = n;
    for (size_t i = 0; i < n; i++) {
        struct rule *r = &p->rules[i];
        r->index = i;
        r->tier = (enum tier)(i % 4);
        r->ports = web_ports;
        r->nports = 2;
        if (i < m.nexact) {
            size_t k = i;
            r->kind = RULE_EXACT;
            r->host = dup_fmt("api%06zu.vendor%03zu.com", k, k % 509);
            /* one exact rule in four is read-only (GET, HEAD) */
            if (k % 4 == 1)
                r->methods = METHOD_GET | METHOD_HEAD;
        } else if (i < m.nexact + m.nwild) {
            size_t k = i - m.nexact;
            r->kind = RULE_WILDCARD;
            r->host = dup_fmt("cdn%06zu.example%02zu.net", k, k % 31);
            r->ports = tls_port;
            r->nports = 1;
        } else {
            size_t k = i - m.nexact - m.nwild;
            r->kind = RULE_CIDR;
            if (k % 5 == 4) {
                v6_48(&r->cidr.addr, k);
                r->cidr.prefix = 48;
            } else {
                v4_24(&r->cidr.addr, k);
                r->cidr.prefix = 120;
            }
        }
        r->pattern = r->host;
    }
    for (size_t i = 0; i < p->ndeny; i++) {
        struct host_pattern *hp = &p->deny[i].pattern;
        hp->kind = i % 2 ? PATTERN_WILDCARD : PATTERN_EXACT;
        snprintf(hp->name, sizeof(hp->name), "blocked%06zu.paste%zu.org", i, i % 7);
    }
    if (policy_index_build(p) < 0) {
        fputs("bench_decide: policy_index_build failed\n", stderr);
        exit(1);
    }
}

static void free_policy(struct policy *p)
{
    policy_index_free(p->index);
    for (size_t i = 0; i < p->nrules; i++)
        free(p->rules[i].host);
    free(p->rules);
    free(p->deny);
}

__attribute__((format(printf, 2, 3))) static void set_name(struct query *q, const char *fmt, ...)
{
    q->target.kind = HOST_NAME;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(q->target.name, sizeof(q->target.name), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(q->target.name)) {
        fputs("bench_decide: name too long\n", stderr);
        exit(1);
    }
}

/* The same proportions at every size: 40% exact hits, 15% wildcard hits
 * (one or two labels below the suffix), 10% cidr hits, 20% unknown names,
 * 5% unknown addresses, 5% denied names, 5% wrong-port or method misses. */
static void make_queries(struct query *qs, size_t n)
{
    struct mix m = mix_for(n);
    rng_state = 0x2545f4914f6cdd1dULL;
    for (size_t i = 0; i < NQUERIES; i++) {
        struct query *q = &qs[i];
        memset(q, 0, sizeof(*q));
        unsigned kind = (unsigned)(rng() % 100);
        size_t r = (size_t)rng();
        q->method = METHOD_GET;
        q->port = 443;
        q->want_allow = true;
        if (kind < 40 && m.nexact) {
            set_name(q, "api%06zu.vendor%03zu.com", r % m.nexact, (r % m.nexact) % 509);
            if (kind % 8 == 0)
                q->method = METHOD_CONNECT;
            if (q->method == METHOD_CONNECT && (r % m.nexact) % 4 == 1)
                q->want_allow = false; /* needs_inspection */
        } else if (kind < 55 && m.nwild) {
            size_t k = r % m.nwild;
            set_name(q, kind % 2 ? "x.cdn%06zu.example%02zu.net" : "a.b.cdn%06zu.example%02zu.net",
                     k, k % 31);
        } else if (kind < 65 && m.ncidr) {
            size_t k = r % m.ncidr;
            q->target.kind = HOST_IP;
            if (k % 5 == 4)
                v6_48(&q->target.ip, k);
            else
                v4_24(&q->target.ip, k);
            q->target.ip.b[15] = (uint8_t)(r >> 32);
        } else if (kind < 85) {
            set_name(q, "www%06zu.unknown%02zu.io", r % 100000, r % 97);
            q->want_allow = false;
        } else if (kind < 90) {
            q->target.kind = HOST_IP;
            v4_24(&q->target.ip, r);
            q->target.ip.b[12] = 172;
            q->want_allow = false;
        } else if (kind < 95) {
            size_t d = r % (n / 100 + 2);
            set_name(q, d % 2 ? "x.blocked%06zu.paste%zu.org" : "blocked%06zu.paste%zu.org", d,
                     d % 7);
            q->want_allow = false;
        } else if (m.nexact) {
            set_name(q, "api%06zu.vendor%03zu.com", r % m.nexact, (r % m.nexact) % 509);
            q->port = 8443;
            q->want_allow = false;
        } else {
            set_name(q, "nothing%06zu.test%02zu", r % 1000000, r % 100);
            q->want_allow = false;
        }
    }
}

/* Runs <count> decisions, cycling through <qs>. Returns a checksum so the
 * work cannot be optimised away. */
static uint64_t run(const struct policy *p, const struct query *qs, uint64_t count)
{
    uint64_t sum = 0;
    struct decision_query dq = {NULL, "default", 0, NULL, 0, 1700000000};
    for (uint64_t i = 0; i < count; i++) {
        const struct query *q = &qs[i & (NQUERIES - 1)];
        struct decision d;
        dq.method = q->method;
        dq.target = &q->target;
        dq.port = q->port;
        policy_decide(p, &dq, &d);
        sum += (uint64_t)d.verdict * 31 + (uint64_t)d.reason;
    }
    return sum;
}

/* Every query must get the verdict the generator meant: a benchmark of the
 * wrong answer measures nothing. */
static void check(const struct policy *p, const struct query *qs, size_t n)
{
    size_t allowed = 0;
    for (size_t i = 0; i < NQUERIES; i++) {
        struct decision_query dq = {NULL,          "default",  qs[i].method,
                                    &qs[i].target, qs[i].port, 1700000000};
        struct decision d;
        policy_decide(p, &dq, &d);
        if ((d.verdict == VERDICT_ALLOW) != qs[i].want_allow) {
            fprintf(stderr, "bench_decide: rules=%zu query %zu (%s) got %s %s\n", n, i,
                    qs[i].target.name, verdict_name(d.verdict),
                    d.reason ? reason_name(d.reason) : "");
            exit(1);
        }
        allowed += d.verdict == VERDICT_ALLOW;
    }
    if (allowed == 0 || allowed == NQUERIES) {
        fputs("bench_decide: the query mix is not a mix\n", stderr);
        exit(1);
    }
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double time_size(size_t n, uint64_t per_round, uint64_t *sink)
{
    static struct query qs[NQUERIES];
    struct policy p;
    make_policy(&p, n);
    make_queries(qs, n);
    check(&p, qs, n);
    *sink += run(&p, qs, per_round / 4); /* warm-up */
    double ns[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_ns();
        *sink += run(&p, qs, per_round);
        ns[r] = (now_ns() - t0) / (double)per_round;
    }
    free_policy(&p);
    qsort(ns, ROUNDS, sizeof(ns[0]), cmp_double);
    return ns[ROUNDS / 2];
}

static int usage(void)
{
    fputs("usage: bench_decide [--decisions N]\n"
          "       bench_decide --count N [--rules R]\n",
          stderr);
    return 2;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0')
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t count = 0, rules = 10, per_round = 1000000;
    bool counting = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], &count) < 0)
                return usage();
            counting = true;
        } else if (strcmp(argv[i], "--rules") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], &rules) < 0 || rules > 10000000)
                return usage();
        } else if (strcmp(argv[i], "--decisions") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], &per_round) < 0 || per_round == 0)
                return usage();
        } else {
            return usage();
        }
    }

    if (counting) {
        static struct query qs[NQUERIES];
        struct policy p;
        make_policy(&p, (size_t)rules);
        make_queries(qs, (size_t)rules);
        check(&p, qs, (size_t)rules); /* in the baseline run too: it cancels out */
        uint64_t sum = run(&p, qs, count);
        free_policy(&p);
        printf("count rules=%llu decisions=%llu checksum=%llu\n", (unsigned long long)rules,
               (unsigned long long)count, (unsigned long long)sum);
        return 0;
    }

    static const size_t sizes[] = {10, 1000, 100000};
    uint64_t sink = 0;
    double base = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        double ns = time_size(sizes[i], per_round, &sink);
        if (i == 0)
            base = ns;
        printf("decide rules=%zu ns_per_decision=%.1f ratio_vs_10=%.2f\n", sizes[i], ns, ns / base);
        fflush(stdout);
    }
    if (sink == 42) /* keep the checksum live */
        puts("");
    return 0;
}
