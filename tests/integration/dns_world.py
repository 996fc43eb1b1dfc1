"""A scripted name server and witness upstreams, run inside the empty network
namespace of a gateway under test (see the gateway fixture's netns_helper).

    dns_world.py --script FILE --events FILE --dns ADDR... --http ADDR... --sink ADDR...

The name server answers UDP questions on each --dns ADDR from FILE (JSON),
which it reads again for every question, so a test can change the answers
between requests (an atomic replace). FILE maps lower-case names to:

    {"A": ["127.0.0.2"], "AAAA": ["::1"],  records (default none)
     "ttl": 60,                             their TTL (default 60)
     "cname": "other.test",                 a CNAME first; the address
                                            records are then the target's
                                            (a list: a chain of CNAMEs, each
                                            to the next, the last one's
                                            target owning the records)
     "cname_ttl": 1,                        the CNAME's TTL (default "ttl")
     "rcode": 2,                            the response code (default 0)
     "tc": true,                            the truncation flag (or a list
                                            of the types it is set for: ["A"])
     "delay": 0.5,                          seconds before answering (or
                                            per type: {"AAAA": 0.5})
     "drop": ["AAAA"],                      the types never answered (a
                                            resolver or middlebox that
                                            drops AAAA questions)
     "mode": "..."}                         a misbehaviour, below

A key "*.zone.test" answers every name one label below zone.test without a key of
its own. Names not in FILE get NXDOMAIN. Modes: "drop" (no answer), "wrong_id" (the
answer carries another query id), "wrong_name" (the answer's question names
another name), "other_addr" (the answer comes from another address,
127.0.0.9, to a question asked over IPv4), "garbage" (random
bytes behind a copied id), "ptr_loop" (an answer whose name is a compression
pointer to itself), "overcount" (ANCOUNT 50 with one record), "short_rdata"
(an A record with 3 bytes of address), "long_rdata" (an A record whose
RDLENGTH runs past the packet), "wrong_class" (the address records of class
CHAOS, not IN), "other_type" (the records of the other address type: the
AAAA ones to an A question, the A ones to an AAAA question).

Each --sink ADDR is a UDP socket that takes questions and never answers
(a name server that went silent); it records them as {"event": "unanswered",
"name", "qtype"}. For an A question whose name has "forge": ["ADDR", ...] in
FILE, a forger on the sink's address but another port sends the asker an
answer with those addresses under every query ID, then records {"event":
"forged", "name", "sent"}.

Each --http ADDR accepts TCP connections and answers any request with 200
and a body naming the address that was reached, then closes. Every question
and every accepted connection is appended to the events file as one JSON
line ({"event": "query", "name", "qtype"} / {"event": "conn", "addr"});
{"event": "ready"} comes once every socket is bound.

A key "@addresses": ["ADDR", ...] in FILE adds those addresses to the namespace's lo
(once each, within 0.2 s of the file's change), then records {"event": "address",
"addr"}: an address, and the route to it, that comes after the gateway started. A
--sink may be bound to such an address before it comes (IP_FREEBIND).

Each --address ADDR (an IPv4 or IPv6 address) is added to the namespace's lo before
anything is bound: an address of the host that is neither loopback nor private,
as a host's public address is (it never leaves the empty namespace).

--ports "LO HI" sets the namespace's net.ipv4.ip_local_port_range (as its
root) before anything connects. Each --hog ADDR is a listener that takes
connections and never answers, to which the helper itself connects until
connect() says no local port is left (EADDRNOTAVAIL; at most 64 tries),
and holds them all: anything else connecting to ADDR then finds the
ephemeral ports taken, while other addresses still get one. It records
{"event": "hogged", "addr", "ports": n, "errno": name}.

The process exits when its parent does (it is started by the shell that
then becomes the gateway) or after --lifetime seconds. Standard library
only; loopback addresses of its own namespace only.
"""

import argparse
import errno
import json
import os
import random
import select
import socket
import struct
import subprocess
import sys
import threading
import time


