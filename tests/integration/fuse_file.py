"""A file on a FUSE file system that a helper process of the test serves
through /dev/fuse and mount(2), with no FUSE library: what a read of it
does is the test's to choose (give the data, fail with EIO, or not answer
at all until release(), as a hung network or FUSE file system would).
Needs root and /dev/fuse; skips the test otherwise.

The server is a process of its own, not a thread of the test's: a process
the test forks (subprocess) closes its copy of the file before it
executes, and that close waits for the server's answer (FLUSH), which a
thread of the test could not give while the fork holds the interpreter.

One file, FILE_NAME, in the root folder of the mount; the PID of the
process that made each READ request is recorded (run's, or the
command's). Writes to it are taken into its data, or failed with EAGAIN,
as a FUSE or network file system that would block may answer them."""

import ctypes
import errno
import json
import os
import select
import struct
import subprocess
import sys
import time

import pytest

FILE_NAME = "in.txt"

# opcodes (linux/fuse.h)
LOOKUP, FORGET, GETATTR, OPEN, READ, WRITE, STATFS, RELEASE, FLUSH, INIT = (
    1, 2, 3, 14, 15, 16, 17, 18, 25, 26)
OPENDIR, READDIR, RELEASEDIR, INTERRUPT, DESTROY, BATCH_FORGET = 27, 28, 29, 36, 38, 42
FOPEN_NONSEEKABLE = 4
IN_HEADER = struct.Struct("<IIQQIIIHH")  # len, opcode, unique, nodeid, uid, gid, pid, ...
OUT_HEADER = struct.Struct("<IiQ")  # len, error, unique
WRITE_IN = struct.Struct("<QQIIQII")  # fh, offset, size, write_flags, lock_owner, flags, -
ROOT, FILE = 1, 2


class FuseFile:
    """Mounts a FUSE file system on the existing folder <mnt> holding one
    file of <data> (bytes). <reads>: "data" answers reads, "eio" fails
    them, "hold" keeps them unanswered until release(). <nonseekable_from>:
    the opens of the file from that one on (1 the first) are nonseekable
    (FOPEN_NONSEEKABLE), as a FUSE file system may make them. <writes>:
    "data" takes writes into the file's data, "eagain" fails them with
    EAGAIN (set_writes() changes it)."""

    def __init__(self, mnt, data, reads="data", nonseekable_from=0, writes="data"):
        if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
            pytest.skip("needs root and /dev/fuse")
        self.mnt = mnt
        self.path = os.path.join(mnt, FILE_NAME)
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), mnt, reads, str(nonseekable_from),
             data.hex(), writes], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        said = self._proc.stdout.readline().strip()
        if said != "ready":
            self._proc.wait(10)
            pytest.skip("cannot mount a FUSE file system: %s" % said)

    def _ask(self, what):
        self._proc.stdin.write(what + "\n")
        self._proc.stdin.flush()
        return json.loads(self._proc.stdout.readline())

    def release(self):
        """Answers the reads held so far with the data, and every later
        one."""
        self._ask("release")

    def set_writes(self, writes):
        """Writes from now on: "data" or "eagain" (see the class)."""
        self._ask("writes " + writes)

    def content(self):
        """The file's data, the writes it took included."""
        return bytes.fromhex(self._ask("content"))

    def read_pids(self):
        """The PID of the process that made each READ request so far."""
        return self._ask("pids")

    def close(self):
        """Unmounts (lazily) and ends the connection: a read still waiting
        fails (ENOTCONN)."""
        try:
            self._proc.stdin.close()
        finally:
            self._proc.wait(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def stop_during_held_read(fs, argv, sig, err_path, **popen_args):
    """Starts <argv> (standard output /dev/null, error into <err_path>), and
    once it reads <fs>'s file (held: reads="hold") sends it <sig>. Returns
    its status within 30 s of the signal (a hang guard, not a claim on
    time), or None when it had not ended by then; it is killed and <fs>
    closed either way (a read still held fails: the process can end)."""
    with open(err_path, "wb") as f:
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=f, **popen_args)
    try:
        deadline = time.monotonic() + 20
        while not fs.read_pids():
            assert p.poll() is None and time.monotonic() < deadline, \
                "the start-up load never read the file (status %s)" % p.poll()
            time.sleep(0.02)
        p.send_signal(sig)
        return p.wait(30)
    except subprocess.TimeoutExpired:
        return None
    finally:
        if p.poll() is None:
            p.kill()
        fs.close()
        p.wait(30)


