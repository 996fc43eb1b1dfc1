"""A webhook's reads of the state store (the sweep that brings back the
alerts kept in the store beyond the memory queue, a sink's first read of
its stored alerts) run on the store's writer thread, never on the event
loop: a store whose file system stops answering reads holds that thread,
while requests are answered, and the alerts go out in order once it
answers again.

The reads are made to wait by read_hold.c, preloaded into the gateway: a
read of a regular file takes no lock that uffd_hold.py's helpers could
keep, so the wait is made in pread() itself, for every thread, while a
file the test names exists. It logs each read it holds, and the test
waits for one: a read the connection's page cache serves makes no pread(),
and the writer's connection holds in its cache every page it wrote. So
the test first writes the store from a connection of its own (as the
sqlite3 shell or a backup tool may): the write-ahead log then holds a
commit the gateway's connections did not make, and each drops its whole
page cache at its next transaction and reads the pages again, from
sluice.db and its -wal, through pread()."""

import json
import os
import socket
import sqlite3
import subprocess

import pytest

from conftest import policy_yaml
from gate_client import poll, request
from watch_helpers import Receiver, delivered_through, stored_alerts, wait_alert

HERE = os.path.dirname(os.path.abspath(__file__))
# a guard against a hang, not a claim on time
HANG_GUARD_S = 30


def read_hold_lib(tmp_path):
    """read_hold.c built into <tmp_path>; skips without a C compiler."""
    lib = str(tmp_path / "read_hold.so")
    try:
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", lib,
                        os.path.join(HERE, "read_hold.c")], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip("cannot build read_hold.c: %s" % e)
    return lib


def held_reads(log, what="held"):
    """The reads of the store read_hold.c held, as it logged them in <log>:
    (tid, pid, offset, path) for each, in the order their waits began (or,
    with <what> "released", ended)."""
    try:
        with open(log) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    return [(int(w[1]), int(w[2]), int(w[3]), w[4]) for w in
            (line.split(" ", 4) for line in lines) if w[0] == what]


def write_from_outside(state):
    """Commits a write to the store in <state> through a connection of the
    test's own (the header's user_version, which sluice does not use): every
    connection of the gateway's then drops its page cache at its next
    transaction, and reads the store's pages again."""
    db = sqlite3.connect(str(state / "sluice.db"), timeout=HANG_GUARD_S)
    try:
        n = db.execute("PRAGMA user_version").fetchone()[0]
        db.execute("PRAGMA user_version = %d" % (n + 1))
        db.commit()
    finally:
        db.close()


def contacts(rcv):
    """The hosts of the first-contact alerts <rcv> got, in order."""
    return [b["host"] for b in rcv.bodies() if b.get("kind") == "first_contact"]


def hold_env(tmp_path, hold, held_log, **more):
    """The gateway's environment for read_hold.c, holding while <hold>
    exists and logging to <held_log>."""
    asan = os.environ.get("ASAN_OPTIONS", "")
    return dict(more, SLUICE_TEST_READ_HOLD=hold, SLUICE_TEST_READ_HOLD_LOG=held_log,
                LD_PRELOAD=read_hold_lib(tmp_path),
                ASAN_OPTIONS=(asan + ":" if asan else "") + "verify_asan_link_order=0")


def assert_answered_while_held(gw, net, held_log):
    """Waits for a read of the store to be held, then asserts that a
    request is answered meanwhile, the read held all the while, and held
    on a thread other than the main one (the event loop's)."""
    poll(lambda: held_reads(held_log), timeout=HANG_GUARD_S,
         what="a read of the store held (none is while the page cache serves them)")
    # the read is held until the test lets it go: a loop that waits for it
    # never answers, so the bound only guards a hang; 5 s was passed by a
    # gateway stopped that long on a loaded machine, the loop not waiting
    try:
        status = request(gw, "GET", net.url("/during"), timeout=HANG_GUARD_S).status
    except (socket.timeout, OSError) as e:
        status = "no answer: %r" % e
    assert status == 200, "the event loop waits for the store's read: %s" % status
    assert held_reads(held_log, "released") == [], held_reads(held_log, "released")
    held = held_reads(held_log)
    assert [r for r in held if r[0] == r[1]] == [], \
        "a read held on the main thread, the event loop's: %r" % held


def rules(net):
    return [{"host": "api.example.test", "ports": [net.api.port], "tier": 3,
             "owner": "alice", "expires": "9999-12-31"}]


def other_rule(net):
    """A tier-3 grant for another host, whose alert can come behind the
    api host's without being folded into its period."""
    return [{"host": "other.example.test", "ports": [net.other.port], "tier": 3,
             "owner": "bob", "expires": "9999-12-31"}]


