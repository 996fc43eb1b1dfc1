"""`sluice run`: attacks from inside the box on its way out and on what it
must not change (the gateway, its policy, log and alert sinks).

Each test runs a real program in the box that tries one way out or one
tamper, and checks on the host that nothing got through. Only loopback
addresses, or network namespaces the box itself makes, are ever used."""

import ctypes
import errno
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import SANITIZER_MARKS
from test_box_run import NO_MOUNT_SETATTR  # the box remounts mount by mount under it

PY = "/usr/bin/python3"


def _clean_env():
    return {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}


ROOT, NOBODY = 0, 65534


def _run(sluice_bin, args, cmd, cwd, timeout=30, user=ROOT, env=None):
    argv = [sluice_bin, "run"] + [str(a) for a in args] + ["--"] + cmd
    if user != ROOT:
        argv = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + argv
    e = _clean_env()
    e.update(env or {})
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=e)
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


def _policy(proj, text="version: 1\nrules: []\n"):
    pol = os.path.join(proj, "policy.yaml")
    with open(pol, "w") as f:
        f.write(text)
    os.chmod(pol, 0o644)
    return pol


def _own(proj, user):
    """The project folder and all in it the box user's, as a developer's."""
    for root, dirs, files in os.walk(proj):
        for n in [root] + [os.path.join(root, x) for x in dirs + files]:
            os.lchown(n, user, user)


# The probes' helpers, in the box: the errno name of a call that failed.
PRELUDE = r"""
import ctypes, errno, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {}
def cerr(r):
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
def py(name, f):
    try:
        f()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
def in_child(f):
    # runs f() in a child process (for unshare()), returns what it returned
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            res = f()
        except Exception as e:
            res = {"error": repr(e)}
        os.write(w, json.dumps(res).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        d = os.read(r, 65536)
        if not d:
            break
        data += d
    os.waitpid(pid, 0)
    return json.loads(data)
"""


# --------------------------------------------------------------------------
# alert programs: the gateway runs them outside the box

BENIGN = "#!%s\ncat > /dev/null\necho benign > %s\n"

