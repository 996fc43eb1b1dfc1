"""The names the contract lists (docs/SPEC.md: deny reasons, alert kinds,
log keys, metric names and their labels) against what the source and the
running binary produce, both ways: a name the binary can produce that the
docs do not list, or one the docs list that nothing produces, fails here.

The lists are read from the docs' own text (the `### Deny reasons`
paragraph, the `Kinds:` line, README's table of alert kinds, the JSON
examples, every `sluice_*` name), and each read is checked to have found
what a list of that kind must hold, so a heading or line reworded cannot
make a comparison of two empty sets pass. Loopback only."""

import json
import os
import re
import subprocess

from gate_client import EGRESS_KEYS, END_KEYS, REASONS, request
from test_watch_admin import scrape
from watch_helpers import free_tcp_port, wait_alert

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def text(*path):
    with open(os.path.join(REPO, *path), encoding="utf-8") as f:
        return f.read()


def backticked(s):
    return re.findall(r"`([a-z0-9_]+)`", s)


def table_names(source, array):
    """The strings of a designated-initializer table in <source>
    (`[REASON_X] = "name",`), in order: the names the binary can produce."""
    body = source.split(array, 1)[1].split("};", 1)[0]
    return re.findall(r'\[[A-Z0-9_]+\] = "([a-z0-9_]+)"', body)


def spec_section(heading):
    spec = text("docs", "SPEC.md")
    assert heading in spec, "docs/SPEC.md has no %r" % heading
    return spec.split(heading, 1)[1]


def test_deny_reasons_listed_are_those_the_gateway_gives():
    source = table_names(text("src", "policy", "match.c"), "reason_names[REASON_COUNT]")
    listed = backticked(spec_section("### Deny reasons\n").split("\n\n", 1)[0])
    # the contract's nineteen and sluice's two additions at least
    assert len(source) >= 21 and len(listed) >= 21, (source, listed)
    assert len(set(listed)) == len(listed), listed
    assert set(listed) == set(source), (
        "listed, not produced: %s; produced, not listed: %s"
        % (sorted(set(listed) - set(source)), sorted(set(source) - set(listed))))
    # the tests' own list (every deny test asserts against it)
    assert set(REASONS) == set(source), sorted(set(REASONS) ^ set(source))


def test_alert_kinds_listed_are_those_the_detectors_raise():
    source = table_names(text("src", "watch", "alert.c"), "kind_names[ALERT_KIND_COUNT]")
    kinds_line = spec_section("## Alerts (JSON lines)\n").split("\nKinds: ", 1)[1].split("\n", 1)[0]
    listed = backticked(kinds_line.split(". ", 1)[0])
    readme = text("README.md").split("| kind | fires when |\n", 1)[1].split("\n\n", 1)[0]
    table = re.findall(r"^\| `([a-z0-9_]+)` \|", readme, re.M)
    assert len(source) >= 11 and len(listed) >= 11 and len(table) >= 11, (source, listed, table)
    for name, names in (("docs/SPEC.md Kinds", listed), ("README.md's table", table)):
        assert len(set(names)) == len(names), (name, names)
        assert set(names) == set(source), (
            "%s: listed, not raised: %s; raised, not listed: %s"
            % (name, sorted(set(names) - set(source)), sorted(set(source) - set(names))))


def json_examples(section):
    """The JSON objects of the first ```json block of <section>."""
    block = section.split("```json\n", 1)[1].split("\n```", 1)[0]
    return [json.loads(line) for line in block.splitlines()]


def test_log_and_alert_keys_are_those_of_the_examples(gateway, net, tmp_path):
    """The docs' example lines name the keys, in order, of the lines the
    gateway writes (the alert line with `count` after `detail`, as the
    SPEC's clarifications add)."""
    egress, end = json_examples(spec_section("## Decision log (JSON lines)\n"))
    assert list(egress) == EGRESS_KEYS and list(end) == END_KEYS, (list(egress), list(end))
    alert = json_examples(spec_section("## Alerts (JSON lines)\n"))[0]
    assert "`count`" in spec_section("after `detail`: ").split(".", 1)[0]
    alerts_path = str(tmp_path / "alerts.jsonl")
    gw = gateway(net.policy([{"host": "api.example.test", "ports": [net.api.port], "tier": 0}],
                            alerts={"first_contact": True}),
                 args=["--alerts", alerts_path])
    assert request(gw, "GET", net.url("/a")).status == 200
    ev, got_end = gw.decided(path="/a")
    assert list(ev) == list(egress) and list(got_end) == list(end), (ev, got_end)
    got = wait_alert(alerts_path, "first_contact")[0]
    assert list(got) == list(alert) + ["count"], list(got)


