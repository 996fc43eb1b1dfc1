"""A webhook POST in flight when a reload takes its sink out of the policy,
or when the gateway stops: the attempt is let finish and its answer
recorded, so that a policy naming the sink again (or the next start) does
not send the alert a second time. The server holds its first answer until
the test releases it: the reload or the stop lands while the POST is in
flight, whatever the timing. Loopback only."""

import json
import signal
import sqlite3
import threading

import pytest

from conftest import policy_yaml
from gate_client import poll, request
from watch_helpers import EachRequest, wait_alert

HOLD_GUARD_S = 30  # the most the server holds its first answer (a bound, not a wait)


def rules(net):
    return [{"host": host, "ports": [port], "tier": 3, "owner": "alice", "expires": "9999-12-31"}
            for host, port in (("api.example.test", net.api.port),
                               ("other.example.test", net.other.port))]


class HeldFirst(EachRequest):
    """A webhook on 127.0.0.1 that reads each request on a connection of its
    own and answers 200, the first request only once release() is called.
    Records every body, in the order read."""

    def __init__(self):
        self.bodies = []
        self.first_answered = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        super().__init__()

    def _answer(self, c, body):
        with self._lock:
            self.bodies.append(json.loads(body))
            first = len(self.bodies) == 1
        try:
            if first:
                self._release.wait(HOLD_GUARD_S)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        finally:  # a send the gateway's close failed too
            if first:
                self.first_answered.set()

    def got(self):
        with self._lock:
            return list(self.bodies)

    def release(self):
        self._release.set()

    def stop(self):
        self._release.set()
        super().stop()


@pytest.fixture
def hook():
    h = HeldFirst()
    yield h
    h.stop()


def stored_rows(state):
    db = sqlite3.connect("file:%s/sluice.db?mode=ro" % state, uri=True, timeout=5)
    try:
        return db.execute("SELECT count(*) FROM alert_queue").fetchone()[0]
    finally:
        db.close()


def with_detail(bodies, path):
    return [b for b in bodies if path in b.get("detail", "")]


def reloaded(gw, policy, n):
    """Reloads <policy>, the gateway's <n>th reload; waits until it is told."""
    gw.write_policy(policy_yaml(policy))
    gw.reload()
    poll(lambda: gw.stderr().count("sluice: reloaded") >= n or None, timeout=10,
         what="reload %d" % n)


def start(gateway, net, tmp_path, hook):
    url = "http://127.0.0.1:%d/hook" % hook.port
    with_sink = net.policy(rules(net), alerts={"sinks": [{"webhook": url}]})
    args = ["--alerts", str(tmp_path / "a.jsonl"), "--state", str(tmp_path / "state")]
    gw = gateway(with_sink, args=args, env={"SLUICE_TEST_WEBHOOK_BACKOFF_MS": "50"})
    request(gw, "POST", net.url("/first"), body=b"1")
    poll(lambda: hook.got() or None, timeout=10, what="the first POST in flight")
    poll(lambda: stored_rows(tmp_path / "state") == 1 or None, timeout=10,
         what="the alert's row committed")
    return gw, with_sink, args


def assert_first_sent_once(gw, net, hook):
    """Raises an alert after everything before it (to another host: not
    folded into the first) and waits until the sink has it: what the sink
    sent before it has arrived by then, /first once."""
    request(gw, "POST", net.url("/second", host="other.example.test", port=net.other.port),
            body=b"1")
    poll(lambda: with_detail(hook.got(), "/second") or None, timeout=20,
         what="the alert raised after the reloads")
    got = hook.got()
    assert len(with_detail(got, "/first")) == 1, got