def split_addr(text):
    """'127.0.0.1:53' or '[::1]:53' -> (family, host, port)."""
    host, _, port = text.rpartition(":")
    if host.startswith("["):
        return socket.AF_INET6, host[1:-1], int(port)
    return socket.AF_INET, host, int(port)


class Events:
    def __init__(self, path):
        self.lock = threading.Lock()
        self.f = open(path, "a", buffering=1)

    def put(self, **kw):
        with self.lock:
            self.f.write(json.dumps(kw) + "\n")


def read_question(data):
    """(qid, flags, question bytes, labels as sent, qtype) or None."""
    if len(data) < 12:
        return None
    qid, flags, qd = struct.unpack("!HHH", data[:6])
    if qd != 1:
        return None
    i, labels = 12, []
    while i < len(data) and len(labels) < 128:
        n = data[i]
        i += 1
        if n == 0:
            break
        if n > 63:
            return None
        labels.append(data[i:i + n])
        i += n
    if i + 4 > len(data):
        return None
    qtype, _ = struct.unpack("!HH", data[i:i + 4])
    return qid, flags, data[12:i + 4], labels, qtype


def encode_name(name):
    out = b""
    for label in name.strip(".").split("."):
        out += bytes([len(label)]) + label.encode("ascii")
    return out + b"\0"


def rr(owner, rtype, ttl, rdata, rclass=1):
    return owner + struct.pack("!HHIH", rtype, rclass, ttl, len(rdata)) + rdata


def address_records(entry, qtype, owner, rclass=1):
    ttl = int(entry.get("ttl", 60))
    out = []
    if qtype == 1:
        out = [rr(owner, 1, ttl, socket.inet_pton(socket.AF_INET, a), rclass)
               for a in entry.get("A", [])]
    elif qtype == 28:
        out = [rr(owner, 28, ttl, socket.inet_pton(socket.AF_INET6, a), rclass)
               for a in entry.get("AAAA", [])]
    return out


def answer(script, data, peer_events):
    """The reply to <data> (bytes or None) and the mode that shapes its sending."""
    q = read_question(data)
    if q is None:
        return None, None
    qid, flags, question, labels, qtype = q
    name = b".".join(labels).decode("ascii", "replace").lower()
    peer_events.put(event="query", name=name, qtype=qtype)
    entry = script.get(name)
    if entry is None and "." in name:
        entry = script.get("*." + name.split(".", 1)[1])
    rd = flags & 0x0100
    if entry is None:
        return struct.pack("!HHHHHH", qid, 0x8000 | rd | 0x0080 | 3, 1, 0, 0, 0) + question, None
    mode = entry.get("mode", "")
    if {1: "A", 28: "AAAA"}.get(qtype) in entry.get("drop", []):
        return None, "drop"
    delay = entry.get("delay")
    if isinstance(delay, dict):
        delay = delay.get({1: "A", 28: "AAAA"}.get(qtype))
    if delay:
        time.sleep(min(float(delay), 10.0))
    if mode == "drop":
        return None, mode
    if mode == "garbage":
        return struct.pack("!H", qid) + bytes(random.getrandbits(8) for _ in range(60)), mode
    if mode == "wrong_name":
        question = encode_name("x" + name) + question[-4:]
    records = []
    owner = b"\xc0\x0c"  # a pointer to the question's name
    chain = entry.get("cname") or []
    for alias in [chain] if isinstance(chain, str) else chain:
        target = encode_name(alias)
        records.append(rr(owner, 5, int(entry.get("cname_ttl", entry.get("ttl", 60))), target))
        owner = target
    if mode == "wrong_class":
        records += address_records(entry, qtype, owner, rclass=3)
    elif mode == "other_type":
        records += address_records(entry, {1: 28, 28: 1}.get(qtype, 0), owner)
    else:
        records += address_records(entry, qtype, owner)
    if mode == "ptr_loop":
        # the pointer sits at the answer's start and points at itself
        at = 12 + len(question)
        records = [struct.pack("!H", 0xC000 | at) + struct.pack("!HHIH", 1, 1, 60, 4) +
                   bytes([127, 0, 0, 2])]
    if mode == "short_rdata":
        records = [rr(owner, 1, 60, b"\x7f\x00\x00")]
    if mode == "long_rdata":
        records = [owner + struct.pack("!HHIH", 1, 1, 60, 400) + b"\x7f\x00\x00\x02"]
    ancount = 50 if mode == "overcount" else len(records)
    rflags = 0x8000 | rd | 0x0080 | (int(entry.get("rcode", 0)) & 0xF)
    tc = entry.get("tc")
    if tc is True or (isinstance(tc, list) and {1: "A", 28: "AAAA"}.get(qtype) in tc):
        rflags |= 0x0200
    rid = (qid + 1) & 0xFFFF if mode == "wrong_id" else qid
    head = struct.pack("!HHHHHH", rid, rflags, 1, ancount, 0, 0)
    return head + question + b"".join(records), mode


