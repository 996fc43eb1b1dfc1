"""Each alert detector driven by real requests through `sluice serve`: the
alert line, its fields, and that it was written within one second of the
event that caused it; repeat folding; first-contact memory and baselines
across a restart; a corrupt state store. Loopback only."""

import datetime
import os
import sqlite3
import time

import pytest

from gate_client import (build_request, connect, cpu_seconds, open_conn, poll, read_response,
                         read_responses, request, utc_today)
from gate_servers import BannerServer
from watch_helpers import (alerts, assert_prompt, ts, wait_alert, wait_alert_timed)


def api_rule(net, **kw):
    r = {"host": "api.example.test", "ports": [net.api.port], "tier": 1}
    r.update(kw)
    return r


def start(gateway, net, rules, alerts_cfg, tmp_path, state=True, extra=()):
    af = str(tmp_path / "alerts.jsonl")
    args = ["--alerts", af]
    if state:
        args += ["--state", str(tmp_path / "state")]
    gw = gateway(net.policy(rules, alerts=alerts_cfg), args=args + list(extra))
    return gw, af


def test_first_contact_remembered_across_restart(gateway, net, tmp_path):
    gw, af = start(gateway, net, [api_rule(net), {"host": "other.example.test",
                                                  "ports": [net.other.port], "tier": 0}],
                   {"first_contact": True}, tmp_path)
    assert request(gw, "GET", net.url("/a")).status == 200
    a, seen = wait_alert_timed(af, "first_contact")
    assert a["agent"] == "default" and a["host"] == "api.example.test"
    assert a["tier"] == 1 and a["severity"] == "low" and a["count"] == 1
    assert "for the first time" in a["detail"]
    ev = gw.events("agent_egress", host="api.example.test")[0]
    assert a["id"] == ev["id"]
    assert_prompt(a, gw)
    # a denied first contact alerts too, at a higher severity
    assert request(gw, "GET", "http://nowhere.example.test/").status == 403
    d = wait_alert(af, "first_contact", host="nowhere.example.test")[0]
    assert d["severity"] == "medium" and "denied" in d["detail"]
    request(gw, "GET", net.url("/b"))
    gw.wait_events("agent_egress", count=3)
    gw.stop()  # every alert it raised is written by its end: counted then, not after a wait
    assert len(alerts(af, "first_contact")) == 2

    # the same state directory: the pair is remembered, a new host is not
    gw2 = gateway(net.policy([api_rule(net), {"host": "other.example.test",
                                              "ports": [net.other.port], "tier": 0}],
                             alerts={"first_contact": True}),
                  args=["--alerts", af, "--state", str(tmp_path / "state")])
    assert request(gw2, "GET", net.url("/c")).status == 200
    url = "http://other.example.test:%d/" % net.other.port
    assert request(gw2, "GET", url).status == 200
    # alerts are written in order: one for /c would be ahead of other's
    wait_alert(af, "first_contact", host="other.example.test")
    assert len(alerts(af, "first_contact", host="api.example.test")) == 1
    assert os.path.exists(str(tmp_path / "state" / "sluice.db"))


def test_tier3_write_names_owner_and_expiry(gateway, net, tmp_path):
    rule = api_rule(net, tier=3, owner="chaysen", expires="9999-12-31")
    gw, af = start(gateway, net, [rule], {"expiry_warn_days": 14}, tmp_path, state=False)
    assert request(gw, "POST", net.url("/repos/x/y/pulls"), body=b"{}").status == 200
    a, seen = wait_alert_timed(af, "tier3_write")
    assert a["severity"] == "high" and a["tier"] == 3 and a["agent"] == "default"
    assert a["detail"] == ("POST /repos/x/y/pulls on api.example.test by default "
                           "(owner chaysen, expires 9999-12-31)")
    assert_prompt(a, gw)


def test_tier3_tunnel_names_the_expiry_of_the_grant_that_made_it_tier_3(gateway, net, tmp_path):
    # SPEC: a CONNECT is as high a tier as the highest rule gathered; the
    # tunnel goes by the unrestricted tier-0 rule, but its tier, its owner
    # and so the expiry its alert names are the tier-3 grant's (it said
    # "expires never": the deciding rule's, which has no expires)
    from gate_client import connect
    rules = [{"host": "tls.example.test", "ports": [net.tls.port], "tier": 0},
             {"host": "tls.example.test", "ports": [net.tls.port], "tier": 3,
              "methods": ["POST"], "owner": "alice", "expires": "9999-12-31"}]
    gw, af = start(gateway, net, rules, {"expiry_warn_days": 14}, tmp_path, state=False)
    t = connect(gw, "tls.example.test:%d" % net.tls.port)
    try:
        assert t.status == 200, t.text
    finally:
        t.close()
    a = wait_alert(af, "tier3_write")[0]
    assert a["tier"] == 3 and a["host"] == "tls.example.test", a
    assert a["detail"].endswith("(owner alice, expires 9999-12-31)"), a


def test_tunnel_under_an_expired_grant_next_to_a_get_rule_is_grant_expired(gateway, net,
                                                                           tmp_path):
    # the tunnel would go ahead under the tier-3 grant, which has expired:
    # refused with grant_expired and its alert, not needs_inspection (the
    # live GET-only rule cannot open it) with no alert at all
    from gate_client import connect
    rules = [{"host": "tls.example.test", "ports": [net.tls.port], "tier": 3,
              "owner": "alice", "expires": "2020-01-31"},
             {"host": "tls.example.test", "ports": [net.tls.port], "tier": 1,
              "methods": ["GET"]}]
    gw, af = start(gateway, net, rules, {"expiry_warn_days": 14}, tmp_path, state=False)
    t = connect(gw, "tls.example.test:%d" % net.tls.port)
    t.close()
    assert t.status == 403, t.text
    ev = gw.wait_events("agent_egress", method="CONNECT")[0]
    assert ev["reason"] == "grant_expired" and ev["rule"] == "rules[0]", ev
    a = wait_alert(af, "grant_expired")[0]
    assert a["detail"].endswith("(owner alice, expires 2020-01-31)"), a