def test_a_post_in_flight_when_its_sink_leaves_is_let_finish_and_not_sent_again(
        gateway, net, tmp_path, hook):
    # Before: the reload freed the sink and its connection, the answer was
    # never read, the row stayed, and the reload naming the sink again
    # POSTed /first a second time.
    gw, with_sink, _ = start(gateway, net, tmp_path, hook)
    reloaded(gw, net.policy(rules(net)), 1)
    hook.release()
    assert hook.first_answered.wait(HOLD_GUARD_S)
    poll(lambda: stored_rows(tmp_path / "state") == 0 or None, timeout=10,
         what="the delivered alert's row deleted")
    reloaded(gw, with_sink, 2)
    assert_first_sent_once(gw, net, hook)
    err = gw.stderr()
    assert "left the policy with an alert in flight: that attempt is let finish" in err
    assert "the alert in flight when the sink left the policy was delivered" in err
    gw.stop()


def test_a_sink_named_again_while_its_post_is_in_flight_goes_on_with_it(
        gateway, net, tmp_path, hook):
    # Removed and named again within one attempt: the sink goes on, the
    # answer to that attempt counts, and the alert is not sent again. Before,
    # the new sink sent /first again while the first POST waited.
    gw, with_sink, _ = start(gateway, net, tmp_path, hook)
    reloaded(gw, net.policy(rules(net)), 1)
    reloaded(gw, with_sink, 2)
    hook.release()
    assert_first_sent_once(gw, net, hook)
    assert "back in the policy while the alert it had in flight is not answered yet" in \
        gw.stderr()
    gw.stop()
    assert stored_rows(tmp_path / "state") == 0


def test_a_post_in_flight_at_the_stop_is_answered_and_not_sent_after_the_restart(
        gateway, net, tmp_path, hook):
    # SIGTERM while a POST is in flight: the stop waits for its answer
    # (within --grace) and records it. Before, the stop cut it at once, its
    # row stayed and the next start sent /first again.
    gw, with_sink, args = start(gateway, net, tmp_path, hook)
    wait_alert(str(tmp_path / "a.jsonl"), "tier3_write")
    gw.proc.send_signal(signal.SIGTERM)
    poll(lambda: "a POST is in flight at the stop: its answer is waited for" in
         gw.stderr() or None, timeout=10, what="the stop waiting for the POST")
    hook.release()
    assert gw.wait_exit(15) == 0
    err = gw.stderr()
    assert "was not answered before the exit" not in err, err
    assert stored_rows(tmp_path / "state") == 0
    gw = gateway(with_sink, args=args, env={"SLUICE_TEST_WEBHOOK_BACKOFF_MS": "50"})
    assert_first_sent_once(gw, net, hook)


def test_a_retired_sink_takes_a_store_that_opens_late(gateway, net, tmp_path, hook):
    # A store locked at the start opens while a removed sink's POST is in
    # flight: that sink takes it too, so the POST, cut at its deadline
    # (the server never answers it), keeps its alert there. Before, only
    # the sinks in force took the store: "in no state store: lost".
    state = tmp_path / "state"
    url = "http://127.0.0.1:%d/hook" % hook.port
    with_sink = net.policy(rules(net), alerts={"sinks": [{"webhook": url}]})
    gw = gateway(net.policy(rules(net)), args=["--state", str(state)])
    gw.stop()  # a store of sluice's own, for the lock below
    holder = sqlite3.connect("%s/sluice.db" % state, timeout=5, isolation_level=None)
    try:
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("SELECT count(*) FROM alert_queue").fetchall()
        gw = gateway(with_sink, args=["--state", str(state)])
        poll(lambda: "trying again in the background" in gw.stderr() or None, timeout=10,
             what="the locked store told")
        request(gw, "POST", net.url("/first"), body=b"1")
        poll(lambda: hook.got() or None, timeout=10, what="the first POST in flight")
        reloaded(gw, net.policy(rules(net)), 1)
    finally:
        holder.rollback()
        holder.close()
    poll(lambda: "not delivered" in gw.stderr() or None, timeout=20,
         what="the retired POST cut at its deadline")
    err = gw.stderr()
    if "/sluice.db: opened" not in err.split("not delivered")[0]:
        pytest.skip("the store's retry came after the POST's deadline: nothing to check")
    assert "in no state store: lost" not in err, err
    assert "kept in the state store, not retried" in err, err
    poll(lambda: stored_rows(state) == 1 or None, timeout=10, what="the alert's row committed")
    gw.stop()