# In the box, after PLANT or THROUGH_LINK: has the gateway raise an alert (a
# first contact of a host no rule names) and waits up to 10 s for an alert
# program to leave its mark in <marker>.
RAISE_ALERT = r"""
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"GET http://nowhere.example.test/ HTTP/1.1\r\nHost: nowhere.example.test\r\n\r\n")
out["reply"] = s.recv(64).decode().split("\r\n")[0]
for _ in range(100):
    if os.path.exists(marker) and os.path.getsize(marker) > 0:
        break
    time.sleep(0.1)
"""

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
""" + RAISE_ALERT + r"""
out["ran"] = open(marker).read().strip() if os.path.exists(marker) else None
print(json.dumps(out))
"""


def _alert_policy(path, prog):
    with open(path, "w") as f:
        f.write("version: 1\nrules: []\ndns:\n  servers: [\"127.0.0.1:9\"]\n"
                "alerts:\n  first_contact: true\n  sinks:\n    - exec: %s\n" % prog)


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


@pytest.mark.parametrize("written", ["absolute", "relative"])
def test_an_alert_programs_interpreter_the_command_can_change_stops_the_run(sluice_bin, proj,
                                                                           written):
    """A script's interpreter runs outside the box as the script does: one
    in the working directory (a project's virtualenv, say) is refused like
    the program itself; so is one written relative (`#!var/tmp/.../sh`),
    which the kernel finds from the gateway's working directory, `/`.
    Before the fix the planted interpreter ran in the host's network
    namespace (the relative one until it was taken from that directory)."""
    work = os.path.join(proj, "work")
    os.makedirs(os.path.join(work, "venv"))
    os.chmod(work, 0o755)
    os.chmod(os.path.join(work, "venv"), 0o755)
    interp = os.path.join(work, "venv", "sh")
    shutil.copy("/bin/sh", interp)
    pol, prog, marker = _alert_world(proj, "hooks/alert.sh", "policy.yaml",
                                     interp=interp if written == "absolute"
                                     else os.path.relpath(interp, "/"))
    p = _run(sluice_bin, ["--policy", pol], [PY, "-c", PLANT, interp, marker, "write"], work)
    assert not os.path.exists(marker), (open(marker).read(), p.stdout, p.stderr)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert ("sluice run: the alert program %s (its interpreter %s) can be changed from the box"
            % (prog, interp)) in p.stderr, p.stderr


def test_an_alert_program_linked_into_the_working_directory_stops_the_run(sluice_bin, proj):
    """The policy names a link outside the writable paths, which leads to a
    file in the working directory: the gateway follows the link, so the
    file is what the command must not be able to change. Before the fix
    the program written through the link ran in the host's network
    namespace."""
    work = os.path.join(proj, "work")
    os.mkdir(work)
    os.chmod(work, 0o755)
    pol, real, marker = _alert_world(proj, "work/alert.sh", "policy.yaml")
    os.mkdir(os.path.join(proj, "hooks"))
    os.chmod(os.path.join(proj, "hooks"), 0o755)
    link = os.path.join(proj, "hooks", "alert")
    os.symlink("../work/alert.sh", link)
    _alert_policy(pol, link)
    p = _run(sluice_bin, ["--policy", pol], [PY, "-c", PLANT, link, marker, "write"], work)
    assert not os.path.exists(marker), (open(marker).read(), p.stdout, p.stderr)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert ("sluice run: the alert program %s can be changed from the box (below the "
            "writable %s)" % (link, work)) in p.stderr, p.stderr


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


# --------------------------------------------------------------------------
# the box's init, which runs the relay: the command cannot reach into it

RELAY_PROCESS = PRELUDE + r"""
PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206
out["ptrace_attach"] = cerr(libc.ptrace(ctypes.c_long(PTRACE_ATTACH), ctypes.c_long(1), None, None))
out["ptrace_seize"] = cerr(libc.ptrace(ctypes.c_long(PTRACE_SEIZE), ctypes.c_long(1), None, None))
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(16)
local, remote = iovec(ctypes.cast(buf, ctypes.c_void_p), 16), iovec(0x400000, 16)
libc.process_vm_readv.restype = ctypes.c_ssize_t
out["process_vm_readv"] = cerr(libc.process_vm_readv(1, ctypes.byref(local), 1,
                                                     ctypes.byref(remote), 1, 0))
pidfd = libc.syscall(ctypes.c_long(434), ctypes.c_long(1), ctypes.c_long(0))  # pidfd_open
got = [libc.syscall(ctypes.c_long(438), ctypes.c_long(pidfd), ctypes.c_long(n), ctypes.c_long(0))
       for n in range(0, 64)] if pidfd >= 0 else []  # pidfd_getfd: every descriptor it may hold
out["pidfd_getfd"] = "ok" if any(g >= 0 for g in got) else cerr(-1) if got else "no pidfd"
fds = os.listdir("/proc/1/fd") if os.access("/proc/1/fd", os.R_OK) else []
for n in fds:
    py("fd" + n, lambda n=n: os.open("/proc/1/fd/" + n, os.O_PATH))
for what in ("root", "cwd", "exe"):
    py(what, lambda what=what: os.readlink("/proc/1/" + what))
for what in ("environ", "mem"):
    py(what, lambda what=what: open("/proc/1/" + what, "rb").read(1))
py("root_dir", lambda: os.listdir("/proc/1/root/"))
print(json.dumps(out))
"""


@pytest.mark.parametrize("user", [ROOT, NOBODY])
def test_the_relays_process_is_out_of_reach(sluice_bin, proj, user):
    """The box's init (PID 1) runs the relay and holds the gateway's socket:
    ptrace, process_vm_readv, pidfd_getfd, its /proc/1/fd links, root,
    environment and memory all refuse the command (it is not dumpable, and
    the command has no capability)."""
    pol = _policy(proj)
    _own(proj, user)
    o = _out(_run(sluice_bin, ["--policy", pol], [PY, "-c", RELAY_PROCESS], proj, user=user))
    assert o.pop("ptrace_attach") == o.pop("ptrace_seize") == "EPERM", o
    assert o.pop("process_vm_readv") == "EPERM", o
    assert o.pop("pidfd_getfd") in ("EPERM", "no pidfd"), o
    assert o and set(o.values()) == {"EACCES"}, o


RELAY_PRIVILEGES = r"""
import json, socket
st = dict(l.split(":", 1) for l in open("/proc/1/status").read().splitlines() if ":" in l)
out = {k: st[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")}
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"GET http://nowhere.example.test/ HTTP/1.1\r\nHost: nowhere.example.test\r\n"
          b"Connection: close\r\n\r\n")
out["reply"] = b"".join(iter(lambda: s.recv(4096), b"")).decode(errors="replace").split("\r\n")[0]
print(json.dumps(out))
"""


def _serving(sluice_bin, pol, sock):
    """A `sluice serve` on the unix socket <sock>, once it is there."""
    gw = subprocess.Popen([sluice_bin, "serve", "--policy", pol, "--listen", "unix:" + sock,
                           "--log", "-"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env=_clean_env())
    for _ in range(300):  # hang guard: 30 s
        if os.path.exists(sock) or gw.poll() is not None:
            break
        time.sleep(0.1)
    assert os.path.exists(sock), gw.communicate(timeout=10)[1]
    return gw


@pytest.mark.parametrize("user,how", [(ROOT, "run"), (NOBODY, "run"), (ROOT, "proxy")])
def test_the_relays_process_holds_no_capability_the_relay_does_not_need(sluice_bin, proj,
                                                                         user, how):
    """The box's init runs the relay, which reads every byte the command
    sends: once the command's process is forked it keeps no capability but
    CAP_DAC_OVERRIDE, none in its bounding set either, with no_new_privs.
    Before, it kept every one of them (a box started as root: every
    capability of the host's root), so that a flaw in the relay handed the
    command the host. The relay still reaches the gateway, a serving one's
    socket that only its group may write (0660, another user's) too."""
    pol = _policy(proj)
    _own(proj, user)
    args, gw = ["--policy", pol], None
    if how == "proxy":
        sockdir = tempfile.mkdtemp(prefix="sluice-attack-gw-")
        sock = os.path.join(sockdir, "gw.sock")
        gw = _serving(sluice_bin, pol, sock)
        os.chown(sock, NOBODY, NOBODY)
        args = ["--proxy", "unix:" + sock]
    try:
        o = _out(_run(sluice_bin, args, [PY, "-c", RELAY_PRIVILEGES], proj, user=user))
    finally:
        if gw is not None:
            gw.terminate()
            gw.communicate(timeout=30)
            shutil.rmtree(sockdir, ignore_errors=True)
    dac_override = "%016x" % (1 << 1)
    assert o == {"CapInh": "0" * 16, "CapPrm": dac_override, "CapEff": dac_override,
                 "CapBnd": dac_override, "CapAmb": "0" * 16, "NoNewPrivs": "1",
                 "reply": "HTTP/1.1 403 Forbidden"}, o


RELAY_SIGNALLED = PRELUDE + r"""
import signal, time
for name, sig in (("stop", signal.SIGSTOP), ("kill", signal.SIGKILL)):
    py(name, lambda sig=sig: os.kill(1, sig))
pidfd = libc.syscall(ctypes.c_long(434), ctypes.c_long(1), ctypes.c_long(0))  # pidfd_open
out["pidfd_kill"] = cerr(libc.syscall(ctypes.c_long(424), ctypes.c_long(pidfd), ctypes.c_long(9),
                                      None, ctypes.c_long(0))) if pidfd >= 0 else cerr(-1)
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"GET http://nowhere.example.test/ HTTP/1.1\r\nHost: nowhere.example.test\r\n"
          b"Connection: close\r\n\r\n")
out["reply"] = b"".join(iter(lambda: s.recv(4096), b"")).decode(errors="replace").split("\r\n")[0]
out["state"] = [ln.split()[1] for ln in open("/proc/1/status") if ln.startswith("State:")][0]
print(json.dumps(out))
"""


@pytest.mark.parametrize("landlock", [True, False])
def test_the_relays_process_cannot_be_stopped_or_killed(sluice_bin, proj, landlock):
    """SIGSTOP and SIGKILL to the box's init (PID 1), by kill() or by a
    pidfd: refused where Landlock scopes signals (EPERM), and otherwise
    dropped by the kernel (a PID namespace's init takes neither from its own
    namespace); the relay still answers, the init is not stopped."""
    pol = _policy(proj)
    env = {} if landlock else {"SLUICE_TEST_NO_LANDLOCK": "1"}
    p = _run(sluice_bin, ["--policy", pol], [PY, "-c", RELAY_SIGNALLED], proj, env=env)
    o = _out(p)
    assert p.returncode == 0, p.stderr
    assert o.pop("reply") == "HTTP/1.1 403 Forbidden", o
    assert o.pop("state") in ("S", "R"), o
    assert set(o.values()) in ({"EPERM"}, {"ok"}), o
    if not landlock:
        assert set(o.values()) == {"ok"}, o  # sent, and dropped


# --------------------------------------------------------------------------
# a read-only file: no way of writing it

READ_ONLY = PRELUDE + r"""
ro = sys.argv[1]
py("open", lambda: open(ro, "a").close())
fd = os.open(ro, os.O_PATH)
py("opath_reopen", lambda: open("/proc/self/fd/%d" % fd, "a").close())
py("link_into_cwd", lambda: os.link(ro, "linked"))
py("rename_away", lambda: os.rename(ro, "renamed"))
py("rename_over", lambda: (open("new", "w").close(), os.rename("new", ro)))
py("unlink", lambda: os.unlink(ro))
py("chmod", lambda: os.chmod(ro, 0o666))
py("truncate", lambda: os.truncate(ro, 0))
py("utime", lambda: os.utime(ro, (0, 0)))
py("setxattr", lambda: os.setxattr(ro, "user.x", b"1"))
# its file handle opened again through the working directory's writable mount
class fh(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint), ("type", ctypes.c_int), ("h", ctypes.c_ubyte * 128)]
h, mid = fh(), ctypes.c_int()
h.bytes = 128
if libc.name_to_handle_at(-100, ro.encode(), ctypes.byref(h), ctypes.byref(mid), 0) == 0:
    cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    out["open_by_handle"] = cerr(libc.open_by_handle_at(cwd, ctypes.byref(h), os.O_RDWR))
print(json.dumps(out))
"""


# How long the priority test's script waits for the box to say it is up:
# a hang guard, not a claim on time.
BOX_UP_GUARD_S = 60

# ioprio_set() and ioprio_get() by number: Python has no call for them.
IOPRIO_NR = {"x86_64": (251, 252), "aarch64": (30, 31)}.get(platform.machine())

# In the box: says it is up (a file in the working directory), waits for
# the caller's script to start a process in run's group after it, then
# changes the priorities of "the caller's group" (0).
GROUP_PRIORITY = PRELUDE + r"""
import time
ioprio_set = int(sys.argv[1])
open("box-up", "w").close()
# by the clock, and no further without it: a count of sleeps ran out on a
# loaded machine and the calls were made before the newer sleep was there
deadline = time.monotonic() + 60  # a hang guard, not a claim on time
while not os.path.exists("victim"):
    if time.monotonic() > deadline:
        print(json.dumps({"victim": "not named in 60 s"}))
        sys.exit(1)
    time.sleep(0.01)
PRIO_PGRP, IOPRIO_WHO_PGRP, IOPRIO_CLASS_IDLE = 1, 2, 3
out["setpriority"] = cerr(libc.setpriority(PRIO_PGRP, 0, 19))
out["ioprio_set"] = cerr(libc.syscall(ctypes.c_long(ioprio_set), ctypes.c_long(IOPRIO_WHO_PGRP),
                                      ctypes.c_long(0), ctypes.c_long(IOPRIO_CLASS_IDLE << 13)))
print(json.dumps(out))
"""


@pytest.mark.skipif(IOPRIO_NR is None, reason="ioprio numbers known for x86_64 and aarch64 only")
@pytest.mark.parametrize("user", [ROOT, NOBODY])
def test_the_commands_priority_calls_do_not_reach_runs_process_group(sluice_bin, proj, user):
    """The command stays in run's process group, which holds run's caller
    too where it has no job control (a script's shell and what it
    started, before run and while the box runs: here a sleep of each):
    setpriority(PRIO_PGRP, 0) and ioprio_set(IOPRIO_WHO_PGRP, 0), "the
    caller's group", would renice, or put in the idle I/O class, every
    process of it the box's user owns, outside the box (the PID namespace
    does not bound a group named so), and they would keep that after the
    box ended. Both fail with EPERM; the sleeps keep their priorities."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    if before >= 19:
        pytest.skip("this test runs at nice 19 already: nothing to lower")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def ioprio(pid):
        return libc.syscall(ctypes.c_long(IOPRIO_NR[1]), ctypes.c_long(1), ctypes.c_long(pid))

    pol = _policy(proj)
    _own(proj, user)
    run = " ".join([sluice_bin, "run", "--policy", pol, "--", PY, "-c", '"$PROBE"',
                    str(IOPRIO_NR[0])])
    sleep = "sleep 60 </dev/null >/dev/null 2>&1 &"
    # the older sleep's pid, then the newer's, on standard output; the
    # newer one made once the box is up, and named to it by a file. The
    # wait for the box ends by the clock (a hang guard, as the probe's): a
    # run that never came up would otherwise hold the script until
    # subprocess.run's timeout, which names nothing
    script = ("%s echo $!; %s & RUN=$!; end=$(($(date +%%s) + %d)); "
              "while [ ! -e box-up ]; do "
              "if [ $(date +%%s) -ge $end ]; then "
              "echo 'the box did not come up in %d s' >&2; kill $RUN; exit 1; fi; "
              "sleep 0.01; done; "
              "%s echo $!; echo $! > victim; wait $RUN"
              % (sleep, run, BOX_UP_GUARD_S, BOX_UP_GUARD_S, sleep))
    argv = ["/bin/sh", "-c", script]
    if user != ROOT:
        argv = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + argv
    env = _clean_env()
    env["PROBE"] = GROUP_PRIORITY
    ioprio_before = ioprio(os.getpid())
    # a hang guard above the script's: its wait for the box, then the probe's
    p = subprocess.run(argv, capture_output=True, text=True, timeout=BOX_UP_GUARD_S + 120,
                       cwd=proj, env=env, start_new_session=True)
    lines = p.stdout.splitlines()
    sleeps = [int(x) for x in lines if x.isdigit()]
    try:
        seen = [(os.getpriority(os.PRIO_PROCESS, pid), ioprio(pid)) for pid in sleeps]
    finally:
        for pid in sleeps:
            os.kill(pid, 9)
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    assert "did not come up" not in p.stderr, p.stderr
    assert seen == [(before, ioprio_before)] * 2, (seen, p.stdout, p.stderr)
    assert _out(p) == {"setpriority": "EPERM", "ioprio_set": "EPERM"}, p.stdout


@pytest.mark.parametrize("user", [ROOT, NOBODY])
def test_a_read_only_file_below_the_working_directory_cannot_be_written(sluice_bin, proj, user):
    """A --ro file in the writable working directory: written, reopened for
    writing through an O_PATH descriptor, hard-linked or renamed into the
    writable mount, replaced, removed, its mode, size, times or attributes
    changed, or opened again by its file handle through the writable mount:
    each refused, and the file is as it was."""
    pol = _policy(proj)
    ro = os.path.join(proj, "keep.txt")
    with open(ro, "w") as f:
        f.write("kept")
    _own(proj, user)
    p = _run(sluice_bin, ["--policy", pol, "--ro", ro], [PY, "-c", READ_ONLY, ro], proj, user=user)
    o = _out(p)
    assert o.pop("link_into_cwd") == "EXDEV", o
    assert o.pop("rename_away") in ("EBUSY", "EXDEV"), o  # a mount point, on a mount of its own
    assert o.pop("rename_over") in ("EBUSY", "EXDEV"), o
    assert o.pop("unlink") in ("EBUSY", "EROFS"), o
    assert o.pop("open_by_handle", "EPERM") == "EPERM", o
    assert set(o.values()) == {"EROFS"}, o
    with open(ro) as f:
        assert f.read() == "kept"
    assert sorted(os.listdir(proj)) == ["keep.txt", "new", "policy.yaml"]  # "new" the box's


# --------------------------------------------------------------------------
# a user namespace of the command's own

NESTED = PRELUDE + r"""
ro, hidden, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
def nested():
    res = {}
    if libc.unshare(0x10000000 | 0x20000 | 0x40000000) != 0:  # NEWUSER | NEWNS | NEWNET
        return {"unshare": errno.errorcode[ctypes.get_errno()]}
    MS_REMOUNT, MS_BIND, MNT_DETACH = 32, 4096, 2
    res["remount_rw"] = cerr(libc.mount(None, ro.encode(), None, MS_REMOUNT | MS_BIND, None))
    res["umount_ro"] = cerr(libc.umount2(ro.encode(), MNT_DETACH))
    res["umount_hide"] = cerr(libc.umount2(hidden.encode(), MNT_DETACH))
    res["hidden"] = os.listdir(hidden)
    # a copy of the working directory's mount without those below it
    res["open_tree"] = cerr(libc.syscall(ctypes.c_long(428), ctypes.c_long(-100),
                                         os.path.dirname(hidden).encode(), ctypes.c_long(1)))
    try:
        open(ro, "a").close()
        res["write_ro"] = "ok"
    except OSError as e:
        res["write_ro"] = errno.errorcode[e.errno]
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        res["host_tcp"] = "ok"
    except OSError as e:
        res["host_tcp"] = errno.errorcode[e.errno]
    res["ifs"] = [n for _, n in socket.if_nameindex()]
    return res
print(json.dumps(in_child(nested)))
"""


@pytest.mark.parametrize("user", [ROOT, NOBODY])
def test_a_nested_user_namespace_gains_nothing(sluice_bin, proj, user):
    """The command may make a user namespace of its own (with a mount and a
    network namespace), where it holds every capability: the box's mounts
    stay as they are (a --ro one cannot be made writable nor taken away, a
    --hide one not taken away, the working directory's mount not copied
    without them: the filter refuses every mount call, as Landlock does,
    and the kernel keeps them locked besides), and its network is empty:
    no way to the host's loopback."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.setblocking(False)
    pol = _policy(proj)
    ro = os.path.join(proj, "keep.txt")
    with open(ro, "w") as f:
        f.write("kept")
    hidden = os.path.join(proj, "secrets")
    os.mkdir(hidden)
    with open(os.path.join(hidden, "key"), "w") as f:
        f.write("secret")
    _own(proj, user)
    try:
        p = _run(sluice_bin, ["--policy", pol, "--ro", ro, "--hide", hidden],
                 [PY, "-c", NESTED, ro, hidden, str(srv.getsockname()[1])], proj, user=user)
        o = _out(p)
        with pytest.raises(BlockingIOError):
            srv.accept()
    finally:
        srv.close()
    if "unshare" in o:
        pytest.skip("no user namespace for the command here: %s" % o["unshare"])
    assert o == {"remount_rw": "EPERM", "umount_ro": "EPERM", "umount_hide": "EPERM",
                 "hidden": [], "open_tree": "EPERM", "write_ro": "EROFS",
                 "host_tcp": "ENETUNREACH", "ifs": ["lo"]}, o
    with open(ro) as f:
        assert f.read() == "kept"


FRESH_PROC = PRELUDE + r"""
def write(path, text):
    try:
        with open(path, "w") as f:
            f.write(text)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
def nested():
    # NEWUSER | NEWNS | NEWPID: a PID namespace of its own, whose procfs
    # this user namespace may mount, in a child (the PID namespace's init)
    if libc.unshare(0x10000000 | 0x20000 | 0x20000000) != 0:
        return {"unshare": errno.errorcode[ctypes.get_errno()]}
    def fresh():
        res = {}
        os.makedirs("/tmp/p", exist_ok=True)
        MS_RDONLY, MS_REMOUNT = 1, 32
        res["mount_rw"] = cerr(libc.mount(b"proc", b"/tmp/p", b"proc", 0, None))
        res["mount_ro"] = cerr(libc.mount(b"proc", b"/tmp/p", b"proc", MS_RDONLY, None))
        if res["mount_ro"] == "ok":
            res["remount_rw"] = cerr(libc.mount(None, b"/tmp/p", None, MS_REMOUNT, None))
            res["uid_map"] = write("/tmp/p/self/uid_map", "0 0 1")
        return res
    return in_child(fresh)
print(json.dumps(in_child(nested)))
"""


@pytest.mark.parametrize("landlock", [True, False])
def test_a_fresh_proc_in_a_nested_namespace_stays_read_only(sluice_bin, proj, landlock):
    """The command's own user, mount and PID namespaces may not mount a
    procfs of their own, with Landlock or without: the filter refuses every
    mount call. (Without it and without Landlock, one mounted read-only, as
    the box's /proc is, and could not be remounted writable, so no uid_map
    could be written there either: root of the namespace as the box's root
    would set file capabilities that work on the host.)"""
    pol = _policy(proj)
    env = {} if landlock else {"SLUICE_TEST_NO_LANDLOCK": "1"}
    o = _out(_run(sluice_bin, ["--policy", pol], [PY, "-c", FRESH_PROC], proj, env=env))
    if "unshare" in o:
        pytest.skip("no nested namespaces for the command here: %s" % o["unshare"])
    assert o == {"mount_rw": "EPERM", "mount_ro": "EPERM"}, o


FRESH_CGROUP = PRELUDE + r"""
name = sys.argv[1]
def nested():
    # NEWUSER | NEWNS | NEWCGROUP: a cgroup namespace this user namespace
    # owns, whose root is the cgroup run runs in: the host's
    if libc.unshare(0x10000000 | 0x20000 | 0x02000000) != 0:
        return {"unshare": errno.errorcode[ctypes.get_errno()]}
    res = {}
    os.makedirs("/tmp/cg", exist_ok=True)
    res["mount"] = cerr(libc.mount(b"none", b"/tmp/cg", b"cgroup2", 0, None))
    if res["mount"] == "ok":
        try:
            with open("/tmp/cg/%s/cgroup.max.descendants" % name, "w") as f:
                f.write("7")
            res["write"] = "ok"
        except OSError as e:
            res["write"] = errno.errorcode[e.errno]
    # the new mount API: a detached mount, written through its descriptor
    fs = libc.syscall(ctypes.c_long(430), b"cgroup2", ctypes.c_long(0))  # fsopen
    res["fsopen"] = cerr(fs)
    if fs >= 0:
        FSCONFIG_CMD_CREATE = 6
        libc.syscall(ctypes.c_long(431), ctypes.c_long(fs), ctypes.c_long(FSCONFIG_CMD_CREATE),
                     None, None, ctypes.c_long(0))
        mnt = libc.syscall(ctypes.c_long(432), ctypes.c_long(fs), ctypes.c_long(0),
                           ctypes.c_long(0))  # fsmount
        res["fsmount"] = cerr(mnt)
        if mnt >= 0:
            try:
                fd = os.open("%s/cgroup.max.depth" % name, os.O_WRONLY, dir_fd=mnt)
                os.write(fd, b"7")
                res["fs_write"] = "ok"
            except OSError as e:
                res["fs_write"] = errno.errorcode[e.errno]
    return res
print(json.dumps(in_child(nested)))
"""


def _own_cgroup2():
    """The host path of the cgroup (v2) this process is in, or None."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next((ln.split(":", 2)[2].strip() for ln in f if ln.startswith("0::")), None)
        with open("/proc/self/mountinfo") as f:
            mounts = [ln.split() for ln in f]
    except OSError:
        return None
    for m in mounts:
        sep = m.index("-")
        if m[sep + 1] == "cgroup2" and m[3] == "/" and path is not None:
            return m[4] + path
    return None


@pytest.mark.parametrize("landlock", [True, False])
def test_a_fresh_cgroup_mount_in_a_nested_namespace_is_refused(sluice_bin, proj, landlock):
    """In user, mount and cgroup namespaces of its own, whose cgroup root
    is the cgroup run runs in (the host's), the command could mount a
    cgroup file system of its own, writable and locked by nothing, and
    write the host's cgroups from there as the root that owns their files
    (cgroup.kill or cgroup.freeze of a service, memory.max, pids.max): seen
    without Landlock, which refuses every mount. The filter refuses the
    mount calls, the new API's too (a detached mount is written through its
    descriptor), so a cgroup the test made beside run's stays as it was."""
    if os.geteuid() != 0:
        pytest.skip("the cgroup's files are root's: run as root")
    base = _own_cgroup2()
    if base is None:
        pytest.skip("no cgroup v2 hierarchy here")
    name = "sluice-test-%d" % os.getpid()
    victim = os.path.join(base, name)
    try:
        os.mkdir(victim)
    except OSError as e:
        pytest.skip("cannot make a cgroup here: %s" % e)
    try:
        pol = _policy(proj)
        env = {} if landlock else {"SLUICE_TEST_NO_LANDLOCK": "1"}
        o = _out(_run(sluice_bin, ["--policy", pol], [PY, "-c", FRESH_CGROUP, name], proj,
                      env=env))
        with open(os.path.join(victim, "cgroup.max.descendants")) as f:
            descendants = f.read().strip()
        with open(os.path.join(victim, "cgroup.max.depth")) as f:
            depth = f.read().strip()
    finally:
        os.rmdir(victim)
    assert (descendants, depth) == ("max", "max"), o
    if "unshare" in o:
        pytest.skip("no nested namespaces for the command here: %s" % o["unshare"])
    assert o == {"mount": "EPERM", "fsopen": "EPERM"}, o


# --------------------------------------------------------------------------
# the host's loopback, and its unix sockets

HOST_NET = PRELUDE + r"""
port, udp, name, dpath = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
py("tcp6", lambda: socket.create_connection(("::1", port), timeout=2).close())
def datagram():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"from-the-box", ("127.0.0.1", udp))
py("udp_sent", datagram)
def abstract():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + name)
py("abstract", abstract)
def pair_sendto(kind):
    a, b = socket.socketpair(socket.AF_UNIX, kind)
    a.sendto(b"from-the-box", dpath)
    return b.recv(64)
for kind, label in ((socket.SOCK_STREAM, "stream"), (socket.SOCK_SEQPACKET, "seqpacket")):
    try:
        out[label + "_pair_sendto"] = pair_sendto(kind).decode()
    except OSError as e:
        out[label + "_pair_sendto"] = errno.errorcode[e.errno]
print(json.dumps(out))
"""


def test_host_loopback_and_unix_sockets_are_out_of_reach(sluice_bin, proj):
    """What the box's own loopback cannot reach on the host's: a TCP
    listener on [::1], a UDP socket (the datagram is sent, into the box's
    network, and never arrives), an abstract unix socket (abstract names
    are the network namespace's: not the host's even with --allow-unix),
    and a unix datagram socket addressed through a stream or seqpacket
    socketpair (which takes no address: EISCONN, or the peer gets it)."""
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this host")
    tcp6 = socket.socket(socket.AF_INET6)
    tcp6.bind(("::1", 0))
    tcp6.listen(4)
    tcp6.setblocking(False)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    name = "sluice-attack-%d" % os.getpid()
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + name)
    abstract.listen(4)
    abstract.setblocking(False)
    dpath = os.path.join(proj, "log.sock")
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dgram.bind(dpath)
    os.chmod(dpath, 0o777)
    dgram.setblocking(False)
    pol = _policy(proj)
    try:
        for extra in ([], ["--allow-unix"]):
            p = _run(sluice_bin, ["--policy", pol] + extra,
                     [PY, "-c", HOST_NET, str(tcp6.getsockname()[1]), str(udp.getsockname()[1]),
                      name, dpath], proj)
            o = _out(p)
            assert o == {"tcp6": "ECONNREFUSED", "udp_sent": "ok",
                         "abstract": "ECONNREFUSED" if extra else "EACCES",
                         "stream_pair_sendto": "EISCONN",
                         "seqpacket_pair_sendto": "from-the-box"}, (extra, o)
            for s in (tcp6, abstract):
                with pytest.raises(BlockingIOError):
                    s.accept()
            for s in (udp, dgram):
                with pytest.raises(BlockingIOError):
                    s.recv(64)
    finally:
        for s in (tcp6, udp, abstract, dgram):
            s.close()


# --------------------------------------------------------------------------
# the kernel's settings, devices and the box's network

KERNEL = PRELUDE + r"""
import fcntl, struct
py("core_pattern", lambda: open("/proc/sys/kernel/core_pattern", "w").write("|/bin/true"))
py("sys_uevent_helper", lambda: open("/sys/kernel/uevent_helper", "w").write("/bin/true"))
py("mknod_disk", lambda: os.mknod("disk", 0o600 | 0o060000, os.makedev(8, 0)))
py("chroot", lambda: os.chroot("/"))
def ioctl(req, arg):
    fcntl.ioctl(socket.socket(), req, arg)
py("lo_down", lambda: ioctl(0x8914, struct.pack("16sH", b"lo", 0) + b"\0" * 22))  # SIOCSIFFLAGS
py("add_route", lambda: ioctl(0x890B, b"\0" * 120))  # SIOCADDRT
py("io_uring", lambda: (_ for _ in ()).throw(OSError(ctypes.get_errno(), "")) if libc.syscall(
    ctypes.c_long(425), ctypes.c_long(8), ctypes.create_string_buffer(120)) < 0 else None)
print(json.dumps(out))
"""


@pytest.mark.parametrize("user", [ROOT, NOBODY])
def test_kernel_settings_devices_and_the_network_are_refused(sluice_bin, proj, user):
    """/proc/sys (core_pattern: a program the host's kernel runs as root)
    and /sys are read-only; a disk's device node cannot be made, nor the
    root changed; the box's loopback cannot be taken down nor a route
    added; io_uring is refused (it makes sockets without socket())."""
    pol = _policy(proj)
    _own(proj, user)
    o = _out(_run(sluice_bin, ["--policy", pol], [PY, "-c", KERNEL], proj, user=user))
    assert o == {"core_pattern": "EROFS", "sys_uevent_helper": "EROFS", "mknod_disk": "EPERM",
                 "chroot": "EPERM", "lo_down": "EPERM", "add_route": "EPERM",
                 "io_uring": "ENOSYS"}, o
    assert os.listdir(proj) == ["policy.yaml"]


# bpf(2) on a pinned map, by its path: "pin" (on the host: an array map of
# one 8-byte value, 0, pinned there), "get" (in the box: open it, write
# 0x5151 into it), "look" (on the host: the value now).
BPF_MAP = r"""
import ctypes, errno, json, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR_BPF = {"x86_64": 321, "aarch64": 280}[__import__("platform").machine()]
def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(ctypes.c_long(NR_BPF), ctypes.c_long(cmd), buf, ctypes.c_long(128))
    return r if r >= 0 else errno.errorcode[ctypes.get_errno()]
def by_path(cmd, path, fd=0):  # BPF_OBJ_PIN, BPF_OBJ_GET
    p = ctypes.create_string_buffer(path.encode())
    return bpf(cmd, struct.pack("=QII", ctypes.addressof(p), fd, 0))
def elem(cmd, fd, value):  # BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM of key 0
    k = ctypes.create_string_buffer(struct.pack("=I", 0))
    v = ctypes.create_string_buffer(struct.pack("=Q", value))
    r = bpf(cmd, struct.pack("=IIQQQ", fd, 0, ctypes.addressof(k), ctypes.addressof(v), 0))
    return r if r != 0 else struct.unpack("=Q", v.raw[:8])[0]
what, path = sys.argv[1], sys.argv[2]
out = {}
if what == "pin":
    fd = bpf(0, struct.pack("=IIIII", 2, 4, 8, 1, 0))  # BPF_MAP_CREATE, an array
    out["pin"] = fd if isinstance(fd, str) else by_path(6, path, fd)
else:
    fd = out[what] = by_path(7, path)
    if not isinstance(fd, str):
        if what == "get":
            out["update"] = elem(2, fd, 0x5151)
        out["value"] = elem(1, fd, 0)
print(json.dumps(out))
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"),
                    reason="bpf(2)'s number known for x86_64 and aarch64 only")
@pytest.mark.parametrize("user", [ROOT, NOBODY])
def test_a_pinned_bpf_map_cannot_be_written_through_its_read_only_mount(sluice_bin, proj, user):
    """A BPF map pinned in a bpf file system of the host's view (Cilium's
    and other firewalls' maps in /sys/fs/bpf) is read-only in the box like
    any mount, but bpf(BPF_OBJ_GET) opens a pin by its path without the
    mount's say (no open() of the file: a read-only mount refuses nothing)
    and the map's descriptor writes the host's map: the box's root, the
    pin's owner, or any box user where the pin is open to all, changed a
    value the host's kernel reads (0 to 0x5151, seen on the host). The
    command gets no bpf(2) at all (EPERM). The bpf file system is mounted
    in a mount namespace of the test's own (unshare -m), in the project."""
    pol = _policy(proj)
    pins = os.path.join(proj, "bpf")
    os.mkdir(pins)
    as_user = [] if user == ROOT else ["setpriv", "--reuid=%d" % user, "--regid=%d" % user,
                                       "--clear-groups"]
    script = ('PINS="$0"; BPF="$1"; shift; mount -t bpf bpf "$PINS" || exit 99; '
              '%s -c "$BPF" pin "$PINS/m" | grep -q \'"pin": 0\' || exit 98; '
              'chmod 666 "$PINS/m"; "$@"; %s -c "$BPF" look "$PINS/m"' % (PY, PY))
    argv = (["unshare", "-m", "--propagation", "private", "sh", "-c", script, pins, BPF_MAP]
            + as_user + [sluice_bin, "run", "--policy", pol, "--", PY, "-c", BPF_MAP, "get",
                         os.path.join(pins, "m")])
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=proj,
                       env=_clean_env())
    if p.returncode in (98, 99) or "unshare:" in p.stderr:
        pytest.skip("cannot mount a bpf file system or pin a map in it: %s" % p.stderr.strip())
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 2, (p.stdout, p.stderr)
    assert lines[0] == {"get": "EPERM"}, (lines, p.stderr)
    assert lines[1] == {"look": 3, "value": 0}, lines


# perf_event_open(2) of a software clock counter, user space only (what
# perf_event_paranoid 2 still lets a process count): of itself (pid 0, any
# CPU), of a whole CPU (pid -1, CPU 0; and -1 with the upper 32 bits set,
# which the kernel ignores) and of a cgroup (its folder's descriptor as the
# pid, PERF_FLAG_PID_CGROUP, CPU 0).
PERF_EVENT = PRELUDE + r"""
import platform, struct
NR = {"x86_64": 298, "aarch64": 241}[platform.machine()]
def perf(pid, cpu, flags):
    # PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK; disabled, exclude_kernel, exclude_hv
    attr = struct.pack("=IIQQQQQ", 1, 128, 0, 0, 0, 0, 1 | 1 << 5 | 1 << 6)
    buf = ctypes.create_string_buffer(attr + bytes(128 - len(attr)), 128)
    r = libc.syscall(ctypes.c_long(NR), buf, ctypes.c_long(pid), ctypes.c_long(cpu),
                     ctypes.c_long(-1), ctypes.c_ulong(flags))
    if r >= 0:
        os.close(r)
    return cerr(r)
out["self"] = perf(0, -1, 0)
out["cpu"] = perf(-1, 0, 0)
out["cpu_high_bits"] = perf(0x1ffffffff, 0, 0)
try:
    cg = os.open("/sys/fs/cgroup", os.O_RDONLY | os.O_DIRECTORY)
except OSError:
    cg = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
out["cgroup"] = perf(cg, 0, 1 << 2)
print(json.dumps(out))
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"),
                    reason="perf_event_open(2)'s number known for x86_64 and aarch64 only")
@pytest.mark.parametrize("user", [ROOT, NOBODY])
def test_perf_events_of_a_whole_cpu_or_a_cgroup_are_refused(sluice_bin, proj, user):
    """perf_event_open() with pid -1 counts and samples whatever runs on a
    CPU, the host's processes included, and with PERF_FLAG_PID_CGROUP
    whatever runs in a cgroup: only kernel.perf_event_paranoid (2 here, and
    EACCES) refused them, and at 0 or below any process has them. The box's
    filter refuses both with EPERM, an answer the kernel does not give at
    any paranoid level, so this host's setting need not change for the test
    to tell them apart. A process counting itself gets what the kernel
    gives it, as before (at paranoid 2 or below, user space only: a
    descriptor)."""
    p = subprocess.run([PY, "-c", PERF_EVENT], capture_output=True, text=True, timeout=30)
    if json.loads(p.stdout)["self"] == "EPERM":
        pytest.skip("perf_event_open() refused outside the box too: %s" % p.stdout)
    pol = _policy(proj)
    _own(proj, user)
    got = _out(_run(sluice_bin, ["--policy", pol], [PY, "-c", PERF_EVENT], proj, user=user))
    with open("/proc/sys/kernel/perf_event_paranoid") as f:
        paranoid = int(f.read())
    # above 2 a Debian kernel refuses even that (EACCES), a mainline one does not
    assert got["self"] in (("ok",) if paranoid <= 2 else ("ok", "EACCES")), (paranoid, got)
    assert {k: got[k] for k in ("cpu", "cpu_high_bits", "cgroup")} == {
        "cpu": "EPERM", "cpu_high_bits": "EPERM", "cgroup": "EPERM"}, (paranoid, got)


X32 = r"""
import ctypes, errno, json, os, signal
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    # socket(AF_UNIX, SOCK_STREAM, 0) by its x32 number: __X32_SYSCALL_BIT | 41
    r = libc.syscall(ctypes.c_long(0x40000000 | 41), ctypes.c_long(1), ctypes.c_long(1),
                     ctypes.c_long(0))
    os._exit(0 if r >= 0 else 100 + ctypes.get_errno() % 100)
_, st = os.waitpid(pid, 0)
print(json.dumps({"signal": os.WTERMSIG(st) if os.WIFSIGNALED(st) else None,
                  "exit": os.WEXITSTATUS(st) if os.WIFEXITED(st) else None}))
"""


def test_x32_system_calls_do_not_pass_the_filter(sluice_bin, proj):
    """On x86_64 a system call numbered with the x32 bit is another entry
    to the kernel's table: socket(AF_UNIX) by it must not pass the filter
    (libseccomp kills the process, SIGSYS; a kernel without x32 answers
    ENOSYS)."""
    if platform.machine() != "x86_64":
        pytest.skip("x32 system calls exist on x86_64 only")
    pol = _policy(proj)
    o = _out(_run(sluice_bin, ["--policy", pol], [PY, "-c", X32], proj))
    assert o["signal"] == 31 or o["exit"] == 100 + 38, o  # SIGSYS, or ENOSYS


# --------------------------------------------------------------------------
# the gateway: who the box is to it

TOKENS = r"""
import base64, json, socket
out = {}
for name, auth in (("none", None),
                   ("basic", "Basic " + base64.b64encode(b"ci-bot:s3cret").decode()),
                   ("bearer", "Bearer s3cret")):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    req = "GET http://api.example.test/ HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n"
    if auth:
        req += "Proxy-Authorization: %s\r\n" % auth
    s.sendall((req + "\r\n").encode())
    data = b"".join(iter(lambda: s.recv(4096), b""))  # to the gateway's close
    head = data.decode(errors="replace").split("\r\n\r\n")[0].split("\r\n")
    out[name] = [head[0]] + [h for h in head if h.lower().startswith("sluice-reason")]
print(json.dumps(out))
"""


def test_a_token_presented_from_the_box_makes_it_no_other_agent(sluice_bin, proj):
    """Every request from the box is --agent's: a token the command knows
    (from a file, say), presented as Basic or Bearer, does not make it the
    agent the policy knows by it."""
    pol = _policy(proj, "version: 1\nagents:\n  - id: ci-bot\n    sources: [unix]\n"
                        "    token: env:SLUICE_ATTACK_TOKEN\n  - id: run\n    sources: [unix]\n"
                        "rules:\n  - host: api.example.test\n    ports: [80]\n    tier: 0\n"
                        "    agents: [ci-bot]\n"
                        # resolved by the gateway itself, were the rule to apply: no query
                        # leaves, and loopback is a private_address
                        "dns:\n  servers: [\"127.0.0.1:9\"]\n"
                        "  static: {api.example.test: 127.0.0.1}\n")
    p = _run(sluice_bin, ["--policy", pol], [PY, "-c", TOKENS], proj,
             env={"SLUICE_ATTACK_TOKEN": "s3cret"})
    o = _out(p)
    denied = ["HTTP/1.1 403 Forbidden", "Sluice-Reason: agent_not_allowed"]
    assert o == {"none": denied, "basic": denied, "bearer": denied}, o
    assert "allowed 0 " in p.stderr and "denied 3" in p.stderr, p.stderr


# --------------------------------------------------------------------------
# a file kept read-only with another name in a writable folder

# In the box: appends a line to the file through its other name (a hard
# link the command, or an earlier run's, made while it was not protected),
# then raises an alert (a first contact) and waits for an alert program,
# were one planted, to run.
THROUGH_LINK = r"""
import json, os, socket, sys, time
kept, other, marker = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
try:
    with open(kept, "a") as f:
        f.write("direct\n")
    out["direct"] = "ok"
except OSError as e:
    out["direct"] = e.__class__.__name__
with open(other, "a") as f:
    f.write(sys.argv[4].replace("MARKER", marker) + "\n")
out["through_link"] = "ok"
""" + RAISE_ALERT + r"""
print(json.dumps(out))
"""

FORGED = json.dumps({"ts": "2026-12-05T19:00:00.123Z", "event": "agent_egress", "id": "f1.1",
                     "agent": "run", "method": "GET", "scheme": "http", "host": "forged.test",
                     "port": 80, "path": "/", "tier": 0, "rule": "rules[0]", "owner": None,
                     "decision": "allow", "reason": None, "ip": "192.0.2.1"})


@pytest.mark.parametrize("what", ["log", "alerts", "policy", "program", "ro"])
def test_a_kept_file_with_another_name_in_a_writable_folder_stops_the_run(sluice_bin, proj,
                                                                          what):
    """The decision log, the alerts file, the policy, an alert program and
    a --ro file are bound read-only in the box, but a hard link to one in
    the working directory (made by the command in an earlier run, while
    the file was not kept) is another name for the same file, writable
    there: the command forged an allowed request into this run's own log
    (and its summary counted it), wrote the policy, and wrote an alert
    program that the gateway then ran outside the box. A kept file with
    more than one name on the file system of a writable path stops the
    run before the command starts."""
    work = os.path.join(proj, "work")
    os.mkdir(work)
    os.chmod(work, 0o755)
    pol, prog, marker = _alert_world(proj, "hooks/alert.sh", "policy.yaml")
    kept = {"log": os.path.join(work, "egress.jsonl"),
            "alerts": os.path.join(work, "alerts.jsonl"),
            "policy": os.path.join(work, "policy.yaml"),
            "program": os.path.join(work, "alert.sh"),
            "ro": os.path.join(work, "keep.txt")}[what]
    if what == "policy":
        shutil.move(pol, kept)
        pol = kept
    elif what == "program":
        shutil.move(prog, kept)
        _alert_policy(pol, kept)
    else:
        open(kept, "w").close()
    before = open(kept).read()
    other = os.path.join(work, ".other")
    os.link(kept, other)
    text = {"log": FORGED, "alerts": FORGED.replace("agent_egress", "alert"),
            "program": "readlink /proc/self/ns/net > MARKER"}.get(what, "written")
    args = ["--policy", pol, "--log", os.path.join(work, "egress.jsonl")]
    args += {"alerts": ["--alerts", kept], "ro": ["--ro", kept]}.get(what, [])
    if what == "program":
        args += ["--ro", kept]  # else refused for lying in the working directory
    p = _run(sluice_bin, args, [PY, "-c", THROUGH_LINK, kept, other, marker, text], work)
    assert not os.path.exists(marker), (open(marker).read(), p.stdout, p.stderr)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == ""
    assert ("%s has 2 names (hard links), one of them in the writable %s: %s;" % (kept, work, other)
            in p.stderr), p.stderr
    assert open(kept).read() == before


# In the box: appends a line to the kept file by each of its two names, then
# raises an alert (a first contact) and waits for the alert program to run.
BOTH_NAMES = r"""
import json, os, socket, sys, time
kept, other, marker = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
for key, name in (("kept", kept), ("other", other)):
    try:
        with open(name, "a") as f:
            f.write("written\n")
        out[key] = "ok"
    except OSError as e:
        out[key] = e.errno
""" + RAISE_ALERT + r"""
out["ran"] = open(marker).read().strip() if os.path.exists(marker) else None
print(json.dumps(out))
"""


@pytest.mark.parametrize("what", ["log", "alerts", "policy", "program", "interpreter", "ro"])
def test_a_kept_file_whose_other_name_is_out_of_reach_lets_the_run_start(sluice_bin, proj, what):
    """A kept file's other name outside the writable paths (perf's
    ~/.debug links to the programs it profiled, Debian's /usr/bin/perl and
    perl5.36.0, an ostree or Nix store) is read-only in the box like the
    rest of the host: the run starts, and the file stays as it was by
    either name. Before, the count of names alone stopped it (exit 2)."""
    work, keep, elsewhere = (os.path.join(proj, d) for d in ("work", "keep", "elsewhere"))
    for d in (work, keep, elsewhere):
        os.mkdir(d)
        os.chmod(d, 0o755)
    interp = os.path.join(keep, "sh")
    shutil.copy("/bin/sh", interp)
    pol, prog, marker = _alert_world(proj, "keep/alert.sh", "keep/policy.yaml",
                                     interp=interp if what == "interpreter" else "/bin/sh")
    log = os.path.join(keep, "egress.jsonl")
    kept = {"log": log, "alerts": os.path.join(keep, "alerts.jsonl"), "policy": pol,
            "program": prog, "interpreter": interp, "ro": os.path.join(keep, "keep.txt")}[what]
    if not os.path.exists(kept):
        open(kept, "w").close()
    before = open(kept, "rb").read()
    other = os.path.join(elsewhere, "other")
    os.link(kept, other)
    args = ["--policy", pol, "--log", log]
    args += {"alerts": ["--alerts", kept], "ro": ["--ro", kept]}.get(what, [])
    p = _run(sluice_bin, args, [PY, "-c", BOTH_NAMES, kept, other, marker], work)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    o = _out(p)
    assert o["kept"] == o["other"] == errno.EROFS, (o, p.stderr)
    assert o["ran"] == "benign", (o, p.stderr)
    after = open(kept, "rb").read()
    assert b"written" not in after
    if what not in ("log", "alerts"):
        assert after == before


@pytest.mark.parametrize("where", ["nested", "past_the_bound"])
def test_a_kept_files_other_name_deep_in_a_writable_folder_stops_the_run(sluice_bin, proj,
                                                                         where):
    """The search for a kept file's other names goes down the writable
    paths: one folders deep in the working directory stops the run, named;
    so does a tree deeper than the search goes (64 folders), where one
    could lie unseen (it fails closed, naming where it stopped), though
    the only other name here is out of reach."""
    work, keep = os.path.join(proj, "work"), os.path.join(proj, "keep")
    for d in (work, keep):
        os.mkdir(d)
        os.chmod(d, 0o755)
    pol = _policy(proj)
    log = os.path.join(keep, "egress.jsonl")
    open(log, "w").close()
    deep = os.path.join(work, *(["d"] * (65 if where == "past_the_bound" else 3)))
    os.makedirs(deep)
    other = os.path.join(deep, ".other") if where == "nested" else os.path.join(keep, ".other")
    os.link(log, other)
    p = _run(sluice_bin, ["--policy", pol, "--log", log], [PY, "-c", "print('ran')"], work)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == ""
    if where == "nested":
        assert ("the decision log %s has 2 names (hard links), one of them in the writable %s: "
                "%s;" % (log, work, other)) in p.stderr, p.stderr
    else:
        assert ("the decision log %s has 2 names (hard links), and the search of the writable %s "
                "for another one stopped at %s (more than 64 folders deep)" % (log, work, deep)
                in p.stderr), p.stderr


# In the box: puts its own `sh` into a folder of the PATH run was started
# with (a project's bin, an activated virtualenv), raises an alert, and
# reports what the alert program left and the PATH the command has.
PATH_PLANT = r"""
import json, os, socket, sys, time
bindir, marker = sys.argv[1], sys.argv[2]
out = {"path": os.environ["PATH"].split(":")[0]}
with open(os.path.join(bindir, "sh"), "w") as f:
    f.write("#!/bin/sh\nreadlink /proc/self/ns/net > %s\n" % marker)
os.chmod(os.path.join(bindir, "sh"), 0o755)
""" + RAISE_ALERT + r"""
out["ran"] = open(marker).read().strip() if os.path.exists(marker) else None
print(json.dumps(out))
"""


def test_alert_programs_search_no_folder_the_command_can_write(sluice_bin, proj):
    """An alert program out of the command's reach that starts with
    `#!/usr/bin/env sh` (or runs any program by name) looks it up in the
    gateway's PATH, which was run's caller's: a project folder in it (an
    activated virtualenv, node_modules/.bin) let the command put its own
    `sh` there, which the gateway ran outside the box at the next alert.
    The gateway's PATH leaves out the folders the command can change; the
    command's own PATH is the caller's."""
    work = os.path.join(proj, "work")
    bindir = os.path.join(work, "bin")
    os.makedirs(bindir)
    for d in (work, bindir):
        os.chmod(d, 0o755)
    pol, prog, marker = _alert_world(proj, "hooks/alert.sh", "policy.yaml", interp="/usr/bin/env sh")
    path = bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin")
    p = _run(sluice_bin, ["--policy", pol], [PY, "-c", PATH_PLANT, bindir, marker], work,
             env={"PATH": path})
    o = _out(p)
    assert o["ran"] == "benign", (o, p.stderr)
    assert o["path"] == bindir
    assert p.returncode == 0, p.stderr


# In the box: leaves <name> in the working directory with <text> (and the
# octal mode argv[4], when given), has the gateway raise an alert, and
# reports what the alert program left.
CWD_PLANT = r"""
import json, os, socket, sys, time
name, text, marker = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
with open(name, "w") as f:
    f.write(text)
