"""Loopback servers the gateway tests talk to, through the gateway.

Every server binds an ephemeral port on a 127.0.0.x address and records what
reached it, so a test can prove that a denied request never went upstream and
that Proxy-Authorization never left the gateway. Standard library only.
"""

import hashlib
import json
import random
import select
import signal
import socket
import ssl
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from dns_world import read_question, rr
from gate_client import connect, poll, recv_line

SOCKET_TIMEOUT = 10.0

# Deterministic payloads: a block whose length is prime, so a reordered or
# dropped piece changes the hash.
_BLOCK = random.Random(20261130).randbytes(65521)


def pattern_bytes(n):
    """The first <n> bytes of the test payload stream."""
    reps = n // len(_BLOCK) + 1
    return (_BLOCK * reps)[:n]


def _iter_pattern(n, piece=65536):
    sent = 0
    while sent < n:
        k = min(piece, n - sent)
        # offset into the repeating block
        off = sent % len(_BLOCK)
        chunk = (_BLOCK[off:] + _BLOCK * (k // len(_BLOCK) + 1))[:k]
        yield chunk
        sent += k


def send_ok(conn, size):
    """Sends on <conn> a 200 head for a <size>-byte body, then the pattern
    stream's first <size> bytes, 1 MiB at a time. The head goes first and
    the body is never built whole: building 32 MiB before the first byte
    took over a second on a loaded machine, longer than the idle_timeout
    (1 s) a gateway under test gives its origin to answer, which it then
    answered 502 (the upstream did not answer in time)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
    for piece in _iter_pattern(size, 1 << 20):
        conn.sendall(piece)


class Recorded:
    """One request as the upstream saw it."""

    def __init__(self, method, path, headers, body, chunked, peer):
        self.method = method
        self.path = path
        self.headers = headers  # list of (name, value), as received
        self.body = body
        self.chunked = chunked  # the body came with Transfer-Encoding: chunked
        self.peer = peer

    def header(self, name):
        vals = [v for k, v in self.headers if k.lower() == name.lower()]
        return vals[0] if vals else None

    def has_header(self, name):
        return any(k.lower() == name.lower() for k, _ in self.headers)

    def __repr__(self):
        return "Recorded(%s %s, %d body bytes)" % (self.method, self.path, len(self.body))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT

    def log_message(self, fmt, *args):  # keep pytest output quiet
        pass

    def _read_chunked(self):
        body = bytearray()
        for _ in range(1_000_000):
            line = self.rfile.readline(4096)
            if not line:
                raise ConnectionError("eof in chunked body")
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                for _ in range(100):  # trailers
                    t = self.rfile.readline(8192)
                    if t in (b"\r\n", b"\n", b""):
                        break
                return bytes(body)
            body += self.rfile.read(size)
            self.rfile.readline(16)
        raise ConnectionError("too many chunks")

    def _handle(self):
        up = self.server.upstream
        te = self.headers.get("Transfer-Encoding", "")
        chunked = "chunked" in te.lower()
        if chunked:
            body = self._read_chunked()
        else:
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
        rec = Recorded(self.command, self.path, list(self.headers.items()), body, chunked,
                       self.client_address)
        up.record(rec, self.request)

        parts = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(parts.query).items()}
        route = parts.path
        if route == "/large":
            n = int(q.get("n", "0"))
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            if self.command != "HEAD":
                for piece in _iter_pattern(n):
                    self.wfile.write(piece)
            return
        if route == "/chunked":
            n = int(q.get("n", "0"))
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            data = pattern_bytes(n)
            sizes = [1, 7, 100, 4096, 65536]
            i = 0
            off = 0
            while off < len(data):
                k = sizes[i % len(sizes)]
                i += 1
                piece = data[off:off + k]
                off += len(piece)
                self.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        if route == "/slow":
            ms = min(int(q.get("ms", "500")), 10_000)
            time.sleep(ms / 1000.0)
        payload = json.dumps({
            "server": up.name,
            "method": self.command,
            "path": self.path,
            "body_len": len(body),
            "body_sha256": hashlib.sha256(body).hexdigest(),
        }).encode() + b"\n"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("X-Upstream", up.name)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle

    def do_BREW(self):  # an extension method
        self._handle()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def get_request(self):
        # the listening socket does not block (UpstreamHTTP): a connection
        # clear() took from the backlog between select() and here is not
        # waited for (OSError, dropped by _handle_request_noblock)
        with self.upstream._accept_lock:
            sock, addr = super().get_request()
            sock.setblocking(True)
            self.upstream.note_connection(sock)
        return sock, addr

    def handle_error(self, request, client_address):
        # a connection the gateway cut on purpose (a client that left mid-body):
        # kept for the test to look at, not printed between pytest's dots
        self.upstream.note_error(sys.exc_info()[1], request)

    def shutdown_request(self, request):
        self.upstream.forget_connection(request)
        super().shutdown_request(request)


class UpstreamHTTP:
    """A threaded HTTP/1.1 origin on <ip>:<ephemeral> that records requests,
    of the connections accepted since its last clear() only: a request a
    test left in flight (its body still coming when the next test on the
    worker clears the records) is not the next test's."""

    def __init__(self, ip, name):
        self.name = name
        self.ip = ip
        self._lock = threading.Lock()
        self._requests = []
        self._connections = 0
        self._generation = 0  # how many clear()s so far
        self._accepted_in = {}  # connection's socket -> the generation it was accepted in
        # held from accept() to noting the connection's generation, and by
        # clear() taking the backlog
        self._accept_lock = threading.Lock()
        self.errors = []  # exceptions raised by handlers (connections cut mid-request)
        self.server = _Server((ip, 0), _Handler)
        self.server.upstream = self
        self.server.socket.setblocking(False)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def _current(self, conn):
        """Whether <conn> was accepted since the last clear(); call with
        self._lock held."""
        return self._accepted_in.get(conn) == self._generation

    def record(self, rec, conn):
        with self._lock:
            if self._current(conn):
                self._requests.append(rec)

    def note_connection(self, conn):
        with self._lock:
            self._connections += 1
            self._accepted_in[conn] = self._generation

    def forget_connection(self, conn):
        with self._lock:
            self._accepted_in.pop(conn, None)

    def note_error(self, exc, conn):
        with self._lock:
            if self._current(conn):
                self.errors.append(exc)

    @property
    def requests(self):
        with self._lock:
            return list(self._requests)

    @property
    def connections(self):
        with self._lock:
            return self._connections

    def _take_backlog(self):
        """Accepts, in the generation before a clear(), the connections the
        kernel has completed but the serve loop not yet taken (as
        LoopbackServer's): a previous test's request waiting there was
        recorded as the next test's."""
        with self._accept_lock:
            while True:
                try:
                    conn, addr = self.server.socket.accept()
                except OSError:  # BlockingIOError: the backlog is empty
                    break
                conn.setblocking(True)
                self.note_connection(conn)
                self.server.process_request(conn, addr)

    def clear(self):
        self._take_backlog()
        with self._lock:
            self._generation += 1
            self._requests.clear()
            self._connections = 0
            self.errors.clear()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class LoopbackServer:
    """A TCP listener on <ip>:<ephemeral> that serves every accepted
    connection in a thread of its own with self._serve(conn), counting them
    in <accepted>. Subclasses set what _serve needs before calling
    __init__, which starts accepting. A context manager: leaving it stops
    the server."""

    def __init__(self, ip, backlog=16):
        self.ip = ip
        self._lock = threading.Lock()
        self.accepted = 0
        # which clear() a connection was accepted after: a connection a
        # test left in flight (its handshake still going when the next
        # test on the worker clears the records) is not the next test's
        self.generation = 0
        self._conn_gen = threading.local()
        # held from accept() to reading the generation, and by clear_backlog()
        self._accept_lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, 0))
        self.sock.listen(backlog)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set():
            with self._accept_lock:
                try:
                    conn, _ = self.sock.accept()
                except (socket.timeout, OSError):
                    continue
                self._start(conn)

    def _start(self, conn):
        with self._lock:
            self.accepted += 1
            gen = self.generation
        threading.Thread(target=self._serve_of, args=(conn, gen), daemon=True).start()

    def _take_backlog(self):
        """Accepts, in the generation before a clear(), the connections the
        kernel has completed but this loop not yet taken: on a loaded
        machine a previous test's connection (its TLS hello already sent)
        waited there and, taken after the clear, counted as the next
        test's (a second SNI). Call before bumping the generation."""
        with self._accept_lock:
            self.sock.setblocking(False)
            try:
                while True:
                    try:
                        conn, _ = self.sock.accept()
                    except (BlockingIOError, OSError):
                        break
                    conn.setblocking(True)
                    self._start(conn)
            finally:
                self.sock.settimeout(0.1)

    def _serve_of(self, conn, gen):
        self._conn_gen.value = gen
        self._serve(conn)

    def _current(self):
        """Whether the connection this thread serves was accepted since
        the last clear(); call with self._lock held."""
        return getattr(self._conn_gen, "value", self.generation) == self.generation

    def _serve(self, conn):
        raise NotImplementedError

    def stop(self):
        self._stop.set()
        self._thread.join(2)
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class UpstreamTLS(LoopbackServer):
    """A TLS origin (self-signed cert) that records SNI names, handshakes and
    request heads, and answers every request with a small body."""

    BODY = b"hello over tls\n"

    def __init__(self, ip, certfile, keyfile):
        self.sni = []
        self.handshakes = 0
        self.heads = []
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(certfile, keyfile)
        self.ctx.sni_callback = self._on_sni
        super().__init__(ip, backlog=64)

    def _on_sni(self, sslsock, name, ctx):
        with self._lock:
            if self._current():
                self.sni.append(name)

    def _serve(self, conn):
        conn.settimeout(SOCKET_TIMEOUT)
        try:
            tls = self.ctx.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            conn.close()
            return
        with self._lock:
            if self._current():
                self.handshakes += 1
        try:
            head = b""
            for _ in range(1000):
                if b"\r\n\r\n" in head:
                    break
                d = tls.recv(4096)
                if not d:
                    break
                head += d
            if b"\r\n\r\n" in head:
                with self._lock:
                    if self._current():
                        self.heads.append(head)
                tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                            b"Connection: close\r\n\r\n" % len(self.BODY) + self.BODY)
            try:
                tls.unwrap()
            except (ssl.SSLError, OSError):
                pass
        except (ssl.SSLError, OSError):
            pass
        finally:
            tls.close()

    def clear(self):
        self._take_backlog()
        with self._lock:
            self.generation += 1
            self.accepted = 0
            self.sni = []
            self.handshakes = 0
            self.heads = []


