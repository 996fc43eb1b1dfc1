"""serve --user: started as root, the gateway binds and opens what it needs,
then serves as an unprivileged user (every id, one group, no_new_privs, no
capabilities), and its alert programs and state store work as that user.
Runs only as root (the CI machines are); loopback only."""

import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile

import pytest

from conftest import SANITIZER_MARKS, Gateway, policy_yaml
from gate_client import api_rule, poll, request
from gate_servers import free_port
from watch_helpers import hold_exclusive, stored_contacts, wait_alert, write_script

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to change user")

NOBODY = 65534


def proc_status(pid):
    """{field: value} from /proc/<pid>/status."""
    with open("/proc/%d/status" % pid) as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def wait_serving(gw):
    """The listeners accept as soon as they are bound; the switch of user,
    and the "serving" line, come a moment later."""
    poll(lambda: "sluice: serving " in gw.stderr() or None, timeout=10, what="serving")


@pytest.fixture
def open_dir():
    """A work directory that other users may read (pytest's are 0700)."""
    d = tempfile.mkdtemp(prefix="sluice-user-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def serve_in(sluice_bin, net):
    """Factory: serve_in(dir, policy, args) starts `sluice serve` with its
    files in <dir>; stopped and checked for sanitizer reports at teardown."""
    started = []

    def start(workdir, policy, args=(), env=None):
        port = free_port()
        gw = Gateway(sluice_bin, workdir, policy_yaml(policy), ["127.0.0.1:%d" % port], env,
                     list(args), False, port, None)
        started.append(gw)
        gw.wait_ready()
        wait_serving(gw)
        return gw

    yield start
    for gw in started:
        stopped = gw.kill()
        assert stopped is None, stopped + "\n" + gw.stderr()[-4000:]
        assert not any(m in gw.stderr() for m in SANITIZER_MARKS), gw.stderr()[-4000:]


def test_serves_as_the_user_once_bound(open_dir, serve_in, net):  # open_dir outlives serve_in
    out = os.path.join(open_dir, "out")
    os.mkdir(out)
    os.chmod(out, 0o777)
    prog = write_script(os.path.join(open_dir, "who.sh"),
                        "#!/bin/sh\ncat >/dev/null\nid -u > %s/id.tmp; id -G >> %s/id.tmp\n"
                        "mv %s/id.tmp %s/id\n" % (out, out, out, out))
    af = os.path.join(open_dir, "alerts.jsonl")
    state = os.path.join(open_dir, "state")
    pol = net.policy([api_rule(net)], alerts={"first_contact": True, "sinks": [{"exec": prog}]})
    gw = serve_in(open_dir, pol, ["--user", "nobody", "--alerts", af, "--state", state])

    st = proc_status(gw.proc.pid)
    assert st["Uid"].split() == [str(NOBODY)] * 4
    assert st["Gid"].split() == [str(NOBODY)] * 4
    assert st["Groups"].split() == [str(NOBODY)]
    assert st["NoNewPrivs"] == "1" and int(st["CapEff"], 16) == 0
    assert "as nobody" in gw.stderr() and "running as root" not in gw.stderr()
    # the log and alerts were opened as root (0755 folder): they stay open
    assert "user nobody cannot write %s" % gw.log_path in gw.stderr()

    assert request(gw, "GET", net.url("/first")).status == 200
    assert wait_alert(af, "first_contact")[0]["host"] == "api.example.test"
    who = poll(lambda: os.path.exists(os.path.join(out, "id")) and
               open(os.path.join(out, "id")).read().split() or None,
               timeout=10, what="the alert program's ids")
    assert who == [str(NOBODY), str(NOBODY)]  # not root, no other group

    gw.reload()  # the policy is readable by nobody: the reload works
    poll(lambda: "reloaded 1 rule" in gw.stderr() or None, timeout=5, what="the reload")
    assert request(gw, "GET", net.url("/after")).status == 200
    gw.stop()
    assert len(gw.events("agent_egress")) == 2
    # the state store kept working after the switch
    with sqlite3.connect(os.path.join(state, "sluice.db")) as db:
        assert db.execute("select count(*) from first_contact").fetchone()[0] == 1


def test_a_locked_store_only_root_may_open_ends_its_tries_as_the_user(gateway, net, tmp_path):
    # README --state: a store locked at start is tried again in the
    # background, under --user as that user, once the gateway left root; a
    # DIR only root may open (pytest's folders are 0700) then ends the tries
    # as a failed open does at a start, and the gateway serves on without it
    statedir = str(tmp_path / "state")
    policy = net.policy([api_rule(net)], alerts={"first_contact": True})
    gw = gateway(policy, args=["--state", statedir])  # made as root
    gw.stop()
    holder = hold_exclusive(statedir)
    try:
        gw = gateway(policy, args=["--state", statedir, "--user", "nobody"])
        poll(lambda: "trying again in the background" in gw.stderr() or None, timeout=10,
             what="the locked store told")
        assert proc_status(gw.proc.pid)["Uid"].split() == [str(NOBODY)] * 4
    finally:
        holder.rollback()
        holder.close()
    poll(lambda: "running without a state store" in gw.stderr() or None, timeout=40,
         what="the tries ended")
    assert "/sluice.db: opened" not in gw.stderr(), gw.stderr()
    assert "Permission denied; running without a state store" in gw.stderr(), gw.stderr()
    assert request(gw, "GET", net.url("/still")).status == 200
    gw.decided(path="/still")
    gw.stop()
    assert stored_contacts(statedir) == []


def test_unreadable_policy_is_said_at_start(gateway, net):
    # pytest's folder is 0700: nobody cannot read the policy, which is said
    # at start; a reload fails, the policy loaded as root stays in force.
    gw = gateway(net.policy([api_rule(net)]), args=["--user", "nobody"])
    poll(lambda: "user nobody cannot read the policy %s" % gw.policy_path in gw.stderr()
         or None, timeout=5, what="the warning")
    gw.reload()
    poll(lambda: "sluice: reload failed: " in gw.stderr() or None, timeout=5,
         what="the failed reload")
    assert "reloaded" not in gw.stderr()
    assert request(gw, "GET", net.url("/still")).status == 200


def test_a_file_nobody_can_write_is_named_escaped(gateway, net, tmp_path):
    # the --log path, the operator's, was printed as it was: a line end and
    # a terminal escape in it wrote lines of their own into standard error
    log = str(tmp_path / "log\n\033[31m.jsonl")
    gw = gateway(net.policy([api_rule(net)]), args=["--user", "nobody", "--log", log])
    shown = str(tmp_path / "log\\012\\033[31m.jsonl")
    poll(lambda: "user nobody cannot write %s (" % shown in gw.stderr() or None, timeout=5,
         what="the warning")
    assert "\033" not in gw.stderr(), gw.stderr()


def test_root_without_user_is_warned(gateway, net):
    gw = gateway(net.policy([api_rule(net)]))
    wait_serving(gw)
    assert "warning: running as root; --user USER" in gw.stderr()


def test_user_errors(run_sluice, sluice_bin, net, open_dir):
    pol = os.path.join(open_dir, "p.yaml")
    with open(pol, "w") as f:
        f.write(policy_yaml(net.policy([api_rule(net)])))
    os.chmod(pol, 0o644)
    listen = "127.0.0.1:%d" % free_port()
    for spec, why in (("no-such-user", "no user 'no-such-user'"),
                      ("nobody:no-such-group", "no group 'no-such-group'"),
                      ("nobody:", "'nobody:': expected USER or USER:GROUP"),
                      ("4294967295", "no user '4294967295'")):
        r = run_sluice("serve", "--policy", pol, "--listen", listen, "--user", spec)
        assert r.returncode == 2 and "--user: " + why in r.stderr, r.stderr
    # not root: only the user it already is
    as_nobody = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups",
                 "--", sluice_bin, "serve", "--policy", pol, "--listen", listen, "--log",
                 "/dev/null"]
    r = subprocess.run(as_nobody + ["--user", "daemon"], capture_output=True, text=True,
                       timeout=20, cwd=open_dir)
    # a usage error, told before the policy is read and anything bound, as
    # run's --gateway-user: it was "cannot become user daemon: ..." once
    # the listeners were bound, without the usage line
    assert r.returncode == 2 and r.stderr.split("\n")[0] == \
        "sluice serve: --user daemon: not running as root", r.stderr
    assert r.stderr.split("\n")[1].startswith("usage: sluice serve "), r.stderr