def test_metric_names_listed_are_those_the_admin_server_serves(gateway, net, tmp_path,
                                                                refused_port):
    """Every family /metrics can serve (all shown: a state store, an alerts
    file of its own, a webhook sink, a tier-3 grant) is one docs/SPEC.md
    names, with the labels it names; every `sluice_*` name the docs give
    is one the binary serves; the source holds no other."""
    port, hook = free_tcp_port(), refused_port().port
    pol = net.policy(
        [{"host": "api.example.test", "ports": [net.api.port], "tier": 3,
          "owner": "alice", "expires": "9999-01-01"}],
        alerts={"first_contact": True,
                "sinks": [{"webhook": "http://127.0.0.1:%d/hook" % hook}]})
    gw = gateway(pol, args=["--admin", "127.0.0.1:%d" % port, "--state", str(tmp_path / "st"),
                            "--alerts", str(tmp_path / "alerts.jsonl")])
    assert request(gw, "GET", net.url("/a")).status == 200
    gw.decided(path="/a")
    series, types = scrape(port)
    served = {}
    for name, labels in series:
        served.setdefault(name, set()).add(frozenset(k for k, _ in labels))
    assert set(served) == set(types), sorted(set(types) ^ set(served))
    source = set()
    for name in os.listdir(os.path.join(REPO, "src", "watch")):
        if name.endswith(".c"):
            source |= set(re.findall(r'"(sluice_[a-z0-9_]+)', text("src", "watch", name)))
    spec = text("docs", "SPEC.md")
    documented = set(re.findall(r"\b(sluice_[a-z0-9_]+)", spec))
    assert len(served) >= 24, sorted(served)
    assert set(served) == source, sorted(set(served) ^ source)
    assert documented == set(served), (
        "documented, not served: %s; served, not documented: %s"
        % (sorted(documented - set(served)), sorted(set(served) - documented)))
    for name, labels in re.findall(r"`(sluice_[a-z0-9_]+)\{([a-z_,]+)\}`",
                                   spec + text("README.md")):
        assert served[name] == {frozenset(labels.split(","))}, (name, labels, served[name])
    # README names each family too (a user's dashboards and alert rules are
    # written from it), and no other
    readme = set(re.findall(r"\b(sluice_[a-z0-9_]+)", text("README.md")))
    assert readme == set(served), (
        "in README, not served: %s; served, not in README: %s"
        % (sorted(readme - set(served)), sorted(set(served) - readme)))


def readme_sessions():
    """README's shell sessions that run sluice: blocks whose first line is
    `$ ` and a command naming `sluice`, with the output they show (`...`
    standing for lines left out)."""
    out = []
    for block in re.findall(r"```(?:console)?\n(\$ [^\n]*\n.*?)```", text("README.md"), re.S):
        first, shown = block.split("\n", 1)
        if " sluice " in " " + first[2:]:
            out.append((first[2:], shown.rstrip("\n").split("\n")))
    return out


def shows(shown, got):
    """Whether the lines <got> are the lines <shown>, each `...` of <shown>
    standing for any run of lines (none included)."""
    pattern = "\n".join(".*?" if line == "..." else re.escape(line) for line in shown)
    return re.fullmatch(pattern.replace("\n.*?\n", "(?:\n.*?)?\n"), "\n".join(got), re.S)


def test_readme_sessions_print_what_readme_shows(sluice_bin):
    """Each `$ sluice ...` session README shows, run as shown (from the
    repository, the binary first on PATH), prints what it shows: an
    operator who copies the command sees the same report."""
    sessions = readme_sessions()
    assert len(sessions) >= 2, sessions  # calc retries, check examples/ci-bot.yaml
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_TOKEN")}
    env["PATH"] = os.path.dirname(sluice_bin) + os.pathsep + env.get("PATH", "")
    for command, shown in sessions:
        r = subprocess.run(["sh", "-c", command], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=30)
        got = (r.stderr + r.stdout).rstrip("\n").split("\n")
        assert r.returncode == 0 and shows(shown, got), (command, r.returncode, got)


