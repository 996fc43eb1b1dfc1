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
  /usr/bin/python3 -c '%(other_processes)s'
  true; echo "plain $?"
} > %(out)s/probe.tmp 2>&1
mv %(out)s/probe.tmp %(out)s/probe
"""


# The calls that reach into another process (x86_64 numbers, as keyctl's
# above): kcmp(2), pidfd_getfd(2), process_madvise(2) on the probe itself,
# and the mount API's open_tree_attr(2) (Linux 6.15: without a clone or
# attributes it opens "/" as O_PATH would, ENOSYS on an older kernel),
# each printed with its errno (0: it worked). Unfiltered, none is EPERM.
OTHER_PROCESSES = r"""import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(*a):
    return 0 if libc.syscall(*a) >= 0 else ctypes.get_errno()
me = os.getpid()
pidfd = libc.syscall(434, me, 0)
class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
page = (ctypes.c_char * 4096)()
iov = Iovec(ctypes.cast(page, ctypes.c_void_p), 4096)
print("kcmp", call(312, me, me, 0, 0, 0))
print("pidfd_getfd", call(438, pidfd, 0, 0))
print("process_madvise", call(440, pidfd, ctypes.byref(iov), 1, 20, 0))
print("open_tree_attr", call(467, -100, b"/", 0, None, 0))"""
OTHER_CALLS = ("kcmp", "pidfd_getfd", "process_madvise", "open_tree_attr")


def probe_script(out):
    return PROBE % {"out": out, "other_processes": OTHER_PROCESSES}


def test_serving_gateway_and_its_sinks_are_filtered(gateway, net, tmp_path):
    # control: outside the gateway, the same probe may make namespaces here
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    subprocess.run(["sh", write_script(str(tmp_path / "ctl.sh"), probe_script(ctl))],
                   stdin=subprocess.DEVNULL, timeout=20, check=True)
    control = dict(line.split() for line in (ctl / "probe").read_text().split("\n") if line.strip())
    if control["userns"] != "0" or control["netns"] != "0":
        pytest.skip("this machine refuses namespaces anyway: %r" % control)
    out = tmp_path / "out"
    out.mkdir()
    prog = write_script(str(tmp_path / "probe.sh"), probe_script(out))
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
    for call in OTHER_CALLS:
        assert control[call] != "1", control  # not refused outside the gateway
        assert res[call] == "1", got  # EPERM
    # the gate still reloads and serves
    gw.reload()
    poll(lambda: "reloaded" in gw.stderr() or None, timeout=5, what="the reload")
    assert request(gw, "GET", net.url("/y")).status == 200
    assert set(seccomp_modes(gw.proc.pid)) == {"2"}
    gw.stop()



# Runs argv[2:] as the leader of a session of its own whose controlling
# terminal is the pty argv[1], as a gateway started in an operator's
# terminal runs (its programs in its session).
WITH_TTY = ("import fcntl, os, sys, termios\n"
            "os.setsid()\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "fcntl.ioctl(fd, termios.TIOCSCTTY, 0)\n"
            "os.execv(sys.argv[2], sys.argv[2:])\n")

# Types a space into the controlling terminal (TIOCSTI) and writes the
# errno (0: it was typed) to <out>/tiocsti.
TYPE_INTO_TTY = r"""#!/bin/sh
cat > /dev/null
/usr/bin/python3 -c 'import fcntl, os, termios
try:
    fcntl.ioctl(os.open("/dev/tty", os.O_RDWR), termios.TIOCSTI, b" ")
    print(0)
except OSError as e:
    print(e.errno)' > %(out)s/tiocsti.tmp 2>&1
