"""`sluice calc retries`: amplification figures, recommendation, exit codes."""

import pytest


def test_worst_case_27x(run_sluice):
    r = run_sluice("calc", "retries", "--layers", "3", "--attempts", "3")
    assert r.returncode == 0, r.stderr
    assert "3^3 = 27x" in r.stdout
    assert "budget" in r.stdout  # the recommendation names retry budgets
    assert "random(0, min(cap, base * 2^attempt))" in r.stdout
    assert "one layer" in r.stdout
    assert r.stderr == ""


def test_budget_and_rps(run_sluice):
    r = run_sluice("calc", "retries", "--layers", "3", "--attempts", "3", "--budget", "0.1",
                   "--rps", "100")
    assert r.returncode == 0, r.stderr
    assert "27x" in r.stdout
    assert "(1 + 0.1)^3 = 1.33x" in r.stdout
    assert "up to 2700 requests/s" in r.stdout
    assert "133.1 requests/s with the budget" in r.stdout


def line(stdout, prefix):
    """The one line of <stdout> that starts (after its indent) with <prefix>."""
    found = [x.strip() for x in stdout.splitlines() if x.strip().startswith(prefix)]
    assert len(found) == 1, (prefix, stdout)
    return found[0]


WORST = "worst case, every layer retrying every failure:"


def budget_line(stdout, pct):
    return line(stdout, "with a %s retry budget at each layer:" % pct)


def test_budget_as_percentage_and_edges(run_sluice):
    r = run_sluice("calc", "retries", "--layers", "2", "--attempts", "5", "--budget", "10%")
    assert r.returncode == 0, r.stderr
    assert line(r.stdout, WORST).endswith(": 5^2 = 25x")
    assert budget_line(r.stdout, "10%").endswith(": (1 + 0.1)^2 = 1.21x")
    # one attempt: no retries, no amplification, whatever the budget; the
    # formula printed is the one that gives the figure, min(attempts, 1 + b)
    r = run_sluice("calc", "retries", "--layers", "20", "--attempts", "1", "--budget", "1")
    assert r.returncode == 0, r.stderr
    assert line(r.stdout, WORST).endswith(": 1^20 = 1x")
    b = budget_line(r.stdout, "100%")
    assert ": min(1, 1 + 1)^20 = 1^20 = 1x" in b, b
    assert "(1 + 1)^20 = 1x" not in r.stdout
    # a budget above what the attempts allow: capped at the attempts
    r = run_sluice("calc", "retries", "--layers", "3", "--attempts", "2", "--budget", "1.0",
                   "--rps", "10")
    assert r.returncode == 0, r.stderr
    assert ": min(2, 1 + 1)^3 = 2^3 = 8x" in budget_line(r.stdout, "100%")
    assert "(80 requests/s with the budget)" in line(r.stdout, "10 requests/s at the top:")
    r = run_sluice("calc", "retries", "--layers", "2", "--attempts", "2", "--budget", "0.5")
    assert budget_line(r.stdout, "50%").endswith(": (1 + 0.5)^2 = 2.25x")
    r = run_sluice("calc", "retries", "--layers", "20", "--attempts", "100")
    assert r.returncode == 0 and line(r.stdout, WORST).endswith(": 100^20 = 1e+40x")
    assert "retry budget at each layer" not in r.stdout


def test_small_figures_are_not_printed_as_0(run_sluice):
    # Two decimals made 0.001 requests/s "0 requests/s", and a budget of
    # 0.001% "a 0% retry budget": a figure below 1 keeps three significant
    # digits.
    r = run_sluice("calc", "retries", "--layers", "3", "--attempts", "3", "--budget", "0.1",
                   "--rps", "0.001")
    assert r.returncode == 0, r.stderr
    top = line(r.stdout, "0.001 requests/s at the top:")
    assert "up to 0.027 requests/s (0.00133 requests/s with the budget)" in top, top
    r = run_sluice("calc", "retries", "--layers", "2", "--attempts", "3", "--budget", "0.00001")
    assert r.returncode == 0, r.stderr
    assert budget_line(r.stdout, "0.001%").endswith(": (1 + 1e-05)^2 = 1x")