def reply_one(sock, data, peer, script_path, events, other):
    try:
        with open(script_path) as f:
            script = json.load(f)
    except (OSError, ValueError):
        script = {}
    try:
        reply, mode = answer(script, data, events)
    except (ValueError, KeyError, struct.error, OSError) as e:
        events.put(event="error", what=repr(e))
        return
    if reply is None:
        return
    out = other if mode == "other_addr" and sock.family == socket.AF_INET else sock
    try:
        out.sendto(reply, peer)
    except OSError:
        pass


def serve_dns(sock, script_path, events, other):
    """Answers each question in a thread of its own, so that a delayed
    answer holds up no other."""
    while True:
        try:
            data, peer = sock.recvfrom(4096)
        except OSError:
            return
        threading.Thread(target=reply_one, args=(sock, data, peer, script_path, events, other),
                         daemon=True).start()


def forge(sock, peer, name, addrs, events):
    """Sends <peer> an answer to an A question for <name> with <addrs>, once
    for every query ID, from the sink's own address but another port: what
    any process on the host can send (it reads <peer>'s port in
    /proc/net/udp, and the ID is a guess), where port 53 is not its to
    bind. The question is written in lower case (the asker randomised its
    case, which the forger does not see)."""
    fam = sock.family
    out = socket.socket(fam, socket.SOCK_DGRAM)
    out.bind((sock.getsockname()[0], 0))
    body = (struct.pack("!HHHHH", 0x8180, 1, len(addrs), 0, 0) +
            encode_name(name) + struct.pack("!HH", 1, 1) +
            b"".join(rr(b"\xc0\x0c", 1, 60, socket.inet_pton(socket.AF_INET, a)) for a in addrs))
    sent = 0
    for qid in range(65536):
        try:
            out.sendto(struct.pack("!H", qid) + body, peer)
            sent += 1
        except OSError:
            pass
        if qid % 256 == 255:
            time.sleep(0.001)  # let the asker drain its socket: none dropped for want of room
    out.close()
    events.put(event="forged", name=name, sent=sent)


def serve_sink(sock, script_path, events):
    while True:
        try:
            data, peer = sock.recvfrom(4096)
        except OSError:
            return
        q = read_question(data)
        if q is not None:
            name = b".".join(q[3]).decode("ascii", "replace").lower()
            events.put(event="unanswered", name=name, qtype=q[4])
            try:
                with open(script_path) as f:
                    entry = json.load(f).get(name, {})
            except (OSError, ValueError):
                entry = {}
            if q[4] == 1 and entry.get("forge"):
                threading.Thread(target=forge, args=(sock, peer, name, entry["forge"], events),
                                 daemon=True).start()


def serve_http(lsock, addr, events):
    while True:
        try:
            conn, _ = lsock.accept()
        except OSError:
            return
        events.put(event="conn", addr=addr)
        conn.settimeout(5)
        try:
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            body = ("reached %s\n" % addr).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                         % len(body) + body)
        except OSError:
            pass
        finally:
            conn.close()


