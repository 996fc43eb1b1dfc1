#!/usr/bin/env python3
"""bench/shape.py: what shaping costs on the fast path, as ratios.

Starts `sluice serve` twice on loopback, once with no rate at all and once
with generous buckets that never run dry (limits.rate and a rule rate of a
million requests a second and 10 GiB/s), against the same loopback
upstreams, and measures alternately:

  - requests/s: CLIENTS keep-alive connections sending GETs through the
    gateway to a minimal upstream, for SECONDS each round;
  - tunnel throughput: one CONNECT tunnel streaming into a discarding
    upstream, for SECONDS each round.

Prints the medians of ROUNDS rounds and the ratio shaped/unshaped (1.00
means free). Only 127.0.0.1 is used; the whole run is bounded (about
2 * ROUNDS * (2 * SECONDS + 1) s).

  bench/shape.py [SLUICE_BIN]    default: $SLUICE_BIN, else build/sluice
  env: BENCH_SECONDS (2), BENCH_ROUNDS (3), BENCH_CLIENTS (4)
"""

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

SECONDS = float(os.environ.get("BENCH_SECONDS", "2"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "4"))
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# No "Connection: close": the gateway keeps the client connection (it always
# opens one upstream connection per request, and this upstream closes it).
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Upstream:
    """HTTP: reads a head, answers RESPONSE, closes. Keep: the same for
    every head on the connection, kept. Sink: discards."""

    def __init__(self, kind):
        self.kind = kind
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.received = 0
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
            try:
                buf = b""
                while self.kind in ("http", "keep"):
                    while b"\r\n\r\n" not in buf:
                        d = c.recv(4096)
                        if not d:
                            return
                        buf += d
                    buf = buf.split(b"\r\n\r\n", 1)[1]  # GETs: no body
                    c.sendall(RESPONSE)
                    if self.kind == "http":
                        return
                while True:
                    d = c.recv(1 << 20)
                    if not d:
                        return
                    self.received += len(d)
            except OSError:
                return


def policy(http_port, sink_port, shaped):
    rate = "    rate: {requests: 1000000, per: 1s, bandwidth: 10GiB/s}\n" if shaped else ""
    limits = ("limits:\n  rate: {requests: 1000000, per: 1s, bandwidth: 10GiB/s}\n"
              if shaped else "")
    return ("version: 1\nrules:\n"
            "  - host: api.bench.test\n    ports: [%d]\n    tier: 0\n%s"
            "  - host: sink.bench.test\n    ports: [%d]\n    tier: 0\n%s"
            "network:\n  allow_ranges: [127.0.0.0/8]\n"
            "dns:\n  servers: [127.0.0.1:9]\n"
            "  static: {api.bench.test: 127.0.0.1, sink.bench.test: 127.0.0.1}\n%s"
            % (http_port, rate, sink_port, rate, limits))


class Gateway:
    def __init__(self, binary, text, workdir):
        self.port = free_port()
        path = os.path.join(workdir, "policy-%d.yaml" % self.port)
        with open(path, "w") as f:
            f.write(text)
        self.proc = subprocess.Popen(
            [binary, "serve", "--policy", path, "--listen", "127.0.0.1:%d" % self.port,
             "--log", os.devnull], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise SystemExit("bench/shape.py: sluice serve did not start")
                time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def read_response(s, buf):
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise ConnectionError("closed")
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    n = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    while len(rest) < n:
        d = s.recv(65536)
        if not d:
            raise ConnectionError("closed")
        rest += d
    return head.split(b" ", 2)[1], rest[n:]


def requests_per_second(gw, http_port):
    req = ("GET http://api.bench.test:%d/ HTTP/1.1\r\nHost: api.bench.test:%d\r\n\r\n"
           % (http_port, http_port)).encode()
    counts = [0] * CLIENTS
    stop = time.monotonic() + SECONDS

    def client(i):
        s, buf = None, b""
        while time.monotonic() < stop:
            if s is None:
                s, buf = socket.create_connection(("127.0.0.1", gw.port)), b""
            try:
                s.sendall(req)
                status, buf = read_response(s, buf)
            except OSError:
                s.close()
                s = None
                continue
            if status != b"200":
                raise SystemExit("bench/shape.py: got %r" % status)
            counts[i] += 1
        if s is not None:
            s.close()

    ts = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


def tunnel_mib_per_second(gw, sink):
    s = socket.create_connection(("127.0.0.1", gw.port))
    s.sendall(("CONNECT sink.bench.test:%d HTTP/1.1\r\nHost: sink.bench.test:%d\r\n\r\n"
               % (sink.port, sink.port)).encode())
    status, _ = read_response(s, b"")
    if status != b"200":
        raise SystemExit("bench/shape.py: CONNECT got %r" % status)
    # not b"Z" * N: first bytes that are one long token would be waited for
    # as the start of an HTTP request (gate/peek_http.h) and refused
    chunk = b"\x00" + b"\x5a" * ((1 << 20) - 1)
    before = sink.received
    t0 = time.monotonic()
    while time.monotonic() - t0 < SECONDS:
        s.sendall(chunk)
    s.shutdown(socket.SHUT_WR)
    s.settimeout(10)
    try:
        s.recv(1)
    except OSError:
        pass
    s.close()
    return (sink.received - before) / (time.monotonic() - t0) / (1 << 20)


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "SLUICE_BIN", os.path.join(REPO, "build", "sluice"))
    if not os.access(binary, os.X_OK):
        raise SystemExit("bench/shape.py: %s is not built" % binary)
    http_up, sink = Upstream("http"), Upstream("sink")
    results = {False: {"rps": [], "tun": []}, True: {"rps": [], "tun": []}}
    with tempfile.TemporaryDirectory() as wd:
        gws = {s: Gateway(binary, policy(http_up.port, sink.port, s), wd) for s in (False, True)}
        try:
            for _ in range(ROUNDS):
                for shaped in (False, True):  # alternate, so drift hits both alike
                    results[shaped]["rps"].append(requests_per_second(gws[shaped], http_up.port))
                    results[shaped]["tun"].append(tunnel_mib_per_second(gws[shaped], sink))
        finally:
            for g in gws.values():
                g.stop()
    med = {s: {k: statistics.median(v) for k, v in r.items()} for s, r in results.items()}
    print("shaping on the fast path (%s, %d rounds of %.0f s, %d clients; medians)"
          % (os.path.relpath(binary, REPO), ROUNDS, SECONDS, CLIENTS))
    print("  requests/s        unshaped %9.0f   generous buckets %9.0f   ratio %.2f"
          % (med[False]["rps"], med[True]["rps"], med[True]["rps"] / med[False]["rps"]))
    print("  tunnel MiB/s      unshaped %9.1f   generous buckets %9.1f   ratio %.2f"
          % (med[False]["tun"], med[True]["tun"], med[True]["tun"] / med[False]["tun"]))


if __name__ == "__main__":
    main()
