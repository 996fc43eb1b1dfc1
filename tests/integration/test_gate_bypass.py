"""Attempts to get past the gateway: look-alike names, wildcard apex, IP
literal spellings, request smuggling, garbage and oversized heads."""

import http.client

import pytest

from gate_client import (ANY, api_rule, assert_denied, connect, exchange, nothing_reached,
                         open_conn, read_response, request)


@pytest.mark.parametrize("name", ["api.example.test.evil.test", "evilapi.example.test",
                                  "api-example.test", "xapi.example.test",
                                  "api.example.testx", "pi.example.test", "example.test",
                                  "api.example.test-evil.test", "api..example.test"])
def test_lookalike_names_denied(gateway, net, name):
    # every look-alike also resolves (statically) to the api upstream, so
    # only the policy stands between it and the request
    st = {name: "127.0.0.2"} if ".." not in name else {}
    gw = gateway(net.policy([api_rule(net)], static_extra=st))
    url = "http://%s:%d/look" % (name, net.api.port)
    r = request(gw, "GET", url)
    assert r.status in (403, 400), r
    nothing_reached(net)
    if ".." in name:
        assert r.header("Sluice-Reason") in ("bad_request", "not_in_policy"), r
        return
    assert_denied(gw, net, r, "not_in_policy", host=name, port=net.api.port, ip=None)
    assert net.dns.queries == []


@pytest.mark.parametrize("name", ["api.example.test.evil.test", "evilapi.example.test",
                                  "api-example.test"])
def test_lookalike_names_denied_connect(gateway, net, name):
    gw = gateway(net.policy([api_rule(net)], static_extra={name: "127.0.0.2"}))
    t = connect(gw, "%s:%d" % (name, net.api.port))
    try:
        assert_denied(gw, net, t, "not_in_policy", host=name, port=net.api.port,
                      method="CONNECT", path=None, ip=None)
    finally:
        t.close()
    assert net.api.connections == 0


def test_wildcard_never_matches_apex_or_glued(gateway, net):
    rules = [{"host": "*.example.test", "ports": [net.api.port], "tier": 0}]
    st = {"example.test": "127.0.0.2", "a.example.test": "127.0.0.2",
          "a.b.example.test": "127.0.0.2", "badexample.test": "127.0.0.2",
          "example.test.evil.test": "127.0.0.2"}
    gw = gateway(net.policy(rules, static=st))
    for name in ("example.test", "badexample.test", "example.test.evil.test"):
        r = request(gw, "GET", "http://%s:%d/w" % (name, net.api.port))
        assert r.status == 403 and r.header("Sluice-Reason") == "not_in_policy", (name, r)
    nothing_reached(net)
    for name in ("a.example.test", "a.b.example.test"):
        r = request(gw, "GET", "http://%s:%d/ok-%s" % (name, net.api.port, name))
        assert r.status == 200, (name, r)
    assert len(net.api.requests) == 2
    ev, _ = gw.decided(path="/ok-a.b.example.test")
    assert ev["host"] == "a.b.example.test" and ev["rule"] == "rules[0]"


@pytest.mark.parametrize("spelling", ["API.Example.TEST", "api.example.test.",
                                      "API.EXAMPLE.TEST."])
def test_case_and_trailing_dot_allowed(gateway, net, spelling):
    gw = gateway(net.policy([api_rule(net)]))
    url = "http://%s:%d/case" % (spelling, net.api.port)
    r = request(gw, "GET", url)
    assert r.status == 200, r
    assert [q.path for q in net.api.requests] == ["/case"]
    ev, _ = gw.decided(path="/case")
    assert ev["host"] == "api.example.test" and ev["decision"] == "allow"


V4_SPELLINGS = ["127.0.0.1", "127.1", "2130706433", "0177.0.0.1", "0x7f000001", "0x7f.0.0.1",
                "127.000.000.001"]
V6_SPELLINGS = ["[::ffff:127.0.0.1]", "[::1]", "[::ffff:7f00:1]", "[0:0:0:0:0:0:0:1]"]


