"""SPEC.md, statement by statement, against the built binary: the types of
every key of the decision log and the alerts (null where the contract shows
null, numbers as numbers), which rule decides where several match, which
agent a client is, and the policy defaults of the alert detectors. Each
test names the sentence it proves."""

import datetime
import json
import os
import re
import socket
import stat

from gate_client import (REASONS, api_rule, connect, exchange, recv_until_close, request,
                         utc_today)
from test_box_run import FETCH, PY, Box
from watch_helpers import ALERT_KEYS, alerts, free_tcp_port, read_lines, wait_alert

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")
KINDS = {"first_contact", "tier3_write", "write_burst", "upload_bytes", "denied_burst",
         "off_hours_write", "baseline", "grant_expired", "grant_expiring", "quarantine",
         "auth_failures"}


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _str_or_null(v):
    return v is None or isinstance(v, str)


def assert_egress_types(ev):
    """An agent_egress line as the contract's example types it: `port` a
    number, `tier` a number 0..3 or null, `path`, `rule`, `owner`, `reason`
    and `ip` a string or null, `reason` null exactly when allowed."""
    assert TS.match(ev["ts"]), ev
    assert ev["event"] == "agent_egress" and isinstance(ev["id"], str) and ev["id"], ev
    for k in ("agent", "method", "scheme", "host", "path", "rule", "owner", "ip"):
        assert _str_or_null(ev[k]), "%s: %r" % (k, ev)
    assert ev["port"] is None or (_is_int(ev["port"]) and 0 < ev["port"] < 65536), ev
    assert ev["tier"] is None or (_is_int(ev["tier"]) and 0 <= ev["tier"] <= 3), ev
    assert ev["decision"] in ("allow", "deny", "report"), ev
    if ev["decision"] == "allow":
        assert ev["reason"] is None, ev
    else:
        assert ev["reason"] in REASONS, ev
    if ev["tier"] is None:
        assert ev["rule"] is None and ev["owner"] is None, ev


def assert_end_types(end):
    """An agent_egress_end line: `tier` a number or null, `status` a number
    or null (no answer), byte counts and `ms` whole numbers."""
    assert TS.match(end["ts"]), end
    assert end["event"] == "agent_egress_end" and isinstance(end["id"], str), end
    assert _str_or_null(end["agent"]) and _str_or_null(end["host"]), end
    assert end["tier"] is None or (_is_int(end["tier"]) and 0 <= end["tier"] <= 3), end
    assert end["status"] is None or (_is_int(end["status"]) and 100 <= end["status"] <= 999), end
    for k in ("bytes_up", "bytes_down", "ms"):
        assert _is_int(end[k]) and end[k] >= 0, "%s: %r" % (k, end)


def assert_alert_types(a):
    assert list(a.keys()) == ALERT_KEYS, list(a.keys())
    assert TS.match(a["ts"]) and a["event"] == "alert" and a["kind"] in KINDS, a
    assert isinstance(a["severity"], str) and isinstance(a["detail"], str), a
    for k in ("agent", "host", "id"):
        assert _str_or_null(a[k]), "%s: %r" % (k, a)
    assert a["tier"] is None or (_is_int(a["tier"]) and 0 <= a["tier"] <= 3), a
    assert _is_int(a["count"]) and a["count"] >= 1, a


def _future(days):
    return (utc_today() + datetime.timedelta(days=days)).isoformat()


