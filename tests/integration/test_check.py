"""`sluice check` and the command line, run as a user would run them.

Exit codes (SPEC.md): 0 clean (warnings allowed, but under --strict), 1 errors
found (or, under --strict, warnings), 2 usage error or unreadable file. Every error names file:line and the field.
"""
import json
import os
import re
import resource
import subprocess
import textwrap
import time

import pytest

from gate_client import coarse_clock_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples")
NOW = "2026-12-01"  # the examples' grants are judged as of this day

GOOD = """\
version: 1
agents:
  - id: ci-bot
    sources: [127.0.0.1/32, "unix"]
    token: env:SLUICE_TEST_TOKEN
rules:
  - host: registry.npmjs.org
    ports: [443]
    tier: 0
  - host: "*.docker.io"
    tier: 0
  - host: api.github.com
    methods: [GET, HEAD]
    tier: 1
  - host: api.github.com
    methods: [POST, PUT, PATCH, DELETE]
    tier: 3
    owner: chaysen
    expires: 2026-12-31
    agents: [ci-bot]
  - cidr: 192.168.10.0/24
    ports: [8080]
    tier: 2
deny:
  - gist.github.com
"""


@pytest.fixture(scope="module")
def sluice_bin():
    """The binary under test: $SLUICE_BIN, default build/sluice."""
    path = os.path.abspath(os.environ.get("SLUICE_BIN") or os.path.join(REPO, "build", "sluice"))
    assert os.access(path, os.X_OK), "sluice binary not found: %s" % path
    return path


def run(bin_, *args, env_extra=None):
    env = dict(os.environ)
    env["SLUICE_TEST_TOKEN"] = "s3cret-token-for-tests"
    if env_extra:
        env.update(env_extra)
    return subprocess.run([bin_, *args], capture_output=True, text=True, timeout=60, env=env)


def write(tmp_path, text, name="policy.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


# The warnings an example has on purpose: eval-fleet.yaml's canary runs in
# report mode, to learn what a new task needs.
EXAMPLE_WARNINGS = {
    "eval-fleet.yaml": ["agents[0].mode"],
}


@pytest.mark.parametrize("example", sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".yaml")))
def test_bundled_examples_are_clean(sluice_bin, example):
    r = run(sluice_bin, "check", os.path.join(EXAMPLES, example), "--now", NOW,
            "--format", "json", env_extra={"SLUICE_TOKEN_CI": "ci-token-of-sixteen-bytes-or-more"})
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["errors"] == []
    assert [w["field"] for w in doc["warnings"]] == EXAMPLE_WARNINGS.get(example, []), r.stdout


