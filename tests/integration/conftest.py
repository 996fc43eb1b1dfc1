"""Fixtures for the integration tests: the sluice binary, loopback upstreams
(HTTP, TLS, server-speaks-first, a fake DNS server) and a factory that
starts `sluice serve` on an ephemeral loopback port.

Only loopback addresses (127.0.0.0/8, ::1) are ever contacted. Every policy
built here maps the test names with dns.static and points dns.servers at
the fake loopback DNS server, so the host's resolver is never asked.
"""

import collections
import json
import os
import re
import shlex
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gate_client import EGRESS_KEYS, END_KEYS, poll  # noqa: E402
from gate_servers import (BannerServer, FakeDNS, RefusedPort, UpstreamHTTP,  # noqa: E402
                          UpstreamTLS, free_port)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# A hang guard for a gateway's start: an ordinary start took 5 s of the
# 10 this was, under seven other test runs on 2 cores (sanitized binary).
START_TIMEOUT = 30.0
# Gateways started on a port the fixture picked: how many ports are tried
# when another process took the one picked (gateway fixture).
PORT_TRIES = 5
# "has encountered a fatal error": the leak check itself could not run (under
# ptrace, or a seccomp filter that refuses it), so leaks would go unseen.
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "SUMMARY: UndefinedBehaviorSanitizer",
                   "LeakSanitizer has encountered a fatal error")
# A sanitized sluice that hits a report exits 1 by default, which is also its
# own "problems found" status, so a test expecting 1 would pass over the
# report. Every process the tests start exits with this status instead.
SANITIZER_EXIT = 86
for _var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
    _opts = os.environ.get(_var, "")
    if "exitcode=" not in _opts:
        os.environ[_var] = (_opts + ":" if _opts else "") + "exitcode=%d" % SANITIZER_EXIT


# The tests send SIGHUP, SIGINT and SIGQUIT to the processes they start and
# expect their default action (sluice run passes them on, or stops its start
# of them). One ignored when pytest started (nohup's SIGHUP; SIGINT and
# SIGQUIT in a background job of a shell without job control, as a script's
# `make test &` is) stays ignored across exec(), and sluice run keeps it so
# for its command, as a shell does (SPEC.md, Signals): those tests failed.
# A handler that does nothing leaves pytest as deaf to it as before, and
# exec() puts the default back for every process started from here.
def _ignored_until_exec(signum, frame):
    pass


for _sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, _ignored_until_exec)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "serial: changes something the whole machine shares (a sysctl); "
        "`make test` runs these alone, after the rest has run in parallel workers")


# --------------------------------------------------------------------------
# the binary

@pytest.fixture(scope="session")
def sluice_bin():
    """Absolute path of the sluice binary: $SLUICE_BIN, default build/sluice.
    A missing binary fails every test that needs it (nothing is skipped)."""
    path = os.path.abspath(os.environ.get("SLUICE_BIN") or os.path.join(REPO, "build", "sluice"))
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail("sluice binary not found or not executable: %s (set SLUICE_BIN or build it)"
                    % path, pytrace=False)
    return path


# --------------------------------------------------------------------------
# the loopback world

API_IP = "127.0.0.2"
OTHER_IP = "127.0.0.3"
TLS_IP = "127.0.0.4"
BANNER_IP = "127.0.0.5"
DEAD_IP = "127.0.0.6"
DNS_IP = "127.0.0.9"

