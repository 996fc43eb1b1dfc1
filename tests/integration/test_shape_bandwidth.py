"""Bandwidth buckets: an upload through a shaped rule takes the time its
bandwidth implies and arrives intact (hash compared at the upstream), for
plain HTTP bodies (Content-Length and chunked) and for a spliced CONNECT
tunnel; downloads, plain or tunnelled, are not shaped. The lower bounds are
tight (a slow machine makes an upload slower, never faster) and are the
proof that shaping happened; there is no upper bound on time but hang
guards (HANG_GUARD_S, 30 s, past the ideal time), and where a test's claim
is that something is not held back (a download, a reload), the rate is set
so low that being held back would take several times the guard."""

import hashlib
import http.client
import json
import os
import socket
import threading
import time

import pytest

from conftest import policy_yaml, tcp_sockets
from gate_client import (api_rule, build_request, connect, cpu_seconds, hello_record, open_conn,
                         poll, read_response, request)
from gate_servers import LoopbackServer, pattern_bytes
from held_requests import FRESH_METRICS, bandwidth_waiting
from watch_helpers import free_tcp_port

KIB = 1024
SINK_IP = "127.0.0.7"
HANG_GUARD_S = 30  # a hang guard, not a claim on time


def ideal_s(size, rate):
    """Seconds an upload of <size> bytes takes at <rate> bytes/s through a
    bucket that starts full."""
    return max(0.0, (size - rate) / rate)


def assert_shaped_time(elapsed, size, rate, lower):
    ideal = ideal_s(size, rate)
    assert elapsed >= lower, "%d bytes at %d B/s took only %.2fs" % (size, rate, elapsed)
    assert elapsed < ideal + HANG_GUARD_S, "%d bytes at %d B/s took %.2fs (ideal %.2fs)" % (
        size, rate, elapsed, ideal)  # a hang guard


class HashSink:
    """A TCP upstream that reads until the client shuts down its side, then
    answers with the byte count and SHA-256 of what it got, and closes.
    <received> counts the bytes it has read so far, every connection's."""

    def __init__(self, ip):
        self.received = 0
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
                    self.received += len(d)
                c.sendall(b"%d %s\n" % (n, h.hexdigest().encode()))
            except OSError:
                pass

    def stop(self):
        self.sock.close()


def _send_to_sink(t, chunks, pause=0.0):
    """Sends <chunks> through tunnel <t> (<pause> seconds apart), ends its
    side and returns the HashSink's reply line (b"" when the tunnel was cut
    first); closes <t>."""
    reply = b""
    try:
        t.sock.settimeout(60)
        for i, chunk in enumerate(chunks):
            if i > 0:
                time.sleep(pause)
            t.sock.sendall(chunk)
        t.sock.shutdown(socket.SHUT_WR)
        while not reply.endswith(b"\n"):
            d = t.sock.recv(4096)
            if not d:
                break
            reply += d
    except ConnectionResetError:
        pass
    finally:
        t.close()
    return reply


def _assert_sink_got(reply, data):
    n, digest = reply.split()
    assert int(n) == len(data)
    assert digest.decode() == hashlib.sha256(data).hexdigest()


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
    assert_shaped_time(elapsed, len(body), 64 * KIB, lower=2.5)  # ideal 3 s
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
    assert_shaped_time(elapsed, len(head) + len(enc), 48 * KIB, lower=1.6)


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
        reply = _send_to_sink(t, [data])
        elapsed = time.monotonic() - t0
        _assert_sink_got(reply, data)
        # 192 KiB at 64 KiB/s, the first 64 KiB at once: >= 2 s.
        assert_shaped_time(elapsed, len(data), 64 * KIB, lower=1.5)
        ev, end = gw.decided(method="CONNECT")
        assert end["bytes_up"] == len(data)
    finally:
        sink.stop()


