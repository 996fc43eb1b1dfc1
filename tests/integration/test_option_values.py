"""A bad value for an option of serve, run, check or audit is a usage error
told one way for every option (docs/SPEC.md, Commands: exit 2, "a one-line
message on standard error naming the file, line and field where one
applies"): exit 2, nothing on standard output, and on standard error
exactly two lines, the first naming the command, the option and the value
as given (its control characters \\ooo), the second the command's usage.
Nothing starts first: no policy is loaded, no box built, so no warning or
other line comes before the error. Loopback only: a serve that took a bad
value would listen on 127.0.0.1:0, and the timeout ends it."""

import os
import socket
import subprocess

import pytest

# Each run is bounded by run_sluice's own hang guard: a bound of 10 s here
# was passed on a loaded machine by a usage error that exits at once.
POLICY = "version: 1\nrules:\n  - host: example.test\n    ports: [443]\n    tier: 0\n"

# What comes around the option, each command's other arguments ({p}: a
# policy that loads without a warning).
AROUND = {
    "serve": (["serve", "--policy", "{p}", "--listen", "127.0.0.1:0"], []),
    "run": (["run", "--policy", "{p}"], ["--", "true"]),
    "run-proxy": (["run"], ["--", "true"]),
    "check": (["check", "{p}"], []),
    "audit": (["audit", "mounts", "--mountinfo", "/proc/self/mountinfo"], []),
    "audit-pid": (["audit", "mounts"], []),
}

# (where, option, bad value): each option that takes a value, with values
# its parse refuses (malformed, out of range, empty, naming nothing).
BAD = [
    ("serve", "--policy", ""),
    ("serve", "--listen", "garbage"),
    ("serve", "--listen", "127.0.0.1:99999"),
    ("serve", "--listen", ""),
    ("serve", "--admin", "[127.0.0.1]:9128"),
    ("serve", "--admin", "garbage"),
    ("serve", "--admin", "[localhost]:9128"),
    ("serve", "--admin", "unix:admin.sock"),
    ("serve", "--admin", "0"),
    ("serve", "--admin", "127.0.0.1:0"),
    ("serve", "--admin", "x\n:0"),
    ("serve", "--admin", ""),
    ("serve", "--log", ""),
    ("serve", "--alerts", ""),
    ("serve", "--state", ""),
    ("serve", "--max-conns", "0"),
    ("serve", "--max-conns", "1000001"),
    ("serve", "--grace", "x"),
    ("serve", "--grace", "2h"),
    ("serve", "--sched", "idle"),
    ("serve", "--nice", "20"),
    ("serve", "--user", "no-such-user-sluice"),
    ("serve", "--user", ""),
    ("run", "--policy", ""),
    ("run-proxy", "--proxy", "x"),
    ("run-proxy", "--proxy", ""),
    ("run-proxy", "--proxy", "unix:/no-such-dir-sluice/gw.sock"),
    ("run-proxy", "--proxy", "unix:/"),
    ("run-proxy", "--proxy", "unix:/no-such-dir-sluice/gw\n.sock"),
    ("run", "--agent", "CI-Bot"),
    ("run", "--agent", ""),
    ("run", "--ro", ""),
    ("run", "--rw", ""),
    ("run", "--hide", ""),
    ("run", "--ro", "no-such-dir/x"),
    ("run", "--log", ""),
    ("run", "--log", "-"),
    ("run", "--alerts", ""),
    ("run", "--alerts", "-"),
    ("run", "--log", "/" + "a" * 4097),  # past PATH_MAX: no file can be opened by it
    ("run", "--alerts", "/" + "a" * 4097),
    ("run", "--gateway-user", "no-such-user-sluice"),
    ("run", "--gateway-user", ""),
    ("run", "--tmp-size", "x"),
    ("run", "--tmp-size", "0%"),
    ("check", "--now", "x"),
    ("check", "--now", "2026-02-30"),
    ("check", "--warn-days", "3651"),
    ("check", "--format", "yaml"),
    ("audit-pid", "--pid", "x"),
    ("audit-pid", "--pid", ""),
    ("audit-pid", "--pid", "999999999"),
    ("audit-pid", "--pid", "0"),
    ("audit", "--format", "yaml"),
    ("audit-pid", "--mountinfo", ""),
    ("audit", "--justify", ""),
]


def shown(value):
    """<value> as the usage errors show it: control characters, and the
    backslash, as \\ooo."""
    return "".join("\\%03o" % ord(c) if ord(c) < 0x20 or c in "\\\x7f" else c for c in value)


@pytest.mark.parametrize("where, option, value", BAD,
                         ids=["%s %s %r" % b for b in BAD])