def readme_policies():
    """Every ```yaml block of README.md that is a policy or a part of one, as
    (line, text): a part (an `alerts:` or shaping excerpt) is completed with
    `version: 1` and, when it has no `rules`, one rule, so that what it shows
    is loaded as written. A block that is a YAML list (a CI job's steps) is
    no policy and is left out."""
    lines = open(os.path.join(REPO, "README.md"), encoding="utf-8").read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```yaml":
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            body = lines[i + 1:j]
            first = next((b for b in body if b.strip() and not b.lstrip().startswith("#")), "")
            if not first.startswith("- "):
                text = "\n".join(body) + "\n"
                if not re.search(r"^version:", text, re.M):
                    text = "version: 1\n" + text
                if not re.search(r"^rules:", text, re.M):
                    text += "rules:\n  - host: example.com\n    tier: 0\n"
                blocks.append((i + 1, text))
            i = j
        i += 1
    return blocks


@pytest.mark.parametrize("line,text", readme_policies(), ids=lambda v: "README.md:%s" % v
                         if isinstance(v, int) else "")
def test_readme_policies_are_clean(sluice_bin, tmp_path, line, text):
    """A policy the README shows loads as written, without a warning: a reader
    copies it."""
    path = tmp_path / "readme.yaml"
    path.write_text(text)
    r = run(sluice_bin, "check", str(path), "--now", NOW,
            env_extra={"SLUICE_TOKEN_CI": "ci-token-of-sixteen-bytes-or-more"})
    assert r.returncode == 0, "README.md:%d: %s" % (line, r.stdout + r.stderr)
    assert "result: 0 errors, 0 warnings" in r.stdout, "README.md:%d: %s" % (line, r.stdout)


def test_readme_lists_every_alert_kind():
    """The README's table of alert kinds has a row for each kind the gateway
    writes (src/watch/alert.c's names), and no other."""
    names = re.findall(r'\[ALERT_[A-Z0-9_]+\] = "([a-z0-9_]+)"',
                       open(os.path.join(REPO, "src", "watch", "alert.c")).read())
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| ",
                      open(os.path.join(REPO, "README.md"), encoding="utf-8").read(), re.M)
    assert len(names) >= 11, names
    assert sorted(rows) == sorted(names)


def test_readme_shows_policies():
    """The extraction above finds the README's policies (the walk-through, the
    shaping and alerts excerpts, the agents' policies), so the test cannot
    pass by finding none."""
    assert len(readme_policies()) >= 7


@pytest.mark.parametrize("day,why", [
    ("31/12/2026", "is not a YYYY-MM-DD date"),
    ("2026-02-30", "is not a day of the calendar"),
    ("1969-12-31", "is before 1970-01-01, the earliest date sluice reads"),
])
def test_check_now_that_is_no_day_says_why(sluice_bin, tmp_path, day, why):
    """--now takes a YYYY-MM-DD day from 1970-01-01 on; a well-formed day
    before that is not told its syntax is wrong."""
    r = run(sluice_bin, "check", write(tmp_path, GOOD), "--now", day)
    assert r.returncode == 2, r.stdout
    assert "sluice check: --now: '%s' %s" % (day, why) in r.stderr, r.stderr


def test_check_warns_of_a_token_short_enough_to_guess(sluice_bin, tmp_path):
    """Wrong tokens are 407s nothing throttles: a secret below 16 bytes is a
    warning (exit 0) naming the agent and its variable, never the value."""
    path = write(tmp_path, GOOD)
    r = run(sluice_bin, "check", path, "--now", NOW, env_extra={"SLUICE_TEST_TOKEN": "Qz81xw7"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("warning: %s:5: agents[0].token: environment variable SLUICE_TEST_TOKEN holds a "
            "secret shorter than 16 bytes: anyone who reaches the gateway can guess it (wrong "
            "tokens are not throttled); give agent 'ci-bot' a long random one, e.g. openssl "
            "rand -hex 16 (32 characters)" % path) in r.stdout, r.stdout
    assert r.stdout.rstrip().splitlines()[-1] == "result: 0 errors, 1 warning", r.stdout
    assert "Qz8" not in r.stdout + r.stderr
    r = run(sluice_bin, "check", path, "--now", NOW,
            env_extra={"SLUICE_TEST_TOKEN": "0123456789abcdef"})
    assert r.stdout.rstrip().splitlines()[-1] == "result: 0 errors, 0 warnings", r.stdout


def test_check_warns_of_a_token_read_from_a_variable_that_is_no_secret(sluice_bin, tmp_path):
    """`token: env:USER` reads a value every process on the host has (and
    anyone can guess): warned, naming the variable and the agent, never the
    value; set or not, since CI checks the policy without its secrets."""
    path = write(tmp_path, """\
        version: 1
        agents:
          - id: bot
            sources: [unix]
            token: env:USER
        rules:
          - host: a.example.com
            tier: 0
        """)
    said = ("warning: %s:5: agents[0].token: environment variable USER is no secret: every "
            "process and user on the host can read it, or guess it; give agent 'bot' a variable "
            "of its own that holds a long random secret" % path)
    for value in ("a-user-name-longer-than-sixteen-bytes", None):
        env = {"USER": value} if value else {}
        cmd = [sluice_bin, "check", path]
        e = dict(os.environ, **env)
        if value is None:
            e.pop("USER", None)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=e)
        assert r.returncode == 0, r.stdout + r.stderr
        assert said in r.stdout.splitlines(), r.stdout
        assert value is None or value not in r.stdout
        r = subprocess.run(cmd + ["--strict", "--format", "json"], capture_output=True,
                           text=True, timeout=60, env=e)
        assert r.returncode == 1, r.stdout + r.stderr
        assert json.loads(r.stdout)["ok"] is False


# A policy of one rule, whose line 5 on is the test's.
ONE_RULE = "version: 1\nrules:\n  - host: a.example.com\n    tier: 0\n"


def test_quarantine_without_denied_burst_is_a_warning(sluice_bin, tmp_path):
    """A quarantine starts when alerts.denied_burst trips: without it
    limits.quarantine never does, and the policy loaded without a word. A
    warning at its line (exit 0), which --strict fails; none with
    denied_burst."""
    text = ONE_RULE + "limits:\n  quarantine: 5m\n"
    path = write(tmp_path, text)
    said = ("warning: %s:6: limits.quarantine: 5m never starts: a quarantine starts when "
            "alerts.denied_burst trips, and the policy has no alerts.denied_burst; add one (e.g. "
            "denied_burst: {max: 10, per: 1m}) or remove quarantine" % path)
    r = run(sluice_bin, "check", path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert said in r.stdout.splitlines(), r.stdout
    r = run(sluice_bin, "check", path, "--strict")
    assert r.returncode == 1, r.stdout + r.stderr
    path = write(tmp_path, text + "alerts:\n  denied_burst: {max: 10, per: 1m}\n")
    r = run(sluice_bin, "check", path, "--strict")
    assert r.returncode == 0 and "never starts" not in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("field,value,said", [
    ("bandwidth", "10", "limits.rate.bandwidth: '10' has no unit, and a bandwidth needs one: "
                        "write 10B/s, 10KiB/s, 10MiB/s or 10GiB/s"),
    ("per", "10", "limits.rate.per: '10' has no unit, and a period needs one: write 10s, 10m "
                  "or 10h"),
])
def test_a_size_or_period_without_a_unit_is_an_error(sluice_bin, tmp_path, field, value, said):
    """SPEC.md gives sizes and periods with a unit only: `bandwidth: 10`
    loaded as 10 bytes a second, `per: 10` as 10 s, without a word."""
    path = write(tmp_path, ONE_RULE + "limits:\n  rate: {requests: 5, %s: %s}\n" % (field, value))
    r = run(sluice_bin, "check", path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error: %s:6: %s" % (path, said) in r.stdout.splitlines(), r.stdout


def test_check_audits_a_policy_whose_secrets_are_absent(sluice_bin, tmp_path):
    """CI checks the policy without the agents' secrets: a warning, not a failure."""
    path = write(tmp_path, GOOD)
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_TEST_TOKEN"}
    r = subprocess.run([sluice_bin, "check", path, "--now", "2026-11-30"], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stdout
    assert "policy.yaml:5: agents[0].token: environment variable SLUICE_TEST_TOKEN is not set" \
        in r.stdout


def test_strict_passes_unset_secrets_past_the_listed_cap(sluice_bin, tmp_path):
    """Past the first 1000 warnings the load counts the rest in one closing
    finding. When every warning is an unset secret's, that finding fails
    --strict no more than they do (before: 1001 agents failed where 1000
    passed); one real warning past the cap still fails it."""
    agents = "".join('  - {id: a%d, sources: [unix], token: "env:SLUICE_ABSENT_%d"}\n' % (i, i)
                     for i in range(1002))
    text = "version: 1\nagents:\n" + agents + "rules:\n  - {host: a.example.test, tier: 0}\n"
    path = tmp_path / "many.yaml"
    path.write_text(text)
    r = run(sluice_bin, "check", str(path), "--strict")
    assert r.returncode == 0, r.stdout[-2000:]
    assert "many.yaml: 2 more warnings not listed (the first 1000 are)" in r.stdout
    # the result counts every warning, the two not listed too (it said 1001:
    # the 1000 listed and the line that counts the rest)
    assert r.stdout.splitlines()[-1] == "result: 0 errors, 1002 warnings", r.stdout[-500:]
    # a warning of the file past the cap (a deny entry listed twice) fails it
    path.write_text(text + "deny: [x.example.test, x.example.test]\n")
    r = run(sluice_bin, "check", str(path), "--strict")
    assert r.returncode == 1, r.stdout[-2000:]
    assert "many.yaml: 3 more warnings not listed (the first 1000 are)" in r.stdout
    assert r.stdout.splitlines()[-1] == ("result: 0 errors, 1003 warnings: failed, warnings fail "
                                         "the check under --strict"), r.stdout[-500:]


def test_result_counts_errors_past_the_listed_cap(sluice_bin, tmp_path):
    """Past the first 1000 errors the rest are counted in one closing
    finding; the result line counts them all, as a CI log that keeps only
    its last line must tell 1500 errors from 1001 (before: 1001, the
    closing finding counted as one error)."""
    rules = "".join("  - {host: h%d.example.test, tier: 4}\n" % i for i in range(1500))
    path = tmp_path / "bad.yaml"
    path.write_text("version: 1\nrules:\n" + rules)
    r = run(sluice_bin, "check", str(path))
    assert r.returncode == 1, r.stdout[-2000:]
    assert "bad.yaml: 500 more errors not listed (the first 1000 are)" in r.stdout
    assert r.stdout.splitlines()[-1] == "result: 1500 errors, 0 warnings", r.stdout[-500:]
    doc = json.loads(run(sluice_bin, "check", str(path), "--format", "json").stdout)
    assert len(doc["errors"]) == 1001 and doc["ok"] is False  # listed: 1000 and the count


def test_default_policy_enables_no_tier3(sluice_bin):
    r = run(sluice_bin, "check", os.path.join(EXAMPLES, "policy.yaml"), "--now", NOW,
            "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["summary"]["tiers"]["3"] == 0
    assert doc["tier3_grants"] == []
    assert doc["summary"]["tiers"]["0"] > 10


@pytest.mark.parametrize("now", [None, "1970-01-01", "9999-12-31"])
def test_default_policy_is_clean_on_any_day(sluice_bin, now):
    """`make run` serves examples/policy.yaml: it holds no dated grant, so
    check finds it as clean today (no --now: the real clock), on the first
    day it reads and on the last, as serve finds it on any day it starts."""
    days = ["--now", now] if now else []
    r = run(sluice_bin, "check", os.path.join(EXAMPLES, "policy.yaml"), *days, "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["errors"] == [], r.stdout
    assert [w["field"] for w in doc["warnings"]] == EXAMPLE_WARNINGS.get("policy.yaml", []), r.stdout


def test_report_text_lists_tiers_grants_and_reach(sluice_bin, tmp_path):
    path = write(tmp_path, GOOD)
    r = run(sluice_bin, "check", path, "--now", "2026-11-30")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "5 rules, 1 agent, 1 deny entry" in out  # counts of one in the singular
    assert "tier 0 unauthenticated read: 2" in out
    assert "tier 3 public write: 1" in out
    assert "tier-3 grants (1)" in out
    assert "owner chaysen  expires 2026-12-31 (31 days left)" in out
    assert "ci-bot (enforce; sources 127.0.0.1/32 unix; token env:SLUICE_TEST_TOKEN)" in out
    assert "gist.github.com" in out


def test_report_json_is_one_document_with_the_same_facts(sluice_bin, tmp_path):
    path = write(tmp_path, GOOD)
    r = run(sluice_bin, "check", path, "--now", "2026-11-30", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is True
    assert doc["summary"] == {"rules": 5, "agents": 1, "deny": 1,
                              "tiers": {"0": 2, "1": 1, "2": 1, "3": 1}}
    (grant,) = doc["tier3_grants"]
    assert grant["rule"] == "rules[3]"
    assert grant["owner"] == "chaysen"
    assert grant["expires"] == "2026-12-31"
    assert grant["days_left"] == 31
    assert grant["methods"] == ["POST", "PUT", "PATCH", "DELETE"]
    (agent,) = doc["agents"]
    assert agent["id"] == "ci-bot"
    reach = {(x["host"], x["tier"]) for x in agent["reach"]}
    assert ("api.github.com", 3) in reach
    assert ("192.168.10.0/24", 2) in reach
    assert doc["deny"] == ["gist.github.com"]


def test_report_lists_the_names_dns_static_pins(sluice_bin, tmp_path):
    """A dns.static entry sends every request for its name to its address,
    whatever DNS says: the report left it out, and a reviewer reading it
    could not see that api.example.test goes to 10.1.2.3. Listed, in
    normal form, with address and line; none listed without pins."""
    path = write(tmp_path, """\
        version: 1
        rules:
          - host: api.example.test
            tier: 1
        dns:
          static:
            api.example.test: 10.1.2.3
            Mirror.Example.Test.: "2001:db8::7"
        """)
    r = run(sluice_bin, "check", path, "--now", "2026-11-30")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("\nresolved by the gateway itself (dns.static), before any DNS server:\n"
            "    api.example.test -> 10.1.2.3  (line 7)\n"
            "    mirror.example.test -> 2001:db8::7  (line 8)\n\nreach per agent:\n") in r.stdout
    r = run(sluice_bin, "check", path, "--now", "2026-11-30", "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["dns_static"] == [
        {"name": "api.example.test", "address": "10.1.2.3", "line": 7},
        {"name": "mirror.example.test", "address": "2001:db8::7", "line": 8}]
    path = write(tmp_path, GOOD, name="good.yaml")
    r = run(sluice_bin, "check", path, "--now", "2026-11-30", "--format", "json")
    assert json.loads(r.stdout)["dns_static"] == []
    r = run(sluice_bin, "check", path, "--now", "2026-11-30")
    assert "dns.static" not in r.stdout


def test_rules_the_deny_list_covers_are_marked_denied(sluice_bin, tmp_path):
    """A rule whose every name the deny list covers never applies (deny is
    checked first): load warns, and the report listed it as `live` in the
    reach of every agent and among the grants (left alone at stop 23). Its
    state is `denied`, it names the entry, and the text says so; a rule
    covered in part stays live."""
    path = write(tmp_path, """\
        version: 1
        rules:
          - host: gist.github.com
            tier: 0
          - host: api.github.com
            methods: [POST]
            tier: 3
            owner: chaysen
            expires: 2026-12-31
          - host: "*.example.test"
            tier: 0
        deny: [x.test, gist.github.com, "*.github.com", a.example.test]
        """)
    r = run(sluice_bin, "check", path, "--now", "2026-11-30", "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    (agent,) = doc["agents"]
    states = [(x["host"], x["state"], x.get("denied_by")) for x in agent["reach"]]
    assert states == [("gist.github.com", "denied", "deny[1]"),
                      ("api.github.com", "denied", "deny[2]"),
                      ("*.example.test", "live", None)]
    (grant,) = doc["tier3_grants"]
    assert (grant["state"], grant["denied_by"]) == ("denied", "deny[2]")
    r = run(sluice_bin, "check", path, "--now", "2026-11-30")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rules[0]   gist.github.com:80,443  DENIED by deny[1]: never applies\n" in r.stdout
    assert ("rules[1]   api.github.com:80,443 [POST]  owner chaysen  expires 2026-12-31 (31 days "
            "left)  DENIED by deny[2]: never applies\n") in r.stdout
    assert "rules[2]   *.example.test:80,443\n" in r.stdout


def test_without_agents_everyone_is_default(sluice_bin, tmp_path):
    path = write(tmp_path, """\
        version: 1
        rules:
          - host: pypi.org
            tier: 0
          - host: git.example.com
            tier: 2
            agents: [run]
        """)
    r = run(sluice_bin, "check", path, "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    ids = {a["id"]: a for a in doc["agents"]}
    assert [x["host"] for x in ids["default"]["reach"]] == ["pypi.org"]
    # An agent that only rules name (e.g. `sluice run --agent run`) is listed too.
    assert ids["run"]["defined"] is False
    assert {x["host"] for x in ids["run"]["reach"]} == {"pypi.org", "git.example.com"}
    assert ids["default"]["encrypted_client_hello"] == "refuse"


def test_report_says_which_agents_encrypted_client_hello_is_let_through_for(sluice_bin,
                                                                              tmp_path):
    path = write(tmp_path, """\
        version: 1
        agents:
          - {id: browser, sources: [127.0.0.1/32], encrypted_client_hello: allow}
          - {id: bot, sources: [unix]}
          - {id: strict, sources: [10.0.0.1/32], encrypted_client_hello: refuse}
        rules:
          - host: pypi.org
            tier: 0
            agents: [browser, bot, strict, run]
        network:
          encrypted_client_hello: allow
        """)
    r = run(sluice_bin, "check", path, "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    ech = {a["id"]: a["encrypted_client_hello"] for a in doc["agents"]}
    assert ech == {"browser": "allow", "bot": "allow", "strict": "refuse", "run": "allow"}
    fields = {w["field"] for w in doc["warnings"]}
    assert {"agents[0].encrypted_client_hello", "network.encrypted_client_hello"} <= fields
    out = run(sluice_bin, "check", path).stdout
    assert "browser (enforce; sources 127.0.0.1/32; Encrypted Client Hello let through)" in out
    assert "strict (enforce; sources 10.0.0.1/32):" in out


def test_expired_grant_fails_the_build(sluice_bin, tmp_path):
    path = write(tmp_path, GOOD)
    r = run(sluice_bin, "check", path, "--now", "2027-01-01")
    assert r.returncode == 1
    assert "policy.yaml:19: rules[3].expires:" in r.stdout
    assert "expired on 2026-12-31, 1 day ago" in r.stdout
    # The last valid day is still valid.
    assert run(sluice_bin, "check", path, "--now", "2026-12-31").returncode == 0


def test_a_policy_whose_only_errors_are_expired_grants_still_gets_its_report(sluice_bin, tmp_path):
    """README (sluice check, Errors): the report is printed for a policy whose
    only errors are expired grants, each such rule marked `EXPIRED DATE (N days
    ago)` in the text and `"state": "expired"` in JSON, so the audit still shows
    what the rest of the policy grants."""
    path = write(tmp_path, GOOD)
    r = run(sluice_bin, "check", path, "--now", "2027-01-06")
    assert r.returncode == 1, r.stdout + r.stderr
    marked = [l for l in r.stdout.splitlines() if "EXPIRED 2026-12-31 (6 days ago)" in l]
    # once among the tier-3 grants, once in ci-bot's reach
    assert len(marked) == 2, r.stdout
    assert all("api.github.com:80,443 [POST PUT PATCH DELETE]" in l for l in marked), marked
    assert "reach per agent:" in r.stdout
    assert "result: 1 error," in r.stdout

    r = run(sluice_bin, "check", path, "--now", "2027-01-06", "--format", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    states = re.findall(r'"state": "(\w+)"', r.stdout)
    assert "expired" in states and "live" in states, states


def test_expiry_findings_tell_no_owner_from_an_owner_called_none(sluice_bin, tmp_path):
    """Both a rule without an owner and one whose owner is "none" were
    reported as "owner none": the owner is quoted, its absence said."""
    path = write(tmp_path, """\
        version: 1
        rules:
          - host: a.example.com
            tier: 1
            expires: 2026-11-01
          - host: b.example.com
            methods: [POST]
            tier: 3
            owner: none
            expires: 2026-11-01
        """)
    r = run(sluice_bin, "check", path, "--now", NOW)
    assert r.returncode == 1, r.stdout + r.stderr
    assert ("error: %s:5: rules[0].expires: grant for a.example.com (tier 1, no owner) expired "
            "on 2026-11-01, 30 days ago" % path) in r.stdout, r.stdout
    assert ("error: %s:10: rules[1].expires: grant for b.example.com (tier 3, owner 'none') "
            "expired on 2026-11-01, 30 days ago" % path) in r.stdout, r.stdout


def test_tier3_grant_expiring_more_than_a_year_ahead_warns(sluice_bin, tmp_path):
    """`expires: 9999-12-31` satisfies "a tier-3 grant names an expiry" and
    defeats it: nobody looks at the grant again. More than 365 days after
    check's today is a warning with the days (so --strict fails it); a year
    to the day is not, nor a far date on a rule below tier 3."""
    text = GOOD.replace("expires: 2026-12-31", "expires: 9999-12-31").replace("deny:\n", """\
  - host: s3.example.com
    tier: 2
    expires: 9999-12-31
deny:
""")
    path = write(tmp_path, text)
    r = run(sluice_bin, "check", path, "--now", NOW)
    assert r.returncode == 0, r.stdout + r.stderr
    said = ("warning: %s:19: rules[3].expires: tier-3 grant for api.github.com (owner 'chaysen') "
            "expires on 9999-12-31, 2912108 days from now, more than 365: an expiry that far "
            "makes no one look at the grant again; give it a date within a year" % path)
    assert r.stdout.splitlines()[0] == said, r.stdout
    assert r.stdout.endswith("\nresult: 0 errors, 1 warning\n"), r.stdout
    r = run(sluice_bin, "check", path, "--now", NOW, "--strict", "--format", "json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert [(w["line"], w["field"]) for w in doc["warnings"]] == [(19, "rules[3].expires")]
    assert doc["tier3_grants"][0]["days_left"] == 2912108
    path = write(tmp_path, GOOD.replace("expires: 2026-12-31", "expires: 2027-12-01"))
    r = run(sluice_bin, "check", path, "--now", NOW, "--strict")
    assert r.returncode == 0 and "warning:" not in r.stdout, r.stdout
    r = run(sluice_bin, "check", path, "--now", "2026-11-30", "--strict")
    assert r.returncode == 1 and "366 days from now, more than 365" in r.stdout, r.stdout


def test_expiring_grant_warns_but_passes(sluice_bin, tmp_path):
    path = write(tmp_path, GOOD)
    r = run(sluice_bin, "check", path, "--now", "2026-12-20")
    assert r.returncode == 0
    assert "warning: " in r.stdout and "11 days left" in r.stdout
    r = run(sluice_bin, "check", path, "--now", "2026-12-20", "--warn-days", "5")
    assert r.returncode == 0 and "warning:" not in r.stdout
    r = run(sluice_bin, "check", path, "--now", "2026-11-01", "--warn-days", "100")
    assert "warning:" in r.stdout
    # a leading zero is decimal, as in every numeric option: 012 is 12 days
    # (11 left: a warning), not octal 10
    r = run(sluice_bin, "check", path, "--now", "2026-12-20", "--warn-days", "012")
    assert r.returncode == 0 and "11 days left" in r.stdout, r.stdout


def test_strict_fails_a_check_whose_only_findings_are_warnings(sluice_bin, tmp_path):
    """Warnings exit 0, so a policy with a risk a reviewer flagged (a grant
    about to expire here) passed CI; under --strict it fails with the exit
    code of a policy with errors, and says why in both formats."""
    path = write(tmp_path, GOOD)
    r = run(sluice_bin, "check", path, "--now", "2026-12-20")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.endswith("\nresult: 0 errors, 1 warning\n"), r.stdout
    r = run(sluice_bin, "check", path, "--now", "2026-12-20", "--strict")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "warning: " in r.stdout and "11 days left" in r.stdout
    assert r.stdout.endswith("\nresult: 0 errors, 1 warning: failed, warnings fail the check "
                             "under --strict\n"), r.stdout
    for extra, code in (([], 0), (["--strict"], 1)):
        r = run(sluice_bin, "check", path, "--now", "2026-12-20", "--format", "json", *extra)
        assert r.returncode == code, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        assert doc["ok"] is (code == 0) and doc["strict"] is bool(extra), doc
        assert len(doc["warnings"]) == 1 and doc["errors"] == []
        assert "summary" in doc  # the report is still printed in full
    # a clean policy passes under --strict; errors fail it as ever, without
    # the warnings' reason on their result line
    r = run(sluice_bin, "check", path, "--now", "2026-12-01", "--strict")
    assert r.returncode == 0 and r.stdout.endswith("\nresult: 0 errors, 0 warnings\n"), r.stdout
    r = run(sluice_bin, "check", path, "--now", "2027-01-01", "--strict")
    assert r.returncode == 1 and r.stdout.endswith("\nresult: 1 error, 0 warnings\n"), r.stdout
    doc = json.loads(run(sluice_bin, "check", path, "--now", "2026-12-01", "--strict",
                         "--format", "json").stdout)
    assert doc["ok"] is True and doc["strict"] is True


def test_strict_fails_a_wildcard_over_a_suffix_anyone_registers_under(sluice_bin, tmp_path):
    """*.workers.dev is no ICANN suffix, so it loaded without a word, yet
    anyone registers a name under it (the Public Suffix List's private
    section): the wildcard lets the agent reach a stranger's endpoint. It
    loads with a warning at its line naming the suffix, so --strict fails;
    a company's own wildcard stays clean."""
    path = write(tmp_path, """\
        version: 1
        rules:
          - host: "*.github.com"
            tier: 0
          - host: "*.workers.dev"
            tier: 0
        """)
    r = run(sluice_bin, "check", path, "--now", NOW)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("policy.yaml:5: rules[1].host: *.workers.dev: names under workers.dev are "
            "registered by anyone (Public Suffix List, private section): the wildcard lets "
            "the agent reach any of them; name the hosts\n") in r.stdout, r.stdout
    assert r.stdout.endswith("\nresult: 0 errors, 1 warning\n"), r.stdout
    r = run(sluice_bin, "check", path, "--now", NOW, "--strict", "--format", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert [(w["line"], w["field"]) for w in doc["warnings"]] == [(5, "rules[1].host")], doc
    path = write(tmp_path, """\
        version: 1
        rules:
          - host: "*.github.com"
            tier: 0
          - host: my-worker.workers.dev
            tier: 0
        """, "clean.yaml")
    r = run(sluice_bin, "check", path, "--now", NOW, "--strict")
    assert r.returncode == 0 and r.stdout.endswith("\nresult: 0 errors, 0 warnings\n"), r.stdout


TAKEN_GRANT = """\
version: 1
rules:
  - host: "*.example.com"
    methods: [POST]
    tier: 3
    owner: chaysen
    expires: 2026-12-31
  - host: api.example.com
    tier: 1
"""


def test_strict_fails_a_grant_a_more_specific_lower_rule_takes(sluice_bin, tmp_path):
    """An exact host beats a wildcard whatever the tiers, so every POST to
    api.example.com went through at tier 1 (no owner, no expiry, no
    tier3_write alert) while check passed and listed the grant as signed.
    It is a warning naming both rules' lines, so --strict fails; restricting
    the tier-1 rule's methods clears it."""
    path = write(tmp_path, TAKEN_GRANT)
    r = run(sluice_bin, "check", path, "--now", "2026-12-01", "--strict")
    assert r.returncode == 1, r.stdout + r.stderr
    assert (f"warning: {path}:8: rules[1]: takes POST to api.example.com at tier 1 from the "
            "tier-3 grant rules[0] (line 3) for *.example.com: its pattern is more specific, "
            "so it decides those requests, without the grant's owner, expiry or tier3_write "
            "alert; write it as tier 3 or restrict its methods\n") in r.stdout, r.stdout
    doc = json.loads(run(sluice_bin, "check", path, "--now", "2026-12-01", "--strict",
                         "--format", "json").stdout)
    assert doc["ok"] is False and len(doc["warnings"]) == 1, doc["warnings"]
    path = write(tmp_path, TAKEN_GRANT + "    methods: [GET, HEAD]\n", "restricted.yaml")
    r = run(sluice_bin, "check", path, "--now", "2026-12-01", "--strict")
    assert r.returncode == 0 and r.stdout.endswith("\nresult: 0 errors, 0 warnings\n"), r.stdout


def test_strict_lets_a_secret_unset_where_the_check_runs_be(sluice_bin, tmp_path):
    """An env: token whose variable is unset is a warning, not an error, so
    that CI can check a policy without its secrets: --strict must not turn
    that into a failing build, while any other warning still fails it."""
    env = os.environ.copy()
    env.pop("SLUICE_TOKEN_CI", None)
    pol = ("version: 1\nagents:\n  - {id: ci-bot, sources: [127.0.0.1/32],"
           " token: env:SLUICE_TOKEN_CI}\nrules:\n  - {host: a.example.test, tier: 0}\n")
    path = write(tmp_path, pol)
    r = subprocess.run([sluice_bin, "check", path, "--strict"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SLUICE_TOKEN_CI is not set here" in r.stdout, r.stdout
    assert r.stdout.endswith("\nresult: 0 errors, 1 warning\n"), r.stdout
    r = subprocess.run([sluice_bin, "check", path, "--strict", "--format", "json"],
                       capture_output=True, text=True, env=env, timeout=60)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["ok"] is True and len(doc["warnings"]) == 1, r.stdout
    # with a warning about the file itself beside it, --strict fails as ever
    path = write(tmp_path, pol + "  - {host: b.example.test, tier: 0, agents: [nobody]}\n")
    r = subprocess.run([sluice_bin, "check", path, "--strict"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.endswith("\nresult: 0 errors, 2 warnings: failed, warnings fail the check "
                             "under --strict\n"), r.stdout


def test_ipv6_range_that_holds_all_of_ipv4_warns(sluice_bin, tmp_path):
    # IPv4 is matched as ::ffff:a.b.c.d: "::/0" in allow_ranges opens
    # 169.254.169.254 and RFC 1918 as well; a narrower IPv6 range does not
    pol = "version: 1\nrules:\n  - {host: a.example.test, tier: 0}\nnetwork:\n"
    path = write(tmp_path, pol + '  allow_ranges: ["::/0"]\n')
    r = run(sluice_bin, "check", path, "--now", NOW)
    assert r.returncode == 0
    assert ":5: network.allow_ranges[0]: '::/0' also covers every IPv4 address" in r.stdout
    path = write(tmp_path, pol + '  allow_ranges: ["2000::/3", "fd00::/8"]\n')
    r = run(sluice_bin, "check", path, "--now", NOW)
    assert r.returncode == 0 and "warning:" not in r.stdout, r.stdout


def test_warn_days_default_comes_from_the_policy(sluice_bin, tmp_path):
    path = write(tmp_path, GOOD + "alerts:\n  expiry_warn_days: 40\n")
    r = run(sluice_bin, "check", path, "--now", "2026-11-25")  # 36 days left
    assert r.returncode == 0
    assert "36 days left" in r.stdout and "warning:" in r.stdout
    r = run(sluice_bin, "check", path, "--now", "2026-11-25", "--format", "json")
    assert json.loads(r.stdout)["warn_days"] == 40


BAD_CASES = [
    ("tier-3 without owner", """\
        version: 1
        rules:
          - host: api.github.com
            tier: 3
            expires: 2027-01-01
        """, "policy.yaml:3: rules[0].owner:"),
    ("tier-3 without expires", """\
        version: 1
        rules:
          - host: api.github.com
            tier: 3
            owner: chaysen
        """, "policy.yaml:3: rules[0].expires:"),
    ("tier-3 owner that names nobody", """\
        version: 1
        rules:
          - host: api.github.com
            tier: 3
            owner: "  "
            expires: 9999-12-31
        """, "policy.yaml:5: rules[0].owner:"),
    ("tier out of range", """\
        version: 1
        rules:
          - host: api.github.com
            tier: 5
        """, "policy.yaml:4: rules[0].tier:"),
    ("wildcard over a public suffix", """\
        version: 1
        rules:
          - host: pypi.org
            tier: 0
          - host: "*.co.uk"
            tier: 0
        """, "policy.yaml:5: rules[1].host:"),
    ("bare star", """\
        version: 1
        rules:
          - host: "*"
            tier: 0
        """, "policy.yaml:3: rules[0].host:"),
    ("mid-label glob", """\
        version: 1
        rules:
          - host: "api*.github.com"
            tier: 0
        """, "policy.yaml:3: rules[0].host:"),
    ("bad cidr", """\
        version: 1
        rules:
          - cidr: 10.0.0.0/33
            tier: 2
        """, "policy.yaml:3: rules[0].cidr:"),
    ("bad port", """\
        version: 1
        rules:
          - host: pypi.org
            ports: [443, 70000]
            tier: 0
        """, "policy.yaml:4: rules[0].ports"),
    ("duplicate rule", """\
        version: 1
        rules:
          - host: pypi.org
            tier: 0
          - host: PyPI.org.
            tier: 1
        """, "policy.yaml:5: rules[1]:"),
    ("unknown key", """\
        version: 1
        rules:
          - host: pypi.org
            tier: 0
            prots: [443]
        """, "policy.yaml:5: rules[0]:"),
    ("yaml syntax", """\
        version: 1
        rules:
          - host: pypi.org
            tier: [0
        """, "policy.yaml:"),
]


@pytest.mark.parametrize("name,text,where", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_policy_errors_exit_1_naming_file_line_and_field(sluice_bin, tmp_path, name, text, where):
    path = write(tmp_path, text)
    r = run(sluice_bin, "check", path, "--now", "2026-11-30")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error: " + path.rsplit("/", 1)[0] + "/" + where in r.stdout, r.stdout
    assert "result: " in r.stdout and "0 errors" not in r.stdout


def test_every_error_is_reported_not_just_the_first(sluice_bin, tmp_path):
    path = write(tmp_path, """\
        version: 1
        rules:
          - host: "*.com"
            tier: 0
          - host: api.github.com
            tier: 3
          - host: pypi.org
            tier: 9
        """)
    r = run(sluice_bin, "check", path, "--format", "json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    fields = {e["field"] for e in doc["errors"]}
    assert {"rules[0].host", "rules[1].owner", "rules[1].expires", "rules[2].tier"} <= fields
    for e in doc["errors"]:
        assert e["file"] == path and e["line"] > 0


def test_expired_grants_are_reported_next_to_other_errors(sluice_bin, tmp_path):
    # a load error elsewhere must not hide an expired grant (the rules that
    # parsed are still linted), but there is no report for a broken policy
    path = write(tmp_path, """\
        version: 1
        rules:
          - host: "*.com"
            tier: 0
          - host: pypi.org
            tier: 0
          - host: api.github.com
            tier: 3
            owner: alice
            expires: 2020-01-01
          - host: bad..host
            tier: 3
            owner: bob
            expires: 2020-01-01
        """)
    r = run(sluice_bin, "check", path, "--now", NOW, "--format", "json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and "summary" not in doc
    fields = [e["field"] for e in doc["errors"]]
    assert "rules[0].host" in fields and "rules[3].host" in fields
    assert "rules[2].expires" in fields
    assert any("expired on 2020-01-01" in e["message"] for e in doc["errors"])
    # the rule whose host did not parse names nothing: no expiry finding
    assert "rules[3].expires" not in fields
    r = run(sluice_bin, "check", path, "--now", NOW)
    assert r.returncode == 1
    assert "rules[2].expires: grant for api.github.com" in r.stdout
    assert r.stdout.rstrip().splitlines()[-1] == "result: 3 errors, 0 warnings"


def test_errors_in_json_name_line_and_field(sluice_bin, tmp_path):
    path = write(tmp_path, BAD_CASES[0][1])
    r = run(sluice_bin, "check", path, "--format", "json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["ok"] is False
    assert doc["errors"][0]["line"] == 3
    assert doc["errors"][0]["field"] == "rules[0].owner"


@pytest.mark.parametrize("args", [
    ["check"],
    ["check", "/nonexistent/policy.yaml"],
    ["check", "/"],
    ["check", "{good}", "--bogus"],
    ["check", "{good}", "--format", "xml"],
    ["check", "{good}", "--now", "2026-13-01"],
    ["check", "{good}", "--warn-days", "-3"],
    ["check", "{good}", "{good}"],
    ["frobnicate"],
    [],
])
def test_usage_errors_exit_2(sluice_bin, tmp_path, args):
    good = write(tmp_path, GOOD)
    r = run(sluice_bin, *[a.replace("{good}", good) for a in args])
    assert r.returncode == 2, r.stdout + r.stderr
    assert "usage" in r.stderr or "cannot read" in r.stderr


@pytest.mark.parametrize("args,flag", [
    (["--now", "2026-01-01", "--now", "2027-01-01"], "--now"),
    (["--warn-days", "30", "--warn-days=0"], "--warn-days"),
    (["--format", "json", "--form", "text"], "--format"),
])
def test_a_flag_given_twice_is_a_usage_error(sluice_bin, tmp_path, args, flag):
    """Each flag took the last of its values without a word: a wrapper that
    adds `--now` or `--format` to an operator's own had the check judge
    another day, or print another report, than the one asked for (as
    `sluice audit mounts` and `calc` refuse a repeated flag)."""
    good = write(tmp_path, GOOD)
    r = run(sluice_bin, "check", good, *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ""
    assert r.stderr.splitlines()[0] == "sluice check: %s given twice" % flag, r.stderr
    assert r.stderr.splitlines()[1].startswith("usage: sluice check")


def test_unreadable_file_exits_2(sluice_bin, tmp_path):
    path = write(tmp_path, GOOD)
    os.chmod(path, 0)
    if os.access(path, os.R_OK):
        pytest.skip("running as root: permissions do not stop reads")
    assert run(sluice_bin, "check", path).returncode == 2


def test_help_and_version(sluice_bin):
    r = run(sluice_bin, "--help")
    assert r.returncode == 0 and "check" in r.stdout and "version" in r.stdout
    r = run(sluice_bin, "check", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: sluice check FILE")
    r = run(sluice_bin, "version")
    assert r.returncode == 0 and r.stdout.startswith("sluice ")
    assert run(sluice_bin, "--version").stdout == r.stdout  # documented as the same


def test_help_names_a_command(sluice_bin):
    """`sluice help COMMAND` is `sluice COMMAND --help` (it printed the
    general help whatever the topic); an unknown topic is a usage error."""
    for name in ("check", "serve", "run", "audit", "calc", "version"):
        r = run(sluice_bin, "help", name)
        assert r.returncode == 0, (name, r.stderr)
        assert r.stdout == run(sluice_bin, name, "--help").stdout, name
        assert r.stdout.startswith("usage: sluice %s" % name), (name, r.stdout)
    r = run(sluice_bin, "help")
    assert r.returncode == 0 and r.stdout == run(sluice_bin, "--help").stdout
    r = run(sluice_bin, "help", "frobnicate")
    assert r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr and r.stdout == ""
    r = run(sluice_bin, "help", "check", "serve")
    assert r.returncode == 2 and "usage: sluice help [COMMAND]" in r.stderr
    # help about help is the list of commands, as `sluice help` alone: it
    # said "unknown command '--help'", exit 2
    for flag in ("--help", "-h"):
        r = run(sluice_bin, "help", flag)
        assert r.returncode == 0 and r.stdout == run(sluice_bin, "--help").stdout, (flag, r.stderr)
        assert r.stderr == "", r.stderr


def test_usage_lines_spell_each_flag_as_the_spec_does(sluice_bin):
    """Each command's `--help` usage line names every flag of its synopsis in
    docs/SPEC.md, with the same value (run's said `--gateway-user USER`
    where the flag takes USER[:GROUP], as the spec and its own option line
    say)."""
    with open(os.path.join(REPO, "docs", "SPEC.md"), encoding="utf-8") as f:
        spec = f.read()
    block = spec.split("## Commands\n```\n", 1)[1].split("# planned", 1)[0]
    flag = re.compile(r"(--[a-z-]+)( [A-Z][A-Za-z|-]*(?:\[:[A-Z]+\])?| [a-z]+\|[a-z|]+)?")
    seen = set()
    for line in block.splitlines():
        words = line.split()
        if len(words) < 2 or "--proxy" in words:
            continue
        cmd = words[1:3] if words[1] in ("audit", "calc") else words[1:2]
        usage = run(sluice_bin, *cmd, "--help").stdout.splitlines()[0]
        for name, value in flag.findall(line.split(" -- ", 1)[0]):
            seen.add(name)
            assert name + value in usage, (cmd, name + value, usage)
    assert {"--gateway-user", "--user", "--tmp-size", "--justify"} <= seen, seen


