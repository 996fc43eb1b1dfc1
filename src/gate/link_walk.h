/* link_walk: whether a path can be led elsewhere by a user who may write
 * a folder of it: the warning `serve` gives about a policy file
 * (gate/gateway.c) whose path passes through a folder every user may write
 * without the sticky bit.
 *
 * Owns nothing: the walk reads the file system (lstat, readlink) into the
 * caller's buffers. */
#ifndef SLUICE_GATE_LINK_WALK_H
#define SLUICE_GATE_LINK_WALK_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* The most symbolic links link_walk_open_folder() follows on one path, as
 * the kernel's own walk (ELOOP past 40). */
#define LINK_WALK_MAX_HOPS 40

/* True when the folder <dir> lets every user rename a file over one in it:
 * writable by all, without the sticky bit (its stat() in *ds). */
bool folder_open_to_all(const char *dir, struct stat *ds);

/* What link_walk_open_folder() found in a folder every user may write
 * without the sticky bit. */
enum link_walk_found {
    LINK_WALK_NONE,   /* none, or the walk could not be made */
    LINK_WALK_ENTRY,  /* a symbolic link of the walk, or the file it ends at */
    LINK_WALK_FOLDER, /* a plain folder of the path (no link) */
};

/* Walks <path> as the kernel resolves it, link by link, and finds the
 * first folder that holds a name of the walk (a symbolic link, a plain
 * folder, or the file it ends at) and that every user may write without
 * the sticky bit: anyone may rename another link or file over that name,
 * or a plain folder away within that folder (a rename in one folder needs
 * no right on what is renamed, as moving a folder elsewhere does) and put
 * one of their own in its place, and so choose what the path leads to.
 * Returns which it is, with that folder in <dir> (its stat() in *ds) and
 * the name in it, the folders before it resolved, in <entry>;
 * LINK_WALK_NONE when there is none or the walk cannot be made (a
 * dangling link, more than LINK_WALK_MAX_HOPS links, a name longer than
 * PATH_MAX). */
enum link_walk_found link_walk_open_folder(const char *path, char *dir, size_t dircap, char *entry,
                                           size_t entrycap, struct stat *ds);

#endif
