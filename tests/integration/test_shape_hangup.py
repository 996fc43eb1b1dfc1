"""A client that goes away while its bytes wait for the bandwidth bucket:
its end is seen during the wait, not once a debt of seconds has been paid,
and what the gateway holds of a request that can no longer be whole is not
sent. Each wait is made long (a bucket in debt for 15 s or more); the proof
is in bytes (what went upstream when the end was logged), not in time."""

import json
import socket
import struct
import threading
import time

import pytest

from gate_client import (api_rule, build_request, connect, open_conn, poll, read_response,
                         recv_until_close)
from gate_servers import ScriptedUpstream, pattern_bytes
from held_requests import FRESH_METRICS, bandwidth_waiting
from test_shape_bandwidth import KIB, SINK_IP, HashSink, _at_sink
from watch_helpers import free_tcp_port

HANG_GUARD_S = 90  # a hang guard, not a claim on time (the waits are 15-60 s)


def _policy(net, sink, bandwidth):
    rule = {"host": "sink.example.test", "ports": [sink.port], "tier": 0,
            "rate": {"bandwidth": bandwidth}}
    return net.policy([rule], static_extra={"sink.example.test": SINK_IP})


def _chunks(data, size=4096):
    """<data> as chunks of <size> bytes, without the last-chunk."""
    return b"".join(b"%x\r\n" % len(data[i:i + size]) + data[i:i + size] + b"\r\n"
                    for i in range(0, len(data), size))


def _end_of(gw, ev):
    return gw.wait_events("agent_egress_end", timeout=HANG_GUARD_S, id=ev["id"])[0]


@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
@pytest.mark.parametrize("unix", [False, True], ids=["tcp_end", "unix_close"])
def test_upload_ended_in_its_wait_is_cut_then(gateway, net, unix, chunked):
    # A POST of 100000 bytes whose client sent 24 KiB and then ended (a TCP
    # FIN, a unix socket's close) under 1 KiB/s: the body can never be
    # whole, and the gateway holds what the bucket has not let go yet
    # (some 23 KiB, 23 s of it). Its end is seen in the wait and the
    # exchange cut, what it held not sent. Before, it went on sending all
    # 24 KiB at 1 KiB/s and only then read the end: bytes_up 24576 and the
    # end logged 23 s after the client left.
    # Chunked, 24 KiB of chunks without the last-chunk (0 CRLF CRLF): what
    # the gateway holds and the client's socket still has queued is run
    # through a copy of the body's framer (nothing consumed), which finds
    # no last-chunk. Before, a chunked body's end was taken as unknowable:
    # bytes_up 24624 (every chunk), the end logged 23 s after the client's;
    # now 0.1 s after it, bytes_up under 1 KiB.
    sink = HashSink(SINK_IP)
    try:
        gw = gateway(_policy(net, sink, "1KiB/s"), unix=unix, tcp=not unix)
        s = open_conn(gw, timeout=30)
        if chunked:
            framing, body = b"Transfer-Encoding: chunked", _chunks(pattern_bytes(24 * KIB))
        else:
            framing, body = b"Content-Length: 100000", pattern_bytes(24 * KIB)
        s.sendall(b"POST http://sink.example.test:%d/up HTTP/1.1\r\nHost: sink.example.test:%d\r\n"
                  b"%s\r\n\r\n" % (sink.port, sink.port, framing) + body)
        ev = gw.wait_events(path="/up")[-1]
        _at_sink(sink, 1)  # the upload moves: the bucket holds the rest back
        s.close()
        end = _end_of(gw, ev)
        assert end["status"] is None, end
        assert end["bytes_up"] < len(body) // 2, end
        assert sink.received < len(body) // 2
    finally:
        sink.stop()


def test_tunnel_reset_while_its_first_bytes_wait(gateway, net):
    # A second tunnel whose first bytes wait for a bucket the first one put
    # in debt (some 4 KiB under 256 B/s: 15 s): its client resets the
    # connection. The wait ends there: the bytes are never sent, the
    # upstream is reset. Before, they went 15 s later, into a tunnel whose
    # client was gone (bytes_up 1001).
    sink = HashSink(SINK_IP)
    t1 = t2 = None
    try:
        gw = gateway(_policy(net, sink, "256B/s"))
        t1 = connect(gw, "sink.example.test:%d" % sink.port)
        assert t1.status == 200
        t1.sock.sendall(b"\0" + pattern_bytes(15 * KIB))  # neither TLS nor HTTP: opens at once
        _at_sink(sink, 1)
        t2 = connect(gw, "sink.example.test:%d" % sink.port)
        assert t2.status == 200
        t2.sock.sendall(b"\0" + pattern_bytes(1000))
        # Once its line is out, its first bytes were read and judged, and
        # nothing reads its client or watches for a hang-up until they wait
        # for the bucket (open_tunnel(), conn_after_log()): the reset,
        # whenever it comes, is first seen in that wait.
        ev = gw.wait_events(method="CONNECT", count=2)[-1]
        t2.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        t2.close()  # a reset
        t2 = None
        end = _end_of(gw, ev)
        assert end["bytes_up"] == 0, end
    finally:
        for t in (t1, t2):
            if t is not None:
                t.close()
        sink.stop()