class BannerServer(LoopbackServer):
    """A "server speaks first" upstream (SMTP-like): sends a banner on
    accept, then reads one line and answers it, then closes."""

    BANNER = b"220 banner.example.test ESMTP sluice-test ready\r\n"
    REPLY = b"221 2.0.0 bye\r\n"

    def __init__(self, ip):
        self.received = []
        super().__init__(ip)

    def _serve(self, conn):
        conn.settimeout(SOCKET_TIMEOUT)
        try:
            conn.sendall(self.BANNER)
            line = recv_line(conn)
            with self._lock:
                if self._current():
                    self.received.append(line)
            if line.endswith(b"\n"):
                conn.sendall(self.REPLY)
        except OSError:
            pass
        finally:
            conn.close()

    def clear(self):
        self._take_backlog()
        with self._lock:
            self.generation += 1
            self.accepted = 0
            self.received = []


def stop_holding_a_banner_tunnel(gw, net, timeout=10):
    """Opens a CONNECT tunnel to net.banner through <gw> (its policy allows
    banner.example.test), reads the banner, sends the gateway SIGTERM and
    waits until its listener refuses connections: the gateway is then in
    its stop, held by the tunnel for --grace. Returns the Tunnel (a 200),
    whose client ends it with QUIT."""
    t = connect(gw, "banner.example.test:%d" % net.banner.port)
    assert t.status == 200, t.status
    t.sock.settimeout(10)
    assert recv_line(t.sock) == BannerServer.BANNER
    gw.proc.send_signal(signal.SIGTERM)

    def refused():
        try:
            socket.create_connection((gw.host, gw.port), timeout=1).close()
        except OSError:
            return True
        return False
    poll(refused, timeout=timeout, interval=0.05, what="the listener closed by the stop")
    return t