STATIC = {
    "api.example.test": API_IP,
    "other.example.test": OTHER_IP,
    "tls.example.test": TLS_IP,
    "banner.example.test": BANNER_IP,
    "dead.example.test": DEAD_IP,
}


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory):
    """A self-signed P-256 cert for tls.example.test (and the other test
    names), generated with openssl at session start. Returns (cert, key)."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = str(d / "cert.pem"), str(d / "key.pem")
    san = "subjectAltName=DNS:tls.example.test,DNS:api.example.test,DNS:other.example.test"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                    "-subj", "/CN=tls.example.test", "-addext", san,
                    "-keyout", key, "-out", cert],
                   check=True, capture_output=True, timeout=30)
    return cert, key


class Net:
    """The session's upstreams and the policy builder that points at them."""

    def __init__(self, cert, key):
        self.cert, self.key = cert, key
        self.api = UpstreamHTTP(API_IP, "api")
        self.other = UpstreamHTTP(OTHER_IP, "other")
        self.tls = UpstreamTLS(TLS_IP, cert, key)
        self.banner = BannerServer(BANNER_IP)
        self.dns = FakeDNS(DNS_IP, {"dyn.example.test": API_IP})
        # held for the Net's life: refused on every address (DEAD_IP's, and
        # the api upstream's in test_gate_own_date), never bound by another
        self.dead = RefusedPort("0.0.0.0")
        self.dead_port = self.dead.port
        self.closed_udp = RefusedPort("127.0.0.1", kind=socket.SOCK_DGRAM)
        self.closed_udp_port = self.closed_udp.port
        self.vars = {
            "api_port": self.api.port, "other_port": self.other.port,
            "tls_port": self.tls.port, "banner_port": self.banner.port,
            "dead_port": self.dead_port, "dns_server": "%s:%d" % (DNS_IP, self.dns.port),
        }

    def clear(self):
        for s in (self.api, self.other, self.tls, self.banner, self.dns):
            s.clear()

    def stop(self):
        for s in (self.api, self.other, self.tls, self.banner, self.dns):
            s.stop()
        self.dead.close()
        self.closed_udp.close()

    def url(self, path="/", host="api.example.test", port=None):
        port = self.api.port if port is None else port
        return "http://%s:%d%s" % (host, port, path)

    def policy(self, rules=(), *, deny=None, agents=None, allow_ranges=("127.0.0.0/8",),
               static=None, static_extra=None, dns_servers=None, limits=None, alerts=None,
               deny_ranges=None):
        """A policy dict in SPEC.md's format; dns.static maps the test names,
        dns.servers is the fake loopback DNS server."""
        p = {"version": 1}
        if agents is not None:
            p["agents"] = list(agents)
        p["rules"] = list(rules)
        if deny is not None:
            p["deny"] = list(deny)
        net = {}
        if deny_ranges is not None:
            net["deny_ranges"] = deny_ranges
        net["allow_ranges"] = list(allow_ranges)
        p["network"] = net
        st = dict(STATIC if static is None else static)
        st.update(static_extra or {})
        servers = [self.vars["dns_server"]] if dns_servers is None else list(dns_servers)
        p["dns"] = {"servers": servers, "static": st}
        if limits is not None:
            p["limits"] = limits
        if alerts is not None:
            p["alerts"] = alerts
        return p


@pytest.fixture(scope="session")
def _net_session(tls_cert):
    n = Net(*tls_cert)
    yield n
    n.stop()


@pytest.fixture
def net(_net_session):
    """The loopback upstreams, with their records cleared for this test."""
    _net_session.clear()
    return _net_session


@pytest.fixture
def refused_port():
    """Factory: refused_port(ip="127.0.0.1", port=0, kind=SOCK_STREAM), a
    RefusedPort held until the test ends: where a test needs nothing to
    listen (a webhook that cannot deliver), a port free_port() picked is
    not enough, another server may bind it meanwhile."""
    held = []

    def hold(ip="127.0.0.1", port=0, kind=socket.SOCK_STREAM):
        r = RefusedPort(ip, port, kind)
        held.append(r)
        return r
    yield hold
    for r in held:
        r.close()


# --------------------------------------------------------------------------
# policy YAML

_PLAIN = re.compile(r"^[A-Za-z0-9_./-]+$")


def _scalar(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    s = str(v)
    if _PLAIN.match(s) and not s.endswith(":") and s not in ("null", "true", "false", "~"):
        return s
    return json.dumps(s)


def _is_scalar(v):
    return not isinstance(v, (dict, list, tuple))


def _emit(obj, indent, out):
    pad = " " * indent
    for k, v in obj.items():
        if _is_scalar(v):
            out.append("%s%s: %s" % (pad, k, _scalar(v)))
        elif isinstance(v, dict):
            if not v:
                out.append("%s%s: {}" % (pad, k))
            elif all(_is_scalar(x) for x in v.values()):
                out.append("%s%s:" % (pad, k))
                for kk, vv in v.items():
                    out.append("%s  %s: %s" % (pad, _scalar(kk), _scalar(vv)))
            else:
                out.append("%s%s:" % (pad, k))
                _emit(v, indent + 2, out)
        else:
            v = list(v)
            if all(_is_scalar(x) for x in v):
                out.append("%s%s: [%s]" % (pad, k, ", ".join(_scalar(x) for x in v)))
            else:
                out.append("%s%s:" % (pad, k))
                for item in v:
                    if _is_scalar(item):
                        out.append("%s  - %s" % (pad, _scalar(item)))
                        continue
                    sub = []
                    _emit(item, indent + 4, sub)
                    sub[0] = "%s  - %s" % (pad, sub[0][indent + 4:])
                    out.extend(sub)


def policy_yaml(p):
    """YAML text for a policy dict (block style, flow lists of scalars)."""
    out = []
    _emit(p, 0, out)
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------
# the gateway

def socket_inodes(pid):
    """The inodes (as /proc/net lists them) of the sockets <pid> holds."""
    inodes = set()
    for n in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, n))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


