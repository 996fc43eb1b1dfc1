/* unix_listen: the listening unix stream socket of a path, as every
 * `unix:` address of serve is bound (--listen in gate/listener.c, --admin
 * in watch/admin.c): a socket file left by a server that did not remove
 * it (nothing listens there) is taken over, a live one or any other file
 * is an error, the socket is made mode 0660 (its owner and group may
 * connect), and at the end it is removed only while the path still names
 * it, not a socket another server bound there after ours was removed. */
#ifndef SLUICE_UTIL_UNIX_LISTEN_H
#define SLUICE_UTIL_UNIX_LISTEN_H

#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

/* Binds the unix stream socket <un> (<len> bytes), non-blocking and
 * close-on-exec, not listening yet; sets <*bound> to its file as bound.
 * Returns the socket (the caller owns it), or -1 with a message in <err>
 * that starts with <name>, how the operator named the address. */
int unix_listen_bind(const struct sockaddr_un *un, socklen_t len, const char *name,
                     struct stat *bound, char *err, size_t errlen);
/* Removes the socket file <path> when it is still the one <bound>
 * describes (device and inode). */
void unix_listen_unlink_own(const char *path, const struct stat *bound);

#endif
