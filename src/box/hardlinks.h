/* hardlinks: whether a file the box keeps read-only (the policy, the log
 * and the alerts files, an alert program, a --ro file) has another name, a
 * hard link, the command could write it through. A read-only bind covers
 * one name of a file, not its other hard links, and one in a writable path
 * of the box (made by the command in an earlier run, while the file was
 * not kept) writes the same file. Other names out of the command's reach
 * (perf's ~/.debug, Debian's perl and perl5.36.0, an ostree or Nix store)
 * are harmless.
 *
 * Owns the search for them: when the file has more names (st_nlink) than
 * the view keeps read-only, the writable paths of the view on its file
 * system are walked, bounded, for a name of the same inode that the view
 * leaves writable (reach_writable_dir() judges each folder and name). The
 * file system is read (openat, fstatat, getdents), never changed. */
#ifndef SLUICE_BOX_HARDLINKS_H
#define SLUICE_BOX_HARDLINKS_H

#include <limits.h>
#include <stdbool.h>

#include "box/reach.h"

/* The bounds of a search: the entries looked at, over all the writable
 * paths, and the folders below a writable path it goes down. */
#define HARDLINKS_ENTRIES_MAX 1000000UL
#define HARDLINKS_DEPTH_MAX   64U

/* Why hardlinks_other_name() refuses the file. */
enum hardlinks_stop {
    HARDLINKS_FOUND,      /* <at> names it, writable in the box */
    HARDLINKS_ENTRIES,    /* HARDLINKS_ENTRIES_MAX entries looked at; <at> was being read */
    HARDLINKS_DEPTH,      /* <at> lies more than HARDLINKS_DEPTH_MAX folders deep */
    HARDLINKS_UNREADABLE, /* <at> could not be read, nor so searched: <error> */
};

/* What hardlinks_other_name() found, when it refuses the file. */
struct hardlinks_finding {
    enum hardlinks_stop stop;
    int error;           /* HARDLINKS_UNREADABLE: the errno */
    const char *root;    /* the writable path of the view searched, <v>'s */
    unsigned long names; /* the file's number of names */
    char at[PATH_MAX];   /* the other name, or where the search stopped */
};

/* Whether the file at <path> (links followed; not a folder), of which the
 * command cannot change <path> itself (the caller knows), has another name
 * the command could write it through: a name below a writable path of <v>
 * that <v> leaves writable (not below a --ro or --hide path there), or,
 * failing closed, one that the search could not rule out before a bound or
 * an unreadable folder stopped it. A file with no more names than <v>
 * keeps read-only (its distinct --ro paths naming it, and <path>) is not
 * searched for. On true <f> says why. */
bool hardlinks_other_name(const struct box_view *v, const char *path, struct hardlinks_finding *f);

#endif