# /proc/net/tcp's st column (include/net/tcp_states.h)
TCP_SYN_SENT, TCP_FIN_WAIT1, TCP_FIN_WAIT2, TCP_CLOSE_WAIT, TCP_LISTEN = "02", "04", "05", "08", "0A"


TcpSocket = collections.namedtuple("TcpSocket", "port remote_port state unread inode unacked")


def tcp_sockets(pid):
    """A TcpSocket (local port, remote port, state, bytes received and not
    read yet, inode, bytes sent and not acknowledged yet) for each TCP
    socket of <pid>'s network namespace (its /proc/net/tcp and tcp6)."""
    out = []
    for name in ("tcp", "tcp6"):
        with open("/proc/%d/net/%s" % (pid, name)) as f:
            for row in f.read().splitlines()[1:]:
                col = row.split()  # sl, local address, remote, st, tx_queue:rx_queue, ..., inode
                out.append(TcpSocket(int(col[1].rsplit(":", 1)[1], 16),
                                     int(col[2].rsplit(":", 1)[1], 16), col[3],
                                     int(col[4].split(":")[1], 16), col[9],
                                     int(col[4].split(":")[0], 16)))
    return out


def unix_peer_inode(sock):
    """The inode of the socket at the other end of the connected unix
    socket <sock>, as sock_diag tells it (`ss -x`; /proc/net/unix has no
    peers): the server's end exists from the connect on, accepted or not."""
    mine = str(os.fstat(sock.fileno()).st_ino)
    out = subprocess.run(["ss", "-xaH"], capture_output=True, text=True, timeout=10).stdout
    for row in out.splitlines():
        col = row.split()  # Netid State Recv-Q Send-Q Local Port(inode) Peer Port(inode)
        if len(col) >= 8 and col[5] == mine:
            return col[7]
    raise AssertionError("ss -x does not show the unix socket %s" % mine)


def unix_accepted(pid, path):
    """The inodes of the accepted connections on the unix listener <path>
    in <pid>'s network namespace (an accepted socket shows its listener's
    path in /proc/net/unix; the listener itself is left out)."""
    out = set()
    with open("/proc/%d/net/unix" % pid) as f:
        for row in f.read().splitlines()[1:]:
            col = row.split()  # ..., flags (00010000: listening), type, state, inode, path
            if len(col) >= 8 and col[7] == path and col[3] != "00010000":
                out.add(col[6])
    return out


# /proc/net/tcp states (include/net/tcp_states.h) in which the server's end
# of a connection is still open: established (served, or still in the accept
# queue), half-open, or ended by the peer alone
TCP_OPEN_AT_SERVER = ("01", "03", "08")  # ESTABLISHED, SYN_RECV, CLOSE_WAIT


def server_connections(ip, port):
    """How many connections to the IPv4 listener <ip>:<port> of this
    process's network namespace its server has not closed yet (read from
    /proc/self/net/tcp): 0 once it took, served and closed every one."""
    local = "%s:%04X" % (socket.inet_aton(ip)[::-1].hex().upper(), port)
    with open("/proc/self/net/tcp") as f:
        rows = [row.split() for row in f.read().splitlines()[1:]]
    return sum(1 for col in rows if col[1] == local and col[3] in TCP_OPEN_AT_SERVER)


def wait_served(server, timeout=10.0):
    """Waits until the loopback <server> (an upstream with .ip and .port)
    has closed every connection made to it: then what it records (SNI
    names, handshakes, requests) is all in, and a "nothing reached it"
    holds for good once the gateway decided. Counted by the kernel, not
    guessed: a connection still in the accept queue counts."""
    poll(lambda: server_connections(server.ip, server.port) == 0, timeout=timeout,
         what="the upstream %s:%d to close its connections" % (server.ip, server.port))


EPOLLIN = 0x1  # include/uapi/linux/eventpoll.h
EPOLLOUT = 0x4


