"""SIGHUP's reopen of `--log FILE` and `--alerts FILE` runs off the event loop: an open() that
does not return (a hung NFS server, a directory whose lock another process
holds) leaves requests answered and logged; their lines wait in memory, in
order, and go to the new file once it opens.

The open is made to wait for real, with no network file system: after a
rotation the reopen must create the file, which takes the directory's
inode lock; a helper thread here holds that lock by reading the directory
(getdents64) into a page that a userfaultfd leaves unfilled, until the test
fills it. Needs root (userfaultfd for kernel-mode faults) on x86_64 or
aarch64; skipped otherwise."""

import ctypes
import fcntl
import json
import mmap
import os
import platform
import select
import struct
import threading

import pytest

from gate_client import api_rule, other_rule, other_url, poll, request
from watch_helpers import alerts, wait_alert

# (userfaultfd, getdents64, openat, openat2) by machine
SYSCALLS = {"x86_64": (323, 217, 257, 437), "aarch64": (282, 61, 56, 437)}
UFFDIO_API = 0xC018AA3F
UFFDIO_REGISTER = 0xC020AA00
UFFDIO_ZEROPAGE = 0xC020AA04
UFFD_API = 0xAA
UFFDIO_REGISTER_MODE_MISSING = 1
PAGE = mmap.PAGESIZE


class DirLock:
    """Holds <path>'s inode lock (shared: enough to keep a creating open()
    waiting) until release(): a thread reads the directory into a page that
    a userfaultfd leaves missing, so the kernel waits inside getdents64 with
    the lock held."""

    def __init__(self, path):
        machine = platform.machine()
        if machine not in SYSCALLS or os.geteuid() != 0:
            pytest.skip("needs root on x86_64 or aarch64 (userfaultfd for kernel faults)")
        nr_uffd, self._nr_getdents = SYSCALLS[machine][:2]
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long
        self._libc.mmap.restype = ctypes.c_void_p
        self._libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                    ctypes.c_int, ctypes.c_long]
        self._libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.uffd = self._libc.syscall(nr_uffd, os.O_CLOEXEC | os.O_NONBLOCK)
        if self.uffd < 0:
            pytest.skip("userfaultfd: %s" % os.strerror(ctypes.get_errno()))
        self.addr = None
        self.dfd = None
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
            self.dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self.thread = threading.Thread(target=self._read_dir, daemon=True)
            self.thread.start()
            # the fault is reported once the reader is inside getdents64,
            # the directory's lock held
            ready, _, _ = select.select([self.uffd], [], [], 10)
            assert ready, "getdents64 did not fault on the registered page"
            os.read(self.uffd, 32)
        except BaseException:
            self.release()
            raise

    def _read_dir(self):
        # ctypes lets go of the GIL for the call
        self.result.append(self._libc.syscall(self._nr_getdents, self.dfd,
                                              ctypes.c_void_p(self.addr), PAGE))

    def release(self):
        """Fills the page: getdents64 returns, the lock is let go."""
        if self.thread is not None:
            if self.thread.is_alive():
                fcntl.ioctl(self.uffd, UFFDIO_ZEROPAGE,
                            bytearray(struct.pack("QQQq", self.addr, PAGE, 0, 0)))
            self.thread.join(10)
            assert not self.thread.is_alive(), "getdents64 did not return"
            self.thread = None
        if self.dfd is not None:
            os.close(self.dfd)
            self.dfd = None
        if self.uffd >= 0:
            os.close(self.uffd)
            self.uffd = -1
        if self.addr is not None:
            self._libc.munmap(ctypes.c_void_p(self.addr), PAGE)
            self.addr = None


def threads_in_open(pid):
    """The threads of <pid> inside openat or openat2 now."""
    nrs = SYSCALLS[platform.machine()][2:]
    found = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/syscall" % (pid, tid)) as f:
                nr = f.read().split()[0]
        except (OSError, IndexError):
            continue
        if nr.lstrip("-").isdigit() and int(nr) in nrs:
            found.append(int(tid))
    return found


def hold_reopen(gw, path):
    """Rotates <path> (renamed to PATH.1), holds its directory's lock and
    sends SIGHUP; returns (the DirLock, the threads of the gateway in open())
    once the reopen waits in open()."""
    os.rename(path, path + ".1")
    lock = DirLock(os.path.dirname(path))
    try:
        gw.reload()
        stuck = poll(lambda: threads_in_open(gw.proc.pid), timeout=10, interval=0.01,
                     what="the reopen waiting in open()")
    except BaseException:
        lock.release()
        raise
    return lock, stuck


def lines_of(path):
    with open(path, "rb") as f:
        return [json.loads(x) for x in f.read().split(b"\n") if x.strip()]


