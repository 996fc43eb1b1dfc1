"""A thread that holds a file's inode lock for a test: it writes to the
file from a page that a userfaultfd leaves unfilled, so the kernel waits
inside the write with the lock held (a write() takes the lock before it
copies from the caller's buffer), and anything else that writes the file
(or fchown()s it) waits for the lock, as on a file system that does not
answer. Needs root (userfaultfd for kernel-mode faults) on x86_64 or
aarch64: skips the test otherwise."""

import ctypes
import fcntl
import mmap
import os
import platform
import select
import struct
import threading

import pytest

# (userfaultfd, pwrite64, write) by machine
SYSCALLS = {"x86_64": (323, 18, 1), "aarch64": (282, 68, 64)}
UFFDIO_API = 0xC018AA3F
UFFDIO_REGISTER = 0xC020AA00
UFFDIO_ZEROPAGE = 0xC020AA04
UFFD_API = 0xAA
UFFDIO_REGISTER_MODE_MISSING = 1
PAGE = mmap.PAGESIZE
# where the helper's page lands once let go: 64 MiB into the file, past
# anything the tests write there (a SQLite log's frames), where nothing
# reads it
PAST_THE_LOG = 64 << 20


class InodeHold:
    """Holds <path>'s inode lock until release(): a thread writes to it
    from a page that a userfaultfd leaves missing, so the kernel waits
    inside the write with the lock held."""

    def __init__(self, path):
        machine = platform.machine()
        if machine not in SYSCALLS or os.geteuid() != 0:
            pytest.skip("needs root on x86_64 or aarch64 (userfaultfd for kernel faults)")
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long
        self._libc.mmap.restype = ctypes.c_void_p
        self._libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                    ctypes.c_int, ctypes.c_long]
        self._libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self._libc.pwrite64.restype = ctypes.c_ssize_t
        self._libc.pwrite64.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                                        ctypes.c_long]
        self.uffd = self._libc.syscall(SYSCALLS[machine][0], os.O_CLOEXEC | os.O_NONBLOCK)
        if self.uffd < 0:
            pytest.skip("userfaultfd: %s" % os.strerror(ctypes.get_errno()))
        self.addr = None
        self.fd = None
        self.thread = None
        try:
            fcntl.ioctl(self.uffd, UFFDIO_API, bytearray(struct.pack("QQQ", UFFD_API, 0, 0)))
            addr = self._libc.mmap(None, PAGE, mmap.PROT_READ | mmap.PROT_WRITE,
                                   mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
            assert addr not in (None, ctypes.c_void_p(-1).value), "mmap failed"
            self.addr = addr
            fcntl.ioctl(self.uffd, UFFDIO_REGISTER, bytearray(
                struct.pack("QQQQ", addr, PAGE, UFFDIO_REGISTER_MODE_MISSING, 0)))
            self.fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            self.thread = threading.Thread(target=self._write, daemon=True)
            self.thread.start()
            # the fault is reported once the writer is inside pwrite64, the
            # file's lock held
            ready, _, _ = select.select([self.uffd], [], [], 10)
            assert ready, "pwrite64 did not fault on the registered page"
            os.read(self.uffd, 32)
        except BaseException:
            self.release()
            raise

    def _write(self):
        # ctypes lets go of the GIL for the call
        self._libc.pwrite64(self.fd, ctypes.c_void_p(self.addr), PAGE, PAST_THE_LOG)

    def release(self):
        """Fills the page: the write returns, the lock is let go."""
        if self.thread is not None:
            if self.thread.is_alive():
                fcntl.ioctl(self.uffd, UFFDIO_ZEROPAGE,
                            bytearray(struct.pack("QQQq", self.addr, PAGE, 0, 0)))
            self.thread.join(10)
            assert not self.thread.is_alive(), "pwrite64 did not return"
            self.thread = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.uffd >= 0:
            os.close(self.uffd)
            self.uffd = -1
        if self.addr is not None:
            self._libc.munmap(ctypes.c_void_p(self.addr), PAGE)
            self.addr = None


def threads_in_write(pid, path):
    """The threads of <pid> inside pwrite64 or write of <path> now."""
    nrs = SYSCALLS[platform.machine()][1:]
    found = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/syscall" % (pid, tid)) as f:
                fields = f.read().split()
            if not fields[0].isdigit() or int(fields[0]) not in nrs:
                continue
            fd = int(fields[1], 16)
            if os.readlink("/proc/%d/fd/%d" % (pid, fd)) == os.path.realpath(path):
                found.append(int(tid))
        except (OSError, IndexError, ValueError):
            continue
    return found