def test_not_root_with_other_groups_is_not_served_as_the_user(sluice_bin, net, open_dir):
    # Not root, --user naming the user it already is was taken as done: the
    # gateway said it served "as nobody" with the supplementary groups it
    # was started with (here adm), which --user promises to drop and which
    # only root can drop.
    pol = os.path.join(open_dir, "p.yaml")
    with open(pol, "w") as f:
        f.write(policy_yaml(net.policy([api_rule(net)])))
    os.chmod(pol, 0o644)
    serve = [sluice_bin, "serve", "--policy", pol, "--listen", "127.0.0.1:%d" % free_port(),
             "--log", "/dev/null", "--user", "nobody"]
    as_nobody = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY)]
    errf = os.path.join(open_dir, "stderr.txt")

    def start(groups):
        """The gateway's stderr once it has exited or said it serves."""
        with open(errf, "w") as err:
            proc = subprocess.Popen(as_nobody + groups + ["--"] + serve, stderr=err, cwd=open_dir)
        try:
            poll(lambda: proc.poll() is not None or "sluice: serving" in open(errf).read(),
                 timeout=20, what="an exit or the serving line")
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=20)
        return proc.returncode, open(errf).read()

    rc, err = start(["--groups", "4"])
    assert "sluice: serving" not in err and rc == 2, err
    assert ("sluice serve: --user nobody: not running as root, and its supplementary groups "
            "(4) cannot be dropped\nusage: sluice serve ") in err, err
    rc, err = start(["--clear-groups"])  # with no other group, the same user is accepted
    assert "sluice: serving 1 rule on" in err and " as nobody" in err, err