def synopsis_flags(block, command):
    """The long options the synopsis lines of <command> in <block> name
    (a line that starts `sluice COMMAND` and the indented lines after it)."""
    flags, inside = set(), False
    for line in block.split("\n"):
        if line.startswith("sluice "):
            inside = line.split()[1] == command
        elif not line.startswith(" "):
            inside = False
        if inside:
            flags |= set(re.findall(r"--[a-z][a-z-]*", line.split("#", 1)[0]))
    return flags


def test_flags_of_each_help_are_those_of_the_synopses_with_their_defaults(sluice_bin):
    """`sluice COMMAND --help` names the options docs/SPEC.md's and README's
    synopses give COMMAND, no more, no fewer; a default its option lines
    give as a figure (--max-conns 4096, --grace 5s, --tmp-size 25%) is the
    one docs/SPEC.md gives beside that option."""
    spec = text("docs", "SPEC.md")
    spec_block = spec.split("## Commands\n```\n", 1)[1].split("\n```", 1)[0]
    assert "\n# planned" in spec_block, spec_block
    spec_block = spec_block.split("\n# planned", 1)[0]  # not built: nothing to compare
    readme_block = text("README.md").split("## Commands\n\n```\n", 1)[1].split("\n```", 1)[0]
    sentences = re.split(r"(?<=\.)\s", spec)
    figures = 0
    for command in ("serve", "run", "check", "audit", "calc"):
        r = subprocess.run([sluice_bin, command, "--help"], capture_output=True, text=True,
                           timeout=10)
        assert r.returncode == 0, r.stderr
        usage = r.stdout.split("\n", 1)[0]
        helped = set(re.findall(r"--[a-z][a-z-]*", usage))
        assert helped, usage
        for name, block in (("docs/SPEC.md", spec_block), ("README.md", readme_block)):
            listed = synopsis_flags(block, command)
            assert listed == helped, (command, name, sorted(listed ^ helped))
        options = re.findall(r"^  (--[a-z-]+) (.*(?:\n {4,}.*)*)", r.stdout, re.M)
        defaults = [(opt, m.group(1)) for opt, said in options
                    for m in [re.search(r"\(default ([0-9][^ ;,)]*)", " ".join(said.split()))] if m]
        for opt, value in defaults:
            figures += 1
            # the figure, its unit apart or not (5s, 5 s), beside the option
            figure = re.sub(r"^([0-9.:]+)([a-zA-Z%]+)$", r"\1 ?\2", re.escape(value))
            said = [s for s in sentences if "`%s" % opt in s and re.search(
                r"default:? `?%s(?![0-9])|(?<![0-9.])%s`? when no `%s`" % (figure, figure, opt), s)]
            assert said, "docs/SPEC.md gives no default %s for %s %s" % (value, command, opt)
    assert figures >= 3, figures


