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

#endif
