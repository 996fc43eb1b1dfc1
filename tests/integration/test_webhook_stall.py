"""A webhook's answer that came within the attempt's deadline while the
gateway was frozen (SIGSTOP, a paused VM, a long stall of its loop) is
taken when the gateway runs again, not cut by the deadline that fell due
meanwhile: cut, the alert was sent again, a copy at the receiver.
Loopback only."""

import os
import signal
import threading
import time

import pytest

from conftest import wait_in_epoll
from gate_client import request
from watch_helpers import Receiver, delivered_through, webhook_label, webhook_tls_env
from test_watch_sinks import later, later_rules, raise_later

# Past the 5 s deadline of an attempt (SINK_WEBHOOK_TIMEOUT_S) and evhttp's
# own 6 s read timeout, both counted from before the stop.
STOP_S = 6.0


class _Freezer(Receiver):
    """A Receiver that, on the first alert, stops the gateway (SIGSTOP) once
    it waits for the answer, then answers at once: the answer lies in the
    gateway's socket, in time, while the gateway is stopped."""

    def __init__(self, tls=None):
        self.pid = None
        self.stopped = threading.Event()
        super().__init__(tls=tls)

    def got(self, path, ctype, body):
        super().got(path, ctype, body)
        if self.pid is not None and not self.stopped.is_set():
            wait_in_epoll(self.pid)
            os.kill(self.pid, signal.SIGSTOP)
            self.stopped.set()  # the handler answers on return


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_webhook_answer_in_time_is_taken_after_a_freeze(gateway, net, tmp_path, scheme):
    tls, env = webhook_tls_env(tmp_path, scheme, "localhost", "DNS:localhost,IP:127.0.0.1")
    rcv = _Freezer(tls=tls)
    gw = None
    try:
        url = "%s://127.0.0.1:%d/hook" % (scheme, rcv.port)
        gw = gateway(net.policy(later_rules(net), alerts={"sinks": [{"webhook": url}]}),
                     args=["--alerts", str(tmp_path / "a.jsonl")], env=env)
        rcv.pid = gw.proc.pid
        # in a thread: the gateway may be stopped before it answers the agent
        answers = []
        agent = threading.Thread(target=lambda: answers.append(
            request(gw, "POST", net.url("/p"), body=b"1", timeout=STOP_S + 20).status))
        agent.start()
        assert rcv.stopped.wait(20), "the alert never reached the receiver"
        time.sleep(STOP_S)  # the answer waits in the stopped gateway's socket
        gw.proc.send_signal(signal.SIGCONT)
        agent.join(STOP_S + 30)
        assert answers == [200]
        # counted behind a later alert: no retry of the first can follow it
        raise_later(gw, net)
        got = delivered_through(rcv, later)
        firsts = [b for b in got if b.get("kind") == "tier3_write" and not later(b)]
        assert len(firsts) == 1, "the alert answered 200 in time came %d times; stderr:\n%s" % (
            len(firsts), gw.stderr())
        gw.stop()  # a failed attempt told, through the relay, is in the file then
        assert "webhook %s: cannot deliver" % webhook_label(url) not in gw.stderr(), gw.stderr()
    finally:
        if gw is not None:
            gw.proc.send_signal(signal.SIGCONT)
        rcv.stop()