@pytest.mark.parametrize("spelling", V4_SPELLINGS + V6_SPELLINGS)
def test_ip_literal_refused_without_cidr_rule(gateway, net, spelling):
    # a policy that allows the name whose address is the literal
    gw = gateway(net.policy([api_rule(net),
                             {"host": "localhost.example.test", "ports": [net.api.port],
                              "tier": 0}],
                            static_extra={"localhost.example.test": "127.0.0.1"}))
    url = "http://%s:%d/lit" % (spelling, net.api.port)
    r = request(gw, "GET", url)
    host = "127.0.0.1" if spelling in V4_SPELLINGS else ANY
    assert_denied(gw, net, r, "ip_literal", host=host, port=net.api.port, ip=ANY)


@pytest.mark.parametrize("spelling", ["127.0.0.1", "2130706433", "0x7f000001", "[::1]"])
def test_ip_literal_refused_connect(gateway, net, spelling):
    gw = gateway(net.policy([api_rule(net)]))
    t = connect(gw, "%s:%d" % (spelling, net.api.port))
    try:
        assert_denied(gw, net, t, "ip_literal", port=net.api.port, method="CONNECT", ip=ANY)
    finally:
        t.close()


@pytest.mark.parametrize("spelling", ["127.0.0.2", "127.2", "2130706434", "0177.0.0.2",
                                      "0x7f000002"])
def test_ip_literal_allowed_by_cidr_rule(gateway, net, spelling):
    rules = [{"cidr": "127.0.0.0/8", "ports": [net.api.port], "tier": 2}]
    gw = gateway(net.policy(rules))
    r = request(gw, "GET", "http://%s:%d/cidr" % (spelling, net.api.port))
    assert r.status == 200 and r.json()["server"] == "api", r
    ev, end = gw.decided(path="/cidr")
    assert ev["decision"] == "allow" and ev["tier"] == 2 and ev["rule"] == "rules[0]"
    assert ev["host"] == "127.0.0.2" and ev["ip"] == "127.0.0.2"


# (target as written, Host): the Host names the address in another spelling
# than its canonical text and the target's own. Goes upstream as it came, a
# server takes it for a name (its default site), so it is refused as a name
# of another host is.
HOST_SPELLING_MISMATCHES = [
    ("127.0.0.2", "0x7f.0.0.2"), ("127.0.0.2", "127.000.000.002"),
    ("127.0.0.2", "2130706434"), ("127.0.0.2", "127.2"), ("127.2", "2130706434"),
    ("0x7f000002", "0177.0.0.2"), ("[::ffff:127.0.0.2]", "[::ffff:7f00:2]"),
]


def _spelt(gateway, net, target, hostval):
    """GET http://<target>:api/spelt with Host <hostval>:api through a
    gateway whose cidr: rule allows the api upstream; returns (gw, resp)."""
    rules = [{"cidr": "127.0.0.0/8", "ports": [net.api.port], "tier": 2}]
    gw = gateway(net.policy(rules))
    return gw, request(gw, "GET", "http://%s:%d/spelt" % (target, net.api.port),
                       host="%s:%d" % (hostval, net.api.port))


@pytest.mark.parametrize("target,hostval", HOST_SPELLING_MISMATCHES)
def test_ip_literal_host_in_another_spelling_refused(gateway, net, target, hostval):
    gw, r = _spelt(gateway, net, target, hostval)
    host = "127.0.0.2" if "::" not in target else ANY
    assert_denied(gw, net, r, "host_mismatch", host=host, port=net.api.port, ip=None,
                  tier=ANY, rule=ANY)


# (target as written, Host): the canonical text, or the target's own
# spelling in another case (a v4-mapped target's canonical text is its IPv4).
HOST_SPELLINGS_ALLOWED = [
    ("0x7f.0.0.2", "127.0.0.2"), ("0X7F.0.0.2", "0x7f.0.0.2"), ("127.2", "127.2"),
    ("[::FFFF:7F00:2]", "[::ffff:7f00:2]"), ("[::ffff:7f00:2]", "127.0.0.2"),
]


@pytest.mark.parametrize("target,hostval", HOST_SPELLINGS_ALLOWED)
def test_ip_literal_host_canonical_or_as_written_allowed(gateway, net, target, hostval):
    gw, r = _spelt(gateway, net, target, hostval)
    assert r.status == 200 and r.json()["server"] == "api", r
    ev, _ = gw.decided(path="/spelt")
    assert ev["decision"] == "allow", ev


def test_ip_literal_cidr_rule_other_port_refused(gateway, net):
    rules = [{"cidr": "127.0.0.0/8", "ports": [net.api.port], "tier": 2}]
    gw = gateway(net.policy(rules))
    r = request(gw, "GET", "http://127.0.0.3:%d/cidr" % net.other.port)
    assert r.status == 403
    assert r.header("Sluice-Reason") == "port_not_allowed"
    nothing_reached(net)