def test_write_burst_and_folding(gateway, net, tmp_path):
    # a 5 s period: the 8 POSTs fit inside it, pipelined on one connection
    # so that the gateway decides them one after the other, not at the
    # pace of a test process a loaded machine holds back (sent one at a
    # time, with a wait for the first alert among them, the last ones could
    # fall in the next period). The first alert is prompt by the gateway's
    # own stamps (assert_prompt), whenever the test reads it.
    gw, af = start(gateway, net, [api_rule(net, tier=2)],
                   {"write_burst": {"max": 3, "per": "5s"}}, tmp_path, state=False)
    s = open_conn(gw)
    post = (b"POST %s HTTP/1.1\r\nHost: api.example.test:%d\r\nContent-Length: 1\r\n\r\nx"
            % (net.url("/w").encode(), net.api.port))
    s.sendall(post * 8)
    assert [r.status for r in read_responses(s, ["POST"] * 8)] == [200] * 8
    s.close()
    first = wait_alert(af, "write_burst")[0]
    assert_prompt(first, gw)
    assert first["count"] == 1 and first["severity"] == "medium"
    assert "4 write requests within 5s (max 3)" in first["detail"]
    # reads do not count
    request(gw, "GET", net.url("/r"))
    # the 4 later writes were folded into one summary at the end of the period
    both = wait_alert(af, "write_burst", count=2, timeout=30)
    assert len(both) == 2
    assert both[1]["count"] == 4 and "4 more within 5s, folded" in both[1]["detail"]
    # the summary opened a new period; quiet, it closes silently: counted
    # once the gateway stopped, past the period's end (by the clock the
    # alerts are stamped with), as the tick that closed it or the stop did
    ends = ts(both[1]["ts"]) + 5.0
    while time.time() < ends:
        time.sleep(min(0.2, max(0.0, ends - time.time())))
    gw.stop()
    assert len(alerts(af, "write_burst")) == 2, alerts(af, "write_burst")


def test_denied_burst(gateway, net, tmp_path):
    gw, af = start(gateway, net, [api_rule(net)], {"denied_burst": {"max": 2, "per": "1m"}},
                   tmp_path, state=False)
    for i in range(2):
        assert request(gw, "GET", "http://evil%d.example.test/" % i).status == 403
    request(gw, "GET", "http://evil9.example.test/")
    # alerts are written in order: the first is the third denial's, so max
    # denials raised none (checked by a line that comes, not by a wait)
    a, seen = wait_alert_timed(af, "denied_burst")
    assert a["id"] == gw.events("agent_egress", host="evil9.example.test")[0]["id"], a
    assert a["agent"] == "default" and "denied 3 times within 1m (max 2)" in a["detail"]
    assert "not_in_policy" in a["detail"]
    assert_prompt(a, gw)


def test_an_ipv6_literal_host_is_bracketed_in_alert_details(gateway, net, tmp_path):
    # "::1:1" reads as the address ::1:1, or as ::1 and port 1: the gate's
    # refusals write [::1]:1, and so do the alerts now
    gw, af = start(gateway, net, [api_rule(net)],
                   {"first_contact": True, "denied_burst": {"max": 1, "per": "1m"}},
                   tmp_path, state=False)
    assert request(gw, "GET", "http://[::1]:1/x").status == 403
    t = connect(gw, "[::1]:1")
    assert t.status == 403
    t.close()
    fc = wait_alert(af, "first_contact")[0]
    assert fc["host"] == "::1"
    assert fc["detail"] == "default contacted [::1]:1 for the first time (GET, denied)"
    db = wait_alert(af, "denied_burst")[0]
    assert "the last: CONNECT [::1]:1 (ip_literal)" in db["detail"], db


def test_upload_bytes_alerts_while_the_upload_runs(gateway, net, tmp_path):
    gw, af = start(gateway, net, [api_rule(net, tier=2)],
                   {"upload_bytes": {"max": "256KiB", "per": "1m"}}, tmp_path, state=False)
    total = 2 * 1024 * 1024
    s = open_conn(gw)
    # the head and 320 KiB (over the max) in one send: the gateway has them at once
    first = 320 * 1024
    t0 = time.monotonic()
    s.sendall(b"PUT %s HTTP/1.1\r\nHost: api.example.test:%d\r\nContent-Length: %d\r\n\r\n"
              % (net.url("/up").encode(), net.api.port, total) + b"u" * first)
    chunk = b"u" * 65536
    sent = first
    a, seen = wait_alert_timed(af, "upload_bytes", timeout=15)
    # the request is still running: no end event yet
    assert gw.events("agent_egress_end") == []
    # within one second of the request, on the gateway's own clock; the
    # client-side bound is generous (a loaded machine may stall the test)
    assert_prompt(a, gw)
    assert seen - t0 < 10.0
    assert a["severity"] == "high" and a["host"] == "api.example.test"
    assert "max 262144" in a["detail"]
    while sent < total:
        s.sendall(chunk)
        sent += len(chunk)
    assert read_response(s, "PUT").status == 200
    s.close()
    end = gw.wait_events("agent_egress_end")[0]
    assert end["bytes_up"] == total


def test_upload_bytes_in_a_tunnel(gateway, net, tmp_path):
    rule = {"host": "banner.example.test", "ports": [net.banner.port], "tier": 2}
    gw, af = start(gateway, net, [rule], {"upload_bytes": {"max": "64KiB", "per": "1m"}},
                   tmp_path, state=False)
    s = open_conn(gw)
    s.sendall(b"CONNECT banner.example.test:%d HTTP/1.1\r\nHost: banner.example.test:%d\r\n\r\n"
              % (net.banner.port, net.banner.port))
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert b" 200 " in head.split(b"\r\n")[0]
    for i in range(4):
        try:
            # neither TLS nor HTTP: a run of token bytes would be waited
            # for as the start of an HTTP method, and refused at PEEK_MAX
            s.sendall((b"\x00" if i == 0 else b"t") + b"t" * 65535)
        except OSError:
            break
    a = wait_alert(af, "upload_bytes", timeout=10)[0]
    assert a["host"] == "banner.example.test"
    s.close()