def hog(text, events):
    """Takes every local port toward <text> (see --hog). Returns the sockets."""
    fam, host, port = split_addr(text)
    lsock = socket.socket(fam, socket.SOCK_STREAM)
    lsock.bind((host, port))
    lsock.listen(128)
    held, err = [lsock], None
    for _ in range(64):
        c = socket.socket(fam, socket.SOCK_STREAM)
        try:
            c.connect((host, port))
        except OSError as e:
            c.close()
            err = errno.errorcode.get(e.errno, str(e.errno))
            break
        held.append(c)
    events.put(event="hogged", addr=text, ports=len(held) - 1, errno=err)
    return held


IP_FREEBIND, IPV6_FREEBIND = 15, 78  # <linux/in.h>, <linux/in6.h>
SO_RCVBUFFORCE = 33  # <asm-generic/socket.h>: past net.core.rmem_max, where permitted
# A burst of questions (150 stalled names asked at once: 300 datagrams) is
# read by one Python thread that starts a thread per question; on a loaded
# machine the default receive buffer (212992 bytes) overflowed: Udp
# RcvbufErrors 18-86 in 7 of 8 runs beside two busy loops, and when the
# allowed name's questions were among those dropped it "timed out" at the
# gateway (test_stalled_lookups_do_not_hold_up_other_names, 1 in 5).
RCVBUF_BYTES = 8 << 20


def add_later(script_path, added, events):
    """Adds to lo the script's "@addresses" not in <added> yet."""
    try:
        with open(script_path) as f:
            later = json.load(f).get("@addresses", [])
    except (OSError, ValueError):
        return
    for text in later:
        if text in added:
            continue
        v6 = ":" in text
        subprocess.run(["ip", "addr", "add", text + ("/128" if v6 else "/32"), "dev", "lo"]
                       + (["nodad"] if v6 else []), check=True)
        added.add(text)
        events.put(event="address", addr=text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--dns", action="append", default=[])
    ap.add_argument("--http", action="append", default=[])
    ap.add_argument("--sink", action="append", default=[])
    ap.add_argument("--ports")
    ap.add_argument("--address", action="append", default=[])
    ap.add_argument("--hog", action="append", default=[])
    ap.add_argument("--lifetime", type=float, default=300.0)
    a = ap.parse_args()
    events = Events(a.events)
    parent = os.getppid()
    for text in a.address:
        v6 = ":" in text
        subprocess.run(["ip", "addr", "add", text + ("/128" if v6 else "/32"), "dev", "lo"]
                       + (["nodad"] if v6 else []), check=True)
    socks = []
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other.bind(("127.0.0.9", 0))
    for text in a.dns:
        fam, host, port = split_addr(text)
        s = socket.socket(fam, socket.SOCK_DGRAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
        except OSError:  # refused in the test's user namespace: what rmem_max allows (8 MiB seen)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        s.bind((host, port))
        socks.append(s)
        threading.Thread(target=serve_dns, args=(s, a.script, events, other), daemon=True).start()
    for text in a.sink:
        fam, host, port = split_addr(text)
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_IP if fam == socket.AF_INET else socket.SOL_IPV6,
                     IP_FREEBIND if fam == socket.AF_INET else IPV6_FREEBIND, 1)
        s.bind((host, port))
        socks.append(s)
        threading.Thread(target=serve_sink, args=(s, a.script, events), daemon=True).start()
    for text in a.http:
        fam, host, port = split_addr(text)
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(64)
        socks.append(s)
        threading.Thread(target=serve_http, args=(s, text, events), daemon=True).start()
    if a.ports:
        with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
            f.write(a.ports)
    for text in a.hog:
        socks += hog(text, events)
    events.put(event="ready")
    deadline = time.monotonic() + a.lifetime
    added = set()
    while os.getppid() == parent and time.monotonic() < deadline:
        select.select([], [], [], 0.2)
        add_later(a.script, added, events)
    return 0


if __name__ == "__main__":
    sys.exit(main())
