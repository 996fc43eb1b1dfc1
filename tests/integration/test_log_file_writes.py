"""A `--log FILE` on a regular file is written by a thread of its own: a
write that does not return (a hung NFS server, a frozen file system, the
file's inode lock held by another process) never stops the event loop.
O_NONBLOCK does nothing for a regular file, so when the event loop wrote
it, such a write stopped the whole gateway.

Decisions still wait for their lines (write-ahead, SPEC.md Decision log):
while the file cannot be written, requests are decided and then held, their
answers not sent and nothing sent upstream, and everything else goes on:
the admin endpoints answer, clients are accepted and their requests
decided, SIGTERM stops within its grace. Once the file can be written
again, the held requests complete, their lines in order.

The write is made to wait for real (uffd_hold.FileLock): a helper thread
here appends to the same file from a page a userfaultfd leaves unfilled,
so the kernel holds the file's inode lock inside that write until the
test fills the page (with a newline: one blank line in the file). Needs
root; skipped otherwise."""

import json
import os
import select
import signal
import socket
import threading

import pytest

from conftest import API_IP
from gate_client import (api_rule, build_request, hello_record, open_conn, other_url, poll,
                         read_head, read_response, request)
from gate_servers import ScriptedUpstream
from held_requests import admin_get, decided, decided_count, healthz
from test_gate_connect import _ALERT, _SEER, _EndSeer, _reset
from test_gate_reload import (PING, EchoServer, _cgroup_write, _pids_cgroup, assert_closed,
                              echo_policy, echo_rule,
                              open_echo_tunnel, reload_to, requests_total)
from uffd_hold import FileLock, stop_while_held, threads_in
from watch_helpers import free_tcp_port

EVIL = "evil.example.test"


def lines_of(path):
    with open(path, "rb") as f:
        return [json.loads(x) for x in f.read().split(b"\n") if x.strip()]


def paths_in(path):
    return [e.get("path") for e in lines_of(path) if e["event"] == "agent_egress"]


def hold_log(gw, admin, net, log, count):
    """Holds <log>'s inode lock, has a request decided (the <count>th) whose
    line the writer then waits to write; returns (the FileLock, that request, the
    gateway's threads in write())."""
    lock = FileLock(log)
    try:
        held = decided(gw, admin, net.url("/held"), count)
        stuck = poll(lambda: threads_in(gw.proc.pid, "write", "writev"), timeout=10,
                     interval=0.01, what="the gateway's write waiting for the file")
    except BaseException:
        lock.release()
        raise
    return lock, held, stuck


def second_request_held(gw, up, method, fields, body, while_held):
    """On one client connection: GET /k1 from <up> (its upstream connection
    kept), then <method> /k2 (<fields> and <body> after its Host) while the
    log's file is held. Once /k2's line waits for the file (the kept
    connection was checked and taken up before that), runs <while_held>(),
    then lets the file go. Returns /k2's response."""
    url = "http://%s:%d" % (EVIL, up.port)
    s = open_conn(gw)
    try:
        s.sendall(("GET %s/k1 HTTP/1.1\r\nHost: %s:%d\r\n\r\n"
                   % (url, EVIL, up.port)).encode())
        r1 = read_response(s)
        assert r1.status == 200 and r1.body == b"first", r1
        gw.decided(path="/k1")  # both its lines in: nothing left to write
        lock = FileLock(gw.log_path)
        try:
            s.sendall(("%s %s/k2 HTTP/1.1\r\nHost: %s:%d\r\n%s\r\n%s"
                       % (method, url, EVIL, up.port, fields, body)).encode())
            poll(lambda: threads_in(gw.proc.pid, "write", "writev", path=gw.log_path),
                 timeout=10, interval=0.01, what="the log's write waiting for the file")
            while_held()
        finally:
            lock.release()
        return read_response(s, method)
    finally:
        s.close()


STUCK = (503, b"unhealthy: decisions log: a write has not returned for 5 s or more "
              b"(a hung or frozen file system?)\n")


