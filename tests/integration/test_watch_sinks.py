"""Alert sinks (exec, webhook) and the --admin server (/metrics through
promtool, /healthz), driven through a real `sluice serve`. Loopback only."""

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from gate_client import poll, request
from watch_helpers import Receiver, free_tcp_port, wait_alert, write_script


def rules(net, tier=3):
    return [{"host": "api.example.test", "ports": [net.api.port], "tier": tier,
             "owner": "alice", "expires": "2099-12-31"}]


def test_exec_sink_gets_the_alert_on_stdin(gateway, net, tmp_path):
    out = tmp_path / "got"
    out.mkdir()
    prog = write_script(str(tmp_path / "page.sh"),
                        "#!/bin/sh\ncat > %s/alert.$$.tmp && mv %s/alert.$$.tmp %s/alert.$$\n"
                        % (out, out, out))
    af = str(tmp_path / "alerts.jsonl")
    gw = gateway(net.policy(rules(net), alerts={"sinks": [{"exec": prog}]}),
                 args=["--alerts", af])
    t0 = time.monotonic()
    assert request(gw, "POST", net.url("/p"), body=b"1").status == 200
    files = poll(lambda: [f for f in os.listdir(str(out)) if not f.endswith(".tmp")] or None,
                 timeout=3, what="the exec sink's output")
    assert time.monotonic() - t0 < 1.5
    with open(os.path.join(str(out), files[0])) as f:
        body = f.read()
    assert body.endswith("\n")
    alert = json.loads(body)
    assert alert["kind"] == "tier3_write" and alert["event"] == "alert"
    assert alert == wait_alert(af, "tier3_write")[0]


def test_exec_sink_failures_are_logged_and_slow_ones_killed(gateway, net, tmp_path):
    fail = write_script(str(tmp_path / "fail.sh"), "#!/bin/sh\ncat >/dev/null\nexit 3\n")
    hang = write_script(str(tmp_path / "hang.sh"), "#!/bin/sh\nexec sleep 30\n")
    missing = str(tmp_path / "no-such-program")
    gw = gateway(net.policy(rules(net), alerts={"sinks": [{"exec": fail}, {"exec": hang},
                                                          {"exec": missing}]}),
                 args=["--alerts", str(tmp_path / "a.jsonl")])
    assert request(gw, "POST", net.url("/p"), body=b"1").status == 200
    poll(lambda: "exited with status 3" in gw.stderr() or None, timeout=3)
    poll(lambda: "no-such-program: cannot run" in gw.stderr() or None, timeout=3)
    # the hanging program does not slow the gate
    t0 = time.monotonic()
    for i in range(20):
        assert request(gw, "GET", net.url("/g%d" % i)).status == 200
    assert time.monotonic() - t0 < 3
    poll(lambda: "hang.sh: killed after 5 s" in gw.stderr() or None, timeout=8)


def test_webhook_delivers(gateway, net, tmp_path):
    rcv = Receiver()
    try:
        url = "http://127.0.0.1:%d/hook" % rcv.port
        gw = gateway(net.policy(rules(net), alerts={"sinks": [{"webhook": url}]}),
                     args=["--alerts", str(tmp_path / "a.jsonl"), "--state",
                           str(tmp_path / "state")])
        t0 = time.monotonic()
        request(gw, "POST", net.url("/p"), body=b"1")
        got = poll(lambda: rcv.bodies() or None, timeout=3, what="a webhook POST")
        assert time.monotonic() - t0 < 1.5
        assert got[0]["kind"] == "tier3_write"
        path, ctype, _ = rcv.posts[0]
        assert path == "/hook" and ctype == "application/json"
    finally:
        rcv.stop()


def test_webhook_down_then_up(gateway, net, tmp_path):
    port = free_tcp_port()
    url = "http://127.0.0.1:%d/hook" % port
    gw = gateway(net.policy(rules(net), alerts={"sinks": [{"webhook": url}]}),
                 args=["--alerts", str(tmp_path / "a.jsonl"), "--state",
                       str(tmp_path / "state")])
    request(gw, "POST", net.url("/p1"), body=b"1")
    # the dead webhook does not slow requests
    t0 = time.monotonic()
    for i in range(10):
        assert request(gw, "GET", net.url("/g%d" % i)).status == 200
    assert time.monotonic() - t0 < 2
    time.sleep(1.5)
    assert "cannot deliver" in gw.stderr()
    rcv = Receiver(port)
    try:
        got = poll(lambda: rcv.bodies() or None, timeout=12, what="delivery after the receiver came up")
        assert got[0]["kind"] == "tier3_write" and got[0]["id"] is not None
    finally:
        rcv.stop()


def test_webhook_queue_survives_a_restart(gateway, net, tmp_path):
    port = free_tcp_port()
    url = "http://127.0.0.1:%d/hook" % port
    pol = net.policy(rules(net), alerts={"sinks": [{"webhook": url}]})
    args = ["--alerts", str(tmp_path / "a.jsonl"), "--state", str(tmp_path / "state")]
    gw = gateway(pol, args=args)
    request(gw, "POST", net.url("/lost?"), body=b"1")
    wait_alert(str(tmp_path / "a.jsonl"), "tier3_write")
    time.sleep(0.5)
    gw.stop()
    rcv = Receiver(port)
    try:
        gateway(pol, args=args)
        got = poll(lambda: rcv.bodies() or None, timeout=5, what="the stored alert")
        assert got[0]["kind"] == "tier3_write" and "/lost" in got[0]["detail"]
        time.sleep(0.5)
        assert len(rcv.bodies()) == 1
    finally:
        rcv.stop()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus)")
def test_metrics_pass_promtool(gateway, net, tmp_path):
    port = free_tcp_port()
    gw = gateway(net.policy(rules(net, tier=1) + [
        {"host": "other.example.test", "ports": [net.other.port], "tier": 3, "owner": "bob",
         "expires": "2099-01-01"}], alerts={"first_contact": True}),
        args=["--admin", "127.0.0.1:%d" % port])
    request(gw, "GET", net.url("/m"))
    request(gw, "POST", net.url("/m"), body=b"abc")
    request(gw, "GET", "http://nowhere.example.test/")
    gw.wait_events("agent_egress_end", count=3)
    base = "http://127.0.0.1:%d" % port
    text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ('sluice_requests_total{agent="default",tier="1",decision="allow",reason="none"} 2'
            in text)
    assert ('sluice_requests_total{agent="default",tier="none",decision="deny",'
            'reason="not_in_policy"} 1' in text)
    assert 'sluice_bytes_up_total{agent="default"} 3' in text
    assert 'sluice_alerts_total{kind="first_contact"} 2' in text
    assert "sluice_open_connections " in text and "sluice_open_tunnels 0" in text
    assert "sluice_policy_reloads_total 0" in text
    assert 'sluice_grant_expiry_timestamp_seconds{rule="rules[1]"' in text
    gw.reload()
    poll(lambda: "sluice_policy_reloads_total 1" in urllib.request.urlopen(
        base + "/metrics", timeout=5).read().decode() or None, timeout=3)
    assert urllib.request.urlopen(base + "/healthz", timeout=5).read() == b"ok\n"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(base + "/nope", timeout=5)
    assert e.value.code == 404


def test_admin_address_errors(run_sluice, tmp_path):
    pol = tmp_path / "p.yaml"
    pol.write_text("version: 1\nrules: []\n")
    r = run_sluice("serve", "--policy", str(pol), "--listen", "127.0.0.1:%d" % free_tcp_port(),
                   "--admin", "nonsense:port")
    assert r.returncode == 2 and "--admin nonsense:port" in r.stderr
