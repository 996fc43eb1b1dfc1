"""Every deny reason the gateway decides, each produced by a real request:
status, Sluice-Reason, nothing upstream, and the log pair."""

import datetime
import os
import re
import shutil
import time

import pytest

from gate_client import (ANY, api_rule, assert_denied, coarse_clock_env, connect, exchange,
                         nothing_reached, open_conn, read_response, request)
from gate_servers import free_port


def test_not_in_policy(gateway, net):
    gw = gateway(net.policy([api_rule(net)]))
    url = net.url("/np", host="other.example.test", port=net.other.port)
    r = request(gw, "GET", url)
    assert_denied(gw, net, r, "not_in_policy", host="other.example.test", port=net.other.port,
                  agent="default", method="GET", scheme="http", path="/np", ip=None)
    # the name was never resolved: the decision comes first
    assert net.dns.queries == []


def test_denied_host_wins_over_allow(gateway, net):
    rules = [api_rule(net),
             {"host": "other.example.test", "ports": [net.other.port], "tier": 0},
             {"host": "*.example.test", "ports": [net.other.port], "tier": 0}]
    gw = gateway(net.policy(rules, deny=["other.example.test"]))
    r = request(gw, "GET", net.url("/dh", host="other.example.test", port=net.other.port))
    assert_denied(gw, net, r, "denied_host", host="other.example.test", port=net.other.port,
                  agent="default", ip=None)
    # the allow rule still works for a name the deny list does not name
    assert request(gw, "GET", net.url("/ok")).status == 200


def test_denied_host_wildcard_entry(gateway, net):
    rules = [{"host": "*.example.test", "ports": [net.api.port], "tier": 0}]
    gw = gateway(net.policy(rules, deny=["*.blocked.example.test"],
                            static_extra={"x.blocked.example.test": "127.0.0.2"}))
    r = request(gw, "GET", net.url("/", host="x.blocked.example.test"))
    assert_denied(gw, net, r, "denied_host", host="x.blocked.example.test", port=net.api.port,
                  ip=None)


def test_port_not_allowed(gateway, net):
    gw = gateway(net.policy([api_rule(net)]))
    r = request(gw, "GET", net.url("/p", port=net.dead_port))
    assert_denied(gw, net, r, "port_not_allowed", host="api.example.test", port=net.dead_port,
                  agent="default", tier=ANY, rule=ANY, owner=ANY, ip=None)


def test_method_not_allowed(gateway, net):
    gw = gateway(net.policy([api_rule(net, methods=["GET", "HEAD"], tier=1)]))
    r = request(gw, "POST", net.url("/write"), body=b"payload",
                headers={"Content-Type": "text/plain"})
    assert_denied(gw, net, r, "method_not_allowed", host="api.example.test", port=net.api.port,
                  agent="default", method="POST", tier=ANY, rule=ANY, owner=ANY, ip=None)
    r = request(gw, "GET", net.url("/read"))
    assert r.status == 200
    assert [q.method for q in net.api.requests] == ["GET"]


def test_grant_expired(gateway, net):
    yesterday = (datetime.datetime.now(datetime.timezone.utc).date()
                 - datetime.timedelta(days=1)).isoformat()
    rule = api_rule(net, tier=3, owner="alice", expires=yesterday)
    gw = gateway(net.policy([rule]))
    # serve starts (a warning, not an error)
    assert gw.proc.poll() is None
    r = request(gw, "POST", net.url("/publish"), body=b"x")
    assert_denied(gw, net, r, "grant_expired", host="api.example.test", port=net.api.port,
                  agent="default", method="POST", tier=ANY, rule=ANY, owner=ANY, ip=None)
    err = gw.stderr()
    assert "expire" in err.lower(), "no start-up warning about the expired grant: %r" % err
    # it names the line of the expires: field, as sluice check's error does
    with open(gw.policy_path) as f:
        line = next(i for i, text in enumerate(f, 1) if "expires:" in text)
    where = "%s:%d: rules[0].expires: grant expired on %s" % (gw.policy_path, line, yesterday)
    assert where in err, err


