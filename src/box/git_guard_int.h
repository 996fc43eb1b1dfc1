/* git_guard_int: what git_guard.c (the git directories) and
 * git_hooks_path.c (the hooks folders core.hooksPath names) share: the
 * search's state and the paths it adds. */
#ifndef SLUICE_BOX_GIT_GUARD_INT_H
#define SLUICE_BOX_GIT_GUARD_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "box/git_config_read.h"
#include "box/git_guard.h"

/* The system's and the user's config files read for core.hooksPath. */
#define GIT_GUARD_GLOBAL_FILES 5

struct git_search {
    const struct box_view *v;
    struct git_guard *g;
    char *err;
    size_t errlen;
    struct git_config global[GIT_GUARD_GLOBAL_FILES]; /* the system's and the user's */
};

/* Adds <path> to the search's paths (once), as <kind>. Returns 0, or -1
 * with a message past GIT_GUARD_MAX. */
int git_guard_add(struct git_search *s, enum box_path_kind kind, const char *path);

/* <dir>/<name> into <out> (PATH_MAX). Returns 0, or -1 with a message. */
int git_guard_join(struct git_search *s, char *out, const char *dir, const char *name);

/* The user's config file <path> read-only when it is a regular file (a
 * link's target) the box leaves writable, below its writable path; when
 * missing and <make>, made empty in its folder (existing, writable) first.
 * Returns 0, or -1 with a message. */
int git_guard_keep_config(struct git_search *s, const char *path, bool make);

/* git_hooks_path.c: keeps the hooks folders the config files of the git
 * directory <gd> and the user's name, read-only, relative ones from the
 * working tree's top <top> (core.worktree when the config names it, else
 * <top>, else <gd>). Sets <*wtc> when the config names
 * extensions.worktreeConfig. Returns 0, or -1 with a message. */
int git_guard_hooks_paths(struct git_search *s, const char *gd, const char *top, bool *wtc);

/* git_hooks_path.c: reads the system's and the user's config files, as git
 * finds them, into <s>->global and keeps the absolute hooks folders they
 * name. Returns 0, or -1 with a message. */
int git_guard_global(struct git_search *s);

#endif
