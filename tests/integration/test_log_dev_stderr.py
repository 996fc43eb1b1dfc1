"""`--log /dev/stderr` (or `/dev/fd/2`) names the file standard error has
open, and the log is written through it, as `--log /dev/stdout` is through
standard output's (SPEC.md, Commands). `serve` puts a pipe of its own on
descriptor 2 before it opens the log (the standard error relay, SPEC.md
Standard error): the path, opened then, named that pipe, and the log went
into the relay, which hid from it what became of its lines: a reader gone
or a file that does not take them, /healthz saying "ok" while the lines
were lost or while decisions took effect before their lines were in the
file (write-ahead, Log writes)."""

import json
import os
import select
import signal
import socket
import subprocess
import time

import pytest

from gate_client import api_rule, build_request, other_url, poll, read_response, request
from held_requests import HANG_GUARD_S, admin_get, decided, healthz
from uffd_hold import FileLock
from watch_helpers import free_tcp_port

STUCK = (503, b"unhealthy: decisions log: a write has not returned for 5 s or more "
              b"(a hung or frozen file system?)\n")


def deny(port, i):
    """One request no rule covers, on a connection of its own; returns the
    answer's status."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(build_request("GET", "http://h%d.example.test/%d" % (i, i),
                                headers={"Connection": "close"}))
        return read_response(s).status
    finally:
        s.close()


def read_until(fd, mark, what):
    """Reads the pipe <fd> until <mark> came in what it read (returned),
    for at most HANG_GUARD_S in all: a serve that hangs without exiting
    or writing fails the test, which a read that waits for it held for
    good."""
    got = b""
    end = time.monotonic() + HANG_GUARD_S
    while mark not in got:
        left = end - time.monotonic()
        assert left > 0 and select.select([fd], [], [], left)[0], \
            "%s not on standard error within %d s; it said %r" % (what, HANG_GUARD_S, got[-2000:])
        b = os.read(fd, 65536)
        assert b, "standard error ended before %s; it said %r" % (what, got[-2000:])
        got += b
    return got


def dropped(admin, log):
    for line in admin_get(admin, "/metrics").decode().splitlines():
        if line.startswith('sluice_log_dropped_lines_total{log="%s"} ' % log):
            return int(line.rsplit(" ", 1)[1])
    raise AssertionError("no sluice_log_dropped_lines_total in /metrics")


@pytest.mark.parametrize("option,name", [("--log", "/dev/stderr"), ("--log", "/dev/fd/2"),
                                         ("--alerts", "/dev/stderr")])
def test_a_log_on_standard_error_whose_reader_is_gone_says_so(sluice_bin, tmp_path, option,
                                                              name):
    # Standard error a pipe (a container runtime's, a supervisor's) whose
    # reader dies: the log's lines go nowhere, which /healthz and the
    # dropped count say, as for `--log -` on such a pipe. Through the
    # relay, /healthz said "ok" and nothing was counted. (Each request is
    # for a new host no rule covers: a first_contact alert each.)
    log = "decisions" if option == "--log" else "alerts"
    mark = b'"event":"agent_egress_end"' if option == "--log" else b'"event":"alert"'
    gone = (503, b"unhealthy: %s log: its reader is gone\n" % log.encode())
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nrules:\n  - host: api.example.test\n    tier: 0\n"
                      "alerts:\n  first_contact: true\n")
    other = ["--log", str(tmp_path / "log.jsonl")] if option == "--alerts" else []
    port, admin = free_tcp_port(), free_tcp_port()
    r, w = os.pipe()
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["SLUICE_TEST_METRICS_FRESH_MS"] = "1"
    proc = subprocess.Popen([sluice_bin, "serve", "--policy", str(policy), "--listen",
                             "127.0.0.1:%d" % port, "--admin", str(admin), option, name] + other,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=w,
                            env=env, cwd=str(tmp_path))
    os.close(w)
    try:
        read_until(r, b"sluice: serving ", "serve's \"serving\"")
        assert deny(port, 0) == 403
        first = read_until(r, mark, "the first request's lines")
        assert b'"host":"h0.example.test"' in first, first
        assert healthz(admin) == (200, b"ok\n")
        os.close(r)  # the reader dies
        r = -1
        n = [0]

        def told():
            n[0] += 1
            assert deny(port, n[0]) == 403
            return healthz(admin) == gone

        poll(told, timeout=10, interval=0.05,
             what="/healthz to say the log's reader is gone (it says %r)" % (healthz(admin),))
        assert dropped(admin, log) > 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        if r >= 0:
            os.close(r)


def test_a_log_on_standard_error_in_a_file_is_written_ahead(gateway, net):
    # Standard error a regular file (`2>FILE`, systemd's StandardError=file:):
    # the log is that file, written by its writer thread, and a decision
    # takes effect only once its line is in it. Here the file's inode lock
    # is held: the refusal waits for its line, and /healthz says the write
    # does not return. Through the relay the refusal went out at once, its
    # line in the relay's pipe, and /healthz said "ok".
    admin = free_tcp_port()
    gw = gateway(net.policy([api_rule(net)]),
                 args=["--log", "/dev/stderr", "--admin", str(admin)])
    assert request(gw, "GET", net.url("/before")).status == 200
    poll(lambda: '"path":"/before"' in gw.stderr(), what="the /before line in standard error")
    lock = FileLock(gw.stderr_path)
    try:
        held = decided(gw, admin, other_url(net, "/held"), 2)
        poll(lambda: healthz(admin) == STUCK, timeout=30, interval=0.2,
             what="/healthz to say the log's write does not return (it says %r)" %
                  (healthz(admin),))
        assert held.status is None and held.waiting()  # still held for its line
    finally:
        lock.release()
    assert held.result() == 403
    lines = [json.loads(x) for x in gw.stderr().splitlines() if x.startswith("{")]
    assert [e["path"] for e in lines if e["event"] == "agent_egress"] == ["/before", "/held"]
    gw.stop()
