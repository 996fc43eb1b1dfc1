"""A process as the init (PID 1) of a PID namespace of its own, as a
container's entry point without --init runs, and what its children are:
for the tests that orphans end there, reaped, not as zombies."""

import os


def running(pid):
    """True while <pid> is a process that has not ended (a zombie has)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# Runs argv[1:] as the init (PID 1) of a new PID namespace, as a
# container's entry point runs, passing SIGTERM, SIGINT and SIGHUP on;
# exits with its status. Exits 77 when no PID namespace can be made.
AS_PID1 = r"""
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x20000000) != 0:  # CLONE_NEWPID: the next child is its init
    sys.stderr.write("unshare(CLONE_NEWPID): %s\n" % os.strerror(ctypes.get_errno()))
    sys.exit(77)
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, lambda n, f: os.kill(pid, n))
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def child_pids(pid):
    """The pids of <pid>'s children, of all its threads."""
    found = []
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            found += [int(k) for k in
                      open("/proc/%d/task/%s/children" % (pid, task)).read().split()]
        except OSError:
            continue
    return found


def children_of(pid):
    """<pid>'s children, each with whether it is a zombie."""
    return {k: not running(k) for k in child_pids(pid)}
