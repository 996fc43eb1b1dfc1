/* exec_guard: whether a program run outside the box (an `exec` alert
 * program of run's gateway, with the host's network and the gateway's
 * user's rights) could be changed by the command in the box, which can
 * raise an alert at will (a first contact) and so have its own code run
 * there.
 *
 * Owns the walk from the program through its script's interpreters (the
 * "#!" line, 4 levels deep as the kernel follows them; a relative one
 * found from "/", the gateway's working directory), each file judged by
 * reach_can_change() and hardlinks_other_name(). What a program reads or
 * runs beyond that is its own affair (its environment: alert_env.h). */
#ifndef SLUICE_BOX_EXEC_GUARD_H
#define SLUICE_BOX_EXEC_GUARD_H

#include <limits.h>

#include "box/hardlinks.h"
#include "box/reach.h"

enum exec_guard_verdict {
    EXEC_GUARD_SAFE,        /* out of the command's reach */
    EXEC_GUARD_CHANGEABLE,  /* reach_can_change() */
    EXEC_GUARD_OTHER_NAMES, /* hardlinks_other_name() */
};

/* What exec_guard_check() found, on any verdict but EXEC_GUARD_SAFE. */
struct exec_guard_finding {
    int level;                      /* 0: the program itself; N: its Nth interpreter */
    char file[PATH_MAX];            /* the file found so (the interpreter's, absolute) */
    const char *root;               /* the writable path of the view concerned, <v>'s */
    struct hardlinks_finding links; /* EXEC_GUARD_OTHER_NAMES: the name found */
};

/* Judges the program <prog> (absolute, as a policy names it) and its
 * interpreters against the view <v>, filling <f> for the first file the
 * command could change. */
enum exec_guard_verdict exec_guard_check(const struct box_view *v, const char *prog,
                                         struct exec_guard_finding *f);

#endif
