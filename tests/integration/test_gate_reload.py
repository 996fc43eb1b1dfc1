"""SIGHUP reloads a large policy in the background: the event loop keeps
answering requests while the new policy is parsed and indexed, the swap
happens on the loop, and signals arriving during a load queue one more."""

import datetime
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from conftest import API_IP, DEAD_IP, policy_yaml
from gate_client import (api_rule, build_request, connect, fd_named, fifo_write_end, open_conn,
                         other_rule, other_url, poll, read_head, read_response, recv_line, request, utc_today)
from gate_servers import (BannerServer, EchoServer, FullListener, ScriptedUpstream,
                          stop_holding_a_banner_tunnel)
from watch_helpers import free_tcp_port

FILLER = 50000  # enough rules that a load takes a visible time


def big_policy(net, rules, tag):
    """YAML for <rules> plus FILLER exact rules (written as text: faster
    than building 50,000 dicts)."""
    head = policy_yaml(net.policy(rules))
    lines = []
    for i in range(FILLER):
        lines.append("  - host: h%d.%s.filler.test\n    ports: [443]\n    tier: 0\n" % (i, tag))
    # the rules list is the first list in net.policy's output: append to it
    marker = "rules:\n"
    at = head.index(marker) + len(marker)
    end = head.index("\nnetwork:", at) + 1
    return head[:end] + "".join(lines) + head[end:]


# A hang guard for a reload to be told: a gateway stopped for 2-5 s (SIGSTOP)
# under two busy loops took over the 10 s this was for the 15th and the 23rd
# of a row of reloads ('timed out after 10.0s waiting for reload 23').
RELOAD_WAIT_S = 60


def reload_count(gw):
    return gw.stderr().count("sluice: reloaded ")


def _faults(pid, tid=None):
    """Minor page faults (proc(5) stat field 10) of <pid>'s thread <tid>,
    or of the whole process (the threads that ended included) without it."""
    where = "/proc/%d/stat" % pid if tid is None else "/proc/%d/task/%d/stat" % (pid, tid)
    with open(where) as f:
        return int(f.read().rsplit(")", 1)[1].split()[10 - 3])


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def test_requests_are_answered_during_a_large_reload(gateway, net):
    # The reload reads the policy from a FIFO whose writer holds it open:
    # the load cannot end before the writer closes it, so a request
    # answered while the FIFO is still open, with no reload told, finished
    # or failed, was answered during the load (a load on the loop, or a
    # loop waiting for it, answers nothing until the load ends). Then the
    # rest of the 50,000-rule file comes and the new policy takes force.
    gw = gateway(net.policy([api_rule(net)]))
    pid, path = gw.proc.pid, gw.policy_path
    assert request(gw, "GET", other_url(net)).status == 403
    text = big_policy(net, [api_rule(net), other_rule(net)], "a").encode()
    held = [text[i * 65536:(i + 1) * 65536] for i in range(3)]
    os.unlink(path)
    os.mkfifo(path)
    gw.reload()
    poll(lambda: fd_named(pid, path), timeout=20, interval=0.01, what="the reload opening the FIFO")
    w = os.open(path, os.O_WRONLY)  # the gateway has it open: no wait
    try:
        for i, piece in enumerate(held):
            # each write gives the reader another 10 s (FIFO_WAIT_S)
            _write_all(w, piece)
            r = request(gw, "GET", net.url("/during%d" % i), timeout=60)
            assert r.status == 200, r.status
            assert "sluice: reload" not in gw.stderr(), gw.stderr()[-2000:]
            assert fd_named(pid, path), "the load ended before the writer did: %s" % (
                gw.stderr()[-2000:])
        assert request(gw, "GET", other_url(net, "/old")).status == 403
        # The parsing and indexing of 50,000 rules, once the file is read,
        # touches megabytes of fresh memory: its page faults are the
        # thread's that does the work, few of them the loop's.
        loop0, all0 = _faults(pid, pid), _faults(pid)
        _write_all(w, text[len(b"".join(held)):])
    finally:
        os.close(w)
    poll(lambda: reload_count(gw) >= 1, timeout=120, interval=0.01,
         what="the 50,000-rule reload")
    loop, total = _faults(pid, pid) - loop0, _faults(pid) - all0
    print("page faults during the load: %d, %d of them on the loop" % (total, loop))
    assert "reloaded %d rules" % (FILLER + 2) in gw.stderr()
    assert request(gw, "GET", other_url(net, "/after")).status == 200
    assert request(gw, "GET", net.url("/after")).status == 200
    assert loop * 10 < total, "the loop took %d of the load's %d page faults" % (loop, total)


def _cpu_ns(pid, tid):
    """The CPU time (ns) thread <tid> of <pid> has run (proc(5) schedstat)."""
    with open("/proc/%d/task/%d/schedstat" % (pid, tid)) as f:
        return int(f.read().split()[0])


def _process_cpu_ns(pid):
    """The CPU time (ns) of the whole process, the threads that ended
    included (proc(5) stat utime and stime, in clock ticks)."""
    with open("/proc/%d/stat" % pid) as f:
        col = f.read().rsplit(")", 1)[1].split()
    return (int(col[11]) + int(col[12])) * 10**9 // os.sysconf("SC_CLK_TCK")


def test_a_replaced_policy_is_freed_off_the_loop(gateway, net):
    # A reload's load runs on a thread of its own; so does the freeing of
    # the policy it replaced, which the next reload's thread does: freeing
    # 50,000 rules took the loop some 10 ms of CPU at each reload (a stall
    # for every connection), 6 % of all a reload costs (55 to 70 ms of
    # 910 to 1050 over 6 reloads, -O3; 4.7 % under ASan), where it is now
    # some 2 ms of it (1.4 %, the swap itself).
    # its start loads 50,000 rules first: a hang guard as long as a reload's
    # (10 s, the default, was passed under seven other test runs)
    gw = gateway(big_policy(net, [api_rule(net)], "a"), start_timeout=120)
    pid = gw.proc.pid
    assert request(gw, "GET", net.url("/warm")).status == 200
    loop0, all0 = _cpu_ns(pid, pid), _process_cpu_ns(pid)
    for k in range(1, 7):
        gw.write_policy(big_policy(net, [api_rule(net)], "g%d" % k))
        gw.reload()
        poll(lambda: reload_count(gw) >= k, timeout=120, what="reload %d" % k)
    loop, total = _cpu_ns(pid, pid) - loop0, _process_cpu_ns(pid) - all0
    print("6 reloads of %d rules: %.1f ms of CPU, %.1f ms of them on the loop"
          % (FILLER, total / 1e6, loop / 1e6))
    assert loop * 40 < total, "the loop took %.1f ms of the reloads' %.1f ms of CPU" % (
        loop / 1e6, total / 1e6)
    assert request(gw, "GET", net.url("/after")).status == 200


def _fifo_writer(path):
    """Opens the FIFO <path> for writing once a load has it open for reading
    (until then the open fails with ENXIO), at most 10 s."""
    return poll(lambda: fifo_write_end(path), timeout=10, interval=0.01,
                what="a load reading %s" % path)


def _feed(fd, text):
    os.set_blocking(fd, True)
    try:
        _write_all(fd, text.encode())
    finally:
        os.close(fd)


def _threads(pid):
    return len(os.listdir("/proc/%d/task" % pid))


def _hup_handled(gw, net):
    """Sends SIGHUP and returns once the loop has handled it: the signal is
    no longer pending, and a request made after that was answered (the
    loop reads the signal's wake-up before the request's events)."""
    gw.reload()

    def pending():
        with open("/proc/%d/status" % gw.proc.pid) as f:
            masks = dict(line.split(":\t") for line in f.read().splitlines() if ":\t" in line)
        return any(int(masks[k], 16) & (1 << (signal.SIGHUP - 1)) for k in ("SigPnd", "ShdPnd"))
    poll(lambda: not pending(), timeout=10, interval=0.01, what="SIGHUP delivered")
    assert request(gw, "GET", net.url("/between")).status == 200


def test_signals_during_a_load_queue_one_more_reload(gateway, net):
    # The policy path is made a FIFO: a load then waits, on its thread, until
    # the test writes the file (at most 10 s), so the two signals sent in
    # between certainly arrive during it, and make one more load, not two
    gw = gateway(net.policy([api_rule(net)]))
    request(gw, "GET", net.url("/before"))
    threads = _threads(gw.proc.pid)
    os.remove(gw.policy_path)
    os.mkfifo(gw.policy_path)
    gw.reload()
    fd = _fifo_writer(gw.policy_path)
    _hup_handled(gw, net)
    _hup_handled(gw, net)
    assert reload_count(gw) == 0, gw.stderr()[-2000:]
    _feed(fd, policy_yaml(net.policy([api_rule(net), other_rule(net)])))
    poll(lambda: reload_count(gw) >= 1, timeout=RELOAD_WAIT_S, what="the first reload")
    # the queued load reads the FIFO again: this second policy drops
    # other.example.test
    _feed(_fifo_writer(gw.policy_path), policy_yaml(net.policy([api_rule(net)])))
    poll(lambda: reload_count(gw) >= 2, timeout=RELOAD_WAIT_S, what="the queued reload")
    assert request(gw, "GET", other_url(net, "/q")).status == 403
    assert request(gw, "GET", net.url("/ok")).status == 200
    # no third load: it would have been started with the second's end,
    # before the requests above were answered, and would wait on the FIFO
    # with a thread of its own
    assert _threads(gw.proc.pid) == threads, os.listdir("/proc/%d/task" % gw.proc.pid)
    assert reload_count(gw) == 2, gw.stderr()[-2000:]
    assert "reload failed" not in gw.stderr(), gw.stderr()[-2000:]
    assert gw.proc.poll() is None


def test_policy_warnings_are_printed_at_start_and_at_each_reload(gateway, net):
    # serve says what sluice check would warn of: at start, and again for
    # the file a reload brings in, before it says it reloaded
    open_ranges = "network.deny_ranges: deny_ranges does not include \"default\""
    gw = gateway(net.policy([api_rule(net)], deny_ranges=["10.0.0.0/8"]))
    err = gw.stderr()
    assert "warning: %s:" % gw.policy_path in err and open_ranges in err, err
    p = net.policy([api_rule(net)])
    p["network"]["encrypted_client_hello"] = "allow"
    gw.write_policy(policy_yaml(p))
    gw.reload()
    poll(lambda: reload_count(gw) >= 1, timeout=RELOAD_WAIT_S, what="the reload")
    err = gw.stderr()
    ech = err.index("network.encrypted_client_hello: a ClientHello that carries")
    assert ech < err.index("sluice: reloaded "), err
    assert err.count(open_ranges) == 1, err  # the new file has no such warning


