/* lint: the findings about a loaded policy that depend on the date.
 *
 * The loader reports what is wrong with a policy whatever the day; lint
 * adds what is wrong today: a grant past its expiry is an error (the gate
 * denies it with grant_expired), a grant expiring within <warn_days> is a
 * warning. `sluice check` turns the first into a failing build; `serve`
 * prints both as warnings at start and on reload. */
#ifndef SLUICE_POLICY_LINT_H
#define SLUICE_POLICY_LINT_H

#include <stdint.h>

#include "policy/model.h"
#include "util/diag.h"

#define LINT_DEFAULT_WARN_DAYS 14

/* The warn window a policy asks for: alerts.expiry_warn_days, else 14. */
int lint_warn_days(const struct policy *p);

/* Days from <today> to the last valid day of <r>'s grant: 0 on the last
 * day, negative once expired. Only for rules with has_expires. */
int32_t lint_days_left(const struct rule *r, int32_t today);

/* Reports expired grants as errors and grants expiring within <warn_days>
 * as warnings into <d>. <today> is a day number (util/units.h). */
void policy_lint(const struct policy *p, int32_t today, int warn_days, struct diag *d);

#endif