def epoll_interest(pid):
    """{fd: events} for every descriptor an epoll instance of <pid> waits
    on (the "tfd: FD events: MASK" lines of its /proc/PID/fdinfo), the
    masks of several instances or'ed."""
    out = {}
    for n in os.listdir("/proc/%d/fdinfo" % pid):
        try:
            with open("/proc/%d/fdinfo/%s" % (pid, n)) as f:
                text = f.read()
        except OSError:
            continue  # closed meanwhile
        for ln in text.splitlines():
            col = ln.split()
            if len(col) >= 4 and col[0] == "tfd:" and col[2] == "events:":
                out[int(col[1])] = out.get(int(col[1]), 0) | int(col[3], 16)
    return out


def wait_in_epoll(pid, timeout=5.0):
    """Waits (bounded) until the main thread of <pid> sleeps in epoll_wait:
    stopped there, it comes back from the call without the events that came
    meanwhile (EINTR after SIGCONT), and its loop looks at its timers before
    it polls again. A kernel that shows no wait channel ("0") is not waited
    on."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with open("/proc/%d/wchan" % pid) as f:
            chan = f.read().strip()
        if "epoll" in chan or chan in ("", "0"):
            return
        time.sleep(0.005)


SocketEnd = collections.namedtuple("SocketEnd", "fd inode")


class Gateway:
    def __init__(self, bin_path, workdir, policy_text, listen, env, args, netns, port, unix_path,
                 netns_helper=None, prefix=(), resolv_conf=None):
        self.workdir = workdir
        self.policy_path = os.path.join(workdir, "policy.yaml")
        self.log_path = os.path.join(workdir, "log.jsonl")
        self.stderr_path = os.path.join(workdir, "stderr.txt")
        self.stdout_path = os.path.join(workdir, "stdout.txt")
        self.port = port
        self.host = "127.0.0.1"
        self.unix_path = unix_path
        self.url = "http://127.0.0.1:%d" % port if port else None
        self.write_policy(policy_text)
        cmd = [bin_path, "serve", "--policy", self.policy_path]
        for a in listen:
            cmd += ["--listen", a]
        args = list(args)
        if "--log" in args:  # the test's own log (a flag that takes one value is given once)
            self.log_path = args[args.index("--log") + 1]
        else:
            args = ["--log", self.log_path] + args
        cmd = list(prefix) + cmd + args
        if netns:
            # an empty network namespace (loopback only, no route), entered as
            # an unprivileged user so that serve does not try to drop root;
            # <netns_helper> (argv) runs beside it, as that namespace's root;
            # <resolv_conf> (a file) is bound over /etc/resolv.conf in a mount
            # namespace of its own, for the resolvers that read it
            helper = ""
            if netns_helper:
                helper = "%s 2>%s & " % (" ".join(shlex.quote(a) for a in netns_helper),
                                         shlex.quote(os.path.join(workdir, "helper.err")))
            unshare = ["unshare", "--user", "--map-root-user", "--net"]
            if resolv_conf:
                unshare.append("--mount")
                helper = "mount --bind %s /etc/resolv.conf || exit 1; %s" % (
                    shlex.quote(resolv_conf), helper)
            cmd = unshare + ["sh", "-c",
                             'ip link set lo up || exit 1; %sexec unshare --user "$@"' % helper,
                             "sh"] + cmd
        self.cmd = cmd
        full_env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        full_env.update(env or {})
        full_env = {k: v for k, v in full_env.items() if v is not None}  # None: unset
        self._err = open(self.stderr_path, "wb")
        self._out = open(self.stdout_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._out,
                                     stderr=self._err, env=full_env, cwd=workdir)
        self.returncode = None

    # -- process
    def write_policy(self, text):
        tmp = self.policy_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.policy_path)

    def wait_ready(self, timeout=START_TIMEOUT):
        """Waits until the gateway accepts and has said "sluice: serving":
        the kernel accepts on the first listener as soon as it listens, before
        the others (a second --listen), the signal handlers and the reload
        pipe exist."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("sluice serve exited with %d before listening; stderr:\n%s"
                                     % (self.proc.returncode, self.stderr()))
            try:
                if self.port:
                    s = socket.create_connection((self.host, self.port), timeout=0.5)
                else:
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.settimeout(0.5)
                    s.connect(self.unix_path)
                s.close()
                if "sluice: serving " in self.stderr():
                    return
                time.sleep(0.02)
            except OSError:
                time.sleep(0.02)
        raise AssertionError("sluice serve did not accept within %.0fs; stderr:\n%s"
                             % (timeout, self.stderr()))

    def wait_exit(self, timeout=10.0):
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("sluice did not exit within %.0fs; stderr:\n%s"
                                 % (timeout, self.stderr()))
        return self.returncode

    def reload(self):
        self.proc.send_signal(signal.SIGHUP)

    def stop(self, timeout=15.0, expect=0):
        """SIGTERM; waits; asserts the exit status (0 by default)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.wait_exit(timeout)
        if expect is not None:
            assert rc == expect, "sluice exited %d, expected %d; stderr:\n%s" % (
                rc, expect, self.stderr())
        return rc

    def kill(self):
        """Stops the gateway if it still runs: SIGTERM, then SIGKILL after
        15 s. Returns what went wrong with a stop it made (a stop that is
        not an exit 0 within the default --grace, 5 s, plus the 1 s of the
        sinks and 2 s of each log SPEC.md allows, with margin, is a defect),
        else None."""
        problem = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(15)
                if rc != 0:
                    problem = "sluice exited %d on SIGTERM at teardown" % rc
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                problem = "sluice did not exit within 15 s of SIGTERM at teardown (killed)"
        self._err.close()
        self._out.close()
        return problem

    def stderr(self):
        """Standard error as the file holds it now. While serve runs, its
        messages reach the file through the relay's thread
        (util/stderr_relay.h), a moment after it wrote them: after /healthz,
        the log or a client's answer can show the event told. Read at once
        only what came before "sluice: serving" (wait_ready() saw it), or
        after the process was waited for; else wait_stderr()."""
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_stderr(self, told, count=1, timeout=10.0):
        """Waits until standard error holds <told> (a str, or a compiled
        regular expression) <count> times or more; returns standard error
        then. The relay copies one pipe in order: every line written before
        <told> is in what it returns (a line that is absent from it and
        would have come before <told> never came)."""
        def seen():
            err = self.stderr()
            n = len(told.findall(err)) if hasattr(told, "findall") else err.count(told)
            return err if n >= count else None
        shown = told.pattern if hasattr(told, "pattern") else told
        try:
            return poll(seen, timeout=timeout,
                        what="%r %d time(s) on standard error" % (shown, count))
        except AssertionError as e:
            raise AssertionError("%s; it holds (tail):\n%s" % (e, self.stderr()[-3000:])) from None

    def stdout(self):
        with open(self.stdout_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    # -- the decision log
    def log_lines(self):
        """Every complete line of the log, parsed (a malformed line fails)."""
        try:
            with open(self.log_path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        out = []
        for raw in data.split(b"\n")[:-1]:  # the last piece is partial or empty
            if not raw.strip():
                continue
            try:
                out.append(json.loads(raw.decode("utf-8")))
            except (ValueError, UnicodeDecodeError):
                raise AssertionError("malformed log line: %r" % raw[:300])
        return out

    def events(self, event="agent_egress", **match):
        return [e for e in self.log_lines()
                if e.get("event") == event and all(e.get(k) == v for k, v in match.items())]

    def wait_events(self, event="agent_egress", count=1, timeout=5.0, **match):
        return poll(lambda: (lambda evs: evs if len(evs) >= count else None)(
            self.events(event, **match)), timeout=timeout,
            what="%d %s event(s) matching %r in %s" % (count, event, match, self.log_path))

    def client_connections(self):
        """How many client connections the gateway holds open: its sockets
        whose local end is its listener's (the TCP port, or the unix path:
        an accepted unix socket shows its listener's path), the listeners
        aside. Read from /proc (of its network namespace), not guessed."""
        pid = self.proc.pid
        inodes = socket_inodes(pid)
        count = 0
        if self.port:
            count += sum(1 for t in tcp_sockets(pid)
                         if t.port == self.port and t.state != TCP_LISTEN and t.inode in inodes)
        if self.unix_path:
            count += len(unix_accepted(pid, self.unix_path) & inodes)
        return count

    def _end_now(self, inodes_of):
        """The SocketEnd of the one socket of the gateway's that
        <inodes_of>(its socket inodes) picks; None when it picks none or
        several, or the socket closed while it was looked for."""
        pid = self.proc.pid
        held = socket_inodes(pid)
        picked = inodes_of(held) & held
        if len(picked) != 1:
            return None
        inode = picked.pop()
        for n in os.listdir("/proc/%d/fd" % pid):
            try:
                if os.readlink("/proc/%d/fd/%s" % (pid, n)) == "socket:[%s]" % inode:
                    return SocketEnd(int(n), inode)
            except OSError:
                continue
        return None

    def _end(self, inodes_of, what, timeout):
        """The SocketEnd of the one socket of the gateway's that
        <inodes_of>(its socket inodes) picks, waited for."""
        return poll(lambda: self._end_now(inodes_of), timeout=timeout, what=what)

    def client_end(self, sock, timeout=10.0):
        """The gateway's end of the client connection <sock>: over TCP the
        socket whose peer is <sock>'s port; over the unix socket the peer of
        <sock>'s own socket, waited for until the gateway accepted it (it
        was "the one accepted connection the gateway holds": while <sock>
        still waited in the accept queue, that was the readiness probe's,
        about to close, and the test watched a closed socket for 30 s)."""
        if sock.family == socket.AF_UNIX:
            peer = unix_peer_inode(sock)
            return self._end(lambda _: {peer} & unix_accepted(self.proc.pid, self.unix_path),
                             "the gateway to hold the unix client connection %s" % peer,
                             timeout)
        mine = sock.getsockname()[1]
        return self._end(lambda _: {t.inode for t in tcp_sockets(self.proc.pid)
                                    if t.port == self.port and t.remote_port == mine},
                         "the gateway's end of the client connection from port %d" % mine,
                         timeout)

    def _upstream_inodes(self, port):
        return {t.inode for t in tcp_sockets(self.proc.pid)
                if t.remote_port == port and t.port != self.port}

    def upstream_end(self, port, timeout=10.0):
        """The gateway's end of its one connection to the upstream <port>."""
        return self._end(lambda _: self._upstream_inodes(port),
                         "the gateway's connection to port %d" % port, timeout)

    def upstream_end_now(self, port):
        """The gateway's end of its one connection to the upstream <port>,
        not waited for: None while it holds none (or several)."""
        return self._end_now(lambda _: self._upstream_inodes(port))

    def listener_end(self, timeout=10.0):
        """The SocketEnd of the gateway's TCP listener: its epoll interest
        says whether it accepts (a paused listener is waited on for nothing)."""
        return self._end(lambda _: {t.inode for t in tcp_sockets(self.proc.pid)
                                    if t.port == self.port and t.state == TCP_LISTEN},
                         "the gateway's listener on port %d" % self.port, timeout)

    def accept_queue(self):
        """How many connections the kernel completed on the gateway's TCP
        listener that the gateway has not accepted yet (a listening
        socket's rx_queue in /proc/net/tcp is its accept queue's length)."""
        return sum(t.unread for t in tcp_sockets(self.proc.pid)
                   if t.port == self.port and t.state == TCP_LISTEN)

    def interest(self, end):
        """The events the gateway's epoll waits for on the SocketEnd <end>
        (0 once the descriptor is closed, or is another file). libevent
        takes EPOLLIN off a socket (or the socket out of its epoll) when
        its reading is turned off: after an end or an error read
        (bufferevent_readcb()), or when the gateway stops reading; so for
        EPOLLOUT and its writes."""
        pid = self.proc.pid
        try:
            if os.readlink("/proc/%d/fd/%d" % (pid, end.fd)) != "socket:[%s]" % end.inode:
                return 0
        except OSError:
            return 0
        return epoll_interest(pid).get(end.fd, 0)

    def reads(self, end):
        """True while the gateway waits for input on the SocketEnd <end>."""
        return bool(self.interest(end) & EPOLLIN)

    def wait_unwatched(self, end, what, timeout=10.0):
        """Waits until the gateway waits for nothing on the SocketEnd <end>
        (its reads and writes turned off, or the socket closed)."""
        poll(lambda: self.interest(end) == 0, timeout=timeout, what=what)

    def wait_reading(self, end, reading=True, what=None, timeout=10.0):
        """Waits until the gateway reads the SocketEnd <end> (or, when not
        <reading>, no longer does: it took the end, error or bytes it waited
        for, and turned its reading off, or closed it)."""
        poll(lambda: self.reads(end) == reading, timeout=timeout,
             what=what or "the gateway to %s reading socket fd %d" % (
                 "be" if reading else "stop", end.fd))

    def wait_writing(self, end, what=None, timeout=10.0):
        """Waits until the gateway waits to write to the SocketEnd <end>: a
        send met its full socket, and what is left waits in the gateway."""
        poll(lambda: self.interest(end) & EPOLLOUT, timeout=timeout,
             what=what or "the gateway to wait for room in socket fd %d" % end.fd)

    def wait_connecting(self, timeout=10.0):
        """Waits until a connect() of the gateway is under way (a socket of
        its in SYN_SENT: an upstream that has not answered its SYN)."""
        def connecting():
            inodes = socket_inodes(self.proc.pid)
            return any(t.state == TCP_SYN_SENT and t.inode in inodes
                       for t in tcp_sockets(self.proc.pid))
        poll(connecting, timeout=timeout, what="the gateway's connect to be under way")

    def wait_taken(self, sock, closed_too=False, timeout=10.0):
        """Waits until the gateway has read all that <sock> (TCP, in the
        gateway's network namespace: a client's socket, or an upstream's
        end of a connection the gateway made) sent: all of it reached the
        gateway's end (acknowledged: on loopback a segment may still wait
        in the kernel's backlog after send() returned), which holds nothing
        unread (or, <closed_too>, that the gateway closed: an idle kept
        connection that sends anything is dropped). The gateway handles
        what one read brings before it reads again: bytes sent after this
        come to it on their own."""
        mine, theirs = sock.getsockname()[1], sock.getpeername()[1]

        def taken():
            rows = tcp_sockets(self.proc.pid)
            inodes = socket_inodes(self.proc.pid)
            ends = [t for t in rows
                    if t.port == theirs and t.remote_port == mine and t.inode in inodes]
            sent = [t for t in rows if t.port == mine and t.remote_port == theirs]
            if closed_too and not ends:
                return True
            return ends and ends[0].unread == 0 and sent and sent[0].unacked == 0
        poll(taken, timeout=timeout, what="the gateway to read what port %d sent" % mine)

    def wait_ended(self, sock, timeout=10.0):
        """Waits until the gateway has ended its side of the client
        connection <sock> (TCP, in the gateway's network namespace): a
        shutdown() or close() sent, or queued its FIN behind what its send
        queue holds (its end FIN_WAIT1 or FIN_WAIT2, held by the gateway
        or left to the kernel)."""
        mine = sock.getsockname()[1]
        poll(lambda: any(t.port == self.port and t.remote_port == mine and
                         t.state in (TCP_FIN_WAIT1, TCP_FIN_WAIT2)
                         for t in tcp_sockets(self.proc.pid)),
             timeout=timeout, what="the gateway to end its side of port %d's connection" % mine)

    def wait_held(self, sock, n, timeout=10.0):
        """Waits until the gateway holds off the client socket <sock> (TCP,
        in the gateway's network namespace): <n> bytes it sent wait unread
        in the gateway's end, and the gateway does not read it (a paused
        flow): a state read from the kernel, not guessed to have come."""
        mine = sock.getsockname()[1]
        end = self.client_end(sock, timeout)

        def held():
            ends = [t for t in tcp_sockets(self.proc.pid)
                    if t.port == self.port and t.remote_port == mine]
            return ends and ends[0].unread == n and not self.reads(end)
        poll(held, timeout=timeout,
             what="%d bytes from the client held unread, its reading paused" % n)

    def wait_paused(self, pending=None, timeout=10.0):
        """Waits until the gateway holds off a client connection (a
        bandwidth bucket that is empty, say): it does not read the
        connection's socket while the client's bytes are not all through,
        told by the kernel (bytes the client sent wait unread in the
        gateway's end) or, when given, by <pending>() (the caller's view of
        the other end: true while the origin has not had them all). The
        kernel alone does not tell it when the gateway's first read took
        the head and a small body together: they wait in the gateway's own
        buffer, the socket holds nothing, and an upload test waited in vain
        (2 of 6 runs under load)."""
        def paused():
            pid = self.proc.pid
            held = socket_inodes(pid)
            origin_short = pending is not None and pending()
            for t in tcp_sockets(pid):
                if (t.port == self.port and t.state != TCP_LISTEN and t.inode in held and
                        (t.unread > 0 or origin_short)):
                    end = self._end_now(lambda _, inode=t.inode: {inode})
                    if end is not None and not self.reads(end):
                        return True
            return False
        poll(paused, timeout=timeout, what="a client's bytes held back, its reading paused")

    def wait_no_clients(self, timeout=10.0):
        """Waits until the gateway holds no client connection (the
        readiness probe's, an earlier request's, closed by the gateway)."""
        poll(lambda: self.client_connections() == 0, timeout=timeout,
             what="the gateway's client connections to close")

    def decided(self, timeout=5.0, **match):
        """Waits for the agent_egress event matching <match> and its
        agent_egress_end; checks both key orders; returns (egress, end)."""
        ev = self.wait_events("agent_egress", timeout=timeout, **match)[-1]
        assert list(ev.keys()) == EGRESS_KEYS, "agent_egress keys: %r" % list(ev.keys())
        end = self.wait_events("agent_egress_end", timeout=timeout, id=ev["id"])
        assert len(end) == 1, "more than one agent_egress_end for %s: %r" % (ev["id"], end)
        assert list(end[0].keys()) == END_KEYS, "agent_egress_end keys: %r" % list(end[0].keys())
        return ev, end[0]