def test_every_line_has_the_types_of_the_contracts_examples(gateway, net, tmp_path):
    """Decision log: keys in order, `tier` null for a request no rule
    covers, `path` null inside a tunnel, numbers as numbers; the alert
    line likewise; one agent_egress_end for each agent_egress."""
    alerts_path = str(tmp_path / "alerts.jsonl")
    rules = [api_rule(net, methods=["GET", "HEAD"], tier=1),
             api_rule(net, methods=["POST"], tier=3, owner="chaysen", expires=_future(300)),
             {"host": "tls.example.test", "ports": [net.tls.port], "tier": 0}]
    gw = gateway(net.policy(rules, alerts={"first_contact": True}), args=["--alerts", alerts_path])
    assert request(gw, "GET", net.url("/read")).status == 200
    assert request(gw, "POST", net.url("/write"), body=b"x").status == 200
    assert request(gw, "GET", net.url("/np", host="other.example.test",
                                      port=net.other.port)).status == 403
    assert exchange(gw, b"BREW /pot HTTP/1.1\r\n\r\n").status == 400
    t = connect(gw, "api.example.test:%d" % net.api.port)
    assert t.status == 403 and t.header("Sluice-Reason") == "needs_inspection"
    t.close()
    t = connect(gw, "tls.example.test:%d" % net.tls.port)
    assert t.status == 200
    t.close()

    gw.wait_events("agent_egress_end", count=6)
    lines = gw.log_lines()
    egress = [e for e in lines if e["event"] == "agent_egress"]
    ends = {e["id"]: e for e in lines if e["event"] == "agent_egress_end"}
    assert len(egress) == 6 and sorted(ends) == sorted(e["id"] for e in egress), lines
    for ev in egress:
        assert_egress_types(ev)
        assert_end_types(ends[ev["id"]])
    by_path = {e["path"]: e for e in egress if e["method"] != "CONNECT"}
    assert by_path["/read"]["tier"] == 1 and by_path["/read"]["port"] == net.api.port
    assert by_path["/write"]["tier"] == 3 and by_path["/write"]["owner"] == "chaysen"
    assert by_path["/np"]["tier"] is None and by_path["/np"]["reason"] == "not_in_policy"
    tunnels = [e for e in egress if e["method"] == "CONNECT"]
    assert len(tunnels) == 2 and all(e["path"] is None for e in tunnels), tunnels
    assert ends[by_path["/read"]["id"]]["status"] == 200

    wait_alert(alerts_path, "tier3_write")
    wait_alert(alerts_path, "first_contact")
    for a in read_lines(alerts_path):
        assert_alert_types(a)



def test_alerts_of_every_kind_a_request_can_raise_have_the_contracts_types(gateway, net,
                                                                        tmp_path):
    """Alerts: `grant_expired`, `grant_expiring`, `denied_burst` and
    `quarantine` lines (no tier or host for the agent-wide ones) keep the
    example's keys, in order, with a number or null for `tier`, a string
    or null for `agent`, `host` and `id`."""
    alerts_path = str(tmp_path / "alerts.jsonl")
    rules = [api_rule(net, methods=["POST"], tier=3, owner="alice", expires=_future(-1)),
             api_rule(net, methods=["PUT"], tier=3, owner="bob", expires=_future(3))]
    pol = net.policy(rules, limits={"quarantine": "5m"},
                     alerts={"denied_burst": {"max": 2, "per": "1m"}})
    gw = gateway(pol, args=["--alerts", alerts_path])
    assert request(gw, "POST", net.url("/late"), body=b"x").status == 403
    for _ in range(3):
        request(gw, "GET", net.url("/q", host="other.example.test", port=net.other.port))
    for kind in ("grant_expired", "grant_expiring", "denied_burst", "quarantine"):
        wait_alert(alerts_path, kind)
    got = read_lines(alerts_path)
    for a in got:
        assert_alert_types(a)
    expired = alerts(alerts_path, "grant_expired")[0]
    assert expired["tier"] == 3 and expired["host"] == "api.example.test", expired

def _rule_of(gw, method, path, net):
    r = request(gw, method, net.url(path), body=b"x" if method == "POST" else b"")
    assert r.status == 200, r
    ev, _ = gw.decided(path=path)
    return ev["rule"], ev["tier"]


def test_exact_host_wins_over_wildcard_whatever_the_tier(gateway, net):
    """Matching: where several rules match, the most specific wins: exact
    host over wildcard."""
    rules = [{"host": "*.example.test", "ports": [net.api.port], "tier": 0},
             api_rule(net, tier=2)]
    gw = gateway(net.policy(rules))
    assert _rule_of(gw, "GET", "/exact", net) == ("rules[1]", 2)


def test_rule_naming_the_method_wins_over_a_lower_tier(gateway, net):
    """Matching: then the rule that names the method."""
    rules = [api_rule(net, tier=0), api_rule(net, methods=["POST"], tier=2)]
    gw = gateway(net.policy(rules))
    assert _rule_of(gw, "POST", "/named", net) == ("rules[1]", 2)
    assert _rule_of(gw, "GET", "/unnamed", net) == ("rules[0]", 0)


def test_lower_tier_wins_between_equally_specific_rules(gateway, net):
    """Matching: then the lower tier (file order does not decide): two
    rules that both name GET (the same methods would be a duplicate)."""
    rules = [api_rule(net, methods=["GET"], tier=2), api_rule(net, methods=["GET", "HEAD"], tier=1)]
    gw = gateway(net.policy(rules))
    assert _rule_of(gw, "GET", "/lower", net) == ("rules[1]", 1)


