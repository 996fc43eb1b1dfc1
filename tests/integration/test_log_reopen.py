"""SIGHUP's reopen of `--log FILE` and `--alerts FILE` runs off the event loop: an open() that
does not return (a hung NFS server, a directory whose lock another process
holds) leaves the event loop serving; a log's lines wait in memory, in order,
and go to the new file once it opens, the decisions of a `--log FILE` taking
effect then (write-ahead: SPEC.md, Log writes).

The open is made to wait for real, with no network file system: after a
rotation the reopen must create the file, which takes the directory's
inode lock; a helper thread here holds that lock by reading the directory
(getdents64) into a page that a userfaultfd leaves unfilled, until the test
fills it. Needs root (userfaultfd for kernel-mode faults) on x86_64 or
aarch64; skipped otherwise."""

import json
import os
import signal

import pytest

from gate_client import api_rule, other_rule, other_url, poll, request
from held_requests import decided, healthz
from test_gate_reload import STOP_HANG_GUARD_S, _cgroup_write, _exit_status, _pids_cgroup
from conftest import policy_yaml
from uffd_hold import DirLock, stop_while_held, threads_in
from watch_helpers import alerts, free_tcp_port, wait_alert


def threads_in_open(pid):
    """The threads of <pid> inside openat or openat2 now."""
    return threads_in(pid, "openat", "openat2")


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


