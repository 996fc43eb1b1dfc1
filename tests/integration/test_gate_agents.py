"""Agents: who is asking (sources, tokens), agents: restrictions, report mode."""

import array
import base64
import os
import secrets
import socket
import time

import pytest

from gate_client import (ANY, api_rule, assert_denied, build_request, connect, exchange,
                         exchange_until_close, open_conn, read_response, recv_until_close,
                         request)

TOKEN = "s3cret-token-for-tests"
ENV = {"SLUICE_TEST_TOKEN": TOKEN, "SLUICE_TEST_TOKEN2": "another-secret"}


def basic(password, user="agent"):
    return "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()


def test_agent_not_allowed_by_rule(gateway, net):
    agents = [{"id": "ci-bot", "sources": ["127.0.0.1/32"]},
              {"id": "deploy-bot", "sources": ["10.9.9.0/24"]}]
    rules = [api_rule(net, agents=["deploy-bot"]),
             {"host": "other.example.test", "ports": [net.other.port], "tier": 0}]
    gw = gateway(net.policy(rules, agents=agents))
    r = request(gw, "GET", net.url("/agents"))
    assert_denied(gw, net, r, "agent_not_allowed", host="api.example.test", port=net.api.port,
                  agent="ci-bot", tier=ANY, rule=ANY, owner=ANY, ip=None)
    # the same agent may use a rule open to every agent
    r = request(gw, "GET", net.url("/open", host="other.example.test", port=net.other.port))
    assert r.status == 200
    ev, _ = gw.decided(path="/open")
    assert ev["agent"] == "ci-bot" and ev["decision"] == "allow"


def test_agent_not_allowed_unknown_source(gateway, net):
    agents = [{"id": "far-bot", "sources": ["10.9.9.0/24"]}]
    gw = gateway(net.policy([api_rule(net)], agents=agents))
    r = request(gw, "GET", net.url("/who"))
    assert_denied(gw, net, r, "agent_not_allowed", host="api.example.test", port=net.api.port,
                  agent=ANY, tier=ANY, rule=ANY, owner=ANY, ip=None)


def _token_policy(net):
    agents = [{"id": "ci-bot", "sources": ["127.0.0.0/8"], "token": "env:SLUICE_TEST_TOKEN"}]
    return net.policy([api_rule(net)], agents=agents)


def test_auth_required_without_credentials(gateway, net):
    gw = gateway(_token_policy(net), env=ENV)
    r = request(gw, "GET", net.url("/noauth"))
    assert_denied(gw, net, r, "auth_required", host="api.example.test", port=net.api.port,
                  agent=ANY, tier=ANY, rule=ANY, owner=ANY, ip=None)


def test_auth_required_wrong_secret(gateway, net):
    gw = gateway(_token_policy(net), env=ENV)
    for cred in (basic("wrong"), "Bearer wrong", "Bearer " + TOKEN + "x", basic(TOKEN[:-1]),
                 "Digest " + TOKEN, "Basic !!!notbase64"):
        r = request(gw, "GET", net.url("/badauth"), headers={"Proxy-Authorization": cred})
        assert r.status == 407, (cred, r)
        assert r.header("Sluice-Reason") == "auth_required"
    assert net.api.requests == []
    evs = gw.wait_events(count=6, reason="auth_required")
    assert all(e["decision"] == "deny" for e in evs)