def test_a_policy_every_user_may_write_is_warned_at_start_and_reload(gateway, net):
    # a policy every user may write is one every agent on the host may widen
    # for itself, in force from the next SIGHUP (a log rotation sends one)
    mode_warning = "the file is writable by every user (mode 0666)"
    gw = gateway(net.policy([api_rule(net)]),
                 prefix=["sh", "-c", 'chmod 0666 policy.yaml && exec "$@"', "sh"])
    err = gw.stderr()
    assert "warning: %s: %s: anyone on this host" % (gw.policy_path, mode_warning) in err, err
    assert "chmod o-w %s" % gw.policy_path in err, err
    # the file a reload reads is judged again: a private one says nothing
    gw.write_policy(policy_yaml(net.policy([api_rule(net)])))
    os.chmod(gw.policy_path, 0o644)
    gw.reload()
    poll(lambda: reload_count(gw) >= 1, timeout=RELOAD_WAIT_S, what="the reload")
    assert gw.stderr().count(mode_warning) == 1, gw.stderr()
    os.chmod(gw.policy_path, 0o666)
    gw.reload()
    poll(lambda: reload_count(gw) >= 2, timeout=RELOAD_WAIT_S, what="the second reload")
    err = gw.stderr()
    assert err.count(mode_warning) == 2, err
    assert err.rindex(mode_warning) < err.rindex("sluice: reloaded "), err


# serve's --policy named through a folder whose name holds a line end and a
# terminal escape (a symbolic link to the gateway's own folder)
ODD_FOLDER = "d\n\033[31mX"
ODD_SHOWN = "d\\012\\033[31mX"


def serve_through_an_odd_folder(gateway, policy):
    """Starts serve on <policy> named as ODD_FOLDER/policy.yaml, its real
    folder writable by every user. Returns the gateway and the path, shown
    \\ooo, that its messages should name."""
    swap = ("import os, sys\n"
            "a = sys.argv[1:]\n"
            "os.chmod('.', 0o777)\n"
            "os.symlink(os.getcwd(), %r)\n"
            "a[a.index('--policy') + 1] = os.path.join(os.getcwd(), %r, 'policy.yaml')\n"
            "os.execv(a[0], a)\n" % (ODD_FOLDER, ODD_FOLDER))
    gw = gateway(policy, prefix=[sys.executable, "-c", swap])
    return gw, os.path.join(gw.workdir, ODD_SHOWN, "policy.yaml")


def test_a_policy_path_is_named_escaped_at_start_and_reload(gateway, net):
    """The operator's --policy path was printed as it was by serve's
    warnings (the loader's, the writable folder's, the expiry ones) and its
    reload messages: a line end and a terminal escape in it forged lines of
    standard error. They are shown \\ooo, as check and the usage errors
    show names."""
    grant = api_rule(net, methods=["POST"], tier=3, owner="alice", expires="9999-12-31")
    gw, shown = serve_through_an_odd_folder(
        gateway, net.policy([grant, api_rule(net)], deny_ranges=["10.0.0.0/8"]))
    gw.reload()
    poll(lambda: reload_count(gw) >= 1, timeout=RELOAD_WAIT_S, what="the reload")
    err = gw.stderr()
    assert "\033" not in err, err
    folder = "warning: %s: its folder %s is writable by every user" % (shown,
                                                                        os.path.dirname(shown))
    assert err.count(folder) == 2, err  # at start and at the reload
    assert "sluice: reloaded 2 rules from %s\n" % shown in err, err
    assert re.search(r"warning: %s:\d+: network\.deny_ranges: " % re.escape(shown), err), err
    assert re.search(r"warning: %s:\d+: rules\[0\]\.expires: " % re.escape(shown), err), err


def test_a_reload_with_many_warnings_keeps_the_writable_folder_warning_whole(gateway, net):
    """At a reload the loader's warnings were written first into the
    buffer both share, and filled it: the writable folder's warning that
    followed was cut to what was left, its reason and line end lost, and
    the next line of standard error ran on from it. It has its room kept."""
    ghosts = [api_rule(net, agents=["ghost%d" % i]) for i in range(300)]
    gw, shown = serve_through_an_odd_folder(gateway, net.policy(ghosts))
    whole = ("warning: %s: its folder %s is writable by every user without the sticky bit "
             "(mode 0777): anyone on this host, an agent included, can replace the policy, in "
             "force from the next SIGHUP (a log rotation sends one); keep it in a folder only "
             "its owner can write\n" % (shown, os.path.dirname(shown)))
    assert gw.stderr().count(whole) == 1, gw.stderr()
    gw.reload()
    poll(lambda: reload_count(gw) >= 1, timeout=RELOAD_WAIT_S, what="the reload")
    err = gw.stderr()
    assert err.count(whole) == 2, err[-3000:]
    assert "more warnings (sluice check lists them)" in err[err.index(whole) + len(whole):], err


