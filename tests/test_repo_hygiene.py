"""Repository hygiene that a new user trips over on the first day.

Every script under tools/ or .ci/ with a '#!' line must be committed with
its executable bit (the README runs `tools/demo.sh` and `tools/test.sh`
verbatim), and the README's set-up commands must not need `sudo` (a fresh
Debian image logged in as root has none).
"""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git_files(*paths):
    if shutil.which("git") is None or not os.path.exists(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout (a source tarball has no index to check)")
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-s", "--", *paths],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        meta, path = line.split("\t", 1)
        yield meta.split()[0], path


def test_scripts_are_committed_executable():
    missing = []
    for mode, path in _git_files("tools", ".ci"):
        full = os.path.join(ROOT, path)
        if not os.path.isfile(full):
            continue
        with open(full, "rb") as f:
            if f.read(2) != b"#!":
                continue
        if mode != "100755":
            missing.append(path)
    assert not missing, ("scripts with a #! line committed without the executable "
                         "bit (git update-index --chmod=+x): %s" % missing)


def test_readme_setup_commands_run_verbatim_without_sudo():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    m = re.search(r"^## Set up\n.*?```sh\n(.*?)```", text, re.S | re.M)
    assert m, "README.md has no '## Set up' section with a sh block"
    cmds = [l.split("#")[0].strip() for l in m.group(1).splitlines()]
    cmds = [c for c in cmds if c]
    assert cmds == ["tools/demo.sh", "tools/test.sh"], cmds
    for c in cmds:
        mode = dict((p, m_) for m_, p in _git_files(c)).get(c)
        assert mode == "100755", "%s is not committed executable" % c
