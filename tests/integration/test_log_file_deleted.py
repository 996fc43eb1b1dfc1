"""A --log FILE (or --alerts FILE) deleted while the gateway serves, with no
SIGHUP: the writer goes on writing to the open file, which no name reaches
any more, so its lines go where nobody reads them. /healthz says so (and
standard error, once) until a SIGHUP reopens the path (SPEC.md, Log
writes)."""

import json
import os

from gate_client import api_rule, poll, request
from held_requests import healthz
from watch_helpers import free_tcp_port, wait_alert

DELETED = b"its file was deleted or moved: send SIGHUP to reopen"


def paths_in(path):
    """The paths of the agent_egress lines in the file <path> (none when
    it does not exist)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return [e.get("path") for e in (json.loads(x) for x in data.split(b"\n") if x.strip())
            if e["event"] == "agent_egress"]


def unhealthy_under_traffic(gw, net, admin, n):
    """Makes requests until /healthz is no longer "ok" (n the number of the
    first); returns (its answer, the number of the next request)."""
    seen = []

    def asked():
        assert request(gw, "GET", net.url("/gone%d" % (n + len(seen)))).status == 200
        seen.append(healthz(admin))
        return seen[-1] != (200, b"ok\n")

    poll(asked, timeout=20, interval=0.1,
         what="/healthz to say the file was deleted (it said ok after each request)")
    return seen[-1], n + len(seen)


def test_a_deleted_log_file_is_unhealthy_until_a_sighup_reopens_it(gateway, net, tmp_path):
    # Before, /healthz said "ok" all along and the lines went to the
    # deleted inode: a log shipper or an auditor reading the path found
    # nothing of them, nor any word about it.
    log = str(tmp_path / "log.jsonl")
    admin = free_tcp_port()
    gw = gateway(net.policy([api_rule(net)]), args=["--log", log, "--admin", str(admin)])
    assert request(gw, "GET", net.url("/before")).status == 200
    poll(lambda: paths_in(log) == ["/before"], what="the /before line")
    assert healthz(admin) == (200, b"ok\n")
    os.unlink(log)
    got, n = unhealthy_under_traffic(gw, net, admin, 0)
    assert got == (503, b"unhealthy: decisions log: " + DELETED + b"\n"), got
    # said once on standard error, however many lines went meanwhile
    assert request(gw, "GET", net.url("/gone%d" % n)).status == 200
    told = "sluice: log %s: its file was deleted or moved" % log
    assert gw.wait_stderr(told).count(told) == 1, gw.stderr()
    assert not os.path.exists(log)
    # SIGHUP: the path is opened anew, lines go there, /healthz is ok again
    gw.reload()
    poll(lambda: os.path.exists(log), what="the log reopened by the SIGHUP")
    assert request(gw, "GET", net.url("/after")).status == 200
    poll(lambda: paths_in(log) == ["/after"], what="the /after line in the new file")
    assert healthz(admin) == (200, b"ok\n")
    gw.stop()
    assert paths_in(log) == ["/after"]


def test_a_deleted_alerts_file_is_unhealthy_until_a_sighup_reopens_it(gateway, net, tmp_path):
    # The same for --alerts FILE, which has a writer of its own: each
    # request to a new (denied) host alerts, a first contact.
    log, alerts = str(tmp_path / "log.jsonl"), str(tmp_path / "alerts.jsonl")
    admin = free_tcp_port()
    gw = gateway(net.policy([api_rule(net)], alerts={"first_contact": True}),
                 args=["--log", log, "--alerts", alerts, "--admin", str(admin)])
    assert request(gw, "GET", net.url("/before")).status == 200
    wait_alert(alerts, "first_contact", host="api.example.test")
    os.unlink(alerts)
    seen = []

    def asked():
        host = "gone%d.example.test" % len(seen)
        assert request(gw, "GET", "http://%s/" % host).status == 403
        seen.append(healthz(admin))
        return seen[-1] != (200, b"ok\n")

    poll(asked, timeout=20, interval=0.1,
         what="/healthz to say the file was deleted (it said ok after each request)")
    assert seen[-1] == (503, b"unhealthy: alerts log: " + DELETED + b"\n"), seen[-1]
    # told a moment after /healthz can say so (CI saw the line missing once)
    told = "sluice: log %s: its file was deleted or moved" % alerts
    assert gw.wait_stderr(told).count(told) == 1, gw.stderr()
    gw.reload()
    poll(lambda: os.path.exists(alerts), what="the alerts file reopened by the SIGHUP")
    assert request(gw, "GET", "http://after.example.test/").status == 403
    wait_alert(alerts, "first_contact", host="after.example.test")
    assert healthz(admin) == (200, b"ok\n")
    gw.stop()