if len(sys.argv) > 4:
    os.chmod(name, int(sys.argv[4], 8))
""" + RAISE_ALERT + r"""
out["ran"] = open(marker).read().strip() if os.path.exists(marker) else None
print(json.dumps(out))
"""


def test_alert_programs_run_from_the_root_not_the_working_directory(sluice_bin, proj):
    """The gateway runs its alert programs from `/`: from run's working
    directory, the project the command writes, an alert program out of the
    command's reach that reads a relative path (here a shell's `. ./x`,
    as `python3 -m` finds its module in the working directory) read what
    the command left there. Before the fix the command's file was sourced
    and ran in the host's network namespace."""
    work = os.path.join(proj, "work")
    os.mkdir(work)
    os.chmod(work, 0o755)
    pol, prog, marker = _alert_world(proj, "hooks/alert.sh", "policy.yaml")
    with open(prog, "w") as f:
        f.write("#!/bin/sh\ncat > /dev/null\n"
                "if [ -f ./alert.local ]; then . ./alert.local; fi\n"
                "echo \"benign $(pwd)\" > %s\n" % marker)
    evil = "readlink /proc/self/ns/net > %s; exit 0\n" % marker
    p = _run(sluice_bin, ["--policy", pol], [PY, "-c", CWD_PLANT, "alert.local", evil, marker],
             work)
    o = _out(p)
    assert o["ran"] == "benign /", (o, p.stderr)
    assert p.returncode == 0, p.stderr


def _lib_world(proj, prog_text):
    """The working directory with a lib folder the command can write, and
    an alert program out of its reach, hooks/alert, written from
    <prog_text> with its mark's path: (work, lib, policy, mark)."""
    work = os.path.join(proj, "work")
    lib = os.path.join(work, "lib")
    os.makedirs(lib)
    for d in (work, lib):
        os.chmod(d, 0o755)
    pol, prog, marker = _alert_world(proj, "hooks/alert", "policy.yaml")
    with open(prog, "w") as f:
        f.write(prog_text % marker)
    return work, lib, pol, marker


# The alert programs, one per interpreter: each reads its alert, loads the
# module alertlib by name (found in hooks/lib, out of the command's reach)
# and leaves "benign" as its mark; the module the command plants in the
# project's lib leaves the network namespace it runs in instead, and exits.
LOADERS = {
    "python": ("PYTHONPATH", "alertlib.py", "",
               "#!/usr/bin/python3\nimport sys\nsys.stdin.read()\nimport alertlib\n"
               "open(%r, 'w').write('benign')\n",
               "import os\nopen(%r, 'w').write(os.readlink('/proc/self/ns/net'))\nos._exit(0)\n"),
    "perl": ("PERL5LIB", "Alertlib.pm", "1;\n",
             "#!/usr/bin/env perl\nlocal $/; <STDIN>;\nrequire Alertlib;\n"
             "open(my $f, '>', '%s'); print $f 'benign';\n",
             "open(my $f, '>', '%s'); print $f readlink('/proc/self/ns/net');\n"
             "close($f); exit 0;\n"),
    "node": ("NODE_PATH", "alertlib.js", "",
             "#!/usr/bin/node\nconst fs = require('fs'); fs.readFileSync(0);\n"
             "require('alertlib'); fs.writeFileSync(%r, 'benign');\n",
             "const fs = require('fs');\n"
             "fs.writeFileSync(%r, fs.readlinkSync('/proc/self/ns/net')); process.exit(0);\n"),
}


