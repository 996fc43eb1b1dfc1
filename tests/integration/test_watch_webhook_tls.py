"""https:// webhooks: alerts POSTed over TLS to a loopback receiver whose
self-signed certificate the gateway trusts through SSL_CERT_FILE, with the
server's name checked, and nothing sent where the check fails. Loopback only:
"localhost" resolves from /etc/hosts."""

import os
import re
import urllib.request

import pytest

from conftest import policy_yaml
from gate_client import fifo_write_end, poll, request
from watch_helpers import Receiver, free_tcp_port, self_signed, wait_alert, webhook_label


def rules(net):
    return [{"host": h, "ports": [u.port], "tier": 3, "owner": "alice", "expires": "9999-12-31"}
            for h, u in (("api.example.test", net.api), ("other.example.test", net.other))]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("hookcerts")
    return {
        "local": self_signed(d, "localhost", "DNS:localhost,IP:127.0.0.1"),
        "other": self_signed(d, "other.test", "DNS:other.test"),
    }


def start(gateway, net, tmp_path, url, trust, backoff_ms=None, args=()):
    env = {"SSL_CERT_FILE": trust}
    if backoff_ms is not None:
        env["SLUICE_TEST_WEBHOOK_BACKOFF_MS"] = str(backoff_ms)
    return gateway(net.policy(rules(net), alerts={"sinks": [{"webhook": url}]}),
                   args=["--alerts", str(tmp_path / "a.jsonl")] + list(args), env=env)


def writes(gw, net, n, tmp_path):
    """<n> (1 or 2) tier-3 writes to different hosts: <n> alerts, none folded."""
    targets = [net.url("/w"), net.url("/w", host="other.example.test", port=net.other.port)]
    for url in targets[:n]:
        assert request(gw, "POST", url, body=b"1").status == 200
    wait_alert(str(tmp_path / "a.jsonl"), "tier3_write", count=n)


def test_https_webhook_by_name_new_connection_each_time(gateway, net, tmp_path, certs):
    # The receiver closes after every answer: each alert needs a new TLS
    # connection, which the sink must build afresh (evhttp cannot reconnect
    # a TLS bufferevent).
    rcv = Receiver(tls=certs["local"], close_each=True)
    try:
        gw = start(gateway, net, tmp_path, "https://localhost:%d/hook" % rcv.port,
                   certs["local"][0])
        writes(gw, net, 2, tmp_path)
        got = poll(lambda: len(rcv.bodies()) >= 2 and rcv.bodies() or None, timeout=15,
                   what="two alerts over https")
        assert sorted(b["host"] for b in got) == ["api.example.test", "other.example.test"]
        assert sorted(b["detail"] for b in got) == sorted(
            b["detail"] for b in wait_alert(str(tmp_path / "a.jsonl"), "tier3_write", count=2))
        assert all(p == "/hook" and c == "application/json" for p, c, _ in rcv.posts)
        assert rcv.connections == 2 and rcv.sni == ["localhost"] * 2
        gw.stop()  # a failed attempt told, through the relay, is in the file then
        assert "cannot deliver" not in gw.stderr(), gw.stderr()
    finally:
        rcv.stop()


def test_https_webhook_by_ip_keeps_its_connection(gateway, net, tmp_path, certs):
    # An IP literal is checked against the certificate's IP addresses and
    # sends no SNI (RFC 6066); a server that keeps the connection open gets
    # every alert on the one connection.
    rcv = Receiver(tls=certs["local"])
    try:
        gw = start(gateway, net, tmp_path, "https://127.0.0.1:%d/hook" % rcv.port,
                   certs["local"][0])
        writes(gw, net, 2, tmp_path)
        poll(lambda: len(rcv.bodies()) >= 2 or None, timeout=15, what="two alerts over https")
        assert rcv.connections == 1 and rcv.sni == [None]
        gw.stop()  # a failed attempt told, through the relay, is in the file then
        assert "cannot deliver" not in gw.stderr(), gw.stderr()
    finally:
        rcv.stop()


