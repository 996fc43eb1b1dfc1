"""The tier a request let through by report mode is logged and alerted at,
against `sluice serve`: a write that rules for its host cover but none
allows goes out at the tier those rules give the host (as a CONNECT or an
extension method would), so a tier-3 host's write raises tier3_write; a
write to a host no rule covers keeps no tier. Loopback only."""

import pytest

from gate_client import open_conn, read_response, request
from watch_helpers import alerts, wait_alert

AGENTS = [{"id": "bot", "sources": ["127.0.0.1/32"], "mode": "report"}]


def _start(gateway, net, tmp_path, rules, alerts_cfg):
    af = str(tmp_path / "alerts.jsonl")
    gw = gateway(net.policy(rules, agents=AGENTS, alerts=alerts_cfg), args=["--alerts", af])
    return gw, af


def _grant(net):
    """The host's only rules: a tier-0 read and a tier-3 grant for POST."""
    return [{"host": "api.example.test", "ports": [net.api.port], "tier": 0,
             "methods": ["GET"]},
            {"host": "api.example.test", "ports": [net.api.port], "tier": 3,
             "methods": ["POST"], "owner": "chaysen", "expires": "9999-12-31"}]


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_a_write_no_rule_allows_is_reported_at_the_hosts_tier(gateway, net, tmp_path, method):
    # Before: logged "tier":null, "rule":null, and no tier3_write, where
    # the host's only write grant is tier 3.
    gw, af = _start(gateway, net, tmp_path, _grant(net), {"expiry_warn_days": 14})
    assert request(gw, method, net.url("/repos/x"), body=b"{}").status == 200
    ev = gw.decided(path="/repos/x")[0]
    assert (ev["decision"], ev["reason"]) == ("report", "method_not_allowed"), ev
    assert (ev["tier"], ev["rule"], ev["owner"]) == (3, "rules[1]", "chaysen"), ev
    a = wait_alert(af, "tier3_write")[0]
    assert (a["id"], a["tier"], a["agent"]) == (ev["id"], 3, "bot"), a
    assert a["detail"] == ("%s /repos/x on api.example.test by bot "
                           "(owner chaysen, expires 9999-12-31)" % method), a


def test_an_extension_method_no_rule_allows_is_reported_at_the_hosts_tier(gateway, net,
                                                                          tmp_path):
    gw, af = _start(gateway, net, tmp_path, _grant(net), {"expiry_warn_days": 14})
    s = open_conn(gw)
    s.sendall(b"BREW %s HTTP/1.1\r\nHost: api.example.test:%d\r\nContent-Length: 0\r\n\r\n"
              % (net.url("/a").encode(), net.api.port))
    assert read_response(s, "BREW").status == 200
    s.close()
    ev = gw.decided(path="/a")[0]
    assert (ev["decision"], ev["reason"], ev["tier"]) == ("report", "method_not_allowed", 3), ev
    assert wait_alert(af, "tier3_write")[0]["id"] == ev["id"]


def test_a_read_no_rule_allows_and_the_grants_post_keep_their_tiers(gateway, net, tmp_path):
    # only the tier-3 grant: a HEAD (no rule names it) is a read, not a
    # tier-3 write, and keeps no tier; the POST the grant covers is allowed
    rules = _grant(net)[1:]
    gw, af = _start(gateway, net, tmp_path, rules, {"expiry_warn_days": 14})
    assert request(gw, "HEAD", net.url("/r")).status == 200
    ev = gw.decided(path="/r")[0]
    assert (ev["decision"], ev["reason"], ev["tier"], ev["rule"]) == (
        "report", "method_not_allowed", None, None), ev
    assert request(gw, "POST", net.url("/w"), body=b"1").status == 200
    post = gw.decided(path="/w")[0]
    assert (post["decision"], post["tier"], post["rule"]) == ("allow", 3, "rules[0]"), post
    a = wait_alert(af, "tier3_write")
    assert [x["id"] for x in a] == [post["id"]], a


def test_a_write_to_a_host_no_rule_covers_keeps_no_tier(gateway, net, tmp_path):
    # SPEC: tier is null for a request no rule covers; what the operator
    # sees is the report line and the host's first contact, not a
    # tier3_write no rule set
    gw, af = _start(gateway, net, tmp_path, _grant(net), {"first_contact": True})
    url = net.url("/w", host="other.example.test", port=net.other.port)
    assert request(gw, "POST", url, body=b"1").status == 200
    ev = gw.decided(path="/w")[0]
    assert (ev["decision"], ev["reason"], ev["tier"], ev["rule"]) == (
        "report", "not_in_policy", None, None), ev
    c = wait_alert(af, "first_contact", host="other.example.test")[0]
    assert c["id"] == ev["id"] and "(POST, report)" in c["detail"], c
    assert alerts(af, "tier3_write") == []