@pytest.mark.parametrize("var,lang", [
    ("PYTHONPATH", "python"),
    ("PERL5LIB", "perl"),
    ("PERLLIB", "perl"),
    ("PERL5OPT", "perl"),      # -I LIB -MAlertlib: an option variable is dropped whole
    ("NODE_PATH", "node"),
    ("NODE_OPTIONS", "node"),  # --require FILE: likewise
])
def test_alert_programs_load_no_module_from_a_folder_the_command_can_write(sluice_bin, proj,
                                                                          var, lang):
    """An alert program out of the command's reach in Python, Perl or
    Node.js finds the modules it loads in the gateway's PYTHONPATH,
    PERL5LIB, NODE_PATH..., run's caller's: a project's lib folder there
    let the command plant a module the gateway's alert program loaded
    outside the box; interpreters' option variables (PERL5OPT's -I and -M,
    NODE_OPTIONS's --require) likewise. The gateway leaves out those
    folders (the alert program's own lib stays), and the option variables
    whole. Before the fix each planted module ran in the host's network
    namespace."""
    interp = "/usr/bin/" + ("python3" if lang == "python" else lang)
    if not os.path.exists(interp):
        pytest.skip("no " + interp)
    search, module, benign, prog_text, evil = LOADERS[lang]
    work, lib, pol, marker = _lib_world(proj, prog_text)
    hooklib = os.path.join(proj, "hooks", "lib")
    os.mkdir(hooklib)
    os.chmod(hooklib, 0o755)
    with open(os.path.join(hooklib, module), "w") as f:
        f.write(benign)
    os.chmod(os.path.join(hooklib, module), 0o644)
    planted = os.path.join(lib, module)
    env = {search: hooklib, var: lib + ":" + hooklib}
    if var == "PERL5OPT":
        env[var] = "-I%s -MAlertlib" % lib
    elif var == "NODE_OPTIONS":
        env[var] = "--require " + planted
    elif var == "PERLLIB":
        del env[search]  # perl reads PERLLIB only without PERL5LIB
    p = _run(sluice_bin, ["--policy", pol],
             [PY, "-c", CWD_PLANT, planted, evil % marker, marker], work, env=env)
    o = _out(p)
    assert o["ran"] == "benign", (o, p.stderr)
    assert p.returncode == 0, p.stderr


# Tools whose own search variable names where they load code by name, and
# an alert program that uses each: git runs a command it has no built-in
# for, git-NAME, from GIT_EXEC_PATH; Tcl sources the pkgIndex.tcl of each
# folder of TCLLIBPATH when it looks for a package, and TCL_LIBRARY's
# init.tcl as it starts. Each: the variable, the
# tool, the file the command plants in the project's lib, its mode, the
# alert program (benign when the tool finds nothing of the command's) and
# the planted file (it leaves the network namespace it runs in).
TOOLS = {
    "git": ("GIT_EXEC_PATH", "/usr/bin/git", "git-alertlib", "755",
            "#!/bin/sh\ncat > /dev/null\ngit alertlib 2> /dev/null || echo benign > %s\n",
            "#!/bin/sh\nreadlink /proc/self/ns/net > %s\n"),
    "tcl": ("TCLLIBPATH", "/usr/bin/tclsh", "pkgIndex.tcl", "644",
            "#!/usr/bin/tclsh\nread stdin\ncatch {package require alertlib}\n"
            "set f [open %s w]; puts -nonewline $f benign; close $f\n",
            "set f [open %s w]; puts -nonewline $f [file readlink /proc/self/ns/net]; close $f\n"
            "exit 0\n"),
}
TOOLS["tcl_library"] = ("TCL_LIBRARY",) + TOOLS["tcl"][1:2] + ("init.tcl",) + TOOLS["tcl"][3:]


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_alert_programs_run_no_tool_code_from_a_folder_the_command_can_write(sluice_bin, proj,
                                                                            tool):
    """An alert program out of the command's reach that runs git or Tcl
    found their code by name in the gateway's GIT_EXEC_PATH or TCLLIBPATH,
    run's caller's: a project folder there let the command plant its own,
    which ran outside the box at the next alert. The gateway leaves such
    entries out, as it does PATH's. Before the fix each planted file ran in
    the host's network namespace."""
    var, tool_bin, name, mode, prog_text, evil = TOOLS[tool]
    if not os.path.exists(tool_bin):
        pytest.skip("no " + tool_bin)
    work, lib, pol, marker = _lib_world(proj, prog_text)
    planted = os.path.join(lib, name)
    p = _run(sluice_bin, ["--policy", pol],
             [PY, "-c", CWD_PLANT, planted, evil % marker, marker, mode], work, env={var: lib})
    o = _out(p)
    assert o["ran"] == "benign", (o, p.stderr)
    assert p.returncode == 0, p.stderr


# --------------------------------------------------------------------------
# standard input, output and error: what run's caller gives the command

# In the box: sends on descriptor <fd> (write(), and sendto() the test's
# listener, for a socket that is not connected), or opens it again by
# /proc/self/fd with another access mode than it was given.
STD_GIVEN = PRELUDE + r"""
fd, what = int(sys.argv[1]), sys.argv[2]
if what == "send":
    port, path = int(sys.argv[3]), sys.argv[4]
    py("write", lambda: os.write(fd, b"from-the-box"))
    s = socket.socket(fileno=os.dup(fd))
    if s.family == socket.AF_UNIX:
        py("sendto", lambda: s.sendto(b"from-the-box", path))
        py("connect", lambda: (s.connect(path), s.send(b"from-the-box")))
    else:
        py("sendto", lambda: s.sendto(b"from-the-box", ("127.0.0.1", port)))
else:
    py("reopen", lambda: os.close(os.open("/proc/self/fd/%d" % fd, int(what))))
with open("result.json", "w") as f:
    f.write(json.dumps(out))
"""


def _run_given(sluice_bin, proj, fd, given, args, cmd_args, env=None):
    """run with <given> (a descriptor) as its descriptor <fd>; the others
    /dev/null, but standard error, captured (unless it is <fd>)."""
    pol = _policy(proj)
    argv = [sluice_bin, "run", "--policy", pol] + args + ["--", PY, "-c", STD_GIVEN, str(fd)] + \
        cmd_args
    streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
               "stderr": subprocess.PIPE}
    streams[("stdin", "stdout", "stderr")[fd]] = given
    e = _clean_env()
    e.update(env or {})
    p = subprocess.run(argv, text=True, timeout=30, cwd=proj, env=e, **streams)
    for mark in SANITIZER_MARKS:
        assert mark not in (p.stderr or ""), p.stderr
    return p


def _drain(s):
    got = b""
    while True:
        try:
            d = s.recv(4096)
        except BlockingIOError:
            return got
        if not d:
            return got
        got += d


@pytest.mark.parametrize("kind,fd", [("tcp", 0), ("tcp", 1), ("udp", 1),
                                     ("udp-unconnected", 1), ("udp-unconnected", 2)])
def test_a_network_socket_given_as_a_standard_descriptor_is_refused(sluice_bin, proj, kind, fd):
    """A TCP socket on standard input or output (inetd's, systemd's socket
    activation, `cmd 1<>/dev/tcp/...`) or a UDP socket, connected or not,
    was passed into the box as it came: it belongs to the host's network,
    and the command wrote to whatever it was connected to, or sent to any
    address, past the gateway (found by review). run now refuses to start,
    exit 2, naming the descriptor; nothing reaches the test's listener."""
    if kind == "tcp":
        lst = socket.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        given = socket.create_connection(lst.getsockname())
        peer, _ = lst.accept()
        lst.close()
    else:
        peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        peer.bind(("127.0.0.1", 0))
        given = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if kind == "udp":
            given.connect(peer.getsockname())
    peer.setblocking(False)
    try:
        p = _run_given(sluice_bin, proj, fd, given.fileno(), [],
                       ["send", str(peer.getsockname()[1]), "-"])
        got = _drain(peer)
    finally:
        given.close()
        peer.close()
    assert b"from-the-box" not in got
    assert not os.path.exists(os.path.join(proj, "result.json"))
    assert p.returncode == 2, p.stderr
    if fd != 2:
        name = ("input", "output", "error")[fd]
        assert p.stderr.startswith("sluice run: standard %s is an IPv4 " % name), p.stderr
        assert "past the gateway" in p.stderr, p.stderr


@pytest.mark.parametrize("kind", ["stream", "seqpacket"])
def test_a_connected_unix_socket_as_standard_output_works(sluice_bin, proj, kind):
    """systemd's StandardOutput=journal gives a connected unix stream
    socket: the command writes to it as to a pipe. Its peer is the one
    run's caller chose; it can reach nothing else."""
    a, b = socket.socketpair(socket.AF_UNIX, getattr(socket, "SOCK_" + kind.upper()))
    dpath = os.path.join(proj, "other.sock")
    other = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    other.bind(dpath)
    os.chmod(dpath, 0o777)
    other.setblocking(False)
    b.setblocking(False)
    try:
        p = _run_given(sluice_bin, proj, 1, a.fileno(), [], ["send", "0", dpath])
        a.close()
        got = _drain(b)
        assert _drain(other) == b""
    finally:
        for s in (a, b, other):
            s.close()
    assert p.returncode == 0, p.stderr
    assert got.startswith(b"from-the-box"), got
    with open(os.path.join(proj, "result.json")) as f:
        o = json.load(f)
    assert o["write"] == "ok" and o["connect"] != "ok", o


# Shuts down the socket on descriptor argv[1] (argv[2]: WR or RDWR), after
# a line on standard error; a pipe there refuses it (ENOTSOCK).
SHUT_GIVEN = r"""
import os, socket, sys
os.write(2, b"before the shutdown\n")
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, os.dup(int(sys.argv[1])))
    s.shutdown(getattr(socket, "SHUT_" + sys.argv[2]))
except OSError:
    pass
"""


@pytest.mark.parametrize("how", ["WR", "RDWR"])
@pytest.mark.parametrize("shared", [False, True])
def test_a_command_that_shuts_down_its_standard_error_socket_leaves_runs_summary(
        sluice_bin, proj, how, shared):
    """Standard error a connected unix stream socket (a supervisor's
    socketpair, systemd's journal stream, standard output too when shared):
    the command held that socket itself, and its shutdown(2) shut it for
    run as well (shutdown acts on the socket, not the descriptor), so run's
    summary, written after the command, was lost. The command now writes
    through a pipe run copies into the socket, as for a file: its shutdown
    fails (ENOTSOCK), its line and run's summary arrive."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fd = 1 if shared else 2
    try:
        argv = [sluice_bin, "run", "--policy", _policy(proj), "--", PY, "-c", SHUT_GIVEN,
                str(fd), how]
        p = subprocess.run(argv, stdin=subprocess.DEVNULL,
                           stdout=a if shared else subprocess.DEVNULL, stderr=a, timeout=30,
                           cwd=proj, env=_clean_env())
        a.close()
        b.settimeout(10)
        got = b""
        for _ in range(10000):  # to the end: every holder of <a> is gone
            d = b.recv(65536)
            if not d:
                break
            got += d
    finally:
        a.close()
        b.close()
    text = got.decode(errors="replace")
    for mark in SANITIZER_MARKS:
        assert mark not in text, text
    assert p.returncode == 0, text
    assert "before the shutdown\n" in text, text
    assert re.search(r"^sluice run: exit 0; ", text, re.M), text


# Writes standard error for ever; on SIGTERM leaves a file and exits 0.
FLOOD_ERR = r"""
import os, signal
def term(*a):
    open("got-term", "w").close()
    os._exit(0)
signal.signal(signal.SIGTERM, term)
chunk = b"x" * 65535 + b"\n"
while True:
    os.write(2, chunk)
"""


def test_a_standard_error_socket_not_read_holds_the_command_not_run(sluice_bin, proj):
    """run copies the command's standard error into a unix stream socket
    (above) without waiting on it: a reader that stops reading holds up
    the command's writes, as it did when the command held the socket, and
    never run's loop, which still passes a signal on to the command. Then,
    read again, the command's output and run's summary arrive."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    argv = [sluice_bin, "run", "--policy", _policy(proj), "--", PY, "-c", FLOOD_ERR]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=a,
                         cwd=proj, env=_clean_env())
    a.close()
    got = b""
    try:
        b.settimeout(30)
        got = b.recv(1)  # the command writes; from here on nothing is read
        time.sleep(1)  # the socket, run's hold and the pipe fill (a wait, not a measure)
        p.send_signal(signal.SIGTERM)
        mark = os.path.join(proj, "got-term")
        for _ in range(200):  # at most 20 s
            if os.path.exists(mark) or p.poll() is not None:
                break
            time.sleep(0.1)
        passed_on = os.path.exists(mark)
        for _ in range(100000):  # read again, to the end
            d = b.recv(1 << 20)
            if not d:
                break
            got += d
        rc = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        b.close()
    text = got.decode(errors="replace")
    for m in SANITIZER_MARKS:
        assert m not in text, text[-2000:]
    assert passed_on, text[-2000:]
    assert rc == 0, text[-2000:]
    assert re.search(r"^sluice run: exit 0; ", text, re.M), text[-2000:]


@pytest.mark.parametrize("kind", ["datagram", "unconnected"])
def test_a_unix_socket_that_reaches_other_sockets_needs_allow_unix(sluice_bin, proj, kind):
    """A unix datagram socket (sendto() any path) or one not connected
    (connect() any path) would reach every unix socket the box shows, which
    the command may not make itself without --allow-unix (a docker.sock, a
    host's /dev/log): refused, exit 2, unless --allow-unix is given."""
    dpath = os.path.join(proj, "host.sock")
    if kind == "datagram":
        given, spare = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        host = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        host.bind(dpath)
    else:
        given, spare = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), None
        host = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        host.bind(dpath)
        host.listen(1)
    os.chmod(dpath, 0o777)
    host.setblocking(False)
    try:
        p = _run_given(sluice_bin, proj, 1, given.fileno(), [], ["send", "0", dpath])
        if kind == "datagram":
            got = _drain(host)
        else:
            try:
                got = host.accept()[0].recv(64)
            except BlockingIOError:
                got = b""
        assert got == b"", (got, p.stderr)
        assert p.returncode == 2, p.stderr
        assert p.stderr.startswith("sluice run: standard output is a unix "), p.stderr
        assert "--allow-unix" in p.stderr, p.stderr
        p = _run_given(sluice_bin, proj, 1, given.fileno(), ["--allow-unix"],
                       ["send", "0", dpath])
        assert p.returncode == 0, p.stderr
    finally:
        for s in (given, spare, host):
            if s is not None:
                s.close()


@pytest.mark.parametrize("landlock", [True, False])
@pytest.mark.parametrize("given", [os.O_RDONLY, os.O_WRONLY])
def test_a_device_given_as_a_standard_descriptor_is_refused(sluice_bin, proj, given, landlock):
    """A device given for reading (`< /dev/sdX`) could be opened again for
    writing through /proc/self/fd/0 (where Landlock does not refuse it),
    and one given for writing (`> /dev/sdX`) opened again for reading, by
    a command with the rights (a box started as root owns every root
    device), the box's nodev and its own /dev notwithstanding (found by
    review). The node here is /dev/net/tun's, which neither open acts on
    (no ioctl, no interface), out of the box's view. run refuses to start, exit 2, naming the device."""
    d = tempfile.mkdtemp(prefix="sluice-dev-", dir=os.path.dirname(proj))
    node = os.path.join(d, "tun")
    try:
        os.mknod(node, 0o600 | 0o020000, os.makedev(10, 200))
        fd = os.open(node, given)
        other = os.O_WRONLY if given == os.O_RDONLY else os.O_RDONLY
        env = {} if landlock else {"SLUICE_TEST_NO_LANDLOCK": "1"}
        try:
            p = _run_given(sluice_bin, proj, 0 if given == os.O_RDONLY else 1, fd, [],
                           [str(other)], env)
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(d)
    res = os.path.join(proj, "result.json")
    reopened = open(res).read() if os.path.exists(res) else ""
    assert p.returncode == 2, (p.stderr, reopened)
    name = "input" if given == os.O_RDONLY else "output"
    assert p.stderr.startswith("sluice run: standard %s is the device %s (character 10:200)" %
                               (name, node)), p.stderr


@pytest.mark.parametrize("dev", ["/dev/null", "/dev/zero", "/dev/full", "/dev/urandom"])
def test_the_harmless_devices_stay_usable_as_standard_input(sluice_bin, proj, dev):
    """/dev/null, zero, full, random and urandom, which anyone may open for
    reading and writing, still work as standard input (a terminal too: see
    test_box_run.py's tests on a pseudo-terminal)."""
    with open(dev, "rb") as f:
        p = _run_given(sluice_bin, proj, 0, f.fileno(), [], [str(os.O_RDONLY)])
    assert p.returncode == 0, p.stderr
    with open(os.path.join(proj, "result.json")) as f:
        assert json.load(f) == {"reopen": "ok"}


# In the box: what the command can do with the file on descriptor <fd>
# beyond writing it: open it again by /proc/self/fd for reading (without
# waiting, should it be a pipe), change its mode, seek it; then it writes
# a line through it.
WRITE_GIVEN = PRELUDE + r"""
fd = int(sys.argv[1])
def read_back(flags):
    n = os.open("/proc/self/fd/%d" % fd, flags | os.O_NONBLOCK)
    try:
        return os.read(n, 4096).decode(errors="replace")
    except BlockingIOError:
        return ""
    finally:
        os.close(n)
for name, flags in (("rdonly", os.O_RDONLY), ("rdwr", os.O_RDWR)):
    try:
        out[name] = read_back(flags)
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
py("fchmod", lambda: os.fchmod(fd, 0o666))
py("seek", lambda: os.lseek(fd, 0, os.SEEK_CUR))
os.write(fd, b"from-the-box\n")
with open("result.json", "w") as f:
    f.write(json.dumps(out))
"""


def _given_for_writing(sluice_bin, proj, path, fds, flags, args, user):
    """run, as <user>, with <path> opened with <flags> on each of <fds>
    (one open file for them all, as `> log 2>&1` gives), the others
    /dev/null; its standard error captured when not given."""
    pol = _policy(proj)
    _own(proj, user)
    os.chown(path, user, user)
    argv = [sluice_bin, "run", "--policy", pol] + args + ["--", PY, "-c", WRITE_GIVEN,
                                                          str(fds[0])]
    if user != ROOT:
        argv = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + argv
    fd = os.open(path, flags)
    streams = [subprocess.DEVNULL, subprocess.DEVNULL, subprocess.PIPE]
    for n in fds:
        streams[n] = fd
    try:
        p = subprocess.run(argv, stdin=streams[0], stdout=streams[1], stderr=streams[2],
                           text=True, timeout=30, cwd=proj, env=_clean_env())
    finally:
        os.close(fd)
    for mark in SANITIZER_MARKS:
        assert mark not in (p.stderr or ""), p.stderr
    res = os.path.join(proj, "result.json")
    with open(res) if os.path.exists(res) else open(os.devnull) as f:
        text = f.read()
    return p, json.loads(text) if text else None


