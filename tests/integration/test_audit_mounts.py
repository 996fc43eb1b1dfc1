"""`sluice audit mounts`: every writable mount of a mount namespace, each
justified in writing (crafted mountinfo files; the live box is tested in
test_box_run.py)."""

import json
import os
import subprocess
import threading

import pytest
from gate_client import poll

MOUNTINFO = (
    "22 1 254:1 / / ro,relatime shared:1 - ext4 /dev/vda1 rw\n"
    "23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
    "24 22 0:30 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw,size=10k\n"
    "25 22 254:1 /home/u/repo /work/repo rw,relatime - ext4 /dev/vda1 rw,errors=remount-ro\n"
    "26 22 254:2 / /srv/ro-super rw - ext4 /dev/vda2 ro\n"
    "27 22 0:31 / /mnt/with\\040space rw - tmpfs tmpfs rw\n"
    "28 22 0:24 / /dev/pts rw - devpts devpts rw\n"
    "29 28 0:26 / /dev/pts ro - devpts devpts rw\n"
)
WRITABLE = ["/proc", "/tmp", "/work/repo", "/mnt/with space"]


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_lists_writable_mounts(run_sluice, tmp_path):
    mi = write(tmp_path, "mountinfo", MOUNTINFO)
    r = run_sluice("audit", "mounts", "--mountinfo", mi)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    unjust = [ln.split()[1] for ln in lines if ln.startswith("UNJUSTIFIED")]
    assert unjust == ["/proc", "/tmp", "/work/repo", "/mnt/with"]  # printed as decoded text
    assert "/mnt/with space (tmpfs" in r.stdout
    assert "/srv/ro-super" not in r.stdout  # read-only super block
    assert "/dev/pts" not in r.stdout  # covered by a read-only mount on top
    assert lines[-1] == "result: 8 mounts, 4 writable, 4 unjustified"