def test_the_loop_serves_while_a_log_write_waits(gateway, net, tmp_path):
    log = str(tmp_path / "log.jsonl")
    admin = free_tcp_port()
    gw = gateway(net.policy([api_rule(net)]), args=["--log", log, "--admin", str(admin)])
    pid = gw.proc.pid
    assert request(gw, "GET", net.url("/before")).status == 200
    assert paths_in(log) == ["/before"]  # in the file once answered: no waiting
    lock, held, stuck = hold_log(gw, admin, net, log, 2)
    try:
        assert pid not in stuck, "the event loop's thread waits in write()"
        # the loop goes on: clients accepted, requests decided (denied and
        # allowed alike), the admin answering...
        denied = decided(gw, admin, other_url(net, "/denied"), 3)
        during = decided(gw, admin, net.url("/during"), 4)
        # (healthy until the write has waited 5 s: see the next test)
        assert healthz(admin) in ((200, b"ok\n"), STUCK)
        # ...while no decision takes effect before its line is in the file:
        # no answer, nothing upstream
        assert (held.status, denied.status, during.status) == (None, None, None)
        assert held.waiting() and denied.waiting() and during.waiting()
        assert [r.path for r in net.api.requests if r.path in ("/held", "/during")] == []
        assert paths_in(log) == ["/before"]
    finally:
        lock.release()
    assert (held.result(), denied.result(), during.result()) == (200, 403, 200)
    want = ["/before", "/held", "/denied", "/during"]
    assert paths_in(log) == want
    gw.stop()
    got = lines_of(log)
    assert [e.get("path") for e in got if e["event"] == "agent_egress"] == want
    # each request's end line, once, after its decision line
    for ev in (e for e in got if e["event"] == "agent_egress"):
        ends = [i for i, e in enumerate(got) if e["event"] == "agent_egress_end" and
                e["id"] == ev["id"]]
        assert len(ends) == 1 and ends[0] > got.index(ev), got
    assert len(got) == 8, got


def test_a_log_write_that_does_not_return_makes_healthz_unhealthy(gateway, net, tmp_path):
    # A write that waits in the kernel (a hung NFS server, a frozen file
    # system) holds every decision (write-ahead: each waits for its line,
    # and is given up after idle_timeout), and the alerts with it when they
    # share the file. /healthz said "ok" all along, since no write had
    # failed: a supervisor or load balancer that asks it kept sending
    # traffic to a gateway that answered none. Once a write has waited
    # LOG_JSONL_STUCK_MS (5 s), /healthz and sluice_log_writable say so;
    # when it returns they are healthy again.
    log = str(tmp_path / "log.jsonl")
    admin = free_tcp_port()
    gw = gateway(net.policy([api_rule(net)]), args=["--log", log, "--admin", str(admin)])
    lock, held, _ = hold_log(gw, admin, net, log, 1)
    try:
        poll(lambda: healthz(admin) == STUCK, timeout=30, interval=0.2,
             what="/healthz to say the log's write does not return (it says %r)" %
                  (healthz(admin),))
        assert 'sluice_log_writable{log="decisions"} 0' in \
            admin_get(admin, "/metrics").decode().splitlines()
        assert held.status is None  # still held for its line
    finally:
        lock.release()
    assert held.result() == 200
    poll(lambda: healthz(admin) == (200, b"ok\n"), timeout=10, what="/healthz ok again")
    assert paths_in(log) == ["/held"]
    gw.stop()


