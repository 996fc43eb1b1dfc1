"""Webhook answers framed in hostile ways, on a keep-alive connection: bytes
past an answer, answers split across reads, answers that end by a close.
Every alert must be answered by the server for itself before it counts as
delivered. Loopback only."""

import json
import socket
import ssl
import threading
import time

import pytest

from gate_client import poll, request
from watch_helpers import free_tcp_port, read_request_body, webhook_label, webhook_tls_env
from test_watch_sinks import _metric_value, _metrics, rules

OK0 = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def answer_of_size(total):
    """A 200 with a body, <total> bytes in all, head included."""
    for n in range(total):
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n
        if len(head) + n == total:
            return head + b"x" * n
    raise AssertionError(total)


class KeepAlive:
    """A keep-alive webhook on 127.0.0.1 (https:// with <tls>). For each
    request it calls answer(c, conn, k, alert) (conn: the connection's
    number from 0, k: the request's number on it from 0), which sends what
    it likes and returns True when the connection is to be read on. The
    alerts a server meant to answer (answer() put them in self.answered)
    and every alert received are recorded."""

    def __init__(self, answer, tls=None):
        self.answer = answer
        self.answered, self.received = [], []
        self.ctx = None
        if tls is not None:
            self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ctx.load_cert_chain(*tls)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        self._conns = 0
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _serve(self, c, conn):
        try:
            c.settimeout(10)
            if self.ctx is not None:
                c = self.ctx.wrap_socket(c, server_side=True)
            k = 0
            while not self._stop:
                body = read_request_body(c)
                if body is None:
                    return
                alert = json.loads(body)
                self.received.append(alert)
                if not self.answer(self, c, conn, k, alert):
                    return
                k += 1
        except OSError:
            pass
        finally:
            c.close()

    def _run(self):
        self.sock.settimeout(0.1)
        for _ in range(600):  # at most a minute
            if self._stop:
                return
            try:
                c = self.sock.accept()[0]
                threading.Thread(target=self._serve, args=(c, self._conns), daemon=True).start()
                self._conns += 1
            except socket.timeout:
                pass

    def stop(self):
        self._stop = True
        self._t.join(5)
        self.sock.close()


def _start(gateway, net, tmp_path, scheme, answer, admin):
    tls, env = webhook_tls_env(tmp_path, scheme, "hook", "IP:127.0.0.1")
    srv = KeepAlive(answer, tls)
    url = "%s://127.0.0.1:%d/hook" % (scheme, srv.port)
    # what an answer() may wait for: the alerts the sink holds, the one
    # being sent included
    srv.queued = lambda: _metric_value(
        _metrics(admin), 'sluice_webhook_queue{sink="%s"}' % webhook_label(url)) or 0
    alerts = {"first_contact": True, "sinks": [{"webhook": url}]}
    args = ["--alerts", str(tmp_path / "a.jsonl"), "--grace", "1s", "--admin", str(admin)]
    return gateway(net.policy(rules(net), alerts=alerts), args=args, env=env), srv, url


def _all_answered(gw, srv, hosts, admin, url):
    """Waits until the sink's queue is empty, then checks that every alert
    was answered by the server for itself."""
    queue = 'sluice_webhook_queue{sink="%s"}' % webhook_label(url)
    poll(lambda: len(srv.received) >= len(hosts) or None, timeout=15,
         what="the alerts at the webhook")
    poll(lambda: _metric_value(_metrics(admin), queue) == 0 or None, timeout=15,
         what="the queue emptied (stderr: %r)" % gw.stderr())
    got = sorted(a["host"] for a in srv.answered)
    assert sorted(set(got)) == sorted(hosts), (
        "counted delivered without an answer of its own: answered %r, received %r"
        % (got, [a["host"] for a in srv.received]))


def _deliver(gateway, net, tmp_path, scheme, answer, n, check=None):
    """Raises <n> first_contact alerts at once for a KeepAlive webhook that
    answers with <answer>; checks that each was delivered by an answer of
    its own, then calls check(gw, srv, url, hosts)."""
    admin = free_tcp_port()
    gw, srv, url = _start(gateway, net, tmp_path, scheme, answer, admin)
    try:
        hosts = ["nowhere%d.example.test" % i for i in range(n)]
        for h in hosts:
            request(gw, "GET", "http://%s/" % h)
        _all_answered(gw, srv, hosts, admin, url)
        if check is not None:
            check(gw, srv, url, hosts)
    finally:
        srv.stop()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_bytes_past_an_answer_that_ends_a_read_are_not_the_next_answer(gateway, net, tmp_path,
                                                                       scheme):
    # The gateway reads a socket 4096 bytes at a time. An answer that ends
    # exactly there, followed in the same write by a second 200, left that
    # 200 in the socket, not in the connection's input, when the answer was
    # complete: the next alert, sent at once on the kept connection, took
    # it for its answer, counted delivered though the server never answered
    # it (it read that request and waited).
    def answer(srv, c, conn, k, alert):
        if k > 0:
            return True  # a later request on this connection: never answered
        srv.answered.append(alert)
        # the other two alerts queue up behind this one, so that the next
        # goes at once on this connection when its answer is complete
        poll(lambda: srv.queued() >= 3 or None, timeout=15,
             what="the other alerts queued behind the first")
        c.sendall(answer_of_size(4096) + OK0)
        return True

    _deliver(gateway, net, tmp_path, scheme, answer, 3)


