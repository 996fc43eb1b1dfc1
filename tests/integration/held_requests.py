"""Requests whose decisions wait for their log lines (write-ahead): sent
from threads of their own, and seen decided through the admin's /metrics
(which answers meanwhile: the event loop does not wait)."""

import threading
import urllib.error
import urllib.request

from gate_client import poll, request

HANG_GUARD_S = 30  # a hang guard, not a claim on time


def admin_get(port, what):
    return urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, what), timeout=10).read()


def healthz(port):
    """(status, body) of the admin's /healthz, a 503 included."""
    try:
        return 200, admin_get(port, "/healthz")
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def bandwidth_waiting(port):
    """sluice_bandwidth_waiting_connections, from the admin's /metrics (give
    the gateway SLUICE_TEST_METRICS_FRESH_MS=1: a body each scrape)."""
    for line in admin_get(port, "/metrics").decode().splitlines():
        if line.startswith("sluice_bandwidth_waiting_connections "):
            return int(line.split()[1])
    raise AssertionError("no sluice_bandwidth_waiting_connections in /metrics")


FRESH_METRICS = {"SLUICE_TEST_METRICS_FRESH_MS": "1"}  # each scrape a new /metrics body


def decided_count(port):
    """Requests decided so far, from the admin's /metrics."""
    n = 0
    for line in admin_get(port, "/metrics").decode().splitlines():
        if line.startswith("sluice_requests_total{"):
            n += int(line.rsplit(" ", 1)[1])
    return n


class Pending:
    """A request sent from a thread of its own: its answer, once it has one."""

    def __init__(self, gw, url):
        self.status = None
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(gw, url), daemon=True)
        self.thread.start()

    def _run(self, gw, url):
        try:
            self.status = request(gw, "GET", url, timeout=HANG_GUARD_S).status
        except Exception as e:  # noqa: BLE001 - told by the test's asserts
            self.error = e

    def waiting(self):
        return self.thread.is_alive() and self.status is None

    def result(self):
        self.thread.join(HANG_GUARD_S)
        assert not self.thread.is_alive(), "no answer"
        assert self.error is None, self.error
        return self.status


def decided(gw, admin, url, count):
    """Sends a request and waits until the gateway decided it (its count of
    decisions reaches <count>); returns its Pending."""
    p = Pending(gw, url)
    poll(lambda: decided_count(admin) >= count, timeout=10, what="request %d decided" % count)
    return p
