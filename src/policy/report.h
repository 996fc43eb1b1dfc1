/* report: the audit on paper that `sluice check` prints.
 *
 * Enumerates what each agent can reach and at which tier, counts rules per
 * tier, and lists every tier-3 grant with the person who signed for it and
 * the days it has left, and the names dns.static pins to an address: the
 * four-step egress audit as one document. Both formats are written from
 * the same JSON pieces (a finding, a rule, an agent), so they always say
 * the same thing; the pieces are made one at a time as they are written,
 * so the report's memory does not grow with the policy's rules. */
#ifndef SLUICE_POLICY_REPORT_H
#define SLUICE_POLICY_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "policy/model.h"
#include "util/diag.h"

enum report_format { REPORT_TEXT, REPORT_JSON };

/* Reach entries (an agent and a rule it reaches) the report lists at most,
 * over all its agents. Every agent reaches every rule without agents:, so
 * a policy of A agents and R such rules has A * R of them: 150,000 agents
 * and 300,000 rules fit in the 16 MiB a policy may be, days of writing and
 * petabytes of report. Real policies have thousands; this many take a
 * second or so and some 45 MB of text. */
#define REPORT_REACH_MAX 1000000u

/* REPORT_REACH_MAX, or the test-only SLUICE_TEST_REPORT_REACH_MAX when it
 * is set to less. */
uint64_t report_reach_max(void);

/* Adds to <d> a warning when the reach of <p> has more entries than the
 * report lists (report_reach_max()), so that a report cut short says so
 * first and fails --strict. */
void report_note_reach(const struct policy *p, struct diag *d);

/* Writes to <out> the report about <p> (NULL when it failed to load) with
 * the findings in <d>, as of the day number <today>: as text (findings
 * first, then the audit) or as one JSON document, the layout of
 * json_dumpf() with JSON_INDENT(2), and a line end. Its "ok" is false when
 * <d> holds an error, or, with <strict>, a warning. Besides <p> and <d> it
 * holds one rule's JSON at a time and an index of 16 bytes per rule and
 * agent it names. Each agent's reach is listed until report_reach_max()
 * entries in all have been, then counted (reach_not_listed in JSON, "...
 * N more not listed" in text). Write errors are left in <out>'s error
 * indicator. */
void report_write(FILE *out, enum report_format format, const char *file, const struct policy *p,
                  const struct diag *d, int32_t today, int warn_days, bool strict);

#endif