class BigSource:
    """A TCP upstream that reads one line, then sends <size> pattern bytes
    and closes."""

    def __init__(self, ip, size):
        self.size = size
        self.sock = socket.socket()
        self.sock.bind((ip, 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        with c:
            c.settimeout(30)
            try:
                line = b""
                while not line.endswith(b"\n") and len(line) < 4096:
                    d = c.recv(4096)
                    if not d:
                        return
                    line += d
                c.sendall(pattern_bytes(self.size))
            except OSError:
                pass

    def stop(self):
        self.sock.close()


def test_tunnel_download_not_shaped(gateway, net):
    # What comes back through a tunnel is not metered: 512 KiB under a
    # 1 KiB/s upload limit would take 511 s if it were, far past the guard.
    size, rate = 512 * KIB, 1 * KIB
    src = BigSource(SINK_IP, size)
    try:
        rule = {"host": "big.example.test", "ports": [src.port], "tier": 0,
                "rate": {"bandwidth": "1KiB/s"}}
        gw = gateway(net.policy([rule], static_extra={"big.example.test": SINK_IP}))
        t = connect(gw, "big.example.test:%d" % src.port)
        assert t.status == 200
        t0 = time.monotonic()
        got = bytearray()
        try:
            t.sock.settimeout(HANG_GUARD_S)
            t.sock.sendall(b"send it\n")
            while True:
                d = t.sock.recv(65536)
                if not d:
                    break
                got += d
        finally:
            t.close()
        elapsed = time.monotonic() - t0
        assert len(got) == size and bytes(got) == pattern_bytes(size)
        assert elapsed < HANG_GUARD_S < ideal_s(size, rate) / 10, elapsed
        ev, end = gw.decided(method="CONNECT")
        assert end["bytes_up"] == len(b"send it\n") and end["bytes_down"] == size
    finally:
        src.stop()


@pytest.mark.parametrize("rest", [512, 0], ids=["bytes", "end_only"])
def test_tunnel_paused_by_bandwidth_is_not_idle(gateway, net, rest):
    # The first bytes of a tunnel (read for the SNI check) are counted at
    # once, which puts the bucket in debt: 3000 bytes at 512 B/s is a pause
    # of about 5 s before the next byte, or the end of the agent's side, is
    # read. The agent sent them; it is the gateway that holds them, so the
    # tunnel is not idle (idle_timeout 1 s) and everything arrives, the end
    # included.
    sink = HashSink(SINK_IP)
    try:
        rule = {"host": "sink.example.test", "ports": [sink.port], "tier": 0,
                "rate": {"bandwidth": "512B/s"}}
        gw = gateway(net.policy([rule], static_extra={"sink.example.test": SINK_IP},
                                limits={"idle_timeout": "1s"}))
        t = connect(gw, "sink.example.test:%d" % sink.port)
        assert t.status == 200
        first = b"\0" + pattern_bytes(2999)  # neither TLS nor HTTP; one read
        rest = pattern_bytes(rest)
        reply = _send_to_sink(t, [first, rest], pause=0.2)  # the peek takes <first> alone
        assert reply, "the tunnel was cut while shaping held the agent's bytes"
        data = first + rest
        _assert_sink_got(reply, data)
        ev, end = gw.decided(method="CONNECT", timeout=30)
        assert end["bytes_up"] == len(data)
    finally:
        sink.stop()


@pytest.mark.parametrize("splice", [False, True])
def test_tunnel_held_by_its_bucket_costs_no_cpu(gateway, net, splice):
    # An agent that sends far faster than its 1 KiB/s: the gateway stops
    # reading it while the bucket refills (the refill timer wakes it about
    # every 62 ms for a 64-byte piece), and uses next to no CPU meanwhile,
    # however readable the agent's socket stays: a tunnel that watched it
    # while paused spun the loop (1 s of CPU in 3 s, 0.00-0.02 s without).
    sink = HashSink(SINK_IP)
    # --grace 0s: the stop at the end does not wait 5 s for the held upload
    gw, t, first, policy = _tunnel_under(gateway, net, sink, "1KiB/s",
                                         args=["--grace", "0s"] + (["--splice"] if splice else []))
    try:
        t.sock.settimeout(30)

        def push():
            # 64 MiB, never all of it (cut below): more than the agent's
            # send buffer and the gateway's receive buffer can take in
            # together (tcp_wmem's 4 MiB and tcp_rmem's up to 32 MiB here;
            # 4 MiB was once all taken in, and the pusher ended).
            piece = pattern_bytes(1 << 20)
            try:
                for _ in range(64):
                    t.sock.sendall(piece)
                ended.append("all 64 MiB taken in")
            except OSError as e:
                ended.append("cut: %s" % e)
        ended = []
        pusher = threading.Thread(target=push, daemon=True)
        pusher.start()
        # the bucket is empty: what came waits unread in the gateway's end,
        # and more in the agent's socket, not taken yet (its reading turned
        # off or not: that is what the CPU measured below tells)
        mine = t.sock.getsockname()[1]

        def filled():
            rows = tcp_sockets(gw.proc.pid)
            return (any(r.port == gw.port and r.remote_port == mine and r.unread > 0
                        for r in rows) and
                    any(r.port == mine and r.remote_port == gw.port and r.unacked > 0
                        for r in rows))
        poll(filled, timeout=30, what="the socket buffers filled")
        c0, w0 = cpu_seconds(gw.proc.pid), time.monotonic()
        time.sleep(3)
        used, wall = cpu_seconds(gw.proc.pid) - c0, time.monotonic() - w0
        assert pusher.is_alive(), "the upload was not held: %s" % ended
        assert used < 0.1 * wall, "%.2f s of CPU in %.2f s while throttled" % (used, wall)
    finally:
        t.close()
        sink.stop()


def _tunnel_under(gateway, net, sink, bandwidth, args=(), **limits):
    """A gateway (serve's <args>) whose one rule lets sink.example.test at <bandwidth> (None:
    unshaped) (and <limits>), and a tunnel to <sink> through it, open (its first 1000 bytes
    at the sink: they are the first bytes of a tunnel, passed at once whatever the bandwidth,
    and only once the tunnel is open). Returns (gateway, tunnel, those bytes,
    policy(bandwidth): the same policy at another bandwidth, to reload)."""
    def policy(bw):
        rule = {"host": "sink.example.test", "ports": [sink.port], "tier": 0}
        if bw is not None:
            rule["rate"] = {"bandwidth": bw}
        return net.policy([rule], static_extra={"sink.example.test": SINK_IP},
                          limits=limits or None)
    gw = gateway(policy(bandwidth), args=args)
    t = connect(gw, "sink.example.test:%d" % sink.port)
    assert t.status == 200
    first = b"\0" + pattern_bytes(999)  # neither TLS nor HTTP: the tunnel opens
    t.sock.sendall(first)
    _at_sink(sink, len(first))  # the tunnel is open, its flow too
    return gw, t, first, policy


def _at_sink(sink, n):
    """Waits until <sink> has read <n> bytes in all (a hang guard of 30 s)."""
    poll(lambda: sink.received >= n or None, timeout=30,
         what="%d bytes at the sink (it has %d)" % (n, sink.received))


def _reload_then_send(gw, t, new_policy, rest):
    """Reloads <gw> with <new_policy>, then sends <rest> through tunnel <t>;
    returns (the sink's reply, the seconds the sending took)."""
    gw.write_policy(policy_yaml(new_policy))
    gw.reload()
    poll(lambda: "sluice: reloaded " in gw.stderr() or None, timeout=5, what="the reload")
    t0 = time.monotonic()
    reply = _send_to_sink(t, [rest])
    return reply, time.monotonic() - t0


def _held_across_a_reload(gw, sink, new_policy, case):
    """Opens a tunnel to <sink> through <gw>, whose policy holds it to
    1 KiB/s, reloads <gw> with <new_policy> (which must too) and checks that
    4 KiB more then take at least 3 s, all of it reaching the sink, and that
    the tunnel is still allowed, as it was (<case> names the run)."""
    t = connect(gw, "sink.example.test:%d" % sink.port)
    assert t.status == 200
    first = b"\0" + pattern_bytes(999)  # neither TLS nor HTTP: the tunnel opens
    t.sock.sendall(first)
    _at_sink(sink, len(first))  # the tunnel is open, its flow too
    rest = pattern_bytes(4 * KIB)
    reply, elapsed = _reload_then_send(gw, t, new_policy, rest)
    _assert_sink_got(reply, first + rest)
    assert elapsed >= 2.5, "%s: 4 KiB at 1 KiB/s after the reload took only %.2fs" % (
        case, elapsed)
    assert not gw.events(reason="not_in_policy"), case  # still allowed, as it was


def test_reload_reshapes_a_running_tunnel(gateway, net):
    # A tunnel opened under 1 MiB/s; the policy is reloaded to 1 KiB/s while
    # it is open, and what the agent sends next goes at the new rate: the
    # bucket is clamped to 1 KiB, so 4 KiB more take at least 3 s. (Before,
    # a running upload kept the rate it started under for as long as it
    # lasted: an operator could not slow down a runaway upload by a reload.)
    sink = HashSink(SINK_IP)
    try:
        gw, t, first, policy = _tunnel_under(gateway, net, sink, "1MiB/s")
        rest = pattern_bytes(4 * KIB)
        reply, elapsed = _reload_then_send(gw, t, policy("1KiB/s"), rest)
        _assert_sink_got(reply, first + rest)
        assert elapsed >= 2.5, "4 KiB at 1 KiB/s after the reload took only %.2fs" % elapsed
    finally:
        sink.stop()


def test_reload_shapes_a_tunnel_opened_unshaped(gateway, net):
    # A tunnel opened where no bandwidth is limited; the reload that brings
    # in 1 KiB/s holds it too: the new bucket starts full (1 KiB), so 4 KiB
    # more take at least 3 s. (Before, only a tunnel opened under some limit
    # was reshaped: one opened under none went on at full speed.)
    sink = HashSink(SINK_IP)
    try:
        gw, t, first, policy = _tunnel_under(gateway, net, sink, None)
        rest = pattern_bytes(4 * KIB)
        reply, elapsed = _reload_then_send(gw, t, policy("1KiB/s"), rest)
        _assert_sink_got(reply, first + rest)
        assert elapsed >= 2.5, "4 KiB at 1 KiB/s after the reload took only %.2fs" % elapsed
    finally:
        sink.stop()


def test_reload_that_edits_the_rule_keeps_the_tunnel_shaped(gateway, net):
    # A tunnel opened under a rule of 1 KiB/s; the reload leaves its rate as
    # it is but changes what the rule is (a port added: another identity),
    # or lets the tunnel through another rule (a wildcard, with the same
    # rate) in place of the one it opened under. Either way the policy in
    # force holds the tunnel to 1 KiB/s, so 4 KiB more take at least 3 s.
    # (Before, the tunnel's flow looked for its rule by the old identity,
    # found none, and went unmetered: 4 KiB arrived at once.)
    for case in ("port_added", "other_rule"):
        sink = HashSink(SINK_IP)
        try:
            def policy(edited):
                rule = {"host": "sink.example.test", "ports": [sink.port], "tier": 0,
                        "rate": {"bandwidth": "1KiB/s"}}
                if edited and case == "port_added":
                    rule["ports"] = [sink.port, sink.port + 1]
                elif edited:
                    rule["host"] = "*.example.test"
                return net.policy([rule], static_extra={"sink.example.test": SINK_IP})
            _held_across_a_reload(gateway(policy(False)), sink, policy(True), case)
        finally:
            sink.stop()


def test_wait_paused_sees_an_upload_held_in_the_gateway(gateway, net):
    # An upload whose head and small body come in one write, at 1 KiB/s: the
    # gateway's first read takes them all, so its socket holds none of the
    # body while the bucket holds it back. wait_paused() with the origin's
    # view sees it held (looking at the kernel alone, it waited in vain).
    gw = gateway(net.policy([api_rule(net, rate={"bandwidth": "1KiB/s"})]))
    body = pattern_bytes(4 * KIB)
    s = open_conn(gw)
    try:
        s.sendall(b"POST %s HTTP/1.1\r\nHost: api.example.test:%d\r\nContent-Length: %d\r\n\r\n"
                  % (net.url("/small").encode(), net.api.port, len(body)) + body)
        gw.wait_paused(pending=lambda: not any(r.path == "/small" for r in net.api.requests),
                       timeout=HANG_GUARD_S)
        assert not any(r.path == "/small" for r in net.api.requests)
        r = read_response(s, "POST")
        assert r.status == 200, r
    finally:
        s.close()
    assert net.api.requests[-1].body == body


def test_reload_that_edits_the_rule_keeps_a_plain_upload_shaped(gateway, net):
    # The same for a plain POST running at 1 KiB/s: 8 KiB, the reload about
    # a second in adds a port to its rule (another identity, the same rate).
    # The policy in force still holds it to 1 KiB/s: its rule's new bucket
    # starts full, so the 6 KiB or so left take at least 4 s more. (Before,
    # the upload went on unmetered: done within about a second.)
    def policy(ports):
        return net.policy([api_rule(net, ports=ports, rate={"bandwidth": "1KiB/s"})])
    gw = gateway(policy([net.api.port]))
    body = pattern_bytes(8 * KIB)
    out = {}

    def upload():
        out["status"], out["data"] = post(gw, net.url("/up"), body)

    t0 = time.monotonic()
    th = threading.Thread(target=upload, daemon=True)
    th.start()
    # the reload comes while the upload is held by its bucket: the gateway
    # forwards it (its connection to the upstream is there), does not read
    # its client, and the upstream has not had the whole body yet (the
    # origin's view: under load the gateway's first read may take the head
    # and all 8 KiB at once, and the kernel then holds none of it)
    def origin_short():
        return (gw.upstream_end_now(net.api.port) is not None and
                not any(r.path == "/up" for r in net.api.requests))
    gw.wait_paused(pending=origin_short, timeout=60)
    gw.write_policy(policy_yaml(policy([net.api.port, 1])))
    gw.reload()
    poll(lambda: "sluice: reloaded " in gw.stderr() or None, timeout=5, what="the reload")
    th.join(60)
    elapsed = time.monotonic() - t0
    assert out.get("status") == 200, out
    info = json.loads(out["data"])
    assert info["body_len"] == len(body)
    assert info["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert elapsed >= 5, "8 KiB at 1 KiB/s across the reload took only %.2fs" % elapsed


def test_reload_speeds_up_a_paused_tunnel(gateway, net):
    # At 10 B/s the first 1000 bytes (counted at once) put the bucket 990
    # bytes in debt: the tunnel pauses reading the agent for 99 s and more.
    # A reload to 1 MiB/s is seen at once, not when that pause ends (which
    # would be long past the hang guard).
    sink = HashSink(SINK_IP)
    try:
        gw, t, first, policy = _tunnel_under(gateway, net, sink, "10B/s",
                                             idle_timeout="300s")
        more = pattern_bytes(100)
        t.sock.sendall(more)  # the tunnel, paused, leaves it unread until the reload
        gw.wait_held(t.sock, len(more))
        rest = pattern_bytes(4 * KIB)
        reply, elapsed = _reload_then_send(gw, t, policy("1MiB/s"), rest)
        _assert_sink_got(reply, first + more + rest)
        assert elapsed < HANG_GUARD_S, "the paused tunnel took %.2fs to see the reload" % elapsed
    finally:
        sink.stop()



def _write_calls(pid):
    """The write system calls process <pid> made so far (its writes to the
    upstream's socket among them)."""
    with open("/proc/%d/io" % pid) as f:
        return int(dict(x.split(": ") for x in f.read().splitlines())["syscw"])


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="no /proc/PID/io")
def test_shaped_upload_moves_in_pieces_not_a_trickle(gateway, net):
    # Once the bucket is empty, an upload waits for a sixteenth of it (64
    # KiB at 1 MiB/s) and sends that at once: 3 MiB take some tens of
    # writes. (Before, each look let through the few bytes that came in
    # since the last one: the POST took 480000 writes of 6 or 7 bytes, the
    # gateway spinning on one upload while every other agent's requests
    # waited.)
    gw = gateway(net.policy([api_rule(net, rate={"bandwidth": "1MiB/s"})]))
    body = pattern_bytes(3 * 1024 * KIB)
    before = _write_calls(gw.proc.pid)
    status, data = post(gw, net.url("/up"), body)
    writes = _write_calls(gw.proc.pid) - before
    assert status == 200 and json.loads(data)["body_len"] == len(body)
    assert writes < 2000, writes


def _assert_held_to_1kib(sink, t0, first):
    """Once <sink> got its first bytes, and a second more for the others
    to go were they not held: asserts that it got no more since <t0> than
    a 1 KiB/s bucket lets through, one piece of <first> bytes in its debt
    included. Bytes are counted, not timed: the bound grows with the time
    measured, so a slow machine only loosens it."""
    _at_sink(sink, 1)
    time.sleep(1.0)
    got = sink.received
    elapsed = time.monotonic() - t0
    allowed = KIB + first + KIB * (elapsed + 1)
    assert got <= allowed, "%d bytes at the sink after %.2fs (at most %d)" % (
        got, elapsed, allowed)


PEEK_MAX = 16388 + 2048  # conn.h: the first bytes of a tunnel read at once for its check


@pytest.mark.parametrize("first", ["binary", "tls_hello", "http_head"])
def test_parallel_tunnels_first_bytes_share_the_bucket(gateway, net, first):
    # The first bytes of a tunnel are read whole for the SNI (or Host)
    # check and go upstream at once; each tunnel of the agent must still
    # wait for the bucket they share before its first bytes go. Before,
    # they went whatever the bucket held, into its debt: 8 tunnels opened
    # together under 1 KiB/s put 8 x 15 KiB (123 KiB) at the sink within a
    # second, where the bucket allows 1 KiB, one tunnel's first bytes (its
    # debt) and 1 KiB a second. Bytes are counted, not timed: the bound
    # grows with the time measured, so a slow machine only loosens it.
    sink = HashSink(SINK_IP)
    tunnels = []
    try:
        rule = {"host": "sink.example.test", "ports": [sink.port], "tier": 0,
                "rate": {"bandwidth": "1KiB/s"}}
        gw = gateway(net.policy([rule], static_extra={"sink.example.test": SINK_IP}))
        if first == "binary":
            data = b"\0" + pattern_bytes(15 * KIB)  # neither TLS nor HTTP: opens at once
        elif first == "tls_hello":
            data = hello_record("sink.example.test", alpn=15 * KIB)
        else:
            body = pattern_bytes(14 * KIB)
            data = (b"POST / HTTP/1.1\r\nHost: sink.example.test:%d\r\nContent-Length: %d\r\n\r\n"
                    % (sink.port, len(body)) + body)
        assert len(data) < PEEK_MAX
        t0 = time.monotonic()
        for _ in range(8):
            t = connect(gw, "sink.example.test:%d" % sink.port)
            assert t.status == 200
            tunnels.append(t)
            t.sock.sendall(data)
        _assert_held_to_1kib(sink, t0, len(data))  # the first tunnel opened
    finally:
        for t in tunnels:
            t.close()
        sink.stop()


class HeadSink(LoopbackServer):
    """An HTTP origin on <ip> that answers each request head (no body) with
    204 on a kept connection; <received> counts the bytes it has read so
    far, every connection's."""

    def __init__(self, ip):
        self.received = 0
        super().__init__(ip)

    def _serve(self, conn):
        buf = b""
        with conn:
            conn.settimeout(30)
            try:
                while not self._stop.is_set():
                    d = conn.recv(65536)
                    if not d:
                        return
                    with self._lock:
                        self.received += len(d)
                    buf += d
                    while b"\r\n\r\n" in buf:
                        buf = buf.split(b"\r\n\r\n", 1)[1]
                        conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
            except OSError:
                pass


def _padded_get(url, size):
    """A GET of <url> whose head is <size> bytes long (an X-Pad field)."""
    head = build_request("GET", url, headers={"X-Pad": ""})
    return build_request("GET", url, headers={"X-Pad": "p" * (size - len(head))})


def _head_sink_policy(net, sink, bandwidth):
    rule = {"host": "sink.example.test", "ports": [sink.port], "tier": 0,
            "rate": {"bandwidth": bandwidth}}
    return net.policy([rule], static_extra={"sink.example.test": SINK_IP})


def test_parallel_request_heads_share_the_bucket(gateway, net):
    # A plain request's head goes upstream through the bandwidth bucket of
    # its body: it waits while the bucket is in debt, and its bytes go into
    # that debt, so that the next request finds it. Before, heads were not
    # metered at all: an agent under 1 KiB/s sent 8 connections x 4
    # pipelined GETs of 8 KiB heads (256 KiB) within a second, moving data
    # out at any rate through its heads alone. Bytes are counted, not
    # timed: the bound (the bucket, one head in its debt, 1 KiB a second)
    # grows with the time measured, so a slow machine only loosens it.
    sink = HeadSink(SINK_IP)
    socks = []
    try:
        gw = gateway(_head_sink_policy(net, sink, "1KiB/s"))
        req = _padded_get("http://sink.example.test:%d/x" % sink.port, 8 * KIB)
        t0 = time.monotonic()
        for _ in range(8):
            s = open_conn(gw, timeout=30)
            socks.append(s)
            s.sendall(req * 4)
        _assert_held_to_1kib(sink, t0, len(req))  # the first head went
    finally:
        for s in socks:
            s.close()
        sink.stop()


def test_request_heads_wait_for_the_bucket_and_are_answered(gateway, net):
    # Heads held back by the bucket wait, they are not refused: 4 GETs of
    # 8 KiB heads, one after the other on one kept connection under 8 KiB/s
    # (the bucket starts full), are all answered, and take at least the
    # time the bucket needs to refill for all but the last head, which goes
    # into its debt: (3 x 8 KiB - 8 KiB) / 8 KiB/s = 2 s. Before, 0.01 s.
    sink = HeadSink(SINK_IP)
    try:
        gw = gateway(_head_sink_policy(net, sink, "8KiB/s"))
        req = _padded_get("http://sink.example.test:%d/y" % sink.port, 8 * KIB)
        s = open_conn(gw, timeout=60)
        t0 = time.monotonic()
        try:
            statuses = []
            for _ in range(4):
                s.sendall(req)
                statuses.append(read_response(s).status)
        finally:
            s.close()
        elapsed = time.monotonic() - t0
        assert statuses == [204] * 4
        assert sink.accepted == 1  # the upstream connection was kept
        assert elapsed >= 1.8, "4 heads of 8 KiB under 8 KiB/s took only %.2fs" % elapsed
        assert elapsed < 2 + HANG_GUARD_S  # a hang guard
    finally:
        sink.stop()


def test_reload_denies_a_request_whose_head_waits(gateway, net):
    # A GET whose head waits for the bucket has sent nothing yet: a reload
    # that takes its rule away decides it again, as a request whose body
    # is still to go up, and it is refused, its head never sent. Before, a
    # request without a body was not decided again: its head went up
    # seconds after the rule was gone (the sink got both heads, and 204).
    sink = HeadSink(SINK_IP)
    try:
        admin = free_tcp_port()
        gw = gateway(_head_sink_policy(net, sink, "1KiB/s"), args=["--admin", str(admin)],
                     env=FRESH_METRICS)
        url = "http://sink.example.test:%d/" % sink.port
        s = open_conn(gw, timeout=30)
        try:
            first = _padded_get(url + "1", 8 * KIB)
            s.sendall(first)
            assert read_response(s).status == 204  # the bucket now owes about 7 KiB
            at_sink = sink.received
            s.sendall(_padded_get(url + "2", 8 * KIB))
            gw.wait_events(path="/2")
            poll(lambda: bandwidth_waiting(admin) == 1, timeout=HANG_GUARD_S,
                 what="the head of /2 to wait for the bucket")
            gw.write_policy(policy_yaml(net.policy(
                [], static_extra={"sink.example.test": SINK_IP})))
            gw.reload()
            r = read_response(s)
        finally:
            s.close()
        assert r.status == 403, r
        assert sink.received == at_sink
        lines = gw.events(path="/2")
        assert [e["decision"] for e in lines] == ["allow", "deny"], lines
    finally:
        sink.stop()


def test_made_up_names_wait_for_the_bucket(gateway, net):
    # Under a wildcard rule, the name of each request's target is the
    # agent's to choose, and resolving it carries it to the name servers.
    # Made-up names answered NXDOMAIN send nothing upstream, so nothing
    # met the bucket: 100 requests put 20,200 bytes of names at the name
    # server in 0.04 s under 256B/s. A name now waits for the bucket as a
    # head does, and is taken from it. Bytes are counted, not timed: the
    # bound (the bucket, one name in its debt, 1 KiB a second) grows with
    # the time measured, so a slow machine only loosens it.
    rule = {"host": "*.exfil.test", "ports": [net.api.port], "tier": 0,
            "rate": {"bandwidth": "1KiB/s"}}
    gw = gateway(net.policy([rule]))
    net.dns.clear()
    names = []
    for i in range(12):
        label = "%02d" % i + "a" * 61
        names.append("%s.%s.%s.exfil.test" % (label, label, label))
    statuses = []

    def ask(name):
        r = request(gw, "GET", "http://%s:%d/" % (name, net.api.port), timeout=60)
        statuses.append((r.status, r.header("Sluice-Reason")))

    threads = [threading.Thread(target=ask, args=(n,)) for n in names]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_GUARD_S)
    elapsed = time.monotonic() - t0
    asked = {n for n, _ in net.dns.queries if n.endswith(".exfil.test")}
    got = sum(len(n) for n in asked)
    allowed = KIB + len(names[0]) + KIB * elapsed
    assert got <= allowed, "%d bytes of names at the name server after %.2fs (at most %d)" % (
        got, elapsed, allowed)
    # None refused for the wait: each resolved in turn, and answered.
    assert asked == set(names)
    assert sorted(statuses) == [(502, "dns_failure")] * len(names), statuses


def test_reload_denies_a_request_whose_name_waits(gateway, net):
    # A name waiting for the bucket has not been asked of the name servers:
    # a reload that takes its rule away refuses the request, and the name
    # never goes out.
    rule = {"host": "*.exfil.test", "ports": [net.api.port], "tier": 0,
            "rate": {"bandwidth": "16B/s"}}
    admin = free_tcp_port()
    gw = gateway(net.policy([rule]), args=["--admin", str(admin)], env=FRESH_METRICS)
    net.dns.clear()
    first = "one-" + "a" * 59 + ".two-" + "b" * 59 + ".exfil.test"  # about 11 s of debt
    second = "three.exfil.test"
    r = request(gw, "GET", "http://%s:%d/" % (first, net.api.port))
    assert (r.status, r.header("Sluice-Reason")) == (502, "dns_failure"), r
    s = open_conn(gw, timeout=30)
    try:
        s.sendall(build_request("GET", "http://%s:%d/" % (second, net.api.port)))
        poll(lambda: bandwidth_waiting(admin) == 1, timeout=HANG_GUARD_S,
             what="the name of the second request to wait for the bucket")
        gw.write_policy(policy_yaml(net.policy([])))
        gw.reload()
        r = read_response(s)
    finally:
        s.close()
    assert r.status == 403, r
    asked = {n for n, _ in net.dns.queries}
    assert first in asked and second not in asked, asked


def test_tunnel_is_held_to_the_bandwidth_of_the_grant_that_raised_its_tier(gateway, net):
    # sink.example.test is open at tier 0 with no rate, and its POSTs are
    # granted at tier 3 under 1 KiB/s: a plain POST is held to that, and so
    # is a tunnel, which the tier-0 rule decides but which may carry those
    # POSTs (it takes the grant's tier). The agent pushes 256 KiB; within
    # the time measured the sink gets at most the first bytes, the bucket's
    # 1 KiB and 1 KiB a second (plus a second's slack), never the lot.
    sink = HashSink(SINK_IP)
    try:
        open_rule = {"host": "sink.example.test", "ports": [sink.port], "tier": 0}
        grant = {"host": "sink.example.test", "ports": [sink.port], "tier": 3,
                 "methods": ["POST"], "owner": "alice", "expires": "2099-12-31",
                 "rate": {"bandwidth": "1KiB/s"}}
        gw = gateway(net.policy([open_rule, grant],
                                static_extra={"sink.example.test": SINK_IP}),
                     args=["--grace", "0s"])
        _assert_tunnel_held_to_1kib(gw, sink)
    finally:
        sink.stop()


def _assert_tunnel_held_to_1kib(gw, sink):
    """Opens a tunnel to <sink> through <gw>, sends 1000 first bytes, then
    pushes 256 KiB for 2 s: the sink gets at most the first bytes, the
    bucket's 1 KiB and 1 KiB a second (plus a second's slack)."""
    t0 = time.monotonic()
    t = connect(gw, "sink.example.test:%d" % sink.port)
    try:
        assert t.status == 200
        first = b"\0" + pattern_bytes(999)
        t.sock.sendall(first)
        _at_sink(sink, len(first))
        t.sock.settimeout(30)
        pusher = threading.Thread(target=lambda: _push_quietly(t.sock, 256 * 1024), daemon=True)
        pusher.start()
        time.sleep(2)
        got, elapsed = sink.received, time.monotonic() - t0
        bound = len(first) + 1024 + 1024 * (elapsed + 1)
        assert got <= bound, "%d bytes at the sink in %.2f s under 1 KiB/s" % (got, elapsed)
    finally:
        t.close()


def test_a_reload_keeps_a_tunnel_held_to_the_bandwidth_of_its_grant(gateway, net):
    # A tunnel decided by an open tier-0 rule and classified at the tier of
    # a tier-3 POST grant of 1 KiB/s is held to the grant's bandwidth; a
    # reload decides it again (conn.c, rebase_exchange()) and must keep it
    # so, whether the policy is the same or the grant's identity changed (a
    # port added): 4 KiB more after the reload take at least 3 s. Without
    # the grant passed on by the rebase, its flow kept only the deciding
    # rule's limits and the 4 KiB went at once.
    for case in ("same", "port_added"):
        sink = HashSink(SINK_IP)
        try:
            def policy(edited):
                open_rule = {"host": "sink.example.test", "ports": [sink.port], "tier": 0}
                grant = {"host": "sink.example.test", "ports": [sink.port], "tier": 3,
                         "methods": ["POST"], "owner": "alice", "expires": "2099-12-31",
                         "rate": {"bandwidth": "1KiB/s"}}
                if edited and case == "port_added":
                    grant["ports"] = [sink.port, sink.port + 1]
                return net.policy([open_rule, grant],
                                  static_extra={"sink.example.test": SINK_IP})
            _held_across_a_reload(gateway(policy(False)), sink, policy(True), case)
        finally:
            sink.stop()


def _push_quietly(sock, n):
    """Sends <n> bytes on <sock>, giving up quietly when it is closed."""
    try:
        sock.sendall(pattern_bytes(n))
    except OSError:
        pass


def test_tunnel_is_held_to_the_smallest_bandwidth_of_the_rules_for_its_host(gateway, net):
    # Beside the open tier-0 rule that decides the tunnel and the tier-3
    # POST grant (64 KiB/s) that sets its tier, a tier-1 GET-only rule holds
    # its host's reads to 1 KiB/s: the tunnel may carry those reads, so the
    # smallest bandwidth of the three holds it. Within the time measured the
    # sink gets at most the first bytes, 1 KiB of bucket and 1 KiB a second
    # (plus a second's slack), not the grant's 64 KiB a second.
    sink = HashSink(SINK_IP)
    try:
        open_rule = {"host": "sink.example.test", "ports": [sink.port], "tier": 0}
        reads = {"host": "sink.example.test", "ports": [sink.port], "tier": 1,
                 "methods": ["GET"], "rate": {"bandwidth": "1KiB/s"}}
        grant = {"host": "sink.example.test", "ports": [sink.port], "tier": 3,
                 "methods": ["POST"], "owner": "alice", "expires": "2099-12-31",
                 "rate": {"bandwidth": "64KiB/s"}}
        gw = gateway(net.policy([open_rule, reads, grant],
                                static_extra={"sink.example.test": SINK_IP}),
                     args=["--grace", "0s"])
        _assert_tunnel_held_to_1kib(gw, sink)
    finally:
        sink.stop()