def test_start_warning_and_decision_judge_a_grant_by_one_clock(gateway, net, tmp_path):
    # A tick into a UTC midnight, as glibc shows it (coarse_clock.c): the
    # start-up warning took its day from time(), the coarse clock still on
    # the day before, and said "grant expires on 2026-12-07 (0 days left)"
    # of the grant the first request under it was denied for as expired.
    rule = api_rule(net, tier=3, owner="alice", expires="2026-12-07")
    gw = gateway(net.policy([rule]), env=coarse_clock_env(tmp_path, 1796688000))
    r = request(gw, "POST", net.url("/publish"), body=b"x")
    assert_denied(gw, net, r, "grant_expired", host="api.example.test", port=net.api.port,
                  agent="default", method="POST", tier=ANY, rule=ANY, owner=ANY, ip=None)
    err = gw.stderr()
    assert "rules[0].expires: grant expired on 2026-12-07; requests under it are denied" in err, err


def test_private_address_loopback_not_allowed(gateway, net):
    gw = gateway(net.policy([api_rule(net)], allow_ranges=()))
    r = request(gw, "GET", net.url("/priv"))
    assert_denied(gw, net, r, "private_address", host="api.example.test", port=net.api.port,
                  agent="default", tier=0, rule="rules[0]", ip="127.0.0.2")


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_private_address_rfc1918_never_connected(gateway, net):
    # The gateway runs in an empty network namespace and is reached over its
    # unix socket: even a broken gateway could not send a packet to 10.0.0.1.
    pol = net.policy([{"host": "priv.example.test", "ports": [80], "tier": 0}],
                     static_extra={"priv.example.test": "10.0.0.1"})
    gw = gateway(pol, netns=True)
    r = request(gw, "GET", "http://priv.example.test/secret")
    assert_denied(gw, net, r, "private_address", host="priv.example.test", port=80,
                  agent="default", tier=0, rule="rules[0]", ip="10.0.0.1")


def test_host_mismatch_other_host(gateway, net):
    gw = gateway(net.policy([api_rule(net),
                             {"host": "other.example.test", "ports": [net.api.port], "tier": 0}]))
    r = request(gw, "GET", net.url("/hm"), host="other.example.test:%d" % net.api.port)
    assert_denied(gw, net, r, "host_mismatch", host="api.example.test", port=net.api.port,
                  agent="default", tier=ANY, rule=ANY, owner=ANY, ip=None)


@pytest.mark.parametrize("hostval", [
    "api.example.test:{other}", "api.example.test", "api.example.test.evil.test:{api}",
    # spellings IDNA maps to the target, sent as UTF-8: another host to an
    # origin, which looks its sites up by the bytes it got (nginx serves
    # them from its *.example.test site)
    "\uff41pi.example.test:{api}".encode().decode("latin-1"),
    "a\u00adpi.example.test:{api}".encode().decode("latin-1"),
    # the soft-hyphen spelling as an A-label, in ASCII: never decoded to the target
    "xn--api-gfa.example.test:{api}",
], ids=["other_port", "default_port", "suffix", "full_width", "soft_hyphen", "a_label"])
def test_host_mismatch_port_or_suffix(gateway, net, hostval):
    gw = gateway(net.policy([api_rule(net)]))
    hv = hostval.format(api=net.api.port, other=net.other.port)
    r = request(gw, "GET", net.url("/hm"), host=hv)
    assert_denied(gw, net, r, "host_mismatch", host="api.example.test", port=net.api.port,
                  tier=ANY, rule=ANY, owner=ANY, ip=None)


# The fields an origin behind a front may pick the site by instead of Host
# (gate/routing_host.h): each must name the target as Host must.
@pytest.mark.parametrize("field", [
    ("X-Forwarded-Host", "other.example.test:{api}"),
    ("x-forwarded-host", "api.example.test:{api}, other.example.test:{api}"),
    ("X-Forwarded-Host", "api.example.test:{other}"),
    ("X-Forwarded-Host", "api.example.test"),
    ("X-Host", "other.example.test:{api}"),
    ("X-Original-Host", "other.example.test:{api}"),
    ("X-Forwarded-Server", "other.example.test:{api}"),
    ("X-HTTP-Host-Override", "other.example.test:{api}"),
    ("Forwarded", "host=other.example.test:{api}"),
    ("Forwarded", 'for=192.0.2.1;HOST="other.example.test:{api}";proto=http'),
    ("Forwarded", "for=192.0.2.1, host=other.example.test:{api}"),
    ("Forwarded", "host = other.example.test:{api}"),
    # read differently by parsers that split on ',' or ';' inside quotes
    ("Forwarded", 'for="x,host=other.example.test:{api}";host=api.example.test:{api}'),
    ("Forwarded", 'for="unterminated;host=api.example.test:{api}'),
    ("Forwarded", "host"),
], ids=["xfh", "xfh_list", "xfh_port", "xfh_default_port", "x_host", "x_original_host",
        "x_forwarded_server", "x_http_host_override", "forwarded", "forwarded_quoted",
        "forwarded_second_element", "forwarded_spaced", "forwarded_quoted_comma",
        "forwarded_unterminated", "forwarded_no_value"])