def test_readme_curl_session_is_what_make_run_answers(gateway):
    """README's first session, `curl -i -x http://127.0.0.1:3128
    http://evil.test/upload` against the bundled policy `make run` serves:
    the refusal curl prints is README's, byte for byte, and so are the two
    log lines it shows, their times (ts, ms) and connection id aside.
    evil.test is in no rule, so nothing is resolved or sent beyond the
    gateway."""
    readme = text("README.md")
    command = "$ curl -i -x http://127.0.0.1:3128 http://evil.test/upload\n"
    assert command in readme, "README no longer shows the curl session"
    shown = readme.split(command, 1)[1].split("\n```", 1)[0]
    lines = readme.split(command, 1)[1].split("```\n", 2)[2].split("\n```", 1)[0]
    events = [json.loads(line) for line in lines.split("\n")]
    assert [e["event"] for e in events] == ["agent_egress", "agent_egress_end"], events
    gw = gateway(text("examples", "policy.yaml"))
    r = subprocess.run(["curl", "-sS", "--max-time", "20", "-i", "-x", gw.url,
                        "http://evil.test/upload"], capture_output=True, timeout=30,
                       env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    assert r.returncode == 0, r.stderr
    # the Date is the clock's, not the docs': README's stands for any
    # IMF-fixdate in its place
    imf = r"Date: [A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT\n"
    readme_date = re.search(imf, shown)
    assert readme_date is not None, shown
    said = r.stdout.decode().replace("\r\n", "\n")
    assert re.search(imf, said) is not None, said
    said = re.sub(imf, lambda _: readme_date.group(0), said, count=1)
    assert said == shown + "\n", r.stdout
    got = gw.decided(path="/upload")
    for want, ev in zip(events, got):
        for key in ("ts", "id", "ms"):  # a clock's and an order's, not the docs'
            want.pop(key, None)
            ev.pop(key, None)
        assert ev == want, (ev, want)


# A number each of these options refuses ('x', and one past its range), and
# the arguments around it.
RANGED = [("serve", "--max-conns", ["--policy", "p.yaml"]),
          ("serve", "--nice", ["--policy", "p.yaml"]),
          ("check", "--warn-days", ["p.yaml"]),
          ("calc", "--layers", ["retries", "--attempts", "3"]),
          ("calc", "--attempts", ["retries", "--layers", "3"])]


def test_numeric_option_ranges_in_usage_errors_are_those_docs_give(sluice_bin, tmp_path):
    """The range a numeric option's usage error names (`'x' is not a whole
    number (1 to 1000000)`) is the one docs/SPEC.md gives in a sentence that
    names the option: an operator reads the bounds before meeting them. A
    number past them is said to be out of range, not to be no number."""
    (tmp_path / "p.yaml").write_text("version: 1\nrules: []\n")
    sentences = [s.replace(",000", "000") for s in re.split(r"(?<=\.)\s", text("docs", "SPEC.md"))]
    for command, opt, around in RANGED:
        r = subprocess.run([sluice_bin, command] + around + [opt, "x"], capture_output=True,
                           text=True, timeout=10, cwd=str(tmp_path))
        assert r.returncode == 2, (opt, r.stderr)
        m = re.search(r"'x' is not a whole number \((-?\d+) to (-?\d+)\)$",
                      r.stderr.split("\n")[0])
        assert m, (opt, r.stderr)
        low, high = m.groups()
        past = str(int(high) + 1)
        r = subprocess.run([sluice_bin, command] + around + [opt, past], capture_output=True,
                           text=True, timeout=10, cwd=str(tmp_path))
        assert r.returncode == 2, (opt, r.stderr)
        assert r.stderr.split("\n")[0].endswith(
            "%s: '%s' is out of range (%s to %s)" % (opt, past, low, high)), (opt, r.stderr)
        bounds = r"(?<![\d-])%s(?:-| to )%s(?!\d)" % (re.escape(low), re.escape(high))
        said = [s for s in sentences if "`%s" % opt in s and re.search(bounds, s)]
        assert said, "docs/SPEC.md gives no range %s-%s for %s %s" % (low, high, command, opt)


def statuses(s):
    """The exit statuses <s> gives, each a figure before `when` or `on`,
    or after `exit` (`128+N when killed`, `1 when`, `exit 2`)."""
    found = re.findall(r"(?<![\w+])(\d+(?:\+N)?) (?:when|on)\b|\bexit (\d+)", s)
    return {when or after_exit for when, after_exit in found}


def test_run_help_gives_every_exit_status_docs_give(sluice_bin):
    """Each exit status docs/SPEC.md gives `run` (the command's own, 128+N
    for a signal, 127 and 126 as a shell, 1 for a command that exited 0 on
    standard streams cut short, 2 for a usage error or a box not built) is
    in the Exit status of `sluice run --help`, and that says no other: a
    script that tells a failed copy from the command's own failure reads
    there what it may meet."""
    spec = " ".join(text("docs", "SPEC.md").split())
    codes = spec.split("- Exit codes, every command: ", 1)[1].split(" - ", 1)[0]
    # the statuses `run` adds to the command's own, in the parentheses of
    # the Exit codes line and of the sentence on run's signals
    adds = codes.split("then `run` returns the child's own status", 1)[1].split(");", 1)[0]
    exits = spec.split("`run` exits with the command's status (", 1)[1].split("and prints", 1)[0]
    usage = re.search(r"(\d) usage or configuration error", codes).group(1)
    listed = statuses(adds) | statuses(exits) | {usage}
    assert {"128+N", "127", "126", "1", "2"} <= listed, listed
    r = subprocess.run([sluice_bin, "run", "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    assert "\nExit status: " in r.stdout, r.stdout
    helped = statuses(" ".join(r.stdout.split("\nExit status: ", 1)[1].split()))
    assert helped == listed, sorted(helped ^ listed)