ECHO_IDLE_GUARD_S = 300  # an echoed connection's quiet time, at most (a hang guard)


class EchoServer(LoopbackServer):
    """A plain TCP upstream that sends back every byte it receives, until
    its peer ends the connection."""

    def _serve(self, conn):
        # a hang guard only: a tunnel may rightly stay quiet for as long as
        # its test goes on (the first of 16 tunnels held open across 16
        # reloads was quiet 27.5 s under seven other test runs; at 30 s the
        # echo closed it and the test saw "the tunnel was closed")
        conn.settimeout(ECHO_IDLE_GUARD_S)
        try:
            while True:
                d = conn.recv(65536)
                if not d:
                    break
                conn.sendall(d)
        except OSError:
            pass
        finally:
            conn.close()


class ScriptedUpstream(LoopbackServer):
    """A loopback origin on 127.0.0.7 that answers each connection's first
    request with <script>(conn, stop, received): raw bytes and pauses of its
    choosing; <received> is what arrived so far (the head and more)."""

    IP = "127.0.0.7"

    def __init__(self, script):
        self.script = script
        self.errors = []
        super().__init__(self.IP)

    def _serve(self, conn):
        conn.settimeout(10)
        try:
            buf = b""
            while b"\r\n\r\n" not in buf:
                d = conn.recv(4096)
                if not d:
                    return
                buf += d
            self.script(conn, self._stop, buf)
        except OSError as e:
            self.errors.append(e)
        finally:
            conn.close()


