"""Write-ahead: with `--log FILE` on a regular file (written by the log's
writer thread, off the event loop), a decision's agent_egress line is in
the file before the decision takes effect. So the moment the agent has its
answer (a refusal, an upstream's answer, a tunnel's first bytes back), the
line is there to read: the test reads the file right after each answer,
with no waiting and no polling."""

import json
import os
import ssl

from gate_client import api_rule, connect, open_conn, other_url, request

ROUNDS = 60  # of 5 requests each: denied and allowed, kept-alive and fresh


class LogReader:
    """Reads the lines the file has now (one read, no waiting)."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.data = b""

    def egress_paths(self):
        while True:
            d = os.read(self.fd, 1 << 20)
            if not d:
                break
            self.data += d
        done = self.data[:self.data.rfind(b"\n") + 1]
        events = [json.loads(x) for x in done.split(b"\n") if x.strip()]
        return [(e["host"], e.get("path")) for e in events if e["event"] == "agent_egress"]

    def close(self):
        os.close(self.fd)


def tls_ok(gw, net, n):
    """An allowed tunnel: the server's answer has come back through it."""
    t = connect(gw, "tls.example.test:%d" % net.tls.port)
    assert t.status == 200, t.text
    ctx = ssl.create_default_context(cafile=net.cert)
    tls = ctx.wrap_socket(t.sock, server_hostname="tls.example.test")
    try:
        tls.sendall(b"GET /t%d HTTP/1.1\r\nHost: tls.example.test\r\nConnection: close\r\n\r\n" % n)
        assert tls.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        tls.close()


def test_each_answer_finds_its_line_in_the_file(gateway, net):
    rules = [api_rule(net), {"host": "tls.example.test", "ports": [net.tls.port], "tier": 1}]
    gw = gateway(net.policy(rules))
    log = LogReader(gw.log_path)
    api, other, tls = "api.example.test", "other.example.test", "tls.example.test"
    kept = open_conn(gw)
    missing = []

    def check(host, path, count=1):
        if log.egress_paths().count((host, path)) < count:
            missing.append((host, path))

    try:
        for i in range(ROUNDS):
            # a refusal on a kept connection, then an allowed request on it
            r = request(gw, "GET", other_url(net, "/kd%d" % i), sock=kept)
            assert r.status == 403, r.status
            check(other, "/kd%d" % i)
            r = request(gw, "GET", net.url("/ka%d" % i), sock=kept)
            assert r.status == 200, r.status
            check(api, "/ka%d" % i)
            # the same on fresh connections
            r = request(gw, "GET", other_url(net, "/fd%d" % i))
            assert r.status == 403, r.status
            check(other, "/fd%d" % i)
            r = request(gw, "GET", net.url("/fa%d" % i))
            assert r.status == 200, r.status
            check(api, "/fa%d" % i)
            if i % 6 == 0:
                tls_ok(gw, net, i)
                check(tls, None, count=i // 6 + 1)
    finally:
        kept.close()
        log.close()
    assert missing == [], "answered before their lines were in the file: %r" % missing[:10]
