"""The trailer section of a chunked body (the fields after its last chunk),
both ways, from real sockets: it is read and dropped, never forwarded
(RFC 9112 7.1.2 lets a forwarder drop it), whatever it holds, framing
fields, Proxy-Authorization or the gateway's own Sluice-* among them; it is
bounded (CHUNKED_MAX_TRAILERS, 8 KiB) like a head, and a longer one is a
malformed body: a request's a 400, its upstream never getting the body's
end; a response's a cut before its final CRLF. Loopback only."""

import socket
import time

import pytest

from gate_client import build_request, open_conn, recv_until_close
from gate_servers import ScriptedUpstream
from test_gate_upstream import evil_gateway, get_until_close

HOSTILE = (b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\nHost: other.test\r\n"
           b"Proxy-Authorization: Bearer zz9-secret\r\nSluice-Reason: policy_denied\r\n")
OVERSIZED = b"X-Big: " + b"a" * 9000 + b"\r\n"  # past the 8 KiB bound


def read_upstream(conn, buf, done):
    """What a request's upstream gets: <buf> and every byte after it until
    <done>(bytes) holds, the gateway closes, or 10 s pass."""
    conn.settimeout(0.2)
    deadline = time.monotonic() + 10
    while not done(buf) and time.monotonic() < deadline:
        try:
            d = conn.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            break
        if not d:
            break
        buf += d
    return buf


def post_chunked(gw, up, body):
    """POSTs <body> (chunked framing as given) to the origin <up>; returns
    what the gateway sent back until it closed and the request's end line."""
    url = "http://evil.example.test:%d/t" % up.port
    s = open_conn(gw)
    try:
        s.sendall(build_request("POST", url, {"Transfer-Encoding": "chunked"}) + body)
        s.shutdown(socket.SHUT_WR)  # all sent: a lingering close ends at once
        raw = recv_until_close(s)
    finally:
        s.close()
    _, end = gw.decided(path="/t")
    return raw, end


def test_request_trailer_fields_never_go_upstream(gateway, net):
    got = []

    def script(conn, stop, buf):
        got.append(read_upstream(conn, buf, lambda b: b.endswith(b"0\r\n\r\n")))
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    with ScriptedUpstream(script) as up:
        gw = evil_gateway(gateway, net, up)
        raw, end = post_chunked(gw, up, b"3\r\nabc\r\n0\r\n" + HOSTILE + b"\r\n")
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n") and raw.endswith(b"\r\n\r\nok"), raw
    head, _, rest = got[0].partition(b"\r\n\r\n")
    assert rest == b"3\r\nabc\r\n0\r\n\r\n", got
    assert b"zz9" not in got[0] and b"other.test" not in got[0], got
    assert end["status"] == 200 and end["bytes_up"] == len(rest), end


def test_an_oversized_request_trailer_is_a_400_and_never_ends_the_body_upstream(gateway, net):
    got = []

    def script(conn, stop, buf):
        got.append(read_upstream(conn, buf, lambda b: b.endswith(b"0\r\n\r\n")))

    with ScriptedUpstream(script) as up:
        gw = evil_gateway(gateway, net, up)
        raw, end = post_chunked(gw, up, b"3\r\nabc\r\n0\r\n" + OVERSIZED + b"\r\n")
        # a body byte went up: the upstream had its connection (its script
        # records once the gateway closes it); else none may have been made
        deadline = time.monotonic() + 10
        while end["bytes_up"] > 0 and not got and time.monotonic() < deadline:
            time.sleep(0.05)
    assert raw.startswith(b"HTTP/1.1 400 Bad Request\r\n"), raw[:300]
    assert b"Sluice-Reason: bad_request\r\n" in raw and b"malformed chunked body" in raw, raw
    assert end["status"] == 400, end
    # the upstream never saw the body end: it cannot take the cut for a
    # complete request, nor got a byte of the trailer
    assert len(got) == 1 if end["bytes_up"] > 0 else len(got) <= 1, (got, end)
    assert all(not g.endswith(b"0\r\n\r\n") and b"X-Big" not in g for g in got), got


@pytest.mark.parametrize("trailer", [HOSTILE, OVERSIZED], ids=["hostile", "oversized"])
def test_response_trailers_are_dropped_and_bounded(gateway, net, trailer):
    def script(conn, stop, _):
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5\r\nhello\r\n0\r\n" + trailer + b"\r\n")
        stop.wait(2)

    with ScriptedUpstream(script) as up:
        gw = evil_gateway(gateway, net, up)
        raw = get_until_close(gw, up, "/t", fields="Connection: close\r\n")
        _, end = gw.decided(path="/t")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n"), raw[:300]
    assert b"zz9" not in raw and b"X-Big" not in raw and b"Sluice-Reason" not in raw, raw[:300]
    if trailer is HOSTILE:
        assert body == b"5\r\nhello\r\n0\r\n\r\n", body
    else:
        # its data all went; cut before the final CRLF: the end never came
        assert body == b"5\r\nhello\r\n0\r\n", body
    assert end["status"] == 200 and end["bytes_down"] == len(body), end