class FakeDNS:
    """A UDP name server on loopback: answers A records from <names> (a name
    maps to one IPv4 address or a list of them, answered in that order),
    NOERROR/empty for other types of known names, NXDOMAIN for the rest.
    Records every question (name, qtype)."""

    def __init__(self, ip, names=None):
        self.names = dict(names or {})
        self._lock = threading.Lock()
        self.queries = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((ip, 0))
        self.sock.settimeout(0.1)
        self.ip = ip
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(2048)
            except (socket.timeout, OSError):
                continue
            try:
                reply = self._answer(data)
            except (ValueError, IndexError, struct.error):
                continue
            if reply:
                try:
                    self.sock.sendto(reply, addr)
                except OSError:
                    pass

    def _answer(self, data):
        q = read_question(data)
        if q is None:
            return None
        qid, flags, question, labels, qtype = q
        qclass = struct.unpack("!H", question[-2:])[0]
        name = b".".join(labels).decode("ascii", "replace").lower()
        with self._lock:
            self.queries.append((name, qtype))
        rd = flags & 0x0100
        if name not in self.names:
            return struct.pack("!HHHHHH", qid, 0x8000 | rd | 0x0080 | 3, 1, 0, 0, 0) + question
        answers = b""
        count = 0
        if qtype == 1 and qclass == 1:
            addrs = self.names[name]
            for a in [addrs] if isinstance(addrs, str) else addrs:
                answers += rr(b"\xc0\x0c", 1, 60, socket.inet_aton(a))
                count += 1
        return struct.pack("!HHHHHH", qid, 0x8000 | rd | 0x0080, 1, count, 0, 0) + question + answers

    def clear(self):
        with self._lock:
            self.queries = []

    def stop(self):
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


class HeldDNS(FakeDNS):
    """A FakeDNS that holds every answer until <release> is set (at most
    20 s); <asked> is set at the first question."""

    def __init__(self, ip, names):
        self.asked = threading.Event()
        self.release = threading.Event()
        super().__init__(ip, names)

    def _answer(self, data):
        self.asked.set()
        self.release.wait(20)
        return super()._answer(data)

    def stop(self):
        self.release.set()
        super().stop()


class HeldName:
    """slow.example.test, whose answer a HeldDNS on <dns_ip> holds, naming
    a listener on 127.0.0.7:<port> that no one accepts from, so that what
    connected to it stays in its queue. <rule> allows it; <servers> is the
    policy's dns.servers. A context manager."""

    NAME = "slow.example.test"

    def __init__(self, dns_ip):
        self.dns = HeldDNS(dns_ip, {self.NAME: "127.0.0.7"})
        self.lst = socket.socket()
        self.lst.bind(("127.0.0.7", 0))
        self.lst.listen(4)
        self.port = self.lst.getsockname()[1]
        self.rule = {"host": self.NAME, "ports": [self.port], "tier": 0}
        self.servers = ["%s:%d" % (dns_ip, self.dns.port)]

    def end_then_release(self, gw, **match):
        """Waits for an agent_egress_end with the answer still held (a
        generous bound: the answer comes all the same then), releases it,
        and returns gw.decided(**match) and whether anything connected."""
        for _ in range(150):
            if gw.events("agent_egress_end"):
                break
            time.sleep(0.02)
        self.dns.release.set()
        ev, end = gw.decided(**match)
        return ev, end, select.select([self.lst], [], [], 0.5)[0] != []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.dns.stop()
        self.lst.close()


