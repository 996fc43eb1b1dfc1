"""Helpers for the watch tests: reading alert lines, timing them, and a
loopback webhook receiver. Standard library only; loopback only."""

import hashlib
import json
import os
import re
import socket
import sqlite3
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gate_client import poll
from gate_servers import free_port

ALERT_KEYS = ["ts", "event", "kind", "severity", "agent", "host", "tier", "id", "detail",
              "count"]


def read_lines(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    out = []
    for raw in data.split(b"\n")[:-1]:
        if raw.strip():
            out.append(json.loads(raw.decode("utf-8")))
    return out


def alerts(path, kind=None, **match):
    return [a for a in read_lines(path) if a.get("event") == "alert"
            and (kind is None or a["kind"] == kind)
            and all(a.get(k) == v for k, v in match.items())]


def wait_alert(path, kind, count=1, timeout=5.0, **match):
    """Waits for <count> alerts of <kind> in <path>; returns them. Checks the
    key order of each."""
    got = poll(lambda: (lambda a: a if len(a) >= count else None)(alerts(path, kind, **match)),
               timeout=timeout, what="%d %s alert(s) matching %r in %s" % (count, kind, match, path))
    for a in got:
        assert list(a.keys()) == ALERT_KEYS, "alert keys: %r" % list(a.keys())
    return got


def ts(s):
    """The Unix time of a log line's "ts" (UTC, as its Z says). Parsed
    naive, strptime's result was taken for local time: under TZ=Etc/GMT+1
    every stamp came out an hour late, and a test that waits until a stamp
    plus a period (test_write_burst_and_folding) waited an hour."""
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def assert_prompt(alert, gw, limit=1.0):
    """The alert was written within <limit> s of the event that caused it:
    its ts against the decision event's ts (same id), both stamped by the
    gateway, so the test's own clock (a loaded machine stalls the test, not
    the gateway's stamps) plays no part. An alert that names an id has its
    event in the log."""
    if alert["id"] is not None:
        evs = gw.events("agent_egress", id=alert["id"])
        assert evs, "no agent_egress event for the alert's id: %r" % alert
        lag = ts(alert["ts"]) - ts(evs[0]["ts"])
        assert -0.01 <= lag < limit, "alert %s came %.3fs after its event" % (alert, lag)


def wait_alert_timed(path, kind, timeout=5.0, before=0, **match):
    """Waits for alert number <before>+1 of <kind>; returns (alert, monotonic
    time it was seen). Call it right after the request (the line may already
    be there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = alerts(path, kind, **match)
        if len(got) > before:
            return got[before], time.monotonic()
        time.sleep(0.005)
    raise AssertionError("no new %s alert in %s within %.1fs" % (kind, path, timeout))


class _Hook(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        self.server.receiver.got(self.path, self.headers.get("Content-Type"), body)
        answer = self.server.receiver.answer
        self.send_response(self.server.receiver.status)
        if self.server.receiver.close_each:
            self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


class _HookServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def get_request(self):
        sock, addr = super().get_request()
        self.receiver.note_connection()
        ctx = self.receiver.tls
        if ctx is not None:
            # the handshake happens on the handler's first read, in its thread
            sock = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request, client_address):
        self.receiver.note_error()  # a refused handshake: counted, not printed


class Receiver:
    """A webhook receiver on 127.0.0.1:<port>, recording each POST. With
    <tls> (cert, key) it speaks HTTPS and records the SNI name of each
    handshake; with <close_each> it closes the connection after each answer;
    <answer> is the body of every answer. With <bound> (a socket bound on
    127.0.0.1, RefusedPort.take()) it listens on that socket, whose port a
    webhook was refused on until now, instead of binding <port>: no other
    socket could bind the port between the two."""

    def __init__(self, port=0, status=200, tls=None, close_each=False, answer=b"", bound=None):
        self.status = status
        self.answer = answer
        self.close_each = close_each
        self.posts = []
        self.sni = []
        self.connections = 0
        self.errors = 0
        self._lock = threading.Lock()
        self.tls = None
        if tls is not None:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(*tls)
            self.tls.sni_callback = self._on_sni
        if bound is None:
            self.server = _HookServer(("127.0.0.1", port), _Hook)
        else:
            self.server = _HookServer(bound.getsockname(), _Hook, bind_and_activate=False)
            self.server.socket.close()  # the one it made, never bound
            self.server.socket = bound
            self.server.server_address = bound.getsockname()
            self.server.server_activate()  # listen()
        self.server.receiver = self
        self.port = self.server.server_address[1]
        self._t = threading.Thread(target=self.server.serve_forever,
                                   kwargs={"poll_interval": 0.05}, daemon=True)
        self._t.start()

    def _on_sni(self, sslsock, name, ctx):
        with self._lock:
            self.sni.append(name)

    def note_connection(self):
        with self._lock:
            self.connections += 1

    def note_error(self):
        with self._lock:
            self.errors += 1

    def got(self, path, ctype, body):
        with self._lock:
            self.posts.append((path, ctype, json.loads(body)))

    def bodies(self):
        with self._lock:
            return [b for _, _, b in self.posts]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def self_signed(directory, name, san):
    """Writes a self-signed P-256 certificate for <name> with subjectAltName
    <san> (e.g. "DNS:localhost,IP:127.0.0.1") into <directory>; returns
    (cert, key) paths. A certificate trusted through SSL_CERT_FILE is its own
    anchor."""
    cert = os.path.join(str(directory), name + ".pem")
    key = os.path.join(str(directory), name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=" + name, "-addext", "subjectAltName=" + san, "-keyout", key,
                    "-out", cert], check=True, capture_output=True, timeout=30)
    return cert, key


def webhook_tls_env(directory, scheme, name, san):
    """For a webhook test of <scheme>: (tls, env), tls the (cert, key) of a
    self_signed() certificate the gateway trusts through env's SSL_CERT_FILE
    ("https"), or None ("http"); env also shortens the backoff to 50 ms."""
    tls, env = None, {"SLUICE_TEST_WEBHOOK_BACKOFF_MS": "50"}
    if scheme == "https":
        tls = self_signed(directory, name, san)
        env["SSL_CERT_FILE"] = tls[0]
    return tls, env


def store_key(url, listing=1):
    """The key the state store files the webhook <url>'s alerts under
    (util/weburl.h weburl_store_key()): "sha256:" and the hex SHA-256 of
    the URL, never the URL; " (listing N)" for the Nth listing."""
    key = "sha256:" + hashlib.sha256(url.encode()).hexdigest()
    return key if listing == 1 else "%s (listing %d)" % (key, listing)


def webhook_label(url):
    """How serve names the webhook <url> (no USER:PASSWORD@) on standard
    error and in /metrics (util/weburl.h weburl_label()): the URL itself
    with no path but "/" and no query, otherwise its scheme and host, then
    "/...#" and 8 hex digits of its SHA-256."""
    scheme, _, rest = url.partition("://")
    host = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if rest in (host, host + "/"):
        return url
    return "%s://%s/...#%s" % (scheme, host, hashlib.sha256(url.encode()).hexdigest()[:8])


def free_tcp_port():
    """A TCP port of 127.0.0.1 free now (gate_servers.free_port()), for a
    server or a gateway the test starts there; where nothing must listen,
    the refused_port fixture holds one."""
    return free_port()


def write_script(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path


def read_request_body(c):
    """The body of the HTTP request read from socket <c> (through its
    Content-Length), or None when the connection ends first or the head
    passes 1 MiB."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(65536)
        if not chunk or len(data) > 1 << 20:
            return None
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    m = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    n = int(m.group(1)) if m else 0
    while len(body) < n:
        chunk = c.recv(65536)
        if not chunk:
            return None
        body += chunk
    return body


class Silent:
    """Accepts connections on 127.0.0.1 and reads, never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        self.sock.settimeout(0.1)
        while not self._stop:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                continue

    def stop(self):
        self._stop = True
        self._t.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


class EachRequest(Silent):
    """A webhook on 127.0.0.1 that reads each request on a connection of its
    own, counts it, hands the connection and the request's body to _answer()
    and closes it. With <tls> (cert, key) it speaks HTTPS."""

    def __init__(self, tls=None):
        self.requests = 0
        self.ctx = None
        if tls is not None:
            self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ctx.load_cert_chain(*tls)
        super().__init__()

    def _run(self):
        self.sock.settimeout(0.1)
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            try:
                c.settimeout(2)
                if self.ctx is not None:
                    c = self.ctx.wrap_socket(c, server_side=True)
                body = read_request_body(c)
                if body is None:
                    continue
                self.requests += 1
                self._answer(c, body)
            except OSError:  # ssl.SSLError too
                pass
            finally:
                c.close()


def stored_contacts(statedir):
    """The hosts of the first contacts committed to the state store in
    <statedir>, sorted (read-only: the gateway's store is not written)."""
    db = sqlite3.connect("file:%s/sluice.db?mode=ro" % statedir, uri=True, timeout=5)
    try:
        return sorted(r[0] for r in db.execute("SELECT host FROM first_contact"))
    finally:
        db.close()


def hold_exclusive(statedir):
    """A connection holding sluice.db under an exclusive lock, as a backup
    tool or the sqlite3 shell with locking_mode=EXCLUSIVE would: the
    caller rolls it back and closes it."""
    db = sqlite3.connect("%s/sluice.db" % statedir, timeout=5, isolation_level=None)
    db.execute("PRAGMA locking_mode=EXCLUSIVE")
    db.execute("BEGIN EXCLUSIVE")
    db.execute("SELECT count(*) FROM first_contact").fetchall()
    return db


def stored_alerts(state):
    """The alerts the state store in <state> holds for its sinks (its
    committed rows)."""
    db = sqlite3.connect("file:%s?mode=ro" % (state / "sluice.db"), uri=True)
    try:
        return db.execute("SELECT count(*) FROM alert_queue").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0
    finally:
        db.close()


def delivered_through(rcv, is_later, count=1, timeout=20.0):
    """Waits until the webhook receiver <rcv> got <count> alerts that
    <is_later>(body) picks, raised after those the test counts, and returns
    every body it got by then. A sink sends alerts in the order they were
    raised, one request in flight (docs/SPEC.md, Alert sinks): a later one
    received proves each earlier one's last attempt over, so no retry or
    copy of one can still come, and a count taken then holds for good
    (not after a guessed wait)."""
    return poll(lambda: (lambda b: b if sum(1 for x in b if is_later(x)) >= count else None)(
        rcv.bodies()), timeout=timeout, what="%d later alert(s) delivered" % count)


def healthz(port):
    """(status, body) of the admin server's /healthz."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