class Server:
    """The helper process: serves the mount until its standard input ends,
    answering "release" and "pids" there."""

    def __init__(self, mnt, reads, nonseekable_from, data, writes):
        self.mnt = mnt
        self.reads = reads
        self.writes = writes
        self.nonseekable_from = nonseekable_from
        self.data = data
        self.opens = 0
        self.read_pids = []
        self.held = []  # the READ requests not answered: (unique, offset, size)
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = os.open("/dev/fuse", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        opts = "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other" % self.fd
        if self.libc.mount(b"sluice-test", mnt.encode(), b"fuse", 0x2 | 0x4,  # nosuid, nodev
                           opts.encode()) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))

    def run(self):
        print("ready", flush=True)
        try:
            while True:
                ready, _, _ = select.select([self.fd, sys.stdin], [], [])
                if sys.stdin in ready:
                    line = sys.stdin.readline()
                    if not line:
                        return
                    what = line.split()
                    if what == ["release"]:
                        self.release()
                    elif what[:1] == ["writes"]:
                        self.writes = what[1]
                    answer = self.data.hex() if what == ["content"] else self.read_pids
                    print(json.dumps(answer), flush=True)
                if self.fd in ready:
                    try:
                        req = os.read(self.fd, 1 << 21)
                    except OSError as e:
                        if e.errno in (errno.EAGAIN, errno.EINTR, errno.ENOENT):
                            continue
                        return  # ENODEV: unmounted
                    self.handle(req)
        finally:
            self.libc.umount2(self.mnt.encode(), 2)  # MNT_DETACH
            os.close(self.fd)

    def release(self):
        self.reads = "data"
        held, self.held = self.held, []
        for unique, offset, size in held:
            self.reply(unique, 0, self.data[offset:offset + size])

    def reply(self, unique, error, payload=b""):
        try:
            os.write(self.fd, OUT_HEADER.pack(OUT_HEADER.size + len(payload), -error, unique) +
                     payload)
        except OSError as e:
            if e.errno != errno.ENOENT:  # the request was interrupted meanwhile
                raise

    def attr(self, node):
        if node == ROOT:
            mode, size, nlink = 0o40755, 0, 2
        else:
            mode, size, nlink = 0o100644, len(self.data), 1
        return struct.pack("<QQQQQQIIIIIIIIII", node, size, (size + 511) // 512, 0, 0, 0,
                           0, 0, 0, mode, nlink, 0, 0, 0, 4096, 0)

    def handle(self, req):
        _, op, unique, node, _, _, pid, _, _ = IN_HEADER.unpack_from(req)
        body = req[IN_HEADER.size:]
        if op in (FORGET, BATCH_FORGET):
            return
        if op == INIT:
            readahead = struct.unpack_from("<III", body)[2]
            self.reply(unique, 0, struct.pack("<IIIIHHIIHHIIH22x", 7, 31, readahead, 0, 16, 12,
                                              65536, 1, 0, 0, 0, 0, 0))
        elif op == LOOKUP:
            name = body.split(b"\0", 1)[0]
            if node != ROOT or name != FILE_NAME.encode():
                self.reply(unique, errno.ENOENT)
            else:
                self.reply(unique, 0, struct.pack("<QQQQII", FILE, 0, 0, 0, 0, 0) +
                           self.attr(FILE))
        elif op == GETATTR:
            self.reply(unique, 0, struct.pack("<QII", 0, 0, 0) + self.attr(node))
        elif op == OPEN:
            self.opens += 1
            nonseekable = 0 < self.nonseekable_from <= self.opens
            flags = FOPEN_NONSEEKABLE if nonseekable else 0
            self.reply(unique, 0, struct.pack("<QII", 0, flags, 0))
        elif op == OPENDIR:
            self.reply(unique, 0, struct.pack("<QII", 0, 0, 0))
        elif op == READ:
            offset, size = struct.unpack_from("<QQI", body)[1:]
            self.read_pids.append(pid)
            reads = self.reads
            if reads == "hold":
                self.held.append((unique, offset, size))
            if reads == "eio":
                self.reply(unique, errno.EIO)
            elif reads == "data":
                self.reply(unique, 0, self.data[offset:offset + size])
        elif op == WRITE:
            offset, size = WRITE_IN.unpack_from(body)[1:3]
            if self.writes == "eagain":
                self.reply(unique, errno.EAGAIN)
                return
            data = body[WRITE_IN.size:WRITE_IN.size + size]
            self.data = self.data[:offset].ljust(offset, b"\0") + data + \
                self.data[offset + size:]
            self.reply(unique, 0, struct.pack("<II", size, 0))
        elif op == INTERRUPT:
            # the reader was signalled (run killed, say): its held read
            # ends with EINTR, as a FUSE server that supports interrupts
            # answers it
            (target,) = struct.unpack_from("<Q", body)
            found = [h for h in self.held if h[0] == target]
            self.held = [h for h in self.held if h[0] != target]
            if found:
                self.reply(target, errno.EINTR)
        elif op == READDIR:
            self.reply(unique, 0)
        elif op == STATFS:
            self.reply(unique, 0, struct.pack("<QQQQQIIII24x", 0, 0, 0, 0, 0, 4096, 255, 4096,
                                              0))
        elif op in (RELEASE, RELEASEDIR, FLUSH, DESTROY):
            self.reply(unique, 0)
        else:
            self.reply(unique, errno.ENOSYS)


if __name__ == "__main__":
    try:
        server = Server(sys.argv[1], sys.argv[2], int(sys.argv[3]), bytes.fromhex(sys.argv[4]),
                        sys.argv[5])
    except OSError as e:
        print(e.strerror, flush=True)
        sys.exit(1)
    server.run()
