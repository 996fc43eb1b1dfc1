"""A policy read from a FIFO or a pipe (`--policy <(...)`, a named FIFO a
writer fills): a FIFO no one writes to is waited for a bounded time, then
refused (exit 2 at start, a failed reload when serving), where open()
blocked for ever; a writer that comes late, and a pipe, still work. A
character device (/dev/zero, a terminal) is refused once open, unread.

SLUICE_TEST_POLICY_FIFO_WAIT_S shortens the wait (test-only)."""

import os
import signal
import subprocess
import threading
import time

from conftest import SANITIZER_MARKS, policy_yaml
from gate_client import api_rule, fd_named, other_rule, poll
from gate_servers import free_port

SHORT = {"SLUICE_TEST_POLICY_FIFO_WAIT_S": "1"}


def _no_writer(path):
    return "%s: cannot read %s: a FIFO no one writes to (waited 1 s)" % (path, path)


def _start(sluice_bin, tmp_path, policy, env=None, pass_fds=()):
    err = open(tmp_path / "err", "wb")
    full = dict(os.environ)
    full.update(env or {})
    p = subprocess.Popen([sluice_bin, "serve", "--policy", policy, "--listen",
                          "127.0.0.1:%d" % free_port(), "--log", str(tmp_path / "log.jsonl")],
                         stdout=subprocess.DEVNULL, stderr=err, env=full, pass_fds=pass_fds)
    err.close()
    return p


def _err(tmp_path):
    return (tmp_path / "err").read_text()


def _stop(p, tmp_path):
    """Stops <p>; returns its exit status (None when it had to be killed)
    after checking its standard error for sanitizer reports."""
    rc = _end(p)
    err = _err(tmp_path)
    assert not any(m in err for m in SANITIZER_MARKS), err
    return rc


def _terminated(p):
    """Sends <p> SIGTERM; returns its exit status, None when it has not
    ended within 60 s (a stop held by a reload that never ends)."""
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(60)
    except subprocess.TimeoutExpired:
        return None