@pytest.mark.parametrize("served, trusted, why", [
    ("other", "other", "certificate verify failed: hostname mismatch"),
    ("local", "other", "certificate verify failed: self-signed certificate"),
])
def test_https_webhook_refuses_an_unverified_server(gateway, net, tmp_path, certs, served,
                                                    trusted, why):
    rcv = Receiver(tls=certs[served])
    try:
        gw = start(gateway, net, tmp_path, "https://localhost:%d/hook" % rcv.port,
                   certs[trusted][0], backoff_ms=50, args=["--grace", "1s"])
        writes(gw, net, 1, tmp_path)
        poll(lambda: why in gw.stderr() or None, timeout=10, what="the refusal on stderr")
        poll(lambda: rcv.errors >= 2 or None, timeout=10, what="a retried handshake")
        assert rcv.bodies() == []
        # the gate is not held up by the failing sink
        assert request(gw, "GET", net.url("/after")).status == 200
        gw.stop()  # a clean exit 0 while the refused sink still holds its alert
    finally:
        rcv.stop()


def test_https_webhook_down_then_up(gateway, net, tmp_path, certs, refused_port):
    dead = refused_port()  # until the receiver takes it
    port = dead.port
    gw = start(gateway, net, tmp_path, "https://localhost:%d/hook" % port, certs["local"][0],
               backoff_ms=50)
    writes(gw, net, 1, tmp_path)
    poll(lambda: "cannot deliver" in gw.stderr() or None, timeout=10,
         what="the delivery failure on stderr")
    rcv = Receiver(tls=certs["local"], bound=dead.take())
    try:
        got = poll(lambda: rcv.bodies() or None, timeout=15,
                   what="delivery after the receiver came up")
        assert got[0]["kind"] == "tier3_write"
    finally:
        rcv.stop()


def test_webhook_secret_in_the_path_is_never_shown(gateway, net, tmp_path, certs, refused_port):
    # Slack-style URL: the path is the credential. Standard error and
    # /metrics name the sink by a label without it; the POST still goes to
    # the full path.
    dead, admin = refused_port(), free_tcp_port()  # until the receiver takes it
    port = dead.port
    secret = "T0SECRET/B0SECRET/c2VjcmV0dG9rZW4"
    url = "https://localhost:%d/services/%s" % (port, secret)
    label = webhook_label(url)
    gw = start(gateway, net, tmp_path, url, certs["local"][0], backoff_ms=50,
               args=["--admin", str(admin)])
    writes(gw, net, 1, tmp_path)
    poll(lambda: "cannot deliver" in gw.stderr() or None, timeout=10,
         what="the delivery failure on stderr")
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin, timeout=10).read().decode()
    assert 'sluice_webhook_queue{sink="%s"} 1' % label in text
    rcv = Receiver(tls=certs["local"], bound=dead.take())
    try:
        poll(lambda: rcv.bodies() or None, timeout=15, what="delivery to the full path")
        assert rcv.posts[0][0] == "/services/" + secret
    finally:
        rcv.stop()
    gw.stop()
    assert "webhook " + label + ": cannot deliver" in gw.stderr()
    for part in secret.split("/"):
        assert part not in gw.stderr() and part not in text
    assert not re.search(r"SECRET", gw.stderr() + gw.stdout())