def test_a_stop_while_a_log_write_waits_says_what_it_could_not_write(gateway, net, tmp_path):
    # SIGTERM while the writer waits in the kernel: the stop is not held
    # beyond its grace and the log's flush time; it exits 0 and names the
    # lines it could not write. The held requests are never answered: their
    # lines never reached the file.
    log = str(tmp_path / "log.jsonl")
    admin = free_tcp_port()
    gw = gateway(net.policy([api_rule(net)]),
                 args=["--log", log, "--grace", "1", "--admin", str(admin)])
    lock, held, _ = hold_log(gw, admin, net, log, 1)
    during = []
    assert stop_while_held(
        gw, lock, lambda: during.append(decided(gw, admin, net.url("/during"), 2))) == 0, \
        gw.stderr()
    err = gw.stderr()
    assert "sluice: log %s: a write is still waiting for the file system" % log in err, err
    assert "sluice: log %s: " % log in err and " line(s) (" in err, err
    assert held.status is None and during[0].status is None
    assert [r.path for r in net.api.requests if r.path in ("/held", "/during")] == []
    # whatever the killed write did, the file holds whole lines only
    assert set(paths_in(log)) <= {"/held", "/during"}


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("after", ["forge", "close"])
def test_a_kept_connection_that_spoke_while_its_request_waited_is_not_used(gateway, net, method,
                                                                          after):
    # The agent's second request is for the origin of its first, whose
    # connection was kept: checked quiet, it is taken up for the request,
    # which then waits for its log line (held here). Meanwhile the hostile
    # origin sends a complete response on that connection, or closes it.
    # Those bytes, or that end, are no answer to a request the origin never
    # got: once the line is in, the request goes on a fresh connection to
    # the same address (nothing of it was sent: safe for any method, its
    # body still with the client's). (The forged response was relayed as
    # the answer, and a POST behind a close got a 502.)
    seen = []  # per connection: the request lines it got
    bodies = []
    forge, sent = threading.Event(), threading.Event()

    def script(conn, stop, received):
        n = len(seen)
        seen.append([received.split(b"\r\n", 1)[0]])
        if n == 0:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
            while not forge.wait(0.05):
                if stop.is_set():
                    return
            if after == "close":
                conn.close()
                sent.set()
                return
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nFORGED")
            sent.set()
            more = conn.recv(4096)  # the gateway's close, or a request sent on it
            if more:
                seen[n].append(more.split(b"\r\n", 1)[0])
            return
        body = received.partition(b"\r\n\r\n")[2]
        while method == "POST" and len(body) < 4:
            d = conn.recv(4096)
            if not d:
                break
            body += d
        bodies.append(body)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")

    with ScriptedUpstream(script) as up:
        rules = [api_rule(net), {"host": EVIL, "ports": [up.port], "tier": 0}]
        gw = gateway(net.policy(rules, static_extra={EVIL: up.IP}))

        def forged():
            forge.set()
            poll(sent.is_set, timeout=10, what="the origin's forged answer or close")

        post = method == "POST"
        r2 = second_request_held(gw, up, method, "Content-Length: 4\r\n" if post else "",
                                 "body" if post else "", forged)
        assert r2.status == 200 and r2.body == b"second", (r2, r2.body)
        assert up.accepted == 2 and len(seen) == 2, seen
        assert len(seen[0]) == 1 and b" /k1 " in seen[0][0], seen  # never /k2
        assert b"%s /k2 " % method.encode() in seen[1][0], seen
        assert bodies == [b"body" if method == "POST" else b""], bodies
        ev, end = gw.decided(path="/k2")
        assert ev["ip"] == up.IP and end["status"] == 200, (ev, end)
        assert len(gw.events(path="/k2")) == 1


