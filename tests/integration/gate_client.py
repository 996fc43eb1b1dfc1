"""Clients for the gateway tests: raw HTTP/1.1 through the proxy, CONNECT
tunnels, curl, and the assertions every deny test shares."""

import datetime
import errno
import http.client
import json
import os
import re
import socket
import struct
import subprocess
import time
from urllib.parse import urlsplit

TIMEOUT = 10.0

EGRESS_KEYS = ["ts", "event", "id", "agent", "method", "scheme", "host", "port", "path",
               "tier", "rule", "owner", "decision", "reason", "ip"]
END_KEYS = ["ts", "event", "id", "agent", "host", "tier", "status", "bytes_up",
            "bytes_down", "ms"]

REASONS = ["not_in_policy", "denied_host", "port_not_allowed", "method_not_allowed",
           "needs_inspection", "self_request", "agent_not_allowed", "grant_expired",
           "ip_literal", "private_address", "host_mismatch", "sni_mismatch", "rate_limited",
           "bad_request", "auth_required", "dns_failure", "upstream_unreachable",
           "too_many_connections", "quarantined", "encrypted_client_hello",
           "gateway_overloaded"]

REASON_STATUS = {"rate_limited": 429, "auth_required": 407, "bad_request": 400,
                 "dns_failure": 502, "upstream_unreachable": 502, "gateway_overloaded": 503}


def utc_today():
    """Today's UTC day by the wall clock, the clock the gateway judges grant
    expiry by. A test that compares a day count the gateway printed with
    its own reads this before the gateway judges and again after: a UTC
    midnight may fall between them."""
    return datetime.datetime.now(datetime.timezone.utc).date()


def coarse_clock_env(tmp_path, at):
    """The environment that has sluice see the wall clock a tick into the
    second <at> (Unix seconds) as glibc shows it: coarse_clock.c, built into
    <tmp_path> and preloaded, has clock_gettime(CLOCK_REALTIME) say <at> and
    time() the second before. Skips without a C compiler."""
    return dict(preload_env(tmp_path, "coarse_clock"), SLUICE_TEST_COARSE_AT=str(at))


