/* Unit tests for policy/lint.c: expiry findings relative to a given day. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "policy/lint.h"
#include "util/units.h"

static int32_t day(const char *s)
{
    int32_t d = 0;
    assert_int_equal(parse_date(s, &d), 0);
    return d;
}

static struct rule make_rule(size_t index, const char *pattern, const char *expires)
{
    struct rule r;
    memset(&r, 0, sizeof(r));
    r.index = index;
    r.line = (int)(10 + index);
    r.pattern = (char *)(uintptr_t)pattern;
    r.tier = TIER_3;
    r.owner = (char *)(uintptr_t) "chaysen";
    if (expires != NULL) {
        r.has_expires = true;
        r.expires = day(expires);
    }
    return r;
}

/* Lints the <n> rules of a policy that has nothing else, as of <today>
 * with a window of <warn_days>, into <d> (the caller frees it). */
static void lint_rules(struct rule *rules, size_t n, const char *today, int warn_days,
                       struct diag *d)
{
    struct policy p;
    memset(&p, 0, sizeof(p));
    p.rules = rules;
    p.nrules = n;
    diag_init(d, "p.yaml");
    policy_lint(&p, day(today), warn_days, d);
}

static void test_expired_is_error_expiring_is_warning(void **state)
{
    (void)state;
    struct rule rules[4] = {
        make_rule(0, "api.github.com", "2026-11-29"),   /* expired yesterday */
        make_rule(1, "slack.com", "2026-11-30"),        /* last valid day: 0 days left */
        make_rule(2, "smtp.example.com", "2026-12-14"), /* 14 days left: inside the window */
        make_rule(3, "far.example.com", "2026-12-15"),  /* 15 days left: outside */
    };
    struct diag d;
    lint_rules(rules, 4, "2026-11-30", 14, &d);
    assert_int_equal(d.errors, 1);
    assert_int_equal(d.warnings, 2);

    char text[512];
    diag_format(&d, diag_first_error(&d), text, sizeof(text));
    assert_non_null(strstr(text, "p.yaml:10: rules[0].expires: grant for api.github.com"));
    assert_non_null(strstr(text, "expired on 2026-11-29, 1 day ago"));
    assert_int_equal(d.entries[1].level, DIAG_WARNING);
    assert_non_null(strstr(d.entries[1].message, "0 days left"));
    assert_non_null(strstr(d.entries[2].message, "14 days left"));
    diag_free(&d);
}

static void test_rules_without_expiry_are_ignored(void **state)
{
    (void)state;
    struct rule rules[1] = {make_rule(0, "pypi.org", NULL)};
    rules[0].tier = TIER_0;
    struct diag d;
    lint_rules(rules, 1, "2099-01-01", 3650, &d);
    assert_int_equal(d.count, 0);
    diag_free(&d);
}

/* How a finding names a rule's tier and owner. sluice check lints the
 * rules of a policy that failed to load: a rule whose tier was refused
 * (tier: 7) is left at TIER_NONE, never shown as "tier -1". A rule without
 * an owner and one whose owner is called "none" read alike as "owner
 * none": the owner is quoted, and a rule without one says so. */
static void test_findings_name_tier_and_owner(void **state)
{
    (void)state;
    struct rule rules[5] = {
        make_rule(0, "a.example.com", "2026-01-01"), make_rule(1, "b.example.com", "2026-12-01"),
        make_rule(2, "c.example.com", "2026-01-01"), make_rule(3, "d.example.com", "2026-01-01"),
        make_rule(4, "e.example.com", "2026-12-01"),
    };
    rules[0].tier = TIER_NONE;
    rules[1].tier = TIER_NONE;
    rules[2].owner = NULL;
    rules[2].tier = TIER_1; /* below tier 3 an owner is optional */
    rules[3].owner = (char *)(uintptr_t) "none";
    rules[4].owner = NULL;
    rules[4].tier = TIER_0;
    static const char *const want[] = {
        "grant for a.example.com (no valid tier, owner 'chaysen') expired on 2026-01-01, 333 days "
        "ago; renew it with its owner or remove the rule",
        "grant for b.example.com (no valid tier, owner 'chaysen') expires on 2026-12-01, 1 day "
        "left",
        "grant for c.example.com (tier 1, no owner) expired on 2026-01-01, 333 days ago; renew it "
        "with its owner or remove the rule",
        "grant for d.example.com (tier 3, owner 'none') expired on 2026-01-01, 333 days ago; "
        "renew it with its owner or remove the rule",
        "grant for e.example.com (tier 0, no owner) expires on 2026-12-01, 1 day left",
    };
    struct diag d;
    lint_rules(rules, 5, "2026-11-30", 14, &d);
    assert_int_equal(d.count, 5);
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(d.entries[i].message, want[i]);
    diag_free(&d);
}