def test_host_mismatch_by_forwarding_header(gateway, net, field):
    gw = gateway(net.policy([api_rule(net),
                             {"host": "other.example.test", "ports": [net.api.port], "tier": 0}]))
    name, value = field
    value = value.format(api=net.api.port, other=net.other.port)
    r = request(gw, "GET", net.url("/fh"), headers=[(name, value)])
    assert_denied(gw, net, r, "host_mismatch", host="api.example.test", port=net.api.port,
                  agent="default", tier=ANY, rule=ANY, owner=ANY, ip=None)


def test_host_mismatch_by_forwarding_header_http10_without_host(gateway, net):
    gw = gateway(net.policy([api_rule(net)]))
    head = ("GET %s HTTP/1.0\r\nX-Forwarded-Host: other.example.test:%d\r\n\r\n"
            % (net.url("/fh"), net.api.port)).encode()
    r = exchange(gw, head)
    assert_denied(gw, net, r, "host_mismatch", host="api.example.test", port=net.api.port,
                  tier=ANY, rule=ANY, owner=ANY, ip=None)


def test_forwarding_headers_naming_the_target_pass(gateway, net):
    gw = gateway(net.policy([api_rule(net)]))
    hp = "api.example.test:%d" % net.api.port
    headers = [("X-Forwarded-Host", "API.example.test.:%d, %s" % (net.api.port, hp)),
               ("X-Original-Host", hp),
               ("Forwarded", 'for=192.0.2.1;host="%s";proto=http, for=unknown' % hp),
               ("Forwarded", "by=_gw;for=\"[2001:db8::1]:4711\""),
               ("X-Forwarded-For", "other.example.test")]
    r = request(gw, "GET", net.url("/ok"), headers=headers)
    assert r.status == 200
    assert len(net.api.requests) == 1
    got = net.api.requests[0]
    assert got.header("X-Forwarded-Host") == headers[0][1]
    assert got.has_header("Forwarded")
    gw.decided(decision="allow", path="/ok")


def test_duplicate_host_is_bad_request(gateway, net):
    gw = gateway(net.policy([api_rule(net),
                             {"host": "other.example.test", "ports": [net.other.port], "tier": 0}]))
    r = request(gw, "GET", net.url("/dup"),
                headers=[("Host", "other.example.test:%d" % net.other.port)])
    assert_denied(gw, net, r, "bad_request", tier=None, rule=None, owner=None, ip=None)


@pytest.mark.parametrize("label", ["xn--zz", "xn--a", "xn--dca", "xn--ab-8tb", "xn--"])
def test_invalid_a_label_is_bad_request(gateway, net, label):
    # An xn-- label is checked as RFC 5891 5.4 asks: Punycode that does not
    # decode, decodes to nothing, to a label IDNA maps to another ("É") or
    # to one not in NFC is no name, never matched, even by a wildcard rule
    # over its parent.
    gw = gateway(net.policy([api_rule(net),
                             {"host": "*.api.example.test", "ports": [net.api.port], "tier": 1}]))
    r = request(gw, "GET", "http://%s.api.example.test:%d/a" % (label, net.api.port))
    assert_denied(gw, net, r, "bad_request", tier=None, rule=None, owner=None, ip=None)
    assert b"invalid internationalised name" in r.body, r.body


def test_self_request_literal(gateway, net):
    port = free_port()
    pol = net.policy([{"cidr": "127.0.0.0/8", "ports": [port, net.api.port], "tier": 0}])
    gw = gateway(pol, port=port)
    r = request(gw, "GET", "http://127.0.0.1:%d/loop" % port)
    assert_denied(gw, net, r, "self_request", host="127.0.0.1", port=port, tier=ANY, rule=ANY,
                  owner=ANY, ip=ANY)


def test_self_request_by_name(gateway, net):
    port = free_port()
    pol = net.policy([{"host": "self.example.test", "ports": [port], "tier": 0}],
                     static_extra={"self.example.test": "127.0.0.1"})
    gw = gateway(pol, port=port)
    r = request(gw, "GET", "http://self.example.test:%d/loop" % port)
    assert_denied(gw, net, r, "self_request", host="self.example.test", port=port, tier=ANY,
                  rule=ANY, owner=ANY, ip=ANY)


