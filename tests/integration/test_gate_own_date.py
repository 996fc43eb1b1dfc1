"""RFC 9110 6.6.1: every response the gateway writes itself carries a Date,
right after its status line: its refusals (403, 400, 407, 429, 502), the
answer to a TRACE or OPTIONS with Max-Forwards: 0, and the --admin
server's replies. The Date is the wall clock's second (CLOCK_REALTIME, as
time.time() reads it), so it lies between the client's clock read before
the request went and after the answer came. A CONNECT's 200 is the one
answer without it (SPEC.md "Deny reasons": a tunnel's switch, not a
message of the gateway's)."""

import email.utils
import re
import socket
import time

from gate_client import IMF_FIXDATE, api_rule, build_request, connect, open_conn, recv_until_close
from gate_servers import free_port

# The first lines of a refusal's head after its status line, in their order
# (SPEC.md, "Deny reasons").
REFUSAL_FIELDS = rb"Sluice-Reason: [a-z_]+\r\nContent-Type: text/plain; charset=utf-8\r\n" \
                 rb"Content-Length: \d+\r\nConnection: (?:keep-alive|close)\r\n"


def _dated(raw, status):
    """The Date of the head of <raw> whose status line begins with
    <status> (bytes), as whole seconds since the epoch: the field must
    come right after the status line, an IMF-fixdate. Returns (date,
    the rest of the head after the Date line)."""
    m = re.match(rb"(HTTP/1\.1 " + status + rb"[^\r\n]*)\r\nDate: (" + IMF_FIXDATE +
                 rb")\r\n((?:[^\r\n]+\r\n)*)\r\n", raw)
    assert m is not None, raw[:400]
    assert raw.count(b"\r\nDate:") == 1, raw[:400]  # one Date, none empty
    return email.utils.parsedate_to_datetime(m.group(2).decode()).timestamp(), m.group(3)


def _within(gw, data, status):
    """Sends <data> on a connection of its own (_send()); asserts that the
    answer's status begins with <status> and that its Date lies within the
    client's clock window. Returns the rest of its head after the Date
    line."""
    before, raw, after = _send(gw, data)
    when, rest = _dated(raw, status)
    assert before <= when <= after, (before, when, after, raw[:300])
    return rest


def _send(gw, data):
    """Sends <data> on a connection of its own and reads to the gateway's
    close. Returns the client's clock (whole seconds) before it sent, what
    it got, and its clock after."""
    s = open_conn(gw)
    try:
        before = int(time.time())
        s.sendall(data)
        raw = recv_until_close(s)
        after = int(time.time())
    finally:
        s.close()
    return before, raw, after


def _close(method, url, **kw):
    headers = dict(kw.pop("headers", {}))
    headers["Connection"] = "close"
    return build_request(method, url, headers=headers, **kw)


def test_every_answer_the_gateway_writes_is_dated(gateway, net):
    agents = [{"id": "ci-bot", "sources": ["127.0.0.0/8"], "token": "env:SLUICE_DATE_TOKEN"}]
    rules = [api_rule(net, rate={"requests": 1, "per": "1m", "burst": 1}),
             {"host": "api.example.test", "ports": [net.dead_port], "tier": 0},
             {"host": "banner.example.test", "ports": [net.banner.port], "tier": 0}]
    admin = free_port()
    gw = gateway(net.policy(rules, agents=agents), env={"SLUICE_DATE_TOKEN": "s3cret"},
                 args=["--admin", "127.0.0.1:%d" % admin])
    auth = {"Proxy-Authorization": "Bearer s3cret"}

    # 403 (not in the policy), for a GET and for the same HEAD (its head alone)
    rest = _within(gw, _close("GET", net.url("/x", host="evil.example.test"), headers=auth),
                   b"403")
    assert re.fullmatch(REFUSAL_FIELDS, rest), rest
    rest = _within(gw, _close("HEAD", net.url("/x", host="evil.example.test"), headers=auth),
                   b"403")
    assert re.fullmatch(REFUSAL_FIELDS, rest), rest
    # 403 to a CONNECT
    _within(gw, b"CONNECT evil.example.test:443 HTTP/1.1\r\nHost: evil.example.test:443\r\n"
                b"Proxy-Authorization: Bearer s3cret\r\nConnection: close\r\n\r\n", b"403")
    # 400, a head that is not HTTP
    rest = _within(gw, b"NOT A REQUEST\r\n\r\n", b"400")
    assert re.fullmatch(REFUSAL_FIELDS, rest), rest
    # 407, its Proxy-Authenticate after the refusal's fields
    rest = _within(gw, _close("GET", net.url("/a")), b"407")
    assert re.fullmatch(REFUSAL_FIELDS + rb"Proxy-Authenticate: Basic realm=\"sluice\"\r\n",
                        rest), rest
    # 502: the upstream's port is closed
    _within(gw, _close("GET", net.url("/d", port=net.dead_port), headers=auth), b"502")
    # 429 with its Retry-After, once the bucket's one token is taken (at
    # most a few requests: it may refill meanwhile)
    for _ in range(6):
        before, raw, after = _send(gw, _close("GET", net.url("/r"), headers=auth))
        if raw.startswith(b"HTTP/1.1 429 "):
            break
    when, rest = _dated(raw, b"429")
    assert before <= when <= after, (before, when, after, raw[:300])
    assert re.fullmatch(REFUSAL_FIELDS + rb"Retry-After: \d+\r\n", rest), rest
    # the gateway's own 200 to an OPTIONS that goes no further
    _within(gw, _close("OPTIONS", net.url("/o", port=net.dead_port),
                       headers=dict(auth, **{"Max-Forwards": "0"})), b"200")
    # the admin server's replies: 200 and 404
    for path, status in (("/healthz", b"200"), ("/nowhere", b"404")):
        s = socket.create_connection(("127.0.0.1", admin), timeout=10)
        try:
            before = int(time.time())
            s.sendall(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path.encode())
            raw = recv_until_close(s)
            after = int(time.time())
        finally:
            s.close()
        when, _ = _dated(raw, status)
        assert before <= when <= after, (before, when, after, raw)

    # A CONNECT's 200 is the switch to the tunnel: no Date, nothing but its
    # status line (the bytes after it are the target's).
    t = connect(gw, "banner.example.test:%d" % net.banner.port, headers=auth)
    try:
        assert t.status == 200 and t.headers == {}, (t.status, t.headers)
    finally:
        t.close()
