"""SPEC.md, Commands: where `serve` listens and writes when no flag says.
`serve` listens on 127.0.0.1:3128 when no --listen is given; without --log
decision events go to standard output; `--log -` and `--alerts -` mean
standard output."""

import json
import os
import subprocess
import sys

import pytest

from gate_client import EGRESS_KEYS, END_KEYS, api_rule, poll, request
from test_watch_admin import scrape
from watch_helpers import ALERT_KEYS, free_tcp_port

# Runs inside the test's own network namespace (loopback only): waits for
# the gateway on 127.0.0.1:3128, asks it for a host no rule covers, prints
# the answer's status line and Sluice-Reason.
CLIENT = r"""
import socket, sys, time
deadline = time.monotonic() + 20
while True:
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("nothing listens on 127.0.0.1:3128")
        time.sleep(0.05)
s.sendall(b"GET http://evil.example.test/x HTTP/1.1\r\nHost: evil.example.test\r\n"
          b"Connection: close\r\n\r\n")
data = b""
while len(data) < 65536:
    b = s.recv(4096)
    if not b:
        break
    data += b
head = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
print(head[0])
print([h for h in head[1:] if h.lower().startswith("sluice-reason:")][0])
"""


def _json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_serve_defaults_to_127_0_0_1_3128_and_logs_to_standard_output(sluice_bin, tmp_path):
    # an empty network namespace of the test's own: port 3128 is free there
    # and nothing leaves it
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nrules:\n  - host: api.example.test\n    tier: 0\n")
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    script = ('ip link set lo up || exit 1; '
              'unshare --user "$1" serve --policy "$2" >"$3" 2>"$4" & gw=$!; '
              '"$5" -c "$6"; client=$?; kill -TERM $gw; wait $gw; '
              'echo "client=$client serve=$?"')
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    p = subprocess.run(["unshare", "--user", "--map-root-user", "--net", "sh", "-c", script,
                        "sh", sluice_bin, str(policy), str(out), str(err), sys.executable,
                        CLIENT], capture_output=True, text=True, timeout=60, env=env,
                       cwd=str(tmp_path))
    gw_err = err.read_text() if err.exists() else ""
    assert p.stdout.splitlines()[-1:] == ["client=0 serve=0"], (p.stdout, p.stderr, gw_err)
    status, reason = p.stdout.splitlines()[:2]
    assert status.startswith("HTTP/1.1 403 "), status
    assert reason.lower() == "sluice-reason: not_in_policy", reason
    assert "127.0.0.1:3128" in gw_err, gw_err
    lines = _json_lines(out.read_text())
    egress = [e for e in lines if e["event"] == "agent_egress"]
    ends = [e for e in lines if e["event"] == "agent_egress_end"]
    assert len(egress) == 1 and len(ends) == 1, lines
    assert list(egress[0].keys()) == EGRESS_KEYS and list(ends[0].keys()) == END_KEYS
    assert egress[0]["host"] == "evil.example.test" and egress[0]["reason"] == "not_in_policy"


def test_log_dash_is_standard_output(gateway, net):
    gw = gateway(net.policy([api_rule(net)]), args=["--log", "-"])
    assert request(gw, "GET", net.url("/via-stdout")).status == 200
    lines = poll(lambda: (lambda ls: ls if len(ls) >= 2 else None)(
        [e for e in _json_lines(gw.stdout()) if e["event"].startswith("agent_egress")]),
        what="the decision and end events on standard output")
    assert [e["event"] for e in lines] == ["agent_egress", "agent_egress_end"], lines
    assert list(lines[0].keys()) == EGRESS_KEYS and lines[0]["path"] == "/via-stdout"
    assert list(lines[1].keys()) == END_KEYS and lines[1]["status"] == 200
    assert not os.path.exists(os.path.join(gw.workdir, "-"))


def test_alerts_dash_is_standard_output_not_the_log(gateway, net):
    gw = gateway(net.policy([api_rule(net)], alerts={"first_contact": True}),
                 args=["--alerts", "-"])
    assert request(gw, "GET", net.url("/first")).status == 200
    alerts = poll(lambda: [e for e in _json_lines(gw.stdout()) if e["event"] == "alert"],
                  what="a first_contact alert on standard output")
    assert alerts[0]["kind"] == "first_contact" and list(alerts[0].keys()) == ALERT_KEYS
    gw.wait_events("agent_egress_end")
    assert [e for e in gw.log_lines() if e["event"] == "alert"] == []
    assert [e for e in _json_lines(gw.stdout()) if e["event"] != "alert"] == []
    assert not os.path.exists(os.path.join(gw.workdir, "-"))


def _fds_on(pid, path):
    """How many of process <pid>'s descriptors are open on the file <path>."""
    want = os.stat(path)
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            st = os.stat("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        n += (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino)
    return n


@pytest.mark.parametrize("name", ["dot", "symlink", "hardlink", "stdout", "stderr"])
def test_alerts_naming_the_logs_file_is_the_logs_stream(gateway, net, tmp_path, name):
    # --alerts that names the decision log's file by another path is the
    # log's stream, as the same string is: one writer, one pending queue,
    # one set of log gauges. Compared as strings, `./log.jsonl` (a link,
    # /dev/stdout beside `--log -`) opened the file a second time, with a
    # writer of its own.
    d = tmp_path / "files"
    d.mkdir()
    log = d / "log.jsonl"
    if name == "dot":
        log_arg, alerts_arg = str(log), str(d) + "/./log.jsonl"  # neither exists yet
    elif name == "symlink":
        log_arg, alerts_arg = str(log), str(d / "link.jsonl")
        os.symlink("log.jsonl", alerts_arg)
    elif name == "hardlink":
        log.write_bytes(b"")
        log_arg, alerts_arg = str(log), str(d / "other-name.jsonl")
        os.link(str(log), alerts_arg)
    else:
        # "stderr": standard output is the file standard error has open (`>&2`),
        # which /dev/stderr names, not the relay's pipe descriptor 2 is then
        log_arg, alerts_arg = "-", "/dev/" + name
    port = free_tcp_port()
    gw = gateway(net.policy([api_rule(net)], alerts={"first_contact": True}),
                 args=["--log", log_arg, "--alerts", alerts_arg,
                       "--admin", "127.0.0.1:%d" % port],
                 prefix=["sh", "-c", 'exec "$@" >&2', "sh"] if name == "stderr" else ())
    assert request(gw, "GET", net.url("/first")).status == 200
    text = {"stdout": gw.stdout, "stderr": gw.stderr}.get(name, log.read_text)
    alerts = poll(lambda: [e for e in _json_lines(text()) if e["event"] == "alert"],
                  what="a first_contact alert in the log's stream")
    assert [a["kind"] for a in alerts] == ["first_contact"], alerts
    series, _ = scrape(port)
    logs = sorted(dict(labels)["log"] for (metric, labels) in series
                  if metric == "sluice_log_writable")
    assert logs == ["decisions"], logs
    if log_arg != "-":
        assert _fds_on(gw.proc.pid, str(log)) == 1