def test_another_users_live_socket_is_not_taken_over(sluice_bin, net, open_dir):
    # Started as nobody on the path of root's live socket (mode 0600) in a
    # directory every user may write: connect() fails with EACCES, which was
    # taken for a stale socket, so the gateway removed root's socket file and
    # listened there itself. Only a refused connection says nothing serves.
    pol = os.path.join(open_dir, "p.yaml")
    with open(pol, "w") as f:
        f.write(policy_yaml(net.policy([api_rule(net)])))
    os.chmod(pol, 0o644)
    shared = os.path.join(open_dir, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)  # not sticky: nobody may remove root's files here
    sock = os.path.join(shared, "root.sock")
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        other.bind(sock)
        other.listen(1)
        os.chmod(sock, 0o600)
        ino = os.stat(sock).st_ino
        r = subprocess.run(["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY),
                            "--clear-groups", "--", sluice_bin, "serve", "--policy", pol,
                            "--listen", "unix:" + sock, "--log", "/dev/null"],
                           capture_output=True, text=True, timeout=20, cwd=open_dir)
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert ("sluice serve: --listen unix:%s: in use by another server (connect: Permission denied)"
                % sock) in r.stderr.splitlines(), r.stderr
        assert os.stat(sock).st_ino == ino
    finally:
        other.close()


def test_a_socket_the_user_cannot_remove_is_said_at_start(open_dir, serve_in, net):
    # A unix socket bound as root in a folder only root may change: the
    # gateway, nobody by then, cannot remove it at exit, where SPEC.md says
    # it removes its socket file; that went unsaid.
    sock = os.path.join(open_dir, "gw.sock")
    gw = serve_in(open_dir, net.policy([api_rule(net)]),
                  ["--user", "nobody", "--listen", "unix:" + sock])
    assert ("sluice serve: warning: user nobody cannot remove the socket %s at exit "
            "(Permission denied): it stays, and the next start replaces it" % sock) in gw.stderr()
    gw.stop()
    assert os.path.exists(sock)


SUID_DUMPABLE = "/proc/sys/fs/suid_dumpable"


@pytest.mark.serial  # fs.suid_dumpable is the machine's: no other test may run meanwhile
@pytest.mark.skipif(not os.access(SUID_DUMPABLE, os.W_OK), reason="fs.suid_dumpable is not writable")
def test_not_dumpable_after_the_switch_whatever_suid_dumpable_says(gateway, net):
    # The kernel clears the dumpable flag on a change of ids only as
    # fs.suid_dumpable says: with 1, the gateway would stay dumpable, and any
    # process of nobody could ptrace it or read its memory and environment
    # (the tokens). Its /proc files belong to root only when it is not.
    with open(SUID_DUMPABLE) as f:
        was = f.read().strip()
    try:
        with open(SUID_DUMPABLE, "w") as f:
            f.write("1")
        gw = gateway(net.policy([api_rule(net)]), args=["--user", "nobody"])
        wait_serving(gw)
    finally:
        with open(SUID_DUMPABLE, "w") as f:
            f.write(was)
    assert "as nobody" in gw.stderr()
    assert proc_status(gw.proc.pid)["Uid"].split() == [str(NOBODY)] * 4
    for name in ("environ", "mem"):
        assert os.stat("/proc/%d/%s" % (gw.proc.pid, name)).st_uid == 0, name


