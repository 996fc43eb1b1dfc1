"""README's table of bounds (Timeouts and limits) against the source: every
cap that keeps a hostile agent, upstream or DNS server from exhausting the
gateway's memory, descriptors or CPU has a row, and each row states the
value its macro has now. A cap changed in the source without the table,
or a row that names a bound the source does not have, fails here. No
binary is run."""

import os
import re

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# (row label, source file, macro, unit): the row whose first cell starts
# with the label must state the macro's value in that unit
BOUNDS = [
    ("Connections", "src/gate/gateway.h", "GATEWAY_DEFAULT_MAX_CONNS", "count"),
    ("Connections", "src/gate/listener.c", "LISTEN_BACKLOG", "count"),
    ("Failed accept()", "src/gate/listener.c", "ACCEPT_BACKOFF_MS", "ms"),
    ("Request head", "src/gate/http1.h", "HTTP_MAX_HEADERS", "count"),
    ("Request head", "src/gate/http1.h", "HTTP_HOST_MAX", "bytes"),
    ("Request head", "src/gate/http1.h", "HTTP_METHOD_MAX", "bytes"),
    ("Bodies in flight", "src/gate/conn.h", "FLOW_HIGH", "bytes"),
    ("Bodies in flight", "src/gate/backlog.h", "BACKLOG_PER_CONN", "bytes"),
    ("Bodies in flight", "src/gate/backlog.h", "BACKLOG_TIGHT", "bytes"),
    ("Bodies in flight", "src/gate/backlog.h", "BACKLOG_FLOOR", "bytes"),
    ("Tunnel first bytes", "src/gate/conn.h", "PEEK_MAX", "bytes"),
    ("Chunked framing", "src/gate/chunked.h", "CHUNKED_MAX_LINE", "bytes"),
    ("Chunked framing", "src/gate/chunked.h", "CHUNKED_MAX_TRAILERS", "bytes"),
    ("DNS", "src/gate/resolve.c", "CACHE_MAX", "count"),
    ("DNS", "src/gate/resolve.c", "CACHE_TTL_MAX_MS", "s"),
    ("DNS", "src/gate/resolve.h", "RESOLVE_MAX_INFLIGHT", "count"),
    ("DNS", "src/gate/resolve.h", "RESOLVE_MAX_ADDRS", "count"),
    ("Decision and alert logs", "src/watch/log_jsonl.h", "LOG_JSONL_PENDING_MAX", "bytes"),
    ("Webhook sinks", "src/watch/sinks.h", "SINK_WEBHOOK_QUEUE_MAX", "count"),
    ("Webhook sinks", "src/watch/sinks.h", "SINK_WEBHOOK_STORED_MAX", "count"),
    ("Webhook sinks", "src/watch/sinks.h", "SINK_WEBHOOK_MAX_HEAD", "bytes"),
    ("Webhook sinks", "src/watch/sinks.h", "SINK_WEBHOOK_MAX_BODY", "bytes"),
    ("Exec sinks", "src/watch/sinks.h", "SINK_EXEC_MAX_RUNNING", "count"),
    ("Exec sinks", "src/watch/sinks.h", "SINK_EXEC_MAX_WAITING", "count"),
    ("First-contact memory", "src/watch/detectors.h", "DETECT_CONTACTS_MAX", "count"),
    ("First-contact memory", "src/watch/contact_set.h", "CONTACT_SET_BYTES_MAX", "bytes"),
    ("Detector windows", "src/watch/detectors.h", "DETECT_AGENTS_MAX", "count"),
    ("Detector windows", "src/watch/window.h", "FOLD_MAX", "count"),
    ("Detector windows", "src/watch/window.h", "FOLD_SPILL_MAX", "count"),
    ("Detector windows", "src/watch/detectors.h", "DETECT_SOURCES_MAX", "count"),
    ("Metrics", "src/watch/metrics.h", "METRICS_AGENTS_MAX", "count"),
    ("Shaping", "src/shape/quota.h", "QUOTA_DEFAULT_MAX", "count"),
    ("State store", "src/state/store.h", "STORE_PENDING_MAX", "count"),
    ("State store", "src/state/store.h", "STORE_PENDING_BYTES", "bytes"),
    ("Admin server", "src/watch/admin.h", "ADMIN_CONNS_MAX", "count"),
    ("Admin server", "src/watch/admin.h", "ADMIN_HEAD_MAX", "bytes"),
    ("Policy", "src/policy/policy.h", "POLICY_MAX_BYTES", "bytes"),
    ("Policy", "src/policy/policy.h", "POLICY_MAX_RULES", "count"),
]


