"""A `--log FILE` on a regular file is written by a thread of its own: a
write that does not return (a hung NFS server, a frozen file system, the
file's inode lock held by another process) holds no request. O_NONBLOCK
does nothing for a regular file, so when the event loop wrote it, such a
write stopped the whole gateway: no request, allowed or denied, was
answered.

The write is made to wait for real (uffd_hold.FileLock): a helper thread
here appends to the same file from a page a userfaultfd leaves unfilled,
so the kernel holds the file's inode lock inside that write until the
test fills the page (with a newline: one blank line in the file). Needs
root; skipped otherwise."""

import json

from gate_client import api_rule, other_url, poll, request
from uffd_hold import FileLock, stop_while_held, threads_in


def lines_of(path):
    with open(path, "rb") as f:
        return [json.loads(x) for x in f.read().split(b"\n") if x.strip()]


def paths_in(path):
    return [e.get("path") for e in lines_of(path) if e["event"] == "agent_egress"]


def during(gw, net):
    """A request answered while the file's lock holds."""
    assert request(gw, "GET", net.url("/during"), timeout=10).status == 200


def hold_log(gw, net, log):
    """Holds <log>'s inode lock and waits for the gateway's writer to wait
    for it; returns (the FileLock, the gateway's threads in write())."""
    lock = FileLock(log)
    try:
        # a request whose decision line the writer then waits to write
        assert request(gw, "GET", net.url("/held"), timeout=10).status == 200
        stuck = poll(lambda: threads_in(gw.proc.pid, "write", "writev"), timeout=10,
                     interval=0.01, what="the gateway's write waiting for the file")
    except BaseException:
        lock.release()
        raise
    return lock, stuck


def test_requests_are_answered_while_a_log_write_waits(gateway, net, tmp_path):
    log = str(tmp_path / "log.jsonl")
    gw = gateway(net.policy([api_rule(net)]), args=["--log", log])
    pid = gw.proc.pid
    assert request(gw, "GET", net.url("/before")).status == 200
    poll(lambda: len(lines_of(log)) >= 2, what="the /before lines")
    lock, stuck = hold_log(gw, net, log)
    try:
        assert pid not in stuck, "the event loop's thread waits in write()"
        # denied and allowed alike: answered while the write waits
        r = request(gw, "GET", other_url(net, "/denied"), timeout=10)
        assert r.status == 403, r.status
        for i in range(3):
            r = request(gw, "GET", net.url("/during%d" % i), timeout=10)
            assert r.status == 200, r.status
        # nothing of theirs in the file yet: the lines wait in memory
        assert paths_in(log) == ["/before"]
    finally:
        lock.release()
    want = ["/before", "/held", "/denied", "/during0", "/during1", "/during2"]
    poll(lambda: paths_in(log) == want, timeout=10, what="the waiting lines, in order")
    gw.stop()
    got = lines_of(log)
    assert [e.get("path") for e in got if e["event"] == "agent_egress"] == want
    # each request's end line, once, after its decision line
    for ev in (e for e in got if e["event"] == "agent_egress"):
        ends = [i for i, e in enumerate(got) if e["event"] == "agent_egress_end" and
                e["id"] == ev["id"]]
        assert len(ends) == 1 and ends[0] > got.index(ev), got
    assert len(got) == 12, got


def test_a_stop_while_a_log_write_waits_says_what_it_could_not_write(gateway, net, tmp_path):
    # SIGTERM while the writer waits in the kernel: the stop is not held
    # beyond the log's flush time; it exits 0 and names the lines it could
    # not write.
    log = str(tmp_path / "log.jsonl")
    gw = gateway(net.policy([api_rule(net)]), args=["--log", log, "--grace", "1"])
    lock, _ = hold_log(gw, net, log)
    assert stop_while_held(gw, lock, lambda: during(gw, net)) == 0, gw.stderr()
    err = gw.stderr()
    assert "sluice: log %s: a write is still waiting for the file system" % log in err, err
    # /held's two lines and /during's two
    assert "sluice: log %s: 4 line(s) (" % log in err, err
    # whatever the killed write did, the file holds whole lines only
    assert set(paths_in(log)) <= {"/held", "/during"}
