"""Repository hygiene that a new user trips over on the first day.

Every script under tools/ or .ci/ with a '#!' line must be committed with
its executable bit (the README runs `tools/demo.sh` and `tools/test.sh`
verbatim), and the README's set-up commands must not need `sudo` (a fresh
Debian image logged in as root has none).

The docs stay what a reader can use: the README a first page (<= 200
lines, linking the guide, the man page, the benchmarks, the license), the
benchmarks current figures (<= 450 lines), every relative link resolving.
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


# The documents a reader follows links through; the reference is the man
# page (docs/squeezefs.8), the guides docs/GUIDE.md.
DOCS = ["README.md", "CONTRIBUTING.md", "docs/GUIDE.md", "docs/BENCHMARKS.md",
        "docs/FORMAT.md", "docs/LOCKING.md"]


def _read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def _prose(text):
    """The text without fenced code blocks (their '|' and '[x](y)' are code)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _anchors(text):
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    for h in re.findall(r"^#{1,6} +(.*?) *#*$", _prose(text), re.M):
        a = re.sub(r"[^\w\- ]", "", h.strip().lower().replace("`", ""))
        out.add(a.replace(" ", "-"))
    return out


def test_relative_links_in_the_docs_resolve():
    bad = []
    for doc in DOCS:
        text = _prose(_read(doc))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            path, _, frag = target.partition("#")
            full = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), path)) \
                if path else os.path.join(ROOT, doc)
            if not os.path.exists(full):
                bad.append(f"{doc}: {target} (no such file)")
            elif frag and full.endswith(".md") and frag not in _anchors(_read(full)):
                bad.append(f"{doc}: {target} (no such heading)")
    assert not bad, bad


def test_readme_is_a_first_page():
    """At most 200 lines, no table cell longer than ~200 characters, a map
    to the reference, the guide, the benchmarks and the license."""
    text = _read("README.md")
    assert len(text.splitlines()) <= 200, len(text.splitlines())
    for target in ("docs/GUIDE.md", "docs/squeezefs.8", "docs/BENCHMARKS.md",
                   "CONTRIBUTING.md", "LICENSE"):
        assert f"]({target}" in text, f"README.md does not link {target}"
    assert re.search(r"^## License\n\nMIT\b", text, re.M), "README.md: no MIT license section"
    assert _read("LICENSE").startswith("MIT License")
    assert re.search(r"license\s*:\s*'MIT'", _read("meson.build"))


def test_user_doc_table_cells_are_short():
    """A table cell of the README, the guide or the benchmarks is a line of
    reading, not a manual (the lock table of LOCKING.md is a reference)."""
    long_cells = []
    for doc in ("README.md", "docs/GUIDE.md", "docs/BENCHMARKS.md"):
        for line in _prose(_read(doc)).splitlines():
            if line.startswith("|"):
                long_cells += [f"{doc}: {c.strip()[:60]}...: {len(c.strip())} chars"
                               for c in line.strip().strip("|").split(" | ")
                               if len(c.strip()) > 210]
    assert not long_cells, long_cells


def test_benchmarks_is_current_figures_not_a_notebook():
    text = _read("docs/BENCHMARKS.md")
    assert len(text.splitlines()) <= 450, len(text.splitlines())
    assert "## Reproduce" in text
    for peer in ("mergerfs", "btrfs", "raw"):
        assert peer in text, peer
