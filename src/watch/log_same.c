/* log_same: see log_same.h. */
#include "watch/log_same.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/open_nolinks.h"
#include "util/stderr_relay.h"
#include "watch/log_jsonl.h"

static bool is_stdout(const char *path)
{
    return path == NULL || strcmp(path, "-") == 0;
}

static bool same_inode(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Fills <st> with what log_jsonl_open() of <path> writes. An O_PATH open
 * (no read, no write: a FIFO is not waited on, a socket not refused, the
 * file not created) follows the path as the log's open would, /dev/stdout
 * included; the relay's pipe (/dev/stderr while the relay runs) stands for
 * the standard error the process was started with, which the log writes
 * instead (open_path()). Returns false when the path names nothing (yet):
 * then it is not the file of a log already open. */
static bool named_file(const char *path, unsigned flags, struct stat *st)
{
    if (is_stdout(path))
        return fstat(STDOUT_FILENO, st) == 0;
    int o = O_PATH | O_CLOEXEC;
    int fd = (flags & LOG_JSONL_NO_LINKS) ? open_no_links(path, o, 0) : open(path, o);
    if (fd < 0)
        return false;
    bool ok = fstat(fd, st) == 0;
    close(fd);
    struct stat relay;
    int original = stderr_relay_hold();
    if (ok && original != STDERR_FILENO && fstat(STDERR_FILENO, &relay) == 0 &&
        same_inode(st, &relay))
        ok = fstat(original, st) == 0;
    stderr_relay_release();
    return ok;
}

bool log_same_file(const char *a, const char *b, unsigned flags)
{
    bool sa = is_stdout(a), sb = is_stdout(b);
    if (sa && sb)
        return true;
    if (!sa && !sb && strcmp(a, b) == 0)
        return true;
    struct stat fa, fb;
    return named_file(a, flags, &fa) && named_file(b, flags, &fb) && same_inode(&fa, &fb);
}