@pytest.mark.parametrize("ends", ["while_waiting", "on_the_request", "never"])
def test_a_request_sent_again_after_a_reload_no_longer_allows_its_address_is_refused(gateway, net,
                                                                                     ends):
    # The agent's second GET is for the origin of its first: the kept
    # connection, checked, is taken up, and the request waits for its log
    # line (held here) while a reload takes loopback out of allow_ranges
    # (the rule kept). Then the kept connection ends while the request
    # waits, or would end as the request reaches it, or would answer it.
    # Neither a fresh connection nor the kept one may take the request to
    # an address the policy in force refuses: it is denied as
    # private_address, a second agent_egress line after its allow, nothing
    # of it goes out and no connection is made. (The fresh connection went
    # to the address checked under the old policy: 200; the kept one, quiet
    # once the line was in, took the request, and answered it: 200.)
    seen = []  # per connection: the request lines it got
    close, closed = threading.Event(), threading.Event()

    def script(conn, stop, received):
        seen.append([received.split(b"\r\n", 1)[0]])
        if len(seen) > 1:  # a fresh connection
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
        if ends != "while_waiting":
            more = conn.recv(4096)  # the second request: closed on it, or answered
            if more:
                seen[0].append(more.split(b"\r\n", 1)[0])
                if ends == "never":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
            return
        while not close.wait(0.05):
            if stop.is_set():
                return
        conn.close()
        closed.set()

    with ScriptedUpstream(script) as up:
        rules = [api_rule(net), {"host": EVIL, "ports": [up.port], "tier": 0}]
        admin = free_tcp_port()
        gw = gateway(net.policy(rules, static_extra={EVIL: up.IP}),
                     args=["--admin", "127.0.0.1:%d" % admin])

        def reload_then_end():
            reload_to(gw, net.policy(rules, static_extra={EVIL: up.IP}, allow_ranges=()), 1)
            if ends == "while_waiting":
                close.set()
                poll(closed.is_set, timeout=10, what="the origin's close of the kept connection")

        r2 = second_request_held(gw, up, "GET", "", "", reload_then_end)
        assert r2.status == 403 and r2.headers.get("sluice-reason") == "private_address", \
            (r2, r2.body)
        assert up.accepted == 1, seen  # no fresh connection
        assert seen[0] == [b"GET /k1 HTTP/1.1"], seen  # nor the request on the kept one
        evs = gw.wait_events("agent_egress", count=2, path="/k2")
        assert [(e["decision"], e["ip"]) for e in evs] == [("allow", up.IP), ("deny", up.IP)], evs
        assert evs[1]["reason"] == "private_address", evs
        end = gw.wait_events("agent_egress_end", id=evs[0]["id"])
        assert len(end) == 1 and end[0]["status"] == 403, end
        # the denial is the policy's act on a request counted already
        assert requests_total(admin) == {
            '{agent="default",tier="0",decision="allow",reason="none"}': 2}


def test_a_request_waiting_on_its_kept_connection_through_a_reload_still_allowing_it_uses_it(
        gateway, net):
    # As above, the reload leaving the address guard's ranges as they were
    # (the same policy): the kept connection, still allowed, takes the
    # request and answers it; nothing is closed or made afresh
    seen = []

    def script(conn, stop, received):
        seen.append([received.split(b"\r\n", 1)[0]])
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
        more = conn.recv(4096)
        if more:
            seen[-1].append(more.split(b"\r\n", 1)[0])
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")

    with ScriptedUpstream(script) as up:
        rules = [api_rule(net), {"host": EVIL, "ports": [up.port], "tier": 0}]
        gw = gateway(net.policy(rules, static_extra={EVIL: up.IP}))
        r2 = second_request_held(
            gw, up, "GET", "", "",
            lambda: reload_to(gw, net.policy(rules, static_extra={EVIL: up.IP}), 1))
        assert r2.status == 200 and r2.body == b"second", (r2, r2.body)
        assert seen == [[b"GET /k1 HTTP/1.1", b"GET /k2 HTTP/1.1"]] and up.accepted == 1, seen
        assert [e["decision"] for e in gw.events("agent_egress", path="/k2")] == ["allow"]


