"""The host a request targets, as the gateway decides it and as the origin
gets it: every spelling of an absolute-form target or Host field that is let
through reaches the origin naming the host and port the decision names, and
the spellings the origin could read as another host, or that parsers read
differently, are refused before any byte goes upstream. The decision is the
gateway's; the origin is Python's http.server, whose received Host is the
one it picks a site by."""

import pytest

from gate_client import assert_denied, connect, exchange, nothing_reached
from watch_helpers import wait_alert

API = "api.example.test"
LONG_LABEL = "a" * 63
# names under the wildcard rule, all resolved to the api upstream
UNDER = ["x.w.example.test", "a.b.w.example.test", "_.w.example.test", "a_b.w.example.test",
         LONG_LABEL + ".w.example.test", "0x1.w.example.test", "1.w.example.test",
         "xn--bcher-kva.w.example.test", "api.example.test.w.example.test"]


def _policy(net):
    p = net.api.port
    rules = [{"host": API, "ports": [p], "tier": 0},
             {"host": "*.w.example.test", "ports": [p], "tier": 1}]
    return net.policy(rules, deny=["d.w.example.test"],
                      static_extra={n: "127.0.0.2" for n in UNDER + ["w.example.test",
                                                                     "d.w.example.test"]})


def _head(target, host, version="1.1"):
    lines = ["GET %s HTTP/%s" % (target, version)]
    if host is not None:
        lines.append("Host: " + host)
    return ("\r\n".join(lines + ["Connection: close"]) + "\r\n\r\n").encode("latin-1")


def _normal(host_field):
    """A Host value as an origin compares it: its port off, lower case, one
    final dot off."""
    h = host_field.strip().rsplit(":", 1)[0] if not host_field.startswith("[") else host_field
    h = h.lower()
    return h[:-1] if h.endswith(".") else h


# (target host as written, Host field or None for HTTP/1.0 without one,
#  the host the decision names); {p} is the api upstream's port
ALLOWED = [
    ("api.example.test", "api.example.test:{p}", API),
    ("API.Example.TEST", "api.example.test:{p}", API),
    ("api.example.test.", "API.EXAMPLE.TEST.:{p}", API),
    ("api.example.test", "api.example.test.:{p}", API),
    ("api.example.test", None, API),
    ("api.example.test.", None, API),
] + [(n, n + ":{p}", n) for n in UNDER] + [
    (n.upper(), None, n) for n in UNDER[:3]] + [
    ("XN--BCHER-KVA.w.example.test", "xn--bcher-kva.W.example.test:{p}",
     "xn--bcher-kva.w.example.test"),
]


@pytest.mark.parametrize("target,host,decided", ALLOWED)
def test_an_allowed_spelling_reaches_the_origin_naming_the_decided_host(gateway, net, target,
                                                                         host, decided):
    gw = gateway(_policy(net))
    p = net.api.port
    hv = None if host is None else host.format(p=p)
    for scheme in ("http", "HTTP"):
        r = exchange(gw, _head("%s://%s:%d/t" % (scheme, target, p), hv,
                               "1.1" if hv is not None else "1.0"))
        assert r is not None and r.status == 200, (target, hv, r)
    got = net.api.requests
    assert len(got) == 2, got
    evs = gw.events(decision="allow")
    assert len(evs) == 2, evs
    for rec, ev in zip(got, evs):
        assert ev["host"] == decided and ev["port"] == p, ev
        # the Host the origin picks its site by names the decided host
        sent = rec.header("Host")
        assert _normal(sent) == decided, (sent, decided)
        assert sent.rsplit(":", 1)[1] == str(p), sent
        assert rec.path == "/t"


@pytest.mark.parametrize("name,reason", [
    ("w.example.test", "not_in_policy"),          # the wildcard's apex
    ("d.w.example.test", "denied_host"),
    ("D.W.Example.TEST.", "denied_host"),         # the deny list's name in another case
    ("xw.example.test", "not_in_policy"),         # glued to the suffix
    ("w.example.test.x.w.example.test.evil.test", "not_in_policy"),
])
def test_names_around_a_wildcard_are_not_its(gateway, net, name, reason):
    gw = gateway(_policy(net))
    url = "http://%s:%d/n" % (name, net.api.port)
    r = exchange(gw, _head(url, "%s:%d" % (name, net.api.port)))
    assert_denied(gw, net, r, reason, port=net.api.port, ip=None)


# Host fields an origin or a front may read as another host or port than
# the target's, or not read at all: refused whole, nothing upstream
MISMATCHED_HOST_FIELDS = [
    "[api.example.test]:{p}", "api.example.test%3a{p}", "u@api.example.test:{p}",
    "api.example.test:{p}@other.example.test", "api.example.test:{p}/",
    "api.example.test :{p}", "api.example.test:{p}\tx", "api.example.test:{p}:{p}",
    "api.example.test:", "api.example.test:{p}, other.example.test", "127.0.0.2:{p}",
    "api.example.test..:{p}", ".api.example.test:{p}", "api.example.test:0{p}0", "",
]