def test_requests_are_answered_while_the_sweep_reads_a_store_that_does_not_answer(
        gateway, net, tmp_path, refused_port):
    dead = refused_port()  # until the receiver takes it
    port = dead.port
    url = "http://127.0.0.1:%d/hook" % port
    af = str(tmp_path / "a.jsonl")
    hold = str(tmp_path / "hold")
    held_log = str(tmp_path / "held.log")
    gw = gateway(net.policy(rules(net), alerts={"first_contact": True,
                                                "sinks": [{"webhook": url}]}),
                 args=["--alerts", af, "--state", str(tmp_path / "state")],
                 env=hold_env(tmp_path, hold, held_log,
                              SLUICE_TEST_WEBHOOK_BACKOFF_MS="10",
                              SLUICE_TEST_WEBHOOK_QUEUE_MAX="1"))
    assert request(gw, "GET", net.url("/before")).status == 200
    for i in range(4):
        request(gw, "GET", "http://nowhere%d.example.test/" % i)
    # one alert in memory, three in the store only (the webhook is down)
    wait_alert(af, "first_contact", count=5)
    # their rows committed: looked at, not guessed at (half a second was
    # not always enough on a loaded machine)
    poll(lambda: stored_alerts(tmp_path / "state") >= 5 or None, timeout=HANG_GUARD_S,
         what="the 5 alerts' rows committed")
    open(hold, "w").close()
    # after the hold: a commit of the writer's own between the two would
    # bring the pages into its cache again
    write_from_outside(tmp_path / "state")
    rcv = Receiver(bound=dead.take())
    try:
        # the alert in memory goes out; memory empties and the sweep reads
        # the store, which does not answer
        poll(lambda: rcv.bodies() or None, timeout=10, what="the alert memory held")
        assert_answered_while_held(gw, net, held_log)
        # the alerts kept in the store wait for the read
        assert contacts(rcv) == ["api.example.test"], rcv.bodies()
        os.unlink(hold)
        poll(lambda: len(contacts(rcv)) >= 5 or None, timeout=20,
             what="every first contact once the store answers")
        # no copy of them comes later: checked behind a later alert
        request(gw, "GET", "http://later.example.test/")
        delivered_through(rcv, lambda b: b.get("host") == "later.example.test")
        assert contacts(rcv) == ["api.example.test"] + \
            ["nowhere%d.example.test" % i for i in range(4)] + ["later.example.test"], \
            rcv.bodies()
    finally:
        if os.path.exists(hold):
            os.unlink(hold)
        rcv.stop()
    gw.stop()


def test_requests_are_answered_while_a_sink_added_by_a_reload_reads_its_stored_alerts(
        gateway, net, tmp_path):
    # Alerts stored for a webhook the policy does not name yet: the reload
    # that adds it reads them back (its first read), on the writer's
    # thread, while the store does not answer.
    rcv = Receiver()
    url = "http://127.0.0.1:%d/hook" % rcv.port
    state = tmp_path / "state"
    hold = str(tmp_path / "hold")
    held_log = str(tmp_path / "held.log")
    args = ["--alerts", str(tmp_path / "a.jsonl"), "--state", str(state)]
    try:
        gateway(net.policy(rules(net)), args=args).stop()  # makes the store
        db = sqlite3.connect(str(state / "sluice.db"))
        with db:
            db.executemany("INSERT INTO alert_queue(sink, body, created_ms) VALUES(?, ?, 0)",
                           [(url, json.dumps({"n": i})) for i in range(5)])
        db.close()
        gw = gateway(net.policy(rules(net)), args=args,
                     env=hold_env(tmp_path, hold, held_log, SLUICE_TEST_WEBHOOK_BACKOFF_MS="10"))
        assert "5 queued alert(s) for webhooks no longer configured are kept" in gw.stderr()
        open(hold, "w").close()
        # the writer's connection has not read the queue's pages yet; the
        # write makes the read reach the file all the same, were it to
        write_from_outside(state)
        gw.write_policy(policy_yaml(net.policy(rules(net) + other_rule(net),
                                               alerts={"sinks": [{"webhook": url}]})))
        gw.reload()
        poll(lambda: "sluice: reloaded" in gw.stderr() or None, timeout=HANG_GUARD_S,
             what="the reload (a loop that waits for the store's read does not end it)")
        assert_answered_while_held(gw, net, held_log)
        assert rcv.bodies() == [], "stored alerts sent while their read is held"
        os.unlink(hold)
        # the stored alerts, oldest first, then the one of the request
        # made while they were read (it waited behind them)
        poll(lambda: len(rcv.bodies()) >= 6 or None, timeout=20,
             what="the stored alerts once the store answers")
        # and nothing more: counted behind a later alert
        # (to another host: a tier-3 alert's repeat within a minute is
        # folded into its host's period)
        assert request(gw, "GET", net.url("/later", host="other.example.test",
                                          port=net.other.port)).status == 200
        got = delivered_through(rcv, lambda b: b.get("host") == "other.example.test")
        assert [b.get("n") for b in got[:5]] == list(range(5)), got
        assert len(got) == 7 and "GET /during " in got[5].get("detail", ""), got
        gw.stop()
    finally:
        if os.path.exists(hold):
            os.unlink(hold)
        rcv.stop()
