/* git_guard: the git directories the box would leave writable, kept from
 * handing the command a way out. The user's next `git` outside the box
 * runs what a repository's hooks and config say (a pre-commit hook,
 * core.fsmonitor, core.hooksPath, core.pager, core.sshCommand, a filter
 * driver), with the user's network and credentials.
 *
 * Owns the search for them, judged from outside before the box starts,
 * and the paths that keep each: for the working directory and each --rw
 * path, and each folder above one that the view leaves writable, a `.git`
 * folder there (or the path itself when it is a folder named `.git`) is
 * made a mount point of its own, writable (one cannot be renamed or
 * removed: EBUSY), as is each folder between it and its writable path,
 * with `hooks`, `config` and, when the config names
 * extensions.worktreeConfig, `config.worktree` read-only; so is each
 * submodule's git directory below `modules/` (nested ones too, every
 * folder on the way a mount point), and each linked worktree's folder
 * below `worktrees/` with its `config.worktree`. A path the view names
 * already (the user's --rw, --ro or --hide, or a folder between the git
 * directory and it) is the user's: left out, and not searched below.
 * A missing `hooks` folder or `config` file is made on the host (an empty
 * folder, as `git init` makes, an empty file), owned as the git directory
 * is, since a mount needs a target; nothing else is written. A `.git`
 * file (`gitdir: PATH`, a submodule's checkout, a linked worktree, git
 * init --separate-git-dir) is kept read-only and the git directory it
 * names kept as above (a linked worktree's: its folder a mount point, and
 * its repository's `commondir`); a `.git` link is not followed.
 * Each folder a `core.hooksPath` names (git_hooks_path.c: the repository's
 * config and the system's and the user's, read by git_config_read.h,
 * never by running git) that the box leaves writable is kept read-only,
 * made when missing, each folder between it and its writable path a mount
 * point; one named `_` (husky 9) keeps the folder above it.
 * The user's config files (~/.gitconfig, the XDG one, $GIT_CONFIG_GLOBAL's)
 * the box leaves writable are read-only; a missing ~/.gitconfig is made,
 * empty, unless only the XDG file exists. */
#ifndef SLUICE_BOX_GIT_GUARD_H
#define SLUICE_BOX_GIT_GUARD_H

#include <stddef.h>

#include "box/reach.h"

/* The most paths a run adds for its git directories; more (a repository
 * with many submodules) stops the run, naming the folder to decide for. */
#define GIT_GUARD_MAX 128
/* The most folders below a `modules/` folder the search goes down. */
#define GIT_GUARD_DEPTH 8
/* The most entries it reads in one `modules/` or `worktrees/` folder. */
#define GIT_GUARD_ENTRIES 1024

struct git_guard {
    struct box_path v[GIT_GUARD_MAX]; /* in the order the box applies them */
    char *owned[GIT_GUARD_MAX];       /* their paths, freed by git_guard_free() */
    size_t n;
};

/* Fills <g> with the paths that keep the git directories of <v> (the
 * view the user gave, with run's own files). Returns 0, or -1 with a
 * one-line message in <err> (a bound reached, a `hooks` or `config` that
 * is a link or cannot be made): the run does not start. */
int git_guard_find(const struct box_view *v, struct git_guard *g, char *err, size_t errlen);

/* Frees what <g> holds. */
void git_guard_free(struct git_guard *g);

#endif