def _close_delimited(c):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nreceived, thanks")
    return False  # the close ends the body


def _chunked_with_trailers(c):
    c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"
              b"5\r\nhello\r\n0\r\nX-Sum: 5\r\nX-More: a\r\n\r\n")
    return True


def _no_content(c):
    c.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
    return True


def _answer_then_close(c):
    # a kept-alive answer, then the server closes (over TLS without
    # close_notify): the next alert goes on a new connection
    c.sendall(OK0)
    time.sleep(0.05)
    return False


def _answer_then_close_notify(c):
    c.sendall(OK0)
    if isinstance(c, ssl.SSLSocket):
        c.unwrap()
    else:
        c.shutdown(socket.SHUT_WR)
    return False


def _answer_in_pieces(c):
    # a read boundary inside the head, one inside the body
    for piece in (b"HTTP/1.1 200 OK\r\nContent-Le", b"ngth: 4\r\n\r\nab", b"cd"):
        c.sendall(piece)
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("shape", [_close_delimited, _chunked_with_trailers, _no_content,
                                   _answer_then_close, _answer_then_close_notify,
                                   _answer_in_pieces])
def test_answers_framed_every_valid_way_deliver(gateway, net, tmp_path, scheme, shape):
    # Each alert answered once, in a framing HTTP/1.1 allows: every alert is
    # delivered, once, in order, and nothing is told on standard error.
    def answer(srv, c, conn, k, alert):
        srv.answered.append(alert)
        return shape(c)

    def check(gw, srv, url, hosts):
        assert [a["host"] for a in srv.received] == hosts
        gw.stop()  # a failed attempt told, through the relay, is in the file then
        assert "sluice: webhook" not in gw.stderr(), gw.stderr()

    _deliver(gateway, net, tmp_path, scheme, answer, 3, check)


def _reset_mid_head(c):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Len")
    time.sleep(0.1)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    return False


def _cut_body(c):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcde")
    return False


def _huge_head(c):
    c.sendall(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n\r\n")
    return False


def _bad_length(c):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n")
    return False


def _status_only(c):
    c.sendall(b"HTTP/1.1 200 OK\r\n")
    return False


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("shape", [_reset_mid_head, _cut_body, _huge_head, _bad_length,
                                   _status_only])
def test_answers_that_are_not_whole_are_no_delivery(gateway, net, tmp_path, scheme, shape):
    # The first attempt of each alert gets an answer that is not a whole,
    # valid one (a 200 status line in it all the same): it is no delivery;
    # the alert is sent again and delivered by a real answer.
    tried = set()

    def answer(srv, c, conn, k, alert):
        if alert["host"] not in tried:
            tried.add(alert["host"])
            return shape(c)
        srv.answered.append(alert)
        c.sendall(OK0)
        return True

    def check(gw, srv, url, hosts):
        # told on the loop at the failed attempt, before the retry
        gw.wait_stderr("sluice: webhook %s: cannot deliver" % webhook_label(url))

    _deliver(gateway, net, tmp_path, scheme, answer, 2, check)


def _reset(c):
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    return False


def _close(c):
    return False


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("shape, reason", [
    (_reset, "the connection was reset before the answer"),
    (_close, "the connection closed before the answer"),
])
def test_a_connection_ended_before_the_answer_says_how(gateway, net, tmp_path, scheme, shape,
                                                       reason):
    # The server reads the alert, then resets or closes the connection (over
    # TLS without close_notify): the failure says which, for https:// too,
    # where it said "TLS: error:00000005:lib(0)::reason(5)", libevent's
    # SSL_ERROR_SYSCALL taken for an OpenSSL error code.
    def answer(srv, c, conn, k, alert):
        if conn == 0:
            return shape(c)
        srv.answered.append(alert)
        c.sendall(OK0)
        return True

    def check(gw, srv, url, hosts):
        want = "sluice: webhook %s: cannot deliver: %s; retrying" % (webhook_label(url), reason)
        gw.wait_stderr(want)

    _deliver(gateway, net, tmp_path, scheme, answer, 1, check)
