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

void policy_lint(const struct policy *p, int32_t today, int warn_days, struct diag *d)
{
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        if (!r->has_expires)
            continue;
        char field[48];
        char date[16];
        char tier[16] = "no valid tier"; /* a partial load's rule whose tier was refused */
        if (r->tier >= TIER_0 && r->tier <= TIER_3)
            snprintf(tier, sizeof(tier), "tier %d", (int)r->tier);
        snprintf(field, sizeof(field), "rules[%zu].expires", r->index);
        format_date(r->expires, date, sizeof(date));
        int32_t left = lint_days_left(r, today);
        if (left < 0)
            diag_error(d, r->expires_line ? r->expires_line : r->line, field,
                       "grant for %s (%s, owner %s) expired on %s, %d day%s ago; "
                       "renew it with its owner or remove the rule",
                       r->pattern, tier, r->owner ? r->owner : "none", date, (int)-left,
                       left == -1 ? "" : "s");
        else if (left <= warn_days)
            diag_warning(d, r->expires_line ? r->expires_line : r->line, field,
                         "grant for %s (%s, owner %s) expires on %s, %d day%s left", r->pattern,
                         tier, r->owner ? r->owner : "none", date, (int)left, left == 1 ? "" : "s");
    }
}