def test_a_request_whose_connection_a_reload_no_longer_allows_while_it_waits_is_refused(gateway,
                                                                                       net):
    # The agent's GET is connected to its origin, then waits for its log
    # line (held here) while a reload takes loopback out of allow_ranges
    # (the rule kept). Released, it would go on that connection to an
    # address the policy in force refuses: it is denied as private_address,
    # a second agent_egress line after its allow, and nothing of it goes
    # out. (It was sent: 200.)
    seen = []

    def script(conn, stop, received):
        seen.append(received.split(b"\r\n", 1)[0])
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    with ScriptedUpstream(script) as up:
        rules = [api_rule(net), {"host": EVIL, "ports": [up.port], "tier": 0}]
        admin = free_tcp_port()
        gw = gateway(net.policy(rules, static_extra={EVIL: up.IP}),
                     args=["--admin", "127.0.0.1:%d" % admin])
        s = open_conn(gw)
        try:
            lock = FileLock(gw.log_path)
            try:
                s.sendall(("GET http://%s:%d/f HTTP/1.1\r\nHost: %s:%d\r\n\r\n"
                           % (EVIL, up.port, EVIL, up.port)).encode())
                poll(lambda: threads_in(gw.proc.pid, "write", "writev", path=gw.log_path),
                     timeout=10, interval=0.01, what="the log's write waiting for the file")
                poll(lambda: up.accepted == 1, timeout=10, what="the upstream connection")
                reload_to(gw, net.policy(rules, static_extra={EVIL: up.IP}, allow_ranges=()), 1)
            finally:
                lock.release()
            r = read_response(s)
        finally:
            s.close()
        assert r.status == 403 and r.headers.get("sluice-reason") == "private_address", \
            (r, r.body)
        evs = gw.wait_events("agent_egress", count=2, path="/f")
        assert [(e["decision"], e["ip"]) for e in evs] == [("allow", up.IP), ("deny", up.IP)], evs
        assert evs[1]["reason"] == "private_address", evs
        end = gw.wait_events("agent_egress_end", id=evs[0]["id"])
        assert len(end) == 1 and end[0]["status"] == 403 and end[0]["bytes_up"] == 0, end
        assert seen == [] and up.accepted == 1, seen
        assert requests_total(admin) == {
            '{agent="default",tier="0",decision="allow",reason="none"}': 1}


def test_an_origin_that_sends_while_its_request_waits_is_not_read_into_memory(gateway, net):
    # While the agent's second request waits for its log line (held here),
    # the origin of the kept connection it was given sends without end. The
    # gateway takes one read's worth and stops reading until the request
    # goes: what the origin gets into its socket is bounded by the kernel's
    # buffers, not by the gateway's memory. (It read everything: all 64 MiB
    # the origin offered were taken while the line was held.) Released, the
    # request goes on a fresh connection, the kept one having spoken.
    offer = 64 << 20
    took = []
    flood, sent = threading.Event(), threading.Event()

    def script(conn, stop, received):
        if took:  # the fresh connection of the second request
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
            return
        took.append(0)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
        while not flood.wait(0.05):
            if stop.is_set():
                return
        conn.settimeout(1.0)  # no room for 1 s: the gateway has stopped reading
        chunk = b"x" * (1 << 20)
        try:
            while took[0] < offer:
                took[0] += conn.send(chunk)
        except OSError:
            pass
        sent.set()

    with ScriptedUpstream(script) as up:
        rules = [api_rule(net), {"host": EVIL, "ports": [up.port], "tier": 0}]
        gw = gateway(net.policy(rules, static_extra={EVIL: up.IP}))

        def flooded():
            flood.set()
            poll(sent.is_set, timeout=60, what="the origin's sending stopped")

        r2 = second_request_held(gw, up, "GET", "", "", flooded)
        assert took[0] < offer // 2, "the gateway took %d bytes while the line was held" % took[0]
        assert r2.status == 200 and r2.body == b"second", (r2, r2.body)
        assert up.accepted == 2


def test_a_tunnel_a_reload_denies_is_cut_once_its_deny_line_is_in_the_file(gateway, net):
    # Write-ahead holds for a tunnel decided again: its reset (the deny's
    # effect, all the agent sees of it) comes only once its second
    # agent_egress, the deny, is in the file. Meanwhile it moves nothing.
    with EchoServer(API_IP) as echo, EchoServer(API_IP) as echo2:
        kept_rule = echo_rule(echo2.port, host="echo2.example.test")
        gw = gateway(echo_policy(net, [echo_rule(echo.port), kept_rule]))
        t, tid = open_echo_tunnel(gw, echo.port)
        try:
            lock = FileLock(gw.log_path)
            try:
                reload_to(gw, echo_policy(net, [kept_rule]), 1)  # the tunnel decided again
                # what the agent has now of the tunnel's end finds its line
                cut = select.select([t.sock], [], [], 0)[0] != []
                assert not cut or gw.events(id=tid, decision="deny"), \
                    "the tunnel was cut before its deny line was in the file"
            finally:
                lock.release()
            assert_closed(t.sock)  # (its timeout of 10 s a hang guard)
            deny = gw.events(id=tid, decision="deny")
            assert len(deny) == 1 and deny[0]["reason"] == "not_in_policy", gw.events(id=tid)
        finally:
            t.close()
        end = gw.wait_events("agent_egress_end", id=tid)
        assert len(end) == 1 and end[0]["status"] == 200, end


