"""The state store files a webhook's queued alerts under a key that names
the sink without its URL: a webhook URL's path is often its credential
(Slack's, Discord's), read from the environment (`webhook: env:NAME`) so
that it is in no file. Loopback only."""

import json
import os
import sqlite3
import time

from gate_client import poll, request
from watch_helpers import Receiver, store_key, stored_alerts, wait_alert

SECRET = "/services/T0SLUICE/B0TEST/s3cr3tW3bh00kT0k3nXYZ"


def _rules(net):
    return [{"host": "api.example.test", "ports": [net.api.port], "tier": 3,
             "owner": "alice", "expires": "9999-12-31"}]


def _state_bytes(state):
    """Every byte of the files in the state directory (sluice.db, and its
    -wal and -shm while they are there)."""
    out = b""
    for name in sorted(os.listdir(str(state))):
        with open(str(state / name), "rb") as f:
            out += f.read()
    return out


def _sinks(state):
    db = sqlite3.connect("file:%s?mode=ro" % (state / "sluice.db"), uri=True)
    try:
        return sorted({r[0] for r in db.execute("SELECT sink FROM alert_queue")})
    finally:
        db.close()


def test_a_queued_alert_is_filed_without_the_webhooks_url(gateway, net, tmp_path,
                                                           refused_port):
    dead = refused_port()  # until the receiver takes it
    url = "http://127.0.0.1:%d%s" % (dead.port, SECRET)
    env = {"SLUICE_TEST_HOOK_URL": url}
    pol = net.policy(_rules(net), alerts={"sinks": [{"webhook": "env:SLUICE_TEST_HOOK_URL"}]})
    state = tmp_path / "state"
    args = ["--alerts", str(tmp_path / "a.jsonl"), "--state", str(state)]
    gw = gateway(pol, env=env, args=args)
    request(gw, "POST", net.url("/queued"), body=b"1")
    wait_alert(str(tmp_path / "a.jsonl"), "tier3_write")
    poll(lambda: stored_alerts(state) or None, timeout=10, what="the alert's row committed")
    gw.stop()
    assert _sinks(state) == [store_key(url)]
    data = _state_bytes(state)
    assert SECRET.encode() not in data and SECRET.split("/")[-1].encode() not in data
    rcv = Receiver(bound=dead.take())
    try:
        gw = gateway(pol, env=env, args=args)
        got = poll(lambda: rcv.bodies() or None, timeout=10, what="the stored alert")
        assert got[0]["kind"] == "tier3_write" and "/queued" in got[0]["detail"], got
        assert {p for p, _, _ in rcv.posts} == {SECRET}, rcv.posts
        poll(lambda: stored_alerts(state) == 0 or None, timeout=10, what="its row deleted")
        gw.stop()
    finally:
        rcv.stop()
    assert SECRET.encode() not in _state_bytes(state)


def test_alerts_a_store_filed_under_the_url_are_re_keyed_and_delivered(gateway, net, tmp_path):
    # A store of an earlier sluice holds its rows under the URL, and the
    # second listing's under "URL (listing 2)": the open re-keys them, its
    # sinks find them, and the URL's bytes are gone from the file.
    rcv = Receiver()
    state = tmp_path / "state"
    args = ["--alerts", str(tmp_path / "a.jsonl"), "--state", str(state)]
    try:
        url = "http://127.0.0.1:%d%s" % (rcv.port, SECRET)
        gw = gateway(net.policy(_rules(net)), args=args)  # makes the store
        gw.stop()
        db = sqlite3.connect(str(state / "sluice.db"))
        now = int(time.time() * 1000)
        with db:
            for sink, what in ((url, "/first"), (url + " (listing 2)", "/second")):
                body = json.dumps({"kind": "tier3_write", "detail": "POST " + what})
                db.execute("INSERT INTO alert_queue(sink, body, attempts, created_ms) "
                           "VALUES(?, ?, 0, ?)", (sink, body, now))
        db.close()
        env = {"SLUICE_TEST_HOOK_URL": url}
        hook = {"webhook": "env:SLUICE_TEST_HOOK_URL"}
        gw = gateway(net.policy(_rules(net), alerts={"sinks": [hook, dict(hook)]}), env=env,
                     args=args)
        got = poll(lambda: len(rcv.bodies()) >= 2 or None, timeout=10, what="the stored alerts")
        # each listing takes back its own row: once each, never twice
        details = sorted(b["detail"] for b in rcv.bodies())
        assert details == ["POST /first", "POST /second"], got
        poll(lambda: stored_alerts(state) == 0 or None, timeout=10, what="their rows deleted")
        gw.stop()
        assert sorted(b["detail"] for b in rcv.bodies()) == details
    finally:
        rcv.stop()
    assert SECRET.encode() not in _state_bytes(state)


def test_rows_of_a_url_no_longer_configured_are_re_keyed_too(gateway, net, tmp_path):
    state = tmp_path / "state"
    args = ["--state", str(state)]
    gw = gateway(net.policy(_rules(net)), args=args)
    gw.stop()
    url = "https://hooks.example.test" + SECRET
    db = sqlite3.connect(str(state / "sluice.db"))
    with db:
        db.execute("INSERT INTO alert_queue(sink, body, attempts, created_ms) "
                   "VALUES(?, '{}', 0, 0)", (url,))
    db.close()
    gw = gateway(net.policy(_rules(net)), args=args)
    gw.stop()
    assert _sinks(state) == [store_key(url)]
    assert SECRET.encode() not in _state_bytes(state)
