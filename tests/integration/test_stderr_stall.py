"""Standard error that nobody reads: `sluice serve` with its standard error
on a pipe whose reader is alive but does not read (a stalled supervisor or
log shipper) keeps gating; the messages it could not write are counted and
the count told once standard error is read again. Loopback only."""

import fcntl
import os
import shlex
import threading
import time
import urllib.request

from gate_client import request
from watch_helpers import free_tcp_port, write_script

F_SETPIPE_SZ = 1031


def long_programs(tmp_path, marks, k):
    """<k> exec sink programs, each under a path of its own of about 3 KiB
    (so that each one's "exited with status" message is that long), that
    leave a mark and fail. A mark names the program's standard output and
    error; its name is a random UUID, not the program's PID, which another
    run may be given again (the machine's other processes wrap PIDs round
    within a test: two runs' marks were one). Several programs: each one's
    failures are told at most once a minute, its first at once. Returns
    their paths."""
    progs = []
    for j in range(k):
        d = str(tmp_path / ("p%02d" % j))
        for i in range(14):
            d = os.path.join(d, ("d%02d" % i) + "x" * 197)
        os.makedirs(d)
        progs.append(write_script(
            os.path.join(d, "fail.sh"),
            "#!/bin/sh\ncat >/dev/null\n"
            "o=$(readlink /proc/$$/fd/1 /proc/$$/fd/2)\n"
            "m=%s/$(cat /proc/sys/kernel/random/uuid)\n"
            "echo \"$o\" >\"$m.tmp\"\nmv \"$m.tmp\" \"$m\"\nexit 1\n" % shlex.quote(marks)))
    return progs


def fill(fd):
    """Writes to the non-blocking <fd> until its pipe is full."""
    n = 0
    while True:
        try:
            n += os.write(fd, b"f" * 4095 + b"\n")
        except BlockingIOError:
            return n


def read_until(fd, needle, timeout):
    """Reads the non-blocking <fd> until <needle> was seen (or <timeout>);
    returns all that was read."""
    got = b""
    deadline = time.monotonic() + timeout
    while needle not in got and time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            time.sleep(0.05)
            continue
        if not chunk:
            break
        got += chunk
    return got


def answers(gw, url, timeout):
    """The status of a request through <gw>, or None when none came within
    <timeout> (a frozen loop)."""
    try:
        return request(gw, "GET", url, timeout=timeout).status
    except OSError:
        return None


def stderr_dropped(admin):
    """sluice_stderr_dropped_lines_total, read from the --admin port."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin, timeout=10) as r:
        metrics = r.read().decode()
    dropped = [line for line in metrics.split("\n")
               if line.startswith("sluice_stderr_dropped_lines_total ")]
    assert len(dropped) == 1, dropped
    return int(dropped[0].split()[1])


def test_unread_stderr_does_not_freeze_the_gateway(gateway, net, tmp_path):
    marks = str(tmp_path / "marks")
    os.mkdir(marks)
    # 60 programs' first failures (a program's later ones within the minute
    # are counted, not told): some 180 KiB of messages, more than the FIFO
    # (64 KiB at most), the relay's pipe (64 KiB) and buffer (16 KiB) hold
    k = 60
    progs = long_programs(tmp_path, marks, k)
    fifo = str(tmp_path / "stderr.fifo")
    os.mkfifo(fifo)
    rd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    wr = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        fcntl.fcntl(wr, F_SETPIPE_SZ, 4096)  # the smallest: full at once
    except OSError:
        pass
    policy = net.policy([{"host": "api.example.test", "ports": [net.api.port], "tier": 1}],
                        alerts={"first_contact": True,
                                "sinks": [{"exec": p} for p in progs]})
    admin = free_tcp_port()
    gw = gateway(policy, wait=False, args=["--admin", str(admin)],
                 prefix=["sh", "-c", 'exec "$@" 2>%s' % shlex.quote(fifo), "sh"])
    deadline = time.monotonic() + 30
    while answers(gw, "http://ready.example.test/", 2) != 403:
        assert time.monotonic() < deadline, "the gateway never answered"
        assert gw.proc.poll() is None, "the gateway exited"
        time.sleep(0.1)
    fill(wr)  # the reader is alive but reads nothing: a write now blocks
    # each denied request to a new host: a first_contact alert, each program
    # fails, and the gateway says so on standard error (~3 KiB each)
    n = 2
    for i in range(n):
        assert answers(gw, "http://h%d.example.test/" % i, 10) == 403, \
            "request %d: no answer, the gateway froze" % i
    runs = (n + 1) * k  # with ready's
    deadline = time.monotonic() + 60
    while len([m for m in os.listdir(marks) if "." not in m]) < runs and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len([m for m in os.listdir(marks) if "." not in m]) == runs
    # the programs write to the standard error serve was started with (the
    # FIFO), not to the relay's non-blocking pipe
    with open(os.path.join(marks, os.listdir(marks)[0])) as f:
        assert f.read().split() == [fifo, fifo]
    # the programs are reaped and reported, more than the relay's pipe holds
    deadline = time.monotonic() + 30
    while stderr_dropped(admin) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert stderr_dropped(admin) > 0
    assert answers(gw, "http://after.example.test/", 10) == 403, "the gateway froze"
    # standard error read again: the messages, then how many were dropped
    got = read_until(rd, b"dropped: it was not read fast enough\n", 20)
    text = got.decode("utf-8", "replace")
    assert "fail.sh: exited with status 1\n" in text, text[-2000:]
    assert "line(s) to standard error dropped: it was not read fast enough" in text, text[-2000:]
    # every line whole: the messages are never cut or mixed
    for line in text.split("\n")[:-1]:
        assert line == "f" * 4095 or line.endswith(": exited with status 1") or \
            line.startswith("sluice"), line[:200]
    # the stop's own messages go out while the test reads on
    stop = threading.Event()
    tail = []

    def drain():
        while not stop.is_set():
            try:
                tail.append(os.read(rd, 65536))
            except BlockingIOError:
                time.sleep(0.05)
    t = threading.Thread(target=drain)
    t.start()
    try:
        gw.stop()
    finally:
        stop.set()
        t.join()
        os.close(wr)
        os.close(rd)
    # the fixture looks for sanitizer reports in a file this test bypassed
    assert b"Sanitizer" not in got + b"".join(tail)