def test_a_bad_option_value_is_one_line_and_the_usage(run_sluice, tmp_path, where, option,
                                                        value):
    (tmp_path / "p.yaml").write_text(POLICY)
    before, after = AROUND[where]
    args = [a.replace("{p}", str(tmp_path / "p.yaml")) for a in before]
    if option in args:  # the value stands for the one given around it, not twice
        args[args.index(option) + 1] = value
        r = run_sluice(*(args + after))
    else:
        r = run_sluice(*(args + [option, value] + after))
    command = args[0]
    lines = r.stderr.split("\n")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stdout == "", r.stdout
    assert len(lines) == 3 and lines[2] == "", r.stderr
    assert lines[0].startswith("sluice %s: " % command), r.stderr
    assert option in lines[0], r.stderr
    # named after the option: "-" or "" is in the option's own name
    assert shown(value) in lines[0].split(option, 1)[1], r.stderr
    # "" is in every line: an empty value is named as the others name it
    assert value != "" or "not an empty string" in lines[0] or "''" in lines[0], r.stderr
    assert lines[1].startswith("usage: sluice %s " % command), r.stderr


def test_check_of_an_empty_file_name_is_a_usage_error(run_sluice):
    """`sluice check "$POLICY"` with POLICY unset: as serve's --policy "",
    a usage error that says the name is empty, then the usage line; it was
    a file that could not be read, "cannot read : No such file or
    directory", naming nothing."""
    r = run_sluice("check", "")
    assert r.returncode == 2 and r.stdout == "", r
    lines = r.stderr.split("\n")
    assert len(lines) == 3 and lines[2] == "", r.stderr
    assert lines[0] == "sluice check: FILE is an empty string, not a file name (an unset " \
                       "variable?)", r.stderr
    assert lines[1].startswith("usage: sluice check FILE "), r.stderr


def test_check_of_two_files_names_the_one_too_many(run_sluice, tmp_path):
    """`sluice check policies/*.yaml` over two files: "expected one policy
    FILE" named neither, where serve, audit and version name the argument
    they do not take; it is named now, \\ooo as they name it."""
    (tmp_path / "p.yaml").write_text(POLICY)
    extra = "b\n.yaml"
    r = run_sluice("check", str(tmp_path / "p.yaml"), extra)
    assert r.returncode == 2 and r.stdout == "", r
    lines = r.stderr.split("\n")
    assert len(lines) == 3 and lines[2] == "", r.stderr
    assert lines[0] == ("sluice check: unexpected argument 'b\\012.yaml' (check reads one "
                        "policy FILE)"), r.stderr
    assert lines[1].startswith("usage: sluice check FILE "), r.stderr


def test_a_listener_that_cannot_open_names_its_listen_value(run_sluice, tmp_path):
    # Before: "sluice serve: 127.0.0.1:PORT: cannot listen: ..." named the
    # address the value came to, not the --listen value written (here with
    # its port zero-padded), and a unix socket's error named no option.
    (tmp_path / "p.yaml").write_text(POLICY)
    busy = socket.socket()
    try:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = run_sluice("serve", "--policy", tmp_path / "p.yaml",
                       "--listen", "127.0.0.1:0%d" % port)
    finally:
        busy.close()
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.endswith(
        "sluice serve: --listen 127.0.0.1:0%d: cannot listen on 127.0.0.1:%d: Address already in "
        "use\n" % (port, port)), r.stderr
    # A unix path, its line end shown \012: one that is a plain file.
    (tmp_path / "d\n").mkdir()
    (tmp_path / "d\n" / "gw.sock").write_text("")
    value = "unix:%s/d\n/gw.sock" % tmp_path
    r = run_sluice("serve", "--policy", tmp_path / "p.yaml", "--listen", value)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.endswith("sluice serve: --listen %s: exists and is not a socket\n"
                             % shown(value)), r.stderr


@pytest.mark.parametrize("uid, inner, why", [
    # a namespace that maps root alone: the user, 4242, is not mapped
    (4242, ["unshare", "--user", "--map-root-user"], "not mapped in this user namespace"),
    # as 4242 in its namespace, not root: only the user run already is would do
    (0, ["unshare", "--user", "--map-user=4242", "--map-group=4242"], "not running as root"),
], ids=["unmapped", "not-root"])
def test_gateway_user_is_named_shown(sluice_bin, tmp_path, uid, inner, why):
    # A --gateway-user that resolves (here from a user database bound over
    # /etc/passwd, its name holding a terminal escape) but cannot be
    # served as was named raw, the escape written to standard error.
    if os.geteuid() != 0:
        pytest.skip("needs root to bind a user database over /etc/passwd")
    (tmp_path / "p.yaml").write_text(POLICY)
    name = "ev\x1b[2Jil"
    passwd = tmp_path / "passwd"
    entry = "%s:x:%d:%d::/:/bin/false\n" % (name, uid, uid)
    passwd.write_text(open("/etc/passwd").read() + entry)
    r = subprocess.run(["unshare", "--mount", "sh", "-c",
                        'mount --bind "$0" /etc/passwd && exec "$@"', str(passwd)] + inner +
                       [sluice_bin, "run", "--policy", str(tmp_path / "p.yaml"),
                        "--gateway-user", name, "--", "true"],
                       capture_output=True, text=True, timeout=20, cwd=str(tmp_path))
    lines = r.stderr.split("\n")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(lines) == 3 and lines[1].startswith("usage: sluice run "), r.stderr
    assert lines[0].startswith("sluice run: --gateway-user %s: %s" % (shown(name), why)), r.stderr