CAP_SYS_ADMIN = 21


def test_user_root_keeps_what_root_has(gateway, net):
    # --user root serves as root, as run's --gateway-user root does: the
    # lockdown then leaves no_new_privs unset for a root with CAP_SYS_ADMIN,
    # so that the set-user-ID programs its exec sinks run keep working, as
    # it does without --user; --user root used to set it all the same.
    if not int(proc_status(os.getpid())["CapEff"], 16) & (1 << CAP_SYS_ADMIN):
        pytest.skip("no CAP_SYS_ADMIN: the lockdown sets no_new_privs itself")
    gw = gateway(net.policy([api_rule(net)]), args=["--user", "root"])
    wait_serving(gw)
    st = proc_status(gw.proc.pid)
    assert st["Uid"].split() == ["0"] * 4 and st["Groups"].split() == ["0"]
    assert st["NoNewPrivs"] == "0"
    assert "as root" in gw.stderr() and "warning: running as root" not in gw.stderr()
    assert request(gw, "GET", net.url("/root")).status == 200


def test_exec_programs_are_looked_at_as_the_user(gateway, net, open_dir, tmp_path):
    """serve --user started as root looked at its exec programs as root: a
    program only root may run (mode 0700, or below a 0700 folder such as
    pytest's) was not warned of, and every alert to it failed `Permission
    denied`. The look at start is the user's now."""
    root_only = write_script(os.path.join(open_dir, "root-only.sh"), "#!/bin/sh\ncat\n")
    os.chmod(root_only, 0o700)
    hidden = write_script(str(tmp_path / "hidden.sh"), "#!/bin/sh\ncat\n")  # 0755, in a 0700 folder
    everyone = write_script(os.path.join(open_dir, "everyone.sh"), "#!/bin/sh\ncat\n")
    pol = net.policy([api_rule(net)], alerts={"sinks": [{"exec": root_only}, {"exec": hidden},
                                                        {"exec": everyone}]})
    gw = gateway(pol, args=["--user", "nobody", "--alerts", str(tmp_path / "a.jsonl")])
    wait_serving(gw)
    told = [ln.split(": ", 2)[2] for ln in gw.stderr().splitlines() if "exec program" in ln]
    assert told == [
        "alerts.sinks[0]: exec program %s cannot be run here (not executable by uid %d: "
        "Permission denied): every alert to it would be lost" % (root_only, NOBODY),
        "alerts.sinks[1]: exec program %s cannot be run here (Permission denied: a directory of "
        "its path is not searchable by uid %d): every alert to it would be lost"
        % (hidden, NOBODY)], gw.stderr()


def test_exec_programs_are_looked_at_as_root_under_user_root(gateway, net, open_dir, tmp_path):
    # --user root runs the programs as root: they are looked at as root
    root_only = write_script(os.path.join(open_dir, "root-only.sh"), "#!/bin/sh\ncat\n")
    os.chmod(root_only, 0o700)
    pol = net.policy([api_rule(net)], alerts={"sinks": [{"exec": root_only}]})
    gw = gateway(pol, args=["--user", "root", "--alerts", str(tmp_path / "a.jsonl")])
    wait_serving(gw)
    assert "exec program" not in gw.stderr(), gw.stderr()


@pytest.mark.parametrize("alerts", ["{log}", "{dir}/./log.jsonl", "{dir}/link.jsonl"],
                         ids=["same path", "other path", "symbolic link"])
def test_a_log_that_is_the_alerts_file_is_warned_of_once(gateway, net, tmp_path, alerts):
    """--log and --alerts naming one file (the same path, or since the
    alerts are the log's stream then, another path to it) is one file the
    user cannot reopen, which was warned of twice, once under each name."""
    log = str(tmp_path / "log.jsonl")
    os.symlink(log, str(tmp_path / "link.jsonl"))
    af = alerts.format(log=log, dir=str(tmp_path))
    gw = gateway(net.policy([api_rule(net)]), args=["--user", "nobody", "--log", log,
                                                    "--alerts", af])
    wait_serving(gw)
    told = [ln for ln in gw.stderr().splitlines() if "user nobody cannot write" in ln]
    assert told == ["sluice serve: warning: user nobody cannot write %s (Permission denied): it "
                    "stays open, but SIGHUP cannot reopen it after a rotation" % log], gw.stderr()