def test_a_long_policy_path_keeps_the_writable_folder_warning_whole(gateway, net):
    """A policy 3,000 bytes deep, its folder writable by every user: the
    warning's line is bounded (2 KiB), so the names give way in their middle
    ("...") between two characters, never within one, and its reason and
    line end stay. Here the folders are named with "é", two bytes each."""
    deep = os.path.join(*["\u00e9" * 120] * 12)  # 12 x 240 bytes
    swap = ("import os, sys\n"
            "a = sys.argv[1:]\n"
            "os.makedirs(%r)\n"
            "os.chmod(%r, 0o777)\n"
            "os.symlink(os.path.join(os.getcwd(), 'policy.yaml'), os.path.join(%r, 'p.yaml'))\n"
            "a[a.index('--policy') + 1] = os.path.join(os.getcwd(), %r, 'p.yaml')\n"
            "os.execv(a[0], a)\n" % (deep, deep, deep, deep))
    gw = gateway(net.policy([api_rule(net)]), prefix=[sys.executable, "-c", swap])
    with open(gw.stderr_path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")  # no character cut in two
    lines = [ln for ln in text.splitlines(True) if "is writable by every user" in ln]
    assert len(lines) == 1, text
    line = lines[0]
    assert line.startswith("warning: %s/" % gw.workdir) and "..." in line, line
    assert line.endswith("(mode 0777): anyone on this host, an agent included, can replace the "
                         "policy, in force from the next SIGHUP (a log rotation sends one); keep "
                         "it in a folder only its owner can write\n"), line
    assert ("\u00e9" * 100 + "/p.yaml: its folder ") in line, line
    assert len(line.encode()) < 2048, len(line.encode())


def test_a_policy_linked_into_a_folder_every_user_may_write_is_warned(gateway, net):
    # a symbolic link from a private folder to a file in one that every user
    # may write: anyone can rename another file over the one the link leads
    # to, which the next SIGHUP loads, as if the policy itself were there
    gw = gateway(net.policy([api_rule(net)]),
                 prefix=["sh", "-c", "mkdir open && chmod 0777 open && mv policy.yaml open/p.yaml"
                         ' && ln -s open/p.yaml policy.yaml && exec "$@"', "sh"])
    real = os.path.join(gw.workdir, "open", "p.yaml")
    err = gw.stderr()
    assert ("warning: %s: its folder %s (the link leads to %s) is writable by every user "
            "without the sticky bit (mode 0777)" % (gw.policy_path, os.path.dirname(real), real)
            in err), err
    # the swap it warns of: a reload loads what was renamed over the target
    tmp = real + ".new"
    with open(tmp, "w") as f:
        f.write(policy_yaml(net.policy([api_rule(net), other_rule(net)])))
    os.replace(tmp, real)
    gw.reload()
    poll(lambda: reload_count(gw) >= 1, timeout=RELOAD_WAIT_S, what="the reload")
    assert "sluice: reloaded 2 rules from %s" % gw.policy_path in gw.stderr()
    assert gw.stderr().count("(the link leads to %s)" % real) == 2, gw.stderr()


# a chain of links whose middle one sits in a folder every user may write,
# and a linked folder on the path placed in such a folder: the final
# target's folder is private either way, and was all that was judged. Each:
# its making, the open folder and the link in it the warning names, and a
# policy of the agents' own with the link that leads to it instead
LINK_CHAINS = {
    "a middle link": ("mkdir a b && chmod 0777 a && mv policy.yaml b/real.yaml"
                      " && ln -s ../b/real.yaml a/link2 && ln -s a/link2 policy.yaml",
                      "a", "a/link2", "a/mine.yaml", "mine.yaml"),
    "a linked folder": ("mkdir open priv && chmod 0777 open && mv policy.yaml priv/p.yaml"
                        " && ln -s ../priv open/d && ln -s open/d/p.yaml policy.yaml",
                        "open", "open/d", "open/p.yaml", "."),
}


@pytest.mark.parametrize("chain", sorted(LINK_CHAINS))
def test_a_link_chain_through_a_folder_every_user_may_write_is_warned(gateway, net, chain):
    # anyone can rename another link over the one in the open folder, and so
    # choose what the next SIGHUP loads: the first such folder is named
    setup, folder, entry, mine, mine_link = LINK_CHAINS[chain]
    gw = gateway(net.policy([api_rule(net)]),
                 prefix=["sh", "-c", setup + ' && exec "$@"', "sh"])
    work = os.path.realpath(gw.workdir)
    warning = ("warning: %s: its folder %s (the link leads to %s) is writable by every user "
               "without the sticky bit (mode 0777)"
               % (gw.policy_path, os.path.join(work, folder), os.path.join(work, entry)))
    assert warning in gw.stderr(), gw.stderr()
    # the swap it warns of: a link renamed over the one in the open folder
    with open(os.path.join(work, mine), "w") as f:
        f.write(policy_yaml(net.policy([api_rule(net), other_rule(net)])))
    link = os.path.join(work, entry)
    os.symlink(mine_link, link + ".new")
    os.replace(link + ".new", link)
    gw.reload()
    poll(lambda: reload_count(gw) >= 1, timeout=RELOAD_WAIT_S, what="the reload")
    assert "sluice: reloaded 2 rules from %s" % gw.policy_path in gw.stderr(), gw.stderr()


def test_a_plain_folder_of_the_path_in_a_folder_every_user_may_write_is_warned(gateway, net):
    # policy.yaml -> open/d/p.yaml, d a plain folder (no link) in a folder
    # every user may write without the sticky bit: anyone can rename d away
    # within it (a rename in one folder needs no right on d) and put their
    # own d in its place, which the next SIGHUP loads. Before, no warning.
    gw = gateway(net.policy([api_rule(net)]),
                 prefix=["sh", "-c", "mkdir -p open/d && chmod 0777 open"
                         " && mv policy.yaml open/d/p.yaml && ln -s open/d/p.yaml policy.yaml"
                         ' && exec "$@"', "sh"])
    work = os.path.realpath(gw.workdir)
    warning = ("warning: %s: %s, a folder of its path, lies in %s, which is writable by every "
               "user without the sticky bit (mode 0777): anyone on this host, an agent "
               "included, can rename that folder away and put one of their own in its place"
               % (gw.policy_path, os.path.join(work, "open", "d"), os.path.join(work, "open")))
    assert warning in gw.stderr(), gw.stderr()
    # the swap it warns of: the folder renamed away, another in its place
    os.rename(os.path.join(work, "open", "d"), os.path.join(work, "open", "d.old"))
    os.mkdir(os.path.join(work, "open", "d"))
    with open(os.path.join(work, "open", "d", "p.yaml"), "w") as f:
        f.write(policy_yaml(net.policy([api_rule(net), other_rule(net)])))
    gw.reload()
    poll(lambda: reload_count(gw) >= 1, timeout=RELOAD_WAIT_S, what="the reload")
    assert "sluice: reloaded 2 rules from %s" % gw.policy_path in gw.stderr(), gw.stderr()
    assert gw.stderr().count(warning) == 2, gw.stderr()


def test_a_policy_still_open_for_writing_is_read_once_its_writer_closes_it(gateway, net):
    # a policy written in place (an editor, "cat new > policy.yaml") while a
    # SIGHUP comes (a log rotation sends one) was read between two of its
    # writer's writes: the first rules alone, valid YAML, loaded. The load
    # now waits for the writer to close the file.
    full = net.policy([api_rule(net), other_rule(net)])
    rules = full.pop("rules")
    head = policy_yaml(full) + policy_yaml({"rules": rules[:1]})
    tail = policy_yaml({"rules": rules[1:]})[len("rules:\n"):]
    gw = gateway(net.policy([api_rule(net)]))
    with open(gw.policy_path, "w") as f:  # in place: truncated, then written
        f.write(head)
        f.flush()
        gw.reload()
        poll(lambda: reload_count(gw) > 0 or gw.stderr().count("reload failed") > 0 or
             fd_named(gw.proc.pid, "/policy.yaml"), timeout=10,
             what="the reload, or its load waiting for the writer")
        assert reload_count(gw) == 0 and "reload failed" not in gw.stderr(), gw.stderr()
        f.write(tail)
    poll(lambda: reload_count(gw) > 0, timeout=RELOAD_WAIT_S, what="the reload")
    assert "sluice: reloaded 2 rules from " in gw.stderr(), gw.stderr()


def test_a_tier3_expiry_more_than_a_year_ahead_is_warned_at_start_and_reload(gateway, net):
    # sluice check warns of a tier-3 grant whose expiry is more than 365
    # days after today (9999-12-31 is an expiry in name only); serve, which
    # prints check's warnings, says it too, judged by its own clock
    def far(err):
        return re.findall(r"warning: %s:\d+: rules\[0\]\.expires: tier-3 grant for "
                          r"api\.example\.test \(owner 'alice'\) expires on 9999-12-31, "
                          r"(\d+) days from now, more than 365: an expiry that far makes no one "
                          r"look at the grant again; give it a date within a year\n"
                          % re.escape(gw.policy_path), err)

    grant = api_rule(net, methods=["POST"], tier=3, owner="alice", expires="9999-12-31")
    # the gateway judges its day between these two readings, a UTC midnight
    # perhaps among them (its count was taken to be at most one day short
    # of the test's: it is one day more when the gateway judged first)
    first = utc_today()
    gw = gateway(net.policy([grant, api_rule(net)]))
    today = utc_today()
    days = {(datetime.date(9999, 12, 31) - d).days for d in (first, today)}
    got = [int(d) for d in far(gw.stderr())]
    assert len(got) == 1 and got[0] in days, (days, gw.stderr())
    # a grant of a year is not warned about; the far one, reloaded, is again
    soon = (today + datetime.timedelta(days=300)).isoformat()
    gw.write_policy(policy_yaml(net.policy([dict(grant, expires=soon), api_rule(net)])))
    gw.reload()
    poll(lambda: reload_count(gw) >= 1, timeout=RELOAD_WAIT_S, what="the first reload")
    assert len(far(gw.stderr())) == 1, gw.stderr()
    gw.write_policy(policy_yaml(net.policy([grant, api_rule(net)])))
    gw.reload()
    poll(lambda: reload_count(gw) >= 2, timeout=RELOAD_WAIT_S, what="the second reload")
    err = gw.stderr()
    assert len(far(err)) == 2, err
    assert err.rindex("expires on 9999-12-31") < err.rindex("sluice: reloaded "), err


# --------------------------------------------------------------------------
# open tunnels are decided again after a reload


ECHO_NAMES = {"echo.example.test": API_IP, "echo2.example.test": API_IP}
PING = b"\x00ping\n"  # neither TLS nor HTTP: the peek lets it through


def echo_rule(port, host="echo.example.test", **kw):
    r = {"host": host, "ports": [port], "tier": 2}
    r.update(kw)
    return r


def echo_policy(net, rules, static_extra=None, **kw):
    return net.policy(rules, static_extra=dict(ECHO_NAMES, **(static_extra or {})), **kw)


def ping_echo(sock):
    """Sends PING through the tunnel <sock> and reads its echo."""
    sock.sendall(PING)
    got = b""
    while len(got) < len(PING):
        d = sock.recv(64)
        assert d, "the tunnel was closed"
        got += d
    assert got == PING


def open_echo_tunnel(gw, port, host="echo.example.test", decision="allow", headers=None):
    """A CONNECT tunnel that carried one PING each way; returns (tunnel, id)."""
    t = connect(gw, "%s:%d" % (host, port), headers=headers)
    assert t.status == 200, (t.status, t.body)
    t.sock.settimeout(10)
    ping_echo(t.sock)
    ev = gw.wait_events("agent_egress", host=host, decision=decision)[-1]
    return t, ev["id"]


def new_connect_status(gw, port):
    """The status a new CONNECT to echo.example.test:<port> gets."""
    t = connect(gw, "echo.example.test:%d" % port)
    t.close()
    return t.status


def reload_to(gw, policy, count):
    """Reloads <policy> (a dict, or YAML text) and waits for the <count>th
    reload."""
    gw.write_policy(policy if isinstance(policy, str) else policy_yaml(policy))
    gw.reload()
    poll(lambda: reload_count(gw) >= count, timeout=RELOAD_WAIT_S, what="reload %d" % count)


def assert_closed(sock):
    """The gateway closed <sock> (an end or a reset, not a timeout), having
    sent nothing more on it."""
    try:
        d = sock.recv(64)
    except ConnectionResetError:
        return
    except socket.timeout:
        raise AssertionError("the tunnel is still open")
    assert d == b"", d


def assert_closed_with_deny(gw, t, tid, reason, host="echo.example.test"):
    """<t> (tunnel <tid>) was closed by the gateway, its second agent_egress
    says deny <reason>, and its one end line counts the PING both ways."""
    assert_closed(t.sock)
    evs = gw.wait_events("agent_egress", count=2, id=tid)
    assert len(evs) == 2, evs
    assert evs[0]["decision"] == "allow"
    deny = evs[1]
    assert deny["decision"] == "deny" and deny["reason"] == reason, deny
    assert deny["method"] == "CONNECT" and deny["host"] == host
    end = gw.wait_events("agent_egress_end", id=tid)
    assert len(end) == 1, end
    assert end[0]["status"] == 200
    assert end[0]["bytes_up"] == len(PING) and end[0]["bytes_down"] == len(PING), end[0]
    return deny


def assert_still_open(gw, t, tid):
    ping_echo(t.sock)
    assert len(gw.events("agent_egress", id=tid)) == 1
    assert gw.events("agent_egress_end", id=tid) == []


def requests_total(port):
    """The sluice_requests_total series of the admin server on <port>, as
    {labels: count}."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read()
    out = {}
    for line in text.decode().splitlines():
        if line.startswith("sluice_requests_total{"):
            labels, _, n = line.rpartition(" ")
            out[labels[len("sluice_requests_total"):]] = int(n)
    return out


def test_a_tunnel_whose_rule_a_reload_removes_is_closed(gateway, net):
    port = free_tcp_port()
    with EchoServer(API_IP) as echo, EchoServer(API_IP) as echo2:
        gw = gateway(echo_policy(net, [echo_rule(echo.port),
                                       echo_rule(echo2.port, host="echo2.example.test")]),
                     args=["--admin", "127.0.0.1:%d" % port])
        gone, gone_id = open_echo_tunnel(gw, echo.port)
        kept, kept_id = open_echo_tunnel(gw, echo2.port, host="echo2.example.test")
        try:
            reload_to(gw, echo_policy(net, [echo_rule(echo2.port, host="echo2.example.test")]), 1)
            deny = assert_closed_with_deny(gw, gone, gone_id, "not_in_policy")
            assert deny["tier"] is None and deny["rule"] is None
            # the tunnel whose rule stayed is untouched
            assert_still_open(gw, kept, kept_id)
            # a new CONNECT to the removed rule's host is refused as well
            assert new_connect_status(gw, echo.port) == 403
        finally:
            gone.close()
            kept.close()
        ev, end = gw.decided(id=kept_id)
        assert ev["decision"] == "allow"
        assert end["bytes_up"] == 2 * len(PING) and end["bytes_down"] == 2 * len(PING)
        # the closed tunnel is one request, counted with its first decision;
        # the CONNECT refused after the reload is one more, denied
        assert requests_total(port) == {
            '{agent="default",tier="2",decision="allow",reason="none"}': 2,
            '{agent="default",tier="none",decision="deny",reason="not_in_policy"}': 1,
        }


HELD_FILLER = 10000  # rules enough that a policy's memory stands out of the RSS's noise
HELD_GENERATIONS = 16


def filled_echo_policy(net, port, tag, host="echo.example.test", **kw):
    """YAML for the echo rule (for <host>) plus HELD_FILLER exact rules
    named after <tag> (each reload's are new names: nothing of them is
    shared); <kw> for the policy."""
    head = policy_yaml(echo_policy(net, [echo_rule(port, host=host)], **kw))
    at = head.index("rules:\n") + len("rules:\n")
    lines = "".join("  - host: h%d.%s.filler.test\n    ports: [443]\n    tier: 0\n" % (i, tag)
                    for i in range(HELD_FILLER))
    return head[:at] + lines + head[at:]


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(next(ln for ln in f if ln.startswith("VmRSS:")).split()[1])


def test_tunnels_kept_open_across_reloads_hold_no_older_policy(gateway, net):
    # Config management reloads every minute, and an agent keeps a tunnel
    # open across them (a stream, a websocket), one opened after each
    # reload: each tunnel the reload keeps goes on under the policy in
    # force, and the policies it replaced are freed. Before, each tunnel
    # held the policy it was opened under for its life: 16 tunnels opened
    # one per reload held 16 policies. The gateway's size is compared with
    # the level it reaches after as many reloads without tunnels (the
    # memory a load leaves behind, the allocator's arenas): freed memory is
    # reused for the next policy (the sanitizer's quarantine, which keeps
    # it, is turned off here).
    asan = os.environ.get("ASAN_OPTIONS", "")
    env = {"ASAN_OPTIONS": (asan + ":" if asan else "") + "quarantine_size_mb=0"}
    with EchoServer(API_IP, backlog=64) as echo:
        gw = gateway(echo_policy(net, [echo_rule(echo.port)]), env=env)
        pid = gw.proc.pid
        t, _ = open_echo_tunnel(gw, echo.port)
        t.close()  # the loop's lazily made state
        small = rss_kib(pid)
        reload_to(gw, filled_echo_policy(net, echo.port, "first"), 1)
        one = rss_kib(pid) - small  # one large policy, and what loading it left
        assert one > 1024, "a policy of %d rules took %d KiB" % (HELD_FILLER, one)
        n = 1
        for k in range(HELD_GENERATIONS):  # the level without tunnels
            n += 1
            reload_to(gw, filled_echo_policy(net, echo.port, "quiet%d" % k), n)
        level = rss_kib(pid)
        tunnels = []
        try:
            for k in range(HELD_GENERATIONS):
                t, _ = open_echo_tunnel(gw, echo.port)
                tunnels.append(t)
                n += 1
                reload_to(gw, filled_echo_policy(net, echo.port, "open%d" % k), n)
            grown = rss_kib(pid) - level
            print("one policy: %d KiB; level after %d reloads: +%d KiB; %d more reloads under "
                  "%d open tunnels: +%d KiB more" % (one, HELD_GENERATIONS + 1, level - small,
                                                     HELD_GENERATIONS, len(tunnels), grown))
            for t in tunnels:  # every one still open, allowed
                ping_echo(t.sock)
            assert grown < 3 * one, (
                "%d reloads, each with a tunnel opened under the policy before it kept open, "
                "grew the gateway by %d KiB, %.1f policies of %d KiB, beyond the level as many "
                "reloads without tunnels reached" % (HELD_GENERATIONS, grown, grown / one, one))
        finally:
            for t in tunnels:
                t.close()
        assert "reload failed" not in gw.stderr(), gw.stderr()[-2000:]


STREAM = "stream.example.test"  # ScriptedUpstream.IP's name


def streaming_script(first, end):
    """A ScriptedUpstream script whose every answer is a stream (a long
    download, server-sent events): with <first>, a chunked 200 with its
    first chunk at once, then nothing more until the event <end> is set,
    when its last chunk ends it; without, nothing at all until then (a slow
    answer). A request's Content-Length body is read before it answers."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n"

    def script(conn, stop, received):
        length = re.search(rb"(?im)^content-length:\s*(\d+)", received)
        want = received.index(b"\r\n\r\n") + 4 + (int(length.group(1)) if length else 0)
        while len(received) < want:
            d = conn.recv(4096)
            if not d:
                return
            received += d
        if first:
            conn.sendall(head)
        while not end.wait(0.1) and not stop.is_set():
            pass
        conn.sendall((b"" if first else head) + b"4\r\nlast\r\n0\r\n\r\n")
    return script


def recv_until(sock, end):
    """What <sock> sends up to <end>, read in small pieces (nothing after it
    in a stream that pauses there)."""
    got = b""
    while not got.endswith(end):
        d = sock.recv(64)
        assert d, got
        got += d
    return got


def open_answer(gw, port, path, first, body=None):
    """A plain GET of <path> from STREAM:<port> (a POST of <body> with one),
    whose answer is still to come whole: its head and first chunk read with
    <first>, else its agent_egress line seen."""
    s = open_conn(gw, timeout=30)
    req = "GET" if body is None else "POST"
    s.sendall(b"%s http://%s:%d%s HTTP/1.1\r\nHost: %s:%d\r\n%s\r\n%s" % (
        req.encode(), STREAM.encode(), port, path.encode(), STREAM.encode(), port,
        b"" if body is None else b"Content-Length: %d\r\n" % len(body), body or b""))
    if not first:
        gw.wait_events("agent_egress", path=path)
        return s
    status, _ = read_head(s)
    assert status == 200, status
    recv_until(s, b"first\r\n")
    return s


@pytest.mark.parametrize("first,body", [(True, None), (False, None), (True, b"u" * 4000)],
                         ids=["streaming", "not-begun", "after-upload"])
def test_plain_answers_still_coming_across_reloads_hold_no_older_policy(gateway, net, first, body):
    # As test_tunnels_kept_open_across_reloads_hold_no_older_policy, with a
    # plain request whose answer is still to come (a long download, an
    # event stream; an answer not begun; one after an upload) opened after
    # each reload: its request went up whole, so no reload decides it
    # again, and it lets go of the policy it was decided under, keeping
    # what its lines still say. Before, each held that policy until its
    # answer ended: 16 such requests opened one per reload held 16
    # policies. Each reload names the agent anew (gen0, gen1, ...): an
    # answer's agent_egress_end still names the agent it was decided for,
    # which the policy in force no longer has. The answer not begun waits
    # within an idle_timeout of an hour, as slow answers may.
    asan = os.environ.get("ASAN_OPTIONS", "")
    env = {"ASAN_OPTIONS": (asan + ":" if asan else "") + "quarantine_size_mb=0"}
    limits = {"idle_timeout": "1h"}
    answers_end = threading.Event()

    def policy(tag, filled=True):
        kw = {"agents": [{"id": tag, "sources": ["127.0.0.0/8"]}], "limits": limits,
              "static_extra": {STREAM: ScriptedUpstream.IP}}
        if filled:
            return filled_echo_policy(net, port, tag, host=STREAM, **kw)
        return echo_policy(net, [echo_rule(port, host=STREAM)], **kw)
    with ScriptedUpstream(streaming_script(first, answers_end)) as origin:
        port = origin.port
        gw = gateway(policy("first", filled=False), env=env)
        pid = gw.proc.pid
        open_answer(gw, port, "/warm", first, body).close()  # the loop's lazily made state
        small = rss_kib(pid)
        reload_to(gw, policy("first"), 1)
        one = rss_kib(pid) - small  # one large policy, and what loading it left
        assert one > 1024, "a policy of %d rules took %d KiB" % (HELD_FILLER, one)
        n = 1
        for k in range(HELD_GENERATIONS):  # the level without answers to come
            n += 1
            reload_to(gw, policy("quiet"), n)
        level = rss_kib(pid)
        answers = []
        try:
            for k in range(HELD_GENERATIONS):
                answers.append(open_answer(gw, port, "/s%d" % k, first, body))
                n += 1
                reload_to(gw, policy("gen%d" % k), n)
            grown = rss_kib(pid) - level
            print("one policy: %d KiB; level after %d reloads: +%d KiB; %d more reloads under "
                  "%d answers to come: +%d KiB more" % (one, HELD_GENERATIONS + 1, level - small,
                                                        HELD_GENERATIONS, len(answers), grown))
            answers_end.set()  # every answer ends whole, under the policy it was decided under
            for s in answers:
                if not first:
                    status, _ = read_head(s)
                    assert status == 200, status
                got = recv_until(s, b"0\r\n\r\n")
                assert got.endswith(b"4\r\nlast\r\n0\r\n\r\n"), got
            # the connection is kept: its next request is decided anew
            r = request(gw, "GET", "http://%s:%d/next" % (STREAM, port), sock=answers[-1])
            assert r.status == 200 and r.body == b"firstlast", r
            ev = gw.wait_events("agent_egress", path="/next")[0]
            assert ev["agent"] == "gen%d" % (HELD_GENERATIONS - 1), ev
            assert grown < 3 * one, (
                "%d reloads, each with a plain request opened under the policy before it whose "
                "answer is still to come, grew the gateway by %d KiB, %.1f policies of %d KiB, "
                "beyond the level as many reloads without them reached" % (
                    HELD_GENERATIONS, grown, grown / one, one))
        finally:
            for s in answers:
                s.close()
        for k in range(HELD_GENERATIONS):
            ev, end = gw.decided(path="/s%d" % k)
            decided_for = "quiet" if k == 0 else "gen%d" % (k - 1)
            assert (ev["agent"], ev["decision"]) == (decided_for, "allow"), ev
            assert (end["agent"], end["status"], end["tier"]) == (decided_for, 200, ev["tier"]), end
            assert end["bytes_up"] == len(body or b"") and end["bytes_down"] > 0, end
        assert "reload failed" not in gw.stderr(), gw.stderr()[-2000:]


def test_a_tunnel_a_reload_denies_by_name_or_narrows_is_closed(gateway, net):
    with EchoServer(API_IP) as echo:
        rules = [echo_rule(echo.port), echo_rule(echo.port, host="echo2.example.test")]
        gw = gateway(echo_policy(net, rules))
        denied, denied_id = open_echo_tunnel(gw, echo.port)
        narrowed, narrowed_id = open_echo_tunnel(gw, echo.port, host="echo2.example.test")
        try:
            rules2 = [echo_rule(echo.port),
                      echo_rule(echo.port + 1 if echo.port < 65535 else echo.port - 1,
                                host="echo2.example.test")]
            reload_to(gw, echo_policy(net, rules2, deny=["echo.example.test"]), 1)
            assert_closed_with_deny(gw, denied, denied_id, "denied_host")
            assert_closed_with_deny(gw, narrowed, narrowed_id, "port_not_allowed",
                                    host="echo2.example.test")
        finally:
            denied.close()
            narrowed.close()


def test_a_tunnel_whose_agent_a_reload_removes_is_closed(gateway, net):
    with EchoServer(API_IP) as echo:
        a1 = [{"id": "a1", "sources": ["127.0.0.0/8"]}]
        a2 = [{"id": "a2", "sources": ["127.0.0.0/8"]}]
        gw = gateway(echo_policy(net, [echo_rule(echo.port)], agents=a1))
        t, tid = open_echo_tunnel(gw, echo.port)
        try:
            reload_to(gw, echo_policy(net, [echo_rule(echo.port)], agents=a2), 1)
            deny = assert_closed_with_deny(gw, t, tid, "agent_not_allowed")
            assert deny["agent"] == "a1"
            assert deny["tier"] is None and deny["rule"] is None and deny["owner"] is None
        finally:
            t.close()


@pytest.mark.parametrize("secret", [False, True])
def test_a_tunnel_whose_client_a_reload_gives_to_an_earlier_agent_is_closed(gateway, net, secret):
    # a reload that puts another agent before the tunnel's, its sources
    # holding the client and wanting the same secret (or none): a new
    # request of the client is that other agent, refused by the rule the
    # tunnel's agent alone may use; the tunnel, decided for an agent its
    # client no longer is, is closed as a new request would be refused,
    # not kept under the id it opened with
    env = {"SLUICE_TEST_TOKEN": "shared-secret-token", "SLUICE_TEST_TOKEN2": "shared-secret-token"}
    auth = {"Proxy-Authorization": "Bearer shared-secret-token"} if secret else None

    def agent(aid, var):
        return dict({"id": aid, "sources": ["127.0.0.0/8"]},
                    **({"token": "env:" + var} if secret else {}))

    with EchoServer(API_IP) as echo:
        rules = [echo_rule(echo.port, agents=["a1"])]
        gw = gateway(echo_policy(net, rules, agents=[agent("a1", "SLUICE_TEST_TOKEN")]), env=env)
        t, tid = open_echo_tunnel(gw, echo.port, headers=auth)
        try:
            reload_to(gw, echo_policy(net, rules, agents=[agent("b", "SLUICE_TEST_TOKEN2"),
                                                         agent("a1", "SLUICE_TEST_TOKEN")]), 1)
            fresh = connect(gw, "echo.example.test:%d" % echo.port, headers=auth)
            fresh.close()
            assert fresh.status == 403
            deny = assert_closed_with_deny(gw, t, tid, "agent_not_allowed")
            assert deny["agent"] == "a1"
            assert [e["agent"] for e in gw.events("agent_egress", decision="deny")
                    if e["id"] != tid] == ["b"]
        finally:
            t.close()


def test_a_tunnel_opened_without_a_secret_is_closed_when_its_agent_comes_to_want_one(gateway,
                                                                                    net):
    # a reload that gives a token-less agent a token: a new request without
    # the secret is 407, and so is the tunnel that never presented one; one
    # opened with the secret (its agent had one already) stays
    env = {"SLUICE_TEST_TOKEN": "s3cret-token", "SLUICE_TEST_TOKEN2": "other-token"}
    with EchoServer(API_IP) as echo:
        open_bot = [{"id": "a1", "sources": ["127.0.0.0/8"]},
                    {"id": "a2", "sources": ["127.0.0.0/8"], "token": "env:SLUICE_TEST_TOKEN2"}]
        gw = gateway(echo_policy(net, [echo_rule(echo.port)], agents=open_bot), env=env)
        t, tid = open_echo_tunnel(gw, echo.port)
        kept, kept_id = open_echo_tunnel(gw, echo.port,
                                         headers={"Proxy-Authorization": "Bearer other-token"})
        assert kept_id != tid and gw.events("agent_egress", id=kept_id)[0]["agent"] == "a2"
        try:
            both = [{"id": "a1", "sources": ["127.0.0.0/8"], "token": "env:SLUICE_TEST_TOKEN"},
                    open_bot[1]]
            reload_to(gw, echo_policy(net, [echo_rule(echo.port)], agents=both), 1)
            deny = assert_closed_with_deny(gw, t, tid, "auth_required")
            assert deny["agent"] == "a1"
            assert_still_open(gw, kept, kept_id)
            assert new_connect_status(gw, echo.port) == 407
        finally:
            t.close()
            kept.close()


def test_a_tunnel_opened_with_a_secret_is_closed_when_a_reload_changes_or_drops_its_token(
        gateway, net):
    # rotating a leaked token is a reload that gives the agent another one: a
    # new request with the old secret is 407, and so is the tunnel opened
    # with it; so is one whose agent no longer wants a token (the secret now
    # names no agent); one whose agent keeps its token (moved to another
    # variable that holds the same value) stays
    env = {"SLUICE_TEST_TOKEN": "old-secret-token", "SLUICE_TEST_TOKEN2": "new-secret-token",
           "SLUICE_TEST_TOKEN3": "kept-secret-token", "SLUICE_TEST_TOKEN4": "kept-secret-token",
           "SLUICE_TEST_TOKEN5": "dropped-secret-tok"}

    def agents(rotated, kept, dropped):
        return [{"id": "rotated", "sources": ["127.0.0.0/8"], "token": "env:" + rotated},
                {"id": "kept", "sources": ["127.0.0.0/8"], "token": "env:" + kept},
                dict({"id": "dropped", "sources": ["127.0.0.0/8"]},
                     **({"token": "env:" + dropped} if dropped else {}))]

    with EchoServer(API_IP) as echo:
        rules = [echo_rule(echo.port)]
        gw = gateway(echo_policy(net, rules, agents=agents("SLUICE_TEST_TOKEN",
                                                            "SLUICE_TEST_TOKEN3",
                                                            "SLUICE_TEST_TOKEN5")), env=env)
        old = {"Proxy-Authorization": "Bearer old-secret-token"}
        rotated, rotated_id = open_echo_tunnel(gw, echo.port, headers=old)
        kept, kept_id = open_echo_tunnel(
            gw, echo.port, headers={"Proxy-Authorization": "Bearer kept-secret-token"})
        dropped, dropped_id = open_echo_tunnel(
            gw, echo.port, headers={"Proxy-Authorization": "Bearer dropped-secret-tok"})
        assert [gw.events("agent_egress", id=i)[0]["agent"]
                for i in (rotated_id, kept_id, dropped_id)] == ["rotated", "kept", "dropped"]
        try:
            reload_to(gw, echo_policy(net, rules, agents=agents("SLUICE_TEST_TOKEN2",
                                                                 "SLUICE_TEST_TOKEN4", None)), 1)
            deny = assert_closed_with_deny(gw, rotated, rotated_id, "auth_required")
            assert deny["agent"] == "rotated"
            assert_closed_with_deny(gw, dropped, dropped_id, "auth_required")
            assert_still_open(gw, kept, kept_id)
            t = connect(gw, "echo.example.test:%d" % echo.port, headers=old)
            t.close()
            assert t.status == 407
        finally:
            rotated.close()
            kept.close()
            dropped.close()


def assert_reported(gw, tid, reasons, first="allow"):
    """Tunnel <tid>'s agent_egress lines: the first says <first>, then one
    report line per reason in <reasons>, each flagged as the tunnel's (the
    same method and host), and no end line yet."""
    evs = gw.wait_events("agent_egress", count=1 + len(reasons), id=tid)
    assert [e["decision"] for e in evs] == [first] + ["report"] * len(reasons), evs
    assert [e["reason"] for e in evs[1:]] == list(reasons), evs
    assert all(e["method"] == "CONNECT" and e["host"] == evs[0]["host"] for e in evs), evs
    assert gw.events("agent_egress_end", id=tid) == []
    return evs


def test_a_report_mode_agent_keeps_its_tunnel_after_a_reload(gateway, net):
    # report mode reports what enforce would deny: a tunnel the reload would
    # close gets a report line, and stays open; once per reason
    with EchoServer(API_IP) as echo:
        agents = [{"id": "watcher", "sources": ["127.0.0.0/8"], "mode": "report"}]
        rules = [echo_rule(echo.port), api_rule(net)]
        port = free_tcp_port()
        gw = gateway(echo_policy(net, rules, agents=agents), args=["--admin", "127.0.0.1:%d" % port])
        t, tid = open_echo_tunnel(gw, echo.port)
        # a tunnel already reported when it opened (no rule for echo2)
        old, old_id = open_echo_tunnel(gw, echo.port, host="echo2.example.test",
                                       decision="report")
        try:
            reload_to(gw, echo_policy(net, [api_rule(net)], agents=agents), 1)
            ping_echo(t.sock)
            evs = assert_reported(gw, tid, ["not_in_policy"])
            assert evs[1]["tier"] is None and evs[1]["rule"] is None, evs[1]
            assert evs[1]["agent"] == "watcher"
            # the same verdict again: no new line, for either tunnel
            reload_to(gw, echo_policy(net, [api_rule(net)], agents=agents), 2)
            # a request after the reload: the loop has handled the reload
            assert request(gw, "GET", net.url("/after")).status == 200
            ping_echo(t.sock)
            ping_echo(old.sock)
            assert_reported(gw, tid, ["not_in_policy"])
            assert_reported(gw, old_id, [], first="report")
            # another reason: one more line
            reload_to(gw, echo_policy(net, [api_rule(net)], agents=agents,
                                      deny=["echo.example.test"]), 3)
            ping_echo(t.sock)
            assert_reported(gw, tid, ["not_in_policy", "denied_host"])
            # allowed again: no line (as for any tunnel still allowed)
            reload_to(gw, echo_policy(net, rules, agents=agents), 4)
            assert request(gw, "GET", net.url("/after2")).status == 200
            ping_echo(t.sock)
            assert_reported(gw, tid, ["not_in_policy", "denied_host"])
        finally:
            t.close()
            old.close()
        end = gw.wait_events("agent_egress_end", id=tid)
        assert len(end) == 1 and end[0]["status"] == 200, end
        assert end[0]["bytes_up"] == 5 * len(PING) and end[0]["bytes_down"] == 5 * len(PING)
        # each tunnel is one request, counted by its first line: the report
        # lines of the reloads are new verdicts, not new requests
        counts = requests_total(port)
        assert counts['{agent="watcher",tier="2",decision="allow",reason="none"}'] == 1, counts
        assert counts['{agent="watcher",tier="none",decision="report",reason="not_in_policy"}'] == 1
        assert not [k for k in counts if "denied_host" in k], counts


def reload_while_connecting(gateway, net, method, new_rules, accept=False, **kw):
    """Sends a CONNECT, a POST with a 4-byte body or a GET to
    dead.example.test, allowed, through a gateway that connects to an
    upstream whose accept queue is full; reloads it under way (a reload
    before that refuses it all the same) to <new_rules> (a function of the
    rule; <kw>: more policy keys); then, when <accept>, lets the upstream
    accept. Returns (the gateway, its admin port, the answer's status and
    headers)."""
    lst = FullListener(DEAD_IP)
    try:
        rule = {"host": "dead.example.test", "ports": [lst.port], "tier": 0}
        port = free_tcp_port()
        gw = gateway(net.policy([rule, api_rule(net)]), args=["--admin", "127.0.0.1:%d" % port])
        s = open_conn(gw, timeout=30)
        target = b"dead.example.test:%d" % lst.port
        try:
            if method == "CONNECT":
                s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n" % target)
            else:
                body = b"body" if method == "POST" else b""
                s.sendall(b"%s http://%s/up HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s"
                          % (method.encode(), target, target, len(body), body))
            gw.wait_connecting()
            reload_to(gw, net.policy(new_rules(rule), **kw), 1)
            if accept:
                lst.accept_all(0, 5)
            status, hdrs = read_head(s)
        finally:
            s.close()
        return gw, port, status, hdrs
    finally:
        lst.close()


@pytest.mark.parametrize("method", ["CONNECT", "POST"])
def test_a_connect_or_upload_still_connecting_when_its_rule_is_removed_is_refused(gateway, net,
                                                                                  method):
    # the CONNECT waits for an upstream whose accept queue is full (up to
    # 10 s, then upstream_unreachable): the reload refuses it before its 200;
    # so it does a POST, nothing of whose body went up (before, it went on
    # connecting under the old policy)
    gw, port, status, hdrs = reload_while_connecting(gateway, net, method,
                                                     lambda rule: [api_rule(net)])
    assert status == 403 and hdrs.get("sluice-reason") == "not_in_policy", (status, hdrs)
    ev, end = gw.decided(host="dead.example.test")
    assert ev["decision"] == "deny" and ev["reason"] == "not_in_policy"
    assert ev["method"] == method and end["status"] == 403 and end["bytes_up"] == 0, end
    assert len(gw.events("agent_egress", id=ev["id"])) == 1
    # its one line is its request's: counted (flagged re-decided, not again)
    assert requests_total(port).get(
        '{agent="default",tier="none",decision="deny",reason="not_in_policy"}') == 1


@pytest.mark.parametrize("method", ["CONNECT", "GET"])
def test_a_connection_made_after_a_reload_no_longer_allows_its_address_is_refused(gateway, net,
                                                                                  method):
    # a reload takes loopback out of allow_ranges (the rule kept) while the
    # request connects: the connection that completes once the upstream
    # accepts goes to an address the policy in force refuses, and is refused
    # as private_address, nothing sent on it (a GET too, which no reload
    # decides again); before, the address checked under the old policy was
    # used
    gw, _, status, hdrs = reload_while_connecting(
        gateway, net, method, lambda rule: [rule, api_rule(net)], accept=True, allow_ranges=())
    assert status == 403 and hdrs.get("sluice-reason") == "private_address", (status, hdrs)
    ev, end = gw.decided(host="dead.example.test")
    assert (ev["decision"], ev["reason"], ev["ip"]) == ("deny", "private_address", DEAD_IP), ev
    assert ev["method"] == method and end["status"] == 403 and end["bytes_up"] == 0, end


def day_ending_in(window):
    """SLUICE_TEST_TUNNEL_CLOCK_AHEAD_S runs the clock open tunnels are
    decided again by (and the day timer) ahead of the wall clock: here to
    <window> seconds before a UTC midnight. Returns (ahead, the day that
    midnight ends, the midnight on the gateway's tunnel clock)."""
    now = time.time()
    ahead = int(-window - now) % 86400 or 86400
    day = datetime.datetime.fromtimestamp(now + ahead, datetime.timezone.utc).date()
    return ahead, day, (now + ahead) // 86400 * 86400 + 86400


def process_state(pid):
    """<pid>'s scheduler state, kernel wait channel and CPU seconds, as
    /proc has them ("gone" when it has none)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/%d/wchan" % pid) as f:
            wchan = f.read().strip() or "-"
    except OSError:
        return "gone"
    ticks = os.sysconf("SC_CLK_TCK")
    return "state %s, wchan %s, %.2f s user, %.2f s system" % (
        fields[0], wchan, int(fields[11]) / ticks, int(fields[12]) / ticks)


def day_change_missed(err, gw, tid, ahead, midnight, marks):
    """<err> (a day-change test's failure) with what explains it: the
    times on the gateway's tunnel clock (the test's clock plus <ahead>)
    against its <midnight>, at each of <marks> ((what, time.time())) and
    now; tunnel <tid>'s log lines; the gateway's process state and the
    tail of its standard error."""
    def at(t):
        return "%s (midnight %+.3f s)" % (
            datetime.datetime.fromtimestamp(t + ahead, datetime.timezone.utc)
            .strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3], t + ahead - midnight)
    lines = [json.dumps(e) for e in gw.log_lines() if e.get("id") == tid]
    return AssertionError(
        "%s\ntunnel clock (%d s ahead): %s, now %s\ngateway pid %d: %s\nlog lines of %s:\n%s\n"
        "stderr (tail):\n%s" % (
            err, ahead, ", ".join("%s %s" % (w, at(t)) for w, t in marks), at(time.time()),
            gw.proc.pid, process_state(gw.proc.pid), tid, "\n".join(lines) or "(none)",
            gw.stderr()[-3000:]))


def second_line_past_midnight(gw, rid, window, ahead, midnight, marks, what):
    """Waits for request <rid>'s second agent_egress line, which the UTC
    day's change (<midnight> on the gateway's clock, <ahead> of the test's,
    within <window> seconds) brings; skips the test when <what> (the tunnel
    opening, the upload starting) came too late for it."""
    if time.time() + ahead > midnight - 1:
        pytest.skip("%s too late for the day change under test" % what)
    try:
        gw.wait_events("agent_egress", count=2, id=rid, timeout=window + 10)
    except AssertionError as e:
        raise day_change_missed(e, gw, rid, ahead, midnight, marks) from None


def test_a_tunnel_whose_grant_ends_with_the_day_is_closed(gateway, net):
    # the tier-3 grant ends with the day that ends in WINDOW seconds
    window = 8
    ahead, day, midnight = day_ending_in(window)
    with EchoServer(API_IP) as echo:
        rule = echo_rule(echo.port, tier=3, owner="alice", expires=day.isoformat())
        marks = [("gateway started", time.time())]
        gw = gateway(echo_policy(net, [rule], alerts={"expiry_warn_days": 7}),
                     env={"SLUICE_TEST_TUNNEL_CLOCK_AHEAD_S": str(ahead)})
        marks.append(("gateway up", time.time()))
        t, tid = open_echo_tunnel(gw, echo.port)
        marks.append(("tunnel open", time.time()))
        try:
            if time.time() + ahead > midnight - 1:
                pytest.skip("the tunnel opened too late for the day change under test")
            t.sock.settimeout(window + 10)
            try:
                assert_closed_with_deny(gw, t, tid, "grant_expired")  # polls past the midnight
            except AssertionError as e:
                raise day_change_missed(e, gw, tid, ahead, midnight, marks) from None
        finally:
            t.close()
    evs = gw.events("agent_egress", id=tid)
    assert evs[0]["tier"] == 3 and evs[1]["tier"] == 3 and evs[1]["owner"] == "alice"
    a = gw.wait_events("alert", kind="grant_expired")
    assert a[0]["host"] == "echo.example.test" and a[0]["id"] == tid, a


def test_a_report_mode_tunnel_whose_grant_ends_with_the_day_is_reported(gateway, net):
    # as above, for an agent in report mode: the tunnel stays open, with a
    # report line grant_expired and its alert; a reload under the same
    # verdict then adds no line
    window = 8
    ahead, day, midnight = day_ending_in(window)
    agents = [{"id": "watcher", "sources": ["127.0.0.0/8"], "mode": "report"}]
    alerts = {"expiry_warn_days": 7}
    with EchoServer(API_IP) as echo:
        rule = echo_rule(echo.port, tier=3, owner="alice", expires=day.isoformat())
        policy = echo_policy(net, [rule, api_rule(net)], agents=agents, alerts=alerts)
        marks = [("gateway started", time.time())]
        gw = gateway(policy, env={"SLUICE_TEST_TUNNEL_CLOCK_AHEAD_S": str(ahead)})
        marks.append(("gateway up", time.time()))
        t, tid = open_echo_tunnel(gw, echo.port)
        marks.append(("tunnel open", time.time()))
        try:
            second_line_past_midnight(gw, tid, window, ahead, midnight, marks,
                                      "the tunnel opened")
            ping_echo(t.sock)
            evs = assert_reported(gw, tid, ["grant_expired"])
            assert evs[1]["tier"] == 3 and evs[1]["owner"] == "alice", evs[1]
            a = gw.wait_events("alert", kind="grant_expired")
            assert a[0]["host"] == "echo.example.test" and a[0]["id"] == tid, a
            reload_to(gw, policy, 1)
            assert request(gw, "GET", net.url("/after")).status == 200
            ping_echo(t.sock)
            assert_reported(gw, tid, ["grant_expired"])
        finally:
            t.close()
    end = gw.wait_events("agent_egress_end", id=tid)
    assert len(end) == 1 and end[0]["bytes_up"] == 3 * len(PING), end


# plain uploads in flight are decided again too (their request body is the write)


class SinkServer(ScriptedUpstream):
    """A plain HTTP origin that reads each request's body (Content-Length)
    as it comes, counting its bytes in <got>, and once it has it all
    (<complete> set) answers 201 with a body of 10 bytes, the last five only
    once <hold> is set (a response still streaming back), then closes.
    <ended> is set when a connection is over: the answer sent, or the body
    cut (an end or a reset)."""

    def __init__(self):
        self.got = 0
        self.complete = threading.Event()
        self.hold = threading.Event()
        self.hold.set()
        self.ended = threading.Event()
        super().__init__(self._answer)

    def _answer(self, conn, stop, received):
        try:
            head, _, rest = received.partition(b"\r\n\r\n")
            n = int(re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head).group(1))
            self.got += len(rest)
            while self.got < n:
                d = conn.recv(65536)
                if not d:
                    return
                self.got += len(d)
            self.complete.set()
            conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 10\r\n"
                         b"Connection: close\r\n\r\nfirst")
            self.hold.wait(9)
            conn.sendall(b"last.")
        finally:
            self.ended.set()


SINK = "sink.example.test"
UPLOAD = 4 * 1024 * 1024  # the whole body
UPLOAD_FIRST = 256 * 1024  # what the client sends before the policy changes


def sink_policy(net, sink_port, keep_rule=True, **kw):
    """A tier-3 grant for POSTs to the sink (<kw>: owner, expires, more
    policy keys) besides the api's rule, or the api's rule alone."""
    rule = {"host": SINK, "ports": [sink_port], "tier": 3, "owner": "alice",
            "expires": kw.pop("expires", (utc_today() + datetime.timedelta(days=30)).isoformat())}
    rules = [rule, api_rule(net)] if keep_rule else [api_rule(net)]
    return net.policy(rules, static_extra={SINK: ScriptedUpstream.IP}, **kw)


def start_upload(gw, sink, auth=b""):
    """A POST of UPLOAD bytes to the sink, of which UPLOAD_FIRST are sent;
    returns (socket, the request's id) once the origin has some of them.
    <auth>: a Proxy-Authorization value."""
    s = open_conn(gw, timeout=30)
    field = b"Proxy-Authorization: %s\r\n" % auth if auth else b""
    s.sendall(b"POST http://%s:%d/up HTTP/1.1\r\nHost: %s:%d\r\n%sContent-Length: %d\r\n\r\n"
              % (SINK.encode(), sink.port, SINK.encode(), sink.port, field, UPLOAD))
    s.sendall(b"u" * UPLOAD_FIRST)
    poll(lambda: sink.got > 0, timeout=10, what="the body reaching the origin")
    return s, gw.wait_events("agent_egress", host=SINK)[-1]["id"]


def send_rest(sock):
    """Sends the rest of the body from a thread: a gateway that stops
    reading it must not hold the test."""
    def run():
        try:
            sock.sendall(b"u" * (UPLOAD - UPLOAD_FIRST))
        except OSError:
            pass
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def assert_upload_cut(gw, sink, s, rid, reason, status=403):
    """The rest of the upload <rid> on <s> is sent: the client gets its
    <status> <reason>, the origin less than the whole body; the log has the
    request's allow line, then its deny line (flagged as its own: method
    and host), then its one end line, with the 403 and the bytes sent."""
    send_rest(s)
    got, hdrs = read_head(s)
    assert got == status and hdrs.get("sluice-reason") == reason, (got, hdrs)
    assert sink.ended.wait(10), "the origin's connection is still open"
    assert not sink.complete.is_set() and sink.got < UPLOAD, sink.got
    end = gw.wait_events("agent_egress_end", id=rid)
    lines = [e for e in gw.log_lines()
             if e.get("id") == rid and e["event"] in ("agent_egress", "agent_egress_end")]
    assert [(e["event"], e.get("decision")) for e in lines] == [
        ("agent_egress", "allow"), ("agent_egress", "deny"), ("agent_egress_end", None)], lines
    deny = lines[1]
    assert deny["reason"] == reason and deny["method"] == "POST" and deny["host"] == SINK, deny
    assert end[0]["status"] == status, end
    # nothing went up after the decision (the rest was sent after it), and
    # what the gateway held back then is not counted
    assert sink.got <= UPLOAD_FIRST and end[0]["bytes_up"] <= UPLOAD_FIRST, (sink.got, end)
    return deny


def test_a_plain_upload_whose_grant_a_reload_removes_is_cut(gateway, net):
    port = free_tcp_port()
    with SinkServer() as sink:
        gw = gateway(sink_policy(net, sink.port), args=["--admin", "127.0.0.1:%d" % port])
        s, rid = start_upload(gw, sink)
        try:
            reload_to(gw, sink_policy(net, sink.port, keep_rule=False), 1)
            deny = assert_upload_cut(gw, sink, s, rid, "not_in_policy")
        finally:
            s.close()
        assert deny["tier"] is None and deny["rule"] is None
        # the request is one, counted with its first decision; the denial is
        # the policy's act: it does not count toward the agent's quarantine
        assert requests_total(port) == {
            '{agent="default",tier="3",decision="allow",reason="none"}': 1}
        # a new request to the host is refused as well
        assert request(gw, "GET", "http://%s:%d/x" % (SINK, sink.port)).status == 403


def test_a_plain_upload_whose_token_a_reload_rotates_is_cut(gateway, net):
    env = {"SLUICE_TEST_TOKEN": "old-secret-token", "SLUICE_TEST_TOKEN2": "new-secret-token"}

    def agents(var):
        return [{"id": "up", "sources": ["127.0.0.0/8"], "token": "env:" + var}]

    with SinkServer() as sink:
        gw = gateway(sink_policy(net, sink.port, agents=agents("SLUICE_TEST_TOKEN")), env=env)
        s, rid = start_upload(gw, sink, auth=b"Bearer old-secret-token")
        try:
            reload_to(gw, sink_policy(net, sink.port, agents=agents("SLUICE_TEST_TOKEN2")), 1)
            # refused as a new request with the old secret is: 407
            deny = assert_upload_cut(gw, sink, s, rid, "auth_required", status=407)
        finally:
            s.close()
        assert deny["agent"] == "up"


def test_a_tunnel_or_upload_to_an_address_a_reload_no_longer_allows_is_cut(gateway, net):
    # A reload that takes loopback out of allow_ranges, the rules as they
    # were: a tunnel and an upload connected to loopback addresses, which
    # the new policy's address guard refuses, are cut as private_address
    # (their second line names the address), for an agent in report mode
    # too (the guard is never reported); before, only the decision was taken
    # again, and both went on with the addresses the new policy refuses
    agents = [{"id": "watcher", "sources": ["127.0.0.0/8"], "mode": "report"}]
    with EchoServer(API_IP) as echo, SinkServer() as sink:
        names = dict(ECHO_NAMES, **{SINK: ScriptedUpstream.IP})
        rules = [echo_rule(echo.port), sink_policy(net, sink.port)["rules"][0]]

        def policy(**kw):
            return net.policy(rules, static_extra=names, agents=agents, **kw)
        gw = gateway(policy())
        t, tid = open_echo_tunnel(gw, echo.port)
        s, rid = start_upload(gw, sink)
        try:
            reload_to(gw, policy(allow_ranges=()), 1)
            deny = assert_closed_with_deny(gw, t, tid, "private_address")
            assert deny["ip"] == API_IP and deny["agent"] == "watcher", deny
            deny = assert_upload_cut(gw, sink, s, rid, "private_address")
            assert deny["ip"] == ScriptedUpstream.IP, deny
        finally:
            t.close()
            s.close()
        # a new CONNECT is refused as well
        assert new_connect_status(gw, echo.port) == 403


KEPT = "kept.example.test"


def kept_then_reload(gateway, net, while_open=None, **kw):
    """On one client connection: GET /k1 from a scripted origin on
    127.0.0.7 (pinned by dns.static), its upstream connection kept; a
    reload to the same rules with <kw> for the policy; then GET /k2, and
    <while_open>(seen) before the client connection closes. Returns (gw,
    up, seen: the request lines each upstream connection got, then
    b"(closed)" when the gateway closed it first, /k2's response)."""
    seen = []  # per upstream connection: the request lines it got

    def script(conn, stop, received):
        got = [received.split(b"\r\n", 1)[0]]
        seen.append(got)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
        more = conn.recv(4096)  # a second request on the kept connection
        if more:
            got.append(more.split(b"\r\n", 1)[0])
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
        else:
            got.append(b"(closed)")

    with ScriptedUpstream(script) as up:
        rules = [api_rule(net), {"host": KEPT, "ports": [up.port], "tier": 0}]
        gw = gateway(net.policy(rules, static_extra={KEPT: up.IP}))
        s = open_conn(gw)

        def get(path):
            s.sendall(("GET http://{0}:{1}{2} HTTP/1.1\r\nHost: {0}:{1}\r\n\r\n"
                       .format(KEPT, up.port, path)).encode())
            return read_response(s)
        try:
            r1 = get("/k1")
            assert r1.status == 200 and r1.body == b"first", r1
            reload_to(gw, net.policy(rules, static_extra={KEPT: up.IP}, **kw), 1)
            r2 = get("/k2")
            if while_open is not None:
                while_open(seen)
        finally:
            s.close()
        return gw, up, seen, r2


def test_a_kept_connection_to_an_address_a_reload_no_longer_allows_is_not_reused(gateway, net):
    # The agent's second GET, after a reload that takes loopback out of
    # allow_ranges (the rule kept), is for the origin its kept upstream
    # connection goes to: it is refused as private_address, nothing sent on
    # the kept connection, which is closed (its client's connection still
    # open), and no fresh one made. (The kept connection stayed, idle, for
    # a later reload to allow again.)
    def closed(seen):
        poll(lambda: seen[0][-1] == b"(closed)", timeout=10, what="the kept connection's close")
    gw, up, seen, r2 = kept_then_reload(gateway, net, closed, allow_ranges=())
    assert r2.status == 403 and r2.headers.get("sluice-reason") == "private_address", r2
    assert seen == [[b"GET /k1 HTTP/1.1", b"(closed)"]] and up.accepted == 1, seen
    ev, end = gw.decided(path="/k2")
    assert (ev["decision"], ev["reason"], ev["ip"]) == ("deny", "private_address", up.IP), ev
    assert end["status"] == 403 and end["bytes_up"] == 0, end


def test_a_reload_that_shortens_idle_timeout_holds_kept_connections_to_it(gateway, net):
    # A kept connection waiting for its next request head is held to the
    # idle_timeout of the policy in force, counted from when its wait
    # began: a reload that takes it from 1h to 1s closes one that has been
    # waiting longer (before, it stayed open for the old hour: the timer
    # armed under the old policy ran on).
    gw = gateway(net.policy([api_rule(net)], limits={"idle_timeout": "1h"}))
    idle = open_conn(gw)
    idle.sendall(build_request("GET", net.url("/first")))
    assert read_response(idle).status == 200
    gw.write_policy(policy_yaml(net.policy([api_rule(net)], limits={"idle_timeout": "1s"})))
    gw.reload()
    poll(lambda: "sluice: reloaded" in gw.stderr(), timeout=RELOAD_WAIT_S, what="the reload")
    idle.settimeout(30)
    assert idle.recv(1) == b"", "the kept connection was not closed"
    idle.close()
    # a new connection is served under the new policy
    assert request(gw, "GET", net.url("/after")).status == 200


def test_a_kept_connection_is_reused_after_a_reload_that_still_allows_its_address(gateway, net):
    # A reload that leaves the address guard's ranges as they were (the
    # same policy) closes no kept connection: the second GET goes on it
    gw, up, seen, r2 = kept_then_reload(gateway, net)
    assert r2.status == 200 and r2.body == b"second", r2
    assert seen == [[b"GET /k1 HTTP/1.1", b"GET /k2 HTTP/1.1"]] and up.accepted == 1, seen
    ev, end = gw.decided(path="/k2")
    assert (ev["decision"], ev["ip"]) == ("allow", up.IP) and end["status"] == 200, (ev, end)


def test_a_plain_upload_whose_grant_ends_with_the_day_is_cut(gateway, net):
    window = 8
    ahead, day, midnight = day_ending_in(window)
    with SinkServer() as sink:
        marks = [("gateway started", time.time())]
        gw = gateway(sink_policy(net, sink.port, expires=day.isoformat(),
                                 alerts={"expiry_warn_days": 7}),
                     env={"SLUICE_TEST_TUNNEL_CLOCK_AHEAD_S": str(ahead)})
        s, rid = start_upload(gw, sink)
        marks.append(("upload started", time.time()))
        try:
            second_line_past_midnight(gw, rid, window, ahead, midnight, marks,
                                      "the upload started")
            deny = assert_upload_cut(gw, sink, s, rid, "grant_expired")
        finally:
            s.close()
    assert deny["tier"] == 3 and deny["owner"] == "alice", deny
    a = gw.wait_events("alert", kind="grant_expired")
    assert a[0]["host"] == SINK and a[0]["id"] == rid, a


def test_a_report_mode_plain_upload_a_reload_would_deny_is_reported_and_goes_on(gateway, net):
    agents = [{"id": "watcher", "sources": ["127.0.0.0/8"], "mode": "report"}]
    with SinkServer() as sink:
        gw = gateway(sink_policy(net, sink.port, agents=agents))
        s, rid = start_upload(gw, sink)
        try:
            reload_to(gw, sink_policy(net, sink.port, keep_rule=False, agents=agents), 1)
            evs = gw.wait_events("agent_egress", count=2, id=rid)
            send_rest(s)
            status, _ = read_head(s)
        finally:
            s.close()
        assert status == 201 and sink.complete.is_set() and sink.got == UPLOAD
    assert [(e["decision"], e["reason"]) for e in evs] == [
        ("allow", None), ("report", "not_in_policy")], evs
    assert evs[1]["method"] == "POST" and evs[1]["agent"] == "watcher", evs[1]
    end = gw.wait_events("agent_egress_end", id=rid)
    assert len(end) == 1 and end[0]["status"] == 201 and end[0]["bytes_up"] == UPLOAD, end


def test_a_plain_exchange_whose_body_went_up_is_not_decided_again(gateway, net):
    # the write is the request body: one whose body the origin has whole
    # keeps its answer streaming back; a kept connection between requests
    # is left as it is (its next request is decided under the new policy)
    with SinkServer() as sink:
        gw = gateway(sink_policy(net, sink.port))
        kept = open_conn(gw, timeout=30)
        s = open_conn(gw, timeout=30)
        try:
            assert request(gw, "POST", net.url("/kept"), body=b"k" * 1000, sock=kept).status == 200
            kept_id = gw.wait_events("agent_egress", path="/kept")[0]["id"]
            sink.hold.clear()
            s.sendall(b"POST http://%s:%d/up HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: 5\r\n\r\n"
                      b"whole" % (SINK.encode(), sink.port, SINK.encode(), sink.port))
            assert sink.complete.wait(10)
            status, _ = read_head(s)  # the first half of the body is on its way
            assert status == 201
            rid = gw.wait_events("agent_egress", host=SINK)[-1]["id"]
            reload_to(gw, net.policy([other_rule(net)]), 1)
            sink.hold.set()
            got = b""
            while len(got) < 10:
                d = s.recv(64)
                assert d, got
                got += d
            assert got == b"firstlast.", got
            # the kept connection takes the next request, decided anew
            r = request(gw, "GET", other_url(net), sock=kept)
            assert r.status == 200, r.status
            r = request(gw, "GET", net.url("/after"), sock=kept)
            assert r.status == 403, r.status
        finally:
            kept.close()
            s.close()
        end = gw.wait_events("agent_egress_end", id=rid)
        assert end[0]["status"] == 201 and end[0]["bytes_up"] == 5, end
        assert len(gw.events("agent_egress", id=rid)) == 1
        assert len(gw.events("agent_egress", id=kept_id)) == 1


def test_a_plain_upload_reported_again_is_not_one_more_write(gateway, net):
    # write_burst counts write requests: the report line of an upload
    # decided again is a new verdict on a write counted already
    agents = [{"id": "watcher", "sources": ["127.0.0.0/8"], "mode": "report"}]
    alerts = {"write_burst": {"max": 1, "per": "1m"}}
    with SinkServer() as sink:
        gw = gateway(sink_policy(net, sink.port, agents=agents, alerts=alerts))
        s, rid = start_upload(gw, sink)
        try:
            reload_to(gw, sink_policy(net, sink.port, keep_rule=False, agents=agents,
                                      alerts=alerts), 1)
            assert gw.wait_events("agent_egress", count=2, id=rid)[1]["decision"] == "report"
            # the second write: over the max of one
            assert request(gw, "POST", net.url("/second"), body=b"2").status == 200
            a = gw.wait_events("alert", kind="write_burst")
        finally:
            s.close()
    assert "made 2 write requests" in a[0]["detail"], a
    assert "POST /second on api.example.test" in a[0]["detail"], a


def test_a_plain_upload_reported_again_is_not_one_more_off_hours_write(gateway, net):
    # off_hours_write alerted the report line of an upload decided again
    # as one more write outside working hours: folded into the first's
    # minute, a summary counting it at shutdown (a line of its own later)
    now = datetime.datetime.now(datetime.timezone.utc)
    hours = "%s-%s" % ((now + datetime.timedelta(hours=2)).strftime("%H:00"),
                       (now + datetime.timedelta(hours=3)).strftime("%H:00"))
    agents = [{"id": "watcher", "sources": ["127.0.0.0/8"], "mode": "report"}]
    alerts = {"off_hours": {"tz": "UTC", "hours": hours, "days": "Mon-Sun"}}
    with SinkServer() as sink:
        gw = gateway(sink_policy(net, sink.port, agents=agents, alerts=alerts))
        s, rid = start_upload(gw, sink)
        try:
            gw.wait_events("alert", kind="off_hours_write")
            reload_to(gw, sink_policy(net, sink.port, keep_rule=False, agents=agents,
                                      alerts=alerts), 1)
            assert gw.wait_events("agent_egress", count=2, id=rid)[1]["decision"] == "report"
        finally:
            s.close()
        gw.stop()  # a folded repeat's summary is written by the end
    a = gw.events("alert", kind="off_hours_write")
    assert [(x["id"], x["count"]) for x in a] == [(rid, 1)], a


def test_a_plain_upload_answered_early_is_cut_by_a_close(gateway, net):
    # the origin answers while it reads the upload (an early answer, its
    # body still to come): a denial then cannot be told by a 403, so the
    # client's connection is closed, its answer short, and the origin's cut
    got = []
    ended = threading.Event()

    def early(conn, stop, received):
        try:
            got.append(len(received.partition(b"\r\n\r\n")[2]))
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
            while True:
                d = conn.recv(65536)
                if not d:
                    return
                got.append(len(d))
        finally:
            ended.set()

    with ScriptedUpstream(early) as up:
        gw = gateway(sink_policy(net, up.port))
        s = open_conn(gw, timeout=30)
        try:
            s.sendall(b"POST http://%s:%d/up HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: %d\r\n\r\n"
                      % (SINK.encode(), up.port, SINK.encode(), up.port, UPLOAD))
            s.sendall(b"u" * UPLOAD_FIRST)
            status, _ = read_head(s)
            assert status == 200
            rid = gw.wait_events("agent_egress", host=SINK)[-1]["id"]
            reload_to(gw, sink_policy(net, up.port, keep_rule=False), 1)
            send_rest(s)
            body = b""
            try:
                while True:
                    d = s.recv(4096)
                    if not d:
                        break
                    body += d
            except ConnectionResetError:
                pass
        finally:
            s.close()
        assert body == b"part", body
        assert ended.wait(10), "the origin's connection is still open"
        assert sum(got) <= UPLOAD_FIRST, sum(got)
    lines = [(e["event"], e.get("decision")) for e in gw.log_lines()
             if e.get("id") == rid and e["event"] in ("agent_egress", "agent_egress_end")]
    assert lines == [("agent_egress", "allow"), ("agent_egress", "deny"),
                     ("agent_egress_end", None)], lines
    end = gw.wait_events("agent_egress_end", id=rid)[0]
    assert end["status"] == 200 and end["bytes_up"] <= UPLOAD_FIRST, end


STOP_HANG_GUARD_S = 30  # a hang guard, not a claim on time


def _policy_on_fuse(gw, fs):
    """Points the gateway's policy path at the file <fs> serves (a link
    put in place by a rename): a reload opens it and reads it there."""
    link = gw.policy_path + ".link"
    os.symlink(fs.path, link)
    os.replace(link, gw.policy_path)


def _exit_status(gw):
    """The gateway's exit status, None when it has not ended within the
    hang guard."""
    try:
        return gw.proc.wait(STOP_HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        return None


ABANDONED = "sluice: the reload of %s is abandoned at exit"


# serial: a FUSE mount in the machine's mount namespace, which a box another
# worker builds meanwhile cannot make read-only (it refuses to start)
@pytest.mark.serial
def test_a_stop_leaves_a_reload_whose_file_system_does_not_answer(gateway, net, tmp_path):
    # A SIGHUP's reload reading a regular file on a file system that does
    # not answer (a hung NFS or FUSE mount) held the stop, which joined the
    # reload thread: a SIGTERM never ended serve. The stop now waits for the
    # load what is left of --grace, then leaves its thread and exits 0.
    from fuse_file import FuseFile
    gw = gateway(net.policy([api_rule(net)]), args=["--grace", "1s"])
    assert request(gw, "GET", net.url("/before")).status == 200
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    text = policy_yaml(net.policy([api_rule(net), other_rule(net)])).encode()
    with FuseFile(str(mnt), text, reads="hold") as fs:
        _policy_on_fuse(gw, fs)
        gw.reload()
        poll(lambda: fs.read_pids(), timeout=20, interval=0.02,
             what="the reload reading the FUSE file")
        gw.proc.send_signal(signal.SIGTERM)
        rc = _exit_status(gw)
        assert rc == 0, (rc, gw.stderr()[-2000:])
    err = gw.stderr()
    assert (ABANDONED % gw.policy_path) in err, err[-2000:]
    assert "sluice: reloaded" not in err, err[-2000:]
    gw.decided(path="/before")  # the events decided before the stop are logged


# serial: as above, a FUSE mount
@pytest.mark.serial
def test_a_sighup_during_the_stop_starts_no_reload(gateway, net, tmp_path):
    # A SIGHUP that came while the stop let a tunnel finish started a
    # reload, whose policy the stop threw away: one reading a file system
    # that does not answer held the stop (or, since the stop leaves such a
    # load, made it wait out the grace). The SIGHUP now reopens the logs
    # and starts no load.
    from fuse_file import FuseFile
    rules = [api_rule(net), {"host": "banner.example.test", "ports": [net.banner.port],
                             "tier": 2}]
    gw = gateway(net.policy(rules))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with FuseFile(str(mnt), policy_yaml(net.policy(rules)).encode(), reads="hold") as fs:
        _policy_on_fuse(gw, fs)
        t = stop_holding_a_banner_tunnel(gw, net)
        try:
            # the SIGHUP's reopen of the log makes a new file: then the
            # signal has been handled (the reload refused before the reopen)
            os.rename(gw.log_path, gw.log_path + ".1")
            gw.reload()
            poll(lambda: os.path.exists(gw.log_path), timeout=20, interval=0.02,
                 what="the log reopened by the SIGHUP")
            t.sock.sendall(b"QUIT\r\n")
            assert recv_line(t.sock) == BannerServer.REPLY
        finally:
            t.close()
        rc = _exit_status(gw)
        pids = fs.read_pids()
    err = gw.stderr()
    assert rc == 0, (rc, err[-2000:])
    assert pids == [], err[-2000:]
    assert "sluice: SIGHUP during the stop: the policy is not reloaded" in err, err[-2000:]
    assert "abandoned" not in err, err[-2000:]


def _pids_cgroup(tag):
    """A new pids cgroup (v1 or v2) of this machine's, its folder, or a skip:
    a limit on tasks, threads included, that holds for root too (root is
    exempt from RLIMIT_NPROC)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a cgroup")
    for base in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        path = os.path.join(base, "sluice-test-%s-%d" % (tag, os.getpid()))
        try:
            os.mkdir(path)
        except OSError:
            continue
        if os.path.exists(os.path.join(path, "pids.max")):
            return path
        os.rmdir(path)
    pytest.skip("no pids cgroup this test can make")


def _cgroup_write(cg, name, value):
    with open(os.path.join(cg, name), "w") as f:
        f.write(str(value))


# serial: a FUSE mount (see above) and a cgroup of the machine's
@pytest.mark.serial
def test_a_sighup_without_a_thread_refuses_the_reload_never_loads_on_the_loop(gateway, net,
                                                                              tmp_path):
    # A SIGHUP whose reload thread could not be created (no task left under
    # a pids limit, RLIMIT_NPROC, memory) loaded the policy on the event
    # loop: a file on a file system that does not answer froze every
    # connection, for ever. The reload is now refused, the policy in force
    # kept, and the file is not read.
    from fuse_file import FuseFile
    gw = gateway(net.policy([api_rule(net)]))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    text = policy_yaml(net.policy([api_rule(net), other_rule(net)])).encode()
    cg = _pids_cgroup("reload")
    try:
        with FuseFile(str(mnt), text, reads="hold") as fs:
            _policy_on_fuse(gw, fs)
            _cgroup_write(cg, "cgroup.procs", gw.proc.pid)
            with open(os.path.join(cg, "pids.current")) as f:
                _cgroup_write(cg, "pids.max", int(f.read()))  # no thread more
            gw.reload()
            refused = ("sluice: reload failed: %s: cannot start its load on a thread"
                       % gw.policy_path)
            poll(lambda: refused in gw.stderr(), timeout=20, interval=0.02,
                 what="the reload refused")
            assert request(gw, "GET", net.url("/after")).status == 200  # the loop answers
            assert request(gw, "GET", other_url(net)).status == 403
            assert fs.read_pids() == [], gw.stderr()[-2000:]
            _cgroup_write(cg, "pids.max", "max")
            gw.proc.send_signal(signal.SIGTERM)
            rc = _exit_status(gw)
        assert rc == 0, (rc, gw.stderr()[-2000:])
    finally:
        if gw.proc.poll() is None:
            gw.proc.kill()
            gw.proc.wait(STOP_HANG_GUARD_S)
        os.rmdir(cg)
    err = gw.stderr()
    assert "sluice: reloaded" not in err, err[-2000:]