class FullListener:
    """A listener on <ip> (on <port>, default one the kernel picks) whose
    accept queue is full, so that the kernel drops a new SYN and the sender
    retries it a second later: a connect to it stays under way instead of
    completing inside connect(), and never completes until accept_all()
    starts taking connections, so the retried SYN gets in: each gets
    b"hello\\n", and b"pong\\n" when it sends b"ping\\n"."""

    def __init__(self, ip, port=0):
        self.srv = socket.socket()
        self.srv.bind((ip, port))
        self.srv.listen(1)
        self.port = self.srv.getsockname()[1]
        self.fillers = []
        for _ in range(3):  # the queue holds two; the third is left pending too
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect((ip, self.port))
            except BlockingIOError:
                pass
            self.fillers.append(s)
        self.accepted = []
        self.thread = None

    def accept_all(self, after, secs):
        def run():
            time.sleep(after)
            self.srv.settimeout(0.2)
            end = time.monotonic() + secs
            while time.monotonic() < end:
                try:
                    c, _ = self.srv.accept()
                except OSError:
                    continue
                self.accepted.append(c)
                threading.Thread(target=self._serve, args=(c,), daemon=True).start()
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    @staticmethod
    def _serve(c):
        try:
            c.sendall(b"hello\n")
            c.settimeout(5)
            if c.recv(100) == b"ping\n":
                c.sendall(b"pong\n")
        except OSError:
            pass

    def close(self):
        if self.thread is not None:
            self.thread.join(10)
        for s in self.fillers + self.accepted + [self.srv]:
            s.close()


def _bind(ip, kind, port):
    """A socket of <kind> bound to <ip>:<port> (without SO_REUSEADDR), or
    OSError."""
    s = socket.socket(socket.AF_INET, kind)
    try:
        s.bind((ip, port))
    except OSError:
        s.close()
        raise
    return s


def _bound_socket(ip, kind, port=0):
    """A socket of <kind> bound to <ip>:<port> (_bind()); with <port> 0, to
    a port below the kernel's ephemeral range when it can: a port the
    kernel handed out (bind to 0) goes back to the pool when it is closed,
    and before the test or the gateway binds it again, any bind to 0 on the
    machine (the other worker's servers, another suite's) may take it, or an
    outgoing connection as its local port (seen: EADDRINUSE for a webhook
    receiver bound after its gateway had tried it for a while). Ports are
    picked at random from 10000 up to the range's start, checked by the
    bind, falling back to the kernel's pick. The caller closes it."""
    if port:
        return _bind(ip, kind, port)
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    rng = random.Random()
    for _ in range(50 if low > 11000 else 0):
        try:
            return _bind(ip, kind, rng.randrange(10000, low))
        except OSError:
            continue
    return _bind(ip, kind, 0)


def free_port(ip="127.0.0.1", kind=socket.SOCK_STREAM):
    """A port that was free on <ip> a moment ago (_bound_socket()), for a
    server or a gateway the test starts on it. Nothing keeps it free: a
    test that needs nothing to listen on a port holds a RefusedPort."""
    with _bound_socket(ip, kind) as s:
        return s.getsockname()[1]


class RefusedPort:
    """A port of <ip> (all of the host's addresses for "0.0.0.0") where
    nothing listens for as long as this is held: a socket bound to it that
    never listens, without SO_REUSEADDR, so that no other socket can bind
    the port meanwhile, whatever its own options (Linux lets SO_REUSEADDR
    share a port only when both sockets set it). A port free_port() picked
    was only free a moment ago: another worker's server, or the test's own
    gateway or admin port, could take it, and a webhook aimed there was
    answered instead of refused. TCP: a SYN to the port is answered RST, a
    connect() refused. UDP (<kind> SOCK_DGRAM, on one address: connecting
    narrows a socket bound to all of them): the socket is connected to
    itself, so it takes no datagram of any other sender, which gets ICMP
    port unreachable. <port> 0 picks one (_bound_socket()); a port given
    that is taken raises OSError. A context manager: leaving it frees the
    port."""

    def __init__(self, ip="127.0.0.1", port=0, kind=socket.SOCK_STREAM):
        self.ip = ip
        self.sock = _bound_socket(ip, kind, port)
        self.port = self.sock.getsockname()[1]
        if kind == socket.SOCK_DGRAM:
            self.sock.connect((ip, self.port))

    def take(self):
        """Hands the bound socket over to a server that listens on it
        (watch_helpers.Receiver(bound=)): the port goes from refused to
        served with no moment in between for another socket to bind it. The
        caller owns the socket; close() then leaves it alone."""
        sock, self.sock = self.sock, None
        return sock

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