def _tunnel_head(port):
    return (b"CONNECT banner.example.test:%d HTTP/1.1\r\nHost: banner.example.test:%d\r\n\r\n"
            % (port, port))


def _tunnel(gw, port):
    s = open_conn(gw)
    s.sendall(_tunnel_head(port))
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert b" 200 " in head.split(b"\r\n")[0]
    return s


def test_upload_bytes_of_a_tunnel_that_goes_quiet(gateway, net, tmp_path):
    """40,000 bytes in one send, then nothing: the first byte is published at
    once, the rest, under PROGRESS_BYTES and within PROGRESS_MS of it, was
    held back until more came or the tunnel ended, so an agent could keep
    just under 64 KiB per tunnel out of upload_bytes for as long as it kept
    its tunnels open. They are published PROGRESS_MS later now."""
    rule = {"host": "banner.example.test", "ports": [net.banner.port], "tier": 2}
    gw, af = start(gateway, net, [rule], {"upload_bytes": {"max": "16KiB", "per": "1m"}},
                   tmp_path, state=False)
    s = _tunnel(gw, net.banner.port)
    s.sendall(b"\x00" + b"t" * 40000)  # not TLS, not HTTP: tunnelled as it is
    a = wait_alert(af, "upload_bytes", timeout=10)[0]
    assert gw.events("agent_egress_end") == []  # the tunnel is still open, and quiet
    # the CONNECT's head counts too
    assert "sent %d bytes upstream" % (len(_tunnel_head(net.banner.port)) + 40001) in a["detail"]
    assert_prompt(a, gw)
    s.close()


def test_upload_bytes_of_a_request_whose_answer_waits(gateway, net, tmp_path):
    """The same for a plain request: its body sent, the upstream slow to answer."""
    gw, af = start(gateway, net, [api_rule(net, tier=2)],
                   {"upload_bytes": {"max": "16KiB", "per": "1m"}}, tmp_path, state=False)
    s = open_conn(gw)
    body = b"u" * 40000
    head = (b"PUT %s HTTP/1.1\r\nHost: api.example.test:%d\r\nContent-Length: %d\r\n\r\n"
            % (net.url("/slow?ms=8000").encode(), net.api.port, len(body)))
    s.sendall(head + body)
    a = wait_alert(af, "upload_bytes", timeout=7)[0]
    assert gw.events("agent_egress_end") == []  # the answer has not come
    assert "sent %d bytes upstream" % (len(head) + 40000) in a["detail"]  # the head too
    assert_prompt(a, gw)
    assert read_response(s, "PUT").status == 200
    s.close()


def _long_head(method, target, host, n):
    """A request head of about 24 KiB of the agent's choosing: a long path
    (a query, for a GET) and four long headers, numbered <n> so that no two
    are alike."""
    hdrs = [("X-Data-%d" % i, "%d-" % n + "b" * 4000) for i in range(4)]
    if method == "GET":
        target += "?q=%d-" % n + "a" * 7000
    return build_request(method, target, hdrs, host=host)


def test_upload_bytes_counts_request_heads(gateway, net, tmp_path):
    """An agent sends what it likes upstream in a request's path and headers:
    40 GETs of about 24 KiB of head each are 960 KiB, with no body. bytes_up
    counts bodies and tunnel data only (the log's contract), and
    upload_bytes counted bytes_up: no alert with a max of 64 KiB. It counts
    the head of each request let through too."""
    gw, af = start(gateway, net, [api_rule(net)],
                   {"upload_bytes": {"max": "64KiB", "per": "1m"}}, tmp_path, state=False)
    s = open_conn(gw)
    heads = []
    for i in range(40):
        heads.append(_long_head("GET", net.url("/h"), True, i))
        s.sendall(heads[-1])
        assert read_response(s, "GET").status == 200
    s.close()
    assert len(net.api.requests) == 40
    a = wait_alert(af, "upload_bytes", timeout=5)[0]
    # the first over 64 KiB: the third head
    assert sum(len(h) for h in heads[:2]) <= 65536 < sum(len(h) for h in heads[:3])
    assert "sent %d bytes upstream" % sum(len(h) for h in heads[:3]) in a["detail"], a
    assert a["agent"] == "default" and a["host"] == "api.example.test"
    assert_prompt(a, gw)
    # the log's bytes_up is what it was: bodies (none here)
    ends = gw.wait_events("agent_egress_end", count=40)
    assert [e["bytes_up"] for e in ends] == [0] * 40


def test_upload_bytes_counts_connect_heads(gateway, net, tmp_path):
    """The same through CONNECT heads, each tunnel carrying nothing: five of
    about 16 KiB of headers are over 64 KiB."""
    rule = {"host": "banner.example.test", "ports": [net.banner.port], "tier": 2}
    gw, af = start(gateway, net, [rule], {"upload_bytes": {"max": "64KiB", "per": "1m"}},
                   tmp_path, state=False)
    target = "banner.example.test:%d" % net.banner.port
    total = 0
    for i in range(5):
        head = _long_head("CONNECT", target, target, i)
        total += len(head)
        s = open_conn(gw)
        s.sendall(head)
        got = b""
        while BannerServer.BANNER not in got:  # the tunnel is open
            d = s.recv(4096)
            assert d, got
            got += d
        assert b" 200 " in got.split(b"\r\n")[0]
        s.close()
    assert total > 65536
    a = wait_alert(af, "upload_bytes", timeout=5)[0]
    assert "sent %d bytes upstream" % total in a["detail"], a
    assert a["host"] == "banner.example.test"