def listening(gw):
    # A connect that lands in the queue of a listener being closed is reset,
    # not refused: both say the listener is gone (CI saw the reset once).
    try:
        socket.create_connection((gw.host, gw.port), timeout=5).close()
        return True
    except (ConnectionRefusedError, ConnectionResetError):
        return False


def test_a_refusal_held_for_its_line_on_a_kept_connection_is_answered_at_a_stop(gateway, net):
    # A kept connection whose refusal waits for its log line looks between
    # requests (its exchange is over). SIGTERM closed such connections at
    # once, and the refusal, decided and logged, never reached the agent.
    # It is sent once its line is in the file (within --grace), then the
    # connection closes.
    admin = free_tcp_port()
    gw = gateway(net.policy([api_rule(net)]), args=["--grace", "60", "--admin", str(admin)])
    s = open_conn(gw)
    try:
        assert request(gw, "GET", net.url("/before"), sock=s).status == 200
        gw.decided(path="/before")  # both its lines in: nothing left to write
        lock = FileLock(gw.log_path)
        try:
            s.sendall(build_request("GET", other_url(net, "/refused")))
            poll(lambda: decided_count(admin) >= 2, timeout=10, what="the refusal decided")
            poll(lambda: threads_in(gw.proc.pid, "write", "writev", path=gw.log_path),
                 timeout=10, interval=0.01, what="the log's write waiting for the file")
            gw.proc.send_signal(signal.SIGTERM)
            poll(lambda: not listening(gw), timeout=10, what="the stop begun")
        finally:
            lock.release()
        r = read_response(s)  # (its timeout a hang guard)
        assert r.status == 403, r
        assert s.recv(64) == b""  # then the connection closes
    finally:
        s.close()
    assert gw.wait_exit(30) == 0, gw.stderr()
    assert paths_in(gw.log_path) == ["/before", "/refused"]


def closed_unanswered(sock):
    """True when the gateway closed <sock> (an end or a reset) having sent
    nothing on it; its timeout a hang guard."""
    try:
        return sock.recv(64) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("kind", ["connect", "plain"])
def test_a_decision_that_waits_for_its_line_longer_than_idle_timeout_is_given_up(gateway, net,
                                                                                 kind):
    # An allowed request, or a tunnel's first bytes, waiting for its line
    # in a file that does not take it: a wait like any other, limited by
    # idle_timeout; then its connection is closed, nothing having gone
    # upstream. Without the limit a CONNECT (its sides not read meanwhile)
    # was held for as long as the file was, its client's leaving unseen.
    with EchoServer(API_IP) as echo:
        gw = gateway(echo_policy(net, [echo_rule(echo.port), api_rule(net)],
                                 limits={"idle_timeout": "1s"}))
        lock = FileLock(gw.log_path)
        try:
            if kind == "connect":
                s = open_conn(gw, timeout=30)
                s.sendall(b"CONNECT echo.example.test:%d HTTP/1.1\r\n"
                          b"Host: echo.example.test:%d\r\n\r\n" % (echo.port, echo.port))
                head = b""
                while b"\r\n\r\n" not in head:
                    head += s.recv(1)
                assert head.startswith(b"HTTP/1.1 200"), head
                s.sendall(PING)  # its first bytes: they wait for the line
            else:
                s = open_conn(gw, timeout=30)
                s.sendall(build_request("GET", net.url("/waits")))
            try:
                assert closed_unanswered(s)
            finally:
                s.close()
        finally:
            lock.release()
        ev, end = gw.decided(method="CONNECT" if kind == "connect" else "GET")
        status = 200 if kind == "connect" else None  # (the 200 went out before the wait)
        assert ev["decision"] == "allow" and end["bytes_up"] == 0, (ev, end)
        assert end["status"] == status, end
        assert [r.path for r in net.api.requests if r.path == "/waits"] == []


