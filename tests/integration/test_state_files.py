"""The state store's files are the gateway's alone (SPEC.md, "State
store"): made under the usual umask 022 they were 0644, so in a state
directory other users may search (one the administrator made 0755) any of
them could read the first contacts and the queued webhook alerts, and hold
a read lock on sluice.db-shm's byte of the write lock (an fcntl() lock
needs only a descriptor open for reading), which stopped every commit for
as long as they liked. The store's files are now made 0640, and existing
ones lose every permission of other users at start.

The other user is uid and gid 65534 (nobody), taken by a forked child:
the tests run as root. Loopback only."""

import os
import shutil
import stat
import tempfile

import pytest

from gate_client import api_rule, other_rule, other_url, poll, request
from watch_helpers import stored_contacts as contacts

FILES = ("sluice.db", "sluice.db-wal", "sluice.db-shm", "sluice.lock")
NOBODY = 65534
WAL_WRITE_LOCK = 120  # SQLite's unix VFS: the first of the -shm file's lock bytes


@pytest.fixture
def statedir():
    """A state directory that every user may search, as one made by hand
    with mkdir under umask 022 is; below /tmp (sticky), which other users
    may search too, unlike pytest's own 0700 directories."""
    d = tempfile.mkdtemp(prefix="slstate", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def umask_022():
    """The gateways started meanwhile inherit the umask most systems give."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def modes(statedir):
    """The permission bits of the store's files that exist, by name."""
    out = {}
    for f in FILES:
        try:
            out[f] = stat.S_IMODE(os.lstat(os.path.join(statedir, f)).st_mode)
        except FileNotFoundError:
            pass
    return out


def start(gateway, net, statedir):
    gw = gateway(net.policy([api_rule(net), other_rule(net)], alerts={"first_contact": True}),
                 args=["--state", statedir])
    assert request(gw, "GET", net.url("/before")).status == 200
    poll(lambda: contacts(statedir) == ["api.example.test"], what="the first commit")
    return gw


class Nobody:
    """A child that, as uid and gid 65534, opens sluice.db-shm read-only and
    holds a read lock on the byte of SQLite's write lock until stopped."""

    def __init__(self, shm):
        r, w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: nothing but system calls, then _exit
            os.close(r)
            status = 2
            try:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                import fcntl
                fd = os.open(shm, os.O_RDONLY)
                fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, WAL_WRITE_LOCK)
                os.write(w, b"locked")
                os.close(w)
                import time
                for _ in range(600):  # 60 s at most, then it goes of itself
                    time.sleep(0.1)
                status = 0
            except OSError as e:
                os.write(w, ("refused: %s" % os.strerror(e.errno)).encode())
                status = 1
            finally:
                os._exit(status)
        os.close(w)
        self.said = b""
        while True:
            d = os.read(r, 256)
            if not d:
                break
            self.said += d
            if self.said == b"locked":
                break
        os.close(r)

    def stop(self):
        try:
            os.kill(self.pid, 9)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)


def test_a_new_stores_files_are_not_for_other_users(gateway, net, statedir, umask_022):
    gw = start(gateway, net, statedir)
    got = modes(statedir)
    assert set(got) == set(FILES), got
    assert {f: m & 0o007 for f, m in got.items()} == {f: 0 for f in FILES}, got
    # another user can neither open the shared memory nor, so, stop the commits
    nobody = Nobody(os.path.join(statedir, "sluice.db-shm"))
    try:
        assert nobody.said == b"refused: Permission denied", nobody.said
        assert request(gw, "GET", other_url(net, "/new")).status == 200
        poll(lambda: contacts(statedir) == ["api.example.test", "other.example.test"],
             timeout=10, what="the second commit")
    finally:
        nobody.stop()
    gw.stop()  # a failed commit told, through the relay, is in the file then
    assert "database is locked" not in gw.stderr(), gw.stderr()


def test_an_older_stores_files_lose_other_users_permissions(gateway, net, statedir, umask_022):
    # a store as an earlier sluice left it: 0644 (the -wal and -shm of a
    # store still open elsewhere stay, as a crash leaves them)
    gw = start(gateway, net, statedir)
    gw.stop()
    with open(os.path.join(statedir, "sluice.db-wal"), "a"), \
            open(os.path.join(statedir, "sluice.db-shm"), "a"):
        pass
    for f in FILES:
        os.chmod(os.path.join(statedir, f), 0o644)
    gw = start(gateway, net, statedir)
    got = modes(statedir)
    assert {f: m & 0o007 for f, m in got.items()} == {f: 0 for f in got}, got
    assert got["sluice.db"] == 0o640, got
    assert request(gw, "GET", other_url(net, "/new")).status == 200
    poll(lambda: "other.example.test" in contacts(statedir), timeout=10, what="a commit")


def hot_journal(statedir, host):
    """A rollback journal, as a process killed in a transaction leaves it,
    whose pages are those of a copy of <statedir>'s store holding a first
    contact with <host>: SQLite plays such a journal back into sluice.db
    at its next open (WAL mode or not). Returns its path, made in
    <statedir> next to the store as sluice.db-journal."""
    import sqlite3
    forged = os.path.join(statedir, "forged.db")
    shutil.copy(os.path.join(statedir, "sluice.db"), forged)
    db = sqlite3.connect(forged, isolation_level=None)
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("INSERT INTO first_contact VALUES('default', ?, 1)", (host,))
    db.close()
    pid = os.fork()
    if pid == 0:  # changes every page, spilled to the file, and dies uncommitted
        status = 1
        try:
            db = sqlite3.connect(forged, isolation_level=None)
            db.execute("PRAGMA cache_size=1")
            db.execute("BEGIN")
            db.execute("DELETE FROM first_contact")
            for i in range(500):
                db.execute("INSERT INTO first_contact VALUES('z', ?, 1)", ("x" * 200 + str(i),))
            status = 0
        finally:
            os._exit(status)
    assert os.waitpid(pid, 0)[1] == 0
    journal = os.path.join(statedir, "sluice.db-journal")
    os.rename(forged + "-journal", journal)
    os.unlink(forged)
    return journal


def test_a_journal_another_user_put_in_a_group_writable_dir_is_refused(gateway, net, statedir):
    # A group-writable state directory is used (its group is the
    # administrator's choice), and the store's files must be owned by root
    # or the gateway's users: a member of the group cannot put a store of
    # their own in place. But sluice.db-journal was not looked at, and
    # SQLite plays a hot rollback journal back into sluice.db at the open,
    # WAL mode or not: a journal of theirs wrote the pages of their choice
    # into the store (here a first contact that keeps the alert quiet).
    os.chown(statedir, 0, NOBODY)
    os.chmod(statedir, 0o770)
    gw = start(gateway, net, statedir)
    gw.stop()
    journal = hot_journal(statedir, "other.example.test")
    os.chown(journal, NOBODY, NOBODY)
    af = os.path.join(statedir, "alerts.jsonl")
    gw = gateway(net.policy([api_rule(net), other_rule(net)], alerts={"first_contact": True}),
                 args=["--state", statedir, "--alerts", af])
    assert request(gw, "GET", other_url(net, "/new")).status == 200
    poll(lambda: os.path.exists(af) and "other.example.test" in open(af).read(), timeout=10,
         what="the first contact's alert")
    gw.stop()
    err = gw.stderr()
    assert (journal + ": owned by user nobody (uid 65534), not by root") in err, err
    assert "running without a state store" in err, err