def log_in_its_folder(gateway, net, tmp_path):
    """A gateway with an admin port whose --log is alone in a folder (whose
    lock hold_reopen() takes), after one request (/before); returns (the
    gateway, the log's path, the admin port)."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = str(logdir / "log.jsonl")
    admin = free_tcp_port()
    gw = gateway(net.policy([api_rule(net)]), args=["--log", log, "--admin", str(admin)])
    assert request(gw, "GET", net.url("/before")).status == 200
    return gw, log, admin


REOPEN_STUCK = (503, b"unhealthy: decisions log: its reopen has not returned for 5 s or more "
                     b"(a hung or frozen file system?)\n")


def test_requests_wait_for_their_lines_while_the_reopen_waits(gateway, net, tmp_path):
    # The loop goes on (the admin answers, requests are decided) while the
    # reopen waits; decisions take effect once their lines are in the new
    # file (write-ahead), in order.
    gw, log, admin = log_in_its_folder(gateway, net, tmp_path)
    pid = gw.proc.pid
    poll(lambda: len(lines_of(log)) >= 2, what="the /before lines")
    lock, stuck = hold_reopen(gw, log)  # rotated: the reopen must create the file
    try:
        # a second SIGHUP while it waits queues one more reopen, not a
        # second thread stuck beside the first
        gw.reload()
        held = [decided(gw, admin, net.url("/during%d" % i), 2 + i) for i in range(3)]
        assert threads_in_open(pid) == stuck, "another open() started: %r" % threads_in_open(pid)
        assert pid not in stuck, "the event loop's thread waits in open()"
        # (healthy until the reopen has waited 5 s: see the next test)
        assert healthz(admin) in ((200, b"ok\n"), REOPEN_STUCK)
        assert all(p.waiting() for p in held)
        assert [r.path for r in net.api.requests if r.path.startswith("/during")] == []
        # the waiting lines stay in memory (the new name is not looked up
        # here: that lookup would wait for the directory's lock too)
        assert paths_in(log + ".1") == ["/before"]
    finally:
        lock.release()
    assert [p.result() for p in held] == [200, 200, 200]
    assert paths_in(log) == ["/during0", "/during1", "/during2"]  # answered: in the file
    assert request(gw, "GET", net.url("/after")).status == 200
    assert paths_in(log)[-1] == "/after"
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


def test_a_reopen_that_does_not_return_makes_healthz_unhealthy(gateway, net, tmp_path):
    # A reopen whose open() waits in the kernel holds the decisions made
    # meanwhile (their lines wait for the new file): once it has waited
    # 5 s, /healthz says so (it said "ok" for as long as it waited), and
    # is healthy again once the file is open.
    gw, log, admin = log_in_its_folder(gateway, net, tmp_path)
    lock, _ = hold_reopen(gw, log)
    try:
        held = decided(gw, admin, net.url("/during"), 2)
        poll(lambda: healthz(admin) == REOPEN_STUCK, timeout=30, interval=0.2,
             what="/healthz to say the reopen does not return (it says %r)" % (healthz(admin),))
        assert held.waiting()
    finally:
        lock.release()
    assert held.result() == 200
    poll(lambda: healthz(admin) == (200, b"ok\n"), timeout=10, what="/healthz ok again")
    gw.stop()
    assert paths_in(log) == ["/during"]


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
    # beyond its grace and the log's flush time; the lines that waited are
    # named as not written (they had no file to go to), their request never
    # answered, and the thread, left alone, ends when the open returns.
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = str(logdir / "log.jsonl")
    admin = free_tcp_port()
    gw = gateway(net.policy([api_rule(net)]),
                 args=["--log", log, "--grace", "1", "--admin", str(admin)])
    lock, _ = hold_reopen(gw, log)
    held = []
    assert stop_while_held(
        gw, lock, lambda: held.append(decided(gw, admin, net.url("/during"), 1))) == 0, \
        gw.stderr()
    assert held[0].status is None
    err = gw.stderr()
    assert "sluice: log %s: the reopen is still waiting for open()" % log in err, err
    assert "sluice: log %s: 2 line(s) (" % log in err, err
    assert lines_of(log + ".1") == []


def _fifo_lines(fd):
    """The complete lines a non-blocking FIFO reader <fd> has now."""
    data = b""
    while True:
        try:
            piece = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not piece:
            break
        data += piece
    return [json.loads(x) for x in data.split(b"\n") if x.strip()]


# serial: a cgroup of the machine's
@pytest.mark.serial
def test_a_sighup_with_no_thread_for_the_reopen_keeps_the_fifo(gateway, net, tmp_path):
    # A `--log FIFO`'s SIGHUP reopen runs open() on a thread of its own;
    # with none to be had (a pids cgroup at its limit) it ran on the event
    # loop, where an open() the file system does not answer stops the
    # gateway. It is refused now, as the reload is: the FIFO, still open,
    # gets the lines, not the regular file that took its name (which the
    # loop wrote before, with no writer thread for it either).
    fifo = str(tmp_path / "log.fifo")
    os.mkfifo(fifo)
    rd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    cg = _pids_cgroup("logfifo")
    gw = None
    try:
        gw = gateway(net.policy([api_rule(net)]), args=["--log", fifo])
        assert request(gw, "GET", net.url("/before")).status == 200
        poll(lambda: any(e.get("path") == "/before" for e in _fifo_lines(rd)), timeout=10,
             interval=0.02, what="/before's line on the FIFO")
        os.rename(fifo, fifo + ".1")
        open(fifo, "w").close()  # a regular file takes its name
        _cgroup_write(cg, "cgroup.procs", gw.proc.pid)
        with open(os.path.join(cg, "pids.current")) as f:
            _cgroup_write(cg, "pids.max", int(f.read()))  # no thread more
        gw.reload()
        # the reload's refusal comes first in the SIGHUP's handler, the
        # reopen right after it on the loop, before /after is read
        poll(lambda: "sluice: reload failed: " in gw.stderr(), timeout=20, interval=0.02,
             what="the SIGHUP handled")
        assert request(gw, "GET", net.url("/after")).status == 200
        got = []

        def after_written():
            got.extend(_fifo_lines(rd))
            with open(fifo, "rb") as f:
                in_file = f.read()
            return b'"/after"' in in_file or any(e.get("path") == "/after" for e in got)
        poll(after_written, timeout=10, interval=0.02, what="/after's line")
        assert [e["path"] for e in got if e["event"] == "agent_egress"] == ["/after"], got
        assert os.path.getsize(fifo) == 0, gw.stderr()[-2000:]
        refused = ("sluice: log %s: cannot reopen (its open's thread cannot be started): "
                   "Resource temporarily unavailable; the descriptor in use is kept\n" % fifo)
        # told on the loop before /after was read, but through the relay
        gw.wait_stderr(refused)
        _cgroup_write(cg, "pids.max", "max")
        gw.proc.send_signal(signal.SIGTERM)
        rc = _exit_status(gw)
        assert rc == 0, (rc, gw.stderr()[-2000:])
    finally:
        if gw is not None and gw.proc.poll() is None:
            gw.proc.kill()
            gw.proc.wait(STOP_HANG_GUARD_S)
        os.rmdir(cg)
        os.close(rd)


def _usr1_gateway(gateway, net, tmp_path):
    """A gateway with --log and --alerts files of its own, after one
    allowed request (/before, first contact alerted); returns (it, the
    log's path, the alerts' path)."""
    log, al = str(tmp_path / "log.jsonl"), str(tmp_path / "alerts.jsonl")
    gw = gateway(net.policy([api_rule(net)], alerts={"first_contact": True}),
                 args=["--log", log, "--alerts", al])
    assert request(gw, "GET", net.url("/before")).status == 200
    poll(lambda: paths_in(log) == ["/before"], what="the /before line")
    wait_alert(al, "first_contact", host="api.example.test")
    return gw, log, al


def test_sigusr1_reopens_the_logs_after_a_rename(gateway, net, tmp_path):
    # logrotate configurations written for nginx and others send SIGUSR1
    # to reopen the logs: at its default action it killed the gateway.
    gw, log, al = _usr1_gateway(gateway, net, tmp_path)
    os.rename(log, log + ".1")
    os.rename(al, al + ".1")
    gw.proc.send_signal(signal.SIGUSR1)
    poll(lambda: gw.proc.poll() is not None or (os.path.exists(log) and os.path.exists(al)),
         what="the log and alerts reopened by the SIGUSR1")
    assert gw.proc.poll() is None, gw.stderr()[-2000:]
    assert request(gw, "GET", net.url("/after")).status == 200
    assert request(gw, "GET", "http://after.example.test/").status == 403
    poll(lambda: paths_in(log)[:1] == ["/after"], what="the /after line in the new file")
    wait_alert(al, "first_contact", host="after.example.test")
    gw.stop()
    assert paths_in(log + ".1") == ["/before"]


def test_sigusr1_does_not_reload_the_policy(gateway, net, tmp_path):
    # Only the logs: a changed policy is not loaded (SIGHUP does both).
    gw, log, al = _usr1_gateway(gateway, net, tmp_path)
    gw.write_policy(policy_yaml(net.policy([])))  # would deny /after
    os.rename(log, log + ".1")
    gw.proc.send_signal(signal.SIGUSR1)
    poll(lambda: gw.proc.poll() is not None or os.path.exists(log),
         what="the log reopened by the SIGUSR1")
    assert gw.proc.poll() is None, gw.stderr()[-2000:]
    assert request(gw, "GET", net.url("/after")).status == 200
    poll(lambda: paths_in(log) == ["/after"], what="the /after line")
    gw.stop()
    err = gw.stderr()
    assert "reload" not in err, err[-2000:]
