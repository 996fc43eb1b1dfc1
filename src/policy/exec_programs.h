/* exec_programs: whether the programs of a policy's exec alert sinks can be
 * run where the policy is loaded.
 *
 * The loader only checks that an exec sink names an absolute path; whether
 * a program is there is a fact of the machine, not of the file, and was
 * found out at the first alert, which was then lost. This looks at each
 * program once the file is parsed: it reads the file system (a stat(), an
 * access check), so it runs after the parse, where a file system that does
 * not answer would hold the load for ever: the look has EXEC_LOOK_MS, in a
 * process of its own (a fork), killed then (policy_load_fd()). */
#ifndef SLUICE_POLICY_EXEC_PROGRAMS_H
#define SLUICE_POLICY_EXEC_PROGRAMS_H

#include <sys/types.h>

#include "policy/model.h"
#include "util/diag.h"

/* How long a load waits for the look at its programs (a stat() on a hung
 * NFS or FUSE mount does not return), and then for the look's end once
 * killed. */
#define EXEC_LOOK_MS 1000

/* Warns in <d>, for each exec sink of <p>, when its program cannot be run
 * here by the user it will run as: it does not exist (or a component of
 * its path cannot be searched), is not a regular file, or is not
 * executable; or when its file system did not answer within EXEC_LOOK_MS.
 * Such warnings are counted in d->absent_programs: `check --strict` does
 * not fail on them, as a CI machine has not the programs installed. The
 * user is this process's effective one, or the one named by
 * policy_exec_programs_run_as() when this process is root. */
void policy_check_exec_programs(const struct policy *p, struct diag *d);

/* Names the user (<uid>, <gid>, no other group) the exec programs will run
 * as, when it is not the process that loads the policy: serve started as
 * root with --user, run's gateway leaving root. Every later look made as
 * root becomes that user first (uid 0: looks as root, as unset); a look
 * made as another user is made as that user. Call it on the main thread
 * before the first load. */
void policy_exec_programs_run_as(uid_t uid, gid_t gid);

#endif
