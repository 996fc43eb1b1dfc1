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


def test_budget_as_percentage_and_edges(run_sluice):
    r = run_sluice("calc", "retries", "--layers", "2", "--attempts", "5", "--budget", "10%")
    assert r.returncode == 0 and "= 25x" in r.stdout and "= 1.21x" in r.stdout
    # one attempt: no retries, no amplification, whatever the budget
    r = run_sluice("calc", "retries", "--layers", "20", "--attempts", "1", "--budget", "1")
    assert r.returncode == 0 and "1^20 = 1x" in r.stdout and "= 1x" in r.stdout
    r = run_sluice("calc", "retries", "--layers", "20", "--attempts", "100")
    assert r.returncode == 0 and "100^20 = 1e+40x" in r.stdout


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