# serial: a cgroup of the machine's
@pytest.mark.serial
def test_a_log_file_without_its_writer_thread_is_refused_at_start(gateway, net, tmp_path):
    # With no thread to be had for the log's writer (a pids cgroup at its
    # limit, RLIMIT_NPROC), the event loop wrote the file itself: a write the
    # file system held (its inode lock, taken here) stopped the whole
    # gateway, /healthz timing out and SIGTERM unheard until the write
    # returned, and a deleted file was never told. serve now refuses to
    # start (exit 2), its file named.
    cg = _pids_cgroup("log")
    pre = ["sh", "-c", 'echo $$ > %s/cgroup.procs && exec "$@"' % cg, "sh"]
    # LeakSanitizer needs a task of its own at exit, which the limit refuses
    asan = os.environ.get("ASAN_OPTIONS")
    env = {"ASAN_OPTIONS": (asan + ":" if asan else "") + "detect_leaks=0"}
    log = str(tmp_path / "log.jsonl")
    gw = None
    try:
        _cgroup_write(cg, "pids.max", 1)  # the gateway's first task, none more
        gw = gateway(net.policy([api_rule(net)]), args=["--log", log], prefix=pre, env=env,
                     wait=False)
        poll(lambda: gw.proc.poll() is not None or "sluice: serving " in gw.stderr(),
             timeout=30, interval=0.02, what="the gateway's exit (or its start)")
        assert "sluice: serving " not in gw.stderr(), gw.stderr()[-2000:]
        rc = gw.wait_exit(30)
    finally:
        if gw is not None and gw.proc.poll() is None:  # (it served: the old way)
            gw.proc.kill()
            gw.proc.wait(30)
        os.rmdir(cg)
    err = gw.stderr()
    assert rc == 2, (rc, err[-2000:])
    assert ("sluice serve: %s: cannot open log (its writer thread cannot be started: written "
            "on the event loop, a file system that does not answer would stop the gateway): "
            "Resource temporarily unavailable\n" % log) in err, err[-2000:]