@pytest.mark.parametrize("method", ["post", "Post", "pOST", "get", "head"])
def test_known_method_in_another_case_refused(gateway, net, method):
    # HTTP methods are case-sensitive, so "post" is not POST to the policy;
    # but Django, Werkzeug and ASP.NET Core fold the case and run their POST
    # handler. Classified as an extension method, "post" missed the tier-3
    # POST rule and went up as a tier-2 request under the open wildcard, with
    # no owner and no tier3_write alert: refused instead.
    rules = [{"host": "*.example.test", "ports": [net.api.port], "tier": 2},
             api_rule(net, methods=["POST"], tier=3, owner="alice", expires="9999-12-31")]
    gw = gateway(net.policy(rules))
    r = request(gw, method, net.url("/case-%s" % method), body=b"x" if method != "head" else b"")
    assert_denied(gw, net, r, "bad_request", host="api.example.test", port=net.api.port,
                  method=method, ip=None)
    assert "upper case" in r.text, r.text
    assert "absolute-form" not in r.text, r.text
    # the method as the policy writes it is decided as always
    assert request(gw, "POST", net.url("/upper"), body=b"x").status == 200
    ev, _ = gw.decided(path="/upper")
    assert (ev["tier"], ev["owner"], ev["rule"]) == (3, "alice", "rules[1]")



@pytest.mark.parametrize("method,headers,target", [
    ("GET", [("X-HTTP-Method-Override", "DELETE")], "/o"),
    ("GET", [("X-HTTP-Method", "PUT")], "/o"),
    ("GET", [("x-method-override", "post")], "/o"),
    ("HEAD", [("X-HTTP-Method-Override", "PATCH")], "/o"),
    ("GET", [("X-HTTP-Method-Override", "GET"), ("X-Method-Override", "DELETE")], "/o"),
    ("GET", [], "/o?_method=DELETE"),
    ("GET", [], "/o?a=1&%5Fmethod=PUT"),
    ("POST", [("X-HTTP-Method-Override", "GET")], "/o"),
    # PHP's $_GET["_method"], which Symfony and Laravel read, to PHP: a '.'
    # in a name is a '_', leading spaces are dropped, a NUL ends the name
    ("POST", [], "/o?.method=DELETE"),
    ("POST", [], "/o?+%2Emethod=DELETE"),
    ("POST", [], "/o?_method%00x=DELETE"),
])
def test_method_override_refused(gateway, net, method, headers, target):
    # Google's APIs, Express's method-override, Symfony, Laravel, Rails and
    # OData run the method an override header (or a _method parameter)
    # names: a GET under the tier-1 read rule, decided as a GET, was a
    # DELETE at the origin, with no owner, no grant and no write alert; a
    # POST that names GET would pass a write for a read to the next hop.
    # Refused, whatever the pair: the method itself goes in the request line.
    rules = [api_rule(net, methods=["GET", "HEAD"], tier=1),
             api_rule(net, methods=["POST", "DELETE"], tier=3, owner="alice",
                      expires="9999-12-31")]
    gw = gateway(net.policy(rules))
    body = b"x" if method == "POST" else b""
    r = request(gw, method, net.url(target), headers=headers, body=body)
    if method == "HEAD":  # the refusal's head alone: no body to read the reason in
        assert (r.status, r.header("Sluice-Reason")) == (400, "bad_request"), r
        nothing_reached(net)
        ev, _ = gw.decided(reason="bad_request")
        assert (ev["method"], ev["decision"]) == ("HEAD", "deny"), ev
    else:
        assert_denied(gw, net, r, "bad_request", host="api.example.test", port=net.api.port,
                      method=method, ip=None)
        assert "method override" in r.text, r.text
        # its own advice alone: the request's form was fine
        assert r.text.rstrip("\n").endswith("; send that method itself"), r.text
        assert "absolute-form" not in r.text, r.text
    # the same request without the override goes on as always, and an
    # override that names the request's own method changes nothing
    ok = request(gw, "GET", net.url("/plain?method=DELETE&x_method=1"),
                 headers=[("X-HTTP-Method-Override", "GET")])
    assert ok.status == 200, ok
    ev, _ = gw.decided(path="/plain?method=DELETE&x_method=1")
    assert (ev["decision"], ev["tier"]) == ("allow", 1)