def test_open_tunnel_reset_while_its_bytes_wait(gateway, net):
    # An open tunnel under 256 B/s whose client sent 15 KiB at once: its
    # first bytes put the bucket in debt, and the rest waits for it in the
    # client's socket, not read. The client resets the connection: the
    # tunnel ends within a refill step (a second at most), its upstream
    # reset, what the client had sent before its reset not sent. Before,
    # the tunnel went on reading and sending it all at 256 B/s and ended
    # 58 s later (bytes_up 15361).
    sink = HashSink(SINK_IP)
    t = None
    try:
        gw = gateway(_policy(net, sink, "256B/s"))
        t = connect(gw, "sink.example.test:%d" % sink.port)
        assert t.status == 200
        data = b"\0" + pattern_bytes(15 * KIB)  # neither TLS nor HTTP: opens at once
        t.sock.sendall(data)
        ev = gw.wait_events(method="CONNECT")[-1]
        _at_sink(sink, 1)  # the tunnel is open; the bucket holds the rest back
        t.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        t.close()  # a reset
        t = None
        end = _end_of(gw, ev)
        assert end["bytes_up"] < len(data), end
    finally:
        if t is not None:
            t.close()
        sink.stop()


class TickSink(HashSink):
    """A HashSink that, once it has read bytes, sends a byte every 20 ms
    while it reads on: a server that keeps talking to the client."""

    def _serve(self, c):
        with c:
            c.settimeout(0.02)
            deadline = time.monotonic() + HANG_GUARD_S
            try:
                while time.monotonic() < deadline:
                    try:
                        d = c.recv(65536)
                        if not d:
                            break
                        self.received += len(d)
                    except socket.timeout:
                        pass
                    if self.received > 0:
                        c.send(b"t")
            except OSError:
                pass


def _tunnel_to(gateway, net, sink, bandwidth, first):
    """A gateway under <bandwidth> and a tunnel through it to <sink>, <first>
    sent: (the gateway, the Tunnel, its agent_egress line)."""
    gw = gateway(_policy(net, sink, bandwidth))
    t = connect(gw, "sink.example.test:%d" % sink.port, timeout=HANG_GUARD_S)
    assert t.status == 200
    t.sock.sendall(first)
    return gw, t, gw.wait_events(method="CONNECT")[-1]


def test_open_tunnel_reset_met_by_a_write_while_its_bytes_wait(gateway, net):
    # As test_open_tunnel_reset_while_its_bytes_wait, under 1 KiB/s, but
    # the upstream writes to the client every 20 ms: the gateway's write
    # meets the reset first and takes its error, so the client's socket no
    # longer reports one when the refill looks. The reset ends the wait all
    # the same: what the client sent before it is not sent on (else
    # bytes_up 15361, 15 s later).
    sink = TickSink(SINK_IP)
    try:
        data = b"\0" + pattern_bytes(15 * KIB)  # neither TLS nor HTTP: opens at once
        gw, t, ev = _tunnel_to(gateway, net, sink, "1KiB/s", data)
        _at_sink(sink, 1)
        assert t.sock.recv(1) == b"t"  # the upstream writes to the client
        t.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        t.close()  # a reset
        assert _end_of(gw, ev)["bytes_up"] < len(data)
    finally:
        sink.stop()


class EndFirstSink(HashSink):
    """A HashSink that ends its side at the first bytes it reads, then reads
    on to the end: a server that answered and closes its half first."""

    def _serve(self, c):
        with c:
            c.settimeout(HANG_GUARD_S)
            try:
                ended = False
                while True:
                    d = c.recv(65536)
                    if not d:
                        break
                    self.received += len(d)
                    if not ended:
                        c.shutdown(socket.SHUT_WR)
                        ended = True
            except OSError:
                pass


def test_open_tunnel_end_after_its_upstreams_is_not_a_reset(gateway, net):
    # The upstream ends its side first (the tunnel passes its FIN on), then
    # the client sends 24 KiB under 4 KiB/s and closes its connection, a
    # FIN behind them. The client's socket, ended both ways, is then
    # TCP_CLOSE as a reset leaves it, but nothing was reset: the bytes
    # waiting for the bucket go to the last. Before, the refill's look
    # took the close for a reset and cut the tunnel (bytes_up 4178 of 24677).
    sink = EndFirstSink(SINK_IP)
    try:
        first = b"\0" + pattern_bytes(100)  # neither TLS nor HTTP: opens at once
        gw, t, ev = _tunnel_to(gateway, net, sink, "4KiB/s", first)
        assert t.sock.recv(1) == b""  # the upstream's end, passed on
        rest = pattern_bytes(24 * KIB)
        t.sock.sendall(rest)
        t.close()  # a FIN: nothing unread on the client's side
        end = _end_of(gw, ev)
        assert end["bytes_up"] == len(first) + len(rest), end
        _at_sink(sink, len(first) + len(rest))
    finally:
        sink.stop()


