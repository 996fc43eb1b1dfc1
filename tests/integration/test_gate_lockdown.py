"""The gateway's own seccomp filter (gate/lockdown.h): once serving, every
thread of `sluice serve` is filtered, and so are the programs its exec
alert sinks run: namespaces, mounts, BPF and keyrings are refused, while
the gate, its reloads and its sinks keep working. Loopback only."""

import os
import subprocess

import pytest

from gate_client import api_rule, poll, request
from watch_helpers import wait_alert, write_script


def seccomp_modes(pid):
    """The Seccomp: field of every thread of <pid>."""
    modes = []
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
            modes += [ln.split()[1] for ln in f if ln.startswith("Seccomp:")]
    return modes


# Each line: what was tried, then its exit status (0 would be a hole).
PROBE = r"""#!/bin/sh
cat > /dev/null
{
  unshare --user --map-root-user true 2>/dev/null; echo "userns $?"
  unshare --net true 2>/dev/null; echo "netns $?"
  unshare --mount true 2>/dev/null; echo "mountns $?"
  /usr/bin/python3 -c 'import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
sys.exit(0 if libc.syscall(250, 0, -3, 0) >= 0 else ctypes.get_errno())'; echo "keyctl $?"
  true; echo "plain $?"
} > %(out)s/probe.tmp 2>&1
mv %(out)s/probe.tmp %(out)s/probe
"""


def test_serving_gateway_and_its_sinks_are_filtered(gateway, net, tmp_path):
    # control: outside the gateway, the same probe may make namespaces here
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    subprocess.run(["sh", write_script(str(tmp_path / "ctl.sh"), PROBE % {"out": ctl})],
                   stdin=subprocess.DEVNULL, timeout=20, check=True)
    control = dict(line.split() for line in (ctl / "probe").read_text().split("\n") if line.strip())
    if control["userns"] != "0" or control["netns"] != "0":
        pytest.skip("this machine refuses namespaces anyway: %r" % control)
    out = tmp_path / "out"
    out.mkdir()
    prog = write_script(str(tmp_path / "probe.sh"), PROBE % {"out": out})
    af = str(tmp_path / "alerts.jsonl")
    pol = net.policy([api_rule(net)], alerts={"first_contact": True, "sinks": [{"exec": prog}]})
    gw = gateway(pol, args=["--alerts", af])
    assert request(gw, "GET", net.url("/x")).status == 200
    wait_alert(af, "first_contact")
    modes = seccomp_modes(gw.proc.pid)
    assert modes and set(modes) == {"2"}, modes  # 2: a filter, on every thread
    got = poll(lambda: (out / "probe").exists() and (out / "probe").read_text() or None,
               timeout=10, what="the probe's results")
    res = dict(line.split() for line in got.split("\n") if line.strip())
    assert res["plain"] == "0", got
    for what in ("userns", "netns", "mountns"):
        assert res[what] != "0", got
    assert res["keyctl"] == "1", got  # EPERM
    # the gate still reloads and serves
    gw.reload()
    poll(lambda: "reloaded" in gw.stderr() or None, timeout=5, what="the reload")
    assert request(gw, "GET", net.url("/y")).status == 200
    assert set(seccomp_modes(gw.proc.pid)) == {"2"}
    gw.stop()