def test_all_justified_exit_0(run_sluice, tmp_path):
    mi = write(tmp_path, "mountinfo", MOUNTINFO)
    just = write(tmp_path, "justify", "# writable paths of the CI image\n\n"
                 "/proc: the kernel's view, not files\n"
                 "/tmp: scratch\n"
                 "/work/repo/: the checkout\n"
                 "/mnt/with space: a volume\n"
                 "/var/cache: stale, the image no longer has it\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "justified    /work/repo (ext4 /dev/vda1): the checkout" in r.stdout
    assert "warning: %s:7: /var/cache is not a writable mount" % just in r.stdout
    assert r.stdout.splitlines()[-1] == "result: 8 mounts, 4 writable, 0 unjustified"


def test_partly_justified_exit_1_json(run_sluice, tmp_path):
    mi = write(tmp_path, "mountinfo", MOUNTINFO)
    just = write(tmp_path, "justify", "/tmp: scratch\n/nothing: unused\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just, "--format", "json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["ok"] is False
    assert doc["mounts"] == 8
    assert doc["unjustified"] == 3
    assert [m["mount_point"] for m in doc["writable"]] == WRITABLE
    tmp = [m for m in doc["writable"] if m["mount_point"] == "/tmp"][0]
    assert tmp["justified"] is True and tmp["reason"] == "scratch" and tmp["justify_line"] == 1
    assert tmp["fstype"] == "tmpfs" and tmp["mount_options"] == "rw,nosuid,nodev"
    repo = [m for m in doc["writable"] if m["mount_point"] == "/work/repo"][0]
    assert repo["justified"] is False and repo["reason"] is None
    assert repo["root"] == "/home/u/repo"
    assert doc["unused_justifications"] == [{"path": "/nothing", "line": 2}]


def test_json_keeps_names_that_are_not_utf8(run_sluice, tmp_path):
    # A mount point named in Latin-1 (the kernel writes its bytes as they
    # are) is still listed with its mount_point, the byte that is not UTF-8
    # as U+FFFD; so is a justification's reason. Before, json_string()
    # refused the name and the key vanished from the unjustified mount.
    mi = tmp_path / "mountinfo"
    mi.write_bytes(b"22 1 254:1 / / ro - ext4 /dev/vda1 rw\n"
                   b"23 22 0:30 / /srv/caf\xe9 rw - tmpfs tmp\xe9 rw\n"
                   b"24 22 0:31 / /srv/ok rw - tmpfs tmpfs rw\n")
    just = tmp_path / "justify"
    just.write_bytes(b"/srv/ok: caf\xe9 cache\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just, "--format", "json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert [m["mount_point"] for m in doc["writable"]] == ["/srv/caf\ufffd", "/srv/ok"]
    assert doc["writable"][0]["source"] == "tmp\ufffd"
    assert doc["writable"][0]["justified"] is False
    assert doc["writable"][1]["reason"] == "caf\ufffd cache"
    assert doc["unjustified"] == 1


def test_text_names_cannot_forge_lines(run_sluice, tmp_path):
    # A mount point holding a line end (\012 in mountinfo, which anyone can
    # make in a mount namespace of their own) or a terminal escape is shown
    # as mountinfo writes it: it cannot add a "justified" line, or a result
    # line, of its own to the report. The backslash is escaped too, so that
    # the text stays unambiguous.
    forged = "/tmp/x\\012justified\\040\\040\\040\\040/etc\\040(ext4\\040/dev/vda1):\\040ok"
    mi = tmp_path / "mountinfo"
    mi.write_bytes(b"22 1 254:1 / / ro - ext4 /dev/vda1 rw\n"
                   b"23 22 0:30 / " + forged.encode() + b" rw - tmpfs tmpfs rw\n"
                   b"24 22 0:31 / /srv/a\\134b\x1b[2Kc\xc2\x85d rw - tmpfs tmpfs rw\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3, lines
    assert lines[0] == ("UNJUSTIFIED  /tmp/x\\012justified    /etc (ext4 /dev/vda1): ok "
                        "(tmpfs tmpfs, rw)")
    assert lines[1] == "UNJUSTIFIED  /srv/a\\134b\\033[2Kc\\302\\205d (tmpfs tmpfs, rw)"
    assert lines[2] == "result: 3 mounts, 2 writable, 2 unjustified"


def test_raw_c1_bytes_are_escaped_too(sluice_bin, tmp_path):
    # A C1 control was escaped only as UTF-8 writes it (\302\205): a mount
    # point holding the raw byte 0x85 (NEL, a line end) or 0x9b (CSI), as a
    # name in Latin-1 holds them, reached the report as it is, and a
    # terminal that reads 8-bit controls (xterm outside a UTF-8 locale) took
    # them for a line end and an escape. A byte 0x80 to 0x9f that is no part
    # of a valid UTF-8 sequence is written \ooo; other bytes of Latin-1
    # (0xe9), and the continuation bytes of valid UTF-8 (U+0100 is c4 80,
    # the euro sign e2 82 ac), are left as they are.
    mi = tmp_path / "mountinfo"
    mi.write_bytes(b"22 1 254:1 / / ro - ext4 /dev/vda1 rw\n"
                   b"23 22 0:30 / /tmp/a\x85result:\\0400\x9b2Kb rw - tmpfs tmp\x9b rw\n"
                   b"24 22 0:31 / /srv/caf\xe9-\xc4\x80\xe2\x82\xac rw - tmpfs tmpfs rw\n")
    r = subprocess.run([sluice_bin, "audit", "mounts", "--mountinfo", str(mi)],
                       capture_output=True, timeout=20)
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == [
        b"UNJUSTIFIED  /tmp/a\\205result: 0\\2332Kb (tmpfs tmp\\233, rw)",
        b"UNJUSTIFIED  /srv/caf\xe9-\xc4\x80\xe2\x82\xac (tmpfs tmpfs, rw)",
        b"result: 3 mounts, 2 writable, 2 unjustified",
    ], r.stdout


def test_justify_file_name_cannot_forge_lines(run_sluice, tmp_path):
    # The justification file's name is printed in each stale entry's
    # warning: a name holding a line end wrote a result line of its own.
    mi = write(tmp_path, "mountinfo", MOUNTINFO)
    just = write(tmp_path, "j\nresult: 8 mounts, 0 writable, 0 unjustified\x1b[2K",
                 "/var/cache: stale\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    shown = str(tmp_path) + "/j\\012result: 8 mounts, 0 writable, 0 unjustified\\033[2K"
    assert "warning: %s:1: /var/cache is not a writable mount (stale justification?)" % shown \
        in lines, lines
    assert [ln for ln in lines if ln.startswith("result:")] == [
        "result: 8 mounts, 4 writable, 4 unjustified"]
    assert "\x1b" not in r.stdout


def test_raw_control_characters_the_kernel_writes_are_read(run_sluice, tmp_path):
    # The kernel escapes only space, tab, line end and backslash in a mount
    # point or source (and ",= \t\n\\" in option values such as overlay's
    # upperdir=): a carriage return or any other control character is
    # written as it is. What `unshare -rm` and a mount on /tmp/a<CR>b wrote
    # on this machine, with a fuse subtype and an overlay upperdir holding
    # them too: each such mount is listed (the carriage return shown as
    # \015), not the whole audit refused with "unexpected control character",
    # which any process could cause by naming a directory so in a mount
    # namespace of its own.
    mi = tmp_path / "mountinfo"
    mi.write_bytes(b"22 1 254:1 / / ro - ext4 /dev/vda1 rw\n"
                   b"66 22 0:40 / /tmp/a\rb rw,relatime - tmpfs x\ry rw\n"
                   b"67 22 0:41 / /tmp/c\x01d rw - fuse.s\rt src rw,user_id=0\n"
                   b"68 22 0:42 / /tmp/o rw - overlay overlay rw,upperdir=/u\rp\x01q\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi)
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == [
        "UNJUSTIFIED  /tmp/a\\015b (tmpfs x\\015y, rw,relatime)",
        "UNJUSTIFIED  /tmp/c\\001d (fuse.s\\015t src, rw)",
        "UNJUSTIFIED  /tmp/o (overlay overlay, rw)",
        "result: 4 mounts, 3 writable, 3 unjustified",
    ]
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--format", "json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert [m["mount_point"] for m in doc["writable"]] == ["/tmp/a\rb", "/tmp/c\x01d", "/tmp/o"]
    assert doc["writable"][1]["fstype"] == "fuse.s\rt"
    assert doc["writable"][2]["super_options"] == "rw,upperdir=/u\rp\x01q"


def test_every_mount_point_can_be_justified_as_the_report_shows_it(run_sluice, tmp_path):
    # The report shows a backslash or a control character of a mount point
    # as \ooo, but the justification file took its paths literally: a line
    # copied from the report ("/srv/a\\134b") matched nothing and was called
    # stale, and a mount point holding a carriage return or a line end (the
    # kernel writes the first raw), or a colon and a space, could not be
    # justified at all, so the audit could never pass. A PATH's \ooo escapes
    # are decoded, as mountinfo's are; another backslash is kept as it is.
    mi = tmp_path / "mountinfo"
    mi.write_bytes(b"22 1 254:1 / / ro - ext4 /dev/vda1 rw\n"
                   b"23 22 0:30 / /srv/a\\134b rw - tmpfs tmpfs rw\n"
                   b"24 22 0:31 / /tmp/a\rb rw - tmpfs tmpfs rw\n"
                   b"25 22 0:32 / /mnt/x:\\040y rw - tmpfs tmpfs rw\n"
                   b"26 22 0:33 / /mnt/nl\\012x rw - tmpfs tmpfs rw\n"
                   b"27 22 0:34 / /srv/c\\134d rw - tmpfs tmpfs rw\n"
                   b"28 22 0:35 / /mnt/end\\040 rw - tmpfs tmpfs rw\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi)
    assert r.returncode == 1, r.stderr
    shown = [ln[len("UNJUSTIFIED  "):].split(" (tmpfs")[0] for ln in r.stdout.splitlines()
             if ln.startswith("UNJUSTIFIED")]
    assert shown == ["/srv/a\\134b", "/tmp/a\\015b", "/mnt/x: y", "/mnt/nl\\012x",
                     "/srv/c\\134d", "/mnt/end "], shown
    just = tmp_path / "justify"
    just.write_text("/srv/a\\134b: copied from the report\n"
                    "/tmp/a\\015b: a carriage return\n"
                    "/mnt/x:\\040y: a colon and a space\n"
                    "/mnt/nl\\012x: a line end\n"
                    "/srv/c\\d: a backslash before no escape, as it is\n"
                    "/mnt/end\\040: a trailing space\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning" not in r.stdout, r.stdout
    assert r.stdout.splitlines()[-1] == "result: 7 mounts, 6 writable, 0 unjustified"
    assert "justified    /srv/a\\134b (tmpfs tmpfs): copied from the report" in r.stdout
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just, "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["unused_justifications"] == []
    # an escaped NUL names no path
    just.write_text("/srv/a\\000b: no\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just)
    assert r.returncode == 2
    assert r.stderr == "error: %s:1: escaped NUL byte\n" % just, r.stderr


def test_fstype_escapes_are_decoded(run_sluice, tmp_path):
    # The kernel escapes a file system type as it does a mount point
    # (show_type(): a fuse subtype's space, tab, line end and backslash as
    # \040 \011 \012 \134), but the parser kept the type as written: the
    # text report showed "fuse.my\134040fs" and the JSON "fuse.my\\040fs"
    # for the subtype "my fs".
    mi = tmp_path / "mountinfo"
    mi.write_bytes(b"22 1 254:1 / / ro - ext4 /dev/vda1 rw\n"
                   b"23 22 0:30 / /mnt/a rw - fuse.my\\040fs src rw\n"
                   b"24 22 0:31 / /mnt/b rw - fuse.x\\134y\\012z src rw\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi)
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines()[:2] == ["UNJUSTIFIED  /mnt/a (fuse.my fs src, rw)",
                                         "UNJUSTIFIED  /mnt/b (fuse.x\\134y\\012z src, rw)"]
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--format", "json")
    doc = json.loads(r.stdout)
    assert [m["fstype"] for m in doc["writable"]] == ["fuse.my fs", "fuse.x\\y\nz"]


def test_a_mount_under_one_on_a_folder_above_it_is_out_of_reach(run_sluice, tmp_path):
    # A tmpfs on /tmp/d/a/b, then one on /tmp/d/a: both in the /tmp mount,
    # as `unshare -m` wrote them on this machine. /tmp/d/a/b now leads into
    # the second tmpfs; the first, which no path reaches, was listed as an
    # UNJUSTIFIED writable mount (and /tmp/d/a/b justified for it was no
    # stale line), so the report named a writable path that is none.
    mi = write(tmp_path, "mountinfo",
               "22 1 254:1 / / ro - ext4 /dev/vda1 rw\n"
               "75 22 0:30 / /tmp rw - tmpfs tmpfs rw\n"
               "99 75 0:43 / /tmp/d/a/b rw,relatime - tmpfs t1 rw\n"
               "100 75 0:44 / /tmp/d/a rw,relatime - tmpfs t2 rw\n"
               "101 75 0:45 / /tmp/d/a.b rw,relatime - tmpfs t3 rw\n")
    just = write(tmp_path, "why", "/tmp: scratch\n/tmp/d/a: t2\n/tmp/d/a.b: t3\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "result: 5 mounts, 3 writable, 0 unjustified"
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--format", "json")
    assert [m["mount_point"] for m in json.loads(r.stdout)["writable"]] == [
        "/tmp", "/tmp/d/a", "/tmp/d/a.b"]


def test_live_a_mount_under_one_on_a_folder_above_it(sluice_bin, tmp_path):
    # The same, made by the kernel in a mount namespace of the test's own.
    d = tmp_path / "d"
    (d / "a" / "b").mkdir(parents=True)
    script = ('mount -t tmpfs t1 "$1/a/b" && mount -t tmpfs t2 "$1/a" || exit 99; '
              'exec "$2" audit mounts --format json')
    try:
        r = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script,
                            "sh", str(d), sluice_bin], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("no unshare(1)")
    if r.returncode == 99 or "unshare" in r.stderr:
        pytest.skip("no mount namespace of our own here: %s" % r.stderr.strip())
    assert r.returncode in (0, 1), r.stderr
    assert "Sanitizer" not in r.stderr, r.stderr
    mps = [m["mount_point"] for m in json.loads(r.stdout)["writable"]]
    assert str(d / "a") in mps
    assert str(d / "a" / "b") not in mps, mps


def test_nothing_writable(run_sluice, tmp_path):
    mi = write(tmp_path, "mountinfo", "22 1 254:1 / / ro - ext4 /dev/vda1 rw\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--format", "json")
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["writable"] == []


def test_bad_justify_lines_reported(run_sluice, tmp_path):
    mi = write(tmp_path, "mountinfo", MOUNTINFO)
    just = write(tmp_path, "justify", "/tmp: fine\nrelative: no\n/proc\n/tmp: twice\n/x:\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just)
    assert r.returncode == 2
    errs = r.stderr.splitlines()
    assert [e.split(": ")[1] for e in errs] == ["%s:2" % just, "%s:3" % just, "%s:4" % just,
                                                "%s:5" % just]
    assert all(e.startswith("error: ") for e in errs)
    assert r.stdout == ""


def test_the_limits_are_named(run_sluice, tmp_path):
    # A file or line past a limit was refused as "File too large" or "line
    # too long", and a 10001st justification as "too many entries", none
    # saying what the limit is; past 100 bad lines the rest of the file was
    # not read, without a word: the report looked complete.
    mi = write(tmp_path, "mountinfo", MOUNTINFO)
    big = write(tmp_path, "big", "#" * (4 * 1024 * 1024 + 1))
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", big)
    assert r.returncode == 2
    assert r.stderr == "sluice audit: %s: larger than 4194304 bytes\n" % big
    bigmi = write(tmp_path, "bigmi", MOUNTINFO * (16 * 1024 * 1024 // len(MOUNTINFO) + 1))
    r = run_sluice("audit", "mounts", "--mountinfo", bigmi)
    assert r.returncode == 2
    assert r.stderr == "sluice audit: %s: larger than 16777216 bytes\n" % bigmi
    just = write(tmp_path, "long", "/tmp: " + "x" * 8192 + "\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just)
    assert r.returncode == 2
    assert r.stderr == "error: %s:1: line longer than 8192 bytes\n" % just
    just = write(tmp_path, "many", "".join("/m/%d: r\n" % i for i in range(10001)))
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just)
    assert r.returncode == 2
    assert r.stderr == "error: %s:10001: more than 10000 justifications\n" % just
    just = write(tmp_path, "bad", "relative: no\n" * 150)
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just)
    assert r.returncode == 2
    errs = r.stderr.splitlines()
    assert len(errs) == 101, errs[-3:]
    assert errs[99].startswith("error: %s:100: expected" % just)
    assert errs[100] == ("error: %s:101: not read, nor any line after it: the file has more "
                         "than 100 bad lines" % just)
    # exactly 100 bad lines, the last the file's: no such note
    just = write(tmp_path, "bad100", "relative: no\n" * 100)
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 100


def test_bad_justify_lines_name_the_file_escaped(run_sluice, tmp_path):
    # The error lines on standard error named the justification file raw
    # while the warnings escaped it: a name holding a line end wrote an
    # error line of its own, and an escape byte reached the terminal.
    mi = write(tmp_path, "mountinfo", MOUNTINFO)
    just = write(tmp_path, "j\nerror: forged\x1b[2K", "relative: no\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just)
    assert r.returncode == 2
    shown = str(tmp_path) + "/j\\012error: forged\\033[2K"
    errs = r.stderr.splitlines()
    assert len(errs) == 1 and errs[0].startswith("error: %s:1: " % shown), errs
    assert "\x1b" not in r.stderr
    # and so is the --mountinfo file's name in its errors
    r = run_sluice("audit", "mounts", "--mountinfo", str(tmp_path / "m\nerror: x\x1b[2K"))
    assert r.returncode == 2
    assert r.stderr.startswith("sluice audit: %s/m\\012error: x\\033[2K: " % tmp_path), r.stderr
    assert "\x1b" not in r.stderr and len(r.stderr.splitlines()) == 1


def test_malformed_mountinfo_exit_2(run_sluice, tmp_path):
    mi = write(tmp_path, "mountinfo", MOUNTINFO + "30 22 0:1 / relative rw - tmpfs t rw\n")
    r = run_sluice("audit", "mounts", "--mountinfo", mi)
    assert r.returncode == 2
    assert "%s: line 9: mount_point: not an absolute path" % mi in r.stderr


def test_an_empty_mountinfo_is_no_clean_audit(run_sluice, tmp_path):
    # A mount namespace holds at least its root mount, but an empty file
    # (a copy whose `cat /proc/PID/mountinfo > saved` failed, /dev/null)
    # passed the audit: "result: 0 mounts, 0 writable, 0 unjustified", exit
    # 0, a CI gate passed on nothing read.
    mi = write(tmp_path, "mountinfo", "")
    just = write(tmp_path, "justify", "/tmp: scratch\n")
    for extra in ([], ["--justify", just], ["--format", "json"]):
        r = run_sluice("audit", "mounts", "--mountinfo", mi, *extra)
        assert r.returncode == 2, (extra, r.stdout, r.stderr)
        assert r.stdout == ""
        assert r.stderr == ("sluice audit: %s: no mounts, where a mount namespace has at least "
                            "its root\n" % mi), r.stderr


def test_unreadable_files_exit_2(run_sluice, tmp_path):
    r = run_sluice("audit", "mounts", "--mountinfo", str(tmp_path / "missing"))
    assert r.returncode == 2
    assert "No such file" in r.stderr
    mi = write(tmp_path, "mountinfo", MOUNTINFO)
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", str(tmp_path / "nope"))
    assert r.returncode == 2
    assert "nope" in r.stderr


def test_a_fifo_no_one_writes_to_is_waited_for_a_bounded_time(run_sluice, tmp_path):
    # `--justify FIFO` whose writer never came (a `mkfifo` whose producer
    # failed) held audit in open() for ever: it gives up after 10 s
    # without a byte, exit 2, as serve gives up on a policy FIFO.
    mi = write(tmp_path, "mountinfo", MOUNTINFO)
    fifo = str(tmp_path / "justify")
    os.mkfifo(fifo)
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", fifo, timeout=40)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ""
    assert r.stderr == ("sluice audit: %s: nothing came to read for 10 s (a FIFO no one "
                        "writes to, or a terminal no one types into?)\n" % fifo), r.stderr


def test_fifos_with_a_writer_are_read(run_sluice, tmp_path):
    # `--mountinfo <(ssh host cat /proc/1/mountinfo)`: read as it comes
    mi, just = str(tmp_path / "mi"), str(tmp_path / "just")
    os.mkfifo(mi)
    os.mkfifo(just)

    def feed(path, text):
        with open(path, "w") as f:  # waits for audit to open it
            f.write(text)

    writers = [threading.Thread(target=feed, args=(mi, MOUNTINFO)),
               threading.Thread(target=feed, args=(just, "/tmp: scratch\n"))]
    for w in writers:
        w.start()
    r = run_sluice("audit", "mounts", "--mountinfo", mi, "--justify", just, timeout=40)
    for w in writers:
        w.join(timeout=40)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "justified    /tmp (tmpfs tmpfs): scratch" in r.stdout, r.stdout
    assert r.stdout.splitlines()[-1] == "result: 8 mounts, 4 writable, 3 unjustified"


def test_long_mountinfo_path_is_not_cut_to_another_file(run_sluice, tmp_path):
    # --mountinfo was copied into a 4096-byte buffer: a longer path was cut
    # there and, when the cut named a file, that file was audited instead.
    real = write(tmp_path, "mountinfo", MOUNTINFO)
    given = "/" * (4095 - len(real)) + real + "-of-yesterday"
    r = run_sluice("audit", "mounts", "--mountinfo", given)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ""
    assert "File name too long" in r.stderr, r.stderr


def _state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_pid_that_has_exited_is_named_so(run_sluice):
    # A process that has exited and is not yet reaped (a zombie) has no
    # mount namespace: the kernel refuses its mountinfo with EINVAL, which
    # was told as "/proc/PID/mountinfo: Invalid argument", naming neither
    # the option nor the reason.
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        poll(lambda: _state(pid) == "Z", timeout=10, what="a zombie")
        r = run_sluice("audit", "mounts", "--pid", str(pid))
        assert r.returncode == 2
        assert r.stderr.splitlines()[0] == (
            "sluice audit: --pid: '%d' has exited (a zombie, or a process exiting): it has no "
            "mount namespace to audit" % pid), r.stderr
    finally:
        os.waitpid(pid, 0)


def test_live_self_and_pid(run_sluice, tmp_path):
    r = run_sluice("audit", "mounts", "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert doc["mountinfo"] == "/proc/self/mountinfo"
    assert doc["mounts"] >= 1
    r = run_sluice("audit", "mounts", "--pid", str(os.getpid()), "--format", "json")
    assert r.returncode in (0, 1)
    assert json.loads(r.stdout)["mountinfo"] == "/proc/%d/mountinfo" % os.getpid()


def test_a_pid_with_leading_zeros_is_that_process(run_sluice):
    # /proc names a process in plain decimal: `--pid 0001` read
    # /proc/0001/mountinfo and failed with No such file, though process 1
    # exists. The number is read as the number it is.
    pid = os.getpid()
    for given in ("0%d" % pid, "000%d" % pid, "0" * (11 - len(str(pid))) + str(pid)):
        r = run_sluice("audit", "mounts", "--pid", given, "--format", "json")
        assert r.returncode in (0, 1), (given, r.stderr)
        assert json.loads(r.stdout)["mountinfo"] == "/proc/%d/mountinfo" % pid


def test_a_flag_given_twice_is_a_usage_error(run_sluice, tmp_path):
    # Each flag took the last of its values without a word: `--pid A --pid
    # B` audited B alone and exited 0 whatever A's mounts, and `--justify
    # base --justify extra` dropped base's lines, as calc, which refuses a
    # repeated flag, does not.
    mi = write(tmp_path, "mountinfo", MOUNTINFO)
    just = write(tmp_path, "justify", "/tmp: scratch\n")
    for args, flag in ((["--pid", "self", "--pid", str(os.getpid())], "--pid"),
                       (["--mountinfo", mi, "--mountinfo=" + mi], "--mountinfo"),
                       (["--mountinfo", mi, "--justify", just, "--just", just], "--justify"),
                       (["--mountinfo", mi, "--format", "json", "--format", "json"], "--format")):
        r = run_sluice("audit", "mounts", *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stdout == ""
        assert r.stderr.splitlines()[0] == "sluice audit: %s given twice" % flag, r.stderr
        assert r.stderr.splitlines()[1].startswith("usage: sluice audit mounts")


def test_usage_errors(run_sluice, tmp_path):
    for args in (["audit"], ["audit", "policy"], ["audit", "--policy", "x"],
                 ["audit", "mounts", "--pid", "1", "--mountinfo", "x"],
                 ["audit", "mounts", "--pid", "abc"], ["audit", "mounts", "--format", "xml"],
                 ["audit", "mounts", "extra"], ["audit", "mounts", "--bogus"]):
        r = run_sluice(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "usage: sluice audit" in r.stderr
    r = run_sluice("audit", "mounts", "--help")
    assert r.returncode == 0 and "--justify" in r.stdout


def test_arguments_in_usage_errors_are_escaped(run_sluice):
    # An argument as given (`sluice audit mounts *` in a folder an agent
    # wrote, say) may hold a line end or a terminal escape: named in a
    # usage error it is shown \ooo, as an unknown option is, so that it
    # cannot write a line of its own into standard error.
    forged = "x\nsluice audit: forged\x1b[2K\\"
    shown = "x\\012sluice audit: forged\\033[2K\\134"
    for args, said in ((["mounts", forged], "unexpected argument '" + shown + "'"),
                       (["mounts", "--pid", forged], "--pid: '" + shown + "' is not a process id"),
                       (["mounts", "--format", forged], "--format: '" + shown + "' is not text"),
                       ([forged], "unknown audit '" + shown + "'")):
        r = run_sluice("audit", *args)
        assert r.returncode == 2 and r.stdout == "", (args, r.stderr)
        lines = r.stderr.splitlines()
        assert lines[0].startswith("sluice audit: " + said), (args, r.stderr)
        assert lines[1].startswith("usage: sluice audit"), (args, r.stderr)
        assert "\x1b" not in r.stderr, (args, r.stderr)
