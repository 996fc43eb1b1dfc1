"""Request buckets: a burst gets exactly the bucket's worth through, then 429
rate_limited with a Retry-After computed from the bucket, and passes again
once it has refilled; per agent across rules; tunnels count; buckets
survive a reload."""

import math
import time

from conftest import policy_yaml
from gate_client import (api_rule, assert_denied, build_request, connect, open_conn, other_rule,
                         poll, read_response, request)


def retry_after_bounds(elapsed, token_s):
    """The Retry-After a client may see for the next token of a bucket that
    refills one token each <token_s> seconds, emptied <elapsed> seconds (at
    most) before the answer: between token_s - elapsed and token_s, rounded
    up, at least 1. However slow the machine, the answer is in range."""
    return max(1, token_s - math.ceil(elapsed)), token_s


def test_burst_then_429_then_refill(gateway, net):
    # Firecracker semantics: 2 tokens every 12 s (one each 6 s), full at the
    # start, plus a one-time burst of 3: exactly 5 go at once. One token each
    # 6 s: a burst that took 6 s or more (a gateway held back on a loaded
    # machine) may have had a token refill, and may get one more through
    # for each 6 s it took, never more. Requests go on until two 429s.
    gw = gateway(net.policy([api_rule(net, rate={"requests": 2, "per": "12s", "burst": 3})]))
    t0 = time.monotonic()
    rs = []
    while len(rs) < 7 or ([x.status for x in rs].count(429) < 2 and len(rs) < 20):
        asked = time.monotonic()
        rs.append(request(gw, "GET", net.url("/b%d" % len(rs))))
    elapsed = time.monotonic() - t0
    late = [x.status for x in rs[5:]]
    assert [x.status for x in rs[:5]] == [200] * 5 and set(late) <= {200, 429}, rs
    assert late.count(429) == 2 and late.count(200) <= elapsed // 6, (rs, elapsed)
    assert len(net.api.requests) == 5 + late.count(200)
    r = rs[-1]  # the last one: assert_denied checks the last rate_limited event
    ra = int(r.header("Retry-After"))
    lo, hi = retry_after_bounds(elapsed, 6)
    assert lo <= ra <= hi, (r.header("Retry-After"), elapsed)
    assert "retry after %d s" % ra in r.text
    net.clear()
    ev, end = assert_denied(gw, net, r, "rate_limited", host="api.example.test",
                            port=net.api.port, agent="default", method="GET",
                            path="/b%d" % (len(rs) - 1),
                            tier=0, rule="rules[0]", owner=None, ip=None)
    assert end["status"] == 429
    # Waiting what Retry-After says (bounded), one more goes, and only one:
    # the next token is 6 s of refill away, far more than two requests take.
    # The token /again took came no sooner than Retry-After - 1 s after the
    # last 429 was asked for (it is rounded up): a gateway held back 6 s
    # past that (a loaded machine) may let one more through for each 6 s,
    # never more. Requests go on until a 429.
    deadline = time.monotonic() + 20
    while True:
        refilled = asked + ra - 1
        time.sleep(ra + 0.05)
        asked = time.monotonic()
        r = request(gw, "GET", net.url("/again"))
        if r.status == 200 or time.monotonic() > deadline:
            break
        assert r.status == 429, r
        ra = int(r.header("Retry-After"))
        assert 1 <= ra <= 6, r.header("Retry-After")
    assert r.status == 200, r
    more = []
    while len(more) < 5 and (not more or more[-1].status == 200):
        more.append(request(gw, "GET", net.url("/again%d" % (len(more) + 2))))
    held = time.monotonic() - refilled
    assert more[-1].status == 429 and len(more) - 1 <= held // 6, (more, held)
    assert [x.path for x in net.api.requests] == ["/again"] + [
        "/again%d" % (i + 2) for i in range(len(more) - 1)]


