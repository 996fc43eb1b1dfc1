/* Unit tests for gate/kept_decision.c: what a plain exchange keeps of its
 * decision once it lets go of its policy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gate/kept_decision.h"
#include "util/xalloc.h"

/* A rule as a policy owns it: its texts, ports and agents on the heap. */
static struct rule *owned_rule(size_t index, enum tier tier, const char *owner, int32_t expires)
{
    struct rule *r = xcalloc(1, sizeof(*r));
    r->index = index;
    r->line = 7 + (int)index;
    r->kind = RULE_EXACT;
    r->pattern = xstrdup("api.example.test");
    r->host = xstrdup("api.example.test");
    r->ports = xcalloc(1, sizeof(*r->ports));
    r->ports[0] = 443;
    r->nports = 1;
    r->tier = tier;
    r->owner = owner != NULL ? xstrdup(owner) : NULL;
    r->has_expires = expires != 0;
    r->expires = expires;
    r->agents = xcalloc(1, sizeof(*r->agents));
    r->agents[0] = xstrdup("bot");
    r->nagents = 1;
    return r;
}

static void rule_free(struct rule *r)
{
    free(r->pattern);
    free(r->host);
    free(r->ports);
    free(r->owner);
    free(r->agents[0]);
    free(r->agents);
    free(r);
}

/* The copies outlive the rules and the agent id they were made from (the
 * sanitizer would tell a read of freed memory), and say what they said. */
static void test_copies_outlive_the_policy(void **state)
{
    (void)state;
    struct rule *rule = owned_rule(12, TIER_1, NULL, 0);
    struct rule *grant = owned_rule(3, TIER_3, "team-payments", 20500);
    char *agent = xstrdup("bot");
    struct decision dec = {.verdict = VERDICT_ALLOW,
                           .tier = TIER_3,
                           .rule = rule,
                           .owner = grant->owner,
                           .grant = grant};
    struct kept_decision *k = kept_decision_new(&dec, agent);
    assert_non_null(k);
    kept_decision_apply(k, &dec);
    rule_free(rule);
    rule_free(grant);
    free(agent);

    assert_ptr_equal(dec.rule, &k->rule);
    assert_ptr_equal(dec.grant, &k->grant);
    assert_int_equal(dec.rule->index, 12);
    assert_int_equal(dec.rule->tier, TIER_1);
    assert_false(dec.rule->has_expires);
    assert_int_equal(dec.grant->index, 3);
    assert_true(dec.grant->has_expires);
    assert_int_equal(dec.grant->expires, 20500);
    assert_string_equal(dec.owner, "team-payments");
    assert_string_equal(k->agent_id, "bot");
    assert_int_equal(dec.verdict, VERDICT_ALLOW);
    assert_int_equal(dec.tier, TIER_3);
    /* nothing it owned is kept: none of it is read after the decision */
    assert_null(dec.rule->pattern);
    assert_null(dec.rule->host);
    assert_null(dec.rule->ports);
    assert_null(dec.rule->agents);
    assert_null(dec.grant->owner);
    kept_decision_free(k);
}

/* A decision without rule, grant or owner, for an unknown agent, keeps
 * them absent (the log's nulls). */
static void test_absent_stays_absent(void **state)
{
    (void)state;
    struct decision dec = {.verdict = VERDICT_REPORT, .tier = TIER_NONE};
    struct kept_decision *k = kept_decision_new(&dec, NULL);
    assert_non_null(k);
    kept_decision_apply(k, &dec);
    assert_null(dec.rule);
    assert_null(dec.grant);
    assert_null(dec.owner);
    assert_null(k->agent_id);
    kept_decision_free(k);
    kept_decision_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copies_outlive_the_policy),
        cmocka_unit_test(test_absent_stays_absent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
