"""auth_failures: a client source presenting credentials that identify no
agent (a wrong token, unreadable credentials, Basic with an empty
password), refused 407 auth_required, more than alerts.auth_failures.max
times within its period raises one high alert, agent null, that names the
source and never the credentials. Requests without credentials do not
count, nor do those of an agent that presents its right token. Nothing is
throttled. Real gateway, loopback only."""

import base64
import socket
import urllib.request

from conftest import policy_yaml
from gate_client import api_rule, poll, request
from watch_helpers import alerts, assert_prompt, free_tcp_port, wait_alert, wait_alert_timed

TOKEN = "s3cret-token-for-auth-failures"
ENV = {"SLUICE_TEST_TOKEN": TOKEN}
AGENTS = [{"id": "ci-bot", "sources": ["127.0.0.0/8", "unix"], "token": "env:SLUICE_TEST_TOKEN"}]


def basic(password, user="agent"):
    return "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()


def wrong(i):
    """Wrong credentials of every kind that counts, in turn: a Bearer token
    and a Basic password that match no agent, Basic with an empty password,
    and a value that cannot be read. Each holds a marker ("zz9", "AAAA"...)
    the alert must never show."""
    kind = i % 4
    if kind == 0:
        return "Bearer zz9-AAAA-%d" % i
    if kind == 1:
        return basic("zz9-BBBB-%d" % i)
    if kind == 2:
        return basic("", user="zz9-CCCC-%d" % i)
    return "Basic !!zz9-DDDD-%d!!" % i


def start(gateway, net, tmp_path, max_, per="1m", unix=False, args=()):
    af = str(tmp_path / "alerts.jsonl")
    pol = net.policy([api_rule(net)], agents=AGENTS,
                     alerts={"auth_failures": {"max": max_, "per": per}})
    gw = gateway(pol, env=ENV, args=["--alerts", af] + list(args), tcp=not unix, unix=unix)
    return gw, af


def guess(gw, net, i, path="/guess"):
    r = request(gw, "GET", net.url(path), headers={"Proxy-Authorization": wrong(i)})
    assert r.status == 407 and r.header("Sluice-Reason") == "auth_required", r
    return r


def settle(gw, n):
    """Waits for <n> decisions logged. An alert they raised may not be
    written yet, so "no alert so far" is checked for good by the alert a
    later request raises: alerts are written in order, so it must be the
    first of its kind (first_for())."""
    gw.wait_events("agent_egress", count=n)


def first_for(gw, af, path):
    """The first auth_failures alert, which must be that of the request to
    <path>: none came before it."""
    a = wait_alert(af, "auth_failures")[0]
    ev = gw.events("agent_egress", path=path)
    assert len(ev) == 1 and a["id"] == ev[0]["id"], (a, ev)
    return a


def test_wrong_tokens_past_max_raise_one_alert(gateway, net, tmp_path):
    gw, af = start(gateway, net, tmp_path, 4)
    # requests without credentials are a client not set up, not a guess
    for _ in range(6):
        r = request(gw, "GET", net.url("/none"))
        assert r.status == 407 and r.header("Sluice-Reason") == "auth_required", r
    for i in range(4):
        guess(gw, net, i)
    settle(gw, 10)
    assert alerts(af, "auth_failures") == []  # 4 is not over 4
    guess(gw, net, 4, path="/fifth")
    a, seen = wait_alert_timed(af, "auth_failures")
    ev = gw.events("agent_egress", path="/fifth")[0]
    assert a["severity"] == "high" and a["agent"] is None and a["count"] == 1, a
    assert a["host"] == "api.example.test" and a["id"] == ev["id"], a
    assert "5 requests from 127.0.0.1 within 1m (max 4)" in a["detail"], a
    assert "the last: GET api.example.test:%d" % net.api.port in a["detail"], a
    assert_prompt(a, gw)
    # further guesses fold into the period: still one line, and nothing is
    # throttled (each is refused as before, and the right token still works)
    for i in range(5, 9):
        guess(gw, net, i)
    r = request(gw, "GET", net.url("/right"), headers={"Proxy-Authorization": "Bearer " + TOKEN})
    assert r.status == 200, r
    settle(gw, 15)
    assert len(alerts(af, "auth_failures")) == 1
    # no alert text holds the credentials, right or wrong, or a part of them
    with open(af, "rb") as f:
        text = f.read().decode()
    for needle in [TOKEN, "zz9", "AAAA", "BBBB", "CCCC", "DDDD"] + [
            wrong(i).split(" ", 1)[1] for i in range(9)]:
        assert needle not in text, needle
    gw.stop()
    # the summary at the stop counts the folded ones
    both = alerts(af, "auth_failures")
    assert len(both) == 2 and both[1]["count"] == 4, both


def test_a_value_that_holds_no_token_does_not_count(gateway, net, tmp_path):
    """A Proxy-Authorization that is blank, or a scheme alone (what
    `-H "Proxy-Authorization: Bearer $TOKEN"` sends when TOKEN is empty), holds
    no secret: a client not set up, as one that sends none, not a guess. It is
    refused 407 as before, saying so, but counts toward no auth_failures."""
    gw, af = start(gateway, net, tmp_path, 2)
    for value in ["", "   ", "Bearer", "Bearer   ", "basic"]:
        r = request(gw, "GET", net.url("/blank"), headers={"Proxy-Authorization": value})
        assert r.status == 407 and r.header("Sluice-Reason") == "auth_required", r
        assert b"holds no token" in r.body, (value, r.body)
    for i in range(2):
        guess(gw, net, i)
    settle(gw, 7)
    assert alerts(af, "auth_failures") == []  # 2 guesses are not over 2
    guess(gw, net, 2, path="/third")
    a = first_for(gw, af, "/third")
    assert "3 requests from 127.0.0.1 within 1m (max 2)" in a["detail"], a