@pytest.mark.parametrize("host", MISMATCHED_HOST_FIELDS)
def test_a_host_field_the_origin_could_read_otherwise_is_refused(gateway, net, host):
    gw = gateway(_policy(net))
    p = net.api.port
    r = exchange(gw, _head("http://%s:%d/h" % (API, p), host.format(p=p)))
    assert_denied(gw, net, r, "host_mismatch", host=API, port=p, ip=None)


# CONNECT authorities that are not host:port as RFC 9110 writes them
BAD_AUTHORITIES = [
    "u@api.example.test:{p}", "[api.example.test]:{p}", "api.example.test:{p}/",
    "http://api.example.test:{p}", "api.example.test", "api.example.test:",
    "api.example.test:{p}:{p}", "api.example.test..:{p}", "api.example.test:+{p}",
    "api.example.test:0{p}0", "api.example.test%2e:{p}", "api\\.example.test:{p}",
]


@pytest.mark.parametrize("authority", BAD_AUTHORITIES)
def test_a_connect_authority_that_is_not_host_port_is_refused(gateway, net, authority):
    gw = gateway(_policy(net))
    t = connect(gw, authority.format(p=net.api.port))
    try:
        assert t.status == 400 and t.header("Sluice-Reason") == "bad_request", (t.status, t.text)
    finally:
        t.close()
    assert net.api.connections == 0
    nothing_reached(net)
    gw.decided(reason="bad_request")  # a head that does not parse names no method


@pytest.mark.parametrize("authority,host", [
    ("API.EXAMPLE.TEST.:{p}", API), ("x.w.example.test:{p}", "x.w.example.test"),
    ("_.W.example.test:{p}", "_.w.example.test")])
def test_a_connect_authority_in_another_case_is_decided_as_its_normal_form(gateway, net,
                                                                           authority, host):
    gw = gateway(_policy(net))
    t = connect(gw, authority.format(p=net.api.port))
    try:
        assert t.status == 200, t.text
        t.sock.sendall(("GET /c HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                        % authority.format(p=net.api.port)).encode())
        assert t.sock.recv(12) == b"HTTP/1.1 200"
    finally:
        t.close()
    ev, _ = gw.decided(method="CONNECT")
    assert ev["decision"] == "allow" and ev["host"] == host, ev
    assert [_normal(r.header("Host")) for r in net.api.requests] == [host]


@pytest.mark.parametrize("method", ["MOVE", "MKCOL", "PROPPATCH", "BREW"])
def test_an_extension_method_takes_the_tier_of_the_hosts_write_grant(gateway, net, tmp_path,
                                                                      method):
    """A read rule without methods (tier 1) next to a tier-3 grant for the
    host's writes: an extension method (WebDAV's MOVE, which deletes its
    source, COPY, MKCOL, PROPPATCH, or any token), which no rule can name,
    matched only the read rule and went through at tier 1, without the
    grant's owner or a tier3_write alert, though an origin may write on it.
    It is classified as a CONNECT is, at the highest tier of the rules that
    cover its host, agent and port; the read rule still decides it."""
    p = net.api.port
    af = str(tmp_path / "alerts.jsonl")
    rules = [{"host": API, "ports": [p], "tier": 1},
             {"host": API, "ports": [p], "tier": 3, "methods": ["POST", "PUT", "PATCH", "DELETE"],
              "owner": "alice", "expires": "2099-12-31"}]
    gw = gateway(net.policy(rules, alerts={"expiry_warn_days": 0}), args=["--alerts", af])
    r = exchange(gw, _head("http://%s:%d/ext" % (API, p), "%s:%d" % (API, p))
                 .replace(b"GET ", method.encode() + b" ", 1), method=method)
    assert r is not None and r.status in (200, 501), r  # 501: http.server knows no handler
    ev, _ = gw.decided(method=method)
    assert ev["decision"] == "allow" and ev["rule"] == "rules[0]", ev
    assert ev["tier"] == 3 and ev["owner"] == "alice", ev
    a = wait_alert(af, "tier3_write")[0]
    assert a["id"] == ev["id"] and "%s /ext" % method in a["detail"], a
    # the safe methods keep the read rule's tier, the named writes the grant
    for m, tier in (("GET", 1), ("HEAD", 1), ("POST", 3)):
        exchange(gw, _head("http://%s:%d/m" % (API, p), "%s:%d" % (API, p))
                 .replace(b"GET ", m.encode() + b" ", 1), method=m)
        ev, _ = gw.decided(method=m)
        assert ev["tier"] == tier and ev["rule"] == ("rules[1]" if tier == 3 else "rules[0]"), ev