def preload_env(tmp_path, name):
    """The environment that preloads <name>.c (beside this file) into
    sluice, built into <tmp_path>, ASan told not to mind that it comes
    first. Skips without a C compiler."""
    import pytest
    lib = str(tmp_path / (name + ".so"))
    try:
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", lib,
                        os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                     name + ".c")], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip("cannot build %s.c: %s" % (name, e))
    asan = os.environ.get("ASAN_OPTIONS", "")
    return {"LD_PRELOAD": lib,
            "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}


def reason_status(reason):
    return REASON_STATUS.get(reason, 403)


def api_rule(net, **kw):
    """A rule for the api upstream (tier 0 unless <kw> says otherwise)."""
    r = {"host": "api.example.test", "ports": [net.api.port], "tier": 0}
    r.update(kw)
    return r


def other_rule(net, **kw):
    """A rule for the other upstream (tier 0 unless <kw> says otherwise)."""
    r = {"host": "other.example.test", "ports": [net.other.port], "tier": 0}
    r.update(kw)
    return r


def other_url(net, path="/o"):
    return net.url(path, host="other.example.test", port=net.other.port)


def proc_stat(pid):
    """The fields of /proc/<pid>/stat after the command name: field N of
    proc(5) is [N - 3] (the state, field 3, is [0])."""
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_seconds(pid):
    """User and system CPU time <pid> used so far (proc(5) fields 14, 15)."""
    fields = proc_stat(pid)
    return (int(fields[14 - 3]) + int(fields[15 - 3])) / os.sysconf("SC_CLK_TCK")


def sched_and_pgid(pid):
    """(scheduling policy, process group) of <pid>'s main thread, from /proc's
    stat fields 41 and 5 (policy 0 is SCHED_OTHER, 3 SCHED_BATCH)."""
    fields = proc_stat(pid)
    return int(fields[41 - 3]), int(fields[5 - 3])


class Response:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers  # http.client.HTTPMessage
        self.body = body

    def header(self, name):
        return self.headers.get(name)

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "Response(%d %s, %r)" % (self.status, self.reason, self.body[:200])


def open_conn(gw, timeout=TIMEOUT):
    """A socket connected to the gateway (its TCP or unix listener)."""
    if gw.port is None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(gw.unix_path)
        return s
    s = socket.create_connection((gw.host, gw.port), timeout=timeout)
    s.settimeout(timeout)
    return s


def read_response(sock, method="GET"):
    """Reads one response from <sock> (body included). Raises
    http.client.RemoteDisconnected / OSError when the peer closed first."""
    r = http.client.HTTPResponse(sock, method=method)
    r.begin()
    body = r.read()
    resp = Response(r.status, r.reason, r.msg, body)
    resp.will_close = r.will_close
    return resp


class _SharedReader:
    """Hands http.client one buffered reader of <sock> for several
    responses: a reader of its own per response may take bytes of the next
    one into its buffer, where the next reader never sees them. A response
    that is done closes what makefile() gave it: here a view that leaves
    the shared reader open."""

    class _View:
        def __init__(self, fp):
            self._fp = fp

        def __getattr__(self, name):
            return getattr(self._fp, name)

        def close(self):
            pass

    def __init__(self, sock):
        self.fp = sock.makefile("rb")

    def makefile(self, *_args, **_kwargs):
        return self._View(self.fp)


def read_responses(sock, methods):
    """Reads one response per entry of <methods> from <sock>, pipelined
    responses included (one buffered reader for all of them)."""
    shared = _SharedReader(sock)
    out = []
    try:
        for method in methods:
            r = http.client.HTTPResponse(shared, method=method)
            r.begin()
            resp = Response(r.status, r.reason, r.msg, r.read())
            resp.will_close = r.will_close
            out.append(resp)
    finally:
        shared.fp.close()
    return out


def build_request(method, url, headers=None, body=b"", host=True):
    """Request bytes in absolute form. <host>: True adds a Host header built
    from <url>, a string sends that value, None/False sends none."""
    lines = ["%s %s HTTP/1.1" % (method, url)]
    if host is True:
        lines.append("Host: " + urlsplit(url).netloc)
    elif host:
        lines.append("Host: " + host)
    hdrs = list((headers or {}).items()) if isinstance(headers, dict) else list(headers or [])
    names = {k.lower() for k, _ in hdrs}
    if body and "content-length" not in names and "transfer-encoding" not in names:
        hdrs.append(("Content-Length", str(len(body))))
    for k, v in hdrs:
        lines.append("%s: %s" % (k, v))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def request(gw, method, url, headers=None, body=b"", host=True, sock=None, timeout=TIMEOUT):
    """Sends one request through the gateway and returns its Response. With
    <sock>, reuses that connection (keep-alive); otherwise opens and closes
    one. The request is built before the connection is opened: a new
    connection has idle_timeout (1 s in many tests) from its accept to send
    its head, and copying a large body once connected took longer than
    that on a loaded machine."""
    data = build_request(method, url, headers, body, host)
    own = sock is None
    s = open_conn(gw, timeout) if own else sock
    try:
        s.sendall(data)
        return read_response(s, method)
    finally:
        if own:
            s.close()


def exchange(gw, data, method="GET", timeout=TIMEOUT):
    """Sends raw bytes <data>, returns the Response, or None when the gateway
    closed without answering."""
    s = open_conn(gw, timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the gateway may answer and close before reading it all
        try:
            return read_response(s, method)
        except (http.client.RemoteDisconnected, ConnectionResetError, http.client.BadStatusLine):
            return None
    finally:
        s.close()


def read_head(sock, limit=65536):
    """Reads a response head byte by byte (so no tunnel byte is consumed)."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        if len(head) > limit:
            raise AssertionError("response head too long: %r" % head[:200])
        b = sock.recv(1)
        if not b:
            raise ConnectionError("closed before the end of the head: %r" % head)
        head += b
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1])
    headers = {}
    for ln in lines[1:]:
        if ":" in ln:
            k, v = ln.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, headers


class Tunnel:
    def __init__(self, sock, status, headers, body):
        self.sock = sock
        self.status = status
        self.headers = headers  # lower-case names
        self.body = body

    def header(self, name):
        return self.headers.get(name.lower())

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def close(self):
        self.sock.close()


def connect(gw, authority, headers=None, timeout=TIMEOUT):
    """Sends CONNECT <authority>; returns a Tunnel. On 200 the socket is the
    tunnel; otherwise the body is read and the socket left open."""
    s = open_conn(gw, timeout)
    lines = ["CONNECT %s HTTP/1.1" % authority, "Host: %s" % authority]
    for k, v in (headers or {}).items():
        lines.append("%s: %s" % (k, v))
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    status, hdrs = read_head(s)
    body = b""
    if status != 200:
        n = int(hdrs.get("content-length", "0") or 0)
        while len(body) < n:
            d = s.recv(n - len(body))
            if not d:
                break
            body += d
    return Tunnel(s, status, hdrs, body)


def recv_until_close(sock, limit=1 << 20):
    data = b""
    while len(data) < limit:
        try:
            d = sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not d:
            break
        data += d
    return data


def recv_line(sock, reads=100, end=b"\n"):
    """Bytes from <sock> up to <end> (a line end), its close, or <reads>
    reads."""
    got = b""
    for _ in range(reads):
        if got.endswith(end):
            break
        d = sock.recv(4096)
        if not d:
            break
        got += d
    return got


def exchange_until_close(gw, data):
    """Sends <data> on a new connection to the gateway and returns what
    comes back until the gateway closes it."""
    s = open_conn(gw)
    try:
        s.sendall(data)
        return recv_until_close(s)
    finally:
        s.close()


# RFC 9110 5.6.7: the one form of date the gateway writes.
IMF_FIXDATE = rb"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT"


def undated(raw):
    """<raw> (response heads, as a client got them) without the Date lines
    the gateway adds to a response that came without one (an IMF-fixdate
    each, asserted): what remains can be compared byte for byte."""
    out, n = re.subn(rb"\r\nDate: " + IMF_FIXDATE + rb"(?=\r\n)", b"", raw)
    assert n >= 1, raw
    return out


def curl(*args, timeout=30):
    """Runs the real curl; returns CompletedProcess (stdout bytes)."""
    cmd = ["curl", "-sS", "--noproxy", "", "--max-time", "20"] + [str(a) for a in args]
    return subprocess.run(cmd, capture_output=True, timeout=timeout,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})


def fd_named(pid, suffix):
    """True when process <pid> holds a descriptor whose /proc link ends in
    <suffix>, else None (for poll())."""
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                if os.readlink("/proc/%d/fd/%s" % (pid, fd)).endswith(suffix):
                    return True
            except OSError:
                pass
    except OSError:
        pass
    return None


def fifo_write_end(path):
    """The write end of the FIFO <path> (non-blocking) when a process has it
    open for reading, else None: until there is a reader the open fails with
    ENXIO, so a load waiting on the FIFO is seen without guessing."""
    try:
        return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno != errno.ENXIO:
            raise
        return None


def poll(cond, timeout=5.0, interval=0.02, what="condition"):
    """Polls <cond>() until it returns a truthy value (returned) or <timeout>."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def assert_keys(ev):
    keys = EGRESS_KEYS if ev["event"] == "agent_egress" else END_KEYS
    assert list(ev.keys()) == keys, "log keys out of order or wrong: %r" % list(ev.keys())


# Reasons whose one-line body cannot name the target: the head could not be
# parsed, or the agent is not known yet, or the limit is the agent's as a whole.
NO_TARGET_IN_BODY = {"bad_request", "auth_required", "too_many_connections", "quarantined"}
NO_PORT_IN_BODY = NO_TARGET_IN_BODY | {"rate_limited"}


def assert_deny_response(resp, reason, host=None, port=None, agent=None, wording=True):
    """A denial as SPEC.md says: status, a Date (an IMF-fixdate, the one
    field of its name), Sluice-Reason, a one-line body naming host, port
    and agent (<wording>: check the naming too)."""
    assert resp is not None, "gateway closed without an answer (expected %s)" % reason
    assert resp.status == reason_status(reason), "%r, expected %s" % (resp, reason)
    # a Response's headers keep each field; a Tunnel's (read_head()) the last
    if hasattr(resp.headers, "get_all"):
        dates = resp.headers.get_all("Date") or []
    else:
        dates = [resp.header("Date")] if resp.header("Date") is not None else []
    assert len(dates) == 1 and re.fullmatch(IMF_FIXDATE.decode(), dates[0]), \
        "Date %r, expected one IMF-fixdate (%r)" % (dates, resp)
    assert resp.header("Sluice-Reason") == reason, \
        "Sluice-Reason %r, expected %r (%r)" % (resp.header("Sluice-Reason"), reason, resp)
    if reason == "rate_limited":
        assert resp.header("Retry-After")
    text = resp.text
    assert text.strip(), "empty denial body"
    assert "\n" not in text.rstrip("\r\n"), "denial body is more than one line: %r" % text
    if not wording:
        return
    if host is not None and reason not in NO_TARGET_IN_BODY:
        assert host in text, "body does not name the host %s: %r" % (host, text)
    if port is not None and reason not in NO_PORT_IN_BODY:
        assert str(port) in text, "body does not name the port %d: %r" % (port, text)
    if agent is not None and reason not in ("auth_required", "bad_request"):
        assert agent in text, "body does not name agent %s: %r" % (agent, text)

class _Any:
    def __repr__(self):
        return "ANY"


ANY = _Any()  # a field the test does not pin down


def nothing_reached(net):
    """Asserts that no upstream saw a request, handshake or connection."""
    assert net.api.requests == [], "api upstream was reached: %r" % net.api.requests
    assert net.other.requests == [], "other upstream was reached: %r" % net.other.requests
    assert net.tls.accepted == 0, "TLS upstream accepted a connection"
    assert net.banner.accepted == 0, "banner upstream accepted a connection"


def assert_denied(gw, net, resp, reason, host=ANY, port=ANY, agent=ANY, method=ANY,
                  tier=None, rule=None, owner=None, ip=ANY, scheme=ANY, path=ANY,
                  decision="deny", reached=False):
    """The full check of one denial: response (status, Sluice-Reason,
    one-line body naming host:port and agent), nothing upstream, and the
    agent_egress / agent_egress_end pair in the log. Returns (egress, end)."""
    if decision == "deny":
        assert_deny_response(resp, reason, wording=False)
    if not reached:
        nothing_reached(net)
    ev, end = gw.decided(reason=reason)
    want = {"decision": decision, "reason": reason, "host": host, "port": port, "agent": agent,
            "method": method, "tier": tier, "rule": rule, "owner": owner, "ip": ip,
            "scheme": scheme, "path": path}
    for k, v in want.items():
        if v is not ANY:
            assert ev[k] == v, "agent_egress %s is %r, expected %r: %r" % (k, ev[k], v, ev)
    if decision == "deny":
        assert end["status"] == reason_status(reason), "end status: %r" % end
        assert end["bytes_up"] == 0, "a denied request sent bytes upstream: %r" % end
    assert end["agent"] == ev["agent"] and end["host"] == ev["host"] and end["tier"] == ev["tier"]
    if decision == "deny":  # the wording last: the hard checks above come first
        assert_deny_response(resp, reason,
                             None if host is ANY else host,
                             None if port is ANY else port,
                             None if agent is ANY else agent)
    return ev, end


def proc_number(pid, name, key):
    """The number after <key> ("VmRSS:", "syscr:") in /proc/<pid>/<name>."""
    with open("/proc/%d/%s" % (pid, name)) as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    raise AssertionError("no %s in /proc/%d/%s" % (key, pid, name))


def hello_record(name, alpn=0, record_max=16384, name_entries=None):
    """A hand-made TLS 1.2-style ClientHello (server_name <name>, ALPN list
    padded to about <alpn> bytes) cut into handshake records of at most
    <record_max> bytes of fragment. <name_entries>, a list of (name_type,
    name), makes the server_name list instead of <name>'s one host_name."""
    ext = b""
    if name and name_entries is None:
        name_entries = [(0, name)]
    if name_entries:
        entries = b""
        for kind, n in name_entries:
            n = n.encode()
            entries += bytes([kind]) + struct.pack(">H", len(n)) + n
        body = struct.pack(">H", len(entries)) + entries
        ext += struct.pack(">HH", 0, len(body)) + body
    if alpn:
        protos = b""
        while len(protos) < alpn:
            protos += b"\xc8" + b"p" * 200
        body = struct.pack(">H", len(protos)) + protos
        ext += struct.pack(">HH", 16, len(body)) + body
    ch = (b"\x03\x03" + b"\x11" * 32 + b"\x00" + b"\x00\x02\x00\x2f" + b"\x01\x00" +
          struct.pack(">H", len(ext)) + ext)
    hs = b"\x01" + struct.pack(">I", len(ch))[1:] + ch
    out = b""
    for i in range(0, len(hs), record_max):
        frag = hs[i:i + record_max]
        out += b"\x16\x03\x01" + struct.pack(">H", len(frag)) + frag
    return out
