"""Bandwidth buckets: an upload through a shaped rule takes at least the
time its bandwidth implies and arrives intact (hash compared at the
upstream), for plain HTTP bodies (Content-Length and chunked) and for a
spliced CONNECT tunnel. Only lower bounds on time are asserted: a slow
machine makes an upload slower, never faster."""

import hashlib
import http.client
import json
import socket
import threading
import time

from gate_client import build_request, connect, open_conn, read_response
from gate_servers import pattern_bytes

KIB = 1024
SINK_IP = "127.0.0.7"


def api_rule(net, **kw):
    r = {"host": "api.example.test", "ports": [net.api.port], "tier": 0}
    r.update(kw)
    return r


class HashSink:
    """A TCP upstream that reads until the client shuts down its side, then
    answers with the byte count and SHA-256 of what it got, and closes."""

    def __init__(self, ip):
        self.sock = socket.socket()
        self.sock.bind((ip, 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        h, n = hashlib.sha256(), 0
        with c:
            c.settimeout(30)
            try:
                while True:
                    d = c.recv(65536)
                    if not d:
                        break
                    h.update(d)
                    n += len(d)
                c.sendall(b"%d %s\n" % (n, h.hexdigest().encode()))
            except OSError:
                pass

    def stop(self):
        self.sock.close()


def post(gw, url, body, headers=None):
    conn = http.client.HTTPConnection(gw.host, gw.port, timeout=60)
    try:
        conn.request("POST", url, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_upload_shaped_by_rule(gateway, net):
    # 64 KiB/s; the bucket starts full, so 256 KiB needs at least 3 s.
    gw = gateway(net.policy([api_rule(net, rate={"bandwidth": "64KiB/s"})]))
    body = pattern_bytes(256 * KIB)
    t0 = time.monotonic()
    status, data = post(gw, net.url("/up"), body)
    elapsed = time.monotonic() - t0
    assert status == 200
    info = json.loads(data)
    assert info["body_len"] == len(body)
    assert info["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert elapsed >= 2.5, "256 KiB at 64 KiB/s took only %.2fs" % elapsed
    ev, end = gw.decided(path="/up")
    assert ev["decision"] == "allow"
    assert end["bytes_up"] == len(body)


def test_chunked_upload_shaped_by_agent_limit(gateway, net):
    # limits.rate: the agent's bytes across all rules, here 48 KiB/s.
    gw = gateway(net.policy([api_rule(net)], limits={"rate": {"bandwidth": "48KiB/s"}}))
    data = pattern_bytes(150_001)
    enc = bytearray()
    for off in range(0, len(data), 7_000):
        piece = data[off:off + 7_000]
        enc += b"%x\r\n" % len(piece) + piece + b"\r\n"
    enc += b"0\r\n\r\n"
    s = open_conn(gw, timeout=60)
    t0 = time.monotonic()
    try:
        head = build_request("PUT", net.url("/chunked-up"),
                             headers={"Transfer-Encoding": "chunked"})
        s.sendall(head + bytes(enc))
        r = read_response(s, "PUT")
    finally:
        s.close()
    elapsed = time.monotonic() - t0
    assert r.status == 200
    assert r.json()["body_sha256"] == hashlib.sha256(data).hexdigest()
    rec = net.api.requests[0]
    assert rec.chunked and rec.body == data
    # ~153 KiB framed at 48 KiB/s, the first 48 KiB at once: >= 2.1 s.
    assert elapsed >= 1.6, "took only %.2fs" % elapsed


def test_unshaped_download_and_other_agents_unaffected(gateway, net):
    # Only what is sent upstream is metered: a large response comes back at
    # full speed even under a tiny upload bandwidth.
    gw = gateway(net.policy([api_rule(net, rate={"bandwidth": "1KiB/s"})]))
    conn = http.client.HTTPConnection(gw.host, gw.port, timeout=30)
    try:
        t0 = time.monotonic()
        conn.request("GET", net.url("/chunked?n=%d" % (2 * 1024 * 1024)))
        r = conn.getresponse()
        body = r.read()
    finally:
        conn.close()
    assert r.status == 200 and body == pattern_bytes(2 * 1024 * 1024)
    assert time.monotonic() - t0 < 30


def test_tunnel_shaped_and_intact(gateway, net):
    sink = HashSink(SINK_IP)
    try:
        rule = {"host": "sink.example.test", "ports": [sink.port], "tier": 0,
                "rate": {"bandwidth": "64KiB/s"}}
        gw = gateway(net.policy([rule], static_extra={"sink.example.test": SINK_IP}))
        t = connect(gw, "sink.example.test:%d" % sink.port)
        assert t.status == 200
        data = pattern_bytes(192 * KIB + 17)
        t0 = time.monotonic()
        try:
            t.sock.settimeout(60)
            t.sock.sendall(data)
            t.sock.shutdown(socket.SHUT_WR)
            reply = b""
            while not reply.endswith(b"\n"):
                d = t.sock.recv(4096)
                if not d:
                    break
                reply += d
        finally:
            t.close()
        elapsed = time.monotonic() - t0
        n, digest = reply.split()
        assert int(n) == len(data)
        assert digest.decode() == hashlib.sha256(data).hexdigest()
        # 192 KiB at 64 KiB/s, the first 64 KiB at once: >= 2 s.
        assert elapsed >= 1.5, "192 KiB at 64 KiB/s took only %.2fs" % elapsed
        ev, end = gw.decided(method="CONNECT")
        assert end["bytes_up"] == len(data)
    finally:
        sink.stop()


def test_tunnel_download_not_shaped(gateway, net):
    # The TLS origin's answers come back whatever the upload bandwidth.
    rule = {"host": "tls.example.test", "ports": [net.tls.port], "tier": 0,
            "rate": {"bandwidth": "64KiB/s"}}
    gw = gateway(net.policy([rule]))
    import ssl
    ctx = ssl.create_default_context(cafile=net.cert)
    t = connect(gw, "tls.example.test:%d" % net.tls.port)
    assert t.status == 200
    try:
        tls = ctx.wrap_socket(t.sock, server_hostname="tls.example.test")
        tls.sendall(b"GET / HTTP/1.1\r\nHost: tls.example.test\r\nConnection: close\r\n\r\n")
        r = http.client.HTTPResponse(tls)
        r.begin()
        assert r.status == 200
        r.read()
        tls.close()
    finally:
        t.close()