def test_bad_request_garbage(gateway, net):
    gw = gateway(net.policy([api_rule(net)]))
    r = exchange(gw, b"\x00\x01\x02garbage\xff\xfe \x7f\r\n\r\n")
    assert_denied(gw, net, r, "bad_request", tier=None, rule=None, owner=None, ip=None)


def test_bad_request_origin_form(gateway, net):
    gw = gateway(net.policy([api_rule(net)]))
    r = exchange(gw, b"GET /direct HTTP/1.1\r\nHost: api.example.test:%d\r\n\r\n" % net.api.port)
    assert_denied(gw, net, r, "bad_request", tier=None, rule=None, owner=None, ip=None)


def test_dns_failure_nxdomain(gateway, net):
    rules = [{"host": "nx.example.test", "ports": [80], "tier": 0}]
    gw = gateway(net.policy(rules))
    r = request(gw, "GET", "http://nx.example.test/")
    assert_denied(gw, net, r, "dns_failure", host="nx.example.test", port=80, agent="default",
                  tier=0, rule="rules[0]", ip=None)
    assert any(q[0] == "nx.example.test" for q in net.dns.queries), net.dns.queries


def test_dns_failure_server_down(gateway, net):
    rules = [{"host": "nx.example.test", "ports": [80], "tier": 0}]
    gw = gateway(net.policy(rules, dns_servers=["127.0.0.1:%d" % net.closed_udp_port]))
    r = request(gw, "GET", "http://nx.example.test/", timeout=20)
    assert_denied(gw, net, r, "dns_failure", host="nx.example.test", port=80, tier=0,
                  rule="rules[0]", ip=None)


def test_dns_server_answer_used(gateway, net):
    # a name not in dns.static, answered by the (loopback) DNS server
    rules = [{"host": "dyn.example.test", "ports": [net.api.port], "tier": 0}]
    gw = gateway(net.policy(rules))
    r = request(gw, "GET", net.url("/dyn", host="dyn.example.test"))
    assert r.status == 200 and r.json()["server"] == "api"
    ev, _ = gw.decided(path="/dyn")
    assert ev["ip"] == "127.0.0.2"


def test_upstream_unreachable(gateway, net):
    rules = [{"host": "dead.example.test", "ports": [net.dead_port], "tier": 0}]
    gw = gateway(net.policy(rules))
    r = request(gw, "GET", net.url("/gone", host="dead.example.test", port=net.dead_port))
    assert_denied(gw, net, r, "upstream_unreachable", host="dead.example.test",
                  port=net.dead_port, agent="default", tier=0, rule="rules[0]", ip="127.0.0.6")


def test_too_many_connections(gateway, net):
    gw = gateway(net.policy([api_rule(net)], limits={"max_connections_per_agent": 1}))
    a = open_conn(gw)
    try:
        a.sendall(b"GET %s HTTP/1.1\r\nHost: api.example.test:%d\r\n\r\n"
                  % (net.url("/held").encode(), net.api.port))
        assert read_response(a).status == 200
        net.clear()
        r = request(gw, "GET", net.url("/second"))
        assert_denied(gw, net, r, "too_many_connections", host=ANY, port=ANY, tier=ANY, rule=ANY,
                      owner=ANY, ip=None)
    finally:
        a.close()
    # once the held connection is gone, a new one is served (bounded retries)
    for _ in range(100):
        r = request(gw, "GET", net.url("/third"))
        if r.status == 200:
            break
        time.sleep(0.05)
    assert r.status == 200


def test_rate_limited(gateway, net):
    pol = net.policy([api_rule(net, rate={"requests": 1, "per": "1m", "burst": 1})])
    gw = gateway(pol)
    statuses = []
    for i in range(6):
        r = request(gw, "GET", net.url("/r%d" % i))
        statuses.append(r.status)
        if r.status == 429:
            break
    assert statuses[0] == 200 and statuses[-1] == 429, statuses
    n_ok = statuses.count(200)
    assert len(net.api.requests) == n_ok
    net.clear()
    assert_denied(gw, net, r, "rate_limited", host="api.example.test", port=net.api.port,
                  tier=ANY, rule=ANY, owner=ANY, ip=ANY)