def test_client_without_a_secret_is_the_first_tokenless_agent_its_sources_hold(gateway, net):
    """Agents: a client that presents nothing is the first agent whose
    sources contain it and that has no token (file order), an agent that
    wants a token or whose sources do not hold it being passed over."""
    agents = [{"id": "far", "sources": ["10.9.9.0/24"]},
              {"id": "tok", "sources": ["127.0.0.0/8"], "token": "env:SLUICE_TEST_TOKEN"},
              {"id": "first", "sources": ["127.0.0.0/8"]},
              {"id": "second", "sources": ["127.0.0.1/32"]}]
    gw = gateway(net.policy([api_rule(net)], agents=agents),
                 env={"SLUICE_TEST_TOKEN": "s3cret-token-for-tests"})
    assert request(gw, "GET", net.url("/anon")).status == 200
    assert gw.decided(path="/anon")[0]["agent"] == "first"


def _expiring_alerts(gateway, net, tmp_path, alerts_section, days):
    alerts_path = str(tmp_path / ("alerts-%d.jsonl" % days))
    rules = [api_rule(net, methods=["POST"], tier=3, owner="chaysen", expires=_future(days))]
    gw = gateway(net.policy(rules, alerts=alerts_section), args=["--alerts", alerts_path])
    # a decided request, then its line: the start's expiry check has run
    assert request(gw, "GET", net.url("/probe")).status == 403
    gw.decided(path="/probe")
    return gw, alerts_path


def test_expiry_warn_days_defaults_to_14_once_alerts_exists(gateway, net, tmp_path):
    """Defaults: `expiry_warn_days` defaults to 14 once `alerts` exists: a
    grant ending in 13 days is warned of, one ending in 15 is not."""
    _, near = _expiring_alerts(gateway, net, tmp_path, {}, 13)
    got = wait_alert(near, "grant_expiring")
    assert_alert_types(got[0])
    _, far = _expiring_alerts(gateway, net, tmp_path, {}, 15)
    assert alerts(far, "grant_expiring") == []


TOKEN = "s3cret-token-for-tests"


def test_secret_of_an_agent_whose_sources_do_not_hold_the_client_is_refused(gateway, net):
    """Agents: a client that presents a secret is the first agent whose
    sources contain it and whose token equals that secret; the secret of an
    agent whose sources do not hold the client matches no such agent: 407
    auth_required, never passed down to a token-less agent."""
    agents = [{"id": "far", "sources": ["10.9.9.0/24"], "token": "env:SLUICE_TEST_TOKEN"},
              {"id": "near", "sources": ["127.0.0.0/8"]}]
    gw = gateway(net.policy([api_rule(net)], agents=agents), env={"SLUICE_TEST_TOKEN": TOKEN})
    r = request(gw, "GET", net.url("/far"), headers={"Proxy-Authorization": "Bearer " + TOKEN})
    assert r.status == 407 and r.header("Sluice-Reason") == "auth_required", r
    assert net.api.requests == []
    ev, _ = gw.decided(reason="auth_required")
    assert ev["decision"] == "deny" and ev["agent"] is None, ev


def test_two_agents_with_one_secret_the_first_whose_sources_hold_the_client(gateway, net):
    """Agents: first in file order among those whose sources contain the
    client and whose token equals the secret."""
    agents = [{"id": "far", "sources": ["10.9.9.0/24"], "token": "env:SLUICE_TEST_TOKEN"},
              {"id": "near", "sources": ["127.0.0.0/8"], "token": "env:SLUICE_TEST_TOKEN"},
              {"id": "later", "sources": ["127.0.0.1/32"], "token": "env:SLUICE_TEST_TOKEN"}]
    gw = gateway(net.policy([api_rule(net)], agents=agents), env={"SLUICE_TEST_TOKEN": TOKEN})
    r = request(gw, "GET", net.url("/near"), headers={"Proxy-Authorization": "Bearer " + TOKEN})
    assert r.status == 200, r
    assert gw.decided(path="/near")[0]["agent"] == "near"


def test_proxy_authorization_never_goes_upstream_without_an_agents_section(gateway, net):
    """Agents: `Proxy-Authorization` never goes upstream, also where the
    policy has no agents (every client is agent "default")."""
    gw = gateway(net.policy([api_rule(net)]))
    r = request(gw, "GET", net.url("/pa"), headers={"Proxy-Authorization": "Bearer abc"})
    ev, _ = gw.decided(path="/pa")
    assert ev["agent"] in ("default", None), ev
    assert r.status == 200, r
    assert len(net.api.requests) == 1 and not net.api.requests[0].has_header("Proxy-Authorization"), \
        net.api.requests[0].headers