SMUGGLE = [
    # CL + TE: the classic desync
    b"POST {u} HTTP/1.1\r\nHost: {h}\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"0\r\n\r\nGET {o} HTTP/1.1\r\nHost: {oh}\r\n\r\n",
    # TE + CL (order swapped)
    b"POST {u} HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n"
    b"0\r\n\r\nGET {o} HTTP/1.1\r\nHost: {oh}\r\n\r\n",
    # two different Content-Length values
    b"POST {u} HTTP/1.1\r\nHost: {h}\r\nContent-Length: 3\r\nContent-Length: 50\r\n\r\n"
    b"abcGET {o} HTTP/1.1\r\nHost: {oh}\r\n\r\n",
    # obfuscated Transfer-Encoding
    b"POST {u} HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: xchunked\r\n\r\n"
    b"0\r\n\r\nGET {o} HTTP/1.1\r\nHost: {oh}\r\n\r\n",
    b"POST {u} HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding : chunked\r\n\r\n"
    b"0\r\n\r\nGET {o} HTTP/1.1\r\nHost: {oh}\r\n\r\n",
    b"POST {u} HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked, identity\r\n\r\n"
    b"0\r\n\r\nGET {o} HTTP/1.1\r\nHost: {oh}\r\n\r\n",
    # spellings a lenient reader takes for chunked and another does not:
    # a request's Transfer-Encoding is one field "chunked" or refused
    b"POST {u} HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked,\r\n\r\n"
    b"0\r\n\r\nGET {o} HTTP/1.1\r\nHost: {oh}\r\n\r\n",
    b"POST {u} HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: identity, chunked\r\n\r\n"
    b"0\r\n\r\nGET {o} HTTP/1.1\r\nHost: {oh}\r\n\r\n",
    b"POST {u} HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding:\r\n\r\n"
    b"0\r\n\r\nGET {o} HTTP/1.1\r\nHost: {oh}\r\n\r\n",
    # obs-fold continuation line
    b"POST {u} HTTP/1.1\r\nHost: {h}\r\nX-A: a\r\n Transfer-Encoding: chunked\r\n"
    b"Content-Length: 3\r\n\r\nabc",
    # bare LF line ends
    b"GET {u} HTTP/1.1\nHost: {h}\n\n",
    # negative / huge Content-Length
    b"POST {u} HTTP/1.1\r\nHost: {h}\r\nContent-Length: -1\r\n\r\n",
    b"POST {u} HTTP/1.1\r\nHost: {h}\r\nContent-Length: 99999999999999999999999\r\n\r\n",
]


@pytest.mark.parametrize("idx", range(len(SMUGGLE)))
def test_smuggling_refused(gateway, net, idx):
    gw = gateway(net.policy([api_rule(net),
                             {"host": "other.example.test", "ports": [net.other.port],
                              "tier": 0}]))
    fill = {b"{u}": net.url("/front").encode(),
            b"{h}": b"api.example.test:%d" % net.api.port,
            b"{o}": net.url("/smuggled", host="other.example.test",
                            port=net.other.port).encode(),
            b"{oh}": b"other.example.test:%d" % net.other.port}
    data = SMUGGLE[idx]
    for k, v in fill.items():
        data = data.replace(k, v)
    r = exchange(gw, data, method="POST")
    assert_denied(gw, net, r, "bad_request", tier=ANY, rule=ANY, owner=ANY, ip=None)
    assert net.other.requests == [] and net.api.requests == []


@pytest.mark.parametrize("data", [
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(range(64)) + b"\r\n\r\n",
    b"\x00\x00\x00\x00\r\n\r\n",
    b"GET\x00 http://api.example.test/ HTTP/1.1\r\n\r\n",
    b"GET http://api.example.test/ HTTP/9.9\r\nHost: api.example.test\r\n\r\n",
    b"GET http://api.example.test/ HTTP/1.1 extra\r\nHost: api.example.test\r\n\r\n",
    b"G E T http://api.example.test/ HTTP/1.1\r\n\r\n",
    b"GET http://api.example.test/\xff\xfe HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
    b"GET http://api.example.test/ HTTP/1.1\r\nBad Header: x\r\n\r\n",
    b"GET http://api.example.test/ HTTP/1.1\r\n: empty-name\r\n\r\n",
])
def test_garbage_bad_request(gateway, net, data):
    gw = gateway(net.policy([api_rule(net)]))
    r = exchange(gw, data)
    assert_denied(gw, net, r, "bad_request", tier=ANY, rule=ANY, owner=ANY, ip=None)


