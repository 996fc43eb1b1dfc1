/* store_files: the permissions of the state store's files (see
 * store_files.h). */
#include "state/store_files.h"
#include "state/store.h"
#include "util/text_json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "PATH: DOING: REASON", PATH shown \ooo (text_shown()), as the state
 * store's other messages name its paths; NULL when out of memory. */
static char *failed(const char *raw, const char *doing, int err)
{
    const char *reason = strerror(err);
    char *path = text_shown(raw);
    size_t n = strlen(path) + strlen(doing) + strlen(reason) + 8;
    char *m = malloc(n);
    if (m != NULL)
        snprintf(m, n, "%s: %s: %s", path, doing, reason);
    free(path);
    return m;
}

/* Takes other users' permissions from the file at <path>, made when
 * <create>. Returns 0, or -1 with <*why>. */
static int private_file(const char *path, int create, char **why)
{
    /* O_NONBLOCK: a FIFO in the file's place does not hold the start up
     * (it is not a regular file, and is left alone). O_NOFOLLOW: a link
     * is not ours to change; the opener refuses it. */
    int flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (create ? O_CREAT : 0);
    int fd = open(path, flags, STORE_FILE_MODE);
    if (fd < 0) {
        if (errno == ENOENT || errno == ELOOP)
            return 0;
        *why = failed(path, "cannot open it to make it private", errno);
        return -1;
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        *why = failed(path, "cannot read its mode", errno);
        rc = -1;
    } else if (S_ISREG(st.st_mode) && (st.st_mode & S_IRWXO) != 0 &&
               fchmod(fd, st.st_mode & 07770) != 0) {
        *why = failed(path, "readable by other users, and cannot be made private", errno);
        rc = -1;
    }
    close(fd);
    return rc;
}

int store_files_private(const char *dir, char **why)
{
    static const char *const files[] = {STORE_FILE, STORE_FILE "-wal", STORE_FILE "-shm",
                                        STORE_FILE "-journal", STORE_LOCK_FILE};
    *why = NULL;
    for (size_t k = 0; k < sizeof(files) / sizeof(files[0]); k++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", dir, files[k]);
        if (private_file(path, k == 0, why) < 0)
            return -1;
    }
    return 0;
}
