/* read_hold: preloaded into the gateway by test_webhook_store_reads.py, a
 * stand-in for a file system that stops answering reads: while the file
 * named by SLUICE_TEST_READ_HOLD exists, every pread() of the state
 * store's files (sluice.db, its -wal), by any thread, waits. A read of a
 * regular file takes no lock a userfaultfd hold (uffd_hold.py) could keep,
 * so the wait is made here. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

ssize_t pread(int fd, void *buf, size_t n, off_t off);
ssize_t pread64(int fd, void *buf, size_t n, off_t off);

static int held(int fd)
{
    const char *flag = getenv("SLUICE_TEST_READ_HOLD");
    char link[64], path[PATH_MAX];
    if (flag == NULL || access(flag, F_OK) != 0)
        return 0;
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, path, sizeof(path) - 1);
    if (len <= 0)
        return 0;
    path[len] = '\0';
    return strstr(path, "/sluice.db") != NULL && strstr(path, "-shm") == NULL;
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
    while (held(fd))
        usleep(10000);
    return syscall(SYS_pread64, fd, buf, n, off);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    return pread64(fd, buf, n, off);
}
