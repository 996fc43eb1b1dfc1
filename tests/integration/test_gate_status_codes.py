"""An origin's status code: RFC 9112's status-line holds three digits, and
the gateway passes on any from 100 to 999 as it came, 600 to 999 too (RFC
9110 15 calls them invalid and tells the client to treat one as a 5xx:
the client's call, a proxy is not asked to refuse them), logging it as it is;
any other (a leading 0, two digits, four) frames nothing it can trust: a
502 upstream_unreachable. Loopback only."""

import pytest

from gate_servers import ScriptedUpstream
from test_gate_upstream import evil_gateway, get_until_close


def answer(line):
    def script(conn, stop, _):
        conn.sendall(line + b"\r\nContent-Length: 2\r\n\r\nok")
        stop.wait(2)
    return script


@pytest.mark.parametrize("code", [b"600", b"999"])
def test_a_three_digit_status_past_599_goes_on_as_it_came(gateway, net, code):
    with ScriptedUpstream(answer(b"HTTP/1.1 " + code + b" Odd")) as up:
        gw = evil_gateway(gateway, net, up)
        raw = get_until_close(gw, up, "/s", fields="Connection: close\r\n")
        _, end = gw.decided(path="/s")
    assert raw.startswith(b"HTTP/1.1 " + code + b" Odd\r\n") and raw.endswith(b"\r\n\r\nok"), raw
    assert end["status"] == int(code) and end["bytes_down"] == 2, end


@pytest.mark.parametrize("line", [b"HTTP/1.1 000 Zero", b"HTTP/1.1 099 Low", b"HTTP/1.1 20 OK",
                                  b"HTTP/1.1 2000 OK", b"HTTP/1.1 2x0 OK"],
                         ids=["000", "099", "two-digits", "four-digits", "not-digits"])
def test_a_status_that_is_not_three_digits_from_100_is_a_502(gateway, net, line):
    with ScriptedUpstream(answer(line)) as up:
        gw = evil_gateway(gateway, net, up)
        raw = get_until_close(gw, up, "/s", fields="Connection: close\r\n")
        _, end = gw.decided(path="/s")
    assert raw.startswith(b"HTTP/1.1 502 Bad Gateway\r\n"), raw[:300]
    assert b"Sluice-Reason: upstream_unreachable\r\n" in raw, raw[:300]
    assert b"the upstream sent an invalid response" in raw, raw
    assert not raw.endswith(b"ok"), raw
    assert end["status"] == 502 and end["bytes_down"] == 0, end
