/* alert_env: the environment run's gateway child passes its `exec` alert
 * programs, which run outside the box: run's caller's, less what would
 * have them load the command's code.
 *
 * Owns two lists and what is done with them. The search variables name
 * where programs, libraries, interpreters' modules and tools' code (git's
 * commands, Lua's, Java's, Ruby's gems, Tcl's packages) are looked up, or
 * a file a shell or interpreter reads first: a folder in them the command
 * can change (a project's bin, an activated virtualenv, node_modules/.bin,
 * a project's lib in PYTHONPATH; a relative or empty entry) would have the
 * command's own code run outside the box at the next alert, by an alert
 * program that starts `#!/usr/bin/env sh`, runs `curl` by name or imports
 * a module. Their entries the command can change are left out, and a
 * variable left with none is unset. The option variables of interpreters
 * load code by name (`-Mmod`, `-rlib`, `--require ./x.js`,
 * `-javaagent:x.jar`) from search paths or folders that cannot be told
 * from outside: unset whatever they hold. The command's own environment
 * is not this module's (it keeps the caller's). */
#ifndef SLUICE_BOX_ALERT_ENV_H
#define SLUICE_BOX_ALERT_ENV_H

#include <stdbool.h>

#include "box/reach.h"

/* Whether the command could change what the absolute path <entry> names;
 * <ctx> is the caller's. */
typedef bool (*alert_env_changeable_fn)(const char *entry, const void *ctx);

/* <value>, a list of entries parted by any byte of <seps>, with only the
 * entries that are absolute, shorter than PATH_MAX and not <changeable>,
 * joined by <join> (possibly ""). Returns a new string the caller frees, or
 * NULL when out of memory. */
char *alert_env_kept_entries(const char *value, const char *seps, char join,
                             alert_env_changeable_fn changeable, const void *ctx);

/* In this process's environment: every search variable set to its kept
 * entries (alert_env_kept_entries()), or unset when none is left or memory
 * is short (none is the safe answer), and every option variable unset. */
void alert_env_filter(alert_env_changeable_fn changeable, const void *ctx);

/* alert_env_filter() with reach_can_change() against the view <v>. */
void alert_env_apply(const struct box_view *v);

#endif
