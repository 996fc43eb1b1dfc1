/* report: the audit on paper that `sluice check` prints.
 *
 * Enumerates what each agent can reach and at which tier, counts rules per
 * tier, and lists every tier-3 grant with the person who signed for it and
 * the days it has left, and the names dns.static pins to an address: the
 * four-step egress audit as one document. The report is built once as a
 * JSON value; the text form is rendered from it, so both formats always
 * say the same thing. */
#ifndef SLUICE_POLICY_REPORT_H
#define SLUICE_POLICY_REPORT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "policy/model.h"
#include "util/diag.h"

/* Returns a new report (the caller releases it with json_decref) about
 * <p> (NULL when it failed to load) with the findings in <d>, as of the
 * day number <today>. Its "ok" is false when <d> holds an error, or, with
 * <strict>, a warning. */
json_t *report_build(const char *file, const struct policy *p, const struct diag *d, int32_t today,
                     int warn_days, bool strict);

/* Prints <report> as text: findings first, then the audit. */
void report_print_text(const json_t *report, FILE *out);

#endif