def _end(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return None
    return p.returncode


def test_fifo_without_writer_exits_2(run_sluice, tmp_path):
    # open() of a FIFO no one writes to blocked for ever: `serve` and `run`
    # never started nor said why.
    fifo = str(tmp_path / "policy.fifo")
    os.mkfifo(fifo)
    for cmd in (["serve", "--policy", fifo, "--listen", "127.0.0.1:%d" % free_port()],
                ["run", "--policy", fifo, "--", "true"]):
        p = run_sluice(*cmd, timeout=60, env=SHORT)
        assert p.returncode == 2, (cmd, p.returncode, p.stderr)
        assert p.stderr.splitlines() == [_no_writer(fifo)], p.stderr


def test_fifo_whose_writer_writes_nothing_exits_2(run_sluice, tmp_path):
    fifo = str(tmp_path / "policy.fifo")
    os.mkfifo(fifo)
    w = os.open(fifo, os.O_RDWR)  # a writer that stays and writes nothing
    try:
        p = run_sluice("serve", "--policy", fifo, "--listen", "127.0.0.1:%d" % free_port(),
                       timeout=60, env=SHORT)
    finally:
        os.close(w)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.splitlines() == [
        "%s: cannot read %s: a FIFO whose writer wrote nothing for 1 s" % (fifo, fifo)], p.stderr


def test_fifo_written_after_the_open_serves(sluice_bin, net, tmp_path):
    # mkfifo p; sluice serve --policy p & cat policy.yaml > p
    fifo = str(tmp_path / "policy.fifo")
    os.mkfifo(fifo)
    p = _start(sluice_bin, tmp_path, fifo)
    try:
        # the write waits for the gateway to hold the FIFO open (before the
        # fix its open() waited for a writer: never seen open, a failure);
        # a wait of 5 s that then wrote anyway let a loaded machine test a
        # writer that came first
        _serve_from(p, fifo, net, tmp_path)
    finally:
        assert _stop(p, tmp_path) == 0, _err(tmp_path)


def test_pipe_like_process_substitution_serves(sluice_bin, net, tmp_path):
    # --policy <(cat policy.yaml): /dev/fd/N, a pipe, written before and
    # after the gateway opened it
    text = policy_yaml(net.policy([api_rule(net), other_rule(net)]))
    for late in (False, True):
        r, w = os.pipe()
        if not late:
            os.write(w, text.encode())
            os.close(w)
        p = _start(sluice_bin, tmp_path, "/dev/fd/%d" % r, pass_fds=(r,))
        os.close(r)
        try:
            if late:
                writer = threading.Timer(0.2, lambda: (os.write(w, text.encode()), os.close(w)))
                writer.start()
            poll(lambda: "sluice: serving 2 rules" in _err(tmp_path) or p.poll() is not None,
                 timeout=20, what="serving")
            assert p.poll() is None, _err(tmp_path)
        finally:
            if late:
                writer.join()
            assert _stop(p, tmp_path) == 0, _err(tmp_path)


def _serve_from(p, fifo, net, tmp_path):
    """Writes a policy of one rule into <fifo> once <p> opened it; waits
    for <p> to serve it."""
    poll(lambda: fd_named(p.pid, fifo), timeout=20, interval=0.01, what="the FIFO opened")
    with open(fifo, "w") as f:
        f.write(policy_yaml(net.policy([api_rule(net)])))
    poll(lambda: "sluice: serving 1 rule" in _err(tmp_path) or p.poll() is not None,
         timeout=20, what="serving")
    assert p.poll() is None, _err(tmp_path)


def test_reload_of_a_fifo_without_writer_fails_and_stop_works(sluice_bin, net, tmp_path):
    # A SIGHUP reopens the FIFO on the reload thread: with no writer it
    # blocked there for ever, no reload ended, and a SIGTERM never ended the
    # gateway (its stop waits for the reload thread).
    fifo = str(tmp_path / "policy.fifo")
    os.mkfifo(fifo)
    p = _start(sluice_bin, tmp_path, fifo, env=SHORT)
    try:
        _serve_from(p, fifo, net, tmp_path)

        p.send_signal(signal.SIGHUP)  # no writer
        line = "sluice: reload failed: " + _no_writer(fifo)
        poll(lambda: line in _err(tmp_path).splitlines() or None, timeout=30,
             what="the failed reload")

        p.send_signal(signal.SIGHUP)  # a writer: reloaded
        poll(lambda: fd_named(p.pid, fifo), timeout=20, interval=0.01, what="the FIFO reopened")
        with open(fifo, "w") as f:
            f.write(policy_yaml(net.policy([api_rule(net), other_rule(net)])))
        poll(lambda: "sluice: reloaded 2 rules from %s" % fifo in _err(tmp_path) or None,
             timeout=30, what="the reload")

        p.send_signal(signal.SIGHUP)  # no writer again, and a stop meanwhile
        poll(lambda: fd_named(p.pid, fifo), timeout=20, interval=0.01, what="the FIFO reopened")
        assert _terminated(p) == 0, _err(tmp_path)
    finally:
        _stop(p, tmp_path)


def _trickle(fifo, stop):
    """Holds <fifo> open for writing and writes a comment line to it every
    0.2 s until <stop> is set (120 s at most): each write comes well
    within the wait for the next one, so a load reading it never ends.
    Unbuffered: a buffered file whose flush met the gateway's close kept
    the line and wrote it again at its own close, raising BrokenPipeError
    out of the thread."""
    fd = os.open(fifo, os.O_WRONLY)
    try:
        for _ in range(600):
            if stop.wait(0.2):
                return
            try:
                os.write(fd, b"#\n")
            except BrokenPipeError:
                return
    finally:
        os.close(fd)


def test_stop_during_the_reload_of_a_fifo_that_never_ends(sluice_bin, net, tmp_path):
    # A FIFO whose writer keeps writing (a line every 0.2 s, never its end)
    # held the reload thread, and the stop, which waits for it, for as long
    # as the writer went on: a SIGTERM did not end the gateway. The stop now
    # makes the load give up its wait for the writer.
    fifo = str(tmp_path / "policy.fifo")
    os.mkfifo(fifo)
    p = _start(sluice_bin, tmp_path, fifo, env=SHORT)
    stop = threading.Event()
    writer = threading.Thread(target=_trickle, args=(fifo, stop), daemon=True)
    try:
        _serve_from(p, fifo, net, tmp_path)

        writer.start()  # its open() waits for the reload's
        p.send_signal(signal.SIGHUP)
        poll(lambda: fd_named(p.pid, fifo), timeout=20, interval=0.01, what="the FIFO reopened")
        time.sleep(1.5)  # past the 1 s wait for a write: the trickle keeps the load going
        assert "reload" not in _err(tmp_path), _err(tmp_path)
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(30)  # a hang guard: the writer goes on for 120 s
        except subprocess.TimeoutExpired:
            rc = None
        assert rc == 0, (writer.is_alive(), _err(tmp_path))
    finally:
        stop.set()
        _stop(p, tmp_path)
        if writer.is_alive():
            writer.join(5)


def _device(path):
    return ("%s: cannot read %s: a character device, not a file: a policy is a regular file, "
            "a FIFO or a pipe" % (path, path))


def test_character_device_exits_2_unread(run_sluice, tmp_path):
    # /dev/zero was read up to the 16 MiB cap, then refused as too large; a
    # terminal no one types into held the start for ever (run_sluice's
    # timeout is the hang guard).
    master, slave = os.openpty()
    tty = os.ttyname(slave)
    try:
        for dev in ("/dev/zero", tty):
            for cmd in (["serve", "--policy", dev, "--listen", "127.0.0.1:%d" % free_port()],
                        ["run", "--policy", dev, "--", "true"]):
                p = run_sluice(*cmd, timeout=60)
                assert p.returncode == 2, (cmd, p.returncode, p.stderr)
                assert p.stderr.splitlines() == [_device(dev)], p.stderr
    finally:
        os.close(slave)
        os.close(master)


def test_reload_of_a_terminal_fails_and_stop_works(sluice_bin, net, tmp_path):
    # The policy's path now names a terminal: the reload thread read it for
    # ever, no reload ended, and a SIGTERM never ended the gateway (its stop
    # waits for the reload thread).
    real = tmp_path / "policy.yaml"
    real.write_text(policy_yaml(net.policy([api_rule(net)])))
    link = str(tmp_path / "policy.link")
    os.symlink(str(real), link)
    master, slave = os.openpty()
    p = _start(sluice_bin, tmp_path, link)
    try:
        poll(lambda: "sluice: serving 1 rule" in _err(tmp_path) or p.poll() is not None,
             timeout=20, what="serving")
        assert p.poll() is None, _err(tmp_path)
        os.symlink(os.ttyname(slave), link + ".new")
        os.replace(link + ".new", link)
        p.send_signal(signal.SIGHUP)
        line = "sluice: reload failed: " + _device(link)
        poll(lambda: line in _err(tmp_path).splitlines() or None, timeout=30,
             what="the failed reload")
        assert _terminated(p) == 0, _err(tmp_path)
    finally:
        _stop(p, tmp_path)
        os.close(slave)
        os.close(master)