@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
@pytest.mark.parametrize("unix", [False, True], ids=["tcp_end", "unix_end"])
def test_upload_whole_before_its_end_goes_on(gateway, net, unix, chunked):
    # The other side of the cut above: a client that sent its whole body and
    # then ended its side (shutdown, as `curl -T -` and HTTP/1.0 clients
    # may) while the bucket still holds most of it back: the body can still
    # be whole, so the gateway sends it at the bucket's pace and the answer
    # comes back on the half-closed connection. Chunked, the framer finds
    # the last-chunk (with a trailer section) among the bytes left.
    gw = gateway(net.policy([api_rule(net, rate={"bandwidth": "4KiB/s"})]), unix=unix, tcp=not unix)
    data = pattern_bytes(16 * KIB)
    if chunked:
        headers, body = {"Transfer-Encoding": "chunked"}, _chunks(data) + b"0\r\nX-Sum: 1\r\n\r\n"
        up = len(_chunks(data)) + 5  # the trailer section is not sent: "0\r\n\r\n"
    else:
        headers, body, up = {"Content-Length": str(len(data))}, data, len(data)
    s = open_conn(gw, timeout=HANG_GUARD_S)
    try:
        s.sendall(build_request("POST", net.url("/whole"), headers=headers) + body)
        s.shutdown(socket.SHUT_WR)
        r = read_response(s, "POST")
    finally:
        s.close()
    assert r.status == 200
    assert json.loads(r.body)["body_len"] == len(data)
    _, end = gw.decided(path="/whole")
    assert end["status"] == 200 and end["bytes_up"] == up, end


EARLY = "early.example.test"


def test_upload_answered_then_ended_in_its_wait_gets_its_answer(gateway, net):
    # The origin refuses a paused upload early (413, with a body of 320 KiB,
    # more than the client's unix socket takes while it does not read) and
    # the gateway, the answer whole in its hands, closes the upstream:
    # nothing more goes up. The client then ends its side in the middle of
    # its body and reads the answer only later, as a slow client would.
    # That answer waits for nothing but the client: it is delivered, and
    # logged with its status and size. Before, the hang-up check still took
    # the exchange for an upload waiting for its bucket (the bucket's timer,
    # armed before the answer came, had not fired yet: under 1 s) and cut
    # it 100 ms after the end: the client got 232051 of the 327680 bytes.
    # The client reads once no upload waits for its bucket any more (that
    # timer fired, or the exchange was cut), from /metrics: the hang-up
    # check, every 100 ms, had its chance meanwhile.
    answer = pattern_bytes(320 * KIB)
    closed, answer_now = threading.Event(), threading.Event()

    def script(conn, stop, _):
        if not answer_now.wait(HANG_GUARD_S):
            return  # never asked to answer: the test fails on it
        conn.sendall(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n" % len(answer) + answer)
        try:
            while conn.recv(65536):  # until the gateway closes (it has the answer)
                pass
        except socket.timeout:
            return  # never closed: the test fails on it
        except OSError:
            pass  # a reset: what it did not take of the body is dropped
        closed.set()
        stop.wait(HANG_GUARD_S)

    with ScriptedUpstream(script) as up:
        rule = {"host": EARLY, "ports": [up.port], "tier": 0, "rate": {"bandwidth": "1KiB/s"}}
        admin = free_tcp_port()
        gw = gateway(net.policy([rule], static_extra={EARLY: up.IP}), unix=True, tcp=False,
                     args=["--admin", str(admin)], env=FRESH_METRICS)
        s = open_conn(gw, timeout=HANG_GUARD_S)
        try:
            # A head of 8 KiB puts the bucket in debt: the body waits a
            # second at a time, the timer's longest.
            s.sendall(b"POST http://%s:%d/early HTTP/1.1\r\nHost: %s:%d\r\nX-Pad: %s\r\n"
                      b"Content-Length: 100000\r\n\r\n"
                      % (EARLY.encode(), up.port, EARLY.encode(), up.port, b"p" * 8192)
                      + pattern_bytes(4 * KIB))
            # the body waits for its bucket (the gauge the wait below reads)
            poll(lambda: bandwidth_waiting(admin) == 1, timeout=HANG_GUARD_S,
                 what="the upload to wait for its bucket")
            answer_now.set()
            assert closed.wait(HANG_GUARD_S), "the gateway never closed the upstream"
            s.shutdown(socket.SHUT_WR)
            ev = gw.wait_events(path="/early")[-1]
            # The slow client takes its time: until the bucket's timer,
            # which the cut needed, has fired (at most 1 s).
            poll(lambda: bandwidth_waiting(admin) == 0, timeout=HANG_GUARD_S,
                 what="the upload's bucket timer to fire")
            got = recv_until_close(s)
        finally:
            s.close()
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 "), got[:200]
    assert body == answer, "%d of %d bytes of the answer" % (len(body), len(answer))
    end = _end_of(gw, ev)
    assert end["status"] == 413 and end["bytes_down"] == len(answer), end
    assert end["bytes_up"] < 4 * KIB, end  # nothing went up after the answer
