/* read_hold: preloaded into the gateway by test_webhook_store_reads.py, a
 * stand-in for a file system that stops answering reads: while the file
 * named by SLUICE_TEST_READ_HOLD exists, every pread() of the state
 * store's files (sluice.db, its -wal), by any thread, waits. A read of a
 * regular file takes no lock a userfaultfd hold (uffd_hold.py) could keep,
 * so the wait is made here.
 *
 * Each read held is told to the file named by SLUICE_TEST_READ_HOLD_LOG (a
 * test must see that a read was held, not take it that one was: reads the
 * page cache serves make none), one line as the wait begins and one as it
 * ends:  "held <tid> <pid> <offset> <path>" and "released <tid> ...". */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

ssize_t pread(int fd, void *buf, size_t n, off_t off);
ssize_t pread64(int fd, void *buf, size_t n, off_t off);

/* True when <fd> is one of the store's files (its path in <path>) and the
 * hold file exists. */
static int held(int fd, char *path, size_t size)
{
    const char *flag = getenv("SLUICE_TEST_READ_HOLD");
    char link[64];
    if (flag == NULL || access(flag, F_OK) != 0)
        return 0;
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, path, size - 1);
    if (len <= 0)
        return 0;
    path[len] = '\0';
    return strstr(path, "/sluice.db") != NULL && strstr(path, "-shm") == NULL;
}

/* Appends "<what> <tid> <pid> <off> <path>" to the log file, if one is named. */
static void tell(const char *what, off_t off, const char *path)
{
    const char *log = getenv("SLUICE_TEST_READ_HOLD_LOG");
    char line[PATH_MAX + 128];
    if (log == NULL)
        return;
    int n = snprintf(line, sizeof(line), "%s %ld %ld %lld %s\n", what, (long)syscall(SYS_gettid),
                     (long)getpid(), (long long)off, path);
    int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    if (n > 0 && write(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1) < 0)
        n = 0; /* a test that finds no line fails: nothing more to do here */
    close(fd);
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
    char path[PATH_MAX];
    if (held(fd, path, sizeof(path))) {
        tell("held", off, path);
        while (held(fd, path, sizeof(path)))
            usleep(10000);
        tell("released", off, path);
    }
    return syscall(SYS_pread64, fd, buf, n, off);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    return pread64(fd, buf, n, off);
}
