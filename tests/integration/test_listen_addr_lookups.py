"""A named --admin or --listen is looked up once, and self_request covers
the address bound: flip_names.c, preloaded, has a name ending in
.flip.test give 127.0.0.1 at its first lookup, 127.0.0.2 at its second,
and so on, as a /etc/hosts edited between two lookups would."""
import socket

from gate_client import preload_env, request
from gate_servers import free_port


def bound_at(port):
    """The addresses of 127.0.0.1 to 127.0.0.3 where something listens on
    <port>."""
    found = []
    for ip in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
        s = socket.socket()
        try:
            s.settimeout(10)
            if s.connect_ex((ip, port)) == 0:
                found.append(ip)
        finally:
            s.close()
    return found


def assert_self(gw, ip, port):
    r = request(gw, "GET", "http://%s:%d/metrics" % (ip, port))
    assert r.status == 403 and r.header("Sluice-Reason") == "self_request", \
        (ip, r.status, r.header("Sluice-Reason"), r.body[:100])


def test_a_named_admin_is_refused_at_the_address_it_bound(gateway, net, tmp_path):
    # Before, --admin adm.flip.test:PORT was looked up three times: serve's
    # check of the value (127.0.0.1), the server's bind (127.0.0.2) and the
    # gateway's reading for self_request (127.0.0.3): the guard covered an
    # address nothing listened on, and a request through the gateway to
    # 127.0.0.2:PORT reached /metrics (200)
    admin = free_port()
    pol = net.policy([{"cidr": "127.0.0.0/8", "ports": [admin], "tier": 0}])
    gw = gateway(pol, args=["--admin", "adm.flip.test:%d" % admin], env=preload_env(tmp_path, "flip_names"))
    bound = bound_at(admin)
    assert len(bound) == 1, bound
    assert_self(gw, bound[0], admin)
    assert bound == ["127.0.0.1"], bound  # the one lookup's address


def test_a_named_listen_is_refused_at_the_address_it_bound(gateway, net, tmp_path):
    # --listen was already looked up once, and its guard reads the address
    # the listener bound (getsockname()): pinned here beside --admin's
    port = free_port()
    pol = net.policy([{"cidr": "127.0.0.0/8", "ports": [port], "tier": 0}])
    gw = gateway(pol, extra_listen=["lst.flip.test:%d" % port], env=preload_env(tmp_path, "flip_names"))
    bound = bound_at(port)
    assert len(bound) == 1, bound
    assert_self(gw, bound[0], port)
    assert bound == ["127.0.0.1"], bound
