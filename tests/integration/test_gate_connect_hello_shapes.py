"""CONNECT first bytes shaped to slip another name past the ClientHello
check (src/gate/sni.c, connect.c), against a real TLS upstream (OpenSSL,
through Python's ssl module) that records the server_name it was given.

What the check refuses, nothing of it reaches the upstream; what it lets
through names the target or nothing at all to that server. Shapes the
gateway refuses that OpenSSL takes (an empty handshake record in front of
the ClientHello) are sent to the upstream directly too, off the gateway,
to show that the refusal is needed and not only strict."""

import socket
import ssl
import struct

import pytest

from conftest import wait_served
from gate_client import connect
from test_gate_connect import _read_until_closed, tls_rule

TARGET = b"tls.example.test"
OTHER = b"other.example.test"
HANG_GUARD_S = 30  # a hang guard, not a claim on time


def _hello(name):
    """The handshake message (no record header) of the ClientHello Python's
    ssl module sends for <name>: a real one, with TLS 1.3 key shares."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=name.decode())
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()[5:]


def _record(frag, content_type=22):
    return bytes([content_type]) + b"\x03\x01" + struct.pack(">H", len(frag)) + frag


def _with_server_names(msg, entries, twice=False):
    """<msg> with its server_name extension replaced by a list of <entries>
    ((name_type, name) pairs; none: an empty extension), or followed by a
    second server_name extension of them (<twice>)."""
    p = 4 + 2 + 32
    p += 1 + msg[p]
    p += 2 + struct.unpack(">H", msg[p:p + 2])[0]
    p += 1 + msg[p]
    start = p
    exts, p = [], p + 2
    while p < len(msg):
        kind, n = struct.unpack(">HH", msg[p:p + 4])
        exts.append((kind, msg[p:p + 4 + n]))
        p += 4 + n
    listed = b"".join(bytes([k]) + struct.pack(">H", len(n)) + n for k, n in entries)
    body = struct.pack(">H", len(listed)) + listed if entries else b""
    ext = struct.pack(">HH", 0, len(body)) + body
    out = []
    for kind, raw in exts:
        out.append(raw if kind != 0 else (raw + ext if twice else ext))
    block = b"".join(out)
    body = msg[4:start] + struct.pack(">H", len(block)) + block
    return b"\x01" + struct.pack(">I", len(body))[1:] + body


def _shapes():
    target, other = _hello(TARGET), _hello(OTHER)
    return {
        # OpenSSL skips an empty handshake record and serves the name of the
        # ClientHello behind it (shown below, straight to the upstream)
        "empty_record_first": _record(b"") + _record(other),
        "empty_record_between_fragments": _record(other[:40]) + _record(b"") +
                                          _record(other[40:]),
        # another handshake message (a HelloRequest) in front of the hello
        "hello_request_first": _record(b"\x00\x00\x00\x00" + other),
        "change_cipher_spec_first": _record(b"\x01", 20) + _record(other),
        "second_server_name_extension": _record(
            _with_server_names(target, [(0, OTHER)], twice=True)),
        "second_host_name": _record(_with_server_names(target, [(0, TARGET), (0, OTHER)])),
        "empty_server_name_extension": _record(_with_server_names(target, [])),
        "empty_host_name": _record(_with_server_names(target, [(0, b"")])),
        "nul_in_host_name": _record(_with_server_names(target, [(0, TARGET + b"\x00" + OTHER)])),
        "two_trailing_dots": _record(_with_server_names(target, [(0, TARGET + b"..")])),
    }


def _empty_record_taken_by_openssl(net, shape):
    """Sends <shape> to the TLS upstream directly (no gateway) and returns
    the server_name names it took."""
    net.tls.clear()
    with socket.create_connection((net.tls.ip, net.tls.port), timeout=HANG_GUARD_S) as s:
        s.sendall(shape)
        s.shutdown(socket.SHUT_WR)
        _read_until_closed(s)
    wait_served(net.tls)
    return list(net.tls.sni)


def _through_tunnel(gateway, net, data):
    """Opens a tunnel to the TLS upstream, sends <data> into it and ends the
    client's side; returns what came back, once the upstream has closed
    every connection, and the decision and end events."""
    gw = gateway(net.policy([tls_rule(net)]))
    t = connect(gw, "tls.example.test:%d" % net.tls.port)
    try:
        assert t.status == 200, t.text
        try:
            t.sock.sendall(data)
            t.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # a refusal, or the server's through the tunnel, came first
        got = _read_until_closed(t.sock)
    finally:
        t.close()
    ev, end = gw.decided(method="CONNECT")
    wait_served(net.tls)
    return got, ev, end


@pytest.mark.parametrize("shape", sorted(_shapes()))
def test_hello_shape_refused_and_nothing_reaches_the_upstream(gateway, net, shape):
    got, ev, end = _through_tunnel(gateway, net, _shapes()[shape])
    assert got == b""
    assert (ev["decision"], ev["reason"]) == ("deny", "sni_mismatch"), ev
    assert end["bytes_up"] == 0, end
    assert net.tls.sni == [] and net.tls.handshakes == 0, (net.tls.sni, net.tls.handshakes)


def test_an_empty_record_in_front_of_a_hello_is_one_openssl_takes(net):
    # why empty_record_first must be refused: straight to the upstream, the
    # server reads the ClientHello behind the empty record and takes its name
    assert _empty_record_taken_by_openssl(net, _shapes()["empty_record_first"]) == \
        [OTHER.decode()]


@pytest.mark.parametrize("name", [TARGET.upper(), TARGET + b"."], ids=["upper_case", "one_dot"])
def test_other_writings_of_the_target_name_pass(gateway, net, name):
    # the server looks its sites up by the name in any case, without one
    # trailing dot: the same host, let through (its ClientHello intact)
    _, ev, _ = _through_tunnel(gateway, net,
                               _record(_with_server_names(_hello(TARGET), [(0, name)])))
    assert ev["decision"] == "allow", ev
    assert net.tls.sni == [name.decode()], net.tls.sni


@pytest.mark.parametrize("lead", [b"\r\n", b" ", b"\x00"], ids=["crlf", "space", "nul"])
def test_bytes_in_front_of_a_hello_pass_as_not_tls_and_the_server_refuses_them(gateway, net, lead):
    # a ClientHello naming another host behind a byte that starts no TLS
    # record and no HTTP request: bytes that are neither pass, and a TLS
    # server takes no hello behind them (OpenSSL: wrong version number), so
    # no name is served
    _, ev, _ = _through_tunnel(gateway, net, lead + _record(_hello(OTHER)))
    assert ev["decision"] == "allow", ev
    assert net.tls.sni == [] and net.tls.handshakes == 0, (net.tls.sni, net.tls.handshakes)