/* A tier-3 grant whose expiry is more than a year away (9999-12-31, the
 * latest date sluice reads) has an expiry in name only: nobody looks at it
 * again. Warned with the days; a year to the day is not. */
static void test_tier3_expiry_more_than_a_year_away_warns(void **state)
{
    (void)state;
    struct rule rules[4] = {
        make_rule(0, "api.github.com", "9999-12-31"),
        make_rule(1, "slack.com", "2027-11-30"),        /* 365 days from 2026-11-30 */
        make_rule(2, "smtp.example.com", "2027-12-01"), /* 366 days */
        make_rule(3, "s3.example.com", "9999-12-31"),   /* tier 2: no signed grant */
    };
    rules[3].tier = TIER_2;
    struct diag d;
    lint_rules(rules, 4, "2026-11-30", 14, &d);
    assert_int_equal(d.errors, 0);
    assert_int_equal(d.warnings, 2);
    char text[512];
    diag_format(&d, &d.entries[0], text, sizeof(text));
    assert_string_equal(text, "p.yaml:10: rules[0].expires: tier-3 grant for api.github.com "
                              "(owner 'chaysen') expires on 9999-12-31, 2912109 days from now, "
                              "more than 365: an expiry that far makes no one look at the grant "
                              "again; give it a date within a year");
    diag_format(&d, &d.entries[1], text, sizeof(text));
    assert_string_equal(text, "p.yaml:12: rules[2].expires: tier-3 grant for smtp.example.com "
                              "(owner 'chaysen') expires on 2027-12-01, 366 days from now, "
                              "more than 365: an expiry that far makes no one look at the grant "
                              "again; give it a date within a year");
    /* a window that reaches it says "expiring" once, not both */
    diag_free(&d);
    lint_rules(rules + 2, 1, "2026-11-30", 400, &d);
    assert_int_equal(d.warnings, 1);
    assert_non_null(strstr(d.entries[0].message, "366 days left"));
    diag_free(&d);
}

static void test_warn_days_default_and_policy_value(void **state)
{
    (void)state;
    struct policy p;
    memset(&p, 0, sizeof(p));
    assert_int_equal(lint_warn_days(&p), LINT_DEFAULT_WARN_DAYS);
    p.alerts.present = true;
    p.alerts.expiry_warn_days = 30;
    assert_int_equal(lint_warn_days(&p), 30);
}

static void test_days_left(void **state)
{
    (void)state;
    struct rule r = make_rule(0, "x.example.com", "2027-01-01");
    assert_int_equal(lint_days_left(&r, day("2026-12-31")), 1);
    assert_int_equal(lint_days_left(&r, day("2027-01-01")), 0);
    assert_int_equal(lint_days_left(&r, day("2027-01-02")), -1);
    assert_int_equal(lint_days_left(&r, day("2026-01-01")), 365);
}

/* A partial load's rule whose host or cidr did not parse (pattern NULL,
 * POLICY_LOAD_KEEP_PARTIAL) names nothing: lint skips it, and still
 * reports the grants of the rules that did parse (sluice check lists an
 * expired grant next to a file's other errors). */
static void test_rules_without_a_pattern_are_skipped(void **state)
{
    (void)state;
    struct rule rules[3] = {
        make_rule(0, NULL, "2026-11-01"),             /* host refused: expired */
        make_rule(1, "api.github.com", "2026-11-29"), /* expired yesterday */
        make_rule(2, NULL, "2026-12-01"),             /* cidr refused: expiring */
    };
    struct diag d;
    lint_rules(rules, 3, "2026-11-30", 14, &d);
    assert_int_equal(d.count, 1);
    assert_int_equal(d.errors, 1);
    assert_string_equal(d.entries[0].field, "rules[1].expires");
    assert_non_null(strstr(d.entries[0].message, "grant for api.github.com"));
    diag_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expired_is_error_expiring_is_warning),
        cmocka_unit_test(test_rules_without_expiry_are_ignored),
        cmocka_unit_test(test_findings_name_tier_and_owner),
        cmocka_unit_test(test_tier3_expiry_more_than_a_year_away_warns),
        cmocka_unit_test(test_warn_days_default_and_policy_value),
        cmocka_unit_test(test_days_left),
        cmocka_unit_test(test_rules_without_a_pattern_are_skipped),
    };
    return cmocka_run_group_tests_name("lint", tests, NULL, NULL);
}
