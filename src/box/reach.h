/* reach: what of the host's files the command in the box could change,
 * judged from outside, before the box starts, from the view run gives the
 * box (the working directory, writable, then each --rw, --ro and --hide
 * path). run asks it of the programs the gateway runs outside the box (its
 * exec alert programs, their interpreters) and of the folders their search
 * paths name: one the command could change would run the command's code
 * outside the box.
 *
 * Owns the walk of a path, component by component with each symbolic
 * link's target followed, and the answer for each folder on the way:
 * writable in the box, and no mount point there. The file system is read
 * (lstat, readlink), never changed. */
#ifndef SLUICE_BOX_REACH_H
#define SLUICE_BOX_REACH_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "box/box.h"

/* The box's file system view, as box_config holds it; all borrowed. */
struct box_view {
    const char *cwd;              /* canonical; writable in the box */
    const struct box_path *paths; /* canonical, in the order given */
    size_t npaths;
};

/* Whether the box leaves <dir> (canonical) writable: as the deepest path of
 * <v> at or above it says (the last given among equal ones; the working
 * directory first, writable). <*root> is set to that path, NULL when none
 * is: outside every path of the view the box shows the host's files
 * read-only, or, below /tmp and /dev/shm, its own, so the host's there are
 * out of its reach. */
bool reach_writable_dir(const struct box_view *v, const char *dir, const char **root);

/* Whether the command in the box could change the file <path> (absolute)
 * names: write it, or have the path name another file (a folder on the way
 * renamed away and a new one made, a link replaced), through an entry on
 * the way to it, a link's target followed, that lies in a folder the box
 * leaves writable and is no mount point there. On true <*root> is the
 * writable path of the view concerned. A path the kernel could not follow
 * either (a loop of links, too long) is false: a link the box could change
 * would have been found before. */
bool reach_can_change(const struct box_view *v, const char *path, const char **root);

/* A walk of a path as the kernel resolves it, one entry at a time: the
 * caller looks at each (lstat) and enters it or follows it as a link. */
struct reach_walk {
    char cur[PATH_MAX];  /* resolved so far, canonical: no link in it */
    char next[PATH_MAX]; /* the entry to look at, in <cur> */
    char rest[PATH_MAX];
    const char *r; /* what is left of <rest> */
    unsigned links;
};

/* Starts <w> on <path> (absolute). False when too long. */
bool reach_walk_start(struct reach_walk *w, const char *path);
/* Sets <w>->next to the next entry ("." skipped, ".." taken). Returns 1,
 * 0 at the path's end, -1 when a name is too long. */
int reach_walk_next(struct reach_walk *w);
/* Follows <w>->next, a symbolic link. Returns 0, or -1 on more than 40
 * links, an unreadable one or a path too long. */
int reach_walk_link(struct reach_walk *w);
/* Enters <w>->next, no link. */
void reach_walk_enter(struct reach_walk *w);
#endif