def test_the_longest_line_a_request_makes_is_written_whole(gateway, net):
    # How long can a decision's line be? Its longest string is the path,
    # within the request head (limits.header_bytes, 1 MiB at most), of
    # bytes 0x21-0x7e of which only " and \ grow escaped, to two: about
    # 2 MiB, far below the 16 MiB past which the writer cuts a line (the
    # "cut" field; before, it dropped it). Such a line is written whole.
    gw = gateway(net.policy([api_rule(net)], limits={"header_bytes": "1MiB"}))
    url = other_url(net, "/")
    path = "/" + '"\\' * (((1 << 20) - len(url) - 200) // 2)
    head = build_request("GET", other_url(net, path))
    assert (1 << 20) - 200 < len(head) <= 1 << 20
    s = open_conn(gw)
    try:
        s.sendall(head)
        assert read_response(s).status == 403
    finally:
        s.close()
    ev, _ = gw.decided(path=path, timeout=30)
    assert ev["decision"] == "deny" and "cut" not in ev, sorted(ev)
    with open(gw.log_path, "rb") as f:
        longest = max(len(x) for x in f.read().split(b"\n"))
    assert longest > 2 * ((1 << 20) - 300), longest


AGAIN = (503, b"unhealthy: decisions log: a write has not gone through for 5 s or more: its "
              b"file system answers EAGAIN (it would block)\n")


# serial: mounts a FUSE file system
@pytest.mark.serial
def test_a_log_file_whose_writes_would_block_holds_decisions_and_makes_healthz_unhealthy(
        gateway, net, tmp_path):
    # A write to a regular file on a FUSE (or network) file system may fail
    # with EAGAIN. The writer took it for a pipe whose reader is behind:
    # the write-ahead gate opened, so decisions took effect (the answer
    # sent, the request sent upstream) before their lines were in the
    # file, and /healthz said "ok" for as long as every write would block.
    # It is now a write that has not gone through, retried as a short
    # write is: decisions wait for their lines, and after 5 s /healthz and
    # sluice_log_writable say so, until the file takes the lines.
    from fuse_file import FuseFile
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    admin = free_tcp_port()
    with FuseFile(str(mnt), b"") as fs:
        gw = gateway(net.policy([api_rule(net)]), args=["--log", fs.path, "--admin", str(admin)])
        assert request(gw, "GET", net.url("/before")).status == 200
        fs.set_writes("eagain")
        held = decided(gw, admin, net.url("/held"), 2)
        poll(lambda: healthz(admin) == AGAIN, timeout=30, interval=0.2,
             what="/healthz to say the log's writes would block (it says %r; /held %r)" %
                  (healthz(admin), held.status))
        assert 'sluice_log_writable{log="decisions"} 0' in \
            admin_get(admin, "/metrics").decode().splitlines()
        # the decision waits for its line: no answer, nothing upstream
        assert held.status is None and held.error is None
        assert [r.path for r in net.api.requests if r.path == "/held"] == []
        fs.set_writes("data")
        assert held.result() == 200
        poll(lambda: healthz(admin) == (200, b"ok\n"), timeout=10, what="/healthz ok again")
        gw.stop()
        got = [json.loads(x) for x in fs.content().split(b"\n") if x.strip()]
    assert [e.get("path") for e in got if e["event"] == "agent_egress"] == ["/before", "/held"]


def _tcp_entry_gone(local_port, remote_port):
    """True when /proc/net/tcp lists no socket from <local_port> to
    <remote_port> on loopback (a reset one is unhashed: no longer listed)."""
    want = ":%04X" % local_port, ":%04X" % remote_port
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            local, remote = line.split()[1:3]
            if local.endswith(want[0]) and remote.endswith(want[1]):
                return False
    return True


def test_a_client_reset_while_its_tunnel_waits_for_its_line_gets_nothing_sent(gateway, net):
    # A ClientHello passed and the server answered: the tunnel opens once its
    # agent_egress line is in the file, neither side read meanwhile. A client
    # that resets in that wait gets no tunnel, and what it sent behind its
    # hello goes nowhere, as after a reset in the peek window or in a wait
    # for the bandwidth bucket: the upstream is reset. It used to be sent
    # upstream once the line was in, the tunnel then meeting the reset.
    hello = hello_record(_SEER)
    with _EndSeer(want=len(hello), reply=_ALERT) as srv:
        gw = gateway(net.policy([{"host": _SEER, "ports": [srv.port], "tier": 0}],
                                static_extra={_SEER: "127.0.0.7"}))
        s = open_conn(gw)
        s.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: x\r\n\r\n" % (_SEER.encode(), srv.port))
        assert read_head(s)[0] == 200
        lock = FileLock(gw.log_path)
        try:
            s.sendall(hello + b"behind the hello")
            assert srv.took.wait(10), "the ClientHello never went up"
            srv.go.set()  # its answer ends the check: the line is published
            poll(lambda: threads_in(gw.proc.pid, "write", "writev", path=gw.log_path),
                 timeout=10, interval=0.01, what="the line's write waiting for the file")
            port = s.getsockname()[1]
            _reset(s)
            poll(lambda: _tcp_entry_gone(gw.port, port), timeout=10,
                 what="the reset to reach the gateway's socket")
        finally:
            lock.release()
        assert srv.done.wait(15), "the gateway kept the upstream connection"
    assert srv.got == hello, srv.got
    assert srv.end == "reset", srv.end
    ev = gw.wait_events("agent_egress", host=_SEER)[0]
    assert ev["decision"] == "allow", ev
    end = gw.wait_events("agent_egress_end", id=ev["id"])[0]
    assert end["bytes_up"] == len(hello) and end["status"] == 200, end
