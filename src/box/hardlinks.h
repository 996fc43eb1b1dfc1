/* hardlinks: whether a file the box keeps read-only (the policy, the log
 * and alerts files, an alert program, a --ro file) has another name, a
 * hard link, the command could write it through. A read-only bind covers
 * one name of a file, not its other hard links, and one in a writable path
 * of the box (made by the command in an earlier run, while the file was
 * not kept) writes the same file.
 *
 * Owns the count: where the other names are cannot be known from outside,
 * only how many there are (st_nlink), against the names the view keeps
 * read-only. The file system is read (stat), never changed. */
#ifndef SLUICE_BOX_HARDLINKS_H
#define SLUICE_BOX_HARDLINKS_H

#include <stdbool.h>

#include "box/reach.h"

/* Whether the file at <path> (links followed; not a folder) has more names
 * than <v> keeps read-only (its distinct --ro paths naming it, and <path>
 * itself, which the caller knows the command cannot change), on the file
 * system of a writable path of <v>. On true <*root> is that writable path
 * and <*names> the file's number of names. */
bool hardlinks_other_name(const struct box_view *v, const char *path, const char **root,
                          unsigned long *names);

#endif