def text(*path):
    with open(os.path.join(REPO, *path), encoding="utf-8") as f:
        return f.read()


def defines(path):
    """{NAME: expression} of the object-like #defines of <path>."""
    out = {}
    for m in re.finditer(r"^#define ([A-Z0-9_]+)[ \t]+([^\n/]+)", text(path), re.M):
        out[m.group(1)] = m.group(2).strip()
    return out


def value(path, name, seen=()):
    """The integer macro <name> of <path>: an arithmetic expression of
    literals and other macros of the tree's headers."""
    expr = defines(path).get(name)
    if expr is None:
        for top, _, files in os.walk(os.path.join(REPO, "src")):
            for f in files:
                if f.endswith(".h"):
                    expr = defines(os.path.relpath(os.path.join(top, f), REPO)).get(name)
                    if expr is not None:
                        break
            if expr is not None:
                break
    assert expr is not None, (path, name)
    assert name not in seen, ("recursive", name)

    def macro(m):
        return str(value(path, m.group(0), seen + (name,)))
    expr = re.sub(r"\b([0-9]+)[uUlL]+\b", r"\1", expr)
    expr = re.sub(r"\b[A-Z][A-Z0-9_]+\b", macro, expr)
    assert re.fullmatch(r"[0-9 ()+*<>-]+", expr), (name, expr)
    return int(eval(expr))  # digits and operators only (checked above)


def shown(v, unit):
    """<v> as the table writes it."""
    if unit == "ms":
        return "%d ms" % v
    if unit == "s":
        assert v % 1000 == 0, v
        return "%d s" % (v // 1000)
    if unit == "bytes":
        for size, name in ((1 << 20, "MiB"), (1 << 10, "KiB")):
            if v >= size and v % size == 0:
                return "%d %s" % (v // size, name)
        return "%s bytes" % shown(v, "count")
    return "{:,}".format(v) if v >= 10000 else str(v)


def bounds_rows():
    """{first cell: whole row} of the bounds table in README's Timeouts
    and limits section."""
    readme = text("README.md")
    section = readme.split("\n#### Timeouts and limits\n", 1)[1].split("\n####", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| ---") and not line.startswith("| What"):
            rows[line.split("|")[1].strip()] = line
    assert len(rows) >= 10, sorted(rows)
    return rows


def test_every_bound_is_stated_with_its_value():
    rows = bounds_rows()
    missing = []
    for label, path, macro, unit in BOUNDS:
        want = shown(value(path, macro), unit)
        row = [r for k, r in rows.items() if k.startswith(label)]
        if not row:
            missing.append("%s: no row" % label)
        elif not re.search(r"(?<![0-9,.])%s(?![0-9]|,[0-9])" % re.escape(want), row[0]):
            missing.append("%s: %s (%s) not stated" % (label, want, macro))
    assert not missing, "\n".join(missing)


def test_every_row_is_checked():
    labels = {b[0] for b in BOUNDS} | {"Reloads", "Tunnel held bytes", "Head bytes"}
    rows = bounds_rows()
    unchecked = [k for k in rows if not any(k.startswith(label) for label in labels)]
    assert not unchecked, unchecked
