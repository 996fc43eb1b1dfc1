"""/metrics counters across a reload (SPEC.md, --admin): a counter's
series that a reload keeps goes on from where it was, never back.
Driven through a real `sluice serve`; loopback only; every loop bounded in
count and time."""

import socket

from conftest import policy_yaml
from gate_client import request
from held_requests import FRESH_METRICS
from test_watch_admin import scrape
from watch_helpers import free_tcp_port


def dns_counts(port, server):
    """{result: count} of sluice_dns_responses_total{server=<server>}."""
    series, types = scrape(port)
    assert types["sluice_dns_responses_total"] == "counter"
    out = {}
    for (name, labels), v in series.items():
        d = dict(labels)
        if name == "sluice_dns_responses_total" and d["server"] == server:
            out[d["result"]] = v
    return out


def test_a_dns_server_a_reload_keeps_keeps_its_counts(gateway, net, refused_port):
    # Before: a reload that changed dns.servers at all (a second server
    # added) opened every server anew, and the first's counts went back to
    # 0: a counter going backwards in the same series.
    port = free_tcp_port()
    dns = net.vars["dns_server"]
    rule = {"host": "dyn.example.test", "ports": [net.api.port], "tier": 1}
    gw = gateway(net.policy([rule]), args=["--admin", "127.0.0.1:%d" % port], env=FRESH_METRICS)
    assert request(gw, "GET", net.url("/d", host="dyn.example.test")).status == 200
    before = dns_counts(port, dns)
    assert before["answer"] >= 1, before
    second = "127.0.0.1:%d" % refused_port(kind=socket.SOCK_DGRAM).port
    gw.write_policy(policy_yaml(net.policy([rule], dns_servers=[dns, second])))
    gw.reload()
    gw.wait_stderr("sluice: reloaded ")
    after = dns_counts(port, dns)
    assert after == before, (before, after)
    assert dns_counts(port, second) == {"answer": 0, "timeout": 0, "failure": 0}
