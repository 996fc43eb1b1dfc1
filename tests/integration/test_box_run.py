"""`sluice run`: the box. The command runs in its own network, mount and PID
namespaces; its only way out is the relay on 127.0.0.1:3128 inside, which
carries connections to the gateway's unix socket outside.

Every inner command is /usr/bin/python3 -c ... and prints one JSON object.
Only loopback addresses are ever used: the upstreams on the host's
127.0.0.x (reached through the gateway), and host listeners the box must not
see."""

import concurrent.futures
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import pwd
import re
import shutil
import signal
import stat
import socket
import struct
import subprocess
import tempfile
import termios
import threading
import time

import pytest

from conftest import SANITIZER_MARKS, policy_yaml
from gate_client import api_rule, other_url, poll, proc_stat, sched_and_pgid
from gate_servers import pattern_bytes
from pid1 import AS_PID1, child_pids, running
from watch_helpers import Receiver, write_script

PY = "/usr/bin/python3"
HANG_GUARD_S = 60  # a hang guard, not a claim on time
SUMMARY_GUARD_S = 300  # run's summary of a 256 MiB log: a hang guard too
SUMMARY = re.compile(r"^sluice run: exit (-?\d+); allowed (\d+) \(tier 0: (\d+), tier 1: (\d+), "
                     r"tier 2: (\d+), tier 3: (\d+)\), denied (\d+)(?:, reported (\d+))?, "
                     r"alerts (\d+)", re.M)

# Runs inside the box: fetches <url> through $HTTP_PROXY with urllib.
# In-box code: tunnel(addr, host, port, timeout) sends CONNECT host:port to
# the relay on addr:3128 and returns the socket and the reply's status line.
TUNNEL = r"""
import socket, sys
def tunnel(addr, host, port, timeout):
    s = socket.create_connection((addr, 3128), timeout=timeout)
    t = "%s:%s" % (host, port)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (t, t)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    return s, head.decode().split("\r\n")[0]
"""

FETCH = r"""
import json, os, sys, urllib.request, urllib.error
out = {"proxy": os.environ.get("HTTP_PROXY"), "no_proxy": os.environ.get("NO_PROXY")}
try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
        out["status"] = r.status
        out["body"] = r.read().decode()
except urllib.error.HTTPError as e:
    out["status"] = e.code
    out["reason"] = e.headers.get("Sluice-Reason")
    out["body"] = e.read().decode()
print(json.dumps(out))
"""


def _clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(extra or {})
    return {k: v for k, v in env.items() if v is not None}  # None: unset


class Box:
    """Runs `sluice run` and keeps what it printed."""

    def __init__(self, sluice_bin, workdir):
        self.bin = sluice_bin
        self.workdir = workdir

    def policy(self, p):
        path = os.path.join(self.workdir, "policy.yaml")
        with open(path, "w") as f:
            f.write(policy_yaml(p) if isinstance(p, dict) else p)
        return path

    def run(self, args, code=None, cmd=None, *, cwd=None, timeout=30, env=None, user=None,
            check_sanitizers=True, pass_fds=()):
        argv = [self.bin, "run"] + [str(a) for a in args] + ["--"]
        argv += cmd if cmd is not None else [PY, "-c", code]
        if user is not None:
            argv = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + argv
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           cwd=cwd or self.workdir, env=_clean_env(env), pass_fds=pass_fds)
        if check_sanitizers:
            for mark in SANITIZER_MARKS:
                assert mark not in p.stderr, p.stderr
        return p

    @staticmethod
    def out(p):
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        assert lines, "no JSON from the box; rc=%d stdout=%r stderr=%r" % (
            p.returncode, p.stdout, p.stderr)
        return json.loads(lines[-1])

    @staticmethod
    def summary(p):
        m = SUMMARY.search(p.stderr)
        assert m, "no summary line in stderr: %r" % p.stderr
        g = [int(x) if x is not None else 0 for x in m.groups()]
        return {"exit": g[0], "allowed": g[1], "tiers": g[2:6], "denied": g[6],
                "reported": g[7], "alerts": g[8]}


@pytest.fixture
def box(sluice_bin, tmp_path):
    d = tmp_path / "work"
    d.mkdir()
    return Box(sluice_bin, str(d))


@pytest.fixture
def hostdir():
    """A directory on the host outside /tmp (the box gets its own /tmp), so
    that it is visible, read-only, inside the box."""
    base = "/var/tmp" if os.path.isdir("/var/tmp") else os.path.expanduser("~")
    d = tempfile.mkdtemp(prefix="sluice-box-", dir=base)
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------
# the network


def test_allowed_host_through_the_gateway(box, net):
    pol = box.policy(net.policy([api_rule(net, tier=1)]))
    p = box.run(["--policy", pol], FETCH, cmd=[PY, "-c", FETCH, net.url("/in-the-box")])
    assert p.returncode == 0, p.stderr
    o = Box.out(p)
    assert o["proxy"] == "http://127.0.0.1:3128"
    assert o["no_proxy"] == ""
    assert o["status"] == 200
    assert json.loads(o["body"])["server"] == "api"
    assert [r.path for r in net.api.requests] == ["/in-the-box"]
    s = Box.summary(p)
    assert s == {"exit": 0, "allowed": 1, "tiers": [0, 1, 0, 0], "denied": 0, "reported": 0,
                 "alerts": 0}


def test_run_warns_of_its_connection_cap_only_when_an_agent_could_reach_it(box, net):
    """run's gateway serves one agent, and no one asked it for 4096
    connections: under a hard open-file limit of 8192 (its cap 1,351) it
    said at every run that --max-conns 4096 did not fit. It warns only when
    the cap falls under 256 (a hard limit of 1024: 156)."""
    pol = box.policy(net.policy([api_rule(net, tier=1)]))

    def run_under(limit):
        argv = ["prlimit", "--nofile=%d:%d" % (limit, limit), box.bin, "run", "--policy", pol,
                "--", PY, "-c", FETCH, net.url("/capped")]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=box.workdir,
                           env=_clean_env(None))
        assert p.returncode == 0, p.stderr
        assert Box.out(p)["status"] == 200
        return p.stderr

    assert "needs more open files" not in run_under(8192)
    m = re.search(r"sluice: warning: --max-conns 4096 needs more open files than the limit of "
                  r"1024 allows: serving at most (\d+) connections", run_under(1024))
    assert m and int(m.group(1)) < 256, m


def test_unlisted_host_gets_403(box, net):
    pol = box.policy(net.policy([api_rule(net)]))
    p = box.run(["--policy", pol], None, cmd=[PY, "-c", FETCH, other_url(net)])
    o = Box.out(p)
    assert o["status"] == 403
    assert o["reason"] == "not_in_policy"
    assert "(agent run)" in o["body"]
    assert net.other.requests == []
    s = Box.summary(p)
    assert s["allowed"] == 0 and s["denied"] == 1


def test_ipv6_relay_and_https_connect(box, net):
    """The relay also listens on [::1]:3128; a CONNECT goes through it."""
    pol = box.policy(net.policy([{"host": "tls.example.test", "ports": [net.tls.port],
                                  "tier": 0}]))
    code = TUNNEL + r"""
import json, ssl
s, head = tunnel("::1", "tls.example.test", sys.argv[1], 10)
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
tls = ctx.wrap_socket(s, server_hostname="tls.example.test")
tls.sendall(b"GET / HTTP/1.1\r\nHost: tls.example.test\r\n\r\n")
data = b""
while True:
    d = tls.recv(4096)
    if not d: break
    data += d
print(json.dumps({"head": head, "body": data.decode()}))
"""
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this host")
    p = box.run(["--policy", pol], None, cmd=[PY, "-c", code, str(net.tls.port)])
    o = Box.out(p)
    assert o["head"].startswith("HTTP/1.1 200")
    assert o["body"].endswith("hello over tls\n")
    assert net.tls.sni == ["tls.example.test"]


def test_relay_carries_large_transfers_both_ways_and_the_end(box, net):
    """8 MiB up and 8 MiB down through a tunnel, over the relay, intact; then
    the client ends its side and the end comes back (half-close both ways)."""
    pol = box.policy(net.policy([api_rule(net)]))
    code = TUNNEL + r"""
import hashlib, json
n = 8 * 1024 * 1024
s, connect = tunnel("127.0.0.1", "api.example.test", sys.argv[1], 30)
body = bytes(range(256)) * (n // 256)
s.sendall(b"PUT /up HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: %d\r\n\r\n" % n)
s.sendall(body)
s.sendall(b"GET /large?n=%d HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n" % n)
s.shutdown(socket.SHUT_WR)
data = b""
while True:
    d = s.recv(1 << 20)
    if not d: break
    data += d
print(json.dumps({"connect": connect, "up_sha": hashlib.sha256(body).hexdigest(),
                  "len": len(data), "tail_sha": hashlib.sha256(data[-n:]).hexdigest(),
                  "head": data[:200].decode("latin-1")}))
"""
    p = box.run(["--policy", pol], None, cmd=[PY, "-c", code, str(net.api.port)], timeout=60)
    assert p.returncode == 0, p.stderr
    o = Box.out(p)
    assert o["connect"].startswith("HTTP/1.1 200"), o
    put = [r for r in net.api.requests if r.path == "/up"]
    assert len(put) == 1 and hashlib.sha256(put[0].body).hexdigest() == o["up_sha"]
    assert o["head"].startswith("HTTP/1.") and " 200 " in o["head"].split("\r\n")[0], o
    assert o["tail_sha"] == hashlib.sha256(pattern_bytes(8 * 1024 * 1024)).hexdigest()


def test_direct_connections_reach_nothing(box, net):
    """A connection that ignores the proxy finds no listener: the box has its
    own loopback. Tried against listeners on the host's loopback only."""
    seen = []
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(8)
    host.settimeout(0.2)
    port = host.getsockname()[1]
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                c, _ = host.accept()
                seen.append(c)
            except OSError:
                pass
    t = threading.Thread(target=accept, daemon=True)
    t.start()
    pol = box.policy(net.policy([api_rule(net)]))
    code = r"""
import json, socket, sys
out = {}
for name, addr in (("host", ("127.0.0.1", int(sys.argv[1]))),
                   ("api", ("127.0.0.2", int(sys.argv[2])))):
    try:
        socket.create_connection(addr, timeout=3).close()
        out[name] = "connected"
    except OSError as e:
        out[name] = e.__class__.__name__
print(json.dumps(out))
"""
    try:
        p = box.run(["--policy", pol], None, cmd=[PY, "-c", code, str(port), str(net.api.port)])
    finally:
        stop.set()
        t.join(2)
        host.close()
    o = Box.out(p)
    assert o["host"] == "ConnectionRefusedError"
    assert o["api"] == "ConnectionRefusedError"
    assert seen == []
    assert net.api.connections == 0


def test_only_loopback_and_no_route(box, net):
    pol = box.policy(net.policy([]))
    code = r"""
import json, socket
with open("/proc/net/route") as f:
    routes = f.read().splitlines()[1:]
print(json.dumps({"ifs": socket.if_nameindex(), "routes": routes}))
"""
    o = Box.out(box.run(["--policy", pol], code))
    assert o == {"ifs": [[1, "lo"]], "routes": []}


def test_proxy_environment(box, net):
    """Every proxy variable, either case, points at the relay, whatever the
    caller had; NO_PROXY and no_proxy are empty. So do those of tools that
    read their own first (npm, yarn, pip, cargo): a caller's value, the
    corporate proxy outside, was passed through, and the tool failed in the
    box (left alone at stop 23)."""
    pol = box.policy(net.policy([]))
    names = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"]
    names += [n.lower() for n in names]
    tools = ["npm_config_proxy", "npm_config_https_proxy", "npm_config_noproxy",
             "YARN_HTTP_PROXY", "YARN_HTTPS_PROXY", "PIP_PROXY", "CARGO_HTTP_PROXY"]
    upper = ["NPM_CONFIG_PROXY", "pip_proxy"]  # a caller's in another case
    code = "import json, os, sys; print(json.dumps({n: os.environ.get(n) for n in sys.argv[1:]}))"
    p = box.run(["--policy", pol], None, cmd=[PY, "-c", code] + names + tools + upper,
                env={"https_proxy": "http://127.0.0.1:9/", "ALL_PROXY": "socks5://127.0.0.1:9",
                     "NO_PROXY": "*", "no_proxy": "example.test",
                     "npm_config_https_proxy": "http://127.0.0.1:9/", "npm_config_noproxy": "*",
                     "NPM_CONFIG_PROXY": "http://127.0.0.1:9/", "pip_proxy": "127.0.0.1:9",
                     "CARGO_HTTP_PROXY": "127.0.0.1:9"})
    o = Box.out(p)
    relay = "http://127.0.0.1:3128"
    assert o == {"HTTP_PROXY": relay, "HTTPS_PROXY": relay, "ALL_PROXY": relay, "NO_PROXY": "",
                 "http_proxy": relay, "https_proxy": relay, "all_proxy": relay, "no_proxy": "",
                 "npm_config_proxy": relay, "npm_config_https_proxy": relay,
                 "npm_config_noproxy": "", "YARN_HTTP_PROXY": relay, "YARN_HTTPS_PROXY": relay,
                 "PIP_PROXY": relay, "CARGO_HTTP_PROXY": relay,
                 "NPM_CONFIG_PROXY": None, "pip_proxy": None}

def _run_on_a_pty(box, args, code, stderr_file=None, cols=0):
    """Runs `sluice run ARGS -- python3 -c CODE` with standard output, and
    standard error unless <stderr_file> is given, on a pty (<cols> wide; 0:
    a width it does not say); returns run's status and every byte read from
    the pty's master until the last holder of its slave closed it (EIO), or
    30 s."""
    import select
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
        argv = [box.bin, "run"] + [str(a) for a in args] + ["--", PY, "-c", code]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave,
                                stderr=stderr_file if stderr_file is not None else slave,
                                cwd=box.workdir, env=_clean_env(None), start_new_session=True)
        os.close(slave)
        slave = -1
        got = b""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 0.5)[0]:
                continue
            try:
                data = os.read(master, 65536)
            except OSError as e:  # EIO: no slave left open
                assert e.errno == errno.EIO, e
                break
            if not data:
                break
            got += data
        proc.wait(timeout=30)
        return proc.returncode, got
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)


def _screen(data, cols):
    """The lines a VT100-like terminal <cols> wide shows after <data>: its
    text, line ends, carriage returns, erase to the line's end (ESC[K) and
    the wrap at the line's end deferred to the next character, as xterm
    does; other escapes change nothing shown here."""
    rows, row, col, pending = [[]], 0, 0, False
    text = data.decode("utf-8", "replace")
    i = 0
    while i < len(text):
        c = text[i]
        i += 1
        if c == "\x1b" and i < len(text) and text[i] == "[":
            j = i + 1
            while j < len(text) and not ("@" <= text[j] <= "~"):
                j += 1
            if j < len(text) and text[j] == "K":
                del rows[row][col:]
            i = j + 1
        elif c == "\r":
            col, pending = 0, False
        elif c == "\n":
            row, pending = row + 1, False
        elif c >= " ":
            if pending:
                row, col, pending = row + 1, 0, False
            while len(rows) <= row:
                rows.append([])
            line = rows[row]
            line.extend(" " * (col + 1 - len(line)))
            line[col] = c
            if col == cols - 1:
                pending = True
            else:
                col += 1
        while len(rows) <= row:
            rows.append([])
    return ["".join(r).rstrip() for r in rows]


@pytest.mark.parametrize("last", ["no line end", "a line\n", "x" * 120],
                         ids=["mid-line", "line-end", "full-line"])
def test_the_summary_on_a_terminal_starts_a_line(box, net, last):
    """A command whose last output had no line end had the summary carry on
    its line ("no line endsluice run: exit 0; ..."). On a terminal that
    says its width it starts a line of its own now, the next one, and
    never leaves a blank line after output that ended one (or that filled
    its line to the last column)."""
    pol = box.policy(net.policy([]))
    code = "import sys; sys.stdout.write(%r); sys.stdout.flush()" % last
    rc, got = _run_on_a_pty(box, ["--policy", pol], code, cols=120)
    assert rc == 0, got
    lines = _screen(got, 120)
    at = [i for i, line in enumerate(lines) if "sluice run: exit 0;" in line]
    assert len(at) == 1, (lines, got)
    assert lines[at[0]].startswith("sluice run: exit 0;"), (lines, got)
    assert lines[at[0] - 1] == last.rstrip("\n"), (lines, got)


def test_the_summary_on_a_terminal_starts_with_an_attribute_reset(box, net, tmp_path):
    """A command that leaves the terminal hiding text (ESC[8m, concealed,
    as a program killed in the middle of a password prompt may) hid run's
    summary too: on a terminal, the summary now starts with ESC[0m. Into
    a file, no escape at all."""
    pol = box.policy(net.policy([]))
    code = "import sys; sys.stdout.write('\\x1b[8mhidden'); sys.stdout.flush()"
    rc, got = _run_on_a_pty(box, ["--policy", pol], code)
    assert rc == 0, got
    at = got.find(b"sluice run: exit 0;")
    assert at > 0, got
    assert b"hidden" in got[:at], got
    assert got[at - len(b"\x1b[0m"):at] == b"\x1b[0m", got
    with open(tmp_path / "err", "w+b") as err:
        rc, got = _run_on_a_pty(box, ["--policy", pol], code, stderr_file=err)
        err.seek(0)
        text = err.read()
    assert rc == 0, (got, text)
    assert b"hidden" in got and b"sluice run: exit 0;" not in got, got
    assert b"sluice run: exit 0;" in text and b"\x1b" not in text, text



# How long run may take, the command ended, with a standard error no one
# reads: the summary's few seconds, and the gateway's stop (a hang guard).
FULL_STDERR_GUARD_S = 60