def _not_shown(proj, where):
    """A folder the box does not show as it is: under /tmp (the box's /tmp
    is its own), a --hide or a --ro path; the folder and run's extra
    arguments."""
    if where == "tmp":
        return tempfile.mkdtemp(prefix="sluice-given-", dir="/tmp"), []
    d = os.path.join(proj, "secret")
    os.mkdir(d)
    return d, ["--hide" if where == "hidden" else "--ro", d]


def _given_not_shown(proj, where, given):
    """Returns what given(path, args) returned for a file holding "old
    secret", mode 0644, in a folder <where> the box does not show (see
    _not_shown()), and the file's contents and mode after it."""
    d, args = _not_shown(proj, where)
    path = os.path.join(d, "known_hosts")
    try:
        with open(path, "w") as f:
            f.write("old secret\n")
        os.chmod(path, 0o644)
        res = given(path, args)
        with open(path) as f:
            text = f.read()
        return res, text, os.stat(path).st_mode & 0o777
    finally:
        if where == "tmp":
            shutil.rmtree(d)


@pytest.mark.parametrize("user", [ROOT, NOBODY])
@pytest.mark.parametrize("where", ["hidden", "tmp", "read-only"])
@pytest.mark.parametrize("fd", [1, 2])
def test_a_file_given_for_writing_is_written_only(sluice_bin, proj, user, where, fd):
    """`sluice run -- cmd >> ~/.ssh/known_hosts` with ~/.ssh hidden, `2>>
    /tmp/x.log` (the box's /tmp is its own) or a log the box shows
    read-only: the descriptor was passed as it came, on the host's mount,
    and through /proc/self/fd/N the command read the file's old contents
    (hidden from it), and changed its mode (0666, on a mount read-only in
    the box too) (found by review). The command now writes such a file
    through a pipe that run copies into it: it reads nothing of it and
    changes nothing but its contents; the line it wrote is appended."""
    (p, o), text, mode = _given_not_shown(
        proj, where, lambda path, args: _given_for_writing(
            sluice_bin, proj, path, [fd], os.O_WRONLY | os.O_APPEND, args, user))
    assert p.returncode == 0, p.stderr
    assert "old secret" not in o["rdonly"] and "old secret" not in o["rdwr"], o
    assert mode == 0o644, (oct(mode), o)
    assert o["seek"] == "ESPIPE", o
    # after the gateway's warnings, on standard error
    assert text.startswith("old secret\n") and "\nfrom-the-box\n" in text, text


@pytest.mark.parametrize("user", [ROOT, NOBODY])
@pytest.mark.parametrize("where", ["cwd", "rw"])
def test_a_file_given_for_writing_that_the_box_shows_writable_is_passed_as_it_came(
        sluice_bin, proj, user, where):
    """A log in the working directory or a --rw path: the command could
    read it and change its mode by its path anyway, so the descriptor is
    passed as it came (seekable, its open file description the caller's),
    not through a pipe."""
    d = proj if where == "cwd" else os.path.join(proj, "..", os.path.basename(proj) + "-rw")
    d = os.path.realpath(d)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "out.log")
    try:
        with open(path, "w") as f:
            f.write("old\n")
        os.chmod(path, 0o644)
        os.chown(d, user, user)
        args = ["--rw", d] if where == "rw" else []
        p, o = _given_for_writing(sluice_bin, proj, path, [1], os.O_WRONLY | os.O_APPEND, args,
                                  user)
        with open(path) as f:
            text = f.read()
    finally:
        if where == "rw":
            shutil.rmtree(d)
    assert p.returncode == 0, p.stderr
    assert o["rdonly"] == "old\n" and o["fchmod"] == "ok" and o["seek"] == "ok", o
    assert text == "old\nfrom-the-box\n", text


@pytest.mark.parametrize("where", ["cwd", "hidden"])
def test_standard_input_given_for_writing_too_must_be_shown_writable(sluice_bin, proj, where):
    """`0<> file` gives standard input for reading and writing, which no
    pipe can carry: a file the box does not show writable at its path
    (hidden here) stops the run, exit 2, naming it, how it is open and why
    run has no pipe for it (the message said "open for writing" and that
    the command could read it, which it may; found by review); one in the
    working directory is passed as it came."""
    d = proj if where == "cwd" else os.path.join(proj, "secret")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "in.txt")
    with open(path, "w") as f:
        f.write("old secret\n")
    args = ["--hide", d] if where == "hidden" else []
    p, o = _given_for_writing(sluice_bin, proj, path, [0], os.O_RDWR, args, ROOT)
    if where == "cwd":
        assert p.returncode == 0, p.stderr
        assert o["rdonly"] == "old secret\n" and o["seek"] == "ok", o
        return
    assert o is None, o
    assert p.returncode == 2, p.stderr
    assert ("sluice run: cannot build the box: standard input is the file %s, open for "
            "reading and writing, which the box does not show writable at that path (hidden, "
            "under /tmp, read-only, moved?), and run has no pipe for it (none carries a file "
            "both ways): through descriptor 0 the command could write it, and change its mode; "
            "give it for reading only (< FILE) or through a pipe (cat FILE |)\n" % path) \
        in p.stderr, p.stderr
    with open(path) as f:
        assert f.read() == "old secret\n"


def _run_into_a_full_file(sluice_bin, proj, cmd, fd):
    """run of <cmd> (its argv) with descriptor <fd> (1 or 2) a /tmp file
    that takes 4096 bytes at most (run's RLIMIT_FSIZE, as a full disk),
    the other captured: the process and the size the file reached."""
    import resource
    d = tempfile.mkdtemp(prefix="sluice-full-", dir="/tmp")
    path = os.path.join(d, "out")
    pol = _policy(proj)
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    std = {1: subprocess.PIPE, 2: subprocess.PIPE, fd: out}
    try:
        p = subprocess.run([sluice_bin, "run", "--policy", pol, "--"] + cmd,
                           stdin=subprocess.DEVNULL, stdout=std[1], stderr=std[2], text=True,
                           timeout=30, cwd=proj, env=_clean_env(),
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE,
                                                                 (4096, 4096)))
        size = os.fstat(out).st_size
    finally:
        os.close(out)
        shutil.rmtree(d)
    return p, size


def test_a_failed_write_into_a_file_given_for_writing_fails_the_commands_writes(sluice_bin, proj):
    """A file written through run's pipe that can take no more (here past
    run's RLIMIT_FSIZE, as a full disk): run says so once, and closes the
    pipe, so that the command's next write fails (EPIPE), as its write into
    the file would have, instead of its output being dropped unseen."""
    # 1 MB: more than the pipe holds (64 KiB) and run reads at once
    # (64 KiB) before its write fails, so that the command writes after
    # the pipe is closed however the two are scheduled
    code = ("import sys\nfor i in range(1000):\n    sys.stdout.write('x' * 999 + '\\n')\n"
            "    sys.stdout.flush()\n")
    p, size = _run_into_a_full_file(sluice_bin, proj, [PY, "-c", code], 1)
    assert size == 4096, size
    assert p.stderr.count("sluice run: standard output: write failed: File too large; the "
                          "command's writes there fail from now on (broken pipe)") == 1, p.stderr
    assert "BrokenPipeError" in p.stderr, p.stderr
    assert p.returncode != 0, p.stderr


# In the box: writes <n> KB on descriptor <fd> (ignoring a broken pipe,
# as Python does SIGPIPE), says in done.json how far it got, and exits
# with <status>.
WRITE_AND_EXIT = r"""
import json, os, sys
fd, n, status = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
done = 0
try:
    for i in range(n):
        os.write(fd, b"x" * 999 + b"\n")
        done += 1
except BrokenPipeError:
    pass
with open("done.json", "w") as f:
    f.write(json.dumps({"done": done}))
sys.exit(status)
"""


@pytest.mark.parametrize("fd", [1, 2])
@pytest.mark.parametrize("kb,status", [(1000, 0), (8, 0), (1000, 3)])
def test_a_failed_write_into_a_file_given_for_writing_fails_run(sluice_bin, proj, fd, kb, status):
    """A write into a file given for writing that run copies from a pipe
    failed (here past run's RLIMIT_FSIZE of 4096 bytes, as a full disk):
    the command that ignores its broken pipe and exits 0 (1000 KB, more
    than the pipe holds), or that may end before run's write fails and
    never see it (8 KB, which the pipe holds), lost its output, and run
    exited 0 all the same (found by review). As `set -o pipefail` would for
    `cmd | cat > FILE`, run now exits 1 then; a command's own failure (3)
    is kept."""
    p, size = _run_into_a_full_file(sluice_bin, proj,
                                    [PY, "-c", WRITE_AND_EXIT, str(fd), str(kb), str(status)], fd)
    told = p.stdout if fd == 2 else p.stderr
    for mark in SANITIZER_MARKS:
        assert mark not in told, told
    with open(os.path.join(proj, "done.json")) as f:
        o = json.loads(f.read())
    # the command ran to its end; with more than the pipe holds it met the
    # broken pipe, and went on
    assert kb < 64 or o["done"] < kb, (o, told)
    assert size == 4096, size
    if fd == 1:
        assert ("sluice run: standard output: write failed: File too large; the command's "
                "writes there fail from now on (broken pipe), its output cut short (run exits 1 if "
                "it exits 0)\n"
                "sluice run: exit %d;" % (status or 1)) in p.stderr, p.stderr
    assert p.returncode == (status or 1), told


# In the box: what the command can do with the file on its standard input
# beyond reading it: open it again by /proc/self/fd/0 for writing (without
# waiting, should it be a pipe), truncate it, change its mode, seek it;
# then it reads it all.
READ_GIVEN = PRELUDE + r"""
for name, flags in (("wronly", os.O_WRONLY), ("rdwr", os.O_RDWR),
                    ("trunc", os.O_WRONLY | os.O_TRUNC)):
    def again(flags=flags):
        n = os.open("/proc/self/fd/0", flags | os.O_NONBLOCK)
        try:
            os.write(n, b"from-the-box\n")
        finally:
            os.close(n)
    py(name, again)
py("fchmod", lambda: os.fchmod(0, 0o666))
py("seek", lambda: os.lseek(0, 0, os.SEEK_SET))
data = b""
while True:
    b = os.read(0, 65536)
    if not b:
        break
    data += b
out["read"] = data.decode(errors="replace")
with open("result.json", "w") as f:
    f.write(json.dumps(out))
"""


def _given_for_reading(sluice_bin, proj, path, args, user, code=READ_GIVEN, at=0):
    """run, as <user>, with <path> opened read-only on its standard input,
    at offset <at>; its standard output /dev/null, its error captured.
    Returns the process, the command's result.json (None if none) and the
    caller's offset in the file once run has ended."""
    pol = _policy(proj)
    _own(proj, user)
    os.chown(path, user, user)
    argv = [sluice_bin, "run", "--policy", pol] + args + ["--", PY, "-c", code]
    if user != ROOT:
        argv = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + argv
    fd = os.open(path, os.O_RDONLY)
    try:
        os.lseek(fd, at, os.SEEK_SET)
        p = subprocess.run(argv, stdin=fd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, timeout=60, cwd=proj, env=_clean_env())
        offset = os.lseek(fd, 0, os.SEEK_CUR)
    finally:
        os.close(fd)
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    res = os.path.join(proj, "result.json")
    with open(res) if os.path.exists(res) else open(os.devnull) as f:
        text = f.read()
    return p, json.loads(text) if text else None, offset


@pytest.mark.parametrize("user", [ROOT, NOBODY])
@pytest.mark.parametrize("where", ["hidden", "tmp"])
def test_a_file_given_as_standard_input_is_read_only(sluice_bin, proj, user, where):
    """`sluice run --hide DIR -- cmd < DIR/file` or `< /tmp/file` (the
    box's /tmp is its own): the box does not show that file at its path, so
    the descriptor was passed as it came, on the host's mount, and through
    /proc/self/fd/0 the command opened it again for writing (truncating
    it), and changed its mode (found by review). The command now reads such
    a file through a pipe that run fills from it: it reads all of it and
    changes nothing of it."""
    (p, o, _), text, mode = _given_not_shown(
        proj, where, lambda path, args: _given_for_reading(sluice_bin, proj, path, args, user))
    assert p.returncode == 0, p.stderr
    assert text == "old secret\n", (text, o)
    assert mode == 0o644, (oct(mode), o)
    assert o["seek"] == "ESPIPE", o
    # /proc/self/fd/0 opened for writing is the pipe's write end: what the
    # command wrote there it reads back, its own
    assert o["read"].replace("from-the-box\n", "") == "old secret\n", o


# In the box: whether standard input seeks, and what it reads of it.
SEEK_AND_READ = PRELUDE + r"""
py("seek", lambda: os.lseek(0, 0, os.SEEK_CUR))
out["read"] = sys.stdin.read()
with open("result.json", "w") as f:
    f.write(json.dumps(out))
"""


@pytest.mark.parametrize("where", ["tmp", "cwd"])
def test_standard_input_is_read_from_the_callers_offset_which_it_leaves(sluice_bin, proj,
                                                                       where):
    """Through run's pipe (a /tmp file) as by the path (the working
    directory), the command reads the file from the offset the caller's
    descriptor was at, and leaves that offset where it was: the command
    reads its own open file, or the pipe, not the caller's."""
    d, args = (proj, []) if where == "cwd" else _not_shown(proj, where)
    path = os.path.join(d, "in.txt")
    try:
        with open(path, "w") as f:
            f.write("old secret\n")
        p, o, offset = _given_for_reading(sluice_bin, proj, path, args, ROOT, code=SEEK_AND_READ,
                                          at=4)
    finally:
        if where == "tmp":
            shutil.rmtree(d)
    assert p.returncode == 0, p.stderr
    assert o["read"] == "secret\n", o
    assert o["seek"] == ("ESPIPE" if where == "tmp" else "ok"), o
    assert offset == 4, offset


# 8 MB: many times what a pipe holds (64 KiB) and run reads at once
BIG_INPUT = bytes(range(256)) * 32768


def _given_big(sluice_bin, proj, user, code):
    """run, as <user>, of <code> with BIG_INPUT in a /tmp file (read
    through run's pipe) as its standard input: the process and the
    command's result.json."""
    d = tempfile.mkdtemp(prefix="sluice-big-", dir="/tmp")
    path = os.path.join(d, "big")
    try:
        with open(path, "wb") as f:
            f.write(BIG_INPUT)
        p, o, _ = _given_for_reading(sluice_bin, proj, path, [], user, code=code)
    finally:
        shutil.rmtree(d)
    return p, o


@pytest.mark.parametrize("user", [ROOT, NOBODY])
def test_a_big_file_given_as_standard_input_is_read_whole(sluice_bin, proj, user):
    """A file many times what run's pipe holds comes through whole and in
    order (run fills the pipe as the command empties it)."""
    import hashlib
    code = PRELUDE + r"""
import hashlib
h, n = hashlib.sha256(), 0
while True:
    b = os.read(0, 100000)
    if not b:
        break
    h.update(b)
    n += len(b)
with open("result.json", "w") as f:
    f.write(json.dumps({"sha": h.hexdigest(), "n": n}))
"""
    p, o = _given_big(sluice_bin, proj, user, code)
    assert p.returncode == 0, p.stderr
    assert o == {"sha": hashlib.sha256(BIG_INPUT).hexdigest(), "n": len(BIG_INPUT)}, o


def test_a_command_that_reads_part_of_its_standard_input_ends_run(sluice_bin, proj):
    """A command that reads 10 bytes of a big file through run's pipe and
    exits: run stops filling the pipe once the box has ended (no reader
    left), and ends with the command's status."""
    code = PRELUDE + r"""
out["read"] = len(os.read(0, 10))
with open("result.json", "w") as f:
    f.write(json.dumps(out))
sys.exit(3)
"""
    p, o = _given_big(sluice_bin, proj, ROOT, code)
    assert o == {"read": 10}, o
    assert p.returncode == 3, p.stderr


# In the box: what the command can do with the file given for reading on
# its descriptor <fd> (1 or 2): open it again by /proc/self/fd for writing,
# change its mode; then it reads it.
READ_GIVEN_ON = PRELUDE + r"""
fd = int(sys.argv[1])
def again():
    n = os.open("/proc/self/fd/%d" % fd, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(n, b"from-the-box\n")
    finally:
        os.close(n)
py("wronly", again)
py("fchmod", lambda: os.fchmod(fd, 0o666))
out["read"] = os.read(fd, 65536).decode(errors="replace")
with open("result.json", "w") as f:
    f.write(json.dumps(out))
"""


def _run_given_on(argv, proj, fd, given):
    """Runs <argv> in <proj> with the descriptor <given> on its <fd>, and
    closes it; the others /dev/null, but standard error, captured when
    not given."""
    streams = [subprocess.DEVNULL, subprocess.DEVNULL, subprocess.PIPE]
    streams[fd] = given
    try:
        return subprocess.run(argv, stdin=streams[0], stdout=streams[1], stderr=streams[2],
                              text=True, timeout=30, cwd=proj, env=_clean_env())
    finally:
        os.close(given)


@pytest.mark.parametrize("where", ["hidden", "tmp", "cwd"])
@pytest.mark.parametrize("fd", [1, 2])
def test_standard_output_or_error_given_for_reading_must_be_shown(sluice_bin, proj, where, fd):
    """`sluice run --hide DIR -- cmd 1< DIR/file` (or `2<`, or a /tmp
    file): standard output or error open for reading only, on a file the
    box does not show at its path, was passed as it came, on the host's
    mount: through /proc/self/fd/N the command wrote the hidden file and
    changed its mode (found by review). Such a descriptor now stops the
    run, exit 2, naming it, the command never started; one the box shows
    (the working directory) is opened again there, as before."""
    if where == "cwd":
        d, args = proj, []
    else:
        d, args = _not_shown(proj, where)
    path = os.path.join(d, "known_hosts")
    pol = _policy(proj)
    try:
        with open(path, "w") as f:
            f.write("old secret\n")
        os.chmod(path, 0o644)
        p = _run_given_on([sluice_bin, "run", "--policy", pol] + args +
                          ["--", PY, "-c", READ_GIVEN_ON, str(fd)],
                          proj, fd, os.open(path, os.O_RDONLY))
        with open(path) as f:
            text = f.read()
        mode = os.stat(path).st_mode & 0o777
    finally:
        if where == "tmp":
            shutil.rmtree(d)
    res = os.path.join(proj, "result.json")
    o = None
    if os.path.exists(res):
        with open(res) as f:
            o = json.loads(f.read())
    if where == "cwd":
        # opened again by its path: what the command could do by the path
        assert p.returncode == 0, p.stderr
        assert o["wronly"] == "ok" and o["read"] == text, (o, text)
        return
    assert (text, oct(mode)) == ("old secret\n", oct(0o644)), o
    assert o is None, o
    assert p.returncode == 2, p.stderr
    if fd == 1:
        assert ("sluice run: cannot build the box: standard output is the file %s, open for "
                "reading only, which the box does not show at that path" % path) in p.stderr, \
            p.stderr


@pytest.mark.parametrize("fd,kind", [(1, "file"), (0, "directory"), (1, "in a closed folder"),
                                     (0, "file")])
