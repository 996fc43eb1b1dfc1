"""`sluice run`: attacks from inside the box on its way out and on what it
must not change (the gateway, its policy, log and alert sinks).

Each test runs a real program in the box that tries one way out or one
tamper, and checks on the host that nothing got through. Only loopback
addresses, or network namespaces the box itself makes, are ever used."""

import json
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import SANITIZER_MARKS

PY = "/usr/bin/python3"


def _clean_env():
    return {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}


def _run(sluice_bin, args, cmd, cwd, timeout=30):
    argv = [sluice_bin, "run"] + [str(a) for a in args] + ["--"] + cmd
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                       env=_clean_env())
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    return p


def _out(p):
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert lines, "no JSON from the box; rc=%d stdout=%r stderr=%r" % (
        p.returncode, p.stdout, p.stderr)
    return json.loads(lines[-1])


@pytest.fixture
def proj():
    """A project directory outside /tmp (the box has its own /tmp), open
    to every user, as the gateway serves as nobody when run is root."""
    base = "/var/tmp" if os.path.isdir("/var/tmp") else os.path.expanduser("~")
    d = tempfile.mkdtemp(prefix="sluice-attack-", dir=base)
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------
# alert programs: the gateway runs them outside the box

BENIGN = "#!%s\ncat > /dev/null\necho benign > %s\n"

# In the box: puts its own program where the policy's alert program is
# (written over, or its folder renamed away and a new one made), then has
# the gateway raise an alert (a first contact) and waits for the program to
# have run. The program, were it run, writes the network namespace it runs
# in: the host's, outside the box.
PLANT = r"""
import json, os, socket, sys, time
prog, marker, how = sys.argv[1], sys.argv[2], sys.argv[3]
evil = "#!/bin/sh\nreadlink /proc/self/ns/net > %s\n" % marker
out = {}
def plant():
    with open(prog, "w") as f:
        f.write(evil)
    os.chmod(prog, 0o755)
try:
    if how == "write":
        plant()
    else:
        folder = os.path.dirname(prog)
        os.rename(folder, folder + ".moved")
        os.mkdir(folder)
        plant()
    out["planted"] = "ok"
except OSError as e:
    out["planted"] = e.__class__.__name__
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"GET http://nowhere.example.test/ HTTP/1.1\r\nHost: nowhere.example.test\r\n\r\n")
out["reply"] = s.recv(64).decode().split("\r\n")[0]
for _ in range(100):
    if os.path.exists(marker) and os.path.getsize(marker) > 0:
        break
    time.sleep(0.1)
out["ran"] = open(marker).read().strip() if os.path.exists(marker) else None
print(json.dumps(out))
"""


def _alert_policy(path, prog):
    with open(path, "w") as f:
        f.write("version: 1\nrules: []\nalerts:\n  first_contact: true\n  sinks:\n"
                "    - exec: %s\n" % prog)


def _alert_world(proj, prog_rel, policy_rel=".sluice/policy.yaml", interp="/bin/sh"):
    """The project's policy and its alert program (benign: it leaves
    "benign" as its mark), and a folder every user may write, where a
    planted program would leave its own mark."""
    out = os.path.join(proj, "out")
    os.mkdir(out)
    os.chmod(out, 0o777)
    marker = os.path.join(out, "ran")
    prog = os.path.join(proj, prog_rel)
    os.makedirs(os.path.dirname(prog), exist_ok=True)
    with open(prog, "w") as f:
        f.write(BENIGN % (interp, marker))
    os.chmod(prog, 0o755)
    pol = os.path.join(proj, policy_rel)
    os.makedirs(os.path.dirname(pol), exist_ok=True)
    _alert_policy(pol, prog)
    for d in (os.path.dirname(prog), os.path.dirname(pol)):
        while d != proj:
            os.chmod(d, 0o755)
            d = os.path.dirname(d)
    return pol, prog, marker


@pytest.mark.parametrize("prog_rel,how", [
    ("alert.sh", "write"),                  # directly in the working directory
    (".sluice/alert.sh", "write"),          # in a folder below it
    (".sluice/hooks/alert.sh", "rename"),   # its folder renamed away
])
def test_an_alert_program_the_command_can_change_stops_the_run(sluice_bin, proj, prog_rel, how):
    """The gateway runs the policy's `exec` alert programs outside the box,
    with the host's network and its user's rights (nobody for a root run;
    the caller's own otherwise). One the command can write, or put another
    file in the place of (its folder renamed away), would run the command's
    own code outside the box at the next alert, which the command raises at
    will (a first contact). Before the fix each of these ran the planted
    program in the host's network namespace."""
    pol, prog, marker = _alert_world(proj, prog_rel)
    p = _run(sluice_bin, ["--policy", pol], [PY, "-c", PLANT, prog, marker, how], proj)
    assert not os.path.exists(marker), (open(marker).read(), p.stdout, p.stderr)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == ""
    assert ("sluice run: the alert program %s can be changed from the box" % prog) in p.stderr, \
        p.stderr
    with open(prog) as f:
        assert f.read() == BENIGN % ("/bin/sh", marker)


