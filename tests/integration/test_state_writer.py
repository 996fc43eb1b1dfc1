"""The state store's commits run on a thread of their own: a commit whose
write of sluice.db-wal the file system holds (a slow or hung disk) holds
that thread, never the event loop, and a stop gives up on it and says what
was not written.

The write is made to wait for real, with no network file system: a write()
to a regular file takes the file's inode lock before it copies from the
caller's buffer; a helper thread here writes to sluice.db-wal from a page
that a userfaultfd leaves unfilled, so the kernel waits inside that write
with the lock held, and SQLite's write of the log waits for the lock until
the test fills the page (uffd_hold.py). Needs root (userfaultfd for
kernel-mode faults) on x86_64 or aarch64; skipped otherwise."""

import os
import urllib.request

from gate_client import api_rule, other_rule, other_url, poll, request
from uffd_hold import WalLock, stop_while_held, threads_in
from watch_helpers import free_tcp_port, healthz
from watch_helpers import stored_contacts as contacts


def hold_commit(gw, net, statedir):
    """Holds the log's lock and makes a request that queues a write (a
    first contact with other.example.test); returns (the hold, the
    gateway's threads in a write) once the store's commit waits in it."""
    wal = os.path.join(statedir, "sluice.db-wal")
    hold = WalLock(wal)
    try:
        assert request(gw, "GET", other_url(net, "/new"), timeout=10).status == 200
        stuck = poll(lambda: threads_in(gw.proc.pid, "pwrite64", "write", path=wal), timeout=10, interval=0.01,
                     what="the store's commit waiting in its write of the log")
    except BaseException:
        hold.release()
        raise
    return hold, stuck


def gateway_with_store(gateway, net, tmp_path, args=()):
    statedir = str(tmp_path / "state")
    gw = gateway(net.policy([api_rule(net), other_rule(net)], alerts={"first_contact": True}),
                 args=["--state", statedir] + list(args))
    assert request(gw, "GET", net.url("/before")).status == 200
    poll(lambda: contacts(statedir) == ["api.example.test"], what="the first commit")
    return gw, statedir


def test_requests_are_answered_while_a_commit_waits_for_the_disk(gateway, net, tmp_path):
    gw, statedir = gateway_with_store(gateway, net, tmp_path)
    pid = gw.proc.pid
    hold, stuck = hold_commit(gw, net, statedir)
    try:
        # the commit waits in its write of the log; the loop goes on
        for i in range(3):
            r = request(gw, "GET", net.url("/during%d" % i), timeout=10)
            assert r.status == 200, r.status
        assert pid not in stuck, "the event loop's thread waits in the commit's write"
        # (the store is not read here: a new connection, root's, fchown()s
        # the log, which waits for the same lock)
    finally:
        hold.release()
    poll(lambda: contacts(statedir) == ["api.example.test", "other.example.test"], timeout=10,
         what="the commit once the write goes through")
    gw.decided(path="/during2")
    gw.stop()
    assert "cannot write" not in gw.stderr(), gw.stderr()


STUCK = (503, "unhealthy: state store: a commit has not returned for 5 s or more "
              "(a hung or frozen file system?)\n")


def pending_writes(port):
    """sluice_state_pending_writes from the admin's /metrics."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("sluice_state_pending_writes "):
                return int(line.split()[1])
    raise AssertionError("no sluice_state_pending_writes in /metrics")


def test_a_commit_that_does_not_return_makes_healthz_unhealthy(gateway, net, tmp_path):
    # A commit whose write of the log the file system holds (a hung NFS
    # server, a frozen file system) fails nothing: /healthz said "ok" for
    # as long as it waited, while the store's writes piled up in memory
    # and were dropped past their caps. Once the commit has waited
    # STORE_WRITER_STUCK_MS (5 s), /healthz says so; when it returns, ok.
    port = free_tcp_port()
    gw, statedir = gateway_with_store(gateway, net, tmp_path, args=["--admin", str(port)])
    hold, _ = hold_commit(gw, net, statedir)
    try:
        # (healthy until the commit has waited 5 s)
        assert healthz(port) in ((200, "ok\n"), STUCK)
        poll(lambda: healthz(port) == STUCK, timeout=30, interval=0.2,
             what="/healthz to say the store's commit does not return (it says %r)" %
                  (healthz(port),))
        # the writes wait meanwhile (the one held, and those queued since)
        assert request(gw, "GET", other_url(net, "/during"), timeout=10).status == 200
        assert pending_writes(port) > 0
    finally:
        hold.release()
    poll(lambda: healthz(port) == (200, "ok\n"), timeout=10, what="/healthz ok again")
    poll(lambda: contacts(statedir) == ["api.example.test", "other.example.test"], timeout=10,
         what="the commit once the write goes through")
    gw.stop()


def test_a_stop_while_a_commit_waits_says_what_was_not_written(gateway, net, tmp_path):
    # SIGTERM while the commit's write waits: the stop gives up on it once
    # it has not moved for 2 s, says what was not written, and exits 0 once
    # the kernel lets the thread go (a thread waiting for an inode lock
    # cannot be killed).
    gw, statedir = gateway_with_store(gateway, net, tmp_path, args=["--grace", "1"])
    hold, _ = hold_commit(gw, net, statedir)
    assert stop_while_held(gw, hold, lambda: None) == 0, gw.stderr()
    err = gw.stderr()
    assert ("sluice: state %s/sluice.db: " % os.path.realpath(statedir)) in err, err
    assert "write(s) not written at exit: the writer's commit has not moved for 2000 ms" in err, err


def test_a_store_file_replaced_while_serving_is_told(gateway, net, tmp_path):
    # sluice.db moved aside and a symbolic link (to a file of someone
    # else's choosing) put in its place while the gateway serves: SQLite
    # writes on through the descriptor it opened, into the moved file, and
    # a restart opens what the path names (here a link, refused): every
    # first contact and queued alert committed since is gone, without a
    # word. The writer now checks the path before each commit and fails it,
    # told on standard error and by /healthz, the writes kept for retry.
    port = free_tcp_port()
    gw, statedir = gateway_with_store(gateway, net, tmp_path, args=["--admin", str(port)])
    assert healthz(port) == (200, "ok\n")
    db = os.path.join(statedir, "sluice.db")
    os.rename(db, db + ".moved")
    with open(os.path.join(statedir, "elsewhere.db"), "w"):
        pass
    os.symlink("elsewhere.db", db)
    assert request(gw, "GET", other_url(net, "/new"), timeout=10).status == 200
    poll(lambda: "the database file was moved, replaced or deleted" in gw.stderr(), timeout=10,
         what="the failed commit told on standard error")
    assert "cannot write: the database file was moved" in gw.stderr(), gw.stderr()
    # and /healthz says so while it lasts, as for a log that cannot be written,
    # naming the component only: the store's error text (which may name local
    # paths) stays on standard error, out of reach of whoever reaches the port
    code, text = healthz(port)
    assert (code, text) == (
        503, "unhealthy: state store: its commits fail (the reason is on standard error)\n")
    # the gate goes on
    assert request(gw, "GET", net.url("/after"), timeout=10).status == 200
    gw.decided(path="/after")