@pytest.fixture
def gateway(sluice_bin, net, tmp_path):
    """Factory: gateway(policy, ...) starts `sluice serve` and returns a
    started Gateway. <policy> is a dict (see Net.policy) or YAML text in
    which $api_port, $gw_port, ... are substituted. Every gateway is stopped
    (and killed if need be) at teardown, and its stderr checked for
    sanitizer reports."""
    started = []

    def start(policy, *, port=None, tcp=True, unix=False, extra_listen=(), env=None, args=(),
              netns=False, netns_helper=None, wait=True, prefix=(), resolv_conf=None,
              start_timeout=START_TIMEOUT):
        """<prefix>: argv that execs the gateway (["nice", "-n", "5"]);
        <resolv_conf>: with <netns>, a file the gateway reads as
        /etc/resolv.conf; <start_timeout>: how long it may take to serve (a
        policy of many rules takes its load's time first)."""
        if netns:
            tcp = False
            unix = True
        # A port picked here was free a moment ago: another worker may bind
        # it before the gateway does, which then exits with EADDRINUSE.
        # Tried again on another port, a few times, before it fails.
        for attempt in range(PORT_TRIES if tcp and not port and wait else 1):
            gw = start_on(policy, port=port, tcp=tcp, unix=unix, extra_listen=extra_listen,
                          env=env, args=args, netns=netns, netns_helper=netns_helper,
                          prefix=prefix, resolv_conf=resolv_conf, retry=attempt)
            if not wait:
                return gw
            try:
                gw.wait_ready(start_timeout)
                return gw
            except AssertionError:
                if (attempt + 1 == PORT_TRIES or gw.proc.poll() is None or
                        "Address already in use" not in gw.stderr()):
                    raise
                gw.kill()
                started.remove(gw)
                if gw.sockdir:
                    shutil.rmtree(gw.sockdir, ignore_errors=True)
        raise AssertionError("unreachable")

    def start_on(policy, *, port, tcp, unix, extra_listen, env, args, netns, netns_helper,
                 prefix, resolv_conf, retry):
        workdir = str(tmp_path / ("gw%d" % len(started) + ("-%d" % retry if retry else "")))
        os.makedirs(workdir, exist_ok=True)
        port = (port or free_port()) if tcp else None
        unix_path = None
        listen = []
        if tcp:
            listen.append("127.0.0.1:%d" % port)
        if unix:
            sockdir = tempfile.mkdtemp(prefix="slgw", dir="/tmp")
            unix_path = os.path.join(sockdir, "gw.sock")
            listen.append("unix:" + unix_path)
        listen += list(extra_listen)
        if isinstance(policy, dict):
            text = policy_yaml(policy)
        else:
            v = dict(net.vars)
            v["gw_port"] = port or 0
            text = string.Template(policy).safe_substitute(v)
        gw = Gateway(sluice_bin, workdir, text, listen, env, args, netns, port, unix_path,
                     netns_helper, prefix, resolv_conf)
        gw.sockdir = os.path.dirname(unix_path) if unix_path else None
        started.append(gw)
        return gw

    yield start
    problems = []
    for gw in started:
        stopped = gw.kill()
        err = gw.stderr()
        if stopped is not None:
            problems.append(stopped + "; stderr:\n" + err[-4000:])
        for mark in SANITIZER_MARKS:
            if mark in err:
                problems.append("sanitizer report in sluice stderr:\n" + err[-4000:])
                break
        if gw.sockdir:
            shutil.rmtree(gw.sockdir, ignore_errors=True)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def run_sluice(sluice_bin, tmp_path):
    """Runs sluice to completion with <args>; returns CompletedProcess (text)."""
    def run(*args, timeout=20, env=None):
        full_env = dict(os.environ)
        full_env.update(env or {})
        r = subprocess.run([sluice_bin] + [str(a) for a in args], capture_output=True,
                           text=True, timeout=timeout, cwd=str(tmp_path), env=full_env)
        for mark in SANITIZER_MARKS:
            if mark in r.stderr:
                pytest.fail("sanitizer report in the stderr of sluice %s (exit %d):\n%s"
                            % (" ".join(str(a) for a in args), r.returncode, r.stderr[-4000:]),
                            pytrace=False)
        return r
    return run