def test_agent_rate_across_rules(gateway, net):
    gw = gateway(net.policy([api_rule(net), other_rule(net)],
                            limits={"rate": {"requests": 2, "per": "1m"}}))
    t0 = time.monotonic()
    assert request(gw, "GET", net.url("/a")).status == 200
    url_other = net.url("/o", host="other.example.test", port=net.other.port)
    assert request(gw, "GET", url_other).status == 200
    r = request(gw, "GET", url_other)
    assert r.status == 429
    lo, hi = retry_after_bounds(time.monotonic() - t0, 30)  # one of 2 a minute
    assert lo <= int(r.header("Retry-After")) <= hi, r.header("Retry-After")
    r = request(gw, "GET", net.url("/a2"))
    assert r.status == 429
    assert r.header("Sluice-Reason") == "rate_limited"
    assert len(net.api.requests) == 1 and len(net.other.requests) == 1


def test_rule_rate_is_per_rule(gateway, net):
    gw = gateway(net.policy([api_rule(net, rate={"requests": 1, "per": "1m"}), other_rule(net)]))
    assert request(gw, "GET", net.url("/1")).status == 200
    assert request(gw, "GET", net.url("/2")).status == 429
    url_other = net.url("/o", host="other.example.test", port=net.other.port)
    for _ in range(3):
        assert request(gw, "GET", url_other).status == 200


def test_connect_takes_a_token(gateway, net):
    rule = {"host": "tls.example.test", "ports": [net.tls.port], "tier": 0,
            "rate": {"requests": 1, "per": "1m"}}
    gw = gateway(net.policy([rule]))
    t0 = time.monotonic()
    t = connect(gw, "tls.example.test:%d" % net.tls.port)
    assert t.status == 200
    t.close()
    t = connect(gw, "tls.example.test:%d" % net.tls.port)
    try:
        assert t.status == 429
        lo, hi = retry_after_bounds(time.monotonic() - t0, 60)
        assert lo <= int(t.header("Retry-After")) <= hi, t.header("Retry-After")
        assert t.header("Sluice-Reason") == "rate_limited"
    finally:
        t.close()
    ev = gw.wait_events(reason="rate_limited")[0]
    assert ev["method"] == "CONNECT" and ev["decision"] == "deny"


def test_keep_alive_connection_survives_429(gateway, net):
    gw = gateway(net.policy([api_rule(net, rate={"requests": 1, "per": "1m"})]))
    s = open_conn(gw)
    try:
        s.sendall(build_request("GET", net.url("/k1")))
        assert read_response(s).status == 200
        s.sendall(build_request("GET", net.url("/k2")))
        r = read_response(s)
        assert r.status == 429
        s.sendall(build_request("GET", net.url("/k3")))
        assert read_response(s).status == 429
    finally:
        s.close()


def test_bucket_survives_reload(gateway, net):
    rate = {"requests": 1, "per": "1m"}
    gw = gateway(net.policy([api_rule(net, rate=rate)]))
    assert request(gw, "GET", net.url("/before")).status == 200
    # The same rule, moved to another index by a new rule in front of it.
    gw.write_policy(policy_yaml(net.policy([other_rule(net), api_rule(net, rate=rate)])))
    gw.reload()
    url_other = net.url("/o", host="other.example.test", port=net.other.port)
    poll(lambda: request(gw, "GET", url_other).status == 200, timeout=5, interval=0.05,
         what="the reloaded policy to allow other.example.test")
    r = request(gw, "GET", net.url("/after"))
    assert r.status == 429, r
    ev = gw.wait_events(reason="rate_limited")[0]
    assert ev["rule"] == "rules[1]"
    # Another rule (other ports) is another bucket.
    assert [x.path for x in net.api.requests] == ["/before"]