@pytest.mark.parametrize("pad", [0, 1])
def test_finding_longer_than_a_kibibyte_in_utf8_is_reported(sluice_bin, tmp_path, pad):
    """An expired grant whose owner is a long non-ASCII name: its message was
    cut at 1024 bytes in the middle of a character (for one of the two
    paddings, whatever the length of the path), jansson refused the text,
    and the error vanished from both formats ("result: 0 errors", exit 1)."""
    owner = "x" * pad + "\u00e9" * 500  # 1000-1001 bytes, under the 1024 an owner may have
    path = write(tmp_path, """\
        version: 1
        rules:
          - host: api.github.com
            methods: [POST]
            tier: 3
            owner: "%s"
            expires: 2025-01-01
        """ % owner)
    r = run(sluice_bin, "check", path, "--now", NOW)
    assert r.returncode == 1
    assert "rules[0].expires: grant for api.github.com" in r.stdout
    assert r.stdout.rstrip().splitlines()[-1] == "result: 1 error, 0 warnings"
    r = run(sluice_bin, "check", path, "--now", NOW, "--format", "json")
    doc = json.loads(r.stdout)
    assert [e["field"] for e in doc["errors"]] == ["rules[0].expires"]
    assert owner in doc["errors"][0]["message"]


def test_file_name_that_is_not_utf8_keeps_the_findings(sluice_bin, tmp_path):
    """A policy file named in another encoding: the JSON document was empty
    and the text said "result: 0 errors" for a file with errors."""
    path = b"bad\xff.yaml"
    with open(os.path.join(os.fsencode(str(tmp_path)), path), "wb") as f:
        f.write(b"version: 1\nrules:\n  - host: a.example.com\n    tier: 9\n")
    r = subprocess.run([os.fsencode(sluice_bin), b"check", path], capture_output=True, timeout=60,
                       cwd=str(tmp_path))
    assert r.returncode == 1
    lines = r.stdout.decode().rstrip().splitlines()
    assert lines[0] == "error: bad\ufffd.yaml:4: rules[0].tier: tier 9 is outside 0-3"
    assert lines[-1] == "result: 1 error, 0 warnings"
    r = subprocess.run([os.fsencode(sluice_bin), b"check", path, b"--format", b"json"],
                       capture_output=True, timeout=60, cwd=str(tmp_path))
    doc = json.loads(r.stdout)
    assert doc["file"] == "bad\ufffd.yaml"
    assert doc["ok"] is False
    assert [(e["line"], e["field"]) for e in doc["errors"]] == [(4, "rules[0].tier")]


