#!/usr/bin/env python3
"""bench/alerts_latency.py: how fast alerts are written, and what the
detectors cost.

  bench/alerts_latency.py [SLUICE_BIN] [--alerts N] [--requests N]

1. Alert latency over N first_contact alerts (default 300): each request
   goes to a host never seen before (denied, so no upstream is involved) and
   raises one alert (from 25 hosts per agent, agent k being the client at
   127.0.1.k: past 30 in a minute an agent's first contacts fold into one
   summary line). Two figures, median and worst:
     - inside the gateway: the alert line's ts minus its decision event's ts;
     - end to end: from the client sending the request to the alert line
       being readable in the --alerts file (the client polls every 1 ms).
2. Cost of the detectors: requests/s through one keep-alive connection per
   worker (denied requests, so the gateway is the only thing measured) with
   no alerts section, then with every detector on and a state store, as a
   ratio (on / off). Bounded loops; loopback only.
"""

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def ts(s):
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


POLICY = """version: 1
rules:
  - host: api.example.test
    tier: 1
network:
  allow_ranges: [127.0.0.0/8]
dns:
  servers: [127.0.0.1:9]
  static: {api.example.test: 127.0.0.2}
"""

ALL_ON = """alerts:
  first_contact: true
  write_burst: {max: 1000000, per: 1m}
  upload_bytes: {max: 1GiB, per: 1m}
  denied_burst: {max: 1000000, per: 1m}
  off_hours: {tz: UTC, hours: "00:00-24:00", days: Mon-Sun}
  baseline: {factor: 1000, floor: 100000000, learn: 1h}
"""


class Gateway:
    def __init__(self, binary, policy_text, extra=()):
        self.dir = tempfile.mkdtemp(prefix="sluice-bench-")
        self.policy = os.path.join(self.dir, "policy.yaml")
        with open(self.policy, "w") as f:
            f.write(policy_text)
        self.port = free_port()
        self.alerts = os.path.join(self.dir, "alerts.jsonl")
        self.log = os.path.join(self.dir, "log.jsonl")
        self.proc = subprocess.Popen(
            [binary, "serve", "--policy", self.policy, "--listen", "127.0.0.1:%d" % self.port,
             "--log", self.log, "--alerts", self.alerts] + list(extra),
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "stderr"), "wb"))
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.01)
        raise SystemExit("sluice did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(15)
        subprocess.run(["rm", "-rf", self.dir])


def request_bytes(host):
    return ("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n" % (host, host)).encode()


def read_response(sock, buf):
    while b"\r\n\r\n" not in buf:
        d = sock.recv(65536)
        if not d:
            raise ConnectionError("closed")
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    n = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    while len(rest) < n:
        rest += sock.recv(65536)
    return rest[n:]


# An agent's first contacts past DETECT_CONTACTS_BURST (30) within a minute
# fold into one summary line, so each agent here makes at most this many:
# agent k is the client bound to 127.0.1.k.
PER_AGENT = 25


def agents_policy(count):
    lines = ["agents:"]
    for k in range((count + PER_AGENT - 1) // PER_AGENT):
        lines.append("  - {id: bench%d, sources: [127.0.1.%d/32]}" % (k, k))
    return "\n".join(lines) + "\n"


def latency(binary, count):
    gw = Gateway(binary, POLICY + agents_policy(count) + "alerts:\n  first_contact: true\n")
    inside, end_to_end = [], []
    s = None
    try:
        buf = b""
        f = None
        for i in range(count):
            if i % PER_AGENT == 0:
                if s is not None:
                    s.close()
                s = socket.create_connection(("127.0.0.1", gw.port),
                                             source_address=("127.0.1.%d" % (i // PER_AGENT), 0))
                buf = b""
            host = "h%d.bench.test" % i
            t0 = time.monotonic()
            s.sendall(request_bytes(host))
            deadline = t0 + 5
            line = None
            while line is None and time.monotonic() < deadline:
                if f is None and os.path.exists(gw.alerts):
                    f = open(gw.alerts, "rb")
                if f is not None:
                    pos = f.tell()
                    raw = f.readline()
                    if raw.endswith(b"\n"):
                        line = json.loads(raw)
                        continue
                    f.seek(pos)
                time.sleep(0.001)
            if line is None:
                raise SystemExit("no alert for %s within 5 s" % host)
            end_to_end.append(time.monotonic() - t0)
            buf = read_response(s, buf)
            inside.append(line)
        s.close()
        time.sleep(0.3)
        evs = {}
        with open(gw.log) as lf:
            for raw in lf:
                e = json.loads(raw)
                if e["event"] == "agent_egress":
                    evs[e["id"]] = ts(e["ts"])
        inside = [ts(a["ts"]) - evs[a["id"]] for a in inside]
    finally:
        gw.stop()
    return inside, end_to_end


def throughput(binary, policy_text, extra, seconds=3.0, workers=2):
    gw = Gateway(binary, policy_text, extra)
    counts = [0] * workers
    stop = time.monotonic() + seconds

    def work(k):
        s = socket.create_connection(("127.0.0.1", gw.port))
        buf = b""
        req = request_bytes("denied%d.bench.test" % k)
        while time.monotonic() < stop:
            s.sendall(req)
            buf = read_response(s, buf)
            counts[k] += 1
        s.close()

    try:
        ts_ = [threading.Thread(target=work, args=(k,)) for k in range(workers)]
        t0 = time.monotonic()
        for t in ts_:
            t.start()
        for t in ts_:
            t.join()
        rate = sum(counts) / (time.monotonic() - t0)
    finally:
        gw.stop()
    return rate


def ms(v):
    return "%.2f ms" % (v * 1000)


def main():
    args = sys.argv[1:]
    binary = os.path.join(REPO, "build", "sluice")
    n_alerts, rounds = 300, 3
    while args:
        a = args.pop(0)
        if a == "--alerts":
            n_alerts = max(10, min(int(args.pop(0)), 256 * PER_AGENT))
        elif a == "--rounds":
            rounds = max(1, min(int(args.pop(0)), 10))
        else:
            binary = a
    inside, e2e = latency(binary, n_alerts)
    print("alert latency over %d alerts: inside the gateway median %s, worst %s; "
          "end to end median %s, worst %s" % (
              n_alerts, ms(statistics.median(inside)), ms(max(inside)),
              ms(statistics.median(e2e)), ms(max(e2e))))
    offs, ons = [], []
    for _ in range(rounds):
        offs.append(throughput(binary, POLICY, []))
        state = tempfile.mkdtemp(prefix="sluice-bench-state-")
        ons.append(throughput(binary, POLICY + ALL_ON, ["--state", state]))
        subprocess.run(["rm", "-rf", state])
    off, on = statistics.median(offs), statistics.median(ons)
    print("detectors cost: %.0f req/s off, %.0f req/s on (every detector, state store): "
          "ratio on/off %.3f (median of %d rounds)" % (off, on, on / off, rounds))


if __name__ == "__main__":
    main()
