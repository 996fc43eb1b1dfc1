"""Every message about the state store names its path as the start-up
messages do: each control character and backslash written \\ooo
(text_shown()), so that a --state directory whose name holds a line end
or a terminal escape writes no line of its own on standard error, nor
rubs out the lines before it. Before, only the messages of the open did;
those of the run (a commit that fails, writing again, alerts kept for
webhooks no longer configured) printed the raw path. Loopback only."""

import os
import sqlite3

from gate_client import api_rule, other_rule, other_url, poll, request

NAME = "st\x1b[2J\nsluice: forged\\x"


def shown(path):
    """<path> as standard error names it."""
    return path.replace("\\", "\\134").replace("\x1b", "\\033").replace("\n", "\\012")


def assert_nothing_raw(err):
    assert "\x1b" not in err and "\nsluice: forged" not in err, err


def test_the_runs_messages_name_the_store_escaped(gateway, net, tmp_path):
    statedir = tmp_path / NAME
    statedir.mkdir(mode=0o750)
    db = os.path.join(os.path.realpath(str(statedir)), "sluice.db")
    said = "sluice: state " + shown(db) + ": "

    def serve():
        return gateway(net.policy([api_rule(net), other_rule(net)], alerts={"first_contact": True}),
                       args=["--state", str(statedir)])

    # a commit that fails (sluice.db moved away while serving), then
    # succeeds once it is back
    gw = serve()
    assert request(gw, "GET", net.url("/before")).status == 200
    os.rename(db, db + ".moved")
    assert request(gw, "GET", other_url(net, "/new"), timeout=10).status == 200
    poll(lambda: "cannot write: the database file was moved" in gw.stderr(), timeout=10,
         what="the failed commit told on standard error")
    os.rename(db + ".moved", db)
    poll(lambda: "writing again" in gw.stderr(), timeout=40,
         what="the commit once the file is back")
    gw.stop()
    err = gw.stderr()
    assert said + "cannot write: the database file was moved" in err, err
    assert said + "writing again\n" in err, err
    assert_nothing_raw(err)

    # alerts kept for a webhook no longer configured, told at the start
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO alert_queue(sink, body, attempts, created_ms)"
                 " VALUES('https://gone.example.test/hook', '{}', 0, 0)")
    conn.commit()
    conn.close()
    gw = serve()
    poll(lambda: "no longer configured" in gw.stderr(), timeout=10,
         what="the kept alerts told")
    gw.stop()
    err = gw.stderr()
    assert said + "1 queued alert(s) for webhooks no longer configured are kept" in err, err
    assert_nothing_raw(err)