mv %(out)s/tiocsti.tmp %(out)s/tiocsti
"""


def test_programs_of_a_gateway_in_a_terminal_cannot_type_into_it(gateway, net, tmp_path):
    # Started as root in a terminal, with --user, the gateway keeps that
    # terminal: TIOCSTI would let code that took it over as USER type a
    # command line that the root shell runs once the gateway exits.
    def tty_prefix():
        master, slave = os.openpty()
        masters.append(master)
        name = os.ttyname(slave)
        os.close(slave)
        return ["/usr/bin/python3", "-c", WITH_TTY, name]
    masters = []
    try:
        ctl = tmp_path / "ctl"
        ctl.mkdir()
        subprocess.run(tty_prefix() + ["/bin/sh", write_script(str(tmp_path / "ctl.sh"),
                                                               TYPE_INTO_TTY % {"out": ctl})],
                       stdin=subprocess.DEVNULL, timeout=20, check=True)
        control = (ctl / "tiocsti").read_text().strip()
        if control != "0":
            pytest.skip("TIOCSTI is refused here anyway: errno %s" % control)
        out = tmp_path / "out"
        out.mkdir()
        prog = write_script(str(tmp_path / "type.sh"), TYPE_INTO_TTY % {"out": out})
        af = str(tmp_path / "alerts.jsonl")
        pol = net.policy([api_rule(net)], alerts={"first_contact": True, "sinks": [{"exec": prog}]})
        gw = gateway(pol, args=["--alerts", af], prefix=tty_prefix())
        assert request(gw, "GET", net.url("/x")).status == 200
        wait_alert(af, "first_contact")
        got = poll(lambda: (out / "tiocsti").exists() and (out / "tiocsti").read_text() or None,
                   timeout=10, what="the program's result")
        assert got.strip() == "1", got  # EPERM
        gw.stop()
    finally:
        for m in masters:
            os.close(m)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_root_without_cap_sys_admin_is_filtered(gateway, net):
    # A container's root (Docker's default capabilities have no
    # CAP_SYS_ADMIN) may load a filter only with no_new_privs: without it
    # the kernel refused the filter and the gateway served unfiltered.
    gw = gateway(net.policy([api_rule(net)]),
                 prefix=["setpriv", "--bounding-set", "-sys_admin", "--"])
    poll(lambda: "sluice: serving " in gw.stderr() or None, timeout=10, what="serving")
    with open("/proc/%d/status" % gw.proc.pid) as f:
        cap_eff = [int(ln.split()[1], 16) for ln in f if ln.startswith("CapEff:")][0]
    assert cap_eff & (1 << 21) == 0  # CAP_SYS_ADMIN: not the gateway's
    assert "cannot load the filter" not in gw.stderr(), gw.stderr()
    assert set(seccomp_modes(gw.proc.pid)) == {"2"}
    assert request(gw, "GET", net.url("/x")).status == 200


I386_EXIT = """.globl _start
_start:
  mov $20, %eax
  int $0x80
  mov $1, %eax
  mov $7, %ebx
  int $0x80
"""


def i386_program(tmp_path):
    """A static i386 program (getpid, then exit 7) built with the GNU
    assembler and linker, or None where they or the kernel's 32-bit
    emulation are missing."""
    src, obj, prog = (str(tmp_path / n) for n in ("exit7.s", "exit7.o", "exit7"))
    with open(src, "w") as f:
        f.write(I386_EXIT)
    try:
        subprocess.run(["as", "--32", src, "-o", obj], check=True, capture_output=True)
        subprocess.run(["ld", "-m", "elf_i386", obj, "-o", prog], check=True,
                       capture_output=True)
        if subprocess.run([prog]).returncode != 7:
            return None
    except (OSError, subprocess.CalledProcessError):
        return None
    return prog


def test_a_32_bit_alert_program_is_killed(gateway, net, tmp_path):
    # The filter knows the calls of the native architecture only: a call of
    # another one (an i386 program on x86_64) kills the process, SIGSYS, as
    # docs/SPEC.md says (Lockdown); the box's filter does the same.
    prog = i386_program(tmp_path)
    if prog is None:
        pytest.skip("no i386 program can be built or run here")
    gw = gateway(net.policy([api_rule(net)], alerts={"first_contact": True,
                                                     "sinks": [{"exec": prog}]}))
    assert request(gw, "GET", net.url("/first")).status == 200
    said = "sluice: alert sink exec %s: killed by signal 31" % prog
    poll(lambda: said in gw.stderr() or None, timeout=10, what="the kill of the alert program")
