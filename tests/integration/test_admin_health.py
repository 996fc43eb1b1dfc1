"""/healthz tells the truth about whether the gateway serves (SPEC.md,
--admin): a gateway that stops (SIGTERM, SIGINT) refuses new connections
at once while the requests in flight get --grace, and the admin server
answers until the very end; a load balancer or supervisor that asks
/healthz then must hear that no new client is taken. Driven through a
real `sluice serve`; loopback only; every loop bounded in count and
time."""

import urllib.error
import urllib.request

from gate_client import recv_line
from gate_servers import BannerServer, stop_holding_a_banner_tunnel
from held_requests import healthz
from watch_helpers import free_tcp_port


def head_status(port, what):
    """The status of a HEAD of <what> on the admin server, and its body."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, what), method="HEAD")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_healthz_is_unhealthy_once_the_gateway_stops_taking_connections(gateway, net):
    # Before: 200 ok for the whole stop (up to --grace, 1 h at most, then
    # the sinks' drain), the listeners closed and every new client refused.
    port = free_tcp_port()
    rule = {"host": "banner.example.test", "ports": [net.banner.port], "tier": 2}
    gw = gateway(net.policy([rule]), args=["--admin", "127.0.0.1:%d" % port, "--grace", "60s"])
    assert healthz(port) == (200, b"ok\n")
    t = stop_holding_a_banner_tunnel(gw, net)
    try:
        assert healthz(port) == (503, b"unhealthy: stopping: new connections are refused; "
                                      b"the requests in flight finish within --grace\n")
        assert head_status(port, "/healthz") == (503, b"")
        t.sock.sendall(b"QUIT\r\n")
        assert recv_line(t.sock) == BannerServer.REPLY
    finally:
        t.close()
    gw.stop(timeout=15)
