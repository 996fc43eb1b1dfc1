"""`sluice run`: a git repository's own directory in the box. The user's next
`git` runs what `.git/hooks` and `.git/config` say (a pre-commit hook,
core.fsmonitor, core.pager, a filter driver) outside the box, with the
user's network and credentials: the box keeps them read-only and makes
`.git` a mount point, which cannot be renamed or removed, while git's own
work (objects, index, refs, logs) stays writable.

Each project is a real repository made with the installed git, outside /tmp
(the box has its own /tmp). No network is used: the policy allows nothing,
and the submodule is cloned from a local path."""

import json
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import SANITIZER_MARKS
from test_box_attack import PRELUDE  # out, py(): a call's errno name

PY = "/usr/bin/python3"
HOOK = "#!/bin/sh\n# the user's own hook\nexit 0\n"


def _git_env(home):
    e = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    e.update({"HOME": home, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t",
              "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
              "GIT_COMMITTER_EMAIL": "t@example.invalid"})
    return e


def _git(env, cwd, *args):
    p = subprocess.run(["git"] + list(args), cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, (args, p.stderr)
    return p.stdout


class World:
    """A base folder outside /tmp holding the policy, a HOME and repositories."""

    def __init__(self, sluice_bin, base):
        self.bin = sluice_bin
        self.base = base
        self.home = os.path.join(base, "home")
        os.makedirs(self.home)
        self.env = _git_env(self.home)
        self.policy = os.path.join(base, "policy.yaml")
        with open(self.policy, "w") as f:
            f.write("version: 1\nrules: []\n")

    def repo(self, name):
        d = os.path.join(self.base, name)
        os.makedirs(d)
        _git(self.env, d, "init", "-q", "-b", "main")
        with open(os.path.join(d, "a.txt"), "w") as f:
            f.write("a\n")
        with open(os.path.join(d, ".git", "hooks", "pre-commit"), "w") as f:
            f.write(HOOK)
        os.chmod(os.path.join(d, ".git", "hooks", "pre-commit"), 0o755)
        _git(self.env, d, "add", "a.txt")
        _git(self.env, d, "commit", "-q", "-m", "first")
        return d

    def run(self, args, script, cwd):
        argv = [self.bin, "run", "--policy", self.policy] + list(args) + ["--", "sh", "-c",
                                                                            script]
        p = subprocess.run(argv, cwd=cwd, env=self.env, capture_output=True, text=True,
                           timeout=120)
        for mark in SANITIZER_MARKS:
            assert mark not in p.stderr, p.stderr
        return p


@pytest.fixture
def world(sluice_bin):
    base = "/var/tmp" if os.path.isdir("/var/tmp") else os.path.expanduser("~")
    d = tempfile.mkdtemp(prefix="sluice-git-", dir=base)
    os.chmod(d, 0o755)
    yield World(sluice_bin, d)
    shutil.rmtree(d, ignore_errors=True)


# In the box: each probe's result, "ok" or the errno name, as JSON on stdout.
PROBE = PRELUDE + r"""
import subprocess
def write(path, text="#!/bin/sh\necho escaped\n"):
    with open(path, "w") as f:
        f.write(text)
def git(name, *args):
    p = subprocess.run(["git", "-C", sys.argv[2]] + list(args), capture_output=True, text=True)
    out[name] = p.returncode
    out[name + "_err"] = p.stderr
g = sys.argv[1]
py("hook", lambda: write(g + "/hooks/pre-commit"))
py("new_hook", lambda: write(g + "/hooks/post-checkout"))
py("config", lambda: write(g + "/config", "[core]\n\tfsmonitor = /bin/false\n"))
git("hooks_path", "config", "core.hooksPath", "x")
git("fsmonitor", "config", "--local", "core.fsmonitor", "/bin/false")
py("mv_hooks", lambda: os.rename(g + "/hooks", g + "/hooks.old"))
py("mv_git", lambda: os.rename(g, g + "2"))
py("rmdir_git", lambda: os.rmdir(g))
out["rm_rf"] = subprocess.run(["rm", "-rf", g], capture_output=True).returncode
print(json.dumps(out))
"""


def _probe(world, args, cwd, gitdir, work="."):
    """The probe in the box, from <cwd>, on <gitdir>, git run in <work>."""
    p = world.run(args, "exec %s -c '%s' %s %s" % (PY, PROBE.replace("'", "'\\''"), gitdir, work),
                  cwd)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert lines, (p.stdout, p.stderr)
    return json.loads(lines[-1]), p


def _assert_kept(o, gitdir):
    """The probe's writes failed, and the git directory is as it was."""
    assert o["hook"] == "EROFS" and o["new_hook"] == "EROFS" and o["config"] == "EROFS", o
    assert o["hooks_path"] != 0 and o["fsmonitor"] != 0, o
    # git writes config.lock and renames it over config, a mount point
    assert "could not write config file" in o["hooks_path_err"], o
    assert "Device or resource busy" in o["hooks_path_err"], o
    assert o["mv_hooks"] == "EBUSY" and o["mv_git"] == "EBUSY", o
    assert o["rmdir_git"] == "EBUSY" and o["rm_rf"] != 0, o
    with open(os.path.join(gitdir, "hooks", "pre-commit")) as f:
        assert f.read() == HOOK
    assert not os.path.exists(os.path.join(gitdir, "hooks", "post-checkout"))
    assert not os.path.exists(gitdir + "2")
    assert not os.path.exists(os.path.join(gitdir, "config.lock"))  # git removed its lock
    with open(os.path.join(gitdir, "config")) as f:
        text = f.read()
    assert "fsmonitor" not in text and "hooksPath" not in text and "hookspath" not in text


def test_the_working_directory_repositorys_hooks_and_config_are_read_only(world):
    repo = world.repo("proj")
    o, p = _probe(world, [], repo, ".git")
    _assert_kept(o, os.path.join(repo, ".git"))
    assert ".git" not in p.stderr, p.stderr  # a quiet default


def test_a_rw_paths_repository_and_one_above_the_working_directory_are_kept(world):
    """A --rw path that holds .git, and a working directory below a --rw
    repository (its parent folders inside a writable path are looked at)."""
    repo = world.repo("other")
    work = world.repo("work")
    o, _ = _probe(world, ["--rw", repo], work, os.path.join(repo, ".git"), repo)
    _assert_kept(o, os.path.join(repo, ".git"))
    repo = world.repo("above")  # the probe's rm -rf emptied the first's
    sub = os.path.join(repo, "src")
    os.makedirs(sub)
    o, _ = _probe(world, ["--rw", repo], sub, os.path.join(repo, ".git"), repo)
    _assert_kept(o, os.path.join(repo, ".git"))


def test_a_missing_hooks_folder_cannot_be_made(world):
    """Without .git/hooks (a clone with an empty template), run makes it, an
    empty folder as `git init` makes, and keeps it read-only."""
    repo = world.repo("proj")
    shutil.rmtree(os.path.join(repo, ".git", "hooks"))
    p = world.run([], "mkdir -p .git/hooks; echo evil > .git/hooks/pre-commit", repo)
    assert p.returncode != 0, p.stderr
    assert os.listdir(os.path.join(repo, ".git", "hooks")) == []


def test_git_works_in_the_box(world):
    repo = world.repo("proj")
    script = ("set -e; echo b > b.txt; git add b.txt; git commit -q --no-verify -m second; "
              "git checkout -q -b topic; echo c >> a.txt; git stash -q; git log --oneline; "
              "git stash pop -q; git commit -q -am third --no-verify; git gc -q --auto")
    p = world.run([], script, repo)
    assert p.returncode == 0, p.stderr
    assert "second" in p.stdout
    log = _git(world.env, repo, "log", "--format=%s", "topic")
    assert log.split() == ["third", "second", "first"]
    assert _git(world.env, repo, "branch", "--show-current").strip() == "topic"


def test_naming_the_hooks_folder_hands_it_to_the_agent(world):
    repo = world.repo("proj")
    p = world.run(["--rw", ".git/hooks"], "echo mine > .git/hooks/pre-push && "
                  "! git config core.hooksPath x", repo)
    assert p.returncode == 0, p.stderr
    with open(os.path.join(repo, ".git", "hooks", "pre-push")) as f:
        assert f.read() == "mine\n"
    # a --rw file is a mount point too: written in place, not replaced
    p = world.run(["--rw", ".git/config"], "printf '[x]\\n\\ty = 1\\n' >> .git/config", repo)
    assert p.returncode == 0, p.stderr
    assert "[x]\n\ty = 1\n" in open(os.path.join(repo, ".git", "config")).read()


def test_submodules_git_dirs_are_kept(world):
    lib = world.repo("lib")
    sup = world.repo("sup")
    _git(world.env, sup, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "lib")
    _git(world.env, sup, "commit", "-q", "-m", "sub")
    mod = os.path.join(sup, ".git", "modules", "lib")
    with open(os.path.join(mod, "hooks", "pre-commit"), "w") as f:
        f.write(HOOK)
    # a commit in the submodule works
    p = world.run([], "cd lib && echo x > x && git add x && git commit -q -m x", sup)
    assert p.returncode == 0, p.stderr
    p = world.run([], "mv .git/modules .git/m2 || mv .git/modules/lib .git/modules/l2 || "
                  "exit 0; exit 1", sup)
    assert p.returncode == 0, p.stderr
    assert os.path.isdir(mod)
    o, _ = _probe(world, [], sup, mod, "lib")
    _assert_kept(o, mod)


def test_naming_the_git_folder_itself(world):
    """--rw .git keeps its hooks and config; --ro .git keeps it all."""
    repo = world.repo("proj")
    p = world.run(["--rw", ".git"], "echo x > .git/hooks/pre-push", repo)
    assert p.returncode != 0 and "Read-only file system" in p.stderr, p.stderr
    p = world.run(["--ro", ".git"], "git commit -q --allow-empty -m y", repo)
    assert p.returncode != 0, p.stderr
    assert not os.path.exists(os.path.join(repo, ".git", "hooks", "pre-push"))


def test_linked_worktrees_config_is_kept(world):
    """With extensions.worktreeConfig each worktree's config.worktree is
    read as config: kept, the main one made when missing, and the
    worktree's folder a mount point."""
    repo = world.repo("proj")
    _git(world.env, repo, "worktree", "add", "-q", os.path.join(world.base, "wt"))
    _git(world.env, repo, "config", "extensions.worktreeConfig", "true")
    wt = os.path.join(repo, ".git", "worktrees", "wt")
    script = ("for f in .git/config.worktree .git/worktrees/wt/config.worktree; do "
              "echo '[core] fsmonitor = x' >> $f && exit 1; done; "
              "mv .git/worktrees/wt .git/worktrees/w2 && exit 1; "
              "mv .git/worktrees .git/w2 && exit 1; exit 0")
    p = world.run([], script, repo)
    assert p.returncode == 0, p.stderr
    assert os.path.isdir(wt)
    for f in (os.path.join(repo, ".git", "config.worktree"), os.path.join(wt, "config.worktree")):
        with open(f) as fh:
            assert fh.read() == ""


def test_a_hard_link_to_the_config_stops_the_run(world):
    """Another name of .git/config in the project (made while it was not
    kept) would write it: the run does not start."""
    repo = world.repo("proj")
    os.link(os.path.join(repo, ".git", "config"), os.path.join(repo, "notes.txt"))
    p = world.run([], "echo ran", repo)
    assert p.returncode == 2 and "ran" not in p.stdout, p.stderr
    assert "the git config %s/.git/config has 2 names" % repo in p.stderr, p.stderr


# --- core.hooksPath: a hooks folder the config names ---------------------------

# In the box: each write's or rename's result, "ok" or the errno name.
WRITES = PRELUDE + r"""
def write(path):
    with open(path, "w") as f:
        f.write("#!/bin/sh\necho escaped\n")
for i, p in enumerate(sys.argv[1:]):
    if p.startswith("mv:"):
        py("%d" % i, lambda: os.rename(p[3:], p[3:] + ".old"))
    else:
        py("%d" % i, lambda: write(p))
print(json.dumps(out))
"""


def _writes(world, args, cwd, *paths):
    p = world.run(args, "exec %s -c '%s' %s" % (PY, WRITES.replace("'", "'\\''"),
                                                 " ".join(paths)), cwd)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert lines, (p.stdout, p.stderr)
    o = json.loads(lines[-1])
    return [o[str(i)] for i in range(len(paths))]


def _husky(world, name, hooks_path):
    repo = world.repo(name)
    os.makedirs(os.path.join(repo, hooks_path))
    with open(os.path.join(repo, ".husky", "pre-commit"), "w") as f:
        f.write(HOOK)
    _git(world.env, repo, "config", "core.hooksPath", hooks_path)
    return repo


def test_a_hooks_path_folder_in_the_project_is_kept(world):
    """husky before 9: core.hooksPath .husky, tracked hooks git runs."""
    repo = _husky(world, "proj", ".husky")
    got = _writes(world, [], repo, ".husky/pre-commit", ".husky/post-checkout", "mv:.husky")
    assert got == ["EROFS", "EROFS", "EBUSY"], got
    with open(os.path.join(repo, ".husky", "pre-commit")) as f:
        assert f.read() == HOOK
    assert sorted(os.listdir(os.path.join(repo, ".husky"))) == ["pre-commit"]


def test_husky_9s_hooks_and_the_scripts_they_run_are_kept(world):
    """husky 9: core.hooksPath .husky/_, whose stubs run .husky/HOOK."""
    repo = _husky(world, "proj", ".husky/_")
    got = _writes(world, [], repo, ".husky/_/pre-commit", ".husky/pre-commit", "mv:.husky",
                  "mv:.husky/_", "src.txt")
    assert got == ["EROFS", "EROFS", "EBUSY", "EROFS", "ok"], got


def test_a_hooks_path_below_a_folder_and_a_missing_one(world):
    """tools/hooks: tools cannot be renamed away; a missing folder is made."""
    repo = world.repo("proj")
    _git(world.env, repo, "config", "core.hooksPath", "tools/git-hooks")
    got = _writes(world, [], repo, "tools/git-hooks/pre-commit", "mv:tools", "tools/x")
    assert got == ["EROFS", "EBUSY", "ok"], got
    assert os.listdir(os.path.join(repo, "tools", "git-hooks")) == []


def test_the_users_global_hooks_path(world):
    """~/.gitconfig's core.hooksPath, ~ expanded, in a writable home; the
    syntax read as git reads it: header and key on one line, any case,
    quotes, a comment."""
    repo = world.repo("proj")
    with open(os.path.join(world.home, ".gitconfig"), "w") as f:
        f.write('[user]\n\tname = x\n[Core] HooksPath = "~/my hooks" ; husky\n')
    os.makedirs(os.path.join(world.home, "my hooks"))
    got = _writes(world, ["--rw", world.home], repo, "'%s/my hooks/pre-commit'" % world.home,
                  "%s/x" % world.home)
    assert got == ["EROFS", "ok"], got
    # and with no repository in the box at all
    got = _writes(world, [], world.home, "'%s/my hooks/pre-commit'" % world.home)
    assert got == ["EROFS"], got


def test_naming_the_hooks_path_folder_hands_it_to_the_agent(world):
    repo = _husky(world, "proj", ".husky")
    got = _writes(world, ["--rw", ".husky"], repo, ".husky/pre-commit")
    assert got == ["ok"], got


def test_a_hooks_path_that_is_a_link_in_the_project_stops_the_run(world):
    repo = world.repo("proj")
    os.makedirs(os.path.join(world.base, "shared-hooks"))
    os.symlink(os.path.join(world.base, "shared-hooks"), os.path.join(repo, "hooks"))
    _git(world.env, repo, "config", "core.hooksPath", "hooks")
    p = world.run([], "echo ran", repo)
    assert p.returncode == 2 and "ran" not in p.stdout, p.stderr
    assert "%s/hooks" % repo in p.stderr and "symbolic link" in p.stderr, p.stderr


# --- a .git file: the git directory it names -----------------------------------

def test_a_git_files_git_directory_in_the_project_is_kept(world):
    """git init --separate-git-dir: .git is a file, gitdir: PATH."""
    d = os.path.join(world.base, "proj")
    os.makedirs(d)
    _git(world.env, d, "init", "-q", "--separate-git-dir", os.path.join(d, ".repo"))
    # a relative gitdir as a submodule's checkout writes it
    with open(os.path.join(d, ".git"), "w") as f:
        f.write("gitdir: .repo\n")
    got = _writes(world, [], d, ".repo/hooks/pre-commit", ".repo/config", "mv:.repo", ".git",
                  "mv:.git", "a.txt")
    assert got == ["EROFS", "EROFS", "EBUSY", "EROFS", "EBUSY", "ok"], got
    with open(os.path.join(d, ".git")) as f:
        assert f.read() == "gitdir: .repo\n"


def test_a_global_config_of_dev_null_reads_empty(world):
    """GIT_CONFIG_GLOBAL=/dev/null, as CI sets it: no config, the run starts."""
    repo = _husky(world, "proj", ".husky")
    world.env["GIT_CONFIG_GLOBAL"] = "/dev/null"
    got = _writes(world, [], repo, ".husky/pre-commit", "a.txt")
    assert got == ["EROFS", "ok"], got


# --- the user's global config in a writable HOME ---------------------------------

def test_the_users_global_config_files_in_a_writable_home_are_kept(world):
    """`sluice run` from ~: a missing ~/.gitconfig is made, empty, and kept;
    ~/.config/git/config and the file GIT_CONFIG_GLOBAL names are read-only
    and cannot be renamed away."""
    home = world.home
    got = _writes(world, [], home, ".gitconfig", "mv:.gitconfig", "x")
    assert got == ["EROFS", "EBUSY", "ok"], got
    assert os.path.getsize(os.path.join(home, ".gitconfig")) == 0
    os.makedirs(os.path.join(home, ".config", "git"))
    for name in (".config/git/config", "global.cfg"):
        with open(os.path.join(home, name), "w") as f:
            f.write("[user]\n\tname = x\n")
    world.env["GIT_CONFIG_GLOBAL"] = os.path.join(home, "global.cfg")
    got = _writes(world, [], home, ".gitconfig", ".config/git/config", "global.cfg",
                  "mv:.config/git/config", "mv:global.cfg", "x")
    assert got == ["EROFS", "EROFS", "EROFS", "EBUSY", "EBUSY", "ok"], got
    assert os.path.getsize(os.path.join(home, ".gitconfig")) == 0
    for name in (".config/git/config", "global.cfg"):
        with open(os.path.join(home, name)) as f:
            assert f.read() == "[user]\n\tname = x\n"


# --- a repository between a writable path and the working directory ------------

def test_a_repository_folder_above_the_working_directory_cannot_be_renamed(world):
    """--rw of the folder above the project, run from proj/src: proj (whose
    .git is kept) cannot be renamed away and replaced by a new repository."""
    repo = world.repo("proj")
    sub = os.path.join(repo, "src")
    os.makedirs(sub)
    got = _writes(world, ["--rw", world.base], sub, "mv:%s" % repo, "%s/b.txt" % repo)
    assert got == ["EBUSY", "ok"], got
    assert os.path.isdir(os.path.join(repo, ".git", "hooks"))