def test_an_alert_programs_interpreter_the_command_can_change_stops_the_run(sluice_bin, proj):
    """A script's interpreter runs outside the box as the script does: one
    in the working directory (a project's virtualenv, say) is refused like
    the program itself. Before the fix the planted interpreter ran in the
    host's network namespace."""
    work = os.path.join(proj, "work")
    os.makedirs(os.path.join(work, "venv"))
    os.chmod(work, 0o755)
    os.chmod(os.path.join(work, "venv"), 0o755)
    interp = os.path.join(work, "venv", "sh")
    shutil.copy("/bin/sh", interp)
    pol, prog, marker = _alert_world(proj, "hooks/alert.sh", "policy.yaml", interp=interp)
    p = _run(sluice_bin, ["--policy", pol], [PY, "-c", PLANT, interp, marker, "write"], work)
    assert not os.path.exists(marker), (open(marker).read(), p.stdout, p.stderr)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert ("sluice run: the alert program %s (its interpreter %s) can be changed from the box"
            % (prog, interp)) in p.stderr, p.stderr


@pytest.mark.parametrize("where,ro,how", [
    ("outside", None, "rename"),                        # beside the working directory
    ("work/alert.sh", "work/alert.sh", "write"),        # named with --ro, directly in it
    ("work/.sluice/hooks/alert.sh", "work/.sluice", "rename"),  # below a --ro folder in it
])
def test_an_alert_program_out_of_the_commands_reach_runs(sluice_bin, proj, where, ro, how):
    """An alert program the command cannot change is run, and what the
    command tried changed nothing: it runs as it was."""
    work = os.path.join(proj, "work")
    os.mkdir(work)
    os.chmod(work, 0o755)
    prog_rel = "hooks/alert.sh" if where == "outside" else where
    pol, prog, marker = _alert_world(proj, prog_rel, "policy.yaml")
    args = ["--policy", pol] + (["--ro", os.path.join(proj, ro)] if ro else [])
    p = _run(sluice_bin, args, [PY, "-c", PLANT, prog, marker, how], work)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    o = _out(p)
    assert o["planted"] in ("OSError", "PermissionError"), o
    assert o["reply"] == "HTTP/1.1 403 Forbidden"
    assert o["ran"] == "benign", o


# --------------------------------------------------------------------------
# socket families

# In the box: an AF_PACKET socket by its obsolete spelling, socket(AF_INET,
# SOCK_PACKET), which the kernel takes for socket(AF_PACKET, ...): in the
# box's network namespace, and in one of its own (a user namespace the
# command makes gives it CAP_NET_RAW there).
INET_PACKET = r"""
import ctypes, errno, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
SOCK_PACKET, ETH_P_ALL = 10, socket.htons(3)
def probe():
    res = {}
    for name, fam in (("inet", socket.AF_INET), ("inet6", socket.AF_INET6)):
        s = libc.socket(fam, SOCK_PACKET, ETH_P_ALL)
        res[name] = "ok" if s >= 0 else errno.errorcode[ctypes.get_errno()]
    s = libc.socket(17, socket.SOCK_RAW, ETH_P_ALL)  # AF_PACKET
    res["packet"] = "ok" if s >= 0 else errno.errorcode[ctypes.get_errno()]
    return res
out = {"box": probe()}
r, w = os.pipe()
if os.fork() == 0:
    if libc.unshare(0x10000000 | 0x40000000) != 0:  # CLONE_NEWUSER | CLONE_NEWNET
        res = {"unshare": errno.errorcode[ctypes.get_errno()]}
    else:
        res = probe()
    os.write(w, json.dumps(res).encode())
    os._exit(0)
os.close(w)
out["nested"] = json.loads(os.read(r, 4096))
print(json.dumps(out))
"""


def test_an_af_packet_socket_by_its_inet_spelling_is_refused(sluice_bin, proj):
    """socket(AF_INET, SOCK_PACKET) is an AF_PACKET socket to the kernel,
    which the filter's rule on the family did not see: in a network
    namespace of the command's own it was created (the box's, where the
    command lacks CAP_NET_RAW, refused it with EPERM). AF_PACKET is kernel
    attack surface the box refuses, EAFNOSUPPORT whatever its spelling."""
    pol = os.path.join(proj, "policy.yaml")
    with open(pol, "w") as f:
        f.write("version: 1\nrules: []\n")
    for extra in ([], ["--allow-unix"]):
        o = _out(_run(sluice_bin, ["--policy", pol] + extra, [PY, "-c", INET_PACKET], proj))
        assert o["box"] == {"inet": "EAFNOSUPPORT", "inet6": o["box"]["inet6"],
                            "packet": "EAFNOSUPPORT"}, o
        assert o["box"]["inet6"] != "ok", o
        if "unshare" in o["nested"]:
            assert o["nested"]["unshare"] in ("EPERM", "EINVAL", "ENOSPC", "EUSERS"), o
        else:
            assert o["nested"]["inet"] == o["nested"]["packet"] == "EAFNOSUPPORT", o
            assert o["nested"]["inet6"] != "ok", o