def test_admin_takes_an_addr_whose_host_is_a_name(gateway, net):
    """Commands: ADDR is `HOST:PORT`, `[V6]:PORT` or `unix:/path`, and
    `--admin ADDR` is one: `--admin localhost:PORT` serves /healthz on
    what localhost names (before: refused, `expected PORT, IP:PORT or
    [V6]:PORT (a literal address)`, exit 2)."""
    port = free_tcp_port()
    gw = gateway(net.policy([api_rule(net)]), args=["--admin", "localhost:%d" % port])
    s = socket.create_connection(("localhost", port), timeout=10)
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        out = recv_until_close(s)
    finally:
        s.close()
    assert out.startswith(b"HTTP/1.1 200 OK\r\n"), out[:200]
    assert "reachable from beyond this host" not in gw.stderr()
    # the gateway refuses requests to that admin server (self_request),
    # at the address the name gave (localhost's first, as --listen takes it)
    probe = socket.socket()
    try:
        bound = "127.0.0.1" if probe.connect_ex(("127.0.0.1", port)) == 0 else "[::1]"
    finally:
        probe.close()
    r = request(gw, "GET", "http://%s:%d/metrics" % (bound, port))
    assert r.status == 403 and r.header("Sluice-Reason") == "self_request", r


def test_run_is_its_agent_whatever_the_sources_and_borrows_its_mode(sluice_bin, net, tmp_path):
    """`sluice run`: every request from the box is agent `--agent ID`
    (default `run`) whatever the policy's `sources` say, and an `agents`
    entry with that id lends it its `mode`: ci-bot, whose sources do not
    hold the box, is in report mode, so a host no rule covers is let
    through, logged `report`; `run` alone is refused as `run`."""
    work = tmp_path / "work"
    work.mkdir()
    box = Box(sluice_bin, str(work))
    agents = [{"id": "ci-bot", "sources": ["10.9.9.0/24"], "mode": "report"}]
    pol = box.policy(net.policy([api_rule(net)], agents=agents))
    log = str(tmp_path / "decisions.jsonl")
    url = net.url("/as-ci", host="other.example.test", port=net.other.port)
    p = box.run(["--policy", pol, "--agent", "ci-bot", "--log", log], cmd=[PY, "-c", FETCH, url])
    assert p.returncode == 0 and Box.out(p)["status"] == 200, p.stderr
    url = net.url("/as-run", host="other.example.test", port=net.other.port)
    p = box.run(["--policy", pol, "--log", log], cmd=[PY, "-c", FETCH, url])
    o = Box.out(p)
    assert o["status"] == 403 and o["reason"] == "not_in_policy", o
    with open(log) as f:
        evs = [json.loads(ln) for ln in f if '"agent_egress"' in ln]
    assert [(e["agent"], e["decision"], e["reason"]) for e in evs] == [
        ("ci-bot", "report", "not_in_policy"), ("run", "deny", "not_in_policy")], evs
    assert [q.path for q in net.other.requests] == ["/as-ci"]


def test_admin_takes_a_unix_addr(gateway, net, tmp_path):
    """Commands: ADDR is also `unix:/path/to.sock`, for `--admin` as for
    `--listen`: /healthz is answered on that socket, made mode 0660 as a
    `--listen` one is, and removed at the stop (before: refused, exit 2)."""
    path = str(tmp_path / "admin.sock")
    gw = gateway(net.policy([api_rule(net)]), args=["--admin", "unix:" + path])
    assert stat.S_ISSOCK(os.lstat(path).st_mode) and os.lstat(path).st_mode & 0o777 == 0o660
    out = _healthz_on_unix(path)
    assert out.startswith(b"HTTP/1.1 200 OK\r\n"), out[:200]
    gw.stop()
    assert not os.path.exists(path)


def test_admin_unix_socket_of_a_live_server_is_not_taken_over(run_sluice, gateway, net,
                                                                tmp_path):
    """As for `--listen unix:`: a socket a server listens on is an error,
    exit 2, never removed from under it; one left by a server gone is
    taken over (the start that follows serves on it)."""
    path = str(tmp_path / "admin.sock")
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(path)
    live.listen(1)
    try:
        pol = tmp_path / "p.yaml"
        pol.write_text("version: 1\nrules:\n  - {host: api.example.test, tier: 0}\n")
        p = run_sluice("serve", "--policy", str(pol), "--listen", "127.0.0.1:0", "--admin",
                       "unix:" + path)
        assert p.returncode == 2, p.stderr
        assert "--admin unix:%s: in use by another server" % path in p.stderr, p.stderr
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        live.close()  # the file stays: a stale socket now
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    gateway(net.policy([api_rule(net)]), args=["--admin", "unix:" + path])
    assert _healthz_on_unix(path).startswith(b"HTTP/1.1 200 OK\r\n")


def _healthz_on_unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(10)
        s.connect(path)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        return recv_until_close(s)
    finally:
        s.close()
