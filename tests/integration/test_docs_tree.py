"""The source tree against what the docs say of it, mechanically: every
src/ header opens with the comment that names its module and says what it
is for (shared/STYLE.md), every folder of src/ is in README's
Architecture, every path that section names exists, and every test-only
SLUICE_TEST_* switch the source reads is named in README's Development
section and in docs/SPEC.md. No binary is run."""

import os
import re

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def text(*path):
    with open(os.path.join(REPO, *path), encoding="utf-8") as f:
        return f.read()


def sources(ext):
    """Paths under src/ (relative to it) ending in <ext>."""
    out = []
    for top, _, files in os.walk(os.path.join(REPO, "src")):
        out += [os.path.relpath(os.path.join(top, f), os.path.join(REPO, "src"))
                for f in files if f.endswith(ext)]
    assert out, ext
    return sorted(out)


def readme_section(heading):
    readme = text("README.md")
    assert heading in readme, "README.md has no %r" % heading
    return readme.split(heading, 1)[1].split("\n## ", 1)[0]


def test_each_header_opens_with_its_module_comment():
    """`/* NAME: what it is ...` on the first line, NAME the file's own,
    and an include guard: a header that opened with `#pragma once` and
    its includes said nowhere what it was for."""
    wrong = []
    for rel in sources(".h"):
        name = os.path.basename(rel)[:-2]
        body = text("src", rel)
        if not re.match(r"/\* %s[: ]" % re.escape(name), body):
            wrong.append("%s: %r" % (rel, body.split("\n", 1)[0]))
        elif "#pragma once" in body or not re.search(r"^#ifndef SLUICE_\w+_H$", body, re.M):
            wrong.append("%s: no include guard SLUICE_..._H" % rel)
    assert not wrong, wrong


def test_architecture_names_every_folder_and_only_paths_that_exist():
    block = readme_section("## Architecture\n").split("```\n", 1)[1].split("\n```", 1)[0]
    folders = {d for d in os.listdir(os.path.join(REPO, "src"))
               if os.path.isdir(os.path.join(REPO, "src", d))}
    listed = set(re.findall(r"^src/([a-z_]+)/ ", block, re.M))
    assert len(folders) >= 8 and listed == folders, sorted(listed ^ folders)
    # every path it gives whole, and every file NAME.c or NAME.h of a folder's lines
    paths = re.findall(r"^((?:src|tests|fuzz|bench|examples|docs)/[\w./]*)", block, re.M)
    paths += re.findall(r"\((src/[\w/]+\.[ch])\)", block)
    assert len(paths) >= 15, paths
    missing = [p for p in paths if not os.path.exists(os.path.join(REPO, p))]
    files = set(os.path.basename(p) for p in sources(".c") + sources(".h"))
    for line in block.split("\n"):
        if line.startswith("src/") and "/" in line.split()[0][4:]:
            missing += [f for f in re.findall(r"\b([a-z_0-9]+\.[ch])\b", line)
                        if f not in files]
    assert not missing, missing


def test_every_test_only_switch_is_documented():
    """A SLUICE_TEST_* variable the binary reads changes what it does; each
    is named (as test-only, never for production) where users would meet
    it."""
    read = set()
    for rel in sources(".c"):
        read |= set(re.findall(r'"(SLUICE_TEST_[A-Z0-9_]+)"', text("src", rel)))
    assert len(read) >= 8, sorted(read)
    development = readme_section("## Development\n")
    spec = text("docs", "SPEC.md")
    for name, doc in (("README.md Development", development), ("docs/SPEC.md", spec)):
        named = set(re.findall(r"\b(SLUICE_TEST_[A-Z0-9_]+)", doc))
        assert read <= named, (name, sorted(read - named))
