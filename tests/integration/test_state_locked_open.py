"""A state store another process holds under a lock that bars reads too
(PRAGMA locking_mode=EXCLUSIVE, here from Python's sqlite3) longer than the
start's 200 ms wait: the gateway serves without it, /healthz says so, and
the open is tried again off the event loop; once the lock goes, the store
is used: what was decided meanwhile is written to it, and the pairs it held
are remembered. Before, the gateway ran without its store for the whole
run. Loopback only; every wait bounded."""

import sqlite3
import urllib.request

from gate_client import api_rule, other_rule, other_url, poll, request
from watch_helpers import free_tcp_port, healthz, hold_exclusive
from watch_helpers import stored_contacts as contacts


def first_contacts(gw):
    return sorted(e["host"] for e in gw.log_lines()
                  if e.get("event") == "alert" and e.get("kind") == "first_contact")


def stored_alert_bodies(statedir):
    db = sqlite3.connect("file:%s/sluice.db?mode=ro" % statedir, uri=True, timeout=5)
    try:
        return [r[0] for r in db.execute("SELECT body FROM alert_queue ORDER BY id")]
    finally:
        db.close()


def test_a_store_locked_at_start_is_opened_once_the_lock_goes(gateway, net, tmp_path,
                                                              refused_port):
    statedir = str(tmp_path / "state")
    # a webhook nobody listens on: its alerts wait, in the store when open
    hook = "http://127.0.0.1:%d/hook" % refused_port().port
    policy = net.policy([api_rule(net), other_rule(net)],
                        alerts={"first_contact": True, "sinks": [{"webhook": hook}]})
    gw = gateway(policy, args=["--state", statedir])
    assert request(gw, "GET", net.url("/first")).status == 200
    poll(lambda: contacts(statedir) == ["api.example.test"], what="the first run's commit")
    gw.stop()
    assert len(stored_alert_bodies(statedir)) == 1  # api's, undelivered

    holder = hold_exclusive(statedir)
    port = free_tcp_port()
    try:
        gw = gateway(policy, args=["--state", statedir, "--admin", "127.0.0.1:%d" % port])
        poll(lambda: "trying again in the background" in gw.stderr() or None, timeout=10,
             what="the locked store told")
        status, body = healthz(port)
        assert status == 503 and body.startswith("unhealthy: state store: not open yet: "), body
        # decided while the store is shut: kept in memory
        assert request(gw, "GET", other_url(net, "/meanwhile")).status == 200
        poll(lambda: first_contacts(gw) == ["other.example.test"] or None,
             what="the first contact told")
    finally:
        holder.rollback()
        holder.close()
    # the lock is gone: the next try opens the store, and what was decided
    # meanwhile is written to it
    poll(lambda: contacts(statedir) == ["api.example.test", "other.example.test"] or None,
         timeout=40, what="the first contact decided meanwhile committed")
    assert healthz(port) == (200, "ok\n")
    # the stored count (the first run's alert) plus this run's
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        assert 'sluice_alerts_total{kind="first_contact"} 2\n' in r.read().decode()
    # the webhook's alert raised meanwhile is in the store's queue too
    poll(lambda: sum("other.example.test" in b for b in stored_alert_bodies(statedir)) == 1
         or None, what="the alert queued meanwhile committed")
    # told on the loop before the commits, but through the relay
    gw.wait_stderr("/sluice.db: opened")
    # the stored pair is remembered from then on: no second first_contact
    assert request(gw, "GET", net.url("/after")).status == 200
    gw.decided(path="/after")
    assert request(gw, "GET", other_url(net, "/after2")).status == 200
    gw.decided(path="/after2")
    gw.stop()
    assert first_contacts(gw) == ["other.example.test"], first_contacts(gw)


def test_a_stop_while_the_store_is_still_locked(gateway, net, tmp_path):
    # the tries end with the gateway: nothing waits for the lock, nothing
    # is left half open (the sanitizers of the test build would tell)
    statedir = str(tmp_path / "state")
    policy = net.policy([api_rule(net)], alerts={"first_contact": True})
    gw = gateway(policy, args=["--state", statedir])
    gw.stop()
    holder = hold_exclusive(statedir)
    try:
        gw = gateway(policy, args=["--state", statedir])
        poll(lambda: "trying again in the background" in gw.stderr() or None, timeout=10,
             what="the locked store told")
        assert request(gw, "GET", net.url("/meanwhile")).status == 200
        gw.decided(path="/meanwhile")
        gw.stop()
    finally:
        holder.rollback()
        holder.close()
    assert "Sanitizer" not in gw.stderr(), gw.stderr()
    assert contacts(statedir) == []


def test_a_store_another_gateway_holds_is_opened_once_it_stops(gateway, net, tmp_path):
    # Two gateways on one --state directory: an overlapping restart (a
    # rolling update whose new gateway starts while the old one ends its
    # --grace) or a second one started by mistake. The second does not use
    # the store while the first holds its sluice.lock, and tries again off
    # the event loop; once the first stops it takes the store. Before, it
    # said "in use by another sluice gateway" and ran with memory only for
    # its whole run: its first contacts were never stored, its webhook
    # alerts in no store. /healthz stays 200 while the holder may be an old
    # gateway draining (the longest --grace, and a minute), naming the
    # wait: a 503 there (as it was for a while) would hold up for ever an
    # orchestrator that waits for the new gateway to be healthy before it
    # stops the old one (a rolling update with a surge).
    statedir = str(tmp_path / "state")
    policy = net.policy([api_rule(net), other_rule(net)], alerts={"first_contact": True})
    first = gateway(policy, args=["--state", statedir])
    assert request(first, "GET", net.url("/first")).status == 200
    poll(lambda: contacts(statedir) == ["api.example.test"] or None,
         what="the first gateway's commit")
    port = free_tcp_port()
    second = gateway(policy, args=["--state", statedir, "--admin", "127.0.0.1:%d" % port])
    poll(lambda: "in use by another sluice gateway" in second.stderr() or None, timeout=10,
         what="the held store told")
    assert "trying again in the background" in second.stderr(), second.stderr()
    status, body = healthz(port)
    assert status == 200 and body.startswith("ok: state store: not open yet: "), body
    assert "another sluice gateway" in body, body
    # decided while the store is the first gateway's: kept in memory
    assert request(second, "GET", other_url(net, "/meanwhile")).status == 200
    poll(lambda: first_contacts(second) == ["other.example.test"] or None,
         what="the first contact told")
    first.stop()
    poll(lambda: contacts(statedir) == ["api.example.test", "other.example.test"] or None,
         timeout=40, what="the first contact decided meanwhile committed")
    assert healthz(port) == (200, "ok\n")
    # the first gateway's pair is remembered from then on
    assert request(second, "GET", net.url("/after")).status == 200
    second.decided(path="/after")
    second.stop()
    assert first_contacts(second) == ["other.example.test"], first_contacts(second)
