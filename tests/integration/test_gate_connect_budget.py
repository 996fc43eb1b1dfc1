"""Connecting upstream (src/gate/upstream.c): a name's checked addresses are
tried in order within one budget, min(idle_timeout, 10 s), for them all.

The names here get several addresses from a FakeDNS of the test's own (on
loopback, like everything else): dns.static maps a name to one address."""

import errno
import time

import pytest

from conftest import API_IP, DEAD_IP, DNS_IP
from gate_client import assert_denied, connect, request
from gate_servers import FakeDNS, FullListener

IDLE_S = 2
HOLE_IPS = ["127.0.0.%d" % i for i in range(21, 29)]
# the blackholed address in front of the api upstream, on the api upstream's
# port: one no other test binds, so that port is free on it (on one of
# HOLE_IPS, the other worker's Blackholes may hold it: the kernel picks
# their port among those other addresses use)
LATE_HOLE_IP = "127.0.0.29"


class Blackholes:
    """A FullListener on each of HOLE_IPS, all on one port: a connect to any
    of them is never answered (the kernel drops its SYNs)."""

    def __init__(self):
        for _ in range(5):  # another socket may hold the port on one of them
            self.lsts = [FullListener(HOLE_IPS[0])]
            self.port = self.lsts[0].port
            try:
                for ip in HOLE_IPS[1:]:
                    self.lsts.append(FullListener(ip, self.port))
                return
            except OSError as e:
                self.close()
                if e.errno != errno.EADDRINUSE:
                    raise
        pytest.fail("no port free on all of %s" % HOLE_IPS)

    def close(self):
        for lst in self.lsts:
            lst.close()


@pytest.fixture
def holes():
    h = Blackholes()
    yield h
    h.close()


@pytest.fixture
def names():
    """names(mapping): a FakeDNS answering <mapping> (name: [IPs]), stopped
    after the test; returns the dns.servers entry that points at it."""
    servers = []

    def make(mapping):
        servers.append(FakeDNS(DNS_IP, mapping))
        return ["%s:%d" % (DNS_IP, servers[-1].port)]
    yield make
    for s in servers:
        s.stop()


def _policy(net, names, host, addrs, port):
    rules = [{"host": host, "ports": [port], "tier": 0}]
    return net.policy(rules, dns_servers=names({host: addrs}),
                      limits={"idle_timeout": "%ds" % IDLE_S})


@pytest.mark.parametrize("method", ["CONNECT", "GET"])
def test_blackholed_addresses_share_one_connect_budget(gateway, net, names, holes, method):
    # eight addresses that never answer: the connect phase ends within the
    # one budget of min(idle_timeout, 10 s) = 2 s, not after a timeout for
    # each. Each attempt gets at least 1 s (UPSTREAM_ATTEMPT_FLOOR_MS), so
    # the budget is spent after the second address (a third or so may get
    # the few milliseconds the event loop's coarse clock leaves over): the
    # refusal names the last one tried, never one of the last four (with a
    # budget for each, the eighth)
    host = "holes.example.test"
    gw = gateway(_policy(net, names, host, HOLE_IPS, holes.port))
    if method == "CONNECT":
        t = connect(gw, "%s:%d" % (host, holes.port), timeout=30)
        t.close()
        r = t
    else:
        r = request(gw, "GET", net.url("/", host=host, port=holes.port), timeout=30)
    ev, _ = assert_denied(gw, net, r, "upstream_unreachable", host=host, port=holes.port,
                          method=method, tier=0, rule="rules[0]")
    assert r.text.startswith("sluice: cannot connect to %s:%d (%s)" % (host, holes.port, ev["ip"]))
    assert ev["ip"] in HOLE_IPS[:4], ev


def test_a_refused_address_before_a_working_one_still_connects(gateway, net, names,
                                                               refused_port):
    # nothing listens on the first address (held so: no other socket binds
    # it meanwhile): refused at once, the next one (the api upstream) is
    # tried with what is left of the budget
    refused_port(DEAD_IP, net.api.port)
    host = "two.example.test"
    gw = gateway(_policy(net, names, host, [DEAD_IP, API_IP], net.api.port))
    r = request(gw, "GET", net.url("/after-refused", host=host))
    assert r.status == 200, r
    ev, end = gw.decided(host=host)
    assert (ev["decision"], ev["ip"], end["status"]) == ("allow", API_IP, 200), (ev, end)


def test_a_working_address_after_a_blackholed_one_gets_its_share(gateway, net, names):
    # the blackholed first address (on the api upstream's port) uses its
    # share, half the budget (1 s of 2 s), and the api upstream behind it
    # still gets the rest
    host = "late.example.test"
    hole = FullListener(LATE_HOLE_IP, net.api.port)
    try:
        gw = gateway(_policy(net, names, host, [LATE_HOLE_IP, API_IP], net.api.port))
        t0 = time.monotonic()
        r = request(gw, "GET", net.url("/after-hole", host=host), timeout=15)
        took = time.monotonic() - t0
    finally:
        hole.close()
    assert r.status == 200, r
    ev, _ = gw.decided(host=host)
    assert (ev["decision"], ev["ip"]) == ("allow", API_IP), ev
    assert took > 0.5, "the first address answered: it was not blackholed (%.1f s)" % took