def test_the_right_token_neither_counts_nor_resets(gateway, net, tmp_path):
    admin = free_tcp_port()
    gw, af = start(gateway, net, tmp_path, 3, args=["--admin", "127.0.0.1:%d" % admin])
    for i in range(3):
        guess(gw, net, i)
    for _ in range(5):
        r = request(gw, "GET", net.url("/ok"), headers={"Proxy-Authorization": basic(TOKEN)})
        assert r.status == 200, r
    settle(gw, 8)
    assert alerts(af, "auth_failures") == []
    guess(gw, net, 3, path="/fourth")  # the 4th wrong one, the right ones between
    a = first_for(gw, af, "/fourth")
    assert "4 requests from 127.0.0.1 within 1m (max 3)" in a["detail"], a
    # counted by kind in the metrics
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin, timeout=10).read()
    assert b'sluice_alerts_total{kind="auth_failures"} 1\n' in text, text


def test_unix_socket_clients_count_as_one_source(gateway, net, tmp_path):
    gw, af = start(gateway, net, tmp_path, 2, unix=True)
    for i in range(3):
        guess(gw, net, i)
    a = wait_alert(af, "auth_failures")[0]
    assert "3 requests from the unix socket's clients within 1m (max 2)" in a["detail"], a


def test_many_sources_fold_past_30_a_minute(gateway, net, tmp_path):
    """A guesser that picks its sources (every address of 127.0.0.0/8 here)
    and trips max from each of 40 gets 30 lines, a 31st that says the rest
    fold, and one summary at the stop: not a line per source."""
    gw, af = start(gateway, net, tmp_path, 1)
    for n in range(40):
        for i in range(2):
            s = socket.create_connection((gw.host, gw.port), timeout=10,
                                         source_address=("127.0.2.%d" % (n + 1), 0))
            guess_on(gw, net, s, 2 * n + i)
    gw.wait_events("agent_egress", count=80)
    got = wait_alert(af, "auth_failures", count=31)
    assert all("folded" not in a["detail"] for a in got[:30]), got
    assert got[0]["detail"].startswith("2 requests from 127.0.2.1 within 1m (max 1)"), got
    assert got[30]["detail"].endswith("; over 30 sources' auth_failures alerts within 1m, so "
                                      "they are folded per minute"), got[30]
    gw.stop()
    lines = alerts(af, "auth_failures")
    assert len(lines) == 32 and lines[31]["count"] == 9, lines
    assert "9 more within 1m, folded" in lines[31]["detail"], lines[31]


def guess_on(gw, net, sock, i):
    try:
        r = request(gw, "GET", net.url("/guess"), headers={"Proxy-Authorization": wrong(i)},
                    sock=sock)
    finally:
        sock.close()
    assert r.status == 407 and r.header("Sluice-Reason") == "auth_required", r


def test_reload_changes_the_threshold(gateway, net, tmp_path):
    gw, af = start(gateway, net, tmp_path, 10)
    for i in range(3):
        guess(gw, net, i)
    settle(gw, 3)
    pol = net.policy([api_rule(net)], agents=AGENTS,
                     alerts={"auth_failures": {"max": 3, "per": "1m"}})
    gw.write_policy(policy_yaml(pol))
    gw.reload()
    poll(lambda: "sluice: reloaded" in gw.stderr(), timeout=10, what="the reload")
    assert alerts(af, "auth_failures") == []
    guess(gw, net, 3, path="/fourth")  # the 4th, counted with the 3 before the reload
    a = first_for(gw, af, "/fourth")
    assert "4 requests from 127.0.0.1 within 1m (max 3)" in a["detail"], a


def test_check_takes_the_key_and_refuses_bad_values(gateway, net, tmp_path, run_sluice):
    base = "version: 1\nrules:\n  - host: api.example.test\n    tier: 0\nalerts:\n"
    good = tmp_path / "good.yaml"
    good.write_text(base + "  auth_failures: {max: 10, per: 1m}\n")
    r = run_sluice("check", str(good))
    assert r.returncode == 0, r.stdout + r.stderr
    for value, want in [("{max: 0}", "alerts.auth_failures.max: must be at least 1"),
                        ("{max: 5, per: 0s}", "alerts.auth_failures.per: must be greater than 0"),
                        ("{per: 1m}", "alerts.auth_failures.max: is required"),
                        ("{max: 5, over: 1m}", "alerts.auth_failures: unknown key 'over'"),
                        ("10", "alerts.auth_failures: expected a mapping")]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(base + "  auth_failures: %s\n" % value)
        r = run_sluice("check", str(bad))
        assert r.returncode == 1, (value, r.stdout, r.stderr)
        assert "bad.yaml:6: " + want in r.stdout + r.stderr, (value, r.stdout, r.stderr)