def paths_in(path):
    return [e.get("path") for e in lines_of(path) if e["event"] == "agent_egress"]


def test_requests_are_answered_and_logged_while_the_reopen_waits(gateway, net, tmp_path):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = str(logdir / "log.jsonl")
    gw = gateway(net.policy([api_rule(net)]), args=["--log", log])
    pid = gw.proc.pid
    assert request(gw, "GET", net.url("/before")).status == 200
    poll(lambda: len(lines_of(log)) >= 2, what="the /before lines")
    lock, stuck = hold_reopen(gw, log)  # rotated: the reopen must create the file
    try:
        # a second SIGHUP while it waits queues one more reopen, not a
        # second thread stuck beside the first
        gw.reload()
        for i in range(3):
            r = request(gw, "GET", net.url("/during%d" % i), timeout=10)
            assert r.status == 200, r.status
        assert threads_in_open(pid) == stuck, "another open() started: %r" % threads_in_open(pid)
        assert pid not in stuck, "the event loop's thread waits in open()"
        # the waiting lines stay in memory (the new name is not looked up
        # here: that lookup would wait for the directory's lock too)
        assert paths_in(log + ".1") == ["/before"]
    finally:
        lock.release()
    poll(lambda: os.path.exists(log) and len(lines_of(log)) >= 6, timeout=10,
         what="the waiting lines in the new file")
    assert request(gw, "GET", net.url("/after")).status == 200
    poll(lambda: len(lines_of(log)) >= 8, what="the /after lines")
    gw.stop()
    assert paths_in(log + ".1") == ["/before"]
    new = lines_of(log)
    assert [e.get("path") for e in new if e["event"] == "agent_egress"] == [
        "/during0", "/during1", "/during2", "/after"]
    # each request's end line, once, after its decision line: nothing lost
    for ev in (e for e in new if e["event"] == "agent_egress"):
        ends = [i for i, e in enumerate(new) if e["event"] == "agent_egress_end" and
                e["id"] == ev["id"]]
        assert len(ends) == 1 and ends[0] > new.index(ev), new
    assert len(new) == 8, new
    assert "cannot reopen" not in gw.stderr(), gw.stderr()


def test_alerts_wait_for_their_reopen_and_requests_go_on(gateway, net, tmp_path):
    # The same for --alerts FILE (its own reopen, watch_reopen()): the log
    # is elsewhere, only the alerts file's directory is held.
    logdir = tmp_path / "alerts"
    logdir.mkdir()
    path = str(logdir / "alerts.jsonl")
    gw = gateway(net.policy([api_rule(net), other_rule(net)], alerts={"first_contact": True}),
                 args=["--alerts", path])
    pid = gw.proc.pid
    assert request(gw, "GET", net.url("/before")).status == 200
    wait_alert(path, "first_contact", host="api.example.test")
    lock, _ = hold_reopen(gw, path)
    try:
        # a host first contacted now: its alert waits for the new file
        assert request(gw, "GET", other_url(net, "/during"), timeout=10).status == 200
        assert request(gw, "GET", net.url("/during"), timeout=10).status == 200
        gw.decided(path="/during")
        assert pid not in threads_in_open(pid), "the event loop's thread waits in open()"
        assert [a["host"] for a in alerts(path + ".1")] == ["api.example.test"]
    finally:
        lock.release()
    wait_alert(path, "first_contact", host="other.example.test")
    gw.stop()
    assert [a["host"] for a in alerts(path + ".1")] == ["api.example.test"]
    assert [a["host"] for a in alerts(path)] == ["other.example.test"]
    assert "cannot reopen" not in gw.stderr(), gw.stderr()


def test_a_stop_while_the_reopen_waits_says_what_it_could_not_write(gateway, net, tmp_path):
    # SIGTERM while the reopen's open() waits: the stop is not held by it
    # beyond the log's flush time; the lines that waited are named as not
    # written (they had no file to go to), and the thread, left alone,
    # ends when the open returns.
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = str(logdir / "log.jsonl")
    gw = gateway(net.policy([api_rule(net)]), args=["--log", log, "--grace", "1"])
    lock, _ = hold_reopen(gw, log)
    try:
        assert request(gw, "GET", net.url("/during"), timeout=10).status == 200
        gw.proc.send_signal(15)
        poll(lambda: "not written at exit" in gw.stderr(), timeout=30,
             what="the stop giving up on the reopen")
    finally:
        lock.release()
    assert gw.wait_exit(30) == 0, gw.stderr()
    err = gw.stderr()
    assert "sluice: log %s: the reopen is still waiting for open()" % log in err, err
    assert "sluice: log %s: 2 line(s) (" % log in err, err
    assert lines_of(log + ".1") == []