def test_report_mode_agent_is_let_through(gateway, net):
    agents = [{"id": "watcher", "sources": ["127.0.0.1/32"], "mode": "report"}]
    gw = gateway(net.policy([api_rule(net, rate={"requests": 1, "per": "1m"})], agents=agents))
    assert request(gw, "GET", net.url("/r1")).status == 200
    assert request(gw, "GET", net.url("/r2")).status == 200
    ev = gw.wait_events(reason="rate_limited")[0]
    assert ev["decision"] == "report" and ev["path"] == "/r2" and ev["agent"] == "watcher"
    assert len(net.api.requests) == 2


def test_retry_after_of_a_long_period_is_not_cut_to_a_year(gateway, net):
    # One request each 8761 hours (periods go up to 87600h): the next token
    # is 8761 h away, a little over a year, and Retry-After says so, in the
    # header and the body. (Before, every Retry-After was cut to 365 days:
    # an agent told 31536000 came back an hour early, to another 429.) A
    # quarantine of that length says the same.
    period_s = 8761 * 3600
    gw = gateway(net.policy([api_rule(net, rate={"requests": 1, "per": "8761h"})],
                            limits={"quarantine": "8761h"},
                            alerts={"denied_burst": {"max": 1, "per": "1m"}}))
    t0 = time.monotonic()
    assert request(gw, "GET", net.url("/once")).status == 200
    r = request(gw, "GET", net.url("/twice"))
    assert r.status == 429, r
    lo, hi = retry_after_bounds(time.monotonic() - t0, period_s)
    ra = int(r.header("Retry-After"))
    assert lo <= ra <= hi, r.header("Retry-After")
    assert "retry after %d s" % ra in r.text
    # A second denial within the minute: over max 1, quarantined for 8761 h.
    t1 = time.monotonic()
    assert request(gw, "GET", net.url("/thrice")).status == 429
    poll(lambda: request(gw, "GET", net.url("/q")).header("Sluice-Reason") == "quarantined",
         timeout=5, interval=0.05, what="the quarantine")
    r = request(gw, "GET", net.url("/q2"))
    assert r.header("Sluice-Reason") == "quarantined", r
    lo, hi = retry_after_bounds(time.monotonic() - t1, period_s)
    assert lo <= int(r.header("Retry-After")) <= hi, r.header("Retry-After")


def test_only_admitted_requests_take_a_token(gateway, net):
    # docs/SPEC.md: a request refused before its admission (by the policy,
    # the quarantine, a malformed head) takes no token; one refused after it
    # (here dns_failure: the name does not resolve) has taken its token.
    # Three an hour for the agent: a not_in_policy and a bad_request take
    # nothing, the 200, the dns_failure and the next 200 take the three, and
    # the last is rate_limited.
    rules = [api_rule(net), {"host": "nx.example.test", "ports": [80], "tier": 0}]
    gw = gateway(net.policy(rules, limits={"rate": {"requests": 3, "per": "1h"}}))
    got = [request(gw, "GET", "http://evil.example.test/"),
           request(gw, "GET", "http://bad host/"),
           request(gw, "GET", net.url("/one")),
           request(gw, "GET", "http://nx.example.test/"),
           request(gw, "GET", net.url("/two")),
           request(gw, "GET", net.url("/three"))]
    assert [(r.status, r.header("Sluice-Reason")) for r in got] == [
        (403, "not_in_policy"), (400, "bad_request"), (200, None), (502, "dns_failure"),
        (200, None), (429, "rate_limited")], got


def test_connect_takes_a_token_of_the_grant_that_raised_its_tier(gateway, net):
    # A tunnel can carry the writes a tier-3 grant for its host limits, which
    # is why it takes that grant's tier: it takes the grant's request token
    # too. tls.example.test is open at tier 0 (no rate), and its POSTs are
    # granted at tier 3 under one request a minute: the CONNECT is decided
    # by the tier-0 rule and classified tier 3, and a second CONNECT within
    # the minute is over the grant's bucket.
    port = net.tls.port
    open_rule = {"host": "tls.example.test", "ports": [port], "tier": 0}
    grant = {"host": "tls.example.test", "ports": [port], "tier": 3,
             "methods": ["POST"], "owner": "alice", "expires": "2099-12-31",
             "rate": {"requests": 1, "per": "1m"}}
    gw = gateway(net.policy([open_rule, grant]))
    t = connect(gw, "tls.example.test:%d" % port)
    assert t.status == 200
    t.close()
    t = connect(gw, "tls.example.test:%d" % port)
    try:
        assert t.status == 429, t.status
        assert t.header("Sluice-Reason") == "rate_limited"
    finally:
        t.close()
    ev = gw.wait_events(reason="rate_limited")[0]
    assert ev["method"] == "CONNECT" and ev["tier"] == 3, ev


