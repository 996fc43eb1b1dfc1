/* lint: the findings about a loaded policy that depend on the date.
 *
 * The loader reports what is wrong with a policy whatever the day; lint
 * adds what is wrong today: a grant past its expiry is an error (the gate
 * denies it with grant_expired), a grant expiring within <warn_days> is a
 * warning, and so is a tier-3 grant whose expiry is more than a year away
 * (9999-12-31: an expiry in name only). `sluice check` turns the first into
 * a failing build; `serve` prints all three as warnings at start and on
 * reload. */
#ifndef SLUICE_POLICY_LINT_H
#define SLUICE_POLICY_LINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/model.h"
#include "util/diag.h"

#define LINT_DEFAULT_WARN_DAYS 14
/* A tier-3 grant may run a year; one that expires later is warned about. */
#define LINT_FAR_EXPIRY_DAYS 365
/* Room for lint_far_expiry_text(): its words, a host pattern (253 bytes
 * and "*.") and an owner (1024 bytes at most, load.c). */
#define LINT_FAR_EXPIRY_TEXT 2048

/* The warn window a policy asks for: alerts.expiry_warn_days, else 14. */
int lint_warn_days(const struct policy *p);

/* Days from <today> to the last valid day of <r>'s grant: 0 on the last
 * day, negative once expired. Only for rules with has_expires. */
int32_t lint_days_left(const struct rule *r, int32_t today);

/* True when <r> is a tier-3 grant whose expiry is more than
 * LINT_FAR_EXPIRY_DAYS after <today>. */
bool lint_expiry_too_far(const struct rule *r, int32_t today);

/* Formats the finding about such a grant (without file, line or field)
 * into <out>, always terminated: "tier-3 grant for HOST (owner 'NAME')
 * expires on DATE, N days from now, more than 365: ...". */
void lint_far_expiry_text(const struct rule *r, int32_t today, char *out, size_t outlen);

/* Reports expired grants as errors, and grants expiring within <warn_days>
 * and tier-3 grants expiring too far ahead as warnings, into <d>. <today> is a day number
 * (util/units.h). <p> may be a policy that failed to load
 * (POLICY_LOAD_KEEP_PARTIAL), so that `sluice check` lists its expired
 * grants next to its other errors: a rule whose host or cidr was refused
 * (its pattern NULL) names nothing and is left out. */
void policy_lint(const struct policy *p, int32_t today, int warn_days, struct diag *d);

#endif