def test_quarantined_after_denied_burst(gateway, net):
    pol = net.policy([api_rule(net)], limits={"quarantine": "5m"},
                     alerts={"denied_burst": {"max": 2, "per": "1m"}})
    gw = gateway(pol)
    url_bad = net.url("/q", host="other.example.test", port=net.other.port)
    for _ in range(4):
        r = request(gw, "GET", url_bad)
        assert r.status == 403
    r = request(gw, "GET", net.url("/after"))
    assert_denied(gw, net, r, "quarantined", host="api.example.test", port=net.api.port,
                  tier=ANY, rule=ANY, owner=ANY, ip=ANY)


def test_quarantine_without_denied_burst_is_warned_and_quarantines_nothing(gateway, net):
    # A quarantine starts when alerts.denied_burst trips: without it
    # limits.quarantine never does. serve says so at start, naming the
    # file, the line and the field (it loaded without a word), and the
    # agent's denials quarantine nothing, as the warning says.
    gw = gateway(net.policy([api_rule(net)], limits={"quarantine": "5m"}))
    said = re.search(r"warning: %s:(\d+): limits\.quarantine: 5m never starts: a quarantine "
                     r"starts when alerts\.denied_burst trips, and the policy has no "
                     r"alerts\.denied_burst" % re.escape(gw.policy_path), gw.stderr())
    assert said, gw.stderr()[-2000:]
    with open(gw.policy_path) as f:
        line = f.read().splitlines()[int(said.group(1)) - 1]
    assert "quarantine" in line, line
    url_bad = net.url("/q", host="other.example.test", port=net.other.port)
    for _ in range(4):
        assert request(gw, "GET", url_bad).status == 403
    assert request(gw, "GET", net.url("/after")).status == 200


def test_needs_inspection_connect(gateway, net):
    gw = gateway(net.policy([api_rule(net, methods=["GET"])]))
    t = connect(gw, "api.example.test:%d" % net.api.port)
    try:
        assert_denied(gw, net, t, "needs_inspection", host="api.example.test", port=net.api.port,
                      agent="default", method="CONNECT", scheme="https", path=None, tier=ANY,
                      rule=ANY, owner=ANY, ip=None)
    finally:
        t.close()
    assert net.api.connections == 0
    nothing_reached(net)


def test_self_request_ipv6_listener(gateway, net):
    s6 = __import__("socket").socket(__import__("socket").AF_INET6)
    s6.bind(("::1", 0))
    port6 = s6.getsockname()[1]
    s6.close()
    pol = net.policy([{"cidr": "::1/128", "ports": [port6], "tier": 0}],
                     allow_ranges=["127.0.0.0/8", "::1/128"])
    gw = gateway(pol, extra_listen=["[::1]:%d" % port6])
    r = request(gw, "GET", "http://[::1]:%d/loop6" % port6)
    assert_denied(gw, net, r, "self_request", port=port6, tier=ANY, rule=ANY, owner=ANY, ip=ANY)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_self_request_address_added_after_start(gateway, net, tmp_path):
    # A gateway listening on 0.0.0.0 is reached through every address of its
    # host, also one the host gets once the gateway runs (a DHCP lease, an
    # interface brought up later). In an empty namespace of its own, such an
    # address is added to lo after the start: a request to it is the
    # gateway's own, by literal and by name, and never reaches the listener.
    port = free_port()
    trigger, done = str(tmp_path / "add-address"), str(tmp_path / "address-added")
    helper = ["sh", "-c", 'i=0; while [ ! -e "$0" ] && [ $i -lt 400 ]; do sleep 0.05; '
              'i=$((i+1)); done; ip addr add 10.99.0.5/32 dev lo && touch "$1"', trigger, done]
    pol = net.policy([{"cidr": "10.99.0.0/16", "ports": [port], "tier": 0},
                      {"host": "late.example.test", "ports": [port], "tier": 0}],
                     static_extra={"late.example.test": "10.99.0.5"},
                     allow_ranges=["10.99.0.0/16"])
    gw = gateway(pol, netns=True, netns_helper=helper, extra_listen=["0.0.0.0:%d" % port])
    open(trigger, "w").close()
    for _ in range(200):
        if os.path.exists(done):
            break
        time.sleep(0.05)
    assert os.path.exists(done), "the helper could not add the address"
    for host in ("10.99.0.5", "late.example.test"):
        r = request(gw, "GET", "http://%s:%d/loop" % (host, port))
        assert r.status == 403 and r.header("Sluice-Reason") == "self_request", r
    evs = gw.wait_events(reason="self_request", count=2)
    assert [e["host"] for e in evs] == ["10.99.0.5", "late.example.test"], evs
    assert gw.events(method="GET", decision="allow") == []
