/* open_nolinks: opening a file by a path with no symbolic link in it.
 *
 * `sluice run` refuses a --log or --alerts path that passes through a
 * symbolic link (an agent of an earlier run may have planted one in its
 * writable folder), but that check and the gateway's open are two steps:
 * a link made between them would still be followed, by a gateway that is
 * root until its files are open. Opening with RESOLVE_NO_SYMLINKS makes the
 * check and the open one step. */
#ifndef SLUICE_UTIL_OPEN_NOLINKS_H
#define SLUICE_UTIL_OPEN_NOLINKS_H

#include <sys/types.h>

/* open(2) of <path> with <flags> and <mode>, refused with ELOOP when any
 * component of <path> (the last included) is a symbolic link. Uses
 * openat2(2); on a kernel without it (before 5.6) only the last component
 * is checked (O_NOFOLLOW). Returns the descriptor (the caller's to close),
 * or -1 with errno set. */
int open_no_links(const char *path, int flags, mode_t mode);

#endif