def test_reload_adding_64_https_sinks_reads_the_ca_store_off_the_loop(gateway, net, tmp_path,
                                                                       certs):
    # SSL_CERT_FILE is a FIFO the test holds: whoever reads the CA store
    # waits in read() until the test writes it. A reload that adds 64
    # https:// sinks must read the store on its thread, once: requests are
    # answered while that read waits, and one CA file written completes the
    # reload. Before, each new sink read it on the event loop (45 ms of a
    # real store each, ~3 s for 64 with all traffic stopped): the request
    # below went unanswered while the loop waited on the FIFO.
    fifo = str(tmp_path / "ca.fifo")
    os.mkfifo(fifo)
    with open(certs["local"][0], "rb") as f:
        ca = f.read()
    rcv = Receiver(tls=certs["local"])
    fd = None
    try:
        alerts_log = str(tmp_path / "a.jsonl")
        gw = gateway(net.policy(rules(net)), args=["--alerts", alerts_log],
                     env={"SSL_CERT_FILE": fifo})
        urls = ["https://%s:%d/hook%d" % ("localhost" if i == 0 else "127.0.0.1", rcv.port, i)
                for i in range(64)]
        gw.write_policy(policy_yaml(net.policy(rules(net),
                                               alerts={"sinks": [{"webhook": u} for u in urls]})))
        gw.reload()
        fd = poll(lambda: fifo_write_end(fifo), timeout=20, what="a read of the CA store")
        # The store's reader is held: the loop must still decide requests.
        assert request(gw, "GET", net.url("/held"), timeout=20).status == 200
        assert "sluice: reloaded" not in gw.stderr()
        os.write(fd, ca)
        os.close(fd)
        fd = None
        poll(lambda: "sluice: reloaded" in gw.stderr(), timeout=20, what="the reload")
        # one read of the store for the 64 sinks: no reader waits for more
        fd = fifo_write_end(fifo)
        assert fd is None, "the CA store was read more than once"
        # each sink verifies the receiver's certificate against that store
        assert request(gw, "POST", net.url("/w"), body=b"1").status == 200
        # delivery is at least once: an attempt cut while the gateway was
        # stopped is sent again, so 64 POSTs came before /hook16's first
        # under SIGSTOPs of 2-5 s ('/hook17' != '/hook16'); wait for each
        hooks = {"/hook%d" % i for i in range(64)}
        poll(lambda: hooks <= {p for p, _, _ in rcv.posts}, timeout=60,
             what="the alert through all 64 https sinks")
        assert {p for p, _, _ in rcv.posts} == hooks
        # SNI from the sink by name only (None: the IP literals send none)
        assert "localhost" in rcv.sni and set(rcv.sni) == {"localhost", None}
    finally:
        if fd is not None:
            os.close(fd)
        rcv.stop()


def test_start_with_https_sinks_reads_the_ca_store_once(gateway, net, tmp_path, certs):
    # The start builds its sinks before serving, on the one thread: the CA
    # store (a FIFO the test writes once) is read once for all of them.
    # Before, each sink read it: the second read waited on the FIFO for
    # ever and the gateway never served.
    fifo = str(tmp_path / "ca.fifo")
    os.mkfifo(fifo)
    with open(certs["local"][0], "rb") as f:
        ca = f.read()
    rcv = Receiver(tls=certs["local"])
    try:
        urls = ["https://127.0.0.1:%d/start%d" % (rcv.port, i) for i in range(8)]
        gw = gateway(net.policy(rules(net), alerts={"sinks": [{"webhook": u} for u in urls]}),
                     args=["--alerts", str(tmp_path / "a.jsonl")], env={"SSL_CERT_FILE": fifo},
                     wait=False)
        fd = poll(lambda: fifo_write_end(fifo), timeout=20, what="a read of the CA store")
        os.write(fd, ca)
        os.close(fd)
        gw.wait_ready()
        fd = fifo_write_end(fifo)
        if fd is not None:
            os.close(fd)
        assert fd is None, "the CA store was read more than once"
        assert request(gw, "POST", net.url("/w"), body=b"1").status == 200
        got = poll(lambda: len(rcv.posts) >= 8 and rcv.posts, timeout=30,
                   what="the alert through all 8 https sinks")
        assert sorted(p for p, _, _ in got) == sorted("/start%d" % i for i in range(8))
    finally:
        rcv.stop()
