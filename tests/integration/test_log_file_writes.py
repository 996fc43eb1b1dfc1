"""A `--log FILE` on a regular file is written by a thread of its own: a
write that does not return (a hung NFS server, a frozen file system, the
file's inode lock held by another process) never stops the event loop.
O_NONBLOCK does nothing for a regular file, so when the event loop wrote
it, such a write stopped the whole gateway.

Decisions still wait for their lines (write-ahead, SPEC.md Decision log):
while the file cannot be written, requests are decided and then held, their
answers not sent and nothing sent upstream, and everything else goes on:
the admin endpoints answer, clients are accepted and their requests
decided, SIGTERM stops within its grace. Once the file can be written
again, the held requests complete, their lines in order.

The write is made to wait for real (uffd_hold.FileLock): a helper thread
here appends to the same file from a page a userfaultfd leaves unfilled,
so the kernel holds the file's inode lock inside that write until the
test fills the page (with a newline: one blank line in the file). Needs
root; skipped otherwise."""

import json

from gate_client import api_rule, other_url, poll, request
from held_requests import admin_get, decided
from uffd_hold import FileLock, stop_while_held, threads_in
from watch_helpers import free_tcp_port

def lines_of(path):
    with open(path, "rb") as f:
        return [json.loads(x) for x in f.read().split(b"\n") if x.strip()]


def paths_in(path):
    return [e.get("path") for e in lines_of(path) if e["event"] == "agent_egress"]


def hold_log(gw, admin, net, log, count):
    """Holds <log>'s inode lock, has a request decided (the <count>th) whose
    line the writer then waits to write; returns (the FileLock, that request, the
    gateway's threads in write())."""
    lock = FileLock(log)
    try:
        held = decided(gw, admin, net.url("/held"), count)
        stuck = poll(lambda: threads_in(gw.proc.pid, "write", "writev"), timeout=10,
                     interval=0.01, what="the gateway's write waiting for the file")
    except BaseException:
        lock.release()
        raise
    return lock, held, stuck


def test_the_loop_serves_while_a_log_write_waits(gateway, net, tmp_path):
    log = str(tmp_path / "log.jsonl")
    admin = free_tcp_port()
    gw = gateway(net.policy([api_rule(net)]), args=["--log", log, "--admin", str(admin)])
    pid = gw.proc.pid
    assert request(gw, "GET", net.url("/before")).status == 200
    assert paths_in(log) == ["/before"]  # in the file once answered: no waiting
    lock, held, stuck = hold_log(gw, admin, net, log, 2)
    try:
        assert pid not in stuck, "the event loop's thread waits in write()"
        # the loop goes on: clients accepted, requests decided (denied and
        # allowed alike), the admin answering...
        denied = decided(gw, admin, other_url(net, "/denied"), 3)
        during = decided(gw, admin, net.url("/during"), 4)
        assert admin_get(admin, "/healthz") == b"ok\n"
        # ...while no decision takes effect before its line is in the file:
        # no answer, nothing upstream
        assert (held.status, denied.status, during.status) == (None, None, None)
        assert held.waiting() and denied.waiting() and during.waiting()
        assert [r.path for r in net.api.requests if r.path in ("/held", "/during")] == []
        assert paths_in(log) == ["/before"]
    finally:
        lock.release()
    assert (held.result(), denied.result(), during.result()) == (200, 403, 200)
    want = ["/before", "/held", "/denied", "/during"]
    assert paths_in(log) == want
    gw.stop()
    got = lines_of(log)
    assert [e.get("path") for e in got if e["event"] == "agent_egress"] == want
    # each request's end line, once, after its decision line
    for ev in (e for e in got if e["event"] == "agent_egress"):
        ends = [i for i, e in enumerate(got) if e["event"] == "agent_egress_end" and
                e["id"] == ev["id"]]
        assert len(ends) == 1 and ends[0] > got.index(ev), got
    assert len(got) == 8, got


def test_a_stop_while_a_log_write_waits_says_what_it_could_not_write(gateway, net, tmp_path):
    # SIGTERM while the writer waits in the kernel: the stop is not held
    # beyond its grace and the log's flush time; it exits 0 and names the
    # lines it could not write. The held requests are never answered: their
    # lines never reached the file.
    log = str(tmp_path / "log.jsonl")
    admin = free_tcp_port()
    gw = gateway(net.policy([api_rule(net)]),
                 args=["--log", log, "--grace", "1", "--admin", str(admin)])
    lock, held, _ = hold_log(gw, admin, net, log, 1)
    during = []
    assert stop_while_held(
        gw, lock, lambda: during.append(decided(gw, admin, net.url("/during"), 2))) == 0, \
        gw.stderr()
    err = gw.stderr()
    assert "sluice: log %s: a write is still waiting for the file system" % log in err, err
    assert "sluice: log %s: " % log in err and " line(s) (" in err, err
    assert held.status is None and during[0].status is None
    assert [r.path for r in net.api.requests if r.path in ("/held", "/during")] == []
    # whatever the killed write did, the file holds whole lines only
    assert set(paths_in(log)) <= {"/held", "/during"}
