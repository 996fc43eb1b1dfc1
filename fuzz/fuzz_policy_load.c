/* fuzz_policy_load: policy_load_buffer() on arbitrary bytes.
 * Invariants: it returns NULL exactly when the diagnostics hold an error;
 * every diagnostic formats; a policy that loads has every rule in tier 0-3,
 * with at least one port, sorted and unique, a pattern, its own index, and
 * an owner and an expiry date when it is tier 3; nothing leaks (ASan). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rule(const struct rule *r, size_t i)
{
    if (r->index != i || r->line < 1 || r->pattern == NULL)
        abort();
    if (r->tier < TIER_0 || r->tier > TIER_3 || r->nports < 1 || r->ports == NULL)
        abort();
    for (size_t k = 0; k < r->nports; k++)
        if (r->ports[k] == 0 || (k > 0 && r->ports[k] <= r->ports[k - 1]))
            abort();
    if (r->tier == TIER_3 && (r->owner == NULL || r->owner[0] == '\0' || !r->has_expires))
        abort();
    if ((r->kind == RULE_CIDR) != (r->host == NULL))
        abort();
    if ((r->methods & (METHOD_CONNECT | METHOD_OTHER)) != 0)
        abort();
    if ((r->agents == NULL) != (r->nagents == 0))
        abort();
}

static void check_policy(const struct policy *p)
{
    if (p->version != 1 || p->index == NULL)
        abort();
    for (size_t i = 0; i < p->nrules; i++)
        check_rule(&p->rules[i], i);
    for (size_t i = 0; i < p->nagents; i++)
        if (p->agents[i].id == NULL || (p->agents[i].nsources == 0 && !p->agents[i].unix_source))
            abort();
    if (p->limits.header_bytes < 1024 || p->limits.header_bytes > 1024 * 1024)
        abort();
    if (p->alerts.off_hours.set && p->alerts.off_hours.tz == NULL)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* lets seeds with "token: env:SLUICE_FUZZ_TOKEN" load */
    setenv("SLUICE_FUZZ_TOKEN", "fuzz-secret", 0);
    struct diag d;
    diag_init(&d, "fuzz.yaml");
    struct policy *p = policy_load_buffer("fuzz.yaml", (const char *)data, size, &d);
    if ((p == NULL) != diag_has_errors(&d))
        abort();
    char line[1024];
    for (size_t i = 0; i < d.count; i++) {
        if (d.entries[i].line < 0 || d.entries[i].message == NULL)
            abort();
        diag_format(&d, &d.entries[i], line, sizeof(line));
        if (strlen(line) >= sizeof(line))
            abort();
    }
    if (p != NULL)
        check_policy(p);
    policy_free(p);
    diag_free(&d);
    return 0;
}