def test_many_agents_named_only_by_rules(sluice_bin, tmp_path):
    # 20,000 rules, each naming an agent of its own, and one for everyone:
    # each agent reaches its rule and the shared one, in file order. Every
    # agent walked every rule before (10 s for these in a release build,
    # 64 s under the sanitizers). What catches that is the CPU time the
    # check took (about 3 s under the sanitizers now), not the wall time: a
    # timeout of 30 s, which did, was passed on a loaded machine (seen
    # once, 32 s) by a check that used a tenth of it; the timeout is a hang
    # guard now.
    n = 20000
    lines = ["version: 1", "rules:", "  - {host: shared.example.test, tier: 0}"]
    lines += ["  - {host: h%d.example.test, tier: 1, agents: [a%d]}" % (i, i) for i in range(n)]
    path = tmp_path / "many.yaml"
    path.write_text("\n".join(lines) + "\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sluice_bin, "check", str(path), "--format", "json"],
                       capture_output=True, text=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert used < 20.0, "%.1f s of CPU to check %d rules" % (used, n)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    doc = json.loads(r.stdout)
    agents = doc["agents"]
    assert [a["id"] for a in agents] == ["default"] + ["a%d" % i for i in range(n)]
    assert [x["host"] for x in agents[0]["reach"]] == ["shared.example.test"]
    for i in (0, 1, n // 2, n - 1):
        a = agents[1 + i]
        assert a["defined"] is False
        assert [x["host"] for x in a["reach"]] == ["shared.example.test",
                                                    "h%d.example.test" % i]
        assert [x["rule"] for x in a["reach"]] == ["rules[0]", "rules[%d]" % (i + 1)]


def peak_rss_mib(argv, timeout):
    """Runs <argv>, its output thrown away, and returns (exit status, the
    most memory it held at once, in MiB): the child's own ru_maxrss, from
    wait4(), not the maximum over every child this process has had. Killed
    after <timeout> seconds (a hang guard)."""
    env = dict(os.environ)
    # freed memory is held back by AddressSanitizer up to 256 MiB, which
    # would hide what is freed as it is written; no effect without it
    asan = env.get("ASAN_OPTIONS")
    env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "quarantine_size_mb=1"
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid != 0:
            p.returncode = os.waitstatus_to_exitcode(status)
            return p.returncode, usage.ru_maxrss / 1024.0
        if time.monotonic() > deadline:
            p.kill()
            p.wait()
            pytest.fail("%s did not end within %d s" % (" ".join(argv), timeout))
        time.sleep(0.05)


def built_with_tsan(path):
    """Whether the binary at <path> is a ThreadSanitizer build (make tsan):
    it calls, or holds, the runtime's __tsan_init, whose name is then in
    its symbol tables (a dynamic import with GCC's shared libtsan)."""
    with open(path, "rb") as f:
        return b"__tsan_init" in f.read()


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_report_memory_does_not_grow_with_the_rules(sluice_bin, tmp_path, fmt):
    """The report was built whole before a byte of it was printed, a
    jansson object of some 1.5 KiB per rule: 16 MiB of the shortest rules
    (720,000) took check to 1.5 GB, where reading the policy takes 420 MB.
    Written as it is made, it holds a rule at a time. What it adds is
    measured against the same policy with an error in its first line (a
    check that reads every rule, then reports the error alone): for these
    100,000 rules it was 156 MiB (232 MiB under the sanitizers), and is
    about 10 now (the index the loader builds for a policy without errors,
    and the report's own of 16 bytes a rule)."""
    if built_with_tsan(sluice_bin):
        # Its shadow memory (several bytes for each byte the program
        # touches) is in the RSS, which no measure from outside the process
        # tells apart: 53 MiB for what the ASan build measures as about 10.
        # No race is at stake here; the other builds measure it.
        pytest.skip("ThreadSanitizer's shadow memory inflates the RSS this test measures")
    n = 100000
    lines = ["version: 1", "rules: ["]
    lines += ["{host: h%d.example.test,tier: 0}," % i for i in range(n)]
    lines += ["]"]
    full = tmp_path / "full.yaml"
    full.write_text("\n".join(lines) + "\n")
    lines[0] = "version: 2"
    unread = tmp_path / "unsupported.yaml"
    unread.write_text("\n".join(lines) + "\n")
    rc, report = peak_rss_mib([sluice_bin, "check", str(full), "--format", fmt], 300)
    assert rc == 0
    rc, load = peak_rss_mib([sluice_bin, "check", str(unread), "--format", fmt], 300)
    assert rc == 1
    assert report - load < 40, "the report of %d rules took %.0f MiB, reading them %.0f" % (
        n, report, load)


@pytest.mark.parametrize("args", [
    ["check", "{good}", "--now", NOW],  # GOOD's grant is judged as of NOW, not the day run
    ["check", "{good}", "--now", NOW, "--format", "json"],
    ["check", "{big}"],
    ["check", "--help"],
    ["version"],
    ["--help"],
    ["calc", "retries", "--layers", "3", "--attempts", "3"],
])
def test_output_that_cannot_be_written_is_exit_2(sluice_bin, tmp_path, args):
    """/dev/full refuses every write: a report lost to a full disk must not
    pass for a clean run (it exited 0, the report gone). {big} is a report
    longer than stdio's buffer, whose first writes fail before the end."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    good = write(tmp_path, GOOD)
    big = write(tmp_path, "version: 1\nrules:\n" + "".join(
        "  - host: h%d.example.com\n    tier: 0\n" % i for i in range(2000)), name="big.yaml")
    argv = [a.replace("{good}", good).replace("{big}", big) for a in args]
    assert run(sluice_bin, *argv).returncode == 0
    with open("/dev/full", "w") as full:
        r = subprocess.run([sluice_bin, *argv], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=60)
    assert r.returncode == 2, r.stderr
    assert "standard output: write failed: No space left on device" in r.stderr, r.stderr


@pytest.mark.parametrize("args,named", [
    (["check", "-xy", "{good}"], "unknown option '-x'"),
    (["check", "{good}", "-qh"], "unknown option '-q'"),
    (["check", "{good}", "-z"], "unknown option '-z'"),
    (["check", "--help=yes", "{good}"], "'--help' takes no value"),
    (["check", "{good}", "--bogus"], "unknown option '--bogus'"),
    (["check", "{good}", "--now"], "--now needs a value"),
    (["serve", "--policy", "{good}", "-Zk"], "unknown option '-Z'"),
    (["serve", "--policy", "{good}", "--splice=1"], "'--splice' takes no value"),
    (["audit", "mounts", "-xy"], "unknown option '-x'"),
    (["run", "-xy", "--", "true"], "unknown option '-x'"),
])
def test_usage_error_names_the_option_at_fault(sluice_bin, tmp_path, args, named):
    """An unknown letter inside a cluster of short options ("-xy") was
    reported as the argument before it: "unknown option 'check'", or the
    policy file's name."""
    good = write(tmp_path, GOOD)
    r = run(sluice_bin, *[a.replace("{good}", good) for a in args])
    assert r.returncode == 2, r.stdout + r.stderr
    first = r.stderr.splitlines()[0]
    assert first == "sluice %s: %s" % (args[0], named), r.stderr


@pytest.mark.parametrize("args,named", [
    (["serve", "--s", "x", "--policy", "{good}"],
     "'--s' is ambiguous (--state, --sched, --splice)"),
    (["serve", "--policy", "{good}", "--a=127.0.0.1:1"], "'--a' is ambiguous (--admin, --alerts)"),
    (["run", "--p", "{good}", "--", "true"], "'--p' is ambiguous (--policy, --proxy)"),
    (["run", "--policy", "{good}", "--r", "/tmp", "--", "true"], "'--r' is ambiguous (--ro, --rw)"),
    (["serve", "--policy", "{good}", "--=x"], "unknown option '--=x'"),
])
def test_an_ambiguous_abbreviation_is_not_called_unknown(sluice_bin, tmp_path, args, named):
    """getopt_long() takes an option by any abbreviation that names only
    one (`--pol` for `--policy`) and refuses one that names several as it
    does an unknown option: `sluice run --p p.yaml` said "unknown option
    '--p'", as if neither --policy nor --proxy existed."""
    good = write(tmp_path, GOOD)
    r = run(sluice_bin, *[a.replace("{good}", good) for a in args])
    assert r.returncode == 2, r.stdout + r.stderr
    first = r.stderr.splitlines()[0]
    assert first == "sluice %s: %s" % (args[0], named), r.stderr


def test_an_unknown_option_is_named_escaped(sluice_bin, tmp_path):
    """A file name that starts with '-' is taken for an option (`for f in *;
    do sluice check "$f"; done` in a folder an agent writes to): the usage
    error echoed it as it is, so a name holding a line end and a terminal
    escape wrote a line of its own into standard error and rubbed out the
    one before. It is shown as the reports show names, \\ooo."""
    for args, cmd in ((["check", "--x\nsluice check: forged\x1b[1A\x1b[2K"], "check"),
                      (["audit", "mounts", "--x\nforged"], "audit"),
                      (["check", "-\x1b"], "check")):
        r = run(sluice_bin, *args)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "\x1b" not in r.stderr
        assert len(r.stderr.splitlines()) == 2, r.stderr
        assert r.stderr.splitlines()[1].startswith("usage: sluice %s" % cmd)
    first = run(sluice_bin, "check", "--x\nsluice check: forged\x1b[1A\x1b[2K").stderr
    assert first.splitlines()[0] == (
        "sluice check: unknown option '--x\\012sluice check: forged\\033[1A\\033[2K'"), first
    first = run(sluice_bin, "check", "-\x1b").stderr
    assert first.splitlines()[0] == "sluice check: unknown option '-\\033'", first


FORGED = "x\nforged: 0 errors\x1b[1A\x1b[2K"


@pytest.mark.parametrize("args", [
    ["serve", "--policy", "{good}", "--listen", FORGED],
    ["serve", "--policy", "{good}", "--max-conns", FORGED],
    ["serve", "--policy", "{good}", "--grace", FORGED],
    ["serve", "--policy", "{good}", "--sched", FORGED],
    ["serve", "--policy", "{good}", "--nice", FORGED],
    ["serve", "--policy", "{good}", "--user", FORGED],
    ["serve", "--policy", "{good}", "--listen", "127.0.0.1:0", "--admin", FORGED],
    ["serve", "--policy", "{good}", FORGED],
    ["check", "{good}", "--now", FORGED],
    ["check", "{good}", "--warn-days", FORGED],
    ["check", "{good}", "--format", FORGED],
    ["run", "--proxy", FORGED, "--", "true"],
    ["run", "--policy", "{good}", "--agent", FORGED, "--", "true"],
    ["run", "--policy", "{good}", "--tmp-size", FORGED, "--", "true"],
    ["run", "--policy", "{good}", "--gateway-user", FORGED, "--", "true"],
    ["version", FORGED],
    [FORGED],
    ["help", FORGED],
], ids=["serve-listen", "serve-max-conns", "serve-grace", "serve-sched", "serve-nice",
        "serve-user", "serve-admin", "serve-argument", "check-now", "check-warn-days",
        "check-format", "run-proxy", "run-agent", "run-tmp-size", "run-gateway-user",
        "version-argument", "unknown-command", "help-unknown-command"])
def test_a_refused_value_is_named_escaped(sluice_bin, tmp_path, args):
    """The value a flag refuses, or an argument no command takes (a file
    name a glob expanded), was echoed as it is by serve, check, run and
    version (calc and audit show it \\ooo): one holding a line end and a
    terminal escape wrote a line of its own into standard error and rubbed
    out the one before. So did an unknown command's name."""
    good = write(tmp_path, GOOD)
    r = run(sluice_bin, *[a.replace("{good}", good) for a in args])
    assert r.returncode == 2, r.stdout + r.stderr
    assert "\x1b" not in r.stderr, r.stderr
    assert not any(l.startswith("forged") for l in r.stderr.splitlines()), r.stderr
    # (--user's USER ends at the ':', its GROUP after it)
    assert "x\\012forged" in r.stderr, r.stderr


def test_file_name_cannot_write_lines_into_the_text_report(sluice_bin, tmp_path):
    """A policy file named with a line end and a terminal escape (a name in
    a repository an agent writes to, checked by a CI loop): the text report
    printed it as it is, a forged "result: 0 errors" line of its own and an
    escape that rubs out a line on a terminal. Written \\ooo, as audit
    writes mount points; the JSON document keeps the name as it is."""
    name = "x\nresult: 0 errors, 0 warnings\x1b[1A\x1b[2K\n.yaml"
    path = tmp_path / name
    path.write_text("version: 1\nrules:\n  - host: a.example.com\n    tier: 9\n")
    r = run(sluice_bin, "check", str(path))
    assert r.returncode == 1
    shown = str(tmp_path) + "/x\\012result: 0 errors, 0 warnings\\033[1A\\033[2K\\012.yaml"
    assert r.stdout.splitlines()[0] == "error: %s:4: rules[0].tier: tier 9 is outside 0-3" % shown
    assert [l for l in r.stdout.splitlines() if l.startswith("result:")] == [
        "result: 1 error, 0 warnings"]
    assert "\x1b" not in r.stdout
    path.write_text("version: 1\nrules:\n  - host: a.example.com\n    tier: 0\n")
    r = run(sluice_bin, "check", str(path))
    assert r.returncode == 0
    assert r.stdout.startswith("%s: 1 rule, 0 agents" % shown), r.stdout
    assert [l for l in r.stdout.splitlines() if l.startswith("result:")] == [
        "result: 0 errors, 0 warnings"]
    doc = json.loads(run(sluice_bin, "check", str(path), "--format", "json").stdout)
    assert doc["file"] == str(path)


def test_file_name_cannot_write_lines_into_standard_error(sluice_bin, tmp_path):
    """The report shows the file's name \\ooo, but a file check cannot read
    (a folder or a FIFO an agent named so, missing) was named as it is in
    'cannot read': a line end and an escape in the name wrote a line of
    their own into standard error and rubbed out the one before."""
    name = "x\nresult: 0 errors, 0 warnings\x1b[1A\x1b[2K"
    shown = str(tmp_path) + "/x\\012result: 0 errors, 0 warnings\\033[1A\\033[2K"
    (tmp_path / name).mkdir()
    r = run(sluice_bin, "check", str(tmp_path / name))
    assert r.returncode == 2
    assert r.stderr == "sluice check: cannot read %s: not a regular file\n" % shown, r.stderr
    r = run(sluice_bin, "check", str(tmp_path / name / "missing"))
    assert r.returncode == 2
    assert r.stderr == ("sluice check: cannot read %s/missing: No such file or directory\n"
                        % shown), r.stderr


def test_fifo_pipe_and_device_are_refused_unread(sluice_bin, tmp_path):
    """README says `check`, unlike `serve`, reads a regular file only: a FIFO
    no one writes to, a pipe or /dev/zero is refused at once, exit 2, not
    waited on nor read up to the 16 MiB cap."""
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    r, w = os.pipe()
    try:
        os.write(w, GOOD.encode())
        os.close(w)
        w = -1
        pipe = subprocess.run([sluice_bin, "check", "/dev/fd/%d" % r], capture_output=True,
                              text=True, timeout=60, pass_fds=(r,))
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    for path, res in ((str(fifo), run(sluice_bin, "check", str(fifo))),
                      ("/dev/zero", run(sluice_bin, "check", "/dev/zero")),
                      ("/dev/fd/%d" % r, pipe)):
        assert res.returncode == 2, (path, res.returncode, res.stderr)
        assert res.stdout == "", (path, res.stdout)
        assert res.stderr == "sluice check: cannot read %s: not a regular file\n" % path, res.stderr


def test_agent_in_report_mode_is_not_said_to_be_denied_everything(sluice_bin, tmp_path):
    """An agent in report mode that no rule serves was listed as "nothing:
    every request is denied", while the gateway lets everything the policy
    denies through for it; one with rules looked limited to them."""
    path = write(tmp_path, """\
        version: 1
        agents:
          - id: watched
            sources: [unix]
            mode: report
          - id: strict
            sources: [127.0.0.1/32]
          - id: trial
            sources: [127.0.0.2/32]
            mode: report
        rules:
          - host: a.example.com
            tier: 0
            agents: [strict, trial]
        """)
    r = run(sluice_bin, "check", path)
    assert r.returncode == 0, r.stdout + r.stderr
    # each agent in report mode is a warning: its denials are let through
    said = ("report: this agent's denials are let through (logged as report); only the address "
            "guard still refuses for it (private_address, self_request)")
    assert r.stdout.startswith("warning: %s:5: agents[0].mode: %s\nwarning: %s:10: "
                               "agents[2].mode: %s\n" % (path, said, path, said)), r.stdout
    assert r.stdout.endswith("\nresult: 0 errors, 2 warnings\n")
    assert run(sluice_bin, "check", path, "--strict").returncode == 1
    out = r.stdout.split("reach per agent:\n")[1].splitlines()
    said = ("    REPORT MODE: what the policy denies is let through, logged as report "
            "(the address guard still refuses: private_address, self_request); enforce would "
            "allow ")
    assert out[0] == "  watched (report; sources unix):"
    assert out[1] == said + "nothing"
    assert out[2] == "  strict (enforce; sources 127.0.0.1/32):"
    assert out[3].startswith("    tier 0  rules[0]   a.example.com")
    assert out[4] == "  trial (report; sources 127.0.0.2/32):"
    assert out[5] == said + "these:"
    assert out[6].startswith("    tier 0  rules[0]   a.example.com")


def test_cidr_rule_over_a_denied_range_warns(sluice_bin, tmp_path):
    # a cidr: rule's IP literals skip deny_ranges: "2000::/3" looks public
    # but holds 6to4's 2002::/16, where [2002:a9fe:a9fe::] is 169.254.169.254;
    # a warning, not an error (exit 0); a private range named on purpose is quiet
    pol = "version: 1\nrules:\n  - {host: a.example.test, tier: 0}\n"
    path = write(tmp_path, pol + "  - {cidr: 2000::/3, tier: 0}\n")
    r = run(sluice_bin, "check", path, "--now", NOW)
    assert r.returncode == 0, r.stdout
    assert ("warning: " + path + ":4: rules[1].cidr: '2000::/3' holds 2002::/16 (6to4, whose "
            "addresses embed IPv4 ones such as 169.254.169.254, the cloud metadata address) "
            "and 6 other denied ranges: an IP literal this rule allows skips deny_ranges, so "
            "the rule opens it;") in r.stdout, r.stdout
    assert r.stdout.endswith("result: 0 errors, 1 warning\n"), r.stdout
    r = run(sluice_bin, "check", path, "--now", NOW, "--format", "json")
    doc = json.loads(r.stdout)
    assert [(w["line"], w["field"]) for w in doc["warnings"]] == [(4, "rules[1].cidr")]
    path = write(tmp_path, pol + "  - {cidr: 10.1.2.0/24, tier: 0}\n  - {cidr: 10.0.0.0/8, tier: 0}\n")
    r = run(sluice_bin, "check", path, "--now", NOW)
    assert r.returncode == 0 and "warning:" not in r.stdout, r.stdout


def test_dns_static_pin_into_a_denied_range_warns(sluice_bin, tmp_path):
    # a pinned name's address goes through the address guard like any
    # answer, and only an IP literal's cidr: rule skips deny_ranges: a pin
    # into them that allow_ranges leaves out is private_address at every
    # request, which check said nothing of; a warning naming the pin's
    # line, the address and the range (exit 0; exit 1 under --strict)
    pol = ("version: 1\nrules:\n  - {host: api.example.test, tier: 1}\n"
           "network:\n  allow_ranges: [10.9.0.0/16]\n"
           "dns:\n  static:\n    api.example.test: 10.1.2.3\n    ok.example.test: 10.9.1.1\n")
    path = write(tmp_path, pol)
    said = ("dns.static.api.example.test: api.example.test is pinned to 10.1.2.3, which "
            "deny_ranges deny (10.0.0.0/8, rfc1918) and no allow_ranges entry holds: every "
            "request for it is refused as private_address; list the address in "
            "network.allow_ranges, or pin the name elsewhere")
    r = run(sluice_bin, "check", path, "--now", NOW)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning: %s:8: %s\n" % (path, said) in r.stdout, r.stdout
    assert r.stdout.endswith("result: 0 errors, 1 warning\n"), r.stdout
    r = run(sluice_bin, "check", path, "--now", NOW, "--format", "json", "--strict")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is False
    assert [(w["line"], w["field"], w["text"]) for w in doc["warnings"]] == [
        (8, "dns.static.api.example.test", "%s:8: %s" % (path, said))]
    # the address allowed: quiet, --strict passes
    path = write(tmp_path, pol.replace("[10.9.0.0/16]", "[10.9.0.0/16, 10.1.2.3]"), "ok.yaml")
    r = run(sluice_bin, "check", path, "--now", NOW, "--strict")
    assert r.returncode == 0 and "warning:" not in r.stdout, r.stdout


def test_the_policy_example_of_docs_spec_loads_clean(sluice_bin, tmp_path):
    """The Policy file example of docs/SPEC.md, verbatim, is a policy that
    loads without an error or a warning: every key it shows (agents' token
    and mode, rules' rate, network, dns, limits, every alert detector and
    both kinds of sink) is one the loader takes, so the contract's own
    example cannot drift from the binary."""
    with open(os.path.join(REPO, "docs", "SPEC.md"), encoding="utf-8") as f:
        spec = f.read()
    block = spec.split("## Policy file (YAML)\n```yaml\n", 1)[1].split("\n```", 1)[0]
    path = write(tmp_path, block + "\n")
    token = {"SLUICE_TOKEN_CI": "a-token-of-thirty-two-characters"}
    # but for its exec sink's program when this machine has none there: a
    # warning of the machine, not of the file
    program = "/usr/local/bin/page-oncall"
    absent = [] if os.access(program, os.X_OK) else [
        "exec program %s cannot be run here (No such file or directory): every alert to it "
        "would be lost" % program]
    r = run(sluice_bin, "check", path, "--now", "2026-11-30", "--strict", env_extra=token)
    assert r.returncode == 0 and r.stdout.endswith(
        "result: 0 errors, %d warning%s\n" % (len(absent), "" if absent else "s")), (
        r.returncode, r.stdout, r.stderr)
    r = run(sluice_bin, "check", path, "--now", "2026-11-30", "--format", "json",
            env_extra=token)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["ok"] and doc["errors"] == []
    assert [w["message"] for w in doc["warnings"]] == absent, doc["warnings"]
    assert [a["id"] for a in doc["agents"]] == ["ci-bot"]
    assert [g["owner"] for g in doc["tier3_grants"]] == ["chaysen"]


def test_sluice_without_a_command_is_a_usage_error(sluice_bin):
    """`sluice` alone names no command: exit 2 (SPEC.md, exit codes: usage
    error), nothing on standard output (a script reading it gets no report
    that passes for one), and the list of commands on standard error."""
    r = run(sluice_bin)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
    for name in ("check", "serve", "run", "audit", "calc", "version"):
        assert name in r.stderr, r.stderr


# ---------------------------------------------------------------------------
# check --help names what the loader finds: each of its kinds of error and
# warning, with policies that bring each about. A kind the help adds, drops
# or rewords fails test_help_names_each_kind_of_finding_a_policy_brings
# until this table follows it, and one the loader no longer finds fails it
# too: the help cannot drift from the loader without a test saying so.

_R = "rules:\n  - host: a.example.com\n    tier: 0\n"
_V = "version: 1\n"
def _rule(extra):
    return _V + "rules:\n  - host: a.example.com\n    tier: 0\n" + extra

HELP_EXAMPLES = {
    "YAML: syntax, UTF-16, line breaks other than LF or CR LF, anchors and aliases, more than one document, nesting over 16 levels, a file over 16 MiB": [
        ("error", _V + "rules: [\n", "YAML syntax error"),
        ("error", b"\xff\xfev\x00", "the file is UTF-16"),
        ("error", _V + _R.replace("tier: 0\n", "tier: 0\r"), "a line break other than LF or CR LF"),
        ("error", _V + "rules: &r []\n", "anchors and aliases are not supported"),
        ("error", _V + _R + "---\n" + _V, "multiple documents are not supported"),
        ("error", _V + "x: " + "[" * 20 + "]" * 20 + "\n", "nesting deeper than 16 levels"),
        ("error", b"#" * (16 * 1024 * 1024 + 1), "larger than 16 MiB"),
    ],
    "keys unknown or given twice, wrong types (a plain no, on or ~ where a name goes: quote it), leading zeros": [
        ("error", _V + _R + "rulez: []\n", "unknown key 'rulez'"),
        ("error", _V + _V + _R, "duplicate key 'version'"),
        ("error", _V + "rules:\n  - host: no\n    tier: 0\n", "'no' is YAML's boolean false"),
        ("error", _V + "deny: [~]\n" + _R, "expected a string, not YAML's null '~'"),
        ("error", _rule("    ports: [0443]\n"), "'0443' has a leading zero"),
    ],
    "bad values: hosts, CIDRs, ports, methods, tiers, sizes, periods, dates, time zones, hours, days, agent ids, webhook URLs, exec paths; a rate of 0 requests or 0 bandwidth (it would limit nothing)": [
        ("error", _V + "rules:\n  - host: a..example.com\n    tier: 0\n", "invalid host pattern"),
        ("error", _V + "rules:\n  - cidr: 10.0.0.0/33\n    tier: 0\n", "10.0.0.0/33"),
        ("error", _rule("    ports: [70000]\n"), "port 70000 is outside 1-65535"),
        ("error", _rule("    methods: [FETCH]\n"), "unknown method 'FETCH'"),
        ("error", _V + "rules:\n  - host: a.example.com\n    tier: 4\n", "tier 4 is outside 0-3"),
        ("error", _rule("    rate: {requests: 1, bandwidth: 1XB}\n"), "invalid size '1XB'"),
        ("error", _rule("    rate: {requests: 1, per: 1y}\n"), "invalid period '1y'"),
        ("error", _rule("    expires: 2026-02-30\n"), "2026-02-30 is not a day of the calendar"),
        ("error", _V + _R + "alerts:\n  off_hours: {tz: Nowhere/Town, hours: \"08:00-19:00\"}\n", "unknown time zone 'Nowhere/Town'"),
        ("error", _V + _R + "alerts:\n  off_hours: {tz: UTC, hours: \"8-19\"}\n", "invalid hours '8-19'"),
        ("error", _V + _R + "alerts:\n  off_hours: {tz: UTC, hours: \"08:00-19:00\", days: Mon-Fun}\n", "invalid days 'Mon-Fun'"),
        ("error", _V + "agents:\n  - id: Bad_Id!\n    sources: [127.0.0.1/32]\n" + _R, "invalid agent id 'Bad_Id!'"),
        ("error", _V + _R + "alerts:\n  sinks:\n    - webhook: ftp://example.com/x\n", "webhook needs an http:// or https:// URL"),
        ("error", _V + _R + "alerts:\n  sinks:\n    - exec: page-oncall\n", "exec needs an absolute path"),
        ("error", _rule("    rate: {requests: 0}\n"), "rules[0].rate.requests: 0 is not no requests"),
        ("error", _rule("    rate: {requests: 5, bandwidth: 0B/s}\n"), "rules[0].rate.bandwidth: 0B/s is not no bytes"),
        ("error", _V + "rules:\n  - host: \"[a.example.com]:443\"\n    tier: 0\n", "brackets hold an IPv6 literal only"),
    ],
    "duplicate rules, agent ids or dns.static names; too many of a kind": [
        ("error", _V + _R + "  - host: a.example.com\n    tier: 0\n", "duplicates rules[0] (line 3)"),
        ("error", _V + "agents:\n  - id: ci\n    sources: [127.0.0.1/32]\n  - id: ci\n    sources: [127.0.0.2/32]\n" + _R, "duplicate agent id 'ci' (first at line 3)"),
        ("error", _V + _R + "dns:\n  static:\n    a.example.com: 127.0.0.2\n    a.example.com: 127.0.0.3\n", "duplicate key"),
        ("error", _V + _R + "dns:\n  servers: [%s]\n" % ", ".join("127.0.0.%d" % i for i in range(1, 11)), "too many DNS servers (at most 8)"),
        ("error", _V + _R + "alerts:\n  sinks: [%s]\n" % ", ".join("{exec: /usr/bin/s%d}" % i for i in range(65)), "too many alert sinks (at most 64)"),
    ],
    "tier-3 rules without an owner or an expiry date": [
        ("error", _V + "rules:\n  - host: a.example.com\n    tier: 3\n    expires: 2026-12-31\n", "tier-3 rule needs an owner"),
        ("error", _V + "rules:\n  - host: a.example.com\n    tier: 3\n    owner: alice\n", "tier-3 rule needs an expiry date"),
    ],
    "owners blank, padded (\" alice \"), a YAML boolean or number, over 1 KiB, with control, bidirectional or invisible characters": [
        ("error", _rule("    owner: \"  \"\n"), "must name a person, not be blank"),
        ("error", _rule("    owner: \" alice \"\n"), "starts or ends with a blank"),
        ("error", _rule("    owner: no\n"), "not a person's name"),
        ("error", _rule("    owner: 0x1F\n"), "'0x1F' is a number to YAML, not a person's name"),
        ("error", _rule("    owner: %s\n" % ("a" * 1025)), "a person's name is at most 1024 bytes"),
        ("error", _rule("    owner: \"al\\nice\"\n"), "must be a name on one line, without control characters"),
        ("error", _rule("    owner: \"al\\u202eice\"\n"), "must not hold bidirectional formatting characters"),
        ("error", _rule("    owner: \"al\\u200bice\"\n"), "must not hold invisible characters"),
    ],
    "secrets written in the file (a token is env:NAME)": [
        ("error", _V + "agents:\n  - id: ci\n    sources: [127.0.0.1/32]\n    token: s3cret\n" + _R, "write the secret as env:NAME, never in the policy file"),
    ],
    "grants expired as of --now (default: today, UTC)": [
        ("error", _rule("    expires: 2026-11-30\n"), "expired on 2026-11-30, 1 day ago"),
    ],
    "grants expiring within --warn-days (default: the policy's alerts.expiry_warn_days, else 14); tier-3 ones over 365 days ahead": [
        ("warning", _rule("    expires: 2026-12-05\n"), "expires on 2026-12-05, 4 days left"),
        ("warning", _V + "rules:\n  - host: a.example.com\n    tier: 3\n    owner: alice\n    expires: 9999-12-31\n", "more than 365"),
    ],
    "entries listed twice (deny, ranges, ports, methods, agents, sinks), naming both lines": [
        ("warning", _V + _R + "deny:\n  - b.example.com\n  - b.example.com\n", "deny[1]: b.example.com is listed twice (line 6)"),
        ("warning", _V + _R + "network:\n  allow_ranges: [10.0.0.0/8, 10.0.0.0/8]\n", "is listed twice"),
        ("warning", _rule("    ports: [443, 443]\n"), "port 443 is listed twice (line 5)"),
        ("warning", _rule("    methods: [GET, GET]\n"), "method GET is listed twice (line 5)"),
        ("warning", _rule("    agents: [ci, ci]\n"), "agent 'ci' is listed twice (line 5)"),
        ("warning", _V + _R + "alerts:\n  sinks:\n    - exec: /bin/true\n    - exec: /bin/true\n", "exec /bin/true is listed twice"),
    ],
    "rules that never decide (denied, outranked) or name undefined agents": [
        ("warning", _V + _R + "deny: [a.example.com]\n", "is denied by deny[0]"),
        ("warning", _V + "rules:\n  - host: a.example.com\n    methods: [POST]\n    tier: 3\n    owner: alice\n    expires: 2026-12-31\n  - host: a.example.com\n    methods: [POST]\n    tier: 0\n    agents: [ci]\n", "this tier-3 grant does not decide"),
        ("warning", _rule("    agents: [ghost]\n"), "agent 'ghost' is not defined in agents"),
    ],
    "owners that name a team or a group (@org/team: a '/'), not a person": [
        ("warning", _V + "rules:\n  - host: a.example.com\n    tier: 3\n    owner: \"@acme/platform\"\n    expires: 2026-12-31\n", "names a team or a group"),
    ],
    "tokens short, shared, blank-edged, no secret, or unset (not --strict)": [
        ("warning", _V + "agents:\n  - id: ci\n    sources: [127.0.0.1/32]\n    token: env:SLUICE_TEST_SHORT\n" + _R, "holds a secret shorter than 16 bytes"),
        ("warning", _V + "agents:\n  - id: ci\n    sources: [127.0.0.1/32]\n    token: env:SLUICE_TEST_TOKEN\n  - id: cd\n    sources: [127.0.0.2/32]\n    token: env:SLUICE_TEST_TOKEN\n" + _R, "the same secret as agents[0]"),
        ("warning", _V + "agents:\n  - id: ci\n    sources: [127.0.0.1/32]\n    token: env:SLUICE_TEST_BLANK\n" + _R, "holds a blank or a control character"),
        ("warning", _V + "agents:\n  - id: ci\n    sources: [127.0.0.1/32]\n    token: env:HOME\n" + _R, "environment variable HOME is no secret"),
        ("warning", _V + "agents:\n  - id: ci\n    sources: [127.0.0.1/32]\n    token: env:SLUICE_TEST_UNSET\n" + _R, "environment variable SLUICE_TEST_UNSET is not set here"),
    ],
    "exec sink programs missing, not a regular file or not executable here (not --strict: CI may not have them installed)": [
        ("warning", _V + _R + "alerts:\n  sinks:\n    - exec: /nonexistent/page.sh\n", "exec program /nonexistent/page.sh cannot be run here (No such file or directory)"),
        ("warning", _V + _R + "alerts:\n  sinks:\n    - exec: /\n", "(not a regular file: a directory)"),
    ],
    "ranges wider than they look: no prefix length, all of IPv4, the metadata address, deny_ranges without default, cidr rules and pins over denied ranges": [
        ("warning", _V + "rules:\n  - cidr: 192.168.10.0\n    tier: 0\n", "has no prefix length"),
        ("warning", _V + _R + "network:\n  allow_ranges: [\"::/0\"]\n", "also covers every IPv4 address"),
        ("warning", _V + _R + "network:\n  allow_ranges: [169.254.0.0/16]\n", "exempts 169.254.169.254"),
        ("warning", _V + _R + "network:\n  deny_ranges: [10.0.0.0/8]\n", "deny_ranges does not include \"default\""),
        ("warning", _V + "rules:\n  - cidr: 2000::/3\n    tier: 0\n", "skips deny_ranges"),
        ("warning", _V + _R + "dns:\n  static:\n    a.example.com: 10.1.2.3\n", "which deny_ranges deny"),
    ],
    "hosts written in other than ASCII, wildcards over open suffixes": [
        ("warning", _V + "rules:\n  - host: \"\u0430pi.github.com\"\n    tier: 0\n", "written with characters other than ASCII"),
        ("warning", _V + "rules:\n  - host: \"*.github.io\"\n    tier: 0\n", "are registered by anyone"),
    ],
    "settings: mode: report, ECH allowed, agents: [], no rules, DNS servers off the local network, http:// webhooks": [
        ("warning", _V + "agents:\n  - id: ci\n    sources: [127.0.0.1/32]\n    mode: report\n" + _R, "this agent's denials are let through"),
        ("warning", _V + _R + "network:\n  encrypted_client_hello: allow\n", "network.encrypted_client_hello"),
        ("warning", _V + "agents: []\n" + _R, "the list is empty"),
        ("warning", _V + "rules: []\n", "no rules: every request will be denied"),
        ("warning", _V + _R + "dns:\n  servers: [192.0.2.53]\n", "is neither on this host nor on a local network"),
        ("warning", _V + _R + "alerts:\n  sinks:\n    - webhook: http://hooks.example.com/x\n", "over http://"),
    ],
    "rates a tunnel is not held to (more than 8 others cover its host)": [
        ("warning", _V + "rules:\n" + "".join(
            "  - {host: a.example.com, tier: 0, methods: [%s], rate: {requests: 10}}\n" % m
            for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"))
         + "  - {host: a.example.com, tier: 0, rate: {requests: 10}}\n"
         + "  - {host: \"*.example.com\", tier: 0, rate: {requests: 10}}\n",
         "rules[9].rate: not applied to tunnels to a.example.com (every agent, port 80)"),
    ],
    # the bound lowered to 4 for these examples (SLUICE_TEST_REPORT_REACH_MAX)
    "a reach per agent of more than 1,000,000 entries: the report lists that many": [
        ("warning", _V + "agents:\n" + "".join("  - {id: a%d, sources: [10.0.0.%d]}\n" % (i, i + 1)
                                              for i in range(3))
         + "rules:\n  - {host: a.example.com, tier: 0}\n  - {host: b.example.com, tier: 0}\n",
         "the reach per agent is 6 entries"),
    ],
}



def help_kinds(text, heading):
    """The bullets under <heading> in check --help, continuation lines
    joined: {"Errors": [...], "Warnings": [...]}."""
    kinds, inside = [], False
    for line in text.splitlines():
        if line.startswith(heading):
            inside = True
        elif inside and line.startswith("  - "):
            kinds.append(line[4:])
        elif inside and line.startswith("    ") and kinds:
            kinds[-1] += " " + line.strip()
        elif inside:
            break
    return kinds


def test_help_names_each_kind_of_finding_a_policy_brings(sluice_bin, tmp_path):
    text = run(sluice_bin, "check", "--help").stdout
    errors, warnings = help_kinds(text, "Errors (exit 1)"), help_kinds(text, "Warnings (exit 0")
    assert errors and warnings, text
    assert sorted(errors + warnings) == sorted(HELP_EXAMPLES), text
    env = {"SLUICE_TEST_SHORT": "short", "SLUICE_TEST_BLANK": "a-long-enough-secret-value\n",
           "SLUICE_TEST_REPORT_REACH_MAX": "4"}
    assert "SLUICE_TEST_UNSET" not in os.environ  # its example is a variable not set
    path = tmp_path / "policy.yaml"
    for kind, examples in HELP_EXAMPLES.items():
        level = "error" if kind in errors else "warning"
        for want, text, said in examples:
            assert want == level, (kind, said)
            path.write_bytes(text if isinstance(text, bytes) else text.encode())
            r = run(sluice_bin, "check", str(path), "--now", NOW, "--format", "json",
                    env_extra=env)
            doc = json.loads(r.stdout)
            found = [f["text"] for f in doc[level + "s"]]
            assert any(said in f for f in found), (kind, said, doc["errors"], doc["warnings"])


def test_a_grant_is_judged_by_the_clock_serve_decides_by(sluice_bin, tmp_path):
    """check's today is the wall clock's (CLOCK_REALTIME), by which serve
    decides requests, not glibc's time(): that reads the kernel's coarse
    clock, which for a tick after a UTC midnight still says the day
    before. Seen a tick into 2026-12-08 (coarse_clock.c): check called the
    grant of 2026-12-07 valid, '0 days left', exit 0, while serve at the
    same moment denied its requests as grant_expired."""
    path = write(tmp_path, """\
        version: 1
        rules:
          - host: a.example.com
            tier: 3
            owner: alice
            expires: 2026-12-07
        """)
    midnight = 1796688000  # 2026-12-08T00:00:00Z
    r = run(sluice_bin, "check", path, env_extra=coarse_clock_env(tmp_path, midnight))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "(as of 2026-12-08)" in r.stdout, r.stdout
    assert ("rules[0].expires: grant for a.example.com (tier 3, owner 'alice') expired on "
            "2026-12-07" in r.stdout), r.stdout


def _reach_policy(tmp_path, nagents, nrules):
    """<nagents> agents and <nrules> rules without agents: every agent
    reaches every rule, nagents * nrules entries of the report's reach."""
    lines = ["version: 1", "agents:"]
    lines += ["  - {id: a%d, sources: [10.%d.%d.1]}" % (i, i >> 8, i & 255)
              for i in range(nagents)]
    lines += ["rules:"]
    lines += ["  - {host: h%d.example.test, tier: 0}" % i for i in range(nrules)]
    path = tmp_path / "wide.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_reach_per_agent_is_listed_up_to_a_bound(sluice_bin, tmp_path):
    # The reach lists every rule without agents: under every agent: a
    # policy of A agents and R such rules is A * R lines, 150,000 agents
    # and 300,000 rules in 16 MiB some 4.5e10 (days of CPU, petabytes of
    # report, for a file check reads in a second). The report lists at
    # most REPORT_REACH_MAX entries (1,000,000; lowered here by the
    # test-only variable) and says, with a warning, how many it left out.
    path = _reach_policy(tmp_path, 40, 50)
    env = dict(os.environ, SLUICE_TEST_REPORT_REACH_MAX="1000")
    r = subprocess.run([sluice_bin, "check", "--now", NOW, str(path)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    listed = [l for l in r.stdout.splitlines() if l.startswith("    tier 0  rules[")]
    assert len(listed) == 1000, len(listed)
    warnings = [l for l in r.stdout.splitlines() if l.startswith("warning: ")]
    assert len(warnings) == 1, warnings
    assert "2000 entries" in warnings[0] and "1000" in warnings[0], warnings[0]
    cut = [int(m.group(1)) for m in
           re.finditer(r"^    \.\.\. (\d+) more not listed", r.stdout, re.M)]
    assert sum(cut) == 1000, cut
    assert "result: 0 errors, 1 warning" in r.stdout
    # under --strict the cut report fails the check, as any warning does
    r = subprocess.run([sluice_bin, "check", "--strict", "--now", NOW, str(path)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1, r.stdout[-2000:]
    r = subprocess.run([sluice_bin, "check", "--now", NOW, "--format", "json", str(path)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    doc = json.loads(r.stdout)
    assert [a["id"] for a in doc["agents"]] == ["a%d" % i for i in range(40)]
    assert sum(len(a["reach"]) for a in doc["agents"]) == 1000
    assert sum(a.get("reach_not_listed", 0) for a in doc["agents"]) == 1000
    assert doc["agents"][0]["reach_not_listed"] == 0
    assert len(doc["warnings"]) == 1


def test_reach_within_the_bound_is_listed_whole(sluice_bin, tmp_path):
    # at the bound exactly: every entry, no warning, nothing said cut
    path = _reach_policy(tmp_path, 20, 50)
    env = dict(os.environ, SLUICE_TEST_REPORT_REACH_MAX="1000")
    r = subprocess.run([sluice_bin, "check", "--now", NOW, "--format", "json", str(path)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    doc = json.loads(r.stdout)
    assert sum(len(a["reach"]) for a in doc["agents"]) == 1000
    assert all(a["reach_not_listed"] == 0 for a in doc["agents"])
    assert doc["warnings"] == []


def test_check_warns_of_exec_programs_that_cannot_be_run_here(sluice_bin, tmp_path):
    """An exec sink whose program is missing, not a regular file or not
    executable was told nowhere but at the first alert, which it then lost.
    check warns of each (file:line: field), in text and in JSON; like an
    unset secret, a fact of the machine that checks (a CI job has not the
    programs installed), not of the file: --strict does not fail on it."""
    ok = tmp_path / "ok.sh"
    ok.write_text("#!/bin/sh\nexit 0\n")
    ok.chmod(0o755)
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/sh\nexit 0\n")
    plain.chmod(0o644)
    path = write(tmp_path, """\
        version: 1
        rules:
          - {host: a.example.test, tier: 0}
        alerts:
          sinks:
            - exec: %s/missing.sh
            - webhook: https://hooks.example.test/
            - exec: %s
            - exec: %s
            - exec: %s
        """ % (tmp_path, tmp_path, plain, ok))
    r = run(sluice_bin, "check", path, "--strict")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "exec program" in ln]
    assert lines == [
        "warning: %s:6: alerts.sinks[0]: exec program %s/missing.sh cannot be run here (No such "
        "file or directory): every alert to it would be lost" % (path, tmp_path),
        "warning: %s:8: alerts.sinks[2]: exec program %s cannot be run here (not a regular "
        "file: a directory): every alert to it would be lost" % (path, tmp_path),
        # root may run a file with an execute bit for anyone, not one with none
        "warning: %s:9: alerts.sinks[3]: exec program %s cannot be run here (not executable by "
        "uid %d: Permission denied): every alert to it would be lost"
        % (path, plain, os.geteuid()),
    ], r.stdout
    r = run(sluice_bin, "check", path, "--strict", "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is True, doc
    found = [(w["line"], w["field"]) for w in doc["warnings"] if "exec program" in w["message"]]
    assert found == [(6, "alerts.sinks[0]"), (8, "alerts.sinks[2]"), (9, "alerts.sinks[3]")], doc
    # a warning of the file beside them still fails --strict
    with open(path, "a") as f:
        f.write("deny: [x.example.test, x.example.test]\n")
    r = run(sluice_bin, "check", path, "--strict")
    assert r.returncode == 1, r.stdout