def test_a_standard_file_the_box_user_cannot_open_is_named_so(sluice_bin, proj, fd, kind):
    """A file given for reading only as standard output (error alike, but
    run's own messages then go into it), or a directory as standard input,
    that the box shows at its path but that its user cannot open there
    (root's, mode 0600 or 0700, given by a root shell to `setpriv ...
    sluice run` as nobody), or cannot reach (in a folder of root's, mode
    0700): the box cannot open it again on its own mount, and the run
    stops, exit 2, as before; but the message said the box did not show it
    at that path (hidden, under /tmp, moved?), which sent the caller
    looking for the wrong thing (found by review). It now says which user
    cannot open or reach it, and why. Standard input, a file, is read
    through run's pipe, as one the box does not show is."""
    pol = _policy(proj)
    _own(proj, NOBODY)
    path = os.path.join(proj, "root-only")
    if kind == "in a closed folder":
        os.mkdir(path, 0o700)
        path = os.path.join(path, "notes")
    if kind == "directory":
        os.mkdir(path, 0o700)
        opened = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    else:
        with open(path, "w") as f:
            f.write("root's\n")
        os.chmod(path, 0o600)
        opened = os.open(path, os.O_RDONLY)
    p = _run_given_on(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                       "--clear-groups", sluice_bin, "run", "--policy", pol, "--", PY, "-c",
                       "import sys; open('ran', 'w').write(sys.stdin.read())"],
                      proj, fd, opened)
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    ran = os.path.join(proj, "ran")
    if (fd, kind) == (0, "file"):
        assert p.returncode == 0, p.stderr
        with open(ran) as f:
            assert f.read() == "root's\n"
        return
    assert p.returncode == 2, p.stderr
    assert not os.path.exists(ran), p.stderr
    told = {1: "standard output is the file %s, open for reading only, " % path,
            0: "standard input is the directory %s, " % path}[fd]
    why = ("which the box's user (uid %d) cannot reach at that path" if kind == "in a closed folder"
           else "which the box shows at that path but its user (uid %d) cannot open there")
    assert ("sluice run: cannot build the box: %s%s (Permission denied)" % (told, why % NOBODY)) \
        in p.stderr, p.stderr
    assert "does not show" not in p.stderr, p.stderr


# In the box: reads its standard input to the end and exits 0.
READ_ALL = PRELUDE + r"""
n = 0
while True:
    b = os.read(0, 65536)
    if not b:
        break
    n += len(b)
with open("result.json", "w") as f:
    f.write(json.dumps({"n": n}))
"""