def _full_pipe():
    """A pipe whose buffer is full: (read end, write end), the write end
    blocking again once filled (its description is the one run gets)."""
    r, w = os.pipe()
    flags = fcntl.fcntl(w, fcntl.F_GETFL)
    fcntl.fcntl(w, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    try:
        for _ in range(1 << 16):  # a pipe holds 64 KiB by default, 1 MiB at most
            os.write(w, b"x" * 4096)
    except BlockingIOError:
        pass
    fcntl.fcntl(w, fcntl.F_SETFL, flags)
    return r, w


def test_a_standard_error_no_one_reads_does_not_hold_run(box, net):
    """run's summary was written with a blocking write: into a standard
    error whose reader never reads (a full pipe) it waited for ever, run
    never ended. The summary is given a few seconds, then left unsaid;
    run's status stays the command's. (A policy with a rule: one without
    is warned about at start, a write that would wait first.)"""
    pol = box.policy(net.policy([api_rule(net)]))
    r, w = _full_pipe()
    try:
        proc = subprocess.Popen([box.bin, "run", "--policy", pol, "--", PY, "-c", "pass"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=w,
                                cwd=box.workdir, env=_clean_env(None), start_new_session=True)
        os.close(w)
        w = -1
        try:
            rc = proc.wait(timeout=FULL_STDERR_GUARD_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail("run did not end within %d s: its summary waited for a reader"
                        % FULL_STDERR_GUARD_S)
        assert rc == 0
    finally:
        if w >= 0:
            os.close(w)
        os.close(r)


@pytest.mark.parametrize("tz", [None, "Asia/Tokyo", ""])
def test_command_environment_holds_tz_as_given(box, net, tz):
    """run keeps TZ in its environment from the start, for the off-hours
    zone's conversions (util/env.h): the command still gets TZ as run was
    given it, none when it was unset."""
    pol = box.policy(net.policy([], alerts={"off_hours": {"tz": "Europe/Berlin",
                                                          "hours": "08:00-19:00"}}))
    code = "import json, os; print(json.dumps({'TZ': os.environ.get('TZ')}))"
    o = Box.out(box.run(["--policy", pol], code, env={"TZ": tz}))
    assert o == {"TZ": tz}


def test_inherited_descriptors_closed(box, net):
    """A descriptor the caller leaves open (here a TCP connection to a host
    listener, which the box's network could not reach) does not pass into
    the box."""
    pol = box.policy(net.policy([]))
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    conn = socket.create_connection(srv.getsockname())
    peer, _ = srv.accept()
    peer.settimeout(0.5)
    fd = conn.fileno()
    code = r"""
import errno, json, os, sys
fd = int(sys.argv[1])
try:
    os.write(fd, b"leak")
    out = "wrote"
except OSError as e:
    out = errno.errorcode[e.errno]
print(json.dumps({"write": out, "fds": sorted(int(f) for f in os.listdir("/proc/self/fd"))}))
"""
    try:
        p = box.run(["--policy", pol], None, cmd=[PY, "-c", code, str(fd)], pass_fds=(fd,))
        o = Box.out(p)
        assert o["write"] == "EBADF"
        assert max(o["fds"]) <= 3  # 0-2 and the listing's own descriptor
        with pytest.raises(socket.timeout):
            peer.recv(10)
    finally:
        for s in (conn, peer, srv):
            s.close()


def test_no_dns_inside(box, net):
    pol = box.policy(net.policy([api_rule(net)]))
    code = r"""
import json, socket, struct, sys
out = {}
try:
    socket.getaddrinfo("api.example.test", 80)
    out["resolve"] = "resolved"
except OSError as e:
    out["resolve"] = e.__class__.__name__
q = struct.pack("!HHHHHH", 7, 0x100, 1, 0, 0, 0) + b"\x03dyn\x07example\x04test\x00\x00\x01\x00\x01"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
try:
    s.sendto(q, ("127.0.0.9", int(sys.argv[1])))
    s.recvfrom(512)
    out["udp"] = "answered"
except OSError as e:
    out["udp"] = e.__class__.__name__
print(json.dumps(out))
"""
    p = box.run(["--policy", pol], None, cmd=[PY, "-c", code, str(net.dns.port)])
    o = Box.out(p)
    assert o["resolve"] == "gaierror"
    assert o["udp"] != "answered"
    assert net.dns.queries == []


# --------------------------------------------------------------------------
# the file system

WRITE = r"""
import errno, json, os, sys
out = {}
for path in sys.argv[1:]:
    try:
        with open(path, "w") as f:
            f.write("from the box")
        out[path] = "ok"
    except OSError as e:
        out[path] = errno.errorcode[e.errno]
print(json.dumps(out))
"""


def test_read_only_outside_cwd_and_tmp(box, net, hostdir):
    pol = box.policy(net.policy([]))
    targets = [os.path.join(hostdir, "nope"), "/etc/sluice-box-test", "/usr/sluice-box-test",
               os.path.join(box.workdir, "yes"), "/tmp/private", "/dev/shm/private"]
    p = box.run(["--policy", pol], None, cmd=[PY, "-c", WRITE] + targets)
    o = Box.out(p)
    assert o[targets[0]] == "EROFS"
    assert o["/etc/sluice-box-test"] == "EROFS"
    assert o["/usr/sluice-box-test"] == "EROFS"
    assert o[targets[3]] == "ok"
    assert o["/tmp/private"] == "ok"
    assert o["/dev/shm/private"] == "ok"
    # nothing on the host but the file in the working directory
    assert os.listdir(hostdir) == []
    assert not os.path.exists("/etc/sluice-box-test")
    assert not os.path.exists("/tmp/private")
    assert not os.path.exists("/dev/shm/private")
    with open(targets[3]) as f:
        assert f.read() == "from the box"


def test_rw_ro_hide(box, net, hostdir):
    rw = os.path.join(hostdir, "rw")
    ro_below = os.path.join(rw, "ro")
    cwd_ro = os.path.join(box.workdir, "frozen")
    secret = os.path.join(hostdir, "secret")
    secret_file = os.path.join(hostdir, "token.txt")
    for d in (rw, ro_below, cwd_ro, secret):
        os.makedirs(d)
    with open(os.path.join(secret, "id_rsa"), "w") as f:
        f.write("PRIVATE")
    with open(secret_file, "w") as f:
        f.write("TOKEN")
    pol = box.policy(net.policy([]))
    code = WRITE + r"""
out["ls_secret"] = os.listdir(sys.argv[-2]) if False else None
"""
    code = r"""
import errno, json, os, sys
rw, ro_below, cwd_ro, secret, secret_file = sys.argv[1:]
def write(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
out = {"rw": write(rw + "/a"), "ro_below": write(ro_below + "/a"),
       "cwd_ro": write(cwd_ro + "/a"), "cwd": write("b"),
       "secret_ls": os.listdir(secret), "secret_write": write(secret + "/c"),
       "secret_file": open(secret_file).read()}
print(json.dumps(out))
"""
    p = box.run(["--policy", pol, "--rw", rw, "--ro", ro_below, "--ro", "frozen",
                 "--hide", secret, "--hide", secret_file, "--hide", "/nonexistent/thing"],
                None, cmd=[PY, "-c", code, rw, ro_below, cwd_ro, secret, secret_file])
    assert p.returncode == 0, p.stderr
    o = Box.out(p)
    assert o == {"rw": "ok", "ro_below": "EROFS", "cwd_ro": "EROFS", "cwd": "ok",
                 "secret_ls": [], "secret_write": "EROFS", "secret_file": ""}
    assert os.listdir(rw) == ["ro", "a"] or sorted(os.listdir(rw)) == ["a", "ro"]
    assert os.listdir(ro_below) == []
    assert os.listdir(cwd_ro) == []
    assert os.listdir(secret) == ["id_rsa"]


def test_path_given_many_times_is_mounted_once(box, net, hostdir):
    """Among options naming the same path the last wins, and the earlier
    ones were mounted all the same, each bind recursive, so that it copied
    the binds stacked there before it: a path given k times made 2^k mounts,
    and 20 times failed the set-up with 'No space left on device' (the
    kernel's mount limit). Only the last is mounted."""
    pol = box.policy(net.policy([]))
    d = os.path.join(hostdir, "shared")
    os.makedirs(d)
    code = ("import json; print(json.dumps({'mounts': sum(1 for ln in "
            "open('/proc/self/mountinfo') if ln.split()[4] == %r)}))" % d)
    p = box.run(["--policy", pol] + ["--ro", d] * 19 + ["--rw", d], code)
    assert p.returncode == 0, p.stderr
    assert Box.out(p) == {"mounts": 1}
    p = box.run(["--policy", pol] + ["--rw", d] * 19 + ["--ro", d],
                "open(%r, 'w')" % os.path.join(d, "f"))
    assert p.returncode == 1 and "Read-only file system" in p.stderr, p.stderr


def test_at_most_256_paths(box, net, hostdir):
    """docs/SPEC.md names the limit: 256 --ro/--rw/--hide paths work, one
    more is a usage error before anything starts."""
    pol = box.policy(net.policy([]))
    dirs = []
    for i in range(257):
        dirs.append(os.path.join(hostdir, "d%d" % i))
        os.makedirs(dirs[-1])
    hides = [a for d in dirs[:256] for a in ("--hide", d)]
    p = box.run(["--policy", pol] + hides, "print('{\"ran\": true}')")
    assert p.returncode == 0, p.stderr
    assert Box.out(p) == {"ran": True}
    p = box.run(["--policy", pol] + hides + ["--ro", dirs[256]], "print('ran')")
    assert p.returncode == 2, p.stderr
    assert "ran" not in p.stdout
    assert "sluice run: at most 256 --ro/--rw/--hide paths" in p.stderr, p.stderr


def test_missing_hide_path_with_dot_dot_is_ignored(box, net, hostdir):
    """A --hide path that does not exist is ignored, however it is written:
    one with a `..` (`--hide ../.aws`) was handed to the box as written, and
    the box, which takes no `..` on a path, failed the set-up with EINVAL."""
    pol = box.policy(net.policy([]))
    missing = os.path.join(hostdir, "..", os.path.basename(hostdir), "nothing")
    p = box.run(["--policy", pol, "--hide", "../nothing-here", "--hide", missing],
                "print('{\"ran\": true}')")
    assert p.returncode == 0, p.stderr
    assert Box.out(p) == {"ran": True}


def test_hide_below_proc_hides_in_the_box_proc(box, net):
    """The box mounts its own /proc after the view is built: a --hide below
    /proc was applied to the host's /proc beneath it and covered, so
    `--hide /proc/cpuinfo` and `--hide /proc/sys/kernel` hid nothing, and
    said nothing. They hide in the box's /proc; `--hide /proc`, which the
    box and the command need, is refused."""
    pol = box.policy(net.policy([]))
    code = ("import json, os; print(json.dumps({'cpuinfo': open('/proc/cpuinfo').read(), "
            "'kernel': os.listdir('/proc/sys/kernel'), 'self': os.path.isdir('/proc/self/fd')}))")
    p = box.run(["--policy", pol, "--hide", "/proc/cpuinfo", "--hide", "/proc/sys/kernel",
                 "--hide", "/proc/no-such-entry"], code)
    assert p.returncode == 0, p.stderr
    assert Box.out(p) == {"cpuinfo": "", "kernel": [], "self": True}
    p = box.run(["--policy", pol, "--hide", "/proc"], "print('ran')")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "ran" not in p.stdout
    assert "sluice run: --hide /proc: the box mounts its own /proc, which the command needs; " \
        "hide what below it you mean" in p.stderr, p.stderr


def test_policy_and_log_are_read_only(box, net):
    pol = box.policy(net.policy([api_rule(net)]))
    log = os.path.join(box.workdir, "decisions.jsonl")
    alerts = os.path.join(box.workdir, "alerts.jsonl")
    p = box.run(["--policy", pol, "--log", log, "--alerts", alerts], None,
                cmd=[PY, "-c", WRITE, pol, log, alerts, os.path.join(box.workdir, "other")])
    o = Box.out(p)
    assert o[pol] == "EROFS"
    assert o[log] == "EROFS"
    assert o[alerts] == "EROFS"
    assert o[os.path.join(box.workdir, "other")] == "ok"


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_policy_every_user_may_write_is_warned_as_serve_warns(box, net, what):
    """run's gateway reloads its policy on SIGHUP, as serve does: a policy
    every user of the host may change (an agent outside this box included)
    is warned of at the start, with serve's words, and the run goes on."""
    pol = box.policy(net.policy([]))
    if what == "file":
        os.chmod(pol, 0o666)
        said = "warning: %s: the file is writable by every user (mode 0666): anyone on " % pol
    else:
        os.chmod(box.workdir, 0o777)
        said = ("warning: %s: its folder %s is writable by every user without the sticky bit "
                "(mode 0777): anyone on this host" % (pol, box.workdir))
    p = box.run(["--policy", pol], "import sys; sys.exit(3)")
    assert p.returncode == 3, p.stderr
    assert p.stderr.count(said) == 1, p.stderr
    # a policy only its owner may change says nothing
    os.chmod(pol, 0o644)
    os.chmod(box.workdir, 0o755)
    p = box.run(["--policy", pol], "import sys; sys.exit(3)")
    assert p.returncode == 3, p.stderr
    assert "writable by every user" not in p.stderr, p.stderr


def test_runs_private_directory_is_not_in_the_box(box, net):
    """run's private directory (the gateway's socket, the default log) is
    under the host's /tmp: the box, with a /tmp of its own, does not see it.
    The entry kept for an --alerts file not given bound the directory itself
    read-only there (and the default log, bound as a protected file, made
    it too), so the command could list it, read the log and, with
    --allow-unix, reach the gateway's socket past the relay."""
    pol = box.policy(net.policy([]))
    log = os.path.join(box.workdir, "decisions.jsonl")
    alerts = os.path.join(box.workdir, "alerts.jsonl")
    code = ("import glob, json, os\n"
            "print(json.dumps({d: sorted(os.listdir(d)) for d in glob.glob('/tmp/sluice-run-*')}))")
    for args in ([], ["--alerts", alerts], ["--log", log], ["--log", log, "--alerts", alerts]):
        p = box.run(["--policy", pol] + args, code)
        assert p.returncode == 0, (args, p.stderr)
        assert Box.out(p) == {}, args


def test_missing_rw_path_is_an_error(box, net):
    pol = box.policy(net.policy([]))
    for opt in ("--rw", "--ro"):
        p = box.run(["--policy", pol, opt, "/nonexistent/sluice"], "print('ran')")
        assert p.returncode == 2, (opt, p.stderr)
        assert "ran" not in p.stdout
        assert "%s /nonexistent/sluice" % opt in p.stderr


def test_a_path_the_box_cannot_make_is_named_escaped(box, net, hostdir):
    """A --rw path below a --hide folder cannot be made in the box (the
    hidden folder is an empty read-only tmpfs): the error printed the path
    raw, where run's other messages show each control character as \\ooo,
    so a name holding a line end wrote a 'sluice run:' line of its own into
    standard error."""
    pol = box.policy(net.policy([]))
    secret = os.path.join(hostdir, "secret")
    below = os.path.join(secret, "x\nsluice run: forged")
    os.makedirs(below)
    p = box.run(["--policy", pol, "--hide", secret, "--rw", below], "print('ran')")
    assert p.returncode == 2, p.stderr
    assert "ran" not in p.stdout
    assert ("--rw %s: cannot make it in the box" % below.replace("\n", "\\012")
            in p.stderr), p.stderr
    assert "\nsluice run: forged" not in p.stderr, p.stderr


def test_a_long_path_the_box_cannot_make_keeps_the_reason(box, net, hostdir):
    """The box's messages are at most 512 bytes: one naming a path of 1,500
    bytes was cut there, in the middle of the path, and said neither which
    folder nor what went wrong. The path loses its middle instead ("..."),
    never within an escape or a UTF-8 character; its start, its end and the
    reason stay."""
    pol = box.policy(net.policy([]))
    secret = os.path.join(hostdir, "secret")
    parts = ["\u00e9" * 60 + "\n" + "d" * 60] * 6 + ["end"]
    below = os.path.join(secret, *parts)
    os.makedirs(below)
    p = box.run(["--policy", pol, "--hide", secret, "--rw", below], "print('ran')")
    assert p.returncode == 2, p.stderr
    assert "ran" not in p.stdout
    reason = ": cannot make it in the box: %s" % os.strerror(errno.EROFS)
    lines = [ln for ln in p.stderr.splitlines()
             if ln.startswith("sluice run: cannot build the box: --rw ")]
    assert len(lines) == 1, p.stderr
    line = lines[0]
    assert line.endswith(reason), line
    shown = line[len("sluice run: cannot build the box: --rw "):-len(reason)]
    whole = below.replace("\n", "\\012")
    head, _, tail = shown.partition("...")
    assert head and tail, shown
    assert whole.startswith(head) and whole.endswith(tail), shown
    assert head.startswith(secret) and tail.endswith("/end"), shown
    box_said = line[len("sluice run: cannot build the box: "):]
    assert len(box_said.encode()) < 512, line  # the box's report holds 512 bytes


TMP_SIZES = r"""
import errno, json, os
out = {}
for d in ("/tmp", "/dev/shm"):
    st = os.statvfs(d)
    out[d] = {"size": st.f_blocks * st.f_frsize}
    try:
        with open(os.path.join(d, "fill"), "wb") as f:
            for _ in range(int(os.environ.get("FILL_MIB", "0"))):
                f.write(b"\0" * (1 << 20))
                f.flush()
        out[d]["filled"] = True
    except OSError as e:
        out[d]["filled"] = errno.errorcode[e.errno]
print(json.dumps(out))
"""


def _mem_total():
    with open("/proc/meminfo") as f:
        for ln in f:
            if ln.startswith("MemTotal:"):
                return int(ln.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def test_tmp_and_shm_are_bounded(box, net):
    """The box's /tmp and /dev/shm are tmpfs, which takes up to half the
    machine's memory by default: the two of them could take all of it
    (left alone at stop 23). Each holds 25% of memory by default, and what
    --tmp-size gives; writing past it fails with ENOSPC."""
    pol = box.policy(net.policy([]))
    p = box.run(["--policy", pol], TMP_SIZES)
    assert p.returncode == 0, p.stderr
    quarter = _mem_total() // 4
    for d, o in Box.out(p).items():
        assert abs(o["size"] - quarter) <= quarter // 100, (d, o, quarter)
    p = box.run(["--policy", pol, "--tmp-size", "3MiB"], TMP_SIZES, env={"FILL_MIB": "4"})
    assert p.returncode == 0, p.stderr
    for d, o in Box.out(p).items():
        assert o == {"size": 3 << 20, "filled": "ENOSPC"}, (d, o)
    p = box.run(["--policy", pol, "--tmp-size", "10%"], TMP_SIZES, env={"FILL_MIB": "1"})
    assert p.returncode == 0, p.stderr
    tenth = _mem_total() // 10
    for d, o in Box.out(p).items():
        assert abs(o["size"] - tenth) <= tenth // 100 and o["filled"] is True, (d, o)


def _socket_file(path):
    """A unix socket file at <path> that nothing listens on (its file stays
    once the socket is closed); returns <path>."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(path)
    return path


@pytest.mark.parametrize("given, flag", [
    (["--policy", "{pol}", "--policy", "{pol}"], "--policy"),
    (["--proxy", "unix:{sock}", "--proxy=unix:{sock}"], "--proxy"),
    (["--policy", "{pol}", "--agent", "ci-bot", "--ag", "eval"], "--agent"),
    (["--policy", "{pol}", "--log", "{dir}/a.log", "--log", "{dir}/b.log"], "--log"),
    (["--policy", "{pol}", "--alerts", "{dir}/a.jsonl", "--alerts", "{dir}/b.jsonl"], "--alerts"),
    (["--policy", "{pol}", "--gateway-user", "{uid}", "--gateway-user", "{uid}"],
     "--gateway-user"),
    (["--policy", "{pol}", "--tmp-size", "64MiB", "--tmp=1GiB"], "--tmp-size"),
])
def test_a_flag_given_twice_is_a_usage_error(box, given, flag):
    """Each flag took the last of its values without a word: a wrapper that
    adds --policy or --agent ran the box under another policy, or as
    another agent, than the operator's. --ro, --rw and --hide alone may
    repeat."""
    pol = box.policy("version: 1\nrules: []\n")
    # a socket file, as the first --proxy must name one (nothing listens)
    sock = _socket_file(os.path.join(box.workdir, "twice.sock"))
    args = [a.replace("{pol}", pol).replace("{dir}", box.workdir).replace("{sock}", sock)
            .replace("{uid}", str(os.getuid())) for a in given]
    p = box.run(args, "print('ran')")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "ran" not in p.stdout
    assert p.stderr.splitlines()[0] == "sluice run: %s given twice" % flag, p.stderr
    assert p.stderr.splitlines()[1].startswith("usage: sluice run")


@pytest.mark.parametrize("size", ["0", "1KiB", "1048575", "0%", "101%", "-5%", "%", "5%%",
                                  " 25%", "1 GiB", "abc", ""])
def test_tmp_size_that_is_no_bound_is_refused(box, net, size):
    """tmpfs reads size=0 as no bound at all: 0, and anything below 1 MiB or
    not a size or a share of memory, stops run before anything starts."""
    pol = box.policy(net.policy([]))
    p = box.run(["--policy", pol, "--tmp-size", size], "print('ran')")
    assert p.returncode == 2, p.stderr
    assert "ran" not in p.stdout
    assert ("sluice run: --tmp-size: '%s' is neither a size of at least 1MiB (B, KiB, MiB, "
            "GiB) nor a share of memory from 1%% to 100%%" % size) in p.stderr, p.stderr


@pytest.mark.parametrize("size", ["18446744073709551615", "18446744073709547521B",
                                  "17179869183GiB", "9223372036854775809",
                                  "18446744073709551616", "17179869184GiB"])
def test_tmp_size_that_tmpfs_would_round_to_no_bound_is_refused(box, net, size):
    """tmpfs rounds size= up to whole pages: a size within a page of 2^64
    wraps to 0 pages, no bound at all (df shows a size of 0), and the
    command could fill the machine's memory. Sizes above 8 EiB, more than
    any machine has, are refused before anything starts."""
    pol = box.policy(net.policy([]))
    p = box.run(["--policy", pol, "--tmp-size", size], "print('ran')")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "ran" not in p.stdout
    assert ("sluice run: --tmp-size: '%s' is more than 8EiB, which tmpfs would round up "
            "to no bound at all" % size) in p.stderr, p.stderr


def test_root_as_working_directory_is_refused(box, net, hostdir):
    """The working directory is writable in the box: / would be all of it."""
    pol = box.policy(net.policy([]))
    target = os.path.join(hostdir, "x")
    p = box.run(["--policy", pol], None, cmd=["touch", target], cwd="/")
    assert p.returncode == 2, p.stderr
    assert "the current directory is /" in p.stderr
    assert not os.path.exists(target)


@pytest.mark.parametrize("where", ["/sys", "/sys/kernel", "/dev", "/dev/pts", "/dev/net",
                                   "/proc/sys/kernel"])
def test_kernel_settings_as_working_directory_or_rw_path_are_refused(box, net, where):
    """The host's /sys holds the kernel's settings (power states, memory
    management, devices), files that root owns and writes without any
    capability, and its /dev the host's devices. Run from there, or given as
    --rw, they were bound writable into the box, /dev's with its device
    nodes usable: a box started as root could suspend the host through
    /sys/power/state, open /dev/net/tun or a disk, or a root terminal in
    /dev/pts. Refused before anything starts, like /. So is /proc, which
    the box's own /proc covers: the command ran in that one, read-only,
    though the current directory and each --rw path are to be writable."""
    if not os.path.isdir(where):
        pytest.skip("no %s" % where)
    pol = box.policy(net.policy([]))
    probe = "import os; print('ran', os.access('/sys', os.W_OK))"
    p = box.run(["--policy", pol], probe, cwd=where)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "ran" not in p.stdout
    assert ("sluice run: the current directory is %s, where the kernel's settings or the "
            "host's devices are: they would be writable in the box; run from a project "
            "directory" % where) in p.stderr
    p = box.run(["--policy", pol, "--rw", where], probe)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "ran" not in p.stdout
    assert ("sluice run: --rw %s: the kernel's settings and the host's devices are not made "
            "writable in the box" % where) in p.stderr


def test_proc_mounted_elsewhere_as_working_directory_is_refused(box, net, hostdir):
    """A proc mounted outside /proc (a chroot's or a container's root file
    system) is the host's /proc all the same: run from its sys/kernel, the
    folder was bound writable into the box, and a box started as root could
    write core_pattern, a program the host's kernel runs as root at the next
    crash. Refused by the file system's type, like /proc itself."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount")
    pol = box.policy(net.policy([]))
    where = os.path.join(hostdir, "proc")
    os.makedirs(where)
    subprocess.run(["mount", "--bind", "/proc", where], check=True)
    try:
        cwd = os.path.join(where, "sys", "kernel")
        p = box.run(["--policy", pol], "import os; print('ran', os.access('core_pattern', "
                    "os.W_OK))", cwd=cwd)
    finally:
        subprocess.run(["umount", where], check=True)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "ran" not in p.stdout
    assert "sluice run: the current directory is %s, where the kernel's settings" % cwd \
        in p.stderr, p.stderr


def test_policy_that_cannot_be_resolved_stops_the_run(box, net):
    """The gateway opens the policy by the path given; the box keeps it
    read-only by its absolute path. A relative path whose absolute form is
    longer than PATH_MAX opens but cannot be resolved (ENAMETOOLONG): the
    run stops rather than leave the policy, here below the writable current
    directory, unprotected."""
    with open(box.policy(net.policy([]))) as f:
        text = f.read()
    deep = [box.workdir] + ["d" * 200] * 14  # about 2,900 bytes: getcwd() works
    rel = ["p" * 200] * 8  # with these, about 4,500: past PATH_MAX
    relpath = os.path.join(*rel, "policy.yaml")
    code = "open(%r, 'a').write('# changed by the agent')" % relpath
    cwd = os.getcwd()
    try:
        for part in deep:
            os.makedirs(part, exist_ok=True)
            os.chdir(part)
        os.makedirs(os.path.join(*rel))
        with open(relpath, "w") as f:
            f.write(text)
        # run from there (a path that long cannot be handed to cwd=)
        p = subprocess.run([box.bin, "run", "--policy", relpath, "--", PY, "-c", code],
                           capture_output=True, text=True, timeout=30, env=_clean_env(None))
        with open(relpath) as f:
            after = f.read()
    finally:
        os.chdir(cwd)  # the tests after this one may name files relative to it
    assert p.returncode == 2, p.stderr
    assert "cannot be kept read-only in the box, so the command does not start" in p.stderr
    assert after == text


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
def test_private_directory_as_working_directory_or_path_is_refused(box, net, where):
    """The box replaces /tmp and /dev/shm with private, empty ones: run from
    there, or given as --rw or --ro, the command would write into the
    private one and lose it silently. A directory below them is fine."""
    pol = box.policy(net.policy([]))
    mark = "sluice-box-test-%d" % os.getpid()
    p = box.run(["--policy", pol], None, cmd=["touch", mark], cwd=where)
    assert p.returncode == 2, p.stderr
    assert "the current directory is %s, which the box replaces" % where in p.stderr
    assert not os.path.exists(os.path.join(where, mark))
    for opt in ("--rw", "--ro"):
        p = box.run(["--policy", pol, opt, where], "print('ran')")
        assert p.returncode == 2, (opt, p.stderr)
        assert "ran" not in p.stdout
        assert "%s %s: the box gives the command a private, empty %s" % (opt, where, where) \
            in p.stderr
    below = tempfile.mkdtemp(dir=where)
    try:
        p = box.run(["--policy", pol], None, cmd=["touch", mark], cwd=below)
        assert p.returncode == 0, p.stderr
        assert os.path.exists(os.path.join(below, mark))
    finally:
        shutil.rmtree(below)


def test_home_as_working_directory_warns(box, net, hostdir):
    pol = box.policy(net.policy([]))
    sub = os.path.join(box.workdir, "sub")
    os.makedirs(sub)
    warning = "your home directory: everything in it, dotfiles included, is writable"
    for home, verb in ((box.workdir, "is"), (sub, "contains"), (hostdir, None)):
        p = box.run(["--policy", pol], "print('{}')", env={"HOME": home})
        assert p.returncode == 0, p.stderr
        Box.out(p)
        if verb is None:
            assert "home directory" not in p.stderr
        else:
            assert "the current directory %s %s %s" % (box.workdir, verb, warning) in p.stderr
            assert "--hide ~/.ssh" in p.stderr


# --------------------------------------------------------------------------
# unix sockets

UNIX = r"""
import errno, json, socket, sys
out = {}
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(sys.argv[1])
    s.sendall(b"hi")
    out["connect"] = "ok"
except OSError as e:
    out["connect"] = errno.errorcode.get(e.errno, str(e))
a, b = socket.socketpair()
a.sendall(b"x")
out["socketpair"] = b.recv(1).decode()
# the kernel reads socket()'s domain as an int: 0x100000001 is AF_UNIX
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
fd = libc.syscall(ctypes.c_long(41), ctypes.c_long(0x100000001), ctypes.c_long(1),
                  ctypes.c_long(0))
if fd < 0:
    out["high_bits"] = errno.errorcode.get(ctypes.get_errno())
else:
    try:
        s = socket.socket(fileno=fd)
        s.settimeout(3)
        s.connect(sys.argv[1])
        s.sendall(b"hi")
        out["high_bits"] = "ok"
    except OSError as e:
        out["high_bits"] = errno.errorcode.get(e.errno, str(e))
# a datagram pair (SOCK_RAW is one too for AF_UNIX) can sendto() any path
for name, kind in (("dgram_pair", socket.SOCK_DGRAM), ("raw_pair", socket.SOCK_RAW)):
    try:
        a, b = socket.socketpair(socket.AF_UNIX, kind | socket.SOCK_CLOEXEC)
        a.sendto(b"hi", sys.argv[2])
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e))
try:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    a.sendall(b"y")
    out["seqpacket_pair"] = b.recv(1).decode()
except OSError as e:
    out["seqpacket_pair"] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(out))
"""


def _unix_listener(path):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o777)
    srv.listen(4)
    srv.settimeout(0.2)
    got = []
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
                c.settimeout(2)
                got.append(c.recv(10))
                c.close()
            except OSError:
                pass
    t = threading.Thread(target=loop, daemon=True)
    t.start()

    def close():
        stop.set()
        t.join(2)
        srv.close()
    return got, close


def test_host_unix_socket_unreachable(box, net, hostdir):
    path = os.path.join(hostdir, "engine.sock")
    dpath = os.path.join(hostdir, "log.sock")
    got, close = _unix_listener(path)
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dgram.bind(dpath)
    os.chmod(dpath, 0o777)
    dgram.setblocking(False)

    def datagrams():
        seen = []
        while True:
            try:
                seen.append(dgram.recv(10))
            except BlockingIOError:
                return seen
    try:
        pol = box.policy(net.policy([]))
        p = box.run(["--policy", pol], None, cmd=[PY, "-c", UNIX, path, dpath])
        o = Box.out(p)
        assert o == {"connect": "EACCES", "socketpair": "x", "high_bits": "EACCES",
                     "dgram_pair": "EACCES", "raw_pair": "EACCES", "seqpacket_pair": "y"}
        time.sleep(0.3)
        assert got == []
        assert datagrams() == []
        p = box.run(["--policy", pol, "--allow-unix"], None, cmd=[PY, "-c", UNIX, path, dpath])
        o = Box.out(p)
        assert o == {"connect": "ok", "socketpair": "x", "high_bits": "ok", "dgram_pair": "ok",
                     "raw_pair": "ok", "seqpacket_pair": "y"}
        # the listener's thread may not have taken them yet: waited for
        poll(lambda: len(got) >= 2 or None, timeout=10, what="two connections accepted")
        assert got == [b"hi", b"hi"]
        assert datagrams() == [b"hi", b"hi"]
    finally:
        close()
        dgram.close()


# --------------------------------------------------------------------------
# exit status, signals, summary


def _descendants(pid):
    """The pids below <pid>, its children's children included."""
    found, todo = [], [pid]
    while todo:
        kids = []
        for p in todo:
            try:
                kids += child_pids(p)
            except OSError:
                continue  # ended meanwhile
        found += kids
        todo = kids
    return found


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read()
    except OSError:
        return b""


# The box's command: a tier-3 write (an alert), then waits for the file
# argv[2] (60 s at most).
POST_THEN_WAIT = r"""
import os, sys, time, urllib.request
req = urllib.request.Request(sys.argv[1], data=b"1", method="POST")
print(urllib.request.urlopen(req, timeout=10).status, flush=True)
for _ in range(600):
    if os.path.exists(sys.argv[2]):
        break
    time.sleep(0.1)
"""


def test_alert_programs_leave_no_zombie_when_run_is_pid_1(box, net, tmp_path, hostdir):
    """`sluice run` as the init of its PID namespace (a container's entry
    point, without --init) is the parent of every orphan there: the `sleep`
    an alert program of its gateway left in the background, killed with the
    program's group when the program exits, became run's child, and run
    waited only for its gateway and its box: a zombie per alert, each
    holding a PID, until a pids.max refused the next program. run reaps
    such children now, as a gateway that is PID 1 does."""
    # where run's gateway, nobody when run is root, can run the program and
    # write
    shared = os.path.join(hostdir, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    started, release = os.path.join(shared, "started"), os.path.join(shared, "release")
    mark = b"987.25"  # the sleep's argument: this test's, found by it
    prog = write_script(os.path.join(hostdir, "bg.sh"),
                        "#!/bin/sh\ncat >/dev/null\nsleep %s &\ntouch %s\ni=0\n"
                        "while [ ! -e %s ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done\n"
                        "exit 0\n" % (mark.decode(), started, release))
    pol = box.policy(net.policy([api_rule(net, tier=3, owner="alice", expires="9999-12-31")],
                                alerts={"sinks": [{"exec": prog}]}))
    err = open(str(tmp_path / "run.err"), "w+")
    proc = subprocess.Popen([PY, "-c", AS_PID1, box.bin, "run", "--policy", pol, "--", PY, "-c",
                             POST_THEN_WAIT, net.url("/w"), "go"],
                            cwd=box.workdir, env=_clean_env(), stdout=subprocess.PIPE,
                            stderr=err)
    try:
        run = poll(lambda: proc.poll() is not None and -1 or child_pids(proc.pid) or None,
                   timeout=HANG_GUARD_S, what="run under its PID namespace's parent")
        if run == -1:
            err.seek(0)
            if proc.returncode == 77:
                pytest.skip("cannot make a PID namespace: %s" % err.read().strip())
            pytest.fail("run ended (%d): %s" % (proc.returncode, err.read()))
        run = run[0]
        poll(lambda: os.path.exists(started) or None, timeout=HANG_GUARD_S,
             what="the alert program's sleep started")
        sleep = poll(lambda: [k for k in _descendants(run)
                              if _cmdline(k) == b"sleep\0" + mark + b"\0"] or None,
                     timeout=10, what="the program's sleep among run's descendants")[0]
        open(release, "w").close()  # the program exits; the gateway kills its group, the sleep too
        try:
            poll(lambda: not os.path.exists("/proc/%d" % sleep) or None, timeout=10,
                 what="the sleep the program left ended and reaped")
        except AssertionError as e:
            raise AssertionError("%s: the sleep (a zombie: %s) is a child of run: %s"
                                 % (e, not running(sleep), sleep in child_pids(run)))
        open(os.path.join(box.workdir, "go"), "w").close()  # the command ends
        assert proc.wait(timeout=HANG_GUARD_S) == 0, open(str(tmp_path / "run.err")).read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        err.close()


def test_exit_status_passed_on(box, net):
    pol = box.policy(net.policy([]))
    p = box.run(["--policy", pol], "import sys; sys.exit(7)")
    assert p.returncode == 7
    assert Box.summary(p)["exit"] == 7
    p = box.run(["--policy", pol], "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert p.returncode == 128 + signal.SIGKILL
    p = box.run(["--policy", pol], None, cmd=["/nonexistent-command"])
    assert p.returncode == 127
    assert "/nonexistent-command" in p.stderr


def test_a_command_that_cannot_be_run_exits_as_a_shell_says(box, net, hostdir):
    """127 for a command not found, 126 for one found but not executable
    (a file without the x bit, a folder), as a shell says; the name, the
    caller's (a variable, a file name), is shown with its control
    characters as \\ooo: one with a line end forged a summary line."""
    pol = box.policy(net.policy([]))
    script = os.path.join(hostdir, "script.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(script, 0o644)
    for cmd, code, said in ((script, 126, "sluice run: %s: %s\n" % (script, os.strerror(errno.EACCES))),
                            (hostdir, 126, "sluice run: %s: %s\n" % (hostdir, os.strerror(errno.EACCES))),
                            ("sluice-no-such-command", 127, "sluice run: sluice-no-such-command: %s\n"
                             % os.strerror(errno.ENOENT))):
        p = box.run(["--policy", pol], None, cmd=[cmd])
        assert p.returncode == code, (cmd, p.stderr)
        assert said in p.stderr, p.stderr
        assert Box.summary(p)["exit"] == code
    forged = "/nonexistent\nsluice run: exit 0; allowed 9"
    p = box.run(["--policy", pol], None, cmd=[forged])
    assert p.returncode == 127, p.stderr
    assert "\nsluice run: exit 0; allowed 9" not in p.stderr, p.stderr
    assert "sluice run: /nonexistent\\012sluice run: exit 0; allowed 9: %s\n" % (
        os.strerror(errno.ENOENT)) in p.stderr, p.stderr


def test_an_empty_command_is_a_usage_error(box, net):
    """`sluice run -- "$AGENT"` with AGENT unset: nothing to run. It was
    found by no one, after the gateway and the box were made for it (exit
    127, `sluice run: : No such file or directory`)."""
    pol = box.policy(net.policy([]))
    p = box.run(["--policy", pol], None, cmd=[""])
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("sluice run: the command is an empty string (an unset variable?)\n"
                               "usage: sluice run "), p.stderr
    assert not SUMMARY.search(p.stderr), p.stderr


def test_an_empty_policy_name_is_a_usage_error(box):
    """`--policy "$POLICY"` with POLICY unset said ': cannot read : No such
    file or directory', naming no flag."""
    p = box.run(["--policy", ""], "print('ran')")
    assert p.returncode == 2, p.stderr
    assert "ran" not in p.stdout
    assert p.stderr.startswith("sluice run: --policy needs a file, not an empty string\n"
                               "usage: sluice run "), p.stderr


def test_signals_blocked_by_runs_caller(box, net):
    """A caller with SIGTERM blocked (a supervisor's thread, a shell's
    trap) handed its mask to run's gateway, which then never took the
    SIGTERM that ends it: run waited for it for ever once the command had
    ended. And the command started with nothing blocked, where execve()
    leaves the mask as it was (found by the review of the signal paths).
    The gateway unblocks what it needs; the command gets the caller's mask."""
    pol = box.policy(net.policy([]))
    blocked = {signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP}
    code = ("import json, signal\n"
            "print(json.dumps(sorted(int(s) for s in "
            "signal.pthread_sigmask(signal.SIG_BLOCK, []))))\n")
    p = subprocess.run([box.bin, "run", "--policy", pol, "--", PY, "-c", code],
                       capture_output=True, text=True, timeout=30, cwd=box.workdir,
                       env=_clean_env(), preexec_fn=lambda: signal.pthread_sigmask(
                           signal.SIG_BLOCK, blocked))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[-1]) == sorted(int(s) for s in blocked)
    assert Box.summary(p)["exit"] == 0

def _start(box, args, code):
    argv = [box.bin, "run"] + args + ["--", PY, "-c", code]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=box.workdir, env=_clean_env())


def _wait_ready(proc, timeout=15):
    line = proc.stdout.readline()
    assert line.strip() == "ready", "box did not start: %r %r" % (line, proc.stderr.read())


def test_signals_forwarded(box, net):
    pol = box.policy(net.policy([]))
    handler = r"""
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))
print("ready", flush=True)
time.sleep(30)
sys.exit(3)
"""
    proc = _start(box, ["--policy", pol], handler)
    _wait_ready(proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 42
    # without a handler: killed by the signal, 128+N
    plain = "import time\nprint('ready', flush=True)\ntime.sleep(30)\n"
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        proc = _start(box, ["--policy", pol], plain)
        _wait_ready(proc)
        proc.send_signal(sig)
        rc = proc.wait(15)
        err = proc.stderr.read()
        if sig == signal.SIGINT:
            assert rc == 1 or rc == 128 + sig, err  # Python raises KeyboardInterrupt
        else:
            assert rc == 128 + sig, err
        assert "sluice run: exit %d;" % rc in err


def test_signals_ignored_by_runs_caller_stay_ignored(box, net):
    """`nohup sluice run -- CMD &`: nohup starts run with SIGHUP ignored,
    and exec() would leave it ignored for CMD, so that the hang-up that
    comes when the user logs out leaves it running. The command reset every
    signal to its default and run, which reads its signals from a signalfd,
    passed a SIGHUP sent to it on: the command died of it, 129 (found by the
    box review). A signal run starts with ignored now stays ignored for the
    command and is not passed on; the others are as before."""
    pol = box.policy(net.policy([]))
    code = r"""
import signal, sys
st = open("/proc/self/status").read()
ign = int([ln for ln in st.splitlines() if ln.startswith("SigIgn")][0].split()[1], 16)
signal.signal(signal.SIGUSR1, lambda *a: print("usr1", flush=True))
print("ready", flush=True)
sys.stdin.read()
print('{"hup_ignored": %s, "term_ignored": %s}' % (
    "true" if ign & (1 << 0) else "false", "true" if ign & (1 << 14) else "false"))
"""

    def nohup():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc = subprocess.Popen([box.bin, "run", "--policy", pol, "--", PY, "-c", code],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=box.workdir,
                            env=_clean_env(), preexec_fn=nohup)
    _wait_ready(proc)
    proc.send_signal(signal.SIGHUP)  # what the shell sends its jobs as it hangs up
    # a SIGUSR1 behind it, which run passes on: once the command has it, run
    # has dealt with the SIGHUP (its signalfd gives the lower number first,
    # and the command would have got it first, and died of it)
    proc.send_signal(signal.SIGUSR1)
    line = proc.stdout.readline()
    assert line == "usr1\n", "%r %r" % (line, proc.stderr.read() if not line else "")
    proc.stdin.close()
    rc = proc.wait(15)
    out, err = proc.stdout.read(), proc.stderr.read()
    assert rc == 0, err
    assert Box.out(subprocess.CompletedProcess([], rc, out, err)) == {
        "hup_ignored": True, "term_ignored": False}


def test_sigchld_ignored_by_runs_caller_does_not_hang_run(box, net):
    """A caller that ignores SIGCHLD (some supervisors do) left it ignored
    for run and the box's init: the kernel then reaps their children itself
    and sends no SIGCHLD, so the init never learnt that the command had
    ended, and run waited for its report for ever (found by the box
    review). run and the init now take SIGCHLD at its default for
    themselves; the command still starts with it ignored, as exec() would
    have left it."""
    pol = box.policy(net.policy([]))
    code = r"""
import sys
st = open("/proc/self/status").read()
ign = int([ln for ln in st.splitlines() if ln.startswith("SigIgn")][0].split()[1], 16)
print('{"chld_ignored": %s}' % ("true" if ign & (1 << 16) else "false"))
sys.exit(3)
"""

    def ignore_sigchld():
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)

    proc = subprocess.Popen([box.bin, "run", "--policy", pol, "--", PY, "-c", code],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=box.workdir, env=_clean_env(), preexec_fn=ignore_sigchld)
    try:
        out, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()  # the box's init and the gateway follow run
        proc.communicate()
        pytest.fail("run did not end after the command")
    assert proc.returncode == 3, err
    assert "sluice run: exit 3;" in err
    assert Box.out(subprocess.CompletedProcess([], 3, out, err)) == {"chld_ignored": True}


def test_a_signal_that_comes_with_the_status_does_not_kill_run(box, net):
    """A signal that reaches run as the command ends (the terminal's ^C,
    which the command dies of, comes to run too) was left pending when run
    found the command's status first, and killed run once it unblocked its
    signals: no summary, run's end the signal's, not the command's status,
    its private directory left behind (found by the box review). Made
    certain here: run is stopped while the signal comes and the command
    ends."""
    pol = box.policy(net.policy([]))
    code = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\nsys.exit(5)\n"
    proc = subprocess.Popen([box.bin, "run", "--policy", pol, "--", PY, "-c", code],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=box.workdir,
                            env=_clean_env())
    _wait_ready(proc)
    with open("/proc/%d/task/%d/children" % (proc.pid, proc.pid)) as f:
        kids = [int(k) for k in f.read().split()]
    init = [k for k in kids if os.getpgid(k) != k][0]  # the gateway leads its own group
    deadline = time.monotonic() + 15

    def wait_state(pid, state):
        while proc_stat(pid)[0] != state:
            assert time.monotonic() < deadline, (pid, state)
            time.sleep(0.02)

    os.kill(proc.pid, signal.SIGSTOP)
    wait_state(proc.pid, "T")  # out of poll(): the signal cannot wake it there
    os.kill(proc.pid, signal.SIGINT)
    proc.stdin.close()  # the command ends, the box's init reports and exits
    wait_state(init, "Z")
    os.kill(proc.pid, signal.SIGCONT)
    rc = proc.wait(15)
    err = proc.stderr.read()
    assert rc == 5, err
    assert "sluice run: exit 5;" in err


# Runs as PID 1 of a PID namespace of its own: starts `sluice run`, kills its
# gateway, has the gateway's PID given to a bystander (ns_last_pid), lets the
# command end and says whether the bystander outlived run.
PID_REUSE = r"""
import json, os, signal, subprocess, sys, time
argv = sys.argv[1:]
run = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
assert run.stdout.readline().strip() == "ready"
with open("/proc/%d/task/%d/children" % (run.pid, run.pid)) as f:
    kids = [int(k) for k in f.read().split()]
gw = [k for k in kids if os.getpgid(k) == k][0]  # the gateway leads its own group
os.kill(gw, signal.SIGKILL)
# until run reaped it (its PID is free only then), by the clock: a count of
# sleeps ran out on a loaded machine and the test went on with the PID taken
deadline = time.monotonic() + 60  # a hang guard, not a claim on time
while os.path.exists("/proc/%d" % gw):
    if time.monotonic() > deadline:
        sys.exit("run did not reap its killed gateway (pid %d) in 60 s" % gw)
    time.sleep(0.01)
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(gw - 1))
# the bystander blocks every signal it can: one run sent it stays pending,
# to be read once run is gone, not guessed to have done its work by then
bystander = subprocess.Popen(
    [sys.executable, "-c", "import signal, sys, time\n"
     "signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())\n"
     "print('ready', flush=True)\nsys.stdin.read()\n"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert bystander.stdout.readline().strip() == "ready"
run.stdin.close()
run.wait(20)
with open("/proc/%d/status" % bystander.pid) as f:
    status = dict(ln.split(":\t", 1) for ln in f.read().splitlines() if ":\t" in ln)
out = {"same_pid": bystander.pid == gw, "bystander": bystander.poll(),
       "state": status["State"], "pending": [status["SigPnd"], status["ShdPnd"]],
       "stderr": run.stderr.read()}
bystander.kill()
print(json.dumps(out))
"""


def test_a_gateway_that_died_is_not_signalled_again(box, net):
    """run reaps its gateway when it dies (`the gateway stopped`), and at the
    end stopped it again by its PID: by then the PID may be another
    process's, which got run's SIGTERM (found by the box review: a PID
    handed on with ns_last_pid in a PID namespace of the test's own)."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a PID namespace and ns_last_pid")
    pol = box.policy(net.policy([]))
    code = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\n"
    argv = ["unshare", "--pid", "--fork", "--mount-proc", PY, "-c", PID_REUSE,
            box.bin, "run", "--policy", pol, "--", PY, "-c", code]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=2 * HANG_GUARD_S,
                       cwd=box.workdir, env=_clean_env())
    if p.returncode != 0 and "unshare failed" in p.stderr:
        pytest.skip("no PID namespace for the test: %s" % p.stderr.strip())
    assert p.returncode == 0, p.stderr
    o = Box.out(p)
    assert "the gateway stopped" in o["stderr"], o
    assert o["same_pid"], o  # else the test did not hand the PID on
    # still running, no signal pending (SIGKILL, which it cannot block, ends it)
    assert o["bystander"] is None and o["state"][0] in "SR", o
    assert o["pending"] == ["0000000000000000"] * 2, o  # run did not signal it


def test_a_relay_that_fails_does_not_report_success(box, net):
    """When the relay's poll() fails (here: the command, the init's uid,
    lowers the init's RLIMIT_NOFILE below poll()'s descriptor count), the
    init reported a status it never collected, 0, and the command was
    killed with the init: run said `exit 0` for a command that never
    finished (found by the box review). The init now kills the command and
    reports the status it collects, with a message."""
    pol = box.policy(net.policy([]))
    code = ("import resource, socket, sys, time\n"
            "resource.prlimit(1, resource.RLIMIT_NOFILE, (2, 2))\n"
            "s = socket.create_connection(('127.0.0.1', 3128))  # wakes the relay\n"
            "time.sleep(5)\n"
            "sys.exit(0)\n")
    p = box.run(["--policy", pol], code)
    assert p.returncode == 128 + signal.SIGKILL, p.stderr
    assert "sluice run: the box's relay failed (poll: Invalid argument): the command is " \
        "killed" in p.stderr, p.stderr
    assert Box.summary(p)["exit"] == 128 + signal.SIGKILL


PRCTL_NR = {"x86_64": 157, "aarch64": 167}.get(os.uname().machine)


def _proc_field(pid, name):
    """The field `name` of /proc/PID/stat (`state`, `ppid`), or None once
    the process is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return rest[0] if name == "state" else int(rest[1])


def _sluice_children(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or _proc_field(int(d), "ppid") != pid:
            continue
        try:
            with open("/proc/%s/comm" % d) as f:
                if f.read().strip() == "sluice":
                    out.append(int(d))
        except OSError:
            pass
    return out


def _in_own_pid_namespace(pid):
    """Whether PID is in a PID namespace below ours (None once it is gone)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            return len([ln for ln in f if ln.startswith("NSpid:")][0].split()) > 2
    except OSError:
        return None


def _entering_pdeathsig(pid):
    """Whether PID is stopped on entry to prctl(PR_SET_PDEATHSIG, ...)."""
    try:
        with open("/proc/%d/syscall" % pid) as f:
            return f.read().startswith("%d 0x1 " % PRCTL_NR)
    except OSError:
        return False


def _start_held_run(box, tmp_path, args, env=None, **popen):
    """`sluice run ARGS` under strace, which holds each prctl() 1 s on
    entry and notes the directories made (_run_dirs_made()). Needs root, for
    --gateway-user root: a gateway that leaves root asks for its death
    signal again."""
    if PRCTL_NR is None or shutil.which("strace") is None:
        pytest.skip("needs strace and a known prctl number")
    if os.geteuid() != 0:
        pytest.skip("needs root for --gateway-user root")
    return subprocess.Popen(
        ["strace", "-f", "-qq", "-o", str(tmp_path / "strace.out"), "-e",
         "trace=prctl,mkdir,mkdirat,bind", "-e", "inject=prctl:delay_enter=1000000",
         box.bin, "run"] + args,
        cwd=box.workdir, env=env or _clean_env(), **popen)


def _run_dirs_made(tmp_path):
    """The /tmp/sluice-run-XXXXXX directories the run of _start_held_run() made."""
    try:
        with open(str(tmp_path / "strace.out")) as f:
            return sorted(set(re.findall(r'"(/tmp/sluice-run-[A-Za-z0-9]{6})"', f.read())))
    except FileNotFoundError:
        return []


def _gateway_bound(tmp_path):
    """Whether the gateway of _start_held_run()'s run bound its socket."""
    with open(str(tmp_path / "strace.out")) as f:
        return re.search(r'bind\(\d+, \{sa_family=AF_UNIX, sun_path="/tmp/sluice-run-\w+/gw\.sock"',
                         f.read()) is not None


def _end_held_run(tracer, tmp_path):
    """Ends what _start_held_run() started, if it still runs, and removes
    the directories it made (a run killed with SIGKILL leaves its own)."""
    if tracer.poll() is None:
        tracer.kill()
        tracer.communicate()
    for d in _run_dirs_made(tmp_path):
        shutil.rmtree(d, ignore_errors=True)


def _held_in_prctl(tracer, who="gateway"):
    """(run, its gateway or its box's init, as WHO says) once that child,
    under TRACER (strace holding prctl()), is seen entering its first
    prctl(): before it asks for run's death signal."""
    deadline = time.monotonic() + 60
    run = held = None
    while held is None and time.monotonic() < deadline and tracer.poll() is None:
        if run is None:
            found = _sluice_children(tracer.pid)
            run = found[0] if found else None
        else:
            for c in _sluice_children(run):
                if _in_own_pid_namespace(c) == (who == "box") and _entering_pdeathsig(c):
                    held = c
        time.sleep(0.01)
    assert held is not None, "run's %s was never seen entering prctl()" % who
    return run, held


@pytest.mark.parametrize("who", ["gateway", "box"])
def test_run_killed_before_its_children_ask_for_its_death_signal(box, net, tmp_path, who):
    """The gateway and the box's init each ask for a signal when run dies
    (PR_SET_PDEATHSIG), but a run that died between its fork or clone and
    that request sent none: the gateway, or the box with its command, lived
    on with no one to stop it (found by the box review). strace holds each
    prctl() 1 s on entry, so the test can kill run exactly in that window;
    the child must then see run is gone and end. A gateway that leaves root
    asks again and checks, so the gateway's case keeps root. A run killed
    with SIGKILL cannot remove its directory: the test does, by the name
    strace saw it made with."""
    pol = box.policy(net.policy([]))
    marker = "sluice-pdeathsig-%d" % os.getpid()
    code = "import time; time.sleep(600)  # " + marker
    tracer = _start_held_run(box, tmp_path,
                             ["--policy", pol, "--gateway-user", "root", "--", PY, "-c", code],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    victim = None
    gateway = []
    try:
        run, victim = _held_in_prctl(tracer, who)
        if who == "box":
            # run's death stops the gateway, and a box that found no gateway
            # socket would end for that reason: the gateway is held
            gateway = [c for c in _sluice_children(run) if _in_own_pid_namespace(c) is False]
            assert len(gateway) == 1, gateway
            os.kill(gateway[0], signal.SIGSTOP)
        os.kill(run, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _proc_field(victim, "state") not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _proc_field(victim, "state") in (None, "Z"), "the %s outlived run" % who
    finally:
        tracer.kill()
        tracer.wait()
        if victim is not None and _proc_field(victim, "state") not in (None, "Z"):
            os.kill(victim, signal.SIGKILL)
        for pid in gateway:
            os.kill(pid, signal.SIGKILL)
        subprocess.run(["pkill", "-KILL", "-f", marker])
        _end_held_run(tracer, tmp_path)


def test_a_gateway_that_dies_before_it_serves_is_told(box, net, tmp_path):
    """run's gateway killed before it was ready (the OOM killer, a signal
    from another process): run exited 2 without a word, where every exit 2
    says why. strace holds the gateway's first prctl() 1 s, and the test
    kills it there."""
    pol = box.policy(net.policy([]))
    asan = os.environ.get("ASAN_OPTIONS")  # LeakSanitizer cannot run under ptrace
    env = _clean_env({"ASAN_OPTIONS": (asan + ":" if asan else "") + "detect_leaks=0"})
    tracer = _start_held_run(box, tmp_path,
                             ["--policy", pol, "--gateway-user", "root", "--", PY, "-c", "print(1)"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, gateway = _held_in_prctl(tracer)
        os.kill(gateway, signal.SIGKILL)
        out, err = tracer.communicate(timeout=30)
        made = _run_dirs_made(tmp_path)
        assert tracer.returncode == 2, err
        assert "sluice run: the gateway ended before it served (killed by signal %d)" \
            % signal.SIGKILL in err, err
        assert out == ""
        assert len(made) == 1 and not os.path.exists(made[0]), made
    finally:
        _end_held_run(tracer, tmp_path)


# Signals whose default action ends run, beyond SIGTERM, SIGINT and SIGHUP:
# those run passed on from the start and those it ended of at once, its
# directory left behind (SIGPROF, SIGVTALRM, SIGXCPU, SIGIO, SIGPWR, real-time).
MORE_ENDING = [signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGABRT,
               signal.SIGPROF,
               signal.SIGVTALRM, signal.SIGXCPU, signal.SIGIO, signal.SIGPWR,
               signal.SIGSTKFLT, signal.SIGRTMIN, signal.SIGRTMIN + 5, signal.SIGRTMAX]


def _sig_id(sig):
    if sig == signal.SIGRTMAX or sig < signal.SIGRTMIN:
        return signal.Signals(sig).name
    return "SIGRTMIN+%d" % (sig - signal.SIGRTMIN)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                                 signal.SIGUSR1, signal.SIGPROF, signal.SIGXCPU, signal.SIGRTMIN],
                         ids=_sig_id)
def test_a_signal_while_run_starts_leaves_no_directory(box, net, tmp_path, sig):
    """A signal that ends run while it starts, after it made its private
    directory and before the command runs (the gateway not ready yet: a
    ^C, a `timeout`), ended it by its default action: the directory
    /tmp/sluice-run-XXXXXX, with the gateway's socket and log once it had
    them, stayed behind. Run now holds such a signal until it can clean up,
    then ends of it as before, without starting the command; it does not
    wait for the gateway to be ready first (a gateway slow to start, on a
    user lookup that waits for a network, would hold a ^C as long), but
    stops it where it is: it never binds its socket. strace holds the
    gateway's first prctl() 1 s, and records the directory's name."""
    pol = box.policy(net.policy([]))
    marker = str(tmp_path / "ran")
    tracer = _start_held_run(box, tmp_path,
                             ["--policy", pol, "--gateway-user", "root", "--rw", str(tmp_path),
                              "--", PY, "-c", "open(%r, 'w').close()" % marker],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run, gateway = _held_in_prctl(tracer)
        os.kill(run, sig)
        tracer.wait(timeout=30)
        made = _run_dirs_made(tmp_path)
        assert len(made) == 1, made
        assert not os.path.exists(made[0]), (made[0], os.listdir(made[0]))
        assert tracer.returncode == -sig
        assert not os.path.exists(marker), "the command ran"
        assert not _gateway_bound(tmp_path), "run waited for its gateway to start"
        deadline = time.monotonic() + 10
        while _proc_field(gateway, "state") not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _proc_field(gateway, "state") in (None, "Z"), "the gateway outlived run"
    finally:
        _end_held_run(tracer, tmp_path)


# serial: a FUSE mount in the machine's mount namespace, which a box another
# worker builds meanwhile cannot make read-only (it refuses to start)
@pytest.mark.serial
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGRTMIN],
                         ids=_sig_id)
def test_a_stop_during_the_load_of_a_policy_that_does_not_answer(box, net, tmp_path, sig):
    """run loaded its policy on its own thread, before it held the signals
    that end it: on a file system that does not answer (a hung NFS or FUSE
    mount) a ^C or a `timeout` killed run without a word once the kernel
    let the read go (here the test's FUSE server, which ends a read whose
    reader is killed; one that does not would have held run for ever). The
    load now runs on a thread of its own: the stop is told, naming the
    file, the load left after 1 s, the command never starts, and run ends
    of that signal as of any other that comes while it starts."""
    from fuse_file import FuseFile, stop_during_held_read
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    marker = str(tmp_path / "ran")
    err = tmp_path / "err"
    with FuseFile(str(mnt), policy_yaml(net.policy([])).encode(), reads="hold") as fs:
        rc = stop_during_held_read(
            fs, [box.bin, "run", "--policy", fs.path, "--rw", str(tmp_path), "--", PY, "-c",
                 "open(%r, 'w').close()" % marker], sig, err, cwd=box.workdir, env=_clean_env())
    text = err.read_text()
    for mark in SANITIZER_MARKS:
        assert mark not in text, text
    assert not os.path.exists(marker), "the command ran"
    assert rc == -sig, (rc, text)
    name = "signal %d" % sig if sig >= signal.SIGRTMIN else signal.Signals(sig).name
    said = "sluice run: %s while loading the policy %s: the command does not start" % (
        name, fs.path)
    assert said in text, text
    assert "(its file system does not answer?), is abandoned" in text, text
    assert "sluice run: exit" not in text, text


def _assert_start_stopped(tracer, tmp_path, marker, sig, gateways, timeout):
    """That the run of TRACER, sent SIG while it started, did not run its
    command (which would have made MARKER), ended of SIG with no summary,
    removed its directory and did not leave its gateway running."""
    _, err = tracer.communicate(timeout=timeout)
    assert not os.path.exists(marker), "the command ran"
    assert tracer.returncode == -sig, (tracer.returncode, err)
    assert b"sluice run: exit" not in err, err
    made = _run_dirs_made(tmp_path)
    assert len(made) == 1, made
    assert not os.path.exists(made[0]), (made[0], os.listdir(made[0]))
    assert len(gateways) == 1, gateways
    assert _proc_field(gateways[0], "state") in (None, "Z"), "the gateway outlived run"


@pytest.mark.parametrize("how", ["terminal-SIGINT", "terminal-SIGQUIT", "process-SIGTERM"])
def test_a_signal_while_the_box_is_set_up_stops_the_start(box, net, tmp_path, how):
    """A signal that would end run while its box was set up (mounts,
    /proc, the relay: before the command exists) did not stop the start:
    a terminal's ^C or ^\\ reached run and the box's init (the command's
    process group), which both left it alone as having reached the command
    already, and one a process sent run was passed to the init, which
    passed it on to the command once that had started; so the command ran
    anyway. Now the init, until it forks the command, ends the start of
    such a signal: the command never runs, and run stops its gateway,
    removes its directory and ends of that signal, as it does of one that
    comes before the box. strace holds the init's first prctl() 1 s; the
    test is run's controlling terminal (a pty), and types ^C or ^\\ there
    (or sends run SIGTERM) meanwhile."""
    import fcntl
    import termios
    sig, key = {"terminal-SIGINT": (signal.SIGINT, b"\x03"),
                "terminal-SIGQUIT": (signal.SIGQUIT, b"\x1c"),
                "process-SIGTERM": (signal.SIGTERM, None)}[how]
    pol = box.policy(net.policy([]))
    marker = str(tmp_path / "ran")
    master, slave = os.openpty()

    def ctty():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    # strace -o FILE PROG blocks the signals a terminal sends itself (-I3)
    tracer = _start_held_run(box, tmp_path,
                             ["--policy", pol, "--gateway-user", "root", "--rw", str(tmp_path),
                              "--", PY, "-c", "open(%r, 'w').close()" % marker],
                             stdin=slave, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True, preexec_fn=ctty)
    try:
        run, init = _held_in_prctl(tracer, who="box")
        gateways = [c for c in _sluice_children(run) if c != init]
        if key is not None:
            os.write(master, key)
        else:
            os.kill(run, sig)
        _assert_start_stopped(tracer, tmp_path, marker, sig, gateways, timeout=60)
    finally:
        os.close(slave)
        os.close(master)
        _end_held_run(tracer, tmp_path)


SECCOMP_NR = {"x86_64": 317, "aarch64": 277}.get(os.uname().machine)


def _held_before_exec(tracer):
    """(run, the box's init, the command's process) once the command's
    process, under TRACER (strace holding seccomp()), is seen entering
    seccomp(): locking itself down, before it executes the command."""
    deadline = time.monotonic() + 60
    run = init = held = None
    while held is None and time.monotonic() < deadline and tracer.poll() is None:
        if run is None:
            found = _sluice_children(tracer.pid)
            run = found[0] if found else None
        elif init is None:
            found = [c for c in _sluice_children(run) if _in_own_pid_namespace(c)]
            init = found[0] if found else None
        else:
            for c in _sluice_children(init):
                try:
                    with open("/proc/%d/syscall" % c) as f:
                        if f.read().startswith("%d " % SECCOMP_NR):
                            held = c
                except OSError:
                    pass
        time.sleep(0.01)
    assert held is not None, "the command's process was never seen entering seccomp()"
    return run, init, held


@pytest.mark.parametrize("how", ["terminal-SIGINT", "process-SIGTERM", "to-the-command-SIGTERM"])
def test_a_signal_before_the_command_is_executed_stops_the_start(box, net, tmp_path, how):
    """A signal that would end run, coming after the box's init forked the
    command but before the command was executed (while it locks itself
    down: capabilities, Landlock, seccomp), did not stop the start as one
    that comes while the box is set up does: a terminal's ^C killed the
    process before it executed the command, and run still printed a summary
    and exited 130 for a command that never ran; one a process sent run was
    passed on by the init only once the command had been executed, so the
    command started and was then killed (run's summary, 143); one sent to
    the command's process itself killed it (run's summary, 143). Now that
    process holds such a signal until just before it executes the command
    and reports it instead, and the init watches for one until the command
    is executed and, if one comes first, kills the process: either way the
    start stops, the command never runs, run removes its directory and
    ends of the signal, with no summary. strace holds each seccomp() call
    0.2 s (the command's process loads its filter with it), with a pty as
    run's controlling terminal; the test types ^C there (or sends run, or
    the command's process, SIGTERM) meanwhile."""
    import fcntl
    import termios
    if SECCOMP_NR is None or shutil.which("strace") is None:
        pytest.skip("needs strace and a known seccomp number")
    if os.geteuid() != 0:
        pytest.skip("needs root for --gateway-user root")
    sig, key = {"terminal-SIGINT": (signal.SIGINT, b"\x03"),
                "process-SIGTERM": (signal.SIGTERM, None),
                "to-the-command-SIGTERM": (signal.SIGTERM, None)}[how]
    pol = box.policy(net.policy([]))
    marker = str(tmp_path / "ran")
    master, slave = os.openpty()

    def ctty():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    # strace -o FILE PROG blocks the signals a terminal sends itself (-I3)
    tracer = subprocess.Popen(
        ["strace", "-f", "-qq", "-o", str(tmp_path / "strace.out"), "-e",
         "trace=seccomp,mkdir,mkdirat", "-e", "inject=seccomp:delay_enter=200000",
         box.bin, "run", "--policy", pol, "--gateway-user", "root", "--rw", str(tmp_path),
         "--", PY, "-c", "open(%r, 'w').close()" % marker],
        cwd=box.workdir, env=_clean_env(), stdin=slave, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, start_new_session=True, preexec_fn=ctty)
    try:
        run, init, cmd = _held_before_exec(tracer)
        gateways = [c for c in _sluice_children(run) if c != init]
        if key is not None:
            os.write(master, key)
        else:
            os.kill(cmd if how.startswith("to-the-command") else run, sig)
        _assert_start_stopped(tracer, tmp_path, marker, sig, gateways, timeout=120)
    finally:
        os.close(slave)
        os.close(master)
        _end_held_run(tracer, tmp_path)


def test_a_stop_before_the_command_is_executed_does_not_hold_the_start(box, net, tmp_path):
    """A stop signal (a terminal's ^Z) that reaches the command's process
    while it locks itself down, before it executes the command, stopped
    it there: the init, waiting for the command to be executed, never
    began relaying or telling run, and run waited on for ever without
    stopping (found by the box review). That process now holds the stop
    signals until just before execve() and drops one that came, as one
    that comes while the box is set up stops nothing: the command runs.
    strace holds each seccomp() call 0.2 s (the command's process loads
    its filter with it); run is in a process group of its own that is not
    orphaned (the test, its parent, is in the same session), where SIGTSTP
    stops a process; the test sends it to the command's process then."""
    if SECCOMP_NR is None or shutil.which("strace") is None:
        pytest.skip("needs strace and a known seccomp number")
    if os.geteuid() != 0:
        pytest.skip("needs root for --gateway-user root")
    pol = box.policy(net.policy([]))
    marker = str(tmp_path / "ran")
    tracer = subprocess.Popen(
        ["strace", "-f", "-qq", "-o", str(tmp_path / "strace.out"), "-e",
         "trace=seccomp,mkdir,mkdirat", "-e", "inject=seccomp:delay_enter=200000",
         box.bin, "run", "--policy", pol, "--gateway-user", "root", "--rw", str(tmp_path),
         "--", PY, "-c", "open(%r, 'w').close()" % marker],
        cwd=box.workdir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, process_group=0,
        # LeakSanitizer cannot work under ptrace, and run ends normally here
        env=_clean_env({"ASAN_OPTIONS": (os.environ.get("ASAN_OPTIONS", "") +
                                         ":detect_leaks=0").lstrip(":")}))
    try:
        _, _, cmd = _held_before_exec(tracer)
        os.kill(cmd, signal.SIGTSTP)
        try:
            _, err = tracer.communicate(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            pytest.fail("run still waited %d s after a stop before the command was executed; "
                        "the command's process: %s" % (HANG_GUARD_S, _proc_field(cmd, "state")))
        assert tracer.returncode == 0, err
        assert os.path.exists(marker), "the command did not run"
        assert b"sluice run: exit 0;" in err, err
    finally:
        _end_held_run(tracer, tmp_path)


def _run_dir_of(pid):
    """The /tmp/sluice-run-XXXXXX directory of the run PID, by the decision
    log it holds open for the summary."""
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        m = re.match(r"(/tmp/sluice-run-[A-Za-z0-9]{6})/log\.jsonl$", target)
        if m:
            return m.group(1)
    return None


@contextlib.contextmanager
def _ready_run(box, argv, **popen):
    """`sluice run` with ARGV after the `--`, once the command printed
    `ready`: yields it and its /tmp/sluice-run-XXXXXX directory; kills it
    and removes the directory if they are still there at the end."""
    proc = subprocess.Popen([box.bin, "run"] + argv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=box.workdir,
                            env=_clean_env(), **popen)
    d = None
    try:
        _wait_ready(proc)
        d = _run_dir_of(proc.pid)
        assert d is not None and os.path.isdir(d)
        yield proc, d
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if d is not None:
            shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("sig", MORE_ENDING, ids=_sig_id)
def test_a_signal_while_the_command_runs_is_passed_on(box, net, sig):
    """Signals beyond the ten run passed on (SIGABRT, SIGPROF, SIGVTALRM,
    SIGXCPU, SIGIO, SIGPWR, SIGSTKFLT, the real-time ones) sent to run while
    the command ran ended run by their default action: no summary, its
    private directory with the gateway's socket and log left in /tmp, and
    the command killed with the box rather than told. run now passes each on
    like SIGTERM: the command (a shell's sleep, which takes each by its
    default action) dies of it, and run stops its gateway, removes the
    directory and exits 128+N after its summary."""
    pol = box.policy(net.policy([]))
    argv = ["--policy", pol, "--", "/bin/sh", "-c", "echo ready; exec sleep 60"]
    with _ready_run(box, argv) as (proc, d):
        gateway = [k for k in _sluice_children(proc.pid) if os.getpgid(k) == k]
        assert len(gateway) == 1, gateway
        proc.send_signal(sig)
        rc = proc.wait(20)
        err = proc.stderr.read()
        assert rc == 128 + sig, (rc, err)
        assert "sluice run: exit %d;" % rc in err
        assert not os.path.exists(d), os.listdir(d)
        assert _proc_field(gateway[0], "state") is None, "the gateway outlived run"


@pytest.mark.parametrize("sig", [signal.SIGPIPE, signal.SIGXFSZ], ids=_sig_id)
def test_a_signal_run_ignores_leaves_it_running(box, net, sig):
    """SIGPIPE and SIGXFSZ, which the kernel sends for run's own writes (a
    closed pipe, a file past RLIMIT_FSIZE: the write fails instead), are
    ignored by run: one sent by a process left it running, where SIGXFSZ
    ended it, its directory left behind. The command goes on and its status
    is run's."""
    pol = box.policy(net.policy([]))
    code = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\nsys.exit(5)\n"
    with _ready_run(box, ["--policy", pol, "--", PY, "-c", code],
                    stdin=subprocess.PIPE) as (proc, d):
        proc.send_signal(sig)  # pending for run once kill() returns: it acts on it first
        proc.stdin.close()
        rc = proc.wait(20)
        err = proc.stderr.read()
        assert rc == 5, (rc, err)
        assert "sluice run: exit 5;" in err
        assert not os.path.exists(d), os.listdir(d)


def test_a_command_that_ignores_sigterm_runs_on_until_run_gets_sigkill(box, net, tmp_path):
    """run never escalates: its SIGTERM is passed on, and a command that
    takes it and goes on runs on, as it would without the box (a grace then
    SIGKILL of run's own would cut a shutdown longer than that grace). The
    bounded stop is the supervisor's SIGKILL to run (systemd's
    TimeoutStopSec, `timeout -k`), which ends the gateway, the box and the
    command with it."""
    marker = "ignores-sigterm:%s" % tmp_path
    pol = box.policy(net.policy([]))
    code = ("import signal, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: print('term', flush=True))\n"
            "print('ready', flush=True)\n"
            "time.sleep(120)\n")
    with _ready_run(box, ["--policy", pol, "--", PY, "-c", code, marker]) as (proc, d):
        cmd = _processes_with_arg(os.path.realpath(PY), marker)
        assert len(cmd) == 1, cmd
        gateway = [k for k in _sluice_children(proc.pid) if _in_own_pid_namespace(k) is False]
        assert len(gateway) == 1, gateway
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.readline().strip() == "term"  # passed on, and taken
        assert proc.poll() is None and _proc_field(cmd[0], "state") not in (None, "Z")
        proc.kill()
        proc.wait(20)
        deadline = time.monotonic() + 10
        while _proc_field(cmd[0], "state") not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _proc_field(cmd[0], "state") in (None, "Z"), "the command outlived run's SIGKILL"
        while _proc_field(gateway[0], "state") not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _proc_field(gateway[0], "state") in (None, "Z"), "the gateway outlived run"


def test_background_processes_die_with_the_command(box, net, tmp_path):
    # A process the command started and left behind, one that would sleep
    # for an hour, dies with the command: run returns once the command
    # exited (not when the process would end: the guard below is far
    # shorter than its sleep) and no process of the box is left on the host.
    marker = "left-behind:%s" % tmp_path
    pol = box.policy(net.policy([]))
    code = r"""
import subprocess, sys
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", sys.argv[1]])
print('{"child": %d}' % p.pid)
"""
    try:
        p = box.run(["--policy", pol], cmd=[PY, "-c", code, marker], timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        pytest.fail("run did not return within %d s of its command's end: it waited for the "
                    "process the command left behind" % HANG_GUARD_S)
    finally:
        left = _processes_with_arg(os.path.realpath(PY), marker)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert p.returncode == 0, p.stderr
    assert left == [], "the process the command left behind outlived run: %r" % left
    assert Box.out(p)["child"] >= 2  # a PID in the box's own namespace


def test_summary_counts_tiers_and_denials(box, net):
    rules = [api_rule(net, tier=2), {"host": "other.example.test", "ports": [net.other.port],
                                     "tier": 0}]
    pol = box.policy(net.policy(rules, deny=["dead.example.test"]))
    code = r"""
import urllib.request, urllib.error, sys
for url in sys.argv[1:]:
    try:
        urllib.request.urlopen(url, timeout=10).read()
    except urllib.error.HTTPError as e:
        e.read()
print("{}")
"""
    urls = [net.url("/1"), net.url("/2"), other_url(net),
            net.url("/x", host="dead.example.test", port=net.dead_port),
            net.url("/y", host="nowhere.example.test", port=80)]
    p = box.run(["--policy", pol], None, cmd=[PY, "-c", code] + urls)
    assert p.returncode == 0, p.stderr
    s = Box.summary(p)
    assert s["allowed"] == 3 and s["tiers"] == [1, 0, 2, 0]
    assert s["denied"] == 2
    assert s["alerts"] == 0
    assert len([ln for ln in p.stderr.splitlines() if ln.startswith("sluice run: exit")]) == 1


def run_appending_to_the_log(box, tmp_path, write):
    """Runs a command that waits while <write>(file) appends to this run's
    decision log; returns the finished process."""
    pol = box.policy("version: 1\nrules: []\n")
    log = str(tmp_path / "decisions.jsonl")
    ready, go = os.path.join(box.workdir, "ready"), os.path.join(box.workdir, "go")
    wait = ("import os, time\nopen('ready', 'w').close()\n"
            "for _ in range(1200):\n    if os.path.exists('go'): break\n    time.sleep(0.05)\n")

    def append():
        for _ in range(1200):
            if os.path.exists(ready):
                break
            time.sleep(0.05)
        with open(log, "a") as f:
            write(f)
        open(go, "w").close()

    t = threading.Thread(target=append)
    t.start()
    try:
        # a hang guard: the summary reads up to 256 MiB a byte at a time, some
        # 10 s of CPU under the sanitizers, 120 s of wall time on a loaded
        # machine (a 120 s guard was passed so, under seven other test runs)
        p = box.run(["--policy", pol, "--log", log], wait, timeout=SUMMARY_GUARD_S)
    finally:
        t.join()
        os.unlink(log)
    assert p.returncode == 0, p.stderr
    return p


def test_summary_says_when_it_did_not_read_the_whole_log(box, tmp_path):
    """The summary reads at most 256 MiB of this run's decision log and
    stopped there without a word: a command that first floods the log
    (denied requests by the hundred thousand) had what it did next left out
    of "allowed N (tier 3: 0)". Here the test appends the flood and then an
    allowed tier-3 line to the log while the command waits."""
    def flood(f):
        line = "x" * 65535 + "\n"
        for _ in range(4096):  # 256 MiB
            f.write(line)
        f.write('{"event":"agent_egress","decision":"allow","tier":3}\n')

    p = run_appending_to_the_log(box, tmp_path, flood)
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("sluice run: exit")][0]
    assert line.endswith(" (counted in the first 256 MiB of the log only: see the log)"), line
    assert Box.summary(p)["allowed"] == 0


def test_summary_skips_a_line_longer_than_the_gateway_writes(box, tmp_path):
    """The summary read each line of the log whole (getline()): one line of
    gigabytes, appended by whoever else can write a --log file, took that
    much memory. A line longer than 16 MiB, which the gateway never writes,
    is skipped and said to be; the lines after it still count. Here a 24 MiB
    line, with a tier-3 allow in it, then a tier-0 allow."""
    def write(f):
        f.write('{"event":"agent_egress","decision":"allow","tier":3,"pad":"')
        chunk = "x" * (1024 * 1024)
        for _ in range(24):
            f.write(chunk)
        f.write('"}\n')
        f.write('{"event":"agent_egress","decision":"allow","tier":0}\n')

    p = run_appending_to_the_log(box, tmp_path, write)
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("sluice run: exit")][0]
    assert line.endswith(" (1 line longer than 16 MiB skipped: see the log)"), line
    s = Box.summary(p)
    assert s["allowed"] == 1 and s["tiers"] == [1, 0, 0, 0], line


def test_summary_counts_a_tunnel_decided_again_once(box, tmp_path):
    """A CONNECT tunnel decided again (the UTC day's change ended its grant,
    or a reload) gets a second agent_egress line for its id, deny or report:
    a new verdict on the same request. The summary counted it as a request
    allowed and one denied. Here the test appends such a tunnel's lines to
    the log while the command waits: allowed once, as its first line says,
    like sluice_requests_total. So does a plain request whose body was
    still going up (c11.1: counted as allowed and denied before)."""
    lines = [
        {"event": "agent_egress", "id": "c9.1", "method": "CONNECT", "decision": "allow", "tier": 3},
        {"event": "agent_egress", "id": "c9.1", "method": "CONNECT", "decision": "deny",
         "reason": "grant_expired", "tier": 3},
        {"event": "agent_egress_end", "id": "c9.1", "status": 200},
        {"event": "agent_egress", "id": "c9.2", "method": "CONNECT", "decision": "report",
         "reason": "not_in_policy", "tier": None},
        {"event": "agent_egress", "id": "c9.2", "method": "CONNECT", "decision": "report",
         "reason": "denied_host", "tier": None},
        {"event": "agent_egress_end", "id": "c9.2", "status": 200},
        # a new connection may reuse nothing: another id, another request
        {"event": "agent_egress", "id": "c10.1", "method": "CONNECT", "decision": "deny",
         "reason": "not_in_policy", "tier": None},
        {"event": "agent_egress_end", "id": "c10.1", "status": 403},
        {"event": "agent_egress", "id": "c11.1", "method": "POST", "decision": "allow", "tier": 2},
        {"event": "agent_egress", "id": "c11.1", "method": "POST", "decision": "deny",
         "reason": "grant_expired", "tier": 2},
        {"event": "agent_egress_end", "id": "c11.1", "status": 403},
    ]

    def write(f):
        for ln in lines:
            f.write(json.dumps(ln) + "\n")

    s = Box.summary(run_appending_to_the_log(box, tmp_path, write))
    assert s["allowed"] == 2 and s["tiers"] == [0, 0, 1, 1], s
    assert s["denied"] == 1 and s["reported"] == 1, s



def test_agent_id_and_log_file(box, net):
    rules = [api_rule(net, agents=["ci-bot"])]
    pol = box.policy(net.policy(rules))
    log = os.path.join(box.workdir, "..", "decisions.jsonl")
    p = box.run(["--policy", pol, "--agent", "ci-bot", "--log", log], None,
                cmd=[PY, "-c", FETCH, net.url("/as-ci")])
    assert Box.out(p)["status"] == 200
    p = box.run(["--policy", pol, "--log", log], None, cmd=[PY, "-c", FETCH, net.url("/as-run")])
    o = Box.out(p)
    assert o["status"] == 403 and o["reason"] == "agent_not_allowed"
    # the summary counts only this run's lines of a shared log
    s = Box.summary(p)
    assert s["allowed"] == 0 and s["denied"] == 1
    with open(log) as f:
        evs = [json.loads(ln) for ln in f if '"agent_egress"' in ln]
    assert [(e["agent"], e["decision"]) for e in evs] == [("ci-bot", "allow"), ("run", "deny")]


def test_the_policys_tokens_do_not_reach_the_command(box, net):
    """run serves the policy itself, every request being --agent's: the
    agents' tokens are of no use to the box, and a secret of an agent that
    a serving gateway knows by it must not reach the agent in the box."""
    agents = [{"id": "ci-bot", "sources": ["127.0.0.1/32"], "token": "env:SLUICE_TEST_BOX_TOKEN"},
              {"id": "other", "sources": ["unix"], "token": "env:SLUICE_TEST_BOX_TOKEN2"}]
    pol = box.policy(net.policy([api_rule(net)], agents=agents))
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    p = box.run(["--policy", pol, "--agent", "ci-bot"], code,
                env={"SLUICE_TEST_BOX_TOKEN": "box-secret-1", "SLUICE_TEST_BOX_TOKEN2": "box-2",
                     "SLUICE_TEST_BOX_KEPT": "kept"})
    assert p.returncode == 0, p.stderr
    env = Box.out(p)
    assert "SLUICE_TEST_BOX_TOKEN" not in env and "SLUICE_TEST_BOX_TOKEN2" not in env
    assert "box-secret-1" not in p.stdout and "box-2" not in p.stdout
    assert env["SLUICE_TEST_BOX_KEPT"] == "kept"


# In-box code: fetches argv[1] through the relay, reads the policy file argv[2]
# and its own environment, then waits (bounded) for the file "go" in the
# working directory, which the test writes once the gateway outside has
# POSTed the alert: the gateway stops with the command.
READ_SECRETS = FETCH.replace("print(json.dumps(out))", "") + r"""
import time
with open(sys.argv[2]) as f:
    out["policy"] = f.read()
out["env"] = dict(os.environ)
for _ in range(600):
    if os.path.exists("go"):
        break
    time.sleep(0.05)
out["go"] = os.path.exists("go")
print(json.dumps(out))
"""


def test_a_webhook_url_read_from_the_environment_is_out_of_the_boxs_reach(box, net):
    """A webhook URL's path is often its credential (Slack's, Discord's),
    and the box reads the policy file (read-only): written `webhook:
    env:NAME`, the URL is in no file, and the command's environment lacks
    the variable, as it lacks the tokens'; the gateway outside POSTs the
    alerts to it."""
    rcv = Receiver()
    secret = "/services/T0/B0/box-hook-secret-5f1c"
    url = "http://127.0.0.1:%d%s" % (rcv.port, secret)
    go = os.path.join(box.workdir, "go")

    def let_go():
        for _ in range(1200):  # a hang guard: the command gives up after 30 s anyway
            if any(b.get("kind") == "first_contact" for b in rcv.bodies()):
                break
            time.sleep(0.05)
        with open(go, "w"):
            pass

    try:
        pol = box.policy(net.policy([api_rule(net)], alerts={
            "first_contact": True, "sinks": [{"webhook": "env:SLUICE_TEST_BOX_HOOK"}]}))
        t = threading.Thread(target=let_go, daemon=True)
        t.start()
        p = box.run(["--policy", pol], None,
                    cmd=[PY, "-c", READ_SECRETS, net.url("/hooked"), pol],
                    env={"SLUICE_TEST_BOX_HOOK": url}, timeout=HANG_GUARD_S)
        assert p.returncode == 0, p.stderr
        t.join(HANG_GUARD_S)
        out = Box.out(p)
        assert out["status"] == 200, out
        assert out["go"], (out, rcv.posts)
        assert "env:SLUICE_TEST_BOX_HOOK" in out["policy"]
        assert "box-hook-secret" not in json.dumps(out), out
        assert "SLUICE_TEST_BOX_HOOK" not in out["env"]
        assert "box-hook-secret" not in p.stderr, p.stderr
        paths = [path for path, _, b in rcv.posts if b.get("kind") == "first_contact"]
        assert paths == [secret], rcv.posts
    finally:
        rcv.stop()


def test_run_serves_a_policy_whose_token_variables_are_unset(box, net):
    """Every request from the box is --agent's: run's gateway compares no
    secret, so a token variable unset or empty where run is started (a
    developer's machine without CI's secrets) does not stop it, while
    serve still refuses such a policy."""
    agents = [{"id": "ci-bot", "sources": ["127.0.0.1/32"], "token": "env:SLUICE_TEST_BOX_UNSET"},
              {"id": "other", "sources": ["unix"], "token": "env:SLUICE_TEST_BOX_EMPTY"}]
    pol = box.policy(net.policy([api_rule(net, agents=["ci-bot"])], agents=agents))
    env = {"SLUICE_TEST_BOX_EMPTY": "", "SLUICE_TEST_BOX_KEPT": "kept"}
    code = FETCH + "\nout['env'] = sorted(k for k in os.environ if 'SLUICE_TEST_BOX' in k)" \
        + "\nprint(json.dumps(out))"
    p = box.run(["--policy", pol, "--agent", "ci-bot"], None,
                cmd=[PY, "-c", code, net.url("/unset-tokens")], env=env)
    assert p.returncode == 0, p.stderr
    out = Box.out(p)
    assert out["status"] == 200, out
    assert out["env"] == ["SLUICE_TEST_BOX_KEPT"], out
    assert "not set" not in p.stderr and "is empty" not in p.stderr, p.stderr
    assert Box.summary(p)["allowed"] == 1
    s = subprocess.run([box.bin, "serve", "--policy", pol, "--listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=30, env=_clean_env(env))
    assert s.returncode == 2, s.stderr
    assert "agents[0].token: environment variable SLUICE_TEST_BOX_UNSET is not set" in s.stderr


def test_proxy_mode_uses_a_serving_gateway(box, net, gateway):
    gw = gateway(net.policy([api_rule(net)]), tcp=False, unix=True)
    p = box.run(["--proxy", "unix:" + gw.unix_path], None,
                cmd=[PY, "-c", FETCH, net.url("/via-proxy")])
    assert p.returncode == 0, p.stderr
    assert Box.out(p)["status"] == 200
    ev, _ = gw.decided(path="/via-proxy")
    assert ev["decision"] == "allow"
    assert "relayed 1 connection to unix:%s" % gw.unix_path in p.stderr
    assert "--agent has no effect" not in p.stderr
    # --agent names the box only when run serves the policy itself
    p = box.run(["--proxy", "unix:" + gw.unix_path, "--agent", "ci-bot"], None,
                cmd=[PY, "-c", FETCH, net.url("/via-proxy-agent")])
    assert p.returncode == 0, p.stderr
    assert ("sluice run: warning: --agent has no effect with --proxy: the serving gateway "
            "identifies clients by source and token") in p.stderr
    ev, _ = gw.decided(path="/via-proxy-agent")
    assert ev["agent"] != "ci-bot"


@pytest.mark.parametrize("mode", ["policy", "proxy"])
def test_a_closed_standard_error_does_not_change_the_status(box, net, gateway, mode):
    """run's standard error a pipe no one reads any more (`2>&1 | head -1`
    once head has ended): with --proxy, run took the SIGPIPE of its summary's
    write by its default action and exited 141 (-13) whatever the command's
    status, where with --policy it ignored it and exited with the command's.
    Both ignore it now (and SIGXFSZ, a file past RLIMIT_FSIZE)."""
    if mode == "policy":
        args = ["--policy", box.policy(net.policy([]))]
    else:
        args = ["--proxy", "unix:" + gateway(net.policy([]), tcp=False, unix=True).unix_path]
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([box.bin, "run"] + args + ["--", PY, "-c", "import sys; sys.exit(7)"],
                           stdout=subprocess.DEVNULL, stderr=w, cwd=box.workdir,
                           env=_clean_env(), timeout=30)
    finally:
        os.close(w)
    assert p.returncode == 7


def test_proxy_mode_counts_only_connections_that_reached_the_gateway(box, net, tmp_path):
    """The summary's `relayed C connections` counted every connection the
    relay accepted, also those it closed because the gateway's socket
    refused them: with --proxy naming a socket nothing listens on, run said
    it relayed connections none of which reached a gateway (found by the
    box review)."""
    path = str(tmp_path / "dead.sock")
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)  # a socket file, but nothing listens on it
    code = r"""
import json, socket
got = []
for _ in range(2):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    try:
        got.append(s.recv(1))
    except OSError as e:
        got.append(type(e).__name__)
    s.close()
print(json.dumps({"got": [g if isinstance(g, str) else g.decode() for g in got]}))
"""
    try:
        p = box.run(["--proxy", "unix:" + path], code)
    finally:
        dead.close()
    assert p.returncode == 0, p.stderr
    assert all(g in ("", "ConnectionResetError") for g in Box.out(p)["got"])
    assert "relayed 0 connections to unix:%s" % path in p.stderr, p.stderr


def test_usage_errors(box, net):
    pol = box.policy(net.policy([]))
    for args in ([], ["--policy", pol], ["--proxy", "tcp:1.2.3.4", "--", "true"],
                 ["--policy", pol, "--proxy", "unix:/x", "--", "true"],
                 ["--policy", pol, "--bogus", "--", "true"],
                 ["--policy", pol, "--log", "-", "--", "true"]):
        p = subprocess.run([box.bin, "run"] + args, capture_output=True, text=True, timeout=10,
                           cwd=box.workdir)
        assert p.returncode == 2, (args, p.stderr)
        assert "usage: sluice run" in p.stderr
    bad = box.policy("version: 1\nrules: []\ncolour: blue\n")
    p = subprocess.run([box.bin, "run", "--policy", bad, "--", "true"], capture_output=True,
                       text=True, timeout=10, cwd=box.workdir)
    assert p.returncode == 2
    assert "policy.yaml:3" in p.stderr


@pytest.mark.parametrize("opt", ["--hide", "--ro", "--rw"])
def test_empty_path_is_a_usage_error(box, opt):
    """An empty --hide (an unset variable: --hide "$AWS_DIR") was made
    absolute as the working directory, and the box hid the project from
    the command, which ran on in an empty directory (cat: no work.txt)."""
    pol = os.path.join(os.path.dirname(box.workdir), "outside.yaml")
    with open(pol, "w") as f:
        f.write("version: 1\nrules:\n  - {host: a.example.test, tier: 0}\n")
    with open(os.path.join(box.workdir, "work.txt"), "w") as f:
        f.write("the project\n")
    p = subprocess.run([box.bin, "run", "--policy", pol, opt, "", "--", "cat", "work.txt"],
                       capture_output=True, text=True, timeout=30, cwd=box.workdir)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith("sluice run: %s needs a path, not an empty string" % opt), p.stderr
    assert p.stdout == ""


def test_log_path_longer_than_path_max_is_a_usage_error(box):
    """run kept --log in a PATH_MAX buffer: a longer path was cut there and
    the gateway wrote the decision log to whatever file the cut named."""
    pol = box.policy("version: 1\nrules: []\n")
    real = os.path.join(box.workdir, "log.jsonl")
    given = "/" * (4095 - len(real)) + real + "-elsewhere"
    p = subprocess.run([box.bin, "run", "--policy", pol, "--log", given, "--", "true"],
                       capture_output=True, text=True, timeout=30, cwd=box.workdir)
    assert p.returncode == 2, p.stderr
    assert "sluice run: --log %s: File name too long\n" % given in p.stderr, p.stderr
    assert not os.path.exists(real)


@pytest.mark.parametrize("agent", ["CI-Bot", "ci bot", "ci-bot\nsluice run: exit 0", "", "a" * 65])
def test_agent_id_no_policy_can_name_is_a_usage_error(box, agent):
    """--agent took any 1 to 128 characters, while a policy's ids are 1-64 of
    a-z, 0-9, '.', '_', '-': `--agent CI-Bot` for a policy's ci-bot ran the
    box as an agent that none of its agents: rules or entries (mode) named,
    without a word."""
    pol = box.policy("version: 1\nagents:\n  - id: ci-bot\n    sources: [unix]\n    mode: report\n"
                     "rules: []\n")
    p = subprocess.run([box.bin, "run", "--policy", pol, "--agent", agent, "--", "true"],
                       capture_output=True, text=True, timeout=10, cwd=box.workdir)
    assert p.returncode == 2, p.stderr
    shown = agent.replace("\n", "\\012")  # \\ooo: no line of its own
    assert p.stderr.startswith("sluice run: --agent: '%s' is not an agent id" % shown), p.stderr
    assert "usage: sluice run" in p.stderr


def test_options_end_at_the_command_without_dashes(box, net):
    """`--` before the command may be left out: run's options end at the
    first argument that is not one, and what follows is the command's,
    untouched, its flags spelled as run's among them (curl's -x, a --rw)."""
    pol = box.policy(net.policy([]))
    code = "import json, sys; print(json.dumps(sys.argv[1:]))"
    args = ["--policy", "other.yaml", "--agent", "x", "-h", "--rw", "/", "--", "-x"]
    p = subprocess.run([box.bin, "run", "--policy", pol, PY, "-c", code] + args,
                       capture_output=True, text=True, timeout=60, cwd=box.workdir,
                       env=_clean_env())
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[-1]) == args, p.stdout


@pytest.mark.parametrize("late", ["--policy", "--pol=p.yaml", "--proxy"])
def test_run_options_after_the_command_are_named(box, late):
    """`sluice run CMD --policy FILE`: the flag is CMD's (options end at the
    command), so run has no policy; it said "give either --policy FILE or
    --proxy unix:PATH", to a caller who had given one. It names the flag
    and the rule."""
    p = subprocess.run([box.bin, "run", "curl", late, "p.yaml"], capture_output=True,
                       text=True, timeout=10, cwd=box.workdir)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith(
        "sluice run: '%s' after the command is the command's own argument: run's options go "
        "before the command (sluice run --policy FILE [OPTIONS] -- CMD [ARG]...)\n" % late), \
        p.stderr


def test_proxy_path_that_is_not_a_socket(box, net, tmp_path):
    """--proxy unix:PATH naming a file that is not a socket is refused as
    "not a socket", one that does not exist with why: the message took the
    errno of whatever call had failed last (`Invalid argument` for a
    regular file), and read the file type of a stat() that had failed."""
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    for path, why in ((str(plain), "not a socket"), (str(tmp_path), "not a socket"),
                      (str(tmp_path / "none.sock"), "No such file or directory"),
                      (str(tmp_path / "x\n\033[31my.sock"), "No such file or directory")):
        p = subprocess.run([box.bin, "run", "--proxy", "unix:" + path, "--", "true"],
                           capture_output=True, text=True, timeout=10, cwd=box.workdir)
        assert p.returncode == 2, (path, p.stderr)
        shown = path.replace("\n", "\\012").replace("\033", "\\033")  # no line of its own
        # a usage error, as a --ro path that names nothing: the usage line follows
        first, usage, end = p.stderr.split("\n")
        assert first == "sluice run: --proxy unix:%s: %s" % (shown, why), p.stderr
        assert usage.startswith("usage: sluice run ") and end == "", p.stderr


def test_refused_namespace_is_a_clear_error(box, net):
    """With the network-namespace limit at 0 (set inside a user namespace)
    the box cannot be built: exit 2, which namespace, how to enable it."""
    pol = box.policy(net.policy([]))
    marker = os.path.join(box.workdir, "ran")
    script = ('echo 0 > /proc/sys/user/max_net_namespaces || exit 99; exec "$@"')
    argv = ["unshare", "--user", "--map-root-user", "sh", "-c", script, "sh", box.bin, "run",
            "--policy", pol, "--", PY, "-c", "open(%r, 'w')" % marker]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=20, cwd=box.workdir,
                       env=_clean_env())
    if p.returncode == 99 or "unshare:" in p.stderr:
        pytest.skip("cannot lower user.max_net_namespaces here: %s" % p.stderr.strip())
    assert p.returncode == 2, p.stderr
    assert "network namespace" in p.stderr
    assert "max_net_namespaces" in p.stderr
    assert not os.path.exists(marker)


# --------------------------------------------------------------------------
# audit mounts on a live box


def test_audit_mounts_inside_the_box(box, net, hostdir):
    pol = box.policy(net.policy([]))
    just = os.path.join(hostdir, "justify.txt")
    with open(just, "w") as f:
        f.write("/tmp: private scratch space of the box\n"
                "/dev/shm: private shared memory of the box\n"
                "%s: the checkout the agent works on\n" % box.workdir)
    # The binary under test may live below /tmp (a CI clone), which the box
    # replaces with an empty tmpfs: bind its folder in, read-only.
    bindir = ["--ro", os.path.dirname(box.bin)]
    p = box.run(["--policy", pol] + bindir, None,
                cmd=[box.bin, "audit", "mounts", "--pid", "self", "--format", "json"])
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    writable = sorted(m["mount_point"] for m in doc["writable"])
    assert writable == sorted(["/tmp", "/dev/shm", box.workdir])
    p = box.run(["--policy", pol] + bindir, None,
                cmd=[box.bin, "audit", "mounts", "--justify", just])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "3 writable, 0 unjustified" in p.stdout
    rw = os.path.join(hostdir, "cache")
    os.makedirs(rw)
    p = box.run(["--policy", pol, "--rw", rw] + bindir, None,
                cmd=[box.bin, "audit", "mounts", "--justify", just])
    assert p.returncode == 1
    assert "UNJUSTIFIED  %s" % rw in p.stdout


# --------------------------------------------------------------------------
# not root: a user namespace


def _userns_allowed():
    try:
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            "unshare", "--user", "--map-root-user", "--net", "--mount", "true"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    return r.returncode == 0, r.stderr.strip()


def _nobody_box(sluice_bin, net, hostdir, rules, *, userns=True):
    """A Box whose runs may go as nobody (uid 65534): a world-writable work
    folder and a world-readable policy of <rules>. Skips unless root (to
    switch), nobody can execute the binary and, with <userns>, the kernel
    allows unprivileged user namespaces. Returns (box, policy path)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to nobody")
    if userns:
        ok, why = _userns_allowed()
        if not ok:
            pytest.skip("the kernel refuses unprivileged user namespaces: %s" % why)
    if not os.access(sluice_bin, os.X_OK) or subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sluice_bin,
             "version"], capture_output=True).returncode != 0:
        pytest.skip("nobody cannot execute %s" % sluice_bin)
    work = os.path.join(hostdir, "work")
    os.makedirs(work)
    os.chmod(work, 0o777)
    b = Box(sluice_bin, work)
    pol = b.policy(net.policy(rules))
    os.chmod(pol, 0o644)
    return b, pol


def test_unprivileged_box(sluice_bin, net, tmp_path, hostdir):
    b, pol = _nobody_box(sluice_bin, net, hostdir, [api_rule(net)])
    code = FETCH + r"""
import errno
def write(path):
    try:
        open(path, "w").write("x"); return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
caps = [l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1]
print(json.dumps({"uid": os.getuid(), "etc": write("/etc/sluice-x"), "cwd": write("f"),
                  "caps": caps}))
"""
    p = b.run(["--policy", pol], None, cmd=[PY, "-c", code, net.url("/nobody")], user=65534)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert lines[0]["status"] == 200
    assert lines[1] == {"uid": 65534, "etc": "EROFS", "cwd": "ok", "caps": "0000000000000000"}
    assert Box.summary(p)["allowed"] == 1


def test_root_box_has_no_capabilities(box, net):
    pol = box.policy(net.policy([]))
    code = r"""
import json, os
caps = {l.split(":")[0]: l.split()[1] for l in open("/proc/self/status") if l.startswith("Cap")}
nnp = [l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs")][0]
print(json.dumps({"uid": os.getuid(), "eff": caps["CapEff"], "bnd": caps["CapBnd"],
                  "nnp": nnp, "pid": os.getpid(), "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}))
"""
    p = box.run(["--policy", pol], code)
    o = Box.out(p)
    assert o["eff"] == "0000000000000000"
    assert o["bnd"] == "0000000000000000"
    assert o["nnp"] == "1"
    assert o["procs"] == [1, o["pid"]]  # a PID namespace: only the box's init and itself


def test_proc_stays_read_only_for_a_nested_user_namespace(box, net):
    """/proc is read-only in the box, and stays so for a user namespace the
    command makes inside it: a uid_map write there ("0 0 1", root of the
    namespace as the box's root) would let it set file capabilities with
    rootid 0 on a file in a writable folder, capabilities that would work on
    the host. The kernel refuses that map too (EPERM: the command has no
    capabilities); the read-only /proc is the layer before it, pinned here
    (with a writable /proc the write gets as far as that EPERM)."""
    pol = box.policy(net.policy([]))
    code = r"""
import ctypes, errno, json, os
def write(path, text):
    try:
        with open(path, "w") as f:
            f.write(text)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
out = {"proc_ro": bool(os.statvfs("/proc").f_flag & os.ST_RDONLY)}
libc = ctypes.CDLL(None, use_errno=True)
r = libc.unshare(0x10000000)  # CLONE_NEWUSER
out["unshare"] = "ok" if r == 0 else errno.errorcode[ctypes.get_errno()]
if r == 0:
    out["setgroups"] = write("/proc/self/setgroups", "deny")
    out["uid_map"] = write("/proc/self/uid_map", "0 0 1")
print(json.dumps(out))
"""
    p = box.run(["--policy", pol], code)
    o = Box.out(p)
    assert o["proc_ro"] is True, o
    if o["unshare"] == "ok":
        assert o["uid_map"] == "EROFS", o
    else:
        assert o["unshare"] in ("EPERM", "EINVAL", "ENOSPC", "EUSERS"), o


def test_summary_counts_alerts(box, net):
    """Alerts go to the decision log unless --alerts FILE; the summary counts
    them either way (first_contact raises one for the first request)."""
    pol = box.policy(net.policy([api_rule(net)], alerts={"first_contact": True}))
    p = box.run(["--policy", pol], None, cmd=[PY, "-c", FETCH, net.url("/first")])
    assert Box.out(p)["status"] == 200
    assert Box.summary(p)["alerts"] >= 1, p.stderr
    alerts = os.path.join(box.workdir, "..", "alerts.jsonl")
    p = box.run(["--policy", pol, "--alerts", alerts], None,
                cmd=[PY, "-c", FETCH, net.url("/again")])
    assert Box.summary(p)["alerts"] >= 1, p.stderr
    with open(alerts) as f:
        kinds = [json.loads(ln)["kind"] for ln in f if ln.strip()]
    assert "first_contact" in kinds


def test_summary_counts_alerts_once_when_log_and_alerts_are_one_file(box, net):
    """--alerts naming the decision log's file (by the same path, or by
    another one: a link): the summary counted each alert line twice, once
    in the log and once in the alerts file."""
    pol = box.policy(net.policy([api_rule(net)], alerts={"first_contact": True}))
    log = os.path.join(box.workdir, "..", "all.jsonl")
    other = os.path.join(box.workdir, "..", "all-too.jsonl")
    for alerts in (log, other):
        if alerts == other:
            open(log, "w").close()
            os.link(log, other)
        p = box.run(["--policy", pol, "--log", log, "--alerts", alerts], None,
                    cmd=[PY, "-c", FETCH, net.url("/first")])
        assert Box.out(p)["status"] == 200, p.stderr
        with open(log) as f:
            lines = [json.loads(ln) for ln in f if ln.strip()]
        assert Box.summary(p)["alerts"] == sum(1 for o in lines if o.get("event") == "alert"), \
            (alerts, p.stderr)
        assert Box.summary(p)["alerts"] >= 1
        os.unlink(log)
        if alerts == other:
            os.unlink(other)


# --------------------------------------------------------------------------
# what else of the host the box must not reach


def test_host_sysv_ipc_and_hostname_are_not_shared(box, net):
    """An IPC namespace: a System V message queue of the host is not there
    (msgsnd fails, /proc/sysvipc/msg lists nothing); a UTS namespace: the
    host name is the box's own."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    qid = libc.msgget(0, 0o1600)  # IPC_PRIVATE, IPC_CREAT, mode 0600
    assert qid >= 0, os.strerror(ctypes.get_errno())
    try:
        pol = box.policy(net.policy([]))
        code = r"""
import ctypes, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(b"\x01" + b"\0" * 7 + b"exfil")
r = libc.msgsnd(int(sys.argv[1]), buf, 5, 0o4000)
rows = open("/proc/sysvipc/msg").read().splitlines()[1:]
print(json.dumps({"msgsnd": r, "rows": rows, "host": socket.gethostname()}))
"""
        o = Box.out(box.run(["--policy", pol], None, cmd=[PY, "-c", code, str(qid)]))
        assert o["msgsnd"] == -1
        assert o["rows"] == []
        assert o["host"] == "sluice-box"
        buf = ctypes.create_string_buffer(64)
        assert libc.msgrcv(qid, buf, 56, 0, 0o4000) == -1  # IPC_NOWAIT: nothing arrived
    finally:
        libc.msgctl(qid, 0, None)  # IPC_RMID


KEYS = r"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
res = {}
# keyctl(KEYCTL_SEARCH, KEY_SPEC_SESSION_KEYRING or KEY_SPEC_USER_KEYRING, "user", name, 0)
for ring, spec, name in (("session", -3, b"sluice-test-secret"),
                         ("user", -4, b"sluice-test-user-secret")):
    kid = libc.syscall(250, 10, spec, b"user", name, 0)
    res[ring] = [kid, ctypes.get_errno()]
kid = libc.syscall(248, b"user", b"planted", b"x", 1, -3)  # add_key
res["add_key"] = [kid, ctypes.get_errno()]
print(json.dumps(res))
"""


def test_keyrings_out_of_reach(box, net):
    """Keys in the caller's session keyring and, as root, in root's user
    keyring (which a root box shares, having no user namespace) are not
    found from the box: keyring calls fail with ENOSYS there."""
    import platform
    if platform.machine() != "x86_64":
        pytest.skip("syscall numbers below are x86_64's")
    pol = box.policy(net.policy([]))
    # a child with its own session keyring holding a key (and, as root, a key
    # in root's user keyring, removed afterwards) runs sluice
    setup = r"""
import ctypes, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
if libc.syscall(250, 1, None) < 0:          # KEYCTL_JOIN_SESSION_KEYRING
    sys.exit(77)
kid = libc.syscall(248, b"user", b"sluice-test-secret", b"hunter2", 7, -3)  # add_key
if kid < 0:
    sys.exit(77)
# the key is findable here
assert libc.syscall(250, 10, -3, b"user", b"sluice-test-secret", 0) == kid
ukid = -1
if os.geteuid() == 0:
    ukid = libc.syscall(248, b"user", b"sluice-test-user-secret", b"hunter3", 7, -4)
    assert libc.syscall(250, 10, -4, b"user", b"sluice-test-user-secret", 0) == ukid
try:
    rc = subprocess.run(sys.argv[1:]).returncode
finally:
    if ukid >= 0:
        libc.syscall(250, 21, ukid)  # KEYCTL_INVALIDATE
sys.exit(rc)
"""
    argv = [PY, "-c", setup, box.bin, "run", "--policy", pol, "--", PY, "-c", KEYS]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=box.workdir,
                       env=_clean_env())
    if p.returncode == 77:
        pytest.skip("no keyrings here")
    assert p.returncode == 0, p.stderr
    o = Box.out(p)
    enosys = 38
    assert o == {"session": [-1, enosys], "user": [-1, enosys], "add_key": [-1, enosys]}


FAMILIES = r"""
import errno, json, socket
res = {}
for name, fam, typ in [("inet", 2, 1), ("inet6", 10, 1), ("netlink", 16, 3), ("packet", 17, 3),
                       ("vsock", 40, 1), ("alg", 38, 5), ("bluetooth", 31, 1), ("can", 29, 3),
                       ("tipc", 30, 2), ("x25", 9, 5), ("unspec", 0, 1), ("rds", 21, 5),
                       ("unix_pair", 1, 1), ("vsock_pair", 40, 1)]:
    try:
        if name.endswith("_pair"):
            for s in socket.socketpair(fam, typ):
                s.close()
        else:
            socket.socket(fam, typ).close()
        res[name] = "ok"
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(res))
"""


def test_socket_families_refused(box, net):
    """Only AF_INET, AF_INET6 and AF_NETLINK sockets (AF_UNIX with
    --allow-unix); AF_VSOCK would reach a VM host's services."""
    pol = box.policy(net.policy([]))
    o = Box.out(box.run(["--policy", pol], FAMILIES))
    assert o["inet"] == o["inet6"] == o["netlink"] == "ok", o
    for name in ("packet", "vsock", "alg", "bluetooth", "can", "tipc", "x25", "unspec", "rds",
                 "vsock_pair"):
        assert o[name] == "EAFNOSUPPORT", (name, o)
    assert o["unix_pair"] == "ok"
    o = Box.out(box.run(["--policy", pol, "--allow-unix"], FAMILIES))
    assert o["inet"] == o["netlink"] == o["unix_pair"] == "ok", o
    assert o["vsock"] == o["packet"] == o["alg"] == "EAFNOSUPPORT", o


TIOCSTI = r"""
import errno, fcntl, json, termios
res = {}
for name, req in (("tiocsti", termios.TIOCSTI), ("tiocsti_high", termios.TIOCSTI | (1 << 32))):
    try:
        fcntl.ioctl(0, req, b"#")
        res[name] = "ok"
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(res))
"""

# A virtual console's key map (<linux/kd.h>): KDSKBENT binds a key to an
# action, KDSKBSENT sets the string a function key types. The argument is
# a null pointer, so that even on a real console nothing would change
# (EFAULT); on the pty of the test the kernel answers ENOTTY.
KEYMAP = r"""
import ctypes, errno, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
res = {}
for name, req in (("kdskbent", 0x4B47), ("kdskbsent", 0x4B49),
                  ("kdskbsent_high", 0x4B49 | (1 << 32))):
    r = libc.syscall(ctypes.c_long(16), ctypes.c_long(0), ctypes.c_long(req), ctypes.c_long(0))
    res[name] = "ok" if r == 0 else errno.errorcode.get(ctypes.get_errno(), "?")
print(json.dumps(res))
"""


def _run_on_terminal(argv, cwd, user=None):
    """Runs <argv> with a new pty as its controlling terminal and standard
    input (standard output and error are pipes). Returns the process's
    result and what is left in the terminal's input queue."""
    import fcntl
    import termios
    master, slave = os.openpty()

    def ctty():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    if user is not None:
        os.fchown(slave, user, -1)
        argv = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + argv
    try:
        p = subprocess.run(argv, stdin=slave, capture_output=True, text=True, timeout=30,
                           cwd=cwd, env=_clean_env(), start_new_session=True, preexec_fn=ctty)
        # what a shell reading this terminal would get next
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ICANON
        attrs[6][termios.VMIN] = 0
        attrs[6][termios.VTIME] = 0
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        try:
            pending = os.read(slave, 1024)
        except BlockingIOError:
            pending = b""
    finally:
        os.close(slave)
        os.close(master)
    return p, pending


def test_terminal_input_cannot_be_injected(box, net, hostdir):
    """The command shares run's terminal (signals from it reach the command
    directly), so TIOCSTI would let it push a command line into the
    terminal's input, which the user's shell runs, unboxed, once run exits
    (bubblewrap's CVE-2017-5226). The seccomp filter refuses it (and
    TIOCLINUX), whatever the ioctl request's upper 32 bits hold."""
    pol = box.policy(net.policy([]))
    argv = [box.bin, "run", "--policy", pol, "--", PY, "-c", TIOCSTI]
    p, pending = _run_on_terminal(argv, box.workdir)
    assert p.returncode == 0, p.stderr
    assert Box.out(p) == {"tiocsti": "EPERM", "tiocsti_high": "EPERM"}
    assert pending == b""
    b, upol = _nobody_box(box.bin, net, hostdir, [])
    argv = [b.bin, "run", "--policy", upol, "--", PY, "-c", TIOCSTI]
    p, pending = _run_on_terminal(argv, b.workdir, user=65534)
    assert p.returncode == 0, p.stderr
    assert Box.out(p) == {"tiocsti": "EPERM", "tiocsti_high": "EPERM"}
    assert pending == b""


def test_console_key_map_cannot_be_rewritten(box, net):
    """On a virtual console, the process whose controlling terminal it is
    may rebind keys (KDSKBENT) and rewrite the strings function keys type
    (KDSKBSENT) without any capability, for the whole console and beyond
    run's end: the command could make the user's next Enter type a command
    line into the shell, unboxed, as TIOCSTI would. The filter refuses both
    with EPERM, whatever the request's upper 32 bits hold."""
    import platform
    if platform.machine() != "x86_64":
        pytest.skip("the system call number below is x86_64's")
    pol = box.policy(net.policy([]))
    argv = [box.bin, "run", "--policy", pol, "--", PY, "-c", KEYMAP]
    p, pending = _run_on_terminal(argv, box.workdir)
    assert p.returncode == 0, p.stderr
    assert Box.out(p) == {"kdskbent": "EPERM", "kdskbsent": "EPERM", "kdskbsent_high": "EPERM"}
    # outside the box the same calls reach the terminal, which is no console
    p = subprocess.run([PY, "-c", KEYMAP], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=30)
    assert json.loads(p.stdout) == {"kdskbent": "ENOTTY", "kdskbsent": "ENOTTY",
                                    "kdskbsent_high": "ENOTTY"}, p.stdout


# A virtual console's other ioctls that need no capability from the process
# whose controlling terminal it is (<linux/kd.h>, <linux/vt.h>): those that
# change what keys type, what the screen shows or which console is shown,
# and, after them, reads that must stay allowed. Each is called on standard
# input with a null pointer (or 0) for its argument, so that even on a real
# console nothing would change; on the pty of the test the kernel answers
# ENOTTY. Prints {name: "ok" or the errno's name}.
CONSOLE_REFUSED = {
    "kdskbdiacr": 0x4B4B, "kdskbdiacruc": 0x4BFB, "kdskbmeta": 0x4B63, "kdskbmode": 0x4B45,
    "kdskbled": 0x4B65, "kdsetmode": 0x4B3A, "kdfontop": 0x4B72, "pio_font": 0x4B61,
    "pio_fontx": 0x4B6C, "pio_fontreset": 0x4B6D, "pio_scrnmap": 0x4B41,
    "pio_uniscrnmap": 0x4B6A, "pio_unimap": 0x4B67, "pio_unimapclr": 0x4B68, "pio_cmap": 0x4B71,
    "kdsetled": 0x4B32, "kiocsound": 0x4B2F, "vt_activate": 0x5606, "vt_setactivate": 0x560F,
    "vt_setmode": 0x5602, "vt_reldisp": 0x5605, "vt_resize": 0x5609, "vt_resizex": 0x560A,
    "kdskbmode_high": 0x4B45 | (1 << 32),
}
CONSOLE_READS = {
    "kdgkbmode": 0x4B44, "kdgetmode": 0x4B3B, "kdgkbent": 0x4B46, "kdgkbled": 0x4B64,
    "kdgetled": 0x4B31, "gio_font": 0x4B60, "gio_cmap": 0x4B70, "vt_getmode": 0x5601,
    "vt_getstate": 0x5603,
}
CONSOLE = r"""
import ctypes, errno, json, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
res = {}
for name, req in json.loads(sys.argv[1]).items():
    r = libc.syscall(ctypes.c_long(16), ctypes.c_long(0), ctypes.c_long(req), ctypes.c_long(0))
    res[name] = "ok" if r == 0 else errno.errorcode.get(ctypes.get_errno(), "?")
print(json.dumps(res))
"""


def test_console_state_cannot_be_changed(box, net):
    """On a virtual console, the process whose controlling terminal it is
    may, without any capability, change what keys type (dead keys, meta,
    keyboard mode: K_RAW or K_OFF leave the shell garbage or no keyboard,
    lock flags), what the screen shows (KD_GRAPHICS blanks it, fonts,
    character maps and palette make one glyph stand for another or text
    invisible, the lights lie) and which console is shown or may be left,
    for the whole console and after run exits. The filter refuses each with
    EPERM, whatever the request's upper 32 bits hold; the reads still reach
    the terminal."""
    import platform
    if platform.machine() != "x86_64":
        pytest.skip("the system call number below is x86_64's")
    calls = dict(CONSOLE_REFUSED, **CONSOLE_READS)
    pol = box.policy(net.policy([]))
    argv = [box.bin, "run", "--policy", pol, "--", PY, "-c", CONSOLE, json.dumps(calls)]
    p, pending = _run_on_terminal(argv, box.workdir)
    assert p.returncode == 0, p.stderr
    got = Box.out(p)
    assert got == dict({n: "EPERM" for n in CONSOLE_REFUSED},
                       **{n: "ENOTTY" for n in CONSOLE_READS}), got
    assert pending == b""
    # outside the box every one of them reaches the terminal, which is no console
    p = subprocess.run([PY, "-c", CONSOLE, json.dumps(calls)], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=30)
    assert json.loads(p.stdout) == {n: "ENOTTY" for n in calls}, p.stdout


# Sets the line discipline of its controlling terminal (standard input) to
# N_NULL (27), which throws away all input and gives readers none, reads
# back which one the terminal has, and puts N_TTY (0) back if it changed.
LDISC = r"""
import errno, fcntl, json, struct, termios
res = {}
try:
    fcntl.ioctl(0, termios.TIOCSETD, struct.pack("i", 27))
    res["tiocsetd"] = "ok"
except OSError as e:
    res["tiocsetd"] = errno.errorcode.get(e.errno, str(e.errno))
res["ldisc"] = struct.unpack("i", fcntl.ioctl(0, termios.TIOCGETD, b"\0" * 4))[0]
if res["ldisc"] != 0:
    fcntl.ioctl(0, termios.TIOCSETD, struct.pack("i", 0))
print(json.dumps(res))
"""


def test_terminal_line_discipline_cannot_be_changed(box, net):
    """A terminal's line discipline is the terminal's, not the process's:
    TIOCSETD needs no capability from a process of its foreground group
    for the ones the kernel has (N_NULL, N_HDLC...), and it stays after
    run exits. With N_NULL the user's shell would read nothing ever
    again from the terminal, whatever the user types (no `reset` can
    reach it); the others are kernel code the command has no use for. The
    filter refuses TIOCSETD with EPERM; TIOCGETD still answers."""
    if "n_null" not in open("/proc/tty/ldiscs").read():
        pytest.skip("this kernel has no N_NULL line discipline")
    pol = box.policy(net.policy([]))
    argv = [box.bin, "run", "--policy", pol, "--", PY, "-c", LDISC]
    p, pending = _run_on_terminal(argv, box.workdir)
    assert p.returncode == 0, p.stderr
    assert Box.out(p) == {"tiocsetd": "EPERM", "ldisc": 0}
    # outside the box the same command changes the terminal's discipline
    p, pending = _run_on_terminal([PY, "-c", LDISC], box.workdir)
    assert json.loads(p.stdout) == {"tiocsetd": "ok", "ldisc": 27}, p.stdout


# Runs inside the box: moves to a process group of its own and makes it the
# terminal's foreground, as a job-control shell does for a job. Prints
# {"moved": true} when the terminal then shows it in the foreground.
FOREGROUND = r"""
import json, os, signal
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
os.setpgid(0, 0)
os.tcsetpgrp(0, os.getpgrp())
print(json.dumps({"moved": os.tcgetpgrp(0) == os.getpgrp()}))
"""

# Runs after run, in the same shell (the caller's group): whether that group
# is the terminal's foreground again.
IN_FOREGROUND = "import os; print('fg' if os.tcgetpgrp(0) == os.getpgrp() else 'not fg')"


def test_the_terminals_foreground_is_given_back(box, net):
    """The command shares run's terminal and may make a group of its own its
    foreground (tcsetpgrp(), allowed: job-control shells need it in the
    box). When the box ended, the terminal's foreground was that dead group,
    and a caller without job control (a script, a harness) found it was
    no longer in the foreground: its next read of the terminal stopped it
    (SIGTTIN). run, in the foreground when it started, takes the terminal
    back for its group once the box has ended, when the foreground is a
    group with no process left; a group that still has processes (a shell
    that took the terminal back after ^Z and `bg`) is left as it is."""
    pol = box.policy(net.policy([]))
    script = "%s; %s -c \"%s\"" % (
        " ".join([box.bin, "run", "--policy", pol, "--", PY, "-c", "'%s'" % FOREGROUND]),
        PY, IN_FOREGROUND)
    p, pending = _run_on_terminal(["/bin/sh", "-c", script], box.workdir)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert json.loads(lines[0]) == {"moved": True}, p.stdout
    assert lines[1] == "fg", (p.stdout, p.stderr)
    # A group of the host's that took the foreground while the box ran (a
    # helper of the caller's, as a shell after ^Z) keeps it: the box's
    # command waits for it to do so, through a file in the shared folder
    # (the helper, started with &, has /dev/null for standard input).
    for name in ("started", "moved", "done"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(box.workdir, name))
    wait = ("import os, time\n"
            "def wait(f):\n"
            "    for _ in range(600):\n"
            "        if os.path.exists(f):\n"
            "            return\n"
            "        time.sleep(0.05)\n")
    helper = wait + ("import signal\n"
                     "signal.signal(signal.SIGTTOU, signal.SIG_IGN)\n"
                     "os.setpgid(0, 0)\n"
                     "wait('started')\n"
                     "os.tcsetpgrp(os.open('/dev/tty', os.O_RDWR), os.getpgrp())\n"
                     "open('moved', 'w').close()\n"
                     "wait('done')\n")
    inner = wait + "open('started', 'w').close()\nwait('moved')\n"
    check = "import os, sys; print(os.tcgetpgrp(0) == int(sys.argv[1]))"
    script = ("%s -c \"$HELPER\" & h=$!; %s; %s -c \"$CHECK\" $h; touch done; wait"
              % (PY, " ".join([box.bin, "run", "--policy", pol, "--", PY, "-c", "\"$INNER\""]),
                 PY))
    env = {"HELPER": helper, "INNER": inner, "CHECK": check}
    p, pending = _run_on_terminal(["/usr/bin/env"] + ["%s=%s" % kv for kv in env.items()]
                                  + ["/bin/sh", "-c", script], box.workdir)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["True"], (p.stdout, p.stderr)


# Runs inside the box, in its writable current directory, with umask 0: every
# way of putting S_ISUID or S_ISGID on a file (by the x86_64 system call, and
# by the os functions glibc maps onto them), then the ordinary modes that must
# still work. Prints {name: "ok" or the errno's name}.
SETID = r"""
import ctypes, errno, json, os, stat
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
AT_FDCWD = -100
CHMOD, FCHMOD, FCHMODAT, FCHMODAT2 = 90, 91, 268, 452
CREAT, MKNOD, MKNODAT, OPEN, OPENAT, OPENAT2 = 85, 133, 259, 2, 257, 437
HIGH = 1 << 32  # the kernel reads flags and modes as 32-bit (or 16-bit) values
os.umask(0)
res = {}

def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr),
                     *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if r < 0:
        return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    return r

def rec(name, f, fd=False):
    # records what f() gave; fd: f() returns a descriptor to close
    try:
        r = f()
        if isinstance(r, str):
            res[name] = r
            return
        if fd:
            os.close(r)
        res[name] = "ok"
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e.errno))

def fresh(name, mode=0o755):
    os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
    return name.encode()

def tmpfile(name, mode):
    r = call(OPENAT, AT_FDCWD, b".", os.O_TMPFILE | os.O_WRONLY, mode)
    if isinstance(r, str):
        return r
    # give the unnamed file a name on the host: by /proc/self/fd, or, where
    # that gives EXDEV (as on some kernels), by linkat(AT_EMPTY_PATH)
    try:
        try:
            os.link("/proc/self/fd/%d" % r, name)
        except OSError:
            if libc.linkat(r, b"", AT_FDCWD, name.encode(), 0x1000) < 0:
                raise OSError(ctypes.get_errno(), "linkat")
    finally:
        os.close(r)
    return 0

def openat2(name, mode):
    how = ctypes.create_string_buffer(24)   # struct open_how {flags, mode, resolve}
    ctypes.c_uint64.from_buffer(how, 0).value = os.O_WRONLY | os.O_CREAT
    ctypes.c_uint64.from_buffer(how, 8).value = mode
    r = call(OPENAT2, AT_FDCWD, name.encode(), how, 24)
    if not isinstance(r, str):
        os.close(r)
    return r if isinstance(r, str) else 0

for bit, mode in (("suid", 0o4755), ("sgid", 0o2755)):
    def n(what):
        return "%s_%s" % (what, bit)
    rec(n("chmod"), lambda: call(CHMOD, fresh(n("chmod")), mode))
    rec(n("chmod_high"), lambda: call(CHMOD, fresh(n("chmod_high")), mode | HIGH))
    fd = os.open(fresh(n("fchmod")), os.O_RDONLY)
    rec(n("fchmod"), lambda: call(FCHMOD, fd, mode))
    os.close(fd)
    rec(n("fchmodat"), lambda: call(FCHMODAT, AT_FDCWD, fresh(n("fchmodat")), mode))
    rec(n("fchmodat2"), lambda: call(FCHMODAT2, AT_FDCWD, fresh(n("fchmodat2")), mode, 0))
    rec(n("os_chmod"), lambda: os.chmod(fresh(n("os_chmod")), mode))
    fd = os.open(fresh(n("os_fchmod")), os.O_RDONLY)
    rec(n("os_fchmod"), lambda: os.fchmod(fd, mode))
    os.close(fd)
    rec(n("creat"), lambda: call(CREAT, n("creat").encode(), mode), fd=True)
    rec(n("open"), lambda: call(OPEN, n("open").encode(), os.O_WRONLY | os.O_CREAT, mode),
        fd=True)
    rec(n("openat"), lambda: call(OPENAT, AT_FDCWD, n("openat").encode(),
                                  os.O_WRONLY | os.O_CREAT, mode), fd=True)
    rec(n("openat_high"), lambda: call(OPENAT, AT_FDCWD, n("openat_high").encode(),
                                       os.O_WRONLY | os.O_CREAT | HIGH, mode | HIGH), fd=True)
    rec(n("tmpfile"), lambda: tmpfile(n("tmpfile"), mode))
    rec(n("os_open"), lambda: os.open(n("os_open"), os.O_WRONLY | os.O_CREAT, mode), fd=True)
    rec(n("mknod"), lambda: call(MKNOD, n("mknod").encode(), stat.S_IFREG | mode, 0))
    rec(n("mknodat"), lambda: call(MKNODAT, AT_FDCWD, n("mknodat").encode(),
                                   stat.S_IFREG | mode, 0))
    rec(n("os_mknod"), lambda: os.mknod(n("os_mknod"), stat.S_IFREG | mode))
    rec(n("openat2"), lambda: openat2(n("openat2"), mode))

# what must still work
for mode in (0o755, 0o644):
    m = "%o" % mode
    rec("chmod_" + m, lambda: call(CHMOD, fresh("chmod_" + m, 0o600), mode))
    rec("os_chmod_" + m, lambda: os.chmod(fresh("os_chmod_" + m, 0o600), mode))
    fd = os.open(fresh("fchmod_" + m, 0o600), os.O_RDONLY)
    rec("fchmod_" + m, lambda: call(FCHMOD, fd, mode))
    os.close(fd)
    rec("fchmodat_" + m, lambda: call(FCHMODAT, AT_FDCWD, fresh("fchmodat_" + m, 0o600), mode))
    rec("fchmodat2_" + m, lambda: call(FCHMODAT2, AT_FDCWD, fresh("fchmodat2_" + m, 0o600),
                                       mode, 0))
rec("sticky_dir", lambda: (os.mkdir("sticky_dir", 0o755), os.chmod("sticky_dir", 0o1777)))
rec("os_open_644", lambda: os.open("os_open_644", os.O_WRONLY | os.O_CREAT, 0o644), fd=True)
rec("openat_644", lambda: call(OPENAT, AT_FDCWD, b"openat_644", os.O_WRONLY | os.O_CREAT, 0o644),
    fd=True)
rec("open_644", lambda: call(OPEN, b"open_644", os.O_WRONLY | os.O_CREAT, 0o644), fd=True)
rec("creat_644", lambda: call(CREAT, b"creat_644", 0o644), fd=True)
rec("tmpfile_644", lambda: tmpfile("tmpfile_644", 0o644))
rec("mknod_644", lambda: os.mknod("mknod_644", stat.S_IFREG | 0o644))
# without O_CREAT the mode is not read: a set-ID one (as some C libraries
# pass whatever is in the register) opens an existing file
fresh("existing", 0o644)
rec("open_existing", lambda: call(OPENAT, AT_FDCWD, b"existing", os.O_RDONLY, 0o4755), fd=True)
# mkdir() is let be: the kernel keeps only the permission and sticky bits
rec("mkdir_sgid", lambda: os.mkdir("mkdir_sgid", 0o2775))
rec("openat2_644", lambda: openat2("openat2_644", 0o644))
print(json.dumps(res))
"""

SETID_WAYS = ("chmod", "chmod_high", "fchmod", "fchmodat", "fchmodat2", "os_chmod", "os_fchmod",
              "creat", "open", "openat", "openat_high", "tmpfile", "os_open", "mknod", "mknodat",
              "os_mknod", "openat2")


def _fchmodat2_result():
    """What fchmodat2() gives on this kernel outside the box: "ok", or
    "ENOSYS" before Linux 6.6."""
    import ctypes
    import errno
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    with tempfile.NamedTemporaryFile() as f:
        r = libc.syscall(ctypes.c_long(452), ctypes.c_long(-100), f.name.encode(),
                         ctypes.c_long(0o600), ctypes.c_long(0))
        return "ok" if r == 0 else errno.errorcode[ctypes.get_errno()]


def _check_no_setid_files(b, pol, user=None):
    fchmodat2 = _fchmodat2_result()
    p = b.run(["--policy", pol], SETID, user=user)
    assert p.returncode == 0, p.stderr
    o = Box.out(p)
    refused = {}
    for bit in ("suid", "sgid"):
        for way in SETID_WAYS:
            name = "%s_%s" % (way, bit)
            want = "EPERM"
            if way == "openat2":
                want = "ENOSYS"  # a kernel without openat2(): its mode is out of the filter's reach
            elif way == "fchmodat2" and fchmodat2 == "ENOSYS":
                want = "ENOSYS"
            refused[name] = o[name]
            assert o[name] == want, (name, o)
    allowed = {k: v for k, v in o.items() if k not in refused}
    for m in ("755", "644"):
        assert allowed.pop("fchmodat2_" + m) == fchmodat2, o
    assert allowed.pop("openat2_644") == "ENOSYS", o  # whatever the mode
    assert allowed == dict.fromkeys(allowed, "ok"), o
    assert len(allowed) == 17, o
    # on the host: nothing set-user-ID or set-group-ID in the folder, and
    # the files chmod() was refused for keep their mode
    for name in sorted(os.listdir(b.workdir)):
        st = os.lstat(os.path.join(b.workdir, name))
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), (name, oct(st.st_mode))
    for bit in ("suid", "sgid"):
        for way in ("chmod", "chmod_high", "fchmod", "fchmodat", "fchmodat2", "os_chmod",
                    "os_fchmod"):
            st = os.stat(os.path.join(b.workdir, "%s_%s" % (way, bit)))
            assert stat.S_IMODE(st.st_mode) == 0o755, (way, bit, oct(st.st_mode))
        for way in ("creat", "open", "openat", "openat_high", "tmpfile", "os_open", "mknod",
                    "mknodat", "os_mknod", "openat2"):
            assert not os.path.exists(os.path.join(b.workdir, "%s_%s" % (way, bit))), (way, bit)
    for name, mode in (("chmod_755", 0o755), ("chmod_644", 0o644), ("os_open_644", 0o644),
                       ("openat_644", 0o644), ("tmpfile_644", 0o644), ("mknod_644", 0o644),
                       ("mkdir_sgid", 0o775), ("sticky_dir", 0o1777)):
        st = os.stat(os.path.join(b.workdir, name))
        assert stat.S_IMODE(st.st_mode) == mode, (name, oct(st.st_mode))
        if user is not None:
            assert st.st_uid == user, (name, st.st_uid)


def test_no_set_id_files(box, net):
    """A file's owner needs no capability to make it set-user-ID or
    set-group-ID, so a box started as root could leave a root-owned
    set-user-ID program in its writable folder for any local user to run as
    root. The filter refuses every call that would put S_ISUID or S_ISGID on
    a file (chmod, fchmod, fchmodat, fchmodat2, creat, open and openat with
    O_CREAT or O_TMPFILE, mknod, mknodat: EPERM; openat2, whose mode it
    cannot read: ENOSYS); ordinary modes still work."""
    import platform
    if platform.machine() != "x86_64":
        pytest.skip("system call numbers below are x86_64's")
    pol = box.policy(net.policy([]))
    _check_no_setid_files(box, pol)


def test_no_set_id_files_unprivileged(sluice_bin, net, hostdir):
    """Likewise in a box of another user (a user namespace): its set-user-ID
    programs would run as that user for whoever reaches them."""
    import platform
    if platform.machine() != "x86_64":
        pytest.skip("system call numbers below are x86_64's")
    b, pol = _nobody_box(sluice_bin, net, hostdir, [])
    _check_no_setid_files(b, pol, user=65534)


DEV = r"""
import json, os
out = {"dev": sorted(os.listdir("/dev"))}
def tryopen(p, fl):
    try:
        os.close(os.open(p, fl)); return "ok"
    except OSError as e:
        return e.strerror
for p in ("/dev/kmsg", "/dev/kvm", "/dev/loop-control", "/dev/fuse", "/dev/vda", "/dev/sda"):
    out[p] = tryopen(p, os.O_WRONLY)
out["null"] = tryopen("/dev/null", os.O_WRONLY)
out["urandom"] = len(open("/dev/urandom", "rb").read(16))
try:
    m, s = os.openpty()
    os.write(s, b"pty\n")
    out["pty"] = os.read(m, 16).decode().strip()
except OSError as e:
    out["pty"] = e.strerror
out["fd"] = os.readlink("/dev/fd")
try:
    os.chmod("/dev/null", 0o600); out["chmod"] = "ok"
except OSError as e:
    out["chmod"] = e.strerror
print(json.dumps(out))
"""


def _check_dev(o):
    for p in ("/dev/kmsg", "/dev/kvm", "/dev/loop-control", "/dev/fuse", "/dev/vda", "/dev/sda"):
        assert o[p] in ("No such file or directory", "Read-only file system"), (p, o)
    assert "kmsg" not in o["dev"] and "kvm" not in o["dev"] and "loop-control" not in o["dev"]
    assert {"null", "zero", "full", "random", "urandom", "shm", "fd"} <= set(o["dev"]), o
    assert o["null"] == "ok" and o["urandom"] == 16
    assert o["pty"] == "pty", o
    assert o["fd"] == "/proc/self/fd"
    assert o["chmod"] == "Read-only file system"


def test_minimal_dev(box, net):
    """/dev is the box's own: the host's kmsg, kvm, loop devices and disks
    are not there; null, urandom and a pty work."""
    pol = box.policy(net.policy([]))
    _check_dev(Box.out(box.run(["--policy", pol], DEV)))
    assert os.stat("/dev/null").st_mode & 0o777 == 0o666


def test_unprivileged_dev_ipc_keys_families(sluice_bin, net, hostdir):
    """The same as nobody (a user namespace): the minimal /dev, the own host
    name, the refused families."""
    b, pol = _nobody_box(sluice_bin, net, hostdir, [])
    _check_dev(Box.out(b.run(["--policy", pol], DEV, user=65534)))
    o = Box.out(b.run(["--policy", pol], FAMILIES, user=65534))
    assert o["inet"] == o["netlink"] == "ok" and o["vsock"] == o["packet"] == "EAFNOSUPPORT", o
    p = b.run(["--policy", pol], None, cmd=["hostname"], user=65534)
    assert p.stdout.strip() == "sluice-box", p.stderr


def _run_with_a_mount(argv, cwd, env=None):
    """Runs <argv>, an unshare -m wrapper whose script mounts a tmpfs and
    exits 99 when it cannot: the test is skipped then."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd,
                       env=env or _clean_env())
    if p.returncode == 99 or "unshare:" in p.stderr:
        pytest.skip("cannot mount a tmpfs in a mount namespace: %s" % p.stderr.strip())
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    return p


def _has_mount_setattr():
    """Whether mount_setattr(2) (Linux 5.12; 442 on every architecture) is
    there to be called: with a size of 0 it fails with EINVAL, where a
    kernel without it, or a seccomp profile that refuses it, gives another
    error; the box then remounts mount by mount."""
    import ctypes
    import errno
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.syscall(ctypes.c_long(442), ctypes.c_int(-1), ctypes.c_char_p(b""),
                      ctypes.c_uint(0), ctypes.c_void_p(None), ctypes.c_size_t(0))
    return rc < 0 and ctypes.get_errno() == errno.EINVAL


BEHIND_A_CLOSED_FOLDER = r"""
import errno, json, os, sys
a = sys.argv[1]
out = {}
for k, f in (("chmod", lambda: os.chmod(a, 0o755)),
             ("write", lambda: open(os.path.join(a, "mnt", "f"), "w").write("x"))):
    try:
        f(); out[k] = "ok"
    except OSError as e:
        out[k] = errno.errorcode[e.errno]
print(json.dumps(out))
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
@pytest.mark.parametrize("where", ["cwd", "rw_below_tmp"])
def test_a_mount_behind_a_folder_the_agent_closed_stays_read_only(sluice_bin, net, hostdir,
                                                                  where):
    """A mount below a writable folder stays read-only, even behind a
    folder the agent made 000 in an earlier run. The init of a box that is
    not root's has no capability over a folder whose group its user
    namespace does not map, so it could not reach the mount to remount it
    read-only, and the final check took a mount it could not stat() for one
    the command could not reach either (and any mount below /tmp for the
    box's own): the command, the folder's owner, opened it again with
    chmod() and wrote on the mount. Such a mount now fails the set-up;
    behind a folder of another owner, which the command cannot open, it is
    out of reach and the run goes on. The writable folder is the current
    directory, or a --rw folder below the host's /tmp. Where the kernel has
    mount_setattr(2) (5.12) the init makes every mount read-only in one
    call on the whole tree, which needs no path: the mount is read-only and
    the run goes on. The mount is made in a mount namespace of the test's own
    (unshare -m)."""
    b, pol = _nobody_box(sluice_bin, net, hostdir, [])
    # not nobody: in the box, an owner the user namespace does not map
    # reads as nobody, and a box of nobody's would take root's folder for
    # its own (and fail, to be safe)
    uid = 4242
    args = ["--policy", pol]
    top = b.workdir
    if where == "rw_below_tmp":
        top = tempfile.mkdtemp(prefix="sluice-box-", dir="/tmp")
        os.chmod(top, 0o777)
        args += ["--rw", top]
    a = os.path.join(top, "a")
    os.makedirs(os.path.join(a, "mnt"))
    with open(os.path.join(b.workdir, "x.py"), "w") as f:
        f.write(BEHIND_A_CLOSED_FOLDER)
    os.chmod(os.path.join(b.workdir, "x.py"), 0o644)

    def run(owner, mode):
        os.chown(a, owner, 0)  # group root: not mapped in the box
        os.chmod(a, mode)
        script = 'mount -t tmpfs -o size=1m none "$0" || exit 99; exec "$@"'
        argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                os.path.join(a, "mnt"), "setpriv", "--reuid=%d" % uid, "--regid=%d" % uid,
                "--clear-groups", sluice_bin, "run"] + args + ["--", PY, "x.py", a]
        return _run_with_a_mount(argv, b.workdir)

    try:
        p = run(uid, 0o000)
        if _has_mount_setattr():
            # mount_setattr(2) made every mount read-only, reached or not
            assert p.returncode == 0, p.stdout + p.stderr
            assert Box.out(p) == {"chmod": "ok", "write": "EROFS"}
        else:
            assert p.returncode == 2, p.stdout + p.stderr
            assert ("sluice run: cannot build the box: %s is still writable in the box"
                    % os.path.join(a, "mnt")) in p.stderr, p.stderr
            assert stat.S_IMODE(os.stat(a).st_mode) == 0, "the command ran"
        # a folder of another owner: the command cannot open it, the run goes on
        p = run(0, 0o700)
        assert p.returncode == 0, p.stderr
        assert Box.out(p) == {"chmod": "EPERM", "write": "EACCES"}
        # reachable, it is read-only like every mount below a writable path
        p = run(uid, 0o755)
        assert p.returncode == 0, p.stderr
        assert Box.out(p) == {"chmod": "ok", "write": "EROFS"}
    finally:
        if top != b.workdir:
            shutil.rmtree(top, ignore_errors=True)


# Loads a seccomp filter that fails mount_setattr(2) (442 on every
# architecture) with ENOSYS, as on a kernel before 5.12, then runs the rest
# of its arguments: the box remounts mount by mount.
NO_MOUNT_SETATTR = r"""
import ctypes, os, sys
lib = ctypes.CDLL("libseccomp.so.2")
lib.seccomp_init.restype = ctypes.c_void_p
ctx = lib.seccomp_init(ctypes.c_uint32(0x7fff0000))  # SCMP_ACT_ALLOW
if not ctx or lib.seccomp_rule_add(ctypes.c_void_p(ctx), ctypes.c_uint32(0x00050000 | 38),
                                   ctypes.c_int(442), ctypes.c_uint(0)) != 0 \
        or lib.seccomp_load(ctypes.c_void_p(ctx)) != 0:
    sys.exit(98)
os.execvp(sys.argv[1], sys.argv[1:])
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_mount_still_writable_is_named_escaped(sluice_bin, net, hostdir):
    """The error for a mount still writable in the box printed its mount
    point raw, where run's other messages show a path with each control
    character as \\ooo: a mount point holding a line end, made by the agent
    in its writable folder, wrote a 'sluice run:' line of its own into
    standard error. The set-up of test_a_mount_behind_a_folder_the_agent_
    closed_stays_read_only, with mount_setattr(2) refused so that the box
    remounts by path and the mount behind the closed folder stays writable."""
    b, pol = _nobody_box(sluice_bin, net, hostdir, [])
    uid = 4242
    a = os.path.join(b.workdir, "a")
    mnt = os.path.join(a, "mnt\nsluice run: forged")
    os.makedirs(mnt)
    os.chown(a, uid, 0)
    os.chmod(a, 0o000)
    script = 'mount -t tmpfs -o size=1m none "$0" || exit 99; exec "$@"'
    argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, mnt,
            PY, "-c", NO_MOUNT_SETATTR, "setpriv", "--reuid=%d" % uid, "--regid=%d" % uid,
            "--clear-groups", sluice_bin, "run", "--policy", pol, "--", "true"]
    try:
        p = _run_with_a_mount(argv, b.workdir)
    finally:
        os.chmod(a, 0o755)
    if p.returncode == 98:
        pytest.skip("cannot load a seccomp filter: %s" % p.stderr.strip())
    assert p.returncode == 2, p.stdout + p.stderr
    assert ("sluice run: cannot build the box: %s is still writable in the box (tmpfs none)\n"
            % mnt.replace("\n", "\\012")) in p.stderr, p.stderr
    assert "\nsluice run: forged" not in p.stderr, p.stderr


def _probe_box(sluice_bin, net, hostdir, user, code):
    """_nobody_box() for a run as <user> ("root", or "nobody" in a user
    namespace), with <code> in its work folder as x.py. Returns (box,
    policy path, the argv prefix that switches to <user>)."""
    b, pol = _nobody_box(sluice_bin, net, hostdir, [], userns=user == "nobody")
    with open(os.path.join(b.workdir, "x.py"), "w") as f:
        f.write(code)
    os.chmod(os.path.join(b.workdir, "x.py"), 0o644)
    as_user = [] if user == "root" else ["setpriv", "--reuid=65534", "--regid=65534",
                                         "--clear-groups"]
    return b, pol, as_user


COVERED_MOUNT = r"""
import errno, json, os, sys
out = {}
for k, path in (("cover", os.path.join(sys.argv[1], "f")),
                ("below_cover", os.path.join(sys.argv[1], "sub", "f")),
                ("open", os.path.join(sys.argv[2], "f")), ("cwd", "f")):
    try:
        open(path, "w").write("x"); out[k] = "ok"
    except OSError as e:
        out[k] = errno.errorcode[e.errno]
print(json.dumps(out))
"""


def _run_over_a_covered_mount(sluice_bin, net, hostdir, user, mounts):
    """Runs COVERED_MOUNT in a box made mount by mount (mount_setattr(2)
    refused), in a mount namespace of the test's own where the shell
    commands <mounts> ($m mounts a tmpfs) put the mounts on hostdir/cover
    ($0); then a sub folder on top and a tmpfs beside it. Each is read-only
    in the box."""
    b, pol, as_user = _probe_box(sluice_bin, net, hostdir, user, COVERED_MOUNT)
    cover = os.path.join(hostdir, "cover")
    beside = os.path.join(hostdir, "beside")
    os.makedirs(cover)
    os.makedirs(beside)
    script = ('m="mount -t tmpfs -o size=1m,mode=0777"; ' + mounts + ' && '
              'mkdir -m 0777 "$0/sub" && $m beside "$1" || exit 99; shift; exec "$@"')
    argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, cover, beside,
            PY, "-c", NO_MOUNT_SETATTR] + as_user + [
                sluice_bin, "run", "--policy", pol, "--", PY, "x.py", cover, beside]
    p = _run_with_a_mount(argv, b.workdir)
    if p.returncode == 98:
        pytest.skip("cannot load a seccomp filter: %s" % p.stderr.strip())
    assert p.returncode == 0, p.stdout + p.stderr
    assert Box.out(p) == {"cover": "EROFS", "below_cover": "EROFS", "open": "EROFS",
                          "cwd": "ok"}


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_covered_mount_does_not_stop_the_mount_by_mount_set_up(sluice_bin, net, hostdir, user):
    """Without mount_setattr(2) (a kernel before 5.12, here a seccomp
    filter that refuses it) the box remounts each mount read-only by the
    path mountinfo gives. A mount covered by another (a tmpfs with a mount
    on its sub, mounted over again by one that has a sub folder too: the
    path leads to the top one's folder, no mount's root) failed that
    remount with EINVAL, and the run with `cannot remount PATH read-only:
    Invalid argument`, though no path in the box reaches it and the final
    check lets it be; the box built with mount_setattr(2) runs. It is now
    passed over: the mount on top is made read-only, and so is a mount
    nothing covers (a tmpfs beside it), as ever. The mounts are made in a
    mount namespace of the test's own (unshare -m)."""
    _run_over_a_covered_mount(sluice_bin, net, hostdir, user,
                              '$m low "$0" && mkdir "$0/sub" && $m lowsub "$0/sub" && $m top "$0"')


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_mount_under_one_on_a_folder_above_does_not_stop_the_set_up(sluice_bin, net, hostdir,
                                                                       user):
    """As above, a mount that no path reaches, but covered from beside: a
    tmpfs on cover/sub, then one on cover, both in the same parent mount
    (mountinfo lists the first with that parent, not below the second).
    Its path leads to the top one's folder; the remount by it failed with
    EINVAL and the run with `cannot remount .../cover/sub read-only:
    Invalid argument`. It is passed over as a mount mounted over is."""
    _run_over_a_covered_mount(sluice_bin, net, hostdir, user,
                              'mkdir "$0/sub" && $m low "$0/sub" && $m top "$0"')


# Makes <base>/d.../d/mnt, 25 folders of 200 bytes deep (past PATH_MAX),
# mounts a tmpfs there (by a relative path: mount(8) takes absolute ones
# only), then runs the rest of its arguments where it started.
DEEP_MOUNT = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
home = os.getcwd()
os.chdir(sys.argv[1])
for _ in range(25):
    os.mkdir("d" * 200)
    os.chdir("d" * 200)
os.mkdir("mnt", 0o777)
if libc.mount(b"deep", b"mnt", b"tmpfs", 0, b"size=1m,mode=0777") != 0:
    sys.exit(99)
os.chdir(home)
os.execvp(sys.argv[2], sys.argv[2:])
"""

# In the box: writes a file in the deep mount, reached folder by folder.
WRITE_DEEP = r"""
import errno, json, os, sys
os.chdir(sys.argv[1])
for _ in range(25):
    os.chdir("d" * 200)
try:
    open("mnt/f", "w").write("x"); out = "ok"
except OSError as e:
    out = errno.errorcode[e.errno]
print(json.dumps({"write": out}))
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_mount_deeper_than_path_max_is_made_read_only_mount_by_mount(sluice_bin, net, hostdir,
                                                                      user):
    """Without mount_setattr(2) (a seccomp filter refuses it here) the box
    remounted each mount by the path mountinfo gives, whole: a mount whose
    path is longer than PATH_MAX (made by a relative path, which the
    command can take too, folder by folder) failed the remount with
    ENAMETOOLONG and the run with `cannot remount PATH read-only`, cut
    short in the middle of PATH; the box built with mount_setattr(2) runs.
    Each is now reached one folder at a time, as the box reaches the paths
    of its view, and made read-only. The mount is made in a mount
    namespace of the test's own (unshare -m)."""
    b, pol, as_user = _probe_box(sluice_bin, net, hostdir, user, WRITE_DEEP)
    base = os.path.join(hostdir, "deep")
    os.mkdir(base)
    argv = ["unshare", "-m", "--propagation", "private", PY, "-c", DEEP_MOUNT, base,
            PY, "-c", NO_MOUNT_SETATTR] + as_user + [
                sluice_bin, "run", "--policy", pol, "--", PY, "x.py", base]
    p = _run_with_a_mount(argv, b.workdir)
    if p.returncode == 98:
        pytest.skip("cannot load a seccomp filter: %s" % p.stderr.strip())
    assert p.returncode == 0, p.stdout + p.stderr[-300:]
    assert Box.out(p) == {"write": "EROFS"}


def _held_set_up(syscalls, ms=1):
    """(argv prefix, environment) for a `sluice run` under strace, which
    holds each of <syscalls> (a set as strace's -e takes it) <ms> ms on
    entry in run, its gateway, the box's init and the command, and stops
    them on no other (--seccomp-bpf): a race against the set-up then has
    moments of milliseconds to hit, not microseconds, and needs no thread
    spinning on a core to hit them. LeakSanitizer cannot run under ptrace."""
    prefix = ["strace", "-f", "-qq", "--seccomp-bpf", "-o", "/dev/null", "-e",
              "trace=" + syscalls, "-e", "inject=%s:delay_enter=%d" % (syscalls, ms * 1000)]
    asan = os.environ.get("ASAN_OPTIONS")
    return prefix, _clean_env({"ASAN_OPTIONS": (asan + ":" if asan else "") + "detect_leaks=0"})


def _box_init_of(ancestor):
    """The pid (on the host) of the box's init below process <ancestor>:
    PID 1 of a PID namespace of its own. None while there is none."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/status" % d) as f:
                st = dict(ln.rstrip("\n").split(":\t", 1) for ln in f if ":\t" in ln)
        except OSError:
            continue
        if st.get("NSpid", "").split("\t")[-1:] != ["1"] or "\t" not in st.get("NSpid", ""):
            continue
        pid = int(d)
        for _ in range(16):  # up the tree to <ancestor>
            try:
                with open("/proc/%d/stat" % pid) as f:
                    pid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                break
            if pid == ancestor:
                return int(d)
    return None


def _is_read_only_in(pid, mount_point):
    """Whether the mount on <mount_point> is read-only in the mount
    namespace of process <pid>."""
    try:
        with open("/proc/%d/mountinfo" % pid) as f:
            return any(ln.split()[4] == mount_point and "ro" in ln.split()[5].split(",")
                       for ln in f)
    except OSError:
        return False


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_mount_gone_during_the_mount_by_mount_set_up_does_not_stop_it(sluice_bin, net,
                                                                        hostdir):
    """Without mount_setattr(2) (a seccomp filter refuses it here) the box
    remounts each mount mountinfo listed; a mount whose folder the host
    removes in the meantime (rmdir() of a mount point unmounts it in every
    namespace: another test's or tool's temporary mount in /tmp) has left
    the box's view, and its remount, once the folder was reached, failed
    with EINVAL, and the run with `cannot remount PATH read-only: Invalid
    argument` (seen once in about 60 runs beside a test suite). A mount
    found gone from a fresh mountinfo, or covered, is now passed over. The
    remounts are held 200 ms each by strace (_held_set_up()); the folder is
    removed once the mount made just before it is read-only in the box, as
    the init waits to remount it. The mounts are made in a mount namespace
    of the test's own (unshare -m)."""
    if shutil.which("strace") is None:
        pytest.skip("needs strace to hold the remounts")
    b, pol, as_user = _probe_box(sluice_bin, net, hostdir, "root", "print('{}')")
    before, gone = os.path.join(hostdir, "before"), os.path.join(hostdir, "gone")
    os.mkdir(before)
    os.mkdir(gone)
    script = ('mount -t tmpfs -o size=1m before "$0" && mount -t tmpfs -o size=1m gone "$1" '
              '|| exit 99; shift; exec "$@"')
    held, env = _held_set_up("mount", ms=200)
    argv = (["unshare", "-m", "--propagation", "private", "sh", "-c", script, before, gone,
             PY, "-c", NO_MOUNT_SETATTR] + held
            + [sluice_bin, "run", "--policy", pol, "--", PY, "x.py"])
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=b.workdir, env=env)
    try:
        init = poll(lambda: _box_init_of(p.pid), timeout=30, what="the box's init")
        poll(lambda: _is_read_only_in(init, before) or p.poll() is not None, timeout=60,
             interval=0.001, what="the mount before it read-only in the box")
        os.rmdir(gone)  # a mount point only in the test's namespace and the box's
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    if p.returncode == 99 or p.returncode == 98:
        pytest.skip("cannot mount a tmpfs or load a seccomp filter: %s" % err.strip())
    for mark in SANITIZER_MARKS:
        assert mark not in err, err
    assert p.returncode == 0, out + err
    assert "cannot remount" not in err, err


# Run with -I -S, and without json: each stat() the command makes while
# Python starts is held 1 ms too (_held_set_up())
RENAMED_MOUNT = r"""
import errno, os
out = "ENOENT"
for i in range(100000):
    for d in ("a", "b"):
        try:
            with open(os.path.join(d, "mnt", "f"), "w") as f:
                f.write("x")
            out = "ok"
        except OSError as e:
            out = errno.errorcode[e.errno]
        if out != "ENOENT":
            break
    if out != "ENOENT":
        break
print('{"write": "%s"}' % out)
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_mount_renamed_during_the_set_up_stays_read_only(sluice_bin, net, hostdir, user):
    """A mount below the writable folder stays read-only while another
    process (a second box sharing the folder) renames the folder above it
    over and over during the set-up. Each mount was remounted read-only by
    the path mountinfo gave, and a path that had vanished (ENOENT) was let
    be, in that step and in the final check: a rename at both moments left
    the mount writable, and the command wrote on it once the folder was
    back. The mounts are now made read-only in one call on the whole tree
    (mount_setattr(2), AT_RECURSIVE), which no rename can dodge. The mount
    is made in a mount namespace of the test's own (unshare -m).

    The race is made cheap to run and likely to be won: strace holds
    every mount() and stat() of the set-up 1 ms (_held_set_up()), which
    widens both moments to milliseconds, so a thread renaming the folder
    every fraction of a millisecond, asleep in between, hits them more
    often than one spinning on a core (which slowed every run, and the
    tests beside it) hit the narrow ones; and the 40 runs go two at a
    time (two boxes sharing the folder)."""
    if not _has_mount_setattr():
        pytest.skip("no mount_setattr(2): the box remounts mount by mount, by path, which a "
                    "rename at the right moments can still dodge")
    if shutil.which("strace") is None:
        pytest.skip("needs strace to widen the moments a rename must hit")
    b, pol, as_user = _probe_box(sluice_bin, net, hostdir, user, RENAMED_MOUNT)
    a = os.path.join(b.workdir, "a")
    other = os.path.join(b.workdir, "b")
    os.makedirs(os.path.join(a, "mnt"))
    # the folder is renamed all along: the mount tries both names
    script = ('i=0; while [ $i -lt 10000 ]; do for d in a b; do '
              'mount -t tmpfs -o size=1m,mode=0777 none "$0/$d/mnt" 2>/dev/null && exec "$@"; '
              'done; i=$((i+1)); done; exit 99')
    # the remounts and the final check's stat() (? : those this architecture has)
    held, env = _held_set_up("mount,?stat,?lstat,?newfstatat,?statx")
    argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script,
            b.workdir] + as_user + held + [sluice_bin, "run", "--policy", pol, "--",
                                           PY, "-I", "-S", "x.py"]
    stop = threading.Event()
    wrote = threading.Event()

    def rename_again_and_again():
        while not stop.is_set():
            for src, dst in ((a, other), (other, a)):
                try:
                    os.rename(src, dst)
                except OSError:
                    pass
                time.sleep(0.0002)

    def one_run(_):
        if wrote.is_set():
            return None  # found: the runs left add nothing
        p = _run_with_a_mount(argv, b.workdir, env=env)
        r = (p.returncode, Box.out(p) if p.returncode == 0 else p.stderr)
        if r[1] == {"write": "ok"}:
            wrote.set()
        return r

    t = threading.Thread(target=rename_again_and_again)
    t.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            results = [r for r in pool.map(one_run, range(40)) if r is not None]
    finally:
        stop.set()
        t.join()
    assert {"write": "ok"} not in [r[1] for r in results], results
    assert all(r == (0, {"write": "EROFS"}) for r in results), results


def test_a_fifo_swapped_in_during_the_set_up_does_not_hang_it(sluice_bin, net, hostdir):
    """A --ro file that vanished from the writable folder between the first
    step of the set-up and its bind (another process sharing the folder
    renamed it) was made again with open(O_WRONLY|O_CREAT), which follows a
    link and opens what it finds: a FIFO put there in the meantime made the
    init wait for a reader for ever, and run with it (a signal to run did
    not help: the init had them blocked). The file is now made with O_EXCL,
    which opens nothing that is there; the bind then covers it. A thread
    swaps the file, nothing and a FIFO all along, for 40 runs, two at a
    time; each must end (0, or 2 when the bind found nothing), none hang.
    strace holds each mkdir() of the set-up 5 ms (_held_set_up()): the four
    made for the missing file's folders come between the stat() that finds
    it missing and the open(), some 20 ms apart then. The thread keeps each
    state for a time of that order, asleep, instead of spinning on a core:
    the file 20 ms (run and the set-up's first step want it there), nothing
    10 ms, the FIFO 40 ms, so that an open() 20 ms after a stat() that found
    nothing finds the FIFO."""
    if shutil.which("strace") is None:
        pytest.skip("needs strace to widen the moment a swap must hit")
    b, pol = _nobody_box(sluice_bin, net, hostdir, [], userns=False)
    f = os.path.join(b.workdir, "f")
    away = os.path.join(b.workdir, "f.away")
    with open(f, "w") as fh:
        fh.write("x")
    held, env = _held_set_up("?mkdir,mkdirat", ms=5)
    argv = held + [sluice_bin, "run", "--policy", pol, "--ro", f, "--", "true"]
    stop = threading.Event()
    hung = threading.Event()

    def swap_again_and_again():
        while not stop.is_set():
            for step, then in ((lambda: os.rename(f, away), 0.01), (lambda: os.mkfifo(f), 0.04),
                               (lambda: os.unlink(f), 0), (lambda: os.rename(away, f), 0.02)):
                try:
                    step()
                except OSError:
                    pass
                time.sleep(then)

    def one_run(_):
        if hung.is_set():
            return None  # found: the runs left add nothing
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             cwd=b.workdir, env=env, start_new_session=True)
        try:
            _, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            hung.set()  # strace killed alone would leave run and its init hung
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            return "hung"
        for mark in SANITIZER_MARKS:
            assert mark not in err, err
        return p.returncode, err

    t = threading.Thread(target=swap_again_and_again)
    t.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            results = [r for r in pool.map(one_run, range(40)) if r is not None]
    finally:
        stop.set()
        t.join()
    assert "hung" not in results, results
    assert all(r[0] in (0, 2) for r in results), results


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_device_node_outside_dev_cannot_be_opened(sluice_bin, net, hostdir, user):
    """The box's /dev holds only harmless devices, but the host's view has
    device nodes elsewhere too (a chroot's /dev bound from the host's, a
    node left in a folder): a read-only mount refuses to write files, not
    to open devices, and a box run as root (uid 0 without capabilities,
    the owner of every root device) could open a disk there for writing,
    and any box what its user's groups reach (input, video). Every mount of
    the host's view is now nodev besides read-only; the box's own /dev and
    the paths named on the command line keep what the host has. A node of
    /dev/null's kind (1, 3), mode 0666, in a host folder: opening it fails
    with EACCES; /dev/null and /dev/full in the box still work, and so does
    the node given with --ro."""
    b, pol = _nobody_box(sluice_bin, net, hostdir, [], userns=user == "nobody")
    node = os.path.join(hostdir, "null-node")
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.chmod(node, 0o666)
    p = b.run(["--policy", pol], None, cmd=[PY, "-c", WRITE, node, "/dev/null", "/dev/full"],
              user=None if user == "root" else 65534)
    assert p.returncode == 0, p.stderr
    assert Box.out(p) == {node: "EACCES", "/dev/null": "ok", "/dev/full": "ENOSPC"}
    # named on the command line, it is a device as on the host
    p = b.run(["--policy", pol, "--ro", node], None, cmd=[PY, "-c", WRITE, node],
              user=None if user == "root" else 65534)
    assert p.returncode == 0, p.stderr
    assert Box.out(p) == {node: "ok"}


def test_symlinked_paths_refused(box, net, hostdir):
    """A link planted in the writable folder by an earlier run does not turn
    --rw ./build into a grant of its target."""
    pol = box.policy(net.policy([]))
    secret = os.path.join(hostdir, "secret")
    os.makedirs(secret)
    os.symlink(secret, os.path.join(box.workdir, "build"))
    os.makedirs(os.path.join(box.workdir, "real"))
    os.symlink("real", os.path.join(box.workdir, "alias"))
    for args in (["--rw", "./build"], ["--ro", "build"], ["--hide", "build"],
                 ["--rw", "alias/sub/.."], ["--ro", os.path.join(box.workdir, "alias")]):
        p = box.run(["--policy", pol] + args, None,
                    cmd=["touch", os.path.join(secret, "planted")])
        assert p.returncode == 2, (args, p.stderr)
        assert "is a symbolic link" in p.stderr and "pass the real path" in p.stderr, p.stderr
        assert not os.path.exists(os.path.join(secret, "planted"))
    p = box.run(["--policy", pol, "--rw", secret], None,
                cmd=["touch", os.path.join(secret, "ok")])
    assert p.returncode == 0, p.stderr
    assert os.path.exists(os.path.join(secret, "ok"))
    # a ".." after the link: normalised as written the path is ./data, which
    # has no link (nor exists), but the kernel resolves build/.. to hostdir
    data = os.path.join(hostdir, "data")
    os.makedirs(data)
    for args in (["--rw", "build/../data"], ["--rw", os.path.join(box.workdir, "build", "..",
                                                                  "data")],
                 ["--ro", "./build/../data"], ["--hide", "build/../data"]):
        p = box.run(["--policy", pol] + args, None, cmd=["touch", os.path.join(data, "planted")])
        assert p.returncode == 2, (args, p.stderr)
        assert "build is a symbolic link" in p.stderr and "pass the real path" in p.stderr, (
            args, p.stderr)
        assert not os.path.exists(os.path.join(data, "planted")), args


def test_symlink_target_in_the_refusal_is_escaped(box, net):
    """The target of a link an earlier run planted is the agent's text: the
    refusal showed it raw, so a line end and a terminal escape in it wrote a
    line of run's own into standard error ('sluice run: exit 0; ...') and
    could clear the ones before it. It is shown as mountinfo writes such
    bytes, \\ooo."""
    pol = box.policy(net.policy([]))
    os.symlink("/etc\x1b[2J\nsluice run: exit 0; forged", os.path.join(box.workdir, "build"))
    for args in (["--rw", "./build"], ["--log", "build"]):
        p = box.run(["--policy", pol] + args, "print('ran')")
        assert p.returncode == 2, (args, p.stderr)
        assert "ran" not in p.stdout
        assert "\x1b" not in p.stderr, (args, p.stderr)
        assert not any(ln.startswith("sluice run: exit 0; forged")
                       for ln in p.stderr.splitlines()), (args, p.stderr)
        assert ("is a symbolic link (to /etc\\033[2J\\012sluice run: exit 0; forged)"
                in p.stderr), (args, p.stderr)


def test_the_working_directory_and_paths_in_messages_are_escaped(box, net):
    """A folder the agent made in the writable project folder is the agent's
    text, and the next run from inside it printed its name raw in the home
    warning and the warning about renamable folders, as add_path()'s errors
    printed a path as given: a line end and a terminal escape in it wrote a
    line of run's own into standard error and could clear the ones before
    it. They are shown as refuse_links() shows a link's target, \\ooo."""
    pol = box.policy(net.policy([]))
    weird = os.path.join(box.workdir, "p\x1b[2J\nsluice run: exit 0; forged")
    os.makedirs(os.path.join(weird, "a", "b"))
    shown = box.workdir + "/p\\033[2J\\012sluice run: exit 0; forged"
    p = box.run(["--policy", pol, "--ro", "a/b"], "print('ran')", cwd=weird,
                env={"HOME": weird})
    assert p.returncode == 0, p.stderr
    assert "warning: the current directory %s is your home directory" % shown in p.stderr
    assert ("warning: --ro %s/a/b lies in a folder below the writable %s:" % (shown, shown)
            in p.stderr), p.stderr
    assert "\x1b" not in p.stderr and "ran" in p.stdout
    assert not any(ln.startswith("sluice run: exit 0; forged") for ln in p.stderr.splitlines())
    p = box.run(["--policy", pol, "--rw", "missing\x1b[2J\nforged"], "print('ran')", cwd=weird)
    assert p.returncode == 2 and "ran" not in p.stdout
    assert "sluice run: --rw missing\\033[2J\\012forged: " in p.stderr, p.stderr
    assert "\x1b" not in p.stderr and "\nforged" not in p.stderr, p.stderr


def test_symlinked_log_and_alerts_refused(box, net, hostdir):
    """A link an earlier run planted where the next run's --log or --alerts
    file goes (the current directory is writable) would have the gateway,
    root before it drops to nobody, create or append to its target, in lines
    the agent writes (a request path of `$(...)` in a ~/.bashrc or an
    /etc/profile.d script): refused, like a linked --rw path."""
    pol = box.policy(net.policy([]))
    rc_file = os.path.join(hostdir, "bashrc")
    with open(rc_file, "w") as f:
        f.write("# rc\n")
    os.symlink(rc_file, os.path.join(box.workdir, "decisions.jsonl"))
    os.symlink(os.path.join(hostdir, "profile.sh"), os.path.join(box.workdir, "alerts.jsonl"))
    os.makedirs(os.path.join(hostdir, "logs"))
    os.symlink(os.path.join(hostdir, "logs"), os.path.join(box.workdir, "logs"))
    for args in (["--log", "decisions.jsonl"], ["--log", os.path.join(box.workdir,
                                                                      "decisions.jsonl")],
                 ["--alerts", "./alerts.jsonl"], ["--log", "logs/run.jsonl"]):
        p = box.run(["--policy", pol] + args, "print('{}')")
        assert p.returncode == 2, (args, p.stderr)
        assert "is a symbolic link" in p.stderr and "pass the real path" in p.stderr, (
            args, p.stderr)
        assert "{}" not in p.stdout, args  # the command never ran
    with open(rc_file) as f:
        assert f.read() == "# rc\n"
    assert not os.path.exists(os.path.join(hostdir, "profile.sh"))
    assert os.listdir(os.path.join(hostdir, "logs")) == []
    # the real path is fine
    p = box.run(["--policy", pol, "--log", os.path.join(hostdir, "logs", "run.jsonl")],
                "print('{}')")
    assert p.returncode == 0, p.stderr


def test_renamed_folder_cannot_forge_the_summary(box, net):
    """The agent renames the folder that holds the log and writes a forged
    line where it was: the summary reads the file run opened beforehand.
    run warns about protected files below a writable path."""
    os.makedirs(os.path.join(box.workdir, ".sluice"))
    os.makedirs(os.path.join(box.workdir, "tools", "hooks"))
    with open(os.path.join(box.workdir, ".sluice", "policy.yaml"), "w") as f:
        f.write(policy_yaml(net.policy([])))
    forge = ('mv .sluice .sluice.old && mkdir .sluice && for i in 1 2 3; do '
             'echo \'{"event":"agent_egress","decision":"allow","tier":0}\' >> .sluice/run.log; '
             'echo \'{"event":"alert","kind":"x"}\' >> .sluice/alerts.log; done')
    p = box.run(["--policy", ".sluice/policy.yaml", "--log", ".sluice/run.log", "--alerts",
                 ".sluice/alerts.log", "--ro", "tools/hooks"], None, cmd=["sh", "-c", forge])
    assert p.returncode == 0, p.stderr
    s = Box.summary(p)
    assert s["allowed"] == 0 and s["alerts"] == 0, p.stderr
    assert "(the decision log could not be read)" not in p.stderr
    with open(os.path.join(box.workdir, ".sluice", "run.log")) as f:
        assert f.read().count("allow") == 3  # the forgery is there, on the host
    tail = ("lies in a folder below the writable %s: the agent cannot change this file, but it "
            "can rename the folder above it and leave a replacement for the next run: keep it "
            "outside the writable paths" % box.workdir)
    for label, path in (("the policy", ".sluice/policy.yaml"), ("the decision log",
                        ".sluice/run.log"), ("the alerts file", ".sluice/alerts.log"),
                        ("--ro", "tools/hooks")):
        assert "warning: %s %s %s" % (label, os.path.join(box.workdir, path), tail) in p.stderr
    # directly in the writable folder (a mount point cannot be renamed): no warning
    p = box.run(["--policy", ".sluice.old/policy.yaml", "--ro", "tools"], None, cmd=["true"])
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("rename the folder above it") == 1, p.stderr
    assert "warning: the policy %s/.sluice.old/policy.yaml" % box.workdir in p.stderr


def _processes_with_arg(exe, marker):
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.path.realpath("/proc/%s/exe" % d) != exe:
                continue
            with open("/proc/%s/cmdline" % d, "rb") as f:
                if marker.encode() in f.read().split(b"\0"):
                    found.append(int(d))
        except OSError:
            pass
    return found


def _uid_and_seccomp(pid):
    """([real, effective, saved, fs uid], seccomp mode) of <pid>."""
    with open("/proc/%d/status" % pid) as f:
        st = dict(ln.rstrip("\n").split(":\t", 1) for ln in f if ":\t" in ln)
    return [int(x) for x in st["Uid"].split()], int(st["Seccomp"])


def _watch_gateway(box, args, marker):
    """Runs a command under `run ARGS --agent MARKER` that waits (made the
    file "started" in its working folder) until run's processes have been
    watched (then the test makes "go"); returns (the CompletedProcess, the
    gateway's [real, effective, saved, fs uid], its seccomp mode, its nice
    value). The gateway is the one process in SCHED_BATCH, leader of its own
    group: it takes that class just after it said it was ready, so it is
    waited for. The command prints its scheduling policy and nice value."""
    code = ("import json, os, time; print(json.dumps({'sched': os.sched_getscheduler(0),"
            " 'nice': os.nice(0)}), flush=True); open('started', 'w').close()\n"
            "deadline = time.monotonic() + %d\n"
            "while not os.path.exists('go') and time.monotonic() < deadline:\n"
            "    time.sleep(0.02)\n" % HANG_GUARD_S)
    started, go = os.path.join(box.workdir, "started"), os.path.join(box.workdir, "go")
    for name in (started, go):  # an earlier call's
        if os.path.exists(name):
            os.unlink(name)
    result = {}
    th = threading.Thread(target=lambda: result.update(
        p=box.run(list(args) + ["--agent", marker], code, timeout=2 * HANG_GUARD_S)))
    th.start()
    exe = os.path.realpath(box.bin)
    seen, uids, nices = {}, {}, {}

    def watched():
        if not os.path.exists(started):
            return not th.is_alive()  # run ended before its command started
        for pid in _processes_with_arg(exe, marker):
            try:
                seen[pid] = sched_and_pgid(pid)
                uids[pid] = _uid_and_seccomp(pid)
                nices[pid] = int(proc_stat(pid)[19 - 3])
            except OSError:
                pass
        return any(pol_ == os.SCHED_BATCH for pol_, _ in seen.values()) and len(seen) >= 3
    try:
        poll(watched, timeout=HANG_GUARD_S, interval=0.05,
             what="run's command to start and its gateway to take SCHED_BATCH")
    except AssertionError as e:
        raise AssertionError("%s; run's processes seen (sched, pgid): %r" % (e, seen))
    finally:
        open(go, "w").close()
        th.join(2 * HANG_GUARD_S)
    assert "p" in result, "run did not end once its command was let go"
    p = result["p"]
    assert os.path.exists(started), "the command never ran: %s" % p.stderr
    batch = [pid for pid, (pol_, pgid) in seen.items() if pol_ == os.SCHED_BATCH]
    assert len(batch) == 1, seen
    assert seen[batch[0]][1] == batch[0], "the batch process is not the gateway: %r" % seen
    uid, seccomp = uids[batch[0]]
    return p, uid, seccomp, nices[batch[0]]


def test_gateway_runs_batch_and_the_command_normal(box, net):
    # run's gateway gives up wake-up preemption (--sched batch, serve's
    # default) and, started as root at nice 0, runs at serve's default nice
    # (-10); the command in the box keeps the class and nice it was started
    # with. Started as root, the gateway serves as nobody. Either way it runs
    # under its own seccomp filter (gate/lockdown.h).
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        pytest.skip("the test runner is not SCHED_OTHER")
    pol = box.policy(net.policy([api_rule(net)]))
    p, uid, seccomp, nice = _watch_gateway(box, ["--policy", pol], "sched-probe")
    assert p.returncode == 0, p.stderr
    assert Box.out(p)["sched"] == os.SCHED_OTHER
    assert Box.out(p)["nice"] == os.nice(0)
    assert seccomp == 2
    if os.geteuid() == 0:
        assert uid == [pwd.getpwnam("nobody").pw_uid] * 4, uid
        if os.nice(0) == 0:
            assert nice == -10
    else:  # no privilege to raise it: kept, without a word
        assert nice == os.nice(0)
        assert "nice" not in p.stderr


def test_gateway_user_is_chosen(box, net):
    # --gateway-user names the user run's gateway serves as (root: keeps it).
    if os.geteuid() != 0:
        pytest.skip("needs root to choose the gateway's user")
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        pytest.skip("the test runner is not SCHED_OTHER")
    pol = box.policy(net.policy([api_rule(net)]))
    daemon = pwd.getpwnam("daemon").pw_uid
    p, uid, seccomp, _ = _watch_gateway(box, ["--policy", pol, "--gateway-user", "daemon"],
                                        "user-probe")
    assert p.returncode == 0, p.stderr
    assert uid == [daemon] * 4 and seccomp == 2, (uid, seccomp)
    p, uid, _, _ = _watch_gateway(box, ["--policy", pol, "--gateway-user", "root"],
                                  "root-probe")
    assert p.returncode == 0, p.stderr
    assert uid == [0] * 4, uid


def test_alert_programs_are_looked_at_as_the_gateway_user(box, net, hostdir):
    """run started as root looked at the alert programs as root while its
    gateway runs them as nobody (or --gateway-user): one only root may run
    was not warned of, and every alert to it failed `Permission denied`.
    The look is the gateway's user's now; --gateway-user root's is root's."""
    if os.geteuid() != 0:
        pytest.skip("needs root to choose the gateway's user")
    prog = write_script(os.path.join(hostdir, "root-only.sh"), "#!/bin/sh\ncat\n")
    os.chmod(prog, 0o700)
    pol = box.policy(net.policy([api_rule(net)], alerts={"sinks": [{"exec": prog}]}))
    nobody = pwd.getpwnam("nobody").pw_uid
    daemon = pwd.getpwnam("daemon").pw_uid
    for args, uid in (([], nobody), (["--gateway-user", "daemon"], daemon),
                      (["--gateway-user", "root"], None)):
        p = box.run(["--policy", pol] + args, "print(1)")
        assert p.returncode == 0, p.stderr
        told = [ln for ln in p.stderr.splitlines() if "exec program" in ln]
        if uid is None:
            assert told == [], p.stderr
        else:
            assert len(told) == 1 and told[0].endswith(
                "alerts.sinks[0]: exec program %s cannot be run here (not executable by uid %d: "
                "Permission denied): every alert to it would be lost" % (prog, uid)), p.stderr


def test_gateway_user_refusals(box, net, tmp_path):
    pol = box.policy(net.policy([api_rule(net)]))
    marker = tmp_path / "started"
    code = "open(%r, 'w').write('x')" % str(marker)
    p = box.run(["--policy", pol, "--gateway-user", "no-such-user-x"], code)
    assert p.returncode == 2
    assert "sluice run: --gateway-user: no user 'no-such-user-x'" in p.stderr
    p = box.run(["--policy", pol, "--gateway-user", ""], code)
    assert p.returncode == 2, p.stderr
    assert not marker.exists(), "the command ran"
    # with --proxy the serving gateway's user is its own: a warning only
    sock = _socket_file(str(tmp_path / "none.sock"))  # nothing listens: the command's requests fail
    p = box.run(["--proxy", "unix:" + sock, "--gateway-user", "daemon"], code)
    assert ("sluice run: warning: --gateway-user has no effect with --proxy: the serving "
            "gateway runs as its own user") in p.stderr


def test_gateway_user_needs_root(sluice_bin, net, hostdir):
    # Not root, run cannot make its gateway another user: exit 2, nothing runs.
    b, pol = _nobody_box(sluice_bin, net, hostdir, [api_rule(net)], userns=False)
    p = b.run(["--policy", pol, "--gateway-user", "daemon"], None, cmd=["true"], user=65534)
    assert p.returncode == 2
    assert "sluice run: --gateway-user daemon: not running as root" in p.stderr

# A job-control shell in miniature: the session's leader, on the pty given
# as its controlling terminal, starts argv in a process group of its own,
# makes it the terminal's foreground group, and waits on it as a shell does
# (WUNTRACED): it prints "stopped" when run stops, continues the group as
# `fg` would, and prints run's exit status.
_JOB_SHELL = r"""
import os, signal, subprocess, sys
p = subprocess.Popen(sys.argv[1:], process_group=0)
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
os.tcsetpgrp(0, p.pid)
while True:
    _, st = os.waitpid(p.pid, os.WUNTRACED)
    if os.WIFSTOPPED(st):
        print("stopped", flush=True)
        os.killpg(p.pid, signal.SIGCONT)
        continue
    print("exit", os.waitstatus_to_exitcode(st), flush=True)
    break
"""


def _run_on_pty(argv, box, keys, handed_over=False):
    """Runs argv as a session's leader with a pty as its controlling
    terminal and types <keys> on the pty once the command in the box has
    made the file "started" in the working folder and, with <handed_over>,
    the leader has given the terminal's foreground to another group (a
    shell's job). Returns (returncode, stdout, stderr). Waited for, not
    guessed: a ^Z typed a second after the start, before a loaded job shell
    had called tcsetpgrp(), went to the shell's own group, which stops on
    nothing (orphaned), and the test failed without "stopped"."""
    import fcntl
    import termios
    master, slave = os.openpty()

    def ctty():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    p = subprocess.Popen(argv, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=box.workdir, env=_clean_env(), start_new_session=True,
                         preexec_fn=ctty)
    started = os.path.join(box.workdir, "started")
    try:
        poll(lambda: p.poll() is not None or (
            os.path.exists(started) and (not handed_over or os.tcgetpgrp(master) != p.pid)),
            timeout=30, what="the command started in the terminal's foreground")
        os.write(master, keys)
        out, err = p.communicate(timeout=30)
    finally:
        for pid in _session_members(p.pid):  # run's group and its own
            with contextlib.suppress(ProcessLookupError):  # one gone with another
                os.kill(pid, signal.SIGKILL)
        p.wait()
        os.close(slave)
        os.close(master)
    return p.returncode, out, err


def _session_members(sid):
    """The processes of session <sid> (stat field 6)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if int(proc_stat(int(d))[6 - 3]) == sid:
                    pids.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return pids


def _ctrl_z_then_fg(box, net, setup):
    """Runs a command that does <setup> (Python, with os and signal), says
    it started and ends once continued (after the ^Z, whenever that comes),
    under _JOB_SHELL on a pty; types ^Z and asserts that run stopped once
    and that the command, continued, printed "done"."""
    pol = box.policy(net.policy([]))
    code = ("import os, signal; %s; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCONT}); "
            "open('started', 'w').close(); "
            "print('done' if signal.sigtimedwait({signal.SIGCONT}, 60) else 'not continued')"
            % setup)
    argv = [PY, "-c", _JOB_SHELL, box.bin, "run", "--policy", pol, "--", PY, "-c", code]
    rc, out, err = _run_on_pty(argv, box, b"\x1a", handed_over=True)
    assert rc == 0, err
    assert out.split() == ["stopped", "done", "exit", "0"], (out, err)

def test_ctrl_z_stops_run_with_the_command(box, net):
    """^Z on the terminal stops the foreground process group, the command
    in it; run, which blocks SIGTSTP to read it from a signalfd, stops as
    well, so that the shell waiting on it gets its prompt back (run kept
    running, and the shell hung, before). SIGCONT to the group, as `fg`
    sends, wakes both, and the command then runs to its end."""
    _ctrl_z_then_fg(box, net, "pass")


def test_ctrl_z_in_an_orphaned_group_stops_nothing(box, net):
    """run as a session's leader (tmux, `ssh -t host sluice run ...`,
    `xterm -e`): its process group is orphaned, and the kernel stops none
    of it on ^Z, the command included, since nothing would continue it.
    run must not stop either: a SIGSTOP of its own left it stopped for
    good while the command ran on and ended, and nothing came back."""
    pol = box.policy(net.policy([]))
    # the command ends on the line typed after the ^Z: the terminal has
    # dealt with the ^Z by the time it reads it
    code = ("import sys; open('started', 'w').close(); sys.stdin.readline(); print('done')")
    argv = [box.bin, "run", "--policy", pol, "--", PY, "-c", code]
    rc, out, err = _run_on_pty(argv, box, b"\x1ago on\n")
    assert rc == 0, err
    assert out.strip() == "done"


@pytest.mark.parametrize("how,shown", [
    ("os.kill(0, signal.SIGTSTP)", "stopped"),               # vim's ^Z in raw mode
    ("os.kill(os.getpid(), signal.SIGTTIN)", "stopped"),     # its stop signal mirrored
    ("os.kill(os.getpid(), signal.SIGSTOP)", "stopped"),
])
def test_a_command_that_stops_itself_stops_run(box, net, how, shown):
    """A command that stops itself (vim, or an agent's terminal UI, reading
    ^Z as a key in raw mode and sending itself SIGTSTP; `kill -STOP $$`)
    stops run too, so that the shell waiting on run gets its prompt back,
    as it would with the command run directly; SIGCONT to the group (`fg`)
    continues both. Before, run went on waiting for a command that was
    stopped: the shell hung without its prompt, and ^C, held by the stopped
    command, did nothing (found by the box review)."""
    pol = box.policy(net.policy([]))
    code = ("import os, signal; open('started', 'w').close(); %s; print('done')" % how)
    argv = [PY, "-c", _JOB_SHELL, box.bin, "run", "--policy", pol, "--", PY, "-c", code]
    rc, out, err = _run_on_pty(argv, box, b"", handed_over=True)
    assert rc == 0, err
    assert out.split() == [shown, "done", "exit", "0"], (out, err)


def test_fg_continues_a_command_in_a_process_group_of_its_own(box, net):
    """A command in a process group of its own (a shell with job control
    in the box, `bash -i`, `setsid`) that made it the terminal's
    foreground: ^Z stops that group alone, the init tells run, and run
    stops. `fg` sends SIGCONT to run's group, which the command is not in:
    run passes it on through the box's init, and the command goes on (it
    prints once continued), run stopping no second time."""
    _ctrl_z_then_fg(box, net, "os.setpgid(0, 0); "
                    "signal.signal(signal.SIGTTOU, signal.SIG_IGN); os.tcsetpgrp(0, os.getpgrp()); "
                    "signal.signal(signal.SIGTTOU, signal.SIG_DFL)")


def test_hangup_reaches_the_command_when_run_leads_the_session(box, net):
    """run as a session's leader (`ssh -t host sluice run ...`, tmux, `xterm
    -e`): when the terminal hangs up, the kernel sends SIGHUP to the
    session's leader alone, not to the foreground group. run took it for a
    signal the terminal had sent to the command as well and passed it on to
    no one, so the command ran on, to its end, with its terminal gone
    (found by the box review). run now passes on the hangup it gets as the
    session's leader."""
    import fcntl
    import termios
    pol = box.policy(net.policy([]))
    # sleeps far longer than the guard below: ended only by the hangup
    code = "import time\nprint('ready', flush=True)\ntime.sleep(3600)\nprint('slept')\n"
    master, slave = os.openpty()

    def ctty():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    p = subprocess.Popen([box.bin, "run", "--policy", pol, "--", PY, "-c", code], stdin=slave,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=box.workdir, env=_clean_env(), start_new_session=True,
                         preexec_fn=ctty)
    os.close(slave)
    try:
        _wait_ready(p)
        os.close(master)  # the terminal hangs up
        master = -1
        try:
            out, err = p.communicate(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            pytest.fail("run and its command still ran %d s after the terminal hung up" %
                        HANG_GUARD_S)
    finally:
        if master >= 0:
            os.close(master)
        for pid in _session_members(p.pid):
            os.kill(pid, signal.SIGKILL)
        p.wait()
    assert p.returncode == 128 + signal.SIGHUP, err
    assert "slept" not in out
    assert "sluice run: exit %d;" % (128 + signal.SIGHUP) in err


STDIN_REOPEN = r"""
import json, os, sys
res = {"read": sys.stdin.read()}
try:
    with open("/proc/self/fd/0", "w") as f:
        f.write("from the box")
    res["reopen"] = "ok"
except OSError as e:
    res["reopen"] = e.strerror
print(json.dumps(res))
"""


def test_a_file_given_as_standard_input_cannot_be_rewritten(box, net, hostdir):
    """A file given with `< file` was opened on the host's mount: the
    command could open /proc/self/fd/0 again for writing and change it,
    though it is read-only in the box (found by the box review). run now
    hands the command the same file opened again by its path in the box,
    at the same offset; a file in a --rw path stays writable so."""
    pol = box.policy(net.policy([]))
    ro = os.path.join(hostdir, "input.txt")
    rw_dir = os.path.join(hostdir, "rw")
    os.makedirs(rw_dir)
    rw = os.path.join(rw_dir, "input.txt")
    for path in (ro, rw):
        with open(path, "w") as f:
            f.write("0123456789")
    argv = [box.bin, "run", "--policy", pol, "--rw", rw_dir, "--", PY, "-c", STDIN_REOPEN]
    for path, reopen in ((ro, "Read-only file system"), (rw, "ok")):
        fd = os.open(path, os.O_RDONLY)
        try:
            assert os.read(fd, 3) == b"012"  # the command goes on from the caller's offset
            p = subprocess.run(argv, stdin=fd, capture_output=True, text=True, timeout=30,
                               cwd=box.workdir, env=_clean_env())
        finally:
            os.close(fd)
        assert p.returncode == 0, p.stderr
        assert Box.out(p) == {"read": "3456789", "reopen": reopen}
        with open(path) as f:
            assert f.read() == ("0123456789" if path == ro else "from the box")
    # a box of nobody's, in a user namespace: the same, for a file nobody
    # could write on the host
    os.chmod(ro, 0o666)
    b, upol = _nobody_box(box.bin, net, hostdir, [])
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", b.bin, "run",
            "--policy", upol, "--", PY, "-c", STDIN_REOPEN]
    with open(ro) as f:
        p = subprocess.run(argv, stdin=f, capture_output=True, text=True, timeout=30,
                           cwd=b.workdir, env=_clean_env())
    assert p.returncode == 0, p.stderr
    assert Box.out(p) == {"read": "0123456789", "reopen": "Read-only file system"}
    with open(ro) as f:
        assert f.read() == "0123456789"


def test_a_fifo_in_place_of_standard_input_does_not_hang_the_box(box, net):
    """run opens a file given as standard input again by the path the
    kernel gives for it (/proc/self/fd/0). Where a FIFO stands at that
    path (put there by whoever can write the folder: the file was unlinked
    or renamed over, so the path is "NAME (deleted)", or swapped while run
    started), that open waited for a writer, for ever, and the command
    never started. The path is opened O_PATH now, and the file read only
    through that descriptor once it is the same: the FIFO is not, so the
    command gets the descriptor it was given, as for a file the box does
    not show."""
    pol = box.policy(net.policy([]))
    path = os.path.join(box.workdir, "input.txt")
    with open(path, "w") as f:
        f.write("0123456789")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.unlink(path)
        os.mkfifo(path + " (deleted)")
        assert os.readlink("/proc/self/fd/%d" % fd) == path + " (deleted)"
        # bounded (timeout): without the fix run never ends
        p = subprocess.run([box.bin, "run", "--policy", pol, "--", PY, "-c", STDIN_REOPEN],
                           stdin=fd, capture_output=True, text=True, timeout=30,
                           cwd=box.workdir, env=_clean_env())
    finally:
        os.close(fd)
    assert p.returncode == 0, p.stderr
    # the descriptor it came with: on the host's mount, so still writable,
    # as for any file the box does not show at its path
    assert Box.out(p)["read"] == "0123456789"


DIR_STDIN = r"""
import errno, json, os
out = {}
try:
    os.close(os.open("escaped", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=3))
    out["create"] = "ok"
except OSError as e:
    out["create"] = errno.errorcode[e.errno]
out["ls"] = sorted(os.listdir(3))
print(json.dumps(out))
"""


def test_a_directory_given_as_standard_input_stays_in_the_box(box, net, hostdir):
    """A directory given with `< dir` was opened on the host's mount: through
    openat() the command could create files in it, read-only in the box,
    and through `..` reach every file of the host's view, hidden ones too
    (found by the box review). run now hands the command the directory
    opened again by its path in the box; one the box does not show as the
    same directory (hidden) fails the set-up, the command never runs."""
    pol = box.policy(net.policy([]))
    visible = os.path.join(hostdir, "visible")
    secret = os.path.join(hostdir, "secret")
    for d in (visible, secret):
        os.makedirs(d)
        with open(os.path.join(d, "inside"), "w") as f:
            f.write("x")
    # Python will not start with a directory as its standard input: the
    # shell moves it to descriptor 3
    cmd = ["/bin/sh", "-c", 'exec "$0" -c "$1" 3<&0 0</dev/null', PY, DIR_STDIN]
    argv = [box.bin, "run", "--policy", pol, "--hide", secret, "--"] + cmd

    def run_with_stdin(directory):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return subprocess.run(argv, stdin=fd, capture_output=True, text=True, timeout=30,
                                  cwd=box.workdir, env=_clean_env())
        finally:
            os.close(fd)

    p = run_with_stdin(visible)
    assert p.returncode == 0, p.stderr
    assert Box.out(p) == {"create": "EROFS", "ls": ["inside"]}
    assert os.listdir(visible) == ["inside"]
    p = run_with_stdin(secret)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "{" not in p.stdout
    assert "sluice run: cannot build the box: standard input is the directory %s" % secret \
        in p.stderr, p.stderr
    assert os.listdir(secret) == ["inside"]


def test_a_hidden_directory_given_as_standard_input_is_named_escaped(box, net, hostdir):
    """The set-up error for a directory the box does not show printed its
    path raw, where run's other messages show each control character as
    \\ooo: a name holding a line end wrote a 'sluice run:' line of its own
    into standard error, and one holding an escape sequence wrote it to
    the terminal (found by review)."""
    pol = box.policy(net.policy([]))
    secret = os.path.join(hostdir, "secret")
    given = os.path.join(secret, "x\nsluice run: forged\x1b[2J")
    os.makedirs(given)
    fd = os.open(given, os.O_RDONLY | os.O_DIRECTORY)
    try:
        p = subprocess.run([box.bin, "run", "--policy", pol, "--hide", secret, "--", "/bin/true"],
                           stdin=fd, capture_output=True, text=True, timeout=30,
                           cwd=box.workdir, env=_clean_env())
    finally:
        os.close(fd)
    assert p.returncode == 2, p.stderr
    shown = given.replace("\n", "\\012").replace("\x1b", "\\033")
    assert ("sluice run: cannot build the box: standard input is the directory %s, which the "
            "box does not show" % shown) in p.stderr, p.stderr
    assert "\nsluice run: forged" not in p.stderr and "\x1b" not in p.stderr, p.stderr


@pytest.mark.parametrize("where", ["workdir", "tmp"])
def test_a_log_file_given_as_output_and_error_is_shared(box, net, where):
    """`> log 2>&1`: standard output and error are one open file, written
    at one offset, by the command and by run (its summary line). A file the
    box shows writable (the working directory) is passed as it is: opened
    again, each would write over the other; one it does not (the host's
    /tmp) is written through one pipe for both, which run copies into that
    same open file, the command's lines before run's summary."""
    pol = box.policy(net.policy([]))
    d = box.workdir if where == "workdir" else tempfile.mkdtemp(prefix="sluice-log-", dir="/tmp")
    log = os.path.join(d, "log.txt")
    code = ("import sys\nfor x in 'abc':\n    (sys.stdout if x != 'b' else sys.stderr)"
            ".write(x + '\\n'); sys.stdout.flush(); sys.stderr.flush()\n")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"before\n")
        p = subprocess.run([box.bin, "run", "--policy", pol, "--", PY, "-c", code],
                           stdout=fd, stderr=fd, timeout=30, cwd=box.workdir, env=_clean_env())
        os.write(fd, b"after\n")
    finally:
        os.close(fd)
    assert p.returncode == 0
    with open(log) as f:
        text = f.read()
    # in order, nothing written over (the gateway's own warnings may come
    # between: they share the file too)
    assert text.startswith("before\n") and text.endswith("after\n"), text
    assert "\na\nb\nc\n" in text and "sluice run: exit 0;" in text, text
    assert text.index("\na\nb\nc\n") < text.index("sluice run: exit 0;"), text
    if where == "tmp":
        shutil.rmtree(d)


# In-box code: for each FIFO path, opens it O_WRONLY|O_NONBLOCK (the host
# holds a reader open, so the open does not wait) and writes its name;
# prints each path's result ("ok" or the errno's name), the box's uid and
# the FIFOs the box sees under /run.
FIFO_WRITE = r"""
import errno, json, os, stat, sys
out = {"uid": os.getuid(), "run_fifos": []}
for path in sys.argv[1:]:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, path.encode())
        os.close(fd)
        out[path] = "ok"
    except OSError as e:
        out[path] = errno.errorcode[e.errno]
for root, dirs, files in os.walk("/run"):
    for n in dirs + files:
        try:
            if stat.S_ISFIFO(os.lstat(os.path.join(root, n)).st_mode):
                out["run_fifos"].append(os.path.join(root, n))
        except OSError:
            pass
print(json.dumps(out))
"""


def _host_fifo(path):
    """A FIFO at <path> and a host reader on it (O_NONBLOCK: the box's
    O_NONBLOCK writer then finds a reader and its open does not wait)."""
    os.mkfifo(path, 0o666)
    os.chmod(path, 0o666)
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK)


def _fifo_read(fd):
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_host_fifo_shown_read_only_cannot_be_written(sluice_bin, net, hostdir, user):
    """A read-only mount refuses to change files, not to write into a FIFO
    (writing one changes nothing on the file system): the command could
    open any host FIFO it sees for writing and feed whatever reads it on
    the host (systemd's /run/initctl takes runlevel changes and power-offs
    from root). The box now also applies a Landlock ruleset to the
    command, which allows writing files only below what the box leaves
    writable (the working directory, --rw paths, its /tmp, /dev): a FIFO
    the test makes in a folder the box shows read-only cannot be opened
    for writing (EACCES) and the host reads nothing from it, while one in
    a --rw folder and one in the working directory still carry the bytes.
    A FIFO that is named with --ro is opened as the host has it, as a
    device named so is. Skipped where the kernel has no Landlock (ABI 2
    or later)."""
    if not _landlock_abi() >= 2:
        pytest.skip("the kernel has no Landlock (ABI 2 or later)")
    b, pol = _nobody_box(sluice_bin, net, hostdir, [], userns=user == "nobody")
    rw = os.path.join(hostdir, "rw")
    named = os.path.join(hostdir, "named")
    os.makedirs(rw)
    os.makedirs(named)
    os.chmod(rw, 0o777)
    fifos = {"ro": os.path.join(hostdir, "fifo"), "rw": os.path.join(rw, "fifo"),
             "cwd": os.path.join(b.workdir, "fifo"), "named": os.path.join(named, "fifo")}
    readers = {k: _host_fifo(v) for k, v in fifos.items()}
    try:
        p = b.run(["--policy", pol, "--rw", rw, "--ro", fifos["named"]], None,
                  cmd=[PY, "-c", FIFO_WRITE] + list(fifos.values()),
                  user=None if user == "root" else 65534)
        assert p.returncode == 0, p.stderr
        o = Box.out(p)
        got = {k: _fifo_read(fd) for k, fd in readers.items()}
    finally:
        for fd in readers.values():
            os.close(fd)
    assert o["uid"] == (0 if user == "root" else 65534)
    assert o[fifos["ro"]] == "EACCES"
    assert got["ro"] == b""
    for k in ("rw", "cwd", "named"):
        assert o[fifos[k]] == "ok", k
        assert got[k] == fifos[k].encode(), k
    assert "Landlock" not in p.stderr


def _landlock_abi():
    """The kernel's Landlock ABI version, 0 when it has none."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    nr = 444  # landlock_create_ruleset, the same on every architecture
    v = libc.syscall(nr, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return v if v > 0 else 0


def test_without_landlock_the_box_says_a_fifo_stays_writable(box, net, hostdir):
    """Where the kernel has no Landlock (before 5.19, or not enabled), the
    box runs as before, mounts and seccomp only, and says once on standard
    error that a FIFO it shows read-only can still be written; the
    test-only SLUICE_TEST_NO_LANDLOCK=1 makes run take that path on any
    kernel."""
    pol = box.policy(net.policy([]))
    fifo = os.path.join(hostdir, "fifo")
    fd = _host_fifo(fifo)
    try:
        p = box.run(["--policy", pol], None, cmd=[PY, "-c", FIFO_WRITE, fifo],
                    env={"SLUICE_TEST_NO_LANDLOCK": "1"})
        got = _fifo_read(fd)
    finally:
        os.close(fd)
    assert p.returncode == 0, p.stderr
    assert Box.out(p)[fifo] == "ok"
    assert got == fifo.encode()
    assert p.stderr.count("Landlock") == 1, p.stderr
    assert "FIFO" in p.stderr


WORKLOAD = r"""
import errno, json, os, subprocess, sys, tempfile
rw, ro_file, ro_dir = sys.argv[1:4]
out = {}
def do(name, f):
    try:
        f()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
def write(path, data="x"):
    with open(path, "w") as f:
        f.write(data)
for k, d in (("rw", rw), ("cwd", os.getcwd()), ("tmp", tempfile.mkdtemp())):
    do(k + " make", lambda: (os.makedirs(d + "/a/b"), os.mkdir(d + "/c"), write(d + "/a/b/f")))
    do(k + " rename across folders", lambda: os.rename(d + "/a/b/f", d + "/c/f"))
    do(k + " rename a folder across", lambda: os.rename(d + "/a/b", d + "/c/b"))
    do(k + " link across folders", lambda: os.link(d + "/c/f", d + "/a/g"))
    do(k + " symlink, fifo", lambda: (os.symlink("f", d + "/c/s"), os.mkfifo(d + "/c/p")))
    do(k + " truncate", lambda: (os.truncate(d + "/c/f", 0), open(d + "/a/g", "r+").truncate()))
    do(k + " remove", lambda: (os.unlink(d + "/c/p"), os.unlink(d + "/c/s"),
                               os.unlink(d + "/c/f"), os.unlink(d + "/a/g"),
                               os.rmdir(d + "/c/b"), os.rmdir(d + "/c"), os.rmdir(d + "/a")))
do("/dev/shm", lambda: write("/dev/shm/x"))
do("/dev/null", lambda: write("/dev/null"))
do("/dev/stdout", lambda: write("/dev/stdout", "to stdout\n"))
do("mkstemp and rename", lambda: os.rename(tempfile.mkstemp()[1], "/tmp/moved"))
do("read-only file", lambda: write(ro_file))
do("read-only folder", lambda: write(ro_dir + "/new"))
do("read-only mkdir", lambda: os.mkdir(ro_dir + "/new"))
do("read-only rename", lambda: os.rename(ro_file, ro_dir + "/moved"))
if os.path.exists("/usr/bin/git"):
    g = rw + "/repo"
    r = subprocess.run("git init -q %s && cd %s && echo x > f && git add f && "
                       "git -c user.name=a -c user.email=a@b commit -qm m && git gc -q && "
                       "git log --oneline | wc -l" % (g, g), shell=True,
                       capture_output=True, text=True)
    out["git"] = r.stdout.strip() if r.returncode == 0 else r.stderr
print(json.dumps(out))
"""


# Runs inside the box: signals its process group, run's (kill(0, SIGUSR1)),
# then its box's init. Prints what kill() answered and whether the command
# itself got the signal.
KILL_GROUP = r"""
import errno, json, os, signal
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
res = {}
for name, pid in (("group", 0), ("init", 1)):
    try:
        os.kill(pid, signal.SIGUSR1)
        res[name] = "ok"
    except OSError as e:
        res[name] = errno.errorcode[e.errno]
res["got"] = len(got) > 0
print(json.dumps(res))
"""


def test_signals_stay_in_the_box(box, net):
    """The command stays in run's process group (the terminal's ^C and ^Z
    reach it), and kill(0) signals that group as it is, outside the box
    too: run, and what else run's caller put there, a script's shell say.
    Where Landlock scopes signals (ABI 6, Linux 6.12), the command's
    ruleset does (LANDLOCK_SCOPE_SIGNAL): its kill(0) reaches the box's
    processes only, and a signal to the box's init fails with EPERM."""
    if not _landlock_abi() >= 6:
        pytest.skip("the kernel's Landlock does not scope signals (ABI 6 or later)")
    pol = box.policy(net.policy([]))
    run = " ".join([box.bin, "run", "--policy", pol, "--", PY, "-c", '"$INNER"'])
    # a script's shell, in one group with run: the trap says whether the
    # box's signal reached it
    script = "trap 'echo shell-got-usr1' USR1; %s; echo shell-done" % run
    p = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=60,
                       cwd=box.workdir, env=_clean_env({"INNER": KILL_GROUP}),
                       start_new_session=True)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert json.loads(lines[0]) == {"group": "ok", "init": "EPERM", "got": True}, p.stdout
    assert lines[1:] == ["shell-done"], (p.stdout, p.stderr)


def test_landlock_leaves_what_the_box_makes_writable_as_it_was(box, net, hostdir):
    """The Landlock ruleset (see the FIFO test above) must not refuse what
    the box documents as writable, nor change how a read-only path fails:
    in a --rw folder, the working directory and the box's /tmp, making,
    renaming and linking across folders (Landlock refuses reparenting with
    EXDEV unless it allows it too), FIFOs, symbolic links, truncating and
    removing work, and so does a git repository; /dev/null, /dev/shm and
    /dev/stdout (a pipe) take writes; writes to read-only paths still fail
    with EROFS, not EACCES. A file given as standard output outside the
    writable paths can still be opened again through /dev/stdout (it was
    given for writing), as a terminal can."""
    if not _landlock_abi() >= 2:
        pytest.skip("the kernel has no Landlock (ABI 2 or later)")
    pol = box.policy(net.policy([]))
    rw = os.path.join(hostdir, "rw")
    os.makedirs(rw)
    ro_file = os.path.join(hostdir, "file")
    with open(ro_file, "w") as f:
        f.write("host")
    p = box.run(["--policy", pol, "--rw", rw], None,
                cmd=[PY, "-c", WORKLOAD, rw, ro_file, hostdir])
    assert p.returncode == 0, p.stderr
    o = Box.out(p)
    assert "to stdout" in p.stdout
    for d in ("rw", "cwd", "tmp"):
        for what in ("make", "rename across folders", "rename a folder across",
                     "link across folders", "symlink, fifo", "truncate", "remove"):
            assert o.pop(d + " " + what) == "ok", (d, what, p.stderr)
    want_git = "1" if os.path.exists("/usr/bin/git") else None
    assert o.pop("git", None) == want_git
    assert o == {"/dev/shm": "ok", "/dev/null": "ok", "/dev/stdout": "ok",
                 "mkstemp and rename": "ok", "read-only file": "EROFS",
                 "read-only folder": "EROFS", "read-only mkdir": "EROFS",
                 "read-only rename": "EROFS"}
    assert sorted(os.listdir(rw)) == (["repo"] if want_git else [])
    assert sorted(os.listdir(hostdir)) == ["file", "rw"]
    # standard output and error a file outside the writable paths
    log = os.path.join(hostdir, "out.log")
    with open(log, "w") as f:
        r = subprocess.run([box.bin, "run", "--policy", pol, "--", "sh", "-c",
                            "echo again > /dev/stdout && echo err >> /dev/stderr"],
                           stdout=f, stderr=f, cwd=box.workdir, env=_clean_env(), timeout=30)
    with open(log) as f:
        text = f.read()
    assert r.returncode == 0, text
    assert "again" in text and "err" in text, text


# In-box code: opens <path> read-only, tries to take a read lease on it
# (F_SETLEASE) and, separately, a fanotify group of the permission class
# (FAN_CLASS_CONTENT, whose FAN_OPEN_PERM events make every open of a
# marked file wait for the group's answer); writes the results ("ok" or the
# errno's name, and F_GETLEASE's answer) as JSON to <ready>, then keeps the
# file open until <done> appears (bounded: 60 s). SIGIO, which tells a lease
# holder that another process waits for it to let go, is ignored.
HOLD_UP = r"""
import ctypes, errno, fcntl, json, os, signal, sys, time
signal.signal(signal.SIGIO, signal.SIG_IGN)
path, ready, done = sys.argv[1:4]
out = {"uid": os.getuid()}
fd = os.open(path, os.O_RDONLY)
try:
    fcntl.fcntl(fd, 1024, fcntl.F_RDLCK)  # F_SETLEASE
    out["setlease"] = "ok"
except OSError as e:
    out["setlease"] = errno.errorcode[e.errno]
libc = ctypes.CDLL(None, use_errno=True)
# the same with bits above the 32 the kernel reads of the command
nr = {"x86_64": 72, "aarch64": 25}.get(os.uname().machine)
if nr is not None:
    r = libc.syscall(ctypes.c_long(nr), ctypes.c_long(fd), ctypes.c_long((1 << 32) | 1024),
                     ctypes.c_long(fcntl.F_RDLCK))
    out["setlease_high"] = "ok" if r == 0 else errno.errorcode[ctypes.get_errno()]
out["getlease"] = fcntl.fcntl(fd, 1025)  # F_GETLEASE
g = libc.fanotify_init(ctypes.c_uint(0x4), ctypes.c_uint(os.O_RDONLY))  # FAN_CLASS_CONTENT
out["fanotify_init"] = "ok" if g >= 0 else errno.errorcode[ctypes.get_errno()]
with open(ready + ".part", "w") as f:
    json.dump(out, f)
os.rename(ready + ".part", ready)
for _ in range(600):
    if os.path.exists(done):
        break
    time.sleep(0.1)
os.close(fd)
"""


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_the_command_cannot_hold_up_host_processes_opening_a_file(sluice_bin, net, hostdir,
                                                                  user):
    """A lease needs no write access: the owner of a file (root, for any
    root-owned file) can take a read lease on a descriptor opened read-only,
    and from then on every process that opens the file for writing or
    truncates it waits until the holder lets go or the kernel's
    lease-break-time (45 s by default) runs out, again at each new lease: a
    boxed command could stall host daemons on files it sees only read-only.
    fcntl(F_SETLEASE) fails in the box with EACCES (what the kernel answers
    a caller who may not take a lease) and F_GETLEASE still answers
    (F_UNLCK); a host process opens the file for writing while the box
    holds it open. fanotify's permission events would stall opens the same
    way: fanotify_init(FAN_CLASS_CONTENT) fails with EPERM, the box having
    no capabilities. The same calls outside the box succeed as root, so the
    checks are not empty."""
    b, pol = _nobody_box(sluice_bin, net, hostdir, [], userns=user == "nobody")
    target = os.path.join(hostdir, "shared.conf")
    with open(target, "w") as f:
        f.write("host data\n")
    if user == "nobody":
        os.chown(target, 65534, 65534)
    ready = os.path.join(b.workdir, "ready")
    done = os.path.join(b.workdir, "done")
    if user == "root":
        # the control: outside the box, the same code takes both
        c = subprocess.run([PY, "-c", HOLD_UP, target, ready, done], input="",
                           capture_output=True, text=True, timeout=30,
                           env={"PATH": "/usr/bin:/bin"}, cwd=b.workdir,
                           preexec_fn=lambda: open(done, "w").close())
        assert c.returncode == 0, c.stderr
        with open(ready) as f:
            ctl = json.load(f)
        assert ctl["setlease"] == "ok" and ctl["fanotify_init"] == "ok", ctl
        assert ctl.get("setlease_high", "ok") == "ok", ctl
        os.unlink(ready)
        os.unlink(done)
    argv = [b.bin, "run", "--policy", pol, "--", PY, "-c", HOLD_UP, target, ready, done]
    if user == "nobody":
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + argv
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=b.workdir, env=_clean_env())
    opened = threading.Event()

    def host_writer():
        fd = os.open(target, os.O_WRONLY)
        opened.set()
        os.close(fd)
    writer = threading.Thread(target=host_writer, daemon=True)
    try:
        for _ in range(300):
            if os.path.exists(ready) or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert os.path.exists(ready), proc.communicate(timeout=30)
        with open(ready) as f:
            o = json.load(f)
        writer.start()
        # bounded: the box holds the file open until <done> appears; with
        # a lease the open waits out the lease-break-time (45 s)
        opened_while_held = opened.wait(20)
    finally:
        open(done, "w").close()
        out, err = proc.communicate(timeout=90)
    writer.join(60)
    assert proc.returncode == 0, err
    for mark in SANITIZER_MARKS:
        assert mark not in err, err
    assert o["uid"] == (0 if user == "root" else 65534)
    assert o["setlease"] == "EACCES", o
    assert o.get("setlease_high", "EACCES") == "EACCES", o
    assert o["getlease"] == 2  # F_UNLCK
    assert o["fanotify_init"] == "EPERM", o
    assert opened_while_held
    assert opened.is_set()



def test_an_upload_the_command_wrote_before_it_exited_is_delivered(box, net, tmp_path):
    """A command that writes a request with a large body and exits without
    waiting for the answer: what it wrote is in the kernel's buffers and
    the relay's when it exits, and a TCP peer would still get all of it.
    The box's init ended the relay at the command's exit, cutting the
    connection to the gateway mid-body: the upstream got part of the body
    (found by the relay review)."""
    pol = box.policy(net.policy([api_rule(net)]))
    log = str(tmp_path / "decisions.jsonl")
    code = r"""
import hashlib, json, os, socket, sys
n = 16 * 1024 * 1024
body = bytes(range(256)) * (n // 256)
s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
url = sys.argv[1].encode()
s.sendall(b"PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n"
          b"Connection: close\r\n\r\n" % (url, url.split(b"/")[2], n))
s.sendall(body)
print(json.dumps({"sha": hashlib.sha256(body).hexdigest()}), flush=True)
os._exit(0)
"""
    p = box.run(["--policy", pol, "--log", log], None,
                cmd=[PY, "-c", code, net.url("/upload-then-exit")], timeout=60)
    assert p.returncode == 0, p.stderr
    sha = Box.out(p)["sha"]
    put = [r for r in net.api.requests if r.path == "/upload-then-exit"]
    assert len(put) == 1, (net.api.requests, p.stderr)
    assert len(put[0].body) == 16 * 1024 * 1024
    assert hashlib.sha256(put[0].body).hexdigest() == sha
    with open(log) as f:
        ends = [json.loads(ln) for ln in f if '"agent_egress_end"' in ln]
    assert [e["bytes_up"] for e in ends] == [16 * 1024 * 1024], ends


def test_no_signalfd_for_the_box_starts_no_command(box, net, tmp_path):
    """When run could not make the signalfd it passes signals on with
    (signalfd() failing: out of descriptors or memory), it had spawned the
    box already: it killed it, left it uncollected, and said 'cannot build
    the box: signalfd: ...', though the box was built and the command may
    have run. run now makes that signalfd before it spawns the box: failing,
    it says so, no box is spawned and the command does not run (exit 2).
    The test-only SLUICE_TEST_RUN_SIGNALFD_FAIL=1 makes that signalfd()
    fail as with EMFILE."""
    pol = box.policy(net.policy([]))
    marker = str(tmp_path / "ran")
    p = box.run(["--policy", pol, "--rw", str(tmp_path)], "open(%r, 'w').close()" % marker,
                env={"SLUICE_TEST_RUN_SIGNALFD_FAIL": "1"})
    assert p.returncode == 2, p.stderr
    assert not os.path.exists(marker), "the command ran"
    assert "cannot build the box" not in p.stderr, p.stderr
    assert p.stderr.strip().endswith(
        "sluice run: cannot watch for the signals to pass on to the command (signalfd: Too many "
        "open files); the command does not start"), p.stderr


def test_connections_the_gateway_closed_do_not_hold_the_relay(box, net):
    """A command that keeps the connections the gateway answered and
    closed (Connection: close) open after reading their end, as a client's
    pool does until it next looks at them, and opens more than the relay's
    256 at once: every request is answered. The relay kept a slot for each
    such connection for as long as the command kept its end, so the 257th
    and later waited in its listen queue for ever (found by the relay
    review)."""
    pol = box.policy(net.policy([api_rule(net)]))
    code = r"""
import json, socket, sys
url = sys.argv[1]
host = url.split("/")[2]
conns = [socket.create_connection(("127.0.0.1", 3128), timeout=10) for _ in range(300)]
for s in conns:
    s.sendall(b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
              % (url.encode(), host.encode()))
out = {"ok": 0, "failed": []}
for i, s in enumerate(conns):
    try:
        got = b""
        while True:
            k = s.recv(65536)
            if not k:
                break
            got += k
        if got.startswith(b"HTTP/1.1 200"):
            out["ok"] += 1
        else:
            out["failed"].append([i, got[:40].decode(errors="replace")])
    except OSError as e:
        out["failed"].append([i, str(e)])
    if len(out["failed"]) >= 3:
        break
print(json.dumps(out))
"""
    p = box.run(["--policy", pol], None, cmd=[PY, "-c", code, net.url("/pooled")], timeout=120)
    assert p.returncode == 0, p.stderr
    o = Box.out(p)
    assert o == {"ok": 300, "failed": []}, o