def _off_hours_now():
    """Working hours that exclude the present minute (two hours ahead)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    start = (now + datetime.timedelta(hours=2)).strftime("%H:00")
    end = (now + datetime.timedelta(hours=3)).strftime("%H:00")
    return {"tz": "UTC", "hours": "%s-%s" % (start, end), "days": "Mon-Sun"}


def test_off_hours_write(gateway, net, tmp_path):
    gw, af = start(gateway, net, [api_rule(net, tier=2)], {"off_hours": _off_hours_now()},
                   tmp_path, state=False)
    assert request(gw, "GET", net.url("/read")).status == 200
    assert request(gw, "DELETE", net.url("/thing")).status == 200
    a, seen = wait_alert_timed(af, "off_hours_write")
    assert alerts(af, "off_hours_write")[0]["id"] == a["id"]  # the read did not alert
    assert "DELETE /thing" in a["detail"] and "outside working hours (UTC" in a["detail"]
    assert_prompt(a, gw)


def test_extension_methods_are_writes(gateway, net, tmp_path):
    """A rule without methods lets an extension method through (WebDAV's
    MOVE, COPY, MKCOL, PROPPATCH, or any made-up token): RFC 9110 holds no
    such method safe, and an origin may write on it. It was no write to the
    detectors: three went by write_burst {max: 2} and off_hours_write
    without a line. The safe methods (GET, HEAD, OPTIONS, TRACE) still are
    not writes."""
    gw, af = start(gateway, net, [api_rule(net, tier=2)],
                   {"write_burst": {"max": 2, "per": "1m"}, "off_hours": _off_hours_now()},
                   tmp_path, state=False)
    for m in ("GET", "HEAD", "OPTIONS"):
        assert request(gw, m, net.url("/read")).status == 200
    s = open_conn(gw)
    for i in range(3):
        s.sendall(b"BREW %s HTTP/1.1\r\nHost: api.example.test:%d\r\nContent-Length: 1\r\n\r\nx"
                  % (net.url("/pot%d" % i).encode(), net.api.port))
        assert read_response(s, "BREW").status == 200
    s.close()
    o = wait_alert(af, "off_hours_write")[0]
    assert "BREW /pot0" in o["detail"]
    w = wait_alert(af, "write_burst")[0]
    assert "3 write requests within 1m (max 2); the last: BREW /pot2" in w["detail"]
    assert_prompt(w, gw)


def test_grant_expired_and_expiring(gateway, net, tmp_path):
    today = utc_today()
    old = (today - datetime.timedelta(days=2)).isoformat()
    soon = today + datetime.timedelta(days=3)
    rules = [api_rule(net, tier=3, owner="alice", expires=old),
             {"host": "other.example.test", "ports": [net.other.port], "tier": 3,
              "owner": "bob", "expires": soon.isoformat()}]
    gw, af = start(gateway, net, rules, {"expiry_warn_days": 7}, tmp_path, state=False)
    e = wait_alert(af, "grant_expiring")[0]  # at start
    assert e["host"] == "other.example.test" and e["agent"] is None and e["id"] is None
    # 3 days left, or 2 when a UTC midnight came before the gateway judged
    # (seen: "2 days left" for a test begun 0.3 s before one)
    said = ["(owner bob) expires on %s: %d days left" % (soon, (soon - day).days)
            for day in (today, utc_today())]
    assert any(s in e["detail"] for s in said), (said, e)
    r = request(gw, "POST", net.url("/x"), body=b"1")
    assert r.status == 403 and r.header("Sluice-Reason") == "grant_expired"
    a, seen = wait_alert_timed(af, "grant_expired")
    assert a["severity"] == "high" and a["host"] == "api.example.test"
    assert "expired grant (owner alice, expires %s)" % old in a["detail"]
    assert_prompt(a, gw)
    gw.reload()  # announced again on reload
    wait_alert(af, "grant_expiring", count=2)



@pytest.mark.parametrize("mode", ["enforce", "report"])
def test_grant_expired_alert_needs_no_alerts_section(gateway, net, tmp_path, mode):
    # SPEC: a grant past its expiry denies and raises an alert, never a
    # silent allow. grant_expired has no key of its own; it was raised only
    # when the policy had an alerts: section, so a policy without one
    # denied an expired grant without an alert and, for an agent in report
    # mode, let it through with none: a silent allow but for its log line.
    old = (datetime.datetime.now(datetime.timezone.utc).date()
           - datetime.timedelta(days=2)).isoformat()
    rules = [api_rule(net, tier=3, methods=["POST"], owner="alice", expires=old)]
    agents = [{"id": "bot", "sources": ["127.0.0.1/32"], "mode": mode}]
    af = str(tmp_path / "alerts.jsonl")
    gw = gateway(net.policy(rules, agents=agents), args=["--alerts", af])
    r = request(gw, "POST", net.url("/expired"), body=b"1")
    assert r.status == (403 if mode == "enforce" else 200), r
    ev = gw.decided(path="/expired")[0]
    assert (ev["reason"], ev["decision"]) == ("grant_expired",
                                             "deny" if mode == "enforce" else "report"), ev
    a = wait_alert(af, "grant_expired")[0]
    assert (a["id"], a["severity"], a["agent"]) == (ev["id"], "high", "bot"), a
    assert "expired grant (owner alice, expires %s)" % old in a["detail"], a
    # the other detectors stay off until the policy's alerts: section asks
    assert [x["kind"] for x in alerts(af)] == ["grant_expired"]


def test_expired_grant_naming_the_method_is_not_passed_to_a_lower_tier(gateway, net, tmp_path):
    # An expired tier-3 grant for POST next to a tier-0 rule without methods
    # for the same host: the grant names the method, so it ranks first for a
    # POST, and the POST is refused with grant_expired and its alert, never
    # let through at tier 0 (it was, without a word, before expired rules
    # were ranked). A GET, which the grant does not name, goes at tier 0. A
    # tunnel, which could carry a POST, is refused too: the grant would
    # raise its tier to 3.
    from gate_client import assert_denied, connect, nothing_reached
    old = (datetime.datetime.now(datetime.timezone.utc).date()
           - datetime.timedelta(days=2)).isoformat()
    rules = [api_rule(net, tier=3, methods=["POST"], owner="alice", expires=old),
             api_rule(net, tier=0),
             {"host": "tls.example.test", "ports": [net.tls.port], "tier": 3,
              "methods": ["POST"], "owner": "bob", "expires": old},
             {"host": "tls.example.test", "ports": [net.tls.port], "tier": 0}]
    gw, af = start(gateway, net, rules, {"expiry_warn_days": 14}, tmp_path, state=False)
    r = request(gw, "POST", net.url("/publish"), body=b"payload",
                headers={"Content-Type": "text/plain"})
    ev, _ = assert_denied(gw, net, r, "grant_expired", host="api.example.test",
                          port=net.api.port, agent="default", method="POST", tier=3,
                          rule="rules[0]", owner="alice", ip=None)
    a = wait_alert(af, "grant_expired")[0]
    assert a["severity"] == "high" and a["host"] == "api.example.test" and a["tier"] == 3, a
    assert a["id"] == ev["id"], (a, ev)
    assert a["detail"].endswith("(owner alice, expires %s)" % old), a

    t = connect(gw, "tls.example.test:%d" % net.tls.port)
    t.close()
    assert t.status == 403 and t.headers.get("sluice-reason") == "grant_expired", t.text
    tev = gw.wait_events("agent_egress", method="CONNECT")[0]
    assert tev["rule"] == "rules[2]" and tev["owner"] == "bob" and tev["tier"] == 3, tev
    wait_alert(af, "grant_expired", host="tls.example.test")
    nothing_reached(net)

    r = request(gw, "GET", net.url("/read"))
    assert r.status == 200
    assert [q.method for q in net.api.requests] == ["GET"]
    g = gw.events("agent_egress", method="GET")[0]
    assert g["decision"] == "allow" and g["rule"] == "rules[1]" and g["tier"] == 0, g


def _early_in_a_minute(need=25.0, bound=40.0):
    """Waits (at most <bound> s) until at least <need> s of the current UTC
    minute remain, so that what follows happens within one minute."""
    deadline = time.monotonic() + bound
    while 60.0 - time.time() % 60.0 < need and time.monotonic() < deadline:
        time.sleep(0.2)


def _baseline_row(tmp_path):
    db = sqlite3.connect(str(tmp_path / "state" / "sluice.db"))
    try:
        return db.execute("SELECT agent, req_avg, bytes_avg, since_ms, minute FROM baseline"
                          ).fetchall()
    finally:
        db.close()


def test_baseline_learned_and_kept_across_restart(gateway, net, tmp_path):
    cfg = {"baseline": {"factor": 2, "floor": 3, "learn": "1m"}}
    _early_in_a_minute()
    before_ms = int(time.time() * 1000)
    gw, af = start(gateway, net, [api_rule(net)], cfg, tmp_path)
    for i in range(3):
        request(gw, "GET", net.url("/seed%d" % i))
    gw.wait_events("agent_egress_end", count=3)
    gw.stop()  # a real, graceful stop
    after_ms = int(time.time() * 1000)
    # what the stop stored is the baseline as of the real minute (a stop
    # once rolled it to a far-future minute, zeroing both averages)
    rows = _baseline_row(tmp_path)
    assert len(rows) == 1, rows
    agent, req_avg, bytes_avg, since, minute = rows[0]
    assert agent == "default"
    assert before_ms <= since <= after_ms
    assert since // 60000 <= minute <= after_ms // 60000, rows
    assert 0.0 <= req_avg < 1e6 and 0.0 <= bytes_avg < 1e12
    # learned long ago at about 3 requests a minute: only the start of
    # learning is moved back, the minute stays as the gateway stored it
    db = sqlite3.connect(str(tmp_path / "state" / "sluice.db"))
    db.execute("UPDATE baseline SET req_avg = 3.0, bytes_avg = 1e9, since_ms = since_ms - ?",
               (86400000,))
    db.commit()
    db.close()
    gw2 = gateway(net.policy([api_rule(net)], alerts=cfg),
                  args=["--alerts", af, "--state", str(tmp_path / "state")])
    # a normal minute does not alert after the restart
    for i in range(3):
        request(gw2, "GET", net.url("/q%d" % i))
    gw2.wait_events("agent_egress_end", count=3)
    assert alerts(af, "baseline") == []  # so far; for good below: the first is the 7th's
    # more than twice the learned rate does
    for i in range(3, 6):
        request(gw2, "GET", net.url("/q%d" % i))
    request(gw2, "GET", net.url("/q6"))
    a, seen = wait_alert_timed(af, "baseline", timeout=10)
    assert a["agent"] == "default" and "made 7 requests this minute" in a["detail"]
    assert_prompt(a, gw2)


def test_a_store_of_many_baselines_loads_the_latest_4096_at_once(gateway, net, tmp_path):
    # Windows and baselines are kept for 4096 agents, and a store keeps the
    # baseline of every agent it ever evicted: 300,000 of them here. The
    # load looked each row up among the agents already loaded and read all
    # of them (14 s of CPU for 200,000 rows in the test build before the
    # gateway served); it reads the 4096 of the latest minutes, so that the
    # agent active last (here "default", stored last) has its baseline
    cfg = {"baseline": {"factor": 2, "floor": 3, "learn": "1m"}}
    state = tmp_path / "state"
    state.mkdir(mode=0o750)
    _early_in_a_minute()
    now = int(time.time() * 1000)
    db = sqlite3.connect(str(state / "sluice.db"))
    db.execute("CREATE TABLE baseline(agent TEXT PRIMARY KEY, req_avg REAL NOT NULL,"
               " bytes_avg REAL NOT NULL, since_ms INTEGER NOT NULL, minute INTEGER NOT NULL)")
    db.executemany("INSERT INTO baseline VALUES(?, 1.0, 100.0, ?, ?)",
                   (("agent-%06d" % i, now - 86400000, now // 60000 - 10 - i % 1000)
                    for i in range(300000)))
    db.execute("INSERT INTO baseline VALUES('default', 3.0, 1e9, ?, ?)",
               (now - 86400000, now // 60000))
    db.commit()
    db.close()
    gw, af = start(gateway, net, [api_rule(net)], cfg, tmp_path)
    used = cpu_seconds(gw.proc.pid)
    assert used < 3.0, "%.1f s of CPU to load the store" % used
    assert "without a state store" not in gw.stderr()
    # the baseline of "default" was loaded: 7 requests is more than twice 3
    for i in range(7):
        request(gw, "GET", net.url("/q%d" % i))
    a = wait_alert(af, "baseline", timeout=10)[0]
    assert a["agent"] == "default" and "made 7 requests this minute" in a["detail"]


def test_a_baseline_stored_while_the_clock_was_ahead_still_alerts(gateway, net, tmp_path):
    # A store written while the clock was a day ahead (then set right):
    # the row's minute is brought back to the current one, and its start of
    # learning moves back with it. It stayed a day in the future, so the
    # baseline, learned for an hour, counted as not learned for another day
    # and raised nothing
    cfg = {"baseline": {"factor": 2, "floor": 3, "learn": "1m"}}
    state = tmp_path / "state"
    state.mkdir(mode=0o750)
    _early_in_a_minute()
    ahead = int(time.time() * 1000) + 86400000
    db = sqlite3.connect(str(state / "sluice.db"))
    db.execute("CREATE TABLE baseline(agent TEXT PRIMARY KEY, req_avg REAL NOT NULL,"
               " bytes_avg REAL NOT NULL, since_ms INTEGER NOT NULL, minute INTEGER NOT NULL)")
    db.execute("INSERT INTO baseline VALUES('default', 3.0, 1e9, ?, ?)",
               (ahead - 3600000, ahead // 60000))
    db.commit()
    db.close()
    gw, af = start(gateway, net, [api_rule(net)], cfg, tmp_path)
    for i in range(7):
        request(gw, "GET", net.url("/q%d" % i))
    a = wait_alert(af, "baseline", timeout=10)[0]
    assert a["agent"] == "default" and "made 7 requests this minute" in a["detail"]
    gw.stop()
    rows = _baseline_row(tmp_path)
    now = int(time.time() * 1000)
    assert rows[0][3] <= now - 3600000 + 60000, rows  # learning began an hour ago


def test_per_request_kinds_fold_and_summaries_are_written_at_shutdown(gateway, net, tmp_path):
    rule = api_rule(net, tier=3, owner="chaysen", expires="9999-12-31")
    gw, af = start(gateway, net, [rule], {"first_contact": True}, tmp_path, state=False)
    for i in range(4):
        assert request(gw, "POST", net.url("/w%d" % i), body=b"1").status == 200
    gw.wait_events("agent_egress_end", count=4)
    first = wait_alert(af, "tier3_write")[0]
    assert first["count"] == 1 and "/w0 " in first["detail"]
    # the 3 repeats are folded (1 min period): counted once the stop wrote
    # every alert, not after a wait
    gw.stop()  # the open period's summary is written at once, not lost
    got = alerts(af, "tier3_write")
    assert len(got) == 2, got
    assert got[1]["count"] == 3 and got[1]["detail"].startswith("3 more within 1m, folded")
    assert "/w3 " in got[1]["detail"]
    assert len(alerts(af, "first_contact")) == 1  # no repeats: nothing to summarise


def test_a_first_contact_summary_has_the_highest_severity_it_folds(gateway, net, tmp_path):
    # Past 30 first contacts a minute an agent's are folded; the summary
    # stands for all it counts. Denied ones are medium, and one let through
    # last (low) made the summary of a storm of denied ones low, which an
    # operator routing medium and up never saw.
    gw, af = start(gateway, net, [api_rule(net)], {"first_contact": True}, tmp_path,
                   state=False)
    for i in range(34):
        assert request(gw, "GET", "http://h%d.made-up.test/" % i).status == 403
    assert request(gw, "GET", net.url("/last")).status == 200
    wait_alert(af, "first_contact", count=31)
    gw.stop()  # the open period's summary is written at once
    got = alerts(af, "first_contact")
    assert len(got) == 32, got
    summary = got[-1]
    assert summary["count"] == 4 and "api.example.test" in summary["detail"], summary
    assert summary["severity"] == "medium", summary


def test_alerts_default_to_the_decision_log(gateway, net):
    gw = gateway(net.policy([api_rule(net, tier=3, owner="o", expires="9999-01-01")],
                            alerts={"first_contact": True}))
    request(gw, "POST", net.url("/x"), body=b"1")
    kinds = poll(lambda: (lambda k: k if {"tier3_write", "first_contact"} <= set(k) else None)(
        [e["kind"] for e in gw.log_lines() if e["event"] == "alert"]), timeout=10)
    assert "tier3_write" in kinds


def test_corrupt_store_is_reported_and_the_gate_goes_on(gateway, net, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "sluice.db").write_bytes(b"garbage, not SQLite " * 500)
    gw, af = start(gateway, net, [api_rule(net)], {"first_contact": True}, tmp_path)
    assert request(gw, "GET", net.url("/")).status == 200
    wait_alert(af, "first_contact")
    err = gw.stderr()
    assert "state store is corrupt" in err and "moved to" in err
    assert any(n.startswith("sluice.db.corrupt-") for n in os.listdir(str(state)))


_FOREIGN_TABLES = {
    # first_contact without first_ms: every commit failed (its INSERT in
    # each batch), so no write of the run (queued webhook alerts, counters)
    # was ever stored, each kept for retry until dropped
    "no first_ms": ("CREATE TABLE first_contact(agent TEXT, host TEXT, PRIMARY KEY(agent, host))",
                    "table first_contact has no column first_ms"),
    # a column sluice does not fill, that may not be NULL: the same, at the
    # first alert counted
    "NOT NULL extra": ("CREATE TABLE counter(name TEXT PRIMARY KEY, value INTEGER NOT NULL,"
                       " who TEXT NOT NULL)",
                       "table counter has a column who that sluice does not fill"),
    # no primary key: INSERT OR REPLACE added a row per write, a counter's
    # row per alert, for ever
    "no key": ("CREATE TABLE counter(name TEXT, value INTEGER)",
               "table counter does not have sluice's key"),
    # the same table under a name of other case: SQLite's names are
    # case-blind (sluice's writes went to it), where the check looked the
    # name up exactly and passed it over
    "other case": ("CREATE TABLE First_Contact(agent TEXT, host TEXT, PRIMARY KEY(agent, host))",
                   "table first_contact has no column first_ms"),
}


def test_a_store_whose_tables_are_not_sluices_is_not_used(gateway, net, tmp_path):
    # A store that says schema 1 but whose tables sluice did not make (a
    # store edited by hand, a tool's) is reported at start and left as it
    # is, and the gateway runs from memory as for any store it cannot use
    for n, (ddl, said) in enumerate(sorted(_FOREIGN_TABLES.values())):
        state = tmp_path / ("state%d" % n)
        state.mkdir(mode=0o750)
        db = sqlite3.connect(str(state / "sluice.db"))
        db.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)")
        db.execute("INSERT INTO meta VALUES('schema', '1')")
        db.execute(ddl)
        db.commit()
        db.close()
        af = str(tmp_path / ("alerts%d.jsonl" % n))
        gw = gateway(net.policy([api_rule(net)], alerts={"first_contact": True}),
                     args=["--alerts", af, "--state", str(state)])
        assert request(gw, "GET", net.url("/")).status == 200
        wait_alert(af, "first_contact")
        gw.stop()
        err = gw.stderr()
        assert "cannot open the state store: " + said in err, err
        assert "running without a state store" in err, err
        assert "cannot write" not in err and "cannot read" not in err, err
        db = sqlite3.connect(str(state / "sluice.db"))
        tables = sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master"
                                                 " WHERE type = 'table'"))
        db.close()
        assert len(tables) == 2, tables  # left as it was: no table made


def test_a_store_with_a_trigger_is_not_used(gateway, net, tmp_path):
    # sluice makes no trigger: one in the store runs code of the store's
    # own at each commit, on the event loop. This one silently dropped every
    # first contact written (RAISE(IGNORE)), so that a restart raised them
    # all again; one that computes for long stalls the gate at each commit
    state = tmp_path / "state"
    state.mkdir(mode=0o750)
    db = sqlite3.connect(str(state / "sluice.db"))
    db.execute("CREATE TABLE first_contact(agent TEXT NOT NULL, host TEXT NOT NULL,"
               " first_ms INTEGER NOT NULL, PRIMARY KEY(agent, host))")
    db.execute("CREATE TRIGGER quiet BEFORE INSERT ON first_contact"
               " BEGIN SELECT RAISE(IGNORE); END")
    db.commit()
    db.close()
    gw, af = start(gateway, net, [api_rule(net)], {"first_contact": True}, tmp_path)
    assert request(gw, "GET", net.url("/")).status == 200
    wait_alert(af, "first_contact")
    gw.stop()
    err = gw.stderr()
    assert ("cannot open the state store: it holds a trigger (quiet), which sluice never makes"
            in err), err
    assert "running without a state store" in err, err


def test_text_from_the_store_reaches_standard_error_escaped(gateway, net, tmp_path):
    # What a store holds is written on standard error only with its control
    # characters escaped: a schema version, a constraint's name in SQLite's
    # error. Written raw, they forged lines of the gateway's own ("sluice:
    # serving ...") or rubbed out the ones before them (a terminal escape)
    forged = "\x1b[2J\nsluice: forged line"
    state = tmp_path / "state"
    state.mkdir(mode=0o750)
    db = sqlite3.connect(str(state / "sluice.db"))
    db.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)")
    db.execute("INSERT INTO meta VALUES('schema', ?)", ("2" + forged,))
    db.commit()
    db.close()
    gw = gateway(net.policy([api_rule(net)]), args=["--state", str(state)])
    err = gw.stderr()
    assert "it has schema 2\\033[2J\\012sluice: forged line, and" in err, err
    state2 = tmp_path / "state2"
    state2.mkdir(mode=0o750)
    db = sqlite3.connect(str(state2 / "sluice.db"))
    db.execute("CREATE TABLE counter(name TEXT PRIMARY KEY, value INTEGER NOT NULL,"
               " CONSTRAINT \"%s\" CHECK(value < 0))" % forged)
    db.commit()
    db.close()
    af = str(tmp_path / "alerts.jsonl")
    gw2 = gateway(net.policy([api_rule(net)], alerts={"first_contact": True}),
                  args=["--alerts", af, "--state", str(state2)])
    assert request(gw2, "GET", net.url("/")).status == 200
    wait_alert(af, "first_contact")
    poll(lambda: "cannot write" in gw2.stderr() or None, timeout=5, what="the failed commit")
    gw2.stop()
    err = gw2.stderr()
    assert "CHECK constraint failed: \\033[2J\\012sluice: forged line (" in err, err
    for e in (gw.stderr(), err):
        assert "\x1b" not in e and "\nsluice: forged" not in e, e


def test_a_state_dir_named_with_control_characters_is_told_escaped(gateway, net, tmp_path):
    # --state as given, and the paths resolved from it, reach standard error
    # with their control characters and backslashes as \ooo, as the policy
    # and log paths do: a directory named with a line end wrote a line of
    # its own ("sluice: warning: DIR\nline: cannot create ..."), an escape
    # could rub out the lines before it
    name = "st\x1b[2J\nsluice: forged\\x"
    missing = tmp_path / "missing" / name  # cannot be made: its parent is missing
    blocker = tmp_path / name  # a file, not a directory
    blocker.write_text("x")
    for state, why in ((missing, ": cannot create the state directory: No such file or directory"),
                       (blocker, ": not a directory")):
        gw = gateway(net.policy([api_rule(net)]), args=["--state", str(state)])
        assert request(gw, "GET", net.url("/")).status == 200
        gw.stop()
        err = gw.stderr()
        shown = str(state).replace("\\", "\\134").replace("\x1b", "\\033") \
            .replace("\n", "\\012")
        assert "sluice: warning: " + shown + why + "; running without a state store" in err, err
        assert "\x1b" not in err and "\nsluice: forged" not in err, err


def test_unusable_state_dir_keeps_gating(gateway, net, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    gw = gateway(net.policy([api_rule(net)], alerts={"first_contact": True}),
                 args=["--state", str(blocker)])
    assert request(gw, "GET", net.url("/")).status == 200
    assert "running without a state store" in gw.stderr()


def test_a_state_dir_reached_through_a_link_is_used(gateway, net, tmp_path):
    # --state /var/lib/sluice where /var/lib is a link to /data: SQLite's
    # no-follow open refused the link above the directory, which the
    # operator put there, and the gateway ran from memory, its first
    # contacts forgotten at each restart. The directory is resolved once and
    # the store kept there; a sluice.db that is itself a link is still not
    # followed, and the refusal names the directory as given and resolved.
    data = tmp_path / "data"
    data.mkdir(mode=0o750)
    os.symlink(str(data), str(tmp_path / "lib"))
    given = str(tmp_path / "lib" / "sluice")  # missing: made through the link
    real = os.path.realpath(str(data / "sluice"))
    af = str(tmp_path / "alerts.jsonl")

    def serve():
        return gateway(net.policy([api_rule(net)], alerts={"first_contact": True}),
                       args=["--alerts", af, "--state", given])

    gw = serve()
    assert request(gw, "GET", net.url("/a")).status == 200
    wait_alert(af, "first_contact")
    gw.stop()
    assert "without a state store" not in gw.stderr(), gw.stderr()
    assert os.path.isfile(os.path.join(real, "sluice.db"))
    assert not os.path.islink(os.path.join(real, "sluice.db"))

    # the restart remembers the first contact
    gw = serve()
    assert request(gw, "GET", net.url("/b")).status == 200
    gw.stop()  # writes what it had
    assert "without a state store" not in gw.stderr(), gw.stderr()
    assert len(gw.events("agent_egress")) == 1
    assert len(alerts(af, "first_contact")) == 1

    # a sluice.db that is a link, in the linked directory, is not followed
    other = str(tmp_path / "app.db")
    for f in ("sluice.db", "sluice.db-wal", "sluice.db-shm"):
        if os.path.exists(os.path.join(real, f)):
            os.rename(os.path.join(real, f), other + f[len("sluice.db"):])
    planted = open(other, "rb").read()
    os.symlink(other, os.path.join(real, "sluice.db"))
    gw = serve()
    poll(lambda: "running without a state store" in gw.stderr() or None, timeout=5,
         what="the refusal")
    assert "%s/sluice.db: cannot open the state store of %s (resolved: %s): it is a symbolic " \
        "link, not followed" % (real, given, real) in gw.stderr(), gw.stderr()
    assert request(gw, "GET", net.url("/c")).status == 200
    assert len(wait_alert(af, "first_contact", count=2)) == 2  # from memory: alerts again
    gw.stop()
    assert open(other, "rb").read() == planted


def test_a_state_dir_another_user_owns_is_not_used(gateway, net, tmp_path):
    # A root gateway given --state DIR that another user made beforehand
    # used that user's store: its first contacts kept alerts quiet. The
    # store is refused, named with its owner; the gate keeps gating from
    # memory, and the first contact alerts. The user --user names may own it.
    if os.geteuid() != 0:
        pytest.skip("needs root to give the directory to another user")
    gw, af = start(gateway, net, [api_rule(net)], {"first_contact": True}, tmp_path)
    assert request(gw, "GET", net.url("/a")).status == 200
    wait_alert(af, "first_contact")
    gw.stop()
    state = tmp_path / "state"
    for p in [state] + list(state.iterdir()):
        os.chown(str(p), 65534, 65534)
    planted = (state / "sluice.db").read_bytes()
    os.unlink(af)

    gw, af = start(gateway, net, [api_rule(net)], {"first_contact": True}, tmp_path)
    poll(lambda: "running without a state store" in gw.stderr() or None, timeout=5,
         what="the refusal")
    assert "%s: the state directory is owned by user nobody (uid 65534), not by root" % state \
        in gw.stderr()
    assert request(gw, "GET", net.url("/b")).status == 200
    assert wait_alert(af, "first_contact")[0]["host"] == "api.example.test"
    gw.stop()
    assert (state / "sluice.db").read_bytes() == planted
    assert not (state / "sluice.lock").exists() or (state / "sluice.lock").stat().st_uid == 65534

    # served as nobody, the store of nobody's is used: the contact is remembered
    os.chmod(str(tmp_path), 0o755)
    os.unlink(af)
    gw, af = start(gateway, net, [api_rule(net)], {"first_contact": True}, tmp_path,
                   extra=["--user", "nobody"])
    poll(lambda: "as nobody" in gw.stderr() or None, timeout=10, what="serving")
    assert "without a state store" not in gw.stderr()
    assert request(gw, "GET", net.url("/c")).status == 200
    gw.stop()  # writes what it had
    assert len(gw.events("agent_egress")) == 1
    assert alerts(af, "first_contact") == []