def test_a_read_error_on_standard_input_is_told_and_fails_run(sluice_bin, proj):
    """A file given as standard input that the box does not show, whose
    read fails partway (here /proc/self/mem of the test, read past the end
    of a mapping: EIO, as a failing disk gives): run's pipe cannot carry an
    error, so the command read an end there, its input cut short, exited
    0, and run exited 0 (found by review). run now names the file in its
    message and, as `set -o pipefail` would, exits 1 when the command
    exits 0."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page = os.sysconf("SC_PAGE_SIZE")
    # two pages of data, then a hole: the read at the third fails
    addr = libc.mmap(None, 3 * page, 0x3, 0x22, -1, 0)  # RW, MAP_PRIVATE | MAP_ANONYMOUS
    assert addr not in (None, ctypes.c_void_p(-1).value)
    ctypes.memset(addr, ord("A"), 2 * page)
    assert libc.munmap(addr + 2 * page, page) == 0
    pol = _policy(proj)
    fd = os.open("/proc/self/mem", os.O_RDONLY)
    try:
        os.lseek(fd, addr, os.SEEK_SET)
        p = subprocess.run([sluice_bin, "run", "--policy", pol, "--", PY, "-c", READ_ALL],
                           stdin=fd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, timeout=30, cwd=proj, env=_clean_env())
    finally:
        os.close(fd)
        libc.munmap(addr, 2 * page)
    with open(os.path.join(proj, "result.json")) as f:
        o = json.loads(f.read())
    assert o == {"n": 2 * page}, (o, p.stderr)
    assert ("sluice run: standard input, the file /proc/%d/mem: read failed: Input/output "
            "error" % os.getpid()) in p.stderr, p.stderr
    assert p.returncode == 1, p.stderr


# serial: a FUSE mount in the machine's mount namespace, which a box another
# worker builds meanwhile cannot make read-only (it refuses to start)
@pytest.mark.serial
@pytest.mark.parametrize("fd", [0, 1])
def test_a_standard_file_the_box_cannot_seek_is_named_so(sluice_bin, proj, fd):
    """A file given for reading, in the working directory, that the box
    opens again at its path, but whose new open the file system makes
    nonseekable (FOPEN_NONSEEKABLE; a FUSE file system of the test's): the
    box cannot put it at the caller's offset. As standard output (`1<`)
    the run stops, exit 2, as before, but the message said the box did not
    show the file at that path (hidden, under /tmp, moved?), which it does
    (found by review): it now names the call that failed. Standard input
    is read through run's pipe instead, from the caller's offset."""
    from fuse_file import FuseFile
    d = _fuse_dir(proj, "cwd")
    code = PRELUDE + r"""
fd = int(sys.argv[1])
py("seek", lambda: os.lseek(fd, 0, os.SEEK_CUR))
out["read"] = os.read(fd, 100).decode() if fd == 0 else ""
with open("result.json", "w") as f:
    f.write(json.dumps(out))
"""
    with FuseFile(d, b"old secret\n", nonseekable_from=2) as fs:
        given = os.open(fs.path, os.O_RDONLY)
        os.lseek(given, 4, os.SEEK_SET)
        p = _run_given_on([sluice_bin, "run", "--policy", _policy(proj), "--", PY, "-c", code,
                           str(fd)], proj, fd, given)
    err = p.stderr
    for mark in SANITIZER_MARKS:
        assert mark not in err, err
    res = os.path.join(proj, "result.json")
    if fd == 0:
        with open(res) as f:
            o = json.loads(f.read())
        assert o == {"seek": "ESPIPE", "read": "secret\n"}, (o, err)
        assert p.returncode == 0, err
        return
    assert not os.path.exists(res), err
    assert p.returncode == 2, err
    assert ("sluice run: cannot build the box: standard output is the file %s, open for reading "
            "only, which the box opened again at that path but could not seek to offset 4 "
            "(lseek: Illegal seek): through /proc/self/fd/1 the command could write it and "
            "change its mode" % fs.path) in err, err
    assert "does not show" not in err, err


def _fuse_dir(proj, where):
    """An empty folder to mount a FUSE file system on: in the working
    directory, which the box shows (it opens a standard input file there
    again itself), or under /tmp, which it does not (run reads the file
    into a pipe)."""
    if where == "tmp":
        return tempfile.mkdtemp(prefix="sluice-fuse-", dir="/tmp")
    d = os.path.join(proj, "fs")
    os.mkdir(d)
    return d


def _start_on(sluice_bin, proj, fd, code, *argv):
    """Starts run in <proj> of <code> (with <argv>) with the descriptor
    <fd> on its standard input, standard output /dev/null, error
    captured."""
    return subprocess.Popen([sluice_bin, "run", "--policy", _policy(proj), "--", PY, "-c",
                             code] + list(argv), stdin=fd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=proj, env=_clean_env())


def _ended(p, timeout):
    """Waits up to <timeout> s for <p>; its standard error, or None when it
    has not ended (then killed)."""
    try:
        _, err = p.communicate(timeout=timeout)
        return err
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return None


# In the box: says it started (the file "started"), and exits 0 without
# reading its standard input.
START_ONLY = "open('started', 'w').close()"


# serial: a FUSE mount in the machine's mount namespace, which a box another
# worker builds meanwhile cannot make read-only (it refuses to start)
@pytest.mark.serial
@pytest.mark.parametrize("where", ["cwd", "tmp"])
def test_a_standard_input_file_whose_reads_hang_holds_up_neither_the_start_nor_run(
        sluice_bin, proj, where):
    """A file given as standard input on a file system whose reads do not
    return (a hung FUSE or network file system; here a FUSE file system of
    the test's that answers no read): run read it ahead into its pipe while
    the box was set up, on its own loop, whether the box used the pipe or
    opened the file again itself. Where the box shows the file (the working
    directory), run's read held the file's page, and the box's own open of
    it waited behind that read: the command never started (found by review).
    Where it does not (/tmp), the command started, but run, stuck in that
    read, never ended. run now reads the file only once the command is
    executed, only when the command reads it through run's pipe, and on a
    thread of its own: the command starts, and run ends with it, exit 0,
    the read still unanswered; a file the box opened again itself is never
    read by run at all."""
    from fuse_file import FuseFile
    d = _fuse_dir(proj, where)
    try:
        with FuseFile(d, b"never read\n", reads="hold") as fs:
            fd = os.open(fs.path, os.O_RDONLY)
            try:
                p = _start_on(sluice_bin, proj, fd, START_ONLY)
                # hang guard only: without the fix the command does not
                # start (cwd), or run does not end (tmp)
                err = _ended(p, 30)
                pids = fs.read_pids()
            finally:
                os.close(fd)
    finally:
        if where == "tmp":
            shutil.rmtree(d)
    assert os.path.exists(os.path.join(proj, "started")), err
    assert err is not None, "run did not end while the read was held"
    for mark in SANITIZER_MARKS:
        assert mark not in err, err
    assert p.returncode == 0, err
    assert "read failed" not in err, err
    if where == "cwd":
        assert pids == [], pids


# In the box: reads its standard input to its end (or its error), says so
# in result.json and exits with the status it is given.
READ_THEN_EXIT = PRELUDE + r"""
try:
    out["read"] = len(sys.stdin.buffer.read())
except OSError as e:
    out["read"] = errno.errorcode.get(e.errno, str(e.errno))
with open("result.json", "w") as f:
    f.write(json.dumps(out))
sys.exit(int(sys.argv[1]))
"""


# serial: a FUSE mount in the machine's mount namespace, which a box another
# worker builds meanwhile cannot make read-only (it refuses to start)
@pytest.mark.serial
@pytest.mark.parametrize("where,status", [("cwd", 0), ("tmp", 0), ("tmp", 3)])
def test_a_read_error_on_a_standard_input_file_is_told_once_the_command_runs(sluice_bin, proj,
                                                                            where, status):
    """A file given as standard input whose reads fail (EIO; a FUSE file
    system of the test's): where the box shows it, the command opens it
    again itself and meets the error in its own read, which run used to
    meet first, reading ahead while the box was set up, and tell as its
    input cut short, exiting 1 for a command that exited 0 (found by
    review); run now never reads it, and says nothing. Where the box does
    not show it, run reads it into the command's pipe once the command is
    executed: its error is told naming the file, the command reads an end
    there, and run exits 1 when the command exits 0, the command's status
    otherwise."""
    from fuse_file import FuseFile
    d = _fuse_dir(proj, where)
    try:
        with FuseFile(d, b"x" * 100, reads="eio") as fs:
            fd = os.open(fs.path, os.O_RDONLY)
            try:
                p = _start_on(sluice_bin, proj, fd, READ_THEN_EXIT, str(status))
                err = _ended(p, 30)
            finally:
                os.close(fd)
    finally:
        if where == "tmp":
            shutil.rmtree(d)
    assert err is not None, "run did not end"
    for mark in SANITIZER_MARKS:
        assert mark not in err, err
    with open(os.path.join(proj, "result.json")) as f:
        o = json.loads(f.read())
    told = ("sluice run: standard input, the file %s: read failed: Input/output error; the "
            "command reads its end there, its input cut short (run exits 1 if it exits 0)"
            % fs.path)
    if where == "cwd":
        assert o == {"read": "EIO"}, (o, err)
        assert "read failed" not in err, err
        assert p.returncode == 0, err
        return
    assert o == {"read": 0}, (o, err)
    assert err.count(told) == 1, err
    assert p.returncode == (status or 1), err


# In the box: passes its standard output (run's pipe) to the test's
# listener at "hold.sock" (SCM_RIGHTS), writes a line on it once the
# listener holds it, and exits with the status it is given.
PASS_OUTPUT_ON = r"""
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("hold.sock")
socket.send_fds(s, [b"x"], [1])
s.recv(1)  # the listener holds it
os.write(1, b"from-the-box\n")
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("status", [0, 3])
def test_a_pipe_held_open_outside_the_box_does_not_hold_run(sluice_bin, proj, status):
    """With --allow-unix the command can pass the write end of run's pipe
    for its standard output (a /tmp file) to a process outside the box
    (SCM_RIGHTS on a host socket the box shows): once the box had ended,
    run waited for the pipe's end for ever (found by review). It now waits
    at most 2 s after the box has ended, says so, and closes its end: the
    holder's writes then fail (EPIPE). What the holder wrote before is in
    the file, after the command's line; what it would write after never
    is, and run exited 0 all the same, the output cut short without a
    word (found by review): run now says so, and exits 1 when the command
    exits 0, as for a failed write (the command's status otherwise)."""
    import threading
    pol = _policy(proj)
    path = os.path.join(proj, "hold.sock")
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lst.bind(path)
    os.chmod(path, 0o777)
    lst.listen(1)
    held = []

    def hold():
        c, _ = lst.accept()
        _, fds, _, _ = socket.recv_fds(c, 1, 1)
        held.extend(fds)
        os.write(fds[0], b"from-outside-before\n")
        c.send(b"k")
        held.append(c)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    d = tempfile.mkdtemp(prefix="sluice-held-", dir="/tmp")
    out = os.path.join(d, "out")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        # hang guard: without the fix run never ends
        p = subprocess.run([sluice_bin, "run", "--policy", pol, "--allow-unix", "--", PY, "-c",
                            PASS_OUTPUT_ON, str(status)], stdin=subprocess.DEVNULL, stdout=fd,
                           stderr=subprocess.PIPE, text=True, timeout=60, cwd=proj,
                           env=_clean_env())
        t.join(10)
        assert held, p.stderr
        with pytest.raises(BrokenPipeError):
            os.write(held[0], b"from-outside-after\n")
        with open(out) as f:
            text = f.read()
    finally:
        os.close(fd)
        for h in held:
            h.close() if isinstance(h, socket.socket) else os.close(h)
        lst.close()
        shutil.rmtree(d)
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    assert text == "from-outside-before\nfrom-the-box\n", text
    assert ("sluice run: standard output: its pipe is still open outside the box 2 s after the "
            "box ended (the command passed it on): run copies no more of it; writes there fail "
            "from now on (broken pipe), the output cut short (run exits 1 if the command exits "
            "0)\nsluice run: exit %d;" % (status or 1)) in p.stderr, p.stderr
    assert p.returncode == (status or 1), p.stderr


# In the box: what the proc file system mounted at argv[1] on the host shows
# of the host's process argv[2] (its command line, whose argument is the
# marker) and of the host's network namespace (its TCP table, through that
# process: /proc/net is the reader's own), where the host listens on the
# port argv[3]; and what the file argv[4] holds (that command line, bound
# there from a proc file system).
OTHER_PROC = r"""
import errno, json, os, sys
where, pid, port, file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError as e:
        return errno.errorcode[e.errno]
out = {"cmdline": read(os.path.join(where, pid, "cmdline")), "file": read(file)}
tcp = read(os.path.join(where, pid, "net", "tcp"))
out["tcp"] = (":%04X " % port in tcp) if "local_address" in tcp else tcp
out["listing"] = sorted(os.listdir(where)) if os.path.isdir(where) else None
print(json.dumps(out))
"""

# A host process with a secret argument that listens on a loopback port,
# which it prints once listening; it ends when its standard input closes.
SECRET_HOLDER = r"""
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
sys.stdin.read()
"""

# Mounts a proc file system at $0 (exit 99 when it cannot), then runs the
# rest of its arguments; with $FILE set, binds the command line of the
# process $HOLDER there from it and unmounts $0 first.
MOUNT_PROC = ('mount -t proc proc "$0" || exit 99; if [ -n "$FILE" ]; then '
              ': > "$FILE"; mount --bind "$0/$HOLDER/cmdline" "$FILE" || exit 99; umount "$0"; '
              'fi; exec "$@"')


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
@pytest.mark.parametrize("where", ["elsewhere", "in_cwd", "ro", "hide_below", "by_path", "file",
                                   "as_nobody"])
def test_another_proc_mount_shows_nothing_of_the_host(sluice_bin, proj, where):
    """A proc file system mounted on the host outside /proc (a chroot's
    /srv/chroot/proc, a container's rootfs/proc) stayed in the box's view,
    read-only but readable: through it the command read the command line of
    a host process (a secret passed as an argument) and, by that process's
    net/, the TCP table of the host's network namespace. Such a mount is
    covered by an empty read-only folder in the box: outside the working
    directory, below it (its recursive bind brings the mount along), named
    with --ro, with a --hide below it, and when the box remounts mount by
    mount (mount_setattr(2) refused), in a box run as nobody (in a user
    namespace of its own); one of a proc file bound on a file is
    covered by /dev/null. The proc file system is mounted in a mount
    namespace of the test's own (unshare -m), in which run starts."""
    pol = _policy(proj)
    top = proj if where in ("in_cwd", "ro", "hide_below") else \
        tempfile.mkdtemp(prefix="sluice-otherproc-", dir=os.path.dirname(proj))
    try:
        mnt = os.path.join(top, "rootfs", "proc")
        os.makedirs(mnt)
        os.chmod(top, 0o755)
        holder = subprocess.Popen([PY, "-c", SECRET_HOLDER, "secret-token-XYZ"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            port = int(holder.stdout.readline())
            args = {"ro": ["--ro", mnt], "hide_below": ["--hide", os.path.join(mnt, "1")]}
            wrap = [PY, "-c", NO_MOUNT_SETATTR] if where == "by_path" else []
            if where == "as_nobody":  # the box in a user namespace of its own
                _own(proj, NOBODY)
                wrap = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                        "--clear-groups"]
            file = mnt + ".file"
            env = dict(_clean_env(), HOLDER=str(holder.pid), FILE=file if where == "file" else "")
            argv = (["unshare", "-m", "--propagation", "private", "sh", "-c", MOUNT_PROC, mnt]
                    + wrap + [sluice_bin, "run", "--policy", pol] + args.get(where, [])
                    + ["--", PY, "-c", OTHER_PROC, mnt, str(holder.pid), str(port), file])
            p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=proj,
                               env=env)
        finally:
            holder.stdin.close()
            holder.wait(timeout=30)
    finally:
        if top != proj:
            shutil.rmtree(top, ignore_errors=True)
    if p.returncode == 99 or "unshare:" in p.stderr:
        pytest.skip("cannot mount a proc file system in a mount namespace: %s" % p.stderr.strip())
    if p.returncode == 98:
        pytest.skip("cannot load a seccomp filter: %s" % p.stderr.strip())
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    o = _out(p)
    assert "secret-token-XYZ" not in json.dumps(o), o
    assert o == {"cmdline": "ENOENT", "tcp": "ENOENT", "listing": [],
                 "file": "" if where == "file" else "ENOENT"}, (o, p.stderr)


# --------------------------------------------------------------------------
# /sys: the box's own network's interfaces, not the host's

# The test's own network namespace (unshare -n) with interfaces the box's
# has not (a veth pair), and a sysfs of its own on /sys (sysfs shows the network of the
# process that mounts it), with a tmpfs below it as the host's cgroup
# mounts are; "$1" = "mask": a tmpfs on a folder of sysfs that holds files
# too, which leaves no sysfs whole in view, so a user namespace may mount
# none (the kernel's mount_too_revealing()).
OWN_NET = ('MASK="$1"; shift; '
           'ip link add sl-box0 address 02:51:55:49:43:45 type veth peer name sl-box1 || exit 99; '
           'mount -t sysfs -o nosuid,nodev,noexec sysfs /sys || exit 99; '
           'mount -t tmpfs -o size=4k tmpfs /sys/fs/cgroup || exit 99; '
           'echo kept > /sys/fs/cgroup/marker; '
           'if [ "$MASK" = mask ]; then mount -t tmpfs -o size=4k tmpfs /sys/module || exit 99; fi; '
           'exec "$@"')

SYS_VIEW = PRELUDE + r"""
import subprocess
def read(name, path):  # the file's text, or the error's name
    try:
        with open(path) as f:
            out[name] = f.read().strip()
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
out["net"] = sorted(os.listdir("/sys/class/net"))
read("address", "/sys/class/net/sl-box0/address")
read("rx_bytes", "/sys/class/net/sl-box0/statistics/rx_bytes")
read("marker", "/sys/fs/cgroup/marker")
py("write_marker", lambda: open("/sys/fs/cgroup/marker", "w").write("x"))
py("uevent_helper", lambda: open("/sys/kernel/uevent_helper", "w").write("/bin/true"))
out["online"] = open("/sys/devices/system/cpu/online").read().strip()
out["cpu_count"] = os.cpu_count()
out["nproc"] = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
print(json.dumps(out))
"""


def _sys_view(sluice_bin, proj, how, mask=""):
    pol = _policy(proj)
    wrap = []
    if how.endswith("by_path"):
        wrap = [PY, "-c", NO_MOUNT_SETATTR]
    if how.startswith("nobody"):
        _own(proj, NOBODY)
        wrap += ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"]
    argv = (["unshare", "-n", "-m", "--propagation", "private", "sh", "-c", OWN_NET, "sh", mask]
            + wrap + [sluice_bin, "run", "--policy", pol, "--", PY, "-c", SYS_VIEW])
    return _run_in_own_net(argv, proj, _clean_env())


def _run_in_own_net(argv, proj, env):
    """Runs <argv>, an unshare -n whose set-up makes a veth pair and mounts
    a sysfs (exit 99 when it cannot: the test is skipped), from <proj>;
    returns the process and the box's JSON."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=proj, env=env)
    if p.returncode == 99 or "unshare:" in p.stderr:
        pytest.skip("cannot make a network namespace with a veth pair and its sysfs: %s"
                    % p.stderr.strip())
    if p.returncode == 98:
        pytest.skip("cannot load a seccomp filter: %s" % p.stderr.strip())
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    return p, _out(p)


def _host_cpus():
    with open("/sys/devices/system/cpu/online") as f:
        online = f.read().strip()
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return {"online": online, "cpu_count": os.cpu_count(), "nproc": nproc}


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("ip") is None,
                    reason="needs unshare(1) and ip(8)")
@pytest.mark.parametrize("how", ["root", "nobody", "root_by_path", "nobody_by_path"])
def test_sys_shows_the_boxs_own_network_interfaces(sluice_bin, proj, how):
    """The box's /sys is a sysfs of its own network namespace: an
    interface of the network run was started in (sl-box0, a veth in the
    test's namespace) is not listed in /sys/class/net, nor its MAC
    address or counters readable (before, the host's /sys, read-only,
    listed it and gave its address, 02:51:55:49:43:45). The mounts below
    the host's /sys (its cgroup file systems) are kept there, read-only;
    the CPUs are the host's (nproc, os.cpu_count()). As root and in a user
    namespace of its own (nobody), with mount_setattr() or mount by mount."""
    p, o = _sys_view(sluice_bin, proj, how)
    assert o == dict(_host_cpus(), net=["lo"], address="ENOENT", rx_bytes="ENOENT",
                     marker="kept", write_marker="EROFS", uevent_helper="EROFS"), (o, p.stderr)
    assert "/sys" not in p.stderr, p.stderr


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("ip") is None,
                    reason="needs unshare(1) and ip(8)")
@pytest.mark.parametrize("how", ["nobody", "nobody_by_path"])
def test_sys_is_the_hosts_with_a_warning_where_the_kernel_refuses_one(sluice_bin, proj, how):
    """Where the kernel refuses the box a sysfs of its own (in a user
    namespace, while a folder of the host's sysfs is covered, as a
    container's masked paths are), the box shows the host's /sys,
    read-only, and says so on standard error: the interfaces are only
    seen there, and a box that did not start would be no safer."""
    p, o = _sys_view(sluice_bin, proj, how, mask="mask")
    assert ("sluice run: warning: the kernel refuses the box a /sys of its own (Operation not "
            "permitted): it shows the host's, read-only, with the host network's interfaces in "
            "/sys/class/net\n") in p.stderr, p.stderr
    assert o == dict(_host_cpus(), net=["lo", "sl-box0", "sl-box1"], address="02:51:55:49:43:45",
                     rx_bytes="0", marker="kept", write_marker="EROFS",
                     uevent_helper="EROFS"), (o, p.stderr)


# In the box: what the sysfs mounted at argv[1] on the host shows of the
# network it was mounted in (its top folder, the interfaces and sl-box0's
# MAC address), and what the file argv[2] holds (that address, bound there
# from the sysfs).
OTHER_SYSFS = r"""
import errno, json, os, sys
where, file = sys.argv[1], sys.argv[2]
def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:
        return errno.errorcode[e.errno]
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as e:
        return errno.errorcode[e.errno]
print(json.dumps({"listing": listing(where), "net": listing(os.path.join(where, "class", "net")),
                  "address": read(os.path.join(where, "class", "net", "sl-box0", "address")),
                  "file": read(file)}))
"""

# In a network namespace of the test's own with a veth pair (sl-box0, whose
# address is the marker), mounts a sysfs at $0, which shows that network
# (exit 99 when it cannot), then runs the rest of its arguments; with $FILE
# set, binds sl-box0's address there from it and unmounts $0 first.
MOUNT_SYSFS = ('ip link add sl-box0 address 02:51:55:49:43:45 type veth peer name sl-box1 '
               '|| exit 99; mount -t sysfs -o nosuid,nodev,noexec sysfs "$0" || exit 99; '
               'if [ -n "$FILE" ]; then : > "$FILE"; '
               'mount --bind "$0/class/net/sl-box0/address" "$FILE" || exit 99; umount "$0"; '
               'fi; exec "$@"')


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("ip") is None,
                    reason="needs unshare(1) and ip(8)")
@pytest.mark.parametrize("where", ["elsewhere", "in_cwd", "ro", "hide_below", "file", "by_path",
                                   "as_nobody", "nobody_by_path"])
def test_another_sysfs_mount_shows_nothing_of_the_host(sluice_bin, proj, where):
    """A sysfs mounted on the host outside /sys (a chroot's /srv/chroot/sys,
    a container's rootfs/sys) stayed in the box's view, read-only but
    readable: it lists the interfaces of the network it was mounted in (the
    host's), with their MAC addresses and counters, which the box's own
    /sys hides. Such a mount is covered by an empty read-only folder in the
    box, as another proc mount is: outside the working directory, below it
    (its recursive bind brings the mount along), named with --ro, with a
    --hide below it, when the box remounts
    mount by mount (mount_setattr(2) refused), in a box run as nobody (in a
    user namespace of its own); one of a sysfs file bound on a file is
    covered by /dev/null. The sysfs is mounted in a network and mount
    namespace of the test's own (unshare -n -m), in which run starts."""
    pol = _policy(proj)
    top = proj if where == "in_cwd" else \
        tempfile.mkdtemp(prefix="sluice-othersys-", dir=os.path.dirname(proj))
    try:
        mnt = os.path.join(top, "rootfs", "sys")
        os.makedirs(mnt)
        os.chmod(top, 0o755)
        wrap = [PY, "-c", NO_MOUNT_SETATTR] if where.endswith("by_path") else []
        if "nobody" in where:  # the box in a user namespace of its own
            _own(proj, NOBODY)
            wrap += ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"]
        file = mnt + ".file"
        env = dict(_clean_env(), FILE=file if where == "file" else "")
        args = {"ro": ["--ro", mnt], "hide_below": ["--hide", os.path.join(mnt, "class")]}
        argv = (["unshare", "-n", "-m", "--propagation", "private", "sh", "-c", MOUNT_SYSFS, mnt]
                + wrap + [sluice_bin, "run", "--policy", pol] + args.get(where, [])
                + ["--", PY, "-c", OTHER_SYSFS, mnt, file])
        p, o = _run_in_own_net(argv, proj, env)
    finally:
        if top != proj:
            shutil.rmtree(top, ignore_errors=True)
    assert "02:51:55:49:43:45" not in json.dumps(o), o
    assert o == {"listing": [], "net": "ENOENT", "address": "ENOENT",
                 "file": "" if where == "file" else "ENOENT"}, (o, p.stderr)


# --------------------------------------------------------------------------
# the watch layer: a log the command leaves no room for

# In the box: fills the working directory's file system (the log's), then
# asks the gateway for three hosts no rule names (denied: lines for a log
# that cannot take them).
FILL_THEN_ASK = PRELUDE + r"""
try:
    with open("fill", "wb") as f:
        while True:
            f.write(b"x" * 65536)
except OSError as e:
    out["fill"] = errno.errorcode[e.errno]
out["replies"] = []
for i in range(3):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"GET http://nowhere%d.example.test/ HTTP/1.1\r\nHost: nowhere%d.example.test\r\n"
              b"Connection: close\r\n\r\n" % (i, i))
    reply = b"".join(iter(lambda: s.recv(4096), b""))
    out["replies"].append(reply.decode(errors="replace").split("\r\n")[0])
print(json.dumps(out))
"""

# A small file system of the test's own (a mount namespace of its own,
# gone with it) for the working directory and the log: exit 99 when it
# cannot be made.
SMALL_DISK = ('mount -t tmpfs -o size=1m,mode=0755 tmpfs "$0" || exit 99; '
              'cd "$0" && exec "$@"')


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_log_the_command_left_no_room_for_is_told_in_the_summary(sluice_bin, proj):
    """The command fills the file system its working directory shares with
    the decision log, then makes requests: the gateway denies them, but
    their lines cannot be written, and the disk is still full when the
    command ends. The summary must not pass for the whole record: it says
    the gateway could not write all of its log (before, `denied 0`, as if
    nothing had been asked, and the loss was told only in the gateway's
    lines above it)."""
    pol = _policy(proj)
    small = os.path.join(proj, "small")
    os.mkdir(small)
    argv = (["unshare", "-m", "--propagation", "private", "sh", "-c", SMALL_DISK, small,
             sluice_bin, "run", "--policy", pol, "--log", "log.jsonl",
             "--", PY, "-c", FILL_THEN_ASK])
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=proj,
                       env=_clean_env())
    if p.returncode == 99 or "unshare:" in p.stderr:
        pytest.skip("cannot make a mount namespace with a tmpfs: %s" % p.stderr.strip())
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    o = _out(p)
    assert o == {"fill": "ENOSPC", "replies": ["HTTP/1.1 403 Forbidden"] * 3}, o
    assert p.returncode == 0, p.stderr
    summary = p.stderr.strip().splitlines()[-1]
    assert summary.startswith("sluice run: exit 0; allowed 0 "), p.stderr
    assert "not written at exit" in p.stderr, p.stderr
    assert summary.endswith(", alerts 0 (the gateway could not write all of its log, "
                            "see above: the counts miss what it lost)"), p.stderr


# --------------------------------------------------------------------------
# netlink that answers CAP_NET_ADMIN only

# In the box, then in a user and network namespace of the command's own
# (where it holds CAP_NET_ADMIN): which netlink sockets it can make.
NETLINK = PRELUDE + r"""
NETLINK_ROUTE, NETLINK_XFRM, NETLINK_NETFILTER = 0, 6, 12
def sockets():
    res = {}
    for name, proto in (("route", NETLINK_ROUTE), ("xfrm", NETLINK_XFRM),
                        ("netfilter", NETLINK_NETFILTER)):
        py(name, lambda proto=proto: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW,
                                                   proto).close())
        res[name] = out.pop(name)
    # the protocol with bits above the 32 the kernel reads
    fd = libc.syscall(ctypes.c_long(41), ctypes.c_long(socket.AF_NETLINK),
                      ctypes.c_long(socket.SOCK_RAW), ctypes.c_long((1 << 32) | NETLINK_NETFILTER))
    res["netfilter_high"] = cerr(fd)
    if fd >= 0:
        os.close(fd)
    return res
def nested():
    if libc.unshare(0x10000000 | 0x40000000) != 0:  # NEWUSER | NEWNET
        return {"unshare": errno.errorcode[ctypes.get_errno()]}
    return sockets()
print(json.dumps({"box": sockets(), "nested": in_child(nested)}))
"""


@pytest.mark.parametrize("user", [ROOT, NOBODY])
def test_netlink_that_answers_only_net_admin_is_refused(sluice_bin, proj, user):
    """nf_tables and the IPsec transforms (NETLINK_NETFILTER, NETLINK_XFRM)
    answer only a caller with CAP_NET_ADMIN: in the box's network, never
    the command. In a network namespace of its own, under a user namespace
    it makes, it has it, and nf_tables, the way in of most kernel exploits
    from an unprivileged user namespace, took every byte it chose (before:
    both sockets made there, an nftables dump answered). Both are refused
    (EPROTONOSUPPORT, a kernel without them) in either namespace, whatever
    the bits above the protocol's 32; NETLINK_ROUTE still works."""
    pol = _policy(proj)
    _own(proj, user)
    o = _out(_run(sluice_bin, ["--policy", pol], [PY, "-c", NETLINK], proj, user=user))
    refused = {"route": "ok", "xfrm": "EPROTONOSUPPORT", "netfilter": "EPROTONOSUPPORT",
               "netfilter_high": "EPROTONOSUPPORT"}
    assert o["box"] == refused, o
    if "unshare" in o["nested"]:
        pytest.skip("no user namespace for the command here: %s" % o["nested"]["unshare"])
    assert o["nested"] == refused, o


# --------------------------------------------------------------------------
# the box's cgroup: the host's cgroups are read-only in the box

# In the box: a child made by clone3(CLONE_INTO_CGROUP) into the cgroup
# <dest> (the host's cgroup2 folder, read-only in the box): where it ends up.
INTO_CGROUP = PRELUDE + r"""
import struct
dest = sys.argv[1]
fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
CLONE_INTO_CGROUP, SIGCHLD = 0x200000000, 17
args = ctypes.create_string_buffer(struct.pack("=11Q", CLONE_INTO_CGROUP, 0, 0, 0, SIGCHLD,
                                               0, 0, 0, 0, 0, fd), 88)
r, w = os.pipe()
pid = libc.syscall(ctypes.c_long(435), args, ctypes.c_long(88))  # clone3
if pid == 0:
    os.write(w, open("/proc/self/cgroup").read().encode())
    os._exit(0)
out["clone3"] = cerr(pid)
if pid > 0:
    os.close(w)
    out["child"] = os.read(r, 4096).decode().splitlines()[-1]
    os.waitpid(pid, 0)
pid = os.fork()  # a plain fork still works
if pid == 0:
    os._exit(7)
out["fork"] = os.WEXITSTATUS(os.waitpid(pid, 0)[1])
print(json.dumps(out))
"""


def _cgroup2_dir():
    """The test's own cgroup2 folder on the host, or None."""
    mnt = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[fields.index("-") + 1] == "cgroup2" and fields[3] == "/":
                mnt = fields[4]
                break
    with open("/proc/self/cgroup") as f:
        rel = [ln.strip()[3:] for ln in f if ln.startswith("0::")]
    if mnt is None or not rel:
        return None
    return os.path.join(mnt, rel[0].lstrip("/"))


def test_a_child_cannot_be_started_in_another_cgroup(sluice_bin, proj):
    """The host's cgroups are read-only in the box, but clone3() with
    CLONE_INTO_CGROUP starts a child in the cgroup of a folder's descriptor,
    checked against the cgroup.procs file's owner and mode only, never the
    mount: a box started as root (the owner of every cgroup) put its child
    in any cgroup of the host (before: in a sibling of run's, the test's
    'other', and in the root cgroup, out of the memory and task limits
    `systemd-run --scope` gives run, or into a service's, to use up its
    memory until its OOM killer ended the service). clone3() fails with
    ENOSYS, as on a kernel before 5.3, after which the C library falls back
    to clone(), which has no such flag; fork() still works."""
    base = _cgroup2_dir()
    if base is None or not os.access(base, os.W_OK):
        pytest.skip("no cgroup2 folder of the test's own that it can write")
    run_cg = os.path.join(base, "sluice-attack-run-%d" % os.getpid())
    other = os.path.join(base, "sluice-attack-other-%d" % os.getpid())
    try:
        try:
            os.mkdir(run_cg)
            os.mkdir(other)
        except OSError as e:
            pytest.skip("cannot make cgroups here: %s" % e)
        pol = _policy(proj)
        # run in a cgroup of its own, as systemd-run --scope would put it
        argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" || exit 99; exec "$@"', run_cg,
                sluice_bin, "run", "--policy", pol, "--", PY, "-c", INTO_CGROUP, other]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=proj,
                           env=_clean_env())
        if p.returncode == 99:
            pytest.skip("cannot move a process into a new cgroup: %s" % p.stderr.strip())
        for mark in SANITIZER_MARKS:
            assert mark not in p.stderr, p.stderr
        o = _out(p)
    finally:
        for d in (run_cg, other):
            for _ in range(100):  # hang guard: 10 s for the processes to leave it
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
    assert o == {"clone3": "ENOSYS", "fork": 7}, o


# --------------------------------------------------------------------------
# a btrfs snapshot of what the box hides

# In the box: snapshots the subvolume <SRC> (read-only in the box, a
# --hide folder <HIDDEN> below it) into the working directory, by both
# forms of the ioctl (_IOW(0x94, 23, 4096 bytes), _IOW(0x94, 1, 4096
# bytes)): does the hidden file come back in the copy?
SNAPSHOT = PRELUDE + r"""
import fcntl, struct
src = os.open(os.environ["SRC"], os.O_RDONLY | os.O_DIRECTORY)
out["hidden"] = os.listdir(os.environ["HIDDEN"])
for name, req, args in (("v2", 0x50009417, struct.pack("=qQQ32s4040s", src, 0, 0, b"", b"snap2")),
                        ("v1", 0x50009401, struct.pack("=q4088s", src, b"snap1")),
                        ("v1_high", 0x50009401 | (1 << 32),
                         struct.pack("=q4088s", src, b"snap3"))):
    d = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    r = libc.ioctl(d, ctypes.c_ulong(req), ctypes.create_string_buffer(args, 4096))
    out[name] = cerr(r)
out["found"] = sorted(p for p in os.listdir(".") if os.path.exists(p + "/secret/key"))
print(json.dumps(out))
"""

# A btrfs of the test's own, in a mount namespace of its own, with a
# subvolume (home) that holds the secret folder and the project: exit 99
# when it cannot be made.
BTRFS_WORLD = ('truncate -s 200M "$0/b.img" && mkfs.btrfs -q -f "$0/b.img" >/dev/null 2>&1 && '
               'mkdir "$0/m" && mount -o loop "$0/b.img" "$0/m" || exit 99; '
               'btrfs -q subvolume create "$0/m/home" >/dev/null || exit 99; '
               'mkdir -p "$0/m/home/secret" "$0/m/home/proj" && '
               'echo secret > "$0/m/home/secret/key" && chmod 755 "$0/m" "$0/m/home" && '
               'cd "$0/m/home/proj" && exec "$@"')


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("mkfs.btrfs") is None
                    or shutil.which("btrfs") is None, reason="needs unshare(1) and btrfs-progs")
def test_a_btrfs_snapshot_does_not_bring_back_what_the_box_hides(sluice_bin, proj):
    """On btrfs, the owner of a subvolume may snapshot it (no capability;
    the mount of the source is not looked at) into a folder it can write:
    a box started as root (the owner of /home, say) snapshotted the
    subvolume its project lies in into the project, and read there the
    --hide folder below it (before: 'secret' in both snapshots). The
    snapshot ioctls fail with EPERM, whatever the bits above the 32 the
    kernel reads the request from."""
    pol = _policy(proj)
    m = os.path.join(proj, "m")
    env = dict(_clean_env(), SRC=os.path.join(m, "home"),
               HIDDEN=os.path.join(m, "home", "secret"))
    argv = (["unshare", "-m", "--propagation", "private", "sh", "-c", BTRFS_WORLD, proj,
             sluice_bin, "run", "--policy", pol, "--hide", env["HIDDEN"],
             "--", PY, "-c", SNAPSHOT])
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=proj, env=env)
    if p.returncode == 99 or "unshare:" in p.stderr:
        pytest.skip("cannot make and mount a btrfs here: %s" % p.stderr.strip())
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    o = _out(p)
    assert o == {"hidden": [], "v2": "EPERM", "v1": "EPERM", "v1_high": "EPERM",
                 "found": []}, o


# --------------------------------------------------------------------------
# the file system's encryption keys

# "add" (on the host, as root: a key added for the folder <enc>, encrypted
# with it, a file written there), "remove" (in the box: the key removed by
# its identifier, read from the folder's policy), "look" (the key's
# status: 1 absent, 2 present, 3 removed while in use). <linux/fscrypt.h>
FSCRYPT = r"""
import errno, fcntl, json, os, struct, sys
ADD, REMOVE, SET_POLICY = 0xc0506617, 0xc0406618, 0x800c6613
GET_POLICY_EX, KEY_STATUS = 0xc0096616, 0xc080661a
what, enc = sys.argv[1], sys.argv[2]
IDENTIFIER = 2  # FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER
def spec(ident):
    return struct.pack("=II16s16x", IDENTIFIER, 0, ident)
out = {}
if what == "add":
    os.mkdir(enc)
    fd = os.open(enc, os.O_RDONLY | os.O_DIRECTORY)
    arg = bytearray(spec(b"") + struct.pack("=II32x", 64, 0) + bytes(range(64)))
    fcntl.ioctl(fd, ADD, arg)
    # v2, AES-256-XTS contents, AES-256-CTS names
    fcntl.ioctl(fd, SET_POLICY, struct.pack("=BBBB4x16s", 2, 1, 4, 0, bytes(arg[8:24])))
    with open(os.path.join(enc, "file"), "w") as f:
        f.write("kept")
    sys.exit(0)
fd = os.open(enc, os.O_RDONLY | os.O_DIRECTORY)
pol = bytearray(struct.pack("=Q", 24) + bytes(24))
fcntl.ioctl(fd, GET_POLICY_EX, pol)
ident = bytes(pol[16:32])
if what == "remove":
    try:
        fcntl.ioctl(fd, REMOVE, bytearray(spec(ident) + bytes(24)))
        out["remove"] = "ok"
    except OSError as e:
        out["remove"] = errno.errorcode[e.errno]
    # the request with bits above the 32 the kernel reads
    libc = __import__("ctypes").CDLL(None, use_errno=True)
    arg = __import__("ctypes").create_string_buffer(spec(ident) + bytes(24))
    r = libc.ioctl(fd, __import__("ctypes").c_ulong(REMOVE | (1 << 32)), arg)
    out["remove_high"] = "ok" if r == 0 else errno.errorcode[__import__("ctypes").get_errno()]
st = bytearray(spec(ident) + bytes(88))
fcntl.ioctl(fd, KEY_STATUS, st)
out["status"] = struct.unpack_from("=I", st, 64)[0]
try:
    with open(os.path.join(enc, "file")) as f:
        out["file"] = f.read()
except OSError as e:
    out["file"] = errno.errorcode[e.errno]
print(json.dumps(out))
"""

# An ext4 with encryption of the test's own, in a mount namespace of its
# own: the encrypted folder outside the project (read-only in the box);
# the box's JSON, then the host's look at the key once it ended. Exit 99
# when it cannot be made.
FSCRYPT_WORLD = "; ".join([
    'truncate -s 64M "$0/e.img" && mkfs.ext4 -q -F -O encrypt "$0/e.img" && mkdir "$0/m" && '
    'mount -o loop "$0/e.img" "$0/m" || exit 99',
    'chmod 755 "$0/m" && mkdir "$0/m/proj" && py="$1" && shift && '
    '"$py" -c "$FSCRYPT" add "$0/m/enc" || exit 99',
    '(cd "$0/m/proj" && "$@")',
    '"$py" -c "$FSCRYPT" look "$0/m/enc"'])


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("mkfs.ext4") is None,
                    reason="needs unshare(1) and mkfs.ext4")
def test_the_hosts_encryption_keys_cannot_be_removed(sluice_bin, proj):
    """A file system's encryption keys (fscrypt, v2) are removed by the
    user who added them, with no capability, through any descriptor on the
    file system, a folder opened read-only on a read-only mount of the box
    included: a box started as root removed the key root added on the host,
    and the host's encrypted folder was locked (before: 'ok', the key's
    status 3, the file 'ENOKEY' on the host). The fscrypt key ioctls fail
    with EOPNOTSUPP (a file system without encryption), whatever the bits
    above the 32 the kernel reads the request from; the host's file stays
    readable."""
    pol = _policy(proj)
    env = dict(_clean_env(), FSCRYPT=FSCRYPT)
    argv = (["unshare", "-m", "--propagation", "private", "sh", "-c", FSCRYPT_WORLD, proj, PY,
             sluice_bin, "run", "--policy", pol, "--", PY, "-c", FSCRYPT, "remove",
             os.path.join(proj, "m", "enc")])
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=proj, env=env)
    if p.returncode == 99 or "unshare:" in p.stderr:
        pytest.skip("cannot make and mount an encrypted ext4 here: %s" % p.stderr.strip())
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 2, (p.stdout, p.stderr)
    box, host = lines
    eopnotsupp = errno.errorcode[errno.EOPNOTSUPP]  # Python names it ENOTSUP
    assert box == {"remove": eopnotsupp, "remove_high": eopnotsupp, "status": 2,
                   "file": "kept"}, box
    assert host == {"status": 2, "file": "kept"}, host


