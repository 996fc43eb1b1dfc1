#!/usr/bin/env python3
"""bench/request_instructions.py: instructions per plain-HTTP request, shaped.

A count, not a timing, so that it means the same on a loaded machine. Starts
`sluice serve` under `valgrind --tool=callgrind` on loopback with
bench/shape.py's policy: generous buckets that never run dry (limits.rate
and the rule's rate, a million requests a second and 10 GiB/s), so that
each request goes through the quota table four times (the agent's and the
rule's request buckets, then their bandwidth buckets for its flow). One
client connection sends keep-alive absolute-form GETs to a keep-alive
upstream on 127.0.0.1 that answers "ok". After WARM requests the counters
are zeroed (`callgrind_control -z`); after REQUESTS more they are dumped
(`-d`), and the script prints the dump's instructions (Ir) over REQUESTS.

  bench/request_instructions.py [SLUICE_BIN]   default: $SLUICE_BIN, else build/sluice
  env: BENCH_REQUESTS (5000), BENCH_WARM (1000), BENCH_UNSHAPED=1 (no rate at all),
       BENCH_DUMP=FILE (keeps the dump there, for callgrind_annotate)

Needs a release build (make build) and valgrind. Only 127.0.0.1 is used;
every wait is bounded (the gateway's start 60 s, each response 30 s).
"""

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shape import REPO, Upstream, free_port, policy, read_response  # noqa: E402

REQUESTS = int(os.environ.get("BENCH_REQUESTS", "5000"))
WARM = int(os.environ.get("BENCH_WARM", "1000"))
UNSHAPED = os.environ.get("BENCH_UNSHAPED", "") == "1"
NO_PORT = 9  # the policy's tunnel rule, never used here


def fail(msg):
    raise SystemExit("bench/request_instructions.py: " + msg)


def drive(s, req, n):
    buf = b""
    for _ in range(n):
        s.sendall(req)
        status, buf = read_response(s, buf)
        if status != b"200":
            fail("got %r" % status)


def callgrind_control(pid, flag, workdir):
    r = subprocess.run(["callgrind_control", flag, str(pid)], cwd=workdir, timeout=60,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        fail("callgrind_control %s: %s" % (flag, r.stdout.decode(errors="replace")))


def dump_total(path):
    with open(path) as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    fail("no total in " + path)


def connect(port, proc):
    deadline = time.monotonic() + 60
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=30)
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                fail("sluice serve did not start")
            time.sleep(0.2)


def measure(binary, up, workdir):
    path = os.path.join(workdir, "policy.yaml")
    with open(path, "w") as f:
        f.write(policy(up.port, NO_PORT, not UNSHAPED))
    port = free_port()
    out = os.path.join(workdir, "callgrind.out")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--dump-instr=no", "--callgrind-out-file=" + out,
         binary, "serve", "--policy", path, "--listen", "127.0.0.1:%d" % port,
         "--log", os.devnull, "--sched", "normal", "--nice", "0"],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        req = ("GET http://api.bench.test:%d/ HTTP/1.1\r\nHost: api.bench.test:%d\r\n\r\n"
               % (up.port, up.port)).encode()
        with connect(port, proc) as s:
            drive(s, req, WARM)
            callgrind_control(proc.pid, "-z", workdir)
            drive(s, req, REQUESTS)
            callgrind_control(proc.pid, "-d", workdir)
        dumps = glob.glob(out + ".*")
        if len(dumps) != 1:
            fail("expected one dump, found %d" % len(dumps))
        if os.environ.get("BENCH_DUMP"):
            shutil.copyfile(dumps[0], os.environ["BENCH_DUMP"])
        return dump_total(dumps[0])
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "SLUICE_BIN", os.path.join(REPO, "build", "sluice"))
    if not os.access(binary, os.X_OK):
        fail("%s is not built (make build)" % binary)
    if not 1 <= REQUESTS <= 100000 or not 0 <= WARM <= 100000:
        fail("BENCH_REQUESTS 1..100000, BENCH_WARM 0..100000")
    up = Upstream("keep")
    with tempfile.TemporaryDirectory(prefix="sluice-reqins.") as workdir:
        total = measure(binary, up, workdir)
    print("%s: %d requests, %d instructions, %.0f a request"
          % ("unshaped" if UNSHAPED else "shaped", REQUESTS, total, total / REQUESTS))


if __name__ == "__main__":
    main()
