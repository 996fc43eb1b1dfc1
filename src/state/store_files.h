/* store_files: the permissions of the state store's files.
 *
 * SQLite makes a database with mode 0644 less the umask, and its -wal and
 * -shm with the database's mode: under the usual umask 022, every user who
 * could search the state directory (one the administrator made 0755) could
 * read the first contacts and the queued webhook alerts, and, since an
 * fcntl() lock needs only a descriptor open for reading, hold a read lock
 * on the -shm file's byte of the write lock: every commit then failed
 * "database is locked" for as long as they held it, the writes piling up
 * and dropped past their caps. So sluice.db is made STORE_FILE_MODE before
 * SQLite opens it (its -wal and -shm follow), and the store's files that
 * exist lose every permission of other users: a -journal too (a rollback
 * journal holds pages of the store; one left by a store made before, or
 * by another tool, keeps the mode its database had then).
 *
 * No I/O but open(), fstat(), fchmod() and close() on the five files; no
 * allocation but the error message. */
#ifndef SLUICE_STATE_STORE_FILES_H
#define SLUICE_STATE_STORE_FILES_H

#define STORE_FILE_MODE 0640 /* as the lock file: the group is the administrator's */

/* Makes <dir>/sluice.db, mode STORE_FILE_MODE, when it is missing, and
 * takes every permission of other users from sluice.db, its -wal, -shm and
 * -journal and sluice.lock where they are regular files (a symbolic link is left to
 * the opener, which refuses it). To be called while this process holds no
 * SQLite connection to them: closing a descriptor of a file drops the
 * fcntl() locks the process holds on it. Returns 0, or -1 with <*why> a
 * malloc'd message naming the file and the reason. */
int store_files_private(const char *dir, char **why);

#endif