# --------------------------------------------------------------------------
# userfaultfd: page faults held in user space

USERFAULTFD = PRELUDE + r"""
import platform
NR = {"x86_64": 323, "aarch64": 282}[platform.machine()]
UFFD_USER_MODE_ONLY = 1
for name, flags in (("user_mode_only", UFFD_USER_MODE_ONLY), ("any", 0)):
    fd = libc.syscall(ctypes.c_long(NR), ctypes.c_long(flags | os.O_CLOEXEC))
    out[name] = cerr(fd)
py("dev", lambda: os.close(os.open("/dev/userfaultfd", os.O_RDWR)))
print(json.dumps(out))
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"),
                    reason="userfaultfd(2)'s number known for x86_64 and aarch64 only")
@pytest.mark.parametrize("user", [ROOT, NOBODY])
def test_userfaultfd_is_refused(sluice_bin, proj, user):
    """userfaultfd holds a page fault of the process's own memory until
    its handler answers: of no use to an agent, and the tool kernel
    exploits use to stop the kernel mid-copy and widen a race (with
    vm.unprivileged_userfaultfd 0, the default, any process may still make
    one for faults in user space). It fails with ENOSYS, as on a kernel
    without it (before: 'ok' for UFFD_USER_MODE_ONLY), and /dev/userfaultfd
    is not in the box's /dev."""
    pol = _policy(proj)
    _own(proj, user)
    o = _out(_run(sluice_bin, ["--policy", pol], [PY, "-c", USERFAULTFD], proj, user=user))
    assert o == {"user_mode_only": "ENOSYS", "any": "ENOSYS", "dev": "ENOENT"}, o


# --------------------------------------------------------------------------
# the terminal: exclusive mode

# In the box, on its standard input (the terminal): TIOCEXCL, by its
# number and with bits above the 32 the kernel reads.
TTY_EXCL = r"""
import errno, fcntl, json, termios
out = {}
for name, req in (("tiocexcl", termios.TIOCEXCL), ("tiocexcl_high", termios.TIOCEXCL | (1 << 32))):
    try:
        fcntl.ioctl(0, req)
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
print(json.dumps(out))
"""


def _open_as_nobody(path):
    """Whether a process of nobody's, without CAP_SYS_ADMIN, opens the
    terminal <path> for reading and writing: "ok" or the errno's name."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.close(os.open(path, os.O_RDWR | os.O_NOCTTY))
            os._exit(0)
        except OSError as e:
            os._exit(e.errno)
        finally:
            os._exit(255)
    code = os.WEXITSTATUS(os.waitpid(pid, 0)[1])
    return "ok" if code == 0 else errno.errorcode.get(code, str(code))


def test_the_terminal_is_not_left_exclusive(sluice_bin, proj):
    """ioctl(TIOCEXCL) puts a terminal in exclusive mode, which outlasts the
    box: every later open of it but by CAP_SYS_ADMIN fails with EBUSY, so
    the user's ssh or gpg asking a passphrase on /dev/tty, an editor or
    pager that opens the terminal again, fail after the box ended (before:
    'ok', then EBUSY for a process of the terminal's owner). It fails with
    EPERM, as TIOCSETD does, whatever the bits above the request's 32."""
    pol = _policy(proj)
    import fcntl
    import termios
    master, slave = os.openpty()
    path = os.ttyname(slave)
    os.fchown(slave, NOBODY, -1)  # a user's terminal, as the user's shell has it

    def ctty():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        before = _open_as_nobody(path)
        p = subprocess.run([sluice_bin, "run", "--policy", pol, "--", PY, "-c", TTY_EXCL],
                           stdin=slave, capture_output=True, text=True, timeout=30, cwd=proj,
                           env=_clean_env(), start_new_session=True, preexec_fn=ctty)
        after = _open_as_nobody(path)
    finally:
        os.close(slave)
        os.close(master)
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    assert (before, after) == ("ok", "ok"), p.stdout
    assert _out(p) == {"tiocexcl": "EPERM", "tiocexcl_high": "EPERM"}, p.stdout


# In the box, on its standard input (the terminal): tcflow(TCOON), which
# stops nothing, then tcflow(TCOOFF), last.
TTY_OUTPUT_OFF = r"""
import errno, fcntl, json, termios
out = {}
for name, action in (("tcoon", termios.TCOON), ("tcooff", termios.TCOOFF)):
    try:
        termios.tcflow(0, action)
        out[name] = "ok"
    except termios.error as e:  # (errno, text), not an OSError
        out[name] = errno.errorcode[e.args[0]]
print(json.dumps(out))
"""


def test_the_terminals_output_is_not_left_stopped(sluice_bin, proj):
    """tcflow(TCOOFF) (ioctl TCXONC) stops a terminal's output, and it stays
    stopped after the box: only TCOON starts it again, not the user's ^Q,
    so the shell's next prompt, a write to the terminal, waits for ever
    (before: 'ok', then a write to the terminal after run ended EAGAIN on
    a non-blocking descriptor, nothing reaching the terminal's other end).
    TCOOFF fails with EPERM; TCOON stays."""
    pol = _policy(proj)
    import fcntl
    import select
    import termios
    master, slave = os.openpty()

    def ctty():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        p = subprocess.run([sluice_bin, "run", "--policy", pol, "--", PY, "-c", TTY_OUTPUT_OFF],
                           stdin=slave, capture_output=True, text=True, timeout=30, cwd=proj,
                           env=_clean_env(), start_new_session=True, preexec_fn=ctty)
        os.set_blocking(slave, False)
        try:
            wrote = os.write(slave, b"prompt$ ")
        except BlockingIOError:
            wrote = "EAGAIN"
        # what was written is at the other end at once, or never
        shown = os.read(master, 64) if select.select([master], [], [], 10)[0] else b""
    finally:
        os.close(slave)
        os.close(master)
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr
    assert (wrote, shown) == (8, b"prompt$ "), p.stdout
    assert _out(p) == {"tcoon": "ok", "tcooff": "EPERM"}, p.stdout


# In the box: its standard input, output and error made non-blocking (and
# O_ASYNC: SIGIO on each change), then what they are now.
STD_NONBLOCK = r"""
import fcntl, json, os
for fd in (0, 1, 2):
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK | fcntl.FASYNC)
print(json.dumps({"set": [bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK) for fd in (0, 1, 2)]}))
"""


def _status_flags(fd):
    import fcntl
    fl = fcntl.fcntl(fd, fcntl.F_GETFL)
    return {"nonblock": bool(fl & os.O_NONBLOCK), "async": bool(fl & fcntl.FASYNC)}


def test_the_callers_descriptors_are_not_left_non_blocking(sluice_bin, proj):
    """A terminal, pipe or socket given as standard input, output or error
    reaches the command as it came: the same open file description as the
    caller's, whose status flags fcntl(F_SETFL) changes for every holder.
    The command made them non-blocking (and O_ASYNC), and they stayed so
    after run exited (before: all three True): the caller's next read of
    the terminal (`sluice run ...; read answer`, a pager, a prompt) or
    write into the pipe failed with EAGAIN. run puts back the flags they
    had before the box once it has ended."""
    pol = _policy(proj)
    master, slave = os.openpty()
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    try:
        p = subprocess.run([sluice_bin, "run", "--policy", pol, "--", PY, "-c", STD_NONBLOCK],
                           stdin=slave, stdout=w1, stderr=w2, timeout=30, cwd=proj,
                           env=_clean_env())
        os.close(w1)
        os.close(w2)
        w1 = w2 = -1
        out = os.read(r1, 65536).decode()
        err = os.read(r2, 65536).decode()
        after = [_status_flags(fd) for fd in (slave, r1, r2)]
    finally:
        for fd in (master, slave, r1, r2, w1, w2):
            if fd >= 0:
                os.close(fd)
    for mark in SANITIZER_MARKS:
        assert mark not in err, err
    assert json.loads(out.splitlines()[0]) == {"set": [True, True, True]}, (out, err)
    assert p.returncode == 0, err
    clear = {"nonblock": False, "async": False}
    assert after == [clear, clear, clear], err


# In the box: standard error (a pipe run's caller reads late) made
# non-blocking and filled, then "filled" on standard output.
FILL_STDERR = r"""
import fcntl, os
fcntl.fcntl(2, fcntl.F_SETFL, fcntl.fcntl(2, fcntl.F_GETFL) | os.O_NONBLOCK)
try:
    for _ in range(100000):
        os.write(2, b"x" * 4096)
except BlockingIOError:
    pass
os.write(1, b"filled\n")
"""


def _blocked_in_pipe_write(pid):
    try:
        with open("/proc/%d/wchan" % pid) as f:
            return f.read().endswith("pipe_write")
    except OSError:
        return False


def test_the_summary_reaches_a_full_standard_error_made_non_blocking(sluice_bin, proj):
    """The command made standard error, a pipe whose reader is slow (a CI
    log, `2>&1 | less`), non-blocking and left it full: run's summary,
    written into it, failed with EAGAIN and was lost without a word, run
    exiting 0 (before: no summary). run puts back the flags the pipe had
    and waits for the reader, as without the box. The test reads standard
    error once run has ended or waits in that write."""
    pol = _policy(proj)
    r, w = os.pipe()
    p = subprocess.Popen([sluice_bin, "run", "--policy", pol, "--", PY, "-c", FILL_STDERR],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=w, cwd=proj,
                         env=_clean_env())
    os.close(w)
    try:
        assert p.stdout.readline() == b"filled\n"
        for _ in range(600):  # 30 s at most: run has ended, or waits to write
            if p.poll() is not None or _blocked_in_pipe_write(p.pid):
                break
            time.sleep(0.05)
        data = b""
        while True:
            d = os.read(r, 1 << 20)
            if not d:
                break
            data += d
        rc = p.wait(timeout=30)
    finally:
        os.close(r)
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
    tail = data.replace(b"x" * 4096, b"").decode(errors="replace")
    for mark in SANITIZER_MARKS:
        assert mark not in tail, tail
    assert rc == 0, tail
    assert "sluice run: exit 0; allowed 0" in tail, tail


# In the box: makes <path>/authorized_keys, where a --hide path that did not
# exist was (a key of the agent's for the next ssh login as the user).
MAKE_HIDDEN = r"""
import json, os, sys
out = {}
try:
    os.makedirs(sys.argv[1])
    with open(os.path.join(sys.argv[1], "authorized_keys"), "w") as f:
        f.write("ssh-ed25519 AAAA agent\n")
    out["made"] = "ok"
except OSError as e:
    out["made"] = e.__class__.__name__
print(json.dumps(out))
"""


def test_a_missing_hidden_path_the_command_can_make_is_warned_about(sluice_bin, proj):
    """A --hide path that does not exist is ignored, there being nothing to
    hide; but below a writable path (the working directory as a home, a
    --rw) the command can make it and leave there what the user's tools
    trust after the box (an ~/.ssh/authorized_keys, an ~/.aws/config that
    runs a program): run says so (before: not a word, 'made' ok). One out
    of the command's reach (a read-only folder), and one that exists, are
    not named."""
    pol = _policy(proj)
    ssh = os.path.join(proj, ".ssh")
    there = os.path.join(proj, ".aws")
    os.mkdir(there)
    ro = os.path.join(proj, "ro")
    os.mkdir(ro)
    far = os.path.join(ro, ".kube")
    p = _run(sluice_bin, ["--policy", pol, "--ro", ro, "--hide", ssh, "--hide", there,
                          "--hide", far], [PY, "-c", MAKE_HIDDEN, ssh], proj)
    assert _out(p) == {"made": "ok"}, p.stderr
    warned = [ln for ln in p.stderr.splitlines() if "warning: --hide" in ln]
    assert warned == ["sluice run: warning: --hide %s does not exist, and lies below the writable "
                      "%s: there is nothing to hide, but the agent can make it and leave there "
                      "what your tools will trust after the box (an authorized_keys, a config "
                      "that runs a program): make it first (mkdir) to have it hidden"
                      % (ssh, proj)], p.stderr
    assert p.returncode == 0, p.stderr
