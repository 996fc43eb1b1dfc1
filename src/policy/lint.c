#include "policy/lint.h"

#include <stdio.h>

#include "util/units.h"

int lint_warn_days(const struct policy *p)
{
    if (p->alerts.present)
        return p->alerts.expiry_warn_days;
    return LINT_DEFAULT_WARN_DAYS;
}

int32_t lint_days_left(const struct rule *r, int32_t today)
{
    return r->expires - today;
}

/* How a finding names a rule's owner: "owner 'NAME'", quoted, or "no
 * owner", so that a rule without one and an owner called "none" read apart. */
struct owner_words {
    const char *before, *name, *after;
};

static struct owner_words owner_words(const struct rule *r)
{
    if (r->owner == NULL)
        return (struct owner_words){"no owner", "", ""};
    return (struct owner_words){"owner '", r->owner, "'"};
}

bool lint_expiry_too_far(const struct rule *r, int32_t today)
{
    return r->tier == TIER_3 && r->has_expires && lint_days_left(r, today) > LINT_FAR_EXPIRY_DAYS;
}

void lint_far_expiry_text(const struct rule *r, int32_t today, char *out, size_t outlen)
{
    char date[16];
    format_date(r->expires, date, sizeof(date));
    struct owner_words o = owner_words(r);
    snprintf(out, outlen,
             "tier-3 grant for %s (%s%s%s) expires on %s, %d days from now, more than %d: an "
             "expiry that far makes no one look at the grant again; give it a date within a year",
             r->pattern, o.before, o.name, o.after, date, (int)lint_days_left(r, today),
             LINT_FAR_EXPIRY_DAYS);
}

void policy_lint(const struct policy *p, int32_t today, int warn_days, struct diag *d)
{
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        /* a partial load's rule whose host or cidr was refused names
         * nothing (POLICY_LOAD_KEEP_PARTIAL) */
        if (!r->has_expires || r->pattern == NULL)
            continue;
        char field[48];
        char date[16];
        char tier[16] = "no valid tier"; /* a partial load's rule whose tier was refused */
        if (r->tier >= TIER_0 && r->tier <= TIER_3)
            snprintf(tier, sizeof(tier), "tier %d", (int)r->tier);
        snprintf(field, sizeof(field), "rules[%zu].expires", r->index);
        format_date(r->expires, date, sizeof(date));
        int32_t left = lint_days_left(r, today);
        struct owner_words o = owner_words(r);
        int line = r->expires_line ? r->expires_line : r->line;
        if (left < 0)
            diag_error(d, line, field,
                       "grant for %s (%s, %s%s%s) expired on %s, %d day%s ago; "
                       "renew it with its owner or remove the rule",
                       r->pattern, tier, o.before, o.name, o.after, date, (int)-left,
                       left == -1 ? "" : "s");
        else if (left <= warn_days)
            diag_warning(d, line, field, "grant for %s (%s, %s%s%s) expires on %s, %d day%s left",
                         r->pattern, tier, o.before, o.name, o.after, date, (int)left,
                         left == 1 ? "" : "s");
        else if (lint_expiry_too_far(r, today)) {
            char text[LINT_FAR_EXPIRY_TEXT];
            lint_far_expiry_text(r, today, text, sizeof(text));
            diag_warning(d, line, field, "%s", text);
        }
    }
}
