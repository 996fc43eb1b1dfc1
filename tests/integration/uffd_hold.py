"""Makes a system call wait inside the kernel for as long as a test wants,
with no network file system: the call is given a page that a userfaultfd
leaves missing, so the kernel waits at its first touch of that page, still
holding the locks it took before it (a directory's inode lock in
getdents64, a file's in write), until release() fills the page. Needs root
(userfaultfd for kernel-mode faults) on x86_64 or aarch64; skips the test
otherwise."""

import ctypes
import fcntl
import mmap
import os
import platform
import select
import struct
import threading

import pytest

from gate_client import poll

# (userfaultfd, getdents64, openat, openat2, write, writev, pwrite64) by machine
SYSCALLS = {"x86_64": (323, 217, 257, 437, 1, 20, 18), "aarch64": (282, 61, 56, 437, 64, 66, 68)}
UFFDIO_API = 0xC018AA3F
UFFDIO_REGISTER = 0xC020AA00
UFFDIO_COPY = 0xC028AA03
UFFD_API = 0xAA
UFFDIO_REGISTER_MODE_MISSING = 1
PAGE = mmap.PAGESIZE


def syscall_nr(name):
    names = ("userfaultfd", "getdents64", "openat", "openat2", "write", "writev", "pwrite64")
    return SYSCALLS[platform.machine()][names.index(name)]


class KernelHold:
    """Calls <call>(libc, addr) on a thread, <addr> a page that a
    userfaultfd leaves missing: the kernel waits inside the call until
    release() fills the page with <fill> (repeated)."""

    def __init__(self, call, fill=b"\0"):
        if platform.machine() not in SYSCALLS or os.geteuid() != 0:
            pytest.skip("needs root on x86_64 or aarch64 (userfaultfd for kernel faults)")
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long
        self._libc.mmap.restype = ctypes.c_void_p
        self._libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                    ctypes.c_int, ctypes.c_long]
        self._libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.uffd = self._libc.syscall(syscall_nr("userfaultfd"), os.O_CLOEXEC | os.O_NONBLOCK)
        if self.uffd < 0:
            pytest.skip("userfaultfd: %s" % os.strerror(ctypes.get_errno()))
        self._call = call
        self._fill = ctypes.create_string_buffer((fill * PAGE)[:PAGE], PAGE)
        self.addr = None
        self.thread = None
        self.result = []
        try:
            fcntl.ioctl(self.uffd, UFFDIO_API, bytearray(struct.pack("QQQ", UFFD_API, 0, 0)))
            addr = self._libc.mmap(None, PAGE, mmap.PROT_READ | mmap.PROT_WRITE,
                                   mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
            assert addr not in (None, ctypes.c_void_p(-1).value), "mmap failed"
            self.addr = addr
            fcntl.ioctl(self.uffd, UFFDIO_REGISTER, bytearray(
                struct.pack("QQQQ", addr, PAGE, UFFDIO_REGISTER_MODE_MISSING, 0)))
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
            # the fault is reported once the call touches the page, its
            # locks held
            ready, _, _ = select.select([self.uffd], [], [], 10)
            assert ready, "the call did not fault on the registered page"
            os.read(self.uffd, 32)
        except BaseException:
            self.release()
            raise

    def _run(self):
        # ctypes lets go of the GIL for the call
        self.result.append(self._call(self._libc, ctypes.c_void_p(self.addr)))

    def release(self):
        """Fills the page: the call returns, its locks let go."""
        if self.thread is not None:
            if self.thread.is_alive():
                fcntl.ioctl(self.uffd, UFFDIO_COPY, bytearray(struct.pack(
                    "QQQQq", self.addr, ctypes.addressof(self._fill), PAGE, 0, 0)))
            self.thread.join(10)
            assert not self.thread.is_alive(), "the held call did not return"
            self.thread = None
        if self.uffd >= 0:
            os.close(self.uffd)
            self.uffd = -1
        if self.addr is not None:
            self._libc.munmap(ctypes.c_void_p(self.addr), PAGE)
            self.addr = None


class FdHold(KernelHold):
    """KernelHold of the system call <name>(fd, page, <count>, *<more>) on
    <fd>, a descriptor it owns (closed at release)."""

    def __init__(self, fd, name, count, fill=b"\0", more=()):
        self.fd = fd
        nr = syscall_nr(name)
        try:
            super().__init__(lambda libc, addr: libc.syscall(nr, fd, addr, count, *more), fill)
        except BaseException:
            if self.fd is not None:  # (not closed by a release on the way)
                os.close(fd)
            raise

    def release(self):
        super().release()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def DirLock(path):
    """Holds <path>'s inode lock (shared: enough to keep a creating open()
    waiting) until release(): getdents64 of the directory into the page."""
    return FdHold(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), "getdents64", PAGE)


def FileLock(path):
    """Holds the regular file <path>'s inode lock (i_rwsem) until release():
    a write() of one byte from the page, appended to the file, waits for
    the page with the lock taken, so every other write to the file waits
    too. That byte is a newline: a blank line in a JSON-lines file."""
    return FdHold(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC), "write", 1, b"\n")


def WalLock(path):
    """Holds the inode lock of the SQLite log <path> until release(): a
    pwrite64() of a page 64 MiB into the file, past any frame a test's store
    writes (SQLite reads no further than its frames), so SQLite's own writes
    of the log, and a root connection's fchown() of it, wait."""
    return FdHold(os.open(path, os.O_WRONLY | os.O_CLOEXEC), "pwrite64", PAGE,
                  more=(ctypes.c_long(64 << 20),))


def stop_while_held(gw, lock, during):
    """Calls <during>() while <lock> holds, sends SIGTERM and waits for the
    stop to give up on what waits ("not written at exit" on standard
    error); then releases <lock> (the process cannot end while a thread of
    it waits in the kernel) and returns the exit status."""
    try:
        during()
        gw.proc.send_signal(15)
        poll(lambda: "not written at exit" in gw.stderr(), timeout=30,
             what="the stop giving up on what waits")
    finally:
        lock.release()
    return gw.wait_exit(30)


def threads_in(pid, *names, path=None):
    """The threads of <pid> inside one of the system calls <names> now (with
    <path>: on a descriptor of that file, the call's first argument)."""
    nrs = [syscall_nr(n) for n in names]
    found = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/syscall" % (pid, tid)) as f:
                fields = f.read().split()
            if not fields[0].lstrip("-").isdigit() or int(fields[0]) not in nrs:
                continue
            if path is not None and os.readlink(
                    "/proc/%d/fd/%d" % (pid, int(fields[1], 16))) != os.path.realpath(path):
                continue
        except (OSError, IndexError, ValueError):
            continue
        found.append(int(tid))
    return found