def _held_runs(pagemap, lo, hi):
    """The runs [start, end) of pages of lo..hi that hold something: in
    memory or swapped out (pagemap(5) bits 63 and 62). A page never
    touched has nothing to hold, and reading it is what took the time:
    ASan maps hundreds of megabytes and touches a few."""
    size = os.sysconf("SC_PAGE_SIZE")
    entries = array.array("Q")
    pagemap.seek(lo // size * 8)
    entries.frombytes(pagemap.read((hi - lo) // size * 8))
    runs, start = [], None
    for i, e in enumerate(entries):
        if e >> 62:
            if start is None:
                start = lo + i * size
        elif start is not None:
            runs.append((start, lo + i * size))
            start = None
    if start is not None:
        runs.append((start, hi))
    return runs


def memory_holding(pid, needles):
    """Those of <needles> that a writable mapping of process <pid> (heap,
    stack, data, anonymous) holds; the test's own child, so readable. One
    pass over the pages that hold anything, read once for all needles."""
    held = set()
    with open("/proc/%d/maps" % pid) as maps, open("/proc/%d/mem" % pid, "rb", 0) as mem, \
            open("/proc/%d/pagemap" % pid, "rb", 0) as pagemap:
        for line in maps:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if "w" not in fields[1] or hi - lo > (1 << 30):
                continue  # code, constants, and ASan's reserved shadow
            for start, end in _held_runs(pagemap, lo, hi):
                try:
                    mem.seek(start)
                    data = mem.read(end - start)
                except OSError:
                    continue  # a guard page
                held.update(n for n in needles if n in data)
    return [n for n in needles if n in held]


def assert_memory_lacks(gw, needles):
    """Asserts that none of <needles> is in the gateway's writable memory
    (skips where that memory cannot be read)."""
    try:
        held = memory_holding(gw.proc.pid, list(needles))
    except PermissionError:
        pytest.skip("the gateway's memory cannot be read here")
    assert held == [], held


def test_refused_secrets_are_wiped(gateway, net):
    # A secret the gateway refused (a head that does not parse, a wrong
    # token, a Basic value without a colon, which is decoded before it is
    # refused) is not left in its memory after the answer: neither the
    # value as it came in the head, which libevent would free as it was,
    # nor the decoded bytes. Each secret is random: nothing else holds it.
    gw = gateway(_token_policy(net), env=ENV)
    url = net.url("/wiped").encode()
    host = b"Host: api.example.test:%d\r\n" % net.api.port
    bad_head, wrong, no_colon = (secrets.token_hex(16).encode() for _ in range(3))
    no_colon_b64 = base64.b64encode(no_colon)
    heads = [
        (b"GET %s HTTP/1.1\r\n%sProxy-Authorization: Bearer %s\r\nno colon here\r\n\r\n"
         % (url, host, bad_head), b"400"),
        (b"GET %s HTTP/1.1\r\n%sProxy-Authorization: Bearer %s\r\nConnection: close\r\n\r\n"
         % (url, host, wrong), b"407"),
        (b"GET %s HTTP/1.1\r\n%sProxy-Authorization: Basic %s\r\nConnection: close\r\n\r\n"
         % (url, host, no_colon_b64), b"407"),
    ]
    for head, status in heads:
        raw = exchange_until_close(gw, head)
        assert raw.startswith(b"HTTP/1.1 " + status), raw
    assert_memory_lacks(gw, (bad_head, wrong, no_colon, no_colon_b64))
    assert net.api.requests == []


def _heads_with_secrets(net, path):
    """Two random secrets, and for each the start of a head that carries
    it in a Bearer Proxy-Authorization (request line, Host, that field)."""
    sent = [secrets.token_hex(16).encode() for _ in range(2)]
    return sent, [b"GET %s HTTP/1.1\r\nHost: api.example.test:%d\r\n"
                  b"Proxy-Authorization: Bearer %s\r\n" % (net.url(path).encode(), net.api.port, s)
                  for s in sent]


def test_secret_of_a_head_read_in_pieces_is_wiped(gateway, net):
    # A head that arrives in more than one read lies in more than one of
    # libevent's buffer chains; making it contiguous (evbuffer_pullup)
    # copies it into a new chain and frees the old ones as they are. The
    # secret must not stay in those: each piece here is read on its own
    # (the pause between them), the first one holding the secret, the
    # second larger than what the first one's chain has left.
    gw = gateway(_token_policy(net), env=ENV)
    sent, starts = _heads_with_secrets(net, "/pieces")
    for first in starts:
        first += b"X-Fill-1: %s\r\n" % (b"a" * (1000 - len(first) - 14))
        second = b"X-Fill-2: %s\r\nConnection: close\r\n\r\n" % (b"b" * 5000)
        s = open_conn(gw)
        try:
            s.sendall(first)
            gw.wait_taken(s)  # read apart from the rest, in its own chain
            s.sendall(second)
            raw = recv_until_close(s)
        finally:
            s.close()
        assert raw.startswith(b"HTTP/1.1 407"), raw[:200]
    assert_memory_lacks(gw, sent)
    assert net.api.requests == []


def test_secret_of_a_head_never_finished_is_wiped(gateway, net):
    # A client that sends its secret and leaves before its head is whole:
    # the head is never parsed, nor its Proxy-Authorization read, and the
    # connection goes with its input unread. The secret must not stay in
    # the memory freed with it.
    gw = gateway(_token_policy(net), env=ENV)
    sent, starts = _heads_with_secrets(net, "/unfinished")
    for start in starts:
        s = open_conn(gw)
        try:
            s.sendall(start + b"X-Unfinished: 1")
            s.shutdown(socket.SHUT_WR)
            assert recv_until_close(s) == b""
        finally:
            s.close()
    # The gateway is done with both: a complete exchange after them.
    r = request(gw, "GET", net.url("/after"), headers={"Proxy-Authorization": "Bearer " + TOKEN})
    assert r.status == 200
    assert_memory_lacks(gw, sent)


def test_auth_basic_and_bearer_allowed_not_forwarded(gateway, net):
    gw = gateway(_token_policy(net), env=ENV)
    r1 = request(gw, "GET", net.url("/basic"), headers={"Proxy-Authorization": basic(TOKEN)})
    r2 = request(gw, "GET", net.url("/bearer"),
                 headers={"Proxy-Authorization": "Bearer " + TOKEN})
    assert r1.status == 200 and r2.status == 200
    reqs = net.api.requests
    assert [q.path for q in reqs] == ["/basic", "/bearer"]
    for q in reqs:
        assert not q.has_header("Proxy-Authorization"), q.headers
        assert TOKEN not in repr(q.headers)
    for path in ("/basic", "/bearer"):
        ev, end = gw.decided(path=path)
        assert ev["agent"] == "ci-bot" and ev["decision"] == "allow" and end["status"] == 200
    # the secret never reaches the log either
    with open(gw.log_path) as f:
        assert TOKEN not in f.read()


def test_auth_required_body_says_what_was_wrong(gateway, net):
    # A missing secret, one that names no agent, a Basic value whose
    # password is empty (the token sent as the user name: curl -U TOKEN)
    # and a value that cannot be read each get their own advice; the
    # token is never echoed.
    from gate_client import curl
    gw = gateway(_token_policy(net), env=ENV)
    cases = ((None, "has no Proxy-Authorization"),
             ("Bearer wrong-" + TOKEN, "matches no agent whose sources hold this client"),
             (basic("wrong-" + TOKEN), "matches no agent whose sources hold this client"),
             (basic("", user=TOKEN), "an empty password; put the token as the password"),
             ("Basic " + base64.b64encode(TOKEN.encode()).decode(), "cannot be read"),
             ("Token " + TOKEN, "cannot be read"))
    for cred, says in cases:
        r = request(gw, "GET", net.url("/why"),
                    headers=None if cred is None else {"Proxy-Authorization": cred})
        assert r.status == 407 and r.header("Sluice-Reason") == "auth_required", (cred, r)
        assert r.header("Proxy-Authenticate") == 'Basic realm="sluice"'
        assert r.text.startswith("sluice: api.example.test:%d refused: " % net.api.port), r.text
        assert says in r.text, (cred, r.text)
        assert TOKEN not in r.text and r.text.count("\n") == 1, r.text
    # curl's -U TOKEN sends TOKEN as the user and an empty password
    p = curl("-x", gw.url, "-U", TOKEN, "-i", net.url("/curl-user-only"))
    assert b" 407 " in p.stdout and b"an empty password" in p.stdout, p.stdout
    assert net.api.requests == []


def test_curl_proxy_user(gateway, net):
    from gate_client import curl
    gw = gateway(_token_policy(net), env=ENV)
    p = curl("-x", gw.url, "--proxy-user", "bot:" + TOKEN, net.url("/curl-auth"))
    assert p.returncode == 0, p.stderr
    assert not net.api.requests[0].has_header("Proxy-Authorization")


def test_secret_of_no_agent_is_not_passed_to_tokenless_agent(gateway, net):
    agents = [{"id": "tok-bot", "sources": ["127.0.0.0/8"], "token": "env:SLUICE_TEST_TOKEN"},
              {"id": "open-bot", "sources": ["127.0.0.0/8"]}]
    gw = gateway(net.policy([api_rule(net)], agents=agents), env=ENV)
    r = request(gw, "GET", net.url("/x"), headers={"Proxy-Authorization": "Bearer nobody"})
    assert r.status == 407 and r.header("Sluice-Reason") == "auth_required"
    assert net.api.requests == []
    r = request(gw, "GET", net.url("/anon"))
    assert r.status == 200
    ev, _ = gw.decided(path="/anon")
    assert ev["agent"] == "open-bot"
    r = request(gw, "GET", net.url("/tok"), headers={"Proxy-Authorization": "Bearer " + TOKEN})
    assert r.status == 200
    ev, _ = gw.decided(path="/tok")
    assert ev["agent"] == "tok-bot"


def test_first_matching_agent_by_token(gateway, net):
    agents = [{"id": "a1", "sources": ["127.0.0.0/8"], "token": "env:SLUICE_TEST_TOKEN"},
              {"id": "a2", "sources": ["127.0.0.0/8"], "token": "env:SLUICE_TEST_TOKEN2"}]
    gw = gateway(net.policy([api_rule(net)], agents=agents), env=ENV)
    r = request(gw, "GET", net.url("/a2"),
                headers={"Proxy-Authorization": basic("another-secret")})
    assert r.status == 200
    assert gw.decided(path="/a2")[0]["agent"] == "a2"


def test_report_mode_lets_denied_through(gateway, net):
    agents = [{"id": "watcher", "sources": ["127.0.0.1/32"], "mode": "report"}]
    gw = gateway(net.policy([api_rule(net)], agents=agents))
    url = net.url("/reported", host="other.example.test", port=net.other.port)
    r = request(gw, "GET", url)
    assert r.status == 200 and r.json()["server"] == "other"
    assert [q.path for q in net.other.requests] == ["/reported"]
    ev, end = gw.decided(path="/reported")
    assert ev["decision"] == "report" and ev["reason"] == "not_in_policy"
    assert ev["agent"] == "watcher" and ev["tier"] is None and ev["rule"] is None
    assert ev["ip"] == "127.0.0.3"
    assert end["status"] == 200
    r = request(gw, "GET", net.url("/normal"))
    assert r.status == 200
    ev, _ = gw.decided(path="/normal")
    assert ev["decision"] == "allow" and ev["reason"] is None


def test_unix_source_agent(gateway, net):
    agents = [{"id": "boxed", "sources": ["unix"]},
              {"id": "local", "sources": ["127.0.0.1/32"]}]
    gw = gateway(net.policy([api_rule(net)], agents=agents), unix=True)
    assert request(gw, "GET", net.url("/tcp")).status == 200
    port = gw.port
    gw.port = None  # talk to the unix listener
    try:
        assert request(gw, "GET", net.url("/unix")).status == 200
    finally:
        gw.port = port
    assert gw.decided(path="/tcp")[0]["agent"] == "local"
    assert gw.decided(path="/unix")[0]["agent"] == "boxed"


def test_report_mode_private_address_enforced(gateway, net):
    # the address guard protects the gateway's network, not the policy: it
    # holds in report mode too (169.254.169.254 stays out of reach)
    agents = [{"id": "watcher", "sources": ["127.0.0.1/32"], "mode": "report"}]
    gw = gateway(net.policy([api_rule(net)], agents=agents, allow_ranges=()))
    r = request(gw, "GET", net.url("/priv-report"))
    assert r.status == 403, r
    assert net.api.requests == []
    ev, end = gw.decided(path="/priv-report")
    assert ev["decision"] == "deny" and ev["reason"] == "private_address"
    assert ev["ip"] == "127.0.0.2" and ev["agent"] == "watcher"
    assert end["bytes_up"] == 0


@pytest.mark.parametrize("case", ["expired", "get_only"])
def test_report_mode_cidr_rule_that_does_not_allow_keeps_the_guard(gateway, net, case):
    # a cidr: rule exempts the IP literals it allows from deny_ranges; one
    # that does not allow the request (an expired grant; a GET-only rule
    # under a CONNECT, needs_inspection) exempts nothing, even for an agent
    # in report mode, which would otherwise be let through to loopback
    agents = [{"id": "watcher", "sources": ["127.0.0.1/32"], "mode": "report"}]
    rule = {"cidr": "127.0.0.0/8", "ports": [net.api.port], "tier": 1}
    if case == "expired":
        rule["expires"] = "2020-01-01"
    else:
        rule["methods"] = ["GET"]
    gw = gateway(net.policy([rule], agents=agents, allow_ranges=()))
    target = "127.0.0.2:%d" % net.api.port
    if case == "expired":
        r = request(gw, "GET", "http://%s/expired-cidr" % target)
        status = r.status
        ev, end = gw.decided(path="/expired-cidr")
    else:
        t = connect(gw, target)
        status = t.status
        t.close()
        ev, end = gw.decided(method="CONNECT")
    assert status == 403
    assert (ev["decision"], ev["reason"], ev["ip"]) == ("deny", "private_address", "127.0.0.2"), ev
    assert net.api.requests == [] and end["bytes_up"] == 0


def test_malformed_request_blames_no_agent_a_token_could_name(gateway, net):
    # a head that cannot be parsed is not read for its Proxy-Authorization:
    # when a token could name an agent at this source, nobody is blamed (its
    # denials must not count against the token-less agent, nor be hidden
    # from the token holder's); with no token agent there, the token-less
    # agent is named as before
    agents = [{"id": "tok-bot", "sources": ["127.0.0.1/32"], "token": "env:SLUICE_TEST_TOKEN"},
              {"id": "open-bot", "sources": ["127.0.0.0/8"]}]
    gw = gateway(net.policy([api_rule(net)], agents=agents), env=ENV)
    bad = ("GET %s HTTP/1.1\r\nHost: a\r\nHost: b\r\nProxy-Authorization: Bearer %s\r\n\r\n"
           % (net.url("/dup-host"), TOKEN)).encode()
    r = exchange(gw, bad)
    assert r.status == 400 and r.header("Sluice-Reason") == "bad_request"
    ev, _ = gw.decided(reason="bad_request")
    assert ev["agent"] is None, ev
    agents = [{"id": "tok-bot", "sources": ["127.0.0.9/32"], "token": "env:SLUICE_TEST_TOKEN"},
              {"id": "open-bot", "sources": ["127.0.0.0/8"]}]
    gw = gateway(net.policy([api_rule(net)], agents=agents), env=ENV)
    r = exchange(gw, bad)
    assert r.status == 400
    ev, _ = gw.decided(reason="bad_request")
    assert ev["agent"] == "open-bot", ev


def test_report_mode_gate_denial_logged(gateway, net):
    # the gate's other checks (host_mismatch) are reported and let through
    agents = [{"id": "watcher", "sources": ["127.0.0.1/32"], "mode": "report"}]
    gw = gateway(net.policy([api_rule(net)], agents=agents))
    r = request(gw, "GET", net.url("/mismatch-report"), host="other.example.test")
    assert r.status == 200, r
    ev, _ = gw.decided(path="/mismatch-report")
    assert ev["decision"] == "report" and ev["reason"] == "host_mismatch"
    assert ev["tier"] == 0


def test_enforce_agent_beside_report_agent(gateway, net):
    agents = [{"id": "watcher", "sources": ["127.0.0.9/32"], "mode": "report"},
              {"id": "strict", "sources": ["127.0.0.1/32"]}]
    gw = gateway(net.policy([api_rule(net)], agents=agents))
    r = request(gw, "GET", net.url("/strict", host="other.example.test", port=net.other.port))
    assert_denied(gw, net, r, "not_in_policy", host="other.example.test", port=net.other.port,
                  agent="strict", ip=None)


HANG_GUARD_S = 30  # a hang guard, not a claim on time
STALL_S = 1.5  # a gap in a test's traffic that idle_timeout (2 s) may have ended
TRIES = 3


def _send_and_read(sock, url, cred):
    """Sends a request with <cred> on <sock>; returns its status, or None
    when the gateway closed the connection (before or after answering)."""
    try:
        sock.sendall(build_request("GET", url, {"Proxy-Authorization": cred}))
        r = read_response(sock)
    except OSError:
        return None
    if r is None:
        return None
    return (r.status, r.header("Connection") == "close")


def _refused_beside_served(gw, url, t0):
    """One try of the test below: returns the refused connection's statuses
    and when it was closed (from <t0>), or None when the agent's connection
    was closed after a gap between two of its requests of STALL_S or more:
    a stall (a gateway or a test stopped or starved for that long) that
    may have spent its idle_timeout, so the try proves nothing."""
    refused, served = open_conn(gw), open_conn(gw)
    statuses = []
    last_sent = [time.monotonic()]  # the agent's last request, or its accept

    def served_ok():
        sent = time.monotonic()
        gap = sent - last_sent[0]
        last_sent[0] = sent
        got = _send_and_read(served, url, "Bearer " + TOKEN)
        if got is None and gap >= STALL_S:
            return False
        assert got == (200, False), (got, gap)
        return True

    try:
        while True:
            assert time.monotonic() - t0 < HANG_GUARD_S, ("never closed", statuses)
            got = _send_and_read(refused, url, "Bearer nope")
            if got is not None:
                statuses.append(got[0])
            if got is None or got[1]:
                break
            if not served_ok():
                return None
            time.sleep(0.3)
        closed = time.monotonic() - t0
        # the agent's connection, as old and as busy, is still served
        for _ in range(3):
            if not served_ok():
                return None
            time.sleep(0.3)
        return statuses, closed
    finally:
        refused.close()
        served.close()


def test_refused_before_an_agent_is_known_cannot_hold_a_connection(gateway, net):
    # A connection whose requests are all refused before an agent is known
    # (here a wrong token: 407) counts against no agent, so
    # max_connections_per_agent cannot bound it: it keeps the first head's
    # deadline, min(10 s, idle_timeout) from its accept, however many
    # refusals it collects. Before, each refusal gave it idle_timeout anew,
    # and such connections could fill --max-conns for ever. An agent's own
    # connection keeps idle_timeout between its requests.
    # Two connections opened together send a request every 0.3 s, well
    # within idle_timeout (2 s): the refused one is closed (it would never
    # be if each refusal renewed its deadline; the guard is a hang guard)
    # while the agent's, with the same traffic, is still served. A stall
    # of idle_timeout between two of the agent's requests (a gateway
    # stopped for 2 s on a busy machine) may close it rightly: that try
    # proves nothing and is made again, up to TRIES times.
    policy = _token_policy(net)
    policy["limits"] = {"idle_timeout": "2s"}
    gw = gateway(policy, env=ENV)
    url = net.url("/held")
    for _ in range(TRIES):
        t0 = time.monotonic()  # before the accept, from which the deadline counts
        got = _refused_beside_served(gw, url, t0)
        if got is not None:
            break
    assert got is not None, "the agent's connection was stalled in each of %d tries" % TRIES
    statuses, closed = got
    assert statuses and set(statuses) == {407}, statuses
    assert closed > 1.5, closed  # not before its deadline


def test_each_request_of_a_kept_connection_is_identified_on_its_own(gateway, net):
    # nothing is remembered from an earlier request on the connection: one
    # without a secret after one with it is a client that presents nothing
    agents = [{"id": "a1", "sources": ["127.0.0.0/8"], "token": "env:SLUICE_TEST_TOKEN"},
              {"id": "a2", "sources": ["127.0.0.0/8"], "token": "env:SLUICE_TEST_TOKEN2"},
              {"id": "anon", "sources": ["127.0.0.0/8"]}]
    gw = gateway(net.policy([api_rule(net)], agents=agents), env=ENV)
    sock = open_conn(gw)
    try:
        for path, cred, status in (("/k1", "Bearer " + TOKEN, 200), ("/k2", None, 200),
                                   ("/k3", basic("another-secret"), 200),
                                   ("/k4", "Bearer wrong", 407), ("/k5", "bearer " + TOKEN, 200)):
            headers = {"Proxy-Authorization": cred} if cred else {}
            r = request(gw, "GET", net.url(path), headers=headers, sock=sock)
            assert r.status == status, (path, r)
    finally:
        sock.close()
    agents_seen = [gw.decided(path=p)[0]["agent"] for p in ("/k1", "/k2", "/k3", "/k4", "/k5")]
    assert agents_seen == ["a1", "anon", "a2", None, "a1"]
    assert [q.path for q in net.api.requests] == ["/k1", "/k2", "/k3", "/k5"]