@pytest.mark.parametrize("args", [
    [],
    ["bogus"],
    ["retries"],
    ["retries", "--layers", "3"],
    ["retries", "--attempts", "3"],
    ["retries", "--layers", "0", "--attempts", "3"],
    ["retries", "--layers", "21", "--attempts", "3"],
    ["retries", "--layers", "3", "--attempts", "0"],
    ["retries", "--layers", "3", "--attempts", "101"],
    ["retries", "--layers", "three", "--attempts", "3"],
    ["retries", "--layers", "-3", "--attempts", "3"],
    ["retries", "--layers", "3.0", "--attempts", "3"],
    ["retries", "--layers", "99999999999999999999999", "--attempts", "3"],
    ["retries", "--layers", "3", "--attempts", "3", "--budget", "1.5"],
    ["retries", "--layers", "3", "--attempts", "3", "--budget", "-0.1"],
    ["retries", "--layers", "3", "--attempts", "3", "--budget", "nan"],
    ["retries", "--layers", "3", "--attempts", "3", "--budget", "1e-1"],
    ["retries", "--layers", "3", "--attempts", "3", "--budget", ""],
    ["retries", "--layers", "3", "--attempts", "3", "--rps", "0"],
    ["retries", "--layers", "3", "--attempts", "3", "--rps", "inf"],
    ["retries", "--layers", "3", "--attempts", "3", "--rps", "ten"],
    ["retries", "--layers", "3", "--attempts", "3", "--rps"],
    ["retries", "--layers", "3", "--attempts", "3", "--jitter", "1"],
    # a flag given twice is a mistake, not "the last one wins"
    ["retries", "--layers", "3", "--layers", "4", "--attempts", "3"],
    ["retries", "--layers", "3", "--attempts", "3", "--attempts", "3"],
    ["retries", "--layers", "3", "--attempts", "3", "--budget", "0.1", "--budget", "0.2"],
    ["retries", "--layers", "3", "--attempts", "3", "--rps", "1", "--rps", "1"],
])
def test_bad_input_exits_2(run_sluice, args):
    r = run_sluice("calc", *args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert r.stdout == ""
    assert "usage: sluice calc" in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2


def test_help(run_sluice):
    for args in (["calc", "--help"], ["calc", "retries", "--help"]):
        r = run_sluice(*args)
        assert r.returncode == 0
        assert "--layers" in r.stdout and "--budget" in r.stdout
    r = run_sluice("--help")
    assert "calc" in r.stdout


def test_repeated_flag_is_named(run_sluice):
    r = run_sluice("calc", "retries", "--layers", "3", "--attempts", "3", "--layers", "3")
    assert r.returncode == 2 and r.stdout == ""
    assert "--layers given twice" in r.stderr


def test_flag_equals_value_as_the_other_commands_take_it(run_sluice):
    """`--layers=3` was "unknown argument '--layers=3'" while check, serve,
    run and audit (getopt_long) all take `--flag=value`."""
    spaced = run_sluice("calc", "retries", "--layers", "3", "--attempts", "3", "--budget", "10%",
                        "--rps", "100")
    joined = run_sluice("calc", "retries", "--layers=3", "--attempts=3", "--budget=10%",
                        "--rps=100")
    assert joined.returncode == 0, joined.stderr
    assert joined.stdout == spaced.stdout and joined.stderr == ""
    for args, said in ((["--layers=", "--attempts", "3"], "--layers: '' is not a whole number"),
                       (["--layers=3", "--attempts", "3", "--layers", "4"], "--layers given twice"),
                       (["--lay=3", "--attempts", "3"], "unknown argument '--lay=3'")):
        r = run_sluice("calc", "retries", *args)
        assert r.returncode == 2 and r.stdout == "", (args, r.stderr)
        assert said in r.stderr, (args, r.stderr)


def test_the_recommendation_compares_the_budget_only_with_a_larger_figure(run_sluice):
    # With one attempt a layer nothing retries and the worst case is 1x, but
    # the recommendation said a 10% budget made an outage cost "1.1x, not
    # 1x", as if the budget, more than nothing, were the saving.
    r = run_sluice("calc", "retries", "--layers", "3", "--attempts", "1")
    assert r.returncode == 0, r.stderr
    rec = line(r.stdout, "- give that layer a retry budget:")
    assert rec.endswith("(--budget 0.1), so an outage costs at most 1.1x"), rec
    assert "not 1x" not in r.stdout
    r = run_sluice("calc", "retries", "--layers", "1", "--attempts", "2")
    rec = line(r.stdout, "- give that layer a retry budget:")
    assert rec.endswith("(--budget 0.1), so an outage costs 1.1x, not 2x"), rec


def test_arguments_in_usage_errors_are_escaped(run_sluice):
    # An argument as given (a file name a glob expanded, say) may hold a
    # line end or a terminal escape: named in a usage error it is shown
    # \ooo, as the other commands name an unknown option, so that it cannot
    # write a line of its own into standard error.
    forged = "x\nsluice calc: forged\x1b[2K\\"
    shown = "x\\012sluice calc: forged\\033[2K\\134"
    for args, said in ((["retries", "--layers", "3", "--attempts", "3", "--" + forged],
                        "sluice calc: unknown argument '--" + shown + "'"),
                       (["retries", "--layers", forged, "--attempts", "3"],
                        "sluice calc: --layers: '" + shown + "' is not a whole number"),
                       (["retries", "--layers", "3", "--attempts=" + forged],
                        "sluice calc: --attempts: '" + shown + "' is not a whole number"),
                       (["retries", "--layers", "3", "--attempts", "3", "--budget", forged],
                        "sluice calc: --budget: '" + shown + "' is not a ratio"),
                       (["retries", "--layers", "3", "--attempts", "3", "--rps", forged],
                        "sluice calc: --rps: '" + shown + "' is not a positive number"),
                       ([forged], "sluice calc: unknown calculation '" + shown + "'")):
        r = run_sluice("calc", *args)
        assert r.returncode == 2 and r.stdout == "", (args, r.stderr)
        first = r.stderr.splitlines()[0]
        assert first.startswith(said), (args, r.stderr)
        assert "forged" not in r.stderr.splitlines()[1], (args, r.stderr)
        assert "\x1b" not in r.stderr, (args, r.stderr)


TINY = "0." + "0" * 400 + "1"  # a positive decimal under the smallest double
HUGE = "1" + "0" * 400  # one over the largest


@pytest.mark.parametrize("flag,value,said", [
    # a ratio from 0 to 1 (or a positive rate) all the same: too small to
    # compute with, not "not a ratio"
    ("--budget", TINY, "is too small to compute with (the smallest is about 2.225e-308); "
                       "write 0 for no retries"),
    ("--budget", TINY + "%", "is too small to compute with (the smallest is about 2.225e-308); "
                             "write 0 for no retries"),
    ("--rps", TINY, "is too small to compute with (the smallest is about 2.225e-308)"),
    # past the bounds: what the bound is
    ("--budget", "1.5", "is more than 1 (a ratio from 0 to 1: 0.1 or 10%)"),
    ("--budget", "101%", "is more than 1 (a ratio from 0 to 1: 0.1 or 10%)"),
    ("--budget", HUGE, "is more than 1 (a ratio from 0 to 1: 0.1 or 10%)"),
    ("--rps", HUGE, "is more than 1e+12 requests a second"),
    ("--rps", "2000000000000", "is more than 1e+12 requests a second"),
    # how it is written: no exponent
    ("--budget", "1e-400", "is not a ratio from 0 to 1 written as a decimal (0.1) or a "
                           "percentage (10%)"),
    ("--rps", "1e-400", "is not a positive number of requests a second written as a decimal "
                        "(100 or 0.5)"),
    ("--rps", "0.0", "is not a positive number of requests a second"),
], ids=["budget-tiny", "budget-tiny-pct", "rps-tiny", "budget-1.5", "budget-101pct",
        "budget-huge", "rps-huge", "rps-2e12", "budget-exponent", "rps-exponent", "rps-0"])
def test_out_of_range_numbers_are_named_for_what_they_are(run_sluice, flag, value, said):
    # A decimal under the smallest double (underflow) was "not a ratio from
    # 0 to 1" or "not a positive number": strtod()'s ERANGE was taken for a
    # syntax error. So was one past the largest, and an --rps over 1e12.
    r = run_sluice("calc", "retries", "--layers", "3", "--attempts", "3", flag, value)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    first = r.stderr.splitlines()[0]
    assert first == "sluice calc: %s: '%s' %s" % (flag, value, said), first
