"""SIGHUP reloads a large policy in the background: the event loop keeps
answering requests while the new policy is parsed and indexed, the swap
happens on the loop, and signals arriving during a load queue one more."""

import threading
import time

from conftest import policy_yaml
from gate_client import api_rule, other_rule, other_url, poll, request

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


def reload_count(gw):
    return gw.stderr().count("sluice: reloaded ")


def test_requests_are_answered_during_a_large_reload(gateway, net):
    gw = gateway(net.policy([api_rule(net)]))
    assert request(gw, "GET", other_url(net)).status == 403
    gw.write_policy(big_policy(net, [api_rule(net), other_rule(net)], "a"))

    lat = []  # (start, seconds, status)
    errors = []
    stop = threading.Event()

    def traffic():
        i = 0
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                r = request(gw, "GET", net.url("/t%d" % i), timeout=60)
                lat.append((t0, time.monotonic() - t0, r.status))
            except Exception as e:  # noqa: BLE001 - recorded and asserted below
                errors.append(repr(e))
            i += 1
            time.sleep(0.01)

    th = threading.Thread(target=traffic)
    th.start()
    try:
        poll(lambda: len(lat) >= 3, timeout=10, what="traffic before the reload")
        sent = time.monotonic()
        gw.reload()
        poll(lambda: reload_count(gw) >= 1, timeout=120, interval=0.01,
             what="the 50,000-rule reload")
        done = time.monotonic()
        n = len(lat)
        poll(lambda: len(lat) >= n + 3, timeout=10, what="traffic after the reload")
    finally:
        stop.set()
        th.join(90)
    assert not th.is_alive()
    assert errors == [], errors[:5]
    assert all(s == 200 for _, _, s in lat), [s for _, _, s in lat if s != 200][:5]
    # the new policy is in force
    assert request(gw, "GET", other_url(net, "/after")).status == 200
    assert "reloaded %d rules" % (FILLER + 2) in gw.stderr()

    took = done - sent
    during = [(t0, d) for t0, d, _ in lat if t0 + d > sent and t0 < done]
    worst = max(d for _, d in during) if during else 0.0
    print("reload took %.2fs; %d requests during it, the slowest %.3fs" % (took, len(during), worst))
    # A loop blocked by the load keeps the request in flight waiting for
    # (nearly) the whole reload. Judged only when the reload is long enough
    # to tell the two apart, with room for a loaded machine.
    if took >= 1.2:
        assert worst < max(0.5, took / 2), (
            "a request waited %.2fs during a %.2fs reload" % (worst, took))
        assert len(during) >= 3, "only %d requests answered during a %.2fs reload" % (
            len(during), took)
    if took > 2.5:
        assert worst < 2.0, "a request waited %.2fs during a %.2fs reload" % (worst, took)


def test_signals_during_a_load_queue_one_more_reload(gateway, net):
    gw = gateway(net.policy([api_rule(net)]))
    gw.write_policy(big_policy(net, [api_rule(net), other_rule(net)], "a"))
    t0 = time.monotonic()
    gw.reload()
    time.sleep(0.05)
    # the second policy drops other.example.test; it is written before the
    # signals that must bring it in
    gw.write_policy(big_policy(net, [api_rule(net)], "b"))
    gw.reload()
    time.sleep(0.05)
    gw.reload()
    time.sleep(0.1)  # delivered and handled
    merged = reload_count(gw) == 0  # both arrived while the first load ran
    poll(lambda: reload_count(gw) >= 2, timeout=180, interval=0.02,
         what="the queued reload")
    first_took = time.monotonic() - t0
    print("signals merged: %s; two reloads took %.2fs" % (merged, first_took))
    # the last file read is the second one
    poll(lambda: request(gw, "GET", other_url(net, "/q")).status == 403, timeout=10,
         what="the second policy to be in force")
    assert request(gw, "GET", net.url("/ok")).status == 200
    if merged:
        # two signals during one load make one more reload, not two
        time.sleep(min(first_took / 2 + 0.5, 20))
        assert reload_count(gw) == 2, gw.stderr()[-2000:]
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
    poll(lambda: reload_count(gw) >= 1, timeout=10, what="the reload")
    err = gw.stderr()
    ech = err.index("network.encrypted_client_hello: a ClientHello that carries")
    assert ech < err.index("sluice: reloaded "), err
    assert err.count(open_ranges) == 1, err  # the new file has no such warning