def test_extension_method_takes_a_token_of_the_grant_that_raised_its_tier(gateway, net):
    # An extension method (MOVE) is classified as a CONNECT is: decided by
    # the open tier-0 rule, at the tier-3 grant's tier, and held to its
    # bucket too. A POST (the grant's own) then finds it empty.
    grant = api_rule(net, tier=3, methods=["POST"], owner="alice", expires="2099-12-31",
                     rate={"requests": 1, "per": "1m"})
    gw = gateway(net.policy([api_rule(net), grant]))
    r = request(gw, "MOVE", net.url("/m1"))  # the test origin answers MOVE with 501
    assert r.status != 429 and r.header("Sluice-Reason") is None, r
    r = request(gw, "MOVE", net.url("/m2"))
    assert r.status == 429 and r.header("Sluice-Reason") == "rate_limited", r
    assert request(gw, "POST", net.url("/p"), body=b"x").status == 429
    assert request(gw, "GET", net.url("/g")).status == 200


def test_connect_takes_a_token_of_every_rule_with_limits_for_its_host(gateway, net):
    # A tunnel can carry any method, so every rule covering its host, agent
    # and port whose limits would hold one of those requests holds it too,
    # not only the rule that decides it and the grant that sets its tier.
    # tls.example.test: a tier-1 GET-only rule under 2 requests a minute,
    # an open tier-0 rule without a rate (it decides the tunnel) and a
    # tier-3 POST grant under 100 a minute (it sets the tier): the third
    # CONNECT within the minute is over the GET rule's bucket.
    port = net.tls.port
    open_rule = {"host": "tls.example.test", "ports": [port], "tier": 0}
    reads = {"host": "tls.example.test", "ports": [port], "tier": 1, "methods": ["GET"],
             "rate": {"requests": 2, "per": "1m"}}
    grant = {"host": "tls.example.test", "ports": [port], "tier": 3,
             "methods": ["POST"], "owner": "alice", "expires": "2099-12-31",
             "rate": {"requests": 100, "per": "1m"}}
    gw = gateway(net.policy([open_rule, reads, grant]))
    got = []
    for _ in range(3):
        t = connect(gw, "tls.example.test:%d" % port)
        got.append((t.status, t.header("Sluice-Reason")))
        t.close()
    assert got == [(200, None), (200, None), (429, "rate_limited")], got


def test_extension_method_takes_a_token_of_every_rule_with_limits_for_its_host(gateway, net):
    # No rule can name MOVE, so what it does is the origin's to say: the
    # GET-only rule's one request a minute holds it (beside the open rule
    # that decides it and the unlimited tier-3 grant that sets its tier),
    # and a GET then finds that bucket empty.
    reads = api_rule(net, tier=1, methods=["GET"], rate={"requests": 1, "per": "1m"})
    grant = api_rule(net, tier=3, methods=["POST"], owner="alice", expires="2099-12-31")
    gw = gateway(net.policy([api_rule(net), reads, grant]))
    r = request(gw, "MOVE", net.url("/m1"))  # the test origin answers MOVE with 501
    assert r.status != 429 and r.header("Sluice-Reason") is None, r
    r = request(gw, "MOVE", net.url("/m2"))
    assert r.status == 429 and r.header("Sluice-Reason") == "rate_limited", r
    assert request(gw, "GET", net.url("/g")).status == 429