@pytest.mark.parametrize("target", [
    "http://api.example.test:{p}@other.example.test:{q}/ui",
    "http://other.example.test:{q}#@api.example.test:{p}/",
    "http://api%2eexample.test:{p}/",
    "https://api.example.test:{p}/",
    "http://api.example.test:{p}:{q}/",
    "http://api.example.test:99999/",
    "http://api.example.test:-1/",
    "http://api.example.test\\@other.example.test:{q}/",
    "http:///api.example.test:{p}/",
    # an IPv6 zone id, a doubled final dot, port spellings and bounds
    "http://[fe80::1%25eth0]:{p}/",
    "http://api.example.test..:{p}/",
    "http://api.example.test:+{p}/",
    "http://api.example.test:0/",
    "http://api.example.test:65536/",
    # an A-label that decodes to the target with a soft hyphen (IDNA would
    # map it away): another host to the origin, refused, never normalised
    "http://xn--api-gfa.example.test:{p}/",
    "ftp://api.example.test:{p}/",
])
def test_weird_targets_never_reach_anything(gateway, net, target):
    gw = gateway(net.policy([api_rule(net)]))
    t = target.format(p=net.api.port, q=net.other.port)
    r = exchange(gw, ("GET %s HTTP/1.1\r\nHost: api.example.test:%d\r\n\r\n"
                      % (t, net.api.port)).encode())
    assert r is not None, "no answer for %s" % t
    assert r.status in (400, 403), r
    assert r.header("Sluice-Reason") in ("bad_request", "not_in_policy", "host_mismatch",
                                         "port_not_allowed"), r
    nothing_reached(net)
    gw.decided(reason=r.header("Sluice-Reason"))


def test_oversized_head(gateway, net):
    gw = gateway(net.policy([api_rule(net)], limits={"header_bytes": "4KiB"}))
    head = ("GET %s HTTP/1.1\r\nHost: api.example.test:%d\r\nX-Pad: %s\r\n\r\n"
            % (net.url("/big"), net.api.port, "a" * 8192)).encode()
    r = exchange(gw, head)
    assert_denied(gw, net, r, "bad_request", tier=ANY, rule=ANY, owner=ANY, ip=None)
    # a head just under the limit still goes through
    r = request(gw, "GET", net.url("/small"), headers={"X-Pad": "b" * 2000})
    assert r.status == 200


def test_oversized_head_never_terminated(gateway, net):
    # a head that never ends must be cut at the limit, not buffered forever
    gw = gateway(net.policy([api_rule(net)], limits={"header_bytes": "4KiB"}))
    s = open_conn(gw)
    try:
        s.sendall(b"GET " + net.url("/").encode() + b" HTTP/1.1\r\nX-Pad: ")
        try:
            for _ in range(64):
                s.sendall(b"z" * 1024)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            r = read_response(s)
        except (ConnectionResetError, OSError):
            r = None
    finally:
        s.close()
    if r is not None:
        assert r.status == 400 and r.header("Sluice-Reason") == "bad_request"
    nothing_reached(net)
    gw.decided(reason="bad_request")


def test_many_headers(gateway, net, monkeypatch):
    # the test upstream (http.server) takes at most 100 header lines itself
    monkeypatch.setattr(http.client, "_MAXHEADERS", 1000)
    gw = gateway(net.policy([api_rule(net)]))
    # HTTP_MAX_HEADERS (100) header lines, Host included, pass when they go
    # on as 100 (the gateway drops the hop-by-hop ones and adds Via and
    # Connection); 101 do not
    hdrs = [("X-H%d" % i, "v") for i in range(97)]
    hdrs += [("Proxy-Connection", "keep-alive"), ("Connection", "keep-alive")]
    r = request(gw, "GET", net.url("/many"), headers=hdrs)
    assert r.status == 200, r
    rec = net.api.requests[-1]
    assert rec.path == "/many" and rec.header("X-H96") == "v"
    net.clear()
    hdrs.append(("X-H99", "v"))
    r = request(gw, "GET", net.url("/many"), headers=hdrs)
    assert r.status == 400 and r.header("Sluice-Reason") == "bad_request", r
    assert "too many headers" in r.text
    nothing_reached(net)
